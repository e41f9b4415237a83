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

#[doc(hidden)]
pub mod __private;
mod algorithm;
mod client_ip;
pub mod clock;
mod context;
mod decision;
mod deny_cache;
mod enable;
mod error;
mod fleet;
pub mod headers;
#[cfg(any(feature = "axum", feature = "actix-web"))]
pub mod http;
mod key;
mod limit;
mod limiter;
mod naming;
pub mod observe;
pub mod overrides;
mod policy;
mod registry;
pub mod store;
pub mod tools;

pub use client_ip::{ClientIpHeader, TrustedProxies};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use context::{Recorded, RequestContext, scope, scope_returning};
pub use decision::{Decision, RateLimited, Source};
pub use deny_cache::DEFAULT_DENY_CACHE_CAPACITY;
pub use enable::{DEFAULT_REDIS_URL, EnableOptions, enable, reload_overrides};
pub use error::Error;
#[cfg(feature = "actix-web")]
pub use http::actix::RateLimitMiddleware;
#[cfg(feature = "axum")]
pub use http::axum::RateLimitLayer;
pub use key::{
    Global, Header, Ip, IpUri, KeyResolver, Principal, Route, Uri, User, normalize_path,
};
pub use limit::{
    Algorithm, InvalidLimit, Limit, Refill, Unit, UnknownAlgorithm, UnknownRefill, UnknownUnit,
};
pub use limiter::{DEFAULT_PREFIX, RateLimiter, RateLimiterBuilder};
pub use naming::MAX_PART_LEN;
pub use policy::{DEFAULT_COOLDOWN, DEFAULT_DEADLINE, EmptyKeyPolicy, FailurePolicy};
pub use registry::{Effective, LimitDeclaration, declared_limits};
pub use store::{MemoryStore, RedisStore, Store};
