//! The rate limiter: its type, how it is built, and its methods, each a constructor of checks.
//!
//! A public method names its checks' buckets under the limiter's prefix and hands them to the
//! pipeline, which decides them (`crate::pipeline`):
//! - a call of one rate limit (`check*`, `acquire*`) to the one-limit path
//!   ([`local::decide_locally`](crate::pipeline::local::decide_locally) in the call's first poll, else
//!   [`local::decide_later`](crate::pipeline::local::decide_later));
//! - every other slice of checks (`check_all*`, `enter*`, `peek*`, `check_*estimate*`,
//!   `refund*`, and `Usage`'s settlement) to the
//!   funnel, [`decide::decide_checks`](crate::pipeline::decide::decide_checks), whose answer the method combines once.
//!
//! The methods then observe each limit's decision (span, metrics) under its name.

mod admin;
mod builder;
mod concurrency;
pub(crate) mod inner;
mod refund;
pub(crate) mod slot;
mod usage;

pub use builder::{DEFAULT_PREFIX, RateLimiterBuilder};
pub use concurrency::Entered;
pub use inner::RateLimiter;
pub(crate) use inner::{Engine, Inner, Remote, RemoteStore};
pub use slot::Slot;
pub use usage::{IntoActual, Settlement, Usage};

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::decision::Decision;
use crate::decision::Source;
use crate::deny_cache::{DEFAULT_DENY_CACHE_CAPACITY, DenyCache};
use crate::errors::Error;
use crate::fleet::{self, Member};
use crate::limit::Limit;
use crate::limit::{EmptyKeyPolicy, FailurePolicy};
use crate::naming::bucket_key;
use crate::naming::key_slot;
use crate::observe::observed_name;
use crate::pipeline::check::Check;
use crate::pipeline::decide::{Ask, Decided, decide_checks};
use crate::pipeline::local::check_by_name;
use crate::policy::{DEFAULT_COOLDOWN, DEFAULT_DEADLINE, Resilience, SLOTS_PER_CIRCUIT};
use crate::store::DynStore;
use crate::store::{MemoryStore, RedisStore, Store};

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
        check_by_name(self, None, key, limit, cost)
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
        check_by_name(self, None, key, &limit.try_wait(max_wait)?, cost).await
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
        check_by_name(self, Some(name), key, &limit.try_wait(max_wait)?, cost).await
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
        check_by_name(self, Some(name), key, limit, cost)
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

    /// [`check_all`](Self::check_all) and [`check_all_named`](Self::check_all_named): the
    /// checks named, decided together, each limit observed under its name.
    async fn check_all_by_name<'a, T>(
        &self,
        checks: &'a [T],
        parts: impl Fn(&'a T) -> (Option<&'a str>, &'a str, &'a Limit, u32),
    ) -> Result<Decision, Error> {
        let decided = self
            .decide_named(checks.iter().map(parts), Ask::Take)
            .await?;
        Ok(decided.combined().0)
    }

    /// The checks of a public method, `(name, key, limit, cost)` each, named under the prefix
    /// and decided by the funnel ([`decide_checks`]); each limit that took
    /// is observed under its name (a peek took nothing, and is not counted).
    pub(crate) async fn decide_named<'a>(
        &self,
        checks: impl Iterator<Item = (Option<&'a str>, &'a str, &'a Limit, u32)>,
        ask: Ask<'_>,
    ) -> Result<Decided, Error> {
        let named = Named::new(&self.inner.prefix, checks);
        let decided = decide_checks(self, &named.checks(), ask).await?;
        if ask != Ask::Peek {
            named.observe(&decided.parts);
        }
        Ok(decided)
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

    /// How decisions run on Redis now, for a limiter on Redis: as the Redis module's
    /// commands where the server has the module ([`RedisPath::Module`]), else by `FCALL` of
    /// the function library, else by `EVALSHA` of each script. Chosen when the limiter was
    /// built, and changed for good (logged at WARN) when a node answers that it has lost
    /// the module or refuses the functions. `None` on another store.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ratelimit_core::Error> {
    /// let limiter = ratelimit_core::RateLimiter::builder().memory().build().await?;
    /// assert_eq!(limiter.redis_path(), None);
    /// # Ok(()) }
    /// ```
    ///
    /// [`RedisPath::Module`]: crate::store::RedisPath::Module
    pub fn redis_path(&self) -> Option<crate::store::RedisPath> {
        match &self.inner.engine {
            Engine::Remote(Remote {
                store: RemoteStore::Redis(s),
                ..
            }) => Some(s.path()),
            _ => None,
        }
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

    /// How long a call waits for the store before its failure policy decides.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.inner.resilience.deadline
    }
}

/// The checks of a public several-limit method (`check_all*`, `enter_all*`): each
/// `(name, key, limit, cost)` with its bucket named under the limiter's prefix, and the names
/// to observe each limit's decision under.
pub(crate) struct Named<'a> {
    checks: Vec<(Option<&'a str>, String, &'a Limit, u32)>,
}

impl<'a> Named<'a> {
    pub(crate) fn new(
        prefix: &str,
        checks: impl Iterator<Item = (Option<&'a str>, &'a str, &'a Limit, u32)>,
    ) -> Named<'a> {
        Named {
            checks: checks
                .map(|(name, key, limit, cost)| (name, bucket_key(prefix, name, key), limit, cost))
                .collect(),
        }
    }

    /// The checks, in order.
    pub(crate) fn checks(&self) -> Vec<Check<'_>> {
        self.checks
            .iter()
            .map(|(_, bucket, limit, cost)| Check::new(bucket, limit, *cost))
            .collect()
    }

    /// Observes each limit's decision (span, metrics) under its name.
    pub(crate) fn observe(&self, parts: &[Decision]) {
        for (part, (name, bucket, ..)) in parts.iter().zip(&self.checks) {
            part.observe(observed_name(*name), Some(bucket));
        }
    }
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
        let limit = crate::limit::Limit::per_second(1);
        static DECL: crate::registry::LimitDeclaration = crate::registry::LimitDeclaration::new(
            "n",
            crate::limit::Limit::per_second(1),
            1,
            "Global",
            "f",
            1,
        );
        let sizes = [
            std::mem::size_of_val(&limiter.check("k", &limit)),
            std::mem::size_of_val(&limiter.check_named("n", "k", &limit, 1)),
            // As the macro calls it: the key as a `KeyArg`.
            std::mem::size_of_val(&crate::__private::check_key(
                &DECL,
                &crate::__private::KeyArg::Resolver(&crate::resolvers::Global),
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
