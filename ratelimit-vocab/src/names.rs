//! Limit names: what a limit may be named, by `name = ".."` in `#[rate_limit]` and
//! `layer_limit!`, and by the name a layer's limit built at run time is given. The macro
//! checks a name when the code compiles, the runtime when the limit is built: both by
//! [`check_name`], so that a name one of them takes, the other takes too.

use core::fmt;

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
    use super::{NameError, check_name};

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
