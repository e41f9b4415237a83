//! The rate limiter: key naming, cost validation and the store call.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::decision::Source;
use crate::naming::bucket_key;
use crate::store::DynStore;
use crate::{Decision, Error, Limit, MemoryStore, RedisStore, Store};

/// What a limiter does with a call when its store fails (unreachable, slower than the
/// deadline, erroring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Enforce the same limit in this process's memory until the store is back (default).
    #[default]
    Fallback,
    /// Admit the call (fail open, like Spring Cloud Gateway).
    Allow,
    /// Refuse the call (fail closed, like Envoy's `failure_mode_deny`).
    Deny,
}

impl std::str::FromStr for FailurePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "fallback" => Ok(FailurePolicy::Fallback),
            "allow" => Ok(FailurePolicy::Allow),
            "deny" => Ok(FailurePolicy::Deny),
            other => Err(Error::Config(format!(
                "unknown failure policy `{other}`; expected one of `fallback`, `allow`, `deny`"
            ))),
        }
    }
}

/// What a limiter does with a call whose key resolver found no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EmptyKeyPolicy {
    /// Refuse the call (default, like Spring Cloud Gateway's `denyEmptyKey`).
    #[default]
    Deny,
    /// Admit the call without a check.
    Allow,
}

/// The per-call deadline when none is set.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);

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
    policy: FailurePolicy,
    empty_key: EmptyKeyPolicy,
    deadline: Option<Duration>,
    fallback: OnceLock<MemoryStore>,
    degraded: AtomicBool,
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

    /// Decides on an already-named bucket (the macro's path).
    pub(crate) async fn check_bucket(
        &self,
        bucket: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Decision, Error> {
        validate_cost(limit, cost)?;
        self.decide(bucket, limit, cost).await
    }

    /// The limiter of calls made before `enable_redis_rate_limit!`: in memory, default
    /// policies.
    pub(crate) fn unenabled() -> RateLimiter {
        RateLimiter::from_parts(
            Backend::Memory(MemoryStore::new()),
            DEFAULT_PREFIX.into(),
            &RateLimiterBuilder::default(),
        )
    }

    fn from_parts(backend: Backend, prefix: Box<str>, b: &RateLimiterBuilder) -> RateLimiter {
        RateLimiter {
            inner: Arc::new(Inner {
                backend,
                prefix,
                policy: b.policy,
                empty_key: b.empty_key,
                deadline: b.deadline.unwrap_or(Some(DEFAULT_DEADLINE)),
                fallback: OnceLock::new(),
                degraded: AtomicBool::new(false),
            }),
        }
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

    /// What this limiter does when its store fails.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.policy
    }

    /// What this limiter does with calls that have no key.
    pub fn empty_key_policy(&self) -> EmptyKeyPolicy {
        self.inner.empty_key
    }

    /// Whether the store is failing now (the failure policy is deciding).
    pub fn is_degraded(&self) -> bool {
        self.inner.degraded.load(Ordering::Relaxed)
    }

    /// The decision for a call that has no key, per the empty-key policy.
    pub fn decide_without_key(&self, limit: &Limit, cost: u32) -> Decision {
        let allowed = self.inner.empty_key == EmptyKeyPolicy::Allow;
        Decision::new(allowed, 0, *limit, cost, Duration::ZERO, Duration::ZERO)
            .with_source(Source::NoKey)
    }

    async fn decide(&self, bucket: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        let result = match &self.inner.backend {
            Backend::Memory(s) => return Ok(s.check_now(bucket, limit, cost)),
            Backend::Redis(s) => self.within_deadline(s.check(bucket, limit, cost)).await,
            Backend::Custom(s) => self.within_deadline(s.check_dyn(bucket, limit, cost)).await,
        };
        match result {
            Ok(decision) => {
                if self.inner.degraded.load(Ordering::Relaxed)
                    && self.inner.degraded.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(prefix = %self.inner.prefix, "rate-limit store is back; leaving degraded mode");
                }
                Ok(decision)
            }
            Err(e) if e.is_store_failure() => Ok(self.on_store_failure(&e, bucket, limit, cost)),
            Err(e) => Err(e),
        }
    }

    async fn within_deadline(
        &self,
        call: impl std::future::Future<Output = Result<Decision, Error>>,
    ) -> Result<Decision, Error> {
        match self.inner.deadline {
            Some(deadline) => tokio::time::timeout(deadline, call)
                .await
                .unwrap_or(Err(Error::Timeout(deadline))),
            None => call.await,
        }
    }

    fn on_store_failure(&self, error: &Error, bucket: &str, limit: &Limit, cost: u32) -> Decision {
        let inner = &*self.inner;
        if !inner.degraded.load(Ordering::Relaxed) && !inner.degraded.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                prefix = %inner.prefix,
                policy = ?inner.policy,
                %error,
                "rate-limit store failed; entering degraded mode"
            );
        }
        match inner.policy {
            FailurePolicy::Fallback => inner
                .fallback
                .get_or_init(MemoryStore::new)
                .check_now(bucket, limit, cost)
                .with_source(Source::Fallback),
            FailurePolicy::Allow => Decision::new(
                true,
                u64::from(limit.burst_capacity()),
                *limit,
                cost,
                Duration::ZERO,
                Duration::ZERO,
            )
            .with_source(Source::FailOpen),
            FailurePolicy::Deny => Decision::new(
                false,
                0,
                *limit,
                cost,
                limit.interval() * cost,
                Duration::ZERO,
            )
            .with_source(Source::FailClosed),
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
            .field("policy", &self.inner.policy)
            .field("empty_key", &self.inner.empty_key)
            .field("deadline", &self.inner.deadline)
            .finish()
    }
}

/// Configures a [`RateLimiter`]; see [`RateLimiter::builder`].
#[derive(Default)]
#[must_use]
pub struct RateLimiterBuilder {
    store: Option<StoreChoice>,
    prefix: Option<String>,
    policy: FailurePolicy,
    empty_key: EmptyKeyPolicy,
    deadline: Option<Option<Duration>>,
}

enum StoreChoice {
    RedisUrl(String),
    Ready(Backend),
}

/// The prefix when none is given.
pub const DEFAULT_PREFIX: &str = "ratelimit";

impl RateLimiterBuilder {
    /// Keep buckets in the Redis at `url` (`redis://host:port/db`, `rediss://` for TLS);
    /// `memory://` keeps them in this process's memory instead.
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

    /// What to do with calls when the store fails (default [`FailurePolicy::Fallback`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// What to do with calls that have no key (default [`EmptyKeyPolicy::Deny`]).
    pub fn empty_key_policy(mut self, policy: EmptyKeyPolicy) -> Self {
        self.empty_key = policy;
        self
    }

    /// How long a call may wait for the store before the failure policy decides it (default
    /// [`DEFAULT_DEADLINE`]; `None`: wait as long as the connection's own timeouts allow).
    /// Needs a Tokio runtime with timers enabled.
    pub fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Connects (for Redis) and returns the limiter.
    ///
    /// # Errors
    /// [`Error::NoStore`], [`Error::InvalidPrefix`], and the Redis connection errors of
    /// [`RedisStore::connect`].
    pub async fn build(self) -> Result<RateLimiter, Error> {
        let mut this = self;
        let prefix = this
            .prefix
            .take()
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        if prefix.contains(['{', '}']) {
            return Err(Error::InvalidPrefix(prefix));
        }
        let backend = match this.store.take().ok_or(Error::NoStore)? {
            StoreChoice::RedisUrl(url) if url.starts_with("memory:") => {
                Backend::Memory(MemoryStore::new())
            }
            StoreChoice::RedisUrl(url) => Backend::Redis(RedisStore::connect(&url).await?),
            StoreChoice::Ready(backend) => backend,
        };
        Ok(RateLimiter::from_parts(
            backend,
            prefix.into_boxed_str(),
            &this,
        ))
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
            .field("policy", &self.policy)
            .field("empty_key", &self.empty_key)
            .field("deadline", &self.deadline)
            .finish()
    }
}
