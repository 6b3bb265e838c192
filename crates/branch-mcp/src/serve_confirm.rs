//! Questions a served call puts to the person behind its client: MCP
//! elicitation, a form with one field whose answer is one of a few
//! choices. Only a client that declared it can show forms is asked; its
//! answer is checked against the choices offered, as any client input.

use std::borrow::Cow;

use rmcp::model::{
    ElicitRequestParams, ElicitationAction, ElicitationSchema, EnumSchema, RequestMetaObject,
};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

use crate::elicit::{Asks, ElicitAnswer, Elicitation};
use crate::limits::CONFIRM_DEADLINE;

/// Longest question shown, in bytes (it may quote model output); a longer
/// one is cut at a character boundary and marked.
pub const MAX_CONFIRM_MESSAGE_BYTES: usize = 8 * 1024;

/// The field of the form that carries the answer.
const FIELD: &str = "decision";

/// Puts questions to the person behind a served call's client; cheap to
/// clone.
#[derive(Clone)]
pub struct Confirmer(Option<Peer<RoleServer>>);

/// One choice offered: the value the answer carries and what the person
/// reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The answer's value.
    pub value: &'static str,
    /// Its label in the form.
    pub title: &'static str,
}

/// What the person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// One of the choices, by its value.
    Chosen(&'static str),
    /// They declined to answer (the form's "decline").
    Declined,
    /// They dismissed the form without deciding.
    Dismissed,
}

impl std::fmt::Debug for Confirmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirmer")
            .field("can_ask", &self.can_ask())
            .finish()
    }
}

impl Confirmer {
    /// Asks the client of `peer`.
    pub(crate) fn new(peer: Peer<RoleServer>) -> Self {
        Self(Some(peer))
    }

    /// Asks no one ([`Confirmer::can_ask`] is false).
    pub fn none() -> Self {
        Self(None)
    }

    /// Whether the client declared it shows forms (the elicitation
    /// capability, form mode), so that a question can be put to it.
    pub fn can_ask(&self) -> bool {
        self.0.as_ref().is_some_and(|peer| {
            peer.supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
        })
    }

    /// Asks `message` with `choices` (at least one), waiting at most
    /// [`CONFIRM_DEADLINE`]. An error says why no answer came: the client
    /// cannot be asked, the request failed or timed out, or the answer was
    /// not one of the choices.
    pub async fn choose(&self, message: &str, choices: &[Choice]) -> Result<Confirmation, String> {
        let Some(peer) = self.0.as_ref().filter(|_| self.can_ask()) else {
            return Err("the client cannot be asked (it declared no elicitation)".into());
        };
        let values = choices.iter().map(|c| c.value.to_owned()).collect();
        let titles = choices.iter().map(|c| c.title.to_owned()).collect();
        let field = EnumSchema::builder(values)
            .enum_titles(titles)
            .map_err(|e| format!("cannot build the question: {e}"))?
            .build();
        let schema = ElicitationSchema::builder()
            .required_enum_schema(FIELD, field)
            .build()
            .map_err(|e| format!("cannot build the question: {e}"))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None::<RequestMetaObject>,
            message: bounded(message).into_owned(),
            requested_schema: schema,
        };
        let answer = peer
            .create_elicitation_with_timeout(params, Some(CONFIRM_DEADLINE))
            .await
            .map_err(|e| format!("the client did not answer: {e}"))?;
        match answer.action {
            ElicitationAction::Accept => chosen(answer.content.as_ref(), choices),
            ElicitationAction::Decline => Ok(Confirmation::Declined),
            ElicitationAction::Cancel => Ok(Confirmation::Dismissed),
            _ => Err("the client's answer is an action this server does not know".into()),
        }
    }

    /// Passes a question one of the conversation's own tool servers asked
    /// during this call on to the person behind the call's client, its
    /// form (or address to open) as the server gave it and its message
    /// naming the server. Waits at most [`CONFIRM_DEADLINE`]. A client
    /// that cannot be asked (no forms, or no addresses for an address)
    /// declines; a failed or late request, or a form's answer that is not
    /// an object, dismisses. The answer is the client's: the tool server's
    /// session checks it against the form before sending it on.
    pub async fn relay(&self, question: &Elicitation) -> ElicitAnswer {
        let Some(peer) = self.0.as_ref() else {
            return ElicitAnswer::Decline;
        };
        let modes = peer.supported_elicitation_modes();
        let message =
            bounded(&format!("[{}] asks: {}", question.server, question.message)).into_owned();
        let params = match &question.asks {
            Asks::Form { schema, .. } if modes.contains(&ElicitationMode::Form) => {
                let Ok(schema) = serde_json::from_value::<ElicitationSchema>(schema.clone()) else {
                    return ElicitAnswer::Decline;
                };
                ElicitRequestParams::FormElicitationParams {
                    meta: None::<RequestMetaObject>,
                    message,
                    requested_schema: schema,
                }
            }
            Asks::Url(address) if modes.contains(&ElicitationMode::Url) => {
                ElicitRequestParams::UrlElicitationParams {
                    meta: None::<RequestMetaObject>,
                    message,
                    url: address.url.clone(),
                    elicitation_id: address.id.clone(),
                }
            }
            _ => return ElicitAnswer::Decline,
        };
        let Ok(answer) = peer
            .create_elicitation_with_timeout(params, Some(CONFIRM_DEADLINE))
            .await
        else {
            return ElicitAnswer::Cancel;
        };
        match (answer.action, answer.content, &question.asks) {
            (ElicitationAction::Accept, Some(Value::Object(content)), _) => {
                ElicitAnswer::Accept(content)
            }
            (ElicitationAction::Accept, None, Asks::Url(_)) => {
                ElicitAnswer::Accept(serde_json::Map::new())
            }
            (ElicitationAction::Decline, _, _) => ElicitAnswer::Decline,
            _ => ElicitAnswer::Cancel,
        }
    }
}

/// The choice an accepted form carries: `{"decision": VALUE}` with one of
/// the values offered, and nothing else.
fn chosen(content: Option<&Value>, choices: &[Choice]) -> Result<Confirmation, String> {
    let refused = || "the client's answer is not one of the choices offered".to_owned();
    let object = content.and_then(Value::as_object).ok_or_else(refused)?;
    if object.len() != 1 {
        return Err(refused());
    }
    let value = object
        .get(FIELD)
        .and_then(Value::as_str)
        .ok_or_else(refused)?;
    choices
        .iter()
        .find(|c| c.value == value)
        .map(|c| Confirmation::Chosen(c.value))
        .ok_or_else(refused)
}

/// `message`, cut to [`MAX_CONFIRM_MESSAGE_BYTES`].
fn bounded(message: &str) -> Cow<'_, str> {
    crate::elicit::cut(message, MAX_CONFIRM_MESSAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CHOICES: [Choice; 2] = [
        Choice {
            value: "run",
            title: "Run it",
        },
        Choice {
            value: "deny",
            title: "Deny it",
        },
    ];

    #[test]
    fn only_one_of_the_choices_is_an_answer() {
        let run = json!({"decision": "run"});
        assert_eq!(
            chosen(Some(&run), &CHOICES),
            Ok(Confirmation::Chosen("run"))
        );
        for bad in [
            json!({"decision": "always"}),
            json!({"decision": true}),
            json!({"decision": "run", "also": 1}),
            json!({}),
            json!(["run"]),
            json!("run"),
        ] {
            assert!(chosen(Some(&bad), &CHOICES).is_err(), "{bad}");
        }
        assert!(chosen(None, &CHOICES).is_err());
    }

    #[test]
    fn a_long_question_is_cut_at_a_character() {
        let long = "é".repeat(MAX_CONFIRM_MESSAGE_BYTES);
        let cut = bounded(&long);
        assert!(cut.ends_with(" …(cut)"));
        assert!(cut.len() <= MAX_CONFIRM_MESSAGE_BYTES + " …(cut)".len());
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn no_client_no_question() {
        assert!(!Confirmer::none().can_ask());
    }
}
