//! While the store is down, calls are decided at once in memory, so a caller that loops (a
//! worker draining a queue) never waits on anything. It must still let the runtime's other
//! tasks run, the one that probes the store among them: on a loaded machine (issue 44), the
//! tasks of a process looping in the fallback starved its probe for seconds, and the process
//! stayed degraded beside a Redis that had answered all along.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis_ratelimit::{Limit, Source};
use testkit::outage::limiter_without_redis;

#[tokio::test(flavor = "current_thread")]
async fn a_caller_looping_while_the_store_is_down_lets_other_tasks_run() {
    let (limiter, _server) = limiter_without_redis(|builder| {
        builder
            .prefix("yields")
            // The circuit stays open for the whole test: every call is decided by the policy.
            .circuit_cooldown(Duration::from_secs(600))
    })
    .await;
    let limit = Limit::per_second(1_000_000);
    let first = limiter.check("k", &limit).await.unwrap();
    assert_eq!(first.source, Source::Fallback, "the store is gone");

    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let mut calls = 0u32;
    while !ran.load(Ordering::SeqCst) && calls < 100_000 {
        let d = limiter.check("k", &limit).await.unwrap();
        assert_eq!(d.source, Source::Fallback);
        calls += 1;
    }
    assert!(
        ran.load(Ordering::SeqCst),
        "another task of the runtime never ran in {calls} calls decided by the fallback"
    );
}
