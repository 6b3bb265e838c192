//! Watching a conversation from another process: the outbox rows a turn's
//! transaction wrote, woken by `LISTEN/NOTIFY`, resumable from an event id.

use std::collections::VecDeque;
use std::sync::Arc;

use branch_core::Message;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use uuid::Uuid;

use super::{Shared, column, pg_err};
use crate::limits::{
    MAX_ROWS_PER_BATCH, MAX_STORED_ROW_BYTES, WATCH_MAX_BACKOFF, WATCH_POLL_INTERVAL,
};
use crate::store::error::StoreError;

/// One message added to a watched conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// The outbox event's id: pass it to [`super::PgStore::watch`] to
    /// resume after it.
    pub id: u64,
    /// The message's place in the conversation's insertion order.
    pub seq: u64,
    /// The branch version the message was committed with.
    pub version: u64,
    /// The message as it was committed.
    pub message: Message,
}

struct Listening {
    client: tokio_postgres::Client,
    woken: mpsc::Receiver<String>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A stream of a conversation's committed messages; see
/// [`super::PgStore::watch`]. Call [`Watch::next`] in a loop.
pub struct Watch {
    shared: Arc<Shared>,
    branch_id: Uuid,
    after: u64,
    buffered: VecDeque<WatchEvent>,
    conn: Option<Listening>,
    backoff: std::time::Duration,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("store", &self.shared.label)
            .field("branch_id", &self.branch_id)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl Watch {
    pub(crate) fn new(shared: Arc<Shared>, branch_id: Uuid, after: u64) -> Self {
        Self {
            shared,
            branch_id,
            after,
            buffered: VecDeque::new(),
            conn: None,
            backoff: std::time::Duration::from_millis(50),
        }
    }

    /// The id of the last event returned (where a new watch would resume).
    pub fn position(&self) -> u64 {
        self.after
    }

    /// The next committed message. Waits as long as nothing is added (wrap
    /// it in a timeout to bound the wait); a lost connection is re-opened
    /// with a growing pause, and nothing is skipped or repeated. Stored
    /// data that is not a message is an error.
    pub async fn next(&mut self) -> Result<WatchEvent, StoreError> {
        loop {
            if let Some(e) = self.buffered.pop_front() {
                self.after = e.id;
                return Ok(e);
            }
            if self.conn.is_none() {
                match self.listen().await {
                    Ok(l) => {
                        self.conn = Some(l);
                        self.backoff = std::time::Duration::from_millis(50);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "watch: cannot reach the store; retrying");
                        self.pause().await;
                        continue;
                    }
                }
            }
            match self.fetch().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(FetchError::Data(e)) => return Err(e),
                Err(FetchError::Connection(e)) => {
                    tracing::warn!(error = %e, "watch: connection lost; reconnecting");
                    self.conn = None;
                    self.pause().await;
                    continue;
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                continue;
            };
            tokio::select! {
                woken = conn.woken.recv() => {
                    if woken.is_none() {
                        // The connection ended; re-open and re-read.
                        self.conn = None;
                    }
                }
                () = tokio::time::sleep(WATCH_POLL_INTERVAL) => {}
            }
        }
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(WATCH_MAX_BACKOFF);
    }

    async fn listen(&self) -> Result<Listening, StoreError> {
        let label = &self.shared.label;
        let (client, mut connection) = self
            .shared
            .config
            .connect(self.shared.tls.clone())
            .await
            .map_err(|e| pg_err(label, "connect to watch", e))?;
        let (tx, woken) = mpsc::channel(64);
        let branch = self.branch_id.to_string();
        let driver = tokio::spawn(async move {
            loop {
                let msg = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
                match msg {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        // A full queue already holds a wake-up; the next
                        // read fetches everything anyway.
                        if n.payload() == branch {
                            let _ = tx.try_send(branch.clone());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                }
            }
        });
        // LISTEN before the first read: nothing committed in between is
        // missed.
        client
            .batch_execute(&format!("LISTEN {}", self.shared.channel))
            .await
            .map_err(|e| pg_err(label, "listen", e))?;
        Ok(Listening {
            client,
            woken,
            driver,
        })
    }

    /// Reads the next batch into the buffer; whether there was any.
    async fn fetch(&mut self) -> Result<bool, FetchError> {
        let Some(conn) = self.conn.as_ref() else {
            return Ok(false);
        };
        let label = &self.shared.label;
        let after = i64::try_from(self.after).unwrap_or(i64::MAX);
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let limit = i64::try_from(MAX_ROWS_PER_BATCH.min(1000)).unwrap_or(1000);
        let rows = conn
            .client
            .query(
                "SELECT id, seq, version, CASE WHEN octet_length(body)::bigint > $3 THEN NULL ELSE body END
                 FROM events WHERE branch_id = $1 AND id > $2 ORDER BY id LIMIT $4",
                &[&self.branch_id, &after, &cap, &limit],
            )
            .await
            .map_err(|e| FetchError::Connection(pg_err(label, "read the outbox", e)))?;
        for r in &rows {
            let corrupt_as = |what: String, reason: String| {
                FetchError::Data(StoreError::Corrupt {
                    path: label.into(),
                    table: "events",
                    what,
                    reason,
                })
            };
            let id: i64 = column(r, 0).map_err(|reason| {
                corrupt_as(format!("an event of branch {}", self.branch_id), reason)
            })?;
            let corrupt = |reason: String| {
                corrupt_as(format!("event {id} of branch {}", self.branch_id), reason)
            };
            let seq: i64 = column(r, 1).map_err(corrupt)?;
            let version: i64 = column(r, 2).map_err(corrupt)?;
            let body: Option<String> = column(r, 3).map_err(corrupt)?;
            let body = body.ok_or_else(|| corrupt("the body is over the row cap".into()))?;
            let value: Value = serde_json::from_str(&body).map_err(|e| corrupt(e.to_string()))?;
            let message = Message::from_value(&value).map_err(|e| corrupt(e.to_string()))?;
            let num =
                |v: i64| u64::try_from(v).map_err(|_| corrupt(format!("negative number {v}")));
            self.buffered.push_back(WatchEvent {
                id: num(id)?,
                seq: num(seq)?,
                version: num(version)?,
                message,
            });
        }
        Ok(!rows.is_empty())
    }
}

enum FetchError {
    /// Reconnect and carry on.
    Connection(StoreError),
    /// Stored data is bad: report it.
    Data(StoreError),
}
