//! The memory seam: `MemoryStore`, its items and queries, and the default
//! in-process `InMemoryStore`.

use async_trait::async_trait;
use indexmap::IndexMap;
use serde_json::{Map, Value};
use tokio::sync::RwLock;
use uuid::Uuid;

use crate::element::Element;

/// One remembered item.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryItem {
    /// Identity; `metadata` carries provenance by convention.
    pub element: Element,
    /// What is remembered.
    pub content: Value,
    /// Tags for retrieval.
    pub tags: Vec<String>,
}

impl MemoryItem {
    /// A new item with this content.
    pub fn new(content: impl Into<Value>) -> Self {
        Self {
            element: Element::new(),
            content: content.into(),
            tags: Vec::new(),
        }
    }

    /// Adds tags (builder style).
    pub fn with_tags(mut self, tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// The id.
    pub fn id(&self) -> Uuid {
        self.element.id
    }
}

/// A search over a memory store.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryQuery {
    /// Case-insensitive substring of the content's text.
    pub text: Option<String>,
    /// Items sharing at least one tag.
    pub tags: Option<Vec<String>>,
    /// Items whose metadata has every pair.
    pub filters: Option<Map<String, Value>>,
    /// At most this many items (default 20).
    pub limit: usize,
}

impl Default for MemoryQuery {
    fn default() -> Self {
        Self {
            text: None,
            tags: None,
            filters: None,
            limit: 20,
        }
    }
}

impl MemoryQuery {
    /// Whether `item` passes the text, tag and metadata filters (the limit
    /// is the caller's). Every backend filters with this, so a durable store
    /// answers a query exactly as [`InMemoryStore`] does.
    pub fn matches(&self, item: &MemoryItem) -> bool {
        let text_ok = match self.text.as_deref().filter(|t| !t.is_empty()) {
            None => true,
            Some(t) => content_text(&item.content)
                .to_lowercase()
                .contains(&t.to_lowercase()),
        };
        let tags_ok = match self.tags.as_ref().filter(|t| !t.is_empty()) {
            None => true,
            Some(tags) => item.tags.iter().any(|t| tags.contains(t)),
        };
        let filters_ok = match self.filters.as_ref().filter(|f| !f.is_empty()) {
            None => true,
            Some(f) => f
                .iter()
                .all(|(k, v)| item.element.metadata.get(k) == Some(v)),
        };
        text_ok && tags_ok && filters_ok
    }
}

/// Errors of a memory backend.
#[derive(Debug, thiserror::Error)]
#[error("memory store: {0}")]
pub struct MemoryError(pub String);

/// A memory backend: in-process, SQLite, or anything else.
#[async_trait]
pub trait MemoryStore: Send + Sync + 'static {
    /// Persists the item (replacing one with the same id); returns its id.
    async fn store(&self, item: MemoryItem) -> Result<Uuid, MemoryError>;
    /// The item with this id.
    async fn retrieve(&self, id: Uuid) -> Result<Option<MemoryItem>, MemoryError>;
    /// Items matching the query, in storage order.
    async fn search(&self, query: &MemoryQuery) -> Result<Vec<MemoryItem>, MemoryError>;
}

/// The default backend: an ordered in-process map that lives as long as
/// the store.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    items: RwLock<IndexMap<Uuid, MemoryItem>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The text a content is matched against: strings as they are, other
/// values as JSON text.
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[async_trait]
impl MemoryStore for InMemoryStore {
    async fn store(&self, item: MemoryItem) -> Result<Uuid, MemoryError> {
        let id = item.id();
        self.items.write().await.insert(id, item);
        Ok(id)
    }

    async fn retrieve(&self, id: Uuid) -> Result<Option<MemoryItem>, MemoryError> {
        Ok(self.items.read().await.get(&id).cloned())
    }

    async fn search(&self, q: &MemoryQuery) -> Result<Vec<MemoryItem>, MemoryError> {
        let items = self.items.read().await;
        Ok(items
            .values()
            .filter(|i| q.matches(i))
            .take(q.limit)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn store_search_and_replace_in_place() {
        let s = InMemoryStore::new();
        let a = MemoryItem::new("Hello World").with_tags(["x"]);
        let b = MemoryItem::new("other").with_tags(["y"]);
        let a_id = s.store(a.clone()).await.unwrap();
        s.store(b).await.unwrap();
        let mut a2 = a.clone();
        a2.content = "hello again".into();
        s.store(a2).await.unwrap();
        let all = s.search(&MemoryQuery::default()).await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].id(), a_id);
        let q = MemoryQuery {
            text: Some("HELLO".into()),
            ..Default::default()
        };
        assert_eq!(s.search(&q).await.unwrap().len(), 1);
        let q = MemoryQuery {
            tags: Some(vec!["y".into()]),
            limit: 1,
            ..Default::default()
        };
        assert_eq!(s.search(&q).await.unwrap()[0].content, "other");
    }
}
