//! Distributed rate limiting for async Rust services.
//!
//! Every instance of a service shares one token bucket per (limit, key) in Redis, decided by
//! one atomic Lua script on the Redis server's clock (microsecond precision; the callers'
//! clocks never matter). The same arithmetic runs in memory for single processes and tests.
//!
//! ```
//! use redis_ratelimit::{Limit, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redis_ratelimit::Error> {
//! // `.redis("redis://127.0.0.1:6379")` shares the buckets between processes.
//! let limiter = RateLimiter::builder().memory().prefix("app").build().await?;
//! let limit = Limit::per_second(10).burst(20);
//! let decision = limiter.check("user:42", &limit).await?;
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 19);
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
//! `actix-web`), the declared limits ([`LimitDeclaration`], [`declared_limits`],
//! [`reload_overrides`]) and the two macros ([`rate_limit`], [`enable_redis_rate_limit!`]).
//! Everything else has one path, in its module:
//!
//! | module | what it holds |
//! |---|---|
//! | [`clock`] | time sources of the memory store: [`clock::ManualClock`] for tests |
//! | [`context`] | running code under a request's context without the HTTP integrations ([`context::scope`]), and what was decided in it |
//! | [`defaults`] | the values used when nothing else is said (prefix, Redis URL, deadline, ...) |
//! | [`enable`] | what `enable_redis_rate_limit!` expands to, for programs that build their options themselves |
//! | [`error`] | the errors of building a limit and of reading its words, which [`Error`] wraps |
//! | [`headers`] | the response headers: which families to send, their names, a refusal's response |
//! | `http` (features `axum`, `actix-web`) | the services the HTTP integrations wrap handlers in |
//! | [`key`] | what the built-in resolvers read and how they normalise it |
//! | [`observe`] | the tracing span and metrics every decision produces |
//! | [`overrides`] | quotas changed without a rebuild: the override file and environment |
//! | [`store`] | where buckets live: [`store::RedisStore`], [`store::MemoryStore`], the [`store::Store`] trait |
//! | [`tools`] | for tools that read what limiters keep in Redis (unstable) |

pub use ratelimit_core::*;
pub use ratelimit_macros::{enable_redis_rate_limit, layer_limit, rate_limit};

/// Every fenced code block of the README and the docs is compiled (and run, unless marked
/// `no_run`) by `cargo test --doc`, so the documentation cannot drift from the API.
#[cfg(all(doctest, feature = "axum", feature = "actix-web"))]
mod documentation {
    #[doc = include_str!("../README.md")]
    struct Readme;

    #[doc = include_str!("../docs/guide.md")]
    struct Guide;

    #[doc = include_str!("../docs/algorithms.md")]
    struct Algorithms;

    #[doc = include_str!("../docs/operations.md")]
    struct Operations;

    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;
}
