//! Key resolvers: which bucket a call takes its tokens from (the throttling dimension).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;

use crate::RequestContext;

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
    label = "`key = ..` must implement `KeyResolver`",
    note = "use a built-in resolver (`Uri`, `Route`, `Ip`, `IpUri`, `Header(\"name\")`, `User`, `Global`), a tuple of them, or implement `KeyResolver` for your type"
)]
pub trait KeyResolver: Send + Sync + 'static {
    /// The key of this call, or `None` when it has none (then the empty-key policy applies:
    /// deny by default).
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>>;

    /// A short description for [`declared_limits`](crate::declared_limits) and logs.
    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed(std::any::type_name::<Self>())
    }
}

/// The request's path, without the query: `/orders/1` and `/orders/2` are two buckets.
#[derive(Debug, Clone, Copy, Default)]
pub struct Uri;

impl KeyResolver for Uri {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.path().map(Cow::Borrowed)
    }

    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed("Uri")
    }
}

/// The matched route template: `/users/1` and `/users/2` share the bucket of `/users/{id}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Route;

impl KeyResolver for Route {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        ctx.route().map(Cow::Borrowed)
    }

    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed("Route")
    }
}

/// The client's IP address: the peer's, or behind trusted proxies the one they forwarded
/// (configured on the HTTP layer). IPv6 clients are grouped by their /64 (configurable on the
/// layer): one host usually owns a whole /64, so per-address buckets would be trivially evaded.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ip;

impl Ip {
    /// The client address as keyed: IPv4 as is, IPv6 truncated to `ipv6_prefix` bits.
    pub fn key_of(addr: IpAddr, ipv6_prefix: u8) -> String {
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

    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed("Ip")
    }
}

/// The client's IP and the path together: one bucket per client per path.
#[derive(Debug, Clone, Copy, Default)]
pub struct IpUri;

impl KeyResolver for IpUri {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        (Ip, Uri).resolve(ctx)
    }

    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed("IpUri")
    }
}

/// The value of a request header (an API key, a client id). Values that are not visible
/// ASCII are keyed by their hex bytes behind a marker, so no two values share a bucket.
#[derive(Debug, Clone, Copy)]
pub struct Header(pub &'static str);

impl KeyResolver for Header {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        let value = ctx.headers().get(self.0)?;
        if value.is_empty() {
            return None;
        }
        Some(match value.to_str() {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => {
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

    fn describe(&self) -> Cow<'static, str> {
        Cow::Owned(format!("Header({:?})", self.0))
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

    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed("User")
    }
}

/// One bucket for every caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyResolver for Global {
    fn resolve<'a>(&'a self, _ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        Some(Cow::Borrowed("global"))
    }

    fn describe(&self) -> Cow<'static, str> {
        Cow::Borrowed("Global")
    }
}

impl<K: KeyResolver + ?Sized> KeyResolver for Box<K> {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        (**self).resolve(ctx)
    }

    fn describe(&self) -> Cow<'static, str> {
        (**self).describe()
    }
}

impl<K: KeyResolver + ?Sized> KeyResolver for std::sync::Arc<K> {
    fn resolve<'a>(&'a self, ctx: &'a RequestContext) -> Option<Cow<'a, str>> {
        (**self).resolve(ctx)
    }

    fn describe(&self) -> Cow<'static, str> {
        (**self).describe()
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

            #[allow(non_snake_case)]
            fn describe(&self) -> Cow<'static, str> {
                let ($($name,)+) = self;
                let parts: Vec<Cow<'static, str>> = vec![$($name.describe()),+];
                Cow::Owned(format!("({})", parts.join(", ")))
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
            assert_eq!(r.resolve(&empty), None, "{}", r.describe());
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
        // Behind a trusted proxy that forwarded garbage, there is no client key.
        assert_eq!(Ip.resolve(&c.with_client_ip(None)), None);
    }

    #[test]
    fn non_ascii_headers_are_keyed_by_bytes() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-k", http::HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        let c = RequestContext::new().with_headers(headers);
        assert_eq!(Header("x-k").resolve(&c).as_deref(), Some("\u{fffd}fffe"));
    }
}
