#!/bin/sh
# A scripted Claude Code agent for `cargo xtask refdiff` (README.md, "CLI agents").
#
# Each side's driver starts it as `claude` from a directory of its own, into which the
# driver writes the scenario's agent runs (run_N.ndjson, N from 0) before the scenario.
# The Nth start records its arguments (NUL-separated) and its stdin as call_N.args and
# call_N.stdin, then prints run_N.ndjson; past the script's end it prints an error result
# and exits 1, as the agent does when it refuses.
d=$(dirname "$0")
n=$(cat "$d/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$d/count"
printf '%s\0' "$@" > "$d/call_$n.args"
cat > "$d/call_$n.stdin"
if [ -f "$d/run_$n.ndjson" ]; then
    cat "$d/run_$n.ndjson"
else
    echo '{"type":"result","subtype":"error","is_error":true,"result":"no scripted run left"}'
    exit 1
fi
