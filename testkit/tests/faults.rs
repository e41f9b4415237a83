//! Faults of a single Redis server under a bounded load of real calls: killed and restarted,
//! scripts flushed, restarted with its data, paused, and what each failure policy admits
//! while it is down. Every test starts its own redis-server on a free loopback port.
//!
//! Timings are measured and printed (run with `--nocapture` to see them); the assertions on
//! them are generous correctness bounds, never speed requirements.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::time::{Duration, Instant};

use common::{
    Call, Load, OtherInstance, TOLERANT_DEADLINE, assert_no_errors, logs, ms, policy_source,
};
use ratelimit_core::{FailurePolicy, Limit, RateLimiter, Source, defaults::DEFAULT_DEADLINE};
use testkit::RedisServer;

/// The decision script, to ask a server whether it holds it.
fn script_hash() -> String {
    redis::Script::new(ratelimit_core::tools::scripts::TOKEN_BUCKET)
        .get_hash()
        .to_owned()
}

async fn script_loaded(server: &RedisServer) -> bool {
    let mut con = server.connection().await;
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(script_hash())
        .query_async(&mut con)
        .await
        .unwrap();
    exists == [true]
}

/// `field` of `INFO <section>` as a number (0 when absent).
async fn info_number(server: &RedisServer, section: &str, line: &str, field: &str) -> u64 {
    let mut con = server.connection().await;
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut con)
        .await
        .unwrap();
    testkit::info_number(&info, line, Some(field)).unwrap_or(0)
}

/// How many times the server ran a script (`EVALSHA` and `EVAL`).
async fn script_runs(server: &RedisServer) -> u64 {
    info_number(server, "commandstats", "cmdstat_evalsha", "calls").await
        + info_number(server, "commandstats", "cmdstat_eval", "calls").await
}

/// Polls `cond` every millisecond for at most `within`; the instant it first held.
async fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> Option<Instant> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if cond() {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// (a) Redis is killed for 5 s under load, then restarted on the same port with no data and
/// no scripts. No call fails; while it is down every decision is the fallback's; degraded
/// mode is entered and left with one log line each; the limiter is back on Redis soon after
/// the restart, with the script loaded again. The limiter has the default settings (50 ms
/// deadline, 200 ms circuit cool-down), so the time to degraded mode is the one users get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_then_restarted() {
    logs::install();
    let mut server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("killed")
        .deadline(Some(DEFAULT_DEADLINE))
        .build()
        .await
        .unwrap();
    let limit = Limit::per_second(1000).burst(1000);
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let load = Load::start(&limiter, keys, limit, 8, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!limiter.is_degraded(), "degraded before any fault");

    let t_kill = Instant::now();
    server.kill();
    // Calls that started before the process was gone may still have been answered by it.
    let t_dead = Instant::now();
    let degraded_at = wait_for(Duration::from_secs(5), || limiter.is_degraded()).await;
    let until = t_kill + Duration::from_secs(5);
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    assert!(limiter.is_degraded(), "still degraded while Redis is down");

    // Calls that end after this may have been answered by the restarted server.
    let t_restarting = Instant::now();
    server.restart();
    let t_restart = Instant::now();
    let healthy_at = wait_for(Duration::from_secs(10), || !limiter.is_degraded()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = load.stop().await;

    assert_no_errors(&calls);
    let before: Vec<&Call> = calls.iter().filter(|c| c.end < t_kill).collect();
    assert!(!before.is_empty());
    assert!(before.iter().all(|c| c.by_redis()));
    let down: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start > t_dead && c.end < t_restarting)
        .collect();
    assert!(down.len() > 100, "load kept running: {}", down.len());
    assert!(
        down.iter().all(|c| c.source() == Some(Source::Fallback)),
        "every call while Redis was down was decided by the fallback"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.by_redis() || c.source() == Some(Source::Fallback)),
        "only the store or the fallback decide"
    );
    let first_fallback = calls
        .iter()
        .find(|c| c.end > t_kill && c.source() == Some(Source::Fallback))
        .expect("a fallback decision after the kill");
    let first_store_back = calls
        .iter()
        .find(|c| c.start > t_restart && c.source() == Some(Source::Store))
        .expect("a store decision after the restart");
    let to_degraded = degraded_at.expect("degraded within 5 s of the kill") - t_kill;
    let to_fallback = first_fallback.end - t_kill;
    let back = first_store_back.end - t_restart;
    let healthy = healthy_at.expect("healthy within 10 s of the restart") - t_restart;
    let max_latency = calls.iter().map(Call::latency).max().unwrap();
    println!(
        "killed: {} calls, {} during the outage (all fallback); kill -> is_degraded {:.1} ms, \
         kill -> first fallback decision {:.1} ms; restart -> first store decision {:.1} ms, \
         restart -> !is_degraded {:.1} ms; max call latency {:.1} ms",
        calls.len(),
        down.len(),
        ms(to_degraded),
        ms(to_fallback),
        ms(back),
        ms(healthy),
        ms(max_latency)
    );
    assert!(to_fallback < Duration::from_secs(5), "{to_fallback:?}");
    assert!(back < Duration::from_secs(5), "{back:?}");
    assert!(
        script_loaded(&server).await,
        "the script was loaded again into the restarted server"
    );
    assert!(!limiter.is_degraded());
    assert_eq!(
        logs::matching("killed", "entering degraded mode").len(),
        1,
        "one line on entering degraded mode"
    );
    assert_eq!(
        logs::matching("killed", "leaving degraded mode").len(),
        1,
        "one line on leaving degraded mode"
    );
}

/// (b) `SCRIPT FLUSH` again and again under load: every call is still decided by Redis, and
/// one hot key with a slow refill admits exactly its burst. The deny cache is off, so that
/// every call, refused ones too, runs the script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_under_load_changes_nothing() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("flush")
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(Duration::from_secs(5)))
        .circuit_cooldown(None)
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    const BURST: u32 = 300;
    let hot = Limit::per_hour(1).burst(BURST);
    let load = Load::start(
        &limiter,
        vec!["hot".to_owned()],
        hot,
        8,
        Duration::from_micros(500),
    );
    let mut con = server.connection().await;
    let mut flushes = 0u32;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut con)
            .await
            .unwrap();
        flushes += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let calls = load.stop().await;
    assert_no_errors(&calls);
    let nonstore: Vec<&Call> = calls
        .iter()
        .filter(|c| c.source() != Some(Source::Store))
        .collect();
    let noscript = info_number(&server, "errorstats", "errorstat_NOSCRIPT", "count").await;
    let loads = info_number(&server, "commandstats", "cmdstat_script|load", "calls").await;
    let evals = info_number(&server, "commandstats", "cmdstat_eval", "calls").await;
    let admitted = calls.iter().filter(|c| c.allowed()).count();
    println!(
        "flush: {flushes} SCRIPT FLUSH, {} calls, {} admitted, {} not decided by Redis; \
         server saw {noscript} NOSCRIPT replies, {loads} SCRIPT LOAD, {evals} EVAL",
        calls.len(),
        admitted,
        nonstore.len()
    );
    assert!(calls.len() > 1000, "the load ran: {}", calls.len());
    assert!(noscript > 0, "the flushes made the script go missing");
    assert!(
        nonstore.is_empty(),
        "{} calls were not decided by Redis, e.g. {:?}",
        nonstore.len(),
        nonstore.first()
    );
    assert_eq!(admitted, BURST as usize, "exactly the burst was admitted");
}

/// (c) A restart that keeps the data (AOF, fsync always): an exhausted bucket is still
/// exhausted afterwards, with its expiry, and calls resume with no error. (The deny cache is
/// off so that every refusal here is Redis's own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_keeps_the_data_keeps_the_buckets() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("aof")
        .deadline(Some(TOLERANT_DEADLINE))
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    let limit = Limit::per_hour(1).burst(3);
    let mut admitted = 0;
    for _ in 0..5 {
        let d = limiter.check("k", &limit).await.unwrap();
        assert_eq!(d.source, Source::Store);
        admitted += usize::from(d.allowed);
    }
    assert_eq!(admitted, 3);
    let key = limiter.bucket_key("k");

    server.kill();
    server.restart();
    let t_restart = Instant::now();
    let mut con = server.connection().await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(
        pttl > 3_500_000,
        "the bucket and its expiry survived the restart: PTTL {pttl} ms"
    );
    // The first decision Redis takes after the restart sees the exhausted bucket.
    let mut first_store = None;
    let mut calls = 0;
    while t_restart.elapsed() < Duration::from_secs(10) {
        calls += 1;
        let d = limiter.check("k", &limit).await.unwrap();
        if d.source == Source::Store {
            first_store = Some(d);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let d = first_store.expect("Redis decides again within 10 s of the restart");
    println!(
        "aof: back on Redis {:.1} ms after the restart ({calls} calls); retry_after {:?}",
        ms(t_restart.elapsed()),
        d.retry_after
    );
    assert!(
        !d.allowed,
        "the bucket is still exhausted after the restart"
    );
    assert!(
        d.retry_after > Duration::from_secs(3500),
        "{:?}",
        d.retry_after
    );
    for _ in 0..20 {
        let d = limiter.check("k", &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (false, Source::Store));
    }
}

/// (d) Redis paused for 2 s (`CLIENT PAUSE 2000 ALL`): every call still answers within about
/// the deadline, decided by the policy, and Redis decides again once the pause ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_costs_one_deadline_not_the_pause() {
    let server = RedisServer::start();
    let deadline = Duration::from_millis(50);
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("paused")
        .deadline(Some(deadline))
        .build()
        .await
        .unwrap();
    let limit = Limit::per_second(1000).burst(1000);
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let load = Load::start(&limiter, keys, limit, 8, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut con = server.connection().await;
    let scripts_before = script_runs(&server).await;
    let t_pause = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2000)
        .arg("ALL")
        .query_async(&mut con)
        .await
        .unwrap();
    let pause_end = t_pause + Duration::from_secs(2);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let healthy = wait_for(Duration::from_secs(10), || !limiter.is_degraded()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = load.stop().await;
    // Calls that gave up at the deadline had already sent their script: Redis runs it once the
    // pause ends, taking tokens for callers that the policy decided (only ever stricter).
    let ran = script_runs(&server).await - scripts_before;
    let answered = calls
        .iter()
        .filter(|c| c.start >= t_pause && c.source() == Some(Source::Store))
        .count();

    assert_no_errors(&calls);
    let during: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start > t_pause + Duration::from_millis(100) && c.end < pause_end)
        .collect();
    assert!(!during.is_empty());
    let fallback = during
        .iter()
        .filter(|c| c.source() == Some(Source::Fallback))
        .count();
    let max_latency = calls.iter().map(Call::latency).max().unwrap();
    let max_during = during.iter().map(|c| c.latency()).max().unwrap();
    let back = calls
        .iter()
        .find(|c| c.start > pause_end && c.source() == Some(Source::Store))
        .map(|c| c.end - pause_end);
    println!(
        "paused: {} calls, {} during the pause ({} by the fallback); max latency {:.1} ms \
         overall, {:.1} ms during the pause (deadline {:.0} ms); first store decision {:?} \
         after the pause ended; Redis ran the scripts {ran} times from the pause on, for \
         {answered} decisions it delivered (the rest: heartbeats, and calls that had given up)",
        calls.len(),
        during.len(),
        fallback,
        ms(max_latency),
        ms(max_during),
        ms(deadline),
        back.map(ms)
    );
    assert!(
        fallback * 10 >= during.len() * 9,
        "the pause made the policy decide: {fallback} of {}",
        during.len()
    );
    assert!(
        max_latency < Duration::from_secs(1),
        "no call waited for the 2 s pause: {max_latency:?}"
    );
    assert!(healthy.is_some(), "Redis decides again after the pause");
    assert!(back.is_some_and(|b| b < Duration::from_secs(5)), "{back:?}");
}

/// (e) What each policy admits while Redis is down, with two instances sharing each limit
/// (this process and a `fleet_member` process, seen by the heartbeat before the outage;
/// each of the pair's limiters here plays this instance): the fallback enforces its half,
/// allow admits everything, deny nothing; a limit with its own policy follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_each_policy_admits_while_redis_is_down() {
    const RATE: u32 = 10;
    const BURST: u32 = 20;
    let limit = Limit::per_second(RATE).burst(BURST);
    let mut server = RedisServer::start();
    let policies = [
        FailurePolicy::Fallback,
        FailurePolicy::Allow,
        FailurePolicy::Deny,
    ];
    let mut pairs = Vec::new();
    let mut others = Vec::new();
    for policy in policies {
        let prefix = format!("{policy:?}").to_lowercase();
        // The second instance is another process: limiters of one process count as one.
        let other = OtherInstance::start(&server.url(), &prefix, None);
        other.expect("READY");
        others.push(other);
        let mut pair = Vec::new();
        for _ in 0..2 {
            let l = RateLimiter::builder()
                .redis(server.url())
                .prefix(prefix.as_str())
                .deadline(Some(TOLERANT_DEADLINE))
                .failure_policy(policy)
                .build()
                .await
                .unwrap();
            pair.push(l);
        }
        pairs.push((policy, pair));
    }
    // The heartbeats see both instances of each pair.
    let all: Vec<RateLimiter> = pairs.iter().flat_map(|p| p.1.clone()).collect();
    let seen = wait_for(Duration::from_secs(10), || {
        all.iter().all(|l| l.live_instances() == 2)
    })
    .await;
    assert!(seen.is_some(), "the heartbeat saw 2 instances per prefix");
    for l in &all {
        assert_eq!(l.check("warm", &limit).await.unwrap().source, Source::Store);
    }

    server.kill();
    let t_kill = Instant::now();
    let mut loads = Vec::new();
    for (policy, pair) in &pairs {
        for (i, l) in pair.iter().enumerate() {
            let label = format!("{policy:?} instance {}", i + 1);
            let load = Load::start(l, vec!["k".to_owned()], limit, 4, Duration::from_millis(5));
            loads.push((*policy, label, load));
        }
    }
    // A limit's own policy wins over its limiter's: fail closed on a fallback limiter, open
    // on a deny limiter.
    for (own, on) in [
        (FailurePolicy::Deny, FailurePolicy::Fallback),
        (FailurePolicy::Allow, FailurePolicy::Deny),
    ] {
        let l = &pairs.iter().find(|p| p.0 == on).unwrap().1[0];
        let label = format!("{on:?} instance 1, a limit with policy {own:?}");
        let keys = vec!["own-policy".to_owned()];
        let load = Load::start(l, keys, limit.on_failure(own), 4, Duration::from_millis(5));
        loads.push((own, label, load));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut results = Vec::new();
    for (policy, label, load) in loads {
        results.push((policy, label, load.stop().await));
    }
    let outage = t_kill.elapsed();
    let secs = outage.as_secs_f64();
    // This instance's share: half the burst, and half the rate over the whole outage.
    let share_bound = usize::try_from(BURST / 2).unwrap()
        + usize::try_from((u128::from(RATE) * outage.as_micros()).div_ceil(2 * 1_000_000)).unwrap();
    for (policy, label, calls) in &results {
        assert_no_errors(calls);
        let expected = policy_source(*policy);
        assert!(
            calls.iter().all(|c| c.source() == Some(expected)),
            "{label}: every call decided by the policy ({expected:?})"
        );
        let admitted = calls.iter().filter(|c| c.allowed()).count();
        let promise = match policy {
            FailurePolicy::Fallback => format!(
                "<= burst/2 + rate/2 x {secs:.2} s = {share_bound} (its share of {limit}), \
                 >= burst/2"
            ),
            FailurePolicy::Allow => format!("all {}", calls.len()),
            _ => "none".to_owned(),
        };
        println!(
            "outage {secs:.2} s, {label}: {admitted} of {} calls admitted (promise: {promise})",
            calls.len()
        );
        match policy {
            FailurePolicy::Fallback => {
                assert!(
                    admitted <= share_bound,
                    "{label}: {admitted} > {share_bound}"
                );
                assert!(admitted >= (BURST / 2) as usize, "{label}: {admitted}");
            }
            FailurePolicy::Allow => assert_eq!(admitted, calls.len(), "{label}"),
            _ => assert_eq!(admitted, 0, "{label}"),
        }
    }
    server.restart();
    for l in &all {
        let back = common::until_store(
            l,
            "after",
            &limit,
            Duration::from_millis(20),
            Duration::from_secs(10),
        )
        .await;
        assert!(back.is_some(), "{l:?} back on Redis");
    }
}

/// Holds every client of `server` for `ms` milliseconds.
async fn pause(server: &RedisServer, ms: u64) {
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
}

/// Two short outages in a row: the first starts from what Redis had left, and the second
/// goes on from what the first left (or from what Redis said since, if less), never from a
/// fresh share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_outages_never_hand_out_the_share_again() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("short")
        .build()
        .await
        .unwrap();
    let limit = Limit::per_hour(10);
    for _ in 0..4 {
        let d = limiter.check("k", &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (true, Source::Store));
    }
    let outage = async |what: &str| {
        pause(&server, 600).await;
        let mut admitted = 0;
        for _ in 0..10 {
            let d = limiter.check("k", &limit).await.unwrap();
            assert_eq!(d.source, Source::Fallback, "{what}: {d:?}");
            admitted += u32::from(d.allowed);
        }
        admitted
    };
    assert_eq!(outage("the first outage").await, 6, "what Redis had left");
    // Redis answers again. It never heard of the fallback's 6, and admits one more (fewer
    // are left if it ran the scripts of calls that had given up at the deadline).
    let start = Instant::now();
    let back = loop {
        let d = limiter.check("k", &limit).await.unwrap();
        if d.source == Source::Store {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "Redis never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(back.allowed && back.remaining <= 5, "{back:?}");
    assert_eq!(
        outage("the second outage").await,
        0,
        "the first outage's 6 are spent"
    );
}
