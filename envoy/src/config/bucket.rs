//! How a request's descriptor names its bucket: see [`Bucket`](super::Bucket).

/// The bucket name of a domain's rules (those not `shared`): `envoy:` and the domain.
pub(crate) fn name_of(domain: &str) -> String {
    format!("{NAME_PREFIX}{domain}")
}

/// What every bucket name of a domain's own rules starts with.
pub(crate) const NAME_PREFIX: &str = "envoy:";

/// Appends `part` with `%`, `&`, `=` and `~` percent-escaped, so that those four can
/// separate the parts of a key: no key or value, whatever it holds, can end its part early
/// or make two descriptors write one key.
pub(crate) fn escape_into(out: &mut String, part: &str) {
    out.reserve(part.len());
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '&' => out.push_str("%26"),
            '=' => out.push_str("%3D"),
            '~' => out.push_str("%7E"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(part: &str) -> String {
        let mut out = String::new();
        escape_into(&mut out, part);
        out
    }

    #[test]
    fn the_separators_and_the_escape_are_escaped_and_nothing_else() {
        assert_eq!(escaped("a&b=c~d%e"), "a%26b%3Dc%7Ed%25e");
        assert_eq!(escaped("10.0.0.1:{x}/é *"), "10.0.0.1:{x}/é *");
        assert_eq!(escaped(""), "");
        // The escape of a separator is not itself a separator's escape.
        assert_ne!(escaped("%26"), escaped("&"));
    }
}
