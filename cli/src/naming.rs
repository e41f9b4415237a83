//! Bucket keys read back into the limit's name and the caller's key: the inverse of
//! `ratelimit_core::__private::bucket_key` (`<prefix>:{<n>:<name>:<key>}` for a named limit,
//! `<prefix>:{:<key>}` for an unnamed one, `{`, `}` and `%` percent-escaped, a part too long
//! once escaped replaced by `%H` and a digest). The library documents the format in its
//! `naming.rs`; the round trip is tested here against its own `bucket_key`.

/// One part of a bucket key as it reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// The text the caller gave.
    Text(String),
    /// A part too long to keep, stored as `%H` and these hex digits of its SHA-256: the text
    /// cannot be read back.
    Digest(String),
}

impl Part {
    /// The text, when the key kept it.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Part::Text(t) => Some(t),
            Part::Digest(_) => None,
        }
    }

    /// For people: the text, or `<digest …>`.
    pub(crate) fn shown(&self) -> String {
        match self {
            Part::Text(t) => t.clone(),
            Part::Digest(d) => format!("<digest {d}>"),
        }
    }
}

/// A bucket key under a prefix, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// The limit's name; `None` for a bucket of `RateLimiter::check` (no name).
    pub(crate) name: Option<Part>,
    /// The caller's key.
    pub(crate) key: Part,
}

/// Reads `bucket` as a bucket key under `prefix`; `None` when it is not one (another prefix
/// that starts with this one, the heartbeat's `<prefix>:instances`, an application's key).
pub(crate) fn parse(prefix: &str, bucket: &str) -> Option<Bucket> {
    let tag = bucket
        .strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_suffix('}')?;
    // One hash tag: the library escapes every brace of the name and the key.
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

/// A written part back to its text: `%7B` `{`, `%7D` `}`, `%25` `%`; `%H…` is a digest.
/// `None` for a part the library never writes (another `%` sequence).
fn unescape(written: &str) -> Option<Part> {
    if let Some(digest) = written.strip_prefix("%H") {
        return Some(Part::Digest(digest.to_owned()));
    }
    let mut out = String::with_capacity(written.len());
    let mut rest = written;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let c = match rest.get(at + 1..at + 3)? {
            "7B" => '{',
            "7D" => '}',
            "25" => '%',
            _ => return None,
        };
        out.push(c);
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(Part::Text(out))
}

/// `text` as a literal in a Redis glob pattern (`SCAN … MATCH`): `*`, `?`, `[`, `]` and `\`
/// escaped with a backslash.
pub(crate) fn glob_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;
    use ratelimit_core::__private::bucket_key;

    fn text(s: &str) -> Part {
        Part::Text(s.to_owned())
    }

    #[test]
    fn named_and_unnamed_keys_read_back() {
        let k = bucket_key("t", Some("api::orders"), "user:{42}%");
        assert_eq!(
            parse("t", &k),
            Some(Bucket {
                name: Some(text("api::orders")),
                key: text("user:{42}%"),
            })
        );
        let k = bucket_key("t", None, "a:b");
        assert_eq!(
            parse("t", &k),
            Some(Bucket {
                name: None,
                key: text("a:b"),
            })
        );
    }

    #[test]
    fn other_keys_are_not_buckets() {
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
        ] {
            assert_eq!(parse("t", key), None, "{key}");
        }
        // A prefix with a colon is read as a whole.
        let k = bucket_key("app:v2", Some("n"), "k");
        assert!(parse("app:v2", &k).is_some());
        assert_eq!(parse("app", &k), None);
    }

    #[test]
    fn long_parts_read_as_digests() {
        let long = "k".repeat(500);
        let b = parse("t", &bucket_key("t", Some("n"), &long)).unwrap();
        assert_eq!(b.name, Some(text("n")));
        assert!(matches!(b.key, Part::Digest(ref d) if d.len() == 32));
    }

    #[test]
    fn globs_are_literal() {
        assert_eq!(glob_literal(r"a*b?[c]\d{e}"), r"a\*b\?\[c\]\\d{e}");
    }

    proptest! {
        /// Whatever the name and the key, the library's bucket key reads back into them (or
        /// into a digest, for a part too long to keep).
        #[test]
        fn the_library_naming_reads_back(
            name in prop::option::of("[a-z:{}%H0-9]{0,12}|.{0,40}|[{%]{60,80}"),
            key in "[a-z:{}%H0-9]{0,12}|.{0,40}|[{%]{60,80}",
            prefix in "[a-z:]{1,6}",
        ) {
            // Escaped longer than this, a part is kept as its digest.
            let kept = |part: &str| part.len() + 2 * part.matches(['{', '}', '%']).count() <= 128;
            let k = bucket_key(&prefix, name.as_deref(), &key);
            let b = parse(&prefix, &k).unwrap();
            match (&b.name, &name) {
                (None, None) => {}
                (Some(Part::Text(t)), Some(n)) => prop_assert_eq!(t, n),
                (Some(Part::Digest(_)), Some(n)) => prop_assert!(!kept(n)),
                other => prop_assert!(false, "{:?}", other),
            }
            match &b.key {
                Part::Text(t) => prop_assert_eq!(t, &key),
                Part::Digest(_) => prop_assert!(!kept(&key)),
            }
        }
    }
}
