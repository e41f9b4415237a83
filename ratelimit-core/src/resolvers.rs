//! Key resolvers: which bucket a call takes its tokens from (the throttling dimension).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;

use crate::request::RequestContext;

/// Picks the key of a call: the bucket it takes tokens from, within its limit.
///
/// Built-ins: [`Uri`], [`Route`], [`Ip`], [`IpUri`], [`Header`], [`User`], [`Global`]; a tuple
/// of resolvers keys on all of them (`key = (Ip, Route)`). Implement it for your own
/// dimensions:
///
/// ```
/// use std::borrow::Cow;
/// use ratelimit_core::{KeyResolver, RequestContext};
///
/// /// One bucket per tenant, put in the request's extensions by the auth middleware.
/// #[derive(Debug, Clone)]
/// struct TenantId(String);
/// struct Tenant;
///
/// impl KeyResolver for Tenant {
///     fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
///         ctx.extensions().get::<TenantId>().map(|t| Cow::Borrowed(t.0.as_str()))
///     }
/// }
///
/// let ctx = RequestContext::new().with_extension(TenantId("acme".into()));
/// assert_eq!(Tenant.resolve(&ctx).as_deref(), Some("acme"));
/// assert_eq!(Tenant.resolve(&RequestContext::new()), None);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key resolver",
    label = "`key = ..` must implement `KeyResolver`, or `Display` to be the key itself",
    note = "use a built-in resolver (`Uri`, `Route`, `Ip`, `IpUri`, `Header(\"name\")`, `User`, `Global`), a tuple of them, a value that displays (an argument: `key = tenant_id`), or implement `KeyResolver` for your type"
)]
pub trait KeyResolver: Send + Sync + 'static {
    /// The key of this call, or `None` when it has none (then the empty-key policy applies:
    /// deny by default).
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>>;

    /// Where the calendar periods of this call's key start, for a quota by calendar period
    /// (`unit = "month"` or `"week"`): the day of the month (1 to 31; a month without it
    /// starts on its last day) or of the week (1 Monday to 7 Sunday), such as a customer's
    /// billing day, read from the request as the key is. `None` (the default) keeps the
    /// limit's own anchor; a limit of another unit ignores it. A day out of range is said
    /// once (a warning) and the limit's anchor used.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use ratelimit_core::{KeyResolver, RequestContext};
    ///
    /// /// The customer, with the billing day the auth middleware found for them.
    /// #[derive(Clone)]
    /// struct Account { id: String, billing_day: u8 }
    /// struct Customer;
    ///
    /// impl KeyResolver for Customer {
    ///     fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
    ///         ctx.extensions().get::<Account>().map(|a| Cow::Borrowed(a.id.as_str()))
    ///     }
    ///     fn anchor(&self, ctx: &RequestContext) -> Option<u8> {
    ///         ctx.extensions().get::<Account>().map(|a| a.billing_day)
    ///     }
    /// }
    ///
    /// let ctx = RequestContext::new().with_extension(Account { id: "acme".into(), billing_day: 17 });
    /// assert_eq!(Customer.anchor(&ctx), Some(17));
    /// ```
    fn anchor(&self, ctx: &RequestContext) -> Option<u8> {
        let _ = ctx;
        None
    }
}

/// The request's path, without the query and normalised: `/orders/1` and `/orders/2` are two
/// buckets, while `/orders/1`, `/orders/%31`, `/orders//1` and `/orders/x/../1` are one.
///
/// A path is one bucket per resource the handler can tell apart, so that no spelling of a path
/// escapes its bucket (see [`normalize_path`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Uri;

impl KeyResolver for Uri {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.path().map(normalize_path)
    }
}

/// Characters a normalised path keeps as they are: RFC 3986's unreserved characters and the
/// others a path segment may hold unescaped (sub-delims, `:`, `@`). Every other byte is
/// percent-encoded, in upper case.
const SEGMENT_KEEPS: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

/// The path as [`Uri`] keys it: one spelling per sequence of decoded segments.
///
/// Each segment is percent-decoded and encoded again canonically (RFC 3986 §6.2.2: escapes of
/// unreserved characters decoded, the rest upper case; beyond it, escapes of sub-delims are
/// decoded too, since frameworks hand handlers the decoded segment); `.` and `..` segments are
/// removed (§5.2.4, also when written `%2E`); empty segments (`//`) are dropped. `/` written
/// as `%2F` is a separator too: a wildcard route (`/files/{*rest}`) hands its handler `a/b`
/// for both `/files/a%2Fb` and `/files/a/b`, so keeping them apart would let a caller spread
/// over 2^k buckets with k slashes.
///
/// Why merge this much: a limit keyed by path must not be escaped by respelling the path. Two
/// spellings that a router would send to different resources (`/a//b` and `/a/b` under a
/// wildcard route) may now share a bucket: that only ever limits more, never less, and a
/// caller can drain a path's bucket by requesting the path itself anyway.
///
/// ```
/// use ratelimit_core::key::normalize_path;
///
/// assert_eq!(normalize_path("/uri/%76ictim"), "/uri/victim");
/// assert_eq!(normalize_path("/uri/v%69ctim"), "/uri/victim");
/// assert_eq!(normalize_path("/uri//./x/../victim"), "/uri/victim");
/// assert_eq!(normalize_path("/files/a%2fb"), "/files/a/b");
/// assert_eq!(normalize_path("/users/42"), "/users/42");
/// ```
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    if is_normal(path) {
        return Cow::Borrowed(path);
    }
    // Decoded whole, then split: `%2F` separates as `/` does.
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(path).collect();
    let absolute = decoded.first() == Some(&b'/');
    let mut segments: Vec<&[u8]> = Vec::new();
    // Whether the path ends in a directory (a `/`, `.` or `..`): its trailing slash stays.
    let mut trailing = false;
    for decoded in decoded.split(|&b| b == b'/') {
        trailing = false;
        match decoded {
            b"" => trailing = true,
            b"." => trailing = true,
            b".." => {
                segments.pop();
                trailing = true;
            }
            _ => segments.push(decoded),
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &segments {
        if absolute || !out.is_empty() {
            out.push('/');
        }
        out.extend(percent_encoding::percent_encode(segment, SEGMENT_KEEPS));
    }
    if (trailing && !segments.is_empty()) || (absolute && segments.is_empty()) {
        out.push('/');
    }
    Cow::Owned(out)
}

/// Whether `path` is already what [`normalize_path`] makes of it: no escape, no empty or dot
/// segment, only characters kept as they are. One pass, no allocation: the common case.
fn is_normal(path: &str) -> bool {
    let kept = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
    if !path.bytes().all(kept) {
        return false;
    }
    let last = path.split('/').count() - 1;
    path.split('/')
        .enumerate()
        .all(|(i, segment)| match segment {
            "." | ".." => false,
            // Only the one before a leading `/` and the one after a trailing `/`.
            "" => i == 0 || i == last,
            _ => true,
        })
}

/// The matched route template: `/users/1` and `/users/2` share the bucket of `/users/{id}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Route;

impl KeyResolver for Route {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.route().map(Cow::Borrowed)
    }
}

/// The client's IP address: the peer's, or behind trusted proxies the one they forwarded
/// (configured on the HTTP layer). IPv6 clients are grouped by their /64 (configurable on the
/// layer): one host usually owns a whole /64, so per-address buckets would be trivially evaded.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ip;

impl Ip {
    /// The client address as keyed: IPv4 as is, IPv6 truncated to `ipv6_prefix` bits.
    pub(crate) fn key_of(addr: IpAddr, ipv6_prefix: u8) -> String {
        match addr {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None if ipv6_prefix >= 128 => v6.to_string(),
                None => {
                    let bits = u128::from(v6);
                    let mask = u128::MAX
                        .checked_shl(128 - u32::from(ipv6_prefix))
                        .unwrap_or(0);
                    let net = std::net::Ipv6Addr::from(bits & mask);
                    let mut out = String::with_capacity(44);
                    let _ = write!(out, "{net}/{ipv6_prefix}");
                    out
                }
            },
        }
    }
}

impl KeyResolver for Ip {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.client_ip()
            .map(|ip| Cow::Owned(Ip::key_of(ip, ctx.ipv6_prefix())))
    }
}

/// The client's IP and the path together: one bucket per client per path.
#[derive(Debug, Clone, Copy, Default)]
pub struct IpUri;

impl KeyResolver for IpUri {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        (Ip, Uri).resolve(ctx)
    }
}

/// The value of a request header (an API key, a client id), as its text when it is UTF-8
/// (`café` is keyed `café`, and `ratelimit inspect --key café` finds it). Other values, and
/// those that start with U+FFFD, are keyed by their hex bytes behind a U+FFFD marker
/// (`\u{fffd}ff` for the byte 0xFF), so no two values share a bucket.
#[derive(Debug, Clone, Copy)]
pub struct Header(pub &'static str);

impl KeyResolver for Header {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        let value = ctx.headers().get(self.0)?;
        if value.is_empty() {
            return None;
        }
        // A header value holds no control character but tab: its UTF-8 text is what the
        // client wrote, as a person would type it to the CLI.
        Some(match std::str::from_utf8(value.as_bytes()) {
            Ok(s) if !s.starts_with('\u{fffd}') => Cow::Borrowed(s),
            _ => {
                let bytes = value.as_bytes();
                let mut out = String::with_capacity(1 + 2 * bytes.len());
                out.push('\u{fffd}');
                for b in bytes {
                    let _ = write!(out, "{b:02x}");
                }
                Cow::Owned(out)
            }
        })
    }
}

/// The authenticated user: authentication middleware inserts a `Principal` into the
/// request's extensions and [`User`] keys on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);

/// The [`Principal`] found in the request's extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct User;

impl KeyResolver for User {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.extensions()
            .get::<Principal>()
            .filter(|p| !p.0.is_empty())
            .map(|p| Cow::Borrowed(p.0.as_str()))
    }
}

/// One bucket for every caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyResolver for Global {
    fn resolve<'a>(&'a self, _ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        Some(Cow::Borrowed("global"))
    }
}

impl<K: KeyResolver + ?Sized> KeyResolver for Box<K> {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        (**self).resolve(ctx)
    }

    fn anchor(&self, ctx: &RequestContext) -> Option<u8> {
        (**self).anchor(ctx)
    }
}

impl<K: KeyResolver + ?Sized> KeyResolver for std::sync::Arc<K> {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        (**self).resolve(ctx)
    }

    fn anchor(&self, ctx: &RequestContext) -> Option<u8> {
        (**self).anchor(ctx)
    }
}

/// Appends one component of a composite key; `|` separates components, so `|` and `%` inside
/// one are escaped and no two tuples of different values meet in one key.
fn push_component(out: &mut String, part: &str) {
    if !out.is_empty() {
        out.push('|');
    }
    if !part.contains(['|', '%']) {
        out.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '|' => out.push_str("%7C"),
            '%' => out.push_str("%25"),
            c => out.push(c),
        }
    }
}

macro_rules! tuple_resolver {
    ($($name:ident)+) => {
        impl<$($name: KeyResolver),+> KeyResolver for ($($name,)+) {
            #[allow(non_snake_case)]
            fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
                let ($($name,)+) = self;
                let mut out = String::new();
                $( push_component(&mut out, &$name.resolve(ctx)?); )+
                Some(Cow::Owned(out))
            }

            /// The first component's anchor that has one.
            #[allow(non_snake_case)]
            fn anchor(&self, ctx: &RequestContext) -> Option<u8> {
                let ($($name,)+) = self;
                None $( .or_else(|| $name.anchor(ctx)) )+
            }

        }
    };
}

tuple_resolver!(A B);
tuple_resolver!(A B C);
tuple_resolver!(A B C D);

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> RequestContext {
        RequestContext::new()
            .with_path("/users/1")
            .with_route("/users/{id}")
            .with_peer("198.51.100.7:4000".parse().unwrap())
            .with_header("x-api-key", "abc")
            .with_extension(Principal("alice".into()))
    }

    #[test]
    fn built_ins_read_the_context() {
        let c = ctx();
        assert_eq!(Uri.resolve(&c).as_deref(), Some("/users/1"));
        assert_eq!(Route.resolve(&c).as_deref(), Some("/users/{id}"));
        assert_eq!(Ip.resolve(&c).as_deref(), Some("198.51.100.7"));
        assert_eq!(IpUri.resolve(&c).as_deref(), Some("198.51.100.7|/users/1"));
        assert_eq!(Header("x-api-key").resolve(&c).as_deref(), Some("abc"));
        assert_eq!(Header("x-missing").resolve(&c), None);
        assert_eq!(User.resolve(&c).as_deref(), Some("alice"));
        assert_eq!(
            Global.resolve(&RequestContext::new()).as_deref(),
            Some("global")
        );
        assert_eq!(
            (User, Route).resolve(&c).as_deref(),
            Some("alice|/users/{id}")
        );
    }

    #[test]
    fn missing_parts_give_no_key() {
        let empty = RequestContext::new();
        for r in [&Uri as &dyn KeyResolver, &Route, &Ip, &IpUri, &User] {
            assert_eq!(r.resolve(&empty), None);
        }
        assert_eq!((Global, Uri).resolve(&empty), None);
    }

    #[test]
    fn composite_keys_cannot_collide() {
        let a = RequestContext::new()
            .with_path("a|b")
            .with_extension(Principal("c".into()));
        let b = RequestContext::new()
            .with_path("a")
            .with_extension(Principal("b|c".into()));
        assert_ne!((Uri, User).resolve(&a), (Uri, User).resolve(&b));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(Ip::key_of(a, 64), Ip::key_of(b, 64));
        assert_eq!(Ip::key_of(a, 64), "2001:db8:1:2::/64");
        assert_eq!(Ip::key_of(a, 48), "2001:db8:1::/48");
        assert_ne!(Ip::key_of(a, 128), Ip::key_of(b, 128));
        assert_eq!(
            Ip::key_of("::ffff:192.0.2.1".parse().unwrap(), 64),
            "192.0.2.1"
        );
        let c = RequestContext::new()
            .with_peer("[2001:db8:1:2:aaaa::1]:5".parse().unwrap())
            .with_ipv6_prefix(56);
        assert_eq!(Ip.resolve(&c).as_deref(), Some("2001:db8:1::/56"));
        // A context told it has no client address has no client key.
        assert_eq!(Ip.resolve(&c.with_client_ip(None)), None);
    }

    #[test]
    fn headers_are_keyed_by_their_text_else_by_bytes() {
        let key = |bytes: &[u8]| {
            let mut headers = http::HeaderMap::new();
            headers.insert("x-k", http::HeaderValue::from_bytes(bytes).unwrap());
            let c = RequestContext::new().with_headers(headers);
            Header("x-k").resolve(&c).map(Cow::into_owned)
        };
        assert_eq!(key("café 🔑".as_bytes()).as_deref(), Some("café 🔑"));
        assert_eq!(key(b"caf\xe9").as_deref(), Some("\u{fffd}636166e9"));
        assert_eq!(key(b"\xff\xfe").as_deref(), Some("\u{fffd}fffe"));
        // A text that looks like the marker is keyed by its bytes too: it cannot meet one.
        let lookalike = key("\u{fffd}fffe".as_bytes()).unwrap();
        assert_eq!(lookalike, "\u{fffd}efbfbd66666665");
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings_of_one_path_share_a_key() {
        for spelling in [
            "/uri/victim",
            "/uri/%76ictim",
            "/uri/v%69ctim",
            "/uri/%76%69%63%74%69%6d",
            "/uri/%76%69%63%74%69%6D",
            "/uri//victim",
            "//uri/victim",
            "/uri/./victim",
            "/uri/%2e/victim",
            "/uri/x/../victim",
            "/uri/x/%2E%2E/victim",
            "/../uri/victim",
            "/uri%2Fvictim",
            "%2Furi%2fvictim",
            "/uri/x%2F..%2Fvictim",
        ] {
            assert_eq!(normalize_path(spelling), "/uri/victim", "{spelling}");
        }
    }

    #[test]
    fn distinct_paths_keep_distinct_keys() {
        let paths = [
            "/uri/victim",
            "/uri/victim/",
            "/uri/Victim",
            "/uri/victim/x",
            "/uri/victim%252Fx",
            "/uri/vict%20im",
            "/uri/vict+im",
            "/uri",
            "/",
            "",
        ];
        let keys: std::collections::HashSet<String> = paths
            .iter()
            .map(|p| normalize_path(p).into_owned())
            .collect();
        assert_eq!(keys.len(), paths.len(), "{keys:?}");
        // Escapes of other bytes are upper-cased; a bare `%` is data.
        assert_eq!(normalize_path("/a%2fb%c3%a9"), "/a/b%C3%A9");
        assert_eq!(normalize_path("/100%"), "/100%25");
        assert_eq!(normalize_path("/100%25"), "/100%25");
        assert_eq!(normalize_path("/a/b/.."), "/a/");
        assert_eq!(normalize_path("/a/b/."), "/a/b/");
    }

    #[test]
    fn the_uri_resolver_normalises() {
        let ctx = RequestContext::new().with_path("/uri/%76ictim");
        assert_eq!(Uri.resolve(&ctx).as_deref(), Some("/uri/victim"));
        let ctx = RequestContext::new().with_path("/users/1");
        assert!(
            matches!(Uri.resolve(&ctx), Some(Cow::Borrowed(_))),
            "no copy"
        );
    }

    /// Bytes of a path: the characters that matter to the format, escapes, separators, dots.
    fn path() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                Just("/".to_owned()),
                Just(".".to_owned()),
                Just("%".to_owned()),
                Just("%2e".to_owned()),
                Just("%2F".to_owned()),
                Just("%252F".to_owned()),
                Just("%41".to_owned()),
                "[a-zA-Z0-9]{1,3}",
                "[%!$&'()*+,;=:@ ~é]",
            ],
            0..12,
        )
        .prop_map(|parts| parts.concat())
    }

    /// The decoded segments a wildcard route hands a handler (`%2F` decoded to `/` as well),
    /// after dot-segment removal: what two paths must agree on to be one resource.
    fn resource(path: &str) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(path).collect();
        for d in decoded.split(|&b| b == b'/') {
            match d {
                b"" | b"." => {}
                b".." => {
                    out.pop();
                }
                _ => out.push(d.to_vec()),
            }
        }
        out
    }

    proptest! {
        /// Normalising is idempotent, borrows only when nothing changes, and two paths share
        /// a key exactly when they name one resource (and agree on a trailing `/`).
        #[test]
        fn one_key_per_resource(a in path(), b in path()) {
            let na = normalize_path(&a);
            prop_assert_eq!(normalize_path(&na), na.clone());
            if matches!(na, Cow::Borrowed(_)) {
                prop_assert_eq!(&na, &a);
            }
            prop_assert_eq!(resource(&na), resource(&a));
            let nb = normalize_path(&b);
            if resource(&a) != resource(&b) {
                prop_assert_ne!(na, nb);
            }
        }
    }
}
