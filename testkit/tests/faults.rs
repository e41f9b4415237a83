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
    Call, Load, OtherInstance, OtherVersion, TOLERANT_DEADLINE, assert_no_errors, logs, ms, pause,
    policy_source,
};
use ratelimit_core::{FailurePolicy, Limit, RateLimiter, Source, defaults::DEFAULT_DEADLINE};
use testkit::RedisServer;
use testkit::wait::{eventually, poll};

/// Whether the server holds this version's function library.
async fn library_loaded(server: &RedisServer) -> bool {
    common::holds_library(&mut server.connection().await).await
}

/// Waits until [`library_loaded`]: loaded again in the limiter's background, which says
/// nothing when it has.
async fn library_loaded_soon(server: &RedisServer) {
    eventually("the library loaded again", async || {
        library_loaded(server).await
    })
    .await;
}

/// A server on which `FUNCTION` is renamed away: no library can be loaded, so a limiter
/// decides by `EVALSHA`, as on a server whose ACL denies `FUNCTION`.
fn server_without_functions() -> RedisServer {
    RedisServer::start_with(&["--rename-command", "FUNCTION", ""])
}

/// `field` of `INFO <section>` as a number (0 when absent).
async fn info_number(server: &RedisServer, section: &str, line: &str, field: &str) -> u64 {
    common::info_field(&mut server.connection().await, section, line, field).await
}

/// How many times the server ran a script or a function (`FCALL`, `EVALSHA` and `EVAL`).
async fn script_runs(server: &RedisServer) -> u64 {
    let mut con = server.connection().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await
        .unwrap();
    testkit::script_calls(&info)
}

/// The instant `cond` first held, asked for at most `within` (`None` after).
async fn when(within: Duration, mut cond: impl FnMut() -> bool) -> Option<Instant> {
    poll(within, async || cond().then(Instant::now).ok_or(""))
        .await
        .ok()
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
    let degraded_at = when(Duration::from_secs(5), || limiter.is_degraded()).await;
    let until = t_kill + Duration::from_secs(5);
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    assert!(limiter.is_degraded(), "still degraded while Redis is down");

    // Calls that end after this may have been answered by the restarted server.
    let t_restarting = Instant::now();
    server.restart();
    let t_restart = Instant::now();
    let healthy_at = when(Duration::from_secs(10), || !limiter.is_degraded()).await;
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
    library_loaded_soon(&server).await;
    assert!(!limiter.is_degraded());
    let entering = logs::matching("killed", "entering degraded mode");
    let when = |lines: &[logs::Line]| -> Vec<String> {
        lines
            .iter()
            .map(|l| {
                let kill = l.at.saturating_duration_since(t_kill).as_secs_f64() * 1e3;
                let restart = l.at.saturating_duration_since(t_restart).as_secs_f64() * 1e3;
                format!(
                    "{kill:.1} ms after the kill, {restart:.1} ms after the restart: {}",
                    l.fields
                )
            })
            .collect()
    };
    assert_eq!(
        entering.len(),
        1,
        "one line on entering degraded mode: {:#?}; left at {:#?}",
        when(&entering),
        when(&logs::matching("killed", "leaving degraded mode"))
    );
    let leaving = logs::matching("killed", "leaving degraded mode");
    assert_eq!(
        leaving.len(),
        1,
        "one line on leaving degraded mode: {leaving:#?}"
    );
}

/// What a hot key admitted while `flush` (`SCRIPT FLUSH`, `FUNCTION FLUSH`) ran again and
/// again under load, with every call checked to be Redis's decision.
struct Flushed {
    calls: usize,
    admitted: usize,
    flushes: u32,
}

/// Runs a load of 8 tasks on one hot key with a slow refill while `flush` runs every 5 ms,
/// until Redis has run [`FLUSHED_CALLS`] scripts and seen [`FLUSHES`] flushes (counts, not a
/// time: a loaded machine makes fewer calls a second, and only takes longer); the deny cache
/// is off, so that every call, refused ones too, runs the script.
async fn flush_under_load(server: &RedisServer, flush: &[&str]) -> Flushed {
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
    let hot = Limit::per_hour(1).burst(BURST);
    let load = Load::start(
        &limiter,
        vec!["hot".to_owned()],
        hot,
        8,
        Duration::from_micros(500),
    );
    let mut con = server.connection().await;
    let runs_before = script_runs(server).await;
    let mut flushes = 0u32;
    loop {
        let runs = script_runs(server).await - runs_before;
        if runs >= FLUSHED_CALLS && flushes >= FLUSHES {
            break;
        }
        // The load stops by itself at its cap: a hang, not a slow machine.
        assert!(
            !load.finished(),
            "the load ended after {runs} scripts and {flushes} flushes"
        );
        let _: () = redis::cmd(flush[0])
            .arg(&flush[1..])
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
    assert!(
        calls.len() > 2 * BURST as usize,
        "more calls than the burst: {}",
        calls.len()
    );
    assert!(
        nonstore.is_empty(),
        "{} calls were not decided by Redis, e.g. {:?}",
        nonstore.len(),
        nonstore.first()
    );
    let admitted = calls.iter().filter(|c| c.allowed()).count();
    assert_eq!(admitted, BURST as usize, "exactly the burst was admitted");
    Flushed {
        calls: calls.len(),
        admitted,
        flushes,
    }
}

const BURST: u32 = 300;
/// Scripts Redis runs under the flushes before the load stops (the burst's 300 and more).
const FLUSHED_CALLS: u64 = 1000;
/// Flushes made under the load before it stops.
const FLUSHES: u32 = 100;

/// (b) `SCRIPT FLUSH` again and again under load: every call is still decided by Redis, and
/// one hot key with a slow refill admits exactly its burst. With functions, the flushes touch
/// nothing the limiter runs; without (a server that refuses `FUNCTION`), every flush makes
/// the script go missing, and each call that meets that runs it by `EVAL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_under_load_changes_nothing() {
    let server = RedisServer::start();
    let f = flush_under_load(&server, &["SCRIPT", "FLUSH"]).await;
    let noscript = info_number(&server, "errorstats", "errorstat_NOSCRIPT", "count").await;
    let fcalls = info_number(&server, "commandstats", "cmdstat_fcall", "calls").await;
    println!(
        "script flush, functions: {} SCRIPT FLUSH, {} calls, {} admitted; {noscript} NOSCRIPT, \
         {fcalls} FCALL",
        f.flushes, f.calls, f.admitted
    );
    assert_eq!(noscript, 0, "no call ran a script");
    assert!(fcalls > 0, "calls ran by FCALL");

    let server = server_without_functions();
    let f = flush_under_load(&server, &["SCRIPT", "FLUSH"]).await;
    let noscript = info_number(&server, "errorstats", "errorstat_NOSCRIPT", "count").await;
    let evals = info_number(&server, "commandstats", "cmdstat_eval", "calls").await;
    let fcalls = info_number(&server, "commandstats", "cmdstat_fcall", "calls").await;
    println!(
        "script flush, EVALSHA: {} SCRIPT FLUSH, {} calls, {} admitted; {noscript} NOSCRIPT, \
         {evals} EVAL",
        f.flushes, f.calls, f.admitted
    );
    assert!(noscript > 0, "the flushes made the script go missing");
    assert!(evals > 0, "the calls that met it ran by EVAL");
    assert_eq!(
        fcalls, 0,
        "a server without FUNCTION is called by EVALSHA only"
    );
}

/// A user whose ACL denies `FUNCTION` gets a limiter that decides by `EVALSHA`, chosen at
/// `build` and said in the store's `Debug`; so does one that may load functions but not call
/// them (`FUNCTION LOAD` is in `@write`, `FCALL` in `@scripting`: an ACL written for a client
/// that runs scripts by `EVALSHA`). One that may do both decides by `FCALL`.
#[tokio::test]
async fn an_acl_without_function_means_evalsha() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    for (user, rules) in [
        (
            "scripts",
            &["on", ">pw", "~*", "&*", "+@all", "-function"][..],
        ),
        ("functions", &["on", ">pw", "~*", "&*", "+@all"][..]),
        (
            "loads_only",
            &["on", ">pw", "~*", "&*", "+@all", "-fcall", "-fcall_ro"][..],
        ),
    ] {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg(rules)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    for (user, command) in [
        ("scripts", "evalsha"),
        ("functions", "fcall"),
        ("loads_only", "evalsha"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut con)
            .await
            .unwrap();
        let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
        let limiter = RateLimiter::builder()
            .redis(url.as_str())
            .prefix(user)
            .build()
            .await
            .unwrap();
        let limit = Limit::per_hour(1).burst(2);
        for allowed in [true, true, false] {
            let d = limiter.check("k", &limit).await.unwrap();
            assert_eq!((d.allowed, d.source), (allowed, Source::Store), "{user}");
        }
        let calls = info_number(
            &server,
            "commandstats",
            &format!("cmdstat_{command}"),
            "calls",
        )
        .await;
        assert!(calls >= 3, "{user}: {calls} {command}");
        let debug = format!("{limiter:?}");
        assert_eq!(debug.contains("EVALSHA"), command == "evalsha", "{debug}");
    }
}

/// `FCALL` refused while the limiter runs (an ACL changed; ACLs are each node's own, so a
/// failover can do the same): the call that meets it is still decided by Redis, by `EVAL` of
/// its script, and the limiter decides by `EVALSHA` from then on, saying so in its `Debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fcall_refused_later_means_evalsha_from_then_on() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let acl = |rules: &'static [&'static str]| {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("app").arg(rules);
        cmd
    };
    let _: () = acl(&["on", ">pw", "~*", "&*", "+@all"])
        .query_async(&mut con)
        .await
        .unwrap();
    let limiter = RateLimiter::builder()
        .redis(format!("redis://app:pw@127.0.0.1:{}", server.port()).as_str())
        .prefix("acl")
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    let limit = Limit::per_hour(1).burst(3);
    let d = limiter.check("k", &limit).await.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::Store));
    assert!(!format!("{limiter:?}").contains("EVALSHA"));

    let _: () = acl(&["-fcall", "-fcall_ro"])
        .query_async(&mut con)
        .await
        .unwrap();
    for (allowed, remaining) in [(true, 1), (true, 0), (false, 0)] {
        let d = limiter.check("k", &limit).await.unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.source),
            (allowed, remaining, Source::Store)
        );
    }
    let debug = format!("{limiter:?}");
    assert!(debug.contains("EVALSHA"), "{debug}");
    let evalsha = info_number(&server, "commandstats", "cmdstat_evalsha", "calls").await;
    assert!(
        evalsha >= 1,
        "the calls after the first went by EVALSHA: {evalsha}"
    );
}

/// The least ACL of docs/operations.md is enough for everything a limiter does: every
/// algorithm, several limits, a peek, a concurrency limit, a reset, the heartbeat and the
/// reset listener, and a lost library (the call that meets it by `EVAL`, then the library
/// loaded again). Every decision is Redis's, and `ACL LOG` stays empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_acl_in_the_docs_is_enough() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    common::set_least_acl(&mut con).await;
    let url = format!("redis://ratelimit:pw@127.0.0.1:{}", server.port());
    let limiter = common::least_acl_limiter(&url).await;
    let calls = common::everything_once(&limiter).await;
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    let d = limiter.check("lost", &Limit::per_hour(1)).await.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::Store));
    library_loaded_soon(&server).await;
    // A lease renewal (every third of the lease): a slot held under a lease of 300 ms until
    // the renewal moves its expiry (the slot's score) on.
    let short = Limit::concurrent(1).lease(Duration::from_millis(300));
    let held = limiter.enter("renewed", &short).await.unwrap();
    assert!(held.slot.is_some());
    let key = limiter.bucket_key("renewed");
    let mut score = async || -> f64 {
        let slots: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut con)
            .await
            .unwrap();
        slots.iter().map(|s| s.1).fold(0.0, f64::max)
    };
    let first = score().await;
    eventually("the lease renewed", async || score().await > first).await;
    drop(held);
    let log = common::acl_log(&mut con).await;
    println!("least ACL: {} calls, ACL LOG {log:?}", calls + 1);
    assert!(log.is_empty(), "{log:#?}");
    assert_eq!(
        limiter.live_instances(),
        1,
        "the heartbeat counted this one"
    );
}

/// A limiter that Redis will not give its decisions, because it will not take the library,
/// is not built: `build()` fails with `Error::ScriptLoad`, naming the URL (without its
/// password) and Redis's answer. A URL that names a replica; a server full to `maxmemory`
/// with `noeviction`; a user whose ACL lacks a command the scripts call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_or_a_full_server_fails_build_with_script_load() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "u", "on", ">s3cret", "~*", "&*", "+@all"])
        .query_async(&mut replica.connection().await)
        .await
        .unwrap();
    let full = RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
    let mut con = full.connection().await;
    let big = "x".repeat(100_000);
    let mut filled = false;
    for i in 0..1000 {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("fill{i}"))
            .arg(&big)
            .query_async(&mut con)
            .await;
        if set.is_err() {
            filled = true;
            break;
        }
    }
    assert!(filled, "the server filled up");
    // A user with the least ACL but `TIME`, which every script calls.
    let rules: Vec<String> = common::least_acl()
        .into_iter()
        .filter(|r| r != "+time")
        .collect();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("notime")
        .arg(rules)
        .query_async(&mut master.connection().await)
        .await
        .unwrap();
    // Servers word an ACL refusal inside a script each their own way (Redis 7.0: "can't run
    // this command or subcommand", Valkey: "ACL failure in script: ... no permissions to run
    // the 'time' command"): an `ERR` reply on each, and `ACL LOG` says which command (below).
    for (url, answer) in [
        (
            format!("redis://u:s3cret@127.0.0.1:{}", replica.port()),
            "read only replica",
        ),
        (full.url(), "OOM"),
        (
            format!("redis://notime:pw@127.0.0.1:{}", master.port()),
            "ResponseError",
        ),
    ] {
        let e = RateLimiter::builder()
            .redis(url.as_str())
            .build()
            .await
            .unwrap_err();
        let text = e.to_string();
        println!("{text}");
        assert!(
            matches!(e, ratelimit_core::Error::ScriptLoad { .. }),
            "{e:?}"
        );
        assert!(text.contains(answer), "{text}");
        assert!(
            text.contains("127.0.0.1") && !text.contains("s3cret"),
            "{text}"
        );
    }
    // What every server agrees on: its ACL refused `TIME` to that user, inside a script.
    let log = common::acl_log(&mut master.connection().await).await;
    assert!(
        log.iter().any(|entry| {
            let fields: Vec<&str> = entry.split(' ').collect();
            let field = |name: &str| {
                fields
                    .iter()
                    .position(|f| *f == name)
                    .and_then(|i| fields.get(i + 1))
                    .copied()
            };
            (field("object"), field("context"), field("username"))
                == (Some("time"), Some("lua"), Some("notime"))
        }),
        "ACL LOG names the refused TIME: {log:#?}"
    );
}

/// (b') `FUNCTION FLUSH` again and again under load: every call is still decided by Redis,
/// exactly the burst is admitted, the calls that met a missing function ran by `EVAL`, and
/// the library is loaded again (by one load at a time, not one per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_under_load_changes_nothing() {
    let server = RedisServer::start();
    let f = flush_under_load(&server, &["FUNCTION", "FLUSH"]).await;
    let missing = info_number(&server, "errorstats", "errorstat_ERR", "count").await;
    let evals = info_number(&server, "commandstats", "cmdstat_eval", "calls").await;
    let loads = info_number(&server, "commandstats", "cmdstat_function|load", "calls").await;
    println!(
        "function flush: {} FUNCTION FLUSH, {} calls, {} admitted; {missing} missing, {evals} \
         EVAL, {loads} FUNCTION LOAD",
        f.flushes, f.calls, f.admitted
    );
    assert!(missing > 0, "the flushes made the functions go missing");
    assert!(evals > 0, "the calls that met that ran by EVAL");
    assert!(loads > 1, "the library was loaded again: {loads} loads");
    assert!(
        loads <= 3 * u64::from(f.flushes) + 1,
        "a few loads per flush, not one per call: {loads} for {} flushes",
        f.flushes
    );
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
    // Functions are kept with the data: nothing to load again.
    assert!(
        library_loaded(&server).await,
        "the library survived the restart"
    );
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
    let d = common::until_store(&limiter, "k", &limit).await;
    println!(
        "aof: back on Redis {:.1} ms after the restart; retry_after {:?}",
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

/// (c') A rolling deploy: two versions of the crate on one server, each with its own library
/// (another version's code has another hash, so another name and other functions). The new
/// version's `FUNCTION LOAD REPLACE` leaves the old one's library in place, calls of both
/// versions on one bucket share it exactly, and the old one keeps working to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_versions_on_one_server_each_run_their_own_library() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let old = OtherVersion::new();
    old.load(&mut con).await;

    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("deploy")
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        libraries.len(),
        2,
        "both versions' libraries: {libraries:?}"
    );
    assert!(
        old.loaded(&mut con).await,
        "the new version left the old one's library"
    );

    // One bucket of 10, called in turn by the old version's function and the new limiter.
    let limit = Limit::per_hour(1).burst(10);
    let (admitted, refused) = old.take_turns(&mut con, &limiter, "shared", &limit).await;
    assert_eq!(
        admitted,
        [5, 5],
        "each version took its turn of one bucket of 10"
    );
    assert!(
        refused,
        "the old version sees the bucket the new one emptied"
    );
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
    eventually("Redis decides again after the pause", async || {
        !limiter.is_degraded()
    })
    .await;
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
    // No call waited for the pause: one that began a deadline or more before its end and was
    // answered by Redis would have (the latencies, whatever the machine's speed, are printed).
    let waited: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start > t_pause + Duration::from_millis(100))
        .filter(|c| c.start + deadline < pause_end && c.source() == Some(Source::Store))
        .collect();
    assert!(
        waited.is_empty(),
        "{} calls waited for the pause, e.g. {:?}",
        waited.len(),
        waited.first()
    );
    assert!(back.is_some(), "Redis decides again after the pause");
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
    eventually("the heartbeat seeing 2 instances per prefix", async || {
        all.iter().all(|l| l.live_instances() == 2)
    })
    .await;
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
    // The pair's limiters are one instance and share its fallback: the lower bound is the
    // pair's (on a loaded machine one of them took 8 of the share, the other the rest).
    let mut by_the_pair = 0;
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
                 the pair >= burst/2"
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
                by_the_pair += admitted;
            }
            FailurePolicy::Allow => assert_eq!(admitted, calls.len(), "{label}"),
            _ => assert_eq!(admitted, 0, "{label}"),
        }
    }
    assert!(
        by_the_pair >= (BURST / 2) as usize,
        "the fallback's pair admitted {by_the_pair}, less than its half of the burst"
    );
    server.restart();
    for l in &all {
        common::until_store(l, "after", &limit).await;
    }
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
    let back = common::until_store(&limiter, "k", &limit).await;
    assert!(back.allowed && back.remaining <= 5, "{back:?}");
    assert_eq!(
        outage("the second outage").await,
        0,
        "the first outage's 6 are spent"
    );
}
