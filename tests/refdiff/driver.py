"""The reference side of `cargo xtask refdiff`: runs every scenario of
tests/refdiff/scenarios/ in Python lionagi 0.36.0 against a scripted
OpenAI-compatible server on 127.0.0.1 and writes one JSON result per scenario.

Protocol with xtask (one process for its share of the scenarios, so the
import cost is paid once per process; xtask starts four):

    driver.py SCENARIO_DIR OUT_DIR [NAME...]
      -> runs every scenario, writes OUT_DIR/<name>.json, prints "READY"
      <- a line "CROSS OTHER_DIR": loads OTHER_DIR/<name>.json's to_dicts
         with Branch.from_dict, writes OUT_DIR/<name>.cross.json
      <- end of input: exits

The scenario format is described in tests/refdiff/README.md. The shared
pieces (tools, response formats) live in tests/refdiff/library.json so that
both drivers build the same ones.
"""

import asyncio
import copy
import json
import logging
import os
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

# --------------------------------------------------------------------------
# The scripted server: the same answers as branch-models' MockServer.
# --------------------------------------------------------------------------

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
# A request body above this is refused: scenario requests are small, and a
# runaway one should fail the scenario, not fill memory.
MAX_BODY = 8 * 1024 * 1024


# Past the script's end both servers answer 400 (not retried), so a
# scenario that runs out of replies fails fast on both sides.
EXHAUSTED = {"status": 400, "error": "mock: no scripted reply left"}


class Script:
    def __init__(self):
        self.lock = threading.Lock()
        self.queue = []
        self.bodies = []
        self.served = 0

    def reset(self, replies):
        with self.lock:
            self.queue = list(replies)
            self.bodies = []
            self.served = 0


SCRIPT = Script()


def content_of(reply):
    if "json" in reply:
        return json.dumps(reply["json"])
    return reply.get("text")


def tool_calls_of(reply):
    out = []
    for c in reply.get("tool_calls", []):
        args = c.get("arguments", {})
        if not isinstance(args, str):
            args = json.dumps(args)
        out.append({"id": c.get("id", ""), "type": "function",
                    "function": {"name": c.get("name", ""), "arguments": args}})
    return out


def completion(reply, n, request):
    message = {"role": "assistant", "content": content_of(reply), "refusal": None}
    finish = "stop"
    if "tool_calls" in reply:
        message["tool_calls"] = tool_calls_of(reply)
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-mock-{n}", "object": "chat.completion", "created": 1700000000,
        "model": request.get("model"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": USAGE, "system_fingerprint": None,
    }


def sse_events(reply, n, request):
    model = request.get("model")

    def chunk(delta, finish):
        return json.dumps({"id": f"chatcmpl-mock-{n}", "object": "chat.completion.chunk",
                           "created": 1700000000, "model": model, "system_fingerprint": None,
                           "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                        "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""}, None)]
    content = content_of(reply) or ""
    size = max(1, int(reply.get("chunk_size", 8)))
    for i in range(0, len(content), size):
        events.append(chunk({"content": content[i:i + size]}, None))
    finish = "stop"
    if "tool_calls" in reply:
        for i, tc in enumerate(tool_calls_of(reply)):
            tc = dict(tc)
            tc["index"] = i
            events.append(chunk({"tool_calls": [tc]}, None))
        finish = "tool_calls"
    events.append(chunk({}, finish))
    if (request.get("stream_options") or {}).get("include_usage") is True:
        events.append(json.dumps({"id": f"chatcmpl-mock-{n}", "object": "chat.completion.chunk",
                                  "created": 1700000000, "model": model,
                                  "system_fingerprint": None, "choices": [], "usage": USAGE}))
    events.append("[DONE]")
    return events


# Anthropic Messages (`…/messages`): the same script in that protocol's
# shapes, as branch_models::mock_anthropic answers it.
ANTHROPIC_USAGE = (11, 7)


def is_messages_path(path):
    return path.split("?", 1)[0].endswith("/messages")


def anthropic_input(call):
    args = call.get("arguments", {})
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


def anthropic_stop(reply):
    return "tool_use" if "tool_calls" in reply else "end_turn"


def anthropic_message(reply, n, request):
    content = []
    text = content_of(reply)
    if text is not None:
        content.append({"type": "text", "text": text})
    for c in reply.get("tool_calls", []):
        content.append({"type": "tool_use", "id": c.get("id", ""), "name": c.get("name", ""),
                        "input": anthropic_input(c)})
    return {"id": f"msg_mock_{n}", "type": "message", "role": "assistant",
            "model": request.get("model"), "content": content,
            "stop_reason": anthropic_stop(reply), "stop_sequence": None,
            "usage": {"input_tokens": ANTHROPIC_USAGE[0], "output_tokens": ANTHROPIC_USAGE[1]}}


def anthropic_events(reply, n, request):
    out = [("message_start", {"type": "message_start", "message": {
        "id": f"msg_mock_{n}", "type": "message", "role": "assistant",
        "model": request.get("model"), "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": ANTHROPIC_USAGE[0], "output_tokens": 1}}})]
    index = 0
    text = content_of(reply)
    if text is not None:
        out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": {"type": "text", "text": ""}}))
        size = max(1, int(reply.get("chunk_size", 8)))
        for i in range(0, len(text), size):
            out.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "text_delta",
                                                          "text": text[i:i + size]}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for c in reply.get("tool_calls", []):
        out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": {"type": "tool_use",
                                                              "id": c.get("id", ""),
                                                              "name": c.get("name", ""),
                                                              "input": {}}}))
        out.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "input_json_delta",
                                                      "partial_json": json.dumps(anthropic_input(c))}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    out.append(("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": anthropic_stop(reply),
                                            "stop_sequence": None},
                                  "usage": {"output_tokens": ANTHROPIC_USAGE[1]}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in out]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self.send_error(413)
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with SCRIPT.lock:
            SCRIPT.bodies.append(body)
            SCRIPT.served += 1
            n = SCRIPT.served
            reply = SCRIPT.queue.pop(0) if SCRIPT.queue else EXHAUSTED
        anthropic = is_messages_path(self.path)
        if "status" in reply and "error" in reply:
            if anthropic:
                data = json.dumps({"type": "error",
                                   "error": {"type": "mock", "message": reply["error"]}}).encode()
            else:
                data = json.dumps({"error": {"message": reply["error"], "type": "mock"}}).encode()
            self.send_response(int(reply["status"]))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if isinstance(body, dict) and body.get("stream") is True:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            if anthropic:
                events = anthropic_events(reply, n, body)
            else:
                events = [f"data: {ev}\n\n" for ev in sse_events(reply, n, body)]
            for ev in events:
                self.wfile.write(ev.encode())
                self.wfile.flush()
            self.close_connection = True
            return
        if anthropic:
            data = json.dumps(anthropic_message(reply, n, body or {})).encode()
        else:
            data = json.dumps(completion(reply, n, body or {})).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --------------------------------------------------------------------------
# The shared library: tools and response formats.
# --------------------------------------------------------------------------

from pydantic import BaseModel, Field, create_model  # noqa: E402

from lionagi import Branch, iModel  # noqa: E402

with open(os.path.join(HERE, "library.json")) as f:
    LIBRARY = json.load(f)

PY_TYPES = {"string": str, "number": float, "integer": int, "boolean": bool}


def field_type(spec):
    if "anyOf" in spec:
        inner = [s for s in spec["anyOf"] if s.get("type") != "null"]
        return Optional[field_type(inner[0])]
    if spec.get("type") == "array":
        return list[field_type(spec.get("items", {"type": "string"}))]
    if spec.get("type") == "object":
        return dict
    return PY_TYPES[spec["type"]]


def build_format(name, schema):
    fields = {}
    required = set(schema.get("required", []))
    for key, spec in schema["properties"].items():
        kw = {}
        if "description" in spec:
            kw["description"] = spec["description"]
        if key in required:
            fields[key] = (field_type(spec), Field(**kw))
        else:
            fields[key] = (field_type(spec), Field(default=spec.get("default"), **kw))
    model = create_model(name, **fields)
    built = model.model_json_schema()
    if built != schema:
        raise SystemExit(f"library.json format {name}: pydantic writes {json.dumps(built)}")
    return model


FORMATS = {name: build_format(name, schema) for name, schema in LIBRARY["formats"].items()}


def make_tool(name, spec):
    """A Python function with the tool's signature, so that the reference
    generates the schema library.json records for it."""
    kind = spec["behaviour"]
    params = list(spec["parameters"]["properties"])
    types = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}
    sig = ", ".join(f"{p}: {types[spec['parameters']['properties'][p]['type']]}" for p in params)
    body = {
        "multiply": "    return a * b",
        "add": "    return a + b",
        "capital": "    return {'France': 'Paris', 'Japan': 'Tokyo'}.get(country, 'unknown')",
        "fail": "    raise ValueError('tool failed on purpose')",
        "echo": "    return {'echo': text}",
    }[kind]
    rtypes = {"multiply": "int", "add": "int", "capital": "str", "fail": "str", "echo": "dict"}
    src = f"def {name}({sig}) -> {rtypes[kind]}:\n    {json.dumps(spec['description'])}\n{body}\n"
    ns = {}
    exec(src, ns)  # the tool's source is built above from library.json's fixed kinds
    return ns[name]


TOOLS = {name: make_tool(name, spec) for name, spec in LIBRARY["tools"].items()}

# --------------------------------------------------------------------------
# Running a scenario.
# --------------------------------------------------------------------------

BASE_URL = None


AGENT = os.environ.get("REFDIFF_AGENT")


def agent_reset(runs):
    """The scripted agent's directory for a scenario: its runs written, the
    calls of the scenario before removed (fake_agent.sh)."""
    if not AGENT:
        return
    import lionagi.providers.anthropic.claude_code as claude_code
    claude_code.CLAUDE_CLI = os.path.join(AGENT, "claude")
    for f in os.listdir(AGENT):
        if f != "claude":
            os.remove(os.path.join(AGENT, f))
    for i, events in enumerate(runs):
        with open(os.path.join(AGENT, f"run_{i}.ndjson"), "w") as fh:
            fh.writelines(json.dumps(e) + "\n" for e in events)


def agent_calls():
    """Each start of the scripted agent: its arguments and its stdin."""
    calls = []
    while AGENT and os.path.exists(os.path.join(AGENT, f"call_{len(calls)}.args")):
        base = os.path.join(AGENT, f"call_{len(calls)}")
        with open(base + ".args", "rb") as fh:
            args = [a.decode() for a in fh.read().split(b"\0")[:-1]]
        with open(base + ".stdin", "rb") as fh:
            stdin = fh.read().decode()
        calls.append({"args": args, "stdin": stdin})
    return calls


def model(name, **kw):
    """A model at the scripted server: `anthropic/NAME` on Anthropic
    Messages, any other name on OpenAI chat completions."""
    provider, name = name.split("/", 1) if name.startswith("anthropic/") else ("openai", name)
    kw.setdefault("allow_local_network", True)
    return iModel(provider=provider, model=name, base_url=BASE_URL, api_key="test", **kw)


def branch_chat_model(spec):
    """The chat model a scenario's branch names (`model`, default
    gpt-4.1-mini, with its max_input_tokens and allow_local_network)."""
    kw = {k: spec[k] for k in ("max_input_tokens", "allow_local_network") if k in spec}
    return model(spec.get("model", "gpt-4.1-mini"), **kw)


def resolve(v):
    """Scenario values: {"$format": N}, {"$model": N}, {"$tools": [...]}
    become the objects they name; everything else is passed as is."""
    if isinstance(v, dict):
        if "$format" in v:
            return FORMATS[v["$format"]]
        if "$model" in v:
            return model(v["$model"])
        return {k: resolve(x) for k, x in v.items()}
    if isinstance(v, list):
        return [resolve(x) for x in v]
    return v


def jsonable(v):
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json")
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if hasattr(v, "to_dict"):
        try:
            return jsonable(v.to_dict(mode="json"))
        except TypeError:
            return jsonable(v.to_dict())
    return repr(v)


def error_of(e):
    return {"ok": False, "error": {"type": type(e).__name__, "message": str(e)[:300]}}


def new_branch(spec):
    kw = {k: resolve(v) for k, v in spec.items()
          if k not in ("tools", "model", "parse_model", "cli_model", "memory",
                       "max_input_tokens", "allow_local_network")}
    if spec.get("memory"):
        from lionagi.protocols.memory import InMemoryStore
        kw["memory"] = InMemoryStore()
    kw["chat_model"] = branch_chat_model(spec)
    if "cli_model" in spec:
        # A CLI agent model (never run here: only built, cloned, stored).
        provider, name = spec["cli_model"].split("/", 1)
        kw["chat_model"] = iModel(provider=provider, model=name)
    if "parse_model" in spec:
        kw["parse_model"] = model(spec["parse_model"])
    if spec.get("tools"):
        kw["tools"] = [TOOLS[t] for t in spec["tools"]]
    return Branch(**kw)


class StaticProvider:
    """A context provider with fixed text (kind: text, none, fail)."""

    def __init__(self, text, kind):
        self.text, self.kind = text, kind

    async def provide(self, branch, instruction):
        if self.kind == "fail":
            raise RuntimeError("provider failed on purpose")
        if self.kind == "none":
            return None
        return self.text


def register_provider(b, spec):
    kw = {k: spec[k] for k in ("name", "priority", "max_tokens") if k in spec}
    b.providers.register(StaticProvider(spec["text"], spec.get("kind", "text")), **kw)


def between_rounds(script):
    """A `between_rounds` callback from a scenario's map of rounds done
    ("1", "2", ...) to the text it returns (or null); "{messages}" in a
    text becomes the number of messages the callback sees."""

    async def callback(branch, rounds_done):
        text = script.get(str(rounds_done))
        if text is None:
            return None
        return text.replace("{messages}", str(len(branch.messages)))

    return callback


def field_model(spec):
    """{"name", "type", "description"?, "default"?, "nullable"?, "listable"?}
    as the reference's FieldModel."""
    from lionagi.models import FieldModel
    kw = {"name": spec["name"], "base_type": PY_TYPES[spec["type"]]}
    for k in ("description", "default"):
        if k in spec:
            kw[k] = spec[k]
    fm = FieldModel(**kw)
    if spec.get("listable"):
        fm = fm.as_listable()
    if spec.get("nullable"):
        fm = fm.as_nullable()
    return fm


async def run_step(state, step):
    b = state["branch"]
    op = step["op"]
    args = resolve(step.get("args", {}))
    for kw in (args, args.get("response_kwargs") or {}):
        if "field_models" in kw:
            kw["field_models"] = [field_model(f) for f in kw["field_models"]]
    if isinstance(args.get("progression"), dict):
        # {"$messages": [i, ...]}: the ids of the branch's messages at those places.
        ids = [m.id for m in b.messages]
        args["progression"] = [ids[i] for i in args["progression"]["$messages"]]
    if op in ("chat", "communicate", "operate", "parse", "interpret", "act"):
        if op in ("parse", "interpret"):
            text = args.pop("text")
            return await getattr(b, op)(text, **args)
        if op == "act":
            return await b.act(args.pop("action_request"), **args)
        if op == "chat" and args.pop("record", False):
            return await b.chat_and_record(**args)
        return await getattr(b, op)(**args)
    if op in ("ReAct", "ReActStream") and "between_rounds" in args:
        args["between_rounds"] = between_rounds(args["between_rounds"])
    if op == "ReAct":
        return await b.ReAct(**args)
    if op == "ReActStream":
        out = []
        async for r in b.ReActStream(**args):
            out.append(jsonable(r))
        return out
    if op == "run":
        out = []
        async for m in b.run(**args):
            out.append({"class": type(m).__name__, "content": jsonable(m.content)})
        return out
    if op == "clone":
        c = b.clone()
        state["branch"] = c
        state["clones"].append(b)
        return {"same_chat_model": c.chat_model.id == b.chat_model.id}
    if op == "connect":
        b.connect(imodel=model(args["model"]), name=args["name"],
                  description=args.get("description"), update=args.get("update", False))
        return sorted(b.tools)
    if op == "register_provider":
        register_provider(b, args)
        return None
    if op == "grant_capabilities":
        from lionagi import Operable, Spec
        types = {"str": str, "int": int, "float": float, "bool": bool}
        specs = [Spec(types[f["type"]], name=f["name"], description=f.get("description"))
                 for f in args["fields"]]
        b.grant_capabilities(Operable(specs, name=args.get("name")), prompt=args.get("prompt", True))
        return None
    if op == "reload":
        # The branch written by to_dict (json mode) and read back by from_dict;
        # models and tools are not written with their keys or code, so the
        # step gives them again.
        nb = Branch.from_dict(json.loads(json.dumps(jsonable(b.to_dict()))))
        designate_system(nb)
        nb.chat_model = model(args["model"])
        # Without a parse model of its own the branch's parse model is its
        # chat model, as a branch built with a chat model alone has.
        nb.parse_model = model(args["parse_model"]) if args.get("parse_model") else nb.chat_model
        if args.get("tools"):
            nb.register_tools([TOOLS[t] for t in args["tools"]])
        state["branch"] = nb
        return {"messages": len(nb.messages)}
    if op == "session":
        from lionagi import Session
        s = Session()
        s.include_branches(b)
        for name in args.get("extra", []):
            s.new_branch(name=name)
        if args.get("remove"):
            s.remove_branch(b)
        return {"branches": len(s.branches), "default_is_branch": s.default_branch is b}
    raise ValueError(f"unknown op {op}")


def designate_system(b):
    """The reference's from_dict leaves the System message that leads the
    pile undesignated, so a restored branch stops sending its text; ours
    designates it (docs/compat.md §1). Designated here, so that what a
    restored branch's next turn compares is everything else."""
    first = next(iter(b.messages), None)
    if b.msgs.system is None and type(first).__name__ == "System":
        b.msgs.system = first


CONTINUE = "Continue."


def continues(sc):
    """The to_dict key whose output a loaded branch goes on from (the first
    json-mode one), or None: a CLI agent's branch is not run again, and after
    `act` the reference drops the results still pending (§15 M3)."""
    if "cli_model" in sc.get("branch", {}) or any(s["op"] == "act" for s in sc["steps"]):
        return None
    modes = sc.get("to_dict", DEFAULT_DICTS)
    return next(((m.get("key") or m["mode"]) for m in modes if m["mode"] == "json"), None)


async def continued(data, spec):
    """The turn a branch loaded from `data` takes next: given the scenario's
    chat model again (a stored model has no key), it communicates once; the
    request it sent, or its failure, is the result."""
    b = Branch.from_dict(copy.deepcopy(data))
    b.chat_model = branch_chat_model(spec)
    b.parse_model = b.chat_model
    designate_system(b)
    SCRIPT.reset([{"text": "Continued."}])
    try:
        await b.communicate(instruction=CONTINUE)
        r = {"ok": True}
    except Exception as e:  # noqa: BLE001 - recorded as the outcome
        r = error_of(e)
    r["requests"] = list(SCRIPT.bodies)
    return r


def to_dicts(b, modes):
    out = {}
    for m in modes:
        key = m.get("key") or m["mode"]
        kw = {k: v for k, v in m.items() if k != "key"}
        try:
            out[key] = {"ok": True, "value": jsonable(b.to_dict(**kw))}
        except Exception as e:  # noqa: BLE001 - recorded as the step's outcome
            out[key] = error_of(e)
    return out


DEFAULT_DICTS = [{"mode": "json"}, {"mode": "db"}]


async def run_scenario(sc):
    SCRIPT.reset(sc.get("replies", []))
    agent_reset(sc.get("cli", []))
    state = {"branch": new_branch(sc.get("branch", {})), "clones": []}
    steps = []
    for step in sc["steps"]:
        try:
            v = await run_step(state, step)
            steps.append({"op": step["op"], "ok": True, "value": jsonable(v)})
        except Exception as e:  # noqa: BLE001
            r = error_of(e)
            r["op"] = step["op"]
            steps.append(r)
    b = state["branch"]
    return {
        "steps": steps,
        "requests": list(SCRIPT.bodies),
        "agent_calls": agent_calls(),
        "to_dict": to_dicts(b, sc.get("to_dict", DEFAULT_DICTS)),
    }


def cross_load(theirs, ours, sc, loop):
    """from_dict of the other side's to_dict outputs and of our own, each
    followed by to_dict with the same options; and the turn each loaded
    branch takes next (`continued`)."""
    modes = sc.get("to_dict", DEFAULT_DICTS)
    out = {"other": reload(theirs, modes), "self": reload(ours, modes), "continued": {}}
    key = continues(sc)
    for side, data in (("other", theirs), ("self", ours)):
        r = data.get("to_dict", {}).get(key) if key else None
        if r and r.get("ok"):
            try:
                out["continued"][side] = loop.run_until_complete(
                    asyncio.wait_for(continued(r["value"], sc.get("branch", {})), 60))
            except Exception as e:  # noqa: BLE001 - from_dict refused it
                out["continued"][side] = dict(error_of(e), requests=[])
    return out


def reload(data, modes):
    out = {}
    for key, r in data.get("to_dict", {}).items():
        if not r.get("ok"):
            continue
        m = next((m for m in modes if (m.get("key") or m["mode"]) == key), {"mode": key})
        kw = {k: v for k, v in m.items() if k != "key"}
        try:
            b = Branch.from_dict(copy.deepcopy(r["value"]))
            out[key] = {"ok": True, "value": jsonable(b.to_dict(**kw))}
        except Exception as e:  # noqa: BLE001
            out[key] = error_of(e)
    return out


def scenario_files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".json"))


def provide_o200k():
    """tiktoken reads its encodings from TIKTOKEN_CACHE_DIR under the SHA-1
    of their URL; xtask passes tiktoken-rs's copy of o200k_base (the same
    bytes: tiktoken checks their SHA-256) so nothing is downloaded."""
    import hashlib
    import shutil

    src, cache = os.environ.get("REFDIFF_O200K"), os.environ.get("TIKTOKEN_CACHE_DIR")
    if not src or not cache:
        return
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    os.makedirs(cache, exist_ok=True)
    dest = os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())
    if not os.path.exists(dest):
        shutil.copyfile(src, dest)


def main():
    global BASE_URL
    provide_o200k()
    # Scenarios fail tools and providers on purpose; the reference logs each
    # failure with a traceback, which would bury the report.
    logging.getLogger().setLevel(logging.CRITICAL)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    scen_dir, out_dir = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    os.makedirs(out_dir, exist_ok=True)
    server = start_server()
    BASE_URL = f"http://127.0.0.1:{server.server_address[1]}/v1"
    loop = asyncio.new_event_loop()
    scenarios = {}
    for f in scenario_files(scen_dir):
        name = f[:-5]
        if only and name not in only:
            continue
        with open(os.path.join(scen_dir, f)) as fh:
            sc = json.load(fh)
        scenarios[name] = sc
        try:
            result = loop.run_until_complete(asyncio.wait_for(run_scenario(sc), 60))
        except Exception as e:  # noqa: BLE001
            result = {"driver_error": traceback.format_exc(limit=5), **error_of(e)}
        with open(os.path.join(out_dir, name + ".json"), "w") as fh:
            json.dump(result, fh, indent=1)
    print("READY", flush=True)
    for line in sys.stdin:
        cmd, _, other = line.strip().partition(" ")
        if cmd != "CROSS":
            continue
        for name, sc in scenarios.items():
            path = os.path.join(other, name + ".json")
            if not os.path.exists(path):
                continue
            with open(path) as fh:
                theirs = json.load(fh)
            with open(os.path.join(out_dir, name + ".json")) as fh:
                ours = json.load(fh)
            with open(os.path.join(out_dir, name + ".cross.json"), "w") as fh:
                json.dump(cross_load(theirs, ours, sc, loop), fh, indent=1)
        print("CROSSED", flush=True)
    server.shutdown()


if __name__ == "__main__":
    main()
