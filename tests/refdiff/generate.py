"""Writes tests/refdiff/scenarios/*.json: the verb × option matrix of the
differential harness. The scenario files are the data (committed); this
script only saves typing them one by one. Hand-written scenarios live in
the same folder under names this script does not produce; it never
deletes a file.

    python3 tests/refdiff/generate.py
"""

import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios")
SCENARIOS = {}


def sc(name, about, steps, replies=(), branch=None, to_dict=None, expect=None, cli=None):
    d = {"about": about, "branch": branch or {"system": "You are terse."}, "steps": steps,
         "replies": list(replies)}
    if cli:
        d["cli"] = cli
    if to_dict:
        d["to_dict"] = to_dict
    if expect:
        d["expect_deviation"] = expect
    assert name not in SCENARIOS, name
    SCENARIOS[name] = d


def step(op, **args):
    return {"op": op, "args": args}


F = lambda n: {"$format": n}  # noqa: E731
M = lambda n: {"$model": n}  # noqa: E731
ANSWER = {"json": {"answer": "4", "confidence": 0.9}}
PLAN = {"json": {"goal": "ship", "steps": ["build", "test"], "priority": 2, "notes": "soon"}}
PERSON = {"json": {"name": "Ada", "age": 36, "verified": True}}
# A 1×1 PNG image in base64.
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5"
       "ErkJggg==")


def call(fn, **args):
    return {"function": fn, "arguments": args}


# ---------------------------------------------------------------- chat
CONTEXTS = {"str": "The user is in Paris.", "list": ["Europe", "2024"],
            "dict": {"city": "Paris", "n": 3}, "nested": [{"a": [1, 2]}, "x"]}
sc("chat_plain", "chat: one call, nothing recorded",
   [step("chat", instruction="Say hello")], [{"text": "Hello!"}])
sc("chat_guidance", "chat with guidance",
   [step("chat", instruction="Say hello", guidance="One word.")], [{"text": "Hi"}])
for k, v in CONTEXTS.items():
    sc(f"chat_context_{k}", f"chat with a {k} context",
       [step("chat", instruction="Where am I?", context=v)], [{"text": "Paris"}])
sc("chat_and_record", "chat_and_record records the turn",
   [{"op": "chat", "args": {"instruction": "Remember this", "record": True}}],
   [{"text": "Noted."}])
sc("chat_response_format", "chat with a response format rendered into the prompt",
   [step("chat", instruction="2+2?", response_format=F("Answer"))], [ANSWER])
sc("chat_temperature", "chat with a payload keyword",
   [step("chat", instruction="Be creative", temperature=0.7)], [{"text": "Sky"}])
sc("chat_token_usage", "chat with the token-usage note",
   [step("chat", instruction="Count", include_token_usage_to_model=True)], [{"text": "ok"}])
sc("chat_no_system", "chat on a branch without a system message",
   [step("chat", instruction="Hello")], [{"text": "Hi"}], branch={})
sc("chat_user_sender", "chat on a branch with a user",
   [step("chat", instruction="Hello")], [{"text": "Hi"}], branch={"system": "S", "user": "alice"})
sc("chat_chat_model_override", "chat with another chat model for one call",
   [step("chat", instruction="Hello", imodel=M("gpt-4o"))], [{"text": "Hi"}])
sc("chat_provider_error", "chat: the provider answers 400",
   [step("chat", instruction="Hello")], [{"status": 400, "error": "bad request"}])

# ---------------------------------------------------------------- communicate
sc("communicate_plain", "communicate, recorded",
   [step("communicate", instruction="What is the capital of France?")], [{"text": "Paris."}])
sc("communicate_guidance_context", "communicate with guidance and context",
   [step("communicate", instruction="Capital of France?", guidance="One sentence.",
         context=["Europe"])], [{"text": "Paris is the capital."}],
   branch={"system": "You answer geography questions.", "user": "alice"})
for k, v in CONTEXTS.items():
    sc(f"communicate_context_{k}", f"communicate with a {k} context",
       [step("communicate", instruction="Use the context", context=v)], [{"text": "ok"}])
sc("communicate_no_system", "communicate without a system message",
   [step("communicate", instruction="Hi")], [{"text": "Hello"}], branch={})
sc("communicate_lion_system", "communicate with the Lion system message",
   [step("communicate", instruction="Hi")], [{"text": "Hello"}],
   branch={"system": "Be kind.", "use_lion_system_message": True})
sc("communicate_two_turns", "two communicate turns: history is sent",
   [step("communicate", instruction="First?"), step("communicate", instruction="Second?")],
   [{"text": "One"}, {"text": "Two"}])
sc("communicate_three_turns_context", "three turns, context on the second",
   [step("communicate", instruction="A"), step("communicate", instruction="B", context={"k": 1}),
    step("communicate", instruction="C")], [{"text": "a"}, {"text": "b"}, {"text": "c"}])
for fmt, reply in (("Answer", ANSWER), ("Plan", PLAN), ("Person", PERSON),
                   ("Summary", {"json": {"title": "T", "summary": "S."}})):
    sc(f"communicate_format_{fmt.lower()}", f"communicate with response_format={fmt}",
       [step("communicate", instruction="Answer in the format", response_format=F(fmt))], [reply])
sc("communicate_format_fenced", "the structured reply inside a json code fence",
   [step("communicate", instruction="2+2?", response_format=F("Answer"))],
   [{"text": "Sure:\n```json\n{\"answer\": \"4\", \"confidence\": 0.5}\n```"}])
sc("communicate_format_fuzzy_keys", "structured reply with near-miss keys",
   [step("communicate", instruction="2+2?", response_format=F("Answer"))],
   [{"json": {"Answer": "4", "confidense": 0.5}}])
sc("communicate_format_plan_defaults", "Plan reply omitting fields with defaults",
   [step("communicate", instruction="Plan it", response_format=F("Plan"))],
   [{"json": {"goal": "ship", "steps": ["a"]}}])
sc("communicate_format_person_coerce", "Person reply with a numeric string age",
   [step("communicate", instruction="Who?", response_format=F("Person"))],
   [{"json": {"name": "Ada", "age": "36"}}])
sc("communicate_format_repair", "unparseable reply repaired by the parse model",
   [step("communicate", instruction="2+2?", response_format=F("Answer"))],
   [{"text": "four, I am quite sure"}, ANSWER], branch={"system": "S", "parse_model": "gpt-4.1-nano"})
sc("communicate_format_repair_fails", "a repair call fails at the provider",
   [step("communicate", instruction="2+2?", response_format=F("Answer"), num_parse_retries=1)],
   [{"text": "four"}, {"text": "still four"}], expect={"section": "§18 O2"})
sc("communicate_format_repair_exhausted", "reply never parses (one retry)",
   [step("communicate", instruction="2+2?", response_format=F("Answer"), num_parse_retries=1)],
   [{"text": "four"}] * 3)
sc("communicate_skip_validation", "skip_validation returns the raw text",
   [step("communicate", instruction="2+2?", response_format=F("Answer"), skip_validation=True)],
   [ANSWER])
sc("communicate_request_fields", "request_fields",
   [step("communicate", instruction="Name a novel", request_fields=["title", "year"])],
   [{"json": {"title": "Emma", "year": 1815}}])
sc("communicate_request_fields_not_objects",
   "request_fields from a number, a list of objects, text, then a list of numbers",
   [step("communicate", instruction=f"q{i}", request_fields=["title", "year"]) for i in range(5)],
   [{"text": "42"}, {"text": '[{"title": "x"}, {"year": 2}]'}, {"text": '[{"title": "x", "year": 1}]'},
    {"text": "hello"}, {"text": "[1, 2, 3]"}],
   expect={"section": "§21 H16", "paths": ["/steps/4"]})
sc("communicate_request_fields_partial", "request_fields, one missing",
   [step("communicate", instruction="Name a novel", request_fields=["title", "author"])],
   [{"json": {"title": "Emma"}}])
sc("operate_clear_messages", "operate: clear_messages with a format, then with actions",
   [step("operate", instruction="A"), step("operate", instruction="B", clear_messages=True,
                                           response_format=F("Answer")),
    step("operate", instruction="Multiply 6 by 7", clear_messages=True, actions=True)],
   [{"text": "a"}, ANSWER,
    {"json": {"action_required": True, "action_requests": [call("multiply", a=6, b=7)]}}],
   branch={"system": "You are terse.", "tools": ["multiply"]})
sc("communicate_clear_messages", "clear_messages before the turn",
   [step("communicate", instruction="A"), step("communicate", instruction="B", clear_messages=True)],
   [{"text": "a"}, {"text": "b"}])
sc("communicate_token_usage", "include_token_usage_to_model",
   [step("communicate", instruction="Hi", include_token_usage_to_model=True)], [{"text": "ok"}])
sc("communicate_chat_model_override", "a chat model for one turn",
   [step("communicate", instruction="Hi", chat_model=M("gpt-4o"))], [{"text": "ok"}])
sc("communicate_parse_model_arg", "a parse model argument used for the repair",
   [step("communicate", instruction="2+2?", response_format=F("Answer"), parse_model=M("gpt-4o-mini"))],
   [{"text": "four"}, ANSWER])
sc("communicate_provider_error", "the provider answers 400: nothing recorded",
   [step("communicate", instruction="Hi")], [{"status": 400, "error": "bad request"}])
sc("communicate_error_then_turn", "a failed turn, then a good one",
   [step("communicate", instruction="Hi"), step("communicate", instruction="Again")],
   [{"status": 404, "error": "no such model"}, {"text": "ok"}])
sc("communicate_retry_500", "a 500 is retried",
   [step("communicate", instruction="Hi")], [{"status": 500, "error": "boom"}, {"text": "ok"}])
sc("communicate_retry_429", "a 429 is retried",
   [step("communicate", instruction="Hi")], [{"status": 429, "error": "slow down"}, {"text": "ok"}])
sc("communicate_tool_calls_reply", "a native tool-calls reply to communicate",
   [step("communicate", instruction="Multiply")],
   [{"tool_calls": [{"id": "call_1", "name": "multiply", "arguments": {"a": 2, "b": 3}}]}],
   branch={"system": "S", "tools": ["multiply"]})
sc("communicate_unicode", "non-ASCII text both ways",
   [step("communicate", instruction="Résumé — ça va? 日本")], [{"text": "Très bien — 元気"}])
sc("communicate_multiline", "multi-line instruction and reply",
   [step("communicate", instruction="Line one\nLine two\n\n- item")], [{"text": "A\nB\n\nC"}])

# ---------------------------------------------------------------- operate
T2 = {"system": "Use tools when helpful.", "tools": ["multiply", "lookup_capital"]}
BROKEN = {"text": "```json\n{\"a\": \n```"}
sc("operate_failure_policy", "handle_validation applies to a model format only: operate's own "
   "structure (reason, field models) and a dict format that never parse give the text",
   [step("operate", instruction="Why?", reason=True, handle_validation="return_none"),
    step("operate", instruction="Note?", handle_validation="raise",
         field_models=[{"name": "remark", "type": "string"}]),
    step("operate", instruction="Dict?", response_format={"a": "x"},
         handle_validation="return_none"),
    step("operate", instruction="Model?", response_format=F("Answer"),
         handle_validation="return_none")],
   [BROKEN] * 24)
sc("operate_blank_context", "a guidance or context of white space only: none for operate (the "
   "reference's Instruct nulls blank text), kept by communicate",
   [step("operate", instruction="Hi", guidance="  ", context=" \n"),
    step("communicate", instruction="Again", guidance="  ", context=" \n"),
    step("operate", instruction="Once more", context=[" ", "a"])],
   [{"text": "one"}, {"text": "two"}, {"text": "three"}])
sc("operate_format", "operate with a response format",
   [step("operate", instruction="2+2?", response_format=F("Answer"))], [ANSWER])
sc("operate_no_format", "operate without any structure: the text",
   [step("operate", instruction="Hi")], [{"text": "Hello"}])
sc("operate_reason", "operate with reason",
   [step("operate", instruction="2+2?", response_format=F("Answer"), reason=True)],
   [{"json": {"answer": "4", "confidence": 0.9,
              "reason": {"title": "math", "content": "2+2", "confidence_score": 0.99}}}])
sc("operate_reason_missing", "operate with reason, the reply omits reason",
   [step("operate", instruction="2+2?", response_format=F("Answer"), reason=True)], [ANSWER])
sc("operate_reason_only", "operate with reason and no format",
   [step("operate", instruction="Think", reason=True)],
   [{"json": {"reason": {"title": "t", "content": "c", "confidence_score": 0.5}}}])
sc("operate_actions_one", "operate runs one tool",
   [step("operate", instruction="6*7?", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "42", "confidence": 0.8, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7)]}}], branch=T2)
sc("operate_actions_two", "operate runs two tools",
   [step("operate", instruction="6*7 and capital of France", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "w", "confidence": 0.6, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7), call("lookup_capital", country="France")]}}],
   branch=T2)
sc("operate_actions_sequential", "action_strategy sequential",
   [step("operate", instruction="go", response_format=F("Answer"), actions=True,
         action_strategy="sequential")],
   [{"json": {"answer": "w", "confidence": 0.6, "action_required": True,
              "action_requests": [call("multiply", a=2, b=3), call("lookup_capital", country="Japan")]}}],
   branch=T2)
sc("operate_actions_missing_fields", "actions offered, the reply omits the action fields",
   [step("operate", instruction="2+2?", response_format=F("Answer"), actions=True)], [ANSWER],
   branch=T2)
sc("operate_actions_not_required", "action_required false with requests: nothing runs",
   [step("operate", instruction="go", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "x", "confidence": 0.1, "action_required": False,
              "action_requests": [call("multiply", a=1, b=2)]}}], branch=T2)
sc("operate_actions_empty", "action_required true, no requests",
   [step("operate", instruction="go", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "x", "confidence": 0.1, "action_required": True, "action_requests": []}}],
   branch=T2)
sc("operate_actions_no_format", "actions without a response format",
   [step("operate", instruction="6*7?", actions=True)],
   [{"json": {"action_required": True, "action_requests": [call("multiply", a=6, b=7)]}}],
   branch=T2)
sc("operate_actions_reason", "actions and reason",
   [step("operate", instruction="6*7?", response_format=F("Answer"), actions=True, reason=True)],
   [{"json": {"answer": "42", "confidence": 0.9,
              "reason": {"title": "r", "content": "mult", "confidence_score": 0.9},
              "action_required": True, "action_requests": [call("multiply", a=6, b=7)]}}],
   branch=T2)
sc("operate_invoke_actions_false", "actions declared but not invoked",
   [step("operate", instruction="Do not call", response_format=F("Answer"), actions=True,
         invoke_actions=False)], [ANSWER], branch=T2)
sc("operate_tool_fails", "a tool that raises",
   [step("operate", instruction="fail", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "x", "confidence": 0.1, "action_required": True,
              "action_requests": [call("fail_tool", reason="test")]}}],
   branch={"system": "S", "tools": ["fail_tool"]})
sc("operate_unknown_tool", "the model asks for a tool that does not exist",
   [step("operate", instruction="go", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "x", "confidence": 0.1, "action_required": True,
              "action_requests": [call("nope", x=1)]}}], branch=T2)
sc("operate_tools_subset", "tools= limits the offered tools",
   [step("operate", instruction="6*7?", response_format=F("Answer"), actions=True, tools=["multiply"])],
   [{"json": {"answer": "42", "confidence": 0.8, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7)]}}], branch=T2)
sc("operate_echo_tool", "a tool returning an object",
   [step("operate", instruction="echo", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "x", "confidence": 0.1, "action_required": True,
              "action_requests": [call("echo", text="hi")]}}], branch={"system": "S", "tools": ["echo"]})
for fmt, reply in (("Plan", PLAN), ("Person", PERSON)):
    sc(f"operate_format_{fmt.lower()}", f"operate with response_format={fmt}",
       [step("operate", instruction="Fill it", response_format=F(fmt))], [reply])
sc("operate_plan_partial", "Plan reply omitting defaulted fields",
   [step("operate", instruction="Plan", response_format=F("Plan"))],
   [{"json": {"goal": "g", "steps": []}}])
sc("operate_skip_validation", "skip_validation",
   [step("operate", instruction="2+2?", response_format=F("Answer"), skip_validation=True)], [ANSWER])
for hv in ("return_value", "return_none", "raise"):
    sc(f"operate_unparseable_{hv}", f"unparseable reply, handle_validation={hv}",
       [step("operate", instruction="2+2?", response_format=F("Answer"), handle_validation=hv)],
       [{"text": "four"}] * 8)
sc("operate_guidance_context", "operate with guidance and context",
   [step("operate", instruction="2+2?", guidance="Be exact.", context={"base": 10},
         response_format=F("Answer"))], [ANSWER])
sc("operate_token_usage", "operate with the token-usage note",
   [step("operate", instruction="2+2?", response_format=F("Answer"),
         include_token_usage_to_model=True)], [ANSWER])
sc("operate_twice", "two operate turns",
   [step("operate", instruction="2+2?", response_format=F("Answer")),
    step("operate", instruction="3+3?", response_format=F("Answer"))],
   [ANSWER, {"json": {"answer": "6", "confidence": 1.0}}])
sc("operate_after_actions_then_communicate", "operate with a tool, then communicate",
   [step("operate", instruction="6*7?", response_format=F("Answer"), actions=True),
    step("communicate", instruction="And now?")],
   [{"json": {"answer": "42", "confidence": 0.8, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7)]}}, {"text": "Done."}], branch=T2)
sc("operate_native_tool_calls_reply", "a native tool-calls reply to operate",
   [step("operate", instruction="6*7?", response_format=F("Answer"), actions=True)],
   [{"tool_calls": [{"id": "c1", "name": "multiply", "arguments": {"a": 6, "b": 7}}]}]
   + [{"text": "x"}] * 7, branch=T2)
sc("operate_provider_error", "operate: the provider answers 400",
   [step("operate", instruction="2+2?", response_format=F("Answer"))],
   [{"status": 400, "error": "bad"}])
sc("operate_chat_model_override", "operate with a chat model for one turn",
   [step("operate", instruction="2+2?", response_format=F("Answer"), chat_model=M("gpt-4o"))], [ANSWER])

# ---------------------------------------------------------------- parse
P = {"system": "S"}
sc("parse_valid", "parse a JSON text",
   [step("parse", text='{"answer": "4", "confidence": 0.5}', response_format=F("Answer"))], branch=P)
sc("parse_fenced", "parse a fenced JSON text",
   [step("parse", text='Here:\n```json\n{"answer": "4", "confidence": 0.5}\n```',
         response_format=F("Answer"))], branch=P)
sc("parse_fuzzy", "parse with near-miss keys",
   [step("parse", text='{"Answer": "4", "Confidence": 0.5}', response_format=F("Answer"))], branch=P)
sc("parse_missing_field", "parse with a missing required field (force fills)",
   [step("parse", text='{"answer": "4"}', response_format=F("Answer"))], [ANSWER], branch=P)
sc("parse_extra_key", "parse drops an undeclared key",
   [step("parse", text='{"answer": "4", "confidence": 0.5, "extra": 1}', response_format=F("Answer"))],
   branch=P)
for hu in ("ignore", "remove", "fill", "force"):
    sc(f"parse_unmatched_{hu}", f"handle_unmatched={hu}",
       [step("parse", text='{"answer": "4", "zzz": 1}', response_format=F("Answer"),
             handle_unmatched=hu)], [ANSWER], branch=P)
sc("parse_repair", "unparseable text: the parse model reformats it",
   [step("parse", text="the answer is four", response_format=F("Answer"))], [ANSWER], branch=P)
sc("parse_repair_plan", "Plan repair request",
   [step("parse", text="ship it: build then test", response_format=F("Plan"))], [PLAN], branch=P)
sc("parse_repair_fails_return_none", "repair never parses, return_none",
   [step("parse", text="nope", response_format=F("Answer"), handle_validation="return_none",
         max_retries=1)], [{"text": "nope"}, {"text": "nope"}], branch=P)
sc("parse_repair_fails_raise", "repair never parses, raise",
   [step("parse", text="nope", response_format=F("Answer"), handle_validation="raise",
         max_retries=1)], [{"text": "nope"}, {"text": "nope"}], branch=P)
sc("parse_repair_fails_value", "repair never parses, return_value",
   [step("parse", text="nope", response_format=F("Answer"), max_retries=1)],
   [{"text": "nope"}, {"text": "nope"}], branch=P)
sc("parse_person_coerce", "parse coerces a numeric string",
   [step("parse", text='{"name": "Ada", "age": "36"}', response_format=F("Person"))], [PERSON],
   branch=P)
sc("parse_strict_missing", "strict parse with a missing field",
   [step("parse", text='{"answer": "4"}', response_format=F("Answer"), strict=True,
         handle_unmatched="ignore", max_retries=1)], [ANSWER], branch=P)
sc("parse_fill_value", "fill gives a missing field the fill value and keeps an unknown key",
   [step("parse", text='{"answer": "4", "zzz": 1}', response_format=F("Answer"),
         handle_unmatched="fill", fill_value=0.5)], branch=P)
sc("parse_fill_mapping", "a field's own fill comes before the fill value; others are ignored",
   [step("parse", text='{"answer": "4"}', response_format=F("Answer"), handle_unmatched="force",
         fill_value=0.5, fill_mapping={"confidence": 0.7, "other": 1})], branch=P)
sc("parse_fill_mapping_given", "a field the text gives keeps its value",
   [step("parse", text='{"answer": "4", "confidence": 0.1}', response_format=F("Answer"),
         handle_unmatched="fill", fill_mapping={"confidence": 0.7, "answer": "z"})], branch=P)
sc("parse_no_fuzzy_exact", "fuzzy_match off, exact keys",
   [step("parse", text='{"answer": "4", "confidence": 0.9}', response_format=F("Answer"),
         fuzzy_match=False)], branch=P)
sc("parse_no_fuzzy_fill", "fuzzy_match off: the near miss is dropped, the policy fills",
   [step("parse", text='{"answer": "4", "confidnce": 0.9}', response_format=F("Answer"),
         fuzzy_match=False, fill_value=0.5)], branch=P)
sc("parse_no_fuzzy_raise", "fuzzy_match off: raise refuses the near miss, then a repair",
   [step("parse", text='{"answr": "4", "confidence": 0.9}', response_format=F("Answer"),
         fuzzy_match=False, handle_unmatched="raise", max_retries=1)], [ANSWER], branch=P)
sc("parse_strict_filled", "strict: a filled field is still missing, so a repair",
   [step("parse", text='{"answer": "4"}', response_format=F("Answer"), handle_unmatched="fill",
         fill_value=0.5, strict=True, max_retries=1)], [ANSWER], branch=P)
sc("parse_fuzzy_fill_typed", "fuzzy keys, a fill of the wrong type, then repairs",
   [step("parse", text='{"nme": "Bo", "extra": 3}', response_format=F("Person"),
         handle_unmatched="fill", fill_value=False, fill_mapping={"age": 9})],
   [PERSON] * 4, branch=P)
for algo in ("levenshtein", "sequence_matcher", "hamming", "cosine", "jaro_winkler"):
    sc(f"parse_similarity_{algo}", f"keys matched by {algo}",
       [step("parse", text='{"answr": "4", "confidense": 0.9}', response_format=F("Answer"),
             similarity_algo=algo, similarity_threshold=0.7, max_retries=1),
        step("parse", text='{"nmae": "Ada", "aeg": 3, "verifed": true}',
             response_format=F("Person"), similarity_algo=algo, similarity_threshold=0.5,
             max_retries=1)],
       [ANSWER, PERSON, ANSWER, PERSON], branch=P)
sc("parse_similarity_threshold_zero", "a threshold of 0 matches any key to a field",
   [step("parse", text='{"xy": "4", "confidence": 0.9}', response_format=F("Answer"),
         similarity_algo="hamming", similarity_threshold=0.0)], branch=P)
sc("parse_similarity_threshold_invalid", "a threshold past 1 is refused before any call",
   [step("parse", text='{"answer": "4", "confidence": 0.9}', response_format=F("Answer"),
         similarity_threshold=1.5)], [ANSWER] * 4, branch=P,
   expect={"section": "§21 H14", "paths": ["/requests", "/steps/0(parse)", "/to_dict"]})
# pydantic's lax mode, which the reference validates with: what it converts, and what
# it refuses (then a repair).
for name, text in [
        ("parse_lax_words", '{"name": "Ada", "age": "1_000", "verified": "on"}'),
        ("parse_lax_numbers", '{"name": "Ada", "age": true, "verified": 1}'),
        ("parse_lax_floats", '{"name": "Ada", "age": "36.0", "verified": 0.0}'),
        ("parse_lax_refused", '{"name": "Ada", "age": " 36 ", "verified": " yes"}')]:
    sc(name, f"parse converts as pydantic's lax mode: {text}",
       [step("parse", text=text, response_format=F("Person"), max_retries=1)], [PERSON],
       branch=P)
sc("parse_lax_fill", "a fill value of 0 for a boolean field is false",
   [step("parse", text='{"name": "Paris", "age": 0}', response_format=F("Person"),
         fill_value=0)], branch=P)
sc("parse_lax_confidence", "a number from an exponent text",
   [step("parse", text='{"answer": "4", "confidence": " 1e-1 "}', response_format=F("Answer"))],
   branch=P)

# ---------------------------------------------------------------- interpret
sc("interpret_default", "interpret with defaults",
   [step("interpret", text="gimme primes")], [{"text": "List prime numbers."}])
sc("interpret_domain_style", "interpret with domain and style",
   [step("interpret", text="gimme primes >10", domain="math", style="precise")],
   [{"text": "List the primes above 10."}])
sc("interpret_sample", "interpret with a writing sample",
   [step("interpret", text="fix my essay", sample_writing="Concise, formal prose.")],
   [{"text": "Edit the essay."}])
sc("interpret_temperature", "interpret with a temperature",
   [step("interpret", text="plan a trip", temperature=0.5)], [{"text": "Plan a trip."}])
sc("interpret_model", "interpret with a model of its own, then the branch's",
   [step("interpret", text="plan a trip", interpret_model=M("gpt-4o")),
    step("interpret", text="plan a trip")], [{"text": "Plan a trip."}, {"text": "Plan it."}])

# ---------------------------------------------------------------- act
A = {"system": "S", "tools": ["multiply", "add", "lookup_capital", "fail_tool"]}
sc("act_single", "act with one request",
   [step("act", action_request=call("multiply", a=3, b=4))], branch=A)
sc("act_list", "act with two requests",
   [step("act", action_request=[call("multiply", a=3, b=4), call("add", a=1, b=2)])], branch=A)
sc("act_sequential", "act sequentially",
   [step("act", action_request=[call("add", a=1, b=2), call("lookup_capital", country="Japan")],
         strategy="sequential")], branch=A)
sc("act_failing", "act with a failing tool",
   [step("act", action_request=call("fail_tool", reason="x"))], branch=A)
sc("act_failing_not_suppressed", "act with a failing tool, errors not suppressed",
   [step("act", action_request=call("fail_tool", reason="x"), suppress_errors=False)], branch=A)
sc("act_unknown", "act with an unknown tool",
   [step("act", action_request=call("does_not_exist"))], branch=A)
sc("act_string_arguments", "act with arguments as a JSON text",
   [step("act", action_request={"function": "add", "arguments": '{"a": 5, "b": 6}'})], branch=A,
   expect={"section": "§21 H4"})
sc("act_argument_checks", "act with arguments the tool's schema refuses: a required key "
   "missing fails on both sides (in other words), a value of the wrong type only here (the "
   "reference checks keys only and runs the tool, compat.md §16 A2)",
   [step("act", action_request=[call("multiply", a=6), call("lookup_capital", country=5)])],
   branch=A, expect={"section": "§16 A2", "paths": [
       "/steps/0", "/to_dict/json/messages/collections/", "/to_dict/db/messages/collections/",
       "/to_dict/json/logs/collections/", "/to_dict/db/logs/collections/"]})
sc("act_then_communicate", "act, then a turn that sees its result",
   [step("act", action_request=call("multiply", a=3, b=4)), step("communicate", instruction="Result?")],
   [{"text": "12"}], branch=A, expect={"section": "§15 M3"})

# ---------------------------------------------------------------- ReAct
R = {"system": "You reason step by step.", "tools": ["multiply"]}


def analysis(text, ext, reqs=(), **extra):
    d = {"analysis": text, "extension_needed": ext, "action_required": bool(reqs),
         "action_requests": list(reqs)}
    d.update(extra)
    return {"json": d}


REASON = {"title": "plan", "content": "go", "confidence_score": 0.9}
for op in ("ReAct", "ReActStream"):
    p = op.lower()
    sc(f"{p}_one_round", f"{op}: one analysis, no extension, then the answer",
       [step(op, instruction="What is 2+2?")],
       [analysis("Simple.", False, reason=REASON), {"json": {"answer": "4"}}], branch=R)
    sc(f"{p}_two_rounds_tool", f"{op}: a tool round, then done",
       [step(op, instruction="What is 6 times 7?", max_extensions=2)],
       [analysis("Need product.", True, [call("multiply", a=6, b=7)], action_strategy="concurrent",
                 reason=REASON),
        analysis("42, done.", False, reason=REASON), {"json": {"answer": "42"}}], branch=R)
    sc(f"{p}_max_extensions_reached", f"{op}: extensions exhausted",
       [step(op, instruction="Keep going", max_extensions=1)],
       [analysis("more", True, reason=REASON), analysis("more", True, reason=REASON),
        {"json": {"answer": "stopped"}}], branch=R)
    sc(f"{p}_extension_not_allowed", f"{op}: extension_allowed false",
       [step(op, instruction="Try", extension_allowed=False)],
       [analysis("more", True, reason=REASON), {"json": {"answer": "a"}}], branch=R)
    sc(f"{p}_missing_fields", f"{op}: analyses omit optional fields",
       [step(op, instruction="Go", max_extensions=2)],
       [{"json": {"analysis": "a", "extension_needed": True}},
        {"json": {"analysis": "b", "extension_needed": False}}, {"json": {"answer": "x"}}], branch=R)
    sc(f"{p}_context", f"{op}: context and guidance given once",
       [step(op, instruction="Use it", context={"fact": "sky is blue"}, guidance="Be brief.",
             max_extensions=2)],
       [analysis("a", True, reason=REASON), analysis("b", False, reason=REASON),
        {"json": {"answer": "blue"}}], branch=R)
    sc(f"{p}_response_format", f"{op}: a final response format",
       [step(op, instruction="2+2?", response_format=F("Answer"))],
       [analysis("easy", False, reason=REASON), ANSWER], branch=R)
    sc(f"{p}_response_format_extension", f"{op}: extension rounds with a final format",
       [step(op, instruction="2+2?", response_format=F("Answer"), max_extensions=2)],
       [analysis("a", True, reason=REASON), analysis("b", False, reason=REASON), ANSWER], branch=R)
    sc(f"{p}_reasoning_effort", f"{op}: reasoning_effort",
       [step(op, instruction="Think", reasoning_effort="high")],
       [analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}], branch=R)
    sc(f"{p}_no_tools", f"{op}: a branch without tools",
       [step(op, instruction="Think")],
       [{"json": {"analysis": "ok", "extension_needed": False, "reason": REASON}},
        {"json": {"answer": "x"}}],
       branch={"system": "Reason."})
    sc(f"{p}_token_usage_off", f"{op}: without the token-usage note",
       [step(op, instruction="Think", include_token_usage_to_model=False)],
       [analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}], branch=R)
    sc(f"{p}_provider_error", f"{op}: the provider fails in round two",
       [step(op, instruction="Go", max_extensions=2)],
       [analysis("a", True, reason=REASON), {"status": 400, "error": "bad"}], branch=R)
sc("react_return_analysis", "ReAct return_analysis",
   [step("ReAct", instruction="Go", return_analysis=True)],
   [analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}], branch=R,
   expect={"section": "§18 ReAct return_analysis", "paths": ["/steps/0(ReAct)"]})
sc("react_interpret_options", "ReAct: interpret's options, and the run's analysis model",
   [step("ReAct", instruction="gimme answer", interpret=True, interpret_domain="math",
         interpret_style="precise", interpret_sample="Formal prose.",
         interpret_kwargs={"temperature": 0.5}, analysis_model=M("gpt-4.1-nano"))],
   [{"text": "Give the answer."}, analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}],
   branch=R)
sc("react_interpret_model", "ReAct: interpret with a model of its own",
   [step("ReAct", instruction="gimme answer", interpret=True, interpret_model=M("gpt-4o"),
         analysis_model=M("gpt-4.1-nano"))],
   [{"text": "Give the answer."}, analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}],
   branch=R)
for op in ("ReAct", "ReActStream"):
    sc(f"{op.lower()}_images", f"{op}: the task's images go with its first round",
       [step(op, instruction="What is it?", images=[PNG], max_extensions=1)],
       [analysis("a", True, reason=REASON), analysis("b", False, reason=REASON),
        {"json": {"answer": "x"}}], branch=R,
       expect={"section": "§21 H13", "paths": [
           "/requests/0/messages/0/content", "/requests/1/messages/0/content",
           "/requests/2/messages/0/content", "/to_dict"]})
# between_rounds, a map of rounds done to the callback's text: after round 1 it injects a
# round (and shows the messages it sees), after round 2 its empty text leaves the extension
# prompt in place; the effort's prefix goes to that extension round only.
BETWEEN = {"1": "Look again ({messages} messages so far)", "2": ""}
for op in ("ReAct", "ReActStream"):
    sc(f"{op.lower()}_between_rounds", f"{op}: between_rounds injects, then leaves the prompt",
       [step(op, instruction="Think", reasoning_effort="high", max_extensions=3,
             between_rounds=BETWEEN)],
       [analysis("a1", True, reason=REASON), analysis("a2", True, reason=REASON),
        analysis("a3", False, reason=REASON), {"json": {"answer": "x"}}], branch=R,
       expect={"section": "§21 H12", "paths": ["/requests/1", "/requests/2", "/requests/3",
                                               "/to_dict"]} if op == "ReActStream" else None)
sc("react_interpret", "ReAct with interpret",
   [step("ReAct", instruction="gimme answer", interpret=True)],
   [{"text": "Give the answer."}, analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}],
   branch=R)

# Intermediate deliverables: one required object (a list of them when listable) with one
# required, nullable field per deliverable, each the deliverable's own model with its
# defaults filled when read.
GOAL = {"goal": "g", "steps": ["a"]}
for op in ("ReAct", "ReActStream"):
    sc(f"{op.lower()}_intermediate_options", f"{op}: an intermediate deliverable in each round",
       [step(op, instruction="Plan it", intermediate_response_options=F("Plan"),
             max_extensions=1, return_analysis=True)],
       [analysis("a1", True, intermediate_response_options={"plan": GOAL}),
        analysis("a2", False, intermediate_response_options={"plan": None}),
        {"json": {"answer": "x"}}], branch=R)
sc("react_intermediate_listable", "ReAct: two deliverables, listable, with a response format",
   [step("ReAct", instruction="Plan it", intermediate_response_options=[F("Plan"), F("Summary")],
         intermediate_listable=True, response_format=F("Answer"), return_analysis=True)],
   [{"json": {"analysis": "ok", "extension_needed": False, "intermediate_response_options": [
       {"plan": GOAL, "summary": None},
       {"plan": None, "summary": {"title": "t", "summary": "s"}}]}},
    ANSWER])
sc("react_intermediate_missing", "ReAct: the deliverables missing, empty, incomplete, then given",
   [step("ReAct", instruction="Sum it up", intermediate_response_options=F("Summary"),
         return_analysis=True)],
   [{"json": {"analysis": "ok", "extension_needed": False}},
    {"json": {"analysis": "ok", "extension_needed": False, "intermediate_response_options": {}}},
    {"json": {"analysis": "ok", "extension_needed": False,
              "intermediate_response_options": {"summary": {"title": "t"}}}},
    {"json": {"analysis": "ok", "extension_needed": False,
              "intermediate_response_options": {"summary": {"title": "t", "summary": "s"}}}},
    {"json": {"answer": "x"}}])
sc("react_intermediate_lax", "ReAct: deliverables whose fields pydantic's lax mode converts",
   [step("ReAct", instruction="Plan it", intermediate_response_options=F("Plan"),
         return_analysis=True),
    step("ReAct", instruction="Plan it", intermediate_response_options=F("Plan"),
         intermediate_listable=True, return_analysis=True)],
   [analysis("a", False, intermediate_response_options={"plan": dict(GOAL, priority="2")}),
    {"json": {"answer": "x"}},
    analysis("b", False, intermediate_response_options=[{"plan": dict(GOAL, priority=3.0)}]),
    {"json": {"answer": "y"}}], branch=R)
sc("react_intermediate_duplicate", "ReAct: two deliverables of one title refused before any call",
   [step("ReAct", instruction="Plan it", intermediate_response_options=[F("Plan"), F("Plan")]),
    step("ReAct", instruction="Plan it", intermediate_response_options=F("Plan"))],
   [analysis("a", False, intermediate_response_options={"plan": GOAL}), {"json": {"answer": "x"}}],
   branch=R)
# field_models: a required field, one with a default, a nullable list.
FIELDS = [{"name": "note", "type": "string", "description": "A note"},
          {"name": "count", "type": "integer", "default": 3},
          {"name": "tag_list", "type": "string", "listable": True, "nullable": True}]
sc("operate_field_models", "operate with field models alone; the default unfilled, then repaired",
   [step("operate", instruction="Answer", field_models=FIELDS)],
   [{"json": {"note": "n", "tag_list": ["a"]}},
    {"json": {"note": "n", "count": 2, "tag_list": None}}])
sc("operate_field_models_format", "operate with field models beside a response format",
   [step("operate", instruction="Sum up", response_format=F("Summary"), field_models=FIELDS)],
   [{"json": {"title": "t", "summary": "s", "note": "n", "tag_list": ["a"]}}])
sc("operate_field_models_actions", "operate with field models, actions and reason",
   [step("operate", instruction="Multiply 6 by 7", actions=True, reason=True,
         field_models=FIELDS[:1])],
   [{"json": {"note": "n", "action_required": True, "action_requests": [call("multiply", a=6, b=7)],
              "reason": REASON}}], branch=R)
sc("react_field_models", "ReAct with field models, which the reference drops",
   [step("ReAct", instruction="Go", field_models=FIELDS[:1], return_analysis=True)],
   [analysis("a", False, note="x"), {"json": {"answer": "y"}}], branch=R,
   expect={"section": "§21 H15", "paths": ["/requests", "/steps", "/to_dict"]})

# response_kwargs: the final answer's own guidance, payload fields, reason, context, model,
# field models and parsing.
RK_REASON = {"answer": "x", "reason": {"title": "t", "content": "c", "confidence_score": 0.5}}
for op in ("ReAct", "ReActStream"):
    sc(f"{op.lower()}_response_kwargs", f"{op}: the answer's guidance, payload fields and reason",
       [step(op, instruction="go", context={"k": "v"}, temperature=0.2,
             response_kwargs={"guidance": "Answer briefly.", "imodel_kw": {"temperature": 0.9},
                              "reason": True})],
       [analysis("a", False), {"json": RK_REASON}], branch=R)
sc("react_response_kwargs_context_model", "ReAct: the answer's own context, then its own model",
   [step("ReAct", instruction="again", context={"k": "v"}, response_format=F("Summary"),
         response_kwargs={"context": {"final": True}}),
    step("ReAct", instruction="more", response_format=F("Summary"),
         response_kwargs={"imodel": M("gpt-4o")})],
   [analysis("b", False), {"json": {"title": "t", "summary": "s"}},
    analysis("c", False), {"json": {"title": "u", "summary": "v"}}], branch=R)
sc("react_response_kwargs_instruction",
   "ReAct: the answer's sender, recipient, tool schemas and images, then its plain content",
   [step("ReAct", instruction="go",
         response_kwargs={"sender": "alice", "recipient": "system",
                          "tool_schemas": [{"name": "weather"}], "images": [PNG],
                          "image_detail": "low"}),
    step("ReAct", instruction="again", response_kwargs={"plain_content": "Just answer in JSON."})],
   [analysis("a", False), {"json": {"answer": "x"}},
    analysis("b", False), {"json": {"answer": "y"}}], branch=R)
sc("react_response_kwargs_field_models", "ReAct: field models for the answer alone",
   [step("ReAct", instruction="again", response_format=F("Summary"),
         response_kwargs={"field_models": [{"name": "remark", "type": "string"}]})],
   [analysis("b", False), {"json": {"title": "t", "summary": "s", "remark": "r"}}], branch=R)
sc("react_response_kwargs_validation", "ReAct: the answer unvalidated, then given up as null",
   [step("ReAct", instruction="go", response_format=F("Answer"),
         response_kwargs={"skip_validation": True}),
    step("ReAct", instruction="go", response_format=F("Answer"),
         response_kwargs={"handle_validation": "return_none"})],
   [analysis("a", False), {"text": "just text"}, analysis("a", False)]
   + [{"text": "bad"}] * 5, branch=R)

# chat's tool_schemas: shown with the instruction (recorded or not), whatever is registered.
MULTIPLY_SCHEMA = {"type": "function", "function": {
    "name": "multiply", "description": "Multiply two integers and return the product.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                     "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
sc("chat_tool_schemas", "chat with tool schemas: registered, unregistered, unrecorded",
   [step("chat", instruction="What can you do?", record=True, tool_schemas=[MULTIPLY_SCHEMA]),
    step("chat", instruction="And this?", record=True, tool_schemas=[
        {"name": "weather", "description": "Weather for a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]),
    step("chat", instruction="Not recorded", tool_schemas=[{"name": "weather"}]),
    step("communicate", instruction="Thanks")],
   [{"text": "multiply"}, {"text": "weather"}, {"text": "x"}, {"text": "bye"}], branch=R)
sc("operate_tool_schemas", "operate with tool schemas: shown unless actions run",
   [step("operate", instruction="one", tool_schemas=[{"name": "weather"}]),
    step("operate", instruction="two", tool_schemas=[{"name": "weather"}],
         response_format=F("Summary")),
    step("operate", instruction="three", tool_schemas=[{"name": "weather"}], actions=True),
    step("operate", instruction="four", tool_schemas=[{"name": "weather"}], actions=True,
         invoke_actions=False)],
   [{"text": "1"}, {"json": {"title": "t", "summary": "s"}},
    {"json": {"action_required": False, "action_requests": []}},
    {"json": {"action_required": False, "action_requests": []}}], branch=R)

# ReAct's tool_schemas: shown with the final answer's instruction alone (the analysis rounds
# show the offered tools'), and given at all they offer actions on a branch without tools.
WEATHER = {"name": "weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
for op in ("ReAct", "ReActStream"):
    sc(f"{op.lower()}_tool_schemas", f"{op} with tool schemas on a branch without tools",
       [step(op, instruction="go", tool_schemas=[WEATHER])],
       [analysis("a", False), {"json": {"answer": "x"}}],
       branch={"system": "You reason step by step."})
sc("react_tool_schemas_with_tools", "ReAct with tool schemas and tools, then the answer's own",
   [step("ReAct", instruction="go", tool_schemas=[WEATHER], max_extensions=1),
    step("ReAct", instruction="again", tool_schemas=[WEATHER],
         response_kwargs={"tool_schemas": []})],
   [analysis("a", True), analysis("b", False), {"json": {"answer": "x"}},
    analysis("c", False), {"json": {"answer": "y"}}], branch=R)

# The reference's dict format (field -> example): shown as its banner and read with the
# reply's undeclared keys kept, by every verb; chat also takes it as request_fields.
DICT_FORMAT = {"title": "the title", "year": 0}
sc("dict_format", "a dict format in chat (also as request_fields), communicate (repaired once),"
   " operate, parse",
   [step("chat", instruction="q1", request_fields=DICT_FORMAT),
    step("chat", instruction="q2", response_format=DICT_FORMAT, record=True),
    step("communicate", instruction="q3", response_format=DICT_FORMAT),
    step("communicate", instruction="q4", response_format=DICT_FORMAT),
    step("communicate", instruction="q5", response_format=DICT_FORMAT),
    step("operate", instruction="q6", response_format=DICT_FORMAT),
    step("operate", instruction="q7", response_format=DICT_FORMAT),
    step("parse", text='{"Title": "z", "yr": 3}', response_format=DICT_FORMAT)],
   [{"text": "a"}, {"text": "b"}, {"json": {"title": "t", "year": 1999}},
    {"json": {"title": "t", "extra": 1}}, {"text": "not json"}, {"json": {"title": "r"}},
    {"json": {"title": "t", "year": 2, "extra": 1}}, {"json": {"year": "2"}}])
for op in ("ReAct", "ReActStream"):
    sc(f"{op.lower()}_dict_format", f"{op}: the final answer in a dict format",
       [step(op, instruction="go", response_format=DICT_FORMAT)],
       [analysis("a", False), {"json": {"title": "t", "year": 3, "extra": True}}], branch=R)
sc("dict_format_not_object", "communicate's dict format read from JSON that is not an object: "
   "the reference reads it as an empty object, ours repairs it (compat.md §21 H10; found by "
   "random seed 512)",
   [step("communicate", instruction="q1", response_format=DICT_FORMAT)],
   [{"text": "[1, 2, 3]"}, {"json": {"title": "t", "year": 1}}],
   expect={"section": "§21 H10", "paths": ["/requests", "/steps/", "/to_dict/json/messages/",
                                           "/to_dict/db/messages/", "/to_dict/json/logs/",
                                           "/to_dict/db/logs/"]})
sc("react_dict_format_answer", "ReAct: a dict format's answer is the whole reading",
   [step("ReAct", instruction="go", response_format={"answer": "the answer", "why": "a reason"})],
   [analysis("a", False), {"json": {"answer": "x", "why": "y", "extra": 1}}], branch=R)
sc("operate_dict_format_reason", "operate: a dict format with reason and actions",
   [step("operate", instruction="q", response_format=DICT_FORMAT, reason=True, actions=True)],
   [{"json": {"title": "t", "year": "2", "action_required": False, "action_requests": [],
              "reason": {"title": "r", "content": "c", "confidence_score": 0.5}}}],
   branch=R, expect={"section": "§21 H17", "paths": ["/requests", "/steps", "/to_dict"]})

# progression: {"$messages": [i, ...]} names the branch's messages at those places; the
# request is compiled from them alone, and the turn is still added to the whole history.
P = lambda *i: {"$messages": list(i)}  # noqa: E731
sc("progression_subset", "communicate, chat and operate each from a part of the history",
   [step("communicate", instruction="one"), step("communicate", instruction="two"),
    step("communicate", instruction="three", progression=P(0, 1, 2)),
    step("chat", instruction="four", progression=P(1, 2)),
    step("operate", instruction="five", progression=P(3, 4), response_format=F("Summary"))],
   [{"text": "1"}, {"text": "2"}, {"text": "3"}, {"text": "4"},
    {"json": {"title": "t", "summary": "s"}}])
sc("progression_starts_with_reply", "a progression that starts with a reply, then an empty one",
   [step("communicate", instruction="one"),
    step("communicate", instruction="two", progression=P(2)),
    step("communicate", instruction="three", progression=P())],
   [{"text": "1"}, {"text": "2"}, {"text": "3"}])

# ---------------------------------------------------------------- images
# The 1×1 PNG (PNG above), as a data URI and as raw base64 (sent as a JPEG data URI).
# http(s) URLs are left out: the reference resolves their hosts (compat.md §15 M5).
sc("images_communicate", "communicate with two images and a detail, then a turn without",
   [step("communicate", instruction="What is this?", images=["data:image/png;base64," + PNG, PNG],
         image_detail="low"),
    step("communicate", instruction="And now?")],
   [{"text": "a dot"}, {"text": "still a dot"}])
sc("images_chat", "chat with an image, recorded, then with another detail",
   [step("chat", instruction="Look", images=[PNG], record=True),
    step("chat", instruction="Look again", images=[PNG], image_detail="high")],
   [{"text": "a"}, {"text": "b"}])
sc("images_operate", "operate with an image: its detail defaults as communicate's",
   [step("operate", instruction="Describe", images=[PNG], response_format=F("Answer"))],
   [ANSWER])
sc("images_empty", "an empty list of images", [step("communicate", instruction="x", images=[])],
   [{"text": "a"}])
sc("images_bad_data", "a data URI that is not an image fails the turn before any call",
   [step("communicate", instruction="x", images=["data:text/plain;base64,aGVsbG8="])],
   [{"text": "a"}])
sc("images_bad_scheme", "an image of a scheme that is not allowed fails the turn",
   [step("communicate", instruction="x", images=["javascript:alert(1)"])], [{"text": "a"}])

# ---------------------------------------------------------------- run (HTTP model)
for i, (inst, reply) in enumerate((("Say hi", {"text": "hi there"}),
                                   ("Long", {"text": "x" * 50, "chunk_size": 7}))):
    sc(f"run_api_model_{i}", "run with an HTTP model: the reference refuses, lionagi-rs streams",
       [step("run", instruction=inst)], [reply],
       expect={"section": "§18 O4"})

# ---------------------------------------------------------------- CLI agent
# A Claude Code model runs the scripted agent (fake_agent.sh): "cli" lists its runs, each
# the stream-json events it prints. What each side records of the agent's call
# (api_call_meta.payload) and the session it stores are §18 O5's.
SESSION = "0b3c5d7e-9f10-4a2b-8c3d-4e5f60718293"
CLI = {"system": "You work in a repository.", "cli_model": "claude_code/claude-sonnet-5-5"}


def agent_run(*events, result=None, **extra):
    """An agent run: the session's start, `events` (texts are text blocks), the result."""
    out = [{"type": "system", "subtype": "init", "session_id": SESSION}]
    for e in events:
        out.append({"type": "assistant", "message": {"content": [{"type": "text", "text": e}]}}
                   if isinstance(e, str) else e)
    texts = "".join(e for e in events if isinstance(e, str))
    out.append(dict({"type": "result", "subtype": "success", "num_turns": 1,
                     "result": texts if result is None else result}, **extra))
    return out


sc("cli_run", "run on a CLI agent: a guidance, a resumed session with context, a format",
   [step("run", instruction="say hi", guidance="be brief"),
    step("run", instruction="again", context={"k": 1}),
    step("run", instruction="2+2?", response_format=F("Answer"))],
   branch=CLI, cli=[agent_run("Hel", "lo!"), agent_run("Once more."),
                    agent_run('{"answer": "4", "confidence": 1}')])
sc("cli_run_tools", "run on a CLI agent: thinking, a tool call and its result, usage",
   [step("run", instruction="read a.txt")], branch=CLI,
   cli=[agent_run({"type": "assistant", "message": {"content": [
                      {"type": "thinking", "thinking": "Let me look."},
                      {"type": "tool_use", "id": "toolu_1", "name": "Read",
                       "input": {"path": "a.txt"}}]}},
                  {"type": "user", "message": {"content": [
                      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}]}},
                  "The file says hello.",
                  usage={"input_tokens": 10, "output_tokens": 5}, total_cost_usd=0.01)])
sc("cli_run_error", "run on a CLI agent that refuses, then one that answers",
   [step("run", instruction="x"), step("run", instruction="y")], branch=CLI,
   cli=[[{"type": "system", "subtype": "init", "session_id": SESSION},
         {"type": "result", "subtype": "error_during_execution", "is_error": True,
          "result": "session limit", "errors": ["limit reached"]}],
        agent_run("ok")],
   # The reference records the failed turn's instruction and resumes its session; a
   # failed turn records nothing here, so the next one starts a session of its own.
   expect={"section": "§18 O5", "paths": ["/agent_calls/1", "/to_dict", "/ours loads",
                                          "/ref loads"]})
THINK_AND_READ = {"type": "assistant", "message": {"content": [
    {"type": "thinking", "thinking": "Let me look."},
    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.txt"}}]}}
READ_RESULT = {"type": "user", "message": {"content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}]}}
sc("cli_chat_communicate", "chat and communicate on a CLI agent: its text blocks and result",
   [step("communicate", instruction="hi"), step("chat", instruction="read a.txt"),
    step("communicate", instruction="2+2?", response_format=F("Answer")),
    step("chat", instruction="noted", record=True)], branch=CLI,
   cli=[agent_run("hello"),
        agent_run(THINK_AND_READ, READ_RESULT, "First. ", "Second.", result="The result.",
                  usage={"input_tokens": 3}),
        agent_run('{"answer": "4", "confidence": 1}', result=""), agent_run("ok")])
# chat records nothing, so the branch keeps the session it stored; the reference's model
# keeps the session chat ran in.
sc("cli_chat_session", "a CLI agent's session after chat, which records nothing",
   [step("communicate", instruction="hi"), step("chat", instruction="aside"),
    step("communicate", instruction="and?")], branch=CLI,
   cli=[agent_run("hello"),
        [{"type": "system", "subtype": "init",
          "session_id": "1c2d3e4f-5a6b-4c7d-8e9f-a0b1c2d3e4f5"}] + agent_run("aside")[1:],
        agent_run("more")],
   expect={"section": "§18 O5", "paths": ["/agent_calls/2/resume"]})
sc("cli_request_options", "a CLI model written with its request options",
   [step("run", instruction="hi")], branch=CLI, cli=[agent_run("hello")],
   to_dict=[{"mode": "json", "include_request_options": True, "key": "ro"}, {"mode": "json"}],
   # The reference writes its agent request's schema; the agent's flags are fixed here.
   expect={"section": "§18 O5", "paths": ["/to_dict/ro/chat_model/endpoint/config/request_options"]})
sc("cli_operate", "operate on a CLI agent: a format, then a reason (run and collect)",
   [step("operate", instruction="2+2?", response_format=F("Answer")),
    step("operate", instruction="why", reason=True)], branch=CLI,
   cli=[agent_run('{"answer": "4", "confidence": 0.9}', result="done"),
        agent_run('{"reason": {"title": "t", "content": "c", "confidence_score": 0.5}}')])
sc("cli_react", "ReAct on a CLI agent", [step("ReAct", instruction="go", max_extensions=1)],
   branch=CLI, cli=[agent_run('{"analysis": "a", "extension_needed": false}', result=""),
                    agent_run('{"answer": "x"}', result="")])

# ---------------------------------------------------------------- clone
# The reference's clone repeats the System message (§5): the message
# lists and the system entry differ, nothing else may.
CLONE = {"section": "§5", "paths": [
    f"/{side}/{mode}/{part}" for side in ("to_dict", "ours loads ref", "ref loads ours")
    for mode in ("json", "db") for part in ("messages", "system")]}
sc("clone_empty", "clone a fresh branch", [step("clone")], expect=CLONE)
sc("clone_after_turns", "clone after two turns",
   [step("communicate", instruction="A"), step("communicate", instruction="B"), step("clone")],
   [{"text": "a"}, {"text": "b"}], expect=CLONE)
sc("clone_with_tools", "clone keeps tools; the clone runs an operate",
   [step("clone"), step("operate", instruction="6*7?", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "42", "confidence": 0.8, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7)]}}], branch=T2, expect=CLONE)
sc("clone_then_communicate", "a turn on the clone",
   [step("communicate", instruction="A"), step("clone"), step("communicate", instruction="B")],
   [{"text": "a"}, {"text": "b"}], expect=CLONE)
sc("clone_after_actions", "clone after act (action links)",
   [step("act", action_request=call("multiply", a=3, b=4)), step("clone")], branch=A, expect=CLONE)
sc("clone_with_user_name", "clone of a named branch with a user",
   [step("clone")], branch={"system": "S", "user": "alice", "name": "b1"}, expect=CLONE)

CLI = {"system": "S", "cli_model": "claude_code/sonnet"}
sc("clone_cli_model", "clone of a branch whose chat model is a CLI agent: the model is copied",
   [step("clone")], branch=CLI, expect=CLONE)
sc("to_dict_cli_model", "to_dict of a branch with a CLI agent model", [], branch=CLI)

# ---------------------------------------------------------------- connect
sc("connect_model_tool", "connect registers a model as a tool",
   [step("connect", model="gpt-4o-mini", name="helper", description="Ask another model")])
sc("connect_update", "connect twice with update",
   [step("connect", model="gpt-4o-mini", name="helper"),
    step("connect", model="gpt-4o", name="helper", update=True)])
sc("connect_then_operate", "the connected model's schema is offered to operate",
   [step("connect", model="gpt-4o-mini", name="helper", description="Ask another model"),
    step("operate", instruction="Use the helper", response_format=F("Answer"), actions=True)],
   [ANSWER])
HELPER = dict(name="helper", description="Ask another model")
ASK = [{"role": "user", "content": "Capital of France?"}]
sc("connect_call_anthropic", "act calls a connected Claude model: its API call is logged in "
   "the branch before the tool call's own log, and the tool offers the Messages request",
   [step("connect", model="anthropic/claude-haiku-4-5", **HELPER),
    step("act", action_request=[call("helper", model="claude-haiku-4-5", messages=ASK,
                                      max_tokens=50, system="Be brief.")])],
   [{"text": "Paris."}])
sc("connect_call_openai", "act calls a connected OpenAI model: the reference's tool adds "
   "`reasoning_effort: null` to the arguments it sends (compat.md §21 H18)",
   [step("connect", model="gpt-4o-mini", **HELPER),
    step("act", action_request=[call("helper", model="gpt-4o-mini", messages=ASK)])],
   [{"text": "Paris."}],
   expect={"section": "§21 H18", "paths": [
       "/requests/0/reasoning_effort",
       "/to_dict/json/logs/collections/0/content/payload/reasoning_effort",
       "/to_dict/db/logs/collections/0/content/payload/reasoning_effort",
       "/to_dict/json/logs/collections/1/content/arguments/reasoning_effort",
       "/to_dict/db/logs/collections/1/content/arguments/reasoning_effort"]})
sc("connect_call_fails", "a connected model's call fails at the provider: the reference's "
   "tool answers None and the tool call completes; ours fails it with the provider's error "
   "(compat.md §21 H18). Both log the failed API call",
   [step("connect", model="anthropic/claude-haiku-4-5", **HELPER),
    step("act", action_request=[call("helper", model="claude-haiku-4-5", messages=ASK,
                                      max_tokens=50)], suppress_errors=True)],
   [{"status": 400, "error": "bad"}],
   expect={"section": "§21 H18", "paths": [
       "/to_dict/json/messages/collections/", "/to_dict/db/messages/collections/",
       "/to_dict/json/logs/collections/1/", "/to_dict/db/logs/collections/1/"]})
sc("connect_call_beside_tools", "act runs a connected model's call and a local tool at once: "
   "the reference records each call as it finishes (the tool's first), ours in the order "
   "asked (compat.md §21 H19)",
   [step("connect", model="anthropic/claude-haiku-4-5", **HELPER),
    step("act", action_request=[call("helper", model="claude-haiku-4-5", messages=ASK,
                                      max_tokens=50), call("echo", text="hi")])],
   [{"text": "Paris."}], branch={"system": "You are terse.", "tools": ["echo"]},
   expect={"section": "§21 H19", "paths": [
       "/to_dict/json/messages/", "/to_dict/db/messages/",
       "/to_dict/json/logs/collections/", "/to_dict/db/logs/collections/"]})

# ---------------------------------------------------------------- reload
# `reload` writes the branch with to_dict, reads it back with from_dict and goes on with
# the restored branch: what a later turn sends must be what the live branch would have.
TOOLS2 = {"system": "Use tools when helpful.", "tools": ["multiply", "lookup_capital"]}
RELOAD = step("reload", model="gpt-4.1-mini", tools=["multiply", "lookup_capital"])
sc("reload_continue", "a branch restored mid-conversation sends its history as the live "
   "one did: the system text folded in, the context, a structured turn and its tool call",
   [step("communicate", instruction="Hi", context={"city": "Paris", "n": [1, 2]}),
    step("operate", instruction="6*7?", response_format=F("Answer"), actions=True),
    RELOAD,
    step("communicate", instruction="And the capital?"),
    step("chat", instruction="Once more", record=True)],
   [{"text": "Hello."},
    {"json": {"answer": "42", "confidence": 0.8, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7)]}},
    {"text": "Paris."}, {"text": "Again."}],
   branch=TOOLS2)
sc("reload_first", "a branch restored before its first turn keeps its system message",
   [RELOAD, step("communicate", instruction="Hi")], [{"text": "Hello."}], branch=TOOLS2)
sc("reload_parse_model", "a restored branch with a parse model of its own",
   [step("communicate", instruction="Hi"),
    step("reload", model="gpt-4.1-mini", parse_model="gpt-4.1-nano"),
    step("parse", text="name Ada, 36", response_format=F("Person"))],
   [{"text": "Hello."}, PERSON], branch={"system": "Be brief.", "parse_model": "gpt-4.1-nano"})
sc("reload_anthropic", "a Claude branch restored mid-conversation",
   [step("communicate", instruction="Hi", temperature=0.3),
    step("reload", model="anthropic/claude-sonnet-4-5"),
    step("communicate", instruction="Again")],
   [{"text": "Hello."}, {"text": "Again."}],
   branch={"system": "Be brief.", "model": "anthropic/claude-sonnet-4-5"})
sc("reload_react", "a branch restored after ReAct's rounds and a tool call goes on",
   [step("ReAct", instruction="What is 6*7?", max_extensions=2),
    RELOAD,
    step("communicate", instruction="Say it again")],
   [analysis("Need product.", True, [call("multiply", a=6, b=7)], reason=REASON),
    analysis("42, done.", False, reason=REASON), {"json": {"answer": "42"}}, {"text": "42."}],
   branch=dict(TOOLS2, system=R["system"]))

# ---------------------------------------------------------------- serialization
MODES = {
    "python": {"mode": "python"},
    "json": {"mode": "json"},
    "db": {"mode": "db"},
    "db_meta_key": {"mode": "db", "db_meta_key": "meta"},
    "request_options": {"mode": "json", "include_request_options": True},
    "no_logs": {"mode": "json", "include_logs": False},
    "log_config": {"mode": "json", "include_log_config": True},
    "processor_config": {"mode": "json", "include_processor_config": True},
    "db_all_flags": {"mode": "db", "db_meta_key": "node", "include_log_config": True,
                     "include_processor_config": True},
}
for k, m in MODES.items():
    m = dict(m, key=k)
    sc(f"to_dict_{k}_empty", f"to_dict {k} of a fresh branch", [], to_dict=[m])
    sc(f"to_dict_{k}_after_turn", f"to_dict {k} after a turn",
       [step("communicate", instruction="Hi")], [{"text": "Hello"}], to_dict=[m])
sc("to_dict_after_actions", "json and db after act",
   [step("act", action_request=call("multiply", a=3, b=4))], branch=A)
sc("to_dict_named_user", "a named branch with a user",
   [step("communicate", instruction="Hi")], [{"text": "Hello"}],
   branch={"system": "S", "user": "alice", "name": "b1"})
sc("to_dict_parse_model", "a branch with its own parse model",
   [step("communicate", instruction="Hi")], [{"text": "Hello"}],
   branch={"system": "S", "parse_model": "gpt-4.1-nano"})
sc("to_dict_no_system", "a branch without a system message",
   [step("communicate", instruction="Hi")], [{"text": "Hello"}], branch={})

# ---------------------------------------------------------------- context providers
for name, regs in {
    "one": [{"text": "Remember: the user likes tea.", "name": "prefs"}],
    "two_priority": [{"text": "low", "name": "a", "priority": 1},
                     {"text": "high", "name": "b", "priority": 5}],
    "none_result": [{"text": "", "kind": "none", "name": "empty"}],
    "failing": [{"text": "", "kind": "fail", "name": "broken"}, {"text": "ok", "name": "fine"}],
    "max_tokens": [{"text": "word " * 50, "name": "big", "max_tokens": 5}],
}.items():
    sc(f"providers_{name}", f"context providers: {name}",
       [step("register_provider", **r) for r in regs] + [step("communicate", instruction="Hi")],
       [{"text": "Hello"}])
sc("providers_operate", "context providers and operate",
   [step("register_provider", text="Tea.", name="prefs"),
    step("operate", instruction="2+2?", response_format=F("Answer"))], [ANSWER])
sc("providers_react", "context providers and ReAct",
   [step("register_provider", text="Tea.", name="prefs"), step("ReAct", instruction="Go")],
   [analysis("ok", False, reason=REASON), {"json": {"answer": "x"}}], branch=R)

# ---------------------------------------------------------------- memory
MEM = {"system": "S", "memory": True}
sc("memory_communicate", "a branch with a memory store: a turn", [step("communicate", instruction="Hi")],
   [{"text": "Hello"}], branch=MEM)
sc("memory_operate", "a branch with a memory store: operate",
   [step("operate", instruction="2+2?", response_format=F("Answer"))], [ANSWER], branch=MEM)
sc("memory_clone", "a branch with a memory store: clone", [step("clone")], branch=MEM, expect=CLONE)
sc("memory_session", "a branch with its own memory store joins and leaves a session",
   [step("session", remove=True)], branch=MEM)

# ---------------------------------------------------------------- sessions
# The reference gives a member the session id as user (and takes it away
# on removal); here user is the conversation's (§7): the branch's user and
# the senders of messages built from it differ, nothing else may.
SESSION = {"section": "§7", "paths": [f"/to_dict/{m}/{k}" for m in ("json", "db")
                                      for k in ("user", "messages")]}
sc("session_include", "include a branch in a session (the reference overwrites user)",
   [step("session")], branch={"system": "S", "user": "alice"}, expect=SESSION)
sc("session_include_no_user", "include a branch without a user",
   [step("session")], branch={"system": "S"}, expect=SESSION)
sc("session_include_remove", "include, then remove: the branch is as before",
   [step("session", remove=True)], branch={"system": "S", "user": "alice"}, expect=SESSION)
sc("session_include_with_others", "include with two more branches, then remove",
   [step("session", extra=["b2", "b3"], remove=True)], branch={"system": "S"})
sc("session_include_then_turn", "a turn after leaving a session",
   [step("session", remove=True), step("communicate", instruction="Hi")], [{"text": "Hello"}],
   branch={"system": "S", "user": "alice"}, expect=SESSION)

# ---------------------------------------------------------------- capabilities
CAP = {"name": "Reviewer", "fields": [{"name": "note", "type": "str", "description": "A short note"},
                                      {"name": "score", "type": "int", "description": "0 to 10"}]}
sc("capabilities_grant", "grant: the system message gains the block",
   [step("grant_capabilities", **CAP)])
sc("capabilities_grant_no_prompt", "grant without prompt",
   [step("grant_capabilities", prompt=False, **CAP)])
sc("capabilities_communicate", "grant then communicate",
   [step("grant_capabilities", **CAP), step("communicate", instruction="Review: x=1")],
   [{"text": "Fine.\n```json\n{\"note\": \"ok\", \"score\": 8}\n```"}])
sc("capabilities_regrant", "grant twice",
   [step("grant_capabilities", **CAP), step("grant_capabilities", **CAP)])
sc("capabilities_regrant_keeps_leading_space", "grant twice on a prompt that starts with white "
   "space: the reference strips it on the second grant, ours keeps it (compat.md §17)",
   [step("grant_capabilities", **CAP), step("grant_capabilities", **CAP),
    step("communicate", instruction="Hi")],
   [{"text": "Hello."}], branch={"system": "\tBe terse."},
   expect={"section": "§17", "paths": [
       "/requests/0/messages/0/content",
       "/to_dict/json/system/content/system_message",
       "/to_dict/db/system/content/system_message",
       "/to_dict/json/messages/collections/0/content/system_message",
       "/to_dict/db/messages/collections/0/content/system_message",
       "/to_dict/json/logs/collections/0/content/payload/messages/0/content",
       "/to_dict/db/logs/collections/0/content/payload/messages/0/content"]})
sc("capabilities_non_ascii", "a grant's descriptions and an emission outside ASCII: the block "
   "writes them as UTF-8 on both sides",
   [step("grant_capabilities", name="Reviewer",
         fields=[{"name": "note", "type": "str", "description": "Une note — 日本 🙂"}]),
    step("communicate", instruction="Hi")],
   [{"text": "Fine.\n```json\n{\"note\": \"très 日本\"}\n```"}])
sc("capabilities_no_system", "grant on a branch without a system message",
   [step("grant_capabilities", **CAP)], branch={})
sc("capabilities_operate", "grant then operate",
   [step("grant_capabilities", **CAP), step("operate", instruction="2+2?", response_format=F("Answer"))],
   [ANSWER])


# ---------------------------------------------------------------- Anthropic Messages
# A model named `anthropic/NAME` is Anthropic's, at the scripted server's
# `/v1/messages`, which answers the same script in that protocol's shapes.
CLAUDE = {"system": "You are terse.", "model": "anthropic/claude-sonnet-4-5"}
sc("anthropic_communicate", "Anthropic Messages: two turns, the system text folded into the "
   "first instruction, the same body byte for byte",
   [step("communicate", instruction="Capital of France?"),
    step("communicate", instruction="And of Japan?")],
   [{"text": "Paris."}, {"text": "Tokyo."}], branch=CLAUDE)
sc("anthropic_operate_actions", "Anthropic Messages: operate with a format and actions read "
   "from the reply's text",
   [step("operate", instruction="6*7?", response_format=F("Answer"), actions=True)],
   [{"json": {"answer": "42", "confidence": 0.8, "action_required": True,
              "action_requests": [call("multiply", a=6, b=7)]}}],
   branch=dict(CLAUDE, tools=["multiply"]))
sc("anthropic_parse_model", "Anthropic Messages: parse's repair on a Claude parse model",
   [step("parse", text="not json", response_format=F("Answer"))], [ANSWER],
   branch=dict(CLAUDE, parse_model="anthropic/claude-haiku-4-5"))
sc("anthropic_mixed_models", "a Claude branch with a per-call OpenAI chat model, then Claude "
   "again: each call in its own protocol",
   [step("communicate", instruction="One", chat_model=M("gpt-4o")),
    step("communicate", instruction="Two")],
   [{"text": "1"}, {"text": "2"}], branch=CLAUDE)
sc("anthropic_error", "Anthropic Messages: a 400 in Anthropic's error shape fails the turn, "
   "which records nothing",
   [step("communicate", instruction="fail"), step("communicate", instruction="again")],
   [{"status": 400, "error": "bad"}, {"text": "ok"}], branch=CLAUDE)
sc("anthropic_tool_use_reply", "Anthropic Messages: a reply of one tool_use block and no text, "
   "then a turn whose request holds two user messages in a row: ours sends them as one turn "
   "(compat.md §25)",
   [step("communicate", instruction="Call a tool"), step("communicate", instruction="Then?")],
   [{"tool_calls": [{"id": "toolu_1", "name": "multiply", "arguments": {"a": 1, "b": 2}}]},
    {"text": "Done."}], branch=dict(CLAUDE, tools=["multiply"]))
sc("anthropic_ranges_refused", "Anthropic Messages: a temperature or top_p above 1 and a "
   "max_tokens of 0 are refused before anything is sent, and no call is logged",
   [step("communicate", instruction="Hot", temperature=1.2),
    step("communicate", instruction="Wide", top_p=1.5),
    step("communicate", instruction="Short", max_tokens=0),
    step("communicate", instruction="Cool", temperature=1)],
   [{"text": "ok"}], branch=CLAUDE)
sc("anthropic_token_note", "Anthropic Messages counts no tokens: include_token_usage_to_model "
   "adds no note, as in the reference",
   [step("communicate", instruction="q", include_token_usage_to_model=True)],
   [{"text": "a"}], branch=CLAUDE)
sc("anthropic_request_options", "a Claude model's request model in to_dict "
   "(include_request_options)",
   [step("communicate", instruction="q")], [{"text": "a"}], branch=CLAUDE,
   to_dict=[{"mode": "json", "include_request_options": True, "key": "json_ro"},
            {"mode": "db", "include_request_options": True, "key": "db_ro"}])
sc("input_cap_refused", "an input over the chat model's max_input_tokens is refused before "
   "sending, and no call is logged (compat.md §13)",
   [step("communicate", instruction="A question far longer than five tokens, to be refused"),
    step("communicate", instruction="A second question, also far longer than five tokens")],
   [{"text": "never"}], branch={"system": "You are terse.", "max_input_tokens": 5})
sc("network_guard_logged", "a model at a loopback address without the local-network opt-in: "
   "the guard refuses the call, which is logged as a failed call, and the turn is not kept; "
   "ours' message names the range (compat.md §13)",
   [step("communicate", instruction="Hi"), step("chat", instruction="Again", record=True)],
   [{"text": "never"}], branch={"system": "You are terse.", "allow_local_network": False},
   expect={"section": "§13", "paths": [
       f"/to_dict/{m}/logs/collections/{k}/content/execution/error/message"
       for m in ("json", "db") for k in (0, 1)]})
sc("openai_ranges_refused", "OpenAI chat: a temperature above 2 or below 0 and a top_p above "
   "1 are refused before anything is sent, and no call is logged; 2 itself is sent",
   [step("communicate", instruction="a", temperature=2.5),
    step("communicate", instruction="b", top_p=1.5),
    step("communicate", instruction="c", temperature=-0.5),
    step("communicate", instruction="d", temperature=2)],
   [{"text": "ok"}])

def main():
    os.makedirs(OUT, exist_ok=True)
    for name, d in SCENARIOS.items():
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(d, f, indent=2, ensure_ascii=False)
            f.write("\n")
    print(f"{len(SCENARIOS)} scenarios written to {OUT}")


if __name__ == "__main__":
    main()
