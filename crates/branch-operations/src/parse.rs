//! Structured output: the local fuzzy parse and the repair loop
//! (operations.md §4).

use std::sync::Arc;
use std::time::Duration;

use branch_core::Branch;
use branch_core::message::Message;
use branch_core::model::ChatModel;
use branch_messages::ResponseFormat;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::chat::{ChatOptions, chat_turn};
use crate::error::{OperationError, ParseFailure, Result};
use crate::format::{expected_keys, format_title, validate};
use crate::fuzzy::{Similar, Unmatched, extract_json, match_keys_filling};
use crate::lax::coerce;
use crate::similarity::Similarity;
use crate::turn::SendOptions;

/// What to do when parsing finally fails (`handle_validation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnParseFailure {
    /// Fail with [`OperationError::Parse`].
    Raise,
    /// Return the text as [`Parsed::Unparsed`].
    #[default]
    ReturnValue,
    /// Return [`Parsed::Nothing`].
    ReturnNone,
}

/// Text that did not parse (the reference's `UnparsedResponse`).
#[derive(Debug, Clone, PartialEq)]
pub struct Unparsed {
    /// The text.
    pub text: String,
    /// Why it did not parse.
    pub failure: ParseFailure,
}

/// The outcome of a parse.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed<T = Value> {
    /// The structured value.
    Value(T),
    /// The text, which did not parse.
    Unparsed(Unparsed),
    /// Nothing (with [`OnParseFailure::ReturnNone`]).
    Nothing,
    /// The reply text, returned as it came because `skip_validation` was
    /// set: no parse was attempted, so nothing failed.
    ///
    /// ```
    /// use branch_operations::Parsed;
    ///
    /// let p: Parsed = Parsed::Unvalidated("{\"answer\": \"4\"}".into());
    /// assert!(!p.is_value());
    /// assert_eq!(p.text(), Some("{\"answer\": \"4\"}"));
    /// ```
    Unvalidated(String),
}

impl<T> Parsed<T> {
    /// The value, if parsing succeeded.
    pub fn value(self) -> Option<T> {
        match self {
            Parsed::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Whether parsing succeeded.
    pub fn is_value(&self) -> bool {
        matches!(self, Parsed::Value(_))
    }

    /// The text of a reply that was not parsed into a value (unparsed or
    /// unvalidated).
    pub fn text(&self) -> Option<&str> {
        match self {
            Parsed::Unparsed(u) => Some(&u.text),
            Parsed::Unvalidated(t) => Some(t),
            _ => None,
        }
    }
}

/// Options of `parse` (defaults: branch.md §9.2).
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// The structure to parse into.
    pub format: ResponseFormat,
    /// What a final failure gives.
    pub on_failure: OnParseFailure,
    /// Repair retries (attempts = 1 + retries; 0 → 3, as the reference).
    pub max_retries: usize,
    /// How keys are compared to the expected names (Jaro-Winkler).
    pub similarity: Similarity,
    /// The least similarity that matches a key to a name, in `0..=1`
    /// (0.85).
    pub similarity_threshold: f64,
    /// Match keys fuzzily.
    pub fuzzy_match: bool,
    /// Unmatched keys / missing fields policy.
    pub unmatched: Unmatched,
    /// Value for missing fields (`Fill`, `Force`).
    pub fill_value: Value,
    /// Per-field values for missing fields.
    pub fill_mapping: Map<String, Value>,
    /// Fail when expected fields remain missing.
    pub strict: bool,
    /// The repair model (→ the branch's parse model).
    pub model: Option<Arc<dyn ChatModel>>,
    /// Wait before the second repair; later waits grow by `backoff_factor`.
    pub backoff: Duration,
    /// Growth of the wait between repairs.
    pub backoff_factor: f64,
}

impl ParseOptions {
    /// Parse into `format` with the reference's `Branch.parse` defaults.
    pub fn new(format: ResponseFormat) -> Self {
        Self {
            format,
            on_failure: OnParseFailure::ReturnValue,
            max_retries: 3,
            similarity: Similarity::JaroWinkler,
            similarity_threshold: 0.85,
            fuzzy_match: true,
            unmatched: Unmatched::Force,
            fill_value: Value::Null,
            fill_mapping: Map::new(),
            strict: false,
            model: None,
            backoff: Duration::from_secs(1),
            backoff_factor: 1.85,
        }
    }

    /// Parse into the schema of `T`.
    pub fn of<T: schemars::JsonSchema>() -> Self {
        Self::new(crate::format::format_of::<T>())
    }

    /// Sets the failure policy.
    pub fn on_failure(mut self, v: OnParseFailure) -> Self {
        self.on_failure = v;
        self
    }

    /// Sets the number of repair retries.
    pub fn max_retries(mut self, n: usize) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets the unmatched-keys policy.
    pub fn unmatched(mut self, u: Unmatched) -> Self {
        self.unmatched = u;
        self
    }

    /// Sets the repair model.
    pub fn model(mut self, m: Arc<dyn ChatModel>) -> Self {
        self.model = Some(m);
        self
    }

    /// Sets the wait between repairs.
    pub fn backoff(mut self, first: Duration, factor: f64) -> Self {
        self.backoff = first;
        self.backoff_factor = factor;
        self
    }

    /// Sets the key similarity threshold, in `0..=1` (anything else is
    /// refused before parsing; docs/compat.md §21 H14).
    pub fn similarity_threshold(mut self, t: f64) -> Self {
        self.similarity_threshold = t;
        self
    }

    /// Sets how keys are compared (the reference's `similarity_algo`).
    pub fn similarity(mut self, s: Similarity) -> Self {
        self.similarity = s;
        self
    }

    /// Fails when expected fields stay missing.
    pub fn strict(mut self, on: bool) -> Self {
        self.strict = on;
        self
    }

    /// Matches keys fuzzily (on by default); off, a key matches only
    /// when spelled exactly.
    pub fn fuzzy_match(mut self, on: bool) -> Self {
        self.fuzzy_match = on;
        self
    }

    /// The value a missing field gets under `Fill` and `Force`.
    pub fn fill_value(mut self, v: Value) -> Self {
        self.fill_value = v;
        self
    }

    /// Values of particular missing fields, before `fill_value`.
    pub fn fill_mapping(mut self, m: Map<String, Value>) -> Self {
        self.fill_mapping = m;
        self
    }

    /// The local attempt alone, with no model and no repair: the JSON
    /// object `text` holds (fenced, lenient, cut short), its keys matched
    /// to the format's fields, its scalars converted as pydantic's lax mode
    /// does, validated and completed with the declared defaults.
    /// A similarity threshold outside `0..=1` fails as a validation.
    pub fn parse_local(&self, text: &str) -> std::result::Result<Map<String, Value>, ParseFailure> {
        if let Some(e) = threshold_error(self.similarity_threshold) {
            return Err(ParseFailure::Validation(format!(
                "similarity_threshold {e}"
            )));
        }
        parse_local(text, self)
    }
}

/// What is wrong with a similarity threshold outside `0..=1` (NaN too).
fn threshold_error(t: f64) -> Option<String> {
    (!(0.0..=1.0).contains(&t)).then(|| format!("must be between 0 and 1, got {t}"))
}

/// The local attempt: extraction, key matching, validation.
pub(crate) fn parse_local(
    text: &str,
    opts: &ParseOptions,
) -> std::result::Result<Map<String, Value>, ParseFailure> {
    let obj = extract_json(text).ok_or(ParseFailure::Extraction)?;
    let keys = expected_keys(&opts.format);
    // Without fuzzy matching only exact keys match; the unmatched policy
    // applies either way, as in the reference.
    let similar = Similar {
        measure: opts.similarity,
        threshold: if opts.fuzzy_match {
            opts.similarity_threshold
        } else {
            f64::INFINITY
        },
    };
    let filled = std::cell::RefCell::new(Vec::new());
    let mut obj = match_keys_filling(obj, &keys, similar, opts.unmatched, |name| {
        filled.borrow_mut().push(name.to_owned());
        opts.fill_mapping
            .get(name)
            .unwrap_or(&opts.fill_value)
            .clone()
    })
    .map_err(ParseFailure::Validation)?;
    if opts.strict {
        // A filled field is still one the text did not give.
        let filled = filled.into_inner();
        let missing: Vec<&String> = keys
            .iter()
            .filter(|k| !obj.contains_key(*k) || filled.contains(k))
            .collect();
        if !missing.is_empty() {
            return Err(ParseFailure::Validation(format!(
                "missing required fields: {missing:?}"
            )));
        }
    }
    if let ResponseFormat::Schema(schema) = &opts.format {
        coerce(&mut obj, schema);
        validate(&Value::Object(obj.clone()), schema).map_err(ParseFailure::Validation)?;
        // As a pydantic model dumps itself, at every depth.
        obj = crate::model_dump::dump(obj, schema);
    }
    Ok(obj)
}

/// The guidance of repair attempt `n` (1-based).
fn repair_guidance(n: usize, previous: Option<&ParseFailure>) -> String {
    let mut g =
        String::from("follow the required response format, using the model schema as a guide");
    if let Some(err) = previous {
        let mut e = err.to_string();
        if e.chars().count() > 800 {
            e = e.chars().take(800).collect::<String>() + " …(truncated)";
        }
        g.push_str(&format!(
            " The previous attempt did not validate: {e}. Correct exactly what that error names — every field it reports must carry a value of the required type."
        ));
    }
    if n >= 2 {
        g.push_str(&format!(
            " This is attempt {n}; earlier attempts failed. Return only the JSON object, with no text before or after it."
        ));
    }
    g
}

/// A parse with its repairs: the object, or the last failure; plus the
/// raw reply of the repair that succeeded.
pub(crate) struct Repaired {
    pub result: std::result::Result<Map<String, Value>, ParseFailure>,
    /// The raw reply of the repair that succeeded.
    pub repair_response: Option<Value>,
}

/// Parses `text`; on failure asks `model` to reformat it, up to
/// `1 + retries` times. `pending` are this call's messages not yet in the
/// branch (the repair request shows them as history); `react_context` is
/// the ReAct context the turn's own request de-duplicated, and the repair
/// request shows the same history, so it de-duplicates it alike.
pub(crate) async fn parse_with_repairs(
    branch: &mut Branch,
    text: &str,
    opts: &ParseOptions,
    retries: usize,
    pending: &[Message],
    base_progression: Option<&[uuid::Uuid]>,
    react_context: Option<&[Value]>,
) -> Result<Repaired> {
    let progression: Option<Vec<uuid::Uuid>> = base_progression.map(|b| {
        b.iter()
            .copied()
            .chain(pending.iter().map(Message::id))
            .collect()
    });
    let mut last = match parse_local(text, opts) {
        Ok(obj) => {
            return Ok(Repaired {
                result: Ok(obj),
                repair_response: None,
            });
        }
        Err(e) => e,
    };
    let mut wait = opts.backoff;
    for n in 1..=retries + 1 {
        if n >= 2 {
            tokio::time::sleep(wait).await;
            wait = wait.mul_f64(opts.backoff_factor.max(1.0));
        }
        let mut chat = ChatOptions::new("reformat text into specified model or structure")
            .guidance(repair_guidance(n, Some(&last)))
            .context(json!([{"text_to_format": text}]))
            .response_format(opts.format.clone());
        chat.model = Some(match &opts.model {
            Some(m) => m.clone(),
            None => branch.parse_model().clone(),
        });
        let mut turn = chat_turn(
            branch,
            chat,
            SendOptions {
                pending,
                progression: progression.as_deref(),
                react_context,
                ..SendOptions::default()
            },
        )
        .await?;
        match parse_local(&turn.text, opts) {
            Ok(obj) => {
                return Ok(Repaired {
                    result: Ok(obj),
                    repair_response: turn
                        .response
                        .element
                        .metadata
                        .shift_remove("model_response"),
                });
            }
            Err(e) => last = e,
        }
    }
    Ok(Repaired {
        result: Err(last),
        repair_response: None,
    })
}

/// Applies the failure policy.
pub(crate) fn outcome(
    text: &str,
    result: std::result::Result<Map<String, Value>, ParseFailure>,
    on_failure: OnParseFailure,
    format: &ResponseFormat,
) -> Result<Parsed> {
    match result {
        Ok(obj) => Ok(Parsed::Value(Value::Object(obj))),
        Err(failure) => match on_failure {
            OnParseFailure::Raise => Err(OperationError::Parse {
                format: format_title(format),
                reason: failure,
                committed: Default::default(),
            }),
            OnParseFailure::ReturnValue => Ok(Parsed::Unparsed(Unparsed {
                text: text.to_owned(),
                failure,
            })),
            OnParseFailure::ReturnNone => Ok(Parsed::Nothing),
        },
    }
}

/// Decodes a parsed value into `T`.
pub(crate) fn decode<T: DeserializeOwned>(
    parsed: Parsed,
    text: &str,
    on_failure: OnParseFailure,
    format: &ResponseFormat,
) -> Result<Parsed<T>> {
    match parsed {
        Parsed::Value(v) => match serde_json::from_value::<T>(v) {
            Ok(t) => Ok(Parsed::Value(t)),
            Err(e) => outcome(
                text,
                Err(ParseFailure::Validation(e.to_string())),
                on_failure,
                format,
            )
            .map(|p| match p {
                Parsed::Unparsed(u) => Parsed::Unparsed(u),
                _ => Parsed::Nothing,
            }),
        },
        Parsed::Unparsed(u) => Ok(Parsed::Unparsed(u)),
        Parsed::Nothing => Ok(Parsed::Nothing),
        Parsed::Unvalidated(t) => Ok(Parsed::Unvalidated(t)),
    }
}

pub(crate) async fn parse(branch: &mut Branch, text: &str, opts: ParseOptions) -> Result<Parsed> {
    if let Some(message) = threshold_error(opts.similarity_threshold) {
        return Err(OperationError::InvalidArgument {
            what: "similarity_threshold",
            message,
        });
    }
    let span = crate::telemetry::verb_span("parse", branch);
    let retries = if opts.max_retries == 0 {
        3
    } else {
        opts.max_retries
    };
    // The reformat request shows the structure as the reference's `parse`
    // names it: `<Title>Request`.
    let mut requested = opts.clone();
    requested.format = crate::format::retitled(&opts.format, "Request");
    let repaired = span
        .run(parse_with_repairs(
            branch,
            text,
            &requested,
            retries,
            &[],
            None,
            None,
        ))
        .await?;
    outcome(text, repaired.result, opts.on_failure, &opts.format)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer() -> ParseOptions {
        ParseOptions::new(ResponseFormat::Schema(json!({
            "type": "object",
            "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
            "required": ["answer", "confidence"],
        })))
    }

    fn mapping(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn a_fields_own_fill_comes_before_the_fill_value() {
        let o = answer()
            .fill_value(json!(0.5))
            .fill_mapping(mapping(json!({"confidence": 0.7, "other": 1})));
        let got = parse_local(r#"{"answer": "4"}"#, &o).unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"answer": "4", "confidence": 0.7})
        );
        // A field the text gave keeps its value.
        let got = parse_local(r#"{"answer": "4", "confidence": 0.1}"#, &o).unwrap();
        assert_eq!(got["confidence"], json!(0.1));
    }

    #[test]
    fn without_fuzzy_matching_the_policy_still_applies() {
        let o = answer().fuzzy_match(false).fill_value(json!(0.5));
        // `force`: the exact key stays, the near miss is dropped, the
        // missing field is filled.
        let got = parse_local(r#"{"answer": "4", "confidnce": 0.9}"#, &o).unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"answer": "4", "confidence": 0.5})
        );
        // With fuzzy matching the near miss is the field.
        let got = parse_local(r#"{"answer": "4", "confidnce": 0.9}"#, &answer()).unwrap();
        assert_eq!(got["confidence"], json!(0.9));
        let raise = answer().fuzzy_match(false).unmatched(Unmatched::Raise);
        assert!(parse_local(r#"{"answr": "4", "confidence": 0.9}"#, &raise).is_err());
    }

    #[test]
    fn keys_match_by_the_chosen_measure_and_the_first_field_wins_a_tie() {
        let o = answer().similarity_threshold(0.8).fill_value(json!("none"));
        let text = r#"{"answr": "4", "confidence": 0.9}"#;
        let levenshtein = o.clone().similarity(Similarity::Levenshtein);
        assert_eq!(levenshtein.parse_local(text).unwrap()["answer"], json!("4"));
        // Hamming scores strings of different lengths 0.
        let hamming = o.similarity(Similarity::Hamming);
        assert_eq!(hamming.parse_local(text).unwrap()["answer"], json!("none"));
        let two = ParseOptions::new(ResponseFormat::Schema(json!({
            "type": "object",
            "properties": {
                "ab": {"type": ["integer", "null"]},
                "cc": {"type": ["integer", "null"]},
            },
        })))
        .similarity(Similarity::Hamming)
        .similarity_threshold(0.5);
        let got = two.parse_local(r#"{"ac": 1}"#).unwrap();
        assert_eq!(Value::Object(got), json!({"ab": 1, "cc": null}));
    }

    #[test]
    fn a_threshold_outside_zero_to_one_is_refused() {
        for t in [1.5, -0.1, f64::NAN] {
            let err = answer()
                .similarity_threshold(t)
                .parse_local("{}")
                .unwrap_err();
            assert!(err.to_string().contains("similarity_threshold"), "{err}");
        }
    }

    #[test]
    fn a_filled_field_is_missing_to_strict() {
        let o = answer()
            .unmatched(Unmatched::Fill)
            .fill_value(json!(0.5))
            .strict(true);
        let err = parse_local(r#"{"answer": "4"}"#, &o).unwrap_err();
        assert!(err.to_string().contains("confidence"), "{err}");
        assert!(parse_local(r#"{"answer": "4", "confidence": 0.2}"#, &o).is_ok());
    }
}
