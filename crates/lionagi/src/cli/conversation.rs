//! The conversation `lionagi chat` holds: a branch, new or resumed from a
//! store, and its durable copy (saved when new, then appended one turn at
//! a time on the version last written, so another writer's turns are
//! never overwritten).

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::ChatModel;
use branch_operations::BranchApproval;
use branch_session::store::StoreError;
use uuid::Uuid;

use super::CliError;
use super::approve::Approvals;
use super::chat_args::ChatArgs;
use super::chat_error::ChatError;
use super::store::{self, Access, OpenStore};

/// Participant name of the person at the keyboard.
const USER: &str = "user";

/// What the store holds of this conversation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    /// Nothing yet: the first turn saves the whole branch.
    No,
    /// A first save failed: it may or may not have committed.
    Unsure,
    /// The first `recorded` messages (in conversation order) are stored,
    /// at `version`.
    Yes { version: u64, recorded: usize },
}

/// Another writer's turns are in the store: kept there, and the user is
/// told how to continue from them.
fn conflict_error(label: &str, e: &StoreError) -> ChatError {
    store_error(
        label,
        format!(
            "{e}. Another writer added to this conversation; its turns are kept. \
             Resume it (--resume) to continue from the stored version."
        ),
    )
}

/// The live conversation.
pub(crate) struct Conversation {
    branch: Branch,
    model: Arc<dyn ChatModel>,
    system: Option<String>,
    name: Option<String>,
    store: Option<OpenStore>,
    stored: Stored,
    /// With `--approve`: the answers so far (the policy of every branch).
    pub(crate) approvals: Option<Approvals>,
}

fn store_error(path: &str, e: impl std::fmt::Display) -> ChatError {
    ChatError::Store {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

impl Conversation {
    /// A new conversation, or the one `--resume` names.
    pub(crate) async fn open(
        args: &ChatArgs,
        model: Arc<dyn ChatModel>,
    ) -> Result<Self, ChatError> {
        let store = match &args.store {
            Some(spec) => Some(
                store::open(spec, Access::Write)
                    .await
                    .map_err(|e| store_error(&store::label(spec), e))?,
            ),
            None => None,
        };
        let mut conv = Self {
            branch: new_branch(args.system.as_deref(), args.name.as_deref(), &model)?,
            model,
            system: args.system.clone(),
            name: args.name.clone(),
            store,
            stored: Stored::No,
            approvals: args.approve.then(Approvals::default),
        };
        conv.apply_policy();
        if let (Some(name), Some(store)) = (&args.name, &conv.store) {
            let taken = store
                .db
                .list()
                .await
                .map_err(|e| store_error(&store.label, e))?
                .iter()
                .any(|b| b.name.as_deref() == Some(name.as_str()));
            if taken {
                return Err(ChatError::Usage(format!(
                    "a conversation named `{name}` is already in {}; continue it with --resume {name}",
                    store.label
                )));
            }
        }
        if let (Some(key), Some(store)) = (&args.resume, &conv.store) {
            let id = super::branch::resolve(store.db.as_ref(), &store.label, key)
                .await
                .map_err(|e| match e {
                    CliError::NotFound { path, reason } => ChatError::NotFound { path, reason },
                    other => store_error(&store.label, other),
                })?;
            let (mut branch, version) = store
                .db
                .load_versioned(id)
                .await
                .map_err(|e| store_error(&store.label, e))?;
            branch.set_chat_model(Arc::clone(&conv.model));
            branch.set_parse_model(Arc::clone(&conv.model));
            conv.stored = Stored::Yes {
                version,
                recorded: branch.progression().len(),
            };
            conv.branch = branch;
            conv.apply_policy();
        }
        Ok(conv)
    }

    /// Takes in what another writer stored since this conversation last
    /// read or wrote the store (a `lionagi chat --resume` in another
    /// terminal, another `lionagi mcp serve`), so the next turn follows
    /// theirs instead of failing to record. The branch is loaded again
    /// whole (their messages, logs and metadata, a paused turn included),
    /// with this conversation's model and approval policy; tools must be
    /// registered on it again. Only when everything here is recorded:
    /// otherwise the next write reports the conflict, as it did. `None`
    /// when the store had nothing new; else how many messages more the
    /// conversation has than before.
    pub(crate) async fn catch_up(&mut self) -> Result<Option<usize>, ChatError> {
        let (Some(store), Stored::Yes { version, recorded }) = (&self.store, self.stored) else {
            return Ok(None);
        };
        let id = self.branch.id();
        if self.branch.progression().len() != recorded {
            return Ok(None);
        }
        // The head only: no message is read past the last position.
        let head = store
            .db
            .load_since(id, u64::MAX)
            .await
            .map_err(|e| store_error(&store.label, e))?;
        if head.version == version {
            return Ok(None);
        }
        let (mut branch, version) = store
            .db
            .load_versioned(id)
            .await
            .map_err(|e| store_error(&store.label, e))?;
        branch.set_chat_model(Arc::clone(&self.model));
        branch.set_parse_model(Arc::clone(&self.model));
        let now = branch.progression().len();
        self.stored = Stored::Yes {
            version,
            recorded: now,
        };
        self.branch = branch;
        self.apply_policy();
        Ok(Some(now.saturating_sub(recorded)))
    }

    /// Gives the branch the approval policy of `--approve`, if asked.
    fn apply_policy(&mut self) {
        if let Some(a) = &self.approvals {
            self.branch.set_approval_policy(Some(a.policy()));
        }
    }

    /// Writes the whole branch (metadata included: a paused turn), so the
    /// store holds exactly what is in memory. Once stored, the write is
    /// made on the version last written: another writer's newer turns are
    /// reported as a conflict, never overwritten.
    pub(crate) async fn save_all(&mut self) -> Result<(), ChatError> {
        let Stored::Yes { version, .. } = self.stored else {
            // Not stored yet (or unsure): the first write is the whole branch.
            return self.record_turn().await;
        };
        let Some(store) = &self.store else {
            return Ok(());
        };
        let len = self.branch.progression().len();
        match store.db.save_at(&self.branch, version).await {
            Ok(version) => {
                self.stored = Stored::Yes {
                    version,
                    recorded: len,
                };
                Ok(())
            }
            Err(e @ StoreError::Conflict { .. }) => Err(conflict_error(&store.label, &e)),
            Err(e) => Err(store_error(&store.label, e)),
        }
    }

    /// The branch the turns run on.
    pub(crate) fn branch_mut(&mut self) -> &mut Branch {
        &mut self.branch
    }

    /// Waits, up to [`LOG_DUMP_DEADLINE`](crate::limits::LOG_DUMP_DEADLINE),
    /// until the log dumps this conversation's branch made at capacity are
    /// written; past it, says so on stderr. Called before the branch is
    /// let go (`/clear`, exit).
    pub(crate) async fn dumps_written(&self) {
        let deadline = crate::limits::LOG_DUMP_DEADLINE;
        let written = self.branch.logger().dumps_written();
        if tokio::time::timeout(deadline, written).await.is_err() {
            eprintln!(
                "lionagi: a log dump to {} was not written within {} s",
                super::shown::printable(&self.branch.logger().config().persist_dir),
                deadline.as_secs()
            );
        }
    }

    /// The conversation's id.
    pub(crate) fn id(&self) -> Uuid {
        self.branch.id()
    }

    /// Messages in the conversation.
    pub(crate) fn len(&self) -> usize {
        self.branch.progression().len()
    }

    /// The store file (or URL without password), when there is one.
    pub(crate) fn store_path(&self) -> Option<&str> {
        self.store.as_ref().map(|s| s.label.as_str())
    }

    /// Whether the conversation is in the store (something to resume).
    pub(crate) fn is_stored(&self) -> bool {
        matches!(self.stored, Stored::Yes { .. })
    }

    /// The name to resume by: the branch's name when it has one, else its id.
    pub(crate) fn resume_key(&self) -> String {
        // A stored name with control characters would be shown altered,
        // and could not be typed back: the id resumes it too.
        self.branch
            .name()
            .filter(|n| super::shown::shows_as_is(n))
            .map_or_else(|| self.id().to_string(), str::to_owned)
    }

    /// Starts over: a new branch with the same model and system prompt
    /// (the old one stays in the store).
    pub(crate) fn restart(&mut self) -> Result<(), ChatError> {
        // A name belongs to one stored conversation.
        let name = if self.stored == Stored::No {
            self.name.take()
        } else {
            None
        };
        self.branch = new_branch(self.system.as_deref(), name.as_deref(), &self.model)?;
        self.name = None;
        self.stored = Stored::No;
        self.apply_policy();
        Ok(())
    }

    /// Writes what the store does not have yet: the whole branch the
    /// first time, then every message past the last recorded one (this
    /// turn's, and an earlier turn's whose write failed) with the branch's
    /// metadata and new logs as one write on the version last written.
    /// Another writer's newer turns are never overwritten: that is
    /// reported as a conflict.
    pub(crate) async fn record_turn(&mut self) -> Result<(), ChatError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let db = store.db.as_ref();
        let label = store.label.clone();
        let id = self.branch.id();
        let len = self.branch.progression().len();
        if self.stored == Stored::Unsure {
            // Did the failed first save commit after all? Then carry on
            // from what it stored, if that is the start of this branch.
            match db.load_since(id, 0).await {
                Err(StoreError::NotFound(_)) => self.stored = Stored::No,
                Err(e) => return Err(store_error(&label, e)),
                Ok(since) => {
                    let ours: Vec<Uuid> = self.branch.progression().iter().copied().collect();
                    let theirs: Vec<Uuid> = since.messages.iter().map(|m| m.message.id()).collect();
                    let complete = u64::try_from(theirs.len()).ok() == Some(since.message_count);
                    if !complete || theirs.len() > ours.len() || ours[..theirs.len()] != theirs[..]
                    {
                        return Err(store_error(
                            &label,
                            format!(
                                "conversation {id} was changed in the store by someone else; \
                                 this conversation's new turns are not stored"
                            ),
                        ));
                    }
                    self.stored = Stored::Yes {
                        version: since.version,
                        recorded: theirs.len(),
                    };
                }
            }
        }
        match self.stored {
            Stored::No | Stored::Unsure => {
                if let Err(e) = db.save(&self.branch).await {
                    self.stored = Stored::Unsure;
                    return Err(store_error(&label, e));
                }
                let version = db
                    .load_since(id, u64::MAX)
                    .await
                    .map_err(|e| store_error(&label, e))?
                    .version;
                self.stored = Stored::Yes {
                    version,
                    recorded: len,
                };
                Ok(())
            }
            Stored::Yes { version, recorded } => {
                let turn: Vec<_> = self
                    .branch
                    .progression()
                    .iter()
                    .skip(recorded)
                    .filter_map(|id| self.branch.messages().get(id).cloned())
                    .collect();
                // The metadata (a CLI agent's new session id, a pause) and
                // the logs go with the turn.
                match db.record_turn_at(&self.branch, version, &turn).await {
                    Ok(version) => {
                        self.stored = Stored::Yes {
                            version,
                            recorded: len,
                        };
                        Ok(())
                    }
                    // Kept unrecorded: the next turn retries them as an
                    // append on the same version.
                    Err(e @ StoreError::Conflict { .. }) => Err(conflict_error(&label, &e)),
                    Err(e) => Err(store_error(
                        &label,
                        format!("{e} (the turn is kept here and is written with the next one)"),
                    )),
                }
            }
        }
    }
}

/// The chat model stored with the conversation `--resume` names.
pub(crate) async fn stored_model(
    args: &ChatArgs,
) -> Result<branch_core::model::ModelConfig, ChatError> {
    let (Some(spec), Some(key)) = (&args.store, &args.resume) else {
        return Err(ChatError::Usage("`--resume` needs `--store PATH`".into()));
    };
    let store = store::open(spec, Access::Read)
        .await
        .map_err(|e| store_error(&store::label(spec), e))?;
    let id = super::branch::resolve(store.db.as_ref(), &store.label, key)
        .await
        .map_err(|e| match e {
            CliError::NotFound { path, reason } => ChatError::NotFound { path, reason },
            other => store_error(&store.label, other),
        })?;
    let branch = store
        .db
        .load(id)
        .await
        .map_err(|e| store_error(&store.label, e))?;
    Ok(branch.chat_model().snapshot())
}

fn new_branch(
    system: Option<&str>,
    name: Option<&str>,
    model: &Arc<dyn ChatModel>,
) -> Result<Branch, ChatError> {
    let mut b = Branch::builder()
        .user(USER)
        .chat_model(Arc::clone(model))
        .parse_model(Arc::clone(model));
    if let Some(s) = system {
        b = b.system(s);
    }
    if let Some(n) = name {
        b = b.name(n);
    }
    b.build()
        .map_err(|e| ChatError::Turn(format!("cannot start the conversation: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use branch_core::Message;
    use branch_session::store::{BranchStore, SqliteStore};

    /// A store file in a directory of its own, removed with the guard.
    struct TempDb(std::path::PathBuf);

    impl TempDb {
        fn path(&self) -> std::path::PathBuf {
            self.0.join("chat.db")
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_db(tag: &str) -> TempDb {
        let dir = std::env::temp_dir().join(format!("lionagi-conv-{tag}-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDb(dir)
    }

    async fn open(db: &std::path::Path) -> Conversation {
        let args = ChatArgs {
            store: Some(db.display().to_string()),
            ..ChatArgs::default()
        };
        let model = Arc::clone(Branch::new().unwrap().chat_model());
        Conversation::open(&args, model).await.unwrap()
    }

    fn turn(conv: &mut Conversation, text: &str) {
        conv.branch_mut()
            .msgs_mut()
            .add_message(Message::assistant(format!("{text} asked")));
        conv.branch_mut()
            .msgs_mut()
            .add_message(Message::assistant(format!("{text} answered")));
    }

    fn texts(b: &Branch) -> Vec<String> {
        b.messages()
            .iter()
            .map(|m| m.to_value().unwrap()["content"]["assistant_response"].to_string())
            .collect()
    }

    /// Takes SQLite's write lock from another connection; the next write
    /// of the store fails once its busy timeout passes.
    fn lock(db: &std::path::Path) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(db).unwrap();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        c
    }

    /// A failed append is retried as an append with the turn after it:
    /// both turns land, in order, and nothing is rewritten.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_append_is_retried_with_the_next_turn() {
        let dir = temp_db("retry");
        let db = dir.path();
        let mut conv = open(&db).await;
        turn(&mut conv, "one");
        conv.record_turn().await.unwrap();
        let held = lock(&db);
        turn(&mut conv, "two");
        let err = conv.record_turn().await.unwrap_err().to_string();
        assert!(err.contains("written with the next one"), "{err}");
        drop(held);
        turn(&mut conv, "three");
        conv.record_turn().await.unwrap();
        let store = SqliteStore::open(&db).await.unwrap();
        let (stored, version) = store.load_versioned(conv.id()).await.unwrap();
        assert_eq!(texts(&stored), texts(&conv.branch));
        assert_eq!(version, 2, "one save, one append");
    }

    /// After a failed append, a turn another writer stored meanwhile is
    /// kept: the next write is refused as a conflict, never a full save.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_append_never_overwrites_another_writers_turn() {
        let dir = temp_db("other");
        let db = dir.path();
        let mut conv = open(&db).await;
        turn(&mut conv, "one");
        conv.record_turn().await.unwrap();
        let held = lock(&db);
        turn(&mut conv, "two");
        assert!(conv.record_turn().await.is_err());
        drop(held);
        let other = SqliteStore::open(&db).await.unwrap();
        other
            .append_turn(conv.id(), &[Message::assistant("other writer")])
            .await
            .unwrap();
        turn(&mut conv, "three");
        let err = conv.record_turn().await.unwrap_err().to_string();
        assert!(err.contains("Another writer"), "{err}");
        let stored = other.load(conv.id()).await.unwrap();
        assert_eq!(
            texts(&stored),
            ["\"one asked\"", "\"one answered\"", "\"other writer\""]
        );
    }

    /// A first save that failed is checked before it is tried again: here
    /// it did not commit, so the next turn saves the whole conversation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_first_save_is_retried_after_checking_the_store() {
        let dir = temp_db("first");
        let db = dir.path();
        let mut conv = open(&db).await;
        let held = lock(&db);
        turn(&mut conv, "one");
        assert!(conv.record_turn().await.is_err());
        assert!(!conv.is_stored());
        drop(held);
        turn(&mut conv, "two");
        conv.record_turn().await.unwrap();
        assert!(conv.is_stored());
        let store = SqliteStore::open(&db).await.unwrap();
        let (stored, version) = store.load_versioned(conv.id()).await.unwrap();
        assert_eq!(texts(&stored), texts(&conv.branch));
        assert_eq!(version, 1);
        turn(&mut conv, "three");
        conv.record_turn().await.unwrap();
        assert_eq!(store.load_versioned(conv.id()).await.unwrap().1, 2);
    }
}
