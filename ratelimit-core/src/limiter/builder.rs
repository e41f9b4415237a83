//! Building a limiter: the builder, its settings, and putting the parts together.

use super::*;

impl RateLimiter {
    /// The limiter of calls made before `enable_redis_rate_limit!`: in memory, default
    /// policies.
    pub(crate) fn unenabled() -> RateLimiter {
        RateLimiter::from_parts(
            Backend::Unenabled,
            DEFAULT_PREFIX.into(),
            &RateLimiterBuilder::default(),
            None,
        )
    }

    pub(super) fn from_parts(
        backend: Backend,
        prefix: Box<str>,
        b: &RateLimiterBuilder,
        fleet: Option<Arc<Member>>,
    ) -> RateLimiter {
        let circuits = match &backend {
            Backend::Redis(s) if s.is_cluster() => 16_384 / usize::from(SLOTS_PER_CIRCUIT),
            _ => 1,
        };
        // One fallback per instance: every limiter of the process in one fleet shares the
        // fleet's, unless given its own.
        let fallback = b
            .fallback
            .clone()
            .or_else(|| fleet.as_ref().map(|member| member.fallback.clone()));
        let mut resilience = Resilience::new(
            b.policy, b.deadline, b.cooldown, circuits, &prefix, fallback,
        );
        if let Some(member) = &fleet {
            resilience.instances = Arc::clone(&member.count);
            resilience.recovery = Some(Arc::clone(&member.recovery));
        }
        // A memory store answers as fast as the cache would: no cache in front of it. A Redis
        // store that cannot hear of resets would keep refusing after one: no cache either.
        let deny_cache = match (&backend, b.deny_cache) {
            (Backend::Memory(_) | Backend::Unenabled, _) | (_, 0) => None,
            (Backend::Redis(s), _) if !s.can_listen() => None,
            (_, capacity) => Some(Arc::new(DenyCache::new(capacity))),
        };
        if let (Some(member), Some(cache)) = (&fleet, &deny_cache) {
            member.listen(cache);
        }
        let remote = |store| {
            Engine::Remote(Remote {
                store,
                deny_cache,
                fleet,
            })
        };
        let engine = match backend {
            Backend::Memory(s) => Engine::Local(s),
            Backend::Unenabled => Engine::Unenabled,
            Backend::Redis(s) => remote(RemoteStore::Redis(s)),
            Backend::Custom(s) => remote(RemoteStore::Custom(s)),
        };
        RateLimiter {
            inner: Arc::new(Inner {
                engine,
                prefix: prefix.into(),
                empty_key: b.empty_key,
                resilience,
            }),
        }
    }
}

/// Configures a [`RateLimiter`]; see [`RateLimiter::builder`]. `enable_redis_rate_limit!`
/// takes one too (`builder = ..`), for the settings it has no option of its own for.
#[must_use]
pub struct RateLimiterBuilder {
    store: Option<StoreChoice>,
    prefix: Option<String>,
    policy: FailurePolicy,
    empty_key: EmptyKeyPolicy,
    /// `None`: no deadline.
    deadline: Option<Duration>,
    /// `None`: no circuit breaker.
    cooldown: Option<Duration>,
    /// 0: no deny cache.
    deny_cache: usize,
    fallback: Option<MemoryStore>,
    /// Whether the process counts as an instance of the fleet (Redis only).
    instance: bool,
}

impl Default for RateLimiterBuilder {
    fn default() -> Self {
        RateLimiterBuilder {
            store: None,
            prefix: None,
            policy: FailurePolicy::default(),
            empty_key: EmptyKeyPolicy::default(),
            deadline: Some(DEFAULT_DEADLINE),
            cooldown: Some(DEFAULT_COOLDOWN),
            deny_cache: DEFAULT_DENY_CACHE_CAPACITY,
            fallback: None,
            instance: true,
        }
    }
}

enum StoreChoice {
    RedisUrl(String),
    Ready(Backend),
}

/// The prefix when none is given.
pub const DEFAULT_PREFIX: &str = "ratelimit";

impl RateLimiterBuilder {
    /// Keep buckets in the Redis at `url` (`redis://host:port/db`, `rediss://` for TLS with the
    /// `tls` feature);
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
    /// [`DEFAULT_DEADLINE`]): `.deadline(Duration::from_millis(20))`, or `.deadline(None)` for
    /// none (wait as long as the connection's own timeouts allow). Needs a Tokio runtime with
    /// timers enabled.
    pub fn deadline(mut self, deadline: impl Into<Option<Duration>>) -> Self {
        self.deadline = deadline.into();
        self
    }

    /// After a store failure, decide by the failure policy without asking the store for this
    /// long, then let one call probe it (default [`DEFAULT_COOLDOWN`]; `None`: ask on every
    /// call). An outage then costs one deadline per cool-down, not one per call.
    pub fn circuit_cooldown(mut self, cooldown: impl Into<Option<Duration>>) -> Self {
        self.cooldown = cooldown.into();
        self
    }

    /// Remember up to `capacity` buckets the store refused or left short of full: refuse
    /// calls on a refused bucket locally until the store could admit them, and start the
    /// [`Fallback`](FailurePolicy::Fallback) of each from what the store last said it held
    /// (default [`DEFAULT_DENY_CACHE_CAPACITY`]; 0 turns both off: a fallback then starts each
    /// bucket from a full share). It never admits anything; a flood on an exhausted key then
    /// costs no round trips. Not used in front of a memory store, nor of a
    /// [`RedisStore::from_connection`], which cannot hear of resets made by other instances.
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = capacity;
        self
    }

    /// Enforce the [`Fallback`](FailurePolicy::Fallback) policy in this store (default: a
    /// [`MemoryStore::new`], bounded at 1,000,000 buckets, shared by every limiter of the
    /// process on the same Redis deployment and prefix, which are one instance and so hold
    /// one share), to choose its bound: say `MemoryStore::new().with_max_keys(100_000)`.
    /// Give limiters of one process and prefix the same store (a clone), or each holds a
    /// share of its own.
    pub fn fallback_store(mut self, store: MemoryStore) -> Self {
        self.fallback = Some(store);
        self
    }

    /// Whether this process counts as an instance of the service on Redis (default `true`):
    /// an instance beats in `<prefix>:instances` (what the fallback divides a limit by and
    /// [`live_instances`](RateLimiter::live_instances) reads) and hears the resets others
    /// publish. `false` is for a tool that only looks and resets (the `ratelimit` CLI, an
    /// admin job): it does not count, has no deny cache to tell, and its resets still reach
    /// every instance.
    pub fn instance(mut self, instance: bool) -> Self {
        self.instance = instance;
        self
    }

    /// The settings `enable_redis_rate_limit!` gives when the builder has none: the store at
    /// `url()`, the prefix `prefix`.
    pub(crate) fn or_defaults(mut self, url: impl FnOnce() -> String, prefix: &str) -> Self {
        if self.store.is_none() {
            self.store = Some(StoreChoice::RedisUrl(url()));
        }
        if self.prefix.is_none() {
            self.prefix = Some(prefix.to_owned());
        }
        self
    }

    /// Connects (for Redis) and returns the limiter.
    ///
    /// On Redis, the first limiter of a (deployment, prefix) in this process also waits for
    /// the instance's first heartbeat and for its subscription to resets (each bounded by one
    /// second): it then starts with the fleet's real count of instances, which the fallback
    /// divides by, and a deny cache that hears every reset from its first refusal on.
    ///
    /// # Errors
    /// [`Error::NoStore`], [`Error::InvalidPrefix`], [`Error::NoRuntime`] for Redis outside a
    /// Tokio runtime, and the Redis connection errors of [`RedisStore::connect`].
    pub async fn build(self) -> Result<RateLimiter, Error> {
        let mut this = self;
        let prefix = this
            .prefix
            .take()
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        if prefix.contains(['{', '}']) {
            return Err(Error::InvalidPrefix(prefix));
        }
        let store = this.store.take().ok_or(Error::NoStore)?;
        let backend = match store {
            StoreChoice::RedisUrl(url) if url.starts_with("memory:") => {
                Backend::Memory(MemoryStore::new())
            }
            // Before connecting: the client itself needs Tokio's reactor, and panics without it.
            StoreChoice::RedisUrl(url) => match tokio::runtime::Handle::try_current() {
                Ok(_) => Backend::Redis(RedisStore::connect(&url).await?),
                Err(_) => return Err(Error::NoRuntime),
            },
            StoreChoice::Ready(backend) => backend,
        };
        let fleet = match &backend {
            Backend::Redis(store) if this.instance => Some(fleet::join(store, &prefix)?),
            _ => None,
        };
        if let Some(member) = &fleet {
            member.started().await;
        }
        if !matches!(backend, Backend::Memory(_)) {
            // Published from the start: a dashboard or an alert has data before any outage.
            crate::observe::degraded(&prefix, false);
        }
        Ok(RateLimiter::from_parts(
            backend,
            prefix.into_boxed_str(),
            &this,
            fleet,
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
            Some(StoreChoice::Ready(Backend::Unenabled)) => "none",
        };
        f.debug_struct("RateLimiterBuilder")
            .field("store", &store)
            .field("prefix", &self.prefix)
            .field("policy", &self.policy)
            .field("empty_key", &self.empty_key)
            .field("deadline", &self.deadline)
            .field("cooldown", &self.cooldown)
            .field("deny_cache", &self.deny_cache)
            .field("fallback", &self.fallback)
            .field("instance", &self.instance)
            .finish()
    }
}
