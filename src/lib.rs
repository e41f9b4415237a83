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
//! # The macros
//!
//! - [`#[rate_limit]`](macro@rate_limit) limits an `async fn`:
//!   `#[rate_limit(replenish = 3, burst = 300, unit = "minute", key = User)]`. Its manual
//!   lists every argument: keys, costs and tiers computed from the call, several limits on one
//!   function, concurrency limits, limits shared by several functions.
//! - [`enable_redis_rate_limit!`] installs, once at startup, the global limiter those
//!   functions use: the Redis URL (or memory), the key prefix, the failure policy, the config
//!   overrides.
//! - [`layer_limit!`] declares a limit that an HTTP layer (`RateLimitLayer`,
//!   `RateLimitMiddleware`) decides for every request it serves.
//!
//! # What is where
//!
//! This crate is the runtime, `ratelimit-core`, re-exported whole under the same paths, and
//! the three macros: the root holds what a service writes every day, and everything else has
//! one path, in its module. [`ratelimit_core`'s "What is where"](ratelimit_core#what-is-where)
//! says which module holds what.

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
