//! `ShouldRateLimit` over real gRPC, against a real `redis-server` each test starts, and once
//! behind a real Envoy.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use ratelimit_core::{FailurePolicy, RateLimiter};
use ratelimit_envoy::config::{Config, Lookup};
use ratelimit_envoy::service::{Service, StoreFailure};
use testkit::RedisServer;
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// A service served on a free loopback port, stopped when dropped.
struct Served {
    client: RateLimitServiceClient<Channel>,
    limiter: RateLimiter,
    config: Config,
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Served {
    async fn start(
        limiter: RateLimiter,
        yaml: &str,
        tune: impl FnOnce(Service) -> Service,
    ) -> Served {
        let config = Config::parse("test.yaml", yaml).expect("a valid configuration");
        let service = tune(Service::new(
            limiter.clone(),
            Config::parse("test.yaml", yaml).expect("parsed"),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let addr = listener.local_addr().expect("bound");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(ratelimit_envoy::server::serve(service, listener, async {
            let _ = stopped.await;
        }));
        let client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connected");
        Served {
            client,
            limiter,
            config,
            addr,
            _stop: stop,
        }
    }

    async fn ask(&mut self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    async fn ok(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.ask(request).await.expect("an answer")
    }

    /// Tokens left in the bucket of `entries`, looked at without taking.
    async fn left(&self, domain: &str, entries: &[(&str, &str)]) -> u64 {
        let Lookup::Rule(found) = self.config.lookup(domain, entries.iter().copied()) else {
            panic!("a rule for {entries:?}");
        };
        let limit = found.rule().limit().expect("a limit");
        let b = found.bucket();
        self.limiter
            .peek_named(b.name(), b.key(), limit)
            .await
            .expect("a peek")
            .remaining
    }
}

async fn limiter(redis: &RedisServer, policy: FailurePolicy) -> RateLimiter {
    RateLimiter::builder()
        .redis(redis.url())
        .prefix("envoy-test")
        .failure_policy(policy)
        .build()
        .await
        .expect("a limiter on the test's Redis")
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|&(key, value)| Entry {
                key: key.into(),
                value: value.into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn costing(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

fn code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).expect("a known code")
}

fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("a known code")
}

const API: &str = "
domain: api
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3, name: per-user }
  - key: wide
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: narrow
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: five
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: free
    rate_limit: { unlimited: true }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: watched
    rate_limit: { unit: hour, requests_per_unit: 1 }
    shadow_mode: true
  - key: open
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_admits_exactly_its_limit_and_says_when_to_come_back() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let alice = || request("api", vec![descriptor(&[("user", "alice")])]);
    for left in [2, 1, 0] {
        let r = s.ok(alice()).await;
        assert_eq!(overall(&r), Code::Ok);
        let st = &r.statuses[0];
        assert_eq!(code(st), Code::Ok);
        assert_eq!(st.limit_remaining, left);
        let limit = st.current_limit.as_ref().expect("a current limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit),
            ("per-user", 3)
        );
        assert_eq!(Unit::try_from(limit.unit).unwrap(), Unit::Hour);
        let reset = st.duration_until_reset.expect("a reset");
        assert!((1..=3600).contains(&reset.seconds), "{reset:?}");
        assert_eq!(reset.nanos, 0);
    }
    let r = s.ok(alice()).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let st = &r.statuses[0];
    assert_eq!((code(st), st.limit_remaining), (Code::OverLimit, 0));
    // Never early: at least the wait the bucket tells now, later than the answer.
    let wait =
        Duration::from_secs(u64::try_from(st.duration_until_reset.unwrap().seconds).unwrap());
    let Lookup::Rule(found) = s.config.lookup("api", [("user", "alice")]) else {
        panic!()
    };
    let b = found.bucket();
    let now = s
        .limiter
        .peek_named(b.name(), b.key(), found.rule().limit().unwrap())
        .await
        .unwrap();
    assert!(!now.allowed);
    assert!(wait >= now.retry_after, "{wait:?} < {:?}", now.retry_after);
    assert!(wait <= Duration::from_secs(3600));
    // Another user has a bucket of its own.
    let r = s
        .ok(request("api", vec![descriptor(&[("user", "bob")])]))
        .await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_charges_none_of_its_descriptors() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let both = || {
        request(
            "api",
            vec![descriptor(&[("wide", "x")]), descriptor(&[("narrow", "x")])],
        )
    };
    let first = s.ok(both()).await;
    assert_eq!(overall(&first), Code::Ok);
    assert_eq!(s.left("api", &[("wide", "x")]).await, 9);
    for _ in 0..3 {
        let r = s.ok(both()).await;
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(
            code(&r.statuses[0]),
            Code::Ok,
            "the wide limit would have admitted it"
        );
        assert_eq!(r.statuses[0].limit_remaining, 9, "and took nothing");
        assert_eq!(code(&r.statuses[1]), Code::OverLimit);
    }
    assert_eq!(s.left("api", &[("wide", "x")]).await, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_per_request_and_per_descriptor_with_zero_as_a_check() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let five = || descriptor(&[("five", "k")]);
    // The request's hits_addend: 0 means 1.
    let r = s.ok(request("api", vec![five()])).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
    let mut two = request("api", vec![five()]);
    two.hits_addend = 2;
    assert_eq!(s.ok(two.clone()).await.statuses[0].limit_remaining, 2);
    // The descriptor's own overrides the request's.
    let mut own = request("api", vec![costing(five(), 1)]);
    own.hits_addend = 7;
    assert_eq!(s.ok(own).await.statuses[0].limit_remaining, 1);
    // 0: a check that takes nothing.
    let check = s.ok(request("api", vec![costing(five(), 0)])).await;
    assert_eq!(
        (overall(&check), check.statuses[0].limit_remaining),
        (Code::Ok, 1)
    );
    assert_eq!(s.left("api", &[("five", "k")]).await, 1);
    // Too much for what is left: refused, nothing taken.
    let r = s.ok(two).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(s.left("api", &[("five", "k")]).await, 1);
    // A cost beyond the limit itself can never pass.
    assert_eq!(
        overall(&s.ok(request("api", vec![costing(five(), 6)])).await),
        Code::OverLimit
    );
    // The last token, then a check finds none, and refuses the request: its other descriptor
    // is not charged.
    assert_eq!(
        s.ok(request("api", vec![five()])).await.statuses[0].limit_remaining,
        0
    );
    let r = s
        .ok(request(
            "api",
            vec![costing(five(), 0), descriptor(&[("wide", "y")])],
        ))
        .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    assert_eq!(code(&r.statuses[1]), Code::Ok);
    assert_eq!(s.left("api", &[("wide", "y")]).await, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_descriptors_in_one_bucket_are_one_check_of_their_summed_cost() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let r = s
        .ok(request(
            "api",
            vec![
                descriptor(&[("user", "carol")]),
                descriptor(&[("user", "carol")]),
            ],
        ))
        .await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses[0], r.statuses[1]);
    assert_eq!(r.statuses[0].limit_remaining, 1);
    let r = s
        .ok(request(
            "api",
            vec![
                descriptor(&[("user", "carol")]),
                descriptor(&[("user", "carol")]),
            ],
        ))
        .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(s.left("api", &[("user", "carol")]).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_domains_unlimited_blocked_and_unmatched_descriptors() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    // As the reference: an unknown domain applies no limit.
    let r = s
        .ok(request("nowhere", vec![descriptor(&[("user", "alice")])]))
        .await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses.len(), 1);
    assert_eq!(code(&r.statuses[0]), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none());
    let r = s
        .ok(request("api", vec![descriptor(&[("free", "x")])]))
        .await;
    assert_eq!(
        (overall(&r), r.statuses[0].limit_remaining),
        (Code::Ok, u32::MAX)
    );
    assert!(r.statuses[0].current_limit.is_none());
    let r = s
        .ok(request(
            "api",
            vec![descriptor(&[("open", "x")]), descriptor(&[("other", "x")])],
        ))
        .await;
    assert_eq!(overall(&r), Code::Ok);
    assert!(r.statuses.iter().all(|st| st.current_limit.is_none()));
    let r = s
        .ok(request("api", vec![descriptor(&[("blocked", "x")])]))
        .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_requests_are_invalid_arguments() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let invalid = [
        request("", vec![descriptor(&[("user", "a")])]),
        request("api", vec![]),
        request("api", vec![descriptor(&[("user", "a")]); 65]),
        request("api", vec![descriptor(&[("user", "a"); 17])]),
        request("api", vec![descriptor(&[("user", &"v".repeat(4097))])]),
    ];
    for r in invalid {
        let e = s.ask(r).await.expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    // At the bounds: answered.
    let r = s
        .ok(request(
            "api",
            vec![descriptor(&[("open", &"v".repeat(4096))]); 64],
        ))
        .await;
    assert_eq!(overall(&r), Code::Ok);
}

fn overriding(
    mut d: RateLimitDescriptor,
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptors_limit_override_is_a_fixed_window_of_its_own_per_unit() {
    const MINUTE: i32 = 2;
    const HOUR: i32 = 3;
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    // Two a minute for carol, where the file says three an hour: the override applies, with
    // its limit reported, and no name (as the reference builds it).
    let carol = |n, unit| {
        request(
            "api",
            vec![overriding(descriptor(&[("user", "carol")]), n, unit)],
        )
    };
    for left in [1, 0] {
        let r = s.ok(carol(2, MINUTE)).await;
        assert_eq!(overall(&r), Code::Ok);
        let st = &r.statuses[0];
        assert_eq!(st.limit_remaining, left);
        let limit = st.current_limit.as_ref().expect("the override's limit");
        assert_eq!((limit.name.as_str(), limit.requests_per_unit), ("", 2));
        assert_eq!(Unit::try_from(limit.unit).unwrap(), Unit::Minute);
        assert!((1..=60).contains(&st.duration_until_reset.unwrap().seconds));
    }
    let r = s.ok(carol(2, MINUTE)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert!((1..=60).contains(&r.statuses[0].duration_until_reset.unwrap().seconds));
    // One bucket per unit: another size of the same unit counts the same window (as the
    // reference's counter), another unit has a bucket of its own.
    let r = s.ok(carol(3, MINUTE)).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 0));
    let r = s.ok(carol(5, HOUR)).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 4));
    // The configured rule's bucket was never touched.
    assert_eq!(s.left("api", &[("user", "carol")]).await, 3);
    // In a domain of the file, a descriptor no rule matches is limited by its override.
    let r = s
        .ok(request(
            "api",
            vec![overriding(descriptor(&[("nobody", "x")]), 1, HOUR)],
        ))
        .await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // `requests_per_unit: 0` refuses; an unknown domain applies no limit (as the reference).
    let r = s.ok(carol(0, MINUTE)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let r = s
        .ok(request(
            "elsewhere",
            vec![overriding(descriptor(&[("user", "carol")]), 1, MINUTE)],
        ))
        .await;
    assert_eq!(overall(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none());
    // No unit, or one the protocol does not have: invalid, nothing taken.
    for unit in [0, 8, -1] {
        let e = s.ask(carol(2, unit)).await.expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    // An override never reaches a configured rule's bucket, and the configured rule another's
    // override bucket: a value written like the override's suffix is escaped.
    let r = s
        .ok(request(
            "api",
            vec![descriptor(&[("user", "carol~limit=minute")])],
        ))
        .await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_rules_and_the_global_shadow_mode_report_but_never_refuse() {
    let redis = RedisServer::start();
    let mut s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let watched = || {
        request(
            "api",
            vec![
                descriptor(&[("watched", "x")]),
                descriptor(&[("wide", "w")]),
            ],
        )
    };
    assert_eq!(overall(&s.ok(watched()).await), Code::Ok);
    let r = s.ok(watched()).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(
        code(&r.statuses[0]),
        Code::Ok,
        "a shadow rule answers OK, as the reference"
    );
    assert!(
        r.statuses[0].duration_until_reset.unwrap().seconds >= 1,
        "when it would pass"
    );
    // The request was admitted: its other descriptor is charged both times.
    assert_eq!(s.left("api", &[("wide", "w")]).await, 8);

    let mut g = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| {
        s.global_shadow(true)
    })
    .await;
    let narrow = || request("api", vec![descriptor(&[("narrow", "g")])]);
    assert_eq!(overall(&g.ok(narrow()).await), Code::Ok);
    let r = g.ok(narrow()).await;
    assert_eq!(
        overall(&r),
        Code::Ok,
        "the global shadow mode never refuses"
    );
    assert_eq!(
        code(&r.statuses[0]),
        Code::OverLimit,
        "and says which would have"
    );
    assert_ne!(g.addr, s.addr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_killed_each_failure_policy_answers_and_none_is_a_silent_ok() {
    let answer = async |policy: FailurePolicy, failure: StoreFailure| {
        let mut redis = RedisServer::start();
        let mut s = Served::start(limiter(&redis, policy).await, API, |s| {
            s.store_failure(failure)
        })
        .await;
        let narrow = || request("api", vec![descriptor(&[("narrow", "r")])]);
        assert_eq!(overall(&s.ok(narrow()).await), Code::Ok, "Redis up");
        redis.kill();
        let mut answers = Vec::new();
        for _ in 0..2 {
            answers.push(
                s.ask(narrow())
                    .await
                    .map(|r| overall(&r))
                    .map_err(|e| e.code()),
            );
        }
        answers
    };
    // Fallback: this instance enforces the limit from what Redis last said (the token is gone).
    assert_eq!(
        answer(FailurePolicy::Fallback, StoreFailure::Policy).await,
        [Ok(Code::OverLimit), Ok(Code::OverLimit)]
    );
    // Deny: refused.
    assert_eq!(
        answer(FailurePolicy::Deny, StoreFailure::Policy).await,
        [Ok(Code::OverLimit), Ok(Code::OverLimit)]
    );
    // Allow: admitted, because the configuration said so.
    assert_eq!(
        answer(FailurePolicy::Allow, StoreFailure::Policy).await,
        [Ok(Code::Ok), Ok(Code::Ok)]
    );
    // Unavailable: Envoy's failure_mode_deny decides.
    assert_eq!(
        answer(FailurePolicy::Deny, StoreFailure::Unavailable).await,
        [Err(tonic::Code::Unavailable), Err(tonic::Code::Unavailable)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_envoy_exactly_three_requests_pass_and_the_fourth_is_429() {
    use testkit::envoy::{Action, Bootstrap, Envoy, RateLimitFilter, RateLimitPolicy, Upstream};
    let redis = RedisServer::start();
    // A token bucket of 3 a minute (one token back every 20 s), not a fixed window: the four
    // requests cannot straddle a window's end.
    let yaml = "
domain: edge
descriptors:
  - key: generic_key
    value: all
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: token_bucket }
";
    let s = Served::start(limiter(&redis, FailurePolicy::Deny).await, yaml, |s| s).await;
    let service = s.addr;
    let statuses = tokio::task::spawn_blocking(move || {
        let upstream = Upstream::start();
        let envoy = Envoy::start(
            &Bootstrap::new(upstream.addr())
                .rate_limit_filter(RateLimitFilter::new("edge", service).failure_mode_deny(true))
                .route_rate_limit(RateLimitPolicy::new([Action::generic_key("all")])),
        );
        let statuses: Vec<u16> = (0..4).map(|_| envoy.get("/", &[]).status).collect();
        (statuses, upstream.served())
    })
    .await
    .unwrap();
    assert_eq!(statuses, (vec![200, 200, 200, 429], 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_reports_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let redis = RedisServer::start();
    let s = Served::start(limiter(&redis, FailurePolicy::Deny).await, API, |s| s).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status(), ServingStatus::Serving, "{service:?}");
    }
}
