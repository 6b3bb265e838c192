# Python lionagi 0.36.0 for the round-trip test
# (crates/lionagi/tests/python_round_trip.rs). The venv is the one
# `cargo xtask refdiff` uses (xtask/src/refdiff.rs: $CARGO_TARGET_DIR/refdiff/venv,
# done when its marker file exists), so the later check reuses it.
ref_venv="$CI_TARGET/refdiff/venv"
if [ ! -f "$ref_venv/.lionagi==0.36.0" ]; then
    mkdir -p "$CI_TARGET/refdiff"
    python3 -m venv "$ref_venv"
    "$ref_venv/bin/python" -m pip install --quiet --disable-pip-version-check lionagi==0.36.0
    touch "$ref_venv/.lionagi==0.36.0"
fi
export LIONAGI_REF_PYTHON="$ref_venv/bin/python"
export LIONAGI_REF_REQUIRED=1
"$LIONAGI_REF_PYTHON" -c 'import lionagi' || { echo "error: lionagi 0.36.0 did not install" >&2; exit 1; }
echo "reference installed (python $LIONAGI_REF_PYTHON)"
