//! Running one scenario through lionagi-rs's public API, as a program
//! written from the README would: the reference's keyword arguments of
//! each step map onto the option setters.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use lionagi::actions::DynamicTool;
use lionagi::capabilities::{CapabilitiesExt, FieldSpec, Grant};
use lionagi::core::model::{ChatModel, ModelConfig};
use lionagi::models::mock::{MockReply, MockServer};
use lionagi::operations::{
    ActOptions, AnswerOptions, BranchOperations, ChatOptions, CommunicateOptions, InterpretOptions,
    OnParseFailure, OperateOptions, ParseOptions, Parsed, ReActOptions, Reply, ResponseFormat,
    RunOptions, Strategy, fuzzy::Unmatched, similarity::Similarity, tool_call_from_value,
};
use lionagi::prelude::*;
use lionagi::providers::{ProviderOptions, ProvidersExt};
use serde_json::{Map, Value, json};

/// The shared tools and response formats (tests/refdiff/library.json).
pub struct Library {
    formats: BTreeMap<String, Value>,
    tools: BTreeMap<String, Value>,
}

impl Library {
    pub fn load(v: &Value) -> Result<Self, String> {
        let obj = |k: &str| -> Result<BTreeMap<String, Value>, String> {
            Ok(v.get(k)
                .and_then(Value::as_object)
                .ok_or(format!("library.json: no `{k}` object"))?
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        };
        Ok(Self {
            formats: obj("formats")?,
            tools: obj("tools")?,
        })
    }

    fn format(&self, name: &str) -> Result<ResponseFormat, String> {
        self.formats
            .get(name)
            .map(|s| ResponseFormat::Schema(s.clone()))
            .ok_or_else(|| format!("unknown format {name}"))
    }

    fn tool(&self, name: &str) -> Result<Arc<dyn Tool>, String> {
        let spec = self
            .tools
            .get(name)
            .ok_or_else(|| format!("unknown tool {name}"))?;
        let mut params = spec["parameters"].clone();
        // The reference writes `"description": null` for undocumented
        // parameters; a Rust schema leaves it out (compat.md §16 A1).
        if let Some(props) = params.get_mut("properties").and_then(Value::as_object_mut) {
            for p in props.values_mut().filter_map(Value::as_object_mut) {
                if p.get("description").is_some_and(Value::is_null) {
                    p.shift_remove("description");
                }
            }
        }
        let behaviour = spec["behaviour"].as_str().unwrap_or_default().to_owned();
        let description = spec["description"].as_str().map(str::to_owned);
        let tool = DynamicTool::new(name, description, params, move |args: Value| {
            let behaviour = behaviour.clone();
            async move { tool_behaviour(&behaviour, &args) }
        })
        .map_err(|e| e.to_string())?;
        Ok(tool.into_tool())
    }
}

fn tool_behaviour(kind: &str, args: &Value) -> Result<Value, String> {
    let num = |k: &str| args.get(k).cloned().unwrap_or(Value::Null);
    let arith = |f: fn(i64, i64) -> Option<i64>, g: fn(f64, f64) -> f64| {
        let (a, b) = (num("a"), num("b"));
        match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) => f(x, y).map(Value::from).ok_or("overflow".to_owned()),
            _ => match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) => Ok(json!(g(x, y))),
                _ => Err("a and b must be numbers".to_owned()),
            },
        }
    };
    match kind {
        "multiply" => arith(i64::checked_mul, |x, y| x * y),
        "add" => arith(i64::checked_add, |x, y| x + y),
        "capital" => Ok(json!(match args["country"].as_str() {
            Some("France") => "Paris",
            Some("Japan") => "Tokyo",
            _ => "unknown",
        })),
        "fail" => Err("tool failed on purpose".into()),
        "echo" => Ok(json!({"echo": args["text"]})),
        other => Err(format!("unknown behaviour {other}")),
    }
}

/// The scenario's models: all at one scripted server.
struct Ctx<'a> {
    server: MockServer,
    library: &'a Library,
}

impl Ctx<'_> {
    /// A model at the scripted server: `anthropic/NAME` on Anthropic
    /// Messages, any other name on OpenAI chat completions.
    fn model(&self, name: &str) -> Result<Arc<dyn ChatModel>, String> {
        self.branch_model(name, None, true)
    }

    /// The chat model a scenario's branch names (`model`, default
    /// `gpt-4.1-mini`, with its `max_input_tokens` and
    /// `allow_local_network`).
    fn branch_chat_model(&self, spec: &Value) -> Result<Arc<dyn ChatModel>, String> {
        self.branch_model(
            spec["model"].as_str().unwrap_or("gpt-4.1-mini"),
            spec["max_input_tokens"].as_u64(),
            spec["allow_local_network"].as_bool().unwrap_or(true),
        )
    }

    /// [`Ctx::model`] with an input cap (`max_input_tokens`) and the
    /// local-network opt-in as given (`allow_local_network`).
    fn branch_model(
        &self,
        name: &str,
        cap: Option<u64>,
        local_network: bool,
    ) -> Result<Arc<dyn ChatModel>, String> {
        let (provider, name) = match name.strip_prefix("anthropic/") {
            Some(n) => ("anthropic", n),
            None => ("openai", name),
        };
        let mut config = ModelConfig::builder()
            .provider(provider)
            .model(name)
            .base_url(&self.server.base_url())
            .allow_local_network(local_network);
        if let Some(cap) = cap {
            config = config.max_input_tokens(cap);
        }
        let config = config.build().map_err(|e| e.to_string())?;
        Ok(Arc::new(
            IModel::with_api_key(config, "test").map_err(|e| e.to_string())?,
        ))
    }

    fn model_ref(&self, v: &Value) -> Result<Arc<dyn ChatModel>, String> {
        match v.get("$model").and_then(Value::as_str) {
            Some(n) => self.model(n),
            None => Err(format!("expected {{\"$model\": NAME}}, got {v}")),
        }
    }

    /// `{"$format": NAME}` names a library format; any other map is the
    /// reference's dict format (field → example), as given.
    fn format_ref(&self, v: &Value) -> Result<ResponseFormat, String> {
        match (v.get("$format").and_then(Value::as_str), v) {
            (Some(n), _) => self.library.format(n),
            (None, Value::Object(m)) => Ok(ResponseFormat::Fields(m.clone())),
            (None, _) => Err(format!("expected {{\"$format\": NAME}} or a map, got {v}")),
        }
    }
}

/// A step's keyword arguments, each taken once; what is left at the end
/// is a keyword this driver does not know, reported as a driver error.
struct Args(Map<String, Value>);

impl Args {
    fn take(&mut self, k: &str) -> Option<Value> {
        self.0.shift_remove(k)
    }
    fn str(&mut self, k: &str) -> Result<Option<String>, String> {
        match self.take(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(format!("`{k}` must be a string, got {v}")),
        }
    }
    fn bool(&mut self, k: &str) -> Result<Option<bool>, String> {
        match self.take(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(v) => Err(format!("`{k}` must be a boolean, got {v}")),
        }
    }
    fn usize(&mut self, k: &str) -> Result<Option<usize>, String> {
        match self.take(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| format!("`{k}` must be a count, got {v}")),
        }
    }
    /// The interpret rewrite's domain, style and writing sample, under
    /// the names the verb gives them (`interpret`'s own, or ReAct's).
    fn interpret_options(
        &mut self,
        [domain, style, sample]: [&str; 3],
    ) -> Result<InterpretOptions, String> {
        let mut o = InterpretOptions::default();
        if let Some(d) = self.str(domain)? {
            o = o.domain(d);
        }
        if let Some(s) = self.str(style)? {
            o = o.style(s);
        }
        if let Some(s) = self.str(sample)? {
            o = o.sample_writing(s);
        }
        Ok(o)
    }
    fn strings(&mut self, k: &str) -> Result<Option<Vec<String>>, String> {
        match self.take(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![s])),
            Some(Value::Array(a)) => a
                .into_iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s),
                    o => Err(format!("`{k}` items must be strings, got {o}")),
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(v) => Err(format!("`{k}` must be a list of strings, got {v}")),
        }
    }
    fn list(&mut self, k: &str) -> Result<Option<Vec<Value>>, String> {
        match self.take(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(list)) => Ok(Some(list)),
            Some(v) => Err(format!("`{k}` must be a list, got {v}")),
        }
    }
    /// `field_models` as (name, property schema) pairs: each entry is
    /// `{"name", "type", "description"?, "default"?, "nullable"?,
    /// "listable"?}`, and its schema is the one pydantic writes for the
    /// reference's FieldModel of that description, which is what a user of
    /// `field_model` passes.
    fn field_models(&mut self) -> Result<Vec<(String, Value)>, String> {
        let list = self.list("field_models")?.unwrap_or_default();
        list.into_iter()
            .map(|spec| {
                let mut f = Args(match spec {
                    Value::Object(o) => o,
                    v => return Err(format!("a field model must be a map, got {v}")),
                });
                let name = f.str("name")?.ok_or("a field model needs a name")?;
                let ty = f.str("type")?.ok_or("a field model needs a type")?;
                let mut schema = json!({"type": ty});
                if f.bool("listable")? == Some(true) {
                    schema = json!({"items": schema, "type": "array"});
                }
                let nullable = f.bool("nullable")? == Some(true);
                if nullable {
                    schema = json!({"anyOf": [schema, {"type": "null"}], "default": null});
                }
                let o = schema.as_object_mut().ok_or("schema")?;
                if let Some(d) = f.str("description")? {
                    o.insert("description".into(), Value::String(d));
                }
                if let Some(d) = f.take("default") {
                    o.insert("default".into(), d);
                }
                o.insert("name".into(), Value::String(name.clone()));
                o.insert("title".into(), Value::String(python_title(&name)));
                f.done("field model")?;
                Ok((name, schema))
            })
            .collect()
    }
    fn done(self, op: &str) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            let keys: Vec<&String> = self.0.keys().collect();
            Err(format!("driver: {op} does not map the keywords {keys:?}"))
        }
    }
}

/// A field's title as pydantic writes it: Python's `str.title()` of the
/// name with underscores as spaces.
fn python_title(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut after_letter = false;
    for c in name.replace('_', " ").chars() {
        if c.is_alphabetic() {
            if after_letter {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            after_letter = true;
        } else {
            out.push(c);
            after_letter = false;
        }
    }
    out
}

/// The turn keywords every verb shares, applied through one setter set.
macro_rules! turn_args {
    ($opts:ident, $args:ident) => {
        if let Some(v) = $args.take("guidance") {
            $opts = $opts.guidance(v);
        }
        if let Some(v) = $args.take("context") {
            $opts = $opts.context(v);
        }
        if let Some(v) = $args.str("plain_content")? {
            $opts = $opts.plain_content(v);
        }
        if let Some(v) = $args.str("sender")? {
            $opts = $opts.sender(Participant::parse(&v).ok_or("bad sender")?);
        }
        if let Some(v) = $args.str("recipient")? {
            $opts = $opts.recipient(Participant::parse(&v).ok_or("bad recipient")?);
        }
        for k in ["temperature", "max_tokens", "top_p", "seed"] {
            if let Some(v) = $args.take(k) {
                $opts = $opts.field(k, v);
            }
        }
        if let Some(ids) = $args.strings("progression")? {
            let ids = ids
                .iter()
                .map(|id| id.parse().map_err(|e| format!("progression: {e}")))
                .collect::<Result<Vec<_>, String>>()?;
            $opts = $opts.progression(ids);
        }
        if let Some(v) = $args.strings("images")? {
            $opts = $opts.images(v);
        }
        if let Some(v) = $args.str("image_detail")? {
            let d = lionagi::core::message::ImageDetail::parse(&v)
                .ok_or_else(|| format!("image_detail {v}"))?;
            $opts = $opts.image_detail(d);
        }
    };
}

fn on_failure(v: Option<String>) -> Result<Option<OnParseFailure>, String> {
    Ok(match v.as_deref() {
        None => None,
        Some("raise") => Some(OnParseFailure::Raise),
        Some("return_value") => Some(OnParseFailure::ReturnValue),
        Some("return_none") => Some(OnParseFailure::ReturnNone),
        Some(o) => return Err(format!("handle_validation {o}")),
    })
}

fn strategy(v: Option<String>) -> Result<Option<Strategy>, String> {
    Ok(match v.as_deref() {
        None => None,
        Some("concurrent") => Some(Strategy::Concurrent),
        Some("sequential") => Some(Strategy::Sequential),
        Some(o) => return Err(format!("strategy {o}")),
    })
}

fn parsed_value(p: &Parsed) -> Value {
    match p {
        Parsed::Value(v) => v.clone(),
        Parsed::Unparsed(u) => Value::String(u.text.clone()),
        Parsed::Unvalidated(t) => Value::String(t.clone()),
        Parsed::Nothing => Value::Null,
    }
}

fn reply_value(r: &Reply) -> Value {
    match r {
        Reply::Text(t) => Value::String(t.clone()),
        Reply::Structured(v) => v.clone(),
        Reply::Unparsed(u) => Value::String(u.text.clone()),
        Reply::Nothing => Value::Null,
    }
}

fn err_value(e: impl std::fmt::Display, kind: &str) -> Value {
    let mut m = e.to_string();
    m.truncate(300);
    json!({"ok": false, "error": {"type": kind, "message": m}})
}

/// What a step hands the next ones: the branch may be replaced (clone).
struct State {
    branch: Branch,
}

async fn run_step(ctx: &Ctx<'_>, st: &mut State, op: &str, args: Value) -> Result<Value, String> {
    let mut a = Args(match args {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        o => return Err(format!("args must be an object, got {o}")),
    });
    let b = &mut st.branch;
    // {"$messages": [i, ...]}: the ids of the branch's messages at those places.
    if let Some(Value::Object(p)) = a.0.get("progression") {
        let ids: Vec<Value> = b.messages().iter().map(|m| json!(m.id())).collect();
        let picked = p
            .get("$messages")
            .and_then(Value::as_array)
            .ok_or("progression: expected {\"$messages\": [...]}")?
            .iter()
            .map(|i| {
                i.as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| ids.get(i).cloned())
                    .ok_or_else(|| format!("progression: no message at {i}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        a.0.insert("progression".into(), Value::Array(picked));
    }
    let out = match op {
        "chat" => {
            let mut o = ChatOptions::new(a.take("instruction").unwrap_or(Value::Null));
            turn_args!(o, a);
            if let Some(f) = a.take("response_format") {
                o = o.response_format(ctx.format_ref(&f)?);
            }
            if let Some(m) = a.take("imodel") {
                o = o.model(ctx.model_ref(&m)?);
            }
            if let Some(on) = a.bool("include_token_usage_to_model")? {
                o = o.include_token_usage_to_model(on);
            }
            if let Some(list) = a.list("tool_schemas")? {
                o = o.tool_schemas(list);
            }
            // The reference's chat shows request fields given as a map as
            // its dict format, unless a format is given (it does not show
            // a list of names).
            match a.take("request_fields") {
                None => {}
                Some(Value::Object(m)) if o.response_format.is_none() => {
                    o = o.response_format(ResponseFormat::Fields(m));
                }
                Some(Value::Object(_)) => {}
                Some(v) => return Err(format!("chat's request_fields: not a map: {v}")),
            }
            let record = a.bool("record")?.unwrap_or(false);
            a.done(op)?;
            let r = if record {
                b.chat_and_record(o).await
            } else {
                b.chat(o).await
            };
            r.map(Value::String).map_err(|e| e.to_string())
        }
        "communicate" => {
            let mut o = CommunicateOptions::new(a.take("instruction").unwrap_or(Value::Null));
            turn_args!(o, a);
            if let Some(f) = a.take("response_format") {
                o = o.response_format(ctx.format_ref(&f)?);
            }
            if let Some(f) = a.strings("request_fields")? {
                o = o.request_fields(f);
            }
            if let Some(m) = a.take("chat_model") {
                o = o.chat_model(ctx.model_ref(&m)?);
            }
            if let Some(m) = a.take("parse_model") {
                o = o.parse_model(ctx.model_ref(&m)?);
            }
            if let Some(on) = a.bool("skip_validation")? {
                o = o.skip_validation(on);
            }
            if let Some(n) = a.usize("num_parse_retries")? {
                o = o.num_parse_retries(n);
            }
            if let Some(on) = a.bool("clear_messages")? {
                o = o.clear_messages(on);
            }
            if let Some(on) = a.bool("include_token_usage_to_model")? {
                o = o.include_token_usage_to_model(on);
            }
            a.done(op)?;
            b.communicate(o)
                .await
                .map(|r| reply_value(&r))
                .map_err(|e| e.to_string())
        }
        "operate" => {
            let mut o = OperateOptions::new(a.take("instruction").unwrap_or(Value::Null));
            turn_args!(o, a);
            if let Some(f) = a.take("response_format") {
                o = o.response_format(ctx.format_ref(&f)?);
            }
            if let Some(on) = a.bool("actions")? {
                o = o.actions(on);
            }
            if let Some(on) = a.bool("reason")? {
                o = o.reason(on);
            }
            if let Some(on) = a.bool("invoke_actions")? {
                o = o.invoke_actions(on);
            }
            if let Some(t) = a.strings("tools")? {
                o = o.tools(t);
            }
            if let Some(m) = a.take("chat_model") {
                o = o.chat_model(ctx.model_ref(&m)?);
            }
            if let Some(m) = a.take("parse_model") {
                o = o.parse_model(ctx.model_ref(&m)?);
            }
            if let Some(on) = a.bool("skip_validation")? {
                o = o.skip_validation(on);
            }
            if let Some(on) = a.bool("clear_messages")? {
                o = o.clear_messages(on);
            }
            if let Some(v) = on_failure(a.str("handle_validation")?)? {
                o = o.on_parse_failure(v);
            }
            if let Some(s) = strategy(a.str("action_strategy")?)? {
                o = o.action_strategy(s);
            }
            if let Some(on) = a.bool("include_token_usage_to_model")? {
                o = o.include_token_usage_to_model(on);
            }
            for (name, schema) in a.field_models()? {
                o = o.field_model(name, schema);
            }
            if let Some(list) = a.list("tool_schemas")? {
                o = o.tool_schemas(list);
            }
            a.done(op)?;
            b.operate(o)
                .await
                .map(|r| {
                    r.structured
                        .clone()
                        .unwrap_or_else(|| parsed_value(&r.parsed))
                })
                .map_err(|e| e.to_string())
        }
        "parse" => {
            let text = a.str("text")?.unwrap_or_default();
            let f = a
                .take("response_format")
                .ok_or("parse needs response_format")?;
            let mut o = ParseOptions::new(ctx.format_ref(&f)?);
            if let Some(v) = on_failure(a.str("handle_validation")?)? {
                o = o.on_failure(v);
            }
            if let Some(n) = a.usize("max_retries")? {
                o = o.max_retries(n);
            }
            match a.take("similarity_threshold") {
                None => {}
                Some(t) => {
                    let t = t
                        .as_f64()
                        .ok_or_else(|| format!("similarity_threshold {t}"))?;
                    o = o.similarity_threshold(t);
                }
            }
            if let Some(u) = a.str("handle_unmatched")? {
                o = o.unmatched(match u.as_str() {
                    "ignore" => Unmatched::Ignore,
                    "raise" => Unmatched::Raise,
                    "remove" => Unmatched::Remove,
                    "fill" => Unmatched::Fill,
                    "force" => Unmatched::Force,
                    other => return Err(format!("handle_unmatched {other}")),
                });
            }
            if let Some(on) = a.bool("strict")? {
                o = o.strict(on);
            }
            if let Some(on) = a.bool("fuzzy_match")? {
                o = o.fuzzy_match(on);
            }
            if let Some(name) = a.str("similarity_algo")? {
                let s =
                    Similarity::parse(&name).ok_or_else(|| format!("similarity_algo {name}"))?;
                o = o.similarity(s);
            }
            if let Some(v) = a.take("fill_value") {
                o = o.fill_value(v);
            }
            match a.take("fill_mapping") {
                None => {}
                Some(Value::Object(m)) => o = o.fill_mapping(m),
                Some(other) => return Err(format!("fill_mapping: not a map: {other}")),
            }
            a.done(op)?;
            b.parse(&text, o)
                .await
                .map(|p| parsed_value(&p))
                .map_err(|e| e.to_string())
        }
        "interpret" => {
            let text = a.str("text")?.unwrap_or_default();
            let mut o = a.interpret_options(["domain", "style", "sample_writing"])?;
            if let Some(t) = a.take("temperature").and_then(|t| t.as_f64()) {
                o = o.temperature(t);
            }
            if let Some(m) = a.take("interpret_model") {
                o = o.model(ctx.model_ref(&m)?);
            }
            a.done(op)?;
            b.interpret(&text, o)
                .await
                .map(Value::String)
                .map_err(|e| e.to_string())
        }
        "act" => {
            let reqs = a.take("action_request").unwrap_or(Value::Null);
            let list = match reqs {
                Value::Array(l) => l,
                o => vec![o],
            };
            let calls = list
                .iter()
                .map(tool_call_from_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let mut o = ActOptions::default();
            if let Some(s) = strategy(a.str("strategy")?)? {
                o = o.strategy(s);
            }
            if let Some(on) = a.bool("suppress_errors")? {
                o = o.suppress_errors(on);
            }
            a.done(op)?;
            b.act(calls, o)
                .await
                .map(|r| serde_json::to_value(&r).unwrap_or(Value::Null))
                .map_err(|e| e.to_string())
        }
        "ReAct" | "ReActStream" => {
            let mut o = ReActOptions::new(a.take("instruction").unwrap_or(Value::Null));
            turn_args!(o, a);
            if let Some(f) = a.take("response_format") {
                o = o.response_format(ctx.format_ref(&f)?);
            }
            if let Some(n) = a.usize("max_extensions")? {
                o = o.max_extensions(n);
            }
            if let Some(on) = a.bool("extension_allowed")? {
                o = o.extension_allowed(on);
            }
            if let Some(on) = a.bool("interpret")? {
                let mut io = a.interpret_options([
                    "interpret_domain",
                    "interpret_style",
                    "interpret_sample",
                ])?;
                if let Some(m) = a.take("interpret_model") {
                    io = io.model(ctx.model_ref(&m)?);
                }
                match a.take("interpret_kwargs") {
                    None => {}
                    Some(Value::Object(kw)) => {
                        for (k, v) in kw {
                            io = io.field(&k, v);
                        }
                    }
                    Some(other) => return Err(format!("interpret_kwargs: not a map: {other}")),
                }
                o = o.interpret_with(io).interpret(on);
            }
            if let Some(t) = a.strings("tools")? {
                o = o.tools(t);
            }
            if let Some(list) = a.list("tool_schemas")? {
                o = o.tool_schemas(list);
            }
            if let Some(e) = a.str("reasoning_effort")? {
                o = o.reasoning_effort(e);
            }
            if let Some(on) = a.bool("return_analysis")? {
                o = o.return_analysis(on);
            }
            // One format or a list of them, as the reference takes either.
            match a.take("intermediate_response_options") {
                None | Some(Value::Null) => {}
                Some(Value::Array(list)) => {
                    for f in &list {
                        o = o.intermediate_response_option(ctx.format_ref(f)?);
                    }
                }
                Some(f) => o = o.intermediate_response_option(ctx.format_ref(&f)?),
            }
            if let Some(on) = a.bool("intermediate_listable")? {
                o = o.intermediate_listable(on);
            }
            for (name, schema) in a.field_models()? {
                o = o.field_model(name, schema);
            }
            // The final answer's own options, under the reference's names.
            match a.take("response_kwargs") {
                None | Some(Value::Null) => {}
                Some(Value::Object(kw)) => {
                    let mut k = Args(kw);
                    let mut ans = AnswerOptions::default();
                    if let Some(g) = k.take("guidance") {
                        ans = ans.guidance(g);
                    }
                    if let Some(c) = k.take("context") {
                        ans = ans.context(c);
                    }
                    if let Some(m) = k.take("imodel") {
                        ans = ans.model(ctx.model_ref(&m)?);
                    }
                    match k.take("imodel_kw") {
                        None => {}
                        Some(Value::Object(f)) => {
                            ans.fields = Some(f);
                        }
                        Some(v) => return Err(format!("imodel_kw: not a map: {v}")),
                    }
                    if let Some(on) = k.bool("reason")? {
                        ans = ans.reason(on);
                    }
                    for (name, schema) in k.field_models()? {
                        ans = ans.field_model(name, schema);
                    }
                    if let Some(on) = k.bool("skip_validation")? {
                        ans = ans.skip_validation(on);
                    }
                    if let Some(v) = on_failure(k.str("handle_validation")?)? {
                        ans = ans.on_parse_failure(v);
                    }
                    if let Some(v) = k.str("sender")? {
                        ans = ans.sender(Participant::parse(&v).ok_or("bad sender")?);
                    }
                    if let Some(v) = k.str("recipient")? {
                        ans = ans.recipient(Participant::parse(&v).ok_or("bad recipient")?);
                    }
                    if let Some(v) = k.str("plain_content")? {
                        ans = ans.plain_content(v);
                    }
                    if let Some(v) = k.strings("images")? {
                        ans = ans.images(v);
                    }
                    if let Some(v) = k.str("image_detail")? {
                        let d = lionagi::core::message::ImageDetail::parse(&v)
                            .ok_or_else(|| format!("bad image_detail {v}"))?;
                        ans = ans.image_detail(d);
                    }
                    if let Some(list) = k.list("tool_schemas")? {
                        ans = ans.tool_schemas(list);
                    }
                    k.done("response_kwargs")?;
                    o = o.answer_with(ans);
                }
                Some(v) => return Err(format!("response_kwargs: not a map: {v}")),
            }
            // A map of rounds done ("1", "2", ...) to the text the callback
            // returns (or null); "{messages}" in a text becomes the number
            // of messages the callback sees.
            if let Some(script) = a.take("between_rounds") {
                let Value::Object(script) = script else {
                    return Err(format!("between_rounds: not a map: {script}"));
                };
                o = o.between_rounds_async(move |branch, done| {
                    let text = script
                        .get(&done.to_string())
                        .and_then(Value::as_str)
                        .map(|t| t.replace("{messages}", &branch.messages().len().to_string()));
                    Box::pin(async move { text })
                });
            }
            if let Some(on) = a.bool("include_token_usage_to_model")? {
                o = o.include_token_usage_to_model(on);
            }
            if let Some(m) = a.take("analysis_model") {
                o = o.analysis_model(ctx.model_ref(&m)?);
            }
            a.done(op)?;
            if op == "ReAct" {
                b.ReAct(o)
                    .await
                    .map(|r| match r.analyses {
                        Some(list) => Value::Array(list),
                        None => r.answer,
                    })
                    .map_err(|e| e.to_string())
            } else {
                let mut out = Vec::new();
                let mut stream = b.ReActStream(o);
                let mut failed = None;
                while let Some(r) = stream.next().await {
                    match r {
                        Ok(round) => out.push(round.result_value()),
                        Err(e) => {
                            failed = Some(e.to_string());
                            break;
                        }
                    }
                }
                match failed {
                    Some(e) => Err(e),
                    None => Ok(Value::Array(out)),
                }
            }
        }
        "run" => {
            let mut o = RunOptions::new(a.take("instruction").unwrap_or(Value::Null));
            turn_args!(o, a);
            if let Some(m) = a.take("chat_model") {
                o = o.chat_model(ctx.model_ref(&m)?);
            }
            if let Some(f) = a.take("response_format") {
                o = o.response_format(ctx.format_ref(&f)?);
            }
            a.done(op)?;
            let mut out = Vec::new();
            let mut stream = b.run(o);
            let mut failed = None;
            while let Some(r) = stream.next().await {
                match r {
                    Ok(m) => {
                        let v = m.to_value().unwrap_or(Value::Null);
                        out.push(json!({"class": m.kind().class_name(), "content": v["content"]}));
                    }
                    Err(e) => {
                        failed = Some(e.to_string());
                        break;
                    }
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(Value::Array(out)),
            }
        }
        "connect" => {
            let m = a.str("model")?.ok_or("connect needs model")?;
            let name = a.str("name")?.ok_or("connect needs name")?;
            let description = a.str("description")?;
            let update = a.bool("update")?.unwrap_or(false);
            a.done(op)?;
            b.connect(ctx.model(&m)?, &name, description.as_deref(), update)
                .map_err(|e| e.to_string())?;
            let mut names: Vec<String> = b.tools().map(|t| t.name().to_owned()).collect();
            names.sort();
            Ok(json!(names))
        }
        "clone" => {
            a.done(op)?;
            let clone = st.branch.clone_branch().map_err(|e| e.to_string())?;
            let same = clone.chat_model().id() == st.branch.chat_model().id();
            st.branch = clone;
            Ok(json!({"same_chat_model": same}))
        }
        "reload" => {
            // The branch written by to_dict (json mode) and read back by
            // from_dict; models and tools are not written with their keys
            // or code, so the step gives them again.
            let model = a.str("model")?.ok_or("reload needs model")?;
            let parse = a.str("parse_model")?;
            let tools = a.strings("tools")?.unwrap_or_default();
            a.done(op)?;
            let d = b
                .to_dict(&ToDictOptions::mode(SerializationMode::Json))
                .map_err(|e| e.to_string())?;
            let mut restored = Branch::from_dict(&d).map_err(|e| e.to_string())?;
            let chat = ctx.model(&model)?;
            // Without a parse model of its own the branch's parse model is
            // its chat model, as a branch built with a chat model alone has.
            restored.set_parse_model(match parse {
                Some(p) => ctx.model(&p)?,
                None => chat.clone(),
            });
            restored.set_chat_model(chat);
            for t in tools {
                restored
                    .acts_mut()
                    .register(ctx.library.tool(&t)?, false)
                    .map_err(|e| e.to_string())?;
            }
            let messages = restored.messages().len();
            st.branch = restored;
            Ok(json!({"messages": messages}))
        }
        "session" => {
            let extra = a.strings("extra")?.unwrap_or_default();
            let remove = a.bool("remove")?.unwrap_or(false);
            a.done(op)?;
            let id = st.branch.id();
            let placeholder = Branch::builder().build().map_err(|e| e.to_string())?;
            let shared = lionagi::session::share(std::mem::replace(&mut st.branch, placeholder));
            let mut s = lionagi::session::Session::new()
                .await
                .map_err(|e| e.to_string())?;
            let mut batch = vec![shared.clone()];
            for n in extra {
                let b = Branch::builder()
                    .name(n)
                    .build()
                    .map_err(|e| e.to_string())?;
                batch.push(lionagi::session::share(b));
            }
            let included = s.include(batch).await.map_err(|e| e.to_string());
            if included.is_ok() && remove {
                s.remove(id).await.map_err(|e| e.to_string())?;
            }
            let facts = json!({"branches": s.len(), "default_is_branch": s.default_branch_id() == Some(id)});
            drop(s);
            st.branch = std::sync::Arc::try_unwrap(shared)
                .map_err(|_| "driver: the session kept the branch".to_owned())?
                .into_inner();
            included.map(|()| facts)
        }
        "register_provider" => {
            let text = a.str("text")?.unwrap_or_default();
            let kind = a.str("kind")?.unwrap_or_else(|| "text".into());
            let mut po = ProviderOptions::default();
            if let Some(n) = a.str("name")? {
                po = po.name(n);
            }
            if let Some(p) = a.take("priority").and_then(|v| v.as_i64()) {
                po = po.priority(p);
            }
            if let Some(m) = a.take("max_tokens").and_then(|v| v.as_i64()) {
                po = po.max_tokens(m);
            }
            a.done(op)?;
            b.providers()
                .register_with(StaticProvider { text, kind }, po);
            Ok(Value::Null)
        }
        "grant_capabilities" => {
            let name = a.str("name")?;
            let prompt = a.bool("prompt")?.unwrap_or(true);
            let fields = a.take("fields").unwrap_or(Value::Null);
            a.done(op)?;
            let mut specs = Vec::new();
            for f in fields.as_array().into_iter().flatten() {
                let n = f["name"].as_str().unwrap_or_default();
                let mut s = match f["type"].as_str() {
                    Some("str") => FieldSpec::string(n),
                    Some("int") => FieldSpec::integer(n),
                    Some("float") => FieldSpec::number(n),
                    Some("bool") => FieldSpec::boolean(n),
                    other => return Err(format!("capability field type {other:?}")),
                };
                if let Some(d) = f["description"].as_str() {
                    s = s.description(d);
                }
                specs.push(s);
            }
            let grant = Grant::new(name, specs).map_err(|e| e.to_string())?;
            b.grant_capabilities(grant, prompt);
            Ok(Value::Null)
        }
        other => Err(format!("driver: unknown op {other}")),
    }?;
    Ok(out)
}

/// A context provider with fixed text (`kind`: `text`, `none`, `fail`).
struct StaticProvider {
    text: String,
    kind: String,
}

#[async_trait::async_trait]
impl lionagi::core::ContextProvider for StaticProvider {
    async fn provide(
        &self,
        _branch: &Branch,
        _instruction: &Message,
    ) -> Result<Option<String>, lionagi::core::ProviderError> {
        match self.kind.as_str() {
            "fail" => Err(lionagi::core::ProviderError(
                "provider failed on purpose".into(),
            )),
            "none" => Ok(None),
            _ => Ok(Some(self.text.clone())),
        }
    }
}

fn build_branch(ctx: &Ctx<'_>, spec: &Value) -> Result<Branch, String> {
    let mut bld = Branch::builder();
    bld = match spec["cli_model"].as_str() {
        // A CLI agent model (never run here: only built, cloned, stored).
        Some(cli) => {
            let (provider, name) = cli.split_once('/').ok_or("cli_model is PROVIDER/NAME")?;
            let m: Arc<dyn ChatModel> =
                Arc::new(ModelConfig::new(provider, name).map_err(|e| e.to_string())?);
            bld.chat_model(m)
        }
        None => bld.chat_model(ctx.branch_chat_model(spec)?),
    };
    if let Some(p) = spec["parse_model"].as_str() {
        bld = bld.parse_model(ctx.model(p)?);
    }
    for (k, v) in spec.as_object().into_iter().flatten() {
        bld = match (k.as_str(), v) {
            (
                "model" | "parse_model" | "cli_model" | "max_input_tokens" | "allow_local_network",
                _,
            ) => bld,
            ("memory", Value::Bool(true)) => {
                bld.memory(Arc::new(lionagi::core::InMemoryStore::new()))
            }
            ("system", v) => bld.system(v.clone()),
            ("user", Value::String(u)) => bld.user(Participant::parse(u).ok_or("bad user")?),
            ("name", Value::String(n)) => bld.name(n.clone()),
            ("use_lion_system_message", Value::Bool(on)) => bld.use_lion_system_message(*on),
            ("tools", Value::Array(names)) => {
                let mut tools = Vec::new();
                for n in names {
                    tools.push(ctx.library.tool(n.as_str().unwrap_or_default())?);
                }
                bld.tools(tools)
            }
            (k, v) => return Err(format!("driver: branch keyword {k}={v} not mapped")),
        };
    }
    bld.build().map_err(|e| e.to_string())
}

fn to_dict_options(m: &Value) -> Result<ToDictOptions, String> {
    let mode = match m["mode"].as_str() {
        Some("python") | None => SerializationMode::Python,
        Some("json") => SerializationMode::Json,
        Some("db") => SerializationMode::Db,
        Some(o) => return Err(format!("mode {o}")),
    };
    let mut o = ToDictOptions::mode(mode);
    o.db_meta_key = m["db_meta_key"].as_str().map(str::to_owned);
    let flag = |k: &str, d: bool| m[k].as_bool().unwrap_or(d);
    o.include_request_options = flag("include_request_options", false);
    o.include_logs = flag("include_logs", true);
    o.include_log_config = flag("include_log_config", false);
    o.include_processor_config = flag("include_processor_config", false);
    Ok(o)
}

fn dict_modes(sc: &Value) -> Vec<Value> {
    sc.get("to_dict")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![json!({"mode": "json"}), json!({"mode": "db"})])
}

fn mode_key(m: &Value) -> String {
    m["key"]
        .as_str()
        .or(m["mode"].as_str())
        .unwrap_or("python")
        .to_owned()
}

fn to_dicts(b: &Branch, modes: &[Value]) -> Value {
    let mut out = Map::new();
    for m in modes {
        let r = to_dict_options(m).and_then(|o| b.to_dict(&o).map_err(|e| e.to_string()));
        out.insert(
            mode_key(m),
            match r {
                Ok(v) => json!({"ok": true, "value": v}),
                Err(e) => err_value(e, "BranchError"),
            },
        );
    }
    Value::Object(out)
}

/// Runs `sc` and returns its result document (the same shape as the
/// reference driver's).
pub async fn run(sc: &Value, library: &Library) -> Value {
    let server = MockServer::start().await;
    let replies: Result<Vec<MockReply>, String> = sc["replies"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| MockReply::from_script(r).ok_or_else(|| format!("bad reply {r}")))
        .collect();
    let ctx = Ctx { server, library };
    if let Err(e) = crate::agent::reset(&sc["cli"]) {
        return json!({"driver_error": e});
    }
    let branch = match replies.and_then(|r| {
        ctx.server.script(r);
        // Past the script's end: 400 (not retried), as the reference
        // driver's server answers.
        ctx.server.script(
            std::iter::repeat_with(|| MockReply::error(400, "mock: no scripted reply left"))
                .take(64),
        );
        build_branch(&ctx, &sc["branch"])
    }) {
        Ok(b) => b,
        Err(e) => return json!({"driver_error": e}),
    };
    let mut st = State { branch };
    let mut steps = Vec::new();
    for step in sc["steps"].as_array().into_iter().flatten() {
        let op = step["op"].as_str().unwrap_or_default();
        let turn = run_step(&ctx, &mut st, op, step["args"].clone());
        let r = match tokio::time::timeout(std::time::Duration::from_secs(60), turn).await {
            Ok(Ok(v)) => json!({"op": op, "ok": true, "value": v}),
            Ok(Err(e)) if e.starts_with("driver:") => return json!({"driver_error": e}),
            Ok(Err(e)) => {
                let mut v = err_value(e, "OperationError");
                v["op"] = json!(op);
                v
            }
            Err(_) => return json!({"driver_error": format!("{op}: no result within 60 s")}),
        };
        steps.push(r);
    }
    json!({
        "steps": steps,
        "requests": ctx.server.bodies(),
        "agent_calls": crate::agent::calls(),
        "to_dict": to_dicts(&st.branch, &dict_modes(sc)),
    })
}

/// `from_dict` of the reference's `to_dict` outputs (`other`) and of our
/// own (`self`), each followed by `to_dict` with the same options; and the
/// turn each loaded branch takes next (`continued`).
pub async fn cross_load(theirs: &Value, ours: &Value, sc: &Value, library: &Library) -> Value {
    let modes = dict_modes(sc);
    let mut continued = Map::new();
    if let Some(key) = continues(sc) {
        for (side, produced) in [("other", theirs), ("self", ours)] {
            let r = &produced["to_dict"][&key];
            if r["ok"] == json!(true) {
                continued.insert(side.into(), continue_from(&r["value"], sc, library).await);
            }
        }
    }
    json!({"other": reload(theirs, &modes), "self": reload(ours, &modes),
           "continued": continued})
}

/// The `to_dict` key whose output a loaded branch goes on from (the first
/// json-mode one), or `None`: a CLI agent's branch is not run again, and
/// after `act` the reference drops the results still pending (§15 M3).
fn continues(sc: &Value) -> Option<String> {
    let steps = sc["steps"].as_array().into_iter().flatten();
    if !sc["branch"]["cli_model"].is_null() || steps.clone().any(|s| s["op"] == "act") {
        return None;
    }
    dict_modes(sc)
        .iter()
        .find(|m| m["mode"] == "json")
        .map(mode_key)
}

/// The turn a branch loaded from `data` takes next: given the scenario's
/// chat model again (a stored model has no key), it communicates once; the
/// request it sent, or its failure, is the result.
async fn continue_from(data: &Value, sc: &Value, library: &Library) -> Value {
    let ctx = Ctx {
        server: MockServer::start().await,
        library,
    };
    ctx.server.script([MockReply::text("Continued.")]);
    ctx.server.script(
        std::iter::repeat_with(|| MockReply::error(400, "mock: no scripted reply left")).take(4),
    );
    let turn = async {
        let mut b = Branch::from_dict(data).map_err(|e| e.to_string())?;
        let chat = ctx.branch_chat_model(&sc["branch"])?;
        b.set_parse_model(chat.clone());
        b.set_chat_model(chat);
        b.communicate(CommunicateOptions::new(CONTINUE))
            .await
            .map_err(|e| e.to_string())
    };
    let mut r = match tokio::time::timeout(std::time::Duration::from_secs(60), turn).await {
        Ok(Ok(_)) => json!({"ok": true}),
        Ok(Err(e)) => err_value(e, "OperationError"),
        Err(_) => err_value("no result within 60 s", "OperationError"),
    };
    r["requests"] = json!(ctx.server.bodies());
    r
}

/// What a loaded branch is asked when it goes on (`continued`).
const CONTINUE: &str = "Continue.";

fn reload(produced: &Value, modes: &[Value]) -> Value {
    let mut out = Map::new();
    for (key, r) in produced["to_dict"].as_object().into_iter().flatten() {
        if r["ok"] != json!(true) {
            continue;
        }
        let m = modes
            .iter()
            .find(|m| mode_key(m) == *key)
            .cloned()
            .unwrap_or_else(|| json!({"mode": key}));
        let v = Branch::from_dict(&r["value"])
            .map_err(|e| e.to_string())
            .and_then(|b| {
                to_dict_options(&m).and_then(|o| b.to_dict(&o).map_err(|e| e.to_string()))
            });
        out.insert(
            key.clone(),
            match v {
                Ok(v) => json!({"ok": true, "value": v}),
                Err(e) => err_value(e, "BranchError"),
            },
        );
    }
    Value::Object(out)
}
