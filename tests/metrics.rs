//! The `metrics` feature on a real Redis: every decision counted by limit and outcome, store
//! calls timed, deny-cache hits counted, settled tokens counted, degraded mode a gauge; no
//! label ever holds a key.
//!
//! One test per file: the recorder is global to the process.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use std::sync::OnceLock;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis_ratelimit::{FailurePolicy, Global, Limit, RateLimited, RateLimiter, rate_limit};
use testkit::RedisServer;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

/// Two a day under the first limit, five under the second.
#[rate_limit(replenish = 2, unit = "day", key = Global, name = "stacked::tight", limiter = LIMITER)]
#[rate_limit(replenish = 5, unit = "day", key = Global, name = "stacked::loose")]
async fn stacked() -> Result<(), RateLimited> {
    Ok(())
}

const GOLD: redis_ratelimit::Tier = redis_ratelimit::Tier::new("gold", Limit::per_day(3));

/// Tiered by its argument (a bucket per tier); exempt internal calls; a cost per call.
#[rate_limit(replenish = 1, unit = "day", key = gold, tier = gold.then_some(GOLD), exempt = internal, cost = n, name = "tiered", limiter = LIMITER)]
async fn tiered(gold: bool, internal: bool, n: u32) -> Result<(), RateLimited> {
    Ok(())
}

/// Under a contract's tier, whose name is read at run time.
#[rate_limit(replenish = 1, unit = "day", key = "acme", tier = contract, name = "contract", limiter = LIMITER)]
async fn under_contract(contract: &redis_ratelimit::Tier) -> Result<(), RateLimited> {
    Ok(())
}

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

fn gauge(all: &[(String, DebugValue)], name: &str) -> Option<f64> {
    all.iter().find(|(n, _)| n == name).map(|(_, v)| match v {
        DebugValue::Gauge(g) => g.into_inner(),
        other => panic!("{name} is {other:?}"),
    })
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
    // Published from the start, so that a dashboard or an alert has data before any outage.
    assert_eq!(
        gauge(&read(&snapshotter), "ratelimit_degraded{limiter=m}"),
        Some(0.0)
    );
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

    // Several limits of one call: a limit that admitted a call another refused took nothing,
    // and is counted `vetoed`, not `allowed` (nor `limited`: it did not refuse).
    let tight = Limit::per_day(2);
    let loose = Limit::per_day(5);
    for _ in 0..4 {
        limiter
            .check_all_named(&[("tight", "u", &tight, 1), ("loose", "u", &loose, 1)])
            .await
            .unwrap();
    }
    assert!(LIMITER.set(limiter.clone()).is_ok());
    let mut admitted = 0;
    for _ in 0..4 {
        admitted += usize::from(stacked().await.is_ok());
    }
    assert_eq!(admitted, 2);

    let all = read(&snapshotter);
    for (tight, loose) in [("tight", "loose"), ("stacked::tight", "stacked::loose")] {
        let count = |limit: &str, outcome: &str| {
            counter(
                &all,
                &format!("ratelimit_decisions_total{{limit={limit},outcome={outcome}}}"),
            )
        };
        assert_eq!((count(tight, "allowed"), count(tight, "limited")), (2, 2));
        assert_eq!(
            (
                count(loose, "allowed"),
                count(loose, "vetoed"),
                count(loose, "limited")
            ),
            (2, 2, 0),
            "{loose}: {all:?}"
        );
    }

    // A call of one limit through the several-limit methods is counted as any other (it
    // was not: its one decision has no parts to count).
    let one = Limit::per_day(1);
    for _ in 0..2 {
        limiter
            .check_all_named(&[("alone", "u", &one, 1)])
            .await
            .unwrap();
    }
    let slots = Limit::concurrent(1);
    let entered = limiter
        .enter_named("alone_slot", "u", &slots)
        .await
        .unwrap();
    assert!(entered.decision.allowed);
    let all = read(&snapshotter);
    for (series, n) in [
        ("ratelimit_decisions_total{limit=alone,outcome=allowed}", 1),
        ("ratelimit_decisions_total{limit=alone,outcome=limited}", 1),
        (
            "ratelimit_decisions_total{limit=alone_slot,outcome=allowed}",
            1,
        ),
    ] {
        assert_eq!(counter(&all, series), n, "{series}: {all:?}");
    }
    drop(entered);

    // A tiered call is counted with its tier; an untiered one, an exempt one and one above
    // the burst by their outcomes alone.
    assert!(tiered(true, false, 1).await.is_ok());
    assert!(tiered(false, false, 1).await.is_ok());
    assert!(tiered(false, true, 1).await.is_ok());
    assert!(tiered(true, false, 4).await.is_err());
    let all = read(&snapshotter);
    for (series, n) in [
        (
            "ratelimit_decisions_total{limit=tiered,outcome=allowed,tier=gold}",
            1,
        ),
        ("ratelimit_decisions_total{limit=tiered,outcome=allowed}", 1),
        ("ratelimit_decisions_total{limit=tiered,outcome=exempt}", 1),
        (
            "ratelimit_decisions_total{limit=tiered,outcome=cost_exceeds_burst,tier=gold}",
            1,
        ),
    ] {
        assert_eq!(counter(&all, series), n, "{series}: {all:?}");
    }

    // A contract's tier, its name an owned `String` read at run time: the same label.
    let name = String::from("acme-gold");
    let contract = redis_ratelimit::Tier::try_new(name, Limit::per_day(2)).unwrap();
    let mut admitted = 0;
    for _ in 0..3 {
        admitted += usize::from(under_contract(&contract).await.is_ok());
    }
    assert_eq!(admitted, 2);
    let all = read(&snapshotter);
    for (outcome, n) in [("allowed", 2), ("limited", 1)] {
        let series =
            format!("ratelimit_decisions_total{{limit=contract,outcome={outcome},tier=acme-gold}}");
        assert_eq!(counter(&all, &series), n, "{series}: {all:?}");
    }

    // Settlements count the tokens they moved, by limit and direction, with no key.
    let tokens = Limit::per_hour(1_000);
    let usage = limiter
        .check_estimate_named("llm", "secret-user", &tokens, 100)
        .await
        .unwrap();
    usage.settle(30).await.unwrap();
    let usage = limiter
        .check_all_estimates(&[
            ("llm", "secret-user", &tokens, 10),
            ("llm.month", "secret-user", &Limit::per_month(5_000), 10),
        ])
        .await
        .unwrap();
    usage.settle(25).await.unwrap();
    let all = read(&snapshotter);
    for (series, n) in [
        (
            "ratelimit_settled_tokens_total{direction=given_back,limit=llm}",
            70,
        ),
        (
            "ratelimit_settled_tokens_total{direction=taken,limit=llm}",
            15,
        ),
        (
            "ratelimit_settled_tokens_total{direction=taken,limit=llm.month}",
            15,
        ),
    ] {
        assert_eq!(counter(&all, series), n, "{series}: {all:?}");
    }
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
