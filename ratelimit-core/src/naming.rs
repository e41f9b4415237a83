//! Bucket key naming: `{prefix}:{{name}:{key}}`.
//!
//! The braces are a Redis Cluster hash tag: every bucket of one (name, key) lives in one slot.
//! Names and keys come from users' input, so `{`, `}` and `%` are percent-escaped (no input
//! can end the tag early and move a key to another slot), and an escaped part longer than
//! [`MAX_PART_LEN`] bytes is replaced by a digest (no input can grow Redis memory without
//! bound). `%H` marks a digest; an escaped part never contains it, so the two cannot collide.

use sha2::{Digest, Sha256};

/// Longest name or key, in bytes after escaping, kept as it is in the bucket key.
pub const MAX_PART_LEN: usize = 128;

fn needs_escape(b: u8) -> bool {
    matches!(b, b'{' | b'}' | b'%')
}

/// Length of a digested part: `%H` and 32 hex digits.
const DIGEST_LEN: usize = 2 + 32;

/// How a part is written into a bucket key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// As it is: nothing to escape.
    Plain,
    /// With `{`, `}` and `%` escaped.
    Escaped,
    /// Replaced by its digest: too long once escaped.
    Digest,
}

/// How `part` is written, and its length then. One pass over at most [`MAX_PART_LEN`] bytes;
/// a part longer than that is digested without a look at its bytes.
fn plan(part: &str) -> (Part, usize) {
    if part.len() > MAX_PART_LEN {
        return (Part::Digest, DIGEST_LEN);
    }
    // At most MAX_PART_LEN (< 256) bytes: a u8 count cannot overflow, and the fold vectorizes.
    let specials = usize::from(part.bytes().fold(0u8, |n, b| n + u8::from(needs_escape(b))));
    let len = part.len() + 2 * specials;
    if len > MAX_PART_LEN {
        (Part::Digest, DIGEST_LEN)
    } else if specials == 0 {
        (Part::Plain, len)
    } else {
        (Part::Escaped, len)
    }
}

/// Appends `part`, written as `how` says, to `out`.
fn push_part(out: &mut String, part: &str, how: Part) {
    match how {
        Part::Plain => out.push_str(part),
        Part::Escaped => {
            for c in part.chars() {
                match c {
                    '{' => out.push_str("%7B"),
                    '}' => out.push_str("%7D"),
                    '%' => out.push_str("%25"),
                    c => out.push(c),
                }
            }
        }
        Part::Digest => {
            out.push_str("%H");
            let digest = Sha256::digest(part.as_bytes());
            for byte in &digest[..16] {
                push_hex(out, *byte);
            }
        }
    }
}

fn push_hex(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0xf)]));
}

/// The bucket key of `key` under `name` (or of `key` alone) with `prefix`: one allocation
/// of exactly its length.
pub fn bucket_key(prefix: &str, name: Option<&str>, key: &str) -> String {
    let name = name.map(|n| (n, plan(n)));
    let (key_how, key_len) = plan(key);
    let len = prefix.len() + 3 + name.map_or(0, |(_, (_, n))| n + 1) + key_len;
    let mut out = String::with_capacity(len);
    out.push_str(prefix);
    out.push_str(":{");
    if let Some((name, (how, _))) = name {
        push_part(&mut out, name, how);
        out.push(':');
    }
    push_part(&mut out, key, key_how);
    out.push('}');
    debug_assert_eq!(out.len(), len, "the planned length");
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_keys_are_readable() {
        assert_eq!(
            bucket_key("app", Some("orders::list"), "/orders"),
            "app:{orders::list:/orders}"
        );
        assert_eq!(bucket_key("app", None, "user:42"), "app:{user:42}");
    }

    #[test]
    fn braces_cannot_end_the_tag() {
        let k = bucket_key("app", Some("n"), "}x{y%");
        assert_eq!(k, "app:{n:%7Dx%7By%25}");
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
            3 + 2 + MAX_PART_LEN + 1
        );
    }

    proptest::proptest! {
        /// Whatever the name and key, the bucket key has exactly one hash tag, holding all of
        /// "name:key" (so its slot depends on nothing else), and a bounded length; distinct
        /// keys under one name give distinct bucket keys.
        #[test]
        fn any_input_keeps_one_bounded_tag(name in ".{0,40}", a in ".{0,300}", b in ".{0,300}") {
            let k = bucket_key("p", Some(&name), &a);
            proptest::prop_assert!(k.starts_with("p:{") && k.ends_with('}'), "{}", k);
            proptest::prop_assert_eq!(k.matches('{').count(), 1);
            proptest::prop_assert_eq!(k.matches('}').count(), 1);
            proptest::prop_assert!(k.len() <= 3 + 2 * (MAX_PART_LEN + 1) + 1);
            if a != b {
                proptest::prop_assert_ne!(k, bucket_key("p", Some(&name), &b));
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

    #[test]
    fn unicode_is_kept() {
        assert_eq!(bucket_key("p", None, "ключ-🔑"), "p:{ключ-🔑}");
    }
}
