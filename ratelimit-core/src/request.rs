//! The request a call serves, as seen by key resolvers, read-only: set per request by the HTTP
//! layer, or by [`scope`](crate::context::scope) for calls that are not HTTP requests (jobs,
//! gRPC, tests). The scope that carries it is the pipeline's (`pipeline/scope.rs`).

use std::cell::Cell;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use http::{Extensions, HeaderMap, Method};

/// What a [`KeyResolver`](crate::KeyResolver) may look at: the limited function's name and,
/// when the call serves a request, its method, path, matched route, headers, peer address and
/// extensions (where authentication middleware puts the user).
///
/// ```
/// use ratelimit_core::{RequestContext, context::scope};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let ctx = RequestContext::new()
///     .with_path("/orders/7")
///     .with_header("x-api-key", "k-123")
///     .with_peer("203.0.113.9:5000".parse().unwrap());
/// scope(ctx, async {
///     // #[rate_limit] functions called here see this context.
/// })
/// .await;
/// # }
/// ```
#[derive(Default, Clone)]
pub struct RequestContext {
    method: Option<Method>,
    path: Option<String>,
    route: Option<String>,
    headers: HeaderMap,
    peer: Option<SocketAddr>,
    client: Client,
    ipv6_prefix: Option<u8>,
    extensions: Extensions,
}

/// Who built a context: decides what a diagnostic tells the user to fix.
#[cfg_attr(not(all(feature = "axum", feature = "actix-web")), allow(dead_code))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Origin {
    /// [`scope`](crate::context::scope) or [`scope_returning`](crate::context::scope_returning),
    /// with a context the caller built.
    #[default]
    Scope,
    /// The axum layer.
    Axum,
    /// The actix-web middleware.
    Actix,
}

/// The client address as established by the HTTP layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Client {
    /// No layer said: the peer is the client.
    #[default]
    Peer,
    /// Behind trusted proxies, this is the client.
    Known(IpAddr),
    /// Whoever built the context said there is no client address.
    Unknown,
}

impl RequestContext {
    /// An empty context: no request, only what the builder methods add.
    pub fn new() -> RequestContext {
        RequestContext::default()
    }

    /// With the request's method.
    #[must_use]
    pub fn with_method(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }

    /// With the request's path (without the query).
    #[must_use]
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// With the matched route template (`/users/{id}`).
    #[must_use]
    pub fn with_route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// With all the request's headers.
    #[must_use]
    pub fn with_headers(mut self, headers: HeaderMap) -> Self {
        self.headers = headers;
        self
    }

    /// With one more header.
    ///
    /// # Panics
    /// If `name` or `value` is not a valid header name or value (a programming error in a
    /// test or job; requests arrive with valid headers).
    #[must_use]
    pub fn with_header(mut self, name: &'static str, value: &str) -> Self {
        let value = http::HeaderValue::from_str(value).expect("a valid header value");
        self.headers.append(name, value);
        self
    }

    /// With the peer's socket address.
    #[must_use]
    pub fn with_peer(mut self, peer: SocketAddr) -> Self {
        self.peer = Some(peer);
        self
    }

    /// With the client address established from trusted proxies' headers (the HTTP layers
    /// always establish one); `None` says the call has no client address, so no `Ip` key.
    #[must_use]
    pub fn with_client_ip(mut self, client: Option<IpAddr>) -> Self {
        self.client = client.map_or(Client::Unknown, Client::Known);
        self
    }

    /// With the prefix length that groups IPv6 clients for [`Ip`](crate::Ip) (default 64).
    #[must_use]
    pub fn with_ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = Some(bits.min(128));
        self
    }

    /// With all the request's extensions.
    #[must_use]
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// With one more extension (a [`Principal`](crate::key::Principal), a tenant type of yours).
    #[must_use]
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The name of the limit being checked (`module::function` unless renamed), while its key
    /// is resolved.
    pub fn handler(&self) -> Option<&'static str> {
        HANDLER.get()
    }

    /// The request's method.
    pub fn method(&self) -> Option<&Method> {
        self.method.as_ref()
    }

    /// The request's path, without the query.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The matched route template.
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    /// The request's headers (empty outside a request).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The peer's address.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The client's address: the one established behind trusted proxies, else the peer's.
    pub fn client_ip(&self) -> Option<IpAddr> {
        match self.client {
            Client::Peer => self.peer.map(|p| p.ip()),
            Client::Known(ip) => Some(ip),
            Client::Unknown => None,
        }
    }

    /// The prefix length that groups IPv6 clients (default 64).
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix.unwrap_or(64)
    }

    /// The request's extensions.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestContext")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("route", &self.route)
            .field("headers", &self.headers.len())
            .field("peer", &self.peer)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// Runs `resolve` with `name` as the limit whose key is being resolved
/// ([`RequestContext::handler`]): what the call is, beside the request it serves, without
/// writing into the request's context.
pub(crate) fn resolving<R>(name: &'static str, resolve: impl FnOnce() -> R) -> R {
    struct Restore(Option<&'static str>);
    impl Drop for Restore {
        fn drop(&mut self) {
            HANDLER.set(self.0);
        }
    }
    let _restore = Restore(HANDLER.replace(Some(name)));
    resolve()
}

/// Why a call found no key, when the cause is how the service is wired rather than the
/// request itself (a request without the header `Header` reads is normal: the empty-key
/// policy answers it, and nothing is wrong to log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingPiece {
    /// The call runs outside any request context: no layer, no middleware, no
    /// [`scope`](crate::context::scope).
    Context,
    /// There is a context, but no peer address, and the key needs one.
    Peer(Origin),
}

impl fmt::Display for MissingPiece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MissingPiece::Context => {
                "it runs outside any request context: add `RateLimitLayer` (axum) or \
                 `RateLimitMiddleware` (actix-web) around the handler, or call it inside \
                 `redis_ratelimit::context::scope(..)`"
            }
            MissingPiece::Peer(Origin::Axum) => {
                "`RateLimitLayer` found no peer address (no `ConnectInfo<SocketAddr>`): serve \
                 the router with `into_make_service_with_connect_info::<SocketAddr>()`"
            }
            MissingPiece::Peer(Origin::Actix) => {
                "`RateLimitMiddleware` found no peer address: the request did not come from a \
                 socket (a test request needs `TestRequest::peer_addr`)"
            }
            MissingPiece::Peer(Origin::Scope) => {
                "its request context has no peer address: add one with \
                 `RequestContext::with_peer`"
            }
        })
    }
}

thread_local! {
    /// The limit whose key this thread is resolving ([`resolving`]).
    static HANDLER: Cell<Option<&'static str>> = const { Cell::new(None) };
}
