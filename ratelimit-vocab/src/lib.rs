//! The vocabulary that redis-ratelimit's compile-time checks and its runtime share.
//!
//! `#[rate_limit(..)]` and `enable_redis_rate_limit!(..)` check what users write when the
//! code compiles; `ratelimit-core` checks the same values at run time, from its builders and
//! from config overrides. Both read the words and the rules from here, so each has one
//! definition and the two sides cannot drift apart (they used to: the macro's wait parser took
//! `u64` and capped at a day while the overrides' took `u32` and accepted `"none"`):
//!
//! - the names users write, and the variant of the runtime's type each one stands for:
//!   [`Unit`] (with its period), [`Algorithm`], [`Refill`], [`FailurePolicy`],
//!   [`EmptyKeyPolicy`], all behind the [`Word`] trait, with the message for an unknown name
//!   ([`Unknown`]);
//! - the wait syntax, `"2s"`, `"500ms"`, `"1m"` or `"none"`: [`parse_wait`];
//! - what a limit may be named: [`check_name`];
//! - the exact arithmetic that says which limits exist ([`limits`]): what Redis's Lua doubles
//!   and the memory store can compute exactly, the longest wait, and [`limits::check`], the one
//!   function that accepts or refuses a limit's parts;
//! - which tier names exist, the names clients read in a header and metrics carry as a label
//!   ([`check_tier_name`]);
//! - the names of the Redis module and its commands, versioned ([`native`]).
//!
//! It is an implementation detail of `redis-ratelimit`, with no dependencies so that the
//! proc-macro crate can use it at compile time: users write `redis_ratelimit::Unit` and the
//! macros, never this crate.
//!
//! ```
//! use ratelimit_vocab::{Algorithm, Unit, Word, limits, parse_wait};
//!
//! assert_eq!(Unit::from_name("minute"), Ok(Unit::Minute));
//! assert_eq!(Unit::Minute.micros(), 60_000_000);
//! assert_eq!(
//!     Algorithm::from_name("sliding").unwrap_err().to_string(),
//!     "unknown algorithm `sliding`; expected one of `token_bucket`, `fixed_window`, \
//!      `sliding_window`, `sliding_log`, `leaky_bucket`"
//! );
//! assert_eq!(parse_wait("500ms"), Ok(Some(500_000)));
//! assert_eq!(parse_wait("none"), Ok(None));
//! // u32::MAX per second with a burst of 1 leaves room for a wait of 2.6 s only.
//! assert_eq!(limits::longest_wait_us(u32::MAX, 1, Unit::Second.micros()), 2_619_392);
//! ```
#![no_std]

extern crate alloc;

#[cfg(test)]
extern crate std;

pub mod limits;
mod names;
pub mod native;
mod wait;
mod words;

pub use names::{
    MAX_TIER_NAME, NameError, NameProblem, TIER_NAME_SYNTAX, check_name, check_tier_name,
    is_tier_name_byte,
};
pub use wait::{
    LEASE_SYNTAX, PERIOD_SYNTAX, WAIT_SYNTAX, WaitError, parse_lease, parse_period, parse_wait,
};
pub use words::{
    Algorithm, EmptyKeyPolicy, FailurePolicy, OneOf, Quoted, Refill, Unit, Unknown, Word,
};
