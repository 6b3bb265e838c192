//! The conversation `lionagi chat` holds: a branch, new or resumed from a
//! store, and its durable copy (saved when new, one appended turn at a
//! time after that).

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::ChatModel;
use branch_operations::BranchApproval;
use branch_session::store::{BranchStore, SqliteStore};
use uuid::Uuid;

use super::CliError;
use super::approve::Approvals;
use super::chat_args::ChatArgs;
use super::chat_error::ChatError;

/// Participant name of the person at the keyboard.
const USER: &str = "user";

struct Store {
    db: SqliteStore,
    path: String,
}

/// The live conversation.
pub(crate) struct Conversation {
    branch: Branch,
    model: Arc<dyn ChatModel>,
    system: Option<String>,
    name: Option<String>,
    store: Option<Store>,
    /// Whether the branch already has a row in the store.
    stored: bool,
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
            Some(path) => Some(Store {
                db: SqliteStore::open(path)
                    .await
                    .map_err(|e| store_error(path, e))?,
                path: path.clone(),
            }),
            None => None,
        };
        let mut conv = Self {
            branch: new_branch(args.system.as_deref(), args.name.as_deref(), &model)?,
            model,
            system: args.system.clone(),
            name: args.name.clone(),
            store,
            stored: false,
            approvals: args.approve.then(Approvals::default),
        };
        conv.apply_policy();
        if let (Some(name), Some(store)) = (&args.name, &conv.store) {
            let taken = store
                .db
                .list()
                .await
                .map_err(|e| store_error(&store.path, e))?
                .iter()
                .any(|b| b.name.as_deref() == Some(name.as_str()));
            if taken {
                return Err(ChatError::Usage(format!(
                    "a conversation named `{name}` is already in {}; continue it with --resume {name}",
                    store.path
                )));
            }
        }
        if let (Some(key), Some(store)) = (&args.resume, &conv.store) {
            let id = super::branch::resolve(&store.db, &store.path, key)
                .await
                .map_err(|e| match e {
                    CliError::NotFound { path, reason } => ChatError::NotFound { path, reason },
                    other => store_error(&store.path, other),
                })?;
            let mut branch = store
                .db
                .load(id)
                .await
                .map_err(|e| store_error(&store.path, e))?;
            branch.set_chat_model(Arc::clone(&conv.model));
            branch.set_parse_model(Arc::clone(&conv.model));
            conv.branch = branch;
            conv.stored = true;
            conv.apply_policy();
        }
        Ok(conv)
    }

    /// Gives the branch the approval policy of `--approve`, if asked.
    fn apply_policy(&mut self) {
        if let Some(a) = &self.approvals {
            self.branch.set_approval_policy(Some(a.policy()));
        }
    }

    /// Writes the whole branch (metadata included: a paused turn), so the
    /// store holds exactly what is in memory.
    pub(crate) async fn save_all(&mut self) -> Result<(), ChatError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        store
            .db
            .save(&self.branch)
            .await
            .map_err(|e| store_error(&store.path, e))?;
        self.stored = true;
        Ok(())
    }

    /// The branch the turns run on.
    pub(crate) fn branch_mut(&mut self) -> &mut Branch {
        &mut self.branch
    }

    /// The conversation's id.
    pub(crate) fn id(&self) -> Uuid {
        self.branch.id()
    }

    /// Messages in the conversation.
    pub(crate) fn len(&self) -> usize {
        self.branch.progression().len()
    }

    /// The store file, when there is one.
    pub(crate) fn store_path(&self) -> Option<&str> {
        self.store.as_ref().map(|s| s.path.as_str())
    }

    /// Whether the conversation is in the store (something to resume).
    pub(crate) fn is_stored(&self) -> bool {
        self.stored
    }

    /// The name to resume by: the branch's name when it has one, else its id.
    pub(crate) fn resume_key(&self) -> String {
        self.branch
            .name()
            .map_or_else(|| self.id().to_string(), str::to_owned)
    }

    /// Starts over: a new branch with the same model and system prompt
    /// (the old one stays in the store).
    pub(crate) fn restart(&mut self) -> Result<(), ChatError> {
        // A name belongs to one stored conversation.
        let name = if self.stored { None } else { self.name.take() };
        self.branch = new_branch(self.system.as_deref(), name.as_deref(), &self.model)?;
        self.name = None;
        self.stored = false;
        self.apply_policy();
        Ok(())
    }

    /// Writes the turn just committed (the messages past `before`): the
    /// whole branch the first time, then the turn's messages only.
    pub(crate) async fn record_turn(&mut self, before: usize) -> Result<(), ChatError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        if !self.stored {
            store
                .db
                .save(&self.branch)
                .await
                .map_err(|e| store_error(&store.path, e))?;
            self.stored = true;
            return Ok(());
        }
        let turn: Vec<_> = self
            .branch
            .progression()
            .iter()
            .skip(before)
            .filter_map(|id| self.branch.messages().get(id).cloned())
            .collect();
        let appended = store.db.append_turn(self.branch.id(), &turn).await;
        if appended.is_err() {
            // The next turn writes the whole branch, so the store catches
            // up instead of missing this turn.
            self.stored = false;
        }
        appended.map_err(|e| store_error(&store.path, e))
    }
}

/// The chat model stored with the conversation `--resume` names.
pub(crate) async fn stored_model(
    args: &ChatArgs,
) -> Result<branch_core::model::ModelConfig, ChatError> {
    let (Some(path), Some(key)) = (&args.store, &args.resume) else {
        return Err(ChatError::Usage("`--resume` needs `--store PATH`".into()));
    };
    let db = SqliteStore::open(path)
        .await
        .map_err(|e| store_error(path, e))?;
    let id = super::branch::resolve(&db, path, key)
        .await
        .map_err(|e| match e {
            CliError::NotFound { path, reason } => ChatError::NotFound { path, reason },
            other => store_error(path, other),
        })?;
    let branch = db.load(id).await.map_err(|e| store_error(path, e))?;
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
