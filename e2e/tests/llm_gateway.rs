//! The LLM gateway example end to end (issue 36): two instances of the service on one real
//! redis-server, each completion sent by a real HTTP client to one instance or the other and
//! read to the end of its stream. Each call takes its estimate (`max_tokens`) from its plan's
//! minute and month and settles the tokens it used when its stream ends: what the month
//! holds afterwards is its quota less exactly the tokens used, and an overdraft never takes it
//! further below empty than its debt bound.
#![allow(clippy::unwrap_used)]

use e2e::{Service, client, header};
use redis_ratelimit::tools::algorithms::calendar::Calendar;
use reqwest::{Client, StatusCode};
use testkit::RedisServer;

const GATEWAY: &str = env!("CARGO_BIN_EXE_llm_gateway");

/// Two instances of the gateway on a fresh redis-server (kept alive as long as they are).
async fn two_instances() -> (RedisServer, Service, Service) {
    let redis = RedisServer::start();
    let a = Service::start(GATEWAY, &redis, &[]).await;
    let b = Service::start(GATEWAY, &redis, &[]).await;
    (redis, a, b)
}

/// A prompt of `words` words.
fn prompt(words: usize) -> String {
    vec!["word"; words].join(" ")
}

/// Sends a completion and reads its stream to the end: the status, the `Retry-After`, and
/// the body.
async fn complete(
    http: &Client,
    service: &Service,
    api_key: &str,
    words: usize,
    max_tokens: u32,
) -> (StatusCode, Option<u64>, String) {
    let r = http
        .post(service.url("/v1/completions"))
        .header("x-api-key", api_key)
        .header("content-type", "application/json")
        .body(serde_json::json!({ "prompt": prompt(words), "max_tokens": max_tokens }).to_string())
        .send()
        .await
        .unwrap();
    let status = r.status();
    let retry = header(&r, "retry-after").map(|v| v.parse().unwrap());
    (status, retry, r.text().await.unwrap())
}

/// The `[usage: n]` line a completed stream ends with.
fn used(body: &str) -> u64 {
    let line = body.lines().last().unwrap();
    line.strip_prefix("[usage: ")
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("no usage line: {body:?}"))
        .parse()
        .unwrap()
}

async fn left(http: &Client, service: &Service, api_key: &str) -> serde_json::Value {
    let r = http
        .get(service.url("/v1/usage"))
        .header("x-api-key", api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    serde_json::from_str(&r.text().await.unwrap()).unwrap()
}

/// The server's clock, µs since the epoch.
async fn server_now(redis: &RedisServer) -> u64 {
    let mut con = redis.connection().await;
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    s * 1_000_000 + us
}

/// Completions of every shape, alternating between the instances: short answers give most
/// of their estimate back, long prompts overdraw it; the month then holds its quota less
/// exactly the tokens the streams said they used.
#[tokio::test]
async fn refunds_and_overdrafts_add_up_exactly_across_instances() {
    let (redis, a, b) = two_instances().await;
    let http = client();
    let before = server_now(&redis).await;
    // (prompt words, max_tokens): answer min(max_tokens, 2 × words), used words + answer.
    let calls = [(3, 100), (50, 20), (10, 500), (200, 10), (1, 1), (120, 300)];
    let mut total = 0;
    for (i, &(words, max_tokens)) in calls.iter().enumerate() {
        let service = if i % 2 == 0 { &a } else { &b };
        let (status, _, body) = complete(&http, service, "free-1", words, max_tokens).await;
        assert_eq!(status, StatusCode::OK, "call {i}: {body}");
        let answer = u64::from(max_tokens).min(2 * words as u64);
        assert_eq!(used(&body), words as u64 + answer, "call {i}");
        assert_eq!(body.matches("tok").count() as u64, answer, "call {i}");
        total += used(&body);
    }
    let after = server_now(&redis).await;
    let month = Calendar::month(1, 0).unwrap();
    if month.window(before) != month.window(after) {
        // A month ended while the calls ran (a few seconds, once a month): the count is the
        // new month's.
        eprintln!("a month ended during the test; its total is not checked");
        return;
    }
    for service in [&a, &b] {
        let left = left(&http, service, "free-1").await;
        assert_eq!(
            left["llm_gateway.month"]["remaining"].as_u64(),
            Some(20_000 - total),
            "{left}"
        );
    }
}

/// The trial's month (300 tokens, owing at most 100): an overdraft is served and taken into
/// debt, never past the bound; the next call is refused with 402 until the month ends.
#[tokio::test]
async fn a_quota_is_never_exceeded_by_more_than_its_debt_bound() {
    let (redis, a, b) = two_instances().await;
    let http = client();
    // 50 estimated, 150 used: the month holds 150.
    let (status, _, body) = complete(&http, &a, "trial-1", 100, 50).await;
    assert_eq!((status, used(&body)), (StatusCode::OK, 150));
    // 50 estimated, 450 used: served, but only 200 more are taken (300 + 100 at most).
    let (status, _, body) = complete(&http, &b, "trial-1", 400, 50).await;
    assert_eq!((status, used(&body)), (StatusCode::OK, 450));
    // A limiter of the services' prefix (`enable_redis_rate_limit!`'s: the package's name), to
    // name the bucket.
    let limiter = redis_ratelimit::RateLimiter::builder()
        .redis(redis.url())
        .prefix(env!("CARGO_PKG_NAME"))
        .build()
        .await
        .unwrap();
    let key = limiter.named_bucket_key("llm_gateway.month", "trial-1");
    let mut con = redis.connection().await;
    let count: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(count, "400", "{key}: the quota and its debt bound, no more");
    // The month is used up: 402, with the time to its end, from either instance.
    for service in [&a, &b] {
        let (status, retry, body) = complete(&http, service, "trial-1", 1, 1).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
        let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["status"], 402);
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("quota (300) is used up"),
            "{problem}"
        );
        let retry = retry.unwrap();
        assert!((1..=31 * 86_400).contains(&retry), "{retry}");
    }
    let count: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(count, "400", "a refused call took nothing");
}

/// The minute's rate: an overdraft leaves the key in debt, and the next call is refused with
/// 429 and a `Retry-After` that counts the debt; an unknown key is refused before any limit.
#[tokio::test]
async fn an_overdraft_of_the_rate_makes_the_next_call_wait_for_the_debt() {
    let (_redis, a, b) = two_instances().await;
    let http = client();
    // 1,000 estimated (the whole minute), 1,600 used: 500 owed (the bound).
    let (status, _, body) = complete(&http, &a, "free-1", 600, 1_000).await;
    assert_eq!((status, used(&body)), (StatusCode::OK, 1_600));
    let (status, retry, body) = complete(&http, &b, "free-1", 1, 100).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    // 500 owed and the call's 100, at 1,000 a minute: 36 s, less the time since.
    let retry = retry.unwrap();
    assert!((20..=36).contains(&retry), "{retry}");
    let r = http
        .post(a.url("/v1/completions"))
        .header("x-api-key", "nobody")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}
