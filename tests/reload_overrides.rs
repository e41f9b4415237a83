//! `reload_overrides` on a real Redis, with calls running through the swap: the new limits
//! are in force at once, buckets keep what they took, and an invalid file changes nothing and
//! says where it is wrong.
//!
//! One test per file: enabling is once per process.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis_ratelimit::{
    Error, Global, RateLimited, RequestContext, context::scope, declared_limits,
    enable_redis_rate_limit, rate_limit, reload_overrides,
};
use testkit::RedisServer;

/// Declared at 1 an hour; the file says otherwise.
#[rate_limit(replenish = 1, unit = "hour", key = Global)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn effective_burst() -> u32 {
    declared_limits()
        .into_iter()
        .find(|d| d.name() == "reload_overrides::export")
        .unwrap()
        .effective()
        .limit
        .burst_capacity()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaded_limits_hold_at_once_and_buckets_keep_their_tokens() {
    assert!(matches!(reload_overrides().await, Err(Error::NotEnabled)));

    let server = RedisServer::start();
    let config = server.dir().join("limits.toml");
    let limits = |burst: &str| {
        format!(
            "[limits.\"reload_overrides::export\"]\nreplenish = 2\nunit = \"hour\"\nburst = {burst}\n"
        )
    };
    std::fs::write(&config, limits("2")).unwrap();
    enable_redis_rate_limit!(url = server.url(), config = config.clone())
        .await
        .unwrap();
    assert_eq!(effective_burst(), 2);

    // Four tasks call all along, through the reloads, and count their calls.
    let admitted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let calls: Arc<[AtomicUsize; 4]> = Arc::default();
    let mut tasks = Vec::new();
    for task in 0..4 {
        let (admitted, stop, calls) = (admitted.clone(), stop.clone(), calls.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if scope(RequestContext::new(), export()).await.is_ok() {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
                calls[task].fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            calls[task].load(Ordering::SeqCst)
        }));
    }
    let deadline = || std::time::Instant::now() + Duration::from_secs(10);
    // Every task makes 25 more calls, each of which could have been admitted.
    let settle = || {
        let calls = calls.clone();
        async move {
            let now: Vec<usize> = calls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
            let deadline = deadline();
            while calls
                .iter()
                .zip(&now)
                .any(|(c, then)| c.load(Ordering::SeqCst) < then + 25)
            {
                assert!(std::time::Instant::now() < deadline, "the tasks stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // The tasks reach `n` admissions (however slow the machine), then each calls 25 times
    // more and they still have exactly `n`: nothing more passed.
    let holds_at = |n: usize, why: &'static str| {
        let admitted = admitted.clone();
        let settle = settle();
        async move {
            let deadline = deadline();
            while admitted.load(Ordering::SeqCst) < n {
                assert!(
                    std::time::Instant::now() < deadline,
                    "never reached {n}: {why}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            settle.await;
            assert_eq!(admitted.load(Ordering::SeqCst), n, "{why}");
        }
    };
    holds_at(2, "the file's burst of 2").await;

    // A burst of 5: the two taken stay taken, three more pass (a token every 30 minutes
    // comes back too slowly to matter here).
    std::fs::write(&config, limits("5")).unwrap();
    reload_overrides().await.unwrap();
    assert_eq!(effective_burst(), 5);
    holds_at(5, "three more of a burst of 5").await;

    // An invalid file changes nothing, and says where it is wrong.
    std::fs::write(&config, limits("0")).unwrap();
    let err = reload_overrides().await.unwrap_err().to_string();
    assert!(err.contains(&config.display().to_string()), "{err}");
    assert!(err.contains("reload_overrides::export"), "{err}");
    assert!(err.contains("`burst`"), "{err}");
    assert_eq!(effective_burst(), 5, "the old set stays in force");
    std::fs::write(
        &config,
        "[limits.\"reload_overrides::exprot\"]\nburst = 3\n",
    )
    .unwrap();
    let err = reload_overrides().await.unwrap_err().to_string();
    assert!(err.contains("reload_overrides::exprot"), "{err}");
    assert_eq!(effective_burst(), 5);

    // A lower burst: the bucket owes more than it holds, and says so honestly.
    std::fs::write(&config, limits("1")).unwrap();
    reload_overrides().await.unwrap();
    settle().await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        assert!(task.await.unwrap() > 50, "the calls ran through the swaps");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 5, "nothing more passed");
    let refused = scope(RequestContext::new(), export()).await.unwrap_err();
    // Five tokens owed at one per 30 minutes: the next call passes once all five are back
    // (2.5 hours), since the bucket holds one now.
    let retry = refused.retry_after();
    assert!(
        retry > Duration::from_secs(8990) && retry <= Duration::from_secs(9000),
        "{retry:?}"
    );
}
