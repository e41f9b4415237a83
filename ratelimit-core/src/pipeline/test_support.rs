//! What tests of the generated code's path share: a `tracing` subscriber that keeps every
//! event, and declarations of their own.
#![allow(clippy::unwrap_used)]

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber, span};

use crate::limit::Limit;
use crate::registry::LimitDeclaration;

/// A declaration of its own for one test (its logged-once flag untouched by others).
pub(crate) fn declaration(name: &'static str, key: &'static str) -> &'static LimitDeclaration {
    Box::leak(Box::new(LimitDeclaration::new(
        name,
        Limit::per_minute(1),
        1,
        key,
        file!(),
        line!(),
    )))
}

/// Every event, as "LEVEL field=value ...", for the test to read back.
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Vec<String>>>);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attributes: &span::Attributes<'_>) -> span::Id {
        let metadata = attributes.metadata();
        let mut line = Line(format!("SPAN {} {}", metadata.level(), metadata.name()));
        attributes.record(&mut line);
        self.0.lock().unwrap().push(line.0);
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        self.0.lock().unwrap().push(line.0);
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

impl Capture {
    /// Every event and span, in order: `LEVEL field=value ..` for an event, `SPAN LEVEL
    /// name field=value ..` for a span.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The ERROR events that mention `name`.
    pub(crate) fn errors_about(&self, name: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(Level::ERROR.as_str()) && l.contains(name))
            .cloned()
            .collect()
    }
}
