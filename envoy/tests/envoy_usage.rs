//! Usage through plain Envoy: a response's token count charged at stream end into the rule's
//! bounded debt, behind a real Envoy calling two instances of the service over one Redis.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_core::{Decision, FailurePolicy, RateLimiter};
use ratelimit_envoy::config::{Config, Lookup};
use ratelimit_envoy::service::Service;
use ratelimit_envoy::usage::STREAM_DONE_KEY;
use testkit::RedisServer;
use testkit::envoy::{
    Action, Bootstrap, Envoy, HitsAddend, RateLimitFilter, RateLimitPolicy, Upstream,
};
use tonic::{Request, Response, Status};

/// The service, counting the stream-done calls it has answered (the event the tests wait
/// for: Envoy does not wait for them).
#[derive(Clone)]
struct Counted {
    service: Arc<Service>,
    stream_done: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl RateLimitService for Counted {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let answer = self.service.decide(&request).await;
        let done = request
            .descriptors
            .iter()
            .any(|d| d.entries.iter().any(|e| e.key == STREAM_DONE_KEY));
        if done {
            self.stream_done.fetch_add(1, Ordering::SeqCst);
        }
        answer.map(Response::new)
    }
}

/// Two instances of the service over one Redis, and what they share.
struct Fleet {
    limiter: RateLimiter,
    config: Config,
    addrs: Vec<SocketAddr>,
    stream_done: Arc<AtomicU64>,
}

impl Fleet {
    async fn start(redis: &RedisServer, yaml: &str) -> Fleet {
        let stream_done = Arc::new(AtomicU64::new(0));
        let mut addrs = Vec::new();
        let mut first = None;
        for _ in 0..2 {
            let limiter = RateLimiter::builder()
                .redis(redis.url())
                .prefix("envoy-usage")
                .failure_policy(FailurePolicy::Deny)
                .build()
                .await
                .expect("a limiter");
            first.get_or_insert_with(|| limiter.clone());
            let counted = Counted {
                service: Arc::new(Service::new(
                    limiter,
                    Config::parse("t.yaml", yaml).expect("valid"),
                )),
                stream_done: Arc::clone(&stream_done),
            };
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a free port");
            addrs.push(listener.local_addr().expect("bound"));
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(RateLimitServiceServer::new(counted))
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
            );
        }
        Fleet {
            limiter: first.expect("two limiters"),
            config: Config::parse("t.yaml", yaml).expect("valid"),
            addrs,
            stream_done,
        }
    }

    /// The bucket of `user`, looked at without taking.
    async fn peek(&self, user: &str) -> Decision {
        let Lookup::Rule(found) = self.config.lookup("llm", [("user", user)]) else {
            panic!("a rule for {user}");
        };
        let b = found.bucket();
        self.limiter
            .peek_named(b.name(), b.key(), found.rule().limit().expect("a limit"))
            .await
            .expect("a peek")
    }

    /// Waits until `n` stream-done calls have been answered.
    async fn wait_stream_done(&self, n: u64) {
        let seen = Arc::clone(&self.stream_done);
        testkit::wait::poll(testkit::wait::PATIENCE, async || {
            let now = seen.load(Ordering::SeqCst);
            if now >= n {
                Ok(())
            } else {
                Err(format!("{now} of {n} stream-done calls"))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// An Envoy calling both instances: the request path checks `user`'s bucket (cost 0),
    /// the stream's end charges the response's `x-tokens-used` into it.
    fn envoy(&self, upstream: &Upstream) -> Envoy {
        let user = || Action::request_headers("x-user", "user");
        let mut filter = RateLimitFilter::new("llm", self.addrs[0])
            .and_service(self.addrs[1])
            .failure_mode_deny(true)
            .retry_after_header()
            .timeout(Duration::from_secs(5))
            .rate_limit(RateLimitPolicy::new([user()]).hits_addend(HitsAddend::Number(0)));
        filter = filter.rate_limit(
            RateLimitPolicy::new([user(), Action::generic_key_as(STREAM_DONE_KEY, "0")])
                .hits_addend(HitsAddend::Format("%RESP(x-tokens-used)%".into()))
                .apply_on_stream_done(),
        );
        Envoy::start(&Bootstrap::new(upstream.addr()).rate_limit_filter(filter))
    }
}

impl Fleet {
    /// An Envoy calling both instances: the request path takes an estimate from `user`'s
    /// bucket (the request's `x-estimate`), the stream's end settles the response's
    /// `x-tokens-used` against it: the same header, read again as the stream-done entry's
    /// value (the convention of `ratelimit_envoy::usage`).
    fn envoy_estimating(&self, upstream: &Upstream) -> Envoy {
        let user = || Action::request_headers("x-user", "user");
        let filter = RateLimitFilter::new("llm", self.addrs[0])
            .and_service(self.addrs[1])
            .failure_mode_deny(true)
            .timeout(Duration::from_secs(5))
            .rate_limit(
                RateLimitPolicy::new([user()])
                    .hits_addend(HitsAddend::Format("%REQ(x-estimate)%".into())),
            )
            .rate_limit(
                RateLimitPolicy::new([
                    user(),
                    Action::request_headers("x-estimate", STREAM_DONE_KEY),
                ])
                .hits_addend(HitsAddend::Format("%RESP(x-tokens-used)%".into()))
                .apply_on_stream_done(),
            );
        Envoy::start(&Bootstrap::new(upstream.addr()).rate_limit_filter(filter))
    }
}

/// 100 tokens an hour (one back every 36 s), owing at most 50.
const TOKENS: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: token_bucket, max_debt: 50 }
";
const INTERVAL: Duration = Duration::from_secs(36);

fn get(envoy: &Envoy, user: &str, tokens: Option<&str>) -> testkit::envoy::HttpResponse {
    let mut headers = vec![("x-user", user)];
    if let Some(t) = tokens {
        headers.push(("x-upstream-respond-x-tokens-used", t));
    }
    envoy.get("/", &headers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_used_are_charged_at_stream_end_and_the_overshoot_stops_at_the_debt_bound() {
    let redis = RedisServer::start();
    let fleet = Arc::new(Fleet::start(&redis, TOKENS).await);
    let upstream = Upstream::start();
    let envoy = Arc::new(fleet.envoy(&upstream));
    // 30 tokens used: charged when the stream ends, 70 left.
    let e = Arc::clone(&envoy);
    let first = tokio::task::spawn_blocking(move || get(&e, "alice", Some("30")).status);
    assert_eq!(first.await.unwrap(), 200);
    fleet.wait_stream_done(1).await;
    assert_eq!(fleet.peek("alice").await.remaining, 70);
    // Three responses of 60 tokens, each admitted while a token is left: the second is
    // admitted whatever the first charged (10 left), so at least 120 are owed on 70. The
    // debt stops at 50 below empty.
    let mut admitted = 0;
    for _ in 0..3 {
        let e = Arc::clone(&envoy);
        let status = tokio::task::spawn_blocking(move || get(&e, "alice", Some("60")).status)
            .await
            .unwrap();
        admitted += u64::from(status == 200);
    }
    assert!(admitted >= 2, "{admitted}");
    fleet.wait_stream_done(1 + admitted).await;
    let d = fleet.peek("alice").await;
    assert!(!d.allowed);
    // Owing exactly 50 (the bound), less what refilled since: the next token is 51
    // intervals away at most, and more than 50 intervals less one.
    assert!(d.retry_after <= INTERVAL * 51, "{:?}", d.retry_after);
    assert!(d.retry_after > INTERVAL * 49, "{:?}", d.retry_after);
    // The next request is refused, and told to come back no earlier than the debt allows.
    let e = Arc::clone(&envoy);
    let refused = tokio::task::spawn_blocking(move || get(&e, "alice", Some("5")))
        .await
        .unwrap();
    assert_eq!(refused.status, 429);
    let retry: u64 = refused
        .header("retry-after")
        .expect("a retry-after")
        .parse()
        .unwrap();
    let now = fleet.peek("alice").await;
    assert!(
        Duration::from_secs(retry) >= now.retry_after,
        "{retry} s < {:?}",
        now.retry_after
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_taken_on_the_request_path_is_settled_at_stream_end() {
    let redis = RedisServer::start();
    let fleet = Arc::new(Fleet::start(&redis, TOKENS).await);
    let upstream = Upstream::start();
    let envoy = Arc::new(fleet.envoy_estimating(&upstream));
    let call = |user: &'static str, estimate: &'static str, used: &'static str| {
        let e = Arc::clone(&envoy);
        tokio::task::spawn_blocking(move || {
            e.get(
                "/",
                &[
                    ("x-user", user),
                    ("x-estimate", estimate),
                    ("x-upstream-respond-x-tokens-used", used),
                ],
            )
            .status
        })
    };
    // 20 estimated, 30 used: the excess of 10 taken at stream end.
    assert_eq!(call("alice", "20", "30").await.unwrap(), 200);
    // 20 estimated, 5 used: 15 given back.
    assert_eq!(call("bob", "20", "5").await.unwrap(), 200);
    // As estimated: nothing moves at stream end.
    assert_eq!(call("carol", "20", "20").await.unwrap(), 200);
    fleet.wait_stream_done(3).await;
    assert_eq!(fleet.peek("alice").await.remaining, 70);
    assert_eq!(fleet.peek("bob").await.remaining, 95);
    assert_eq!(fleet.peek("carol").await.remaining, 80);
    // 90 estimated on carol's 80 left: refused on the request path, nothing taken, and no
    // stream-done call follows (the next one waited for is dave's).
    assert_eq!(call("carol", "90", "90").await.unwrap(), 429);
    assert_eq!(call("dave", "10", "10").await.unwrap(), 200);
    fleet.wait_stream_done(4).await;
    assert_eq!(fleet.peek("carol").await.remaining, 80);
    assert_eq!(fleet.peek("dave").await.remaining, 90);
    assert_eq!(fleet.stream_done.load(Ordering::SeqCst), 4);
    assert_eq!(upstream.served(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_charges_nothing_at_stream_end() {
    let redis = RedisServer::start();
    let fleet = Arc::new(Fleet::start(&redis, TOKENS).await);
    let upstream = Upstream::start();
    let envoy = Arc::new(fleet.envoy(&upstream));
    // 110 used of 100: 10 owed.
    let e = Arc::clone(&envoy);
    let first = tokio::task::spawn_blocking(move || get(&e, "carol", Some("110")).status);
    assert_eq!(first.await.unwrap(), 200);
    fleet.wait_stream_done(1).await;
    let owed = fleet.peek("carol").await;
    assert!(!owed.allowed);
    assert!(owed.retry_after > INTERVAL * 10 && owed.retry_after <= INTERVAL * 11);
    // Refused on the request path: its response never reached the upstream, and no
    // stream-done call follows. A later request of another user is charged (the event
    // waited for), and carol's bucket is as it was.
    let e = Arc::clone(&envoy);
    let (refused, marker) = tokio::task::spawn_blocking(move || {
        (
            get(&e, "carol", Some("40")).status,
            get(&e, "dave", Some("5")).status,
        )
    })
    .await
    .unwrap();
    assert_eq!((refused, marker), (429, 200));
    fleet.wait_stream_done(2).await;
    assert_eq!(fleet.peek("dave").await.remaining, 95);
    let after = fleet.peek("carol").await;
    assert!(
        after.retry_after <= owed.retry_after,
        "{after:?} / {owed:?}"
    );
    assert_eq!(upstream.served(), 2);
    assert_eq!(fleet.stream_done.load(Ordering::SeqCst), 2);
}

/// 10 tokens a second (one back every 100 ms), owing at most 5.
const FAST: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, max_debt: 5 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_waited_out_is_admitted_and_never_early() {
    let redis = RedisServer::start();
    let fleet = Arc::new(Fleet::start(&redis, FAST).await);
    let upstream = Upstream::start();
    let envoy = Arc::new(fleet.envoy(&upstream));
    let e = Arc::clone(&envoy);
    let first = tokio::task::spawn_blocking(move || get(&e, "erin", Some("14")).status);
    assert_eq!(first.await.unwrap(), 200);
    fleet.wait_stream_done(1).await;
    // Polled through Envoy with check-only requests (no tokens used: nothing charged at
    // stream end) until one is admitted. Every refusal's Retry-After is at least the wait the
    // bucket tells right after it, on the Redis server's clock: never early.
    let mut refusals = 0;
    let admitted = testkit::wait::poll(testkit::wait::PATIENCE, async || {
        let e = Arc::clone(&envoy);
        let answer = tokio::task::spawn_blocking(move || get(&e, "erin", None))
            .await
            .unwrap();
        if answer.status == 200 {
            return Ok(());
        }
        assert_eq!(answer.status, 429);
        refusals += 1;
        let retry: u64 = answer
            .header("retry-after")
            .expect("a retry-after")
            .parse()
            .unwrap();
        let now = fleet.peek("erin").await;
        assert!(
            now.allowed || Duration::from_secs(retry) >= now.retry_after,
            "{retry} s < {:?}",
            now.retry_after
        );
        Err(format!("refused, retry-after {retry}"))
    })
    .await;
    admitted.unwrap_or_else(|e| panic!("never admitted: {e}"));
    assert!(refusals >= 1, "owing 4, the first check was refused");
}
