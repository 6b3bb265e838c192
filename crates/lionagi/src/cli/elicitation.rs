//! Questions an MCP server asks the person during one of its calls (MCP
//! elicitation): a message and a form, asked field by field on the
//! conversation's input while the turn waits, or an address to open, shown
//! whole before the person agrees.
//!
//! The server's call runs inside the turn, on the runtime. Its question
//! comes here through a channel; [`drive`] runs the turn and, when a
//! question arrives, leaves the runtime to ask it (the line editor blocks
//! its thread, which must not be the runtime's inside async code), then
//! goes back to the turn with the answer. Nothing else of the turn can
//! happen meanwhile: the server is waiting for the answer.

use std::cell::RefCell;
use std::sync::Arc;

use branch_mcp::{Address, Asks, ElicitAnswer, ElicitHook, Elicitation, Field, FieldKind};
use serde_json::{Map, Number, Value};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

use super::chat_error::ChatError;
use super::input::{Input, Line};
use super::shown::{one_line, printable};

/// Questions that may wait for the person at once (one per server call
/// in flight, at most); a server sending more waits to send them.
const WAITING_QUESTIONS: usize = 8;

/// Unclear answers to one field before the question is dismissed.
const MAX_UNCLEAR_ANSWERS: usize = 3;

/// A question and where its answer goes.
struct Pending {
    question: Elicitation,
    reply: oneshot::Sender<ElicitAnswer>,
}

/// The person's side of the servers' questions: they arrive here while a
/// turn runs in [`drive`].
pub(crate) struct Questions {
    waiting: RefCell<mpsc::Receiver<Pending>>,
}

/// The hook the servers are connected with, and where its questions
/// arrive. Only a question asked while one of our requests to its server
/// is in flight gets here (`branch-mcp` declines the others), so one is
/// always asked by the turn's [`drive`].
pub(crate) fn channel() -> (ElicitHook, Questions) {
    let (tx, rx) = mpsc::channel::<Pending>(WAITING_QUESTIONS);
    let hook: ElicitHook = Arc::new(move |question| {
        let tx = tx.clone();
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            if tx.send(Pending { question, reply }).await.is_err() {
                return ElicitAnswer::Cancel;
            }
            answer.await.unwrap_or(ElicitAnswer::Cancel)
        })
    });
    let questions = Questions {
        waiting: RefCell::new(rx),
    };
    (hook, questions)
}

enum Step<T> {
    Done(T),
    Ask(Pending),
}

/// Runs `work` on `rt`. With `asking`, a question a server puts meanwhile
/// is asked on the input, off the runtime, and `work` goes on with the
/// answer.
pub(crate) fn drive<T>(
    rt: &Runtime,
    asking: Option<(&Questions, &mut Input)>,
    work: impl Future<Output = T>,
) -> T {
    let Some((questions, input)) = asking else {
        return rt.block_on(work);
    };
    let mut work = std::pin::pin!(work);
    let mut waiting = questions.waiting.borrow_mut();
    loop {
        let step = rt.block_on(async {
            tokio::select! {
                biased;
                done = &mut work => Step::Done(done),
                Some(p) = waiting.recv() => Step::Ask(p),
            }
        });
        match step {
            Step::Done(done) => return done,
            // The server stopped waiting (its call ended or was
            // cancelled) before the question came up: nobody to answer.
            Step::Ask(p) if p.reply.is_closed() => {}
            Step::Ask(p) => {
                // An input that failed dismisses the question; the input
                // keeps the failure, which ends the conversation at its
                // next prompt, or a one-shot command once its turn is
                // recorded (`Input::failure`).
                let answer = ask(&p.question, |prompt| input.answer(rt, prompt));
                // The server may have given up (its call ended).
                let _ = p.reply.send(answer.unwrap_or(ElicitAnswer::Cancel));
            }
        }
    }
}

/// Asks `q`, reading answers from `answer` (given the prompt): whether to
/// answer at all, then each field. Leaving (end of input, Ctrl-C) or
/// [`MAX_UNCLEAR_ANSWERS`] unclear answers to one field dismiss it.
pub(crate) fn ask(
    q: &Elicitation,
    mut answer: impl FnMut(&str) -> Result<Line, ChatError>,
) -> Result<ElicitAnswer, ChatError> {
    let mut next = |prompt: &str| -> Result<Option<String>, ChatError> {
        Ok(match answer(prompt)? {
            Line::Text(t) => Some(t),
            Line::Eof | Line::Interrupted => None,
        })
    };
    let fields = match &q.asks {
        Asks::Form { form, .. } => &form.fields,
        Asks::Url(address) => return open(q, address, &mut next),
        // A kind of question this command does not show.
        _ => return Ok(ElicitAnswer::Decline),
    };
    super::spinner::eprint_line(&format!(
        "[{}] asks: {}",
        one_line(&q.server),
        printable(&q.message)
    ));
    // With nothing to fill in, the question is whether to go on.
    let prompt = if fields.is_empty() {
        "go on? [y]es / [n]o: "
    } else {
        "answer it? [y]es / [n]o: "
    };
    match yes_or_no(&mut next, prompt)? {
        Some(true) => {}
        Some(false) => return Ok(ElicitAnswer::Decline),
        None => return Ok(ElicitAnswer::Cancel),
    }
    let mut filled = Map::new();
    for field in fields {
        describe(field);
        let prompt = format!("{}: ", one_line(&field.title));
        let mut value = None;
        for _ in 0..MAX_UNCLEAR_ANSWERS {
            let Some(text) = next(&prompt)? else {
                return Ok(ElicitAnswer::Cancel);
            };
            match read_value(field, text.trim()) {
                Ok(v) => {
                    value = Some(v);
                    break;
                }
                Err(why) => eprintln!("{why}"),
            }
        }
        match value {
            Some(Some(v)) => {
                filled.insert(field.name.clone(), v);
            }
            Some(None) => {}
            None => return Ok(ElicitAnswer::Cancel),
        }
    }
    Ok(ElicitAnswer::Accept(filled))
}

/// An address the server asks the person to open: shown whole, its host
/// apart and what deserves a second look named, before they agree. Nothing
/// is opened here: the person opens it themselves.
fn open(
    q: &Elicitation,
    address: &Address,
    next: &mut impl FnMut(&str) -> Result<Option<String>, ChatError>,
) -> Result<ElicitAnswer, ChatError> {
    super::spinner::eprint_line(&format!(
        "[{}] asks you to open an address: {}",
        one_line(&q.server),
        printable(&q.message)
    ));
    // Parsed and written back, the address is ASCII without controls.
    eprintln!("  host: {}", address.host);
    eprintln!("  address: {}", address.url);
    for w in &address.warnings {
        eprintln!("  warning: {}", w.describe());
    }
    Ok(match yes_or_no(next, "will you open it? [y]es / [n]o: ")? {
        Some(true) => {
            eprintln!("  open it in your browser and finish there");
            ElicitAnswer::Accept(Map::new())
        }
        Some(false) => ElicitAnswer::Decline,
        None => ElicitAnswer::Cancel,
    })
}

/// Yes or no, asked again on an unclear answer ([`MAX_UNCLEAR_ANSWERS`]
/// times); `None` when the person left or never said.
fn yes_or_no(
    next: &mut impl FnMut(&str) -> Result<Option<String>, ChatError>,
    prompt: &str,
) -> Result<Option<bool>, ChatError> {
    for _ in 0..MAX_UNCLEAR_ANSWERS {
        let Some(text) = next(prompt)? else {
            return Ok(None);
        };
        match text.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(Some(true)),
            "n" | "no" => return Ok(Some(false)),
            _ => eprintln!("answer y or n"),
        }
    }
    Ok(None)
}

/// The field's description and what its answer may be, on stderr.
fn describe(field: &Field) {
    if let Some(d) = &field.description {
        eprintln!("  {}", one_line(d));
    }
    let what = match &field.kind {
        FieldKind::Text { min, max, format } => {
            let what = format.map_or("text", |f| f.describe());
            match (min, max) {
                (Some(a), Some(b)) => format!("{what}, {a} to {b} characters"),
                (Some(a), None) => format!("{what}, at least {a} characters"),
                (None, Some(b)) => format!("{what}, at most {b} characters"),
                (None, None) => what.to_owned(),
            }
        }
        FieldKind::Number { integer, min, max } => {
            let what = if *integer {
                "a whole number"
            } else {
                "a number"
            };
            match (min, max) {
                (Some(a), Some(b)) => format!("{what} from {a} to {b}"),
                (Some(a), None) => format!("{what}, at least {a}"),
                (None, Some(b)) => format!("{what}, at most {b}"),
                (None, None) => what.to_owned(),
            }
        }
        FieldKind::Boolean => "y or n".to_owned(),
        FieldKind::Choice(options) | FieldKind::Choices { options, .. } => {
            for (i, c) in options.iter().enumerate() {
                eprintln!("  {}) {}", i + 1, one_line(&c.title));
            }
            match field.kind {
                FieldKind::Choices { .. } => "numbers separated by commas".to_owned(),
                _ => "a number".to_owned(),
            }
        }
    };
    let default = match &field.default {
        Some(d) => format!(", empty for {}", one_line(&shown(d))),
        None if field.required => String::new(),
        None => ", empty to leave it out".to_owned(),
    };
    eprintln!("  ({what}{default})");
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The value a line gives `field`: `None` to leave the field out; an
/// error says what was expected.
fn read_value(field: &Field, text: &str) -> Result<Option<Value>, String> {
    if text.is_empty() {
        return match (&field.default, field.required) {
            (Some(d), _) => Ok(Some(d.clone())),
            (None, false) => Ok(None),
            (None, true) => Err("an answer is required".into()),
        };
    }
    let value = match &field.kind {
        FieldKind::Text { .. } => Value::String(text.to_owned()),
        FieldKind::Number { integer: true, .. } => text
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| "a whole number, please".to_owned())?,
        FieldKind::Number { .. } => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or("a number, please")?,
        FieldKind::Boolean => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Value::Bool(true),
            "n" | "no" | "false" => Value::Bool(false),
            _ => return Err("y or n, please".into()),
        },
        FieldKind::Choice(options) => Value::String(pick(options, text)?),
        FieldKind::Choices { options, .. } => Value::Array(
            text.split(',')
                .map(|part| pick(options, part.trim()).map(Value::String))
                .collect::<Result<_, _>>()?,
        ),
    };
    field.check(&value).map_err(|why| format!("that {why}"))?;
    Ok(Some(value))
}

/// The choice a word names: its number in the list, or its value.
fn pick(options: &[branch_mcp::FormChoice], word: &str) -> Result<String, String> {
    let by_number = word
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| options.get(i));
    by_number
        .or_else(|| options.iter().find(|c| c.value == word))
        .map(|c| c.value.clone())
        .ok_or_else(|| format!("`{}` is not one of the choices", one_line(word)))
}

/// Whether a conversation's servers may ask its person: only when a
/// person (or a script standing in for one) gives the lines, and not with
/// `--json`, whose stderr carries errors only.
pub(crate) fn may_ask(json: bool, has_input: bool) -> bool {
    !json && has_input
}

#[cfg(test)]
mod tests {
    use super::*;
    use branch_mcp::Form;
    use serde_json::json;

    fn question(schema: Value) -> Elicitation {
        Elicitation {
            server: "shop".into(),
            message: "Book a table?".into(),
            asks: Asks::Form {
                form: Form::from_schema(&schema).unwrap(),
                schema,
            },
        }
    }

    fn script(lines: &[&str]) -> impl FnMut(&str) -> Result<Line, ChatError> {
        let mut lines: Vec<Line> = lines.iter().map(|l| Line::Text((*l).into())).collect();
        lines.reverse();
        move |_| Ok(lines.pop().unwrap_or(Line::Eof))
    }

    fn booking() -> Value {
        json!({"properties": {
            "name": {"type": "string", "minLength": 2},
            "guests": {"type": "integer", "minimum": 1, "maximum": 12},
            "terrace": {"type": "boolean", "default": false},
            "time": {"type": "string", "oneOf": [{"const": "18", "title": "6 pm"}, {"const": "20", "title": "8 pm"}]},
            "extras": {"type": "array", "items": {"enum": ["cake", "wine"]}},
            "note": {"type": "string"}
        }, "required": ["name", "guests", "time"]})
    }

    #[test]
    fn a_form_is_filled_field_by_field_and_unclear_answers_asked_again() {
        let q = question(booking());
        // In the schema's order: name, guests, terrace, time, extras, note.
        let got = ask(
            &q,
            script(&[
                "maybe", "y", // unclear, then yes
                "A", "Ada", // too short, then fine
                "13", "x", "4", // over the maximum, not a number, fine
                "",  // terrace: its default
                "8 pm?", "2", // not a choice, then the second
                "2", // extras: the second choice
                "",  // note: left out
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            ElicitAnswer::Accept(
                json!({"name": "Ada", "guests": 4, "terrace": false, "time": "20", "extras": ["wine"]})
                    .as_object()
                    .unwrap()
                    .clone()
            )
        );
    }

    #[test]
    fn no_declines_and_leaving_or_unclear_answers_dismiss() {
        let q = question(booking());
        assert_eq!(ask(&q, script(&["n"])).unwrap(), ElicitAnswer::Decline);
        // Leaving at the second field.
        assert_eq!(
            ask(&q, script(&["y", "Ada"])).unwrap(),
            ElicitAnswer::Cancel
        );
        // Three unclear answers to one field.
        assert_eq!(
            ask(&q, script(&["y", "", "A", "B", "Ada"])).unwrap(),
            ElicitAnswer::Cancel
        );
        assert_eq!(
            ask(&q, script(&["sure", "ok", "fine", "y"])).unwrap(),
            ElicitAnswer::Cancel
        );
        let empty = question(json!({"properties": {}}));
        // An address: whether the person will open it.
        let address = Elicitation {
            server: "shop".into(),
            message: "Pay for the table".into(),
            asks: Asks::Url(Address::parse("https://pay.example/t/1", "p1").unwrap()),
        };
        assert_eq!(
            ask(&address, script(&["what", "y"])).unwrap(),
            ElicitAnswer::Accept(Map::new())
        );
        assert_eq!(
            ask(&address, script(&["no"])).unwrap(),
            ElicitAnswer::Decline
        );
        assert_eq!(ask(&address, script(&[])).unwrap(), ElicitAnswer::Cancel);
        assert_eq!(
            ask(&empty, script(&["yes"])).unwrap(),
            ElicitAnswer::Accept(Map::new())
        );
    }
}
