//! Limits: how many tokens a bucket holds and how fast it refills.

use std::num::NonZeroU32;
use std::time::Duration;

use ratelimit_vocab::limits::{self, Parts, Problem};

use crate::FailurePolicy;

mod invalid;
mod read;
mod tier;
mod words;

pub use invalid::InvalidLimit;
pub use tier::Tier;
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
    initial: Option<u32>,
    on_failure: Option<FailurePolicy>,
    /// The longest a call may wait for its tokens, in microseconds; [`NO_WAIT`]: not set (a
    /// token bucket refuses at once, a leaky bucket waits up to its queue's bound).
    wait_us: u64,
    /// Shadow mode: decided and counted, never refused.
    shadow: bool,
    /// The most a wait is lengthened by, at random, in microseconds (0: none). A concurrency
    /// limit has no jitter: there, the low half of its holder (see `holder_high`).
    jitter_us: u32,
    /// A concurrency limit ([`Limit::concurrent`]): `replenish` and `burst` are its max, and
    /// `period_us` its lease.
    concurrent: bool,
    /// For a concurrency limit on its way through the pipeline, the high half of the id of
    /// the call's slot (the low half is in `jitter_us`), which every stage (memory, one
    /// script, `multi.lua`, the fallback) needs: carried here rather than as another
    /// parameter of every stage, and in two halves so that it fits in the room the other
    /// fields leave (a `Limit` stays 48 bytes, as every decision carries one). 0 outside
    /// `RateLimiter::enter`.
    holder_high: u32,
}

/// The most calls one concurrency limit may hold in flight ([`Limit::concurrent`]): each is
/// a member of a sorted set in Redis, and a call of cost `n` is `n` members.
pub const MAX_CONCURRENT: u32 = limits::MAX_CONCURRENT;

/// How long a concurrency slot is held without renewal ([`Limit::lease`]'s default): the
/// slots of a process that dies come back after it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

// The shortest lease and the longest (a day) are the vocabulary's, which the attribute and
// the overrides check too.
use ratelimit_vocab::limits::{MAX_LEASE_US, MIN_LEASE_US};

/// The longest jitter a wait may be spread by: an hour (the vocabulary's, which the attribute
/// checks too).
pub(crate) const MAX_JITTER: Duration = Duration::from_micros(limits::MAX_JITTER_US);

/// `Limit::wait_us` when no wait was set.
const NO_WAIT: u64 = u64::MAX;

/// The longest wait a reservation may reach: a day.
pub(crate) use ratelimit_vocab::limits::MAX_WAIT_US;

/// Panics with `e`'s reason in a `const` builder (a compile error in `const` context).
pub(crate) const fn invalid(e: &InvalidLimit) -> ! {
    match e {
        InvalidLimit::ZeroReplenish => panic!("`replenish` must be at least 1"),
        InvalidLimit::ZeroBurst => panic!("`burst` must be at least 1"),
        InvalidLimit::BadPeriod { .. } => {
            panic!("the period must be a whole number of microseconds, at least 1 and below 2^51")
        }
        InvalidLimit::TooFine { .. } => {
            panic!("invalid limit: too fine-grained to compute exactly; see InvalidLimit::TooFine")
        }
        InvalidLimit::BurstOfWindow { .. } => {
            panic!("a window algorithm has no burst of its own: leave `burst` unset")
        }
        InvalidLimit::TokenBucketOnly { .. } => {
            panic!("`refill` and `initial` are a token bucket's, not a window algorithm's")
        }
        InvalidLimit::InitialAboveBurst { .. } => panic!("`initial` exceeds the burst"),
        InvalidLimit::CannotWait { .. } => {
            panic!("only a smoothly refilled token bucket and the leaky bucket can wait")
        }
        InvalidLimit::WaitTooLong { .. } => panic!("the wait is longer than this limit allows"),
        InvalidLimit::JitterTooLong { .. } => panic!("a jitter is at most an hour"),
        InvalidLimit::BadConcurrency { .. } => {
            panic!("a concurrency limit needs 1 to 1000000 calls and a lease from 1 ms to a day")
        }
        InvalidLimit::NotForConcurrency => {
            panic!("a concurrency limit takes only its max, `lease` and `wait`")
        }
        InvalidLimit::NeedsSlot => panic!("a concurrency limit needs RateLimiter::enter"),
    }
}

impl Limit {
    /// Whether a call of `cost` tokens can be decided under this limit: at least one token,
    /// and no more than the bucket holds (one rule for the limiter and the tools).
    pub(crate) fn check_cost(&self, cost: u32) -> Result<(), crate::Error> {
        if cost == 0 {
            return Err(crate::Error::ZeroCost);
        }
        if !limits::cost_fits(cost, self.burst_capacity()) {
            return Err(crate::Error::CostExceedsBurst { cost, limit: *self });
        }
        Ok(())
    }

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
        let mut unit = None;
        let mut i = 0;
        while i < Unit::ALL.len() {
            if Unit::ALL[i].as_micros() == period_us {
                unit = Some(Unit::ALL[i]);
            }
            i += 1;
        }
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
            initial,
            on_failure: None,
            wait_us: NO_WAIT,
            shadow: false,
            jitter_us: 0,
            concurrent: false,
            holder_high: 0,
        })
    }

    /// At most `max` calls of one key in flight at once, across every instance sharing the
    /// store: a call takes a slot when it starts ([`RateLimiter::enter`]) and gives it back
    /// when it ends, however it ends (return, error, panic, cancellation: the slot's guard
    /// gives it back when dropped). A process that dies holding slots loses them after the
    /// [`lease`](Limit::lease) (30 s by default), which is renewed while the call runs, so a
    /// long call keeps its slot. A full key refuses at once, or with
    /// [`wait`](Limit::wait) queues for a slot, served in arrival order.
    ///
    /// A cost of `n` takes `n` slots. `burst`, `algorithm`, `refill`, `initial` and `jitter`
    /// are a rate limit's and refused here; stack a rate limit beside it with
    /// [`RateLimiter::enter_all`].
    ///
    /// ```
    /// use ratelimit_core::Limit;
    /// use std::time::Duration;
    ///
    /// // At most 4 exports of one tenant at once; a fifth waits up to 2 s for a slot.
    /// const EXPORTS: Limit = Limit::concurrent(4).wait(Duration::from_secs(2));
    /// assert_eq!(EXPORTS.max_in_flight(), Some(4));
    /// assert_eq!(EXPORTS.lease_time(), Some(Duration::from_secs(30)));
    /// assert!(Limit::concurrent(4).try_burst(8).is_err());
    /// assert!(Limit::per_second(4).max_in_flight().is_none());
    /// ```
    ///
    /// [`RateLimiter::enter`]: crate::RateLimiter::enter
    /// [`RateLimiter::enter_all`]: crate::RateLimiter::enter_all
    ///
    /// # Panics
    /// If [`try_concurrent`](Limit::try_concurrent) fails (a compile error in `const`
    /// context).
    pub const fn concurrent(max: u32) -> Limit {
        match Limit::try_concurrent(max) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`concurrent`](Limit::concurrent) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::BadConcurrency`] for 0 or more than [`MAX_CONCURRENT`](crate::defaults::MAX_CONCURRENT).
    pub const fn try_concurrent(max: u32) -> Result<Limit, InvalidLimit> {
        let Some(n) = NonZeroU32::new(max) else {
            return Err(InvalidLimit::BadConcurrency {
                max,
                lease: DEFAULT_LEASE,
            });
        };
        Limit::assemble(Limit {
            replenish: n,
            burst: n,
            period_us: DEFAULT_LEASE.as_secs() * 1_000_000,
            unit: None,
            algorithm: Algorithm::TokenBucket,
            refill: Refill::Smooth,
            initial: None,
            on_failure: None,
            wait_us: NO_WAIT,
            shadow: false,
            jitter_us: 0,
            concurrent: true,
            holder_high: 0,
        })
    }

    /// The same concurrency limit with slots held for `lease` without renewal (a whole number
    /// of microseconds, from 1 ms to a day). A slot's guard renews it every third of the lease
    /// while the call runs; a process that dies loses its slots once their leases end.
    ///
    /// # Panics
    /// If [`try_lease`](Limit::try_lease) fails.
    #[must_use]
    pub const fn lease(self, lease: Duration) -> Limit {
        match self.try_lease(lease) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`lease`](Limit::lease) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::BadConcurrency`] for a lease out of bounds,
    /// [`InvalidLimit::NotForConcurrency`] for a rate limit.
    pub const fn try_lease(mut self, lease: Duration) -> Result<Limit, InvalidLimit> {
        if !self.concurrent {
            return Err(InvalidLimit::NotForConcurrency);
        }
        let us = lease.as_micros();
        if us > MAX_LEASE_US as u128 || !lease.subsec_nanos().is_multiple_of(1000) {
            return Err(InvalidLimit::BadConcurrency {
                max: self.replenish.get(),
                lease,
            });
        }
        // At most a day, checked just above.
        #[allow(clippy::cast_possible_truncation)]
        let us = us as u64;
        self.period_us = us;
        Limit::assemble(self)
    }

    /// The same limit with no wait (an override's `wait = "none"`).
    pub(crate) const fn without_wait(mut self) -> Limit {
        self.wait_us = NO_WAIT;
        self
    }

    /// The same limit with the slot id `holder` (see [`Limit::holder`]).
    /// A rate limit is returned as it is: it has no holder, and `jitter_us` is its jitter.
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) const fn with_holder(mut self, holder: u64) -> Limit {
        if self.concurrent {
            self.jitter_us = holder as u32;
            self.holder_high = (holder >> 32) as u32;
        }
        self
    }

    /// The slot id a concurrency limit carries through the pipeline (0: none).
    pub(crate) const fn holder(&self) -> u64 {
        if self.concurrent {
            (self.holder_high as u64) << 32 | self.jitter_us as u64
        } else {
            0
        }
    }

    /// The rules of a concurrency limit, which the vocabulary's rate limits do not know.
    const fn check_concurrency(limit: &Limit) -> Result<Limit, InvalidLimit> {
        let max = limit.replenish.get();
        if limit.burst.get() != max
            || !matches!(limit.algorithm, Algorithm::TokenBucket)
            || !matches!(limit.refill, Refill::Smooth)
            || limit.initial.is_some()
        {
            return Err(InvalidLimit::NotForConcurrency);
        }
        if max > MAX_CONCURRENT || limit.period_us < MIN_LEASE_US || limit.period_us > MAX_LEASE_US
        {
            return Err(InvalidLimit::BadConcurrency {
                max,
                lease: Duration::from_micros(limit.period_us),
            });
        }
        Ok(*limit)
    }

    /// Builds a limit from values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit`] when a value is 0 or the limit is too fine-grained.
    pub const fn try_new(replenish: u32, burst: u32, unit: Unit) -> Result<Limit, InvalidLimit> {
        Limit::from_parts(
            replenish,
            burst,
            unit.as_duration(),
            Algorithm::TokenBucket,
            Refill::Smooth,
            None,
        )
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
            initial: limit.initial,
            wait_us: if limit.wait_us == NO_WAIT {
                None
            } else {
                Some(limit.wait_us)
            },
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
                initial: match limit.initial {
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
        self.initial = initial;
        Limit::assemble(self)
    }

    /// The same limit with its own failure policy: what calls under this limit get while the
    /// store fails, instead of the limiter's [`failure_policy`](crate::RateLimiter::failure_policy).
    ///
    /// ```
    /// use ratelimit_core::{FailurePolicy, Limit};
    ///
    /// // Payments fail closed even when the limiter's default is to fall back to memory.
    /// const PAYMENTS: Limit = Limit::per_second(5).burst(10).on_failure(FailurePolicy::Deny);
    /// assert_eq!(PAYMENTS.failure_policy(), Some(FailurePolicy::Deny));
    /// assert_eq!(Limit::per_second(5).failure_policy(), None);
    /// ```
    #[must_use]
    pub const fn on_failure(self, policy: FailurePolicy) -> Limit {
        self.with_failure_policy(Some(policy))
    }

    /// The same limit with the given failure policy, or with the limiter's when `None`.
    #[must_use]
    pub const fn with_failure_policy(mut self, policy: Option<FailurePolicy>) -> Limit {
        self.on_failure = policy;
        self
    }

    /// The same limit, with calls that wait up to `max_wait` for their tokens instead of being
    /// refused: a call over the limit reserves its tokens at once, in the same round trip as a
    /// check, and sleeps until they are due if that is within `max_wait`; otherwise it is
    /// refused at once and takes nothing. Waiters on every instance are served in the order
    /// they reserved, at the rate, never early. What `wait = ".."` on `#[rate_limit]` sets,
    /// and what [`RateLimiter::acquire`](crate::RateLimiter::acquire) does for one call.
    ///
    /// For a [leaky bucket](Algorithm::LeakyBucket), which always waits for its slot, this
    /// shortens the wait below the queue's own bound (`burst` slots).
    ///
    /// ```
    /// use ratelimit_core::Limit;
    /// use std::time::Duration;
    ///
    /// // 10 fetches a second, one at a time; a fetch waits up to 2 s for its turn.
    /// const FETCH: Limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(2));
    /// assert_eq!(FETCH.max_wait(), Some(Duration::from_secs(2)));
    /// ```
    ///
    /// # Panics
    /// If [`try_wait`](Limit::try_wait) fails.
    #[must_use]
    pub const fn wait(self, max_wait: Duration) -> Limit {
        match self.try_wait(max_wait) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`wait`](Limit::wait) for values known at run time. The wait is counted in whole
    /// microseconds (a fraction is dropped: never a longer wait than asked).
    ///
    /// # Errors
    /// [`InvalidLimit::CannotWait`] for a window algorithm or an interval refill,
    /// [`InvalidLimit::WaitTooLong`] beyond a day (or beyond what the limit's exact arithmetic
    /// can hold, for a few very fine-grained limits).
    pub const fn try_wait(mut self, max_wait: Duration) -> Result<Limit, InvalidLimit> {
        let us = max_wait.as_micros();
        if us > MAX_WAIT_US as u128 {
            return Err(InvalidLimit::WaitTooLong {
                wait: max_wait,
                max: Duration::from_micros(MAX_WAIT_US),
            });
        }
        // At most a day in microseconds, checked just above.
        #[allow(clippy::cast_possible_truncation)]
        let us = us as u64;
        self.wait_us = us;
        Limit::assemble(self)
    }

    /// The same limit, with each wait lengthened by a random spread of up to `max` (governor's
    /// `Jitter`): waiters released together do not all arrive together, on the service below
    /// or on the limiter. A call that waits has its tokens already; it only waits longer, so no
    /// call goes early. Calls that do not wait are not affected.
    ///
    /// ```
    /// use ratelimit_core::Limit;
    /// use std::time::Duration;
    ///
    /// const FETCH: Limit = Limit::per_second(10)
    ///     .burst(1)
    ///     .wait(Duration::from_secs(2))
    ///     .jitter(Duration::from_millis(50));
    /// assert_eq!(FETCH.max_jitter(), Some(Duration::from_millis(50)));
    /// ```
    ///
    /// # Panics
    /// If [`try_jitter`](Limit::try_jitter) fails.
    #[must_use]
    pub const fn jitter(self, max: Duration) -> Limit {
        match self.try_jitter(max) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`jitter`](Limit::jitter) for values known at run time, counted in whole microseconds.
    ///
    /// # Errors
    /// [`InvalidLimit::JitterTooLong`] beyond an hour.
    pub const fn try_jitter(mut self, max: Duration) -> Result<Limit, InvalidLimit> {
        if max.as_micros() > MAX_JITTER.as_micros() {
            return Err(InvalidLimit::JitterTooLong {
                jitter: max,
                max: MAX_JITTER,
            });
        }
        // At most an hour in microseconds, checked just above.
        #[allow(clippy::cast_possible_truncation)]
        let us = max.as_micros() as u32;
        if self.concurrent && us != 0 {
            return Err(InvalidLimit::NotForConcurrency);
        }
        self.jitter_us = us;
        Ok(self)
    }

    /// The most a wait under this limit is lengthened by ([`jitter`](Limit::jitter)), if set.
    pub const fn max_jitter(&self) -> Option<Duration> {
        // A concurrency limit's `jitter_us` is half its holder.
        if self.jitter_us == 0 || self.concurrent {
            None
        } else {
            Some(Duration::from_micros(self.jitter_us as u64))
        }
    }

    /// How long a call under this limit may wait for its tokens, if a wait was set
    /// ([`wait`](Limit::wait)).
    pub const fn max_wait(&self) -> Option<Duration> {
        if self.wait_us == NO_WAIT {
            None
        } else {
            Some(Duration::from_micros(self.wait_us))
        }
    }

    /// The same limit in shadow mode: its calls are decided, take tokens and are described in
    /// the response headers (beside enforced limits, in the IETF headers only; alone, in every
    /// family, `X-RateLimit-Remaining: 0` included once its bucket is empty), but a call it
    /// would refuse goes on (the decision says so:
    /// [`Decision::shadowed`](crate::Decision::shadowed)). For rolling out a new limit safely:
    /// watch what it would refuse before it does.
    ///
    /// ```
    /// use ratelimit_core::Limit;
    ///
    /// const TRIAL: Limit = Limit::per_minute(60).shadow();
    /// assert!(TRIAL.is_shadow());
    /// ```
    #[must_use]
    pub const fn shadow(self) -> Limit {
        self.with_shadow(true)
    }

    /// The same limit in shadow mode or not.
    #[must_use]
    pub const fn with_shadow(mut self, shadow: bool) -> Limit {
        self.shadow = shadow;
        self
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
        // The call a limit carries through the pipeline is not part of what it says.
        assert_eq!(
            format!("{:?}", reports.with_holder(u64::MAX)),
            format!("{reports:?}")
        );
        let search = Limit::per_minute(3).wait(Duration::from_secs(2));
        assert_eq!(
            format!("{search:?}"),
            "Limit { replenish: 3, burst: 3, period: 60s, unit: Some(Minute), \
             algorithm: TokenBucket, refill: Smooth, initial: None, jitter: None, \
             wait: Some(2s), shadow: false, on_failure: None }"
        );
    }

    #[test]
    fn the_longest_wait_is_a_day_or_what_exact_arithmetic_leaves() {
        let day = Duration::from_secs(86_400);
        assert!(Limit::per_minute(3).burst(300).try_wait(day).is_ok());
        let fine = Limit::try_new(u32::MAX, 1, Unit::Second).unwrap();
        // The attribute says the same: both call ratelimit-vocab's `limits::longest_wait_us`.
        assert!(fine.try_wait(Duration::from_micros(2_619_392)).is_ok());
        assert_eq!(
            fine.try_wait(Duration::from_micros(2_619_393)),
            Err(InvalidLimit::WaitTooLong {
                wait: Duration::from_micros(2_619_393),
                max: Duration::from_micros(2_619_392),
            })
        );
    }

    #[test]
    fn a_holder_rides_in_a_concurrency_limit_and_nowhere_else() {
        let slots = Limit::concurrent(3).wait(Duration::from_secs(1));
        for holder in [1, u64::from(u32::MAX), 1 << 32, u64::MAX] {
            let carried = slots.with_holder(holder);
            assert_eq!(carried.holder(), holder);
            assert_eq!(carried.max_jitter(), None, "half the holder is no jitter");
            assert_eq!(carried.with_holder(0), slots);
        }
        // A rate limit keeps its jitter.
        let rate = Limit::per_second(10)
            .wait(Duration::from_secs(1))
            .jitter(Duration::from_millis(5));
        assert_eq!(rate.with_holder(7), rate);
        assert_eq!(rate.with_holder(7).holder(), 0);
        // Every decision carries a limit: the holder costs it no room.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<Limit>(), 48);
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
        let empty_key = [crate::EmptyKeyPolicy::Deny, crate::EmptyKeyPolicy::Allow];
        same_words::<_, ratelimit_vocab::EmptyKeyPolicy>(&empty_key, |p| match p {
            crate::EmptyKeyPolicy::Deny => "deny",
            crate::EmptyKeyPolicy::Allow => "allow",
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
            "unknown unit `minutes`; expected one of `second`, `minute`, `hour`, `day`"
        );
    }
}
