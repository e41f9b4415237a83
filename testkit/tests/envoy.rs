//! The Envoy harness (`testkit::envoy`) against the real Envoy: requests go through it to the
//! upstream; with the rate-limit filter calling a port where nothing listens, each failure
//! mode does what Envoy documents; two Envoys run side by side; and every configuration the
//! bootstrap builder writes is one Envoy accepts.
//!
//! Envoy is `$ENVOY_BIN`, else the one `scripts/servers envoy` installs: without it these
//! tests fail and say to run that script.

use std::net::SocketAddr;
use std::time::Duration;

use testkit::envoy::{
    Action, Bootstrap, Envoy, HeaderMatcher, HitsAddend, Ports, RateLimitFilter, RateLimitPolicy,
    Upstream, validate,
};

/// A loopback address where nothing listens (a port free a moment ago): a rate-limit service
/// that is not there.
fn nowhere() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], testkit::free_port()))
}

/// One descriptor on every request: the route's `generic_key`.
fn every_request() -> RateLimitPolicy {
    RateLimitPolicy::new([Action::generic_key("all")])
}

#[test]
fn requests_go_through_envoy_to_the_upstream_and_back() {
    let upstream = Upstream::start();
    let envoy = Envoy::start(&Bootstrap::new(upstream.addr()));
    for n in 1..=3 {
        let answer = envoy.get("/anything", &[]);
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, "ok");
        assert_eq!(upstream.served(), n);
    }
    // A header the upstream is told to answer with, for every request or for one.
    upstream.set_response_header("x-tokens-used", "5");
    let answer = envoy.get("/", &[]);
    assert_eq!(answer.header("x-tokens-used"), Some("5"), "{answer:?}");
    upstream.set_response_header("x-tokens-used", "6");
    let answer = envoy.get("/", &[("x-upstream-respond-x-cost", "7")]);
    assert_eq!(answer.header("x-tokens-used"), Some("6"), "{answer:?}");
    assert_eq!(answer.header("x-cost"), Some("7"), "{answer:?}");
    assert_eq!(upstream.served(), 5);
    assert!(
        envoy
            .listener_url()
            .ends_with(&envoy.listener_port().to_string()),
        "{}",
        envoy.listener_url()
    );
    assert_eq!(envoy.stat("server.live"), Some(1));
}

#[test]
fn without_its_service_failure_mode_allow_lets_requests_through_and_counts_them() {
    let upstream = Upstream::start();
    let envoy = Envoy::start(
        &Bootstrap::new(upstream.addr())
            .rate_limit_filter(RateLimitFilter::new("edge", nowhere()).failure_mode_deny(false))
            .route_rate_limit(every_request()),
    );
    for n in 1..=2 {
        let answer = envoy.get("/", &[]);
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(upstream.served(), n);
        envoy.wait_stat_at_least(&envoy.ratelimit_stat_name("failure_mode_allowed"), n);
    }
    assert_eq!(envoy.ratelimit_stat("error"), 2);
    assert_eq!(envoy.ratelimit_stat("ok"), 0);
    assert_eq!(envoy.ratelimit_stat("over_limit"), 0);
}

#[test]
fn without_its_service_failure_mode_deny_refuses_requests_with_500() {
    let upstream = Upstream::start();
    let envoy = Envoy::start(
        &Bootstrap::new(upstream.addr())
            .rate_limit_filter(RateLimitFilter::new("edge", nowhere()).failure_mode_deny(true))
            .route_rate_limit(every_request()),
    );
    for n in 1..=2 {
        let answer = envoy.get("/", &[]);
        // Envoy's local reply on a failed call under failure_mode_deny (`status_on_error`,
        // unset here): 500, not the 429 of a refusal.
        assert_eq!(answer.status, 500, "{answer:?}");
        envoy.wait_stat_at_least(&envoy.ratelimit_stat_name("error"), n);
    }
    assert_eq!(upstream.served(), 0);
    assert_eq!(envoy.ratelimit_stat("failure_mode_allowed"), 0);
    // A request without the descriptor's header makes no descriptor: no call, let through.
    let envoy = Envoy::start(
        &Bootstrap::new(upstream.addr())
            .rate_limit_filter(RateLimitFilter::new("edge", nowhere()).failure_mode_deny(true))
            .route_rate_limit(RateLimitPolicy::new([Action::request_headers(
                "x-user", "user",
            )])),
    );
    assert_eq!(envoy.get("/", &[]).status, 200);
    assert_eq!(envoy.get("/", &[("x-user", "a")]).status, 500);
    assert_eq!(upstream.served(), 1);
}

#[test]
fn two_envoys_at_once_do_not_clash() {
    let started: Vec<(Upstream, Envoy)> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let upstream = Upstream::start();
                    let envoy = Envoy::start(&Bootstrap::new(upstream.addr()));
                    (upstream, envoy)
                })
            })
            .collect();
        starts.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let [(up_a, a), (up_b, b)] = <[_; 2]>::try_from(started).unwrap();
    assert_ne!(a.admin_port(), b.admin_port());
    assert_ne!(a.listener_port(), b.listener_port());
    assert_eq!(a.get("/", &[]).status, 200);
    assert_eq!(b.get("/", &[]).status, 200);
    assert_eq!(b.get("/", &[]).status, 200);
    assert_eq!((up_a.served(), up_b.served()), (1, 2));
    let requests = "cluster.upstream.upstream_rq_completed";
    assert_eq!(
        (
            a.wait_stat_at_least(requests, 1),
            b.wait_stat_at_least(requests, 2)
        ),
        (1, 2)
    );
    // One gone, the other still serves.
    drop(a);
    assert_eq!(b.get("/", &[]).status, 200);
    assert_eq!(up_b.served(), 3);
}

/// Every option of the builder, on route-level and filter-level `rate_limits`.
fn every_bootstrap(upstream: SocketAddr) -> Vec<(&'static str, Bootstrap)> {
    let service = SocketAddr::from(([127, 0, 0, 1], 8081));
    let actions = || {
        [
            Action::request_headers("x-user", "user"),
            Action::remote_address(),
            Action::generic_key("all"),
            Action::generic_key_as("plan", "gold \"quoted\" \\ value"),
            Action::header_value_match(
                "paid",
                [
                    HeaderMatcher::exact("x-plan", "paid"),
                    HeaderMatcher::prefix("x-path", "/v1/"),
                    HeaderMatcher::present("authorization"),
                ],
                true,
            ),
            Action::header_value_match("anonymous", [HeaderMatcher::present("x-user")], false),
        ]
    };
    let policies = || {
        vec![
            RateLimitPolicy::new(actions()),
            RateLimitPolicy::new([Action::generic_key("free")]).hits_addend(HitsAddend::Number(0)),
            RateLimitPolicy::new([Action::generic_key("cost")]).hits_addend(HitsAddend::Number(5)),
            RateLimitPolicy::new([Action::request_headers("x-user", "user")])
                .hits_addend(HitsAddend::Format("%REQ(x-cost)%".to_owned())),
            RateLimitPolicy::new([Action::request_headers("x-user", "user")])
                .hits_addend(HitsAddend::Format("%RESP(x-tokens-used)%".to_owned()))
                .apply_on_stream_done(),
        ]
    };
    let full = RateLimitFilter::new("edge", service)
        .and_service(SocketAddr::from(([127, 0, 0, 1], 8082)))
        .failure_mode_deny(true)
        .timeout(Duration::from_millis(250))
        .x_ratelimit_headers()
        .rate_limited_as_resource_exhausted()
        .retry_after_header()
        .stat_prefix("edge");
    let mut on_route = Bootstrap::new(upstream).rate_limit_filter(full.clone());
    for policy in policies() {
        on_route = on_route.route_rate_limit(policy);
    }
    let mut filter_level = full;
    for policy in policies() {
        filter_level = filter_level.rate_limit(policy);
    }
    vec![
        ("no filter", Bootstrap::new(upstream)),
        (
            "the filter's defaults",
            Bootstrap::new(upstream)
                .rate_limit_filter(RateLimitFilter::new("edge", service))
                .route_rate_limit(RateLimitPolicy::new([Action::remote_address()])),
        ),
        ("every option, route-level rate_limits", on_route),
        (
            "every option, filter-level rate_limits",
            Bootstrap::new(upstream).rate_limit_filter(filter_level),
        ),
    ]
}

#[test]
fn every_configuration_the_builder_writes_is_one_envoy_accepts() {
    let ports = Ports {
        admin: 9901,
        listener: 10000,
    };
    for (what, bootstrap) in every_bootstrap(SocketAddr::from(([127, 0, 0, 1], 8080))) {
        let yaml = bootstrap.yaml(ports);
        if let Err(e) = validate(&yaml) {
            panic!("{what}: Envoy refuses it: {e}\n{yaml}");
        }
    }
    // The check can fail: at filter level Envoy parses a hits_addend's format when it loads
    // the configuration, and refuses two commands in one.
    let two = Bootstrap::new(SocketAddr::from(([127, 0, 0, 1], 8080))).rate_limit_filter(
        RateLimitFilter::new("edge", SocketAddr::from(([127, 0, 0, 1], 8081))).rate_limit(
            RateLimitPolicy::new([Action::generic_key("all")])
                .hits_addend(HitsAddend::Format("%REQ(a)%%REQ(b)%".to_owned())),
        ),
    );
    let refused = validate(&two.yaml(ports)).expect_err("two commands in one hits_addend");
    assert!(refused.contains("exactly one substitution"), "{refused}");
}

#[test]
fn envoy_runs_every_configuration_the_builder_writes() {
    // Not only valid: Envoy starts on each (the service is not there; nothing is asked of it).
    let upstream = Upstream::start();
    for (what, bootstrap) in every_bootstrap(upstream.addr()) {
        let envoy = Envoy::start(&bootstrap);
        assert_eq!(envoy.stat("server.live"), Some(1), "{what}");
    }
}
