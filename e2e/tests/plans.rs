//! The plans example end to end (issue 24): two instances of the service on one real
//! redis-server, each request sent by a real HTTP client to one instance or the other. Limits
//! decided per call (the caller's plan, the upload's size, the login's outcome) hold across
//! the instances.
#![allow(clippy::unwrap_used)]

use e2e::{Service, client, header};
use reqwest::{Client, Response, StatusCode};
use testkit::RedisServer;

const PLANS: &str = env!("CARGO_BIN_EXE_plans");

/// Two instances of the service on a fresh redis-server (kept alive as long as they are).
async fn two_instances() -> (RedisServer, Service, Service) {
    let redis = RedisServer::start();
    let a = Service::start(PLANS, &redis, &[]).await;
    let b = Service::start(PLANS, &redis, &[]).await;
    (redis, a, b)
}

/// The `i`-th of a run of requests goes to `a` when `i` is even, to `b` when odd.
fn alternate<'s>(i: usize, a: &'s Service, b: &'s Service) -> &'s Service {
    if i.is_multiple_of(2) { a } else { b }
}

async fn search(http: &Client, service: &Service, api_key: &str) -> Response {
    http.get(service.url("/search"))
        .header("x-api-key", api_key)
        .send()
        .await
        .unwrap()
}

async fn upload(http: &Client, service: &Service, tenant: &str, bytes: usize) -> Response {
    http.post(service.url(&format!("/upload/{tenant}")))
        .body(vec![b'x'; bytes])
        .send()
        .await
        .unwrap()
}

async fn login(http: &Client, service: &Service, user: &str, password: &str) -> Response {
    http.post(service.url("/login"))
        .header("content-type", "application/json")
        .body(serde_json::json!({ "user": user, "password": password }).to_string())
        .send()
        .await
        .unwrap()
}

async fn problem(r: Response) -> serde_json::Value {
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
    serde_json::from_str(&r.text().await.unwrap()).unwrap()
}

/// The free caller gets exactly 3 searches an hour and the pro caller 6, counted across both
/// instances; each response names the plan in force in its policy.
#[tokio::test]
async fn each_plan_has_its_quota_across_instances() {
    let (_redis, a, b) = two_instances().await;
    let http = client();

    let mut statuses = Vec::new();
    for i in 0..5 {
        let r = search(&http, alternate(i, &a, &b), "free-1").await;
        statuses.push(r.status().as_u16());
        assert_eq!(
            header(&r, "ratelimit-policy"),
            Some("\"plans::search[free]\";q=3;w=3600"),
            "request {i}"
        );
        if r.status() == StatusCode::OK {
            assert_eq!(
                header(&r, "x-ratelimit-remaining"),
                Some(&*(2 - i).to_string())
            );
        } else {
            assert!(header(&r, "retry-after").is_some(), "request {i}");
            let body = problem(r).await;
            assert_eq!(body["status"], 429);
            assert_eq!(body["violated-policies"][0], "plans::search[free]");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429], "free: 3 an hour");

    // The pro caller's bucket is its own, and larger.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let r = search(&http, alternate(i, &a, &b), "pro-1").await;
        statuses.push(r.status().as_u16());
        assert_eq!(
            header(&r, "ratelimit-policy"),
            Some("\"plans::search[pro]\";q=6;w=3600"),
            "request {i}"
        );
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 200, 429, 429],
        "pro: 6 an hour"
    );
}

/// An unknown API key, or none, is refused with 401 before any limit: no rate-limit header,
/// and nobody's budget is touched.
#[tokio::test]
async fn an_unknown_api_key_is_unauthorized() {
    let (_redis, a, b) = two_instances().await;
    let http = client();
    for i in 0..5 {
        let r = search(&http, alternate(i, &a, &b), "free-2").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(header(&r, "ratelimit-policy"), None);
    }
    let r = http.get(b.url("/search")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "no API key");
    let r = search(&http, &a, "free-1").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("2"));
}

/// An upload costs its size in KiB, rounded up, from one budget of 10 KiB per tenant shared by
/// the instances; one larger than the burst is refused at once with 413 and takes nothing.
#[tokio::test]
async fn uploads_cost_their_size_across_instances() {
    let (_redis, a, b) = two_instances().await;
    let http = client();

    let r = upload(&http, &a, "acme", 4 * 1024).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-ratelimit-requested-tokens"), Some("4"));
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("6"));
    // 3 KiB and one byte: 4 tokens.
    let r = upload(&http, &b, "acme", 3 * 1024 + 1).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-ratelimit-requested-tokens"), Some("4"));
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("2"));
    // 3 KiB do not fit in the 2 left: refused, with a wait that admits them.
    let r = upload(&http, &a, "acme", 3 * 1024).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&r, "retry-after").is_some());
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("2"));
    // 2 KiB do, on the other instance; then the budget is spent.
    let r = upload(&http, &b, "acme", 2 * 1024).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"));
    let r = upload(&http, &a, "acme", 1).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // An empty upload costs nothing: it passes an empty budget.
    let r = upload(&http, &a, "acme", 0).await;
    assert_eq!(r.status(), StatusCode::OK);

    // Above the burst: no wait would admit it.
    let r = upload(&http, &b, "globex", 10 * 1024 + 1).await;
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(header(&r, "retry-after"), None);
    let body = problem(r).await;
    assert_eq!(body["status"], 413);
    // It took nothing: the whole burst is still there, on the other instance.
    let r = upload(&http, &a, "globex", 10 * 1024).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"));
}

/// Successful logins never exhaust the limit; failed ones do (3 per user), after which even
/// the right password is refused; a success gives its token back through Redis, so the other
/// instance sees it.
#[tokio::test]
async fn logins_count_failures_only_across_instances() {
    let (_redis, a, b) = two_instances().await;
    let http = client();

    for i in 0..10 {
        let r = login(&http, alternate(i, &a, &b), "ann", "ann-secret").await;
        assert_eq!(r.status(), StatusCode::OK, "success {i}");
    }

    for i in 0..3 {
        let r = login(&http, alternate(i, &a, &b), "bob", "guess").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "failure {i}");
    }
    let r = login(&http, &b, "bob", "guess").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"plans::login\";q=3;w=3600")
    );
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!(
        (1..=1200).contains(&retry),
        "a token every 20 minutes: Retry-After {retry}"
    );
    let r = login(&http, &a, "bob", "bob-secret").await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the right password too, once the failures are spent"
    );

    // Ann (whose ten successes took nothing): two failures and a success on A leave one
    // failure for B, and only one.
    for _ in 0..2 {
        let r = login(&http, &a, "ann", "guess").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    let r = login(&http, &a, "ann", "ann-secret").await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = login(&http, &b, "ann", "guess").await;
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "the success on A gave its token back, and B sees it"
    );
    let r = login(&http, &b, "ann", "guess").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A login without a user name has no key: the limit refuses it with the status it declares,
/// 401, and the problem says why.
#[tokio::test]
async fn a_login_without_a_user_is_unauthorized() {
    let redis = RedisServer::start();
    let service = Service::start(PLANS, &redis, &[]).await;
    let r = login(&client(), &service, "", "ann-secret").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body = problem(r).await;
    assert_eq!(body["status"], 401);
    assert_eq!(body["violated-policies"][0], "plans::login");
}
