"""A deliberately broken (or minimal) MCP server speaking newline-delimited
JSON-RPC by hand, for the failure cases an SDK server would never show.
Usage: raw_server.py MODE, MODE one of:
  exit       exits with status 7 before reading anything
  leak       prints its API_TOKEN on stderr and exits
  hang       reads initialize and never answers
  garbage    answers initialize with a line that is not JSON
  huge       answers tools/call with a 9 MiB line
  die        exits (status 9) when a tool is called
  paged      lists 5 tools over 3 pages
  group      starts a grandchild (sleep) in its process group, then serves
  flaky      its tool `change` announces a new tool list; the second
             tools/list fails, the third never answers, the fourth has `new`
  asker      its tool asks the person to open three addresses (one too long,
             one with a user name, one fine), sends a completion notice with
             a 100 KB id, then refuses the call (-32042) listing 10,000
             addresses, its message naming the client's three answers
"""

import json
import os
import subprocess
import sys
import time

mode = sys.argv[1]
if mode == "leak":
    sys.stderr.write("refusing token " + os.environ.get("API_TOKEN", "") + "\n")
    sys.exit(1)
if mode == "exit":
    sys.stderr.write("fatal: no configuration\n")
    sys.exit(7)
if mode == "group":
    child = subprocess.Popen(["sleep", "300"])
    with open(sys.argv[2], "w") as f:
        f.write(str(child.pid))


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def tool(name):
    return {"name": name, "description": name, "inputSchema": {"type": "object", "properties": {}}}


def ask(req_id, params):
    """Sends a question and reads lines until its answer: the action, or
    the error's code."""
    send({"jsonrpc": "2.0", "id": req_id, "method": "elicitation/create", "params": params})
    while True:
        reply = json.loads(sys.stdin.readline())
        if reply.get("id") == req_id:
            result = reply.get("result")
            return result["action"] if result else "error %s" % reply["error"]["code"]


def address(i, url):
    return {"mode": "url", "message": "m%d" % i, "url": url, "elicitationId": str(i)}


PAGES = {None: (["t1", "t2"], "p2"), "p2": (["t3", "t4"], "p3"), "p3": (["t5"], None)}
listings = 0

for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    mid = msg.get("id")
    if method == "initialize":
        if mode == "hang":
            time.sleep(3600)
        if mode == "garbage":
            sys.stdout.write("this is not json-rpc\n")
            sys.stdout.flush()
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {
            # The paged server only knows the first protocol version.
            "protocolVersion": "2024-11-05" if mode == "paged" else msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"}}})
    elif method == "tools/list":
        listings += 1
        cursor = (msg.get("params") or {}).get("cursor")
        if mode == "paged":
            names, nxt = PAGES[cursor]
        elif mode == "flaky":
            if listings == 2:
                send({"jsonrpc": "2.0", "id": mid,
                      "error": {"code": -32603, "message": "the list is being rebuilt"}})
                continue
            if listings == 3:
                continue
            names, nxt = (["change", "new"] if listings > 3 else ["change"]), None
        else:
            names, nxt = ["boom"], None
        result = {"tools": [tool(n) for n in names]}
        if nxt:
            result["nextCursor"] = nxt
        send({"jsonrpc": "2.0", "id": mid, "result": result})
    elif method == "tools/call":
        if mode == "huge":
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "x" * (9 * 1024 * 1024)}]}}) + "\n")
            sys.stdout.flush()
        elif mode == "die":
            os._exit(9)
        elif mode == "asker":
            seen = [
                ask("e1", address(1, "https://a.example/" + "x" * 10000)),
                ask("e2", address(2, "https://bank.example@evil.example/")),
                ask("e3", address(3, "https://ok.example/")),
            ]
            send({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                  "params": {"elicitationId": "i" * 100000}})
            listed = [address(i, "https://e%d.example/" % i) for i in range(10000)]
            send({"jsonrpc": "2.0", "id": mid, "error": {
                "code": -32042, "message": "seen: " + ",".join(seen),
                "data": {"elicitations": listed}}})
        elif mode == "flaky":
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "changed"}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": msg["params"]["name"]}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
