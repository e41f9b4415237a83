//! Usage budgets: a call takes an estimate of its cost (`check_estimate`,
//! `check_all_estimates`) and settles the actual cost when it ends (`Usage::settle`): a
//! smaller actual gives the difference back, a larger one takes it at once, into debt up to
//! the limit's bound. Each case runs on the memory store (a manual clock) and on
//! redis-servers the test starts (functions, `EVALSHA`, the module); then what only Redis
//! has (other instances, their deny caches, an outage), and the errors.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use redis_ratelimit::{
    Algorithm, Error, FailurePolicy, Limit, RateLimiter, Refill, Source, store::Store,
};
use support::Harness;
use testkit::RedisServer;
use testkit::outage::redis_killed_under;

/// A hundred tokens, one back every 36 s: none comes back while a case runs on Redis.
const HUNDRED: Limit = Limit::per_hour(100);

async fn remaining(h: &Harness, key: &str, limit: &Limit) -> u64 {
    h.limiter.peek(key, limit).await.unwrap().remaining
}

async fn settle(h: &Harness, key: &str, limit: &Limit, estimate: u32, actual: u32) -> (u64, u64) {
    let usage = h
        .limiter
        .check_estimate(key, limit, estimate)
        .await
        .unwrap();
    assert!(usage.decision().allowed, "{key}: the estimate was refused");
    assert_eq!(usage.decision().source, Source::Store);
    let settled = usage.settle(actual).await.unwrap();
    assert_eq!(settled.each.len(), 1);
    settled.each[0]
}

async fn settles_below_equal_to_and_above_the_estimate(h: Harness) {
    // The second: an initial fill (full), a bucket the store holds from its first call.
    for (i, limit) in [HUNDRED, HUNDRED.initial(100)].into_iter().enumerate() {
        let below = format!("below-{i}");
        assert_eq!(settle(&h, &below, &limit, 30, 10).await, (0, 20));
        assert_eq!(remaining(&h, &below, &limit).await, 90, "{limit}");
        // The tokens are there to take: ninety, not ninety-one.
        assert!(h.check(&below, &limit, 90).await.d.allowed, "{limit}");
        assert!(!h.check(&below, &limit, 1).await.d.allowed, "{limit}");

        let equal = format!("equal-{i}");
        assert_eq!(settle(&h, &equal, &limit, 30, 30).await, (0, 0));
        assert_eq!(remaining(&h, &equal, &limit).await, 70, "{limit}");

        let above = format!("above-{i}");
        assert_eq!(settle(&h, &above, &limit, 10, 25).await, (15, 0));
        assert_eq!(remaining(&h, &above, &limit).await, 75, "{limit}");

        // Nothing at all: everything back, the bucket full again.
        let none = format!("none-{i}");
        assert_eq!(settle(&h, &none, &limit, 40, 0).await, (0, 40));
        assert_eq!(remaining(&h, &none, &limit).await, 100, "{limit}");
    }
}

async fn a_window_settles_in_the_window_it_took_from(h: Harness) {
    let quota = Limit::per_month(100);
    assert_eq!(settle(&h, "month", &quota, 40, 10).await, (0, 30));
    assert_eq!(remaining(&h, "month", &quota).await, 90);
    assert_eq!(settle(&h, "month", &quota, 10, 30).await, (20, 0));
    assert_eq!(remaining(&h, "month", &quota).await, 60);
    // Into debt up to its bound: 60 left, 20 more than that owed at most.
    let owing = quota.max_debt(20);
    assert_eq!(settle(&h, "month", &owing, 60, 100).await, (20, 0));
    let refused = h.limiter.check("month", &owing).await.unwrap();
    assert!(!refused.allowed);
    // Refused until the month ends, whatever the debt: a window's debt ends with it.
    assert_eq!(refused.retry_after, refused.reset_after);
    assert!(refused.retry_after > Duration::ZERO);
}

async fn a_sliding_log_settles_its_entries(h: Harness) {
    let log = Limit::per_hour(10).algorithm(Algorithm::SlidingLog);
    // Given back: entries of the take's instant go.
    assert_eq!(settle(&h, "log", &log, 5, 2).await, (0, 3));
    assert_eq!(remaining(&h, "log", &log).await, 8);
    // Taken: entries added now.
    assert_eq!(settle(&h, "log", &log, 2, 5).await, (3, 0));
    assert_eq!(remaining(&h, "log", &log).await, 3);
    // Into debt up to its bound: 3 held after the estimate of 3... none left, then 4 more.
    let owing = log.max_debt(4);
    assert_eq!(settle(&h, "log", &owing, 3, 20).await, (4, 0));
    let refused = h.check("log", &owing, 1).await.d;
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    // The call's token needs five of the entries gone: the hour's.
    assert!(
        refused.retry_after > Duration::from_secs(3_500),
        "{refused:?}"
    );
}

async fn the_debt_stops_at_its_bound_and_retry_after_counts_it(h: Harness) {
    // Ten tokens an hour, one back every 6 minutes, owing at most four.
    let limit = Limit::per_hour(10).max_debt(4);
    assert_eq!(settle(&h, "k", &limit, 10, 100).await, (4, 0));
    let refused = h.check("k", &limit, 1).await.d;
    assert!(!refused.allowed);
    // The debt's four tokens and the call's own: five refills away.
    h.assert_duration(
        refused.retry_after,
        Duration::from_secs(5 * 360),
        Duration::from_secs(5),
        "retry_after after an overdraft",
    );
    // A refused estimate settles nothing, whatever it says.
    let usage = h.limiter.check_estimate("k", &limit, 1).await.unwrap();
    assert!(!usage.decision().allowed);
    let settled = usage.settle(50).await.unwrap();
    assert!(settled.each.is_empty());
    assert_eq!(settled.taken(), 0);

    // No debt allowed: what the bucket does not hold is not taken.
    let strict = Limit::per_hour(10).max_debt(0);
    assert_eq!(settle(&h, "strict", &strict, 6, 20).await, (4, 0));
    assert_eq!(remaining(&h, "strict", &strict).await, 0);
    // By default, a burst's worth.
    let default = Limit::per_hour(10);
    assert_eq!(settle(&h, "default", &default, 10, 50).await, (10, 0));
}

/// A give-back into a bucket that still owes after it moves the level all the same (issue 44:
/// `FCALL` and `EVALSHA` gave nothing back while the bucket owed beyond empty), by a
/// settlement and by a refund.
async fn a_give_back_into_debt_moves_the_level(h: Harness) {
    // The wait of one token while `owed` are owed: one back every 36 s.
    let wait = |owed: u64| Duration::from_secs(36 * (owed + 1));
    let assert_owes = |d: redis_ratelimit::Decision, owed: u64| {
        assert!(!d.allowed, "{owed} owed: {d:?}");
        h.assert_duration(
            d.retry_after,
            wait(owed),
            Duration::from_secs(5),
            &format!("retry_after with {owed} owed"),
        );
    };
    // A takes 60 and B 40 of the hundred; A's call used 110: 50 owed.
    let a = h
        .limiter
        .check_estimate("debt", &HUNDRED, 60)
        .await
        .unwrap();
    let b = h
        .limiter
        .check_estimate("debt", &HUNDRED, 40)
        .await
        .unwrap();
    assert!(a.decision().allowed && b.decision().allowed);
    assert_eq!(a.settle(110).await.unwrap().each, vec![(50, 0)]);
    assert_owes(h.check("debt", &HUNDRED, 1).await.d, 50);
    // B used nothing: its 40 come back into the debt, 10 still owed.
    assert_eq!(b.settle(0).await.unwrap().each, vec![(0, 40)]);
    assert_owes(h.check("debt", &HUNDRED, 1).await.d, 10);
    // A refund into the debt: 5 back, 5 owed; then 8 more, 3 to take.
    h.limiter.refund("debt", &HUNDRED, 5).await.unwrap();
    assert_owes(h.check("debt", &HUNDRED, 1).await.d, 5);
    h.limiter.refund("debt", &HUNDRED, 8).await.unwrap();
    assert_eq!(remaining(&h, "debt", &HUNDRED).await, 3);
}

async fn stacked_limits_settle_together(h: Harness) {
    let minute = Limit::per_hour(1_000).max_debt(100);
    let month = Limit::per_month(5_000);
    let usage = h
        .limiter
        .check_all_estimates(&[
            ("llm::rate", "key:a", &minute, 400),
            ("llm::quota", "key:a", &month, 400),
        ])
        .await
        .unwrap();
    assert!(usage.decision().allowed);
    assert_eq!(usage.decision().parts().len(), 2);
    let settled = usage.settle(650).await.unwrap();
    assert_eq!(settled.each, vec![(250, 0), (250, 0)]);
    let peek = |name, limit| h.limiter.peek_named(name, "key:a", limit);
    assert_eq!(peek("llm::rate", &minute).await.unwrap().remaining, 350);
    assert_eq!(peek("llm::quota", &month).await.unwrap().remaining, 4_350);

    // Each its own actual, and a debt bound reached on one of them only.
    let usage = h
        .limiter
        .check_all_estimates(&[
            ("llm::rate", "key:a", &minute, 300),
            ("llm::quota", "key:a", &month, 300),
        ])
        .await
        .unwrap();
    let settled = usage.settle_each(&[600, 100]).await.unwrap();
    // The rate held 50 after the estimate, and may owe 100: 150 of the 300 more.
    assert_eq!(settled.each, vec![(150, 0), (0, 200)]);
    assert_eq!(peek("llm::quota", &month).await.unwrap().remaining, 4_250);
    assert_eq!(peek("llm::rate", &minute).await.unwrap().remaining, 0);
    // One cost per limit, or an error (and the estimate stays).
    let usage = h
        .limiter
        .check_all_estimates(&[
            ("llm::quota", "key:b", &month, 10),
            ("llm::other", "key:b", &month, 10),
        ])
        .await
        .unwrap();
    assert!(matches!(
        usage.settle_each(&[1]).await,
        Err(Error::SettleCount {
            limits: 2,
            given: 1
        })
    ));
}

async fn a_dropped_or_panicking_call_keeps_its_estimate(h: Harness) {
    // Dropped: the estimate stays taken, nothing given back.
    let usage = h
        .limiter
        .check_estimate("drop", &HUNDRED, 30)
        .await
        .unwrap();
    drop(usage);
    assert_eq!(remaining(&h, "drop", &HUNDRED).await, 70);
    // A task that panics with it.
    let limiter = h.limiter.clone();
    let task = tokio::spawn(async move {
        let usage = limiter.check_estimate("panic", &HUNDRED, 30).await.unwrap();
        assert!(usage.decision().allowed);
        panic!("the handler failed after taking its estimate");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(remaining(&h, "panic", &HUNDRED).await, 70);
    // Cancelled between take and settle: a task aborted while it holds the usage.
    let limiter = h.limiter.clone();
    let (took, taken) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let usage = limiter
            .check_estimate("cancel", &HUNDRED, 30)
            .await
            .unwrap();
        took.send(()).unwrap();
        std::future::pending::<()>().await;
        usage.settle(0).await.unwrap();
    });
    taken.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(remaining(&h, "cancel", &HUNDRED).await, 70);
}

async fn limits_that_cannot_owe_are_refused_before_anything_is_taken(h: Harness) {
    let cannot = [
        Limit::per_hour(10).algorithm(Algorithm::SlidingWindow),
        Limit::per_hour(10).refill(Refill::Interval),
        Limit::concurrent(3),
    ];
    for limit in cannot {
        let e = h.limiter.check_estimate("x", &limit, 1).await.unwrap_err();
        assert!(matches!(e, Error::CannotSettle(l) if l == limit), "{e}");
    }
    // Nothing was taken: the key is as full as it was.
    let fresh = Limit::per_hour(10).algorithm(Algorithm::SlidingWindow);
    assert_eq!(remaining(&h, "x", &fresh).await, 10);
}

/// A charge: usage counted after the fact with no estimate taken, into the debt bound and
/// never past it, on every kind of limit that can owe.
async fn a_charge_takes_into_the_debt_bound_without_an_estimate(h: Harness) {
    let owing = HUNDRED.max_debt(20);
    assert_eq!(h.limiter.charge("tb", &owing, 30).await.unwrap(), 30);
    assert_eq!(remaining(&h, "tb", &owing).await, 70);
    // Seventy left and twenty of debt: ninety of the two hundred asked.
    assert_eq!(h.limiter.charge("tb", &owing, 200).await.unwrap(), 90);
    assert_eq!(h.limiter.charge("tb", &owing, 1).await.unwrap(), 0);
    let refused = h.check("tb", &owing, 1).await.d;
    assert!(!refused.allowed);
    // The debt's twenty tokens and the call's own: twenty-one refills of 36 s away.
    h.assert_duration(
        refused.retry_after,
        Duration::from_secs(21 * 36),
        Duration::from_secs(5),
        "retry_after after a charge into debt",
    );
    // The named bucket is its own, and what `check_named` takes from.
    assert_eq!(
        h.limiter
            .charge_named("n", "tb", &owing, 100)
            .await
            .unwrap(),
        100
    );
    let named = h.limiter.peek_named("n", "tb", &owing).await.unwrap();
    assert_eq!(named.remaining, 0);
    assert_eq!(remaining(&h, "other", &owing).await, 100);

    // A window: its current window, up to the limit and the bound.
    let quota = Limit::per_month(100).max_debt(10);
    assert_eq!(h.limiter.charge("fw", &quota, 105).await.unwrap(), 105);
    assert_eq!(h.limiter.charge("fw", &quota, 10).await.unwrap(), 5);
    assert!(!h.check("fw", &quota, 1).await.d.allowed);
    // A log.
    let log = Limit::per_hour(10)
        .algorithm(Algorithm::SlidingLog)
        .max_debt(2);
    assert_eq!(h.limiter.charge("sl", &log, 12).await.unwrap(), 12);
    assert_eq!(h.limiter.charge("sl", &log, 1).await.unwrap(), 0);
    assert!(!h.check("sl", &log, 1).await.d.allowed);
    // A leaky bucket holds one token (its burst is a queue of waiting calls): that one and
    // the debt's three.
    let leaky = Limit::per_hour(10)
        .algorithm(Algorithm::LeakyBucket)
        .burst(10)
        .max_debt(3);
    assert_eq!(h.limiter.charge("lb", &leaky, 20).await.unwrap(), 4);
    // The next call queues behind the debt: its turn is four leaks (of 6 minutes) away
    // (looked at, not called: a call would wait for it).
    let owed = h.limiter.peek("lb", &leaky).await.unwrap();
    h.assert_duration(
        owed.retry_after,
        Duration::from_secs(4 * 360),
        Duration::from_secs(5),
        "a leaky bucket's wait after a charge into debt",
    );

    // Nothing to charge takes nothing; a limit that cannot owe is said, nothing taken.
    assert_eq!(h.limiter.charge("zero", &owing, 0).await.unwrap(), 0);
    assert_eq!(remaining(&h, "zero", &owing).await, 100);
    let sliding = Limit::per_hour(10).algorithm(Algorithm::SlidingWindow);
    let e = h.limiter.charge("sw", &sliding, 5).await.unwrap_err();
    assert!(matches!(e, Error::CannotSettle(l) if l == sliding), "{e}");
    assert_eq!(remaining(&h, "sw", &sliding).await, 10);
}

support::on_both_stores!(
    a_charge_takes_into_the_debt_bound_without_an_estimate,
    settles_below_equal_to_and_above_the_estimate,
    a_window_settles_in_the_window_it_took_from,
    a_sliding_log_settles_its_entries,
    the_debt_stops_at_its_bound_and_retry_after_counts_it,
    a_give_back_into_debt_moves_the_level,
    stacked_limits_settle_together,
    a_dropped_or_panicking_call_keeps_its_estimate,
    limits_that_cannot_owe_are_refused_before_anything_is_taken,
);

/// On the memory store's clock: the wait after an overdraft is exact (a microsecond early is
/// refused), and a window that ended between the take and the settlement gets nothing back
/// (the tokens were the ended window's).
#[tokio::test]
async fn after_an_overdraft_retry_after_comes_true_and_an_ended_window_gets_nothing() {
    let h = Harness::memory().await;
    let clock = h.clock.clone().unwrap();
    let limit = Limit::per_second(10).max_debt(5);
    assert_eq!(settle(&h, "k", &limit, 10, 15).await, (5, 0));
    let refused = h.check("k", &limit, 2).await.d;
    assert_eq!(refused.retry_after, Duration::from_millis(700));
    clock.advance(Duration::from_micros(699_999));
    assert!(
        !h.check("k", &limit, 2).await.d.allowed,
        "a microsecond early"
    );
    clock.advance(Duration::from_micros(1));
    assert!(h.check("k", &limit, 2).await.d.allowed);

    let window = Limit::per_second(10).algorithm(Algorithm::FixedWindow);
    let usage = h.limiter.check_estimate("w", &window, 8).await.unwrap();
    clock.advance(Duration::from_secs(1));
    assert!(h.check("w", &window, 3).await.d.allowed);
    // Reported as given (the difference), but not in this window, which never had them.
    assert_eq!(usage.settle(0).await.unwrap().each, vec![(0, 8)]);
    assert_eq!(remaining(&h, "w", &window).await, 7);
}

/// On Redis, waiting the `retry_after` an overdraft leaves is enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_overdraft_on_redis_the_retry_after_comes_true() {
    let h = Harness::redis_module().await;
    let limit = Limit::per_second(10).max_debt(3);
    assert_eq!(settle(&h, "k", &limit, 10, 13).await, (3, 0));
    let refused = h.check("k", &limit, 1).await.d;
    assert!(!refused.allowed);
    assert!(
        refused.retry_after > Duration::from_millis(300),
        "{refused:?}"
    );
    tokio::time::sleep(refused.retry_after).await;
    assert!(h.check("k", &limit, 1).await.d.allowed);
}

/// A limiter on `server` with its deny cache, as a service runs one.
async fn instance(server: &RedisServer) -> RateLimiter {
    support::fleet_instance(server, FailurePolicy::Fallback).await
}

/// Two instances on one Redis: B sees A's estimate and A's settlement, and a settlement
/// that gives back makes B forget a refusal its deny cache remembered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_on_one_instance_is_seen_by_another() {
    let server = RedisServer::start();
    let a = instance(&server).await;
    let b = instance(&server).await;
    let limit = Limit::per_hour(10);
    let usage = a.check_estimate("k", &limit, 10).await.unwrap();
    assert!(usage.decision().allowed);
    // B is refused from Redis, then from its deny cache.
    assert!(!b.check("k", &limit).await.unwrap().allowed);
    let cached = b.check("k", &limit).await.unwrap();
    assert_eq!((cached.allowed, cached.source), (false, Source::DenyCache));
    // The usage settles from another task than the one that took it.
    let settled = tokio::spawn(async move { usage.settle(4).await.unwrap() })
        .await
        .unwrap();
    assert_eq!(settled.each, vec![(0, 6)]);
    support::until_deny_cache_forgets(&b, "A's settlement").await;
    assert_eq!(b.peek("k", &limit).await.unwrap().remaining, 6);
    // An overdraft by B, seen by A.
    let usage = b.check_estimate("k", &limit, 6).await.unwrap();
    assert_eq!(usage.settle(9).await.unwrap().each, vec![(3, 0)]);
    let refused = a.check("k", &limit).await.unwrap();
    assert!(!refused.allowed);
    // Three owed and the call's own token: four refills of 6 minutes, less the time since.
    assert!(
        refused.retry_after > Duration::from_secs(4 * 360 - 60)
            && refused.retry_after <= Duration::from_secs(4 * 360),
        "{refused:?}"
    );
}

/// Redis down: the estimate is the fallback's (this instance's share), and so is the
/// settlement; nothing reaches the store that failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_the_fallback_takes_and_settles() {
    let (limiter, _server) = redis_killed_under(instance).await;
    let limit = Limit::per_hour(10);
    let usage = limiter.check_estimate("k", &limit, 6).await.unwrap();
    assert_eq!(usage.decision().source, Source::Fallback);
    assert_eq!(usage.settle(2).await.unwrap().each, vec![(0, 4)]);
    let d = limiter.check_n("k", &limit, 8).await.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::Fallback), "{d:?}");
    assert!(!limiter.check("k", &limit).await.unwrap().allowed);
    // Over the estimate: into the share's debt.
    let usage = limiter.check_estimate("o", &limit, 10).await.unwrap();
    assert_eq!(usage.decision().source, Source::Fallback);
    let settled = usage.settle(12).await.unwrap();
    assert_eq!(settled.each, vec![(2, 0)]);
    // A charge too: the fallback's bucket takes it, into its debt.
    assert_eq!(limiter.charge("c", &limit, 8).await.unwrap(), 8);
    let d = limiter.check_n("c", &limit, 3).await.unwrap();
    assert_eq!((d.allowed, d.source), (false, Source::Fallback), "{d:?}");
}

/// A store of the user's own has no settlement: said before anything is taken.
#[tokio::test]
async fn a_custom_store_cannot_settle_and_says_so() {
    struct Counting(std::sync::atomic::AtomicU32);
    impl Store for Counting {
        async fn check(
            &self,
            _: &str,
            limit: &Limit,
            cost: u32,
        ) -> Result<redis_ratelimit::Decision, Error> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(redis_ratelimit::Decision::new(
                true,
                0,
                *limit,
                cost,
                Duration::ZERO,
                Duration::ZERO,
            ))
        }
        async fn reset(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
    }
    let limiter = RateLimiter::builder()
        .store(Counting(std::sync::atomic::AtomicU32::new(0)))
        .build()
        .await
        .unwrap();
    let e = limiter.check_estimate("k", &HUNDRED, 1).await.unwrap_err();
    assert!(matches!(e, Error::SettleUnsupported), "{e}");
    assert!(
        e.to_string().contains("custom Store has no settlement"),
        "{e}"
    );
}
