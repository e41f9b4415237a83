//! The rate limiter: key naming, cost validation and the store call.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use crate::algorithm::Outcome;
use crate::decision::Source;
use crate::deny_cache::{DEFAULT_DENY_CACHE_CAPACITY, DenyCache};
use crate::fleet::{self, Member};
use crate::naming::key_slot;
use crate::naming::{bucket_key, with_bucket_key};
use crate::policy::{
    DEFAULT_COOLDOWN, DEFAULT_DEADLINE, EmptyKeyPolicy, FailurePolicy, Gate, Resilience,
    SLOTS_PER_CIRCUIT,
};
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
    engine: Engine,
    prefix: Box<str>,
    empty_key: EmptyKeyPolicy,
    /// The failure policies, and for a remote store its circuits and deadline.
    resilience: Resilience,
}

/// Where a limiter's decisions are made.
enum Engine {
    /// In this process, at once: nothing in front of the store, nothing to fail.
    Local(MemoryStore),
    /// In a store other processes share, asked through the circuit and the deadline.
    Remote(Remote),
}

/// A shared store and what stands around it.
struct Remote {
    store: RemoteStore,
    /// Refusals remembered, so that a flood on an exhausted bucket stays in this process.
    deny_cache: Option<Arc<DenyCache>>,
    /// This process in the fleet sharing the Redis deployment and prefix (Redis only): the
    /// instance count and the resets other instances publish.
    fleet: Option<Arc<Member>>,
}

enum RemoteStore {
    Redis(RedisStore),
    Custom(Box<dyn DynStore>),
}

/// The store a builder was given or will connect to.
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
    pub fn check(
        &self,
        key: &str,
        limit: &Limit,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        // `check_n`'s own future, not one wrapped around it: one layer less to move the
        // decision through.
        self.check_n(key, limit, 1)
    }

    /// Takes `cost` tokens from `key`'s bucket if it has that many. A limit that may wait
    /// ([`Limit::wait`], or a [leaky bucket](crate::Algorithm::LeakyBucket)) reserves them
    /// instead when they are due within its bound, and this returns once they are (see
    /// [`acquire`](RateLimiter::acquire)); a limit in [shadow mode](Limit::shadow) lets every
    /// call through and says when it would not have ([`Decision::shadowed`]).
    ///
    /// # Errors
    /// [`Error::ZeroCost`], [`Error::CostExceedsBurst`] (such a call could never pass), or the
    /// store's error.
    pub fn check_n(
        &self,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.check_by_name(None, key, limit, cost)
    }

    /// Takes one token from `key`'s bucket, waiting up to `max_wait` for it instead of being
    /// refused: a call over the limit reserves its token at once, in the same single round
    /// trip as [`check`](RateLimiter::check), and sleeps until it is due if that is within
    /// `max_wait`; otherwise it is refused at once and takes nothing. No polling: waiters on
    /// every instance are served in the order they reserved, at the rate, never early. A call
    /// dropped while it waits (its client went away, a timeout) gives its token back.
    ///
    /// The same as `check` with [`limit.wait(max_wait)`](Limit::wait); only a token bucket
    /// refilled smoothly and the leaky bucket can wait.
    ///
    /// ```no_run
    /// use ratelimit_core::{Limit, RateLimiter};
    /// use std::time::Duration;
    ///
    /// # async fn run(limiter: RateLimiter) -> Result<(), ratelimit_core::Error> {
    /// // Every crawler process shares 10 fetches a second on this host.
    /// const HOST: Limit = Limit::per_second(10).burst(1);
    /// let d = limiter.acquire("example.org", &HOST, Duration::from_secs(2)).await?;
    /// if d.allowed {
    ///     // fetch
    /// } else {
    ///     // more than 2 s of fetches queued already: skip, and retry after d.retry_after
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] for a limit that cannot wait ([`InvalidLimit::CannotWait`])
    /// or a wait longer than it allows ([`InvalidLimit::WaitTooLong`]); otherwise as
    /// [`check_n`](RateLimiter::check_n).
    ///
    /// [`InvalidLimit::CannotWait`]: crate::InvalidLimit::CannotWait
    /// [`InvalidLimit::WaitTooLong`]: crate::InvalidLimit::WaitTooLong
    pub async fn acquire(
        &self,
        key: &str,
        limit: &Limit,
        max_wait: Duration,
    ) -> Result<Decision, Error> {
        self.acquire_n(key, limit, 1, max_wait).await
    }

    /// [`acquire`](RateLimiter::acquire) for a call of `cost` tokens.
    ///
    /// # Errors
    /// As [`acquire`](RateLimiter::acquire), and the cost errors of
    /// [`check_n`](RateLimiter::check_n).
    pub async fn acquire_n(
        &self,
        key: &str,
        limit: &Limit,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision, Error> {
        let limit = limit.try_wait(max_wait)?;
        self.check_n(key, &limit, cost).await
    }

    /// Takes `cost` tokens from the bucket of `key` under the limit called `name` (what
    /// `#[rate_limit]` calls): each name has its own buckets.
    ///
    /// # Errors
    /// As [`check_n`](RateLimiter::check_n).
    pub fn check_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.check_by_name(Some(name), key, limit, cost)
    }

    /// [`check_n`](Self::check_n) and [`check_named`](Self::check_named): on a memory store,
    /// decided in the first poll with nothing else in the future (a few references; an
    /// `async fn` carried and moved a state machine for every path); otherwise, and for a call
    /// that waits, through [`decide_by_name`](Self::decide_by_name)'s box. Nothing is decided
    /// before the first poll.
    fn check_by_name(
        &self,
        name: Option<&str>,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        let mut rest: Option<BoxedAnswer<'static, Decision>> = None;
        std::future::poll_fn(move |cx| {
            if let Some(rest) = &mut rest {
                return rest.as_mut().poll(cx);
            }
            if let Err(e) = validate_cost(limit, cost) {
                return Poll::Ready(Err(e));
            }
            let Engine::Local(store) = &self.inner.engine else {
                return rest
                    .insert(self.decide_by_name(name, key, limit, cost, Local::Remote))
                    .as_mut()
                    .poll(cx);
            };
            // The store answers its small outcome; the decision is built once, here, where it
            // is returned (docs/benchmarks.md 4.6).
            let prefix = &*self.inner.prefix;
            let outcome = with_bucket_key(prefix, name, key, |bucket| {
                store.check_bytes(bucket, limit, cost)
            });
            let mut decision = Decision::from_outcome(&outcome, *limit, cost);
            if must_wait(std::slice::from_mut(&mut decision)) {
                let waits = Local::Wait(bucket_key(prefix, name, key), decision);
                return rest
                    .insert(self.decide_by_name(name, key, limit, cost, waits))
                    .as_mut()
                    .poll(cx);
            }
            observe_locally(&decision, prefix, name, key);
            Poll::Ready(Ok(decision))
        })
    }

    /// The rest of [`check_n`](Self::check_n) and [`check_named`](Self::check_named) when
    /// their first poll did not decide: the wait of a call that reserved, or the remote store.
    /// Boxed, and owning what it needs (a clone of the limiter, the key): inline, these paths
    /// made the memory path's future and its poll's stack frame (8 kB) several times larger
    /// (docs/benchmarks.md 4.6); a copy of the key is nothing beside a round trip or a wait.
    fn decide_by_name(
        &self,
        name: Option<&str>,
        key: &str,
        limit: &Limit,
        cost: u32,
        local: Local,
    ) -> BoxedAnswer<'static, Decision> {
        let limiter = self.clone();
        let name = name.map(str::to_owned);
        let key = key.to_owned();
        let limit = *limit;
        Box::pin(async move {
            let (bucket, decision) = match local {
                Local::Wait(bucket, reserved) => {
                    let decision = limiter.wait_one(&bucket, &limit, cost, reserved).await?;
                    (bucket, decision)
                }
                Local::Remote => {
                    let bucket = bucket_key(&limiter.inner.prefix, name.as_deref(), &key);
                    let decision = limiter.decide(&bucket, &limit, cost).await?;
                    (bucket, decision)
                }
            };
            decision.observe(observed_name(name.as_deref()), Some(&bucket));
            Ok(decision)
        })
    }

    /// Decides several limits of one call together, all or nothing: the call takes `cost`
    /// tokens from each `key`'s bucket under its `limit` if every one of them admits it, and
    /// from none if any refuses. The answer is the [combined](Decision::combined) decision;
    /// [`Decision::parts`] holds each limit's own, in order.
    ///
    /// On Redis it is one script in one round trip (on a cluster, when the buckets' nodes
    /// differ, see the guide's "Several limits"). Each limit keeps its own failure policy
    /// while the store fails. The buckets are those of [`check_n`](RateLimiter::check_n), so a
    /// limit checked here and alone shares its bucket; two limits on one key therefore need
    /// their own names ([`check_all_named`](RateLimiter::check_all_named)).
    ///
    /// ```no_run
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # async fn run(limiter: RateLimiter) -> Result<(), ratelimit_core::Error> {
    /// let per_ip = Limit::per_minute(3).burst(300);
    /// let per_user = Limit::per_day(300);
    /// let d = limiter
    ///     .check_all(&[("ip:203.0.113.9", &per_ip, 1), ("user:42", &per_user, 1)])
    ///     .await?;
    /// if !d.allowed {
    ///     println!("retry in {:?}", d.retry_after); // the longest wait of the refusing limits
    /// }
    /// for part in d.parts() {
    ///     println!("{}: {} left", part.limit, part.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NoLimits`] for an empty slice, [`Error::DuplicateBucket`] when two entries
    /// name one bucket, the cost errors of [`check_n`](RateLimiter::check_n), or the store's.
    pub async fn check_all(&self, checks: &[(&str, &Limit, u32)]) -> Result<Decision, Error> {
        let buckets: Vec<(String, &Limit, u32)> = checks
            .iter()
            .map(|&(key, limit, cost)| (bucket_key(&self.inner.prefix, None, key), limit, cost))
            .collect();
        let decision = self.check_buckets(&buckets).await?;
        for (part, (bucket, ..)) in decision.parts().iter().zip(&buckets) {
            part.observe(crate::observe::Name::None, Some(bucket));
        }
        Ok(decision)
    }

    /// [`check_all`](RateLimiter::check_all) with each limit's name: `(name, key, limit,
    /// cost)`, the buckets of [`check_named`](RateLimiter::check_named).
    ///
    /// # Errors
    /// As [`check_all`](RateLimiter::check_all).
    pub async fn check_all_named(
        &self,
        checks: &[(&str, &str, &Limit, u32)],
    ) -> Result<Decision, Error> {
        let buckets: Vec<(String, &Limit, u32)> = checks
            .iter()
            .map(|&(name, key, limit, cost)| {
                (bucket_key(&self.inner.prefix, Some(name), key), limit, cost)
            })
            .collect();
        let decision = self.check_buckets(&buckets).await?;
        for ((part, (name, ..)), (bucket, ..)) in decision.parts().iter().zip(checks).zip(&buckets)
        {
            part.observe(crate::observe::Name::Given(name), Some(bucket));
        }
        Ok(decision)
    }

    /// Decides several already-named buckets together (the macro's path for stacked limits).
    pub(crate) async fn check_buckets<B: AsRef<str>>(
        &self,
        checks: &[(B, &Limit, u32)],
    ) -> Result<Decision, Error> {
        let checks = validate_all(checks)?;
        let parts = self.decide_all(&checks).await?;
        Ok(Decision::combined(parts))
    }

    /// Decides several already-named buckets as the failure policy would with the store
    /// down (calls made before `enable_redis_rate_limit!`).
    pub(crate) async fn decide_all_by_policy<B: AsRef<str>>(
        &self,
        checks: &[(B, &Limit, u32)],
    ) -> Result<Decision, Error> {
        let checks = validate_all(checks)?;
        let mut parts = self.inner.resilience.decide_all(&checks, None);
        if must_wait(&mut parts) {
            Box::pin(self.wait_turn(&checks, &mut parts)).await?;
        }
        Ok(Decision::combined(parts))
    }

    /// Decides on an already-named bucket (the macro's path).
    ///
    /// The cost is validated at once, and the future returned is `decide`'s own: one layer
    /// less to move the decision through.
    pub(crate) fn check_bucket<'a>(
        &'a self,
        bucket: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> Result<impl Future<Output = Result<Decision, Error>> + 'a, Error> {
        validate_cost(limit, cost)?;
        Ok(self.decide(bucket, limit, cost))
    }

    /// Decides on an already-named bucket without a future when the store answers at once:
    /// on a memory store, for a limit that never waits. `None` otherwise: ask
    /// [`check_bucket`](Self::check_bucket). (The macro's path: it records the decision in
    /// the same look at the request context as it resolved the key.)
    pub(crate) fn decide_at_once(
        &self,
        bucket: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Option<Decision>, Error> {
        self.at_once(limit, cost, |store| {
            store.check_bytes(bucket.as_bytes(), limit, cost)
        })
    }

    /// [`decide_at_once`](Self::decide_at_once) on the bucket of `key` under the limit called
    /// `name`, its key built on the stack (the macro's path for a key it does not remember).
    pub(crate) fn decide_named_at_once(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Option<Decision>, Error> {
        self.at_once(limit, cost, |store| {
            with_bucket_key(&self.inner.prefix, Some(name), key, |bucket| {
                store.check_bytes(bucket, limit, cost)
            })
        })
    }

    fn at_once(
        &self,
        limit: &Limit,
        cost: u32,
        check: impl FnOnce(&MemoryStore) -> Outcome<()>,
    ) -> Result<Option<Decision>, Error> {
        validate_cost(limit, cost)?;
        match &self.inner.engine {
            // Only a limit that reserves is ever admitted with a wait (`MemoryStore::check_now`).
            Engine::Local(s) if !limit.reserves() => {
                let mut decision = Decision::from_outcome(&check(s), *limit, cost);
                let waits = must_wait(std::slice::from_mut(&mut decision));
                debug_assert!(!waits, "a limit that does not reserve never waits");
                Ok(Some(decision))
            }
            _ => Ok(None),
        }
    }

    /// Decides as the failure policy would with the store down (calls made before
    /// `enable_redis_rate_limit!`).
    pub(crate) async fn decide_by_policy(
        &self,
        bucket: &str,
        limit: &Limit,
        cost: u32,
    ) -> Result<Decision, Error> {
        validate_cost(limit, cost)?;
        let waiting = {
            let mut decision = self.inner.resilience.decide(bucket, limit, cost, None);
            if !must_wait(std::slice::from_mut(&mut decision)) {
                return Ok(decision);
            }
            self.wait_one(bucket, limit, cost, decision)
        };
        waiting.await
    }

    /// The limiter of calls made before `enable_redis_rate_limit!`: in memory, default
    /// policies.
    pub(crate) fn unenabled() -> RateLimiter {
        RateLimiter::from_parts(
            Backend::Memory(MemoryStore::new()),
            DEFAULT_PREFIX.into(),
            &RateLimiterBuilder::default(),
            None,
        )
    }

    fn from_parts(
        backend: Backend,
        prefix: Box<str>,
        b: &RateLimiterBuilder,
        fleet: Option<Arc<Member>>,
    ) -> RateLimiter {
        let circuits = match &backend {
            Backend::Redis(s) if s.is_cluster() => 16_384 / usize::from(SLOTS_PER_CIRCUIT),
            _ => 1,
        };
        let mut resilience = Resilience::new(
            b.policy,
            b.deadline,
            b.cooldown,
            circuits,
            &prefix,
            b.fallback.clone(),
        );
        if let Some(member) = &fleet {
            resilience.instances = Arc::clone(&member.count);
        }
        // A memory store answers as fast as the cache would: no cache in front of it. A Redis
        // store that cannot hear of resets would keep refusing after one: no cache either.
        let deny_cache = match (&backend, b.deny_cache) {
            (Backend::Memory(_), _) | (_, 0) => None,
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
            Backend::Redis(s) => remote(RemoteStore::Redis(s)),
            Backend::Custom(s) => remote(RemoteStore::Custom(s)),
        };
        RateLimiter {
            inner: Arc::new(Inner {
                engine,
                prefix,
                empty_key: b.empty_key,
                resilience,
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

    /// What this limiter does when its store fails, for limits without their own
    /// ([`Limit::on_failure`]).
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.resilience.policy
    }

    /// What this limiter does with calls that have no key.
    pub fn empty_key_policy(&self) -> EmptyKeyPolicy {
        self.inner.empty_key
    }

    /// Whether the store is failing now (the failure policy is deciding).
    pub fn is_degraded(&self) -> bool {
        self.inner.resilience.is_degraded()
    }

    /// How many instances share this limiter's Redis deployment and prefix, as last seen by
    /// the heartbeat (1 for other stores, or when Redis did not answer the first heartbeat,
    /// which [`build`](RateLimiterBuilder::build) waits for). An instance is a
    /// process: every limiter a process builds on one deployment and prefix counts once. The
    /// fallback policy enforces `limit / live_instances` on each instance while Redis is down.
    /// A count that falls is believed only after every live instance has had the time to beat
    /// again (about 4 s): after Redis restarts empty, the set of instances fills up one
    /// heartbeat at a time, and the shares must not grow while it does.
    pub fn live_instances(&self) -> u32 {
        self.inner
            .resilience
            .instances
            .load(Ordering::Relaxed)
            .max(1)
    }

    /// The decision for a call that has no key, per the empty-key policy.
    pub fn decide_without_key(&self, limit: &Limit, cost: u32) -> Decision {
        let allowed = self.inner.empty_key == EmptyKeyPolicy::Allow;
        let mut decision = Decision::new(allowed, 0, *limit, cost, Duration::ZERO, Duration::ZERO)
            .with_source(Source::NoKey);
        decision.let_shadow_through();
        decision
    }

    /// Decides one call, and waits for its turn when it reserved (see [`Limit::wait`]).
    ///
    /// Every await here holds one box at most: the memory path is a call of this future, so
    /// what it carries for the others (the store's call, the deadline, a wait, the several
    /// limits' path) must not make it larger.
    async fn decide(&self, bucket: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        let remote = match &self.inner.engine {
            Engine::Local(s) => {
                // The decision's scope ends before the await: the future then does not keep
                // room for it beside the wait's box.
                let waiting = match check_locally(s.check_now(bucket, limit, cost)) {
                    Ok(decision) => return Ok(decision),
                    Err(reserved) => self.wait_one(bucket, limit, cost, reserved),
                };
                return waiting.await;
            }
            Engine::Remote(remote) => remote,
        };
        // A call that may wait is not refused from the deny cache (the refusal it remembers
        // was for a call that could not wait), and is asked by a task of its own.
        if limit.reserves() {
            return self.decide_reserving(bucket, limit, cost).await;
        }
        if let Some(refused) = remote
            .deny_cache
            .as_ref()
            .and_then(|c| c.check(bucket, limit, cost))
        {
            crate::observe::deny_cache_hit();
            let mut refused = refused;
            refused.let_shadow_through();
            return Ok(refused);
        }
        // Boxed: awaited inline, the store's call and the deadline's timer make every check's
        // future several times larger, even on a memory limiter, and moving it dominated the
        // memory path (docs/benchmarks.md 7.3). One small allocation beside a network round
        // trip is the cheaper side.
        let asked: BoxedAnswer<'_, _> = Box::pin(self.through_store(
            remote,
            bucket,
            |store| async move {
                match store {
                    RemoteStore::Redis(s) => s.check(bucket, limit, cost).await,
                    RemoteStore::Custom(s) => s.check_dyn(bucket, limit, cost).await,
                }
            },
            |cache, decision, sent, now| cache.remember(bucket, decision, sent, now),
            |guard| guard.decide(bucket, limit, cost, remote.deny_cache.as_deref()),
        ));
        let waiting = {
            let mut decision = asked.await?;
            if !must_wait(std::slice::from_mut(&mut decision)) {
                return Ok(decision);
            }
            // The failure policy's fallback may have reserved.
            self.wait_one(bucket, limit, cost, decision)
        };
        waiting.await
    }

    /// A call that may wait, on a remote store: [`decide_all`](Self::decide_all)'s path for
    /// one limit, boxed.
    fn decide_reserving<'a>(
        &'a self,
        bucket: &'a str,
        limit: &'a Limit,
        cost: u32,
    ) -> BoxedAnswer<'a, Decision> {
        Box::pin(async move {
            let checks = [(bucket, limit, cost)];
            let mut parts = self.decide_all_now(&checks).await?;
            if must_wait(&mut parts) {
                self.wait_turn(&checks, &mut parts).await?;
            }
            parts
                .pop()
                .ok_or_else(|| Error::BadReply("no decision".to_owned()))
        })
    }

    /// [`wait_turn`](Self::wait_turn) for a call under one limit, boxed: only a call that
    /// waits carries the sleep's future, and the decision moves into the box.
    fn wait_one<'a>(
        &'a self,
        bucket: &'a str,
        limit: &'a Limit,
        cost: u32,
        mut decision: Decision,
    ) -> BoxedAnswer<'a, Decision> {
        Box::pin(async move {
            self.wait_turn(
                &[(bucket, limit, cost)],
                std::slice::from_mut(&mut decision),
            )
            .await?;
            Ok(decision)
        })
    }

    /// [`decide`](Self::decide) for several buckets at once, all or nothing; a call that
    /// reserved under any of its limits waits for the latest of them.
    async fn decide_all(&self, checks: &[(&str, &Limit, u32)]) -> Result<Vec<Decision>, Error> {
        if let [(bucket, limit, cost)] = checks {
            return Ok(vec![self.decide(bucket, limit, *cost).await?]);
        }
        let mut parts = self.decide_all_now(checks).await?;
        if must_wait(&mut parts) {
            Box::pin(self.wait_turn(checks, &mut parts)).await?;
        }
        Ok(parts)
    }

    async fn decide_all_now(&self, checks: &[(&str, &Limit, u32)]) -> Result<Vec<Decision>, Error> {
        let remote = match &self.inner.engine {
            Engine::Local(s) => return Ok(s.check_all_shared(checks, 1, false, None)),
            Engine::Remote(remote) => remote,
        };
        // The deny cache is not asked: it knows a refusal of one limit, and a combined answer
        // needs every limit's. It still learns from the refusals below. One circuit for the
        // call: the first bucket's (on a cluster, its slot's).
        // Boxed, as in `decide`.
        let reserving = checks.iter().any(|(_, limit, _)| limit.reserves());
        let asked: BoxedAnswer<'_, _> = Box::pin(self.through_store(
            remote,
            checks[0].0,
            |store| async move {
                if reserving {
                    return self.ask_detached(checks).await;
                }
                match store {
                    RemoteStore::Redis(s) => s.check_all(checks).await,
                    RemoteStore::Custom(s) => s.check_all_dyn(checks).await,
                }
            },
            |cache, parts: &Vec<Decision>, sent, now| {
                for (part, (bucket, ..)) in parts.iter().zip(checks) {
                    cache.remember(bucket, part, sent, now);
                }
            },
            |guard| guard.decide_all(checks, remote.deny_cache.as_deref()),
        ));
        asked.await
    }

    /// Asks the remote store for a call that may reserve, from a task of its own: should the
    /// caller give up before the answer comes (a timeout around it, the deadline, a client
    /// gone), the request may still reach the store and reserve; the task then gives back what
    /// it took, which an abandoned request could not.
    ///
    /// Both the task and the answer are boxed as trait objects: their types (the store's
    /// whole call) would otherwise be part of every caller's future, deep enough that proving
    /// a spawned caller `Send` exceeds the compiler's default recursion limit.
    fn ask_detached(
        &self,
        checks: &[(&str, &Limit, u32)],
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<Decision>, Error>> + Send + 'static>>
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let limiter = self.clone();
        let owned: Vec<(Box<str>, Limit, u32)> = checks
            .iter()
            .map(|&(bucket, limit, cost)| (Box::from(bucket), *limit, cost))
            .collect();
        let task = async move {
            let Engine::Remote(remote) = &limiter.inner.engine else {
                return;
            };
            let refs: Vec<(&str, &Limit, u32)> = owned
                .iter()
                .map(|(bucket, limit, cost)| (&**bucket, limit, *cost))
                .collect();
            let decided = match &remote.store {
                RemoteStore::Redis(s) => s.check_all(&refs).await,
                RemoteStore::Custom(s) => s.check_all_dyn(&refs).await,
            };
            if let Err(Ok(parts)) = answer.send(decided)
                && parts.iter().all(|d| d.allowed)
            {
                limiter.give_back(
                    owned
                        .into_iter()
                        .map(|(bucket, limit, cost)| (bucket, limit, cost, Source::Store))
                        .collect(),
                );
            }
        };
        let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(task);
        let spawned = tokio::runtime::Handle::try_current().map(|runtime| runtime.spawn(task));
        Box::pin(async move {
            spawned.map_err(|_| Error::NoRuntime)?;
            answered.await.unwrap_or_else(|_| {
                Err(Error::BadReply(
                    "the store's call ended without an answer".to_owned(),
                ))
            })
        })
    }

    /// Sleeps until the tokens a call reserved are due (the longest wait of its limits), then
    /// says it waits no more. Dropped first (the caller went away, a timeout), or unable to
    /// sleep, it gives every limit's tokens back.
    async fn wait_turn(
        &self,
        checks: &[(&str, &Limit, u32)],
        decisions: &mut [Decision],
    ) -> Result<(), Error> {
        let wait = reserved(decisions).unwrap_or_default();
        let mut guard = GiveBack {
            limiter: self,
            parts: checks
                .iter()
                .zip(decisions.iter())
                .map(|(&(bucket, limit, cost), d)| (Box::from(bucket), *limit, cost, d.source))
                .collect(),
        };
        on_tokio()?;
        tokio::time::sleep(wait).await;
        guard.parts.clear();
        for d in decisions.iter_mut().filter(|d| !d.shadowed) {
            d.retry_after = Duration::ZERO;
        }
        Ok(())
    }

    /// Returns the tokens of calls that gave up waiting: at once in memory, by a task on
    /// Redis (a dropped future cannot await; best effort, logged when it fails). A custom
    /// store cannot be asked to give back: its tokens stay taken.
    fn give_back(&self, parts: Vec<(Box<str>, Limit, u32, Source)>) {
        let mut remote = Vec::new();
        for (bucket, limit, cost, source) in parts {
            match (source, &self.inner.engine) {
                (Source::Store, Engine::Local(s)) => s.give_back(&bucket, &limit, cost, 1),
                (Source::Fallback, _) => self.inner.resilience.give_back(&bucket, &limit, cost),
                (Source::Store, Engine::Remote(_)) => remote.push((bucket, limit, cost)),
                _ => {}
            }
        }
        let Engine::Remote(Remote {
            store: RemoteStore::Redis(_),
            ..
        }) = &self.inner.engine
        else {
            return;
        };
        if remote.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(target: "redis_ratelimit", calls = remote.len(), "redis-ratelimit could not give back the tokens of calls that gave up waiting: no Tokio runtime to reach Redis");
            return;
        };
        let limiter = self.clone();
        runtime.spawn(async move {
            let Engine::Remote(Remote {
                store: RemoteStore::Redis(store),
                deny_cache,
                fleet,
            }) = &limiter.inner.engine
            else {
                return;
            };
            for (bucket, limit, cost) in remote {
                if let Err(e) = store.give_back_reserved(&bucket, &limit, cost).await {
                    tracing::warn!(target: "redis_ratelimit", error = %e, "redis-ratelimit could not give back the tokens of a call that gave up waiting");
                    continue;
                }
                // The bucket is fuller than a refusal remembered before the give-back says:
                // every instance forgets it, as after a reset.
                if let Some(cache) = deny_cache {
                    cache.forget(&bucket);
                }
                if let Some(member) = fleet
                    && let Err(e) = store.publish(member.channel(), &bucket).await
                {
                    tracing::debug!(target: "redis_ratelimit", error = %e, "could not tell the other instances of a give-back");
                }
            }
        });
    }

    /// Asks the store (`ask`) through the circuit of `first`'s bucket, within the deadline;
    /// the failure policy (`by_policy`) answers while the circuit is open or when the store
    /// fails, and the deny cache learns from what the store answers (`remember`). The one
    /// path of a decision on a remote store, for one limit or several.
    async fn through_store<'a, T, F>(
        &self,
        remote: &'a Remote,
        first: &str,
        ask: impl FnOnce(&'a RemoteStore) -> F,
        remember: impl FnOnce(&DenyCache, &T, std::time::Instant, std::time::Instant),
        by_policy: impl FnOnce(&Resilience) -> T,
    ) -> Result<T, Error>
    where
        F: std::future::Future<Output = Result<T, Error>>,
    {
        let guard = &self.inner.resilience;
        // The Redis client and the deadline need Tokio's reactor and timers: polled from
        // another executor, say so instead of panicking inside them.
        on_tokio()?;
        let circuit = guard.circuit_of(|| key_slot(first.as_bytes()));
        let gate = guard.gate(circuit);
        if gate == Gate::Open {
            return Ok(by_policy(guard));
        }
        let sent = std::time::Instant::now();
        let answer = guard.call(ask(&remote.store)).await;
        crate::observe::store_call(sent.elapsed());
        match answer {
            Ok(answer) => {
                guard.succeeded(gate, circuit);
                if let Some(cache) = &remote.deny_cache {
                    remember(cache, &answer, sent, std::time::Instant::now());
                }
                Ok(answer)
            }
            Err(e) if e.is_store_failure() => {
                guard.failed(gate, circuit, &e);
                Ok(by_policy(guard))
            }
            Err(e) => {
                // Not the store's fault (a misuse): the circuit stays as it was.
                if gate == Gate::Probe {
                    guard.failed(gate, circuit, &e);
                }
                Err(e)
            }
        }
    }

    /// Answers as [`check`](RateLimiter::check) would for `key` under `limit`, and takes
    /// nothing: the store writes nothing, so asking changes no bucket. For looking at a bucket
    /// (an admin page, the `ratelimit` CLI, a test): `remaining` is the whole tokens the
    /// bucket holds now, so that exactly that many calls of cost 1 would be admitted now
    /// (`check` answers what is left after its call: one fewer), `retry_after` when a refused
    /// call would pass, `reset_after` when the bucket is full again. Every algorithm answers. For a limit that waits, an admitted answer's
    /// `retry_after` is how long the call would wait.
    ///
    /// It asks the store itself: not the deny cache, and not the failure policy (an
    /// administrative call, as [`reset`](RateLimiter::reset)).
    ///
    /// ```no_run
    /// use ratelimit_core::{Limit, RateLimiter};
    ///
    /// # async fn run(limiter: RateLimiter) -> Result<(), ratelimit_core::Error> {
    /// let orders = Limit::per_minute(3).burst(300);
    /// let now = limiter.peek("user:42", &orders).await?;
    /// println!("{} left, full again in {:?}", now.remaining, now.reset_after);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The store's error; [`Error::PeekUnsupported`] for a custom store that cannot peek.
    pub async fn peek(&self, key: &str, limit: &Limit) -> Result<Decision, Error> {
        self.peek_bucket(&bucket_key(&self.inner.prefix, None, key), limit)
            .await
    }

    /// [`peek`](RateLimiter::peek) at the bucket of `key` under the limit called `name`: a
    /// `#[rate_limit]` function's, by its limit's name (see
    /// [`declared_limits`](crate::declared_limits)).
    ///
    /// # Errors
    /// As [`peek`](RateLimiter::peek).
    pub async fn peek_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
    ) -> Result<Decision, Error> {
        self.peek_bucket(&bucket_key(&self.inner.prefix, Some(name), key), limit)
            .await
    }

    async fn peek_bucket(&self, bucket: &str, limit: &Limit) -> Result<Decision, Error> {
        let mut decision = match &self.inner.engine {
            Engine::Local(s) => s.peek_now(bucket, limit, 1),
            Engine::Remote(remote) => {
                on_tokio()?;
                match &remote.store {
                    RemoteStore::Redis(s) => s.peek(bucket, limit, 1).await?,
                    RemoteStore::Custom(s) => s.peek_dyn(bucket, limit, 1).await?,
                }
            }
        };
        decision.let_shadow_through();
        Ok(decision)
    }

    /// Refills `key`'s bucket: deletes it from the store (a missing bucket is a full one) and
    /// from the deny caches of every instance (on Redis, each hears of it by pub/sub within
    /// milliseconds). It addresses the bucket of [`check`](RateLimiter::check); a
    /// `#[rate_limit]` function's buckets are its limit's: use
    /// [`reset_named`](RateLimiter::reset_named) with the limit's name.
    ///
    /// # Errors
    /// The store's error; the failure policy does not apply to administrative calls.
    pub async fn reset(&self, key: &str) -> Result<(), Error> {
        self.reset_bucket(&bucket_key(&self.inner.prefix, None, key))
            .await
    }

    /// [`reset`](RateLimiter::reset) for the bucket of `key` under the limit called `name`: a
    /// `#[rate_limit]` function's bucket, by its limit's name (`module::function` unless it
    /// has `name = ".."`; see [`declared_limits`](crate::declared_limits)).
    ///
    /// # Errors
    /// The store's error.
    pub async fn reset_named(&self, name: &str, key: &str) -> Result<(), Error> {
        self.reset_bucket(&bucket_key(&self.inner.prefix, Some(name), key))
            .await
    }

    async fn reset_bucket(&self, bucket: &str) -> Result<(), Error> {
        let remote = match &self.inner.engine {
            Engine::Local(s) => return s.reset(bucket).await,
            Engine::Remote(remote) => remote,
        };
        if let Some(cache) = &remote.deny_cache {
            cache.forget(bucket);
        }
        // A full bucket again: an outage that comes next does not go on from what it held.
        self.inner.resilience.forget(bucket);
        match &remote.store {
            RemoteStore::Redis(s) => {
                on_tokio()?;
                s.reset(bucket).await?;
                // After the bucket is gone, so that an instance that hears of the reset and asks
                // again finds it full; from a limiter that is no instance too.
                match &remote.fleet {
                    Some(member) => s.publish(member.channel(), bucket).await,
                    None => {
                        s.publish(&fleet::resets_channel(&self.inner.prefix), bucket)
                            .await
                    }
                }
            }
            RemoteStore::Custom(s) => s.reset_dyn(bucket).await,
        }
    }

    /// The deny cache, on a remote store that keeps one.
    fn deny_cache(&self) -> Option<&DenyCache> {
        match &self.inner.engine {
            Engine::Local(_) => None,
            Engine::Remote(remote) => remote.deny_cache.as_deref(),
        }
    }

    /// Forgets every refusal remembered by the local deny cache (after changing limits at run
    /// time, say). The next call on each bucket asks the store.
    pub fn clear_deny_cache(&self) {
        if let Some(cache) = self.deny_cache() {
            cache.clear();
        }
    }

    /// How many refused buckets the local deny cache remembers now.
    pub fn deny_cache_len(&self) -> usize {
        self.deny_cache().map_or(0, DenyCache::len)
    }
}

/// Why a call on [`RateLimiter::check_n`]'s path was not decided in its first poll.
enum Local {
    /// Reserved: the call waits its turn on this bucket.
    Wait(String, Decision),
    /// Not a memory store: to be asked through [`RateLimiter::decide`].
    Remote,
}

/// A memory store's decision, through [`must_wait`]; `Err` when the call reserved its tokens
/// and must wait.
#[inline]
fn check_locally(mut decision: Decision) -> Result<Decision, Decision> {
    if must_wait(std::slice::from_mut(&mut decision)) {
        Err(decision)
    } else {
        Ok(decision)
    }
}

/// Observes a decision of the memory store made on the stack-built bucket key, which is
/// shown only at TRACE: only then is it built again, as a string.
#[inline]
fn observe_locally(decision: &Decision, prefix: &str, name: Option<&str>, key: &str) {
    if tracing::enabled!(target: "redis_ratelimit", tracing::Level::TRACE) {
        decision.observe(observed_name(name), Some(&bucket_key(prefix, name, key)));
    } else {
        decision.observe(observed_name(name), None);
    }
}

/// The name a decision is observed under: `check_named`'s, or none (`check`).
fn observed_name(name: Option<&str>) -> crate::observe::Name<'_> {
    match name {
        Some(name) => crate::observe::Name::Given(name),
        None => crate::observe::Name::None,
    }
}

/// What every decision goes through once made: a refusal by a limit in shadow mode is let
/// through; then whether the call reserved its tokens and must wait for them.
fn must_wait(decisions: &mut [Decision]) -> bool {
    decisions.iter_mut().for_each(Decision::let_shadow_through);
    reserved(decisions).is_some()
}

/// A remote store's answer on its way, as a trait object: its type (the store's whole call)
/// would otherwise be part of every caller's future, deep enough that proving a spawned
/// caller `Send` exceeds the compiler's default recursion limit.
type BoxedAnswer<'a, T> = std::pin::Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// How long a call admitted under `decisions` must wait for its reserved tokens: `None` when
/// it was refused or goes at once.
fn reserved(decisions: &[Decision]) -> Option<Duration> {
    if !decisions.iter().all(|d| d.allowed) {
        return None;
    }
    // A shadowed part's `retry_after` is when it would have admitted the call, not a wait.
    decisions
        .iter()
        .filter(|d| !d.shadowed)
        .map(|d| d.retry_after)
        .max()
        .filter(|w| !w.is_zero())
}

/// The tokens a waiting call reserved, given back unless it was served.
struct GiveBack<'a> {
    limiter: &'a RateLimiter,
    parts: Vec<(Box<str>, Limit, u32, Source)>,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        if !self.parts.is_empty() {
            self.limiter.give_back(std::mem::take(&mut self.parts));
        }
    }
}

/// [`Error::NoRuntime`] unless called within a Tokio runtime.
fn on_tokio() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| Error::NoRuntime)
}

/// The checks of one call, validated: at least one, every cost valid, no bucket twice.
fn validate_all<'a, B: AsRef<str>>(
    checks: &'a [(B, &'a Limit, u32)],
) -> Result<Vec<(&'a str, &'a Limit, u32)>, Error> {
    if checks.is_empty() {
        return Err(Error::NoLimits);
    }
    let mut out: Vec<(&str, &Limit, u32)> = Vec::with_capacity(checks.len());
    for (bucket, limit, cost) in checks {
        validate_cost(limit, *cost)?;
        let bucket = bucket.as_ref();
        if out.iter().any(|c| c.0 == bucket) {
            return Err(Error::DuplicateBucket(bucket.to_owned()));
        }
        out.push((bucket, limit, *cost));
    }
    Ok(out)
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
        let store = match &self.inner.engine {
            Engine::Local(s) => format!("{s:?}"),
            Engine::Remote(Remote {
                store: RemoteStore::Redis(s),
                ..
            }) => format!("{s:?}"),
            Engine::Remote(_) => "custom".to_owned(),
        };
        f.debug_struct("RateLimiter")
            .field("prefix", &self.inner.prefix)
            .field("store", &store)
            .field("policy", &self.inner.resilience.policy)
            .field("empty_key", &self.inner.empty_key)
            .field("deadline", &self.inner.resilience.deadline)
            .finish()
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
    /// [`MemoryStore::new`], bounded at 1,000,000 buckets), to choose its bound: say
    /// `MemoryStore::new().with_max_keys(100_000)`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    /// A store of the user's own that is down: every call fails as a timeout would.
    struct DownStore;

    impl Store for DownStore {
        async fn check(&self, _: &str, _: &Limit, _: u32) -> Result<Decision, Error> {
            Err(Error::Timeout(Duration::from_millis(1)))
        }

        async fn reset(&self, _: &str) -> Result<(), Error> {
            Err(Error::Timeout(Duration::from_millis(1)))
        }
    }

    #[tokio::test]
    async fn the_fallback_runs_in_the_store_given_within_its_bound() {
        // A multiple of the shard count (at most 256): each shard holds at most its part.
        let fallback = MemoryStore::with_clock(ManualClock::new()).with_max_keys(256);
        let limiter = RateLimiter::builder()
            .store(DownStore)
            .fallback_store(fallback.clone())
            .build()
            .await
            .unwrap();
        let limit = Limit::per_hour(1);
        for key in 0..1000 {
            let d = limiter.check(&key.to_string(), &limit).await.unwrap();
            assert_eq!((d.allowed, d.source), (true, Source::Fallback), "{key}");
        }
        assert!(limiter.is_degraded());
        let held = fallback.len();
        assert!(
            (1..=256).contains(&held),
            "the bound of the store given holds: {held}"
        );
        assert_eq!(
            fallback.evicted_active(),
            1000 - u64::try_from(held).unwrap()
        );
        // The bucket just taken from stays, exhausted, in the fallback.
        assert!(!limiter.check("999", &limit).await.unwrap().allowed);
    }

    #[tokio::test]
    async fn a_limit_with_its_own_policy_overrides_the_limiters() {
        let limiter = RateLimiter::builder()
            .store(DownStore)
            .failure_policy(FailurePolicy::Fallback)
            .build()
            .await
            .unwrap();
        let limit = Limit::per_hour(1);
        let closed = limit.on_failure(FailurePolicy::Deny);
        let open = limit.on_failure(FailurePolicy::Allow);
        for _ in 0..3 {
            let d = limiter.check("k", &closed).await.unwrap();
            assert_eq!((d.allowed, d.source), (false, Source::FailClosed));
            assert!(
                d.retry_after > Duration::ZERO,
                "a refusal says when to retry"
            );
            let d = limiter.check("k", &open).await.unwrap();
            assert_eq!((d.allowed, d.source), (true, Source::FailOpen));
        }
        let d = limiter.check("k", &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (true, Source::Fallback));
        assert!(!limiter.check("k", &limit).await.unwrap().allowed);
        assert_eq!(closed.to_string(), "1 per hour (burst 1), on failure deny");
    }
}

#[cfg(test)]
mod future_sizes {
    #![allow(clippy::unwrap_used)]

    /// What a one-limit call moves on every poll: the memory path's future must not carry the
    /// other paths' states (the store's call, a wait, several limits), which are boxed. The
    /// bounds are today's sizes (docs/benchmarks.md); a change that grows them should say why.
    #[test]
    fn a_one_limit_call_carries_no_other_path() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let limiter = rt
            .block_on(super::RateLimiter::builder().memory().build())
            .unwrap();
        let limit = crate::Limit::per_second(1);
        static DECL: crate::LimitDeclaration =
            crate::LimitDeclaration::new("n", crate::Limit::per_second(1), 1, "Global", "f", 1);
        let sizes = [
            std::mem::size_of_val(&limiter.check("k", &limit)),
            std::mem::size_of_val(&limiter.check_named("n", "k", &limit, 1)),
            // As the macro calls it: the resolver behind `&dyn`.
            std::mem::size_of_val(&crate::__private::check(
                &DECL,
                &crate::Global as &dyn crate::KeyResolver,
                Some(&limiter),
            )),
        ];
        assert!(
            sizes[0] <= 160 && sizes[1] <= 192 && sizes[2] <= 56,
            "check, check_named, #[rate_limit]: {sizes:?} bytes"
        );
    }
}
