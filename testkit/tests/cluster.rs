//! Redis Cluster: a real local cluster of six nodes per test (three masters, three replicas).
//! Limits hold on keys spread over every master; after a manual failover and after a master
//! is killed, Redis decides again within a bounded time, with no error ever reaching a caller.
//!
//! Timings are measured and printed (run with `--nocapture`); their assertions are generous.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Call, Load, OtherVersion, TOLERANT_DEADLINE, assert_no_errors, ms, strict_limiter};
use ratelimit_core::{Algorithm, FailurePolicy, Limit, RateLimiter, Source};
use testkit::cluster::RedisCluster;
use testkit::wait::eventually;

/// Keys `k0..` whose buckets are spread over the masters, grouped by the master serving them.
fn keys_by_master(
    cluster: &RedisCluster,
    limiter: &RateLimiter,
    n: usize,
) -> BTreeMap<u16, Vec<String>> {
    let mut by = BTreeMap::<u16, Vec<String>>::new();
    for i in 0..n {
        let key = format!("k{i}");
        by.entry(cluster.master_of_key(&limiter.bucket_key(&key)))
            .or_default()
            .push(key);
    }
    by
}

/// Whether `key` exists on the node on `port` itself (no redirection).
fn exists_on(cluster: &RedisCluster, port: u16, key: &str) -> bool {
    let mut con = cluster.node_connection(port).unwrap();
    // A node answers MOVED for a key of a slot it does not serve.
    redis::cmd("EXISTS")
        .arg(key)
        .query::<u32>(&mut con)
        .is_ok_and(|n| n == 1)
}

/// Many keys over every master, each admitting exactly its burst under concurrent calls;
/// every decision is Redis's (so no CROSSSLOT or other error ever happened).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_on_every_master() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "cl").await;
    let limit = Limit::per_hour(1).burst(5);
    let by = keys_by_master(&cluster, &limiter, 60);
    assert_eq!(
        by.keys().copied().collect::<BTreeSet<u16>>(),
        cluster.masters().into_iter().collect(),
        "the keys cover every master"
    );
    let keys: Vec<String> = by.values().flatten().cloned().collect();
    let mut tasks = Vec::new();
    for key in &keys {
        for _ in 0..2 {
            let limiter = limiter.clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for _ in 0..4 {
                    let d = limiter.check(&key, &limit).await.unwrap();
                    out.push((key.clone(), d.allowed, d.source));
                }
                out
            }));
        }
    }
    let mut admitted = BTreeMap::<String, usize>::new();
    for t in tasks {
        for (key, allowed, source) in t.await.unwrap() {
            // The deny cache only repeats refusals of Redis's.
            assert!(
                matches!(source, Source::Store | Source::DenyCache),
                "{key}: {source:?}"
            );
            *admitted.entry(key).or_default() += usize::from(allowed);
        }
    }
    for key in &keys {
        assert_eq!(admitted[key], 5, "{key} admitted exactly its burst");
    }
    for (master, ks) in &by {
        for k in ks {
            assert!(
                exists_on(&cluster, *master, &limiter.bucket_key(k)),
                "{k}'s bucket is on master {master}"
            );
        }
    }
    let per_master: Vec<usize> = by.values().map(Vec::len).collect();
    println!(
        "cluster: {} keys over masters {:?} ({per_master:?} keys each), each admitted exactly 5 \
         of 8 calls",
        keys.len(),
        by.keys().collect::<Vec<_>>()
    );
}

struct FailoverRun {
    calls: Vec<Call>,
    /// Keys (by index in the load's list) served by the master that failed.
    moved: BTreeSet<usize>,
    /// Keys of other masters that share a circuit (a group of 64 hash slots) with it.
    sharing: BTreeSet<usize>,
    t_fault: Instant,
    t_settled: Instant,
}

impl FailoverRun {
    /// Calls on the other masters' slots that Redis did not decide.
    fn nonstore_elsewhere(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| !self.moved.contains(&c.key) && !c.by_redis())
            .count()
    }

    /// Calls on keys that share no circuit with the failed master that Redis did not decide.
    fn nonstore_unrelated(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| {
                !self.moved.contains(&c.key) && !self.sharing.contains(&c.key) && !c.by_redis()
            })
            .count()
    }

    fn report(&self, what: &str) -> Duration {
        let calls = &self.calls;
        assert_no_errors(calls);
        assert!(
            calls
                .iter()
                .all(|c| c.by_redis() || c.source() == Some(Source::Fallback)),
            "only Redis or the fallback decide"
        );
        let nonstore = |moved: bool| {
            calls
                .iter()
                .filter(|c| self.moved.contains(&c.key) == moved)
                .filter(|c| !c.by_redis())
                .count()
        };
        let first_store_after = |t: Instant| {
            calls
                .iter()
                .find(|c| {
                    c.start > t && self.moved.contains(&c.key) && c.source() == Some(Source::Store)
                })
                .map(|c| c.end)
        };
        let settle = self.t_settled - self.t_fault;
        let back = first_store_after(self.t_settled).map(|t| t - self.t_settled);
        let last_nonstore = calls
            .iter()
            .filter(|c| !c.by_redis())
            .map(|c| c.end)
            .max()
            .map(|t| t.saturating_duration_since(self.t_fault));
        println!(
            "{what}: {} calls; cluster settled {:.1} ms after the fault; first store decision on \
             the failed master's slots {:?} ms after it settled; last non-store decision {:?} ms \
             after the fault; non-store decisions: {} on its slots, {} on other masters' slots",
            calls.len(),
            ms(settle),
            back.map(ms),
            last_nonstore.map(ms),
            nonstore(true),
            nonstore(false)
        );
        // How soon is printed above: a loaded machine makes it later, not wrong.
        let back = back.expect("Redis decides again on the failed master's slots");
        let tail = calls
            .iter()
            .filter(|c| c.start > self.t_settled + back + Duration::from_secs(1));
        let (n, bad) = tail.fold((0, 0), |(n, bad), c| {
            (n + 1, bad + usize::from(!c.by_redis()))
        });
        assert!(n > 0, "the load ran after the failover");
        assert!(
            bad * 20 <= n,
            "Redis decides again after the failover: {bad} of {n} calls were not its"
        );
        back
    }
}

/// Runs a load over keys on every master, applies `fault` to the master of the first group
/// (it returns when the cluster has settled), and keeps the load running for 2 s more.
async fn failover_under_load(
    cluster: &mut RedisCluster,
    limiter: &RateLimiter,
    fault: impl FnOnce(&mut RedisCluster, u16),
) -> FailoverRun {
    let by = keys_by_master(cluster, limiter, 30);
    let failing = *by.keys().next().unwrap();
    let keys: Vec<String> = by.values().flatten().cloned().collect();
    let moved: BTreeSet<usize> = (0..by[&failing].len()).collect();
    // The limiter keeps one circuit per 64 hash slots on a cluster.
    let circuit = |slot: u16| slot / 64;
    let failing_circuits: BTreeSet<u16> = cluster
        .slots()
        .iter()
        .filter(|r| r.master == failing)
        .flat_map(|r| circuit(r.start)..=circuit(r.end))
        .collect();
    let sharing: BTreeSet<usize> = keys
        .iter()
        .enumerate()
        .filter(|(i, k)| {
            !moved.contains(i)
                && failing_circuits.contains(&circuit(ratelimit_core::tools::key_slot(
                    limiter.bucket_key(k).as_bytes(),
                )))
        })
        .map(|(i, _)| i)
        .collect();
    let limit = Limit::per_second(1000).burst(1000);
    let load = Load::start(limiter, keys, limit, 6, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t_fault = Instant::now();
    fault(cluster, failing);
    let t_settled = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = load.stop().await;
    FailoverRun {
        calls,
        moved,
        sharing,
        t_fault,
        t_settled,
    }
}

/// `CLUSTER FAILOVER` on a replica under load: its master's slots move to it with their data
/// (an exhausted bucket stays exhausted), and Redis decides again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_keeps_limits_and_state() {
    let mut cluster = RedisCluster::start();
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("mf")
        .deadline(Some(TOLERANT_DEADLINE))
        .build()
        .await
        .unwrap();
    let by = keys_by_master(&cluster, &limiter, 30);
    let failing = *by.keys().next().unwrap();
    // A bucket of the master that will fail over, exhausted before it does.
    let exhausted = (0..1000)
        .map(|i| format!("x{i}"))
        .find(|k| cluster.master_of_key(&limiter.bucket_key(k)) == failing)
        .unwrap();
    let slow = Limit::per_hour(1).burst(3);
    let admitted = {
        let mut n = 0;
        for _ in 0..5 {
            let d = limiter.check(&exhausted, &slow).await.unwrap();
            assert!(matches!(d.source, Source::Store | Source::DenyCache));
            n += usize::from(d.allowed);
        }
        n
    };
    assert_eq!(admitted, 3);
    let mut promoted = 0;
    let run = failover_under_load(&mut cluster, &limiter, |c, master| {
        let replica = c.replica_of(master).unwrap();
        c.failover(replica).unwrap();
        promoted = replica;
    })
    .await;
    run.report("manual failover");
    assert_ne!(promoted, 0);
    assert!(cluster.masters().contains(&promoted));
    assert!(
        exists_on(&cluster, promoted, &limiter.bucket_key(&exhausted)),
        "the bucket moved to the promoted replica"
    );
    // Functions are replicated: the promoted replica had the library, and no call it
    // decided had to run by EVAL.
    assert!(
        holds_library(promoted).await,
        "the promoted replica holds the library"
    );
    let evals = info_field(promoted, "commandstats", "cmdstat_eval").await;
    assert_eq!(
        evals, 0,
        "no call on the promoted replica met a missing function"
    );
    // Ask Redis itself, not the deny cache's memory of the refusals before the failover.
    limiter.clear_deny_cache();
    let d = limiter.check(&exhausted, &slow).await.unwrap();
    assert_eq!(
        (d.allowed, d.source),
        (false, Source::Store),
        "the exhausted bucket is still exhausted after the failover"
    );
}

/// A master killed under load: its replica is promoted by the cluster, the limiter follows
/// the new slot map, and Redis decides again within a bounded time; calls on the other masters'
/// slots are not disturbed beyond that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced() {
    let mut cluster = RedisCluster::start();
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("km")
        .deadline(Some(TOLERANT_DEADLINE))
        .build()
        .await
        .unwrap();
    let (mut new_master, mut killed) = (0, 0);
    let run = failover_under_load(&mut cluster, &limiter, |c, master| {
        new_master = c.kill_master(master).unwrap();
        killed = master;
    })
    .await;
    let back = run.report("killed master");
    let since_kill = run.t_settled - run.t_fault + back;
    println!(
        "killed master: Redis decided again on its slots {:.1} ms after the kill",
        ms(since_kill)
    );
    assert!(cluster.masters().contains(&new_master));

    // The killed node restarts empty (it kept no data), rejoins as the new master's replica
    // and gets everything from it, functions included; failed back over to it, it decides by
    // `FCALL` at once.
    cluster.restart(killed).unwrap();
    assert_eq!(cluster.role(killed), Some(testkit::cluster::Role::Replica));
    assert_eq!(cluster.replica_of(new_master), Some(killed));
    assert!(
        holds_library(killed).await,
        "the restarted node got the library by replication"
    );
    cluster.failover(killed).unwrap();
    let keys = keys_by_master(&cluster, &limiter, 40)
        .remove(&killed)
        .expect("keys on the node failed back to");
    let fcalls = info_field(killed, "commandstats", "cmdstat_fcall").await;
    let limit = Limit::per_hour(1).burst(2);
    let mut store = 0;
    for key in &keys {
        let d = limiter.check(key, &limit).await.unwrap();
        store += usize::from(d.source == Source::Store);
    }
    println!(
        "killed master restarted and failed back to: {store} of {} calls decided by Redis",
        keys.len()
    );
    assert!(store > 0, "Redis decides on the restarted node's slots");
    assert!(
        info_field(killed, "commandstats", "cmdstat_fcall").await > fcalls,
        "by FCALL"
    );
    assert_eq!(
        info_field(killed, "commandstats", "cmdstat_eval").await,
        0,
        "no call on the restarted node met a missing function"
    );
}

/// A master dies: calls on the healthy masters' slots keep being decided by Redis. The limiter
/// keeps one circuit per 64 hash slots on a cluster, so only the failed master's circuits
/// (and at most the two it shares with a neighbour) open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_leaves_the_other_masters_alone() {
    let mut cluster = RedisCluster::start();
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("km")
        .deadline(Some(TOLERANT_DEADLINE))
        .build()
        .await
        .unwrap();
    let run = failover_under_load(&mut cluster, &limiter, |c, master| {
        c.kill_master(master).unwrap();
    })
    .await;
    run.report("killed master (healthy masters)");
    println!(
        "healthy masters: {} calls decided by the fallback on keys sharing a circuit with the \
         failed master ({} keys), {} on the others",
        run.nonstore_elsewhere() - run.nonstore_unrelated(),
        run.sharing.len(),
        run.nonstore_unrelated()
    );
    // Before circuits per slot group, thousands of these calls (86 %) went to the fallback;
    // a rare one may still miss the deadline while the cluster client refreshes its slots:
    // alone 0 to a few, under the whole suite's load on 2 cores up to 23 of 1996 (1.2 %,
    // 2026-11-26). Held at 2 %: far below what shared circuits would give.
    let unrelated = run
        .calls
        .iter()
        .filter(|c| !run.moved.contains(&c.key) && !run.sharing.contains(&c.key))
        .count();
    assert!(
        run.nonstore_unrelated() * 50 <= unrelated,
        "{} of {unrelated} calls on the healthy masters' own circuits were decided by the fallback",
        run.nonstore_unrelated()
    );
}

/// Several limits of one call on a cluster: buckets in different slots of one master are
/// decided by one script (the `allow-cross-slot-keys` flag); buckets on different masters are
/// reserved in a fixed order and given back when one refuses, so a refused call keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_on_a_cluster_take_all_or_nothing() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "cl").await;
    let by = keys_by_master(&cluster, &limiter, 60);
    let masters: Vec<&Vec<String>> = by.values().collect();
    let tight = Limit::per_hour(2);
    let loose = Limit::per_hour(10);
    // One master, two slots; then two masters, each way round: masters serve ranges of
    // slots, so in one of the two the loose limit is reserved first and given back.
    let same = [masters[0][0].as_str(), masters[0][1].as_str()];
    let apart = [masters[1][0].as_str(), masters[2][0].as_str()];
    let swapped = [masters[2][1].as_str(), masters[1][1].as_str()];
    for (what, [a, b]) in [
        ("one master", same),
        ("two masters", apart),
        ("two masters, swapped", swapped),
    ] {
        for i in 0..5 {
            let d = limiter
                .check_all(&[(a, &tight, 1), (b, &loose, 1)])
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(d.allowed, i < 2, "{what}: call {i}: {d:?}");
            assert!(
                d.parts().iter().all(|p| p.source == Source::Store),
                "{what}"
            );
            if i >= 2 {
                // The loose limit answers as it stands: 8 left, 2 tokens (12 min) from full.
                let loose_part = &d.parts()[1];
                assert!(loose_part.allowed, "{what}: {d:?}");
                assert_eq!(loose_part.remaining, 8, "{what}: {d:?}");
                let reset = loose_part.reset_after;
                assert!(
                    reset <= Duration::from_secs(720) && reset >= Duration::from_secs(715),
                    "{what}: {reset:?}"
                );
            }
        }
        assert_eq!(
            limiter.check(b, &loose).await.unwrap().remaining,
            7,
            "{what}: the loose limit gave 2 tokens, kept the rest"
        );
    }

    // Two instances, 200 concurrent calls under a user's 3 and everyone's 15, the buckets
    // spread over the masters: no limit ever admits more than it holds, and every bucket
    // ends holding exactly what the admitted calls left (the refused ones' reservations all
    // given back). While a reservation is out its tokens are taken, so a concurrent call may
    // be refused for them: fewer than 15 may be admitted, never more.
    let other = std::sync::Arc::new(strict_limiter(&cluster.url(), "cl").await);
    let limiter = std::sync::Arc::new(limiter);
    let users: Vec<String> = masters.iter().flat_map(|m| m[2..4].to_vec()).collect();
    let everyone = masters[1][4].clone();
    let per_user = Limit::per_hour(1).burst(3);
    let total = Limit::per_hour(1).burst(15);
    let n_users = users.len();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let limiter = std::sync::Arc::clone(if i % 2 == 0 { &limiter } else { &other });
            let (user, everyone) = (users[i % n_users].clone(), everyone.clone());
            tokio::spawn(async move {
                let d = limiter
                    .check_all(&[(&user, &per_user, 1), (&everyone, &total, 1)])
                    .await
                    .unwrap();
                assert!(d.parts().iter().all(|p| p.source == Source::Store), "{d:?}");
                (i % n_users, d.allowed)
            })
        })
        .collect();
    let mut admitted = vec![0u64; users.len()];
    for t in tasks {
        let (user, allowed) = t.await.unwrap();
        admitted[user] += u64::from(allowed);
    }
    let sum: u64 = admitted.iter().sum();
    // What the buckets hold, read by a limiter without a deny cache (the others remember
    // their refusals).
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("cl")
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    assert!(
        admitted.iter().all(|&n| n <= 3) && sum <= 15,
        "{admitted:?}"
    );
    let mut held = Vec::new();
    for (user, &n) in users.iter().zip(&admitted) {
        let left = limiter.check(user, &per_user).await.unwrap();
        let h = left.remaining + u64::from(left.allowed);
        assert_eq!(h, 3 - n, "{user}: {n} admitted, {left:?}");
        held.push(h);
    }
    let left = limiter.check(&everyone, &total).await.unwrap();
    let h = left.remaining + u64::from(left.allowed);
    assert_eq!(h, 15 - sum, "{sum} admitted, {left:?}");
    println!(
        "several limits across masters, 200 concurrent calls: {admitted:?} admitted ({sum} \
         of 15); the users' buckets then held {held:?}, everyone's {h}"
    );
}

/// Whether the node on `port` holds this version's function library.
async fn holds_library(port: u16) -> bool {
    common::holds_library(&mut node(port).await).await
}

/// The `calls` (in `commandstats`) or `count` (in `errorstats`) of `line` on the node on `port`.
async fn info_field(port: u16, section: &str, line: &str) -> u64 {
    let field = if section == "errorstats" {
        "count"
    } else {
        "calls"
    };
    common::info_field(&mut node(port).await, section, line, field).await
}

/// The library is loaded on every master when the limiter is built (and reaches every replica
/// by replication), so calls run by `FCALL`; a master that loses it (`FUNCTION FLUSH`, as a
/// node that joins empty) answers its calls by `EVAL` until it has it again, which is soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_holds_the_library_and_one_that_loses_it_gets_it_back() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "fn").await;
    for port in cluster.ports() {
        assert!(holds_library(port).await, "node {port} holds the library");
    }
    let by = keys_by_master(&cluster, &limiter, 20);
    let limit = Limit::per_hour(1).burst(2);
    for keys in by.values() {
        let d = limiter.check(&keys[0], &limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (true, Source::Store));
    }
    let (&flushed, keys) = by.iter().next().unwrap();
    let _: () = cluster
        .query(flushed, redis::cmd("FUNCTION").arg("FLUSH"))
        .unwrap();
    assert!(!holds_library(flushed).await);
    // Each call on the flushed master's buckets is still decided by Redis, exactly.
    for key in &keys[1..4] {
        let d = limiter.check(key, &limit).await.unwrap();
        assert_eq!(d.source, Source::Store, "{key}");
    }
    let d = limiter.check(&keys[0], &limit).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.source), (true, 0, Source::Store));
    let d = limiter.check(&keys[0], &limit).await.unwrap();
    assert_eq!((d.allowed, d.source), (false, Source::Store));
    eventually("the flushed master to have the library again", async || {
        holds_library(flushed).await
    })
    .await;
    let evals = info_field(flushed, "commandstats", "cmdstat_eval").await;
    assert!(
        evals > 0,
        "the calls that met the missing library ran by EVAL"
    );
    let fcalls_before = info_field(flushed, "commandstats", "cmdstat_fcall").await;
    let _ = limiter.check(&keys[1], &limit).await.unwrap();
    assert_eq!(
        info_field(flushed, "commandstats", "cmdstat_fcall").await,
        fcalls_before + 1,
        "calls run by FCALL again"
    );
}

/// Scripts a master ran: `FCALL`, `EVALSHA` and `EVAL` calls in its `INFO commandstats`.
fn scripts_run(cluster: &RedisCluster, port: u16) -> u64 {
    let mut con = cluster.node_connection(port).unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    testkit::script_calls(&info)
}

/// Three buckets of one call, two of them on one master (in two slots) and one on another:
/// one script per master, not one per slot.
#[tokio::test]
async fn buckets_on_one_master_share_its_script() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "pm").await;
    let by = keys_by_master(&cluster, &limiter, 60);
    let (&a_port, a) = by.iter().next().unwrap();
    let (&b_port, b) = by.iter().nth(1).unwrap();
    let slot = |key: &str| cluster.key_slot(&limiter.bucket_key(key));
    let a2 = a.iter().find(|k| slot(k) != slot(&a[0])).unwrap();
    let limit = Limit::per_hour(10);
    let call = [
        (a[0].as_str(), &limit, 1),
        (a2.as_str(), &limit, 1),
        (b[0].as_str(), &limit, 1),
    ];
    // The first call loads the script on each node and reads the masters' slots.
    assert!(limiter.check_all(&call).await.unwrap().allowed);
    let (a_before, b_before) = (scripts_run(&cluster, a_port), scripts_run(&cluster, b_port));
    let d = limiter.check_all(&call).await.unwrap();
    assert!(
        d.allowed && d.parts().iter().all(|p| p.remaining == 8),
        "{d:?}"
    );
    // On each master, its one reservation (of both its buckets on the first): a call the
    // map of the masters says spans two is decided across them at once, never first tried
    // whole on one node (a script fails there only when it writes the other's key, after
    // it wrote its own).
    assert_eq!(scripts_run(&cluster, a_port) - a_before, 1, "first master");
    assert_eq!(scripts_run(&cluster, b_port) - b_before, 1, "second master");
}

/// Across masters, a call refused by the later group gives back what the earlier one
/// reserved, whatever the earlier limit's algorithm: its bucket holds what it held before.
#[tokio::test]
async fn every_algorithm_gives_back_a_reservation_across_masters() {
    let cluster = RedisCluster::start();
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("gb")
        .failure_policy(ratelimit_core::FailurePolicy::Deny)
        .deny_cache(0)
        .deadline(Some(Duration::from_secs(5)))
        .build()
        .await
        .unwrap();
    let by = keys_by_master(&cluster, &limiter, 120);
    let masters: Vec<&Vec<String>> = by.values().collect();
    let slot = |key: &str| cluster.key_slot(&limiter.bucket_key(key));
    let algorithms = [
        Limit::per_hour(5),
        Limit::per_hour(5).refill(ratelimit_core::Refill::Interval),
        Limit::per_hour(5).algorithm(Algorithm::FixedWindow),
        Limit::per_hour(5).algorithm(Algorithm::SlidingWindow),
        Limit::per_hour(5).algorithm(Algorithm::SlidingLog),
    ];
    let refusing = Limit::per_hour(1);
    for (n, limit) in algorithms.iter().enumerate() {
        // A key reserved first (the lower slot), on another master than the refusing one.
        let (first, second) = (&masters[0][n], &masters[1][n]);
        let (reserved, refuses) = if slot(first) < slot(second) {
            (first, second)
        } else {
            (second, first)
        };
        assert!(limiter.check(refuses, &refusing).await.unwrap().allowed);
        // Two tokens taken by admitted calls, then refused calls that reserve and give back.
        limiter.check_n(reserved, limit, 2).await.unwrap();
        for _ in 0..3 {
            let d = limiter
                .check_all(&[(reserved, limit, 1), (refuses, &refusing, 1)])
                .await
                .unwrap();
            assert!(!d.allowed && d.parts()[0].allowed, "{limit:?}: {d:?}");
            assert_eq!(d.parts()[0].remaining, 3, "{limit:?}: answers as it stands");
        }
        let d = limiter.check_n(reserved, limit, 3).await.unwrap();
        assert!(
            d.allowed,
            "{limit:?}: the 3 tokens left are still there: {d:?}"
        );
        assert!(
            !limiter.check(reserved, limit).await.unwrap().allowed,
            "{limit:?}"
        );
    }
}

/// A call's estimates under a rate and a monthly quota whose buckets live on two masters
/// settle on each: each limit was decided at its own master's time, which the quota's
/// give-back needs to find its window; the overdraft of one and the refund of the other land
/// where they belong.
#[tokio::test]
async fn estimates_across_masters_settle_on_each() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "st").await;
    let (rate, quota) = (Limit::per_hour(1_000), Limit::per_month(5_000));
    let master =
        |name: &str, key: &str| cluster.master_of_key(&limiter.named_bucket_key(name, key));
    let key = (0..100)
        .map(|i| format!("api-key-{i}"))
        .find(|k| master("rate", k) != master("quota", k))
        .expect("a key whose two buckets live on two masters");
    for (actual, rate_left, quota_left) in [(100u32, 900u64, 4_900u64), (700, 200, 4_200)] {
        let usage = limiter
            .check_all_estimates(&[("rate", &key, &rate, 300), ("quota", &key, &quota, 300)])
            .await
            .unwrap();
        assert!(usage.decision().allowed);
        // Each took its estimate once.
        let parts = usage.decision().parts();
        assert_eq!(
            (parts[0].remaining, parts[1].remaining),
            (
                rate_left + u64::from(actual) - 300,
                quota_left + u64::from(actual) - 300
            )
        );
        usage.settle(actual).await.unwrap();
        let peek = |name, limit| limiter.peek_named(name, &key, limit);
        assert_eq!(peek("rate", &rate).await.unwrap().remaining, rate_left);
        assert_eq!(peek("quota", &quota).await.unwrap().remaining, quota_left);
    }
}

/// Concurrent calls leave in batches, one per master:/// Concurrent calls leave in batches, one per master: each master runs fewer scripts than it
/// decides calls, and every call is decided exactly as if alone. A call whose buckets span
/// two masters, queued among them, fails only its own part of a batch (the node does not
/// serve its second key) and is decided across the masters instead, all or nothing.
#[tokio::test]
async fn concurrent_calls_are_batched_per_master() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "bt").await;
    let by = keys_by_master(&cluster, &limiter, 600);
    let one = Limit::per_hour(1).burst(1);
    // Load the scripts, and let the masters' slots be read.
    for keys in by.values() {
        limiter.check(&keys[0], &one).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before: BTreeMap<u16, u64> = by.keys().map(|&p| (p, scripts_run(&cluster, p))).collect();
    // 50 keys per master, each asked twice at once: exactly one of each pair goes in.
    let keys: Vec<&String> = by.values().flat_map(|k| &k[1..51]).collect();
    let singles = keys.iter().chain(&keys).map(|k| limiter.check(k, &one));
    let masters: Vec<&Vec<String>> = by.values().collect();
    let (a, b) = (masters[0][60].as_str(), masters[1][60].as_str());
    let across = [(a, &one, 1), (b, &one, 1)];
    let (singles, across) = tokio::join!(
        futures_util::future::join_all(singles),
        limiter.check_all(&across)
    );
    let mut admitted = BTreeMap::<&str, usize>::new();
    for (k, d) in keys.iter().chain(&keys).zip(singles) {
        let d = d.unwrap();
        assert_eq!(d.source, Source::Store, "{k}: {d:?}");
        *admitted.entry(k.as_str()).or_default() += usize::from(d.allowed);
    }
    assert!(admitted.values().all(|&n| n == 1), "{admitted:?}");
    for (&port, calls) in &before {
        let scripts = scripts_run(&cluster, port) - calls;
        assert!(
            scripts < 100,
            "master {port}: 100 calls took {scripts} scripts"
        );
    }
    // The call across masters took from both buckets (of 1): neither admits another call.
    let across = across.unwrap();
    assert!(across.allowed && across.parts().iter().all(|p| p.source == Source::Store));
    for key in [a, b] {
        assert!(!limiter.peek(key, &one).await.unwrap().allowed, "{key}");
    }
}

/// What a stream of `check_all` calls admitted per user, and how many of its decisions the
/// fallback took.
#[derive(Debug, Default)]
struct Spent {
    admitted: Vec<u32>,
    fallback: usize,
    calls: usize,
}

impl Spent {
    async fn call(&mut self, limiter: &RateLimiter, user: usize, limits: (&Limit, &Limit)) {
        let key = format!("user{user}");
        let d = limiter
            .check_all(&[(&key, limits.0, 1), ("everyone", limits.1, 1)])
            .await
            .unwrap();
        if self.admitted.len() <= user {
            self.admitted.resize(user + 1, 0);
        }
        self.admitted[user] += u32::from(d.allowed);
        self.fallback += usize::from(d.parts().iter().any(|p| p.source == Source::Fallback));
        self.calls += 1;
    }

    fn total(&self) -> u32 {
        self.admitted.iter().sum()
    }
}

/// A master too slow for the deadline, then a manual failover of it, hand out nothing Redis
/// had already spent: 8 users at 5 per hour and everyone at 20 per hour, decided together at
/// the default deadline. Once Redis has used up the global quota, the fallback starts from
/// what Redis said (exhausted), not from a fresh share, and the cluster client rides through
/// the failover's redirects within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_hand_out_nothing_redis_had_spent() {
    let cluster = RedisCluster::start();
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("spent")
        .build()
        .await
        .unwrap();
    let mut spent = Spent::default();
    for _ in 0..4 {
        for user in 0..8 {
            spent.call(&limiter, user, limits()).await;
        }
    }
    assert_eq!(spent.total(), 20, "{spent:?}");
    assert_eq!(spent.fallback, 0, "{spent:?}");

    // The global bucket's master stops answering for longer than the deadline.
    let master = cluster.master_of_key(&limiter.bucket_key("everyone"));
    let _: () = cluster
        .query(
            master,
            redis::cmd("CLIENT").arg("PAUSE").arg(400).arg("ALL"),
        )
        .unwrap();
    for _ in 0..2 {
        for user in 0..8 {
            spent.call(&limiter, user, limits()).await;
        }
    }
    assert!(
        spent.fallback > 0,
        "the pause reached the fallback: {spent:?}"
    );
    assert_eq!(
        spent.total(),
        20,
        "the fallback admitted what Redis had spent: {spent:?}"
    );
    let paused = spent.fallback;

    // A manual failover of that master while calls go on.
    let replica = cluster.replica_of(master).unwrap();
    let during = tokio::spawn({
        let limiter = limiter.clone();
        async move {
            let mut spent = Spent::default();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                for user in 0..8 {
                    spent.call(&limiter, user, limits()).await;
                }
            }
            spent
        }
    });
    tokio::task::block_in_place(|| cluster.failover(replica)).unwrap();
    let during = during.await.unwrap();
    println!(
        "outages: {paused} of 16 calls by the fallback while paused; the failover: {} of {} \
         calls by the fallback, {:?} admitted",
        during.fallback, during.calls, during.admitted
    );
    assert_eq!(
        during.total(),
        0,
        "the failover admitted what Redis had spent: {during:?}"
    );
    assert!(spent.admitted.iter().all(|&n| n <= 5), "{spent:?}");
}

/// The limits of [`outages_hand_out_nothing_redis_had_spent`]: a user's 5 and everyone's 20
/// per hour.
fn limits() -> (&'static Limit, &'static Limit) {
    static LIMITS: std::sync::LazyLock<(Limit, Limit)> =
        std::sync::LazyLock::new(|| (Limit::per_hour(5), Limit::per_hour(20)));
    (&LIMITS.0, &LIMITS.1)
}

/// A concurrency limit on a cluster: its slots hold on every master, come back when a guard
/// is dropped, queue waiters; beside a rate limit on another master it is all or nothing both
/// ways round (the slot is reserved and given back when the later master refuses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_holds_on_a_cluster() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "cl").await;
    let other = strict_limiter(&cluster.url(), "cl").await;
    let by = keys_by_master(&cluster, &limiter, 60);
    let masters: Vec<&Vec<String>> = by.values().collect();
    let slots = Limit::concurrent(2);
    for keys in &masters {
        let key = keys[0].as_str();
        let a = limiter.enter(key, &slots).await.unwrap();
        let b = other.enter(key, &slots).await.unwrap();
        let c = limiter.enter(key, &slots).await.unwrap();
        assert!(a.decision.allowed && b.decision.allowed, "{key}");
        assert!(!c.decision.allowed, "{key}: {:?}", c.decision);
        assert_eq!(a.decision.source, Source::Store);
        a.slot.unwrap().release().await.unwrap();
        let d = other.enter(key, &slots).await.unwrap();
        assert!(d.decision.allowed, "{key}: the released slot is back");
    }

    // Beside a rate limit on another master, each way round.
    let hourly = Limit::per_hour(3);
    let pairs = [
        (masters[1][1].as_str(), masters[2][1].as_str()),
        (masters[2][2].as_str(), masters[1][2].as_str()),
    ];
    for (slot_key, rate_key) in pairs {
        let call = [(slot_key, &slots, 1), (rate_key, &hourly, 1)];
        let held = [
            limiter.enter_all(&call).await.unwrap(),
            limiter.enter_all(&call).await.unwrap(),
        ];
        assert!(held.iter().all(|e| e.decision.allowed));
        // The slots are full: no token taken.
        let refused = limiter.enter_all(&call).await.unwrap();
        assert!(!refused.decision.allowed);
        assert!(!refused.decision.parts()[0].allowed && refused.decision.parts()[1].allowed);
        assert_eq!(limiter.peek(rate_key, &hourly).await.unwrap().remaining, 1);
        assert!(limiter.check(rate_key, &hourly).await.unwrap().allowed);
        drop(held);
        eventually(format!("both slots of {slot_key} given back"), async || {
            limiter.peek(slot_key, &slots).await.unwrap().remaining == 2
        })
        .await;
        // The bucket is empty: no slot taken, on whichever master decides first.
        let refused = limiter.enter_all(&call).await.unwrap();
        assert!(!refused.decision.allowed, "{:?}", refused.decision);
        assert!(refused.decision.parts()[0].allowed);
        assert_eq!(
            limiter.peek(slot_key, &slots).await.unwrap().remaining,
            2,
            "{slot_key} beside {rate_key}: the refused call holds no slot"
        );
    }

    // Waiting on a cluster: the waiter gets the slot once it is given back.
    let key = masters[0][5].as_str();
    let one = Limit::concurrent(1).wait(Duration::from_secs(10));
    let holder = limiter.enter(key, &one).await.unwrap();
    let waiter = {
        let other = other.clone();
        let key = key.to_owned();
        tokio::spawn(async move { other.enter(&key, &one).await.unwrap().decision.allowed })
    };
    // Once its ticket is in the set beside the holder's slot (read on the master itself),
    // the holder leaves.
    let bucket = limiter.bucket_key(key);
    let master = cluster.master_of_key(&bucket);
    eventually(
        "the holder's slot and the waiter's ticket in the set",
        async || {
            let members = cluster
                .query::<usize>(master, redis::cmd("ZCARD").arg(&bucket))
                .unwrap();
            members == 2
        },
    )
    .await;
    drop(holder);
    assert!(waiter.await.unwrap());
}

/// A connection of its own to the node on `port` (no redirection).
async fn node(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A rolling deploy on a cluster: another version's library loaded on every master beside
/// this one's (and by replication on every replica), `SCRIPT FLUSH` on every node, then one
/// bucket on each master called in turn by both versions: they share it exactly, and no call
/// met a missing script or function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_versions_share_the_buckets_of_every_master() {
    let cluster = RedisCluster::start();
    let limiter = RateLimiter::builder()
        .redis(cluster.url())
        .prefix("tv")
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(Duration::from_secs(5)))
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    let other = OtherVersion::new();
    for master in cluster.masters() {
        other.load(&mut node(master).await).await;
    }
    for port in cluster.ports() {
        let _: () = cluster
            .query(port, redis::cmd("SCRIPT").arg("FLUSH"))
            .unwrap();
    }
    let by = keys_by_master(&cluster, &limiter, 30);
    assert_eq!(by.len(), cluster.masters().len(), "a key on every master");
    let limit = Limit::per_hour(1).burst(10);
    for (&master, keys) in &by {
        let mut con = node(master).await;
        let (admitted, refused) = other.take_turns(&mut con, &limiter, &keys[0], &limit).await;
        assert_eq!(
            admitted,
            [5, 5],
            "master {master}: each version took its turn"
        );
        assert!(
            refused,
            "master {master}: the other version sees the emptied bucket"
        );
        assert!(holds_library(master).await && other.loaded(&mut con).await);
    }
    for master in cluster.masters() {
        let replica = cluster.replica_of(master).unwrap();
        common::replicated(&mut node(master).await).await;
        let both = holds_library(replica).await && other.loaded(&mut node(replica).await).await;
        assert!(both, "replica {replica} holds both libraries");
        assert_eq!(
            info_field(master, "errorstats", "errorstat_NOSCRIPT").await,
            0
        );
        assert_eq!(
            info_field(master, "commandstats", "cmdstat_eval").await,
            0,
            "master {master}: no call met a missing function"
        );
    }
}

/// `build()` calls the library once with no key, to learn whether this client may call
/// functions. That call must go to a master: with no key it could go to any node, and a
/// replica refuses a function that may write. Twenty limiters built on one cluster, each
/// deciding by `FCALL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_build_on_a_cluster_calls_the_library_on_a_master() {
    let cluster = RedisCluster::start();
    for i in 0..20 {
        let limiter = RateLimiter::builder()
            .redis(cluster.url())
            .prefix(format!("b{i}"))
            .build()
            .await
            .unwrap();
        let debug = format!("{limiter:?}");
        assert!(!debug.contains("EVALSHA"), "{debug}");
    }
}

/// The least ACL of docs/operations.md, set on every node, is enough on a cluster: everything
/// a limiter does, on buckets of every master, is Redis's decision, and no node's `ACL LOG`
/// has an entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_acl_in_the_docs_is_enough_on_a_cluster() {
    let cluster = RedisCluster::start();
    for port in cluster.ports() {
        common::set_least_acl(&mut node(port).await).await;
    }
    let url = cluster
        .url()
        .replace("redis+cluster://", "redis+cluster://ratelimit:pw@");
    let limiter = common::least_acl_limiter(&url).await;
    let calls = common::everything_once(&limiter).await;
    let mut masters = BTreeSet::new();
    for i in 0..5 {
        masters.insert(cluster.master_of_key(&limiter.bucket_key(&format!("every{i}"))));
    }
    let mut logged = Vec::new();
    for port in cluster.ports() {
        logged.extend(common::acl_log(&mut node(port).await).await);
    }
    println!(
        "least ACL on a cluster: {calls} calls on {} masters, ACL LOG {logged:?}",
        masters.len()
    );
    assert!(masters.len() > 1, "the buckets span masters");
    assert!(logged.is_empty(), "{logged:#?}");
}
