//! What a call would be told now, as `RateLimiter::peek` answers (what `check` would say,
//! taking nothing): the library's own decision functions (the twins its conformance tests hold
//! to its Lua scripts) run on the state read from Redis at the server's time. Unlike `peek`,
//! it needs no limiter (which would join the fleet's heartbeat) and reads a whole `SCAN` step
//! in one pipeline.

use ratelimit_core::__private::{
    Outcome, WindowParams, fixed_window, interval_bucket, sliding_log, sliding_window, token_bucket,
};
use ratelimit_core::Limit;
use serde::Serialize;

use crate::state::{Decoded, Kind, Log, Read, State};

/// What a call of `cost` would be told now (`decision` in the JSON output).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Decision {
    /// The limit, as the library writes it.
    pub(crate) limit: String,
    pub(crate) cost: u32,
    /// Whether the call would be admitted now (a leaky bucket admits a call that waits for
    /// its slot: then `retry_after_us` is that wait).
    pub(crate) allowed: bool,
    /// Calls of cost 1 admitted now (the tokens the bucket holds), as `peek` answers.
    pub(crate) remaining: u64,
    /// Microseconds until the call would be admitted; 0 when admitted at once.
    pub(crate) retry_after_us: u64,
    /// Microseconds until the bucket would be full again (its window over) after it.
    pub(crate) reset_after_us: u64,
}

/// Why no decision can be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undecidable {
    /// The key holds what the limit's script never writes.
    Foreign,
    /// The key holds a sliding log read by count (its times are needed).
    NoTimes,
}

/// The decision `limit`'s script would make now for a call of `cost` on what `read` holds,
/// decoded as `decoded`; nothing is written. The caller checked `1 <= cost <= burst`.
pub(crate) fn decide(
    limit: &Limit,
    cost: u32,
    read: &Read,
    decoded: &Decoded,
) -> Result<Decision, Undecidable> {
    let now = read.now_us;
    let c = u64::from(cost);
    let state = match decoded {
        Decoded::Absent => None,
        Decoded::State(s) => Some(s),
        Decoded::Foreign => return Err(Undecidable::Foreign),
    };
    let fields = |o: Outcome<()>| Decision {
        limit: limit.to_string(),
        cost,
        allowed: o.allowed,
        remaining: o.remaining,
        retry_after_us: o.retry_after_us,
        reset_after_us: o.reset_after_us,
    };
    let wrong = Undecidable::Foreign;
    let outcome = match (kind_of(limit), state) {
        (Kind::IntervalBucket, s) => {
            let p = interval_bucket::IntervalParams::of(limit).ok_or(wrong)?;
            let s = match s {
                None => None,
                Some(State::IntervalBucket(s)) => Some(*s),
                Some(_) => return Err(wrong),
            };
            Outcome::peek(|c| interval_bucket::decide(now, s, p, c), c)
        }
        (Kind::FixedWindow, s) => {
            let p = WindowParams::of(limit).ok_or(wrong)?;
            let s = match s {
                None => None,
                Some(State::FixedWindow(s)) => Some(*s),
                Some(_) => return Err(wrong),
            };
            Outcome::peek(|c| fixed_window::decide(now, s, p, c), c)
        }
        (Kind::SlidingWindow, s) => {
            let p = sliding_window::SlidingParams::of(limit).ok_or(wrong)?;
            let s = match s {
                None => None,
                Some(State::SlidingWindow(s)) => Some(*s),
                Some(_) => return Err(wrong),
            };
            Outcome::peek(|c| sliding_window::decide(now, s, p, c), c)
        }
        (Kind::SlidingLog, s) => {
            let p = WindowParams::of(limit).ok_or(wrong)?;
            let log: &[u64] = match s {
                None => &[],
                Some(State::SlidingLog(Log::Times(t))) => t,
                Some(State::SlidingLog(Log::Count(_))) => return Err(Undecidable::NoTimes),
                Some(_) => return Err(wrong),
            };
            Outcome::peek(|c| sliding_log::decide(now, log, p, c), c)
        }
        (Kind::TokenBucket, s) => {
            let s = match s {
                None => None,
                Some(State::TokenBucket(s)) => Some(*s),
                Some(_) => return Err(wrong),
            };
            let p = token_bucket::params(limit);
            Outcome::peek(|c| token_bucket::decide(now, s, p, c), c)
        }
    };
    Ok(fields(outcome))
}

/// The state `limit`'s arithmetic reads: its script's (as the library picks it), or its
/// token bucket's should a window's parameters be out of range (as the library falls back).
pub(crate) fn kind_of(limit: &Limit) -> Kind {
    match Kind::of(limit) {
        Kind::IntervalBucket if interval_bucket::IntervalParams::of(limit).is_none() => {
            Kind::TokenBucket
        }
        Kind::FixedWindow | Kind::SlidingLog if WindowParams::of(limit).is_none() => {
            Kind::TokenBucket
        }
        Kind::SlidingWindow if sliding_window::SlidingParams::of(limit).is_none() => {
            Kind::TokenBucket
        }
        kind => kind,
    }
}
