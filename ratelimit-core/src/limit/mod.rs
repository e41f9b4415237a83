//! Limits: how many tokens a bucket holds and how fast it refills. Here, the [`Limit`] type and
//! how a rate limit is built and checked; beside it, concurrency limits (`concurrent`), what a
//! limit does with its calls (`per_call`: waiting, jitter, shadow mode, failure policy), what a
//! limit says (`read`), why one cannot be built (`invalid`), tiers (`tier`) and the words of
//! its settings (`words`).

use std::num::NonZeroU32;
use std::time::Duration;

use ratelimit_algorithms::calendar::Calendar;
use ratelimit_vocab::limits::{self, Parts, Problem};

mod calendar;
mod concurrent;
mod invalid;
mod per_call;
mod policies;
mod read;
mod tier;
mod words;

pub use concurrent::{DEFAULT_LEASE, MAX_CONCURRENT};
pub use invalid::InvalidLimit;
pub(crate) use invalid::invalid;
pub use policies::{EmptyKeyPolicy, FailurePolicy};
pub(crate) use tier::TierName;
pub use tier::{MAX_RUN_TIME_TIER_NAMES, Tier};
pub(crate) use words::deserialize_named;
pub use words::{Algorithm, Refill, Unit, UnknownAlgorithm, UnknownRefill, UnknownUnit};

/// A rate limit: `replenish` tokens per period (a [`Unit`] or any [`Duration`]), counted by an
/// [`Algorithm`]. For the default token bucket, a bucket of `burst` tokens: a full bucket
/// admits `burst` calls at once; after that, calls are admitted at the replenish rate.
///
/// Invalid limits cannot be built: the `const` constructors and builder methods reject them
/// (at compile time when used in a `const`), and the `try_` forms return an error for values
/// known only at run time.
///
/// The builder methods are named as the `#[rate_limit]` arguments they mirror and take the
/// limit by value (so that `const` limits chain); the getters name what they return, so that
/// `limit.burst(5)` and `limit.burst_capacity()` never read as one another:
///
/// | argument | builder (a `try_` form for values known at run time) | getter |
/// |---|---|---|
/// | `replenish`, `unit` | [`per_second`](Limit::per_second) .. [`per_day`](Limit::per_day), [`per`](Limit::per), [`new`](Limit::new) | [`replenish`](Limit::replenish), [`unit`](Limit::unit), [`period`](Limit::period) |
/// | `burst` | [`burst`](Limit::burst) | [`burst_capacity`](Limit::burst_capacity) |
/// | `algorithm` | [`algorithm`](Limit::algorithm) | [`algorithm_kind`](Limit::algorithm_kind) |
/// | `refill` | [`refill`](Limit::refill) | [`refill_kind`](Limit::refill_kind) |
/// | `initial` | [`initial`](Limit::initial) | [`initial_tokens`](Limit::initial_tokens) |
/// | `wait` | [`wait`](Limit::wait) | [`max_wait`](Limit::max_wait) |
/// | `shadow` | [`shadow`](Limit::shadow), [`with_shadow`](Limit::with_shadow) | [`is_shadow`](Limit::is_shadow) |
/// | `policy` | [`on_failure`](Limit::on_failure), [`with_failure_policy`](Limit::with_failure_policy) | [`failure_policy`](Limit::failure_policy) |
///
/// ```
/// use ratelimit_core::{Algorithm, Limit, Refill, Unit};
/// use std::time::Duration;
///
/// // 3 calls per minute on average, up to 300 at once.
/// const ORDERS: Limit = Limit::per_minute(3).burst(300);
/// assert_eq!(ORDERS.replenish(), 3);
/// assert_eq!(ORDERS.burst_capacity(), 300);
/// assert_eq!(ORDERS.unit(), Some(Unit::Minute));
///
/// // Without `.burst`, the bucket holds one unit's worth of tokens.
/// assert_eq!(Limit::per_second(10).burst_capacity(), 10);
/// assert!(Limit::try_new(0, 5, Unit::Second).is_err());
///
/// // Never more than 1000 calls in any 3 seconds.
/// const CRAWL: Limit = Limit::per(1000, Duration::from_secs(3)).algorithm(Algorithm::SlidingLog);
/// assert_eq!(CRAWL.period(), Duration::from_secs(3));
/// assert_eq!(CRAWL.unit(), None);
///
/// // 100 tokens back at once every hour, starting empty.
/// const EXPORTS: Limit = Limit::per_hour(100).refill(Refill::Interval).initial(0);
/// assert_eq!(EXPORTS.initial_tokens(), 0);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    replenish: NonZeroU32,
    burst: NonZeroU32,
    /// The period in microseconds; `unit` names it when it is one of the four.
    period_us: u64,
    unit: Option<Unit>,
    algorithm: Algorithm,
    refill: Refill,
    /// Tokens in a bucket the store does not hold; `None`: full (the burst).
    initial: Fill,
    on_failure: Option<FailurePolicy>,
    /// The longest a call may wait for its tokens, in microseconds; [`NO_WAIT`]: not set (a
    /// token bucket refuses at once, a leaky bucket waits up to its queue's bound).
    wait_us: u64,
    /// Shadow mode: decided and counted, never refused.
    shadow: bool,
    /// The most a wait is lengthened by, at random, in microseconds (0: none).
    jitter_us: u32,
    /// A concurrency limit ([`Limit::concurrent`]): `replenish` and `burst` are its max, and
    /// `period_us` its lease.
    concurrent: bool,
    /// A quota by calendar period (`unit` a week or a month): where its fixed window's
    /// windows start; `period_us` is its longest window.
    calendar: Option<Calendar>,
    /// The most tokens a settlement may take beyond what the bucket holds
    /// ([`Limit::max_debt`]); [`DEBT_OF_A_BURST`]: not set, one burst.
    max_debt: u32,
}

/// A bucket's initial fill as set, in 4 bytes (an `Option<u32>` takes 8, and a `Limit` rides
/// in every decision): `u32::MAX` is none, a full bucket (a fill of `u32::MAX` tokens is one).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Fill(u32);

impl Fill {
    const fn of(initial: Option<u32>) -> Fill {
        match initial {
            Some(n) => Fill(n),
            None => Fill(u32::MAX),
        }
    }

    /// The fill of `initial` in a bucket of `burst`: `u32::MAX` is stored as none, so above
    /// a smaller burst it is refused here, the error it would be.
    const fn checked(initial: Option<u32>, burst: u32) -> Result<Fill, InvalidLimit> {
        match initial {
            Some(u32::MAX) if burst != u32::MAX => Err(InvalidLimit::InitialAboveBurst {
                initial: u32::MAX,
                burst,
            }),
            _ => Ok(Fill::of(initial)),
        }
    }

    const fn get(self) -> Option<u32> {
        if self.0 == u32::MAX {
            None
        } else {
            Some(self.0)
        }
    }
}

/// `Limit::max_debt` when none was set: the limit's burst.
const DEBT_OF_A_BURST: u32 = u32::MAX;

/// `Limit::wait_us` when no wait was set.
const NO_WAIT: u64 = u64::MAX;

/// The longest wait a reservation may reach: a day.
pub(crate) use ratelimit_vocab::limits::MAX_WAIT_US;

impl Limit {
    /// `replenish` tokens per `unit`, with a burst of `replenish`.
    ///
    /// # Panics
    /// If `replenish` is 0 or the limit is too fine-grained (a compile error in `const`
    /// context). Use [`Limit::try_new`] for values read at run time.
    pub const fn new(replenish: u32, unit: Unit) -> Limit {
        match Limit::try_new(replenish, replenish, unit) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// `n` tokens per second.
    ///
    /// # Panics
    /// If `n` is 0, or so large a token bucket cannot compute it exactly (see
    /// [`InvalidLimit::TooFine`]; [`Limit::from_parts`] builds a window of it).
    pub const fn per_second(n: u32) -> Limit {
        Limit::new(n, Unit::Second)
    }

    /// `n` tokens per minute.
    ///
    /// # Panics
    /// If `n` is 0, or so large a token bucket cannot compute it exactly (see
    /// [`InvalidLimit::TooFine`]; [`Limit::from_parts`] builds a window of it).
    pub const fn per_minute(n: u32) -> Limit {
        Limit::new(n, Unit::Minute)
    }

    /// `n` tokens per hour.
    ///
    /// # Panics
    /// If `n` is 0, or so large a token bucket cannot compute it exactly (see
    /// [`InvalidLimit::TooFine`]; [`Limit::from_parts`] builds a window of it).
    pub const fn per_hour(n: u32) -> Limit {
        Limit::new(n, Unit::Hour)
    }

    /// `n` tokens per day.
    ///
    /// # Panics
    /// If `n` is 0, or so large a token bucket cannot compute it exactly (see
    /// [`InvalidLimit::TooFine`]; [`Limit::from_parts`] builds a window of it).
    pub const fn per_day(n: u32) -> Limit {
        Limit::new(n, Unit::Day)
    }

    /// A quota of `n` tokens per calendar week, from Monday 00:00 UTC: a fixed window whose
    /// windows are the weeks (`#[rate_limit(replenish = n, unit = "week")]`). Its clock and its
    /// first weekday can be moved ([`utc_offset`](Limit::utc_offset),
    /// [`anchor`](Limit::anchor)).
    ///
    /// # Panics
    /// If `n` is 0 (a compile error in `const` context).
    pub const fn per_week(n: u32) -> Limit {
        Limit::new(n, Unit::Week)
    }

    /// A quota of `n` tokens per calendar month, from the 1st at 00:00 UTC: a fixed window
    /// whose windows are the months (`#[rate_limit(replenish = n, unit = "month")]`), each
    /// resetting at the month's first instant, which its `retry_after` and reset say. Its clock
    /// and its first day can be moved ([`utc_offset`](Limit::utc_offset),
    /// [`anchor`](Limit::anchor): a billing day).
    ///
    /// ```
    /// use ratelimit_core::{Algorithm, Limit, Unit};
    ///
    /// // 10,000 calls a month, resetting on the 15th at midnight in UTC+02:00.
    /// const PLAN: Limit = Limit::per_month(10_000).anchor(15).utc_offset(120);
    /// assert_eq!(PLAN.unit(), Some(Unit::Month));
    /// assert_eq!(PLAN.algorithm_kind(), Algorithm::FixedWindow);
    /// assert!(PLAN.calendar().is_some());
    /// // A month counts by a fixed window only.
    /// assert!(Limit::per_month(10).try_algorithm(Algorithm::SlidingWindow).is_err());
    /// ```
    ///
    /// # Panics
    /// If `n` is 0 (a compile error in `const` context).
    pub const fn per_month(n: u32) -> Limit {
        Limit::new(n, Unit::Month)
    }

    /// `n` tokens per `period`, any whole number of microseconds (`Limit::per(1000,
    /// Duration::from_secs(3))`), with a burst of `n`.
    ///
    /// # Panics
    /// If `n` is 0 or the period is invalid (see [`Limit::try_per`]).
    pub const fn per(n: u32, period: Duration) -> Limit {
        match Limit::try_per(n, period) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`Limit::per`] for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::ZeroReplenish`], [`InvalidLimit::BadPeriod`] when the period is 0, not
    /// a whole number of microseconds or 2^51 microseconds or more, or
    /// [`InvalidLimit::TooFine`].
    pub const fn try_per(n: u32, period: Duration) -> Result<Limit, InvalidLimit> {
        Limit::from_parts(n, n, period, Algorithm::TokenBucket, Refill::Smooth, None)
    }

    /// A limit from all its parts at once, checked together (a window's burst is its
    /// `replenish`): for values read at run time, where building step by step could pass
    /// through a limit that is invalid for another algorithm.
    ///
    /// # Errors
    /// Every [`InvalidLimit`].
    pub const fn from_parts(
        replenish: u32,
        burst: u32,
        period: Duration,
        algorithm: Algorithm,
        refill: Refill,
        initial: Option<u32>,
    ) -> Result<Limit, InvalidLimit> {
        let micros = period.as_micros();
        if !period.subsec_nanos().is_multiple_of(1000) || !limits::period_is_valid(micros) {
            return Err(InvalidLimit::BadPeriod { period });
        }
        // Checked just above: below 2^51.
        #[allow(clippy::cast_possible_truncation)]
        let period_us = micros as u64;
        // A period of a unit's length is that unit, never a calendar period's (a limit of 7
        // days is any seven days).
        let mut unit = None;
        let mut i = 0;
        while i < Unit::ALL.len() {
            if Unit::ALL[i].as_micros() == period_us && !Unit::ALL[i].is_calendar() {
                unit = Some(Unit::ALL[i]);
            }
            i += 1;
        }
        Limit::from_period(
            replenish, burst, period_us, unit, None, algorithm, refill, initial,
        )
    }

    /// `replenish` tokens per `unit` counted by `algorithm`, checked as
    /// [`from_parts`](Limit::from_parts) checks them; a week or a month is a calendar period,
    /// counted by a fixed window only.
    ///
    /// # Errors
    /// Every [`InvalidLimit`].
    pub const fn from_unit(
        replenish: u32,
        burst: u32,
        unit: Unit,
        algorithm: Algorithm,
        refill: Refill,
        initial: Option<u32>,
    ) -> Result<Limit, InvalidLimit> {
        let calendar = match unit {
            Unit::Week => Calendar::week(1, 0),
            Unit::Month => Calendar::month(1, 0),
            _ => None,
        };
        if calendar.is_none() {
            return Limit::from_parts(
                replenish,
                burst,
                unit.as_duration(),
                algorithm,
                refill,
                initial,
            );
        }
        Limit::from_period(
            replenish,
            burst,
            unit.as_micros(),
            Some(unit),
            calendar,
            algorithm,
            refill,
            initial,
        )
    }

    /// The limit of these parts, checked.
    #[allow(clippy::too_many_arguments)]
    const fn from_period(
        replenish: u32,
        burst: u32,
        period_us: u64,
        unit: Option<Unit>,
        calendar: Option<Calendar>,
        algorithm: Algorithm,
        refill: Refill,
        initial: Option<u32>,
    ) -> Result<Limit, InvalidLimit> {
        let Some(replenish) = NonZeroU32::new(replenish) else {
            return Err(InvalidLimit::ZeroReplenish);
        };
        let Some(burst) = NonZeroU32::new(burst) else {
            return Err(InvalidLimit::ZeroBurst);
        };
        Limit::assemble(Limit {
            replenish,
            burst,
            period_us,
            unit,
            algorithm,
            refill,
            initial: match Fill::checked(initial, burst.get()) {
                Ok(fill) => fill,
                Err(e) => return Err(e),
            },
            on_failure: None,
            wait_us: NO_WAIT,
            shadow: false,
            jitter_us: 0,
            concurrent: false,
            calendar,
            max_debt: DEBT_OF_A_BURST,
        })
    }

    /// Builds a limit from values known at run time: a token bucket, or for a week or a
    /// month a fixed window of calendar periods (whose `burst` is its `replenish`).
    ///
    /// # Errors
    /// [`InvalidLimit`] when a value is 0 or the limit is too fine-grained.
    pub const fn try_new(replenish: u32, burst: u32, unit: Unit) -> Result<Limit, InvalidLimit> {
        let algorithm = if unit.is_calendar() {
            Algorithm::FixedWindow
        } else {
            Algorithm::TokenBucket
        };
        Limit::from_unit(replenish, burst, unit, algorithm, Refill::Smooth, None)
    }

    /// Checks every field against the others, by the vocabulary's [`limits::check`]: the
    /// one place that says which limits exist, which `#[rate_limit]` also calls at compile
    /// time.
    const fn assemble(limit: Limit) -> Result<Limit, InvalidLimit> {
        if limit.concurrent {
            return Limit::check_concurrency(&limit);
        }
        let replenish = limit.replenish.get();
        let burst = limit.burst.get();
        let parts = Parts {
            replenish,
            burst,
            period_us: limit.period_us,
            algorithm: limit.algorithm.word(),
            refill: limit.refill.word(),
            initial: limit.initial.get(),
            wait_us: if limit.wait_us == NO_WAIT {
                None
            } else {
                Some(limit.wait_us)
            },
            calendar: limit.calendar.is_some(),
        };
        let algorithm = limit.algorithm;
        let wait = Duration::from_micros(limit.wait_us);
        let period = Duration::from_micros(limit.period_us);
        let problem = match limits::check(&parts) {
            Ok(()) => return Ok(limit),
            Err(problem) => problem,
        };
        Err(match problem {
            Problem::BadPeriod => InvalidLimit::BadPeriod { period },
            Problem::ZeroReplenish => InvalidLimit::ZeroReplenish,
            Problem::ZeroBurst => InvalidLimit::ZeroBurst,
            Problem::BurstOfWindow => InvalidLimit::BurstOfWindow {
                algorithm,
                replenish,
                burst,
            },
            Problem::TokenBucketOnly => InvalidLimit::TokenBucketOnly { algorithm },
            Problem::WaitLongerThanADay => InvalidLimit::WaitTooLong {
                wait,
                max: Duration::from_micros(MAX_WAIT_US),
            },
            Problem::CannotWait => InvalidLimit::CannotWait {
                algorithm,
                interval: matches!(limit.refill, Refill::Interval),
            },
            Problem::InitialAboveBurst => InvalidLimit::InitialAboveBurst {
                // Set: the problem is its.
                initial: match limit.initial.get() {
                    Some(initial) => initial,
                    None => burst,
                },
                burst,
            },
            Problem::WaitTooLong { max_us } => InvalidLimit::WaitTooLong {
                wait,
                max: Duration::from_micros(max_us),
            },
            Problem::TooFine => InvalidLimit::TooFine {
                replenish,
                burst,
                period,
                algorithm,
            },
            Problem::CalendarWindowOnly => InvalidLimit::CalendarWindowOnly { algorithm },
        })
    }

    /// The same limit with a bucket of `burst` tokens.
    ///
    /// # Panics
    /// If [`try_burst`](Limit::try_burst) fails.
    pub const fn burst(self, burst: u32) -> Limit {
        match self.try_burst(burst) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`burst`](Limit::burst) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::ZeroBurst`], [`InvalidLimit::TooFine`], or
    /// [`InvalidLimit::BurstOfWindow`] for a window algorithm.
    pub const fn try_burst(mut self, burst: u32) -> Result<Limit, InvalidLimit> {
        self.burst = match NonZeroU32::new(burst) {
            Some(b) => b,
            None => return Err(InvalidLimit::ZeroBurst),
        };
        Limit::assemble(self)
    }

    /// The same limit counted by `algorithm`. A window algorithm admits `replenish` per
    /// period: leave the burst at its default.
    ///
    /// # Panics
    /// If [`try_algorithm`](Limit::try_algorithm) fails.
    pub const fn algorithm(self, algorithm: Algorithm) -> Limit {
        match self.try_algorithm(algorithm) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`algorithm`](Limit::algorithm) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::BurstOfWindow`], [`InvalidLimit::TokenBucketOnly`] (a window with an
    /// interval refill or an initial fill), [`InvalidLimit::TooFine`] (a window shorter than a
    /// millisecond, or too many tokens per window for exact arithmetic).
    pub const fn try_algorithm(mut self, algorithm: Algorithm) -> Result<Limit, InvalidLimit> {
        self.algorithm = algorithm;
        Limit::assemble(self)
    }

    /// The same token bucket with `refill`: [`Refill::Interval`] adds all `replenish` tokens
    /// at once each period.
    ///
    /// # Panics
    /// If [`try_refill`](Limit::try_refill) fails.
    pub const fn refill(self, refill: Refill) -> Limit {
        match self.try_refill(refill) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`refill`](Limit::refill) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::TokenBucketOnly`] for a window algorithm, [`InvalidLimit::TooFine`] for
    /// an interval refill more often than every millisecond.
    pub const fn try_refill(mut self, refill: Refill) -> Result<Limit, InvalidLimit> {
        self.refill = refill;
        Limit::assemble(self)
    }

    /// The same token bucket starting with `initial` tokens (Bucket4j's initial tokens)
    /// instead of a full bucket, so that a service still warming up cannot take a whole burst
    /// at once. A bucket is forgotten once full again, so one idle that long starts with
    /// `initial` again.
    ///
    /// # Panics
    /// If [`try_initial`](Limit::try_initial) fails.
    pub const fn initial(self, initial: u32) -> Limit {
        match self.try_initial(Some(initial)) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`initial`](Limit::initial) for values known at run time; `None` is a full bucket.
    ///
    /// # Errors
    /// [`InvalidLimit::InitialAboveBurst`], or [`InvalidLimit::TokenBucketOnly`] for a window
    /// algorithm.
    pub const fn try_initial(mut self, initial: Option<u32>) -> Result<Limit, InvalidLimit> {
        self.initial = match Fill::checked(initial, self.burst.get()) {
            Ok(fill) => fill,
            Err(e) => return Err(e),
        };
        Limit::assemble(self)
    }
}

impl Limit {
    /// The limit an attribute declares, from every argument at once (a window's burst, and a
    /// bucket's without one, is its `replenish`): what `#[rate_limit]` evaluates in its
    /// declaration's `static`, where an invalid limit is a compile error.
    pub(crate) const fn declared(
        replenish: u32,
        burst: Option<u32>,
        unit: Unit,
        algorithm: Algorithm,
        refill: Refill,
        initial: Option<u32>,
    ) -> Limit {
        let burst = match burst {
            Some(burst) => burst,
            None => replenish,
        };
        match Limit::from_unit(replenish, burst, unit, algorithm, refill, initial) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelimit_vocab::Word;

    #[test]
    fn debug_names_what_the_limit_means() {
        let reports = Limit::concurrent(2).lease(Duration::from_secs(3));
        assert_eq!(
            format!("{reports:?}"),
            "Limit { concurrent: 2, lease: 3s, wait: None, shadow: false, on_failure: None }"
        );
        let search = Limit::per_minute(3).wait(Duration::from_secs(2));
        assert_eq!(
            format!("{search:?}"),
            "Limit { replenish: 3, burst: 3, period: 60s, unit: Some(Minute), \
             algorithm: TokenBucket, calendar: None, refill: Smooth, initial: None, jitter: None, \
             max_debt: None, wait: Some(2s), shadow: false, on_failure: None }"
        );
    }

    #[test]
    fn quotas_by_calendar_period_are_fixed_windows_of_weeks_and_months() {
        let month = Limit::per_month(10_000);
        assert_eq!(
            (month.unit(), month.algorithm_kind(), month.burst_capacity()),
            (Some(Unit::Month), Algorithm::FixedWindow, 10_000)
        );
        assert_eq!(month.calendar(), Calendar::month(1, 0));
        assert_eq!(Limit::new(10_000, Unit::Month), month);
        assert_eq!(Limit::per_week(5).calendar(), Calendar::week(1, 0));
        assert_eq!(month.to_string(), "10000 per month (fixed window)");
        let billing = month.anchor(31).utc_offset(-330);
        assert_eq!(billing.calendar(), Calendar::month(31, -330));
        assert_eq!(
            billing.to_string(),
            "10000 per month from day 31 at UTC-05:30 (fixed window)"
        );
        // The offset and the anchor keep each other.
        assert_eq!(
            month.utc_offset(60).anchor(2).calendar(),
            Calendar::month(2, 60)
        );
        // Seven days are any seven days, not a calendar week.
        let days = Limit::per(5, Duration::from_secs(7 * 86_400));
        assert_eq!((days.unit(), days.calendar()), (None, None));
        assert_eq!(days.try_anchor(1), Err(InvalidLimit::NotCalendar));
        assert_eq!(
            Limit::per_day(5).try_utc_offset(60),
            Err(InvalidLimit::NotCalendar)
        );
        assert_eq!(
            month.try_anchor(32),
            Err(InvalidLimit::BadCalendar {
                anchor: Some(32),
                offset_minutes: 0
            })
        );
        assert_eq!(
            Limit::per_week(5).try_anchor(8),
            Err(InvalidLimit::BadCalendar {
                anchor: Some(8),
                offset_minutes: 0
            })
        );
        assert!(matches!(
            month.try_utc_offset(841),
            Err(InvalidLimit::BadCalendar { anchor: None, .. })
        ));
        for algorithm in [
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
            Algorithm::SlidingWindow,
            Algorithm::SlidingLog,
        ] {
            assert_eq!(
                month.try_algorithm(algorithm),
                Err(InvalidLimit::CalendarWindowOnly { algorithm })
            );
        }
        assert!(matches!(
            month.try_burst(20_000),
            Err(InvalidLimit::BurstOfWindow { .. })
        ));
        assert!(matches!(
            Limit::try_new(10, 20, Unit::Week),
            Err(InvalidLimit::BurstOfWindow { .. })
        ));
        // A config file's unit names a calendar period as well.
        assert_eq!("month".parse(), Ok(Unit::Month));
    }

    #[test]
    fn an_initial_fill_above_the_burst_is_an_error() {
        assert_eq!(
            Limit::per_second(2).burst(10).try_initial(Some(11)),
            Err(InvalidLimit::InitialAboveBurst {
                initial: 11,
                burst: 10
            })
        );
    }

    #[test]
    fn zero_and_too_fine_limits_are_errors() {
        assert_eq!(
            Limit::try_new(0, 1, Unit::Second),
            Err(InvalidLimit::ZeroReplenish)
        );
        assert_eq!(
            Limit::try_new(1, 0, Unit::Second),
            Err(InvalidLimit::ZeroBurst)
        );
        // A prime replenish per day with a huge burst cannot be represented exactly.
        assert!(matches!(
            Limit::try_new(1_000_003, u32::MAX, Unit::Day),
            Err(InvalidLimit::TooFine { .. })
        ));
        // Realistic extremes are fine.
        assert!(Limit::try_new(1_000_000, 1_000_000, Unit::Day).is_ok());
        assert!(Limit::try_new(u32::MAX, u32::MAX, Unit::Second).is_ok());
    }

    /// That the runtime's type `T` has the words of `W`: the same variants (the macros generate
    /// `::redis_ratelimit::Unit::#variant` from the vocabulary), the same names, in order.
    fn same_words<T: std::fmt::Debug, W: Word>(all: &[T], name: impl Fn(&T) -> &'static str) {
        let ours: Vec<(String, &str)> = all.iter().map(|t| (format!("{t:?}"), name(t))).collect();
        let words: Vec<(String, &str)> = W::ALL
            .iter()
            .map(|w| (w.variant().to_owned(), w.name()))
            .collect();
        assert_eq!(ours, words);
    }

    #[test]
    fn the_types_have_the_vocabularys_words() {
        same_words::<_, ratelimit_vocab::Unit>(&Unit::ALL, |u| u.as_str());
        same_words::<_, ratelimit_vocab::Algorithm>(&Algorithm::ALL, |a| a.as_str());
        same_words::<_, ratelimit_vocab::Refill>(&Refill::ALL, |r| r.as_str());
        same_words::<_, ratelimit_vocab::FailurePolicy>(&FailurePolicy::ALL, |p| p.as_str());
        // No names of its own in the runtime: only the macro takes them.
        let empty_key = [EmptyKeyPolicy::Deny, EmptyKeyPolicy::Allow];
        same_words::<_, ratelimit_vocab::EmptyKeyPolicy>(&empty_key, |p| match p {
            EmptyKeyPolicy::Deny => "deny",
            EmptyKeyPolicy::Allow => "allow",
        });
        for unit in Unit::ALL {
            assert_eq!(unit.as_str().parse(), Ok(unit));
            assert_eq!(unit.as_micros(), unit.word().micros());
        }
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.as_str().parse(), Ok(algorithm));
        }
        for refill in Refill::ALL {
            assert_eq!(refill.as_str().parse(), Ok(refill));
        }
        for policy in FailurePolicy::ALL {
            assert_eq!(policy.as_str().parse::<FailurePolicy>().ok(), Some(policy));
        }
    }

    #[test]
    fn units_parse_with_a_helpful_error() {
        assert_eq!("minute".parse::<Unit>(), Ok(Unit::Minute));
        let err = "minutes".parse::<Unit>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown unit `minutes`; expected one of `second`, `minute`, `hour`, `day`, `week`, `month`"
        );
    }
}
