//! A bucket's stored state, read as the limiter's scripts read it: which algorithm's it is,
//! what it holds, and what a call would be told now. Each algorithm's module owns the
//! decoding of its state (`State::decode` beside the script's twin); this file only picks
//! the algorithm and describes the result.

use std::fmt;

use redis::Value;

use crate::algorithm::{
    Kernel, MAX_TIME_US, Outcome, StateKind, concurrency, fixed_window, interval_bucket,
    sliding_window, token_bucket,
};
use crate::errors::Error;
use crate::limit::Limit;

/// The script that reads one bucket key as the decision scripts left it, writing nothing
/// (`#!lua flags=no-writes`: a replica may run it). `KEYS[1]` is the bucket; `ARGV[1]` is
/// `full` (a sorted set's every score) or `count` (only how many, and the highest). Its reply
/// is what [`Stored::from_reply`] reads.
pub const READ_SCRIPT: &str = include_str!("../scripts/read.lua");

/// What a bucket's key holds, as Redis keeps it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredValue {
    /// No key: the bucket is full (its window empty).
    Absent,
    /// A string's text.
    Text(String),
    /// A sorted set's scores (admission times in microseconds), oldest first.
    Scores(Vec<u64>),
    /// A sorted set's size and highest score, when only those were read (enough to tell a
    /// concurrency limit's leases, which end in the future, from a sliding log's admissions).
    Count {
        /// How many members.
        members: u64,
        /// The highest score (microseconds: the last admission, or the last lease's end).
        highest: u64,
    },
    /// A key of another type (`hash`, `list`...), which no script writes.
    Other(String),
}

/// One bucket's key as read at one instant of the server's clock.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The Redis server's clock when it read (`TIME`), in microseconds: the clock the scripts
    /// decide on.
    pub now_us: u64,
    /// What the key holds.
    pub value: StoredValue,
    /// The key's expiry (`PEXPIRETIME`) in milliseconds since the epoch; `None` without one.
    pub expire_ms: Option<u64>,
    /// Milliseconds until then, on the server's clock (`expire_ms` less `now_us`, as `PTTL`
    /// would say); `None` without an expiry.
    pub ttl_ms: Option<u64>,
}

impl Stored {
    /// A key holding `value` until `expire_ms`, read at `now_us`.
    #[must_use]
    pub fn new(now_us: u64, value: StoredValue, expire_ms: Option<u64>) -> Stored {
        Stored {
            now_us,
            value,
            expire_ms,
            ttl_ms: expire_ms.map(|e| e.saturating_sub(now_us / 1000)),
        }
    }

    /// [`READ_SCRIPT`]'s reply; `None` for any other shape.
    ///
    /// ```
    /// use ratelimit_core::tools::{Stored, StoredValue};
    /// use redis::Value;
    ///
    /// // What the script answers for a fixed window's count of 2 (normally from
    /// // `redis::Script::new(READ_SCRIPT).key(bucket).arg("full")`).
    /// let reply = Value::Array(vec![
    ///     Value::BulkString(b"1800000000".to_vec()),
    ///     Value::BulkString(b"250000".to_vec()),
    ///     Value::SimpleString("string".to_owned()),
    ///     Value::BulkString(b"2".to_vec()),
    ///     Value::Int(1_800_000_001_000),
    ///     Value::Nil,
    /// ]);
    /// let stored = Stored::from_reply(&reply).expect("the read script's reply");
    /// assert_eq!(stored.now_us, 1_800_000_000_250_000);
    /// assert_eq!(stored.value, StoredValue::Text("2".to_owned()));
    /// assert_eq!((stored.expire_ms, stored.ttl_ms), (Some(1_800_000_001_000), Some(750)));
    /// assert!(stored.exists());
    /// assert_eq!(Stored::from_reply(&Value::Nil), None);
    /// ```
    #[must_use]
    pub fn from_reply(reply: &Value) -> Option<Stored> {
        let Value::Array(items) = reply else {
            return None;
        };
        let [secs, micros, kind, value, expire, highest] = items.as_slice() else {
            return None;
        };
        let secs: u64 = text(secs)?.parse().ok()?;
        let micros: u64 = text(micros)?.parse().ok()?;
        let value = match (text(kind)?.as_str(), value) {
            ("none", _) => StoredValue::Absent,
            ("string", v) => StoredValue::Text(text(v)?),
            ("zset", Value::Array(scores)) => StoredValue::Scores(
                scores
                    .iter()
                    .map(|s| score(&text(s)?))
                    .collect::<Option<_>>()?,
            ),
            ("zset", v) => StoredValue::Count {
                members: u64::try_from(int(v)?).ok()?,
                highest: score(&text(highest)?)?,
            },
            (other, _) => StoredValue::Other(other.to_owned()),
        };
        // -1: no expiry; -2: no key.
        let expire_ms = u64::try_from(int(expire)?).ok().filter(|&e| e > 0);
        Some(Stored::new(
            secs.checked_mul(1_000_000)?.checked_add(micros)?,
            value,
            expire_ms,
        ))
    }

    /// Whether the key exists.
    #[must_use]
    pub fn exists(&self) -> bool {
        self.value != StoredValue::Absent
    }
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

/// A stored state decoded as one algorithm's script reads it: what the bucket holds.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum BucketState {
    /// GCRA (the token bucket refilled smoothly, and the leaky bucket): the bucket owes
    /// `tokens_owed` tokens (taken and not yet back), one of which comes back every
    /// `token_interval_us`; it is full again in `full_in_us`.
    #[non_exhaustive]
    TokenBucket {
        /// Tokens taken and not yet back, rounded up.
        tokens_owed: u64,
        /// Microseconds one token takes to come back.
        token_interval_us: f64,
        /// Microseconds until the bucket is full again.
        full_in_us: u64,
        /// The stored form: fine units one token takes.
        interval: u64,
        /// The stored form: fine units per microsecond.
        per_micro: u64,
        /// The stored form: fine units from the full instant to the key's expiry.
        remainder: u64,
    },
    /// The token bucket refilled at once each period: full again at the key's expiry.
    #[non_exhaustive]
    IntervalBucket {
        /// Tokens of the refill that fills the bucket beyond full.
        slack: u64,
    },
    /// The fixed window that ends at the key's expiry.
    #[non_exhaustive]
    FixedWindow {
        /// Tokens taken in the window.
        count: u64,
    },
    /// The sliding window.
    #[non_exhaustive]
    SlidingWindow {
        /// The index (`now / period`) of the window `current` counts.
        window: u64,
        /// Tokens taken in the window before it.
        previous: u64,
        /// Tokens taken in window `window`.
        current: u64,
    },
    /// The sliding log.
    #[non_exhaustive]
    SlidingLog {
        /// Tokens in the log (some may have left the window: a log is trimmed when it
        /// admits).
        tokens: u64,
    },
    /// A concurrency limit's set.
    #[non_exhaustive]
    Concurrency {
        /// Slots held whose lease has not ended (read by count: every member stored).
        held: u64,
        /// Calls waiting for a slot (live tickets; 0 when read by count).
        waiting: u64,
        /// Microseconds until the last lease ends (read by count: 0 when the highest score
        /// is a waiting call's ticket).
        last_lease_ends_in_us: u64,
    },
}

/// A key read as one algorithm's script reads it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// No key: the bucket is full (its window empty).
    Absent,
    /// The state the script wrote.
    State(BucketState),
    /// A value this algorithm's script never writes (another algorithm's, or an
    /// application's): a call would read it as empty or absent and overwrite it.
    Foreign,
}

/// What one algorithm's script reads from a key: its twin's state.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    TokenBucket(token_bucket::State),
    IntervalBucket(interval_bucket::State),
    FixedWindow(fixed_window::State),
    SlidingWindow(sliding_window::State),
    /// The admission times.
    Log(Vec<u64>),
    /// How many admission times (read by count).
    LogCount(u64),
    /// A concurrency limit's lease ends, one per member (slot or ticket).
    Leases(Vec<u64>),
    /// How many members a concurrency limit's set holds (ended leases included) and its
    /// highest score (read by count).
    LeaseCount(u64, u64),
}

/// `stored` as `kind`'s script reads it: `Ok(None)` absent, `Err(())` foreign (including
/// times beyond what the scripts write, so that the twins are asked nothing they were not
/// built for).
fn held(stored: &Stored, kind: StateKind) -> Result<Option<Held>, ()> {
    let expiry = stored
        .expire_ms
        .filter(|&e| e < MAX_TIME_US / 1000)
        .ok_or(());
    let held = match (&stored.value, kind) {
        (StoredValue::Absent, _) => return Ok(None),
        (StoredValue::Text(v), StateKind::TokenBucket) => {
            token_bucket::State::decode(v, expiry?).map(Held::TokenBucket)
        }
        (StoredValue::Text(v), StateKind::IntervalBucket) => {
            interval_bucket::State::decode(v, expiry?).map(Held::IntervalBucket)
        }
        (StoredValue::Text(v), StateKind::FixedWindow) => {
            fixed_window::State::decode(v, expiry?).map(Held::FixedWindow)
        }
        (StoredValue::Text(v), StateKind::SlidingWindow) => {
            sliding_window::State::decode(v).map(Held::SlidingWindow)
        }
        (StoredValue::Scores(s), StateKind::SlidingLog) => {
            let mut times = s.clone();
            // A sorted set's scores come sorted; a tool's own may not.
            times.sort_unstable();
            times
                .last()
                .is_none_or(|&t| t < MAX_TIME_US)
                .then_some(Held::Log(times))
        }
        (StoredValue::Count { members, .. }, StateKind::SlidingLog) => {
            Some(Held::LogCount(*members))
        }
        (StoredValue::Count { members, highest }, StateKind::Concurrency) => {
            Some(Held::LeaseCount(*members, *highest))
        }
        (StoredValue::Scores(s), StateKind::Concurrency) => s
            .iter()
            .all(|&t| t < MAX_TIME_US)
            .then(|| Held::Leases(s.clone())),
        _ => None,
    };
    held.map(Some).ok_or(())
}

/// A concurrency set's scores as lease ends, each with whether it is a ticket's.
fn lease_ends(scores: &[u64]) -> impl Iterator<Item = (u64, bool)> + '_ {
    scores.iter().map(|&s| {
        if s >= concurrency::TICKET {
            (s - concurrency::TICKET, true)
        } else {
            (s, false)
        }
    })
}

/// `stored` decoded as `kind`'s script reads it.
///
/// ```
/// use ratelimit_core::tools::{BucketState, Decoded, StateKind, Stored, StoredValue};
///
/// // A fixed window's count of 3, read half a second before its window ends.
/// let stored = Stored::new(
///     1_800_000_000_500_000,
///     StoredValue::Text("3".to_owned()),
///     Some(1_800_000_001_000),
/// );
/// match ratelimit_core::tools::decode_state(&stored, StateKind::FixedWindow) {
///     Decoded::State(BucketState::FixedWindow { count, .. }) => assert_eq!(count, 3),
///     other => panic!("{other:?}"),
/// }
/// // A sliding window never writes a bare count.
/// assert_eq!(
///     ratelimit_core::tools::decode_state(&stored, StateKind::SlidingWindow),
///     Decoded::Foreign
/// );
/// ```
#[must_use]
pub fn decode_state(stored: &Stored, kind: StateKind) -> Decoded {
    let held = match held(stored, kind) {
        Ok(None) => return Decoded::Absent,
        Ok(Some(held)) => held,
        Err(()) => return Decoded::Foreign,
    };
    Decoded::State(match held {
        Held::TokenBucket(s) => {
            let owed = s.owed_at(u128::from(stored.now_us));
            let whole = |fine: u64| {
                u64::try_from(owed.div_ceil(u128::from(fine.max(1)))).unwrap_or(u64::MAX)
            };
            #[allow(clippy::cast_precision_loss)]
            let token_interval_us = s.interval as f64 / s.per_micro.max(1) as f64;
            BucketState::TokenBucket {
                tokens_owed: whole(s.interval),
                token_interval_us,
                full_in_us: whole(s.per_micro),
                interval: s.interval,
                per_micro: s.per_micro,
                remainder: s.remainder,
            }
        }
        Held::IntervalBucket(s) => BucketState::IntervalBucket { slack: s.slack },
        Held::FixedWindow(s) => BucketState::FixedWindow { count: s.count },
        Held::SlidingWindow(s) => BucketState::SlidingWindow {
            window: s.window,
            previous: s.previous,
            current: s.current,
        },
        Held::Log(times) => BucketState::SlidingLog {
            tokens: times.len() as u64,
        },
        Held::LogCount(tokens) => BucketState::SlidingLog { tokens },
        Held::Leases(scores) => {
            let live = || lease_ends(&scores).filter(|&(end, _)| end > stored.now_us);
            BucketState::Concurrency {
                held: live().filter(|&(_, ticket)| !ticket).count() as u64,
                waiting: live().filter(|&(_, ticket)| ticket).count() as u64,
                last_lease_ends_in_us: live()
                    .map(|(end, _)| end - stored.now_us)
                    .max()
                    .unwrap_or(0),
            }
        }
        Held::LeaseCount(members, highest) => BucketState::Concurrency {
            held: members,
            waiting: 0,
            last_lease_ends_in_us: lease_ends(&[highest])
                .find(|&(_, ticket)| !ticket)
                .map_or(0, |(end, _)| end.saturating_sub(stored.now_us)),
        },
    })
}

/// What a call would be told now: [`peek`]'s answer.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peek {
    /// Whether the call would be admitted now (a leaky bucket, or a limit that waits, admits
    /// a call that waits for its slot: then `retry_after_us` is that wait).
    pub allowed: bool,
    /// Calls of cost 1 admitted now (the tokens the bucket holds), as
    /// [`RateLimiter::peek`](crate::RateLimiter::peek) answers.
    pub remaining: u64,
    /// Microseconds until the call would be admitted; 0 when admitted at once.
    pub retry_after_us: u64,
    /// Microseconds until the bucket would be full again (its window over) after it.
    pub reset_after_us: u64,
}

/// Why [`peek`] cannot answer.
#[non_exhaustive]
#[derive(Debug)]
pub enum Undecidable {
    /// The cost is 0 or above the limit's burst, as the limiter refuses it
    /// ([`Error::ZeroCost`], [`Error::CostExceedsBurst`]).
    Cost(Error),
    /// The key holds what the limit's script never writes.
    Foreign,
    /// The key holds a sliding log read by count (its admission times are needed).
    NoTimes,
    /// The server's clock reads 2^53 microseconds or later (the year 2255), beyond what the
    /// scripts' arithmetic holds.
    Clock,
}

impl fmt::Display for Undecidable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undecidable::Cost(e) => e.fmt(f),
            Undecidable::Foreign => f.write_str("the key holds a state this limit never writes"),
            Undecidable::NoTimes => {
                f.write_str("the sliding log was read by count, without its admission times")
            }
            Undecidable::Clock => f.write_str("the server's clock reads beyond the year 2255"),
        }
    }
}

impl std::error::Error for Undecidable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Undecidable::Cost(e) => Some(e),
            _ => None,
        }
    }
}

/// What a call of `cost` under `limit` would be told now on the bucket `stored` holds, as
/// [`RateLimiter::peek`](crate::RateLimiter::peek) answers (taking nothing): the limit's
/// own decision arithmetic (the twin the conformance tests hold to its script) run on the
/// state at the server time it was read. Nothing is written.
///
/// ```
/// use ratelimit_core::Limit;
/// use ratelimit_core::tools::{Stored, StoredValue, peek};
///
/// // An absent bucket is full: 5 calls left, the first admitted at once.
/// let absent = Stored::new(1_800_000_000_000_000, StoredValue::Absent, None);
/// let now = peek(&Limit::per_minute(5), 1, &absent).expect("a decision");
/// assert!(now.allowed);
/// assert_eq!((now.remaining, now.retry_after_us), (5, 0));
///
/// // A cost beyond the burst is refused, as the limiter refuses it.
/// assert!(peek(&Limit::per_minute(5), 6, &absent).is_err());
/// ```
///
/// # Errors
/// [`Undecidable`]: a cost the limiter refuses, a state `limit`'s script never writes, a
/// sliding log read by count, or a clock beyond the year 2255.
pub fn peek(limit: &Limit, cost: u32, stored: &Stored) -> Result<Peek, Undecidable> {
    limit.check_cost(cost).map_err(Undecidable::Cost)?;
    if stored.now_us >= MAX_TIME_US {
        return Err(Undecidable::Clock);
    }
    let held = held(stored, Kernel::of(limit).kind()).map_err(|()| Undecidable::Foreign)?;
    let (now, c) = (stored.now_us, u64::from(cost));
    let outcome = match (Kernel::of(limit), held) {
        (Kernel::Bucket(p), None) => Outcome::peek(|c| token_bucket::decide(now, None, p, c), c),
        (Kernel::Bucket(p), Some(Held::TokenBucket(s))) => {
            Outcome::peek(|c| token_bucket::decide(now, Some(s), p, c), c)
        }
        (Kernel::Interval(p), s) => {
            let s = match s {
                None => None,
                Some(Held::IntervalBucket(s)) => Some(s),
                Some(_) => return Err(Undecidable::Foreign),
            };
            Outcome::peek(|c| interval_bucket::decide(now, s, p, c), c)
        }
        (Kernel::Fixed(p, calendar), s) => {
            let s = match s {
                None => None,
                Some(Held::FixedWindow(s)) => Some(s),
                Some(_) => return Err(Undecidable::Foreign),
            };
            Outcome::peek(|c| fixed_window::decide_in(now, s, p, calendar, c), c)
        }
        (Kernel::Sliding(p), s) => {
            let s = match s {
                None => None,
                Some(Held::SlidingWindow(s)) => Some(s),
                Some(_) => return Err(Undecidable::Foreign),
            };
            Outcome::peek(|c| sliding_window::decide(now, s, p, c), c)
        }
        (Kernel::Log(p), s) => {
            let log = match s {
                None => Vec::new(),
                Some(Held::Log(times)) => times,
                Some(Held::LogCount(_)) => return Err(Undecidable::NoTimes),
                Some(_) => return Err(Undecidable::Foreign),
            };
            Outcome::peek(
                |c| crate::algorithm::sliding_log::decide(now, &log, p, c),
                c,
            )
        }
        (Kernel::Concurrency(p), s) => {
            // The scores alone (the members' text is not read): a slot held, or a ticket of
            // a call waiting (scored above `TICKET`), in an order of their own.
            let entries: Vec<concurrency::Entry> = match s {
                None => Vec::new(),
                Some(Held::Leases(scores)) => lease_ends(&scores)
                    .zip(1..)
                    .map(|((end, ticket), n)| {
                        let member = if ticket {
                            concurrency::Member::Waiting {
                                arrival: n,
                                holder: n,
                                cost: 1,
                            }
                        } else {
                            concurrency::Member::Held { holder: 0, n }
                        };
                        (member, end)
                    })
                    .collect(),
                Some(Held::LeaseCount(..)) => return Err(Undecidable::NoTimes),
                Some(_) => return Err(Undecidable::Foreign),
            };
            Outcome::peek(|c| concurrency::decide(now, &entries, p, c), c)
        }
        (Kernel::Bucket(_), Some(_)) => return Err(Undecidable::Foreign),
    };
    Ok(Peek {
        allowed: outcome.allowed,
        remaining: outcome.remaining,
        retry_after_us: outcome.retry_after_us,
        reset_after_us: outcome.reset_after_us,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::algorithm::OfLimit as _;
    use crate::limit::Algorithm;
    use crate::limit::Refill;
    use crate::tools::StateKindExt as _;

    #[test]
    fn gcra_values_read_as_the_script_reads_them() {
        let read = |v: &str| {
            token_bucket::State::decode(v, 5).map(|s| (s.remainder, s.per_micro, s.interval))
        };
        // interval 20_000_000 us (3 per minute), remainder 417.
        assert_eq!(read("20000000417"), Some((417, 1, 20_000_000)));
        // 3 per second: interval 1_000_000 fine units of 1/3 us, d = 3 (k = 1): the interval,
        // r in 4 digits, d in 1 digit, then k - 1 = 0.
        assert_eq!(read("-1000000123430"), Some((1234, 3, 1_000_000)));
        for bad in [
            "123",
            "0123",
            "-0123",
            "abc",
            "",
            "-",
            "12345678901234567890",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
        // r must stay below 1000 * d.
        assert_eq!(read("-1000000300030"), None);
        // What is decoded encodes back to the same text.
        for v in ["20000000417", "-1000000123430"] {
            assert_eq!(token_bucket::State::decode(v, 5).unwrap().encode(), v);
        }
    }

    fn stored(value: StoredValue, expire_ms: u64) -> Stored {
        Stored::new(1_800_000_000_000_000, value, Some(expire_ms))
    }

    #[test]
    fn shapes_say_which_script_wrote_them() {
        let t = |v: &str, e| StateKind::guess(&stored(StoredValue::Text(v.to_owned()), e));
        assert_eq!(
            t("20000000417", 1_800_000_012_345),
            Some((StateKind::TokenBucket, false))
        );
        assert_eq!(
            t("-1000000123430", 1_800_000_000_000),
            Some((StateKind::TokenBucket, true))
        );
        assert_eq!(
            t("5", 1_800_000_001_000),
            Some((StateKind::FixedWindow, false))
        );
        assert_eq!(
            t("20000000417", 1_800_000_001_000),
            Some((StateKind::FixedWindow, false))
        );
        assert_eq!(
            t("0", 1_800_000_001_000),
            Some((StateKind::IntervalBucket, true))
        );
        assert_eq!(
            t("3:1:2", 1_800_000_001_000),
            Some((StateKind::SlidingWindow, true))
        );
        assert_eq!(t("hello", 5), None);
        // By count, the highest score tells: admissions in the past, leases ending later.
        let now = 1_800_000_000_000_000;
        let count = |highest| StoredValue::Count {
            members: 3,
            highest,
        };
        assert_eq!(
            StateKind::guess(&stored(count(now - 5), 5)),
            Some((StateKind::SlidingLog, true))
        );
        assert_eq!(
            StateKind::guess(&stored(count(now + 5), 5)),
            Some((StateKind::Concurrency, false))
        );
        // As with every score read.
        assert_eq!(
            StateKind::guess(&stored(StoredValue::Scores(vec![now - 9, now + 5]), 5)),
            Some((StateKind::Concurrency, false))
        );
        assert_eq!(
            StateKind::guess(&stored(StoredValue::Other("hash".into()), 5)),
            None
        );
    }

    #[test]
    fn the_read_reply_is_parsed() {
        let reply = Value::Array(vec![
            Value::BulkString(b"1800000000".to_vec()),
            Value::BulkString(b"123456".to_vec()),
            Value::SimpleString("zset".into()),
            Value::Array(vec![Value::BulkString(b"1799999999000000".to_vec())]),
            Value::Int(1_800_000_001_000),
            Value::Nil,
        ]);
        let r = Stored::from_reply(&reply).unwrap();
        assert_eq!(r.now_us, 1_800_000_000_123_456);
        assert_eq!(r.value, StoredValue::Scores(vec![1_799_999_999_000_000]));
        assert_eq!(
            decode_state(&r, StateKind::SlidingLog),
            Decoded::State(BucketState::SlidingLog { tokens: 1 })
        );
        assert_eq!(decode_state(&r, StateKind::TokenBucket), Decoded::Foreign);
        // Read by count: how many, and the highest score.
        let reply = Value::Array(vec![
            Value::BulkString(b"1800000000".to_vec()),
            Value::BulkString(b"123456".to_vec()),
            Value::SimpleString("zset".into()),
            Value::Int(2),
            Value::Int(1_800_000_030_000),
            Value::BulkString(b"1800000029000000".to_vec()),
        ]);
        let r = Stored::from_reply(&reply).unwrap();
        assert_eq!(
            r.value,
            StoredValue::Count {
                members: 2,
                highest: 1_800_000_029_000_000
            }
        );
        assert_eq!(StateKind::guess(&r), Some((StateKind::Concurrency, false)));
    }

    /// A key or a clock no script writes or reads (beyond 2^53, unsorted times, from a
    /// careless tool or a hostile key) is refused, never decided into an overflow.
    #[test]
    fn what_no_script_writes_is_refused_not_decided() {
        let now = 1_800_000_000_000_000;
        let sliding = Limit::per_minute(5).algorithm(Algorithm::SlidingWindow);
        let log = Limit::per_minute(5).algorithm(Algorithm::SlidingLog);
        let interval = Limit::per_minute(5).refill(Refill::Interval);
        let fixed = Limit::per_minute(5).algorithm(Algorithm::FixedWindow);
        let text = |v: String, e| Stored::new(now, StoredValue::Text(v), Some(e));
        let huge = u64::MAX;
        for (limit, stored) in [
            (sliding, text(format!("{huge}:1:1"), 1)),
            (interval, text("1".to_owned(), huge)),
            (fixed, text(huge.to_string(), 1)),
            (
                log,
                Stored::new(now, StoredValue::Scores(vec![0, huge]), Some(1)),
            ),
        ] {
            assert!(
                matches!(peek(&limit, 1, &stored), Err(Undecidable::Foreign)),
                "{limit}: {stored:?}"
            );
        }
        // Times out of order are read in order: one token of the last minute.
        let unsorted = Stored::new(
            now,
            StoredValue::Scores(vec![now - 1, now - 120_000_000]),
            Some(now / 1000 + 60_000),
        );
        assert_eq!(peek(&log, 1, &unsorted).unwrap().remaining, 4);
        let late = Stored::new(huge, StoredValue::Absent, None);
        for limit in [Limit::per_minute(5), sliding, log, interval, fixed] {
            assert!(matches!(peek(&limit, 1, &late), Err(Undecidable::Clock)));
        }
    }

    /// What the memory store keeps (the twin's state) and what the scripts write (its
    /// `encode`, held to the Lua by `testkit/tests/algorithms.rs`) decode to the same state,
    /// and `peek` on it answers what the twin answers.
    #[test]
    fn decoding_reads_back_what_each_algorithm_writes() {
        let now = 1_800_000_000_250_000;
        let limit = Limit::per_second(3).algorithm(Algorithm::FixedWindow);
        let p = crate::algorithm::WindowParams::of(&limit).unwrap();
        let s = fixed_window::decide(now, None, p, 2).new_state.unwrap();
        let read = Stored::new(now, StoredValue::Text(s.encode()), Some(s.expire_ms));
        assert_eq!(
            held(&read, StateKind::of(&limit)),
            Ok(Some(Held::FixedWindow(s)))
        );
        let twin = Outcome::peek(|c| fixed_window::decide(now, Some(s), p, c), 1);
        let peeked = peek(&limit, 1, &read).unwrap();
        assert_eq!(
            (peeked.allowed, peeked.remaining, peeked.retry_after_us),
            (twin.allowed, twin.remaining, twin.retry_after_us)
        );

        let limit = Limit::per_second(7);
        let p = token_bucket::Params::of(&limit);
        let s = token_bucket::decide(now, None, p, 3).new_state.unwrap();
        let read = Stored::new(now, StoredValue::Text(s.encode()), Some(s.expire_ms));
        assert_eq!(
            held(&read, StateKind::of(&limit)),
            Ok(Some(Held::TokenBucket(s)))
        );
        match decode_state(&read, StateKind::TokenBucket) {
            Decoded::State(BucketState::TokenBucket { tokens_owed, .. }) => {
                assert_eq!(tokens_owed, 3);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(peek(&limit, 1, &read).unwrap().remaining, 4);

        let limit = Limit::per_second(3).algorithm(Algorithm::SlidingWindow);
        let p = sliding_window::SlidingParams::of(&limit).unwrap();
        let s = sliding_window::decide(now, None, p, 1).new_state.unwrap();
        let read = Stored::new(now, StoredValue::Text(s.encode()), Some(s.expire_ms(p)));
        assert_eq!(
            held(&read, StateKind::of(&limit)),
            Ok(Some(Held::SlidingWindow(s)))
        );

        let limit = Limit::per_second(3).refill(Refill::Interval);
        let p = interval_bucket::IntervalParams::of(&limit).unwrap();
        let s = interval_bucket::decide(now, None, p, 1).new_state.unwrap();
        let read = Stored::new(now, StoredValue::Text(s.encode()), Some(s.expire_ms));
        assert_eq!(
            held(&read, StateKind::of(&limit)),
            Ok(Some(Held::IntervalBucket(s)))
        );
        assert_eq!(peek(&limit, 1, &read).unwrap().remaining, 2);
    }
}
