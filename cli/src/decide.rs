//! What a call would be told now, as `RateLimiter::peek` answers (what `check` would say,
//! taking nothing): the library's own decision arithmetic (`tools::peek`) run on the state
//! read from Redis at the server's time. Unlike `peek`, it needs no limiter (which would join
//! the fleet's heartbeat) and reads a whole `SCAN` step in one pipeline.

use ratelimit_core::Limit;
use ratelimit_core::tools::{Stored, Undecidable, peek};
use serde::Serialize;

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

/// The decision `limit`'s script would make now for a call of `cost` on what `read` holds;
/// nothing is written.
pub(crate) fn decide(limit: &Limit, cost: u32, read: &Stored) -> Result<Decision, Undecidable> {
    let p = peek(limit, cost, read)?;
    Ok(Decision {
        limit: limit.to_string(),
        cost,
        allowed: p.allowed,
        remaining: p.remaining,
        retry_after_us: p.retry_after_us,
        reset_after_us: p.reset_after_us,
    })
}
