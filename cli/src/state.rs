//! A bucket's state as Redis holds it, decoded as the library's scripts read it: which
//! algorithm wrote it, what it owes or counts, when it is full again.
//!
//! Every algorithm keeps a limit's bucket under the same key, so the state's shape says which
//! one wrote it: a sorted set is a sliding log, `window:previous:current` a sliding window, a
//! negative integer a token bucket (GCRA, also the leaky bucket's state). A positive integer
//! is ambiguous: a token bucket's `interval * 1000 + r`, a fixed window's count or an
//! interval-refill bucket's slack; a token bucket's expiry falls on any millisecond, the
//! counters' on their window's boundary, which for periods of whole seconds is a whole
//! second. `--algorithm` removes the guess.

use ratelimit_core::__private::{fixed_window, interval_bucket, sliding_window, token_bucket};
use ratelimit_core::{Algorithm, Limit, Refill};
use redis::Value;
use serde::Serialize;

/// The script that reads a key (see its header).
pub(crate) const READ_SCRIPT: &str = include_str!("read.lua");

/// How much of a sorted set to read.
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

/// One key as the read script found it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Read {
    /// The server's clock when it read (`TIME`), in microseconds.
    pub(crate) now_us: u64,
    pub(crate) raw: Raw,
    /// `PEXPIRETIME`: when the key expires, in ms since the epoch; -1 none, -2 absent.
    pub(crate) expire_ms: i64,
    /// `PTTL`: ms until it expires; -1 none, -2 absent.
    pub(crate) pttl_ms: i64,
}

/// The key's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Raw {
    Absent,
    Text(String),
    /// A sorted set's scores, oldest first.
    Scores(Vec<u64>),
    /// A sorted set's size.
    Count(u64),
    /// Another type (`hash`, `list`...), which no script writes.
    Other(String),
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_owned()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

impl Read {
    /// The read script's reply; `None` for any other shape.
    pub(crate) fn from_reply(reply: &Value) -> Option<Read> {
        let Value::Array(items) = reply else {
            return None;
        };
        let [secs, micros, kind, value, expire, pttl] = items.as_slice() else {
            return None;
        };
        let secs: u64 = text(secs)?.parse().ok()?;
        let micros: u64 = text(micros)?.parse().ok()?;
        let kind = text(kind)?;
        let raw = match (kind.as_str(), value) {
            ("none", _) => Raw::Absent,
            ("string", v) => Raw::Text(text(v)?),
            ("zset", Value::Array(scores)) => Raw::Scores(
                scores
                    .iter()
                    .map(|s| score(&text(s)?))
                    .collect::<Option<_>>()?,
            ),
            ("zset", v) => Raw::Count(u64::try_from(int(v)?).ok()?),
            (other, _) => Raw::Other(other.to_owned()),
        };
        Some(Read {
            now_us: secs.checked_mul(1_000_000)?.checked_add(micros)?,
            raw,
            expire_ms: int(expire)?,
            pttl_ms: int(pttl)?,
        })
    }

    /// Whether the key exists.
    pub(crate) fn exists(&self) -> bool {
        !matches!(self.raw, Raw::Absent)
    }

    /// The expiry, when the key has one.
    fn expiry(&self) -> Option<u64> {
        u64::try_from(self.expire_ms).ok().filter(|&e| e > 0)
    }
}

/// A sorted-set score, a whole number of microseconds as the sliding log writes them.
fn score(s: &str) -> Option<u64> {
    if let Ok(n) = s.parse::<u64>() {
        return Some(n);
    }
    let f: f64 = s.parse().ok()?;
    // Scores are admission times below 2^53, exact in a double.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (f.is_finite() && f >= 0.0).then_some(f as u64)
}

/// Which script's state a key holds: the algorithms, with the token bucket's two refills
/// apart (their states differ) and the leaky bucket with the token bucket (they share one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// GCRA (`gcra.lua`): the token bucket refilled smoothly, and the leaky bucket.
    TokenBucket,
    /// The token bucket refilled at once each period (`interval_bucket.lua`).
    IntervalBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
}

impl Kind {
    /// The state `limit`'s script keeps (as the library picks the script for a limit).
    pub(crate) fn of(limit: &Limit) -> Kind {
        Kind::from_parts(limit.algorithm_kind(), limit.refill_kind())
    }

    /// The state of `algorithm` with `refill`.
    pub(crate) fn from_parts(algorithm: Algorithm, refill: Refill) -> Kind {
        match (algorithm, refill) {
            (Algorithm::TokenBucket, Refill::Interval) => Kind::IntervalBucket,
            (Algorithm::FixedWindow, _) => Kind::FixedWindow,
            (Algorithm::SlidingWindow, _) => Kind::SlidingWindow,
            (Algorithm::SlidingLog, _) => Kind::SlidingLog,
            _ => Kind::TokenBucket,
        }
    }

    /// The name in JSON and in `top`'s table.
    pub(crate) fn short(self) -> &'static str {
        match self {
            Kind::TokenBucket => "token_bucket",
            Kind::IntervalBucket => "interval_bucket",
            Kind::FixedWindow => "fixed_window",
            Kind::SlidingWindow => "sliding_window",
            Kind::SlidingLog => "sliding_log",
        }
    }

    /// For people.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Kind::TokenBucket => "token bucket (GCRA; a leaky bucket keeps the same state)",
            Kind::IntervalBucket => "token bucket with interval refill",
            Kind::FixedWindow => "fixed window",
            Kind::SlidingWindow => "sliding window",
            Kind::SlidingLog => "sliding log",
        }
    }
}

/// A key's state decoded as one script reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    TokenBucket(token_bucket::State),
    IntervalBucket(interval_bucket::State),
    FixedWindow(fixed_window::State),
    SlidingWindow(sliding_window::State),
    /// The admission times (or, read by count, how many there are).
    SlidingLog(Log),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Log {
    Times(Vec<u64>),
    Count(u64),
}

/// What `gcra.lua`'s `read_value` reads from a value: its remainder, fine unit and interval;
/// `None` for a value it never writes. A port of the Lua, as the library has no Rust reader
/// of the stored form (its memory store keeps the state itself).
pub(crate) fn gcra_value(v: &str) -> Option<(u64, u64, u64)> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(digits) = v.strip_prefix('-') {
        if !all_digits(digits) || digits.starts_with('0') {
            return None;
        }
        let n = digits.len();
        let k = usize::from(digits.as_bytes()[n - 1] - b'0') + 1;
        if n < 2 * k + 5 || n > 2 * k + 20 {
            return None;
        }
        let unit_digits = &digits[n - 1 - k..n - 1];
        if unit_digits.starts_with('0') {
            return None;
        }
        let unit: u64 = unit_digits.parse().ok()?;
        let r: u64 = digits[n - 4 - 2 * k..n - 1 - k].parse().ok()?;
        let iv: u64 = digits[..n - 4 - 2 * k].parse().ok()?;
        if unit < 2 || r >= 1000 * unit {
            return None;
        }
        return Some((r, unit, iv));
    }
    if !all_digits(v) || v.starts_with('0') || v.len() < 4 || v.len() > 19 {
        return None;
    }
    let r: u64 = v[v.len() - 3..].parse().ok()?;
    let iv: u64 = v[..v.len() - 3].parse().ok()?;
    Some((r, 1, iv))
}

/// `^[1-9]%d*$`: a count the fixed window writes.
fn count(v: &str) -> Option<u64> {
    (!v.starts_with('0')).then(|| v.parse().ok()).flatten()
}

/// `^%d+$`: an interval bucket's slack.
fn slack(v: &str) -> Option<u64> {
    (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse().ok())
        .flatten()
}

fn sliding(v: &str) -> Option<sliding_window::State> {
    let mut parts = v.split(':');
    let mut next = || -> Option<u64> {
        let p = parts.next()?;
        slack(p)
    };
    let (window, previous, current) = (next()?, next()?, next()?);
    parts.next().is_none().then_some(sliding_window::State {
        window,
        previous,
        current,
    })
}

/// What a read holds, decoded as `kind`'s script reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decoded {
    /// No key: the bucket is full (or its window empty).
    Absent,
    State(State),
    /// A value `kind`'s script never writes (its script reads it as empty, or as absent,
    /// and overwrites it): another algorithm's, or an application's.
    Foreign,
}

/// `read` decoded as `kind`'s script reads it.
pub(crate) fn decode(read: &Read, kind: Kind) -> Decoded {
    let e = read.expiry();
    let state = match (&read.raw, kind) {
        (Raw::Absent, _) => return Decoded::Absent,
        (Raw::Text(v), Kind::TokenBucket) => e.and_then(|expire_ms| {
            let (remainder, per_micro, interval) = gcra_value(v)?;
            Some(State::TokenBucket(token_bucket::State {
                expire_ms,
                remainder,
                per_micro,
                interval,
            }))
        }),
        (Raw::Text(v), Kind::IntervalBucket) => e.and_then(|expire_ms| {
            Some(State::IntervalBucket(interval_bucket::State {
                slack: slack(v)?,
                expire_ms,
            }))
        }),
        (Raw::Text(v), Kind::FixedWindow) => e.and_then(|expire_ms| {
            Some(State::FixedWindow(fixed_window::State {
                count: count(v)?,
                expire_ms,
            }))
        }),
        (Raw::Text(v), Kind::SlidingWindow) => sliding(v).map(State::SlidingWindow),
        (Raw::Scores(s), Kind::SlidingLog) => Some(State::SlidingLog(Log::Times(s.clone()))),
        (Raw::Count(n), Kind::SlidingLog) => Some(State::SlidingLog(Log::Count(*n))),
        _ => None,
    };
    state.map_or(Decoded::Foreign, Decoded::State)
}

/// Which script most likely wrote `read` (see the module's docs), and whether that is
/// certain; `None` for a value no script writes.
pub(crate) fn infer(read: &Read) -> Option<(Kind, bool)> {
    match &read.raw {
        Raw::Absent | Raw::Other(_) => None,
        Raw::Scores(_) | Raw::Count(_) => Some((Kind::SlidingLog, true)),
        Raw::Text(v) if sliding(v).is_some() => Some((Kind::SlidingWindow, true)),
        Raw::Text(v) if v.starts_with('-') => gcra_value(v).map(|_| (Kind::TokenBucket, true)),
        Raw::Text(v) if v == "0" => Some((Kind::IntervalBucket, true)),
        Raw::Text(v) => {
            let on_a_second = read.expire_ms > 0 && read.expire_ms % 1000 == 0;
            if gcra_value(v).is_some() && !on_a_second {
                Some((Kind::TokenBucket, false))
            } else if count(v).is_some() {
                Some((Kind::FixedWindow, false))
            } else {
                None
            }
        }
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
    /// A value no script of this algorithm writes.
    Unknown {
        #[serde(rename = "type")]
        redis_type: String,
        value: Option<String>,
    },
}

impl View {
    /// The view of `decoded` read at `now_us` (`None` when absent).
    pub(crate) fn of(decoded: &Decoded, read: &Read) -> Option<View> {
        Some(match decoded {
            Decoded::Absent => return None,
            Decoded::Foreign => View::Unknown {
                redis_type: match &read.raw {
                    Raw::Text(_) => "string".to_owned(),
                    Raw::Scores(_) | Raw::Count(_) => "zset".to_owned(),
                    Raw::Other(t) => t.clone(),
                    Raw::Absent => "none".to_owned(),
                },
                value: match &read.raw {
                    Raw::Text(t) => Some(t.clone()),
                    _ => None,
                },
            },
            Decoded::State(State::TokenBucket(s)) => {
                let owed = owed(s, read.now_us);
                #[allow(clippy::cast_precision_loss)]
                let token_interval_us = s.interval as f64 / s.per_micro as f64;
                View::TokenBucket {
                    tokens_owed: owed
                        .div_ceil(u128::from(s.interval.max(1)))
                        .try_into()
                        .unwrap_or(u64::MAX),
                    token_interval_us,
                    full_in_us: owed
                        .div_ceil(u128::from(s.per_micro.max(1)))
                        .try_into()
                        .unwrap_or(u64::MAX),
                    interval: s.interval,
                    per_micro: s.per_micro,
                    remainder: s.remainder,
                }
            }
            Decoded::State(State::IntervalBucket(s)) => View::IntervalBucket { slack: s.slack },
            Decoded::State(State::FixedWindow(s)) => View::FixedWindow { count: s.count },
            Decoded::State(State::SlidingWindow(s)) => View::SlidingWindow {
                window: s.window,
                previous: s.previous,
                current: s.current,
            },
            Decoded::State(State::SlidingLog(log)) => View::SlidingLog {
                tokens: match log {
                    Log::Times(t) => t.len() as u64,
                    Log::Count(n) => *n,
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

/// The fine units a token bucket owes at `now_us` in the units it was written in (the
/// decoded form of `gcra.lua`'s `x`); 0 once full.
fn owed(s: &token_bucket::State, now_us: u64) -> u128 {
    let until = i128::from(s.expire_ms) * 1000 - i128::from(now_us);
    let owed = until * i128::from(s.per_micro) - i128::from(s.remainder);
    u128::try_from(owed.max(0)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn gcra_values_read_as_the_script_reads_them() {
        // interval 20_000_000 us (3 per minute), remainder 417.
        assert_eq!(gcra_value("20000000417"), Some((417, 1, 20_000_000)));
        // 3 per second: interval 1_000_000 fine units of 1/3 us, d = 3 (k = 1): the interval,
        // r in 4 digits, d in 1 digit, then k - 1 = 0.
        assert_eq!(gcra_value("-1000000123430"), Some((1234, 3, 1_000_000)));
        for bad in [
            "123",
            "0123",
            "-0123",
            "abc",
            "",
            "-",
            "12345678901234567890",
        ] {
            assert_eq!(gcra_value(bad), None, "{bad}");
        }
        // r must stay below 1000 * d.
        assert_eq!(gcra_value("-1000000300030"), None);
    }

    fn read(raw: Raw, expire_ms: i64) -> Read {
        Read {
            now_us: 1_800_000_000_000_000,
            raw,
            expire_ms,
            pttl_ms: 1000,
        }
    }

    #[test]
    fn shapes_say_which_script_wrote_them() {
        let t = |v: &str, e| infer(&read(Raw::Text(v.to_owned()), e));
        assert_eq!(
            t("20000000417", 1_800_000_012_345),
            Some((Kind::TokenBucket, false))
        );
        assert_eq!(
            t("-1000000123430", 1_800_000_000_000),
            Some((Kind::TokenBucket, true))
        );
        assert_eq!(t("5", 1_800_000_001_000), Some((Kind::FixedWindow, false)));
        assert_eq!(
            t("20000000417", 1_800_000_001_000),
            Some((Kind::FixedWindow, false))
        );
        assert_eq!(
            t("0", 1_800_000_001_000),
            Some((Kind::IntervalBucket, true))
        );
        assert_eq!(
            t("3:1:2", 1_800_000_001_000),
            Some((Kind::SlidingWindow, true))
        );
        assert_eq!(t("hello", 5), None);
        assert_eq!(
            infer(&read(Raw::Count(3), 5)),
            Some((Kind::SlidingLog, true))
        );
        assert_eq!(infer(&read(Raw::Other("hash".into()), 5)), None);
    }

    #[test]
    fn the_read_reply_is_parsed() {
        let reply = Value::Array(vec![
            Value::BulkString(b"1800000000".to_vec()),
            Value::BulkString(b"123456".to_vec()),
            Value::SimpleString("zset".into()),
            Value::Array(vec![Value::BulkString(b"1799999999000000".to_vec())]),
            Value::Int(1_800_000_001_000),
            Value::Int(1000),
        ]);
        let r = Read::from_reply(&reply).unwrap();
        assert_eq!(r.now_us, 1_800_000_000_123_456);
        assert_eq!(r.raw, Raw::Scores(vec![1_799_999_999_000_000]));
        assert_eq!(
            decode(&r, Kind::SlidingLog),
            Decoded::State(State::SlidingLog(Log::Times(vec![1_799_999_999_000_000])))
        );
        assert_eq!(decode(&r, Kind::TokenBucket), Decoded::Foreign);
    }
}
