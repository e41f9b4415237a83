//! The names users write for units, algorithms, refills and policies.
//!
//! Each vocabulary is an enum whose variants are named like the runtime type's (the macros
//! generate `::redis_ratelimit::Unit::Minute` from [`Word::variant`]). The enums are
//! exhaustive on purpose: a word added here must be handled by both the macros and the
//! runtime, or neither compiles.

use core::fmt;
use core::marker::PhantomData;

/// One closed set of words: what users may write for one argument or field.
pub trait Word: Copy + Eq + fmt::Debug + 'static {
    /// What the words name, in messages: `"unit"`, `"failure policy"`.
    const WHAT: &'static str;
    /// Every word, in the order messages list them.
    const ALL: &'static [Self];
    /// Every word's name, in the same order.
    const NAMES: &'static [&'static str];

    /// The name users write: `"minute"`.
    fn name(self) -> &'static str;

    /// The name of the runtime type's variant: `"Minute"`.
    fn variant(self) -> &'static str;

    /// The word written as `written`, exactly (names are lowercase, no spaces).
    ///
    /// # Errors
    /// [`Unknown`], whose message lists the names.
    fn from_name(written: &str) -> Result<Self, Unknown<'_, Self>> {
        Self::ALL
            .iter()
            .copied()
            .find(|w| w.name() == written)
            .ok_or(Unknown {
                written,
                words: PhantomData,
            })
    }
}

/// Defines one vocabulary: the enum, its names, and its [`Word`] impl.
macro_rules! words {
    (
        $(#[$doc:meta])*
        $Word:ident, $what:literal {
            $( $(#[$vdoc:meta])* $Variant:ident = $name:literal, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $Word {
            $( $(#[$vdoc])* $Variant, )+
        }

        impl $Word {
            /// The name users write.
            #[inline]
            pub const fn name(self) -> &'static str {
                match self {
                    $( $Word::$Variant => $name, )+
                }
            }
        }

        impl Word for $Word {
            const WHAT: &'static str = $what;
            const ALL: &'static [Self] = &[$($Word::$Variant),+];
            const NAMES: &'static [&'static str] = &[$($name),+];

            fn name(self) -> &'static str {
                $Word::name(self)
            }

            fn variant(self) -> &'static str {
                match self {
                    $( $Word::$Variant => stringify!($Variant), )+
                }
            }
        }
    };
}

words! {
    /// The period of `replenish`: `unit = "minute"`.
    Unit, "unit" {
        /// One second.
        Second = "second",
        /// Sixty seconds.
        Minute = "minute",
        /// Sixty minutes.
        Hour = "hour",
        /// Twenty-four hours.
        Day = "day",
        /// A calendar week, from Monday 00:00 UTC: a calendar period, whose windows a fixed
        /// window counts (a quota that resets each week).
        Week = "week",
        /// A calendar month, from the 1st at 00:00 UTC: a calendar period, whose windows a
        /// fixed window counts (a quota that resets each month).
        Month = "month",
    }
}

impl Unit {
    /// The unit's length in microseconds; a calendar period's longest (a week, 31 days).
    #[inline]
    pub const fn micros(self) -> u64 {
        match self {
            Unit::Second => 1_000_000,
            Unit::Minute => 60_000_000,
            Unit::Hour => 3_600_000_000,
            Unit::Day => 86_400_000_000,
            Unit::Week => 7 * 86_400_000_000,
            Unit::Month => 31 * 86_400_000_000,
        }
    }

    /// Whether the unit is a calendar period (a week, a month), whose windows start at
    /// calendar instants rather than at multiples of a length: counted by a fixed window
    /// only.
    #[inline]
    pub const fn is_calendar(self) -> bool {
        matches!(self, Unit::Week | Unit::Month)
    }

    /// The unit of a fixed length exactly `micros` long, if there is one (never a calendar
    /// period: a limit of 7 days is a week of any seven days, not a calendar week).
    pub const fn of_micros(micros: u64) -> Option<Unit> {
        match micros {
            1_000_000 => Some(Unit::Second),
            60_000_000 => Some(Unit::Minute),
            3_600_000_000 => Some(Unit::Hour),
            86_400_000_000 => Some(Unit::Day),
            _ => None,
        }
    }
}

words! {
    /// How a limit counts: `algorithm = "sliding_log"`.
    Algorithm, "algorithm" {
        /// GCRA: a bucket of `burst` tokens refilled at the rate.
        TokenBucket = "token_bucket",
        /// A counter per window aligned on the clock.
        FixedWindow = "fixed_window",
        /// Two fixed windows, the previous weighted by its overlap.
        SlidingWindow = "sliding_window",
        /// Every admitted token's time.
        SlidingLog = "sliding_log",
        /// Calls leave at the rate from a queue of `burst`.
        LeakyBucket = "leaky_bucket",
    }
}

impl Algorithm {
    /// Whether the algorithm counts calls per window: it admits `replenish` per period and
    /// has no burst, refill or initial fill of its own.
    #[inline]
    pub const fn is_window(self) -> bool {
        matches!(
            self,
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog
        )
    }

    /// Whether a call can reserve its tokens ahead and wait for them: a window's next tokens
    /// are the next window's.
    #[inline]
    pub const fn can_wait(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::LeakyBucket)
    }
}

words! {
    /// How a token bucket gets its tokens back: `refill = "interval"`.
    Refill, "refill" {
        /// One token at a time.
        Smooth = "smooth",
        /// All `replenish` tokens at once each period.
        Interval = "interval",
    }
}

words! {
    /// What calls get while the store fails: `policy = "deny"`.
    FailurePolicy, "failure policy" {
        /// Enforce the limit in memory.
        Fallback = "fallback",
        /// Admit (fail open).
        Allow = "allow",
        /// Refuse (fail closed).
        Deny = "deny",
    }
}

words! {
    /// What calls with no key get: `empty_key = "allow"`.
    EmptyKeyPolicy, "empty-key policy" {
        /// Refuse.
        Deny = "deny",
        /// Admit without a check.
        Allow = "allow",
    }
}

/// A name that is none of a vocabulary's; its message lists them: ``unknown unit `minutes`;
/// expected one of `second`, `minute`, `hour`, `day`, `week`, `month` ``.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Unknown<'a, W> {
    /// The name as written.
    pub written: &'a str,
    words: PhantomData<W>,
}

impl<'a, W: Word> Unknown<'a, W> {
    /// The error for `written`.
    pub const fn new(written: &'a str) -> Self {
        Unknown {
            written,
            words: PhantomData,
        }
    }
}

impl<W: Word> fmt::Display for Unknown<'_, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}`; expected {}",
            W::WHAT,
            self.written,
            OneOf::<W>::new()
        )
    }
}

impl<W: Word> fmt::Debug for Unknown<'_, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A vocabulary's names for messages: ``one of `smooth`, `interval` ``.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OneOf<W>(PhantomData<W>);

impl<W: Word> OneOf<W> {
    /// The names of `W`.
    pub const fn new() -> Self {
        OneOf(PhantomData)
    }
}

impl<W: Word> fmt::Display for OneOf<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "one of {}", Quoted(W::NAMES))
    }
}

/// Names in backquotes, separated by commas: `` `a`, `b`, `c` ``.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quoted<'a>(pub &'a [&'a str]);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{name}`")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    fn round_trips<W: Word>() {
        for &word in W::ALL {
            assert_eq!(W::from_name(word.name()), Ok(word), "{word:?}");
            assert_eq!(std::format!("{word:?}"), word.variant());
        }
        // Names are exact: no case folding, no plurals, no spaces.
        for &word in W::ALL {
            let upper = word.name().to_ascii_uppercase();
            assert!(W::from_name(&upper).is_err(), "{upper}");
            let padded = std::format!(" {}", word.name());
            assert!(W::from_name(&padded).is_err(), "{padded:?}");
        }
    }

    #[test]
    fn every_name_round_trips() {
        round_trips::<Unit>();
        round_trips::<Algorithm>();
        round_trips::<Refill>();
        round_trips::<FailurePolicy>();
        round_trips::<EmptyKeyPolicy>();
        assert_eq!(
            Unit::NAMES,
            ["second", "minute", "hour", "day", "week", "month"]
        );
        assert_eq!(Unit::of_micros(Unit::Week.micros()), None);
        assert!(Unit::Month.is_calendar() && !Unit::Day.is_calendar());
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = Unit::from_name("minutes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown unit `minutes`; expected one of `second`, `minute`, `hour`, `day`, `week`, `month`"
        );
        assert_eq!(
            FailurePolicy::from_name("fail-open")
                .unwrap_err()
                .to_string(),
            "unknown failure policy `fail-open`; expected one of `fallback`, `allow`, `deny`"
        );
        assert_eq!(
            EmptyKeyPolicy::from_name("skip").unwrap_err().to_string(),
            "unknown empty-key policy `skip`; expected one of `deny`, `allow`"
        );
        assert_eq!(
            OneOf::<Refill>::new().to_string(),
            "one of `smooth`, `interval`"
        );
        assert_eq!(Quoted(&[]).to_string(), "");
    }

    #[test]
    fn units_know_their_periods() {
        for &unit in <Unit as Word>::ALL {
            let fixed = (!unit.is_calendar()).then_some(unit);
            assert_eq!(Unit::of_micros(unit.micros()), fixed);
        }
        assert_eq!(Unit::of_micros(2_000_000), None);
        assert_eq!(Unit::Day.micros(), 24 * Unit::Hour.micros());
    }

    #[test]
    fn windows_cannot_wait() {
        for &a in <Algorithm as Word>::ALL {
            assert_eq!(a.can_wait(), !a.is_window(), "{a:?}");
        }
    }
}
