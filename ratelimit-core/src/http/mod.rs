//! HTTP integrations: record each request's [`RequestContext`](crate::RequestContext) for the
//! limited handlers below, and add the rate-limit headers to their responses. The layer and
//! the middleware are at the root ([`RateLimitLayer`](crate::RateLimitLayer),
//! [`RateLimitMiddleware`](crate::RateLimitMiddleware)); this module names the services they
//! wrap handlers in, and the limits of their own they decide for every request
//! ([`LayerLimit`]).

#[cfg(feature = "actix-web")]
pub(crate) mod actix;
#[cfg(feature = "axum")]
pub(crate) mod axum;
pub(crate) mod layered;

#[cfg(feature = "actix-web")]
pub use self::actix::RateLimitActixService;
#[cfg(feature = "axum")]
pub use self::axum::{RateLimitService, ResponseFuture};
pub use crate::pipeline::LayerLimit;
/// The status [`LayerLimit::count`] reads, from the `http` crate (version 1) that axum and
/// [`RequestContext`](crate::RequestContext) use: actix-web's own is of an older version.
pub use ::http::StatusCode;

use std::sync::Arc;

use crate::client_ip::TrustedProxies;
use crate::headers::HeaderFamilies;
use crate::pipeline::layer_scope::Learned;

/// What both integrations are configured with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) proxies: TrustedProxies,
    pub(crate) ipv6_prefix: Option<u8>,
    pub(crate) families: HeaderFamilies,
    /// The limits this layer decides for every request it serves (`limit`).
    pub(crate) limits: Arc<[LayerLimit]>,
    /// The routes whose handlers were seen checking limits of their own.
    pub(crate) learned: Arc<Learned>,
}

/// Builder methods shared by `RateLimitLayer` and `RateLimitMiddleware`.
macro_rules! config_methods {
    () => {
        /// Believe the forwarding header these proxies write (`X-Forwarded-For` unless
        /// [`TrustedProxies::header`]($crate::TrustedProxies::header) chose another) from them
        /// only: the client is the right-most hop in it that is not one of them. None are
        /// trusted by default.
        pub fn trusted_proxies(mut self, proxies: $crate::TrustedProxies) -> Self {
            std::sync::Arc::make_mut(&mut self.config).proxies = proxies;
            self
        }

        /// Group IPv6 clients by this prefix length for [`Ip`]($crate::Ip) (default 64).
        pub fn ipv6_prefix(mut self, bits: u8) -> Self {
            std::sync::Arc::make_mut(&mut self.config).ipv6_prefix = Some(bits);
            self
        }

        /// Which header families to add to limited responses, allowed and refused alike (all
        /// by default): `.headers(HeaderFamilies::ALL.without_spring())`.
        pub fn headers(mut self, families: $crate::headers::HeaderFamilies) -> Self {
            std::sync::Arc::make_mut(&mut self.config).families = families;
            self
        }

        /// Decides `limit` for every request this serves, before the handler runs: refused
        /// with the same 429 and headers as a handler's limit, and decided with the handler's
        /// own `#[rate_limit]` limits in one round trip, all or nothing (see the guide,
        /// "A limit on a whole router"). `limit` is declared with
        /// [`layer_limit!`](https://docs.rs/redis-ratelimit/latest/redis_ratelimit/macro.layer_limit.html),
        /// or built from configuration at run time with
        /// [`LayerLimit::new`]($crate::http::LayerLimit::new): named, listed by
        /// `declared_limits()`, and overridable by its name.
        pub fn limit(mut self, limit: $crate::http::LayerLimit) -> Self {
            let config = std::sync::Arc::make_mut(&mut self.config);
            config.limits = config.limits.iter().cloned().chain([limit]).collect();
            self
        }
    };
}
pub(crate) use config_methods;

impl Config {
    /// Fills the client address and IPv6 grouping of `ctx`, and makes the request's scope,
    /// whose responses send this configuration's header families.
    pub(crate) fn finish(
        &self,
        mut ctx: crate::request::RequestContext,
        origin: crate::request::Origin,
    ) -> crate::pipeline::scope::Scope {
        if let Some(peer) = ctx.peer() {
            let client = self.proxies.client_ip(peer.ip(), ctx.headers());
            ctx = ctx.with_client_ip(Some(client));
        }
        if let Some(bits) = self.ipv6_prefix {
            ctx = ctx.with_ipv6_prefix(bits);
        }
        crate::pipeline::scope::Scope::served_by(ctx, origin, self.families)
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            proxies: TrustedProxies::default(),
            ipv6_prefix: None,
            families: HeaderFamilies::default(),
            limits: Arc::from([]),
            learned: Arc::default(),
        }
    }
}

pub(crate) type SharedConfig = Arc<Config>;

/// How an integration renders its own refusals, when the service chose
/// (`on_rejection`): into its response type `R`. Cheap to clone, as the integration's
/// configuration is.
pub(crate) struct OnRejection<R>(
    Arc<dyn Fn(&crate::pipeline::verdict::RateLimited) -> R + Send + Sync>,
);

impl<R> OnRejection<R> {
    pub(crate) fn new(
        render: impl Fn(&crate::pipeline::verdict::RateLimited) -> R + Send + Sync + 'static,
    ) -> OnRejection<R> {
        OnRejection(Arc::new(render))
    }

    /// The service's response to `rejection`.
    pub(crate) fn render(&self, rejection: &crate::pipeline::verdict::RateLimited) -> R {
        (self.0)(rejection)
    }
}

impl<R> Clone for OnRejection<R> {
    fn clone(&self) -> Self {
        OnRejection(Arc::clone(&self.0))
    }
}

impl<R> std::fmt::Debug for OnRejection<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnRejection(..)")
    }
}

/// The headers of `rejection` as the response to the request being served: its
/// [rate-limit headers](served_rate_limit_headers), and the problem body's content type.
pub(crate) fn served_headers(rejection: &crate::pipeline::verdict::RateLimited) -> http::HeaderMap {
    let mut headers = served_rate_limit_headers(rejection);
    crate::headers::problem_type(&mut headers);
    headers
}

/// The rate-limit headers of `rejection` as the response to the request being served,
/// whatever its body: the families its integration sends, and the limits its layers decided
/// before the refusing check listed before the rejection's own. Taken from the request's
/// scope: the integration renders none over them.
pub(crate) fn served_rate_limit_headers(
    rejection: &crate::pipeline::verdict::RateLimited,
) -> http::HeaderMap {
    let (families, first) = crate::pipeline::scope::rejection_rendering();
    let mut headers = http::HeaderMap::new();
    crate::headers::set_headers_after(
        &mut headers,
        &first,
        rejection.shown_parts(),
        rejection.decision(),
        families,
    );
    headers
}

#[cfg(all(test, feature = "http-framework"))]
pub(crate) mod test_support;
