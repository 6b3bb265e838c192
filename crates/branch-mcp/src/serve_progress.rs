//! The progress of a served call: what the answering side reports reaches
//! the client as `notifications/progress`, when the client asked for it (a
//! `progressToken` in the call's `_meta`). A client with a deadline per
//! request may extend it on each notification (the TypeScript SDK's
//! `resetTimeoutOnProgress`), so a long turn (a slow model, several tool
//! rounds) is not given up on while it is still moving.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::Notify;

use crate::limits::{MAX_SERVED_PROGRESS_BYTES, REQUEST_TIMEOUT, SERVED_PROGRESS_INTERVAL};

/// Reports the progress of one served call; cheap to clone, and never
/// waits. A call whose client asked for no progress reports into nothing.
#[derive(Clone, Default)]
pub struct ProgressReporter(Option<Arc<Unsent>>);

/// The latest report not yet sent, and the sender's wake-up.
#[derive(Default)]
struct Unsent {
    message: Mutex<Option<String>>,
    ready: Notify,
}

impl ProgressReporter {
    /// A reporter that sends nothing.
    pub fn none() -> Self {
        Self(None)
    }

    /// Whether the client listens: reports are sent.
    pub fn is_listened(&self) -> bool {
        self.0.is_some()
    }

    /// Reports `message` as the call's progress. Notifications go out at
    /// most every [`SERVED_PROGRESS_INTERVAL`]; a report made before the
    /// last one went out replaces it.
    pub fn report(&self, message: impl Into<String>) {
        let Some(unsent) = &self.0 else { return };
        let mut message = message.into();
        if message.len() > MAX_SERVED_PROGRESS_BYTES {
            let mut end = MAX_SERVED_PROGRESS_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        if let Ok(mut slot) = unsent.message.lock() {
            *slot = Some(message);
        }
        unsent.ready.notify_one();
    }
}

impl std::fmt::Debug for ProgressReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressReporter")
            .field("listened", &self.is_listened())
            .finish()
    }
}

/// A reporter for the call `token` names, and the future that sends its
/// reports to `peer` (it never ends; it is dropped with the call, so no
/// notification follows the call's result). Without a token, a reporter
/// into nothing and a future with nothing to do.
pub(crate) fn progress_channel(
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
) -> (ProgressReporter, impl Future<Output = Infallible>) {
    let unsent = token.as_ref().map(|_| Arc::new(Unsent::default()));
    let reporter = ProgressReporter(unsent.clone());
    let sending = async move {
        let (Some(token), Some(unsent)) = (token, unsent) else {
            return std::future::pending().await;
        };
        // Progress must increase with every notification; the count of
        // those sent does.
        let mut sent: u32 = 0;
        loop {
            unsent.ready.notified().await;
            let message = unsent.message.lock().ok().and_then(|mut m| m.take());
            let Some(message) = message else { continue };
            sent = sent.saturating_add(1);
            let mut note = ProgressNotificationParam::new(token.clone(), f64::from(sent));
            note.message = Some(message);
            // A client that stops reading is not waited on forever: its
            // call goes on unreported.
            match tokio::time::timeout(REQUEST_TIMEOUT, peer.notify_progress(note)).await {
                Ok(Ok(())) => {}
                _ => return std::future::pending().await,
            }
            tokio::time::sleep(SERVED_PROGRESS_INTERVAL).await;
        }
    };
    (reporter, sending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_report_is_cut_at_a_character_boundary() {
        let unsent = Arc::new(Unsent::default());
        let reporter = ProgressReporter(Some(Arc::clone(&unsent)));
        // 'é' is two bytes: the cap falls inside one.
        reporter.report(format!("a{}", "é".repeat(MAX_SERVED_PROGRESS_BYTES)));
        let sent = unsent.message.lock().unwrap().take().unwrap();
        assert_eq!(sent.len(), MAX_SERVED_PROGRESS_BYTES - 1);
        assert!(sent.starts_with("aé"));
    }

    #[test]
    fn a_later_report_replaces_an_unsent_one_and_none_reports_nothing() {
        let unsent = Arc::new(Unsent::default());
        let reporter = ProgressReporter(Some(Arc::clone(&unsent)));
        reporter.report("calling tool `echo`");
        reporter.report("answering: 12 characters");
        assert_eq!(
            unsent.message.lock().unwrap().as_deref(),
            Some("answering: 12 characters")
        );
        let none = ProgressReporter::none();
        assert!(!none.is_listened());
        none.report("nothing hears this");
    }
}
