"""Random scenarios for the differential harness: conversations that no one
wrote down, so that parity is checked beyond the fixed matrix of
`generate.py`. `cargo xtask refdiff --random N [--seed S]` writes N of them
with this script into the target dir and runs them like the committed ones;
CI runs a set seeded by the commit it tests, so each commit explores
conversations the ones before it did not.

    python3 tests/refdiff/randomized.py --count N --seed S --out DIR

A scenario is a function of the seed and its number alone (Python's
`random.Random` with an integer seed has given the same draws since 3.2),
so `random_S_I` is made again by the same command; a scenario
that differs can be copied into `scenarios/` as a regression test.

A scenario strings together one to four steps of the verbs a conversation
uses (chat, communicate, operate, parse, interpret, act, ReAct,
ReActStream, with context providers, capability grants and a connected
model), each with a random subset of its keywords, on a branch with random
tools, user, system message and parse model, and scripts replies of every
kind: plain text, well-formed, fenced, near-miss and unparseable structured
replies, tool calls, and provider errors. Some go on from a branch written
and read back (`reload`), some carry text YAML must quote, escape or fold.
Where a departure is documented in docs/compat.md and needs a declaration
(`expect_deviation`), the generator stays out of its way rather than
declare it, so that every difference it finds is one nobody has written
down:

- a provider error is scripted only in a conversation that parses no
  structure, and two dozen replies to spare that every format and ReAct's
  analysis read end every script, so that no repair call fails at the
  provider (§18 O2);
- operate's repairs go where both sides send them (§18 O1): a branch's
  own parse model is left out where operate parses a structure or ReAct
  runs, a per-call chat model comes with its parse model, and operate
  without a format gets no per-call parse model;
- no call is asked for twice in one batch (§21 H7), no tool result
  passes 64 bits (§21 H8), no ReAct with a reasoning effort has a
  guidance that is not text (§21 H9), and no reply is JSON that is not an
  object where operate's own structure, ReAct's analysis, a dict format or
  a parse that forces or fills keys is read (§21 H10); `act` raises only from a batch
  of one call (§21 H11);
  `between_rounds` goes to ReAct only (§21 H12), images to every verb
  but ReAct (§21 H13), and no similarity threshold lies outside 0..1
  (§21 H14) or below 0.85 (the reference tries a reply's keys in set
  order, so where several could take a field, which one does changes
  from run to run of the reference itself); field models go to operate
  only (§21 H15); no reply is a JSON list of anything but objects where
  communicate reads request_fields (§21 H16), and operate and ReAct's
  answer get the dict format only where no reason, actions or field models
  join it (§21 H17);
- ReAct's deliverables (`intermediate_response_options`) go to one ReAct
  a conversation, and the spare replies then include an analysis that
  carries them (the reference's analysis requires them);
- `clear_messages` only where no call fails (the reference clears before
  the call, §18 O2);
- no reply is empty (an empty reply fails the call, §13), no
  instruction or guidance is blank (§15 M4), and a system prompt that
  capabilities are granted to has no leading white space (§17);
- `act` is followed only by steps that call no model (§15 M3: a parse's
  repair sends the history too);
- on Anthropic Messages (about one conversation in six), no images (§25)
  and no `clear_messages` where a temperature above Anthropic's 1 has the
  call refused (§18 O2);
- `connect` registers a Claude or an OpenAI model as the tool `helper`,
  and `act` calls it only when it is Claude's and no provider error is
  scripted (the reference's connected tool adds `reasoning_effort: null`
  to an OpenAI model's arguments and answers None for a failed call,
  §21 H18), in turn when other calls join it (§21 H19);
- `clone`, `run`, sessions and ReAct's `return_analysis` are left to the
  matrix (§5, §18 O4, §7, §18).
"""

import argparse
import json
import os
import random

TEXTS = [
    "What is the capital of France?",
    "Summarise the plan in one line.",
    "Résumé — ça va? 日本語で答えて",
    "Line one\nLine two\n\n- item",
    "Quote \"this\" and a back\\slash",
    "  padded  ",
    "Tabs\tand {braces} and [brackets]: key: value",
    "x" * 300,
]
REPLY_TEXTS = [
    "Paris.", "Done.", "Très bien — 元気", "A\nB\n\nC", "Sure: {not json}",
    "```\nplain fence\n```", "null", "42", "[1, 2, 3]",
]
# A 1×1 PNG image in base64 (http(s) URLs are left out: the reference
# resolves their hosts, compat.md §15 M5).
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5"
       "ErkJggg==")
# Reply texts that are JSON but not an object.
NOT_OBJECTS = {"null", "42", "[1, 2, 3]"}
CONTEXTS = [
    "The user is in Paris.", ["Europe", "2024"], {"city": "Paris", "n": 3},
    [{"a": [1, 2]}, "x"], {"nested": {"deep": [True, None, 1.5]}},
]
GUIDANCE = ["One word.", "Be exact.", "Answer in French.", {"tone": "dry"}]
SYSTEMS = ["You are terse.", "Use tools when helpful.", "Système — 日本", "Line 1\nLine 2"]
FORMATS = ["Answer", "Plan", "Person", "Summary"]
TOOLS = ["multiply", "add", "lookup_capital", "fail_tool", "echo"]
MODES = [
    {"mode": "json"}, {"mode": "db"}, {"mode": "python"},
    {"mode": "db", "db_meta_key": "meta"},
    {"mode": "json", "include_request_options": True},
    {"mode": "json", "include_logs": False},
    {"mode": "json", "include_log_config": True},
    {"mode": "json", "include_processor_config": True},
]
# A reply every format reads.
SPARE = {"answer": "done", "confidence": 0.5, "goal": "done", "steps": [], "name": "Ada",
         "age": 36, "title": "Done", "summary": "Done.", "analysis": "done",
         "extension_needed": False, "remark": "done", "count": 1, "tag_list": None}
# operate's field models. Their names are far from every format's field and
# ReAct's (below 0.85 in each measure), so the spare reply's keys for them
# never take another field.
FIELD_MODELS = [{"name": "remark", "type": "string", "description": "A short remark"},
                {"name": "count", "type": "integer", "default": 3},
                {"name": "tag_list", "type": "string", "listable": True, "nullable": True}]
SPARE_ANALYSIS = {"analysis": "done", "extension_needed": False}
F = lambda n: {"$format": n}  # noqa: E731
# The reference's dict format (field -> example), named "Dict" among the
# library's formats here.
DICT_FORMAT = {"title": "the title", "year": 0}


def fmt_ref(name):
    return DICT_FORMAT if name == "Dict" else F(name)
M = lambda n: {"$model": n}  # noqa: E731


class Gen:
    """One scenario's draws; `broken` says whether its structured replies
    may fail to parse, `errors` whether the provider may fail (never both:
    see the module docs)."""

    def __init__(self, rng):
        self.r = rng
        self.errors = rng.random() < 0.35
        self.broken = not self.errors and rng.random() < 0.6
        self.tools = rng.sample(TOOLS, rng.randint(0, 3))
        # The first ReAct given deliverables sets them for the conversation
        # (the spare analysis that ends the script carries them).
        self.deliverables = None
        # The model a `connect` step registered as the tool `helper`.
        self.helper = None

    def maybe(self, p=0.5):
        return self.r.random() < p

    # ---------------------------------------------------------- values
    def word(self):
        return self.r.choice(["ok", "Paris", "ship", "Ada", "日本", "a b", "", "x\ny"])

    def number(self):
        # Products stay inside 64 bits: the reference fails the whole turn
        # on a tool result past them (compat.md §21 H8).
        return self.r.choice([0, 1, -3, 36, 2.5, 1e-3, 10**6])

    def structured(self, fmt):
        """A reply for `fmt`: well-formed, or (when broken) near-missing."""
        r = self.r
        good = {
            "Answer": lambda: {"answer": self.word(), "confidence": r.choice([0.1, 0.5, 1.0, 0])},
            "Plan": lambda: {"goal": self.word(), "steps": [self.word() for _ in range(r.randint(0, 3))],
                             **({"priority": r.randint(1, 3)} if self.maybe() else {}),
                             **({"notes": self.word()} if self.maybe(0.3) else {})},
            "Person": lambda: {"name": self.word(), "age": r.choice([36, 0, 101]),
                               **({"verified": self.maybe()} if self.maybe() else {})},
            "Summary": lambda: {"title": self.word(), "summary": self.word()},
            "Dict": lambda: {"title": self.word(), "year": r.choice([1815, 0])},
        }[fmt]()
        if self.broken and self.maybe(0.4):
            k = r.choice(sorted(good))
            how = r.randrange(4)
            if how == 0:
                del good[k]
            elif how == 1:
                good[k.capitalize() if k.islower() else k.lower()] = good.pop(k)
            elif how == 2:
                good[k] = str(good[k])
            else:
                good["extra"] = self.word()
        return good

    def tool_schemas(self):
        """Tool schemas a caller shows with an instruction: a registered
        tool's, or one no one registered."""
        return self.r.choice([
            [{"name": "weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            [{"type": "function", "function": {"name": "multiply", "description": "Multiply.",
                                               "parameters": {"type": "object"}}}],
            [{"name": "a"}, {"name": "b"}]])

    def field_values(self, fields):
        """A reply's values for operate's field models, some left out."""
        r = self.r
        value = {"remark": self.word, "count": lambda: r.choice([0, 2, 36]),
                 "tag_list": lambda: r.choice([None, [], [self.word()]])}
        return {f["name"]: value[f["name"]]() for f in fields if self.maybe(0.85)}

    def deliverable_values(self):
        """An analysis's deliverables: each format's reply or null, in one
        object, or a list of such objects when listable."""
        fmts, listable = self.deliverables
        one = lambda: {f.lower(): self.structured(f) if self.maybe(0.6) else None  # noqa: E731
                       for f in fmts}
        return [one() for _ in range(self.r.randint(0, 2))] if listable else one()

    def reply_for(self, fmt, actions=False, reason=False, fields=()):
        """The replies of one structured call (and its repairs, if broken)."""
        r = self.r
        if self.broken and self.maybe(0.3):
            bad = r.choice([{"text": "four, I am quite sure"}, {"text": "```json\n{\"a\": \n```"},
                            {"text": "{'single': 'quotes'}"}])
            return [bad] + [self.reply_for(fmt, actions, reason, fields)[0]
                            for _ in range(r.randint(0, 2))]
        body = self.structured(fmt) if fmt else {}
        body.update(self.field_values(fields))
        if reason and self.maybe(0.8):
            body["reason"] = {"title": self.word(), "content": self.word(),
                              "confidence_score": r.choice([0.9, 0.1])}
        if actions and self.maybe(0.7):
            body["action_required"] = self.maybe(0.8)
            body["action_requests"] = self.calls(r.randint(0, 2))
        if not body:
            # (A format's body is never empty.)
            if actions or reason or fields:
                # operate's own structure reads JSON that is not an object
                # as an empty one in the reference (compat.md §21 H10; the
                # whole script is checked again at the end).
                return [{"text": r.choice([t for t in REPLY_TEXTS if t not in NOT_OBJECTS])}]
            return [{"text": r.choice(REPLY_TEXTS)}]
        if self.maybe(0.2):
            fence = "```json\n" + json.dumps(body, ensure_ascii=False) + "\n```"
            return [{"text": r.choice(["Sure:\n", "", "Here you go. "]) + fence}]
        return [{"json": body}]

    def calls(self, n):
        """`n` calls, no two alike: the reference runs a repeated call once
        (compat.md §21 H7)."""
        out = []
        for _ in range(n):
            c = self.call()
            if c not in out:
                out.append(c)
        return out

    def call(self):
        r = self.r
        pool = self.tools or TOOLS
        name = r.choice(pool + (["does_not_exist"] if self.maybe(0.1) else []))
        args = {"multiply": lambda: {"a": self.number(), "b": self.number()},
                "add": lambda: {"a": self.number(), "b": self.number()},
                "lookup_capital": lambda: {"country": r.choice(["France", "Japan", "Atlantis"])},
                "fail_tool": lambda: {"reason": self.word()},
                "echo": lambda: {"text": self.word()},
                "does_not_exist": lambda: {"x": 1}}[name]()
        return {"function": name, "arguments": args}

    def text_reply(self):
        if self.errors and self.maybe(0.25):
            return self.r.choice([{"status": 400, "error": "bad request"},
                                  {"status": 404, "error": "no such model"}])
        return {"text": self.r.choice(REPLY_TEXTS)}

    # ---------------------------------------------------------- steps
    def turn_args(self, a, images=True):
        r = self.r
        a["instruction"] = r.choice(TEXTS)
        # ReAct drops the task's images in the reference (compat.md §21
        # H13).
        if images and self.maybe(0.1):
            a["images"] = r.choice([[PNG], ["data:image/png;base64," + PNG], [PNG, PNG]])
            if self.maybe(0.5):
                a["image_detail"] = r.choice(["low", "high", "auto"])
        if self.maybe(0.3):
            a["guidance"] = r.choice(GUIDANCE)
        if self.maybe(0.4):
            a["context"] = r.choice(CONTEXTS)
        if self.maybe(0.2):
            a["temperature"] = r.choice([0, 0.5, 1.2])
        if self.maybe(0.2):
            a["include_token_usage_to_model"] = self.maybe()
        if self.maybe(0.15):
            k = r.choice(["max_tokens", "top_p", "seed"])
            a[k] = {"max_tokens": 64, "top_p": 0.9, "seed": 7}[k]
        return a

    def interpret_args(self, a, domain, style, sample):
        """The interpret rewrite's options, under the names the verb uses."""
        r = self.r
        if self.maybe(0.4):
            a[domain] = r.choice(["math", "travel"])
        if self.maybe(0.4):
            a[style] = r.choice(["precise", "casual"])
        if self.maybe(0.2):
            a[sample] = "Concise, formal prose."

    def models(self, a):
        """A chat or parse model for this call only (communicate, operate)."""
        if self.maybe(0.1):
            a["chat_model"] = M("gpt-4o")
        if self.maybe(0.1):
            a["parse_model"] = M("gpt-4o-mini")

    def step(self, op):
        """One step and its replies."""
        r = self.r
        a = {}
        replies = []
        if op == "chat":
            self.turn_args(a)
            if self.maybe(0.3):
                a["record"] = True
            if self.maybe(0.2):
                a["imodel"] = M("gpt-4o")
            if self.maybe(0.15):
                a["tool_schemas"] = self.tool_schemas()
            replies.append(self.text_reply())
        elif op == "communicate":
            self.turn_args(a)
            self.models(a)
            if self.maybe(0.05):
                a["plain_content"] = "Plain text, sent as it is."
            if not self.errors and self.maybe(0.5):
                fmt = r.choice(FORMATS + ["Dict"])
                a["response_format"] = fmt_ref(fmt)
                if self.maybe(0.3):
                    a["num_parse_retries"] = r.randint(0, 2)
                if self.maybe(0.1):
                    a["skip_validation"] = True
                replies += self.reply_for(fmt)
            elif not self.errors and self.maybe(0.15):
                a["request_fields"] = r.sample(["title", "year", "author"], r.randint(1, 2))
                replies.append({"json": {"title": self.word(), "year": 1815}})
            elif self.tools and self.maybe(0.1):
                replies.append({"tool_calls": [{"id": f"call_{k}", "name": c["function"],
                                                "arguments": c["arguments"]}
                                               for k, c in enumerate([self.call()])]})
            else:
                replies.append(self.text_reply())
            # A failed turn with clear_messages has cleared the history in
            # the reference, and records nothing here (§18 O2).
            if not self.errors and self.maybe(0.1):
                a["clear_messages"] = True
        elif op == "operate":
            self.turn_args(a)
            self.models(a)
            fmt = r.choice(FORMATS + ["Dict", None])
            # Where the reference sends operate's repairs (§18 O1): with a
            # format to the parse model argument, else the chat model
            # argument; without one to the branch's parse model, whatever
            # the arguments. Here: the parse model argument, else the
            # branch's. So a per-call model comes with its parse model,
            # and without a format with neither.
            if fmt is None:
                a.pop("parse_model", None)
            elif "chat_model" in a:
                a.setdefault("parse_model", a["chat_model"])
            actions = bool(self.tools) and self.maybe(0.6)
            if actions:
                a["actions"] = True
                if self.maybe(0.2):
                    a["tools"] = r.sample(self.tools, 1)
                if self.maybe(0.2):
                    a["action_strategy"] = r.choice(["sequential", "concurrent"])
                if self.maybe(0.15):
                    a["invoke_actions"] = False
            reason = self.maybe(0.3)
            if reason:
                a["reason"] = True
            if self.broken and self.maybe(0.5):
                a["handle_validation"] = r.choice(["return_value", "return_none", "raise"])
            if self.maybe(0.15):
                a["tool_schemas"] = self.tool_schemas()
            fields = ()
            if self.maybe(0.2):
                fields = r.sample(FIELD_MODELS, r.randint(1, 3))
                a["field_models"] = fields
            # The reference drops a dict format that anything joins
            # (compat.md §21 H17).
            if fmt == "Dict" and (actions or reason or fields):
                fmt = "Summary"
            if fmt:
                a["response_format"] = fmt_ref(fmt)
            replies += self.reply_for(fmt, actions, reason, fields)
            # As communicate's (§18 O2): only where no call fails.
            if not self.errors and self.maybe(0.08):
                a["clear_messages"] = True
        elif op == "parse":
            fmt = r.choice(FORMATS + ["Dict"])
            a["response_format"] = fmt_ref(fmt)
            body = self.structured(fmt)
            a["text"] = r.choice([json.dumps(body, ensure_ascii=False),
                                  "Here:\n```json\n" + json.dumps(body) + "\n```",
                                  "the answer is four"])
            if self.maybe(0.15):
                a["fuzzy_match"] = False
            if self.maybe(0.2):
                a["similarity_algo"] = r.choice(["levenshtein", "sequence_matcher", "hamming",
                                                 "cosine", "jaro_winkler"])
            # A threshold outside 0..1 is refused here, repaired there (§21
            # H14). Below 0.85 several keys of a reply (the spare ones) may
            # be similar enough to the same field, and the reference tries
            # its keys in set order, which changes from run to run of the
            # reference itself: which key wins is then not a behaviour.
            if self.maybe(0.2):
                a["similarity_threshold"] = r.choice([0.85, 0.95, 1.0])
            if self.maybe(0.2):
                a["fill_value"] = r.choice([0, "", False, "n/a"])
            if self.maybe(0.2):
                a["fill_mapping"] = {r.choice(["answer", "confidence", "age", "verified",
                                               "steps", "other"]): r.choice([1, "x", True, []])}
            if not self.broken and a["text"] != "the answer is four":
                # It parses as it is: no call, so no reply of its own.
                return {"op": op, "args": a}, replies
            if self.maybe(0.2):
                a["strict"] = True
            if self.maybe(0.3):
                a["handle_unmatched"] = r.choice(["ignore", "remove", "fill", "force"])
            if self.maybe(0.3):
                a["max_retries"] = r.randint(0, 2)
            if self.broken and self.maybe(0.4):
                a["handle_validation"] = r.choice(["return_value", "return_none", "raise"])
            replies += self.reply_for(fmt)
        elif op == "interpret":
            a["text"] = r.choice(TEXTS)
            self.interpret_args(a, "domain", "style", "sample_writing")
            replies.append(self.text_reply())
        elif op == "act":
            calls = self.calls(r.randint(1, 3)) if self.tools else []
            # A connected Claude model is called with a reply of its own;
            # an OpenAI one is not (its reference tool adds arguments,
            # §21 H18), nor one whose call could meet a provider error
            # (the reference's tool answers None, §21 H18).
            if self.helper == CLAUDE_HELPER and not self.errors and (not calls or self.maybe()):
                calls.insert(r.randint(0, len(calls)), {"function": "helper", "arguments": {
                    "model": CLAUDE_HELPER.split("/", 1)[1], "max_tokens": 64,
                    "messages": [{"role": "user", "content": r.choice(TEXTS)}]}})
                replies.append(self.text_reply())
            a["action_request"] = calls[0] if len(calls) == 1 and self.maybe() else calls
            if self.maybe(0.3):
                a["strategy"] = r.choice(["sequential", "concurrent"])
            # Run at once, the reference records each call as it finishes
            # (§21 H19): a batch with the helper's slower call beside
            # others runs in turn.
            if len(calls) > 1 and any(c["function"] == "helper" for c in calls):
                a["strategy"] = "sequential"
            # A batch that raises is cut short in the reference, and what
            # it recorded depends on timing (compat.md §21 H11): errors
            # are raised only from a batch of one.
            if self.maybe(0.3):
                a["suppress_errors"] = len(calls) > 1 or self.maybe()
        elif op in ("ReAct", "ReActStream"):
            self.turn_args(a, images=False)
            ext = r.randint(0, 2)
            if self.maybe(0.6):
                a["max_extensions"] = ext
            if self.maybe(0.2):
                a["extension_allowed"] = self.maybe()
            fmt = r.choice(FORMATS + ["Dict", None, None])
            if fmt:
                a["response_format"] = fmt_ref(fmt)
            # The reference fails a round that prefixes its effort to a
            # guidance that is not text (compat.md §21 H9).
            if self.maybe(0.15) and not isinstance(a.get("guidance"), dict):
                a["reasoning_effort"] = r.choice(["low", "high"])
            if self.tools and self.maybe(0.15):
                a["tools"] = r.sample(self.tools, 1)
            if self.maybe(0.1):
                a["tool_schemas"] = self.tool_schemas()
            # The run's model is its repair model too, on both sides.
            if self.maybe(0.2):
                a["analysis_model"] = M("gpt-4.1-nano")
            if op == "ReAct" and self.maybe(0.1):
                a["interpret"] = True
                self.interpret_args(a, "interpret_domain", "interpret_style", "interpret_sample")
                if self.maybe(0.2):
                    a["interpret_model"] = M("gpt-4o")
                if self.maybe(0.2):
                    a["interpret_kwargs"] = {"temperature": 0.5}
                replies.append({"text": r.choice(TEXTS)})
            # The reference's ReActStream drops the callback (compat.md
            # §21 H12): ReAct alone is given one.
            if op == "ReAct" and self.maybe(0.2):
                a["between_rounds"] = {
                    str(n): r.choice([None, "", "Check the last result.",
                                      "{messages} messages so far; go on."])
                    for n in range(1, 4)}
            # The reference's ReAct drops field models (compat.md §21 H15):
            # none are given; deliverables go to one ReAct a conversation.
            if self.deliverables is None and self.maybe(0.2):
                self.deliverables = (r.sample(FORMATS, r.randint(1, 2)), self.maybe(0.3))
                fmts, listable = self.deliverables
                a["intermediate_response_options"] = (
                    F(fmts[0]) if len(fmts) == 1 and self.maybe() else [F(f) for f in fmts])
                if listable:
                    a["intermediate_listable"] = True
            if self.maybe(0.15):
                a["response_kwargs"] = {k: v for k, v in (
                    ("guidance", r.choice(["Answer in one line.", "Be brief."])),
                    ("imodel_kw", {"temperature": r.choice([0, 0.9])}),
                    ("reason", self.maybe()),
                    ("tool_schemas", self.tool_schemas() if self.maybe() else [])) if self.maybe()}
                # The reference drops a dict format that a reason joins
                # (compat.md §21 H17).
                if fmt == "Dict":
                    a["response_kwargs"].pop("reason", None)
            offered = "intermediate_response_options" in a
            for _ in range(r.randint(1, 3)):
                d = {"analysis": self.word(), "extension_needed": self.maybe(0.5)}
                if offered and self.maybe(0.9):
                    d["intermediate_response_options"] = self.deliverable_values()
                if self.tools and self.maybe(0.4):
                    d["action_required"] = True
                    d["action_requests"] = [self.call()]
                if self.maybe(0.7):
                    d["reason"] = {"title": "plan", "content": "go", "confidence_score": 0.9}
                replies.append({"json": d})
            replies += self.reply_for(fmt) if fmt else [{"json": {"answer": self.word()}}]
        elif op == "register_provider":
            a.update(r.choice([{"text": "Remember: the user likes tea.", "name": "prefs"},
                               {"text": "low", "name": "a", "priority": 1},
                               {"text": "", "kind": "none", "name": "empty"},
                               {"text": "", "kind": "fail", "name": "broken"},
                               {"text": "word " * 50, "name": "big", "max_tokens": 5}]))
        elif op == "connect":
            if self.helper and self.maybe(0.7):
                a["update"] = True
            self.helper = r.choice([CLAUDE_HELPER, "gpt-4o-mini"])
            a.update({"model": self.helper, "name": "helper", "description": "Ask another model"})
        elif op == "grant_capabilities":
            a.update({"name": "Reviewer", "prompt": self.maybe(0.8),
                      "fields": [{"name": "note", "type": "str", "description": "A short note"},
                                 {"name": "score", "type": "int", "description": "0 to 10"}]})
        return {"op": op, "args": a}, replies


# Steps that parse a structured reply, and so may repair it (see §18 O2).
STRUCTURED = {"operate", "parse", "ReAct", "ReActStream"}
# Steps that send the conversation's history to the model (see §15 M3;
# a parse repair compiles it too).
HISTORY = {"chat", "communicate", "operate", "interpret", "parse", "ReAct", "ReActStream"}
OPS = (["communicate"] * 5 + ["operate"] * 4 + ["chat"] * 2 + ["parse"] * 2
       + ["interpret", "act", "ReAct", "ReActStream", "register_provider", "grant_capabilities",
          "connect"])
# The model a `connect` step may register that `act` then calls.
CLAUDE_HELPER = "anthropic/claude-haiku-4-5"


# A CLI agent's conversation: the branch's model is a Claude Code agent that both sides run
# as the scripted agent (README.md, "cli"). Each step starts it once, and every reply it
# gives parses: repairs of a structure go to the parse model here and to the chat model in
# the reference (§18 O1), and a failed agent call keeps the turn there (§18 O5). One
# session throughout: chat, which records nothing, leaves the branch's session here and
# moves the reference's model to its own (§18 O5), and before the first recorded turn the
# reference's model has a session where the branch has none: chat without recording and
# interpret come after one. The reference writes its agent request's schema as a CLI
# model's request options, where ours has none (§18 O5): not asked for.
AGENT_SESSION = "0b3c5d7e-9f10-4a2b-8c3d-4e5f60718293"
CLI_OPS = ["run"] * 3 + ["communicate"] * 3 + ["chat"] * 2 + ["operate"] * 2 + ["interpret"]


def agent_text(text):
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}


def agent_run(g, structured=None):
    """One run of the agent: the session's start, then (unless it answers with the JSON
    text `structured`, alone) maybe a thinking block and a tool use with its result and
    one or two text blocks; then the result, its text the last block's, none, or other."""
    r = g.r
    events = [{"type": "system", "subtype": "init", "session_id": AGENT_SESSION}]
    if structured is not None:
        events.append(agent_text(structured))
        result = r.choice([structured, ""])
    else:
        if g.maybe(0.3):
            events.append({"type": "assistant", "message": {"content": [
                {"type": "thinking", "thinking": g.word()},
                {"type": "tool_use", "id": "toolu_1", "name": "Read",
                 "input": {"path": "a.txt"}}]}})
            events.append({"type": "user", "message": {"content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": g.word()}]}})
        blocks = [g.word() for _ in range(r.randint(0, 1))] + [r.choice(REPLY_TEXTS)]
        events += [agent_text(b) for b in blocks]
        result = r.choice([blocks[-1], "", "Done."])
    events.append({"type": "result", "subtype": "success", "result": result, "num_turns": 1,
                   **({"usage": {"input_tokens": r.randint(1, 9)}} if g.maybe() else {})})
    return events


def cli_scenario(seed, i, rng):
    g = Gen(rng)
    g.broken = False
    branch = {"cli_model": "claude_code/claude-sonnet-5-5"}
    if g.maybe(0.85):
        branch["system"] = rng.choice(SYSTEMS)
    steps, runs = [], []
    recorded = False
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(CLI_OPS if recorded else [o for o in CLI_OPS if o != "interpret"])
        a = {}
        if op == "interpret":
            a["text"] = rng.choice(TEXTS)
        else:
            a["instruction"] = rng.choice(TEXTS)
            if g.maybe(0.3):
                a["guidance"] = rng.choice([t for t in GUIDANCE if isinstance(t, str)])
            if g.maybe(0.3):
                a["context"] = rng.choice(CONTEXTS)
        fmt = None
        if op == "communicate" and g.maybe(0.4):
            fmt = rng.choice(FORMATS + ["Dict"])
        elif op == "operate":
            fmt = rng.choice(FORMATS + ["Dict"])
            if fmt != "Dict" and g.maybe(0.4):
                a["reason"] = True
        elif op == "chat" and (not recorded or g.maybe(0.4)):
            a["record"] = True
        if fmt:
            a["response_format"] = fmt_ref(fmt)
            body = g.structured(fmt)
            if a.get("reason"):
                body["reason"] = {"title": g.word(), "content": g.word(), "confidence_score": 0.5}
            runs.append(agent_run(g, json.dumps(body, ensure_ascii=False)))
        else:
            runs.append(agent_run(g))
        steps.append({"op": op, "args": a})
        recorded = recorded or op != "interpret" and (op != "chat" or a.get("record"))
    d = {"about": f"random scenario {i} of seed {seed} (a CLI agent)", "branch": branch,
         "steps": steps, "replies": [], "cli": runs}
    if g.maybe(0.4):
        modes = [m for m in MODES if not m.get("include_request_options")]
        d["to_dict"] = [dict(m, key=f"m{k}") for k, m in enumerate(rng.sample(modes, 2))]
    return d


def scenario(seed, i):
    d = conversation(seed, i)
    with_awkward_text(d, random.Random(seed * 104_729 + i))
    return d


def conversation(seed, i):
    rng = random.Random(seed * 1_000_003 + i)
    if rng.random() < 0.12:
        return cli_scenario(seed, i, rng)
    g = Gen(rng)
    branch = {}
    if g.maybe(0.85):
        branch["system"] = rng.choice(SYSTEMS)
    if g.maybe(0.3):
        branch["user"] = "alice"
    if g.maybe(0.15):
        branch["use_lion_system_message"] = True
    if g.tools:
        branch["tools"] = g.tools
    if g.maybe(0.2):
        branch["parse_model"] = "gpt-4.1-nano"
    if g.maybe(0.1):
        branch["memory"] = True
    steps, replies = [], []
    acted = False
    for _ in range(rng.randint(1, 4)):
        # A step may take more or fewer calls than scripted (a repair,
        # ReAct's rounds), so a provider error could land on a repair:
        # a conversation with errors parses no structure at all.
        callable_helper = g.helper == CLAUDE_HELPER and not g.errors
        op = rng.choice([o for o in OPS if not (acted and o in HISTORY)
                         and not (g.errors and o in STRUCTURED)
                         and not (o == "act" and not g.tools and not callable_helper)])
        # A model just connected is often called at once.
        if steps and steps[-1]["op"] == "connect" and callable_helper and g.maybe(0.6):
            op = "act"
        s, rs = g.step(op)
        acted = acted or op == "act"
        steps.append(s)
        replies += rs
    # Replies to spare, so that a step taking more calls than scripted (a
    # repair of a reply scripted for another step) is answered rather than
    # refused (a refused repair is §18 O2): an object every format reads,
    # then one ReAct's analysis reads (it refuses extra keys), in turn, so
    # that a repair ends within two spare replies.
    spares = [{"json": SPARE}, {"json": SPARE_ANALYSIS}]
    if g.deliverables:
        # ReAct with deliverables reads an analysis only with them.
        fmts, listable = g.deliverables
        given = {f.lower(): None for f in fmts}
        spares.append({"json": dict(SPARE_ANALYSIS,
                                    intermediate_response_options=[given] if listable else given)})
    replies += spares * 12
    # A reply may reach a step other than the one it was scripted for, and
    # the reference's own structures (operate's without a format, ReAct's
    # analysis), a dict format and a parse that forces or fills read JSON
    # that is not an object as an empty one (§21 H10), and its request_fields fail on a
    # JSON list of anything but objects (§21 H16): where one is parsed, no
    # reply is such a text.
    if any(s["op"].startswith("ReAct") or "request_fields" in s["args"]
           or s["args"].get("response_format") == DICT_FORMAT or (
            s["op"] == "operate" and "response_format" not in s["args"]
            and (s["args"].get("actions") or s["args"].get("reason")
                 or s["args"].get("field_models"))) or (
            s["op"] == "parse" and s["args"].get("handle_unmatched") in ("fill", "force"))
           for s in steps):
        objects = [t for t in REPLY_TEXTS if t not in NOT_OBJECTS]
        replies = [{"text": rng.choice(objects)} if x.get("text") in NOT_OBJECTS else x
                   for x in replies]
    # Repairs of operate's structure (ReAct's rounds are operates) go to
    # the chat model in the reference and to the parse model here (§18
    # O1): a branch's own parse model is kept only where neither runs.
    if any(s["op"].startswith("ReAct") or (s["op"] == "operate" and "response_format" in s["args"])
           for s in steps):
        branch.pop("parse_model", None)
    d = {"about": f"random scenario {i} of seed {seed}", "branch": branch, "steps": steps,
         "replies": replies}
    if g.maybe(0.4):
        d["to_dict"] = [dict(m, key=f"m{k}") for k, m in enumerate(rng.sample(MODES, 2))]
    if rng.random() < ANTHROPIC_SHARE:
        on_anthropic(d, rng)
    with_reload(d, random.Random(seed * 7_919 + i))
    return d


# Pieces of text that YAML reads as something else, or writes quoted,
# escaped or folded: keywords and numbers, indicators, quotes, white space
# and line breaks, wide, combining, invisible and control characters, and
# words and lines past the emitter's width. U+0085, U+2028 and U+2029 are
# left out: PyYAML writes them across lines where ours escapes them (§15 M6).
AWKWARD = [
    "yes", "No", "null", "~", "true", "1e3", "0x1F", ".inf", "-.5", "1_000", "0o17",
    "12:30", "2024-01-01", "- a", ": x", "a: b", " #c", "#c", "? k", "---", "...", "%YAML",
    "@at", "`tick", "!tag", "&anc", "*ali", "|", ">", "'", '"', "\\", "\t", "\n", "\n\n",
    " \n", "\r\n", "  ", " ", "é", "日本", "🙂", "e\u0301", "\u00a0", "\ufeff", "\u200b",
    "\u202e", "\x07", "\x1b[0m", "\x7f", "\x00", "{", "}", "[", "]", ", ", "=",
    "a" * 90, "word " * 20, "x",
]
# Numbers whose text differs from language to language (a sign of zero,
# exponents, integers past 2^53).
AWKWARD_NUMBERS = [-0.0, 1e16, 1.5e-7, 0.1, 123456789012345678, -1, 2.0, 1e300]


def with_awkward_text(d, rng):
    """About one conversation in five gets text the YAML rendering must
    write as PyYAML does: in a turn's instruction, guidance or context, in
    the text `interpret` rewrites, in the system message, or in what `echo`
    is asked to return (drawn after everything else, as `with_reload`)."""
    if rng.random() >= 0.2:
        return

    def text():
        return "".join(rng.choice(AWKWARD) for _ in range(rng.randint(1, 5)))

    def field():
        # A blank instruction or guidance renders as nothing, which the
        # reference sends as "{}" and ours refuses (§15 M4).
        t = text()
        return t if t.strip() else t + "x"

    def value(depth=0):
        k = rng.random()
        if depth < 2 and k < 0.25:
            return {text(): value(depth + 1) for _ in range(rng.randint(1, 3))}
        if depth < 2 and k < 0.4:
            return [value(depth + 1) for _ in range(rng.randint(1, 3))]
        if k < 0.55:
            return rng.choice(AWKWARD_NUMBERS)
        if k < 0.6:
            return rng.choice([True, False, None])
        return text()

    if rng.random() < 0.3 and "system" in d["branch"]:
        d["branch"]["system"] = field()
        # Granting capabilities again strips the prompt's leading white
        # space in the reference; ours keeps it (§17, Capabilities).
        if any(s["op"] == "grant_capabilities" for s in d["steps"]):
            d["branch"]["system"] = d["branch"]["system"].lstrip() or "x"

    used = set()

    def echoed(v):
        # What `echo` answers is rendered in the next turn's context. No
        # two calls alike: the reference runs a repeated call once (§21 H7).
        if isinstance(v, dict):
            if v.get("function", v.get("name")) == "echo" and isinstance(
                    v.get("arguments"), dict) and rng.random() < 0.5:
                t = text()
                while t in used:
                    t = text()
                used.add(t)
                v["arguments"]["text"] = t
            for x in v.values():
                echoed(x)
        elif isinstance(v, list):
            for x in v:
                echoed(x)

    echoed(d["replies"])
    echoed([s["args"] for s in d["steps"]])
    for s in d["steps"]:
        a = s["args"]
        if s["op"] == "interpret" and rng.random() < 0.6:
            a["text"] = field()
            continue
        if s["op"] not in ("chat", "communicate", "operate", "ReAct", "ReActStream", "run") \
                or not isinstance(a.get("instruction"), str) or rng.random() < 0.4:
            continue
        k = rng.random()
        if k < 0.4:
            a["instruction"] = field()
        elif k < 0.8:
            a["context"] = value()
        elif isinstance(a.get("guidance", ""), str):
            a["guidance"] = field()


def with_reload(d, rng):
    """About one conversation in four writes its branch with to_dict, reads
    it back with from_dict and goes on with the restored branch (`reload`),
    drawn last so that the rest of a scenario's draws stay as they were.
    Models and tools are given again (neither is written with its key or
    code). A tool `connect` made is not one of them: a reload comes before
    any connect."""
    if rng.random() >= 0.25:
        return
    steps, branch = d["steps"], d["branch"]
    last = next((k for k, s in enumerate(steps) if s["op"] == "connect"), len(steps))
    args = {"model": branch.get("model", "gpt-4.1-mini")}
    if "parse_model" in branch:
        args["parse_model"] = branch["parse_model"]
    if branch.get("tools"):
        args["tools"] = branch["tools"]
    steps.insert(rng.randint(0, last), {"op": "reload", "args": args})


# About one conversation in six runs on Anthropic Messages, drawn after
# everything else so that the rest of a scenario's draws stay as they were.
ANTHROPIC_SHARE = 0.16
CLAUDE = {"gpt-4.1-mini": "claude-sonnet-4-5", "gpt-4o": "claude-opus-4-1",
          "gpt-4o-mini": "claude-haiku-4-5", "gpt-4.1-nano": "claude-3-5-haiku-latest"}


def on_anthropic(d, rng):
    """Moves a conversation to Anthropic Messages: the branch's model, and
    most per-call models (some stay on OpenAI, so that a conversation
    switches protocols). Images are left out: the reference sends
    OpenAI's image parts as they are, which the API refuses, and ours
    sends image blocks (compat.md §25). A temperature of 1.2 stays: both
    sides refuse it before sending, as out of Anthropic's range."""
    d["about"] += " on Anthropic Messages"
    branch = d["branch"]
    branch["model"] = "anthropic/" + CLAUDE["gpt-4.1-mini"]
    if "parse_model" in branch:
        branch["parse_model"] = "anthropic/" + CLAUDE[branch["parse_model"]]

    def move(v):
        if isinstance(v, dict):
            if "$model" in v and rng.random() < 0.8:
                return {"$model": "anthropic/" + CLAUDE[v["$model"]]}
            return {k: move(x) for k, x in v.items()}
        if isinstance(v, list):
            return [move(x) for x in v]
        return v

    for s in d["steps"]:
        s["args"] = move({k: v for k, v in s["args"].items()
                          if k not in ("images", "image_detail")})
        # A temperature above Anthropic's 1 is refused before the call,
        # which the reference makes after clearing the messages (§18 O2).
        if s["args"].get("temperature", 0) > 1:
            s["args"].pop("clear_messages", None)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        if f.endswith(".json"):
            os.remove(os.path.join(a.out, f))
    for i in range(a.count):
        with open(os.path.join(a.out, f"random_{a.seed}_{i:03}.json"), "w") as f:
            json.dump(scenario(a.seed, i), f, indent=2, ensure_ascii=False)
            f.write("\n")
    print(f"{a.count} random scenarios of seed {a.seed} written to {a.out}")


if __name__ == "__main__":
    main()
