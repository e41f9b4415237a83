//! Concurrency limits ([`Limit::concurrent`]): at most `max` calls of one key in flight, each
//! holding its slots for a renewable lease; and the id of the call's slots that such a limit
//! carries through the pipeline.

use std::num::NonZeroU32;
use std::time::Duration;

use ratelimit_vocab::limits;
// The shortest lease and the longest (a day) are the vocabulary's, which the attribute and
// the overrides check too.
use ratelimit_vocab::limits::{MAX_LEASE_US, MIN_LEASE_US};

use super::{Algorithm, InvalidLimit, Limit, NO_WAIT, Refill, invalid};

/// The most calls one concurrency limit may hold in flight ([`Limit::concurrent`]): each is
/// a member of a sorted set in Redis, and a call of cost `n` is `n` members.
pub const MAX_CONCURRENT: u32 = limits::MAX_CONCURRENT;

/// How long a concurrency slot is held without renewal ([`Limit::lease`]'s default): the
/// slots of a process that dies come back after it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

impl Limit {
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
            initial: super::Fill::of(None),
            on_failure: None,
            wait_us: NO_WAIT,
            shadow: false,
            jitter_us: 0,
            concurrent: true,
            calendar: None,
            max_debt: super::DEBT_OF_A_BURST,
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

    /// The rules of a concurrency limit, which the vocabulary's rate limits do not know.
    pub(super) const fn check_concurrency(limit: &Limit) -> Result<Limit, InvalidLimit> {
        let max = limit.replenish.get();
        if limit.burst.get() != max
            || !matches!(limit.algorithm, Algorithm::TokenBucket)
            || !matches!(limit.refill, Refill::Smooth)
            || limit.initial.get().is_some()
            || limit.max_debt != super::DEBT_OF_A_BURST
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::limit::Limit;

    #[test]
    fn a_limit_is_what_was_declared_and_no_call_rides_in_it() {
        // A call's slot id is its check's (`Check::holder`), never the limit's: two calls
        // of one concurrency limit carry equal limits.
        let slots = Limit::concurrent(3).wait(Duration::from_secs(1));
        assert_eq!(slots.max_jitter(), None);
        // Every decision carries a limit.
        #[cfg(target_pointer_width = "64")]
        assert!(std::mem::size_of::<Limit>() <= 48);
    }

    #[test]
    fn an_initial_fill_of_u32_max_is_refused_above_a_smaller_burst_and_a_debt_bound_kept() {
        use crate::limit::InvalidLimit;
        assert_eq!(
            Limit::per_second(5).try_initial(Some(u32::MAX)),
            Err(InvalidLimit::InitialAboveBurst {
                initial: u32::MAX,
                burst: 5
            })
        );
        assert_eq!(Limit::per_second(5).initial(0).initial_tokens(), 0);
        let owing = Limit::per_minute(100).max_debt(7);
        assert_eq!((owing.debt_bound(), owing.burst_capacity()), (7, 100));
        assert_eq!(owing.max_debt(0).debt_bound(), 0);
        assert_eq!(
            Limit::concurrent(2).try_max_debt(3),
            Err(InvalidLimit::NotForConcurrency)
        );
    }
}
