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
    let looker = looker(&redis).await;
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

/// Waits until each of the two services has beaten since both were in the set of live
/// instances: from then on each divides a limit by two when Redis fails.
async fn each_counts_two_instances(redis: &RedisServer) {
    let mut con = redis.connection().await;
    let mut scores = async || -> Vec<f64> {
        let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg("e2e:instances")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut con)
            .await
            .unwrap();
        members.into_iter().map(|m| m.1).collect()
    };
    let mut both_at = None;
    for _ in 0..1000 {
        let now = scores().await;
        match both_at {
            None if now.len() == 2 => both_at = now.iter().copied().reduce(f64::max),
            Some(at) if now.len() == 2 && now.iter().all(|s| *s > at) => return,
            _ => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the two services never both beat in e2e:instances");
}

/// A limiter on the services' Redis and prefix that only looks (no instance of theirs).
async fn looker(redis: &RedisServer) -> RateLimiter {
    RateLimiter::builder()
        .redis(redis.url())
        .prefix("e2e")
        .instance(false)
        .build()
        .await
        .unwrap()
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

/// A Redis outage, and Redis back without its data, never run more than two reports of a
/// tenant at once (issue 33: 4 at once after the kill and after the restart). Each instance's
/// fallback counts the report it runs under Redis's slot, and Redis, back empty, learns of
/// the reports the fallbacks admitted before it grants their slots again.
#[tokio::test]
async fn an_outage_never_runs_more_than_two_reports_at_once() {
    let (mut redis, a, b) = two_instances().await;
    let http = client();
    let looker = looker(&redis).await;
    let reports = Limit::concurrent(2);
    // Until `free` slots of the tenant's are free, as Redis sees them.
    let free_in_redis = async |free: u64, when: &str| {
        for _ in 0..1000 {
            if let Ok(d) = looker.peek_named("reports", "acme", &reports).await
                && d.source == redis_ratelimit::Source::Store
                && d.remaining == free
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let last = looker.peek_named("reports", "acme", &reports).await;
        panic!("{when}: Redis never had {free} of the tenant's slots free: {last:?}");
    };
    // A long report on each instance, held until its client goes away (axum then drops the
    // handler, and the slot comes back).
    // A refused one (a short report held the slot a moment) asks again.
    let long = |service: &Service| {
        let (http, url) = (http.clone(), service.url("/reports/acme?ms=10000"));
        tokio::spawn(async move {
            loop {
                let r = http.post(&url).send().await;
                if !r
                    .as_ref()
                    .is_ok_and(|r| r.status() == StatusCode::TOO_MANY_REQUESTS)
                {
                    return r;
                }
            }
        })
    };
    let short_refused = async |service: &Service| {
        let r = run_report(&http, service, "acme", 10).await;
        assert_eq!(
            r.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "a third report ran"
        );
    };
    each_counts_two_instances(&redis).await;
    let running = [long(&a), long(&b)];
    free_in_redis(0, "two long reports").await;
    redis.kill();
    // Redis is down: each instance runs one of the two, and admits no other.
    for service in [&a, &b, &a, &b] {
        short_refused(service).await;
    }
    for report in running {
        report.abort();
    }
    // Until each instance has seen its client go and given the slot back in its fallback.
    let until = async |service: &Service, status: StatusCode| {
        for _ in 0..500 {
            if run_report(&http, service, "acme", 10).await.status() == status {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{} never answered {status}", service.url("/reports/acme"));
    };
    until(&a, StatusCode::OK).await;
    until(&b, StatusCode::OK).await;
    // Still down: the fallback runs one report on each instance. A short report goes
    // through until the long one has its slot (never beside it).
    let running = [long(&a), long(&b)];
    until(&a, StatusCode::TOO_MANY_REQUESTS).await;
    until(&b, StatusCode::TOO_MANY_REQUESTS).await;
    // Back without its data: Redis hears of the two reports before it grants their slots.
    redis.restart();
    free_in_redis(0, "back without its data").await;
    for service in [&a, &b, &a, &b] {
        short_refused(service).await;
    }
    for report in running {
        report.abort();
    }
    free_in_redis(2, "the reports ended").await;
    let (x, y) = tokio::join!(
        run_report(&http, &a, "acme", 10),
        run_report(&http, &b, "acme", 10)
    );
    assert_eq!((x.status(), y.status()), (StatusCode::OK, StatusCode::OK));
}
