//! Redis Sentinel: a real local deployment per test (a master, a replica, three sentinels).
//! When the master dies, or is demoted by a forced failover while it still runs, the limiter
//! follows the master the sentinels name, with no error ever reaching a caller.
//!
//! Timings are measured and printed (run with `--nocapture`); their assertions are generous.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::time::{Duration, Instant};

use common::{
    Call, Load, OtherVersion, TOLERANT_DEADLINE, assert_no_errors, holds_library, info_field, ms,
    replicated,
};
use ratelimit_core::{Limit, RateLimiter, Source};
use testkit::sentinel::SentinelSetup;
use testkit::wait::{eventually, eventually_ok, poll};

/// A limiter on `setup` through its sentinels, under `prefix`.
async fn limiter(setup: &SentinelSetup, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .redis(setup.url())
        .prefix(prefix)
        .deadline(Some(TOLERANT_DEADLINE))
        .build()
        .await
        .unwrap()
}

struct Run {
    calls: Vec<Call>,
    t_fault: Instant,
    t_promoted: Instant,
    new_master: u16,
}

/// Runs a load, applies `fault` (which returns the old master's port), waits until the
/// sentinels name a new master, and keeps the load running until Redis decides again
/// (at most 30 s) and 1 s more.
async fn failover_under_load(
    setup: &mut SentinelSetup,
    limiter: &RateLimiter,
    fault: impl FnOnce(&mut SentinelSetup) -> u16,
) -> Run {
    let limit = Limit::per_second(1000).burst(1000);
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let load = Load::start(limiter, keys, limit, 6, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t_fault = Instant::now();
    let old = fault(setup);
    let new_master = setup.wait_new_master(old, Duration::from_secs(30)).unwrap();
    let t_promoted = Instant::now();
    common::until_store(limiter, "probe", &limit).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Run {
        calls: load.stop().await,
        t_fault,
        t_promoted,
        new_master,
    }
}

impl Run {
    fn check(&self, what: &str) {
        let calls = &self.calls;
        assert_no_errors(calls);
        assert!(
            calls
                .iter()
                .all(|c| c.by_redis() || c.source() == Some(Source::Fallback)),
            "only Redis or the fallback decide"
        );
        let promoted = self.t_promoted - self.t_fault;
        let back = calls
            .iter()
            .filter(|c| c.start > self.t_fault && c.by_redis())
            .map(|c| c.end)
            .find(|&end| {
                // The first store decision after which no call is decided by the fallback.
                calls.iter().filter(|c| c.start > end).all(Call::by_redis)
            })
            .map(|t| t - self.t_fault);
        let fallback = calls
            .iter()
            .filter(|c| c.source() == Some(Source::Fallback))
            .count();
        println!(
            "{what}: {} calls, {fallback} decided by the fallback; sentinels named the new master \
             {:.1} ms after the fault; Redis decided again for good {:?} ms after the fault",
            calls.len(),
            ms(promoted),
            back.map(ms)
        );
        let back = back.expect("Redis decides again after the failover");
        assert!(back < Duration::from_secs(30), "{back:?}");
    }
}

/// The master is killed under load: the sentinels promote the replica, the limiter finds it
/// and Redis decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_follows_the_new_master_after_the_old_one_dies() {
    let t0 = Instant::now();
    let mut setup = SentinelSetup::start();
    println!("sentinel: deployment ready in {:.0} ms", ms(t0.elapsed()));
    let limiter = limiter(&setup, "sd").await;
    let limit = Limit::per_hour(1).burst(3);
    assert_eq!(
        limiter.check("x", &limit).await.unwrap().source,
        Source::Store
    );
    let run = failover_under_load(&mut setup, &limiter, SentinelSetup::kill_master).await;
    run.check("sentinel, master killed");
    // New buckets are written to the new master.
    let d = limiter.check("after", &limit).await.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::Store));
    let mut con = setup.server(run.new_master).connection().await;
    let exists: u32 = redis::cmd("EXISTS")
        .arg(limiter.bucket_key("after"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(exists, 1, "the bucket is on the new master");
    // Functions are replicated: the new master had the library when it was promoted, and
    // no call it decided had to run by EVAL.
    let library: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(ratelimit_core::tools::scripts::library().name())
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(library.len(), 1, "the new master holds the library");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await
        .unwrap();
    let calls = |line| testkit::info_number(&info, line, Some("calls")).unwrap_or(0);
    assert_eq!(calls("cmdstat_eval"), 0, "no call met a missing function");
    assert!(
        calls("cmdstat_fcall") > 0,
        "the new master decided by FCALL"
    );
}

/// One call on the fresh key `key`: whether the store decided it and wrote its bucket on the
/// node of `con` (the limiter decides there).
async fn decided_on(
    limiter: &RateLimiter,
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    limit: &Limit,
) -> bool {
    let d = limiter.check(key, limit).await.unwrap();
    let exists: u32 = redis::cmd("EXISTS")
        .arg(limiter.bucket_key(key))
        .query_async(con)
        .await
        .unwrap();
    d.source == Source::Store && exists == 1
}

/// `SENTINEL FAILOVER` under load: the replica is promoted while the old master still runs.
/// The sentinels demote the old master only seconds later (about ten); meanwhile it still
/// accepts writes, so a limiter that stayed on it would keep buckets apart from every
/// instance that found the new master (each side admitting the full limit). The limiter
/// moves to the master the sentinels name within a few seconds, before the demotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_leaves_a_demoted_master() {
    let mut setup = SentinelSetup::start();
    let limiter = limiter(&setup, "sf").await;
    let old = setup.master_port().unwrap();
    let run = failover_under_load(&mut setup, &limiter, |s| {
        s.force_failover().unwrap();
        old
    })
    .await;
    run.check("sentinel, forced failover");
    let limit = Limit::per_hour(1).burst(3);
    let mut con = setup.server(run.new_master).connection().await;
    // Measured, not required: for at most 8 s after the sentinels named it.
    let mut i = 0;
    let within = Duration::from_secs(8).saturating_sub(run.t_promoted.elapsed());
    let moved = poll(within, async || {
        i += 1;
        let on_new = decided_on(&limiter, &mut con, &format!("after{i}"), &limit).await;
        on_new.then(|| run.t_promoted.elapsed()).ok_or("")
    })
    .await
    .ok();
    let old_role: redis::Value = redis::cmd("ROLE")
        .query_async(&mut setup.server(old).connection().await)
        .await
        .unwrap();
    let old_still_master = matches!(&old_role, redis::Value::Array(v) if matches!(v.first(), Some(redis::Value::BulkString(b)) if b == b"master"));
    println!(
        "sentinel, forced failover: buckets written to the new master {:?} ms after the \
         sentinels named it (the old master was {} a master then)",
        moved.map(ms),
        if old_still_master {
            "still"
        } else {
            "no longer"
        }
    );
    let moved = moved.expect("the limiter writes to the new master within 8 s of its promotion");
    assert!(moved < Duration::from_secs(8));
}

/// Through Sentinel, concurrent calls leave in batches to the master the sentinels name: the
/// master runs fewer scripts than it decides calls, and each call is decided exactly as if
/// alone (of two calls on one bucket of 1, exactly one goes in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_batched_on_the_master() {
    let setup = SentinelSetup::start();
    let limiter = limiter(&setup, "sb").await;
    let one = Limit::per_hour(1).burst(1);
    // Load the scripts.
    limiter.check("warm", &one).await.unwrap();
    let master = setup.server(setup.data_ports()[0]);
    let before = master.script_calls().await;
    let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    let calls = keys.iter().chain(&keys).map(|k| limiter.check(k, &one));
    let decisions = futures_util::future::join_all(calls).await;
    let mut admitted = std::collections::BTreeMap::<&str, usize>::new();
    for (k, d) in keys.iter().chain(&keys).zip(decisions) {
        let d = d.unwrap();
        assert_eq!(d.source, Source::Store, "{k}: {d:?}");
        *admitted.entry(k.as_str()).or_default() += usize::from(d.allowed);
    }
    assert!(admitted.values().all(|&n| n == 1), "{admitted:?}");
    let ran = master.script_calls().await - before;
    assert!(ran < 200, "200 calls took {ran} scripts on the master");
}

/// Functions on a Sentinel deployment, from the first load to a failover:
/// - the library reaches the replica by replication;
/// - a master that loses it (`FUNCTION FLUSH`) decides by `EVAL`, exactly, and gets it back;
/// - `SCRIPT FLUSH` touches nothing the limiter runs;
/// - another version's library lives beside this one (a rolling deploy), and both versions
///   share one bucket exactly;
/// - a replica restarted empty gets both libraries back by replication;
/// - after a failover the new master holds both libraries and decides by `FCALL`, with every
///   bucket as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_survive_flushes_a_second_version_and_a_failover() {
    let mut setup = SentinelSetup::start();
    let limiter = RateLimiter::builder()
        .redis(setup.url())
        .prefix("fs")
        .deadline(Some(TOLERANT_DEADLINE))
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    let master = setup.master_port().unwrap();
    let replica = *setup.data_ports().iter().find(|&&p| p != master).unwrap();
    let mut m = setup.server(master).connection().await;
    let mut r = setup.server(replica).connection().await;
    assert!(holds_library(&mut m).await, "the master holds the library");
    replicated(&mut m).await;
    assert!(
        holds_library(&mut r).await,
        "the replica holds it by replication"
    );

    // FUNCTION FLUSH (replicated: the replica loses it too).
    let limit = Limit::per_hour(1).burst(10);
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut m)
        .await
        .unwrap();
    for _ in 0..3 {
        let d = limiter.check("a", &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (true, Source::Store));
    }
    // Loaded again by the limiter in the background: nothing to wait for but the library.
    eventually("the master to have the library again", async || {
        holds_library(&mut m).await
    })
    .await;
    replicated(&mut m).await;
    assert!(holds_library(&mut r).await, "and so has the replica");
    let evals = info_field(&mut m, "commandstats", "cmdstat_eval", "calls").await;
    assert!(
        evals > 0,
        "the calls that met the missing library ran by EVAL"
    );

    // SCRIPT FLUSH.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut m)
        .await
        .unwrap();
    let d = limiter.check("a", &limit).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.source), (true, 6, Source::Store));
    let noscript = info_field(&mut m, "errorstats", "errorstat_NOSCRIPT", "count").await;
    assert_eq!(noscript, 0, "no call ran a script");

    // A second version beside this one.
    let other = OtherVersion::new();
    other.load(&mut m).await;
    let (admitted, refused) = other.take_turns(&mut m, &limiter, "shared", &limit).await;
    assert_eq!(admitted, [5, 5], "each version took its turn of one bucket");
    assert!(
        refused,
        "the other version sees the bucket this one emptied"
    );
    replicated(&mut m).await;
    assert!(
        other.loaded(&mut r).await,
        "the replica holds the other version's library too"
    );
    // The replica restarts empty (no persistence) and gets everything back by a full sync
    // from the master, both libraries included.
    setup.restart(replica).unwrap();
    let mut r = setup.server(replica).connection().await;
    assert!(
        holds_library(&mut r).await && other.loaded(&mut r).await,
        "the restarted replica holds both libraries"
    );
    // Every write has reached the replica before it is promoted.
    replicated(&mut m).await;

    // The failover. The sentinels may refuse it for a moment after the replica's restart,
    // until they see it healthy again.
    eventually_ok("the sentinels taking the failover", async || {
        setup.force_failover()
    })
    .await;
    let promoted = setup
        .wait_new_master(master, Duration::from_secs(30))
        .unwrap();
    assert_eq!(promoted, replica);
    // A node's clients are dropped when its role changes.
    let mut r = setup.server(replica).connection().await;
    // The limiter leaves the old master within seconds (it still accepts writes for a while):
    // wait until a fresh bucket is written to the new one.
    let probe = Limit::per_hour(1).burst(1000);
    let mut i = 0;
    eventually("the limiter deciding on the new master", async || {
        i += 1;
        decided_on(&limiter, &mut r, &format!("probe{i}"), &probe).await
    })
    .await;
    assert!(holds_library(&mut r).await && other.loaded(&mut r).await);
    // Every bucket as it was: the shared one empty for both versions, "a" with 6 left.
    let d = limiter.check("shared", &limit).await.unwrap();
    assert_eq!((d.allowed, d.source), (false, Source::Store));
    assert!(
        !other
            .check(&mut r, &limiter.bucket_key("shared"), &limit)
            .await
    );
    for left in (0..6).rev() {
        let d = limiter.check("a", &limit).await.unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.source),
            (true, left, Source::Store)
        );
    }
    let d = limiter.check("a", &limit).await.unwrap();
    assert_eq!((d.allowed, d.source), (false, Source::Store));
    let fcalls = info_field(&mut r, "commandstats", "cmdstat_fcall", "calls").await;
    let evals = info_field(&mut r, "commandstats", "cmdstat_eval", "calls").await;
    println!("sentinel, after the failover: the new master ran {fcalls} FCALL, {evals} EVAL");
    assert!(fcalls >= 8, "the new master decides by FCALL: {fcalls}");
    assert_eq!(evals, 0, "no call on the new master met a missing function");
}

/// The least ACL of docs/operations.md, on every data node, is enough through Sentinel (the
/// URL's credentials are the data nodes'): everything a limiter does is Redis's decision, and
/// no data node's `ACL LOG` has an entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_acl_in_the_docs_is_enough_through_sentinel() {
    let setup = SentinelSetup::start();
    for port in setup.data_ports() {
        common::set_least_acl(&mut setup.server(port).connection().await).await;
    }
    let url = setup
        .url()
        .replace("redis+sentinel://", "redis+sentinel://ratelimit:pw@");
    let limiter = common::least_acl_limiter(&url).await;
    let calls = common::everything_once(&limiter).await;
    let mut logged = Vec::new();
    for port in setup.data_ports() {
        logged.extend(common::acl_log(&mut setup.server(port).connection().await).await);
    }
    println!("least ACL through Sentinel: {calls} calls, ACL LOG {logged:?}");
    assert!(logged.is_empty(), "{logged:#?}");
}
