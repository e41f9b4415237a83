//! One bucket as `inspect` and `top` report it.

use ratelimit_core::Limit;
use serde::Serialize;

use crate::decide::{self, Decision};
use crate::output::{Out, Style, duration_us};
use crate::state::{self, View};
use ratelimit_core::tools::{
    BucketState, Decoded, Part, StateKind, StateKindExt as _, Stored, decode_state,
    parse_bucket_key,
};

/// One bucket (the JSON fields of `inspect`, and of each of `top`'s buckets).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// Its Redis key.
    pub(crate) bucket: String,
    /// The limit's name; `null` for an unnamed bucket (`RateLimiter::check`) or a name kept
    /// only as a digest.
    pub(crate) name: Option<String>,
    /// The caller's key; `null` when kept only as a digest (longer than 128 bytes).
    pub(crate) key: Option<String>,
    pub(crate) exists: bool,
    /// The state's algorithm: `token_bucket` (also the leaky bucket's state),
    /// `interval_bucket` (a token bucket with `refill = "interval"`), `fixed_window`,
    /// `sliding_window` or `sliding_log`; `null` when no script writes what the key holds.
    #[serde(serialize_with = "state::kind_name")]
    pub(crate) algorithm: Option<StateKind>,
    /// Whether `algorithm` was guessed from the state's shape rather than given.
    pub(crate) algorithm_inferred: bool,
    /// The decoded state (`null` when absent).
    pub(crate) state: Option<View>,
    /// When the bucket is full again (the key's `PEXPIRETIME`), ms since the epoch.
    pub(crate) full_at_ms: Option<u64>,
    /// Milliseconds until then (the key's `PTTL`).
    pub(crate) full_in_ms: Option<u64>,
    /// The Redis server's clock when the key was read, us since the epoch.
    pub(crate) server_time_us: u64,
    /// What a call would be told now, when the limit is known.
    pub(crate) decision: Option<Decision>,
    /// Tokens the bucket owes beyond empty (a settlement's overdraft, bounded by the limit's
    /// `max_debt`), when the limit is known: a bucket's owed tokens beyond its burst, a fixed
    /// window's count beyond its limit; `null` without a limit.
    pub(crate) debt: Option<u64>,
    /// Anything the reader should know (a guessed algorithm, a state another algorithm wrote).
    pub(crate) note: Option<String>,
}

impl Report {
    /// The report of `bucket`, read as `read`. `given`: the algorithm given (or `limit`'s);
    /// `names`: the name and key when the caller gave them, else read back from the key.
    pub(crate) fn new(
        prefix: &str,
        bucket: &str,
        read: &Stored,
        limit: Option<(&Limit, u32)>,
        given: Option<StateKind>,
        names: Option<(Option<&str>, &str)>,
    ) -> Report {
        let (name, key) = match names {
            Some((name, key)) => (name.map(str::to_owned), Some(key.to_owned())),
            None => match parse_bucket_key(prefix, bucket) {
                Some(b) => (
                    b.name.as_ref().and_then(Part::text).map(str::to_owned),
                    b.key.text().map(str::to_owned),
                ),
                None => (None, None),
            },
        };
        let mut notes: Vec<String> = Vec::new();
        let kind = match (limit, given) {
            (Some((l, _)), _) => Some((StateKind::of(l), false)),
            (None, Some(k)) => Some((k, false)),
            (None, None) => StateKind::guess(read).map(|(k, certain)| (k, !certain)),
        };
        if let Some((StateKind::FixedWindow, true)) = kind {
            notes.push(
                "a counter: a fixed window's count, or the slack of a token bucket with \
                 interval refill; pass --algorithm to say which"
                    .to_owned(),
            );
        }
        let decoded = match kind {
            Some((k, _)) => decode_state(read, k),
            None if read.exists() => Decoded::Foreign,
            None => Decoded::Absent,
        };
        if decoded == Decoded::Foreign && read.exists() {
            notes.push(match (limit, given) {
                (None, None) => "no rate-limit script writes what this key holds".to_owned(),
                _ => {
                    let other = StateKind::guess(read)
                        .map(|(k, _)| format!(" (it looks like a {})", state::describe(k)))
                        .unwrap_or_default();
                    format!(
                        "the key holds a state this algorithm never writes{other}; a call \
                         under this limit would read it as empty or absent and overwrite it"
                    )
                }
            });
        }
        // A state the limit's script never writes, or a log read by count: no decision.
        let decision = limit.and_then(|(l, cost)| decide::decide(l, cost, read).ok());
        Report {
            bucket: bucket.to_owned(),
            name,
            key,
            exists: read.exists(),
            algorithm: kind
                .map(|(k, _)| k)
                .filter(|_| decoded != Decoded::Foreign || given.is_some() || limit.is_some()),
            algorithm_inferred: kind.is_some_and(|(_, inferred)| inferred),
            state: View::of(&decoded, read),
            full_at_ms: read.expire_ms,
            full_in_ms: read.ttl_ms,
            server_time_us: read.now_us,
            decision,
            debt: limit.and_then(|(l, _)| debt(l, &decoded)),
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        }
    }

    /// The debt for people: `None` when there is none (or the limit is unknown).
    pub(crate) fn debt_shown(&self) -> Option<String> {
        self.debt.filter(|&d| d > 0).map(|d| {
            format!(
                "{d} token{} below empty (a settlement's overdraft)",
                if d == 1 { "" } else { "s" }
            )
        })
    }

    /// The name for people: `(unnamed)` for a bucket of `RateLimiter::check`.
    pub(crate) fn name_shown(&self, prefix: &str) -> String {
        match (&self.name, parse_bucket_key(prefix, &self.bucket)) {
            (Some(n), _) => n.clone(),
            (None, Some(b)) => b
                .name
                .map_or_else(|| "(unnamed)".to_owned(), |n| n.to_string()),
            (None, None) => "?".to_owned(),
        }
    }

    /// The key for people.
    pub(crate) fn key_shown(&self, prefix: &str) -> String {
        match (&self.key, parse_bucket_key(prefix, &self.bucket)) {
            (Some(k), _) => k.clone(),
            (None, Some(b)) => b.key.to_string(),
            (None, None) => "?".to_owned(),
        }
    }

    /// The algorithm for people.
    pub(crate) fn algorithm_shown(&self) -> String {
        match self.algorithm {
            Some(k) if self.algorithm_inferred => format!(
                "{}, guessed from the state's shape (--algorithm says which)",
                state::describe(k)
            ),
            Some(k) => state::describe(k).to_owned(),
            None => "unknown".to_owned(),
        }
    }

    /// `full in 59.9 s`, or `full` when absent.
    pub(crate) fn full_in_shown(&self) -> String {
        match self.full_in_ms {
            Some(ms) => duration_us(ms.saturating_mul(1000)),
            None if self.exists => "never (no expiry)".to_owned(),
            None => "full now".to_owned(),
        }
    }

    /// What a call would be told, for people.
    pub(crate) fn decision_shown(&self, out: &Out) -> Option<String> {
        let d = self.decision.as_ref()?;
        let cost = if d.cost == 1 {
            String::new()
        } else {
            format!(" of cost {}", d.cost)
        };
        Some(if !d.allowed {
            format!(
                "{}: a call{cost} would be {} ({} remaining), retry after {}",
                d.limit,
                out.paint(Style::Red, "refused"),
                d.remaining,
                duration_us(d.retry_after_us)
            )
        } else if d.retry_after_us > 0 {
            format!(
                "{}: a call{cost} would be {} after waiting {} for its slot ({} remaining)",
                d.limit,
                out.paint(Style::Yellow, "admitted"),
                duration_us(d.retry_after_us),
                d.remaining
            )
        } else {
            format!(
                "{}: a call{cost} would be {} ({} remaining)",
                d.limit,
                out.paint(Style::Green, "admitted"),
                d.remaining
            )
        })
    }
}

/// What a bucket decoded as `decoded` owes beyond empty under `limit`: a settlement's
/// overdraft (`Usage::settle`). `None` for a state that cannot owe.
fn debt(limit: &Limit, decoded: &Decoded) -> Option<u64> {
    let capacity = u64::from(limit.burst_capacity());
    match decoded {
        Decoded::State(BucketState::TokenBucket { tokens_owed, .. }) => {
            Some(tokens_owed.saturating_sub(capacity))
        }
        Decoded::State(BucketState::FixedWindow { count, .. }) => {
            Some(count.saturating_sub(capacity))
        }
        Decoded::Absent => Some(0),
        _ => None,
    }
}
