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

mod bucket;
pub mod clock;
mod decision;
mod error;
mod limit;
mod limiter;
mod naming;
pub mod store;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use decision::{Decision, RateLimited};
pub use error::Error;
pub use limit::{InvalidLimit, Limit, Unit, UnknownUnit};
pub use limiter::{DEFAULT_PREFIX, RateLimiter, RateLimiterBuilder};
pub use naming::MAX_PART_LEN;
pub use store::{MemoryStore, RedisStore, Store};
