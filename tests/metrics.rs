//! The `metrics` feature on a real Redis: every decision counted by limit and outcome, store
//! calls timed, deny-cache hits counted, degraded mode a gauge; no label ever holds a key.
//!
//! One test per file: the recorder is global to the process.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis_ratelimit::{FailurePolicy, Limit, RateLimiter};
use testkit::RedisServer;

/// Every metric's name, labels and value, as `name{label=value,..}`.
fn read(snapshotter: &Snapshotter) -> Vec<(String, DebugValue)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn counter(all: &[(String, DebugValue)], name: &str) -> u64 {
    all.iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| match v {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} is {other:?}"),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_store_calls_and_degraded_mode_are_measured() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();

    let mut server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("m")
        .failure_policy(FailurePolicy::Fallback)
        .deadline(Some(Duration::from_secs(2)))
        .build()
        .await
        .unwrap();
    let limit = Limit::per_minute(1);
    for _ in 0..3 {
        limiter
            .check_named("orders", "secret-user", &limit, 1)
            .await
            .unwrap();
    }
    limiter.check("anon", &limit).await.unwrap();

    let all = read(&snapshotter);
    assert_eq!(
        counter(
            &all,
            "ratelimit_decisions_total{limit=orders,outcome=allowed}"
        ),
        1
    );
    // The second refusal comes from the deny cache: still `limited`, and a cache hit.
    assert_eq!(
        counter(
            &all,
            "ratelimit_decisions_total{limit=orders,outcome=limited}"
        ),
        2
    );
    assert_eq!(counter(&all, "ratelimit_deny_cache_hits_total{}"), 1);
    assert_eq!(
        counter(&all, "ratelimit_decisions_total{limit=-,outcome=allowed}"),
        1
    );
    let timed = all
        .iter()
        .find(|(n, _)| n == "ratelimit_store_seconds{}")
        .map(|(_, v)| match v {
            DebugValue::Histogram(h) => h.len(),
            other => panic!("{other:?}"),
        });
    assert_eq!(timed, Some(3), "the three calls that reached Redis");
    assert!(
        all.iter().all(|(n, _)| !n.contains("secret-user")),
        "no key in a label: {all:?}"
    );

    // Redis goes away: the fallback decides, and the limiter says it is degraded.
    server.kill();
    let d = limiter.check("after", &limit).await.unwrap();
    assert_eq!(d.outcome(), "fallback");
    let all = read(&snapshotter);
    assert_eq!(
        counter(&all, "ratelimit_decisions_total{limit=-,outcome=fallback}"),
        1
    );
    let degraded: Vec<&(String, DebugValue)> = all
        .iter()
        .filter(|(n, _)| n.starts_with("ratelimit_degraded{"))
        .collect();
    assert_eq!(degraded.len(), 1, "{all:?}");
    assert!(
        matches!(degraded[0].1, DebugValue::Gauge(g) if g.into_inner() == 1.0),
        "{degraded:?}"
    );
}
