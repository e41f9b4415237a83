//! The exact arithmetic that says which limits exist.
//!
//! Redis decides in Lua, whose numbers are doubles: exact below 2^53. Every quantity the
//! scripts and the memory store compute stays below [`MAX_EXACT`], with room for the few that
//! get added together. A token bucket counts in "fine units" of `1 / per_micro` of a
//! microsecond, where one token takes a whole number of them ([`fine`]); a window counts
//! tokens and microseconds. [`check`] accepts a limit's parts or says what is wrong with them;
//! `Limit`'s constructors call it at run time (and in `const`), `#[rate_limit]` calls its parts
//! at compile time to put each error on the argument that causes it.

use crate::{Algorithm, Refill};

/// The largest quantity the exact arithmetic may hold: 2^51.
pub const MAX_EXACT: u64 = 1 << 51;

/// The shortest lease of a concurrency slot, in microseconds: a millisecond.
pub const MIN_LEASE_US: u64 = 1_000;
/// The longest lease of a concurrency slot, in microseconds: a day.
pub const MAX_LEASE_US: u64 = 86_400_000_000;

/// The longest a call may wait for its tokens: a day, in microseconds. Beyond it a bucket's
/// state reads as a clock stepped back, not as reservations (see `gcra.lua`).
pub const MAX_WAIT_US: u64 = 86_400_000_000;

/// The most a wait may be spread by (`jitter`), in microseconds: an hour.
pub const MAX_JITTER_US: u64 = 3_600_000_000;

/// The most calls one concurrency limit may hold in flight: each is a member of a sorted set
/// in Redis, and a call of cost `n` is `n` members.
pub const MAX_CONCURRENT: u32 = 1_000_000;

/// The greatest common divisor.
#[inline]
pub const fn gcd(mut a: u64, mut b: u64) -> u64 {
    // Most limits' rate divides their period: no division at all for a rate of 1.
    if b == 1 {
        return 1;
    }
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// The fine units of `replenish` tokens per `period_us`: `(interval, per_micro)`, the fine
/// units one token takes and the fine units in a microsecond, in lowest terms.
#[inline]
pub const fn fine(replenish: u32, period_us: u64) -> (u64, u64) {
    let r = replenish as u64;
    match gcd(period_us, r) {
        1 => (period_us, r),
        g => (period_us / g, r / g),
    }
}

/// What a token bucket's script holds at most besides reservations: `2 * tau + 2048 *
/// per_micro` fine units, `tau` being the `burst * interval` an empty bucket takes to fill.
const fn bucket_used(replenish: u32, burst: u32, period_us: u64) -> (u128, u128) {
    let (interval, per_micro) = fine(replenish, period_us);
    let tau = interval as u128 * burst as u128;
    (2 * tau + 2048 * per_micro as u128, per_micro as u128)
}

/// Whether a token bucket (or a leaky bucket) refilled smoothly, `replenish` per `period_us`
/// with `burst`, is exact.
pub const fn bucket_is_exact(replenish: u32, burst: u32, period_us: u64) -> bool {
    bucket_used(replenish, burst, period_us).0 <= MAX_EXACT as u128
}

/// The fine units a bucket of `tau` (with `per_micro` fine units a microsecond) may owe beyond
/// `tau` with reservations: a day's worth, or what the exact arithmetic leaves (`2 * tau +
/// 2048 * per_micro` plus this stays below [`MAX_EXACT`]). `gcra.lua` computes the same when
/// not told.
#[inline]
pub const fn hold_for(tau: u128, per_micro: u128) -> u64 {
    let room = (MAX_EXACT as u128).saturating_sub(2 * tau + 2048 * per_micro);
    let day = MAX_WAIT_US as u128 * per_micro;
    // Below 2^51.
    #[allow(clippy::cast_possible_truncation)]
    let hold = (if day < room { day } else { room }) as u64;
    hold
}

/// The longest wait, in microseconds, of an exact smooth bucket of `replenish` per
/// `period_us` with `burst`: a day, or less for a few very fine-grained limits.
pub const fn longest_wait_us(replenish: u32, burst: u32, period_us: u64) -> u64 {
    let (interval, per_micro) = fine(replenish, period_us);
    hold_for(interval as u128 * burst as u128, per_micro as u128) / per_micro
}

/// Whether a token bucket refilled `replenish` at once every `period_us`, holding up to
/// `burst`, is exact: it fills within [`MAX_EXACT`] microseconds, and counts no more tokens
/// than that. Periods under a millisecond are refused (the store's clock is in them).
#[inline]
pub const fn interval_is_exact(replenish: u64, burst: u64, period_us: u64) -> bool {
    if replenish == 0 || burst == 0 {
        return false;
    }
    match (burst / replenish).saturating_add(2).checked_mul(period_us) {
        Some(refill) => {
            period_us >= 1000 && refill <= MAX_EXACT && burst.saturating_add(replenish) <= MAX_EXACT
        }
        None => false,
    }
}

/// Whether a window of `limit` tokens per `period_us` (fixed window, sliding log) is exact.
#[inline]
pub const fn window_is_exact(limit: u64, period_us: u64) -> bool {
    limit >= 1 && limit <= MAX_EXACT && period_us >= 1000 && period_us <= MAX_EXACT
}

/// The clock step of a sliding window's weight: a millisecond when the period is a whole
/// number of them (so that a day's window stays exact for limits up to millions), else a
/// microsecond.
#[inline]
pub const fn sliding_tick_us(period_us: u64) -> u64 {
    if period_us.is_multiple_of(1000) {
        1000
    } else {
        1
    }
}

/// Whether a sliding window of `limit` tokens per `period_us` is exact: its weighted count,
/// `limit` times the ticks in a period, stays below a quarter of [`MAX_EXACT`].
#[inline]
pub const fn sliding_is_exact(limit: u64, period_us: u64) -> bool {
    if !window_is_exact(limit, period_us) {
        return false;
    }
    match limit.checked_mul(period_us / sliding_tick_us(period_us)) {
        Some(weighted) => weighted <= MAX_EXACT / 4,
        None => false,
    }
}

/// Whether a period of `micros` microseconds can be a limit's: at least 1, below
/// [`MAX_EXACT`].
pub const fn period_is_valid(micros: u128) -> bool {
    micros >= 1 && micros < MAX_EXACT as u128
}

/// Whether a call of `cost` tokens can ever pass a limit of `burst`.
pub const fn cost_fits(cost: u32, burst: u32) -> bool {
    cost >= 1 && cost <= burst
}

/// A limit's parts, as [`check`] takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Tokens per period (a window: per window).
    pub replenish: u32,
    /// The bucket's capacity (a window: `replenish`).
    pub burst: u32,
    /// The period in microseconds.
    pub period_us: u64,
    /// How the limit counts.
    pub algorithm: Algorithm,
    /// How a token bucket refills.
    pub refill: Refill,
    /// Tokens in a new bucket; `None`: full.
    pub initial: Option<u32>,
    /// The longest a call may wait, in microseconds; `None`: no wait.
    pub wait_us: Option<u64>,
    /// Whether the period is a calendar period (a week, a month: `Unit::is_calendar`).
    pub calendar: bool,
}

/// What makes a limit's parts no limit, in the order [`check`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The period is 0 or not below [`MAX_EXACT`] microseconds.
    BadPeriod,
    /// `replenish` is 0.
    ZeroReplenish,
    /// `burst` is 0.
    ZeroBurst,
    /// A window's burst is not its `replenish`.
    BurstOfWindow,
    /// A window or a leaky bucket with an interval refill or an initial fill.
    TokenBucketOnly,
    /// A wait longer than a day.
    WaitLongerThanADay,
    /// A wait on a window or an interval refill.
    CannotWait,
    /// `initial` above `burst`.
    InitialAboveBurst,
    /// A wait longer than the exact arithmetic leaves room for.
    WaitTooLong {
        /// The longest wait this limit may have, in microseconds.
        max_us: u64,
    },
    /// The limit needs more than the exact arithmetic holds.
    TooFine,
    /// A calendar period (a week, a month) counted otherwise than by a fixed window.
    CalendarWindowOnly,
}

/// Accepts a limit's parts, or names the first thing wrong with them: the one place that says
/// which limits exist.
///
/// # Errors
/// The [`Problem`].
pub const fn check(p: &Parts) -> Result<(), Problem> {
    if !period_is_valid(p.period_us as u128) {
        return Err(Problem::BadPeriod);
    }
    if p.replenish == 0 {
        return Err(Problem::ZeroReplenish);
    }
    if p.burst == 0 {
        return Err(Problem::ZeroBurst);
    }
    if p.calendar && !matches!(p.algorithm, Algorithm::FixedWindow) {
        return Err(Problem::CalendarWindowOnly);
    }
    if p.algorithm.is_window() && p.burst != p.replenish {
        return Err(Problem::BurstOfWindow);
    }
    let interval = matches!(p.refill, Refill::Interval);
    if !matches!(p.algorithm, Algorithm::TokenBucket) && (p.initial.is_some() || interval) {
        return Err(Problem::TokenBucketOnly);
    }
    if let Some(wait_us) = p.wait_us {
        if wait_us > MAX_WAIT_US {
            return Err(Problem::WaitLongerThanADay);
        }
        if !p.algorithm.can_wait() || interval {
            return Err(Problem::CannotWait);
        }
    }
    if let Some(initial) = p.initial
        && initial > p.burst
    {
        return Err(Problem::InitialAboveBurst);
    }
    let (replenish, burst) = (p.replenish as u64, p.burst as u64);
    let exact = match (p.algorithm, p.refill) {
        (Algorithm::TokenBucket | Algorithm::LeakyBucket, Refill::Smooth) => {
            let exact = bucket_is_exact(p.replenish, p.burst, p.period_us);
            if exact && let Some(wait_us) = p.wait_us {
                let max_us = longest_wait_us(p.replenish, p.burst, p.period_us);
                if wait_us > max_us {
                    return Err(Problem::WaitTooLong { max_us });
                }
            }
            exact
        }
        (Algorithm::LeakyBucket, Refill::Interval) => false,
        (Algorithm::TokenBucket, Refill::Interval) => {
            interval_is_exact(replenish, burst, p.period_us)
        }
        (Algorithm::FixedWindow | Algorithm::SlidingLog, _) => {
            window_is_exact(replenish, p.period_us)
        }
        (Algorithm::SlidingWindow, _) => sliding_is_exact(replenish, p.period_us),
    };
    if exact { Ok(()) } else { Err(Problem::TooFine) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Unit;

    const SECOND: u64 = Unit::Second.micros();
    const MINUTE: u64 = Unit::Minute.micros();
    const DAY: u64 = Unit::Day.micros();

    fn parts(replenish: u32, burst: u32, period_us: u64) -> Parts {
        Parts {
            replenish,
            burst,
            period_us,
            algorithm: Algorithm::TokenBucket,
            refill: Refill::Smooth,
            initial: None,
            wait_us: None,
            calendar: false,
        }
    }

    #[test]
    fn fine_units_are_in_lowest_terms() {
        assert_eq!(fine(3, SECOND), (1_000_000, 3));
        assert_eq!(fine(3, MINUTE), (20_000_000, 1));
        assert_eq!(fine(1, DAY), (DAY, 1));
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(7, 0), 7);
        assert_eq!(gcd(0, 1), 1);
    }

    #[test]
    fn the_longest_wait_is_a_day_or_what_exact_arithmetic_leaves() {
        assert_eq!(longest_wait_us(3, 300, MINUTE), MAX_WAIT_US);
        assert_eq!(longest_wait_us(u32::MAX, 1, SECOND), 2_619_392);
        let at = |wait_us| {
            check(&Parts {
                wait_us: Some(wait_us),
                ..parts(u32::MAX, 1, SECOND)
            })
        };
        assert_eq!(at(2_619_392), Ok(()));
        assert_eq!(
            at(2_619_393),
            Err(Problem::WaitTooLong { max_us: 2_619_392 })
        );
        assert_eq!(at(MAX_WAIT_US + 1), Err(Problem::WaitLongerThanADay));
    }

    #[test]
    fn too_fine_buckets_are_refused() {
        assert!(!bucket_is_exact(1_000_003, u32::MAX, DAY));
        assert!(bucket_is_exact(1_000_000, 1_000_000, DAY));
        assert!(bucket_is_exact(u32::MAX, u32::MAX, SECOND));
        assert!(bucket_is_exact(3, 300, MINUTE));
        assert_eq!(
            check(&parts(1_000_003, u32::MAX, DAY)),
            Err(Problem::TooFine)
        );
        assert_eq!(check(&parts(u32::MAX, u32::MAX, SECOND)), Ok(()));
    }

    #[test]
    fn zeros_and_bad_periods() {
        assert_eq!(check(&parts(0, 1, SECOND)), Err(Problem::ZeroReplenish));
        assert_eq!(check(&parts(1, 0, SECOND)), Err(Problem::ZeroBurst));
        assert_eq!(check(&parts(1, 1, 0)), Err(Problem::BadPeriod));
        assert_eq!(check(&parts(1, 1, MAX_EXACT)), Err(Problem::BadPeriod));
        // The longest period is a window's; a bucket's must leave room for twice its burst.
        let longest = Parts {
            algorithm: Algorithm::FixedWindow,
            ..parts(1, 1, MAX_EXACT - 1)
        };
        assert_eq!(check(&longest), Ok(()));
        assert_eq!(check(&parts(1, 1, MAX_EXACT / 2 - 1024)), Ok(()));
        assert_eq!(
            check(&parts(1, 1, MAX_EXACT / 2 - 1023)),
            Err(Problem::TooFine)
        );
        assert_eq!(check(&parts(1, 1, 1)), Ok(()));
        assert!(!cost_fits(0, 5));
        assert!(cost_fits(5, 5));
        assert!(!cost_fits(6, 5));
    }

    #[test]
    fn windows_and_intervals() {
        let window = |algorithm, replenish, burst, period_us| {
            check(&Parts {
                algorithm,
                ..parts(replenish, burst, period_us)
            })
        };
        assert_eq!(
            window(Algorithm::FixedWindow, 10, 20, SECOND),
            Err(Problem::BurstOfWindow)
        );
        assert_eq!(window(Algorithm::SlidingLog, 10, 10, SECOND), Ok(()));
        assert_eq!(
            window(Algorithm::FixedWindow, 1, 1, 999),
            Err(Problem::TooFine)
        );
        // A day of milliseconds weighs up to 6.5 million tokens exactly.
        assert!(sliding_is_exact(6_500_000, DAY));
        assert!(!sliding_is_exact(6_600_000, DAY));
        assert_eq!(sliding_tick_us(1_500), 1);
        assert_eq!(
            window(Algorithm::SlidingWindow, 6_600_000, 6_600_000, DAY),
            Err(Problem::TooFine)
        );
        let interval = |replenish, burst, period_us| {
            check(&Parts {
                refill: Refill::Interval,
                ..parts(replenish, burst, period_us)
            })
        };
        assert_eq!(interval(100, 100, Unit::Hour.micros()), Ok(()));
        assert_eq!(interval(1, u32::MAX, DAY), Err(Problem::TooFine));
        assert_eq!(interval(1, 1, 999), Err(Problem::TooFine));
        assert!(!interval_is_exact(0, 1, SECOND));
        assert!(!interval_is_exact(1, u64::MAX, u64::MAX));
    }

    #[test]
    fn token_bucket_options_and_waits() {
        let leaky = Parts {
            algorithm: Algorithm::LeakyBucket,
            ..parts(10, 10, SECOND)
        };
        assert_eq!(check(&leaky), Ok(()));
        assert_eq!(
            check(&Parts {
                initial: Some(0),
                ..leaky
            }),
            Err(Problem::TokenBucketOnly)
        );
        assert_eq!(
            check(&Parts {
                wait_us: Some(1),
                ..leaky
            }),
            Ok(())
        );
        assert_eq!(
            check(&Parts {
                initial: Some(11),
                ..parts(10, 10, SECOND)
            }),
            Err(Problem::InitialAboveBurst)
        );
        for (algorithm, refill) in [
            (Algorithm::FixedWindow, Refill::Smooth),
            (Algorithm::TokenBucket, Refill::Interval),
        ] {
            let p = Parts {
                algorithm,
                refill,
                wait_us: Some(1_000_000),
                ..parts(10, 10, SECOND)
            };
            assert_eq!(check(&p), Err(Problem::CannotWait), "{p:?}");
        }
    }
}
