# The differential harness against Python lionagi 0.36.0 (tests/refdiff/README.md):
# every scenario must come out the same as the reference or fall under a
# documented departure (docs/compat.md); anything else fails CI. The venv
# with the reference is created under the target dir on first use (PyPI);
# the report's lines say how long each side took and count the outcomes.
# Then random conversations (tests/refdiff/randomized.py), seeded by the
# commit under test: each commit is checked on conversations the ones
# before it were not, and the same commit always on the same ones (the
# report names the command that makes them again).
# Sourced by .ci/run after the tests.
refdiff_log="$CI_TARGET/refdiff-report.txt"
if ! cargo xtask refdiff >"$refdiff_log" 2>&1; then
    cat "$refdiff_log"
    echo "refdiff: a difference from the reference is neither fixed nor documented" >&2
    exit 1
fi
grep '^refdiff: ' "$refdiff_log"

# The first eight hex digits of the commit, as a number; a tree without
# git history (an exported copy) uses a fixed seed.
refdiff_seed=$((16#$( (git rev-parse HEAD 2>/dev/null || echo 0) | cut -c1-8)))
refdiff_random_log="$CI_TARGET/refdiff-random-report.txt"
if ! cargo xtask refdiff --random "${LIONAGI_REFDIFF_RANDOM:-32}" --seed "$refdiff_seed" \
    >"$refdiff_random_log" 2>&1; then
    cat "$refdiff_random_log"
    echo "refdiff: a random conversation differs from the reference (see the seed above)" >&2
    exit 1
fi
grep '^refdiff: ' "$refdiff_random_log"
