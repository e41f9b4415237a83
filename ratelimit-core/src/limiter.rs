//! The rate limiter: key naming, cost validation and the store call.

use std::fmt;
use std::sync::Arc;

use crate::naming::bucket_key;
use crate::store::DynStore;
use crate::{Decision, Error, Limit, MemoryStore, RedisStore, Store};

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
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    prefix: Box<str>,
}

enum Backend {
    Memory(MemoryStore),
    Redis(RedisStore),
    Custom(Box<dyn DynStore>),
}

impl RateLimiter {
    /// Starts configuring a limiter.
    pub fn builder() -> RateLimiterBuilder {
        RateLimiterBuilder::default()
    }

    /// Takes one token from `key`'s bucket if it has one.
    ///
    /// # Errors
    /// [`Error::CostExceedsBurst`] never here (cost 1); store errors such as [`Error::Redis`].
    pub async fn check(&self, key: &str, limit: &Limit) -> Result<Decision, Error> {
        self.check_n(key, limit, 1).await
    }

    /// Takes `cost` tokens from `key`'s bucket if it has that many.
    ///
    /// # Errors
    /// [`Error::ZeroCost`], [`Error::CostExceedsBurst`] (such a call could never pass), or the
    /// store's error.
    pub async fn check_n(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        validate_cost(limit, cost)?;
        let bucket = bucket_key(&self.inner.prefix, None, key);
        self.decide(&bucket, limit, cost).await
    }

    /// Takes `cost` tokens from the bucket of `key` under the limit called `name` (what
    /// `#[rate_limit]` calls): each name has its own buckets.
    ///
    /// # Errors
    /// As [`check_n`](RateLimiter::check_n).
    pub async fn check_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Decision, Error> {
        validate_cost(limit, cost)?;
        let bucket = bucket_key(&self.inner.prefix, Some(name), key);
        self.decide(&bucket, limit, cost).await
    }

    /// The store key of `key`'s bucket (for operators: `redis-cli PTTL <key>`).
    pub fn bucket_key(&self, key: &str) -> String {
        bucket_key(&self.inner.prefix, None, key)
    }

    /// The store key of `key`'s bucket under the limit called `name`.
    pub fn named_bucket_key(&self, name: &str, key: &str) -> String {
        bucket_key(&self.inner.prefix, Some(name), key)
    }

    /// The prefix of every key this limiter writes.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    async fn decide(&self, bucket: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        match &self.inner.backend {
            Backend::Memory(s) => Ok(s.check_now(bucket, limit, cost)),
            Backend::Redis(s) => s.check(bucket, limit, cost).await,
            Backend::Custom(s) => s.check_dyn(bucket, limit, cost).await,
        }
    }
}

fn validate_cost(limit: &Limit, cost: u32) -> Result<(), Error> {
    if cost == 0 {
        return Err(Error::ZeroCost);
    }
    if cost > limit.burst_capacity() {
        return Err(Error::CostExceedsBurst {
            cost,
            limit: *limit,
        });
    }
    Ok(())
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = match &self.inner.backend {
            Backend::Memory(s) => format!("{s:?}"),
            Backend::Redis(s) => format!("{s:?}"),
            Backend::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("RateLimiter")
            .field("prefix", &self.inner.prefix)
            .field("store", &store)
            .finish()
    }
}

/// Configures a [`RateLimiter`]; see [`RateLimiter::builder`].
#[derive(Default)]
#[must_use]
pub struct RateLimiterBuilder {
    store: Option<StoreChoice>,
    prefix: Option<String>,
}

enum StoreChoice {
    RedisUrl(String),
    Ready(Backend),
}

/// The prefix when none is given.
pub const DEFAULT_PREFIX: &str = "ratelimit";

impl RateLimiterBuilder {
    /// Keep buckets in the Redis at `url` (`redis://host:port/db`, `rediss://` for TLS).
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.store = Some(StoreChoice::RedisUrl(url.into()));
        self
    }

    /// Keep buckets in a connected [`RedisStore`].
    pub fn redis_store(mut self, store: RedisStore) -> Self {
        self.store = Some(StoreChoice::Ready(Backend::Redis(store)));
        self
    }

    /// Keep buckets in this process's memory (one process only: not shared between instances).
    pub fn memory(self) -> Self {
        self.memory_store(MemoryStore::new())
    }

    /// Keep buckets in this [`MemoryStore`] (with its own clock or bound).
    pub fn memory_store(mut self, store: MemoryStore) -> Self {
        self.store = Some(StoreChoice::Ready(Backend::Memory(store)));
        self
    }

    /// Keep buckets in a store of your own.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(StoreChoice::Ready(Backend::Custom(Box::new(store))));
        self
    }

    /// Prefix every key with `prefix` (default [`DEFAULT_PREFIX`]), so that services sharing
    /// one Redis never share buckets.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Connects (for Redis) and returns the limiter.
    ///
    /// # Errors
    /// [`Error::NoStore`], [`Error::InvalidPrefix`], and the Redis connection errors of
    /// [`RedisStore::connect`].
    pub async fn build(self) -> Result<RateLimiter, Error> {
        let prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        if prefix.contains(['{', '}']) {
            return Err(Error::InvalidPrefix(prefix));
        }
        let backend = match self.store.ok_or(Error::NoStore)? {
            StoreChoice::RedisUrl(url) => Backend::Redis(RedisStore::connect(&url).await?),
            StoreChoice::Ready(backend) => backend,
        };
        Ok(RateLimiter {
            inner: Arc::new(Inner {
                backend,
                prefix: prefix.into_boxed_str(),
            }),
        })
    }
}

impl fmt::Debug for RateLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = match &self.store {
            None => "none",
            Some(StoreChoice::RedisUrl(_)) => "redis",
            Some(StoreChoice::Ready(Backend::Redis(_))) => "redis",
            Some(StoreChoice::Ready(Backend::Memory(_))) => "memory",
            Some(StoreChoice::Ready(Backend::Custom(_))) => "custom",
        };
        f.debug_struct("RateLimiterBuilder")
            .field("store", &store)
            .field("prefix", &self.prefix)
            .finish()
    }
}
