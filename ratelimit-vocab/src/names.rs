//! Names: which names of limits and of tiers exist.
//!
//! A limit's name (`name = ".."` in `#[rate_limit]` and `layer_limit!`, and a layer's limit
//! built at run time) is checked by [`check_name`]: the macro when the code compiles, the
//! runtime when the limit is built, so that a name one takes, the other takes too.
//!
//! A tier's name leaves the process twice: inside a structured-field string of the
//! `RateLimit-Policy` response header (`"search[pro]";q=10000;w=3600`), which clients parse,
//! and as the value of the `tier` label of the metrics, which dashboards group by. Both must
//! carry it as it is written, whatever the client, the exporter or the header parser, and the
//! number of metric series must stay bounded: a tier name is short and plain
//! ([`TIER_NAME_SYNTAX`]). No quote, backslash, `;`, `,`, `=`, bracket, space or control
//! character can end the string, the item or the label early, or make `name[tier]` read as
//! another name. `Tier::new` checks a literal in `const` (an invalid one is a compile error),
//! `Tier::try_new` a name read at run time (an error); both ask [`check_tier_name`].

use core::fmt;

/// The longest tier name, in bytes.
pub const MAX_TIER_NAME: usize = 64;

/// What a tier name may be, for messages.
pub const TIER_NAME_SYNTAX: &str =
    "a tier name is 1 to 64 ASCII letters, digits, `-`, `_` or `.` (`pro`, `acme-2025.gold`)";

/// Why a tier name is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_TIER_NAME`] bytes.
    TooLong {
        /// Its length, in bytes.
        len: usize,
    },
    /// The name has a character other than an ASCII letter, a digit, `-`, `_` or `.`.
    Forbidden {
        /// The byte offset of the first such character.
        at: usize,
    },
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameProblem::Empty => write!(f, "the tier name is empty; {TIER_NAME_SYNTAX}"),
            NameProblem::TooLong { len } => {
                write!(f, "the tier name is {len} bytes long; {TIER_NAME_SYNTAX}")
            }
            NameProblem::Forbidden { at } => write!(
                f,
                "the tier name has a forbidden character at byte {at}; {TIER_NAME_SYNTAX}"
            ),
        }
    }
}

/// Whether `byte` may be part of a tier name.
pub const fn is_tier_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.')
}

/// Accepts a tier name, or says what is wrong with it: the one place that says which tier
/// names exist.
///
/// # Errors
/// The [`NameProblem`]: an empty name, one longer than [`MAX_TIER_NAME`] bytes (before any
/// character is looked at, so a long hostile name costs nothing more), or the first
/// forbidden character.
pub const fn check_tier_name(name: &str) -> Result<(), NameProblem> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(NameProblem::Empty);
    }
    if bytes.len() > MAX_TIER_NAME {
        return Err(NameProblem::TooLong { len: bytes.len() });
    }
    let mut at = 0;
    while at < bytes.len() {
        if !is_tier_name_byte(bytes[at]) {
            return Err(NameProblem::Forbidden { at });
        }
        at += 1;
    }
    Ok(())
}

/// Why a limit's name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// Empty, or nothing but white space: no override, log line or metric could name it.
    Empty,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("must not be empty"),
        }
    }
}

/// Checks a limit's name: any text that is not empty nor only white space (`"api"`,
/// `"orders.list"`, `"shop::orders"`). The bucket keys escape or digest whatever a name
/// holds, so no other character is refused.
///
/// # Errors
/// [`NameError::Empty`].
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.trim().is_empty() {
        return Err(NameError::Empty);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn plain_names_pass() {
        for name in ["pro", "free", "enterprise", "acme-2025.gold", "A_B", "x"] {
            assert_eq!(check_tier_name(name), Ok(()), "{name}");
        }
        let longest = "a".repeat(MAX_TIER_NAME);
        assert_eq!(check_tier_name(&longest), Ok(()));
    }

    #[test]
    fn names_that_would_break_a_header_or_a_label_are_refused() {
        for (name, at) in [
            ("pro\"", 3),
            ("a;q=1", 1),
            ("a,b", 1),
            ("a\nb", 1),
            ("a\r\nx-evil: 1", 1),
            ("a b", 1),
            ("a\\b", 1),
            ("pro]", 3),
            ("[pro", 0),
            ("a=b", 1),
            ("é", 0),
            ("a\0", 1),
        ] {
            assert_eq!(
                check_tier_name(name),
                Err(NameProblem::Forbidden { at }),
                "{name:?}"
            );
        }
        assert_eq!(check_tier_name(""), Err(NameProblem::Empty));
        let long = "a".repeat(10_000);
        assert_eq!(
            check_tier_name(&long),
            Err(NameProblem::TooLong { len: 10_000 })
        );
    }

    #[test]
    fn messages_say_what_a_name_may_be() {
        assert_eq!(
            NameProblem::Forbidden { at: 3 }.to_string(),
            "the tier name has a forbidden character at byte 3; a tier name is 1 to 64 ASCII \
             letters, digits, `-`, `_` or `.` (`pro`, `acme-2025.gold`)"
        );
    }

    #[test]
    fn a_name_is_anything_but_blank() {
        for name in ["api", "orders.list", "shop::orders", " padded ", "{tag}"] {
            assert_eq!(check_name(name), Ok(()), "{name:?}");
        }
        for name in ["", " ", "\t\n"] {
            assert_eq!(check_name(name), Err(NameError::Empty), "{name:?}");
        }
    }
}
