//! The tenants example end to end (issue 25): two instances of the service on one real
//! redis-server, each request sent by a real HTTP client to one instance or the other. The
//! router's per-IP limit, a limit two handlers share, and two report runs at once per tenant
//! hold across the instances.
#![allow(clippy::unwrap_used)]

use e2e::{Service, client, header};
use redis_ratelimit::{Limit, RateLimiter};
use reqwest::{Client, Response, StatusCode};
use testkit::RedisServer;

const TENANTS: &str = env!("CARGO_BIN_EXE_tenants");

/// Two instances of the service on a fresh redis-server (kept alive as long as they are).
async fn two_instances() -> (RedisServer, Service, Service) {
    let redis = RedisServer::start();
    let a = Service::start(TENANTS, &redis, &[]).await;
    let b = Service::start(TENANTS, &redis, &[]).await;
    (redis, a, b)
}

/// The `i`-th of a run of requests goes to `a` when `i` is even, to `b` when odd.
fn alternate<'s>(i: usize, a: &'s Service, b: &'s Service) -> &'s Service {
    if i.is_multiple_of(2) { a } else { b }
}

async fn get(http: &Client, service: &Service, path: &str) -> Response {
    http.get(service.url(path)).send().await.unwrap()
}

async fn run_report(http: &Client, service: &Service, tenant: &str, ms: u64) -> Response {
    http.post(service.url(&format!("/reports/{tenant}?ms={ms}")))
        .send()
        .await
        .unwrap()
}

/// Searches and suggestions, on either instance, draw from one bucket of 5 a minute.
#[tokio::test]
async fn two_handlers_share_one_limit_across_instances() {
    let (_redis, a, b) = two_instances().await;
    let http = client();
    let mut statuses = Vec::new();
    for i in 0..7 {
        let path = if i % 3 == 0 {
            "/suggest?q=sh"
        } else {
            "/search?q=shoes"
        };
        let r = get(&http, alternate(i, &a, &b), path).await;
        statuses.push(r.status().as_u16());
        let policy = header(&r, "ratelimit-policy")
            .unwrap_or_default()
            .to_owned();
        assert!(
            policy.contains("\"search\";q=5;w=60"),
            "request {i}: {policy}"
        );
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            assert!(header(&r, "ratelimit").unwrap().contains("\"search\";r=0"));
        }
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
}

/// The router's limit counts every route, and a request a handler refused took nothing
/// from it: 60 a minute per client, 5 of them searches, whatever was refused.
#[tokio::test]
async fn the_router_limit_covers_every_route_and_a_refusal_takes_nothing_from_it() {
    let (_redis, a, b) = two_instances().await;
    let http = client();
    // `Service::start` asked each instance's `/health` once.
    let mut used = 2;
    for i in 0..10 {
        let r = get(&http, alternate(i, &a, &b), "/search").await;
        let expected = if i < 5 { 200 } else { 429 };
        assert_eq!(r.status().as_u16(), expected, "search {i}");
        if i < 5 {
            used += 1;
        }
    }
    let mut served = 0;
    for i in 0..100 {
        let r = get(&http, alternate(i, &a, &b), "/health").await;
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            let limit = header(&r, "ratelimit").unwrap();
            assert!(limit.contains("\"tenants::per_ip\";r=0"), "{limit}");
            assert!(header(&r, "retry-after").is_some());
            break;
        }
        assert_eq!(r.status(), StatusCode::OK, "health {i}");
        served += 1;
    }
    assert_eq!(served + used, 60);
}

/// Six reports of one tenant at once over both instances: two run, four are refused at once
/// with the concurrent-requests policy; another tenant runs meanwhile; and once the two end,
/// two more run.
#[tokio::test]
async fn two_reports_of_a_tenant_run_at_once_across_instances() {
    let (_redis, a, b) = two_instances().await;
    let http = client();
    let burst = (0..6).map(|i| run_report(&http, alternate(i, &a, &b), "acme", 3_000));
    let other = run_report(&http, &b, "globex", 3_000);
    let (responses, other) = tokio::join!(futures_util::future::join_all(burst), other);
    assert_eq!(other.status(), StatusCode::OK);
    let mut ok = 0;
    for r in &responses {
        match r.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let policy = header(r, "ratelimit-policy").unwrap();
                assert!(
                    policy.contains("\"reports\";q=2;qu=\"concurrent-requests\""),
                    "{policy}"
                );
                assert!(header(r, "ratelimit").unwrap().contains("\"reports\";r=0"));
                assert!(header(r, "retry-after").is_some());
            }
            status => panic!("unexpected {status}"),
        }
    }
    assert_eq!(ok, 2, "two at once, on either instance");
    // Both slots came back with the responses.
    let (x, y) = tokio::join!(
        run_report(&http, &a, "acme", 10),
        run_report(&http, &b, "acme", 10)
    );
    assert_eq!((x.status(), y.status()), (StatusCode::OK, StatusCode::OK));
}

/// An instance killed while it runs both of a tenant's reports: the other instance refuses
/// the tenant's reports until the dead one's leases run out (5 s, no longer renewed), then
/// runs them again.
#[tokio::test]
async fn a_killed_instances_slots_come_back_after_the_lease() {
    let (redis, a, b) = two_instances().await;
    let http = client();
    for _ in 0..2 {
        let (http, url) = (http.clone(), a.url("/reports/acme?ms=10000"));
        // Its response never comes: the instance dies first.
        tokio::spawn(async move { http.post(url).send().await });
    }
    // Both slots are taken (as a limiter on the same Redis and prefix sees them), and `b`
    // refuses the tenant.
    let looker = RateLimiter::builder()
        .redis(redis.url())
        .prefix("e2e")
        .instance(false)
        .build()
        .await
        .unwrap();
    let reports = Limit::concurrent(2);
    for _ in 0..500 {
        let free = looker
            .peek_named("reports", "acme", &reports)
            .await
            .unwrap();
        if free.remaining == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        retry_until(&http, &b, StatusCode::TOO_MANY_REQUESTS).await,
        1
    );
    drop(a);
    // Refused while the dead instance's leases last, then admitted.
    retry_until(&http, &b, StatusCode::OK).await;
}

/// Asks `service` for a short report of the tenant until it answers `wanted`, waiting between
/// two asks as a refusal's `Retry-After` says (30 asks at most); the number of asks.
async fn retry_until(http: &Client, service: &Service, wanted: StatusCode) -> usize {
    for ask in 1..=30 {
        let r = run_report(http, service, "acme", 10).await;
        if r.status() == wanted {
            return ask;
        }
        let wait: u64 = header(&r, "retry-after").map_or(0, |s| s.parse().unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(200 + wait * 1000)).await;
    }
    panic!("{} never answered {wanted}", service.url("/reports/acme"));
}
