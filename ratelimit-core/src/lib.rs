//! Runtime of [redis-ratelimit](https://docs.rs/redis-ratelimit): token buckets in Redis
//! (one atomic Lua script per decision, on the server's clock) or in memory, with the same
//! exact arithmetic. Most users depend on the `redis-ratelimit` facade instead.
//!
//! ```
//! use ratelimit_core::{Limit, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ratelimit_core::Error> {
//! let limiter = RateLimiter::builder().memory().prefix("app").build().await?;
//! let limit = Limit::per_minute(3).burst(2);
//! assert!(limiter.check("user:42", &limit).await?.allowed);
//! assert!(limiter.check("user:42", &limit).await?.allowed);
//! let third = limiter.check("user:42", &limit).await?;
//! assert!(!third.allowed);
//! assert_eq!(third.retry_after.as_secs_f64().ceil(), 20.0); // one token every 20 s
//! # Ok(()) }
//! ```
//!
//! # What is where
//!
//! The root holds what a service writes every day: the limiter ([`RateLimiter`],
//! [`RateLimiterBuilder`]), the limit ([`Limit`], [`Unit`], [`Algorithm`], [`Refill`]), the
//! answer ([`Decision`], [`Source`], [`RateLimited`], [`Error`]), the keys ([`KeyResolver`],
//! [`RequestContext`] and the built-in resolvers), the policies ([`FailurePolicy`],
//! [`EmptyKeyPolicy`]), the proxies to trust ([`TrustedProxies`], [`ClientIpHeader`]), the
//! HTTP integrations (`RateLimitLayer` with the `axum` feature, `RateLimitMiddleware` with
//! `actix-web`) and the declared limits ([`LimitDeclaration`], [`declared_limits`],
//! [`validate_declared_limits`], [`reload_overrides`]). The three macros that expand onto this crate,
//! [`#[rate_limit]`](https://docs.rs/redis-ratelimit/latest/redis_ratelimit/attr.rate_limit.html),
//! [`enable_redis_rate_limit!`](https://docs.rs/redis-ratelimit/latest/redis_ratelimit/macro.enable_redis_rate_limit.html)
//! and [`layer_limit!`](https://docs.rs/redis-ratelimit/latest/redis_ratelimit/macro.layer_limit.html),
//! live in `ratelimit-macros`; users reach them, with this crate, through the
//! `redis-ratelimit` facade. Everything else has one path, in its module:
//!
//! | module | what it holds |
//! |---|---|
//! | [`clock`] | time sources of the memory store: [`clock::ManualClock`] for tests |
//! | [`context`] | running code under a request's context without the HTTP integrations ([`context::scope`]), and what was decided in it |
//! | [`defaults`] | the values used when nothing else is said (prefix, Redis URL, deadline, ...) |
//! | [`enable`] | what `enable_redis_rate_limit!` expands to, for programs that build their options themselves |
//! | [`error`] | the errors of building a limit and of reading its words, which [`Error`] wraps |
//! | [`headers`] | the response headers: which families to send, their names, a refusal's response |
//! | [`http`] | the services the HTTP integrations (features `axum`, `actix-web`) wrap handlers in, and a layer's own limits ([`http::LayerLimit`], built at run time by [`http::LayerLimit::new`]) |
//! | [`key`] | what the built-in resolvers read and how they normalise it |
//! | [`observe`] | the tracing span and metrics every decision produces |
//! | [`overrides`] | quotas changed without a rebuild: the override file and environment |
//! | [`store`] | where buckets live: [`store::RedisStore`], [`store::MemoryStore`], the [`store::Store`] trait |
//! | [`tools`] | for tools that read what limiters keep in Redis (unstable) |
//!
//! Each algorithm's decision in exact integer arithmetic, the form of its stored state and its
//! script's arguments are the `ratelimit-algorithms` crate's, which the CLI shares and a Redis
//! module can use without this crate; this crate runs them in the memory store, sends their
//! scripts to Redis, and makes them public, with their scripts and the parameters of a
//! [`Limit`], in [`tools::algorithms`].

#[doc(hidden)]
pub mod __private;
mod algorithm;
mod async_key;
mod client_ip;
pub mod clock;
mod decision;
mod deny_cache;
mod errors;
mod fleet;
pub mod headers;
#[cfg(feature = "http-framework")]
pub mod http;
mod limit;
mod limiter;
mod naming;
pub mod observe;
pub mod overrides;
mod pipeline;
mod policy;
mod registry;
mod request;
mod resolvers;
mod startup;
pub mod store;
pub mod tools;

pub use client_ip::{ClientIpHeader, TrustedProxies};
pub use decision::{Decision, Source};
pub use errors::Error;
#[cfg(feature = "actix-web")]
pub use http::actix::RateLimitMiddleware;
#[cfg(feature = "axum")]
pub use http::axum::RateLimitLayer;
pub use limit::{Algorithm, EmptyKeyPolicy, FailurePolicy, Limit, Refill, Tier, Unit};
pub use limiter::{Entered, RateLimiter, RateLimiterBuilder, Settlement, Slot, Usage};
pub use pipeline::verdict::RateLimited;
pub use registry::{LimitDeclaration, declared_limits, validate_declared_limits};
pub use request::RequestContext;
pub use resolvers::{Global, Header, Ip, IpUri, KeyResolver, Route, Uri, User};
pub use startup::reload_overrides;

pub mod context {
    //! Running code under a request's context without the HTTP integrations (tests, other
    //! frameworks, jobs): [`scope`] makes a [`RequestContext`](crate::RequestContext) the one
    //! the limited functions called within see, and [`scope_returning`] gives back with the
    //! output the verdict of the calls made in it ([`Recorded`]). The context is request data
    //! only: nothing a call decides is written into it.
    pub use crate::pipeline::scope::{scope, scope_returning};
    pub use crate::pipeline::verdict::Recorded;
}

pub mod defaults {
    //! The values used when nothing else is said.
    pub use crate::deny_cache::DEFAULT_DENY_CACHE_CAPACITY;
    pub use crate::limit::{DEFAULT_LEASE, MAX_CONCURRENT, MAX_RUN_TIME_TIER_NAMES};
    pub use crate::limiter::DEFAULT_PREFIX;
    pub use crate::policy::{DEFAULT_COOLDOWN, DEFAULT_DEADLINE};
    pub use crate::startup::DEFAULT_REDIS_URL;
    pub use crate::store::memory::DEFAULT_MAX_KEYS;
}

pub mod enable {
    //! The global limiter the `#[rate_limit]` functions use, built as
    //! `enable_redis_rate_limit!(..)` builds it: [`enable`] with [`EnableOptions`], for a program
    //! that computes its options (a builder of its own, a config file's path) rather than writing
    //! them in the macro.
    pub use crate::startup::{EnableOptions, enable};
}

pub mod error {
    //! The errors of building a [`Limit`](crate::Limit) or a [`Tier`](crate::Tier)
    //! ([`InvalidLimit`]) and of reading a limit's words (`"minute".parse::<Unit>()`), each
    //! wrapped by [`Error`](crate::Error) where an operation fails with one.
    pub use crate::limit::{InvalidLimit, UnknownAlgorithm, UnknownRefill, UnknownUnit};
}

pub mod key {
    //! What the built-in [`KeyResolver`](crate::KeyResolver)s read: the [`Principal`] that
    //! [`User`](crate::User) finds in a request's extensions, and the path as
    //! [`Uri`](crate::Uri) keys it ([`normalize_path`]); and resolvers that await
    //! ([`AsyncKeyResolver`]).
    pub use crate::async_key::{AsyncKeyResolver, ResolveError};
    pub use crate::resolvers::{Principal, normalize_path};
}
