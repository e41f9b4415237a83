//! The rate limiter, and the one way a call is decided.
//!
//! Every way in (`check*`, `acquire*`, and the code `#[rate_limit]` generates) names its
//! checks' buckets, validates their costs, and goes through the same stages:
//! 1. local ([`RateLimiter::decide_locally`]): a memory store decides in the call's first
//!    poll, with nothing in a future;
//! 2. remote ([`RateLimiter::decide`], [`RateLimiter::decide_all`], in `remote.rs`): the deny
//!    cache, the circuit, the deadline, the store, and the failure policy when it fails;
//!    before `enable_redis_rate_limit!`, the failure policy alone ([`Engine::Unenabled`]);
//! 3. finish (`waiting.rs`): shadow mode, then the wait of a call that reserved its tokens,
//!    which gives them back if the caller leaves first.
//!
//! The caller then observes each limit's decision (span, metrics) under its name.

mod admin;
mod builder;
mod concurrency;
mod refund;
mod remote;
mod waiting;

pub use builder::{DEFAULT_PREFIX, RateLimiterBuilder};
pub use concurrency::{Entered, Slot};
use waiting::must_wait;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use crate::algorithm::Outcome;
use crate::check::{Check, OwnedCheck};
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
use crate::store::{MemoryStore, RedisStore, Store};
use crate::{Decision, Error, Limit};

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
    /// No store yet: calls made before `enable_redis_rate_limit!` are decided by their failure
    /// policy, as if the store were down, on the same path as every other call.
    Unenabled,
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
    /// None yet (the limiter of calls made before enable; never a builder's).
    Unenabled,
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
    /// [`InvalidLimit::CannotWait`]: crate::error::InvalidLimit::CannotWait
    /// [`InvalidLimit::WaitTooLong`]: crate::error::InvalidLimit::WaitTooLong
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
        self.check_by_name(None, key, &limit.try_wait(max_wait)?, cost)
            .await
    }

    /// [`acquire_n`](RateLimiter::acquire_n) under the limit called `name`: waits up to
    /// `max_wait` for `cost` tokens of `key`'s bucket under that name, as
    /// [`check_named`](RateLimiter::check_named) takes them without waiting (a
    /// `#[rate_limit(wait = ..)]` function's buckets are its limit's name's).
    ///
    /// ```
    /// use ratelimit_core::{Limit, RateLimiter};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = RateLimiter::builder().memory().build().await?;
    /// const FETCH: Limit = Limit::per_second(10).burst(1);
    /// let wait = Duration::from_secs(2);
    /// let d = limiter.acquire_named("crawler::fetch", "example.org", &FETCH, 1, wait).await?;
    /// assert!(d.allowed);
    /// // The named bucket is empty now; the unnamed one of `acquire` and `check` is another.
    /// assert!(!limiter.peek_named("crawler::fetch", "example.org", &FETCH).await?.allowed);
    /// assert!(limiter.peek("example.org", &FETCH).await?.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`acquire_n`](RateLimiter::acquire_n).
    pub async fn acquire_named(
        &self,
        name: &str,
        key: &str,
        limit: &Limit,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision, Error> {
        self.check_by_name(Some(name), key, &limit.try_wait(max_wait)?, cost)
            .await
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
            if let Err(e) = validate(&Check::new("", limit, cost)) {
                return Poll::Ready(Err(e));
            }
            let prefix = &*self.inner.prefix;
            let then = match self.decide_locally(limit, cost, |store| {
                with_bucket_key(prefix, name, key, |bucket| {
                    store.check_bytes(bucket, limit, cost)
                })
            }) {
                Local::Decided(decision) => {
                    observe_locally(&decision, prefix, name, key);
                    return Poll::Ready(Ok(decision));
                }
                Local::Reserved(decision) => Rest::Wait(bucket_key(prefix, name, key), decision),
                Local::Elsewhere => Rest::Remote,
            };
            rest.insert(self.decide_by_name(name, key, limit, cost, then))
                .as_mut()
                .poll(cx)
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
        then: Rest,
    ) -> BoxedAnswer<'static, Decision> {
        let limiter = self.clone();
        let name = name.map(str::to_owned);
        let key = key.to_owned();
        let limit = *limit;
        Box::pin(async move {
            let (bucket, decision) = match then {
                Rest::Wait(bucket, reserved) => {
                    let check = Check::new(&bucket, &limit, cost);
                    let decision = limiter.wait_one(check, reserved).await?;
                    (bucket, decision)
                }
                Rest::Remote => {
                    let bucket = bucket_key(&limiter.inner.prefix, name.as_deref(), &key);
                    let decision = limiter.decide(Check::new(&bucket, &limit, cost)).await?;
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
        self.check_all_by_name(checks, |&(key, limit, cost)| (None, key, limit, cost))
            .await
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
        self.check_all_by_name(checks, |&(name, key, limit, cost)| {
            (Some(name), key, limit, cost)
        })
        .await
    }

    /// [`check_all`](Self::check_all) and [`check_all_named`](Self::check_all_named): each
    /// check's bucket named, decided together, and each limit observed under its name.
    async fn check_all_by_name<'a, T>(
        &self,
        checks: &'a [T],
        parts: impl Fn(&'a T) -> (Option<&'a str>, &'a str, &'a Limit, u32),
    ) -> Result<Decision, Error> {
        // The checks are read twice (to name the buckets, then to observe under the names)
        // rather than their names collected into a vector of their own.
        let buckets: Vec<String> = checks
            .iter()
            .map(|c| {
                let (name, key, ..) = parts(c);
                bucket_key(&self.inner.prefix, name, key)
            })
            .collect();
        let named: Vec<Check<'_>> = checks
            .iter()
            .zip(&buckets)
            .map(|(c, bucket)| {
                let (_, _, limit, cost) = parts(c);
                Check::new(bucket, limit, cost)
            })
            .collect();
        let decision = self.check_buckets(&named).await?;
        for ((part, check), bucket) in decision.parts().iter().zip(checks).zip(&buckets) {
            part.observe(observed_name(parts(check).0), Some(bucket));
        }
        Ok(decision)
    }

    /// Decides several already-named buckets together (the macro's path for stacked limits).
    pub(crate) async fn check_buckets(&self, checks: &[Check<'_>]) -> Result<Decision, Error> {
        validate_all(checks)?;
        let parts = self.decide_all(checks).await?;
        Ok(Decision::combined(parts))
    }

    /// The pipeline's local stage: a memory store decides in the call's first poll, with
    /// nothing in a future. `check` asks the store for its small outcome on a bucket key the
    /// caller names (built on the stack, or remembered); the decision is built once, here
    /// (docs/benchmarks.md 4.6), and finished (shadow mode, a reservation's wait).
    #[inline]
    pub(crate) fn decide_locally(
        &self,
        limit: &Limit,
        cost: u32,
        check: impl FnOnce(&MemoryStore) -> Outcome<()>,
    ) -> Local {
        let Engine::Local(store) = &self.inner.engine else {
            return Local::Elsewhere;
        };
        let mut decision = Decision::from_outcome(&check(store), *limit, cost);
        if must_wait(std::slice::from_mut(&mut decision)) {
            Local::Reserved(decision)
        } else {
            Local::Decided(decision)
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
    pub(crate) fn decide_without_key(
        &self,
        policy: Option<EmptyKeyPolicy>,
        limit: &Limit,
        cost: u32,
    ) -> Decision {
        let policy = policy.unwrap_or(self.inner.empty_key);
        decide_by(policy == EmptyKeyPolicy::Allow, limit, cost, Source::NoKey)
    }

    /// The decision for a call whose key could not be found out (an async resolver failed or
    /// ran past the deadline): the limit's failure policy, as when the store fails, except that
    /// the fallback, with no key to keep a bucket of, refuses.
    pub(crate) fn decide_unresolved(&self, limit: &Limit, cost: u32) -> Decision {
        match limit
            .failure_policy()
            .unwrap_or(self.inner.resilience.policy)
        {
            FailurePolicy::Allow => decide_by(true, limit, cost, Source::FailOpen),
            _ => decide_by(false, limit, cost, Source::FailClosed),
        }
    }

    /// How long a call waits for the store before its failure policy decides.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.inner.resilience.deadline
    }

    /// The refusal of a call whose limit could not be checked: by nobody's policy but
    /// its own, never admitted (a limit in shadow mode lets it through).
    pub(crate) fn fail_closed(limit: &Limit, cost: u32) -> Decision {
        decide_by(false, limit, cost, Source::FailClosed)
    }
}

/// A decision taken without a store: `allowed` or not, by `source`, a limit in shadow mode
/// letting a refusal through.
fn decide_by(allowed: bool, limit: &Limit, cost: u32, source: Source) -> Decision {
    let mut decision =
        Decision::new(allowed, 0, *limit, cost, Duration::ZERO, Duration::ZERO).with_source(source);
    decision.let_shadow_through();
    decision
}

/// What the local stage came to ([`RateLimiter::decide_locally`]).
pub(crate) enum Local {
    /// Decided and finished: the call goes, or is refused, now.
    Decided(Decision),
    /// Admitted with tokens reserved: the call waits for them
    /// ([`RateLimiter::wait_one`]).
    Reserved(Decision),
    /// Not a memory store: the remote stage decides ([`RateLimiter::decide`]).
    Elsewhere,
}

/// Why a call on [`RateLimiter::check_n`]'s path was not decided in its first poll.
enum Rest {
    /// Reserved: the call waits its turn on this bucket.
    Wait(String, Decision),
    /// Not a memory store: to be asked through [`RateLimiter::decide`].
    Remote,
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

/// A remote store's answer on its way, as a trait object: its type (the store's whole call)
/// would otherwise be part of every caller's future, deep enough that proving a spawned
/// caller `Send` exceeds the compiler's default recursion limit.
type BoxedAnswer<'a, T> = std::pin::Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// [`Error::NoRuntime`] unless called within a Tokio runtime.
fn on_tokio() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| Error::NoRuntime)
}

/// Validates the checks of one call: at least one, every cost valid, no bucket twice.
fn validate_all(checks: &[Check<'_>]) -> Result<(), Error> {
    if checks.is_empty() {
        return Err(Error::NoLimits);
    }
    for (i, check) in checks.iter().enumerate() {
        validate(check)?;
        if checks[..i].iter().any(|c| c.bucket == check.bucket) {
            return Err(Error::DuplicateBucket(check.bucket.to_owned()));
        }
    }
    Ok(())
}

/// Validates one check: its cost fits its limit, and a concurrency limit is held by a call.
fn validate(check: &Check<'_>) -> Result<(), Error> {
    // A concurrency limit is decided only with a slot to give back (`enter`), which gives it
    // its holder.
    if check.limit.is_concurrent() && check.holder == 0 {
        return Err(crate::error::InvalidLimit::NeedsSlot.into());
    }
    check.limit.check_cost(check.cost)
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
            Engine::Unenabled => "none (not enabled)".to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

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
    async fn a_custom_store_cannot_hold_concurrency_slots() {
        let limiter = RateLimiter::builder()
            .store(DownStore)
            .build()
            .await
            .unwrap();
        let e = limiter.enter("k", &Limit::concurrent(2)).await.unwrap_err();
        assert!(matches!(e, Error::ConcurrencyUnsupported), "{e}");
        // Rate limits alone still go through `enter_all` (holding nothing).
        let d = limiter
            .enter_all(&[("k", &Limit::per_second(1), 1)])
            .await
            .unwrap();
        assert!(d.slot.is_some_and(|s| format!("{s:?}").contains("[]")));
    }

    #[test]
    fn the_fallback_divides_a_concurrency_limit_among_live_instances() {
        let store = MemoryStore::with_clock(ManualClock::new());
        let limit = Limit::concurrent(7);
        // Three live instances: each holds 7 / 3 = 2 slots (whole slots, at least one).
        let admitted = (1..=5)
            .filter(|&h| {
                store
                    .check_share(Check::new("k", &limit, 1).held_by(h), 3, None)
                    .allowed
            })
            .count();
        assert_eq!(admitted, 2);
        // More instances than slots: each still holds one, never none.
        let one = Limit::concurrent(2);
        let admitted = (1..=3)
            .filter(|&h| {
                store
                    .check_share(Check::new("j", &one, 1).held_by(h), 5, None)
                    .allowed
            })
            .count();
        assert_eq!(admitted, 1);
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
            // As the macro calls it: the key as a `KeyArg`.
            std::mem::size_of_val(&crate::__private::check_key(
                &DECL,
                &crate::__private::KeyArg::Resolver(&crate::Global),
                crate::pipeline::Call::NONE,
                Some(&limiter),
            )),
        ];
        assert!(
            sizes[0] <= 160 && sizes[1] <= 192 && sizes[2] <= 56,
            "check, check_named, #[rate_limit]: {sizes:?} bytes"
        );
    }
}
