//! What Redis promised carries through an outage (issue 33, items 1 and 2). Concurrency
//! limits: the fallback counts the calls this process runs under slots Redis granted, every
//! limiter of a process holds one share, and a Redis that comes back without its data learns
//! of the calls the fallback admitted before it grants their slots again. Rates: a bucket
//! that owes reservations starts the outage owing them, and an interval-refill bucket used up
//! in Redis stays used up until its refill.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::time::Duration;

use common::{OtherInstance, TOLERANT_DEADLINE, pause, until_store};
use ratelimit_core::{Entered, Limit, RateLimiter, Source};
use testkit::RedisServer;
use testkit::outage::redis_killed_under;
use testkit::wait::{eventually, eventually_blocking, eventually_ok};

const TWO: Limit = Limit::concurrent(2);

async fn limiter(server: &RedisServer, prefix: &str, instance: bool) -> RateLimiter {
    RateLimiter::builder()
        .redis(server.url())
        .prefix(prefix)
        .deadline(Some(TOLERANT_DEADLINE))
        .instance(instance)
        .build()
        .await
        .unwrap()
}

/// How many of `calls` were admitted, each by whom.
fn admitted(calls: &[Entered]) -> Vec<Source> {
    calls
        .iter()
        .filter(|e| e.decision.allowed)
        .map(|e| e.decision.source)
        .collect()
}

/// The live slots (`h:` members) Redis holds in `key`.
async fn slots_in_redis(server: &RedisServer, key: &str) -> usize {
    let mut con = server.connection().await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    let now = secs * 1_000_000 + micros;
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut con)
        .await
        .unwrap_or_default();
    members
        .iter()
        .filter(|(m, score)| m.starts_with("h:") && *score > now as f64)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_counts_the_calls_redis_granted() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, "granted", true).await;
    let running = [
        limiter.enter("tenant", &TWO).await.unwrap(),
        limiter.enter("tenant", &TWO).await.unwrap(),
    ];
    assert_eq!(admitted(&running), [Source::Store, Source::Store]);
    server.kill();
    // Redis is gone; both slots are still held by calls that run here.
    let mut more = Vec::new();
    for _ in 0..4 {
        more.push(limiter.enter("tenant", &TWO).await.unwrap());
    }
    let sources: Vec<Source> = more.iter().map(|e| e.decision.source).collect();
    println!("while two calls run under Redis's slots: {sources:?}");
    assert!(
        sources.iter().all(|s| *s == Source::Fallback),
        "the fallback decided: {sources:?}"
    );
    assert_eq!(
        admitted(&more),
        [],
        "the fallback let calls in beside the two Redis granted"
    );
    // One of them ends: its slot is free in the fallback too.
    drop(running);
    let after = limiter.enter("tenant", &TWO).await.unwrap();
    assert!(after.decision.allowed, "a slot given back is free again");
    assert_eq!(after.decision.source, Source::Fallback);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_of_one_process_hold_one_share() {
    let ((a, b), _server) = redis_killed_under(async |server| {
        (
            limiter(server, "pair", true).await,
            limiter(server, "pair", true).await,
        )
    })
    .await;
    assert_eq!(a.live_instances(), 1, "one process is one instance");
    let mut calls = Vec::new();
    for _ in 0..3 {
        calls.push(a.enter("tenant", &TWO).await.unwrap());
        calls.push(b.enter("tenant", &TWO).await.unwrap());
    }
    let sources = admitted(&calls);
    println!("admitted by two limiters of one process while Redis is down: {sources:?}");
    assert_eq!(
        sources,
        [Source::Fallback, Source::Fallback],
        "one instance's fallback grants the max once, whatever its limiters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_back_empty_learns_of_the_calls_the_fallback_admitted() {
    // `elsewhere` is not an instance of the fleet: it never saw the outage, and asks Redis
    // alone.
    let ((limiter, elsewhere), mut server) = redis_killed_under(async |server| {
        (
            limiter(server, "back", true).await,
            another_process(server, "back").await,
        )
    })
    .await;
    let key = limiter.bucket_key("tenant");
    let running = [
        limiter.enter("tenant", &TWO).await.unwrap(),
        limiter.enter("tenant", &TWO).await.unwrap(),
    ];
    assert_eq!(admitted(&running), [Source::Fallback, Source::Fallback]);
    // Redis comes back without its data: it never heard of the two calls.
    server.restart();
    // This process refuses a third while they run, whoever decides it.
    let third = limiter.enter("tenant", &TWO).await.unwrap();
    println!(
        "the third call after the restart: {:?}",
        third.decision.source
    );
    assert!(!third.decision.allowed, "a third call beside two running");
    // The guards of the two calls write their slots back, at once.
    slots_reach(
        &server,
        &key,
        2,
        "Redis to learn of the two calls the fallback admitted",
    )
    .await;
    // So another instance is refused by Redis itself, once it reaches it again.
    reaches_redis(&elsewhere).await;
    let other = elsewhere.enter("tenant", &TWO).await.unwrap();
    assert_eq!(
        (other.decision.allowed, other.decision.source),
        (false, Source::Store)
    );
    // Once they end, their slots are free everywhere.
    for entered in running {
        entered.slot.unwrap().release().await.unwrap();
    }
    assert_eq!(slots_in_redis(&server, &key).await, 0);
    let next = elsewhere.enter("tenant", &TWO).await.unwrap();
    assert!(next.decision.allowed);
}

/// Waits until `limiter` decides on Redis again (its connection back after a restart).
async fn reaches_redis(limiter: &RateLimiter) {
    until_store(limiter, "probe", &Limit::per_second(1_000)).await;
}

/// Waits until Redis holds `n` live slots in `key`.
async fn slots_reach(server: &RedisServer, key: &str, n: usize, what: &str) {
    eventually_ok(what, async || match slots_in_redis(server, key).await {
        held if held == n => Ok(()),
        held => Err(format!("it holds {held} of {n}")),
    })
    .await;
}

/// A limiter on `prefix` that is no instance of this process's fleet (so it has a fallback,
/// a circuit and a record of the store's returns of its own), as another process's would be.
async fn another_process(server: &RedisServer, prefix: &str) -> RateLimiter {
    limiter(server, prefix, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_back_with_its_data_keeps_the_count() {
    // With its data (a restart that kept it), Redis still holds the slots it granted; the
    // fallback's are written beside them, and the max holds on every side.
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let limiter = limiter(&server, "kept", true).await;
    let key = limiter.bucket_key("tenant");
    let by_redis = limiter.enter("tenant", &TWO).await.unwrap();
    assert_eq!(by_redis.decision.source, Source::Store);
    server.kill();
    let by_fallback = limiter.enter("tenant", &TWO).await.unwrap();
    assert_eq!(
        (by_fallback.decision.allowed, by_fallback.decision.source),
        (true, Source::Fallback)
    );
    let refused = limiter.enter("tenant", &TWO).await.unwrap();
    assert!(
        !refused.decision.allowed,
        "two calls run: {:?}",
        refused.decision
    );
    server.restart();
    slots_reach(&server, &key, 2, "Redis to hold both calls").await;
    let other = another_process(&server, "kept").await;
    reaches_redis(&other).await;
    let d = other.enter("tenant", &TWO).await.unwrap();
    assert_eq!(
        (d.decision.allowed, d.decision.source),
        (false, Source::Store)
    );
    drop((by_redis, by_fallback));
    slots_reach(&server, &key, 0, "both slots given back").await;
}

/// The fallback's first decision on `key` under `limit` once Redis is paused.
async fn by_the_fallback(
    limiter: &RateLimiter,
    server: &RedisServer,
    key: &str,
    limit: &Limit,
) -> ratelimit_core::Decision {
    pause(server, 3_000).await;
    let d = limiter.check(key, limit).await.unwrap();
    assert_eq!(d.source, Source::Fallback, "{d:?}");
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_reserved_in_redis_are_owed_by_the_fallback() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("owed")
        .deadline(Some(Duration::from_millis(100)))
        .build()
        .await
        .unwrap();
    // 10 a second, one at a time: twenty calls reserve their turns, 100 ms apart, the last
    // 1.9 s from the first.
    let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(10));
    let asked = std::time::Instant::now();
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                limiter
                    .acquire("host", &limit, Duration::from_secs(10))
                    .await
            })
        })
        .collect();
    // Every turn is reserved in Redis: a new call's turn comes after the twenty, 2 s after
    // the first, however long they took to reserve. (Peeked under the same limit: the
    // fallback starts from what Redis last said under it.)
    let all_reserved = |d: &ratelimit_core::Decision| {
        d.source == Source::Store && d.retry_after + asked.elapsed() >= Duration::from_millis(1_900)
    };
    eventually("the twenty to reserve their turns", async || {
        limiter
            .peek("host", &limit)
            .await
            .is_ok_and(|d| all_reserved(&d))
    })
    .await;
    // Redis stops answering: the next call is the fallback's, behind the twenty.
    let d = by_the_fallback(&limiter, &server, "host", &limit).await;
    println!("the fallback's first call waits {:?}", d.retry_after);
    // Its turn is the twenty-first: 2 s after the first, never before (a fallback that began
    // from an answer to an earlier waiter went a turn or two early).
    assert!(
        d.retry_after + asked.elapsed() >= Duration::from_millis(2_000),
        "it goes before the turns Redis promised: {:?} after {:?}",
        d.retry_after,
        asked.elapsed()
    );
    for waiter in waiters {
        waiter.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_bucket_used_up_in_redis_stays_used_up() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("interval")
        .deadline(Some(Duration::from_millis(100)))
        .build()
        .await
        .unwrap();
    let limit = Limit::per_hour(20).refill(ratelimit_core::Refill::Interval);
    for _ in 0..20 {
        assert!(limiter.check("quota", &limit).await.unwrap().allowed);
    }
    let d = by_the_fallback(&limiter, &server, "quota", &limit).await;
    assert!(!d.allowed, "a fresh bucket in the fallback: {d:?}");
    let mut more = 0;
    for _ in 0..20 {
        more += u32::from(limiter.check("quota", &limit).await.unwrap().allowed);
    }
    assert_eq!(more, 0, "the fallback handed out the hour's quota again");
}

/// The audit of issue 44, item 3: 4 instances (processes) share a concurrency limit of 8; Redis
/// grants one of them 6 slots, two others 1 each, and refuses the fourth; then it is killed
/// (`SIGKILL`) while every call runs, and each instance asks for 4 more slots from its
/// fallback. The fleet holds at most 8 at once (before: each fallback added its share of
/// `8 / 4` on top of what Redis had granted, up to 8 + 3 x 2).
#[test]
fn four_instances_hold_a_concurrency_limit_within_its_max_when_redis_dies() {
    let mut server = RedisServer::start();
    let url = server.url();
    let mut fleet: Vec<OtherInstance> = (0..4)
        .map(|_| OtherInstance::start_slots(&url, "held", "tenant", 8))
        .collect();
    for member in &fleet {
        member.expect("READY");
    }
    // Every instance counts the four (a heartbeat each, about a second).
    for member in &mut fleet {
        eventually_blocking("every instance to count the four", || {
            member.say("count", "COUNT") == "COUNT 4"
        });
    }
    let held_before: Vec<u32> = [6, 1, 1, 1]
        .iter()
        .zip(&mut fleet)
        .map(|(n, member)| held(&member.say(&format!("enter {n}"), "HELD")).0)
        .collect();
    assert_eq!(held_before, [6, 1, 1, 0], "Redis granted 8");
    server.kill();
    let after: Vec<(u32, u32)> = fleet
        .iter_mut()
        .map(|member| held(&member.say("enter 4", "HELD")))
        .collect();
    let total: u32 = after.iter().map(|(held, _)| held).sum();
    println!("held by each instance after Redis died (held, of which by the fallback): {after:?}");
    assert!(
        total <= 8,
        "{total} slots held at once of a max of 8: {after:?}"
    );
}

/// A `HELD <held> <by the fallback>` line's numbers.
fn held(line: &str) -> (u32, u32) {
    let mut numbers = line.split_whitespace().skip(1).map(|n| n.parse().unwrap());
    (numbers.next().unwrap(), numbers.next().unwrap())
}
