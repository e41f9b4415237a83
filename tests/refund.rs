//! `refund`: a call whose outcome should not count gives its tokens back, through the store,
//! never more than it took. Each case runs on the memory store (a manual clock) and on a
//! redis-server the test starts; then what only Redis has (other instances, their deny
//! caches), and the failure policy's fallback.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use redis_ratelimit::store::Store;
use redis_ratelimit::{
    Algorithm, Decision, Error, FailurePolicy, Limit, RateLimiter, Refill, Source,
};
use support::Harness;
use testkit::RedisServer;

/// Five tokens, one back every 12 minutes: no token comes back while a test runs on Redis.
const FIVE: Limit = Limit::per_hour(5);

async fn remaining(h: &Harness, key: &str, limit: &Limit) -> u64 {
    h.limiter.peek(key, limit).await.unwrap().remaining
}

async fn a_refund_gives_back_exactly_what_was_taken(h: Harness) {
    assert_eq!(h.check("k", &FIVE, 3).await.d.remaining, 2);
    h.limiter.refund("k", &FIVE, 3).await.unwrap();
    assert_eq!(remaining(&h, "k", &FIVE).await, 5);

    // Part of it: the rest stays taken.
    assert_eq!(h.check("part", &FIVE, 3).await.d.remaining, 2);
    h.limiter.refund("part", &FIVE, 1).await.unwrap();
    assert_eq!(remaining(&h, "part", &FIVE).await, 3);
    // And the tokens are really there to take: three, not four.
    assert!(h.check("part", &FIVE, 3).await.d.allowed);
    assert!(!h.check("part", &FIVE, 1).await.d.allowed);
}

async fn a_refund_never_fills_a_bucket_beyond_full(h: Harness) {
    // A full bucket stays full.
    h.limiter.refund("full", &FIVE, 3).await.unwrap();
    assert_eq!(remaining(&h, "full", &FIVE).await, 5);
    assert!(h.check("full", &FIVE, 5).await.d.allowed);
    assert!(!h.check("full", &FIVE, 1).await.d.allowed);

    // More than was taken: floored at full, not 5 + 2.
    assert!(h.check("more", &FIVE, 2).await.d.allowed);
    h.limiter.refund("more", &FIVE, 4).await.unwrap();
    assert_eq!(remaining(&h, "more", &FIVE).await, 5);
    assert!(h.check("more", &FIVE, 5).await.d.allowed);
    let refused = h.check("more", &FIVE, 1).await.d;
    assert!(!refused.allowed, "the bucket held more than its burst");

    // A bucket that was reset (as one whose key expired) has nothing to get back.
    assert!(h.check("reset", &FIVE, 4).await.d.allowed);
    h.limiter.reset("reset").await.unwrap();
    h.limiter.refund("reset", &FIVE, 4).await.unwrap();
    assert!(h.check("reset", &FIVE, 5).await.d.allowed);
    assert!(!h.check("reset", &FIVE, 1).await.d.allowed);
}

async fn every_bucket_algorithm_refunds(h: Harness) {
    let interval = Limit::per_hour(5).refill(Refill::Interval);
    assert!(h.check("interval", &interval, 3).await.d.allowed);
    assert_eq!(remaining(&h, "interval", &interval).await, 2);
    h.limiter.refund("interval", &interval, 2).await.unwrap();
    assert_eq!(remaining(&h, "interval", &interval).await, 4);
    h.limiter.refund("interval", &interval, 5).await.unwrap();
    assert_eq!(
        remaining(&h, "interval", &interval).await,
        5,
        "floored at full"
    );
    assert!(h.check("interval", &interval, 5).await.d.allowed);
    assert!(!h.check("interval", &interval, 1).await.d.allowed);

    // The leaky bucket: the first call leaves at once, the next would wait its turn (12
    // minutes); refunded, the turn is free again.
    let leaky = Limit::per_hour(5).algorithm(Algorithm::LeakyBucket);
    assert!(h.check("leaky", &leaky, 1).await.d.allowed);
    let next = h.limiter.peek("leaky", &leaky).await.unwrap();
    assert!(next.retry_after > Duration::from_secs(600), "{next:?}");
    h.limiter.refund("leaky", &leaky, 1).await.unwrap();
    let next = h.limiter.peek("leaky", &leaky).await.unwrap();
    assert_eq!(next.retry_after, Duration::ZERO, "{next:?}");
}

async fn a_window_or_a_bad_cost_cannot_be_refunded(h: Harness) {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let limit = Limit::per_hour(5).algorithm(algorithm);
        assert!(h.check("w", &limit, 3).await.d.allowed);
        let e = h.limiter.refund("w", &limit, 3).await.unwrap_err();
        assert!(
            matches!(e, Error::RefundNeedsBucket(l) if l == limit),
            "{algorithm:?}: {e}"
        );
        assert!(e.to_string().contains("needs a bucket algorithm"), "{e}");
        let e = h
            .limiter
            .refund_named("n", "w", &limit, 3)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::RefundNeedsBucket(_)), "{e}");
        // Nothing was given back.
        assert_eq!(remaining(&h, "w", &limit).await, 2, "{algorithm:?}");
        h.limiter.reset("w").await.unwrap();
    }
    assert!(matches!(
        h.limiter.refund("k", &FIVE, 0).await,
        Err(Error::ZeroCost)
    ));
    assert!(matches!(
        h.limiter.refund("k", &FIVE, 6).await,
        Err(Error::CostExceedsBurst { cost: 6, .. })
    ));
}

async fn refund_named_gives_back_to_the_named_bucket(h: Harness) {
    let d = h
        .limiter
        .check_named("login", "user:1", &FIVE, 3)
        .await
        .unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 2));
    // The unnamed bucket of the same key is another: a refund there leaves this one.
    h.limiter.refund("user:1", &FIVE, 3).await.unwrap();
    let peek = |name| h.limiter.peek_named(name, "user:1", &FIVE);
    assert_eq!(peek("login").await.unwrap().remaining, 2);
    // So is another name's.
    h.limiter
        .refund_named("signup", "user:1", &FIVE, 3)
        .await
        .unwrap();
    assert_eq!(peek("login").await.unwrap().remaining, 2);
    h.limiter
        .refund_named("login", "user:1", &FIVE, 3)
        .await
        .unwrap();
    assert_eq!(peek("login").await.unwrap().remaining, 5);
}

support::on_both_stores!(
    a_refund_gives_back_exactly_what_was_taken,
    a_refund_never_fills_a_bucket_beyond_full,
    every_bucket_algorithm_refunds,
    a_window_or_a_bad_cost_cannot_be_refunded,
    refund_named_gives_back_to_the_named_bucket,
);

/// A limiter on `server` with its deny cache, as a service runs one.
async fn instance(server: &RedisServer) -> RateLimiter {
    support::fleet_instance(server, FailurePolicy::Deny).await
}

/// A refund through instance A reaches instance B: B's deny cache, which remembered a
/// refusal of the bucket, forgets it when A tells the fleet, and B admits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_on_one_instance_lifts_another_s_cached_refusal() {
    let server = RedisServer::start();
    let a = instance(&server).await;
    let b = instance(&server).await;
    // One token an hour: the cached refusal would stand for about an hour.
    let limit = Limit::per_hour(1).burst(2);
    for _ in 0..2 {
        assert!(b.check("k", &limit).await.unwrap().allowed);
    }
    let refused = b.check("k", &limit).await.unwrap();
    assert_eq!((refused.allowed, refused.source), (false, Source::Store));
    let cached = b.check("k", &limit).await.unwrap();
    assert_eq!((cached.allowed, cached.source), (false, Source::DenyCache));
    assert_eq!(b.deny_cache_len(), 1);

    a.refund("k", &limit, 1).await.unwrap();
    // B hears of it by pub/sub: wait for that event, within a bound.
    support::until_deny_cache_forgets(&b, "A's refund").await;
    let d = b.check("k", &limit).await.unwrap();
    assert_eq!(
        (d.allowed, d.remaining, d.source),
        (true, 0, Source::Store),
        "B admits the refunded token from Redis"
    );
    assert!(!b.check("k", &limit).await.unwrap().allowed);
}

/// The refund awaits Redis: once it returns, the tokens are there for every instance,
/// with nothing to wait for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_in_redis_when_it_returns() {
    let server = RedisServer::start();
    let a = instance(&server).await;
    let b = instance(&server).await;
    assert!(a.check_n("k", &FIVE, 5).await.unwrap().allowed);
    a.refund("k", &FIVE, 2).await.unwrap();
    assert_eq!(b.peek("k", &FIVE).await.unwrap().remaining, 2);
}

/// A store of the user's own, healthy or down.
struct Custom {
    down: bool,
}

impl Store for Custom {
    async fn check(&self, _: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        if self.down {
            return Err(Error::Timeout(Duration::from_millis(1)));
        }
        Ok(Decision::new(
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

#[tokio::test]
async fn a_custom_store_cannot_refund_and_says_so() {
    let limiter = RateLimiter::builder()
        .store(Custom { down: false })
        .build()
        .await
        .unwrap();
    assert!(limiter.check("k", &FIVE).await.unwrap().allowed);
    let e = limiter.refund("k", &FIVE, 1).await.unwrap_err();
    assert!(matches!(e, Error::RefundUnsupported), "{e}");
    assert!(
        e.to_string().contains("custom Store has no give-back"),
        "{e}"
    );
}

/// While the store is down, calls take from the fallback, and a refund gives back there.
#[tokio::test]
async fn a_degraded_limiter_refunds_to_the_fallback() {
    let limiter = RateLimiter::builder()
        .store(Custom { down: true })
        .failure_policy(FailurePolicy::Fallback)
        .build()
        .await
        .unwrap();
    let d = limiter.check_n("k", &FIVE, 3).await.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::Fallback));
    assert!(limiter.is_degraded());
    limiter.refund("k", &FIVE, 3).await.unwrap();
    let d = limiter.check_n("k", &FIVE, 5).await.unwrap();
    assert_eq!(
        (d.allowed, d.source),
        (true, Source::Fallback),
        "the fallback's bucket got its 3 tokens back"
    );
    assert!(!limiter.check("k", &FIVE).await.unwrap().allowed);

    // A limit that fails open took nothing: its refund gives nothing, not even to the
    // fallback's bucket of the same key.
    let open = FIVE.on_failure(FailurePolicy::Allow);
    assert_eq!(
        limiter.check("o", &open).await.unwrap().source,
        Source::FailOpen
    );
    assert!(limiter.check_n("o", &FIVE, 3).await.unwrap().allowed);
    limiter.refund("o", &open, 3).await.unwrap();
    assert!(!limiter.check_n("o", &FIVE, 3).await.unwrap().allowed);
}
