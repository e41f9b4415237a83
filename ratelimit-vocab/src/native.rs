//! The names of redis-ratelimit's Redis module and of its commands, which the module
//! registers and the limiter calls.
//!
//! Each command decides exactly what one function of the Lua library decides, with the same
//! keys, arguments and reply, and is named by that function's short name after
//! [`COMMAND_PREFIX`]: `ratelimit.v1.token_bucket` stands for the library's `token_bucket`.
//! [`PROTOCOL`] is in the module's name and in every command's: a module whose commands take
//! other arguments, answer otherwise or keep another state has another version, so that two
//! versions can be loaded into one server side by side during a rolling upgrade, and each
//! limiter calls the commands of its own.
//!
//! The numbers `multi` and `batch` read that are not a limit's own (`multi`'s [`Mode`], the
//! [`SHADOW_BIT`] of a spec's id) are named here once, for the module, the limiter and, by
//! the Lua locals `lua_protocol!` writes, the scripts.

/// The version of the commands' arguments, replies and stored state.
pub const PROTOCOL: u32 = 1;

/// The module's name (`MODULE LIST`), which holds [`PROTOCOL`].
pub const MODULE_NAME: &str = "ratelimit_v1";

/// What every command's name starts with, [`PROTOCOL`] included.
pub const COMMAND_PREFIX: &str = "ratelimit.v1.";

/// The commands that are not one algorithm's alone (whose short names are the algorithms'
/// own: `token_bucket`, `fixed_window`, ...): several limits of one call, several calls of
/// one node, and a concurrency limit's release and renewal.
pub const OTHER_COMMANDS: [&str; 4] =
    ["multi", "batch", "concurrency_release", "concurrency_renew"];

/// The most limits one call of `multi` decides natively: the module refuses more, and the
/// limiter sends a call of more by `FCALL` (a call of one or two limits is the usual).
pub const MAX_LIMITS: usize = 16;

/// The most calls one `batch` decides: the module refuses more, and the limiter sends a
/// larger batch by `FCALL` (its batches are of 64 calls by default).
pub const MAX_BATCH: usize = 1024;

/// The most arguments one algorithm's call takes (the token bucket's eight).
pub const MAX_ARGUMENTS: usize = 8;

/// Declares `multi`'s modes and the shadow bit once, each with the Lua local that names it in
/// the scripts: the Rust side ([`Mode`], [`SHADOW_BIT`]) and the Lua text ([`lua_protocol!`])
/// are made from this one list, so the module, the limiter and the scripts cannot disagree.
macro_rules! protocol {
    (
        modes {
            $( $(#[$doc:meta])* $mode:ident = $number:literal => $mode_lua:ident, )*
        }
        $(#[$shadow_doc:meta])* shadow = $shadow:literal => $shadow_lua:ident;
    ) => {
        /// What `multi` does with a call's limits: the first of its packed arguments (ARGV[2]
        /// of `multi.lua`), as [`as_number`](Mode::as_number) writes it.
        ///
        /// Exhaustive, unlike the public enums users see: a mode added here must be handled
        /// by the module and the limiter, which match on every one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Mode {
            $( $(#[$doc])* $mode = $number, )*
        }

        impl Mode {
            /// Every mode, in the order of their numbers.
            pub const ALL: [Mode; [$($number),*].len()] = [$(Mode::$mode),*];

            /// The mode's number, as `multi` takes it.
            #[must_use]
            pub const fn as_number(self) -> u8 {
                self as u8
            }

            /// The mode of `number`, `None` for a number that names none.
            #[must_use]
            pub const fn from_number(number: u64) -> Option<Mode> {
                match number {
                    $( $number => Some(Mode::$mode), )*
                    _ => None,
                }
            }
        }

        $(#[$shadow_doc])*
        pub const SHADOW_BIT: u8 = $shadow;

        /// The Lua locals that name [`Mode`]'s numbers and [`SHADOW_BIT`] in the scripts
        /// (`local MODE_DECIDE = 0`, ..., `local SHADOW_BIT = 8`), one line each, as a string
        /// literal: `concat!`ed ahead of `call.lua`, `multi.lua` and `batch.lua`, so that the
        /// scripts read the numbers the module and the limiter write.
        #[macro_export]
        macro_rules! lua_protocol {
            () => {
                concat!(
                    $( "local ", stringify!($mode_lua), " = ", $number, "\n", )*
                    "local ", stringify!($shadow_lua), " = ", $shadow, "\n",
                )
            };
        }
    };
}

protocol! {
    modes {
        /// 0: decide every limit, all or nothing.
        Decide = 0 => MODE_DECIDE,
        /// 1: decide, and also answer what each limit held before the call (what it answers
        /// again if the call is given back).
        Reserve = 1 => MODE_RESERVE,
        /// 2: another part of the call refused it: answer, take nothing.
        Veto = 2 => MODE_VETO,
        /// 3: give back what a reservation took, at the server time that follows the limits.
        GiveBack = 3 => MODE_GIVE_BACK,
        /// 4: answer as [`Decide`](Mode::Decide) would, each limit's remaining as it stands;
        /// write nothing.
        Peek = 4 => MODE_PEEK,
        /// 5: settle: each limit's actual cost, against the estimate a call took, given back
        /// or taken.
        Settle = 5 => MODE_SETTLE,
    }
    /// What a limit's algorithm id is raised by, in a spec of `multi` or `batch`, when the
    /// limit is in shadow mode (its refusal does not refuse the call): every id is below it.
    shadow = 8 => SHADOW_BIT;
}

/// A limit's algorithm id as a spec of `multi` or `batch` names it: `id`, plus
/// [`SHADOW_BIT`] in shadow mode. `None` for an id of [`SHADOW_BIT`] or more, which would
/// read as another.
#[must_use]
pub const fn spec_id(id: u8, shadow: bool) -> Option<u8> {
    if id >= SHADOW_BIT {
        return None;
    }
    Some(if shadow { id + SHADOW_BIT } else { id })
}

/// A spec's id read back: the algorithm's id and whether the limit is in shadow mode, as
/// [`spec_id`] wrote them. `None` for a number it never writes.
#[must_use]
pub const fn read_spec_id(number: u64) -> Option<(u8, bool)> {
    let bit = SHADOW_BIT as u64;
    if number >= 2 * bit {
        return None;
    }
    // Below 16.
    #[allow(clippy::cast_possible_truncation)]
    let id = (number % bit) as u8;
    Some((id, number >= bit))
}

/// How the module propagates the writes of one `batch`: as one `EVAL` of [`EFFECTS_SCRIPT`],
/// whose keys are the writes' keys in order and whose one argument packs each write's command
/// and arguments ([`push_effect`]), instead of one command per write. Each propagated command
/// cost Redis a command lookup by name and an object per argument, made and freed whether or
/// not a replica or the AOF was there to take it (about 3,000 instructions a write, measured:
/// a third of a batched decision). The script only replays the writes the module made; a
/// replica or an AOF without the module holds the same keys, values and expiries.
pub const EFFECTS_SCRIPT: &str = include_str!("effects.lua");

/// [`EFFECTS_SCRIPT`] as the module propagates it: without its comments, blank lines and
/// indentation (every line of it is code or a whole-line comment). A replica and an AOF
/// replay hash the script's body on every `EVAL`, and the master copies it into each one:
/// about half the bytes.
pub fn effects_script_body() -> alloc::string::String {
    let mut body = alloc::string::String::with_capacity(EFFECTS_SCRIPT.len());
    for line in EFFECTS_SCRIPT.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("--") {
            continue;
        }
        body.push_str(line);
        body.push('\n');
    }
    body
}

/// Appends one write to `packed` as [`EFFECTS_SCRIPT`] reads it: `<n>;`, then the command's
/// name and each of `args` (those after the key) as `<length>:<bytes>`.
pub fn push_effect(packed: &mut alloc::vec::Vec<u8>, command: &[u8], args: &[&[u8]]) {
    push_length(packed, args.len() + 1, b';');
    for field in core::iter::once(command).chain(args.iter().copied()) {
        push_length(packed, field.len(), b':');
        packed.extend_from_slice(field);
    }
}

/// `n` in decimal, then `end`: the counts and lengths of [`push_effect`], nearly always of one
/// or two digits, written without [`write_decimal`]'s loop (in a native batch, five of them
/// a write).
#[inline]
fn push_length(packed: &mut alloc::vec::Vec<u8>, n: usize, end: u8) {
    #[allow(clippy::cast_possible_truncation)] // below 100: the digits fit a `u8`
    match n {
        0..10 => packed.extend_from_slice(&[b'0' + n as u8, end]),
        10..100 => packed.extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8, end]),
        _ => {
            let mut digits = [0u8; 20];
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            packed.extend_from_slice(write_decimal(&mut digits, n));
            packed.push(end);
        }
    }
}

/// One write [`read_effects`] read: its command, and its arguments after the key.
pub type Effect<'a> = (&'a [u8], alloc::vec::Vec<&'a [u8]>);

/// The writes of `packed`, as [`push_effect`] appended them (and [`EFFECTS_SCRIPT`] reads
/// them): each write's command and the arguments after its key. `None` when `packed` is not
/// such a sequence.
pub fn read_effects(packed: &[u8]) -> Option<alloc::vec::Vec<Effect<'_>>> {
    let mut out = alloc::vec::Vec::new();
    let mut rest = packed;
    let upto = |rest: &[u8], end: u8| -> Option<(usize, usize)> {
        let at = rest.iter().position(|&b| b == end)?;
        let n = usize::try_from(unsigned(rest.get(..at)?)?).ok()?;
        Some((n, at + 1))
    };
    while !rest.is_empty() {
        let (n, skip) = upto(rest, b';')?;
        rest = rest.get(skip..)?;
        let mut fields = alloc::vec::Vec::with_capacity(n);
        for _ in 0..n {
            let (len, skip) = upto(rest, b':')?;
            fields.push(rest.get(skip..skip.checked_add(len)?)?);
            rest = rest.get(skip + len..)?;
        }
        let (&command, args) = fields.split_first()?;
        out.push((command, args.to_vec()));
    }
    Some(out)
}

/// What separates the numbers the native commands take and answer. A command for one
/// algorithm takes its key, then the Lua function's arguments as one argument, integers in
/// decimal separated by single spaces (`"1000000 3 3000000 1"`), and answers the function's
/// integers as one bulk string, the same way (`"1 2 0 333334 1795821944740785"`): one
/// element each way instead of one per number, each of which costs Redis an object to
/// make, read and free (a third of a native decision's work, measured).
pub const SEPARATOR: u8 = b' ';

/// Each number of `text` (numbers separated by [`SEPARATOR`]), `None` for one that is not
/// an integer as the library writes one: an optional `-`, then 1 to 19 digits, within 64
/// bits (no `+`, space, exponent or fraction, which the library never writes).
pub fn numbers(text: &[u8]) -> impl Iterator<Item = Option<i64>> + '_ {
    text.split(|&b| b == SEPARATOR).map(integer)
}

/// The numbers of `text` into `out`, as [`numbers`] reads them, in one pass over the bytes
/// (each digit read once, as it is accumulated): how many there are, `None` when one is not an
/// integer or there are more than `out` holds. (The module's hot path: a decision's
/// arguments, on every call.)
#[must_use]
pub fn read_numbers(text: &[u8], out: &mut [i64]) -> Option<usize> {
    let mut at = 0;
    for (n, slot) in out.iter_mut().enumerate() {
        let (value, next) = read_number(text, at)?;
        *slot = value;
        match next {
            Some(next) => at = next,
            None => return Some(n + 1),
        }
    }
    // More numbers than `out` holds.
    None
}

/// The number of `text` that starts at `at`, as [`integer`] reads it, and where the next one
/// starts (`None`: it was the last). `None` when it is not an integer, or is followed by
/// anything but [`SEPARATOR`] and another number. Each digit is read once, as it is
/// accumulated: the module reads a call's arguments, or a batch's, with it.
#[must_use]
pub fn read_number(text: &[u8], mut at: usize) -> Option<(i64, Option<usize>)> {
    let negative = text.get(at) == Some(&b'-');
    at += usize::from(negative);
    let start = at;
    let mut value = 0u64;
    while let Some(digit) = text
        .get(at)
        .map(|b| b.wrapping_sub(b'0'))
        .filter(|&d| d <= 9)
    {
        // Wrapping past 19 digits, which are refused below.
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
        at += 1;
    }
    if at == start || at - start > 19 {
        return None;
    }
    let value = i64::try_from(value).ok()?;
    let value = if negative { -value } else { value };
    match text.get(at) {
        None => Some((value, None)),
        Some(&SEPARATOR) => Some((value, Some(at + 1))),
        Some(_) => None,
    }
}

/// `v` in decimal, written at the end of `buf`: the digits (two at a time, from a table).
pub fn write_decimal(buf: &mut [u8; 20], mut v: u64) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut at = buf.len();
    while v >= 100 {
        // Below 100: a pair's index.
        #[allow(clippy::cast_possible_truncation)]
        let pair = (v % 100) as usize * 2;
        v /= 100;
        at -= 2;
        buf[at] = PAIRS[pair];
        buf[at + 1] = PAIRS[pair + 1];
    }
    #[allow(clippy::cast_possible_truncation)]
    let last = v as usize;
    if last >= 10 {
        at -= 2;
        buf[at] = PAIRS[last * 2];
        buf[at + 1] = PAIRS[last * 2 + 1];
    } else {
        at -= 1;
        // Below 10.
        #[allow(clippy::cast_possible_truncation)]
        let digit = last as u8;
        buf[at] = b'0' + digit;
    }
    &buf[at..]
}

/// One integer, as [`numbers`] reads each.
#[must_use]
pub fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    // At most 19 digits: below 10^19, within a u64 without a check per digit.
    let mut value: u64 = 0;
    for &d in digits {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    let value = i64::try_from(value).ok()?;
    Some(if negative { -value } else { value })
}

/// The number of `text` that starts at `at`, as [`unsigned`] reads it, and where the next one
/// starts (`None`: it was the last), as [`read_number`] says.
#[must_use]
pub fn read_unsigned(text: &[u8], at: usize) -> Option<(u64, Option<usize>)> {
    let rest = text.get(at..)?;
    let end = rest.iter().position(|&b| b == SEPARATOR);
    let value = unsigned(rest.get(..end.unwrap_or(rest.len()))?)?;
    match end {
        None => Some((value, None)),
        Some(end) if at + end + 1 < text.len() => Some((value, Some(at + end + 1))),
        // A separator at the end: no number after it.
        Some(_) => None,
    }
}

/// An unsigned integer as [`write_decimal`] writes one (canonical decimal: 1 to 20 digits
/// within 64 bits, no leading zero but in `0` itself), `None` otherwise. The arguments of
/// the algorithms whose scripts use a number as text as well (a concurrency limit's holder,
/// which names its members, may be any `u64`): only the canonical text is read, so that the
/// module names a member exactly as the script does.
#[must_use]
pub fn unsigned(text: &[u8]) -> Option<u64> {
    match text {
        [] | [b'0', _, ..] => return None,
        _ if text.len() > 20 => return None,
        _ => {}
    }
    let mut value: u64 = 0;
    for &d in text {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_spec_ids_read_back_as_written() {
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(mode.as_number()), i);
            assert_eq!(Mode::from_number(u64::from(mode.as_number())), Some(mode));
        }
        assert_eq!(Mode::from_number(Mode::ALL.len() as u64), None);
        for id in 0..SHADOW_BIT {
            for shadow in [false, true] {
                let written = spec_id(id, shadow).unwrap();
                assert_eq!(read_spec_id(u64::from(written)), Some((id, shadow)));
            }
        }
        assert_eq!(spec_id(SHADOW_BIT, false), None);
        assert_eq!(read_spec_id(2 * u64::from(SHADOW_BIT)), None);
        let lua = lua_protocol!();
        assert!(
            lua.starts_with("local MODE_DECIDE = 0\nlocal MODE_RESERVE = 1\n"),
            "{lua}"
        );
        assert!(
            lua.ends_with("local MODE_SETTLE = 5\nlocal SHADOW_BIT = 8\n"),
            "{lua}"
        );
    }

    #[test]
    fn read_unsigned_walks_the_numbers() {
        let text = b"0 18446744073709551615 7";
        assert_eq!(read_unsigned(text, 0), Some((0, Some(2))));
        assert_eq!(read_unsigned(text, 2), Some((u64::MAX, Some(23))));
        assert_eq!(read_unsigned(text, 23), Some((7, None)));
        assert_eq!(read_unsigned(b"1  2", 2), None, "an empty number");
        for bad in [&b"1 "[..], b"-1", b" 1", b"", b"1,2"] {
            assert_eq!(read_unsigned(bad, 0), None, "{bad:?}");
        }
    }

    #[test]
    fn unsigned_reads_exactly_what_write_decimal_writes() {
        let mut buf = [0; 20];
        for v in [0, 1, 9, 10, 99, 1 << 53, u64::MAX - 7, u64::MAX] {
            assert_eq!(unsigned(write_decimal(&mut buf, v)), Some(v));
        }
        for text in [
            &b""[..],
            b"-1",
            b"+1",
            b"01",
            b"00",
            b" 1",
            b"1 ",
            b"1.0",
            b"18446744073709551616",
            b"99999999999999999999",
            b"000000000000000000001",
        ] {
            assert_eq!(unsigned(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_names_hold_the_protocol() {
        // The test reads one digit.
        const { assert!(PROTOCOL < 10) };
        let v = [b'v', b'0' + u8::try_from(PROTOCOL).unwrap()];
        let holds = |name: &str| name.as_bytes().windows(2).any(|w| w == v);
        assert!(holds(MODULE_NAME) && holds(COMMAND_PREFIX));
    }

    #[test]
    fn numbers_are_read_as_the_library_writes_them() {
        let read: std::vec::Vec<_> = numbers(b"0 -42 9223372036854775807").collect();
        assert_eq!(read, [Some(0), Some(-42), Some(i64::MAX)]);
        for bad in [
            "",
            "-",
            "+1",
            "1e3",
            "0x10",
            "1.0",
            "9223372036854775808",
            "--1",
        ] {
            assert_eq!(integer(bad.as_bytes()), None, "{bad:?}");
        }
        assert!(
            numbers(b"1  2").any(|n| n.is_none()),
            "two spaces: an empty number"
        );
        let mut out = [0; 3];
        assert_eq!(read_numbers(b"7 -8 9", &mut out), Some(3));
        assert_eq!(out, [7, -8, 9]);
        for bad in &["7 8 9 10", "7  8", " 7", "7 ", "", "x"] {
            assert_eq!(read_numbers(bad.as_bytes(), &mut out), None, "{bad:?}");
        }
    }

    /// `read_numbers` reads every text as `numbers` does: every text of up to 6 bytes over
    /// digits, `-`, space and another byte, and numbers at the edges of 64 bits.
    #[test]
    fn one_pass_reads_as_numbers_does() {
        fn both(text: &[u8]) {
            let mut out = [0i64; 4];
            let expected: Option<std::vec::Vec<i64>> = numbers(text).collect();
            let expected = expected.filter(|v| v.len() <= out.len());
            let got = read_numbers(text, &mut out).map(|n| out[..n].to_vec());
            assert_eq!(
                got,
                expected,
                "{:?}",
                std::string::String::from_utf8_lossy(text)
            );
        }
        const ALPHABET: [u8; 6] = [b'0', b'1', b'9', b'-', b' ', b'x'];
        let mut text = std::vec::Vec::new();
        for len in 0..=6u32 {
            for mut code in 0..6usize.pow(len) {
                text.clear();
                for _ in 0..len {
                    text.push(ALPHABET[code % 6]);
                    code /= 6;
                }
                both(&text);
            }
        }
        for edge in [
            "9223372036854775807",
            "-9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
            "1000000000000000000",
            "0000000000000000001",
            "00000000000000000001",
            "1 2 3 4",
            "1 2 3 4 5",
        ] {
            both(edge.as_bytes());
        }
    }

    #[test]
    fn the_propagated_script_is_the_script_without_its_comments() {
        let body = effects_script_body();
        assert!(!body.contains("--"), "{body}");
        assert!(body.len() < EFFECTS_SCRIPT.len() * 2 / 3, "{}", body.len());
        let code: alloc::vec::Vec<&str> = EFFECTS_SCRIPT
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("--"))
            .collect();
        assert_eq!(body.lines().collect::<alloc::vec::Vec<_>>(), code);
        assert!(body.contains("redis.call") && body.contains("unpack(args)"));
    }

    #[test]
    fn effects_read_back_as_they_were_pushed() {
        let writes: [(&[u8], &[&[u8]]); 4] = [
            (b"SET", &[b"123 4", b"PXAT", b"1795821944740"]),
            (b"DEL", &[]),
            (b"ZADD", &[b"17", b"h:7:1", b"17", b"w:1:2:3"]),
            (b"INCRBY", &[b"", b"a:b;c\0", &[b'x'; 12], &[b'y'; 345]]),
        ];
        let mut packed = alloc::vec::Vec::new();
        for (command, args) in writes {
            push_effect(&mut packed, command, args);
        }
        assert_eq!(
            packed.get(..28),
            Some(&b"4;3:SET5:123 44:PXAT13:179582"[..28])
        );
        let read = read_effects(&packed).expect("readable");
        assert_eq!(read.len(), writes.len());
        for ((command, args), (c, a)) in writes.iter().zip(&read) {
            assert_eq!(command, c);
            assert_eq!(args, &a.as_slice());
        }
        for bad in [&b"1"[..], b"1;", b"2;3:SET", b"1;9:SET", b"x;3:SET", b"0;"] {
            assert!(read_effects(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn decimals_are_written_as_rust_writes_them() {
        let mut buf = [0; 20];
        for v in [
            0,
            7,
            10,
            99,
            100,
            101,
            12_345,
            1_000_000,
            u64::MAX,
            u64::MAX - 1,
        ] {
            assert_eq!(write_decimal(&mut buf, v), std::format!("{v}").as_bytes());
        }
    }
}
