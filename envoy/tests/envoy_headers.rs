//! The response headers a client gets through a real Envoy: Envoy's own `X-RateLimit-*`
//! (`enable_x_ratelimit_headers: DRAFT_VERSION_03`) and `Retry-After` built from the service's
//! statuses, and the draft-11 `RateLimit-Policy` / `RateLimit` the service asks Envoy to add
//! (`RATELIMIT_HEADERS=draft11`), against a real `redis-server`.

use std::net::SocketAddr;
use std::time::Duration;

use ratelimit_core::{Decision, FailurePolicy, RateLimiter};
use ratelimit_envoy::config::{Config, Lookup};
use ratelimit_envoy::service::{ResponseHeaders, Service};
use testkit::RedisServer;
use testkit::envoy::{
    Action, Bootstrap, Envoy, HttpResponse, RateLimitFilter, RateLimitPolicy, Upstream,
};
use tokio::sync::oneshot;

/// 3 an hour per user (a token bucket: one back every 20 minutes, so no window ends while a
/// test runs), and 100 an hour in all.
const EDGE: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3, name: per-user, algorithm: token_bucket }
  - key: generic_key
    value: all
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: token_bucket }
";

/// A service on a free port, over the test's Redis, stopped when dropped.
struct Served {
    limiter: RateLimiter,
    config: Config,
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Served {
    async fn start(redis: &RedisServer, headers: ResponseHeaders) -> Served {
        let limiter = RateLimiter::builder()
            .redis(redis.url())
            .prefix("envoy-headers")
            .failure_policy(FailurePolicy::Deny)
            .build()
            .await
            .expect("a limiter on the test's Redis");
        let service = Service::new(
            limiter.clone(),
            Config::parse("t.yaml", EDGE).expect("valid"),
        )
        .response_headers(headers);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let addr = listener.local_addr().expect("bound");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(ratelimit_envoy::server::serve(service, listener, async {
            let _ = stopped.await;
        }));
        Served {
            limiter,
            config: Config::parse("t.yaml", EDGE).expect("valid"),
            addr,
            _stop: stop,
        }
    }

    /// The bucket of `entry`, looked at without taking: the truth on Redis's clock now.
    async fn peek(&self, entry: (&str, &str)) -> Decision {
        let Lookup::Rule(found) = self.config.lookup("edge", [entry]) else {
            panic!("a rule for {entry:?}");
        };
        let b = found.bucket();
        self.limiter
            .peek_named(b.name(), b.key(), found.rule().limit().expect("a limit"))
            .await
            .expect("a peek")
    }
}

/// A token of `per-user` comes back every 20 minutes, one of `all` every 36 s.
const USER_INTERVAL: Duration = Duration::from_secs(1200);
const ALL_INTERVAL: Duration = Duration::from_secs(36);

fn start_envoy(upstream: &Upstream, filter: RateLimitFilter, both: bool) -> Envoy {
    let mut bootstrap = Bootstrap::new(upstream.addr())
        .rate_limit_filter(filter)
        .route_rate_limit(RateLimitPolicy::new([Action::request_headers(
            "x-user", "user",
        )]));
    if both {
        bootstrap = bootstrap.route_rate_limit(RateLimitPolicy::new([Action::generic_key("all")]));
    }
    Envoy::start(&bootstrap)
}

async fn get(envoy: &std::sync::Arc<Envoy>, user: &'static str) -> HttpResponse {
    let envoy = std::sync::Arc::clone(envoy);
    tokio::task::spawn_blocking(move || envoy.get("/", &[("x-user", user)]))
        .await
        .expect("the request's thread")
}

fn seconds(r: &HttpResponse, header: &str) -> Duration {
    let value = r
        .header(header)
        .unwrap_or_else(|| panic!("no {header} in {:?}", r.headers));
    Duration::from_secs(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{header}: {value}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_x_ratelimit_headers_and_retry_after_come_from_the_statuses_exactly() {
    let redis = RedisServer::start();
    let s = Served::start(&redis, ResponseHeaders::Off).await;
    let upstream = Upstream::start();
    let filter = RateLimitFilter::new("edge", s.addr)
        .failure_mode_deny(true)
        .x_ratelimit_headers()
        .retry_after_header();
    let envoy = std::sync::Arc::new(start_envoy(&upstream, filter, false));
    for (taken, left) in [(1, "2"), (2, "1"), (3, "0")] {
        let r = get(&envoy, "alice").await;
        assert_eq!(r.status, 200, "{:?}", r.headers);
        // Envoy's draft-03 quota policy: the limit, then `limit;w=window;name="name"`.
        assert_eq!(
            r.header("x-ratelimit-limit"),
            Some("3, 3;w=3600;name=\"per-user\"")
        );
        assert_eq!(r.header("x-ratelimit-remaining"), Some(left));
        // Until the bucket is full again, never early: at least what Redis tells now, later
        // than the answer; at most the interval of each token taken.
        let reset = seconds(&r, "x-ratelimit-reset");
        let now = s.peek(("user", "alice")).await;
        assert_eq!(now.remaining.to_string(), left);
        let full = now.reset_after;
        assert!(reset >= full, "{reset:?} < {full:?}");
        assert!(reset <= USER_INTERVAL * taken, "{reset:?}");
        assert!(r.header("retry-after").is_none(), "an admitted request");
    }
    let r = get(&envoy, "alice").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let retry = seconds(&r, "retry-after");
    let now = s.peek(("user", "alice")).await;
    assert!(!now.allowed);
    assert!(
        retry >= now.retry_after,
        "{retry:?} < {:?}",
        now.retry_after
    );
    // A token comes back every 20 minutes: the wait is at most one interval.
    assert!(retry <= USER_INTERVAL, "{retry:?}");
    // Both from the refusing status's `duration_until_reset`.
    assert_eq!(seconds(&r, "x-ratelimit-reset"), retry);
    // Another user: a bucket of its own, full.
    let r = get(&envoy, "bob").await;
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    assert_eq!(upstream.served(), 4);
}

/// The items of a `RateLimit` header: `(name, r, t)`.
fn items(value: &str) -> Vec<(String, u64, Duration)> {
    value
        .split(", ")
        .map(|item| {
            let mut params = item.split(';');
            let name = params.next().expect("a name").trim_matches('"').to_owned();
            let mut r = None;
            let mut t = None;
            for p in params {
                match p.split_once('=') {
                    Some(("r", v)) => r = v.parse().ok(),
                    Some(("t", v)) => t = v.parse().ok().map(Duration::from_secs),
                    _ => panic!("unexpected parameter {p} in {value}"),
                }
            }
            (name, r.expect("r"), t.expect("t"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_11_headers_reach_the_client_on_admitted_and_refused_requests() {
    let redis = RedisServer::start();
    let s = Served::start(&redis, ResponseHeaders::Draft11).await;
    let upstream = Upstream::start();
    let filter = RateLimitFilter::new("edge", s.addr).failure_mode_deny(true);
    let envoy = std::sync::Arc::new(start_envoy(&upstream, filter, true));
    let policy = "\"per-user\";q=3;w=3600, \"edge.generic_key_all\";q=100;w=3600";
    for (taken, user_left, all_left) in [(1, 2, 99), (2, 1, 98), (3, 0, 97)] {
        let r = get(&envoy, "carol").await;
        assert_eq!(r.status, 200, "{:?}", r.headers);
        assert_eq!(r.header("ratelimit-policy"), Some(policy));
        let state = items(r.header("ratelimit").expect("a RateLimit header"));
        let names: Vec<&str> = state.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["per-user", "edge.generic_key_all"]);
        assert_eq!((state[0].1, state[1].1), (user_left, all_left));
        // `t` is never early: at least what each bucket tells now; at most the interval of
        // each token taken.
        let user = s.peek(("user", "carol")).await.reset_after;
        let all = s.peek(("generic_key", "all")).await.reset_after;
        assert!(state[0].2 >= user, "{state:?} / {user:?}");
        assert!(state[1].2 >= all, "{state:?} / {all:?}");
        assert!(state[0].2 <= USER_INTERVAL * taken, "{state:?}");
        assert!(state[1].2 <= ALL_INTERVAL * taken, "{state:?}");
    }
    // Refused: Envoy's 429 carries them, and the buckets as they are (nothing was taken).
    let r = get(&envoy, "carol").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("ratelimit-policy"), Some(policy));
    let state = items(r.header("ratelimit").expect("a RateLimit header"));
    assert_eq!((state[0].1, state[1].1), (0, 97));
    let user = s.peek(("user", "carol")).await.reset_after;
    let all = s.peek(("generic_key", "all")).await.reset_after;
    assert!(state[0].2 >= user && state[1].2 >= all, "{state:?}");
    assert_eq!(upstream.served(), 3);
}
