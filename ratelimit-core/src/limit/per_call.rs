//! What a limit does with its calls beyond counting them: calls that wait for their tokens
//! (spread by a jitter), shadow mode, and the limit's own failure policy.

use std::time::Duration;

use ratelimit_vocab::limits;

use super::{InvalidLimit, Limit, MAX_WAIT_US, NO_WAIT, invalid};
use crate::limit::FailurePolicy;

/// The longest jitter a wait may be spread by: an hour (the vocabulary's, which the attribute
/// checks too).
const MAX_JITTER: Duration = Duration::from_micros(limits::MAX_JITTER_US);

impl Limit {
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
    /// For a [leaky bucket](crate::Algorithm::LeakyBucket), which always waits for its slot, this
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

    /// The same limit with no wait (an override's `wait = "none"`).
    pub(crate) const fn without_wait(mut self) -> Limit {
        self.wait_us = NO_WAIT;
        self
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

impl Limit {
    /// The same limit with a bound on the debt a [settlement](crate::Usage::settle) may leave:
    /// a call that took an estimate and settles a larger actual cost takes the difference at
    /// once, below empty if need be, but never more than `tokens` below it. The calls after
    /// it wait for the debt to refill (their `retry_after` says how long). Without it, the
    /// bound is one burst; `0` never goes below empty (the overdraft beyond what the bucket
    /// holds is not taken). Only what settles has a debt: the token bucket (smooth refill),
    /// the leaky bucket, the fixed window (a window's debt ends with the window) and the
    /// sliding log (its entries leave one period after they were added).
    ///
    /// ```
    /// use ratelimit_core::Limit;
    ///
    /// const TOKENS: Limit = Limit::per_minute(10_000).max_debt(2_000);
    /// assert_eq!(TOKENS.debt_bound(), 2_000);
    /// assert_eq!(Limit::per_minute(10_000).debt_bound(), 10_000);
    /// ```
    ///
    /// # Panics
    /// On a concurrency limit, which has no tokens to owe (a compile error in `const`).
    #[must_use]
    pub const fn max_debt(self, tokens: u32) -> Limit {
        match self.try_max_debt(tokens) {
            Ok(limit) => limit,
            Err(e) => invalid(&e),
        }
    }

    /// [`max_debt`](Limit::max_debt) for values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit::NotForConcurrency`] on a concurrency limit.
    pub const fn try_max_debt(mut self, tokens: u32) -> Result<Limit, InvalidLimit> {
        self.max_debt = tokens;
        Limit::assemble(self)
    }

    /// The most tokens a settlement may leave this limit's bucket owing: the
    /// [`max_debt`](Limit::max_debt) set, else one burst.
    pub const fn debt_bound(&self) -> u32 {
        if self.max_debt == super::DEBT_OF_A_BURST {
            self.burst.get()
        } else {
            self.max_debt
        }
    }

    /// Whether a call under this limit can settle its cost afterwards: a limit whose state
    /// can owe tokens (the token bucket refilled smoothly, the leaky bucket, the fixed
    /// window, the sliding log), not a concurrency limit.
    pub(crate) const fn settles(&self) -> bool {
        !self.concurrent
            && match self.algorithm {
                super::Algorithm::TokenBucket => matches!(self.refill, super::Refill::Smooth),
                super::Algorithm::LeakyBucket
                | super::Algorithm::FixedWindow
                | super::Algorithm::SlidingLog => true,
                super::Algorithm::SlidingWindow => false,
            }
    }

    /// The debt bound set, if one was (kept by overrides).
    pub(crate) const fn max_debt_set(&self) -> Option<u32> {
        if self.max_debt == super::DEBT_OF_A_BURST {
            None
        } else {
            Some(self.max_debt)
        }
    }

    /// The same limit with `bound` as its debt bound when one is given.
    pub(crate) const fn with_max_debt(mut self, bound: Option<u32>) -> Limit {
        if let Some(tokens) = bound {
            self.max_debt = tokens;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::limit::{InvalidLimit, Limit, Unit};

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
}
