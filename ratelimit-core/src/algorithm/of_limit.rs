//! Each algorithm's parameters of a [`Limit`]: `ratelimit-algorithms` knows no `Limit`, so its
//! parameter types get their `of` from traits here. Import them
//! ([`tools::algorithms`](crate::tools::algorithms)`::{OfLimit, OfConcurrentLimit}`) to write
//! `WindowParams::of(&limit)`.

use std::time::Duration;

use ratelimit_algorithms::interval_bucket::IntervalParams;
use ratelimit_algorithms::sliding_window::SlidingParams;
use ratelimit_algorithms::{WindowParams, concurrency, token_bucket};
use ratelimit_vocab::limits;

use crate::limit::Algorithm;
use crate::limit::Limit;

/// A rate limit's parameters for one algorithm.
///
/// ```
/// use ratelimit_core::Limit;
/// use ratelimit_core::tools::algorithms::{OfLimit as _, WindowParams, token_bucket};
///
/// let limit = Limit::per_minute(3).burst(300);
/// let p = token_bucket::Params::of(&limit);
/// assert_eq!((p.interval, p.per_micro, p.tau), (20_000_000, 1, 300 * 20_000_000));
/// // A window counts `replenish` per period, whatever the burst.
/// let w = WindowParams::of(&Limit::per_day(1_000_000)).expect("a valid window");
/// assert_eq!((w.limit(), w.period_us()), (1_000_000, 86_400_000_000));
/// ```
pub trait OfLimit: Sized {
    /// What [`of`](OfLimit::of) answers: the parameters, or `Option` of them for an
    /// algorithm whose arithmetic does not hold every limit.
    type Output;

    /// `limit`'s parameters.
    fn of(limit: &Limit) -> Self::Output;
}

/// A concurrency limit's parameters for one call.
pub trait OfConcurrentLimit: Sized {
    /// The parameters of a concurrency limit (`None` for a rate limit), for the call
    /// `holder` (0 where no call holds a slot: a peek, a tool's read).
    fn of(limit: &Limit, holder: u64) -> Option<Self>;
}

impl OfLimit for token_bucket::Params {
    type Output = token_bucket::Params;

    /// The exact integer parameters of `limit`'s token bucket (smooth refill), with its
    /// initial fill and its reservations: a leaky bucket is a token bucket of one token whose
    /// calls reserve up to `burst` intervals ahead.
    fn of(limit: &Limit) -> token_bucket::Params {
        bucket_params(limit)
    }
}

/// [`token_bucket::Params::of`](OfLimit::of), in `const`.
pub(super) const fn bucket_params(limit: &Limit) -> token_bucket::Params {
    let (interval, per_micro) = limits::fine(limit.replenish(), limit.period_micros());
    let burst = limit.burst_capacity() as u64;
    let asked = match limit.max_wait_micros() {
        // Bounded by `hold` when the limit was built, so it fits.
        Some(wait) => wait * per_micro,
        None => u64::MAX,
    };
    // From the fine units above: `hold` again would compute them twice on every call.
    let hold = limits::hold_for(interval as u128 * burst as u128, per_micro as u128);
    if matches!(limit.algorithm_kind(), Algorithm::LeakyBucket) {
        let queue = burst * interval;
        return token_bucket::Params {
            interval,
            per_micro,
            tau: interval,
            absent: 0,
            forgotten: 0,
            reach: if asked < queue { asked } else { queue },
            hold: if hold > queue { hold } else { queue },
            queue: true,
        };
    }
    let absent = (burst - limit.initial_tokens() as u64) * interval;
    token_bucket::Params {
        interval,
        per_micro,
        tau: interval * burst,
        absent,
        forgotten: absent,
        reach: if asked == u64::MAX { 0 } else { asked },
        hold,
        queue: false,
    }
}

impl OfLimit for WindowParams {
    type Output = Option<WindowParams>;

    /// The window of a [`Limit`]: `replenish` tokens per period.
    fn of(limit: &Limit) -> Option<WindowParams> {
        WindowParams::try_new(u64::from(limit.replenish()), limit.period_micros())
    }
}

impl OfLimit for SlidingParams {
    type Output = Option<SlidingParams>;

    /// The sliding window of a [`Limit`]: `replenish` tokens per period.
    fn of(limit: &Limit) -> Option<SlidingParams> {
        SlidingParams::try_new(u64::from(limit.replenish()), limit.period_micros())
    }
}

impl OfLimit for IntervalParams {
    type Output = Option<IntervalParams>;

    /// A [`Limit`]'s bucket with interval refill, starting with the limit's initial tokens.
    fn of(limit: &Limit) -> Option<IntervalParams> {
        IntervalParams::try_new(
            u64::from(limit.replenish()),
            u64::from(limit.burst_capacity()),
            limit.period_micros(),
            u64::from(limit.initial_tokens()),
        )
    }
}

impl OfConcurrentLimit for concurrency::Params {
    fn of(limit: &Limit, holder: u64) -> Option<concurrency::Params> {
        Some(concurrency::Params {
            max: u64::from(limit.max_in_flight()?),
            lease_us: limit.lease_time().map_or(0, duration_us),
            holder,
            queue: limit.max_wait().is_some_and(|w| !w.is_zero()),
        })
    }
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
