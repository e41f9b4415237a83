//! The limiter's own log lines (target `redis_ratelimit`, INFO and above), captured by a
//! minimal global `tracing` subscriber, so that tests can count the lines of one limiter (by
//! its prefix, the `limiter` field) or of one declared limit (the `limit` field).

use std::fmt;
use std::sync::{Mutex, Once};

pub use tracing::Level;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One captured event.
#[derive(Debug, Clone)]
pub struct Line {
    /// Its level.
    pub level: Level,
    /// Its `limiter` field (the limiter's prefix), if any.
    pub limiter: String,
    /// Its `limit` field (a declared limit's name), if any.
    pub limit: String,
    /// Its message.
    pub message: String,
    /// Its other fields, `name=value` each, for a failing test to show.
    pub fields: String,
    /// When it was logged.
    pub at: std::time::Instant,
}

static LINES: Mutex<Vec<Line>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

struct Capture;

#[derive(Default)]
struct Fields {
    limiter: String,
    limit: String,
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "limiter" => self.limiter = value.to_owned(),
            "limit" => self.limit = value.to_owned(),
            _ => self.record_debug(field, &value),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "limiter" => self.limiter = format!("{value:?}"),
            "limit" => self.limit = format!("{value:?}"),
            name => self.rest.push_str(&format!("{name}={value:?} ")),
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.target() == "redis_ratelimit" && *m.level() <= Level::INFO
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let line = Line {
            level: *event.metadata().level(),
            limiter: f.limiter,
            limit: f.limit,
            message: f.message,
            fields: f.rest,
            at: std::time::Instant::now(),
        };
        LINES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Installs the capture as the process's global subscriber (once).
pub fn install() {
    INSTALL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Capture);
    });
}

/// The captured lines of the limiter with prefix `limiter` whose message contains `needle`.
pub fn matching(limiter: &str, needle: &str) -> Vec<Line> {
    lines(|l| l.limiter == limiter && l.message.contains(needle))
}

/// The captured lines, of any limiter or none, whose message contains `needle`: the store's
/// own events (a module lost, `FCALL` refused) name its URL, not a limiter.
pub fn with_message(needle: &str) -> Vec<Line> {
    lines(|l| l.message.contains(needle))
}

/// The captured lines about the declared limit `limit` (its `limit` field).
pub fn of_limit(limit: &str) -> Vec<Line> {
    lines(|l| l.limit == limit)
}

/// The captured lines that `keep` keeps, in the order they were logged.
fn lines(keep: impl Fn(&Line) -> bool) -> Vec<Line> {
    LINES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|l| keep(l))
        .cloned()
        .collect()
}
