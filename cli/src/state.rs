//! A bucket's state as the CLI shows it. The library reads it (`ratelimit_core::tools`: its
//! read script, its decoding, the guess of which algorithm wrote it); this module only words
//! it, for people and for the JSON output.
//!
//! Every algorithm keeps a limit's bucket under the same key, so the state's shape says which
//! one wrote it, with one ambiguity (a positive integer, see `StateKind::guess`):
//! `--algorithm` removes the guess.

use ratelimit_core::tools::{BucketState, Decoded, StateKind, Stored, StoredValue};
use serde::Serialize;

/// How much of a sorted set to read (the read script's argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every score (a sliding log's decision needs them).
    Full,
    /// Only how many (enough to list buckets).
    Count,
}

impl Mode {
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Count => "count",
        }
    }
}

/// The algorithm for people.
pub(crate) fn describe(kind: StateKind) -> &'static str {
    match kind {
        StateKind::TokenBucket => "token bucket (GCRA; a leaky bucket keeps the same state)",
        StateKind::IntervalBucket => "token bucket with interval refill",
        StateKind::FixedWindow => "fixed window",
        StateKind::SlidingWindow => "sliding window",
        StateKind::SlidingLog => "sliding log",
        StateKind::Concurrency => "concurrency limit (calls in flight)",
        other => other.name(),
    }
}

/// Serializes a state kind by its name.
#[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)]
pub(crate) fn kind_name<S: serde::Serializer>(
    kind: &Option<StateKind>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match kind {
        Some(k) => s.serialize_str(k.name()),
        None => s.serialize_none(),
    }
}

/// A state for people and scripts (the `state` field of the JSON output).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum View {
    /// GCRA: the bucket owes `tokens_owed` tokens (taken and not yet back), one of which
    /// comes back every `token_interval_us`; it is full again in `full_in_us`.
    TokenBucket {
        tokens_owed: u64,
        token_interval_us: f64,
        full_in_us: u64,
        /// The stored form: fine units per token, fine units per microsecond, remainder.
        interval: u64,
        per_micro: u64,
        remainder: u64,
    },
    /// Tokens of the last refill beyond full; full again at the key's expiry.
    IntervalBucket { slack: u64 },
    /// Tokens taken in the window that ends at the key's expiry.
    FixedWindow { count: u64 },
    /// Tokens taken in window number `window` (`now / period`) and in the one before.
    SlidingWindow {
        window: u64,
        previous: u64,
        current: u64,
    },
    /// Tokens in the log (some may have left the window: a log is trimmed when it admits).
    SlidingLog { tokens: u64 },
    /// A concurrency limit: `held` slots held, `waiting` calls waiting for one, the last
    /// lease ending in `last_lease_ends_in_us`.
    Concurrency {
        held: u64,
        waiting: u64,
        last_lease_ends_in_us: u64,
    },
    /// A value no script of this algorithm writes.
    Unknown {
        #[serde(rename = "type")]
        redis_type: String,
        value: Option<String>,
    },
}

impl View {
    /// The view of `decoded`, read as `read` (`None` when absent).
    pub(crate) fn of(decoded: &Decoded, read: &Stored) -> Option<View> {
        Some(match decoded {
            Decoded::State(BucketState::TokenBucket {
                tokens_owed,
                token_interval_us,
                full_in_us,
                interval,
                per_micro,
                remainder,
                ..
            }) => View::TokenBucket {
                tokens_owed: *tokens_owed,
                token_interval_us: *token_interval_us,
                full_in_us: *full_in_us,
                interval: *interval,
                per_micro: *per_micro,
                remainder: *remainder,
            },
            Decoded::State(BucketState::IntervalBucket { slack, .. }) => {
                View::IntervalBucket { slack: *slack }
            }
            Decoded::State(BucketState::FixedWindow { count, .. }) => {
                View::FixedWindow { count: *count }
            }
            Decoded::State(BucketState::SlidingWindow {
                window,
                previous,
                current,
                ..
            }) => View::SlidingWindow {
                window: *window,
                previous: *previous,
                current: *current,
            },
            Decoded::State(BucketState::SlidingLog { tokens, .. }) => {
                View::SlidingLog { tokens: *tokens }
            }
            Decoded::State(BucketState::Concurrency {
                held,
                waiting,
                last_lease_ends_in_us,
                ..
            }) => View::Concurrency {
                held: *held,
                waiting: *waiting,
                last_lease_ends_in_us: *last_lease_ends_in_us,
            },
            Decoded::Absent => return None,
            // A foreign value, or a state of a kind this CLI does not know yet.
            _ => View::Unknown {
                redis_type: match &read.value {
                    StoredValue::Text(_) => "string".to_owned(),
                    StoredValue::Scores(_) | StoredValue::Count { .. } => "zset".to_owned(),
                    StoredValue::Other(t) => t.clone(),
                    _ => "none".to_owned(),
                },
                value: match &read.value {
                    StoredValue::Text(t) => Some(t.clone()),
                    _ => None,
                },
            },
        })
    }

    /// One line for people.
    pub(crate) fn describe(&self) -> String {
        match self {
            View::TokenBucket {
                tokens_owed,
                token_interval_us,
                full_in_us,
                ..
            } => format!(
                "owes {tokens_owed} token{} (one back every {}), full in {}",
                plural(*tokens_owed),
                crate::output::duration_f(*token_interval_us),
                crate::output::duration_us(*full_in_us)
            ),
            View::IntervalBucket { slack } => {
                format!("slack {slack} (tokens of the last refill beyond full)")
            }
            View::FixedWindow { count } => format!("{count} taken in this window"),
            View::SlidingWindow {
                window,
                previous,
                current,
            } => format!("{current} taken in window {window}, {previous} in the one before"),
            View::SlidingLog { tokens } => format!("{tokens} token{} in the log", plural(*tokens)),
            View::Concurrency {
                held,
                waiting,
                last_lease_ends_in_us,
            } => format!(
                "{held} slot{} held, {waiting} call{} waiting, the last lease ending in {}",
                plural(*held),
                plural(*waiting),
                crate::output::duration_us(*last_lease_ends_in_us)
            ),
            View::Unknown { redis_type, value } => match value {
                Some(v) => {
                    format!("a {redis_type} `{v}` that this algorithm's script never writes")
                }
                None => format!("a {redis_type} that this algorithm's script never writes"),
            },
        }
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}
