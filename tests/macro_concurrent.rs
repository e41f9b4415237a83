//! `#[rate_limit(concurrent = ..)]` end to end on the in-memory store: the generated code
//! holds a slot while the function's future runs and gives it back when that future ends,
//! however it ends (returned, failed, panicked, dropped); a full key refuses, or waits with
//! `wait`; the limit is declared like any other.

#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::time::Duration;

use redis_ratelimit::{Global, Limit, RateLimited, RateLimiter, declared_limits, rate_limit};
use tokio::sync::oneshot;

mod support;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

async fn init() -> &'static RateLimiter {
    support::memory_limiter(&LIMITER, "macro-concurrent").await
}

/// Runs until `go` is told, holding its slot.
#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER)]
async fn one_at_a_time(go: oneshot::Receiver<()>) -> Result<(), RateLimited> {
    let _ = go.await;
    Ok(())
}

#[tokio::test]
async fn a_slot_is_held_while_the_function_runs() {
    init().await;
    let (release, go) = oneshot::channel();
    let first = tokio::spawn(one_at_a_time(go));
    // Let it take its slot.
    tokio::task::yield_now().await;
    while LIMITER
        .get()
        .unwrap()
        .peek_named(
            "macro_concurrent::one_at_a_time",
            "global",
            &Limit::concurrent(1),
        )
        .await
        .is_ok_and(|d| d.remaining == 1)
    {
        tokio::task::yield_now().await;
    }
    let (_, idle) = oneshot::channel();
    let second = one_at_a_time(idle).await;
    assert!(second.is_err(), "the slot is held");
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    // Given back when the function returned.
    let (release, go) = oneshot::channel();
    release.send(()).unwrap();
    assert!(one_at_a_time(go).await.is_ok());
}

#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER, name = "dropped")]
async fn never_ends() -> Result<(), RateLimited> {
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test]
async fn a_dropped_call_gives_its_slot_back() {
    init().await;
    let dropped = tokio::time::timeout(Duration::from_millis(10), never_ends()).await;
    assert!(dropped.is_err(), "timed out, its future dropped");
    let again = tokio::time::timeout(Duration::from_millis(10), never_ends()).await;
    assert!(
        again.is_err(),
        "admitted again (and timed out), not refused"
    );
}

#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER, name = "panics")]
async fn panics() -> Result<(), RateLimited> {
    panic!("the handler failed")
}

#[tokio::test]
async fn a_panicking_call_gives_its_slot_back() {
    init().await;
    assert!(tokio::spawn(panics()).await.unwrap_err().is_panic());
    assert!(
        tokio::spawn(panics()).await.unwrap_err().is_panic(),
        "not refused"
    );
}

/// Calls of `waits` whose bodies run now.
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER, name = "waits", wait = "5s", lease = "10s")]
async fn waits(go: oneshot::Receiver<()>) -> Result<usize, RateLimited> {
    use std::sync::atomic::Ordering;
    let beside = RUNNING.fetch_add(1, Ordering::SeqCst);
    let _ = go.await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    Ok(beside)
}

#[tokio::test]
async fn a_full_key_waits_for_a_slot_with_wait() {
    use std::sync::atomic::Ordering;
    init().await;
    let (release, go) = oneshot::channel();
    let first = tokio::spawn(waits(go));
    while RUNNING.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The second is free to end at once: only its slot can hold it back.
    let (release2, go2) = oneshot::channel();
    release2.send(()).unwrap();
    let second = tokio::spawn(waits(go2));
    // However often it is polled while the first holds the slot, it neither runs nor is
    // refused: it waits (on a timer or a wake-up, never ready by being polled).
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    assert!(
        !second.is_finished(),
        "the second call ran, or was refused, beside the first"
    );
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap(), 0);
    assert_eq!(
        second.await.unwrap().unwrap(),
        0,
        "the second ran only once the first had ended"
    );
}

#[test]
fn the_limit_is_declared() {
    let declared = declared_limits()
        .into_iter()
        .find(|d| d.name() == "waits")
        .expect("declared");
    assert_eq!(
        declared.declared_limit(),
        Limit::concurrent(1)
            .lease(Duration::from_secs(10))
            .wait(Duration::from_secs(5))
    );
}

#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER, name = "described")]
async fn described(go: oneshot::Receiver<()>) -> Result<(), RateLimited> {
    let _ = go.await;
    Ok(())
}

#[tokio::test]
async fn the_headers_describe_a_quota_of_concurrent_requests() {
    use redis_ratelimit::context::scope_returning;
    use redis_ratelimit::headers::{HeaderFamilies, set_call_headers};
    init().await;
    let (release, go) = oneshot::channel();
    let holder = tokio::spawn(scope_returning(support::request("/export"), described(go)));
    while LIMITER
        .get()
        .unwrap()
        .peek_named("described", "global", &Limit::concurrent(1))
        .await
        .is_ok_and(|d| d.remaining == 1)
    {
        tokio::task::yield_now().await;
    }
    let (_, idle) = oneshot::channel();
    let (refused, _) = scope_returning(support::request("/export"), described(idle)).await;
    let headers = refused.unwrap_err().headers(HeaderFamilies::ALL);
    assert_eq!(
        headers["ratelimit-policy"],
        "\"described\";q=1;qu=\"concurrent-requests\""
    );
    assert_eq!(headers["ratelimit"], "\"described\";r=0");
    assert_eq!(headers["retry-after"], "1", "a hint: at most a second");
    release.send(()).unwrap();
    let (admitted, recorded) = holder.await.unwrap();
    admitted.unwrap();
    let recorded = recorded.unwrap();
    let (name, decision) = recorded.parts().next().unwrap();
    let mut headers = axum::http::HeaderMap::new();
    set_call_headers(
        &mut headers,
        [(name, decision)],
        decision,
        HeaderFamilies::ALL,
    );
    assert_eq!(
        headers["ratelimit"], "\"described\";r=0",
        "the admitted call held the one slot"
    );
}

/// A slot at a time, three an hour: stacked, all or nothing.
#[rate_limit(replenish = 3, unit = "hour", key = Global, limiter = LIMITER, name = "exports_hourly")]
#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER, name = "exports_inflight")]
async fn export(go: oneshot::Receiver<()>) -> Result<(), RateLimited> {
    let _ = go.await;
    Ok(())
}

/// Draws from the exports' slot: one export or re-export at a time.
#[rate_limit(shared = "exports_inflight", key = Global, limiter = LIMITER)]
async fn reexport() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn stacked_with_a_rate_limit_and_shared_it_stays_all_or_nothing() {
    let limiter = init().await;
    let hourly = Limit::per_hour(3);
    let left = || async {
        limiter
            .peek_named("exports_hourly", "global", &hourly)
            .await
            .unwrap()
            .remaining
    };
    let (release, go) = oneshot::channel();
    let first = tokio::spawn(export(go));
    while left().await == 3 {
        tokio::task::yield_now().await;
    }
    // The slot is held: a second export is refused, and takes no token of the hourly limit.
    let (_, idle) = oneshot::channel();
    let refused = export(idle).await.unwrap_err();
    assert_eq!(refused.name(), Some("exports_inflight"));
    assert_eq!(left().await, 2);
    // A shared use of the slot is refused too.
    assert!(reexport().await.is_err());
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    assert!(reexport().await.is_ok());
    let (release, go) = oneshot::channel();
    release.send(()).unwrap();
    export(go).await.unwrap();
    assert_eq!(left().await, 1);
}
