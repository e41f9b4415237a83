//! Why a limit cannot be built.

use std::time::Duration;

use super::*;

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
    /// The period is not a whole number of microseconds from 1 µs to about 71 years.
    #[error(
        "a period of {period:?} is not a whole number of microseconds from 1 microsecond to \
         2^51 microseconds"
    )]
    BadPeriod {
        /// The requested period.
        period: Duration,
    },
    /// The limit would take more than the exact arithmetic can represent.
    #[error(
        "a limit of {replenish} per {period:?} with burst {burst} is too fine-grained to \
         compute exactly with the {algorithm} algorithm (a token bucket needs burst x period / \
         gcd(period in microseconds, replenish) below 2^51; a window needs a period of at \
         least 1 ms); use a smaller burst or a replenish that divides the period more evenly"
    )]
    TooFine {
        /// The requested replenish.
        replenish: u32,
        /// The requested burst.
        burst: u32,
        /// The requested period.
        period: Duration,
        /// The requested algorithm.
        algorithm: Algorithm,
    },
    /// A quota by calendar period (a week, a month) with an algorithm other than the fixed
    /// window: its windows are the calendar's.
    #[error(
        "a week or a month is a calendar period, counted by a fixed window whose windows are \
         its periods; a {algorithm} cannot count it (use `algorithm = \"fixed_window\"`, or a \
         unit of a fixed length: `day`, or a `Duration`)"
    )]
    CalendarWindowOnly {
        /// The requested algorithm.
        algorithm: Algorithm,
    },
    /// A calendar setting (`utc_offset`, `anchor`) on a limit whose unit is no calendar
    /// period.
    #[error(
        "`utc_offset` and `anchor` place a calendar period's windows: the limit's unit must \
         be a week or a month (`Limit::per_week`, `Limit::per_month`)"
    )]
    NotCalendar,
    /// A calendar's anchor or offset out of range.
    #[error(
        "a calendar period starts on a day of the month from 1 to 31, or a weekday from 1 \
         (Monday) to 7 (Sunday), on a clock at most 14 hours from UTC (-840 to 840 minutes); \
         got {}an offset of {offset_minutes} minutes",
        match anchor { Some(a) => format!("an anchor of {a} and "), None => String::new() }
    )]
    BadCalendar {
        /// The anchor asked for, where one was.
        anchor: Option<u8>,
        /// The offset from UTC, in minutes.
        offset_minutes: i32,
    },
    /// A window algorithm was given a burst other than its `replenish`.
    #[error(
        "a {algorithm} admits `replenish` ({replenish}) tokens per window and has no burst of \
         its own; leave `burst` unset (it is {burst})"
    )]
    BurstOfWindow {
        /// The requested algorithm.
        algorithm: Algorithm,
        /// The requested replenish.
        replenish: u32,
        /// The requested burst.
        burst: u32,
    },
    /// A window algorithm or the leaky bucket was given `refill = interval` or an initial
    /// fill: both are a token bucket's.
    #[error(
        "`refill` and `initial` are a token bucket's; a {algorithm} has neither (a window \
         starts every window at 0, a leaky bucket's queue starts empty)"
    )]
    TokenBucketOnly {
        /// The requested algorithm.
        algorithm: Algorithm,
    },
    /// The initial fill exceeds the burst.
    #[error("`initial` ({initial}) exceeds the burst ({burst}); a bucket holds at most its burst")]
    InitialAboveBurst {
        /// The requested initial fill.
        initial: u32,
        /// The requested burst.
        burst: u32,
    },
    /// A wait was asked of a limit whose calls cannot reserve ahead: a window algorithm, or a
    /// token bucket refilled at once each period.
    #[error(
        "a {algorithm} limit{interval} cannot wait: only a token bucket refilled smoothly and \
         the leaky bucket reserve tokens ahead (a window's next tokens are the next window's); \
         refuse and retry after `retry_after` instead",
        interval = if *interval { " refilled at once each period" } else { "" }
    )]
    CannotWait {
        /// The limit's algorithm.
        algorithm: Algorithm,
        /// Whether it is a token bucket refilled at once each period.
        interval: bool,
    },
    /// The wait asked for is longer than a reservation may reach.
    #[error("a wait of {wait:?} is longer than this limit allows ({max:?})")]
    WaitTooLong {
        /// The requested wait.
        wait: Duration,
        /// The longest this limit can wait: a day, or less for a limit whose exact arithmetic
        /// has less room.
        max: Duration,
    },
    /// The jitter asked for is longer than a wait may be spread by.
    #[error("a jitter of {jitter:?} is longer than a wait may be spread by ({max:?})")]
    JitterTooLong {
        /// The requested jitter.
        jitter: Duration,
        /// The longest jitter: an hour.
        max: Duration,
    },
    /// A concurrency limit's bounds: at most [`MAX_CONCURRENT`](crate::defaults::MAX_CONCURRENT)
    /// calls, and a lease from a millisecond to a day.
    #[error(
        "a concurrency limit of {max} with a lease of {lease:?} is out of bounds: it needs \
         1 to 1000000 calls in flight and a lease from 1 ms to a day"
    )]
    BadConcurrency {
        /// The requested number of calls in flight.
        max: u32,
        /// The requested lease.
        lease: Duration,
    },
    /// A rate limit's setting (`burst`, `algorithm`, `refill`, `initial`, `jitter`) was asked
    /// of a concurrency limit, which takes only `max`, `lease` and `wait`.
    #[error(
        "`burst`, `algorithm`, `refill`, `initial` and `jitter` are a rate limit's; a \
         concurrency limit takes only its max, `lease` and `wait` (and `lease` is a \
         concurrency limit's alone)"
    )]
    NotForConcurrency,
    /// A concurrency limit was given to a method that takes no slot (`check`, `check_n`,
    /// `check_all`, `acquire`, `peek` is fine): the slot would never be given back. Use
    /// [`RateLimiter::enter`](crate::RateLimiter::enter).
    #[error(
        "a concurrency limit needs a slot that is given back when the call ends: use \
         RateLimiter::enter (or enter_all) instead of check, check_n, check_all or acquire"
    )]
    NeedsSlot,
    /// A [tier](crate::Tier)'s name that a response header or a metrics label could not carry
    /// as it is: empty, longer than 64 bytes, or with a character other than an ASCII letter,
    /// a digit, `-`, `_` or `.` (see [`Tier::try_new`](crate::Tier::try_new)).
    #[error("{}", tier_name_problem(*len, *forbidden))]
    BadTierName {
        /// The name's length, in bytes.
        len: usize,
        /// Its first forbidden character, after the byte offset it is at, if it has one.
        forbidden: Option<(usize, char)>,
    },
    /// More distinct tier names were built at run time than a program may keep
    /// ([`MAX_RUN_TIME_TIER_NAMES`](crate::defaults::MAX_RUN_TIME_TIER_NAMES)): each is kept
    /// for the program's life, so that a tier costs its calls nothing.
    #[error(
        "more than {max} distinct tier names built at run time: each is kept for the program's \
         life; build tiers from a bounded set of names (plans, contracts), not per request"
    )]
    TooManyTierNames {
        /// The most a program may build.
        max: usize,
    },
}

/// The message of [`InvalidLimit::BadTierName`]; the name itself is not repeated, as it may
/// be long or hostile.
fn tier_name_problem(len: usize, forbidden: Option<(usize, char)>) -> String {
    let syntax = ratelimit_vocab::TIER_NAME_SYNTAX;
    match forbidden {
        _ if len == 0 => format!("a tier name must not be empty; {syntax}"),
        Some((at, c)) => format!("a tier name must not contain {c:?} (at byte {at}); {syntax}"),
        None => format!("a tier name of {len} bytes is too long; {syntax}"),
    }
}

impl InvalidLimit {
    /// The limit's fields that cause the error, as `#[rate_limit]` and overrides name them:
    /// a limit too fine-grained is so by its `replenish`, `burst` and `unit` together.
    pub const fn fields(&self) -> &'static [&'static str] {
        match self {
            InvalidLimit::ZeroReplenish => &["replenish"],
            InvalidLimit::ZeroBurst => &["burst"],
            InvalidLimit::BadPeriod { .. } => &["unit"],
            InvalidLimit::TooFine { .. } => &["replenish", "burst", "unit"],
            InvalidLimit::BurstOfWindow { .. } => &["burst", "algorithm"],
            InvalidLimit::TokenBucketOnly { .. } => &["refill", "initial", "algorithm"],
            InvalidLimit::InitialAboveBurst { .. } => &["initial", "burst"],
            InvalidLimit::CannotWait { .. } => &["wait", "algorithm", "refill"],
            InvalidLimit::WaitTooLong { .. } => &["wait"],
            InvalidLimit::JitterTooLong { .. } => &["jitter"],
            InvalidLimit::BadConcurrency { .. } => &["concurrent", "lease"],
            InvalidLimit::NotForConcurrency => &["concurrent"],
            InvalidLimit::NeedsSlot => &["concurrent"],
            InvalidLimit::BadTierName { .. } | InvalidLimit::TooManyTierNames { .. } => &["tier"],
            InvalidLimit::CalendarWindowOnly { .. } => &["unit", "algorithm"],
            InvalidLimit::NotCalendar | InvalidLimit::BadCalendar { .. } => &["unit"],
        }
    }
}

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
        InvalidLimit::BadTierName { .. } => {
            panic!("a tier name is 1 to 64 ASCII letters, digits, `-`, `_` or `.`")
        }
        InvalidLimit::TooManyTierNames { .. } => panic!("too many tier names"),
        InvalidLimit::CalendarWindowOnly { .. } => {
            panic!("a week or a month is a calendar period, counted by a fixed window only")
        }
        InvalidLimit::NotCalendar => {
            panic!("`utc_offset` and `anchor` are a calendar period's (a week, a month)")
        }
        InvalidLimit::BadCalendar { .. } => panic!(
            "a calendar period starts on a day 1 to 31 (a month) or a weekday 1 to 7 (a week), \
             at most 840 minutes from UTC"
        ),
    }
}
