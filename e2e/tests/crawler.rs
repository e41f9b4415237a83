//! The crawler example end to end: two processes of it against one real redis-server share
//! each host's rate. Only lower bounds on time are checked: a slow machine makes fetches
//! later, never earlier, so an upper bound would only make the test flaky.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use testkit::RedisServer;

const CRAWLER: &str = env!("CARGO_BIN_EXE_crawler");

/// Fetches a second per host, over both processes, with a burst of 1 (the example's).
const RATE: u64 = 10;
/// Fetches each process makes: the example's list alternates two hosts, so each host sees
/// 20 fetches from the two processes, and either process alone would need 1 s for its 10.
const FETCHES: usize = 20;
/// Long enough that no fetch is skipped: 4 workers hold at most 4 turns of 100 ms at once.
const MAX_WAIT_MS: u64 = 5000;
/// Both processes must be done by then, or they are killed and the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// One process of the crawler, killed when dropped (when the test fails before it exits).
struct Crawler {
    name: &'static str,
    child: Child,
    stdout: Option<JoinHandle<String>>,
}

impl Crawler {
    fn start(redis: &RedisServer, name: &'static str) -> Crawler {
        let mut child = Command::new(CRAWLER)
            .args(["--workers", "2", "--name", name])
            .args([
                "--fetches",
                &FETCHES.to_string(),
                "--rate",
                &RATE.to_string(),
            ])
            .args(["--max-wait-ms", &MAX_WAIT_MS.to_string()])
            .env("REDIS_URL", redis.url())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {CRAWLER}: {e}"));
        // Read as it comes, so that a full pipe never blocks the crawler.
        let mut pipe = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut out = String::new();
            pipe.read_to_string(&mut out).unwrap();
            out
        });
        Crawler {
            name,
            child,
            stdout: Some(stdout),
        }
    }

    /// Its output, once it has exited successfully before `deadline`.
    fn output(&mut self, deadline: Instant) -> String {
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let out = self.stdout.take().unwrap().join().unwrap();
                assert!(
                    status.success(),
                    "crawler {} exited with {status}:\n{out}",
                    self.name
                );
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "crawler {} still running after {DEADLINE:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Crawler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `fetched` line.
#[derive(Debug)]
struct Fetch {
    /// When it was admitted, in microseconds since the UNIX epoch.
    t_us: u64,
    /// When its `acquire` was called: `t_us - waited_us`.
    asked_us: u64,
    instance: String,
    url: String,
    source: String,
}

fn parse(out: &str) -> Vec<Fetch> {
    out.lines()
        .filter_map(|line| line.strip_prefix("fetched "))
        .map(|rest| {
            let fields: HashMap<&str, &str> = rest
                .split_whitespace()
                .map(|kv| kv.split_once('=').unwrap())
                .collect();
            let t_us: u64 = fields["t_us"].parse().unwrap();
            let waited_us: u64 = fields["waited_us"].parse().unwrap();
            Fetch {
                t_us,
                asked_us: t_us - waited_us,
                instance: fields["instance"].to_owned(),
                url: fields["url"].to_owned(),
                source: fields["source"].to_owned(),
            }
        })
        .collect()
}

fn host(url: &str) -> &str {
    url.split("://").nth(1).unwrap().split('/').next().unwrap()
}

#[test]
fn two_processes_share_each_hosts_rate() {
    let redis = RedisServer::start();
    let mut a = Crawler::start(&redis, "a");
    let mut b = Crawler::start(&redis, "b");
    let deadline = Instant::now() + DEADLINE;
    let (out_a, out_b) = (a.output(deadline), b.output(deadline));
    println!("--- crawler a\n{out_a}--- crawler b\n{out_b}");

    for (name, out) in [("a", &out_a), ("b", &out_b)] {
        assert!(
            !out.lines().any(|l| l.starts_with("skipped ")),
            "{name}: nothing is skipped with a wait of {MAX_WAIT_MS} ms"
        );
        assert!(
            out.contains(&format!("done instance={name} fetched={FETCHES} skipped=0")),
            "{name}: every URL fetched once"
        );
    }
    let fetches: Vec<Fetch> = parse(&out_a).into_iter().chain(parse(&out_b)).collect();
    assert_eq!(fetches.len(), 2 * FETCHES, "{fetches:#?}");
    assert!(
        fetches.iter().all(|f| f.source == "store"),
        "every fetch decided by Redis, none by the in-memory fallback: {fetches:#?}"
    );

    let mut by_host: BTreeMap<&str, Vec<&Fetch>> = BTreeMap::new();
    for f in &fetches {
        by_host.entry(host(&f.url)).or_default().push(f);
    }
    assert_eq!(
        by_host.keys().copied().collect::<Vec<_>>(),
        ["example.net", "example.org"]
    );
    let interval_us = 1_000_000 / RATE;
    // The µs the clock reads are truncated to (Redis's TIME, the crawler's t_us), with room
    // to spare; a process keeping the rate alone would be hundreds of ms early.
    let tolerance_us = 1000;
    for (host, mut fetches) in by_host {
        fetches.sort_by_key(|f| f.t_us);
        let instances: BTreeSet<&str> = fetches.iter().map(|f| f.instance.as_str()).collect();
        assert_eq!(
            instances,
            BTreeSet::from(["a", "b"]),
            "{host}: both processes fetched from it (one rate shared, not taken by one)"
        );
        // The host's first turn was reserved after the earliest `acquire` on it was called,
        // by Redis's clock, which is this machine's clock, as t_us is. Each later turn is
        // due one interval after the one before, and a fetch's t_us is read after its wait,
        // so the k-th fetch by time is at or after the k-th turn. (Anchoring on the first
        // t_us instead would need a tolerance for that fetch's own round trip, which a
        // loaded machine can stretch to any length.)
        let anchor = fetches.iter().map(|f| f.asked_us).min().unwrap();
        println!("{host}: fetch, instance, ms after the first acquire, gap to the previous (ms)");
        let mut slack_us = i128::MAX;
        for (k, f) in fetches.iter().enumerate() {
            let since = f.t_us - anchor;
            let gap = k.checked_sub(1).map(|p| f.t_us - fetches[p].t_us);
            println!(
                "  {k:>2} {} {:>8.3} {}",
                f.instance,
                since as f64 / 1000.0,
                gap.map_or(String::new(), |g| format!("{:.3}", g as f64 / 1000.0))
            );
            let due = k as u64 * interval_us;
            slack_us = slack_us.min(i128::from(since) - i128::from(due));
            assert!(
                since + tolerance_us >= due,
                "{host}: fetch {k} ({} {}) {since} us after the first acquire, before its turn \
                 at {due} us: the rate of {RATE}/s is not kept across processes",
                f.instance,
                f.url
            );
        }
        println!("  least slack after a turn: {slack_us} us");
    }
}
