//! Shared helpers of the root integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use redis_ratelimit::{
    Decision, FailurePolicy, Limit, RateLimiter, Source, clock::ManualClock, store::MemoryStore,
};
use testkit::RedisServer;
use testkit::wait::eventually;

/// A limiter on one of the two stores, with a way to let time pass and to know how exact the
/// store's answers can be.
pub(crate) struct Harness {
    pub(crate) limiter: RateLimiter,
    pub(crate) clock: Option<ManualClock>,
    pub(crate) memory: Option<MemoryStore>,
    pub(crate) server: Option<RedisServer>,
}

/// A decision with the local instants that bracket when the store took it.
#[derive(Debug, Clone)]
pub(crate) struct Timed {
    pub(crate) d: Decision,
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
}

impl Harness {
    pub(crate) async fn memory() -> Harness {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let limiter = RateLimiter::builder()
            .memory_store(store.clone())
            .prefix("test")
            .build()
            .await
            .unwrap();
        Harness {
            limiter,
            clock: Some(clock),
            memory: Some(store),
            server: None,
        }
    }

    pub(crate) async fn redis() -> Harness {
        let server = RedisServer::start();
        let limiter = redis_limiter(&server, "test").await;
        Harness {
            limiter,
            clock: None,
            memory: None,
            server: Some(server),
        }
    }

    /// On a server that refuses `FUNCTION` (renamed away), where the limiter decides by
    /// `EVALSHA` of each script: the path a server without functions takes.
    pub(crate) async fn redis_evalsha() -> Harness {
        let server = RedisServer::start_with(&["--rename-command", "FUNCTION", ""]);
        let limiter = redis_limiter(&server, "test").await;
        let debug = format!("{limiter:?}");
        assert!(debug.contains("EVALSHA"), "{debug}");
        Harness {
            limiter,
            clock: None,
            memory: None,
            server: Some(server),
        }
    }

    /// On a server that loaded the Redis module (`module/`), where the limiter decides by
    /// its commands what the module decides natively, and by `FCALL` the rest.
    pub(crate) async fn redis_module() -> Harness {
        let server = RedisServer::start_with(&testkit::module::load_args());
        let limiter = redis_limiter(&server, "test").await;
        assert_eq!(
            limiter.redis_path(),
            Some(redis_ratelimit::store::RedisPath::Module),
            "{limiter:?}"
        );
        Harness {
            limiter,
            clock: None,
            memory: None,
            server: Some(server),
        }
    }

    pub(crate) fn is_memory(&self) -> bool {
        self.clock.is_some()
    }

    /// Another limiter on the same store with another prefix.
    pub(crate) async fn with_prefix(&self, prefix: &str) -> RateLimiter {
        match (&self.memory, &self.server) {
            (Some(store), _) => RateLimiter::builder()
                .memory_store(store.clone())
                .prefix(prefix)
                .build()
                .await
                .unwrap(),
            (_, Some(server)) => redis_limiter(server, prefix).await,
            _ => unreachable!(),
        }
    }

    /// Lets `by` pass: exactly on the memory store's clock, at least `by` on Redis.
    pub(crate) async fn advance(&self, by: Duration) {
        match &self.clock {
            Some(clock) => clock.advance(by),
            None => tokio::time::sleep(by).await,
        }
    }

    pub(crate) async fn check(&self, key: &str, limit: &Limit, cost: u32) -> Timed {
        let sent = Instant::now();
        let d = self.limiter.check_n(key, limit, cost).await.unwrap();
        let received = Instant::now();
        assert_eq!(
            d.source,
            Source::Store,
            "the store decided, not a failure policy"
        );
        Timed { d, sent, received }
    }

    /// Asserts `actual` is `expected` on the memory store; on Redis, where real time passes
    /// between calls, that it lies within `expected - slack ..= expected`.
    pub(crate) fn assert_duration(
        &self,
        actual: Duration,
        expected: Duration,
        slack: Duration,
        what: &str,
    ) {
        if self.is_memory() {
            assert_eq!(actual, expected, "{what}");
        } else {
            assert!(
                actual <= expected && actual + slack >= expected,
                "{what}: {actual:?} not within {slack:?} below {expected:?}"
            );
        }
    }
}

/// The memory store's clock on Tokio's: under paused time (`#[tokio::test(start_paused =
/// true)]`) the store counts the same virtual time the limiter sleeps, so a test of waiting
/// takes no real time and no busy machine can make it late.
#[derive(Debug, Clone)]
pub(crate) struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is now (create it inside the test's runtime).
    pub(crate) fn new() -> TokioClock {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl redis_ratelimit::clock::Clock for TokioClock {
    fn now_micros(&self) -> u64 {
        let since = tokio::time::Instant::now().saturating_duration_since(self.origin);
        // Away from zero, as the store's own clocks are.
        (1 << 40) + u64::try_from(since.as_micros()).unwrap_or(u64::MAX >> 1)
    }
}

pub(crate) async fn redis_limiter(server: &RedisServer, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .redis(server.url())
        .prefix(prefix)
        // Errors must show, never be hidden by a fallback; a loaded CI machine may be slow.
        .failure_policy(FailurePolicy::Deny)
        // These tests hold the store's own answers; the deny cache has tests of its own.
        .deny_cache(0)
        .deadline(Some(Duration::from_secs(10)))
        .build()
        .await
        .unwrap()
}

/// Waits until `limiter`'s deny cache holds nothing (another instance's give-back reached it
/// by pub/sub: the event, which the cache does not signal, so it is looked at again and
/// again); `after` says what should have made it forget.
pub(crate) async fn until_deny_cache_forgets(limiter: &RateLimiter, after: &str) {
    let what = format!("the deny cache to forget its refusals after {after}");
    eventually(what, async || limiter.deny_cache_len() == 0).await;
}

/// A limiter whose Redis was killed once it was built: every call is its fallback's (under
/// the prefix `down`, each call giving up on the dead store after 200 ms). The server is
/// kept for a restart.
pub(crate) async fn fallback_without_redis() -> (RateLimiter, RedisServer) {
    testkit::outage::limiter_without_redis(|builder| {
        builder
            .prefix("down")
            .failure_policy(FailurePolicy::Fallback)
            .deadline(Some(Duration::from_millis(200)))
    })
    .await
}

/// A limiter on `server` with its deny cache, as a service runs one, under the prefix
/// `fleet` and the failure policy `policy`.
pub(crate) async fn fleet_instance(server: &RedisServer, policy: FailurePolicy) -> RateLimiter {
    RateLimiter::builder()
        .redis(server.url())
        .prefix("fleet")
        .failure_policy(policy)
        .deadline(Some(Duration::from_secs(10)))
        .build()
        .await
        .unwrap()
}

/// Redis Cluster's hash slot of a key (the limiter's own; its values are checked against the
/// cluster specification in ratelimit-core).
#[allow(unused_imports)]
pub(crate) use redis_ratelimit::tools::key_slot;

/// The limiter of a test file's annotated functions, in memory under `prefix`: the first test
/// to get here builds it (another may win the race; either limiter is the same kind).
pub(crate) async fn memory_limiter(
    cell: &'static std::sync::OnceLock<RateLimiter>,
    prefix: &str,
) -> &'static RateLimiter {
    if cell.get().is_none() {
        let built = RateLimiter::builder()
            .memory()
            .prefix(prefix)
            .build()
            .await
            .expect("an in-memory limiter builds");
        let _ = cell.set(built);
    }
    cell.get().expect("just set")
}

/// A request for `path`.
pub(crate) fn request(path: &str) -> redis_ratelimit::RequestContext {
    redis_ratelimit::RequestContext::new().with_path(path)
}

/// Runs `call` `n` times in `ctx`'s scope and returns how many were admitted.
pub(crate) async fn admitted<F, T, E>(
    ctx: impl Fn() -> redis_ratelimit::RequestContext,
    n: usize,
    call: impl Fn() -> F,
) -> usize
where
    F: Future<Output = Result<T, E>>,
{
    let mut ok = 0;
    for _ in 0..n {
        if redis_ratelimit::context::scope(ctx(), call()).await.is_ok() {
            ok += 1;
        }
    }
    ok
}

/// Each `case(harness)` as two tests, `memory::case` and `redis::case`: on
/// `<$harness>::memory()` under the attribute given (`#[tokio::test]`, or paused time for a
/// harness on Tokio's clock), and on `<$harness>::redis()` on a multi-thread runtime. Without a
/// harness, [`Harness`] under `#[tokio::test]`, a third test, `evalsha::case`, on a server
/// without functions ([`Harness::redis_evalsha`]), and a fourth, `module::case`, on a server
/// with the Redis module ([`Harness::redis_module`]). (Not every test file runs cases on
/// both.)
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($harness:ty, #[$memory:meta]: $($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[$memory]
                async fn $case() {
                    super::$case(<$harness>::memory().await).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(<$harness>::redis().await).await;
                }
            )*
        }
    };
    ($($case:ident),* $(,)?) => {
        $crate::support::on_both_stores!($crate::support::Harness, #[tokio::test]: $($case),*);
        /// The same cases on a server without functions, decided by `EVALSHA`.
        mod evalsha {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::support::Harness::redis_evalsha().await).await;
                }
            )*
        }
        /// The same cases on a server with the Redis module, decided by its commands.
        mod module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::support::Harness::redis_module().await).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both_stores;

/// Serves `$server` (an `actix_web::HttpServer`, configured but not bound) on a free loopback
/// port, with one worker and no signal handling, from this runtime (an `#[actix_web::test]`):
/// its address, and its handle to stop it.
#[allow(unused_macros)]
macro_rules! serve_actix {
    ($server:expr) => {{
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = $server
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        (addr, handle)
    }};
}
#[allow(unused_imports)]
pub(crate) use serve_actix;

/// Each `case(server)` of a test file as two tests, `memory::case` (`None`) and
/// `redis::case` (a `redis-server` of its own): the cases of files whose functions use one
/// static limiter, which each test (a process of its own under nextest) builds on its store.
#[allow(unused_macros)]
macro_rules! on_memory_and_redis {
    ($($case:ident),*) => {
        mod memory {
            $(#[tokio::test]
            async fn $case() {
                super::$case(None).await;
            })*
        }
        mod redis {
            $(#[tokio::test]
            async fn $case() {
                super::$case(Some(testkit::RedisServer::start())).await;
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_memory_and_redis;

/// A call (given what it tells when it runs, and what tells it to end) that holds its
/// concurrency slots until the sender returned is used; or its refusal.
#[allow(dead_code)]
pub(crate) type Held = Result<
    (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<(), redis_ratelimit::RateLimited>>,
    ),
    redis_ratelimit::RateLimited,
>;

/// Starts `call` and returns once its body runs (it holds its slots), or with its refusal:
/// an event, never a wait for time to pass.
#[allow(dead_code)]
pub(crate) async fn hold<F>(
    call: impl FnOnce(tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>) -> F,
) -> Held
where
    F: Future<Output = Result<(), redis_ratelimit::RateLimited>> + Send + 'static,
{
    let (running, started) = tokio::sync::oneshot::channel();
    let (end, ended) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(call(running, ended));
    match started.await {
        Ok(()) => Ok((end, task)),
        Err(_) => Err(task.await.unwrap().unwrap_err()),
    }
}

/// Ends a call [`hold`] started, which held its slots.
#[allow(dead_code)]
pub(crate) async fn end(held: Held) {
    let (end, task) = held.ok().unwrap();
    end.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// A GET of `path` from the client at `client` (its peer address, port 5000), served by the
/// actix-web test service `app`: the response.
#[allow(unused_macros)]
macro_rules! actix_get {
    ($app:expr, $client:expr, $path:expr) => {
        actix_web::test::call_service(
            &$app,
            actix_web::test::TestRequest::get()
                .uri($path)
                .peer_addr(format!("{}:5000", $client).parse().unwrap())
                .to_request(),
        )
        .await
    };
}
#[allow(unused_imports)]
pub(crate) use actix_get;
