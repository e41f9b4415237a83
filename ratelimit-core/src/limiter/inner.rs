//! The limiter's type and what its clones share: the one place every step of the pipeline
//! reads a limiter from (its methods, each a constructor of checks, are the folder's other
//! files).

use std::sync::Arc;

use crate::deny_cache::DenyCache;
use crate::errors::Error;
use crate::fleet::Member;
use crate::limit::EmptyKeyPolicy;
use crate::policy::Resilience;
use crate::store::{DynStore, MemoryStore, RedisStore};

/// Decides whether calls may proceed, against buckets kept in Redis or in memory.
///
/// Cheap to clone: clones share the store.
///
/// ```no_run
/// use ratelimit_core::{Limit, RateLimiter};
///
/// # async fn run() -> Result<(), ratelimit_core::Error> {
/// let limiter = RateLimiter::builder().redis("redis://127.0.0.1:6379").prefix("app").build().await?;
/// let limit = Limit::per_minute(3).burst(300);
/// let d = limiter.check("user:42", &limit).await?;
/// if !d.allowed {
///     println!("retry in {:?}", d.retry_after);
/// }
/// let d = limiter.check_n("user:42", &limit, 5).await?; // takes 5 tokens
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    pub(crate) inner: Arc<Inner>,
}

/// What clones of a limiter share; the pipeline reads it.
pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) prefix: Arc<str>,
    pub(crate) empty_key: EmptyKeyPolicy,
    /// The failure policies, and for a remote store its circuits and deadline.
    pub(crate) resilience: Resilience,
}

/// Where a limiter's decisions are made.
pub(crate) enum Engine {
    /// In this process, at once: nothing in front of the store, nothing to fail.
    Local(MemoryStore),
    /// In a store other processes share, asked through the circuit and the deadline.
    Remote(Remote),
    /// No store yet: calls made before `enable_redis_rate_limit!` are decided by their failure
    /// policy, as if the store were down, on the same path as every other call.
    Unenabled,
}

/// A shared store and what stands around it.
pub(crate) struct Remote {
    pub(crate) store: RemoteStore,
    /// Refusals remembered, so that a flood on an exhausted bucket stays in this process.
    pub(crate) deny_cache: Option<Arc<DenyCache>>,
    /// This process in the fleet sharing the Redis deployment and prefix (Redis only): the
    /// instance count and the resets other instances publish.
    pub(crate) fleet: Option<Arc<Member>>,
}

/// A store other processes share: Redis, or one of the user's own.
pub(crate) enum RemoteStore {
    Redis(RedisStore),
    Custom(Box<dyn DynStore>),
}

/// [`Error::NoRuntime`] unless called within a Tokio runtime.
pub(crate) fn on_tokio() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| Error::NoRuntime)
}
