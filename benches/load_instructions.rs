//! Redis's instructions per decision under load, whole server (reading commands, deciding,
//! replying, the event loop): this library's `RateLimiter::check` from 64 tasks of one
//! process, beside rate-limiter-flexible's `consume()` with 64 calls in flight
//! (`benches/loadgen/flexible/run.js`, as the load generator runs it), each against one
//! `redis-server` under callgrind with the Redis module loaded, counted over a window of
//! their decisions on buckets that exist. Counts repeat from run to run where this machine's
//! wall-clock figures move by 10-50 %.
//!
//! ```text
//! cargo bench -p redis-ratelimit-benches --bench load_instructions [-- --decisions 20000 --rounds 3 --batch-after 1]
//! ```
//!
//! rate-limiter-flexible runs from `target/loadgen-flexible`, where the load generator
//! installs it (`cargo bench -p redis-ratelimit-benches --bench loadgen` once); without it,
//! ours is measured alone and the output says so.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::cast_precision_loss)]

#[path = "callgrind.rs"]
mod callgrind;
#[path = "loadgen/flexible_dir.rs"]
mod flexible_dir;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use callgrind::Callgrind;
use redis_ratelimit::{Limit, RateLimiter, Source};

/// Keys the calls are spread over, as the load generator's.
const KEYS: u64 = 10_000;

/// `n` calls of `limit` from 64 tasks, on keys `0..KEYS` in turn; each admitted by the store.
async fn ours(limiter: &RateLimiter, limit: Limit, n: u64) {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (limiter, next) = (limiter.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let d = limiter
                        .check(&format!("k{}", i % KEYS), &limit)
                        .await
                        .unwrap();
                    assert!(d.allowed && d.source == Source::Store, "{d:?}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// The server's calls of `command` since its statistics were reset.
async fn calls(c: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    testkit::info_number(&stats, &format!("cmdstat_{command}"), Some("calls")).unwrap_or(0)
}

async fn reset_stats(c: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(c)
        .await
        .unwrap();
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.iter().any(|a| a == "--list") {
        return;
    }
    let value_of = |flag: &str, default: u64| {
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1))
            .map_or(default, |v| v.parse().unwrap())
    };
    let decisions = value_of("--decisions", 20_000);
    let rounds = value_of("--rounds", 3);
    // As the load generator runs ours: one worker thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = Callgrind::start(&testkit::module::load_args());
        let url = format!("redis://127.0.0.1:{}", server.port);
        let client = redis::Client::open(url.as_str()).unwrap();
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut admin = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        // A server under callgrind runs some fifty times slower: a deadline no call meets
        // only if the server stops.
        // `--batch-after N`: the store's `batch_after` (the library's default unless given;
        // the Envoy service's is 1).
        let builder = match argv.iter().position(|a| a == "--batch-after") {
            Some(_) => {
                let n = usize::try_from(value_of("--batch-after", 16)).unwrap();
                let store = redis_ratelimit::store::RedisStore::connect(&url)
                    .await
                    .unwrap()
                    .batch_after(n);
                RateLimiter::builder().redis_store(store)
            }
            None => RateLimiter::builder().redis(url.clone()),
        };
        let limiter = builder
            .prefix("bench")
            .instance(false)
            .deadline(Some(Duration::from_secs(120)))
            .build()
            .await
            .unwrap();
        // Every call admitted, on buckets that stay live through the windows (half an hour to
        // refill one token): a service's steady state, where a user's bucket is in Redis
        // between their calls, as rate-limiter-flexible's keys live through its hour's window
        // (`--window 3600`). (A limit of a billion a second, as before, left every bucket full
        // again, and so expired, within a microsecond: each decision then paid for its key's
        // deletion and creation, about a third of the server's work, measured.)
        let limit = Limit::per_hour(2).burst(100_000);
        println!(
            "Redis instructions per decision under load (whole server, callgrind, the module loaded: \
             {:?}), {decisions} decisions per window after each of {KEYS} keys was written once",
            limiter.redis_path()
        );
        ours(&limiter, limit, KEYS).await;
        let mut per_decision = Vec::new();
        for _ in 0..rounds {
            reset_stats(&mut admin).await;
            let total = server.count(ours(&limiter, limit, decisions)).await;
            let batches = calls(&mut admin, "ratelimit.v1.batch").await;
            let alone = calls(&mut admin, "ratelimit.v1.token_bucket").await;
            per_decision.push(total as f64 / decisions as f64);
            println!(
                "ours, RateLimiter::check, 64 tasks: {:.0} ({alone} decisions alone, the rest in \
                 {batches} batches)",
                total as f64 / decisions as f64
            );
        }
        let ours_median = median(&mut per_decision);
        let dir = flexible_dir::flexible_dir();
        if !dir.join("node_modules").is_dir() {
            println!(
                "rate-limiter-flexible left out: not installed in {} (run the loadgen bench once)",
                dir.display()
            );
            println!("ours: median {ours_median:.0}");
            return;
        }
        let mut theirs = Vec::new();
        for _ in 0..rounds {
            // Its own warm-up writes the keys; its window opens when it says `measuring`.
            let mut node = Command::new(std::env::var_os("NODE_BIN").unwrap_or_else(|| "node".into()))
                .arg(dir.join("run.js"))
                .args(["--port", &server.port.to_string(), "--concurrency", "64"])
                .args(["--keys", &KEYS.to_string(), "--warmup", "5", "--duration", "15"])
                .args(["--window", "3600"])
                .current_dir(&dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("node");
            let mut lines = BufReader::new(node.stdout.take().unwrap()).lines();
            loop {
                match lines.next() {
                    Some(Ok(line)) if line.contains("measuring") => break,
                    Some(Ok(_)) => {}
                    _ => panic!("run.js ended before measuring"),
                }
            }
            reset_stats(&mut admin).await;
            let total = server
                .count(async {
                    tokio::task::spawn_blocking(move || {
                        for _ in lines.by_ref() {}
                        node.wait().unwrap()
                    })
                    .await
                    .unwrap();
                })
                .await;
            let consumed = calls(&mut admin, "evalsha").await + calls(&mut admin, "eval").await;
            theirs.push(total as f64 / consumed as f64);
            println!(
                "rate-limiter-flexible, consume(), 64 in flight: {:.0} ({consumed} decisions)",
                total as f64 / consumed as f64
            );
        }
        let theirs_median = median(&mut theirs);
        println!(
            "median: ours {ours_median:.0}, rate-limiter-flexible {theirs_median:.0}: ours is {:.3} x",
            ours_median / theirs_median
        );
    });
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
