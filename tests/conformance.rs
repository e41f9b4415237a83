//! One suite of cases for every algorithm, run against the Redis store (a real redis-server
//! started by the test) and the memory store (on a manual clock). Both must give the same
//! answers: exactly on the memory store, and within the time that really passed on Redis.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use redis_ratelimit::{Algorithm, Error, Limit, Refill, Unit};
use support::Harness;

/// How far a Redis answer may lag the exact one: the real time between calls in a test.
const SLACK: Duration = Duration::from_millis(500);

async fn full_bucket_admits_exactly_burst(h: Harness) {
    let limit = Limit::per_minute(6).burst(5);
    for expected_remaining in (0..5).rev() {
        let t = h.check("k", &limit, 1).await;
        assert!(t.d.allowed);
        assert_eq!(t.d.remaining, expected_remaining);
        assert_eq!(t.d.retry_after, Duration::ZERO);
    }
    let denied = h.check("k", &limit, 1).await;
    assert!(!denied.d.allowed);
    assert_eq!(denied.d.remaining, 0);
    assert_eq!(denied.d.limit, limit);
    // One token every 10 s; the bucket is full 50 s after it was emptied.
    h.assert_duration(
        denied.d.retry_after,
        Duration::from_secs(10),
        SLACK,
        "retry_after",
    );
    h.assert_duration(
        denied.d.reset_after,
        Duration::from_secs(50),
        SLACK,
        "reset_after",
    );
    // Still refused: a denied call takes nothing and changes nothing.
    let again = h.check("k", &limit, 1).await;
    assert!(!again.d.allowed);
    assert!(again.d.retry_after <= denied.d.retry_after);
}

async fn exact_values_with_a_fractional_interval(h: Harness) {
    // 3 per second: one token every 333_333.33 us, which must not be rounded per call.
    let limit = Limit::per_second(3).burst(2);
    let first = h.check("k", &limit, 1).await.d;
    assert_eq!(first.remaining, 1);
    h.assert_duration(
        first.reset_after,
        Duration::from_micros(333_334),
        SLACK,
        "reset 1",
    );
    let second = h.check("k", &limit, 1).await.d;
    assert_eq!(second.remaining, 0);
    h.assert_duration(
        second.reset_after,
        Duration::from_micros(666_667),
        SLACK,
        "reset 2",
    );
    let third = h.check("k", &limit, 1).await.d;
    assert!(!third.allowed);
    h.assert_duration(
        third.retry_after,
        Duration::from_micros(333_334),
        SLACK,
        "retry",
    );
}

async fn cost_takes_that_many_tokens(h: Harness) {
    let limit = Limit::per_minute(6).burst(10);
    for expected in [7, 4, 1] {
        let t = h.check("k", &limit, 3).await;
        assert!(t.d.allowed);
        assert_eq!(t.d.remaining, expected);
        assert_eq!(t.d.cost, 3);
    }
    let denied = h.check("k", &limit, 3).await.d;
    assert!(!denied.allowed);
    assert_eq!(denied.remaining, 1);
    // Two more tokens are needed: 2 x 10 s.
    h.assert_duration(
        denied.retry_after,
        Duration::from_secs(20),
        SLACK,
        "retry_after",
    );
    // A cheaper call still fits.
    let one = h.check("k", &limit, 1).await.d;
    assert!(one.allowed);
    assert_eq!(one.remaining, 0);
}

async fn waiting_exactly_retry_after_is_admitted(h: Harness) {
    // 7 per second: an interval of 142_857.14 us, so every retry_after is rounded up.
    let limit = Limit::per_second(7).burst(1);
    assert!(h.check("k", &limit, 1).await.d.allowed);
    for _ in 0..5 {
        let denied = h.check("k", &limit, 1).await.d;
        assert!(!denied.allowed);
        let wait = denied.retry_after;
        assert!(wait > Duration::ZERO && wait <= Duration::from_micros(142_858));
        if h.is_memory() {
            h.advance(wait - Duration::from_micros(1)).await;
            assert!(
                !h.check("k", &limit, 1).await.d.allowed,
                "a microsecond early"
            );
            h.advance(Duration::from_micros(1)).await;
        } else {
            h.advance(wait).await;
        }
        assert!(h.check("k", &limit, 1).await.d.allowed, "exactly on time");
    }
}

async fn refill_follows_the_rate_for_every_unit(h: Harness) {
    // The units of a fixed length (a week and a month are calendar periods, counted by a
    // fixed window: `calendar_quota.rs`).
    for unit in Unit::ALL.into_iter().filter(|u| !u.is_calendar()) {
        let key = format!("k-{unit}");
        // Memory: 3 per unit, waited exactly on the manual clock. Redis: a replenish that makes
        // one token every 100 ms in this unit, waited for real.
        let (replenish, interval) = if h.is_memory() {
            (3, unit.as_duration() / 3)
        } else {
            let per_100ms = u32::try_from(unit.as_micros() / 100_000).unwrap();
            (per_100ms, Duration::from_millis(100))
        };
        let limit = Limit::try_new(replenish, 10, unit).unwrap();
        // The bucket is full at the first of the ten calls that empty it; tokens come back
        // from then on, while those calls run too (on a loaded machine, for more than one
        // interval).
        let fill = h.check(&key, &limit, 1).await;
        let mut last = fill.clone();
        for _ in 1..10 {
            last = h.check(&key, &limit, 1).await;
        }
        assert!(!h.check(&key, &limit, 1).await.d.allowed, "{unit}: empty");
        h.advance(interval * 3 + interval / 2).await;
        let mut admitted = 0u32;
        let first = h.check(&key, &limit, 1).await;
        let mut t = first.clone();
        while t.d.allowed {
            admitted += 1;
            t = h.check(&key, &limit, 1).await;
        }
        if h.is_memory() {
            assert_eq!(admitted, 3, "{unit}: 3.5 intervals refill 3 tokens");
        } else {
            // The tokens that came back between the two decisions, bracketed by local time: at
            // least those of the wait; at most all since the bucket was full, less none (the
            // ten calls took the ten it held then).
            let least = first.sent.duration_since(last.received).as_micros() / interval.as_micros();
            let most = t.received.duration_since(fill.sent).as_micros() / interval.as_micros();
            let admitted = u128::from(admitted);
            assert!(
                (least..=most).contains(&admitted),
                "{unit}: admitted {admitted}, expected {least}..={most}"
            );
        }
        // A bucket never holds more than burst, however long it waits.
        if h.is_memory() {
            h.advance(unit.as_duration() * 10).await;
            let mut n = 0;
            while h.check(&key, &limit, 1).await.d.allowed {
                n += 1;
            }
            assert_eq!(n, 10, "{unit}: capped at burst");
        }
    }
}

async fn keys_and_prefixes_are_independent(h: Harness) {
    let limit = Limit::per_hour(1);
    assert!(h.check("a", &limit, 1).await.d.allowed);
    assert!(!h.check("a", &limit, 1).await.d.allowed);
    assert!(h.check("b", &limit, 1).await.d.allowed, "another key");
    let other = h.with_prefix("other").await;
    let d = other.check("a", &limit).await.unwrap();
    assert!(d.allowed, "another prefix");
    // A different limit on the same key shares the bucket (the key names it, not the limit).
    assert!(
        !h.check("a", &Limit::per_hour(2).burst(1), 1)
            .await
            .d
            .allowed
    );
}

async fn impossible_costs_are_errors(h: Harness) {
    let limit = Limit::per_second(5);
    let err = h.limiter.check_n("k", &limit, 6).await.unwrap_err();
    assert!(
        matches!(err, Error::CostExceedsBurst { cost: 6, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("exceeds the burst capacity 5"),
        "{err}"
    );
    let err = h.limiter.check_n("k", &limit, 0).await.unwrap_err();
    assert!(matches!(err, Error::ZeroCost), "{err}");
    // Neither touched the bucket.
    assert_eq!(h.check("k", &limit, 5).await.d.remaining, 0);
}

async fn a_raised_quota_keeps_the_tokens_taken(h: Harness) {
    // 3 per minute with a burst of 5, drained; then an override raises it to 60 per minute
    // with the same burst: the 5 tokens taken stay taken, and come back at 1 per second.
    let old = Limit::per_minute(3).burst(5);
    for _ in 0..5 {
        assert!(h.check("k", &old, 1).await.d.allowed);
    }
    let new = Limit::per_minute(60).burst(5);
    let refused = h.check("k", &new, 1).await.d;
    assert!(!refused.allowed);
    h.assert_duration(
        refused.retry_after,
        Duration::from_secs(1),
        SLACK,
        "one token at the new rate",
    );
    h.advance(refused.retry_after).await;
    assert!(
        h.check("k", &new, 1).await.d.allowed,
        "waiting retry_after is admitted"
    );
    // A raised burst offers what it adds at once, and not one token more.
    for _ in 0..5 {
        assert!(h.check("j", &old, 1).await.d.allowed);
    }
    let larger = Limit::per_minute(60);
    for i in 0..55 {
        assert!(h.check("j", &larger, 1).await.d.allowed, "call {i}");
    }
    assert!(!h.check("j", &larger, 1).await.d.allowed);
}

async fn a_lowered_rate_keeps_the_tokens_taken(h: Harness) {
    // 100 per minute drained, then 5 per minute with the same burst: the 100 tokens taken
    // stay taken and come back at one per 12 s, not 95 of them at once.
    let old = Limit::per_minute(100);
    let first = h.check("k", &old, 1).await;
    assert!(first.d.allowed);
    for _ in 1..100 {
        assert!(h.check("k", &old, 1).await.d.allowed);
    }
    let new = Limit::per_minute(5).burst(100);
    let refused = h.check("k", &new, 1).await;
    let (ran, refused) = (refused.received - first.sent, refused.d);
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    // On Redis, what refilled at the old rate while the calls ran comes off 20 times over:
    // the calls ran at most from the first one sent to the refusal read (a loaded machine
    // took 0.3 s over them, where a quiet one takes 0.05 s).
    h.assert_duration(
        refused.retry_after,
        Duration::from_secs(12),
        ran * 20 + Duration::from_millis(10),
        "retry",
    );
    h.advance(refused.retry_after).await;
    assert!(h.check("k", &new, 1).await.d.allowed, "waited retry_after");
    assert!(!h.check("k", &new, 1).await.d.allowed, "one token, not 95");
}

async fn a_lowered_burst_keeps_its_retry_after(h: Harness) {
    // 10 per second with a burst of 10, drained; then the burst is lowered to 1. The tokens
    // taken stay taken: the first refusal waits for all ten (1 s), then one at a time.
    let old = Limit::per_second(10).burst(10);
    for _ in 0..10 {
        assert!(h.check("k", &old, 1).await.d.allowed);
    }
    let new = Limit::per_second(10).burst(1);
    for expected in [1000, 100] {
        let refused = h.check("k", &new, 1).await.d;
        assert!(!refused.allowed);
        h.assert_duration(
            refused.retry_after,
            Duration::from_millis(expected),
            SLACK,
            "retry",
        );
        h.advance(refused.retry_after).await;
        assert!(
            h.check("k", &new, 1).await.d.allowed,
            "waiting retry_after is admitted"
        );
    }
}

async fn a_new_fine_unit_reads_the_bucket_no_fuller(h: Harness) {
    // 3 per second keeps sub-microsecond remainders; 10 per second must read them as the
    // tokens owed: 3 of 10, so 7 calls pass and the next token is 100 ms away.
    let old = Limit::per_second(3).burst(3);
    for _ in 0..3 {
        assert!(h.check("k", &old, 1).await.d.allowed);
    }
    let new = Limit::per_second(10);
    for i in 0..7 {
        assert!(h.check("k", &new, 1).await.d.allowed, "call {i} of 7");
    }
    let refused = h.check("k", &new, 1).await.d;
    assert!(!refused.allowed);
    h.assert_duration(
        refused.retry_after,
        Duration::from_millis(100),
        SLACK,
        "retry",
    );
    if h.is_memory() {
        h.advance(refused.retry_after - Duration::from_micros(1))
            .await;
        assert!(
            !h.check("k", &new, 1).await.d.allowed,
            "a microsecond early"
        );
        h.advance(Duration::from_micros(1)).await;
    } else {
        h.advance(refused.retry_after).await;
    }
    assert!(h.check("k", &new, 1).await.d.allowed);
}

async fn named_and_unnamed_buckets_never_meet(h: Harness) {
    let limit = Limit::per_hour(1);
    let l = &h.limiter;
    // Each pair collided when `:` alone separated the name from the key.
    assert!(l.check("orders:alice", &limit).await.unwrap().allowed);
    assert!(
        l.check_named("orders", "alice", &limit, 1)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        l.check_named("api", "admin:alice", &limit, 1)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        l.check_named("api:admin", "alice", &limit, 1)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        l.check_named("shop::orders", ":list:bob", &limit, 1)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        l.check_named("shop::orders::list", "bob", &limit, 1)
            .await
            .unwrap()
            .allowed
    );
    // And each of them is its own bucket, now empty.
    assert!(!l.check("orders:alice", &limit).await.unwrap().allowed);
    assert!(
        !l.check_named("api:admin", "alice", &limit, 1)
            .await
            .unwrap()
            .allowed
    );
}

/// The window algorithms, each on a day-long window: a test never straddles a window
/// boundary unless it runs at midnight UTC (the windows are aligned on the server's clock).
const WINDOWS: [Algorithm; 3] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

async fn every_window_admits_its_limit_then_refuses(h: Harness) {
    for algorithm in WINDOWS {
        let limit = Limit::per_day(5).algorithm(algorithm);
        let key = algorithm.as_str();
        for expected_remaining in (0..5).rev() {
            let d = h.check(key, &limit, 1).await.d;
            assert!(d.allowed, "{algorithm}");
            assert_eq!(d.remaining, expected_remaining, "{algorithm}");
            assert_eq!(d.retry_after, Duration::ZERO, "{algorithm}");
            // A sliding window's key lives until the end of the next window.
            assert!(
                d.reset_after <= Duration::from_secs(2 * 86_400),
                "{algorithm}"
            );
        }
        let refused = h.check(key, &limit, 1).await.d;
        assert!(!refused.allowed, "{algorithm}: the sixth call in a day");
        assert_eq!(refused.remaining, 0, "{algorithm}");
        assert_eq!(refused.limit, limit, "{algorithm}");
        // A sliding window may wait into the next window, while the previous one's weight
        // decays: up to two periods.
        assert!(
            refused.retry_after > Duration::ZERO
                && refused.retry_after <= Duration::from_secs(2 * 86_400),
            "{algorithm}: {:?}",
            refused.retry_after
        );
        if algorithm == Algorithm::SlidingLog {
            // The oldest of the five leaves a day after it came.
            h.assert_duration(
                refused.retry_after,
                Duration::from_secs(86_400),
                SLACK,
                "the sliding log's retry_after",
            );
        }
        // A refusal takes nothing: a cost that fits nowhere is still refused, not an error.
        let again = h.check(key, &limit, 5).await.d;
        assert!(!again.allowed, "{algorithm}");
    }
}

async fn every_algorithm_admits_after_exactly_retry_after(h: Harness) {
    let limits = [
        Limit::per(2, Duration::from_millis(300)),
        Limit::per(2, Duration::from_millis(300)).refill(Refill::Interval),
        Limit::per(3, Duration::from_millis(300))
            .burst(2)
            .initial(1),
        Limit::per(2, Duration::from_millis(300)).algorithm(Algorithm::FixedWindow),
        Limit::per(2, Duration::from_millis(300)).algorithm(Algorithm::SlidingWindow),
        Limit::per(2, Duration::from_millis(300)).algorithm(Algorithm::SlidingLog),
    ];
    for (i, limit) in limits.iter().enumerate() {
        let key = format!("k{i}");
        // Take until refused: a window may end between two calls on a real server.
        let mut refused = None;
        for _ in 0..20 {
            let d = h.check(&key, limit, 1).await.d;
            if !d.allowed {
                refused = Some(d);
                break;
            }
            if h.is_memory() {
                h.advance(Duration::from_millis(1)).await;
            }
        }
        let refused = refused.unwrap_or_else(|| panic!("{limit}: never refused"));
        let wait = refused.retry_after;
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(600),
            "{limit}: retry_after {wait:?}"
        );
        if h.is_memory() {
            h.advance(wait - Duration::from_micros(1)).await;
            assert!(
                !h.check(&key, limit, 1).await.d.allowed,
                "{limit}: a microsecond early"
            );
            h.advance(Duration::from_micros(1)).await;
        } else {
            h.advance(wait).await;
        }
        assert!(
            h.check(&key, limit, 1).await.d.allowed,
            "{limit}: waited exactly retry_after {wait:?}"
        );
    }
}

async fn interval_refill_returns_every_token_at_once(h: Harness) {
    let interval = Limit::per(4, Duration::from_millis(400)).refill(Refill::Interval);
    let smooth = Limit::per(4, Duration::from_millis(400));
    for (key, limit) in [("interval", interval), ("smooth", smooth)] {
        let mut refused = None;
        for _ in 0..20 {
            let d = h.check(key, &limit, 1).await.d;
            if !d.allowed {
                refused = Some(d);
                break;
            }
        }
        let wait = refused.expect("refused once empty").retry_after;
        h.advance(wait).await;
        let d = h.check(key, &limit, 1).await.d;
        assert!(d.allowed, "{limit}");
        if key == "interval" {
            assert_eq!(d.remaining, 3, "all four tokens came back at once");
        } else if h.is_memory() {
            assert_eq!(d.remaining, 0, "one token came back");
        }
    }
}

async fn an_initial_fill_starts_below_the_burst(h: Harness) {
    let limit = Limit::per_minute(60).burst(10).initial(2);
    for expected_remaining in [1, 0] {
        let d = h.check("warm", &limit, 1).await.d;
        assert!(d.allowed);
        assert_eq!(d.remaining, expected_remaining);
    }
    let refused = h.check("warm", &limit, 1).await.d;
    assert!(!refused.allowed, "a new bucket held 2 of its 10 tokens");
    h.assert_duration(
        refused.retry_after,
        Duration::from_secs(1),
        SLACK,
        "one token a second",
    );
    let empty = Limit::per_second(10).initial(0);
    let first = h.check("cold", &empty, 1).await.d;
    assert!(!first.allowed, "a bucket that starts empty");
    h.assert_duration(
        first.retry_after,
        Duration::from_millis(100),
        SLACK,
        "the first token",
    );
}

async fn several_limits_take_all_or_nothing(h: Harness) {
    let l = &h.limiter;
    let tight = Limit::per_minute(2);
    let loose = Limit::per_minute(10);
    for expected in [(1, 9), (0, 8)] {
        let d = l
            .check_all(&[("ip", &tight, 1), ("user", &loose, 1)])
            .await
            .unwrap();
        assert!(d.allowed);
        let parts = d.parts();
        assert_eq!((parts[0].remaining, parts[1].remaining), expected);
        assert_eq!(d.remaining, expected.0, "the fewest left");
        assert_eq!(d.tightest(), 0);
    }
    // The tight limit refuses: the loose one admits, but takes nothing, however often.
    for _ in 0..5 {
        let d = l
            .check_all(&[("ip", &tight, 1), ("user", &loose, 1)])
            .await
            .unwrap();
        assert!(!d.allowed);
        let parts = d.parts();
        assert!(!parts[0].allowed && parts[1].allowed);
        assert_eq!(
            parts[1].remaining, 8,
            "nothing taken from the limit that admitted"
        );
        // It answers as it stands: two tokens short of full, 12 s (not the 18 s it would
        // have been after taking this call).
        h.assert_duration(
            parts[1].reset_after,
            Duration::from_secs(12),
            SLACK,
            "reset",
        );
        assert_eq!(d.tightest(), 0);
        assert_eq!(d.limit, tight, "the refusing limit's fields");
        assert_eq!(d.retry_after, parts[0].retry_after);
        h.assert_duration(d.retry_after, Duration::from_secs(30), SLACK, "retry");
    }
    assert_eq!(l.check("user", &loose).await.unwrap().remaining, 7);
    // The longest wait of the refusing limits decides; every algorithm decides together.
    let window = Limit::per_minute(1).algorithm(Algorithm::FixedWindow);
    let log = Limit::per_hour(1).algorithm(Algorithm::SlidingLog);
    let d = l
        .check_all(&[("w", &window, 1), ("g", &log, 1), ("b", &loose, 1)])
        .await
        .unwrap();
    assert!(d.allowed && d.parts().iter().all(|p| p.allowed));
    let d = l
        .check_all(&[("w", &window, 1), ("g", &log, 1), ("b", &loose, 1)])
        .await
        .unwrap();
    assert!(!d.allowed);
    assert_eq!(d.tightest(), 1, "the hour's log waits longest");
    assert!(d.retry_after > Duration::from_secs(3000));
    assert_eq!(d.parts()[2].remaining, 9, "the bucket kept its token");
    h.assert_duration(
        d.parts()[2].reset_after,
        Duration::from_secs(6),
        SLACK,
        "reset",
    );
    assert_eq!(l.check("b", &loose).await.unwrap().remaining, 8);
}

async fn several_limits_reject_misuse(h: Harness) {
    let l = &h.limiter;
    let limit = Limit::per_minute(5);
    assert!(matches!(l.check_all(&[]).await, Err(Error::NoLimits)));
    let err = l
        .check_all(&[("k", &limit, 1), ("k", &limit, 1)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateBucket(_)), "{err}");
    let err = l
        .check_all(&[("a", &limit, 1), ("b", &limit, 6)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CostExceedsBurst { .. }), "{err}");
    // The same key under two names is two buckets.
    let d = l
        .check_all_named(&[("per_ip", "k", &limit, 1), ("per_day", "k", &limit, 1)])
        .await
        .unwrap();
    assert!(d.allowed);
    // Nothing above took a token from `a`, `b` or `k`.
    assert_eq!(l.check("a", &limit).await.unwrap().remaining, 4);
    assert_eq!(l.check("k", &limit).await.unwrap().remaining, 4);
}

async fn a_shadow_limit_decides_and_counts_but_never_refuses(h: Harness) {
    let trial = Limit::per_minute(1).burst(2).shadow();
    for _ in 0..2 {
        let d = h.check("k", &trial, 1).await.d;
        assert!(d.allowed && !d.shadowed);
    }
    // Over the limit: let through, said so, nothing taken.
    for _ in 0..3 {
        let d = h.check("k", &trial, 1).await.d;
        assert!(d.allowed, "a shadow limit never refuses");
        assert!(d.shadowed);
        assert_eq!(d.remaining, 0);
        h.assert_duration(d.retry_after, Duration::from_secs(60), SLACK, "retry");
    }
    // The same limit enforced sees the same bucket: the shadow counted the calls it admitted.
    let enforced = Limit::per_minute(1).burst(2);
    assert!(!h.check("k", &enforced, 1).await.d.allowed);
}

async fn several_limits_with_a_shadow_one_refuse_only_by_the_enforced(h: Harness) {
    let enforced = Limit::per_minute(10);
    let trial = Limit::per_minute(1).burst(1).shadow();
    let call = [("enforced", &enforced, 1), ("trial", &trial, 1)];
    let first = h.limiter.check_all(&call).await.unwrap();
    assert!(first.allowed && !first.shadowed);
    // The trial limit would refuse: the call goes, and the enforced limit takes its token.
    let second = h.limiter.check_all(&call).await.unwrap();
    assert!(second.allowed && second.shadowed, "{second:?}");
    assert_eq!(second.parts()[0].remaining, 8);
    assert!(second.parts()[1].shadowed);
    // The call is described by the enforced limit (Spring's headers, `remaining`): a client
    // must not slow down for a limit nobody enforces.
    assert_eq!((second.tightest(), second.remaining), (0, 8));
    // An enforced refusal still refuses, and a shadow limit takes nothing from a refused call.
    let spent = Limit::per_minute(1).burst(1);
    assert!(h.check("spent", &spent, 1).await.d.allowed);
    let fresh = Limit::per_minute(1).burst(1).shadow();
    let refused = h
        .limiter
        .check_all(&[("spent", &spent, 1), ("fresh", &fresh, 1)])
        .await
        .unwrap();
    assert!(!refused.allowed);
    assert!(
        !refused.shadowed,
        "refused by an enforced limit: not let through"
    );
    let d = h.check("fresh", &fresh, 1).await.d;
    assert!(
        !d.shadowed,
        "the refused call took nothing from the shadow limit"
    );
}

async fn peek_answers_as_check_would_and_takes_nothing(h: Harness) {
    let limits = [
        Limit::per_minute(3),
        Limit::per_minute(3).refill(Refill::Interval),
        Limit::per_minute(3).algorithm(Algorithm::FixedWindow),
        Limit::per_minute(3).algorithm(Algorithm::SlidingWindow),
        Limit::per_minute(3).algorithm(Algorithm::SlidingLog),
    ];
    for (i, limit) in limits.iter().enumerate() {
        let key = format!("peek{i}");
        for call in 0..5 {
            let seen = h.limiter.peek(&key, limit).await.unwrap();
            let again = h.limiter.peek(&key, limit).await.unwrap();
            assert_eq!(
                (seen.allowed, seen.remaining),
                (again.allowed, again.remaining),
                "{limit}, call {call}: a peek takes nothing"
            );
            let d = h.check(&key, limit, 1).await.d;
            assert_eq!(
                seen.allowed, d.allowed,
                "{limit}, call {call}: the peek answered as the check did"
            );
            // The peek says what the bucket holds; the check what it left.
            assert_eq!(
                seen.remaining,
                d.remaining + u64::from(d.allowed),
                "{limit}, call {call}: the peek's remaining is the tokens held now"
            );
            h.assert_duration(d.retry_after, seen.retry_after, SLACK, "retry");
            // Full again when the bucket as it stands is (not after one more call): never
            // later than after the check that took one more.
            assert!(
                seen.reset_after <= d.reset_after + SLACK,
                "{limit}, call {call}: {seen:?} against {d:?}"
            );
            if call == 0 && !limit.algorithm_kind().is_window() {
                assert_eq!(seen.reset_after, Duration::ZERO, "{limit}: a full bucket");
            }
            assert_eq!(seen.allowed, call < 3, "{limit}, call {call}");
        }
        // Named buckets too, and only theirs.
        let named = h.limiter.peek_named("n", &key, limit).await.unwrap();
        assert!(named.allowed && named.remaining == 3, "{limit}: {named:?}");
    }
}

async fn peek_remaining_is_exactly_the_calls_admitted(h: Harness) {
    // Per hour: no token comes back, and no window ends, while the test runs on Redis.
    let limits = [
        Limit::per_hour(4),
        Limit::per_hour(1).burst(4),
        Limit::per_hour(4).refill(Refill::Interval),
        Limit::per_hour(4).algorithm(Algorithm::FixedWindow),
        Limit::per_hour(4).algorithm(Algorithm::SlidingWindow),
        Limit::per_hour(4).algorithm(Algorithm::SlidingLog),
    ];
    for (i, limit) in limits.iter().enumerate() {
        for taken in 0..=4 {
            let key = format!("left{i}-{taken}");
            for _ in 0..taken {
                assert!(h.check(&key, limit, 1).await.d.allowed, "{limit}");
            }
            let seen = h.limiter.peek(&key, limit).await.unwrap();
            assert_eq!(
                seen.remaining,
                4 - taken,
                "{limit}, {taken} taken: {seen:?}"
            );
            assert_eq!(seen.allowed, taken < 4, "{limit}, {taken} taken");
            // The peek took nothing: exactly `remaining` calls pass, and the next is refused.
            for n in 0..seen.remaining {
                let d = h.check(&key, limit, 1).await.d;
                assert!(
                    d.allowed,
                    "{limit}, {taken} taken: call {n} of {}",
                    seen.remaining
                );
            }
            let over = h.check(&key, limit, 1).await.d;
            assert!(!over.allowed, "{limit}, {taken} taken: one past remaining");
            let empty = h.limiter.peek(&key, limit).await.unwrap();
            assert_eq!((empty.allowed, empty.remaining), (false, 0), "{limit}");
        }
    }
    // A leaky bucket's remaining counts the calls it would admit (to wait their turn).
    let leaky = Limit::per_minute(1)
        .burst(3)
        .algorithm(Algorithm::LeakyBucket);
    // One call leaves now and three wait: four are admitted.
    assert_eq!(h.limiter.peek("leaky", &leaky).await.unwrap().remaining, 4);
    assert!(h.check("leaky", &leaky, 1).await.d.allowed);
    assert_eq!(h.limiter.peek("leaky", &leaky).await.unwrap().remaining, 3);
}

async fn peek_n_answers_for_a_call_of_that_cost_and_takes_nothing(h: Harness) {
    // Per hour: no token comes back while the test runs on Redis, except the one awaited.
    let limits = [
        Limit::per_hour(1).burst(5),
        Limit::per_hour(5).algorithm(Algorithm::FixedWindow),
        Limit::per_hour(5).algorithm(Algorithm::SlidingLog),
    ];
    for (i, limit) in limits.iter().enumerate() {
        let key = format!("peek_n{i}");
        assert!(h.check(&key, limit, 3).await.d.allowed, "{limit}");
        // Two tokens held: a call of 2 would pass, one of 3 would not.
        let two = h.limiter.peek_n(&key, limit, 2).await.unwrap();
        assert_eq!((two.allowed, two.remaining), (true, 2), "{limit}: {two:?}");
        let three = h.limiter.peek_n(&key, limit, 3).await.unwrap();
        assert_eq!(
            (three.allowed, three.remaining),
            (false, 2),
            "{limit}: {three:?}"
        );
        assert!(three.retry_after > Duration::ZERO, "{limit}: {three:?}");
        // As the check of 3 answers, which takes nothing either (refused).
        let refused = h.check(&key, limit, 3).await.d;
        assert!(!refused.allowed, "{limit}");
        h.assert_duration(refused.retry_after, three.retry_after, SLACK, "retry");
        // The peeks took nothing: the call of 2 passes, and then the bucket is empty.
        assert!(h.check(&key, limit, 2).await.d.allowed, "{limit}");
        let empty = h.limiter.peek_n(&key, limit, 1).await.unwrap();
        assert_eq!((empty.allowed, empty.remaining), (false, 0), "{limit}");
    }
    // A cost the bucket can never hold is an error, as for `check_n`.
    let limit = Limit::per_second(5);
    let err = h.limiter.peek_n("k", &limit, 6).await.unwrap_err();
    assert!(
        matches!(err, Error::CostExceedsBurst { cost: 6, .. }),
        "{err}"
    );
    let err = h.limiter.peek_n("k", &limit, 0).await.unwrap_err();
    assert!(matches!(err, Error::ZeroCost), "{err}");
}

support::on_both_stores!(
    full_bucket_admits_exactly_burst,
    exact_values_with_a_fractional_interval,
    cost_takes_that_many_tokens,
    waiting_exactly_retry_after_is_admitted,
    refill_follows_the_rate_for_every_unit,
    keys_and_prefixes_are_independent,
    impossible_costs_are_errors,
    a_raised_quota_keeps_the_tokens_taken,
    a_lowered_rate_keeps_the_tokens_taken,
    a_lowered_burst_keeps_its_retry_after,
    a_new_fine_unit_reads_the_bucket_no_fuller,
    named_and_unnamed_buckets_never_meet,
    every_window_admits_its_limit_then_refuses,
    every_algorithm_admits_after_exactly_retry_after,
    interval_refill_returns_every_token_at_once,
    an_initial_fill_starts_below_the_burst,
    several_limits_take_all_or_nothing,
    several_limits_reject_misuse,
    a_shadow_limit_decides_and_counts_but_never_refuses,
    several_limits_with_a_shadow_one_refuse_only_by_the_enforced,
    peek_answers_as_check_would_and_takes_nothing,
    peek_remaining_is_exactly_the_calls_admitted,
    peek_n_answers_for_a_call_of_that_cost_and_takes_nothing,
);
