//! `#[rate_limit]` with `wait`, `algorithm = "leaky_bucket"` and `shadow`, on the in-memory
//! store: a call over the limit waits its turn within the bound, a leaky bucket queues
//! `burst` calls, a shadow limit never refuses and says so in the decision the response
//! headers are made from. The waiting tests run on paused Tokio time, each with a limiter of
//! its own on that clock; every timing assertion is a lower bound ("never early").

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::OnceLock;
use std::time::Duration;

use futures_util::future::join_all;
use redis_ratelimit::{
    Algorithm, Header, RateLimited, RateLimiter, Uri, context::scope_returning, declared_limits,
    rate_limit, store::MemoryStore,
};
// Tokio's: virtual under paused time.
use tokio::time::Instant;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
/// The waiting tests' limiters, one each: a store on one test's paused clock serves no other.
static FETCH: OnceLock<RateLimiter> = OnceLock::new();
static DRIP: OnceLock<RateLimiter> = OnceLock::new();

mod support;

use support::request;

async fn init() -> &'static RateLimiter {
    support::memory_limiter(&LIMITER, "macro-wait").await
}

/// Builds `cell`'s limiter on a memory store on this test's (paused) Tokio clock.
async fn init_on_tokio_time(cell: &'static OnceLock<RateLimiter>) {
    let store = MemoryStore::with_clock(support::TokioClock::new());
    let built = RateLimiter::builder()
        .memory_store(store)
        .prefix("macro-wait")
        .build()
        .await
        .unwrap();
    assert!(cell.set(built).is_ok(), "one test per limiter");
}

/// Ten a second per path, one at a time; a call waits up to half a second for its turn.
#[rate_limit(replenish = 10, burst = 1, wait = "500ms", key = Uri, limiter = FETCH)]
async fn fetch() -> Result<Instant, RateLimited> {
    Ok(Instant::now())
}

#[tokio::test(start_paused = true)]
async fn a_waiting_limit_serves_calls_in_turn_within_its_bound() {
    init_on_tokio_time(&FETCH).await;
    let t0 = Instant::now();
    let calls = (0..8).map(|_| scope_returning(request("/fetch"), fetch()));
    let done = join_all(calls).await;
    let mut at: Vec<Duration> = done
        .iter()
        .filter_map(|(r, _)| r.as_ref().ok().map(|t| *t - t0))
        .collect();
    at.sort();
    println!("admitted at {at:?}");
    // The first goes at once, five more wait 100 ms each in turn, two would wait longer
    // than 500 ms and are refused at once.
    assert_eq!(at.len(), 6);
    for (k, t) in at.iter().enumerate() {
        assert!(*t >= Duration::from_millis(100) * u32::try_from(k).unwrap());
    }
    let refused: Vec<&RateLimited> = done.iter().filter_map(|(r, _)| r.as_ref().err()).collect();
    assert_eq!(refused.len(), 2);
    assert!(refused.iter().all(|r| r.retry_after() > Duration::ZERO));
    // The response of an admitted call describes a call that goes now, with no wait left.
    let recorded = done.iter().find(|(r, _)| r.is_ok()).unwrap().1.clone();
    assert_eq!(recorded.unwrap().decision.retry_after, Duration::ZERO);
    let declared = declared_limits()
        .into_iter()
        .find(|d| d.name() == "macro_wait_shadow::fetch")
        .unwrap();
    assert_eq!(
        declared.declared_limit().max_wait(),
        Some(Duration::from_millis(500))
    );
}

/// Five a second per client, calls leaving one at a time, at most two waiting.
#[rate_limit(replenish = 5, burst = 2, algorithm = "leaky_bucket", key = Header("x-client"), limiter = DRIP)]
async fn drip() -> Result<Instant, RateLimited> {
    Ok(Instant::now())
}

#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_lets_calls_out_at_the_rate() {
    init_on_tokio_time(&DRIP).await;
    let ctx = || redis_ratelimit::RequestContext::new().with_header("x-client", "a");
    let t0 = Instant::now();
    let done = join_all((0..5).map(|_| scope_returning(ctx(), drip()))).await;
    let mut at: Vec<Duration> = done
        .iter()
        .filter_map(|(r, _)| r.as_ref().ok().map(|t| *t - t0))
        .collect();
    at.sort();
    println!("left at {at:?}");
    assert_eq!(
        at.len(),
        3,
        "one leaves now, two wait, two find the queue full"
    );
    for (k, t) in at.iter().enumerate() {
        assert!(*t >= Duration::from_millis(200) * u32::try_from(k).unwrap());
    }
    assert_eq!(
        declared_limits()
            .into_iter()
            .find(|d| d.name() == "macro_wait_shadow::drip")
            .unwrap()
            .declared_limit()
            .algorithm_kind(),
        Algorithm::LeakyBucket
    );
}

/// A new limit being rolled out: one an hour per path, watched, never enforced.
#[rate_limit(replenish = 1, unit = "hour", shadow = true, key = Uri, limiter = LIMITER)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_shadow_limit_never_refuses_and_says_so() {
    init().await;
    let (first, recorded) = scope_returning(request("/report"), report()).await;
    assert!(first.is_ok());
    assert!(!recorded.unwrap().decision.shadowed);
    for _ in 0..3 {
        let (again, recorded) = scope_returning(request("/report"), report()).await;
        assert!(again.is_ok(), "a shadow limit never refuses");
        let d = recorded.unwrap().decision;
        assert!(d.allowed && d.shadowed, "{d:?}");
        assert_eq!(d.remaining, 0, "the headers say the limit is spent");
    }
}
