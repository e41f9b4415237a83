//! Limits: how many tokens a bucket holds and how fast it refills.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

use crate::FailurePolicy;

/// The period over which [`Limit::replenish`] tokens are added back to a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// Sixty seconds.
    Minute,
    /// Sixty minutes.
    Hour,
    /// Twenty-four hours.
    Day,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 4] = [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day];

    /// The unit's length in microseconds.
    pub const fn as_micros(self) -> u64 {
        match self {
            Unit::Second => 1_000_000,
            Unit::Minute => 60_000_000,
            Unit::Hour => 3_600_000_000,
            Unit::Day => 86_400_000_000,
        }
    }

    /// The unit's length.
    pub const fn as_duration(self) -> Duration {
        Duration::from_micros(self.as_micros())
    }

    /// The lowercase name used by `#[rate_limit(unit = "...")]` and config files.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit name that is none of `second`, `minute`, `hour`, `day`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown unit `{0}`; expected one of `second`, `minute`, `hour`, `day`")]
pub struct UnknownUnit(pub String);

impl FromStr for Unit {
    type Err = UnknownUnit;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str() == s)
            .ok_or_else(|| UnknownUnit(s.to_owned()))
    }
}

/// `"minute"` in a config file, parsed as [`Unit::from_str`] parses it.
impl<'de> serde::Deserialize<'de> for Unit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_named(d, "one of `second`, `minute`, `hour`, `day`")
    }
}

/// Deserializes a value written as its name through its `FromStr`, so that a config file
/// reports a bad name with the same message as every other place that parses it; `expected`
/// lists the names, for a value that is not a string at all.
pub(crate) fn deserialize_named<'de, D, T>(d: D, expected: &'static str) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    struct Named<T>(&'static str, std::marker::PhantomData<T>);

    impl<T> serde::de::Visitor<'_> for Named<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            v.parse().map_err(E::custom)
        }
    }

    d.deserialize_str(Named(expected, std::marker::PhantomData))
}

/// Why a [`Limit`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidLimit {
    /// `replenish` was 0.
    #[error("`replenish` must be at least 1 token per unit")]
    ZeroReplenish,
    /// `burst` was 0.
    #[error("`burst` must be at least 1 token")]
    ZeroBurst,
    /// The bucket would take longer to refill than the exact arithmetic can represent.
    #[error(
        "a limit of {replenish} per {unit} with burst {burst} is too fine-grained to compute \
         exactly (burst x unit / gcd(unit in microseconds, replenish) must stay below 2^51); \
         use a smaller burst or a replenish that divides the unit more evenly"
    )]
    TooFine {
        /// The requested replenish.
        replenish: u32,
        /// The requested burst.
        burst: u32,
        /// The requested unit.
        unit: Unit,
    },
}

impl InvalidLimit {
    /// The limit's fields that cause the error, as `#[rate_limit]` and overrides name them:
    /// a limit too fine-grained is so by its `replenish`, `burst` and `unit` together.
    pub const fn fields(&self) -> &'static [&'static str] {
        match self {
            InvalidLimit::ZeroReplenish => &["replenish"],
            InvalidLimit::ZeroBurst => &["burst"],
            InvalidLimit::TooFine { .. } => &["replenish", "burst", "unit"],
        }
    }
}

/// A token-bucket limit: a bucket of `burst` tokens, refilled with `replenish` tokens per
/// `unit`. A full bucket admits `burst` calls at once; after that, calls are admitted at the
/// replenish rate.
///
/// Invalid limits cannot be built: the `const` constructors reject zero (at compile time when
/// used in a `const`), and [`Limit::try_new`] returns an error for values known only at run
/// time.
///
/// ```
/// use ratelimit_core::{Limit, Unit};
///
/// // 3 calls per minute on average, up to 300 at once.
/// const ORDERS: Limit = Limit::per_minute(3).burst(300);
/// assert_eq!(ORDERS.replenish(), 3);
/// assert_eq!(ORDERS.burst_capacity(), 300);
/// assert_eq!(ORDERS.unit(), Unit::Minute);
///
/// // Without `.burst`, the bucket holds one unit's worth of tokens.
/// assert_eq!(Limit::per_second(10).burst_capacity(), 10);
/// assert!(Limit::try_new(0, 5, Unit::Second).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    replenish: NonZeroU32,
    burst: NonZeroU32,
    unit: Unit,
    on_failure: Option<FailurePolicy>,
}

/// Largest fine-unit quantity the arithmetic may hold; Lua's doubles are exact below 2^53 and
/// the script adds a few such quantities together.
const MAX_FINE: u128 = 1 << 51;

impl Limit {
    /// `replenish` tokens per `unit`, with a burst of `replenish`.
    ///
    /// # Panics
    /// If `replenish` is 0 (a compile error in `const` context). Use [`Limit::try_new`] for
    /// values read at run time.
    pub const fn new(replenish: u32, unit: Unit) -> Limit {
        match Limit::try_new(replenish, replenish, unit) {
            Ok(limit) => limit,
            Err(InvalidLimit::ZeroReplenish) => panic!("`replenish` must be at least 1"),
            Err(_) => panic!("invalid limit: use Limit::try_new to see why"),
        }
    }

    /// `n` tokens per second.
    ///
    /// # Panics
    /// If `n` is 0.
    pub const fn per_second(n: u32) -> Limit {
        Limit::new(n, Unit::Second)
    }

    /// `n` tokens per minute.
    ///
    /// # Panics
    /// If `n` is 0.
    pub const fn per_minute(n: u32) -> Limit {
        Limit::new(n, Unit::Minute)
    }

    /// `n` tokens per hour.
    ///
    /// # Panics
    /// If `n` is 0.
    pub const fn per_hour(n: u32) -> Limit {
        Limit::new(n, Unit::Hour)
    }

    /// `n` tokens per day.
    ///
    /// # Panics
    /// If `n` is 0.
    pub const fn per_day(n: u32) -> Limit {
        Limit::new(n, Unit::Day)
    }

    /// The same limit with a bucket of `burst` tokens.
    ///
    /// # Panics
    /// If `burst` is 0, or the limit is too fine-grained (see [`InvalidLimit::TooFine`]).
    pub const fn burst(self, burst: u32) -> Limit {
        match Limit::try_new(self.replenish.get(), burst, self.unit) {
            Ok(limit) => limit.with_failure_policy(self.on_failure),
            Err(InvalidLimit::ZeroBurst) => panic!("`burst` must be at least 1"),
            Err(_) => panic!("invalid limit: burst x unit is too large; see InvalidLimit::TooFine"),
        }
    }

    /// Builds a limit from values known at run time.
    ///
    /// # Errors
    /// [`InvalidLimit`] when a value is 0 or the limit is too fine-grained.
    pub const fn try_new(replenish: u32, burst: u32, unit: Unit) -> Result<Limit, InvalidLimit> {
        let Some(replenish_nz) = NonZeroU32::new(replenish) else {
            return Err(InvalidLimit::ZeroReplenish);
        };
        let Some(burst_nz) = NonZeroU32::new(burst) else {
            return Err(InvalidLimit::ZeroBurst);
        };
        // The script holds at most about 2 * tau + 1001 * d in one number.
        let period = unit.as_micros();
        let g = gcd(period, replenish as u64);
        let tau = (period / g) as u128 * burst as u128;
        let per_micro = (replenish as u64 / g) as u128;
        if 2 * tau + 2048 * per_micro > MAX_FINE {
            return Err(InvalidLimit::TooFine {
                replenish,
                burst,
                unit,
            });
        }
        Ok(Limit {
            replenish: replenish_nz,
            burst: burst_nz,
            unit,
            on_failure: None,
        })
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

    /// This limit's own failure policy, if it has one; `None` defers to the limiter's.
    pub const fn failure_policy(&self) -> Option<FailurePolicy> {
        self.on_failure
    }

    /// Tokens added per [`unit`](Limit::unit).
    pub const fn replenish(&self) -> u32 {
        self.replenish.get()
    }

    /// The bucket's capacity: the most tokens that can be taken at once.
    pub const fn burst_capacity(&self) -> u32 {
        self.burst.get()
    }

    /// The period of [`replenish`](Limit::replenish).
    pub const fn unit(&self) -> Unit {
        self.unit
    }

    /// How long one token takes to come back (may have a fractional microsecond part,
    /// truncated here).
    pub const fn interval(&self) -> Duration {
        Duration::from_nanos(self.unit.as_micros() * 1000 / self.replenish.get() as u64)
    }

    /// How long an empty bucket takes to fill up again (truncated to whole nanoseconds).
    pub const fn refill_time(&self) -> Duration {
        let nanos = self.unit.as_micros() as u128 * 1000 * self.burst.get() as u128
            / self.replenish.get() as u128;
        // Valid limits refill in under 2^51 fine units, far below u64::MAX nanoseconds.
        #[allow(clippy::cast_possible_truncation)]
        Duration::from_nanos(nanos as u64)
    }

    /// The exact integer parameters of the bucket arithmetic.
    pub(crate) const fn params(&self) -> Params {
        let period = self.unit.as_micros();
        let r = self.replenish.get() as u64;
        let g = gcd(period, r);
        let interval = period / g;
        Params {
            interval,
            per_micro: r / g,
            tau: interval * self.burst.get() as u64,
            absent: 0,
        }
    }

    /// [`params`](Limit::params) for a bucket that starts with `initial` tokens instead of
    /// `burst` when the store does not hold it (Bucket4j's initial tokens; above the burst
    /// reads as the burst). A bucket is forgotten once full, so one idle that long starts with
    /// `initial` again. The windows have no initial fill: their counts start at 0.
    // Used by the tests until the limiter offers `initial` (issue 11).
    #[cfg_attr(not(test), expect(dead_code))]
    pub(crate) const fn params_with_initial(&self, initial: u32) -> Params {
        let mut p = self.params();
        let burst = self.burst.get();
        let initial = if initial < burst { initial } else { burst };
        p.absent = (burst - initial) as u64 * p.interval;
        p
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {} (burst {})",
            self.replenish, self.unit, self.burst
        )?;
        match self.on_failure {
            Some(policy) => write!(f, ", on failure {policy}"),
            None => Ok(()),
        }
    }
}

const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// The bucket arithmetic in "fine units" of `1 / per_micro` microseconds, chosen so that the
/// time one token takes is an exact integer. Shared by the Lua script (as its arguments) and
/// the memory store, so both compute the same decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    /// Fine units one token takes to come back.
    pub(crate) interval: u64,
    /// Fine units per microsecond.
    pub(crate) per_micro: u64,
    /// Fine units an empty bucket takes to fill: `burst * interval`.
    pub(crate) tau: u64,
    /// Fine units an absent bucket is from full: 0 (an absent bucket is full) except for a
    /// fallback share whose capacity exceeds its share of the burst.
    pub(crate) absent: u64,
}

impl Params {
    /// One instance's share when `n` instances split the limit, for calls of `cost` tokens:
    /// the rate divided by `n`, and the burst too, exactly (a share may hold a fraction of a
    /// token: the shares add up to the limit, never more).
    ///
    /// A call that costs more than the share of the burst could never pass it; its bucket may
    /// then save up to `cost` tokens at the share's rate, but an absent bucket holds only the
    /// share of the burst, so no instance admits such a call before it has earned it, and
    /// every refusal's `retry_after` comes true.
    pub(crate) fn shared(self, n: u32, cost: u32) -> Params {
        if n <= 1 {
            return self;
        }
        // At most 10,000 instances, and few enough that `cost * interval * n` stays in range
        // (the memory store's arithmetic falls back to u128 beyond, never wraps).
        let fit = (1u64 << 62) / self.tau.max(1);
        let n = u64::from(n).min(10_000).min(fit).max(1);
        let interval = self.interval * n;
        let tau = self.tau.max(u64::from(cost) * interval);
        Params {
            interval,
            per_micro: self.per_micro,
            tau,
            absent: tau - self.tau,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_rate_and_burst() {
        let p = Limit::per_second(10).burst(9).params();
        let s = p.shared(3, 1);
        assert_eq!(s.interval, 3 * p.interval);
        assert_eq!(s.tau / s.interval, 3);
        assert_eq!(s.absent, 0, "an absent bucket holds the whole share");
        assert_eq!(p.shared(1, 9), p);
        // 100 instances share a burst of 9: 0.09 tokens each, no token from nothing.
        let s = p.shared(100, 1);
        assert_eq!(s.tau, s.interval, "room for one call");
        assert_eq!(
            s.tau - s.absent,
            p.tau,
            "but an absent bucket holds 9/100 of a token"
        );
    }

    #[test]
    fn an_initial_fill_starts_an_absent_bucket_below_full() {
        let limit = Limit::per_second(2).burst(10);
        let p = limit.params_with_initial(3);
        assert_eq!(p.absent, 7 * p.interval);
        assert_eq!(limit.params_with_initial(10), limit.params());
        assert_eq!(limit.params_with_initial(99), limit.params());
        // Three calls pass at once, the fourth waits for a token (0.5 s); an empty start waits
        // for the first.
        let mut state = None;
        for remaining in [2, 1, 0] {
            let o = crate::bucket::decide(0, state, p, 1);
            assert_eq!((o.allowed, o.remaining), (true, remaining));
            state = o.new_state;
        }
        let refused = crate::bucket::decide(0, state, p, 1);
        assert_eq!((refused.allowed, refused.retry_after_us), (false, 500_000));
        let empty = crate::bucket::decide(0, None, limit.params_with_initial(0), 1);
        assert_eq!((empty.allowed, empty.retry_after_us), (false, 500_000));
        assert!(
            empty.new_state.is_some(),
            "stored, so that waiting 0.5 s is admitted"
        );
    }

    #[test]
    fn params_are_exact_integers() {
        let p = Limit::per_second(3).params();
        assert_eq!((p.interval, p.per_micro, p.tau), (1_000_000, 3, 3_000_000));
        let p = Limit::per_minute(3).burst(300).params();
        assert_eq!((p.interval, p.per_micro), (20_000_000, 1));
        assert_eq!(p.tau, 300 * 20_000_000);
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
