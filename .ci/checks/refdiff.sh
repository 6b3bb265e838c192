# The differential harness against Python lionagi 0.36.0 (tests/refdiff/README.md):
# every scenario must come out the same as the reference or fall under a
# documented departure (docs/compat.md); anything else fails CI. The venv
# with the reference is created under the target dir on first use (PyPI);
# the report's last line is the count of scenarios and of each outcome.
# Sourced by .ci/run after the tests.
refdiff_log="$CI_TARGET/refdiff-report.txt"
if ! cargo xtask refdiff >"$refdiff_log" 2>&1; then
    cat "$refdiff_log"
    echo "refdiff: a difference from the reference is neither fixed nor documented" >&2
    exit 1
fi
grep '^refdiff: ' "$refdiff_log" | tail -n 1
