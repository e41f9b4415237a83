//! A command's arguments as the Lua functions take them: the key (or `numkeys` and that
//! many keys), then the arguments, read as integers in decimal. Pure (no server), so that the
//! parsing can be fuzzed and unit-tested; a malformed argument from any client is an
//! [`ArgError`], which the command answers as an error reply.

use std::fmt;

/// Why a command's arguments were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgError {
    /// No key, or a `numkeys` that is not a count of the keys that follow.
    NumKeys,
    /// An argument that should be an integer is not one (or is beyond 64 bits).
    NotAnInteger,
    /// The arguments are not a limit the library could have sent: too few, too many, or out
    /// of the range the algorithm computes exactly.
    BadLimit,
}

impl ArgError {
    /// The error reply's text.
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            ArgError::NumKeys => {
                "ERR ratelimit: a key is missing, or numkeys does not count the keys"
            }
            ArgError::NotAnInteger => "ERR ratelimit: an argument is not an integer",
            ArgError::BadLimit => {
                "ERR ratelimit: the arguments are not a limit this version of the module decides"
            }
        }
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ArgError {}

/// The most numeric arguments a command reads at once (the token bucket's eight).
pub const MAX_NUMBERS: usize = 8;

/// Where a command's keys are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// One key, the first argument: one algorithm's decision (the Lua function's `KEYS[1]`,
    /// without the `numkeys` of `FCALL`, which would cost Redis one more argument to read
    /// and free on every decision).
    One,
    /// `numkeys`, then that many keys: several limits or calls at once.
    Counted,
}

/// A command's arguments after its name, split: its keys, and its other arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Args<'a, T> {
    /// The keys.
    pub keys: &'a [T],
    /// What follows them.
    pub rest: &'a [T],
}

impl<'a, T> Args<'a, T> {
    /// Splits `argv` (the command's arguments, its name first) as `keys` says.
    ///
    /// # Errors
    /// [`ArgError::NumKeys`] when there is no key, or `numkeys` is not a count of the keys
    /// that follow; [`ArgError::NotAnInteger`] when it is not a number.
    pub fn split(
        argv: &'a [T],
        bytes: impl Fn(&T) -> &[u8],
        keys: Keys,
    ) -> Result<Args<'a, T>, ArgError> {
        let (n, after) = match keys {
            Keys::One => (1, argv.get(1..)),
            Keys::Counted => {
                let Some((numkeys, after)) = argv.get(1).zip(argv.get(2..)) else {
                    return Err(ArgError::NumKeys);
                };
                let n = usize::try_from(integer(bytes(numkeys))?).map_err(|_| ArgError::NumKeys)?;
                (n, Some(after))
            }
        };
        let after = after.unwrap_or(&[]);
        match (after.get(..n), after.get(n..)) {
            (Some(keys), Some(rest)) if !keys.is_empty() || n == 0 => Ok(Args { keys, rest }),
            _ => Err(ArgError::NumKeys),
        }
    }

    /// The rest as integers, at least `min` of them and at most [`MAX_NUMBERS`]: the
    /// values, and how many there are.
    ///
    /// # Errors
    /// [`ArgError::NotAnInteger`] for one that is not an integer; [`ArgError::BadLimit`] for
    /// too few or too many.
    pub fn numbers(
        &self,
        bytes: impl Fn(&T) -> &[u8],
        min: usize,
    ) -> Result<([i64; MAX_NUMBERS], usize), ArgError> {
        let n = self.rest.len();
        if n < min || n > MAX_NUMBERS {
            return Err(ArgError::BadLimit);
        }
        let mut out = [0i64; MAX_NUMBERS];
        for (slot, arg) in out.iter_mut().zip(self.rest) {
            *slot = integer(bytes(arg))?;
        }
        Ok((out, n))
    }
}

/// An integer in decimal, as the library writes one: an optional `-`, then 1 to 19 digits,
/// within 64 bits. Nothing else (no `+`, space, exponent or fraction), where Lua's
/// `tonumber` would read more forms: the library never sends them.
///
/// # Errors
/// [`ArgError::NotAnInteger`].
pub fn integer(text: &[u8]) -> Result<i64, ArgError> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ArgError::NotAnInteger);
    }
    let mut value: i64 = 0;
    for &d in digits {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i64::from(d - b'0')))
            .ok_or(ArgError::NotAnInteger)?;
    }
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b<'x>(s: &'x &'static str) -> &'x [u8] {
        s.as_bytes()
    }

    #[test]
    fn integers_are_read_as_the_library_writes_them() {
        assert_eq!(integer(b"0"), Ok(0));
        assert_eq!(integer(b"-42"), Ok(-42));
        assert_eq!(integer(b"9223372036854775807"), Ok(i64::MAX));
        for bad in [
            "",
            "-",
            "+1",
            " 1",
            "1 ",
            "1e3",
            "0x10",
            "1.0",
            "9223372036854775808",
            "--1",
        ] {
            assert_eq!(
                integer(bad.as_bytes()),
                Err(ArgError::NotAnInteger),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn keys_are_split_from_the_rest() {
        let one = ["cmd", "k", "10", "1"];
        let args = Args::split(&one, b, Keys::One).unwrap();
        assert_eq!((args.keys, args.rest), (&["k"][..], &["10", "1"][..]));
        assert_eq!(args.numbers(b, 2).unwrap().1, 2);
        assert_eq!(args.numbers(b, 3), Err(ArgError::BadLimit));
        assert_eq!(Args::split(&["cmd"], b, Keys::One), Err(ArgError::NumKeys));
        let counted = ["cmd", "2", "k", "l", "7"];
        let args = Args::split(&counted, b, Keys::Counted).unwrap();
        assert_eq!((args.keys, args.rest), (&["k", "l"][..], &["7"][..]));
        for bad in [
            &["cmd"][..],
            &["cmd", "2", "k"],
            &["cmd", "-1", "k"],
            &["cmd", "x", "k"],
        ] {
            assert!(Args::split(bad, b, Keys::Counted).is_err(), "{bad:?}");
        }
        let negative = ["cmd", "k", "-3", "x"];
        let args = Args::split(&negative, b, Keys::One).unwrap();
        assert_eq!(args.numbers(b, 1), Err(ArgError::NotAnInteger));
        let args = Args::split(&negative[..3], b, Keys::One).unwrap();
        assert_eq!(args.numbers(b, 1).unwrap().0[0], -3);
    }
}
