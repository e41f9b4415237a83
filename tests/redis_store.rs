//! Behaviour only the Redis store has: key lifetime, script reloading, hostile keys, atomicity,
//! startup errors and the failure policies. Every test starts its own redis-server.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis_ratelimit::{Error, FailurePolicy, Limit, RateLimiter, Source, tools::MAX_PART_LEN};
use support::{key_slot, redis_limiter};
use testkit::RedisServer;
use testkit::outage::until_store;
use testkit::wait::eventually_ok;

/// The bucket keys under `prefix` (the heartbeat's `prefix:instances` is not one).
async fn bucket_keys(con: &mut redis::aio::MultiplexedConnection, prefix: &str) -> usize {
    let keys: Vec<String> = con.keys(format!("{prefix}:{{*")).await.unwrap();
    keys.len()
}

#[tokio::test]
async fn the_key_lives_exactly_until_the_bucket_is_full() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "t").await;
    let mut con = server.connection().await;
    let limit = Limit::per_minute(6).burst(5);
    limiter.check("k", &limit).await.unwrap();
    let d = limiter.check("k", &limit).await.unwrap();
    let pttl: i64 = con.pttl(limiter.bucket_key("k")).await.unwrap();
    let reset_ms = i64::try_from(d.reset_after.as_millis()).unwrap();
    // 2 tokens at 10 s each: 20 s, less the moments between the calls.
    assert!((19_900..=20_000).contains(&reset_ms), "{reset_ms}");
    // The expiry is the full instant rounded up to the millisecond, and Redis reads its own
    // clock in whole milliseconds: PTTL may exceed reset_after by up to 2 ms, never more.
    assert!(
        (reset_ms - 5..=reset_ms + 2).contains(&pttl),
        "PTTL {pttl} vs reset_after {reset_ms}"
    );
}

#[tokio::test]
async fn no_key_remains_once_the_bucket_has_refilled() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "t").await;
    let mut con = server.connection().await;
    let limit = Limit::per_second(20).burst(2);
    for i in 0..50 {
        limiter.check(&format!("k{i}"), &limit).await.unwrap();
    }
    // Each key lives at most until its bucket is full (50 ms after its call), however long
    // the calls took on a busy machine: gone already (-2), or with such an expiry, never
    // without one (-1).
    for i in 0..50 {
        let pttl: i64 = con
            .pttl(limiter.bucket_key(&format!("k{i}")))
            .await
            .unwrap();
        assert!(pttl == -2 || (0..=50).contains(&pttl), "k{i}: PTTL {pttl}");
    }
    // Real time, on Redis's clock: the first bucket is full again 50 ms after its call, when
    // its key expires. PTTL counts whole milliseconds left and Redis expires a key once its
    // clock is past the expiry: one more millisecond is the first instant it must be gone.
    // (-2: gone already, on a slow machine.)
    let pttl: i64 = con.pttl(limiter.bucket_key("k0")).await.unwrap();
    assert!(pttl <= 50, "{pttl}");
    tokio::time::sleep(Duration::from_millis(u64::try_from(pttl + 1).unwrap_or(0))).await;
    let exists: usize = con.exists(limiter.bucket_key("k0")).await.unwrap();
    assert_eq!(exists, 0, "a full bucket has no key");
    // Redis reclaims expired keys in the background too: memory tracks active buckets only.
    eventually_ok(
        "Redis to reclaim the expired keys",
        async || match bucket_keys(&mut con, "t").await {
            0 => Ok(()),
            keys => Err(format!("{keys} expired keys still held")),
        },
    )
    .await;
}

/// A refused call writes nothing: no command of its script touches the bucket's key, as its
/// keyspace notifications say (a write the script made of the same value and expiry would
/// show there, and what encoding the server keeps a value in is the server's own: Redis 7.0
/// an `int`, Valkey 9 an `embstr`).
#[tokio::test]
async fn a_denied_call_writes_nothing() {
    use futures_util::StreamExt as _;
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "t").await;
    let mut con = server.connection().await;
    let limit = Limit::per_minute(1);
    assert!(limiter.check("k", &limit).await.unwrap().allowed);
    let key = limiter.bucket_key("k");
    let read = |mut con: redis::aio::MultiplexedConnection, key: String| async move {
        let v: i64 = con.get(&key).await.unwrap();
        let e: i64 = redis::cmd("PEXPIRETIME")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        (v, e)
    };
    let before = read(con.clone(), key.clone()).await;
    // Every event of the generic and string commands on the bucket's key, then on a marker
    // written after the refused call: the marker's comes first if the call wrote nothing.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("K$g")
        .query_async(&mut con)
        .await
        .unwrap();
    let marker = "marker";
    let mut events = server.client().get_async_pubsub().await.unwrap();
    events
        .subscribe(&[
            format!("__keyspace@0__:{key}"),
            format!("__keyspace@0__:{marker}"),
        ])
        .await
        .unwrap();
    let mut events = events.into_on_message();
    assert!(!limiter.check("k", &limit).await.unwrap().allowed);
    let _: () = con.set(marker, 1).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the marker's event within 10 s")
        .unwrap();
    assert_eq!(
        (
            first.get_channel_name(),
            first.get_payload::<String>().unwrap()
        ),
        (
            format!("__keyspace@0__:{marker}").as_str(),
            "set".to_owned()
        ),
        "the refused call wrote its bucket"
    );
    assert_eq!(read(con.clone(), key.clone()).await, before);
}

#[tokio::test]
async fn script_flush_between_calls_changes_nothing() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "t").await;
    let mut con = server.connection().await;
    let limit = Limit::per_minute(6).burst(5);
    assert_eq!(limiter.check("k", &limit).await.unwrap().remaining, 4);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    let d = limiter.check("k", &limit).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.source), (true, 3, Source::Store));
}

#[tokio::test]
async fn hostile_keys_work_and_stay_in_one_slot() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "svc").await;
    let mut con = server.connection().await;
    let limit = Limit::per_minute(10);
    let long = "x".repeat(10_000);
    let hostile = [
        "{",
        "}",
        "{}",
        "}{",
        "a{b}c",
        "{{{{",
        "%7B",
        "%",
        "%H",
        "ключ-🔑",
        "tab\there",
        "",
        long.as_str(),
    ];
    for (i, key) in hostile.iter().enumerate() {
        let name = format!("api{i}");
        for expected in [9, 8] {
            let d = limiter.check_named(&name, key, &limit, 1).await.unwrap();
            assert_eq!((d.allowed, d.remaining), (true, expected), "key {key:?}");
        }
        let bucket = limiter.named_bucket_key(&name, key);
        assert_eq!(bucket.matches('{').count(), 1, "{bucket}");
        assert_eq!(bucket.matches('}').count(), 1, "{bucket}");
        assert!(
            bucket.starts_with("svc:{") && bucket.ends_with('}'),
            "{bucket}"
        );
        assert!(
            bucket.len() <= "svc:{}".len() + name.len() + 1 + MAX_PART_LEN,
            "bounded: {}",
            bucket.len()
        );
        // The hash tag is the whole "name:key": its slot depends on nothing else.
        let tag = &bucket["svc:{".len()..bucket.len() - 1];
        assert_eq!(key_slot(bucket.as_bytes()), key_slot(tag.as_bytes()));
    }
    // Every input got its own bucket (escaping is injective) and nothing else was written.
    let keys: Vec<String> = con.keys("*").await.unwrap();
    let buckets: Vec<&String> = keys
        .iter()
        .filter(|k| k.as_str() != "svc:instances")
        .collect();
    assert_eq!(buckets.len(), hostile.len(), "{keys:?}");
    let distinct: HashSet<String> = (0..hostile.len())
        .map(|i| limiter.named_bucket_key("same", hostile[i]))
        .collect();
    assert_eq!(distinct.len(), hostile.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_atomic() {
    let server = RedisServer::start();
    let limiter = Arc::new(redis_limiter(&server, "t").await);
    let limit = Limit::per_hour(1).burst(50);
    let tasks: Vec<_> = (0..400)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.check("hot", &limit).await.unwrap().allowed })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 50);
}

#[tokio::test]
async fn startup_errors_are_clear() {
    let port = testkit::free_port();
    let err = RateLimiter::builder()
        .redis(format!("redis://:hunter2@127.0.0.1:{port}"))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("cannot connect to Redis at redis://:***@127.0.0.1"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "no password in messages: {msg}");

    let err = RateLimiter::builder()
        .redis("http://nope")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err}");

    let err = RateLimiter::builder()
        .memory()
        .prefix("a{b")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidPrefix(_)), "{err}");

    let err = RateLimiter::builder().build().await.unwrap_err();
    assert!(
        err.to_string()
            .contains("call `.redis(url)` or `.memory()`"),
        "{err}"
    );
}

async fn limiter_with_policy(server: &RedisServer, policy: FailurePolicy) -> RateLimiter {
    RateLimiter::builder()
        .redis(server.url())
        .prefix("t")
        .failure_policy(policy)
        .deadline(Some(Duration::from_millis(500)))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn failure_policies_decide_while_redis_is_down() {
    let mut server = RedisServer::start();
    let fallback = limiter_with_policy(&server, FailurePolicy::Fallback).await;
    let allow = limiter_with_policy(&server, FailurePolicy::Allow).await;
    let deny = limiter_with_policy(&server, FailurePolicy::Deny).await;
    let limit = Limit::per_hour(1).burst(3);
    assert_eq!(
        fallback.check("k", &limit).await.unwrap().source,
        Source::Store
    );
    server.kill();

    let mut admitted = 0;
    for _ in 0..10 {
        let d = fallback.check("k", &limit).await.unwrap();
        assert_eq!(d.source, Source::Fallback);
        admitted += usize::from(d.allowed);
    }
    // It goes on from what Redis last said: 2 of the 3 left after the first call.
    assert_eq!(
        admitted, 2,
        "the fallback enforces the same limit in memory, from where Redis left it"
    );
    assert!(fallback.is_degraded());

    for _ in 0..5 {
        let d = allow.check("k", &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (true, Source::FailOpen));
        let d = deny.check("k", &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (false, Source::FailClosed));
        assert!(d.retry_after > Duration::ZERO);
    }

    server.restart();
    let d = until_store(&fallback, "k", &limit).await;
    // The Redis bucket kept nothing (no persistence): a fresh full bucket.
    assert_eq!(d.remaining, 2);
    assert!(!fallback.is_degraded());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_refuses_locally_and_never_over_admits() {
    let server = RedisServer::start();
    let limiter = Arc::new(
        RateLimiter::builder()
            .redis(server.url())
            .prefix("dc")
            .failure_policy(FailurePolicy::Deny)
            .deadline(Some(Duration::from_secs(10)))
            .build()
            .await
            .unwrap(),
    );
    // One per second, burst 5: a flood of 8 tasks of 100 calls each on one key. A count of
    // calls, not a length of time, and refusals that last a second: on a starved machine the
    // calls only come slower, and every bound below still holds.
    let limit = Limit::per_second(1).burst(5);
    let before = server.script_calls().await;
    let start = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let (mut admitted, mut local, mut calls) = (0u64, 0u64, 0u64);
                for _ in 0..100 {
                    let d = limiter.check("hot", &limit).await.unwrap();
                    calls += 1;
                    admitted += u64::from(d.allowed);
                    local += u64::from(d.source == Source::DenyCache);
                    assert!(
                        matches!(d.source, Source::Store | Source::DenyCache),
                        "{d:?}"
                    );
                    if d.source == Source::DenyCache {
                        assert!(!d.allowed && d.retry_after > Duration::ZERO);
                    }
                    tokio::task::yield_now().await;
                }
                (admitted, local, calls)
            })
        })
        .collect();
    let (mut admitted, mut local, mut calls) = (0, 0, 0);
    for t in tasks {
        let (a, l, c) = t.await.unwrap();
        admitted += a;
        local += l;
        calls += c;
    }
    let elapsed = start.elapsed();
    let scripts = server.script_calls().await - before;
    // Never more than the bucket allows (elapsed measured locally, after the last call).
    let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap();
    let bound = 5 + elapsed_us.div_ceil(1_000_000);
    assert!(admitted <= bound, "admitted {admitted} > {bound}");
    // The cache refuses only what the store refused: the burst went through.
    assert!(
        admitted >= 5,
        "admitted {admitted}: the cache refused the burst"
    );
    // Most refusals never reached Redis: the store is asked again only once a refusal ends,
    // once a second, by at most the 8 tasks at once.
    let asked_at_most = bound + 8 * (1 + elapsed_us.div_ceil(1_000_000));
    assert!(
        local + asked_at_most >= calls,
        "{local} local of {calls}, in {elapsed:?}"
    );
    assert!(
        scripts <= asked_at_most,
        "{scripts} script calls for {calls} decisions in {elapsed:?}"
    );
    println!(
        "deny cache: {calls} decisions, {admitted} admitted, {local} refused locally, {scripts} script calls"
    );
}

#[tokio::test]
async fn reset_refills_a_bucket_in_redis_and_in_the_deny_cache() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("rs")
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(Duration::from_secs(10)))
        .build()
        .await
        .unwrap();
    let limit = Limit::per_hour(1).burst(2);
    for _ in 0..2 {
        assert!(limiter.check("k", &limit).await.unwrap().allowed);
    }
    assert_eq!(
        limiter.check("k", &limit).await.unwrap().source,
        Source::Store
    );
    assert_eq!(
        limiter.check("k", &limit).await.unwrap().source,
        Source::DenyCache
    );
    assert_eq!(limiter.deny_cache_len(), 1);
    // A smaller cost than the one refused is asked of Redis, not refused locally.
    let two = Limit::per_hour(1).burst(2);
    assert_eq!(
        limiter.check_n("k", &two, 2).await.unwrap().source,
        Source::DenyCache
    );

    limiter.reset("k").await.unwrap();
    assert_eq!(limiter.deny_cache_len(), 0);
    let d = limiter.check("k", &limit).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.source), (true, 1, Source::Store));

    // Turned off, every call asks Redis.
    let uncached = RateLimiter::builder()
        .redis(server.url())
        .prefix("rs2")
        .deny_cache(0)
        .deadline(Some(Duration::from_secs(10)))
        .build()
        .await
        .unwrap();
    for _ in 0..4 {
        let d = uncached.check("k", &limit).await.unwrap();
        assert_eq!(d.source, Source::Store);
    }
}

/// Values the script never writes, put at bucket keys by anything else (an operator, an older
/// tool, a collision): each affects its own key alone, is read as an empty bucket (nothing is
/// admitted that the bucket may not have had) and overwritten; the store stays healthy.
#[tokio::test]
async fn a_foreign_value_at_one_key_is_that_key_s_problem_alone() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "t").await;
    let mut con = server.connection().await;
    let limit = Limit::per_second(10).burst(1);
    let huge = "9".repeat(30);
    let values: [(&str, &[&str]); 9] = [
        ("hash", &["HSET", "f", "v"]),
        ("list", &["RPUSH", "v"]),
        ("text", &["SET", "abc", "PX", "60000"]),
        ("nan", &["SET", "nan", "PX", "60000"]),
        ("inf", &["SET", "inf", "PX", "60000"]),
        ("float", &["SET", "1e2", "PX", "60000"]),
        ("-0", &["SET", "-0", "PX", "60000"]),
        ("huge", &["SET", &huge, "PX", "60000"]),
        ("no ttl", &["SET", "5"]),
    ];
    for (what, command) in values {
        let key = format!("foreign-{what}");
        let bucket = limiter.bucket_key(&key);
        let mut cmd = redis::cmd(command[0]);
        cmd.arg(&bucket).arg(&command[1..]);
        let () = cmd.query_async(&mut con).await.unwrap();

        let d = limiter.check(&key, &limit).await.unwrap();
        assert_eq!(d.source, Source::Store, "{what}: the script decided");
        assert!(!d.allowed, "{what}: read as an empty bucket");
        assert!(
            d.retry_after > Duration::ZERO && d.retry_after <= Duration::from_millis(100),
            "{what}: {:?}",
            d.retry_after
        );
        assert!(!limiter.is_degraded(), "{what}: not a store failure");
        let other = limiter
            .check(&format!("healthy-{what}"), &limit)
            .await
            .unwrap();
        assert!(other.allowed && other.source == Source::Store, "{what}");

        tokio::time::sleep(d.retry_after).await;
        let d = limiter.check(&key, &limit).await.unwrap();
        assert!(
            d.allowed,
            "{what}: overwritten, and waiting retry_after is admitted"
        );
        let kind: String = redis::cmd("TYPE")
            .arg(&bucket)
            .query_async(&mut con)
            .await
            .unwrap();
        let pttl: i64 = con.pttl(&bucket).await.unwrap();
        assert_eq!(kind, "string", "{what}");
        assert!(pttl > 0, "{what}: the bucket expires again");
    }
}

/// A bucket written while the server's clock was an hour ahead (or read after it stepped
/// back) owes more than the limit can hold: refused with an honest retry_after, admitted
/// after it.
#[tokio::test]
async fn a_clock_stepped_back_answers_an_honest_retry_after() {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server, "t").await;
    let mut con = server.connection().await;
    let limit = Limit::per_second(2).burst(1);
    let bucket = limiter.bucket_key("k");
    let () = redis::cmd("SET")
        .arg(&bucket)
        .arg(0)
        .arg("PX")
        .arg(3_600_000)
        .query_async(&mut con)
        .await
        .unwrap();
    for _ in 0..2 {
        let d = limiter.check("k", &limit).await.unwrap();
        assert!(!d.allowed);
        assert!(
            d.retry_after <= Duration::from_millis(500),
            "{:?}",
            d.retry_after
        );
        tokio::time::sleep(d.retry_after).await;
        assert!(
            limiter.check("k", &limit).await.unwrap().allowed,
            "waited retry_after"
        );
    }
}

/// Twelve live instances share a burst of 9: while Redis is down each enforces 9/12 of a
/// token and 10/12 per second. No instance admits a call from nothing (the fleet would have
/// admitted 12 against a burst of 9), and the first refusal's retry_after comes true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_share_is_exact_and_its_retry_after_comes_true() {
    let mut server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("share")
        .failure_policy(FailurePolicy::Fallback)
        .deadline(Some(Duration::from_millis(300)))
        .build()
        .await
        .unwrap();
    // Eleven other instances, alive as far as the heartbeat can tell.
    let mut con = server.connection().await;
    let far: i64 = 4_000_000_000_000;
    for i in 0..11 {
        let _: i64 = con
            .zadd("share:instances", format!("other-{i}"), far)
            .await
            .unwrap();
    }
    eventually_ok(
        "the heartbeat to count 12 instances",
        async || match limiter.live_instances() {
            12 => Ok(()),
            n => Err(format!("{n} instances")),
        },
    )
    .await;
    drop(con);
    server.kill();

    let limit = Limit::per_second(10).burst(9);
    let refused = limiter.check("k", &limit).await.unwrap();
    assert_eq!(refused.source, Source::Fallback);
    assert!(!refused.allowed, "9/12 of a token admits nothing");
    // A quarter of a token at 10/12 per second: 300 ms.
    assert_eq!(refused.retry_after, Duration::from_millis(300));
    tokio::time::sleep(refused.retry_after).await;
    let d = limiter.check("k", &limit).await.unwrap();
    assert_eq!(d.source, Source::Fallback);
    assert!(d.allowed, "waiting retry_after is admitted");
}

/// Two instances on one Redis, 200 concurrent calls under two limits each (a user's 10 and
/// everyone's 25): no limit admits more than it holds, and since a refused call takes
/// nothing, everyone's limit is used up exactly (the users could take 40).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_from_two_instances_never_over_admit() {
    let server = RedisServer::start();
    let a = Arc::new(redis_limiter(&server, "multi").await);
    // The other instance keeps its deny cache, which learns from the refusals.
    let b = Arc::new(
        RateLimiter::builder()
            .redis(server.url())
            .prefix("multi")
            .failure_policy(FailurePolicy::Deny)
            .deadline(Some(Duration::from_secs(10)))
            .build()
            .await
            .unwrap(),
    );
    let per_user = Limit::per_hour(1).burst(10);
    let everyone = Limit::per_hour(1).burst(25);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let limiter = Arc::clone(if i % 2 == 0 { &a } else { &b });
            tokio::spawn(async move {
                let user = format!("user{}", i % 4);
                let d = limiter
                    .check_all(&[(&user, &per_user, 1), ("everyone", &everyone, 1)])
                    .await
                    .unwrap();
                (i % 4, d.allowed)
            })
        })
        .collect();
    let mut per_user_admitted = [0; 4];
    for t in tasks {
        let (user, allowed) = t.await.unwrap();
        per_user_admitted[user] += usize::from(allowed);
    }
    assert!(
        per_user_admitted.iter().all(|&n| n <= 10),
        "{per_user_admitted:?}"
    );
    assert_eq!(
        per_user_admitted.iter().sum::<usize>(),
        25,
        "{per_user_admitted:?}"
    );
    // What Redis holds agrees: each user's bucket lost exactly what was admitted for it.
    for (user, &admitted) in per_user_admitted.iter().enumerate() {
        let d = a.check(&format!("user{user}"), &per_user).await.unwrap();
        let left = u64::try_from(10 - admitted).unwrap();
        assert_eq!(d.allowed, left > 0, "user{user}: {d:?}");
        assert_eq!(d.remaining, left.saturating_sub(1), "user{user}: {d:?}");
    }
    assert!(!a.check("everyone", &everyone).await.unwrap().allowed);
}
