//! The fields of the spans with one name, as a `tracing` layer hears them
//! (at creation and when recorded later), to check what a span carries and
//! what it must never carry.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

/// Every field of the spans named `name`, as `(field, Debug text)`.
#[derive(Clone)]
pub struct Spans {
    name: &'static str,
    pub fields: Arc<Mutex<Vec<(String, String)>>>,
}

impl Spans {
    pub fn named(name: &'static str) -> Self {
        Self {
            name,
            fields: Arc::default(),
        }
    }

    /// The fields heard so far.
    pub fn heard(&self) -> Vec<(String, String)> {
        self.fields.lock().unwrap().clone()
    }

    /// Hears the spans of this thread until the guard is dropped.
    pub fn listen(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::layer::SubscriberExt;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == self.name {
            attrs.record(&mut Fields(&mut self.fields.lock().unwrap()));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if ctx.span(id).is_some_and(|s| s.name() == self.name) {
            values.record(&mut Fields(&mut self.fields.lock().unwrap()));
        }
    }
}
