//! The words of a limit: units, algorithms and refills, with their names from `ratelimit-vocab`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ratelimit_vocab::{OneOf, Unknown, Word};

/// The period over which [`Limit::replenish`](crate::Limit::replenish) tokens are added back to a bucket.
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
    /// A calendar week, from Monday 00:00 UTC: a quota's period, counted by a fixed window
    /// whose windows are the weeks ([`Limit::per_week`](crate::Limit::per_week)).
    Week,
    /// A calendar month, from the 1st at 00:00 UTC: a quota's period, counted by a fixed
    /// window whose windows are the months ([`Limit::per_month`](crate::Limit::per_month)).
    Month,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 6] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
    ];

    /// The unit's length in microseconds; a calendar period's longest (a week, 31 days).
    pub const fn as_micros(self) -> u64 {
        self.word().micros()
    }

    /// Whether the unit is a calendar period (a week, a month), whose windows start at
    /// calendar instants: counted by a fixed window only.
    pub const fn is_calendar(self) -> bool {
        self.word().is_calendar()
    }

    /// The unit's length.
    pub const fn as_duration(self) -> Duration {
        Duration::from_micros(self.as_micros())
    }

    /// The lowercase name used by `#[rate_limit(unit = "...")]` and config files.
    pub const fn as_str(self) -> &'static str {
        self.word().name()
    }

    /// The word of the vocabulary the macros share, which owns the name and the period.
    pub(crate) const fn word(self) -> ratelimit_vocab::Unit {
        match self {
            Unit::Second => ratelimit_vocab::Unit::Second,
            Unit::Minute => ratelimit_vocab::Unit::Minute,
            Unit::Hour => ratelimit_vocab::Unit::Hour,
            Unit::Day => ratelimit_vocab::Unit::Day,
            Unit::Week => ratelimit_vocab::Unit::Week,
            Unit::Month => ratelimit_vocab::Unit::Month,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit name that is none of `second`, `minute`, `hour`, `day`, `week`, `month`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Unknown::<ratelimit_vocab::Unit>::new(.0))]
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
        deserialize_named::<_, _, ratelimit_vocab::Unit>(d)
    }
}

/// Deserializes a value written as its name through its `FromStr`, so that a config file
/// reports a bad name with the same message as every other place that parses it; `W`'s names
/// are listed for a value that is not a string at all.
pub(crate) fn deserialize_named<'de, D, T, W>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
    W: Word,
{
    struct Named<T, W>(std::marker::PhantomData<(T, W)>);

    impl<T, W> serde::de::Visitor<'_> for Named<T, W>
    where
        T: FromStr,
        T::Err: fmt::Display,
        W: Word,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Display::fmt(&OneOf::<W>::new(), f)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            v.parse().map_err(E::custom)
        }
    }

    d.deserialize_str(Named::<T, W>(std::marker::PhantomData))
}

/// How a limit counts the calls it admits. Every algorithm runs on Redis as one atomic script
/// on the server's clock and in `MemoryStore` with the same arithmetic;
/// `docs/algorithms.md` compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// A bucket of `burst` tokens refilled at `replenish` per period (GCRA): bursts up to
    /// `burst`, then the rate. The default.
    #[default]
    TokenBucket,
    /// A counter per window aligned on the server clock: `replenish` per window, the cheapest,
    /// but up to twice that across a window boundary.
    FixedWindow,
    /// Two fixed-window counters, the previous one weighted by how much of it still overlaps
    /// the sliding period: O(1) memory, an estimate between the fixed window and the log.
    SlidingWindow,
    /// Every admitted token's time in a sorted set: never more than `replenish` in any sliding
    /// period, exactly, at a memory cost of up to `replenish` entries per key.
    SlidingLog,
    /// Calls leave at exactly the rate, one each `period / replenish`, and wait for their slot
    /// in a queue of `burst` calls; a call that finds the queue full is refused at once. The
    /// token bucket's reservation with no burst of its own: the same state in Redis.
    LeakyBucket,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::LeakyBucket,
    ];

    /// The name used by `#[rate_limit(algorithm = "...")]` and config files.
    pub const fn as_str(self) -> &'static str {
        self.word().name()
    }

    /// Whether the algorithm counts calls per window (the fixed and sliding windows and the
    /// sliding log): such a limit admits `replenish` tokens per period and has no burst, refill
    /// or initial fill of its own.
    pub const fn is_window(self) -> bool {
        self.word().is_window()
    }

    /// Whether a call under this algorithm can reserve its tokens ahead and wait for them
    /// ([`Limit::wait`](crate::Limit::wait)): the token bucket and the leaky bucket. A window's tokens are the
    /// next window's; reserving them would need a count per future window.
    pub const fn can_wait(self) -> bool {
        self.word().can_wait()
    }

    /// The word of the vocabulary the macros share, which owns the name.
    pub(crate) const fn word(self) -> ratelimit_vocab::Algorithm {
        match self {
            Algorithm::TokenBucket => ratelimit_vocab::Algorithm::TokenBucket,
            Algorithm::FixedWindow => ratelimit_vocab::Algorithm::FixedWindow,
            Algorithm::SlidingWindow => ratelimit_vocab::Algorithm::SlidingWindow,
            Algorithm::SlidingLog => ratelimit_vocab::Algorithm::SlidingLog,
            Algorithm::LeakyBucket => ratelimit_vocab::Algorithm::LeakyBucket,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An algorithm name that is none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Unknown::<ratelimit_vocab::Algorithm>::new(.0))]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

/// `"sliding_log"` in a config file, parsed as [`Algorithm::from_str`] parses it.
impl<'de> serde::Deserialize<'de> for Algorithm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_named::<_, _, ratelimit_vocab::Algorithm>(d)
    }
}

/// How a token bucket gets its tokens back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Refill {
    /// One token at a time, each `period / replenish` after the last: the default.
    #[default]
    Smooth,
    /// All `replenish` tokens at once, every period (Bucket4j's "intervally" refill).
    Interval,
}

impl Refill {
    /// Both refills.
    pub const ALL: [Refill; 2] = [Refill::Smooth, Refill::Interval];

    /// The name used by `#[rate_limit(refill = "...")]` and config files.
    pub const fn as_str(self) -> &'static str {
        self.word().name()
    }

    /// The word of the vocabulary the macros share, which owns the name.
    pub(crate) const fn word(self) -> ratelimit_vocab::Refill {
        match self {
            Refill::Smooth => ratelimit_vocab::Refill::Smooth,
            Refill::Interval => ratelimit_vocab::Refill::Interval,
        }
    }
}

impl fmt::Display for Refill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refill name that is neither `smooth` nor `interval`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Unknown::<ratelimit_vocab::Refill>::new(.0))]
pub struct UnknownRefill(pub String);

impl FromStr for Refill {
    type Err = UnknownRefill;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Refill::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRefill(s.to_owned()))
    }
}

/// `"interval"` in a config file, parsed as [`Refill::from_str`] parses it.
impl<'de> serde::Deserialize<'de> for Refill {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_named::<_, _, ratelimit_vocab::Refill>(d)
    }
}
