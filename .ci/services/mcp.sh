# MCP servers for branch-mcp's tests (sourced by .ci/run).
# The tests start the servers themselves (as children, on ports they pick);
# this file only installs them and says where they are:
# - the Python `mcp` SDK in a venv (the tests' own small server is
#   crates/branch-mcp/tests/servers/py_server.py, run with this python);
# - the reference server @modelcontextprotocol/server-everything from npm.
mcp_venv="$CI_TARGET/mcp-venv"
python3 -m venv "$mcp_venv"
"$mcp_venv/bin/pip" install --quiet --disable-pip-version-check mcp==1.30.0
npm install --silent --no-audit --no-fund --prefix "$CI_TARGET/mcp-npm" \
    @modelcontextprotocol/server-everything@2026.8.31
export LIONAGI_MCP_PYTHON="$mcp_venv/bin/python"
export LIONAGI_MCP_EVERYTHING="$CI_TARGET/mcp-npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
LIONAGI_MCP_NODE="$(command -v node)"
export LIONAGI_MCP_NODE
export LIONAGI_MCP_REQUIRED=1
"$LIONAGI_MCP_PYTHON" -c 'import mcp' || { echo "error: the mcp package did not install" >&2; exit 1; }
[ -f "$LIONAGI_MCP_EVERYTHING" ] || { echo "error: server-everything did not install" >&2; exit 1; }
echo "MCP test servers installed (python $LIONAGI_MCP_PYTHON, everything $LIONAGI_MCP_EVERYTHING)"
