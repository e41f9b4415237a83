//! A command's arguments: the key (or `numkeys` and that many keys), then the Lua
//! function's arguments as one argument, integers in decimal separated by spaces. Pure (no server), so that the
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
pub const MAX_NUMBERS: usize = ratelimit_vocab::native::MAX_ARGUMENTS;

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

    /// The rest, one argument of packed numbers, to read one at a time.
    ///
    /// # Errors
    /// [`ArgError::BadLimit`] when the rest is not one argument.
    pub fn packed(&self, bytes: impl Fn(&T) -> &[u8]) -> Result<Packed<'a>, ArgError>
    where
        T: 'a,
    {
        match self.rest {
            [packed] => Ok(Packed::new(bytes(packed))),
            _ => Err(ArgError::BadLimit),
        }
    }

    /// The rest: one argument holding the script's arguments as integers separated by single
    /// spaces (`"1000000 3 3000000 1"`), read into `out`: how many there are (at most
    /// `out.len()`). One argument, not one per number: each argument costs Redis an object to
    /// make and free per call, a third of a decision's work here.
    ///
    /// # Errors
    /// [`ArgError::NotAnInteger`] for one that is not an integer (or an empty one: two
    /// spaces, or a space at an end); [`ArgError::BadLimit`] for more than `out` holds, or
    /// not one argument.
    pub fn numbers(&self, bytes: impl Fn(&T) -> &[u8], out: &mut [i64]) -> Result<usize, ArgError> {
        let [packed] = self.rest else {
            return Err(ArgError::BadLimit);
        };
        let text = bytes(packed);
        ratelimit_vocab::native::read_numbers(text, out).ok_or_else(|| {
            // Which: too many, or one that is not a number.
            if ratelimit_vocab::native::numbers(text).count() > out.len() {
                ArgError::BadLimit
            } else {
                ArgError::NotAnInteger
            }
        })
    }

    /// The rest as [`numbers`](Args::numbers) reads it, each number an unsigned one in
    /// canonical decimal ([`ratelimit_vocab::native::unsigned`]): the arguments of the
    /// algorithms kept in sorted sets, whose holder may be any `u64`.
    ///
    /// # Errors
    /// As [`numbers`](Args::numbers).
    pub fn unsigned(
        &self,
        bytes: impl Fn(&T) -> &[u8],
        out: &mut [u64],
    ) -> Result<usize, ArgError> {
        let [packed] = self.rest else {
            return Err(ArgError::BadLimit);
        };
        let mut n = 0;
        for field in bytes(packed).split(|&b| b == ratelimit_vocab::native::SEPARATOR) {
            let slot = out.get_mut(n).ok_or(ArgError::BadLimit)?;
            *slot = ratelimit_vocab::native::unsigned(field).ok_or(ArgError::NotAnInteger)?;
            n += 1;
        }
        Ok(n)
    }
}

/// The packed numbers of a command's last argument, read one at a time: `multi`'s and a
/// batch's, whose count the numbers themselves say.
#[derive(Debug, Clone)]
pub struct Packed<'a> {
    text: &'a [u8],
    /// Where the next number starts; `None` after the last.
    at: Option<usize>,
}

impl<'a> Packed<'a> {
    /// The numbers of `text` (numbers separated by single spaces).
    #[must_use]
    pub fn new(text: &'a [u8]) -> Packed<'a> {
        Packed { text, at: Some(0) }
    }

    /// The next number.
    ///
    /// # Errors
    /// [`ArgError::BadLimit`] when there is none left; [`ArgError::NotAnInteger`] for one
    /// that is not an integer.
    pub fn next_number(&mut self) -> Result<i64, ArgError> {
        let at = self.at.ok_or(ArgError::BadLimit)?;
        let (value, next) =
            ratelimit_vocab::native::read_number(self.text, at).ok_or(ArgError::NotAnInteger)?;
        self.at = next;
        Ok(value)
    }

    /// The next number, an unsigned one in canonical decimal
    /// ([`ratelimit_vocab::native::unsigned`]).
    ///
    /// # Errors
    /// [`ArgError::BadLimit`] when there is none left; [`ArgError::NotAnInteger`] for one
    /// that is not such a number.
    pub fn next_unsigned(&mut self) -> Result<u64, ArgError> {
        let at = self.at.ok_or(ArgError::BadLimit)?;
        let (value, next) =
            ratelimit_vocab::native::read_unsigned(self.text, at).ok_or(ArgError::NotAnInteger)?;
        self.at = next;
        Ok(value)
    }

    /// The next number, a count (not negative).
    ///
    /// # Errors
    /// As [`next_number`](Packed::next_number), and [`ArgError::BadLimit`] for a negative one.
    pub fn next_count(&mut self) -> Result<usize, ArgError> {
        usize::try_from(self.next_number()?).map_err(|_| ArgError::BadLimit)
    }

    /// The next `out.len()` numbers, into `out`.
    ///
    /// # Errors
    /// As [`next_number`](Packed::next_number).
    pub fn fill(&mut self, out: &mut [i64]) -> Result<(), ArgError> {
        for slot in out {
            *slot = self.next_number()?;
        }
        Ok(())
    }

    /// Whether every number has been read.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.at.is_none()
    }
}

/// An integer in decimal, as the library writes one ([`ratelimit_vocab::native::integer`]).
///
/// # Errors
/// [`ArgError::NotAnInteger`].
pub fn integer(text: &[u8]) -> Result<i64, ArgError> {
    ratelimit_vocab::native::integer(text).ok_or(ArgError::NotAnInteger)
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
    fn unsigned_numbers_are_canonical_and_within_64_bits() {
        let mut out = [0u64; 5];
        let ok = ["cmd", "k", "2 30000000 18446744073709551615 1 0"];
        let args = Args::split(&ok, b, Keys::One).unwrap();
        assert_eq!(args.unsigned(b, &mut out), Ok(5));
        assert_eq!(out, [2, 30_000_000, u64::MAX, 1, 0]);
        assert_eq!(args.unsigned(b, &mut [0u64; 4]), Err(ArgError::BadLimit));
        for bad in ["1 -1", "1 01", "1  1", "1 1 ", "18446744073709551616", ""] {
            let packed = ["cmd", "k", bad];
            let args = Args::split(&packed, b, Keys::One).unwrap();
            assert_eq!(
                args.unsigned(b, &mut out),
                Err(ArgError::NotAnInteger),
                "{bad:?}"
            );
        }
        let two = ["cmd", "k", "1", "2"];
        let args = Args::split(&two, b, Keys::One).unwrap();
        assert_eq!(args.unsigned(b, &mut out), Err(ArgError::BadLimit));
    }

    #[test]
    fn keys_are_split_from_the_rest() {
        let one = ["cmd", "k", "10 1"];
        let args = Args::split(&one, b, Keys::One).unwrap();
        assert_eq!((args.keys, args.rest), (&["k"][..], &["10 1"][..]));
        let mut out = [0i64; MAX_NUMBERS];
        assert_eq!(args.numbers(b, &mut out), Ok(2));
        assert_eq!(out[..2], [10, 1]);
        assert_eq!(args.numbers(b, &mut [0i64; 1]), Err(ArgError::BadLimit));
        for bad in ["10  1", " 10 1", "10 1 ", "10,1", ""] {
            let packed = ["cmd", "k", bad];
            let args = Args::split(&packed, b, Keys::One).unwrap();
            assert_eq!(
                args.numbers(b, &mut out),
                Err(ArgError::NotAnInteger),
                "{bad:?}"
            );
        }
        let nine = ["cmd", "k", "1 2 3 4 5 6 7 8 9"];
        let args = Args::split(&nine, b, Keys::One).unwrap();
        assert_eq!(args.numbers(b, &mut out), Err(ArgError::BadLimit));
        let two = ["cmd", "k", "1", "2"];
        let args = Args::split(&two, b, Keys::One).unwrap();
        assert_eq!(
            args.numbers(b, &mut out),
            Err(ArgError::BadLimit),
            "one argument, packed"
        );
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
        let negative = ["cmd", "k", "-3 x"];
        let args = Args::split(&negative, b, Keys::One).unwrap();
        assert_eq!(args.numbers(b, &mut out), Err(ArgError::NotAnInteger));
        let negative = ["cmd", "k", "-3"];
        let args = Args::split(&negative, b, Keys::One).unwrap();
        assert_eq!(args.numbers(b, &mut out), Ok(1));
        assert_eq!(out[0], -3);
    }

    /// A byte from a mix that makes numbers, separators, signs and junk likely.
    fn byte() -> impl proptest::strategy::Strategy<Value = u8> {
        proptest::prop_oneof![
            4 => b'0'..=b'9',
            2 => proptest::strategy::Just(b' '),
            1 => proptest::strategy::Just(b'-'),
            1 => proptest::prelude::any::<u8>(),
        ]
    }

    #[allow(clippy::ptr_arg)] // The readers take the type of the arguments they split.
    fn bytes(a: &Vec<u8>) -> &[u8] {
        a
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        /// Any arguments at all: every reader answers (a value or an error, never a panic),
        /// and a packed text read number by number gives what the readers of the whole give.
        #[test]
        fn any_arguments_are_read_or_refused(
            argv in proptest::collection::vec(proptest::collection::vec(byte(), 0..40), 0..6),
            counted in proptest::prelude::any::<bool>(),
        ) {
            let keys = if counted { Keys::Counted } else { Keys::One };
            if let Ok(args) = Args::split(&argv, bytes, keys) {
                let mut signed = [0i64; MAX_NUMBERS];
                let mut unsigned = [0u64; 5];
                let whole_signed = args.numbers(bytes, &mut signed);
                let whole_unsigned = args.unsigned(bytes, &mut unsigned);
                if let Ok(mut packed) = args.packed(bytes) {
                    let mut one_by_one = Vec::new();
                    let mut next = packed.clone();
                    while let Ok(v) = packed.next_number() {
                        one_by_one.push(v);
                        if packed.is_done() {
                            break;
                        }
                    }
                    if let Ok(n) = whole_signed {
                        proptest::prop_assert_eq!(signed.get(..n), Some(&one_by_one[..]));
                    }
                    let mut unsigned_one_by_one = Vec::new();
                    while let Ok(v) = next.next_unsigned() {
                        unsigned_one_by_one.push(v);
                        if next.is_done() {
                            break;
                        }
                    }
                    if let Ok(n) = whole_unsigned {
                        proptest::prop_assert_eq!(unsigned.get(..n), Some(&unsigned_one_by_one[..]));
                    }
                }
            }
        }
    }
}
