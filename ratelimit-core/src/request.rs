//! The request a call serves, as seen by key resolvers: set per request by the HTTP layer, or
//! by [`scope`] for calls that are not HTTP requests (jobs, gRPC, tests).

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use http::{Extensions, HeaderMap, Method};

use crate::decision::{Label, Names, named_parts, shown_parts};
use crate::headers::HeaderFamilies;
use crate::limit::TierName;
use crate::{Decision, KeyResolver};

tokio::task_local! {
    pub(crate) static CONTEXT: Scope;
}

/// What a request scope holds: the request as key resolvers see it, read-only; who serves it
/// and the header families its responses carry; and, apart, the verdict of the calls made in
/// it, which the HTTP layer renders as headers once the handler returns.
pub(crate) struct Scope {
    pub(crate) ctx: RequestContext,
    origin: Origin,
    families: Option<HeaderFamilies>,
    verdict: Cell<Option<Recorded>>,
    /// The limits of the layers serving the request, when they have any.
    #[cfg(any(feature = "axum", feature = "actix-web"))]
    pub(crate) layer: Option<crate::http::layered::LayerScope>,
}

impl Scope {
    /// A scope for `ctx`, built by a caller of [`scope`].
    pub(crate) fn new(ctx: RequestContext) -> Scope {
        Scope {
            ctx,
            origin: Origin::Scope,
            families: None,
            verdict: Cell::new(None),
            #[cfg(any(feature = "axum", feature = "actix-web"))]
            layer: None,
        }
    }

    /// A scope for `ctx`, built by an HTTP integration configured to send `families`.
    #[cfg_attr(not(any(feature = "axum", feature = "actix-web")), allow(dead_code))]
    pub(crate) fn served_by(
        ctx: RequestContext,
        origin: Origin,
        families: HeaderFamilies,
    ) -> Scope {
        Scope {
            origin,
            families: Some(families),
            ..Scope::new(ctx)
        }
    }

    /// Records the verdict of a call made in this scope (the last call's stands).
    pub(crate) fn record(&self, label: Label, decision: Decision, names: Option<Names>) {
        self.verdict.set(Some(Recorded {
            name: label.name,
            decision,
            names,
            tier: label.tier,
        }));
    }

    /// The verdict recorded, taken out.
    pub(crate) fn take_verdict(&self) -> Option<Recorded> {
        self.verdict.take()
    }
}

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
    /// [`scope`] or [`scope_returning`], with a context the caller built.
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

/// The verdict of the last limited call made in a scope: what the response headers describe.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// The limit's name (of several, the tightest's: see [`Decision::tightest`]).
    pub name: &'static str,
    /// What it decided.
    pub decision: Decision,
    /// Every limit's name, when there are several.
    names: Option<Names>,
    /// The tier the call was given (of several limits, the tightest's).
    tier: Option<TierName>,
}

impl Recorded {
    /// Each limit of the call, by name, with its own decision: one, unless the call was
    /// decided under several limits.
    pub fn parts(&self) -> impl Iterator<Item = (&'static str, &Decision)> {
        let one = self.name;
        named_parts(&self.decision, self.names.as_ref())
            .map(move |(label, d)| (label.map_or(one, |l| l.name), d))
    }

    /// The [tier](crate::Tier) the call was given, if any (of several limits, the
    /// tightest's): the policy the response headers name, `name[tier]`. A constant's name or
    /// one built at run time ([`Tier::try_new`](crate::Tier::try_new)), borrowed from the
    /// verdict.
    pub fn tier(&self) -> Option<&str> {
        match &self.names {
            Some(names) => names.tightest(&self.decision).tier.as_ref(),
            None => self.tier.as_ref(),
        }
        .map(TierName::as_str)
    }

    /// Each limit of the call under the name it is described to clients with
    /// (`name[tier]` for a call given a tier).
    #[cfg_attr(not(any(feature = "axum", feature = "actix-web")), allow(dead_code))]
    pub(crate) fn shown_parts(
        &self,
    ) -> impl Iterator<Item = (std::borrow::Cow<'_, str>, &Decision)> {
        shown_parts(
            &self.decision,
            self.names.as_ref(),
            Some(self.name),
            self.tier.as_ref(),
            "rate-limit",
        )
    }
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

/// Runs `future` with `ctx` as the current request context: the `#[rate_limit]` functions it
/// calls resolve their keys from `ctx`. Returns the future's output alone;
/// [`scope_returning`] also gives the verdict of the calls made in it.
pub async fn scope<F: Future>(ctx: RequestContext, future: F) -> F::Output {
    CONTEXT.scope(Scope::new(ctx), future).await
}

/// Like [`scope`], and returns with the future's output the verdict of the last limited
/// call made in it (what the HTTP layer renders as the response's headers), if any.
pub async fn scope_returning<F: Future>(
    ctx: RequestContext,
    future: F,
) -> (F::Output, Option<Recorded>) {
    let mut fut = std::pin::pin!(CONTEXT.scope(Scope::new(ctx), future));
    let output = (&mut fut).await;
    let verdict = fut.as_mut().take_value().and_then(|s| s.take_verdict());
    (output, verdict)
}

/// Calls `f` with the current request context and its scope, or outside any scope with an
/// empty context and `None`: only a scope's verdict is read after the call, so only there is
/// a decision recorded.
pub(crate) fn with_current<R>(mut f: impl FnMut(&RequestContext, Option<&Scope>) -> R) -> R {
    // One task-local lookup in a scope; outside one, this thread's empty context rather than
    // a new one built and dropped on every call. `try_with` runs its closure only when it
    // succeeds, so `f` runs exactly once.
    if let Ok(r) = CONTEXT.try_with(|scope| f(&scope.ctx, Some(scope))) {
        return r;
    }
    if let Ok(r) = EMPTY.try_with(|ctx| f(ctx, None)) {
        return r;
    }
    // This thread is being torn down: a context of its own for the last calls.
    f(&RequestContext::default(), None)
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

/// Records `decision` in the current scope's verdict for the response headers; outside a
/// scope no one reads it, so nothing is recorded (callers that know they are outside one,
/// from [`with_current`], need not call this at all).
pub(crate) fn record_current(label: Label, decision: Decision, names: Option<Names>) {
    let _ = CONTEXT.try_with(|scope| scope.record(label, decision, names));
}

/// The header families a rejection's response carries: those of the integration serving the
/// current request, or every family outside one, since nothing chose otherwise. Served by an
/// integration, the rejection takes the scope's verdict with it: its response describes the
/// call already, so the integration renders no headers a second time.
#[cfg_attr(not(any(feature = "axum", feature = "actix-web")), allow(dead_code))]
pub(crate) fn rendering_rejection() -> HeaderFamilies {
    CONTEXT
        .try_with(|scope| {
            scope.families.inspect(|_| {
                scope.verdict.take();
            })
        })
        .ok()
        .flatten()
        .unwrap_or(HeaderFamilies::ALL)
}

/// Why a call found no key, when the cause is how the service is wired rather than the
/// request itself (a request without the header `Header` reads is normal: the empty-key
/// policy answers it, and nothing is wrong to log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingPiece {
    /// The call runs outside any request context: no layer, no middleware, no [`scope`].
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

/// The misconfiguration that made `key` find no key in the current context, if that is why.
pub(crate) fn missing_piece<K: KeyResolver + ?Sized>(key: &K) -> Option<MissingPiece> {
    CONTEXT
        .try_with(|scope| {
            if scope.ctx.peer.is_some() {
                return None;
            }
            // Would the key resolve with a peer? Then the missing peer is why it did not.
            let probe = scope
                .ctx
                .clone()
                .with_peer(SocketAddr::from(([192, 0, 2, 1], 0)));
            key.resolve(&probe)
                .is_some()
                .then_some(MissingPiece::Peer(scope.origin))
        })
        .unwrap_or(Some(MissingPiece::Context))
}

thread_local! {
    /// The context of calls made outside any scope: empty, and never written.
    static EMPTY: RequestContext = RequestContext::default();
    /// The limit whose key this thread is resolving ([`resolving`]).
    static HANDLER: Cell<Option<&'static str>> = const { Cell::new(None) };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A rejection rendered for an HTTP integration takes the verdict with it, so that the
    /// integration renders the call's headers once; in a caller's own scope the verdict stays
    /// for `scope_returning`.
    #[test]
    fn a_rejection_rendered_for_an_integration_takes_the_verdict() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let decision = || {
            Decision::new(
                false,
                0,
                crate::Limit::per_second(1),
                1,
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(1),
            )
        };
        let families = HeaderFamilies::ALL.without_spring();
        let served = Scope::served_by(RequestContext::new(), Origin::Axum, families);
        let (rendered, left) = runtime.block_on(CONTEXT.scope(served, async {
            record_current(Label::of("t::served"), decision(), None);
            let rendered = rendering_rejection();
            (rendered, CONTEXT.with(Scope::take_verdict))
        }));
        assert_eq!((rendered, left), (families, None));

        let (rendered, left) = runtime.block_on(scope_returning(RequestContext::new(), async {
            record_current(Label::of("t::own"), decision(), None);
            rendering_rejection()
        }));
        assert_eq!(rendered, HeaderFamilies::ALL);
        assert_eq!(left.unwrap().name, "t::own");
    }
}
