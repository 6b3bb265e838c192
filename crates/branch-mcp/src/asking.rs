//! Putting one server's questions to the person through the caller's
//! [`ElicitHook`]: what our client declares, reading a request into a
//! bounded [`Elicitation`], the wait (a span, the server's calls' clocks
//! stopped, [`limits::CONFIRM_DEADLINE`], the server's cancellation) and
//! the answer checked before it goes back. Used for `elicitation/create`
//! and for the addresses of a `URLElicitationRequired` error.

use std::future::Future;

use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, UrlElicitationCapability,
};
use serde_json::Value;

use crate::answer_clock::AnswerClock;
use crate::elicit::{self, Asks, ElicitAnswer, ElicitHook, Elicitation, Form};
use crate::elicit_url::{self, Address};
use crate::limits;

/// One server's way to the person.
#[derive(Clone)]
pub(crate) struct Asker {
    server: String,
    hook: Option<ElicitHook>,
    urls: bool,
    questions: AnswerClock,
}

impl Asker {
    /// Asks through `hook`, if any; addresses only with `urls`.
    pub(crate) fn new(server: &str, hook: Option<ElicitHook>, urls: bool) -> Self {
        Self {
            server: server.to_owned(),
            hook,
            urls,
            questions: AnswerClock::default(),
        }
    }

    /// The clock the server's calls run on.
    pub(crate) fn clock(&self) -> &AnswerClock {
        &self.questions
    }

    /// What our client declares: forms with a hook, addresses too when
    /// the policy allows them.
    pub(crate) fn capability(&self) -> Option<ElicitationCapability> {
        self.hook.as_ref()?;
        let forms = ElicitationCapability::new().with_form(FormElicitationCapability::new());
        Some(if self.urls {
            forms.with_url(UrlElicitationCapability::new())
        } else {
            forms
        })
    }

    /// The answer to the server's `elicitation/create`: a question we
    /// cannot read, of a mode not declared, or sent while no request of
    /// ours to the server is in flight, is declined unasked.
    pub(crate) async fn answer(
        &self,
        request: ElicitRequestParams,
        cancelled: impl Future<Output = ()>,
    ) -> ElicitResult {
        let decline = ElicitResult::new(ElicitationAction::Decline);
        let Some(hook) = &self.hook else {
            return decline;
        };
        if !self.questions.busy() {
            tracing::warn!(server = %self.server, "MCP elicitation declined unasked: no request of ours is in flight");
            return decline;
        }
        let question = match self.read(request) {
            Ok(q) => q,
            Err(reason) => {
                tracing::warn!(server = %self.server, %reason, "MCP elicitation declined unasked");
                return decline;
            }
        };
        let (answer, span) = self.put(hook, question.clone(), cancelled).await;
        let result = self.checked(&question, answer);
        let action = match result.action {
            ElicitationAction::Accept => "accept",
            ElicitationAction::Decline => "decline",
            _ => "cancel",
        };
        span.record("action", action);
        result
    }

    /// Whether the person may be asked to open addresses.
    pub(crate) fn offers_addresses(&self) -> bool {
        self.urls && self.hook.is_some()
    }

    /// Shows the person the addresses of a `URLElicitationRequired`
    /// error's `data`, one by one; each with what they said. Empty when
    /// addresses are not offered to this program's person.
    pub(crate) async fn open_required(
        &self,
        data: Option<&Value>,
    ) -> Vec<(Elicitation, ElicitAnswer)> {
        let Some(hook) = self.hook.as_ref().filter(|_| self.offers_addresses()) else {
            return Vec::new();
        };
        let mut answered = Vec::new();
        for question in elicit_url::required(&self.server, data) {
            let (answer, span) = self
                .put(hook, question.clone(), std::future::pending())
                .await;
            span.record("action", answer.action());
            answered.push((question, answer));
        }
        answered
    }

    fn read(&self, request: ElicitRequestParams) -> Result<Elicitation, String> {
        let (message, asks) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(&requested_schema)
                    .map_err(|e| format!("its form cannot be read: {e}"))?;
                let form = Form::from_schema(&schema)
                    .map_err(|e| format!("its form cannot be read: {e}"))?;
                (message, Asks::Form { form, schema })
            }
            ElicitRequestParams::UrlElicitationParams {
                message,
                url,
                elicitation_id,
                ..
            } => {
                if !self.urls {
                    return Err("it asks to open an address, which was not declared".into());
                }
                (message, Asks::Url(Address::parse(&url, &elicitation_id)?))
            }
            _ => return Err("it asks in a mode this client does not know".into()),
        };
        Ok(Elicitation {
            server: self.server.clone(),
            message: elicit::bounded(&message),
            asks,
        })
    }

    /// Waits for the person's answer to `question`: at most
    /// [`limits::CONFIRM_DEADLINE`], or until `cancelled`; the server's
    /// calls stand still meanwhile. The span tells what was asked and (once
    /// the caller records it) how it ended, never what was answered.
    async fn put(
        &self,
        hook: &ElicitHook,
        question: Elicitation,
        cancelled: impl Future<Output = ()>,
    ) -> (ElicitAnswer, tracing::Span) {
        let (mode, fields) = match &question.asks {
            Asks::Form { form, .. } => ("form", form.fields.len()),
            Asks::Url(_) => ("url", 0),
        };
        let span = tracing::info_span!(
            "mcp.elicitation",
            server = %self.server,
            mode,
            fields,
            action = tracing::field::Empty,
        );
        let asking = async {
            let _open = self.questions.open();
            tokio::select! {
                a = hook(question) => a,
                () = cancelled => ElicitAnswer::Cancel,
                () = tokio::time::sleep(limits::CONFIRM_DEADLINE) => ElicitAnswer::Cancel,
            }
        };
        let answer = tracing::Instrument::instrument(asking, span.clone()).await;
        (answer, span)
    }

    /// The result sent back: a form's answer only when it fits the form
    /// (else a cancellation); an address's acceptance with no content.
    fn checked(&self, question: &Elicitation, answer: ElicitAnswer) -> ElicitResult {
        match (answer, &question.asks) {
            (ElicitAnswer::Accept(content), Asks::Form { form, .. }) => {
                match form.check(&content) {
                    Ok(()) => ElicitResult::new(ElicitationAction::Accept)
                        .with_content(Value::Object(content)),
                    Err(reason) => {
                        tracing::warn!(server = %self.server, %reason, "MCP elicitation answer does not fit its form");
                        ElicitResult::new(ElicitationAction::Cancel)
                    }
                }
            }
            (ElicitAnswer::Accept(_), Asks::Url(_)) => ElicitResult::new(ElicitationAction::Accept),
            (ElicitAnswer::Decline, _) => ElicitResult::new(ElicitationAction::Decline),
            (ElicitAnswer::Cancel, _) => ElicitResult::new(ElicitationAction::Cancel),
        }
    }
}
