//! What a [`Limit`] says: its getters, and how it reads.

use std::fmt;
use std::time::Duration;

use super::{Algorithm, Limit, NO_WAIT, Refill, Unit};
use crate::limit::FailurePolicy;

impl Limit {
    /// Whether a call under this limit may reserve its tokens and wait for them: a wait was
    /// set, or it is a leaky bucket.
    pub(crate) const fn reserves(&self) -> bool {
        // A concurrency limit's wait is a queue for a slot, asked again until served, not
        // tokens reserved ahead.
        !self.concurrent
            && (self.wait_us != NO_WAIT || matches!(self.algorithm, Algorithm::LeakyBucket))
    }

    /// Whether this is a concurrency limit ([`Limit::concurrent`]).
    pub const fn is_concurrent(&self) -> bool {
        self.concurrent
    }

    /// A concurrency limit's most calls in flight; `None` for a rate limit.
    pub const fn max_in_flight(&self) -> Option<u32> {
        if self.concurrent {
            Some(self.replenish.get())
        } else {
            None
        }
    }

    /// A concurrency limit's lease ([`Limit::lease`]); `None` for a rate limit.
    pub const fn lease_time(&self) -> Option<Duration> {
        if self.concurrent {
            Some(Duration::from_micros(self.period_us))
        } else {
            None
        }
    }

    /// Whether the limit is in shadow mode ([`shadow`](Limit::shadow)).
    pub const fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// This limit's own failure policy, if it has one; `None` defers to the limiter's.
    pub const fn failure_policy(&self) -> Option<FailurePolicy> {
        self.on_failure
    }

    /// Tokens added per period (for a window algorithm: admitted per window).
    pub const fn replenish(&self) -> u32 {
        self.replenish.get()
    }

    /// The bucket's capacity: the most tokens that can be taken at once (for a window
    /// algorithm, `replenish`).
    pub const fn burst_capacity(&self) -> u32 {
        self.burst.get()
    }

    /// The period of [`replenish`](Limit::replenish) when it is one of the four units; `None`
    /// for another period ([`Limit::per`]).
    pub const fn unit(&self) -> Option<Unit> {
        self.unit
    }

    /// The period of [`replenish`](Limit::replenish).
    pub const fn period(&self) -> Duration {
        Duration::from_micros(self.period_us)
    }

    /// The period in microseconds.
    pub(crate) const fn period_micros(&self) -> u64 {
        self.period_us
    }

    /// How the limit counts.
    pub const fn algorithm_kind(&self) -> Algorithm {
        self.algorithm
    }

    /// How a token bucket gets its tokens back.
    pub const fn refill_kind(&self) -> Refill {
        self.refill
    }

    /// Tokens in a bucket the store does not hold: the burst unless
    /// [`initial`](Limit::initial) set fewer.
    pub const fn initial_tokens(&self) -> u32 {
        match self.initial.get() {
            Some(n) => n,
            None => self.burst.get(),
        }
    }

    /// The initial fill as set, `None` for a full bucket.
    pub(crate) const fn initial_tokens_set(&self) -> Option<u32> {
        self.initial.get()
    }

    /// How long one token takes to come back (may have a fractional microsecond part,
    /// truncated here).
    pub const fn interval(&self) -> Duration {
        Duration::from_nanos(self.period_us * 1000 / self.replenish.get() as u64)
    }

    /// How long an empty bucket takes to fill up again (truncated to whole nanoseconds); for
    /// a window algorithm, the period.
    pub const fn refill_time(&self) -> Duration {
        if self.algorithm.is_window() {
            return self.period();
        }
        let nanos =
            self.period_us as u128 * 1000 * self.burst.get() as u128 / self.replenish.get() as u128;
        // Valid limits refill in under 2^51 fine units, far below u64::MAX nanoseconds.
        #[allow(clippy::cast_possible_truncation)]
        Duration::from_nanos(nanos as u64)
    }

    /// The most a wait under this limit is lengthened by ([`jitter`](Limit::jitter)), if set.
    pub const fn max_jitter(&self) -> Option<Duration> {
        // A concurrency limit has no jitter.
        if self.jitter_us == 0 || self.concurrent {
            None
        } else {
            Some(Duration::from_micros(self.jitter_us as u64))
        }
    }

    /// The longest a call may wait, in microseconds; `None` when not set (what
    /// [`max_wait`](Limit::max_wait) says, without a `Duration` between: the kernel's hot
    /// path reads it on every call).
    pub(crate) const fn max_wait_micros(&self) -> Option<u64> {
        if self.wait_us == NO_WAIT {
            None
        } else {
            Some(self.wait_us)
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
}

/// What the limit means, by its public names: a concurrency limit's max and lease (not the
/// fields they are stored in), a wait and a jitter as durations, and nothing of the call a
/// limit may carry through the pipeline.
impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Limit");
        if self.concurrent {
            d.field("concurrent", &self.replenish)
                .field("lease", &self.period());
        } else {
            d.field("replenish", &self.replenish)
                .field("burst", &self.burst)
                .field("period", &self.period())
                .field("unit", &self.unit)
                .field("algorithm", &self.algorithm)
                .field("calendar", &self.calendar)
                .field("refill", &self.refill)
                .field("initial", &self.initial.get())
                .field("jitter", &self.max_jitter())
                .field("max_debt", &self.max_debt_set());
        }
        d.field("wait", &self.max_wait())
            .field("shadow", &self.shadow)
            .field("on_failure", &self.on_failure)
            .finish()
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.concurrent {
            write!(
                f,
                "{} in flight (lease {:?})",
                self.replenish,
                self.period()
            )?;
            if let Some(wait) = self.max_wait() {
                write!(f, ", waiting up to {wait:?}")?;
            }
            if self.shadow {
                f.write_str(", shadow")?;
            }
            return match self.on_failure {
                Some(policy) => write!(f, ", on failure {policy}"),
                None => Ok(()),
            };
        }
        write!(f, "{} per ", self.replenish)?;
        match self.unit {
            Some(unit) => write!(f, "{unit}")?,
            None => write!(f, "{:?}", self.period())?,
        }
        if let Some(calendar) = self.calendar {
            use ratelimit_algorithms::calendar::Period;
            match calendar.period() {
                Period::Month { anchor_day: 1 } | Period::Week { first_weekday: 1 } => {}
                Period::Month { anchor_day } => write!(f, " from day {anchor_day}")?,
                Period::Week { first_weekday } => write!(f, " from weekday {first_weekday}")?,
            }
            let offset = calendar.offset_minutes();
            if offset != 0 {
                let sign = if offset < 0 { '-' } else { '+' };
                let minutes = offset.unsigned_abs();
                write!(f, " at UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)?;
            }
        }
        match self.algorithm {
            Algorithm::TokenBucket => write!(f, " (burst {})", self.burst)?,
            Algorithm::LeakyBucket => write!(f, " (leaky bucket, queue of {})", self.burst)?,
            other => write!(f, " ({})", other.as_str().replace('_', " "))?,
        }
        if self.refill == Refill::Interval {
            f.write_str(", refilled at once each period")?;
        }
        if let Some(initial) = self.initial.get() {
            write!(f, ", starting with {initial}")?;
        }
        if let Some(wait) = self.max_wait() {
            write!(f, ", waiting up to {wait:?}")?;
        }
        if let Some(jitter) = self.max_jitter() {
            write!(f, " (plus up to {jitter:?} of jitter)")?;
        }
        if self.shadow {
            f.write_str(", shadow")?;
        }
        match self.on_failure {
            Some(policy) => write!(f, ", on failure {policy}"),
            None => Ok(()),
        }
    }
}
