//! `#[rate_limit(cost = .., settle = ..)]`: a call takes its estimated cost before its body
//! runs and settles the actual cost its output says when it ends, on every kind of limit the
//! attribute declares (a handler's, stacked ones, a shared use, one given a tier); a body
//! that panics or is cancelled keeps its estimate. On a real redis-server, with a second
//! limiter on the same server and prefix as another instance.
//!
//! One test (one server) for the whole file: the limiter is a process-wide static.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::time::Duration;

use redis_ratelimit::{FailurePolicy, Limit, RateLimited, RateLimiter, Tier, rate_limit};
use testkit::RedisServer;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

#[derive(Debug)]
struct Completion {
    tokens: u32,
}

#[derive(Debug)]
enum ApiError {
    Limited,
    Upstream,
}

impl From<RateLimited> for ApiError {
    fn from(_: RateLimited) -> Self {
        ApiError::Limited
    }
}

/// A completion's tokens: estimated from the request, settled from the response. 1,000 an
/// hour per API key (owing at most a burst) and 5,000 a month; a failed call used nothing.
#[rate_limit(
    replenish = 1_000, unit = "hour", key = api_key, name = "ms.rate", cost = max_tokens,
    settle = |r| r.as_ref().map_or(0, |c| c.tokens), limiter = LIMITER
)]
#[rate_limit(
    replenish = 5_000, unit = "month", key = api_key, name = "ms.month", cost = max_tokens,
    settle = |r| r.as_ref().map_or(0, |c| c.tokens), limiter = LIMITER
)]
async fn complete(
    api_key: &str,
    max_tokens: u32,
    used: Option<u32>,
) -> Result<Completion, ApiError> {
    match used {
        Some(tokens) => Ok(Completion { tokens }),
        None => Err(ApiError::Upstream),
    }
}

/// Embeddings draw from the same hourly tokens (a shared use settles too).
#[rate_limit(
    shared = "ms.rate", key = api_key, cost = texts * 100,
    settle = |r: &Result<u64, ApiError>| *r.as_ref().unwrap_or(&0), limiter = LIMITER
)]
async fn embed(api_key: &str, texts: u32, tokens: u64) -> Result<u64, ApiError> {
    Ok(tokens)
}

const FREE: Tier = Tier::new("free", Limit::per_hour(100));
/// A plan whose limit cannot owe: its calls keep their estimates (said once, not an error).
const WINDOWED: Tier = Tier::new(
    "windowed",
    Limit::per_hour(100).algorithm(redis_ratelimit::Algorithm::SlidingWindow),
);

#[rate_limit(
    replenish = 100, unit = "hour", key = user, name = "ms.tiered", cost = 40,
    tier = if windowed { WINDOWED } else { FREE }, settle = |r: &Result<u32, RateLimited>| *r.as_ref().unwrap_or(&0),
    limiter = LIMITER
)]
async fn tiered(user: &str, windowed: bool, used: u32) -> Result<u32, RateLimited> {
    Ok(used)
}

/// A body that panics, or says it runs (its estimate taken) and waits until it is cancelled.
#[rate_limit(
    replenish = 100, unit = "hour", key = "k", name = "ms.broken", cost = 30,
    settle = |_: &Result<(), RateLimited>| 0u32, limiter = LIMITER
)]
async fn broken(runs: Option<tokio::sync::oneshot::Sender<()>>) -> Result<(), RateLimited> {
    let Some(runs) = runs else {
        panic!("the handler failed after its estimate was taken");
    };
    let _ = runs.send(());
    std::future::pending::<()>().await;
    Ok(())
}

async fn remaining(limiter: &RateLimiter, name: &str, key: &str, limit: &Limit) -> u64 {
    limiter
        .peek_named(name, key, limit)
        .await
        .unwrap()
        .remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_settle_their_actual_cost_on_every_kind_of_limit() {
    let server = RedisServer::start();
    let limiter = || {
        RateLimiter::builder()
            .redis(server.url())
            .prefix("settle")
            .failure_policy(FailurePolicy::Deny)
            .deadline(Some(Duration::from_secs(10)))
            .build()
    };
    LIMITER.set(limiter().await.unwrap()).unwrap();
    // Another instance, to read what the calls left.
    let other = limiter().await.unwrap();
    let rate = Limit::per_hour(1_000);
    let month = Limit::per_month(5_000);

    // 500 estimated, 120 used: 380 back to each limit.
    let c = complete("key:a", 500, Some(120)).await.unwrap();
    assert_eq!(c.tokens, 120);
    assert_eq!(remaining(&other, "ms.rate", "key:a", &rate).await, 880);
    assert_eq!(remaining(&other, "ms.month", "key:a", &month).await, 4_880);
    // 100 estimated, 700 used: 600 more at once, the hourly bucket into debt (880 - 700).
    complete("key:a", 100, Some(700)).await.unwrap();
    assert_eq!(remaining(&other, "ms.rate", "key:a", &rate).await, 180);
    assert_eq!(remaining(&other, "ms.month", "key:a", &month).await, 4_180);
    // A failed call used nothing: its whole estimate comes back.
    assert!(matches!(
        complete("key:a", 150, None).await,
        Err(ApiError::Upstream)
    ));
    assert_eq!(remaining(&other, "ms.rate", "key:a", &rate).await, 180);
    // An overdraft beyond the hour's debt bound (a burst, 1,000): 80 held after the estimate,
    // 1,000 owed at most, so 1,080 of the 1,500 more are taken; the month takes all of it.
    complete("key:a", 100, Some(1_600)).await.unwrap();
    assert_eq!(remaining(&other, "ms.rate", "key:a", &rate).await, 0);
    assert_eq!(remaining(&other, "ms.month", "key:a", &month).await, 2_580);
    // The next call waits for the debt: refused, with a retry_after that counts it (a
    // thousand owed and the call's own hundred at 3.6 s each).
    let refused = complete("key:a", 100, Some(1)).await;
    assert!(matches!(refused, Err(ApiError::Limited)));
    let d = other.peek_named("ms.rate", "key:a", &rate).await.unwrap();
    assert!(
        d.retry_after > Duration::from_secs(1_000 * 36 / 10 - 60),
        "{d:?}"
    );

    // A shared use settles in the declaration's buckets.
    embed("key:b", 3, 40).await.unwrap();
    assert_eq!(remaining(&other, "ms.rate", "key:b", &rate).await, 960);

    // A tier's limit settles; one that cannot owe keeps its estimate.
    tiered("u", false, 5).await.unwrap();
    assert_eq!(remaining(&other, "ms.tiered", "u", &FREE.limit()).await, 95);
    tiered("w", true, 5).await.unwrap();
    assert_eq!(
        remaining(&other, "ms.tiered", "w", &WINDOWED.limit()).await,
        60
    );

    // A body that panics, or is cancelled, keeps its estimate: nothing given back.
    let panicked = tokio::spawn(broken(None)).await;
    assert!(panicked.unwrap_err().is_panic());
    let broken_limit = Limit::per_hour(100);
    assert_eq!(remaining(&other, "ms.broken", "k", &broken_limit).await, 70);
    // Cancelled once its body runs: its estimate was taken before.
    let (runs, running) = tokio::sync::oneshot::channel();
    let pending = tokio::spawn(broken(Some(runs)));
    running.await.unwrap();
    assert_eq!(remaining(&other, "ms.broken", "k", &broken_limit).await, 40);
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    assert_eq!(remaining(&other, "ms.broken", "k", &broken_limit).await, 40);
}
