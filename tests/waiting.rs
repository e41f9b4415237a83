//! Waiting instead of refusing (`acquire`, `Limit::wait`) and the leaky bucket, on both stores:
//! reservations are served in order at the rate and never early, a call that would wait too
//! long is refused at once and takes nothing, a dropped waiter gives its tokens back, several
//! limits wait for the latest of them, and the fallback paces while Redis is down.
//!
//! The memory store runs on paused Tokio time (its clock is Tokio's), so its waits take no
//! real time; Redis keeps its own clock, so those cases wait in real time. Every timing
//! assertion here is a lower bound ("never early"), which no slow machine can break; how
//! evenly the calls were spaced is printed (`--nocapture`), not asserted.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use redis_ratelimit::{
    Algorithm, Error, Limit, RateLimiter, Refill, Source, error::InvalidLimit, store::MemoryStore,
};
use testkit::RedisServer;
use testkit::wait::{eventually, eventually_ok};
// Tokio's: virtual under paused time, the real clock otherwise.
use tokio::time::Instant;

/// A limiter on one of the stores, and the server behind it.
struct Store {
    limiter: RateLimiter,
    server: Option<RedisServer>,
}

impl Store {
    /// On Tokio's clock: run it on paused time.
    async fn memory() -> Store {
        let store = MemoryStore::with_clock(support::TokioClock::new());
        let limiter = RateLimiter::builder()
            .memory_store(store)
            .build()
            .await
            .unwrap();
        Store {
            limiter,
            server: None,
        }
    }

    async fn redis() -> Store {
        let server = RedisServer::start();
        let limiter = support::redis_limiter(&server, "wait").await;
        Store {
            limiter,
            server: Some(server),
        }
    }

    /// Another instance on the same store (on Redis, a second limiter; in memory, the same).
    async fn other(&self) -> RateLimiter {
        match &self.server {
            Some(server) => support::redis_limiter(server, "wait").await,
            None => self.limiter.clone(),
        }
    }
}

/// The instants at which `calls` completed, sorted, relative to `t0`, and how many were
/// admitted.
async fn completions<F>(t0: Instant, calls: Vec<F>) -> (Vec<Duration>, usize)
where
    F: Future<Output = Result<redis_ratelimit::Decision, Error>>,
{
    let done = join_all(calls.into_iter().map(|call| async move {
        let d = call.await.unwrap();
        (d.allowed, t0.elapsed())
    }))
    .await;
    let admitted = done.iter().filter(|(ok, _)| *ok).count();
    let mut at: Vec<Duration> = done.iter().filter(|(ok, _)| *ok).map(|c| c.1).collect();
    at.sort();
    (at, admitted)
}

/// The k-th admitted call completed no earlier than `k * interval` after the start.
fn assert_never_early(at: &[Duration], interval: Duration, what: &str) {
    let gaps: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    println!("{what}: completed at {at:?}; gaps (ms) {gaps:?}");
    for (k, t) in at.iter().enumerate() {
        let due = interval * u32::try_from(k).unwrap();
        assert!(
            *t >= due,
            "{what}: call {k} went at {t:?}, before its turn at {due:?}"
        );
    }
}

async fn twenty_calls_from_two_instances_go_at_the_rate(s: Store) {
    // 10 a second, one at a time: 20 calls, half from each instance, all at once.
    let limit = Limit::per_second(10).burst(1);
    let other = s.other().await;
    let t0 = Instant::now();
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let l = if i % 2 == 0 { &s.limiter } else { &other };
            l.acquire("host", &limit, Duration::from_secs(5))
        })
        .collect();
    let (at, admitted) = completions(t0, calls).await;
    assert_eq!(
        admitted, 20,
        "every call waits for its turn, none is refused"
    );
    assert_never_early(&at, Duration::from_millis(100), "20 calls at 10/s");
    assert!(at[19] >= Duration::from_millis(1900));
}

async fn a_call_that_would_wait_too_long_is_refused_at_once_and_takes_nothing(s: Store) {
    // 1 a second, one at a time, waiting up to 1.5 s: the first goes at once, the second
    // waits 1 s, the third would wait 2 s and is refused.
    let limit = Limit::per_second(1).burst(1);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|_| s.limiter.acquire("k", &limit, Duration::from_millis(1500)))
        .collect();
    let decided = join_all(calls).await;
    let refused: Vec<_> = decided
        .iter()
        .map(|d| d.as_ref().unwrap())
        .filter(|d| !d.allowed)
        .collect();
    assert_eq!(refused.len(), 1, "{decided:?}");
    // It would be admitted once the queue is 1.5 s long again: within 0.5 s.
    assert!(refused[0].retry_after > Duration::ZERO);
    assert!(refused[0].retry_after <= Duration::from_millis(500));
    // It took nothing: 1 s after the first call, a call that does not wait finds one token
    // owed (the second call's), not two. Had the refused call taken its token, it would be
    // refused for another 1 s from here.
    let d = s.limiter.check("k", &limit).await.unwrap();
    assert!(!d.allowed);
    let elapsed = t0.elapsed();
    assert!(elapsed >= Duration::from_secs(1));
    assert!(
        d.retry_after <= Duration::from_secs(1),
        "{:?} after {elapsed:?}: the refused call took a token",
        d.retry_after
    );
}

async fn a_leaky_bucket_queues_its_burst_and_refuses_the_rest(s: Store) {
    // 10 a second, a queue of 3: of 6 calls at once, one goes now, three wait their turn
    // 100 ms apart, two find the queue full and are refused at once.
    let limit = Limit::per_second(10)
        .burst(3)
        .algorithm(Algorithm::LeakyBucket);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..6).map(|_| s.limiter.check("q", &limit)).collect();
    let (at, admitted) = completions(t0, calls).await;
    assert_eq!(admitted, 4);
    assert_never_early(&at, Duration::from_millis(100), "leaky bucket");
    // `check` waited: a decision the caller gets is never one still to wait.
    let d = s.limiter.check("q", &limit).await.unwrap();
    assert_eq!(d.retry_after, Duration::ZERO, "admitted after its wait");
}

async fn a_dropped_waiter_gives_its_tokens_back(s: Store) {
    // One a minute: the bucket's debt says how many tokens are owed, whatever the time the
    // test takes on a busy machine (a minute per token, against seconds of scheduling).
    let limit = Limit::per_minute(1).burst(1);
    assert!(s.limiter.check("k", &limit).await.unwrap().allowed);
    // The second call reserves the token due in a minute, then its caller gives up.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        s.limiter.acquire("k", &limit, Duration::from_secs(120)),
    )
    .await;
    assert!(gave_up.is_err(), "it was still waiting");
    // Its token comes back (on Redis by a task: wait for it): one token owed, due within a
    // minute of the first call, not two (due within two).
    let owed_one = Duration::from_secs(60);
    eventually_ok("the reservation given back", async || {
        match s.limiter.check("k", &limit).await.unwrap().retry_after {
            retry if retry <= owed_one => Ok(()),
            retry => Err(format!("{retry:?} owed")),
        }
    })
    .await;
}

async fn several_limits_wait_for_the_latest_and_stay_all_or_nothing(s: Store) {
    let fast = Limit::per_second(10).burst(1).wait(Duration::from_secs(1));
    let slow = Limit::per_second(5).burst(1).wait(Duration::from_secs(1));
    let both = [("fast", &fast, 1), ("slow", &slow, 1)];
    // Before the first call: the second's turn is counted from when the first was decided,
    // which is after this instant (a lower bound that holds however slow the machine).
    let t0 = Instant::now();
    assert!(s.limiter.check_all(&both).await.unwrap().allowed);
    // The second call is due 100 ms after the first under one limit and 200 ms under the
    // other: it waits for the later.
    let d = s.limiter.check_all(&both).await.unwrap();
    assert!(d.allowed);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert!(d.parts().iter().all(|p| p.retry_after.is_zero()));
    // A limit that cannot wait refuses the call: the others take nothing.
    let strict = Limit::per_minute(1).burst(1);
    assert!(s.limiter.check("strict", &strict).await.unwrap().allowed);
    let idle = Limit::per_second(1).burst(1).wait(Duration::from_secs(1));
    let d = s
        .limiter
        .check_all(&[("idle", &idle, 1), ("strict", &strict, 1)])
        .await
        .unwrap();
    assert!(!d.allowed);
    let idle_now = s.limiter.check("idle", &idle).await.unwrap();
    assert!(idle_now.allowed);
    assert_eq!(idle_now.retry_after, Duration::ZERO, "the bucket was full");
}

async fn limits_that_cannot_wait_say_so(s: Store) {
    for limit in [
        Limit::per_second(10).algorithm(Algorithm::FixedWindow),
        Limit::per_second(10).algorithm(Algorithm::SlidingWindow),
        Limit::per_second(10).algorithm(Algorithm::SlidingLog),
        Limit::per_second(10).refill(Refill::Interval),
    ] {
        let err = s
            .limiter
            .acquire("k", &limit, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidLimit(InvalidLimit::CannotWait { .. })),
            "{limit}: {err}"
        );
        assert!(err.to_string().contains("cannot wait"), "{err}");
    }
    let err = s
        .limiter
        .acquire("k", &Limit::per_second(1), Duration::from_secs(86_401))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidLimit(InvalidLimit::WaitTooLong { .. })),
        "{err}"
    );
}

async fn acquire_named_waits_in_the_named_bucket(s: Store) {
    // 10 a second, one at a time, under the name `crawler::fetch`.
    let limit = Limit::per_second(10).burst(1);
    let wait = Duration::from_secs(2);
    let t0 = Instant::now();
    let first = s
        .limiter
        .acquire_named("crawler::fetch", "host", &limit, 1, wait);
    assert!(first.await.unwrap().allowed);
    // The unnamed bucket of `acquire` is another: untouched.
    assert_eq!(s.limiter.peek("host", &limit).await.unwrap().remaining, 1);
    // The second call waits its turn in the named bucket, never early.
    let second = s
        .limiter
        .acquire_named("crawler::fetch", "host", &limit, 1, wait);
    let d = second.await.unwrap();
    assert!(d.allowed, "{d:?}");
    assert_never_early(
        &[Duration::ZERO, t0.elapsed()],
        Duration::from_millis(100),
        "named",
    );
    // Its reservation is the named bucket's: a call that does not wait finds it owed.
    let now = s.limiter.check_named("crawler::fetch", "host", &limit, 1);
    assert!(!now.await.unwrap().allowed);
    // A wait too long for the limit is refused as `acquire`'s is.
    let windowed = Limit::per_second(10).algorithm(Algorithm::FixedWindow);
    let err = s
        .limiter
        .acquire_named("n", "host", &windowed, 1, wait)
        .await;
    assert!(
        matches!(
            err,
            Err(Error::InvalidLimit(InvalidLimit::CannotWait { .. }))
        ),
        "{err:?}"
    );
}

support::on_both_stores!(
    crate::Store,
    #[tokio::test(start_paused = true)]:
    twenty_calls_from_two_instances_go_at_the_rate,
    acquire_named_waits_in_the_named_bucket,
    a_call_that_would_wait_too_long_is_refused_at_once_and_takes_nothing,
    a_leaky_bucket_queues_its_burst_and_refuses_the_rest,
    a_dropped_waiter_gives_its_tokens_back,
    several_limits_wait_for_the_latest_and_stay_all_or_nothing,
    limits_that_cannot_wait_say_so,
    a_shadow_limit_that_waits_never_delays,
    a_new_rate_keeps_the_reservations,
);

/// A jitter lengthens each wait by up to its bound, at random: no waiter goes before its turn
/// or later than its turn plus the jitter, and waiters are no longer released in lockstep.
#[tokio::test(start_paused = true)]
async fn jitter_spreads_waiters_and_never_makes_one_early() {
    let s = Store::memory().await;
    let jitter = Duration::from_millis(50);
    let limit = Limit::per_second(10).burst(1).jitter(jitter);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..20)
        .map(|_| s.limiter.acquire("host", &limit, Duration::from_secs(5)))
        .collect();
    let (at, admitted) = completions(t0, calls).await;
    assert_eq!(admitted, 20);
    assert_never_early(
        &at,
        Duration::from_millis(100),
        "20 calls at 10/s, jittered",
    );
    // The first call does not wait, so it is not jittered; each later one is at most its turn
    // plus the jitter (its turn, not the one before: tokens are reserved in order).
    for (k, t) in at.iter().enumerate().skip(1) {
        let latest = Duration::from_millis(100) * u32::try_from(k).unwrap() + jitter;
        assert!(*t <= latest, "call {k} went at {t:?}, after {latest:?}");
    }
    let lockstep = at
        .windows(2)
        .skip(1)
        .all(|w| w[1] - w[0] == Duration::from_millis(100));
    assert!(!lockstep, "waiters spread: {at:?}");
    // Without jitter, the same calls go exactly at their turns.
    let exact = Limit::per_second(10).burst(1);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| s.limiter.acquire("host2", &exact, Duration::from_secs(5)))
        .collect();
    let (at, _) = completions(t0, calls).await;
    let expected: Vec<Duration> = (0..5).map(|k| Duration::from_millis(100 * k)).collect();
    assert_eq!(at, expected);
}

/// Redis down, the fallback paces the waiters in memory, at this instance's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_paces_waiters_while_redis_is_down() {
    let (limiter, _server) = support::fallback_without_redis().await;
    let limit = Limit::per_second(10).burst(1);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| async {
            let d = limiter
                .acquire("host", &limit, Duration::from_secs(2))
                .await?;
            assert_eq!(d.source, Source::Fallback);
            Ok(d)
        })
        .collect();
    let (at, admitted) = completions(t0, calls).await;
    assert_eq!(admitted, 5);
    assert_never_early(&at, Duration::from_millis(100), "fallback");
}

/// A shadow limit never delays a call: it says the call would have waited, and lets it go.
async fn a_shadow_limit_that_waits_never_delays(s: Store) {
    let trial = Limit::per_second(5)
        .burst(1)
        .wait(Duration::from_secs(2))
        .shadow();
    assert!(!s.limiter.check("k", &trial).await.unwrap().shadowed);
    let d = s.limiter.check("k", &trial).await.unwrap();
    assert!(d.allowed && d.shadowed, "{d:?}");
    assert!(
        d.retry_after > Duration::ZERO,
        "it says how long it would have waited"
    );
    let leaky = Limit::per_second(5)
        .burst(3)
        .algorithm(Algorithm::LeakyBucket)
        .shadow();
    assert!(!s.limiter.check("q", &leaky).await.unwrap().shadowed);
    assert!(s.limiter.check("q", &leaky).await.unwrap().shadowed);
}

/// A new rate keeps the tokens reserved under the old one: calls after the change come after
/// the waiters, not beside them.
async fn a_new_rate_keeps_the_reservations(s: Store) {
    let old = Limit::per_second(10).burst(1);
    let new = Limit::per_second(20).burst(1);
    let waiters: Vec<_> = (0..10)
        .map(|_| s.limiter.acquire("k", &old, Duration::from_secs(2)))
        .collect();
    let waiting = join_all(waiters);
    let late = async {
        // Once most reservations are in (the bucket owes half a second or more; a slow
        // machine may see less), the same bucket read under both rates, back to back.
        // Timed from before the first read was sent: what passed between the two reads on
        // the server is within it, however late this task ran after the first answer.
        let (before, asked) = eventually_ok("most reservations in", async || {
            let asked = Instant::now();
            let d = s.limiter.peek("k", &old).await.unwrap();
            if d.retry_after >= Duration::from_millis(500) {
                Ok((d, asked))
            } else {
                Err(format!("{:?} owed", d.retry_after))
            }
        })
        .await;
        let seen = s.limiter.peek("k", &new).await.unwrap();
        (before, seen, asked.elapsed())
    };
    let (done, (before, seen, between)) = tokio::join!(waiting, late);
    assert!(done.iter().all(|d| d.as_ref().unwrap().allowed));
    println!(
        "owed {:?} at 10/s, then {:?} at 20/s",
        before.retry_after, seen.retry_after
    );
    // The tokens owed at 10/s are owed at 20/s, in half the time, less the time that passed
    // between the reads (however long: the bound only loosens); had the change dropped the
    // reservations, an emptied bucket would owe one token (50 ms).
    assert!(
        seen.retry_after * 2 + between * 2 + Duration::from_millis(2) >= before.retry_after,
        "the reservations were dropped: {:?} at 20/s after {:?} at 10/s",
        seen.retry_after,
        before.retry_after
    );
}

/// After a waiter gives its tokens back, no instance's deny cache keeps refusing what the
/// bucket now admits. One token a minute, so that the reservation's minute and the give-back
/// differ whatever the machine's speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_clears_the_deny_cache() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("gb")
        .deadline(Some(Duration::from_secs(10)))
        .build()
        .await
        .unwrap();
    let minute = Duration::from_secs(60);
    let limit = Limit::per(1, minute);
    assert!(limiter.check("k", &limit).await.unwrap().allowed);
    let waiter = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire("k", &limit, 3 * minute).await }
    });
    // Once the waiter has reserved (the bucket then owes two minutes, less what passed)...
    eventually("the waiter to reserve", async || {
        limiter.peek("k", &limit).await.unwrap().retry_after > minute
    })
    .await;
    // ... a call is refused behind it, and remembered by the deny cache.
    let d = limiter.check("k", &limit).await.unwrap();
    assert!(!d.allowed, "{d:?}");
    waiter.abort();
    // The waiter's token is back: one token owed, due within the minute, and every instance
    // answers so, cache or not (the cache would say the two minutes of the reservation).
    let d = eventually_ok("the waiter's token back", async || {
        let d = limiter.check("k", &limit).await.unwrap();
        if d.allowed || d.retry_after <= minute {
            Ok(d)
        } else {
            Err(format!(
                "still refused for {:?} by {:?}",
                d.retry_after, d.source
            ))
        }
    })
    .await;
    assert!(!d.allowed, "never early: {d:?}");
    assert_eq!(d.source, Source::Store, "{d:?}");
}

/// A call dropped while its request is on the way (here Redis holds writes for 300 ms, and
/// the caller gives up after 100) still reserves when the request arrives; its task gives the
/// tokens back. One token a minute: the reservation, kept, would owe a second minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_in_flight_gives_back_what_it_reserved() {
    let server = RedisServer::start();
    let limiter = support::redis_limiter(&server, "inflight").await;
    let minute = Duration::from_secs(60);
    let limit = Limit::per(1, minute);
    assert!(limiter.check("k", &limit).await.unwrap().allowed);
    let mut con = server.connection().await;
    let () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .arg("WRITE")
        .query_async(&mut con)
        .await
        .unwrap();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        limiter.acquire("k", &limit, 3 * minute),
    )
    .await;
    assert!(gave_up.is_err(), "still on the way");
    // A write of ours, sent after the reservation, is answered once the pause is over and
    // the reservation has run (Redis serves the clients it held in the order they came).
    let () = ::redis::cmd("SET")
        .arg("after")
        .arg(1)
        .query_async(&mut con)
        .await
        .unwrap();
    let given_back = "the reservation made after the caller left given back";
    eventually_ok(given_back, async || {
        match limiter.peek("k", &limit).await.unwrap().retry_after {
            owed if owed <= minute => Ok(()),
            owed => Err(format!("{owed:?} owed")),
        }
    })
    .await;
    assert!(!limiter.check("k", &limit).await.unwrap().allowed);
}
