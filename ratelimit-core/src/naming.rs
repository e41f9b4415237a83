//! Bucket key naming: `{prefix}:{<n>:<name>:<key>}` for a named limit, `{prefix}:{:<key>}` for
//! an unnamed one.
//!
//! The braces are a Redis Cluster hash tag: every bucket of one (name, key) lives in one slot.
//! Names and keys come from users' input, so `{`, `}` and `%` are percent-escaped (no input
//! can end the tag early and move a key to another slot), and an escaped part longer than
//! [`MAX_PART_LEN`] bytes is replaced by a digest (no input can grow Redis memory without
//! bound): `%H` and the first 128 bits of the SHA-256 of the part as given, in 32 lowercase
//! hex digits. `%H` marks a digest; an escaped part never contains it, so the two cannot
//! collide.
//!
//! The tag must also be injective: no two distinct (name, key) pairs, and no named and unnamed
//! pair, may write one Redis key. A bare `:` between name and key is not (`("api",
//! "admin:alice")` and `("api:admin", "alice")` would meet), so a named tag starts with the
//! decimal length `<n>` of the written name: reading the digits up to the first `:` gives
//! where the name ends, whatever `:`s the name and the key hold. An unnamed tag starts with
//! `:`, which no length does, so it meets no named one. Escaping, the digest and the length
//! prefix are each reversible (or, for the digest, collision-resistant: two parts share one
//! only after about 2^64 tries), so the whole key is.

use sha2::{Digest, Sha256};

/// Longest name or key, in bytes after escaping, kept as it is in the bucket key.
pub const MAX_PART_LEN: usize = 128;

fn needs_escape(b: u8) -> bool {
    matches!(b, b'{' | b'}' | b'%')
}

/// Whether `part` holds a byte to escape: eight bytes at a time, the three bytes tested in
/// each word without a branch between them, the last eight bytes as one word that may
/// overlap the others (most parts have nothing to escape; this was a tenth of a memory
/// check).
#[inline]
fn has_special(part: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = ONES << 7;
    // The high bit of some byte set if and only if a byte of `w` equals `c` (exact for the
    // word as a whole: a borrow can only follow a byte that did match).
    let equal = |w: u64, c: u8| {
        let x = w ^ (ONES * u64::from(c));
        x.wrapping_sub(ONES) & !x & HIGHS
    };
    let special = |w: u64| equal(w, b'{') | equal(w, b'}') | equal(w, b'%');
    let Some(last) = part.last_chunk::<8>() else {
        return part.iter().any(|&b| needs_escape(b));
    };
    let mut found = special(u64::from_le_bytes(*last));
    let mut rest = part;
    while let Some((w, tail)) = rest.split_first_chunk::<8>() {
        found |= special(u64::from_le_bytes(*w));
        rest = tail;
    }
    found != 0
}

/// Length of a digested part: `%H` and 32 hex digits (the first 16 bytes of its SHA-256).
const DIGEST_LEN: usize = 2 + 32;

/// How a part is written into a bucket key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    /// As it is: nothing to escape.
    Plain,
    /// With `{`, `}` and `%` escaped.
    Escaped,
    /// Replaced by its digest: too long once escaped.
    Digest,
}

/// How `part` is written, and its length then. One pass over at most [`MAX_PART_LEN`] bytes;
/// a part longer than that is digested without a look at its bytes.
#[inline]
fn plan(part: &str) -> (Write, usize) {
    if part.len() > MAX_PART_LEN {
        return (Write::Digest, DIGEST_LEN);
    }
    if !has_special(part.as_bytes()) {
        return (Write::Plain, part.len());
    }
    // At most MAX_PART_LEN (< 256) bytes: a u8 count cannot overflow, and the fold vectorizes.
    let specials = usize::from(part.bytes().fold(0u8, |n, b| n + u8::from(needs_escape(b))));
    let len = part.len() + 2 * specials;
    if len > MAX_PART_LEN {
        (Write::Digest, DIGEST_LEN)
    } else if specials == 0 {
        (Write::Plain, len)
    } else {
        (Write::Escaped, len)
    }
}

/// Where a bucket key is written: a `String`, or a buffer on the stack (the memory
/// limiter's hot path, which then allocates nothing).
trait Out {
    fn push_str(&mut self, s: &str);
    /// Appends the ASCII digit `d` (0 to 9).
    fn push_digit(&mut self, d: u8);
}

impl Out for String {
    #[inline]
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }

    #[inline]
    fn push_digit(&mut self, d: u8) {
        self.push(char::from(b'0' + d));
    }
}

/// Longest bucket key built on the stack; longer ones (a long prefix, name or key) are built
/// in a `String`.
const STACK_KEY_LEN: usize = 160;

/// A bucket key on the stack: `len` bytes of `buf` written (sized by [`plan_key`] first).
struct StackKey {
    buf: [u8; STACK_KEY_LEN],
    len: usize,
}

impl Out for StackKey {
    #[inline]
    fn push_str(&mut self, s: &str) {
        let (s, at) = (s.as_bytes(), self.len);
        let end = at + s.len();
        let to = &mut self.buf[at..end];
        // A short part in two words that may overlap, without a call to `memcpy` (most
        // names and keys are 8 to 16 bytes, and a call's dispatch on the length cost more
        // than the copy).
        match (s.first_chunk::<8>(), s.last_chunk::<8>()) {
            (Some(first), Some(last)) if s.len() <= 16 => {
                let n = s.len();
                to[..8].copy_from_slice(first);
                to[n - 8..].copy_from_slice(last);
            }
            _ => to.copy_from_slice(s),
        }
        self.len = end;
    }

    #[inline]
    fn push_digit(&mut self, d: u8) {
        self.buf[self.len] = b'0' + d;
        self.len += 1;
    }
}

/// Appends `part`, written as `how` says, to `out`: a plain part inline, the others out of
/// line.
#[inline]
fn push_part(out: &mut impl Out, part: &str, how: Write) {
    match how {
        Write::Plain => out.push_str(part),
        _ => push_written(out, part, how),
    }
}

/// [`push_part`] of a part escaped or digested.
#[inline(never)]
fn push_written(out: &mut impl Out, part: &str, how: Write) {
    match how {
        Write::Plain => out.push_str(part),
        Write::Escaped => {
            let mut rest = part;
            while let Some(at) = rest.bytes().position(needs_escape) {
                out.push_str(&rest[..at]);
                out.push_str(match rest.as_bytes()[at] {
                    b'{' => "%7B",
                    b'}' => "%7D",
                    _ => "%25",
                });
                rest = &rest[at + 1..];
            }
            out.push_str(rest);
        }
        Write::Digest => {
            out.push_str("%H");
            let digest = Sha256::digest(part.as_bytes());
            let mut hex = [0u8; 32];
            for (pair, byte) in hex.chunks_exact_mut(2).zip(&digest[..16]) {
                pair[0] = HEX[usize::from(byte >> 4)];
                pair[1] = HEX[usize::from(byte & 0xf)];
            }
            // Hex digits: ASCII.
            out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// How the parts of a bucket key are written, and its length.
struct Planned<'a> {
    name: Option<(&'a str, Write, usize)>,
    key: (&'a str, Write),
    len: usize,
}

#[inline]
fn plan_key<'a>(prefix: &str, name: Option<&'a str>, key: &'a str) -> Planned<'a> {
    let name = name.map(|n| {
        let (how, written) = plan(n);
        (n, how, written)
    });
    let (key_how, key_len) = plan(key);
    // The written name is at most MAX_PART_LEN (128) bytes: at most 3 digits.
    let name_len = name.map_or(0, |(_, _, n)| decimal_len(n) + 1 + n);
    Planned {
        name,
        key: (key, key_how),
        len: prefix.len() + 4 + name_len + key_len,
    }
}

#[inline]
fn write_key(out: &mut impl Out, prefix: &str, planned: &Planned<'_>) {
    write_head(out, prefix, planned.name);
    push_part(out, planned.key.0, planned.key.1);
    out.push_str("}");
}

/// What a bucket key holds before its key part: the prefix, the tag's opening, the name's
/// length and the name (of a named limit), and the `:` the key follows.
#[inline]
fn write_head(out: &mut impl Out, prefix: &str, name: Option<(&str, Write, usize)>) {
    out.push_str(prefix);
    out.push_str(":{");
    if let Some((name, how, written)) = name {
        push_decimal(out, written);
        out.push_str(":");
        push_part(out, name, how);
    }
    out.push_str(":");
}

/// The head of every bucket key of the limit `name` under `prefix`: the bucket key of a key
/// is this, the key's part, and `}` ([`with_key_after`]). A declaration names its head once,
/// not once per call.
pub(crate) fn bucket_head(prefix: &str, name: &str) -> String {
    let (how, written) = plan(name);
    let mut out = String::with_capacity(prefix.len() + 4 + decimal_len(written) + written);
    write_head(&mut out, prefix, Some((name, how, written)));
    out
}

/// [`with_bucket_key`] of `key` after a head [`bucket_head`] wrote: the same bytes, the name
/// not scanned and written again.
#[inline]
pub(crate) fn with_key_after<R>(head: &str, key: &str, f: impl FnOnce(&[u8]) -> R) -> R {
    let (how, key_len) = plan(key);
    let len = head.len() + key_len + 1;
    if len > STACK_KEY_LEN {
        let mut out = String::with_capacity(len);
        out.push_str(head);
        push_part(&mut out, key, how);
        out.push('}');
        return f(out.as_bytes());
    }
    let mut out = StackKey {
        buf: [0; STACK_KEY_LEN],
        len: 0,
    };
    out.push_str(head);
    push_part(&mut out, key, how);
    out.push_str("}");
    f(&out.buf[..out.len])
}

/// The bucket key of `key` under `name` (or of `key` alone) with `prefix`, as the limiter names
/// its buckets (see [`tools`](crate::tools)): one allocation of exactly its length.
pub fn bucket_key(prefix: &str, name: Option<&str>, key: &str) -> String {
    let planned = plan_key(prefix, name, key);
    let mut out = String::with_capacity(planned.len);
    write_key(&mut out, prefix, &planned);
    debug_assert_eq!(out.len(), planned.len, "the planned length");
    out
}

/// Calls `f` with the bytes of the bucket key [`bucket_key`] builds, built on the stack when
/// it is short enough (nearly always): the memory limiter's hot path then allocates nothing.
#[inline]
pub(crate) fn with_bucket_key<R>(
    prefix: &str,
    name: Option<&str>,
    key: &str,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    let planned = plan_key(prefix, name, key);
    if planned.len > STACK_KEY_LEN {
        return f(bucket_key(prefix, name, key).as_bytes());
    }
    let mut out = StackKey {
        buf: [0; STACK_KEY_LEN],
        len: 0,
    };
    write_key(&mut out, prefix, &planned);
    debug_assert_eq!(out.len, planned.len, "the planned length");
    f(&out.buf[..out.len])
}

fn decimal_len(n: usize) -> usize {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        _ => 3,
    }
}

/// Appends `n` (at most [`MAX_PART_LEN`], so at most three digits) in decimal.
fn push_decimal(out: &mut impl Out, n: usize) {
    debug_assert!(n <= MAX_PART_LEN);
    let digits = [n / 100, (n / 10) % 10, n % 10].map(|d| u8::try_from(d).unwrap_or(0));
    for &d in &digits[3 - decimal_len(n)..] {
        out.push_digit(d);
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// One part of a bucket key read back: the limit's name, or the caller's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Part {
    /// The text the limiter was given.
    Text(String),
    /// A part longer than [`MAX_PART_LEN`] bytes once escaped, kept only as its digest: these
    /// 32 hex digits (the first 128 bits of its SHA-256). The text cannot be read back;
    /// [`Part::stands_for`] says whether a given text is the one.
    Digest(String),
}

impl Part {
    /// The text, when the key kept it.
    pub fn text(&self) -> Option<&str> {
        match self {
            Part::Text(t) => Some(t),
            Part::Digest(_) => None,
        }
    }

    /// Whether `text`, given to the limiter, is written as this part.
    pub fn stands_for(&self, text: &str) -> bool {
        match self {
            Part::Text(t) => t == text,
            Part::Digest(d) => plan(text).0 == Write::Digest && digest_hex(text) == *d,
        }
    }
}

/// For people: the text, or `<digest …>` for a part kept only as its digest.
impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Text(t) => f.write_str(t),
            Part::Digest(d) => write!(f, "<digest {d}>"),
        }
    }
}

/// A bucket key read back into the name and the key it was made of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Bucket {
    /// The limit's name; `None` for an unnamed bucket (`RateLimiter::check`).
    pub name: Option<Part>,
    /// The caller's key.
    pub key: Part,
}

/// The 32 hex digits [`bucket_key`] writes after `%H` for a digested `part`.
fn digest_hex(part: &str) -> String {
    let mut out = String::with_capacity(DIGEST_LEN);
    push_part(&mut out, part, Write::Digest);
    out.split_off(2)
}

/// Reads `bucket` as a bucket key under `prefix`: the inverse of [`bucket_key`]. `None` when
/// it is not one [`bucket_key`] writes (another prefix that starts with this one, the
/// heartbeat's `<prefix>:instances`, an application's key).
pub fn parse_bucket_key(prefix: &str, bucket: &str) -> Option<Bucket> {
    let tag = bucket
        .strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_suffix('}')?;
    // One hash tag: every brace of the name and the key is escaped.
    if tag.contains(['{', '}']) {
        return None;
    }
    let (len, rest) = tag.split_once(':')?;
    if len.is_empty() {
        return Some(Bucket {
            name: None,
            key: unescape(rest)?,
        });
    }
    // The written name's length in bytes, in canonical decimal (`0` for an empty name).
    if len.len() > 3
        || (len.len() > 1 && len.starts_with('0'))
        || !len.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let len: usize = len.parse().ok()?;
    let name = rest.get(..len)?;
    let key = rest.get(len..)?.strip_prefix(':')?;
    Some(Bucket {
        name: Some(unescape(name)?),
        key: unescape(key)?,
    })
}

/// A written part back to its text: `%7B` `{`, `%7D` `}`, `%25` `%`; `%H` and 32 hex digits
/// a digest. `None` for what [`push_part`] never writes (another `%` sequence, a part longer
/// than [`MAX_PART_LEN`]).
fn unescape(written: &str) -> Option<Part> {
    if written.len() > MAX_PART_LEN {
        return None;
    }
    if let Some(digest) = written.strip_prefix("%H") {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        return (digest.len() == DIGEST_LEN - 2 && digest.bytes().all(hex))
            .then(|| Part::Digest(digest.to_owned()));
    }
    let mut out = String::with_capacity(written.len());
    let mut rest = written;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        out.push(match rest.get(at + 1..at + 3)? {
            "7B" => '{',
            "7D" => '}',
            "25" => '%',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(Part::Text(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_keys_are_readable() {
        assert_eq!(
            bucket_key("app", Some("orders::list"), "/orders"),
            "app:{12:orders::list:/orders}"
        );
        assert_eq!(bucket_key("app", None, "user:42"), "app:{:user:42}");
    }

    #[test]
    fn colons_cannot_move_the_boundary_between_name_and_key() {
        // The collisions a bare `:` separator allowed.
        let pairs = [
            ((None, "orders:alice"), (Some("orders"), "alice")),
            ((Some("api"), "admin:alice"), (Some("api:admin"), "alice")),
            (
                (Some("shop::orders"), ":list:bob"),
                (Some("shop::orders::list"), "bob"),
            ),
            ((None, ":x"), (Some(""), "x")),
            ((None, "1:a:b"), (Some("a"), "b")),
        ];
        for ((n1, k1), (n2, k2)) in pairs {
            assert_ne!(
                bucket_key("p", n1, k1),
                bucket_key("p", n2, k2),
                "{n1:?}/{k1:?} vs {n2:?}/{k2:?}"
            );
        }
    }

    #[test]
    fn braces_cannot_end_the_tag() {
        let k = bucket_key("app", Some("n"), "}x{y%");
        assert_eq!(k, "app:{1:n:%7Dx%7By%25}");
        assert_eq!(k.matches('{').count(), 1);
        assert_eq!(k.matches('}').count(), 1);
        assert!(k.ends_with('}'));
    }

    #[test]
    fn long_keys_are_digested_and_bounded() {
        let long = "k".repeat(10_000);
        let k = bucket_key("app", Some("n"), &long);
        assert!(k.len() < 64, "{k}");
        assert_eq!(k, bucket_key("app", Some("n"), &long), "stable");
        assert_ne!(k, bucket_key("app", Some("n"), &"k".repeat(10_001)));
        // A key of braces that only grows past the bound once escaped is digested too.
        let braces = "{".repeat(MAX_PART_LEN / 2);
        assert!(bucket_key("app", None, &braces).contains("%H"));
        assert_eq!(
            bucket_key("app", None, &"a".repeat(MAX_PART_LEN)).len(),
            3 + 3 + MAX_PART_LEN + 1
        );
        // The longest name keeps its three-digit length.
        let name = "n".repeat(MAX_PART_LEN);
        assert!(bucket_key("app", Some(&name), "k").starts_with("app:{128:nnn"));
    }

    /// A part as the key holds it: its text when written as it is or escaped, its digest
    /// when digested (a digest stands for its input, collision-resistant).
    fn as_read(part: &str) -> Part {
        match plan(part) {
            (Write::Digest, _) => Part::Digest(digest_hex(part)),
            _ => Part::Text(part.to_owned()),
        }
    }

    fn text(s: &str) -> Part {
        Part::Text(s.to_owned())
    }

    #[test]
    fn named_and_unnamed_keys_read_back() {
        let k = bucket_key("t", Some("api::orders"), "user:{42}%");
        assert_eq!(
            parse_bucket_key("t", &k),
            Some(Bucket {
                name: Some(text("api::orders")),
                key: text("user:{42}%"),
            })
        );
        let k = bucket_key("t", None, "a:b");
        assert_eq!(
            parse_bucket_key("t", &k),
            Some(Bucket {
                name: None,
                key: text("a:b"),
            })
        );
        // A prefix with a colon is read as a whole.
        let k = bucket_key("app:v2", Some("n"), "k");
        assert!(parse_bucket_key("app:v2", &k).is_some());
        assert_eq!(parse_bucket_key("app", &k), None);
    }

    #[test]
    fn other_keys_are_not_buckets() {
        let digest = format!("t:{{:%H{}}}", "0".repeat(32));
        assert!(parse_bucket_key("t", &digest).is_some());
        for key in [
            "t:instances",
            "t:resets",
            "tx:{1:a:b}",
            "t:x:{1:a:b}",
            "t:{1:a:b",
            "t:{9:a:b}",
            "t:{01:a:b}",
            "t:{1:a:b}}",
            "t:{1:a:%zz}",
            "t:{1:a:%7}",
            "t:{:%Habc}",
            &digest.replace('0', "A"),
            &format!("t:{{:{}}}", "a".repeat(MAX_PART_LEN + 1)),
        ] {
            assert_eq!(parse_bucket_key("t", key), None, "{key}");
        }
    }

    #[test]
    fn long_parts_read_as_digests() {
        let long = "k".repeat(500);
        let b = parse_bucket_key("t", &bucket_key("t", Some("n"), &long)).unwrap();
        assert_eq!(b.name, Some(text("n")));
        assert!(b.key.stands_for(&long));
        assert!(!b.key.stands_for(&"k".repeat(501)));
        assert_eq!(b.key.text(), None);
        assert!(b.key.to_string().starts_with("<digest "));
        // A short text whose digest this is not written as one.
        assert!(!Part::Digest(digest_hex("k")).stands_for("k"));
    }

    /// Names and keys made of the characters that matter to the format.
    fn part() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9:{}%]{0,12}",
            "[:1%H7BD25]{0,8}",
            ".{0,40}",
            "[:{]{60,140}",
            "[é🔑:{}%]{0,80}",
            ".{100,200}",
        ]
    }

    proptest! {
        /// Whatever the name and key, the bucket key has exactly one hash tag, holding all of
        /// the tag (so its slot depends on nothing else), and a bounded length.
        #[test]
        fn any_input_keeps_one_bounded_tag(name in ".{0,40}", a in ".{0,300}") {
            let k = bucket_key("p", Some(&name), &a);
            // Built on the stack or not, it is the same key.
            prop_assert_eq!(with_bucket_key("p", Some(&name), &a, <[u8]>::to_vec), k.as_bytes());
            let long_prefix = "p".repeat(STACK_KEY_LEN);
            prop_assert_eq!(
                with_bucket_key(&long_prefix, None, &a, <[u8]>::to_vec),
                bucket_key(&long_prefix, None, &a).into_bytes()
            );
            prop_assert!(k.starts_with("p:{") && k.ends_with('}'), "{}", k);
            prop_assert_eq!(k.matches('{').count(), 1);
            prop_assert_eq!(k.matches('}').count(), 1);
            prop_assert!(k.len() <= 3 + 4 + 3 + 2 * MAX_PART_LEN + 1);
        }

        /// Every bucket key reads back into the (name, key) it was made of: distinct pairs,
        /// named or not, never share a bucket.
        #[test]
        fn naming_is_injective(
            n1 in prop::option::of(part()),
            k1 in part(),
            n2 in prop::option::of(part()),
            k2 in part(),
        ) {
            for (n, k) in [(&n1, &k1), (&n2, &k2)] {
                let b = parse_bucket_key("p", &bucket_key("p", n.as_deref(), k));
                prop_assert_eq!(
                    with_bucket_key("p", n.as_deref(), k, <[u8]>::to_vec),
                    bucket_key("p", n.as_deref(), k).into_bytes()
                );
                let b = b.expect("a bucket key reads back");
                prop_assert_eq!(b.name, n.as_deref().map(as_read));
                prop_assert_eq!(b.key, as_read(k));
            }
            if (&n1, &k1) != (&n2, &k2) {
                prop_assert_ne!(
                    bucket_key("p", n1.as_deref(), &k1),
                    bucket_key("p", n2.as_deref(), &k2)
                );
            }
        }
    }

    #[test]
    fn slots_follow_the_cluster_spec() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(
            key_slot(b"a{}{b}"),
            key_slot(b"b"),
            "an empty tag hashes the whole key"
        );
    }

    proptest! {
        /// Whatever the prefix, name and key (any Unicode, `:`, braces, `%`, over-long),
        /// the bucket key reads back into them, a part too long to keep into its digest.
        #[test]
        fn parse_inverts_bucket_key(
            prefix in "[^{}]{0,12}",
            name in prop::option::of(part()),
            key in part(),
        ) {
            let b = parse_bucket_key(&prefix, &bucket_key(&prefix, name.as_deref(), &key));
            let b = b.expect("a bucket key reads back");
            match (&b.name, &name) {
                (Some(read), Some(n)) => prop_assert!(read.stands_for(n), "{:?} {:?}", read, n),
                (None, None) => {}
                other => prop_assert!(false, "{:?}", other),
            }
            prop_assert!(b.key.stands_for(&key), "{:?} {:?}", b.key, key);
            prop_assert_eq!(b.key.text().is_some(), plan(&key).0 != Write::Digest);
        }

        /// Whatever reads as a bucket key with its text kept is exactly the key
        /// [`bucket_key`] writes for it: one spelling per bucket.
        #[test]
        fn parse_accepts_only_what_bucket_key_writes(
            tag in "[0-9:{}%a-fH7BD]{0,24}|:[a-f%H7BD25é]{0,40}|[0-3]:[a-c:%7BD25é]{0,12}|.{0,40}",
        ) {
            let written = format!("p:{{{tag}}}");
            if let Some(Bucket { name, key: Part::Text(key) }) = parse_bucket_key("p", &written) {
                let name = match &name {
                    None => None,
                    Some(Part::Text(n)) => Some(n.as_str()),
                    Some(Part::Digest(_)) => return Ok(()),
                };
                prop_assert_eq!(bucket_key("p", name, &key), written);
            }
        }

        /// The word-at-a-time scan finds exactly the bytes the byte-at-a-time one does.
        #[test]
        fn specials_are_found_wherever_they_are(
            part in prop::collection::vec(
                prop_oneof![any::<u8>(), Just(b'{'), Just(b'}'), Just(b'%'), Just(b'{' ^ 0x80)],
                0..40,
            )
        ) {
            prop_assert_eq!(has_special(&part), part.iter().any(|&b| needs_escape(b)));
        }
    }

    proptest! {
        /// A key written after its limit's head is the bucket key named in one go, built on
        /// the stack or not.
        #[test]
        fn a_key_after_its_head_is_its_bucket_key(
            prefix in prop_oneof![Just("svc".to_owned()), "[a-z{}%:]{0,8}", ".{150,170}"],
            name in part(),
            key in part(),
        ) {
            let head = bucket_head(&prefix, &name);
            prop_assert_eq!(
                with_key_after(&head, &key, <[u8]>::to_vec),
                bucket_key(&prefix, Some(&name), &key).into_bytes()
            );
        }
    }

    #[test]
    fn unicode_is_kept() {
        assert_eq!(bucket_key("p", None, "ключ-🔑"), "p:{:ключ-🔑}");
    }
}
