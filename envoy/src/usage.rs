//! Usage through plain Envoy: a descriptor charged when the stream ends, into its rule's
//! bounded debt.
//!
//! # What Envoy 1.40 sends (measured: `tests/envoy_sends.rs` pins it)
//!
//! For a `rate_limits` entry with `apply_on_stream_done: true` and
//! `hits_addend: {format: "%RESP(x-tokens-used)%"}`:
//!
//! - **Two calls per request**, both `ShouldRateLimit` on the same domain: one on the request
//!   path with the entries that do not apply on stream done, and one when the stream ends,
//!   with those that do. Envoy does not wait for the second's answer (fire-and-forget) and
//!   **does not mark it**: the request's `hits_addend` is 0 in both, no header or field says
//!   which is which. Only the descriptor's entries can tell, so a convention must (below).
//! - **Filter-level** `rate_limits` (the filter's own list): the stream-done descriptor carries
//!   its own `hits_addend`, the response header's value (`x-tokens-used: 7` is 7, `0` is 0).
//!   When the response lacks the header, or its value is not a number (`abc`), or too large
//!   (`99999999999999`), the descriptor is left out, and with no descriptor left no call is
//!   made. A request Envoy refused (429, its own local reply) has no such header: nothing is
//!   sent at stream end.
//! - **Route-level** `rate_limits` (the route's): Envoy 1.40 loads a `hits_addend` there
//!   without checking it and **does not apply it**: the stream-done descriptor arrives with no
//!   `hits_addend` (what a descriptor without one costs: 1), whatever the response said,
//!   **for refused requests too**.
//!
//! # The convention: `ratelimit.stream_done`
//!
//! A descriptor with an entry whose key is [`STREAM_DONE_KEY`] (`ratelimit.stream_done`,
//! reserved) is a **stream-done charge**. The entry is removed before the rule is looked up
//! (it may be anywhere among the entries; one at most), so the descriptor finds the rule, and
//! the bucket, of its other entries: the request path's. Its value is the **estimate** the
//! request path took from that bucket, a decimal (`0`: none was taken):
//!
//! ```yaml
//! # Envoy: the filter's own rate_limits (not the route's: see above).
//! rate_limits:
//!   - actions: [{request_headers: {header_name: x-api-key, descriptor_key: key}}]
//!     hits_addend: {number: 0}          # the request path: check only (or an estimate)
//!   - actions:
//!       - request_headers: {header_name: x-api-key, descriptor_key: key}
//!       - generic_key: {descriptor_key: ratelimit.stream_done, descriptor_value: "0"}
//!     hits_addend: {format: "%RESP(x-tokens-used)%"}
//!     apply_on_stream_done: true
//! ```
//!
//! A stream-done charge of `actual` (its own `hits_addend`) against an estimate `e`:
//!
//! - `actual > e`: the excess is taken **into the rule's bounded debt**
//!   ([`Limit::max_debt`], one burst when not set): the request already ran, so it is never
//!   refused, but never more than the debt bound below empty is taken. Concurrent requests
//!   that each passed the request path can therefore overshoot the limit by at most the
//!   bound, and the requests after them are refused until the debt has refilled (their
//!   `duration_until_reset` says when).
//! - `actual < e`: the difference is given back (a token or leaky bucket; a window cannot be
//!   given tokens back without the time they were taken, which the stream-done call does not
//!   carry: it keeps the estimate, which never under-counts).
//! - A stream-done descriptor **without its own `hits_addend`** charges nothing: that is what
//!   route-level `rate_limits` send, for refused requests too, and charging them 1 would
//!   charge a refused request.
//! - Its status is `OK` (refusing at stream end means nothing), with its rule's limit.
//!
//! An estimate is reliable with this convention when the request path's `hits_addend` and
//! the stream-done entry's value come from the same place: a fixed `number: N` on the request
//! path and `descriptor_value: "N"`, or the same request header read by both (`%REQ(x-est)%`
//! as the request path's `hits_addend`, `request_headers: {header_name: x-est,
//! descriptor_key: ratelimit.stream_done}` at stream end). A request the request path refused
//! took nothing and sends nothing at stream end (filter-level), so nothing is settled twice.
//!
//! # Concurrency limits through Envoy: not offered
//!
//! A lease taken on the request path would be released by the stream-done call, but that call
//! is fire-and-forget and is not made at all when the stream-done descriptor has no
//! `hits_addend` left (a response without the header): a release can be lost, and the call
//! carries no id of the request to name the lease by. A concurrency limit through Envoy would
//! hold its slots until their lease ran out; it is not offered here.

use ratelimit_core::{Error, Limit, RateLimiter};

/// The reserved descriptor key that marks a stream-done charge; its value is the estimate
/// the request path took.
pub const STREAM_DONE_KEY: &str = "ratelimit.stream_done";

/// What a stream-done charge did to its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Charged {
    /// Tokens taken (the excess over the estimate, what the debt bound allowed of it).
    pub taken: u64,
    /// Tokens given back (the estimate's surplus).
    pub given_back: u64,
}

/// Charges `actual` tokens, of which `estimate` were taken on the request path, to the bucket
/// `key` under the limit `name` (see the [module](self)'s documentation).
///
/// # Errors
/// The limiter's; [`Error::CannotSettle`] for a limit that cannot owe tokens (the sliding
/// window).
pub async fn charge(
    limiter: &RateLimiter,
    name: &str,
    key: &str,
    limit: &Limit,
    estimate: u64,
    actual: u64,
) -> Result<Charged, Error> {
    let limit = limit.with_shadow(false);
    if actual < estimate {
        let back = u32::try_from(estimate - actual).unwrap_or(u32::MAX);
        return match limiter.refund_named(name, key, &limit, back).await {
            Ok(()) => Ok(Charged {
                given_back: u64::from(back),
                ..Charged::default()
            }),
            // A window keeps the estimate: it cannot tell the window it was taken from.
            Err(Error::RefundNeedsBucket(_)) => Ok(Charged::default()),
            Err(e) => Err(e),
        };
    }
    let extra = u32::try_from(actual - estimate).unwrap_or(u32::MAX);
    if extra == 0 {
        return Ok(Charged::default());
    }
    let taken = limiter.charge_named(name, key, &limit, extra).await?;
    Ok(Charged {
        taken,
        given_back: 0,
    })
}
