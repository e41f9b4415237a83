//! Redis memory per active bucket: ours (`RateLimiter` on a Redis store) beside Spring Cloud
//! Gateway's two-key `request_rate_limiter.lua` run by `redis-benchmark`, on the same
//! `redis-server`, which this program starts itself (on a free loopback port, in a temporary
//! directory; never an existing server).
//!
//! ```text
//! cargo run --release -p testkit --bin bench_memory -- [--runs 3] [--buckets 100000]
//!     [--concurrency 64] [--maxmemory-policy allkeys-lru]
//! ```
//! (or `benches/memory/run.sh`, which runs exactly that). Needs `redis-server` and
//! `redis-benchmark` (`$REDIS_SERVER_BIN`, `$REDIS_BENCHMARK_BIN`, else from `PATH`).
//!
//! Each variant starts from an empty database (`FLUSHALL SYNC`) and measures the growth of
//! `used_memory` (`INFO memory`) over the buckets it creates, divided by the number of buckets
//! actually created (`DBSIZE`, over 2 for Spring's two keys per bucket). Every run starts a
//! fresh server; the summary gives the median and the min-max over the runs. The results are
//! written up in `docs/benchmarks.md`.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ratelimit_core::{Algorithm, FailurePolicy, Limit, RateLimiter, Refill, Source};
use redis::aio::MultiplexedConnection;
use testkit::RedisServer;

/// Spring Cloud Gateway's `META-INF/scripts/request_rate_limiter.lua`, the two-key version
/// (tokens key, timestamp key; `SETEX` on both), verbatim.
const SPRING_SCRIPT: &str = include_str!("../../../benches/memory/request_rate_limiter.lua");

/// A 40-character limit name, as `#[rate_limit]` derives from `module_path::fn_name`.
const LONG_NAME: &str = "orders_service::handlers::list_orders_v2";

/// Keeps each bucket of ours active for 60 s after its one call (a 10-token bucket refilled
/// one token a minute).
const OURS_LIMIT: Limit = Limit::per_minute(1).burst(10);

/// A rate whose value (interval, remainder and fine unit) needs more than 64 bits, so Redis
/// keeps it as a short string: the worst case of our value encoding. One call of cost 7919
/// empties the bucket, which is then active for an hour.
const ODD_LIMIT: Limit = Limit::per_hour(7919).burst(7919);

#[derive(Debug, Clone, Copy)]
enum Variant {
    /// Our limiter: one key per bucket.
    Ours {
        label: &'static str,
        name: Option<&'static str>,
        limit: Limit,
        cost: u32,
    },
    /// Spring's script by `redis-benchmark`: the id is `id_prefix` + 12 random digits,
    /// drawn independently for the tokens and the timestamp key.
    SpringBenchmark {
        label: &'static str,
        id_prefix: &'static str,
    },
    /// Spring's script by this program, with the same id in both keys (a cross-check of the
    /// `redis-benchmark` figure).
    SpringPaired {
        label: &'static str,
        id_prefix: &'static str,
    },
    /// Another library's script, verbatim, on its own key shape: 10 tokens an hour, `tokens`
    /// taken at once.
    Peer {
        label: &'static str,
        peer: Peer,
        tokens: u32,
    },
}

#[derive(Debug, Clone, Copy)]
enum Peer {
    /// Python `limits`' moving window: a list of admission times per key.
    LimitsMovingWindow,
    /// rate-limiter-flexible's `RateLimiterRedis`: a counter per key and window.
    FlexibleFixedWindow,
}

/// Python `limits` 5.8.0's `acquire_moving_window.lua`, verbatim after a two-line header.
const LIMITS_MOVING_WINDOW: &str =
    include_str!("../../../benches/memory/limits_acquire_moving_window.lua");
/// rate-limiter-flexible 11.4.0's fixed-window script, verbatim after a two-line header.
const FLEXIBLE_FIXED_WINDOW: &str = include_str!("../../../benches/memory/flexible_incr_ttl.lua");

impl Peer {
    fn key(self, id: &str) -> String {
        match self {
            // `LIMITS:` + `RateLimitItemPerHour(10).key_for(id)`.
            Peer::LimitsMovingWindow => format!("LIMITS:LIMITER/{id}/10/1/hour"),
            // keyPrefix `rlflx` (its default) + `:` + key.
            Peer::FlexibleFixedWindow => format!("rlflx:{id}"),
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Peer::LimitsMovingWindow => "LIMITS:",
            Peer::FlexibleFixedWindow => "rlflx:",
        }
    }
}

impl Variant {
    fn label(&self) -> &'static str {
        match self {
            Variant::Ours { label, .. }
            | Variant::SpringBenchmark { label, .. }
            | Variant::SpringPaired { label, .. }
            | Variant::Peer { label, .. } => label,
        }
    }

    fn keys_per_bucket(&self) -> u64 {
        match self {
            Variant::Ours { .. } | Variant::Peer { .. } => 1,
            Variant::SpringBenchmark { .. } | Variant::SpringPaired { .. } => 2,
        }
    }
}

/// Buckets created (then flushed) before each measurement.
const WARM_UP: usize = 5_000;

/// The other algorithms, each on hour-long windows (so that no key ends while it is measured),
/// 10 tokens an hour.
const FIXED: Limit = Limit::per_hour(10).algorithm(Algorithm::FixedWindow);
const SLIDING: Limit = Limit::per_hour(10).algorithm(Algorithm::SlidingWindow);
const LOG: Limit = Limit::per_hour(10).algorithm(Algorithm::SlidingLog);
const INTERVAL: Limit = Limit::per_hour(1).burst(10).refill(Refill::Interval);

/// 7 a minute: 8,571,428.57 µs per token, a fine unit of 1/7 µs; the value still fits 64 bits.
const SEVEN_PER_MINUTE: Limit = Limit::per_minute(7).burst(10);

const VARIANTS: [Variant; 15] = [
    Variant::Ours {
        label: "ours",
        name: None,
        limit: OURS_LIMIT,
        cost: 1,
    },
    Variant::SpringBenchmark {
        label: "spring (redis-benchmark)",
        id_prefix: "user:",
    },
    Variant::Ours {
        label: "ours, 40-char limit name",
        name: Some(LONG_NAME),
        limit: OURS_LIMIT,
        cost: 1,
    },
    Variant::SpringBenchmark {
        label: "spring, 40-char name in the id (redis-benchmark)",
        id_prefix: "orders_service::handlers::list_orders_v2:user:",
    },
    Variant::Ours {
        label: "ours, 7919/hour (value longer than 64 bits)",
        name: None,
        limit: ODD_LIMIT,
        cost: 7919,
    },
    Variant::Ours {
        label: "ours, 7/minute (fine unit 1/7 us)",
        name: None,
        limit: SEVEN_PER_MINUTE,
        cost: 1,
    },
    Variant::SpringPaired {
        label: "spring (same id in both keys, EVALSHA from Rust)",
        id_prefix: "user:",
    },
    Variant::Ours {
        label: "ours, interval refill (10, 1 an hour)",
        name: None,
        limit: INTERVAL,
        cost: 1,
    },
    Variant::Ours {
        label: "ours, fixed window (10 an hour)",
        name: None,
        limit: FIXED,
        cost: 1,
    },
    Variant::Ours {
        label: "ours, sliding window (10 an hour)",
        name: None,
        limit: SLIDING,
        cost: 1,
    },
    Variant::Ours {
        label: "ours, sliding log (10 an hour), 1 token",
        name: None,
        limit: LOG,
        cost: 1,
    },
    Variant::Ours {
        label: "ours, sliding log (10 an hour), full: 10 tokens",
        name: None,
        limit: LOG,
        cost: 10,
    },
    Variant::Peer {
        label: "Python limits, moving window (10 an hour), 1 token",
        peer: Peer::LimitsMovingWindow,
        tokens: 1,
    },
    Variant::Peer {
        label: "Python limits, moving window (10 an hour), full: 10 tokens",
        peer: Peer::LimitsMovingWindow,
        tokens: 10,
    },
    Variant::Peer {
        label: "rate-limiter-flexible, fixed window (10 an hour)",
        peer: Peer::FlexibleFixedWindow,
        tokens: 1,
    },
];

struct Options {
    runs: usize,
    buckets: usize,
    concurrency: usize,
    maxmemory_policy: Option<String>,
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        runs: 3,
        buckets: 100_000,
        concurrency: 64,
        maxmemory_policy: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("`{flag}` needs a value"))?;
        let num = |v: &str| -> Result<usize, String> {
            v.parse().map_err(|e| format!("`{flag} {v}`: {e}"))
        };
        match flag.as_str() {
            "--runs" => o.runs = num(&value)?,
            "--buckets" => o.buckets = num(&value)?,
            "--concurrency" => o.concurrency = num(&value)?,
            "--maxmemory-policy" => o.maxmemory_policy = Some(value),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if !(1..=99).contains(&o.runs) {
        return Err("`--runs`: expected 1 to 99".to_owned());
    }
    if !(1_000..=10_000_000).contains(&o.buckets) {
        return Err("`--buckets`: expected 1,000 to 10,000,000".to_owned());
    }
    if !(1..=1024).contains(&o.concurrency) {
        return Err("`--concurrency`: expected 1 to 1024".to_owned());
    }
    Ok(o)
}

fn redis_benchmark_bin() -> PathBuf {
    std::env::var_os("REDIS_BENCHMARK_BIN")
        .map_or_else(|| PathBuf::from("redis-benchmark"), PathBuf::from)
}

fn e2s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `INFO section` as a map of its fields.
async fn info(
    conn: &mut MultiplexedConnection,
    section: &str,
) -> Result<HashMap<String, String>, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .map_err(e2s)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}

async fn info_u64(
    conn: &mut MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<u64, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .map_err(e2s)?;
    testkit::info_number(&text, field, None)
        .ok_or_else(|| format!("no number `{field}` in INFO {section}"))
}

/// Waits (at most 10 s) until the server has let go of clients that disconnected, so their
/// buffers are not counted.
async fn settle_clients(conn: &mut MultiplexedConnection, expected: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = info_u64(conn, "clients", "connected_clients").await?;
        if n <= expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{n} clients still connected, expected {expected}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn server_secs(conn: &mut MultiplexedConnection) -> Result<u64, String> {
    let (secs, _micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.map_err(e2s)?;
    Ok(secs)
}

#[derive(Debug, Clone)]
struct Sample {
    growth: i64,
    keys: u64,
    buckets: f64,
    per_bucket: f64,
    key_example: String,
    seconds: f64,
}

struct Ctx<'a> {
    server: &'a RedisServer,
    conn: MultiplexedConnection,
    limiter: RateLimiter,
    spring_sha: String,
    buckets: usize,
    concurrency: usize,
}

/// Runs `work(i)` for every `i` below `n`, `concurrency` at a time.
async fn drive<F, Fut>(n: usize, concurrency: usize, work: F) -> Result<(), String>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let next = Arc::clone(&next);
        let work = Arc::clone(&work);
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), String>(());
                }
                work(i).await?;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(e2s)??;
    }
    Ok(())
}

async fn measure(ctx: &mut Ctx<'_>, variant: Variant) -> Result<Sample, String> {
    let n = ctx.buckets;
    let mut control = ctx.conn.clone();
    let conn = &mut control;
    // A warm-up on other ids, then an empty database: the connections' buffers are as large
    // before the measured run as after it, so only the buckets make the difference.
    work(ctx, variant, WARM_UP.min(n), true).await?;
    let () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(conn)
        .await
        .map_err(e2s)?;
    // The limiter keeps a key of its own (its heartbeat set of live instances), written again
    // within a second: wait for it, so that it is part of the baseline, not of the buckets.
    let aux_before = settle_aux_keys(conn).await?;
    let clients = info_u64(conn, "clients", "connected_clients").await?;
    let stats = info(conn, "stats").await?;
    let expired_before: u64 = stats
        .get("expired_keys")
        .ok_or("no expired_keys")?
        .parse()
        .map_err(e2s)?;
    let evicted_before: u64 = stats
        .get("evicted_keys")
        .ok_or("no evicted_keys")?
        .parse()
        .map_err(e2s)?;
    let before = info_u64(conn, "memory", "used_memory").await?;
    let started = Instant::now();

    let key_example = work(ctx, variant, n, false).await?;
    let seconds = started.elapsed().as_secs_f64();

    settle_clients(conn, clients).await?;
    let after = info_u64(conn, "memory", "used_memory").await?;
    let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await.map_err(e2s)?;
    let stats = info(conn, "stats").await?;
    let expired: u64 = stats
        .get("expired_keys")
        .ok_or("no expired_keys")?
        .parse()
        .map_err(e2s)?;
    let evicted: u64 = stats
        .get("evicted_keys")
        .ok_or("no evicted_keys")?
        .parse()
        .map_err(e2s)?;
    if expired != expired_before || evicted != evicted_before {
        return Err(format!(
            "{}: {} keys expired and {} were evicted during the measurement; it is void",
            variant.label(),
            expired - expired_before,
            evicted - evicted_before
        ));
    }
    let census = census(conn, variant).await?;
    if census.buckets_keys + census.others != keys || census.others != aux_before {
        return Err(format!(
            "{}: DBSIZE {keys}: {} bucket keys and {} others ({:?}); {aux_before} others before",
            variant.label(),
            census.buckets_keys,
            census.others,
            census.examples
        ));
    }
    let keys = census.buckets_keys;
    let expected = n as u64 * variant.keys_per_bucket();
    let enough = match variant {
        Variant::SpringBenchmark { .. } => expected - expected / 100,
        _ => expected,
    };
    if keys < enough || keys > expected {
        return Err(format!(
            "{}: {keys} bucket keys, expected {expected}",
            variant.label()
        ));
    }
    let growth = i64::try_from(after).map_err(e2s)? - i64::try_from(before).map_err(e2s)?;
    let buckets = keys as f64 / variant.keys_per_bucket() as f64;
    Ok(Sample {
        growth,
        keys,
        buckets,
        per_bucket: growth as f64 / buckets,
        key_example,
        seconds,
    })
}

/// Creates `n` buckets of `variant`; with `warm`, on ids that differ from the measured ones
/// (same length), to bring the connections' buffers to the size the measured run leaves them
/// at. Returns an example of the variant's keys.
async fn work(ctx: &mut Ctx<'_>, variant: Variant, n: usize, warm: bool) -> Result<String, String> {
    // 12 characters either way: `000000012345` or `w00000012345`.
    let digits = move |i: usize| {
        if warm {
            format!("w{i:011}")
        } else {
            format!("{i:012}")
        }
    };
    let conn = &mut ctx.conn;
    Ok(match variant {
        Variant::Ours {
            name, limit, cost, ..
        } => {
            let limiter = ctx.limiter.clone();
            let example = match name {
                Some(name) => limiter.named_bucket_key(name, "user:000000012345"),
                None => limiter.bucket_key("user:000000012345"),
            };
            drive(n, ctx.concurrency, move |i| {
                let limiter = limiter.clone();
                async move {
                    let key = format!("user:{}", digits(i));
                    let d = match name {
                        Some(name) => limiter.check_named(name, &key, &limit, cost).await,
                        None => limiter.check_n(&key, &limit, cost).await,
                    }
                    .map_err(e2s)?;
                    if !d.allowed || d.source != Source::Store {
                        return Err(format!("{key}: unexpected decision {d:?}"));
                    }
                    Ok(())
                }
            })
            .await?;
            example
        }
        // redis-benchmark's connections are gone when it ends: nothing to warm up.
        Variant::SpringBenchmark { .. } if warm => String::new(),
        Variant::SpringBenchmark { id_prefix, .. } => {
            let now = server_secs(conn).await?.to_string();
            let tokens = format!("request_rate_limiter.{{{id_prefix}__rand_int__}}.tokens");
            let timestamp = format!("request_rate_limiter.{{{id_prefix}__rand_int__}}.timestamp");
            let port = ctx.server.port().to_string();
            let requests = n.to_string();
            // 12-digit ids from a keyspace 1000 x the requests, so nearly every call creates
            // a new bucket; the exact count is read back with DBSIZE.
            let keyspace = (n * 1000).to_string();
            let args = [
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-c",
                "50",
                "-n",
                &requests,
                "-r",
                &keyspace,
                "-q",
                "EVALSHA",
                &ctx.spring_sha,
                "2",
                &tokens,
                &timestamp,
                "1",
                "10",
                &now,
                "1",
            ];
            let bin = redis_benchmark_bin();
            println!("    $ {} {}", bin.display(), args.join(" "));
            let args = args.map(str::to_owned);
            let out = tokio::task::spawn_blocking(move || Command::new(&bin).args(args).output())
                .await
                .map_err(e2s)?
                .map_err(|e| {
                    format!("cannot run redis-benchmark: {e} (Debian: apt-get install redis-tools)")
                })?;
            if !out.status.success() {
                return Err(format!(
                    "redis-benchmark failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let summary = String::from_utf8_lossy(&out.stdout);
            if let Some(line) = summary.lines().rev().find(|l| !l.trim().is_empty()) {
                println!("    {}", line.rsplit('\r').next().unwrap_or(line).trim());
            }
            format!(
                "{} + {}",
                tokens.replace("__rand_int__", "000000012345"),
                timestamp.replace("__rand_int__", "000000012345")
            )
        }
        Variant::Peer { peer, tokens, .. } => {
            let shared = conn.clone();
            drive(n, ctx.concurrency, move |i| {
                let mut conn = shared.clone();
                async move {
                    let key = peer.key(&format!("user:{}", digits(i)));
                    let mut eval = redis::cmd("EVAL");
                    match peer {
                        Peer::LimitsMovingWindow => {
                            // time.time(), as redis-py sends a float: seconds with a fraction.
                            let (secs, micros): (u64, u64) = redis::cmd("TIME")
                                .query_async(&mut conn)
                                .await
                                .map_err(e2s)?;
                            eval.arg(LIMITS_MOVING_WINDOW)
                                .arg(1)
                                .arg(&key)
                                .arg(format!("{secs}.{micros:06}"))
                                .arg(10)
                                .arg(3600)
                                .arg(tokens);
                        }
                        Peer::FlexibleFixedWindow => {
                            eval.arg(FLEXIBLE_FIXED_WINDOW)
                                .arg(1)
                                .arg(&key)
                                .arg(tokens)
                                .arg(3600);
                        }
                    }
                    let _: redis::Value = eval.query_async(&mut conn).await.map_err(e2s)?;
                    Ok(())
                }
            })
            .await?;
            peer.key("user:000000012345")
        }
        Variant::SpringPaired { id_prefix, .. } => {
            let now = server_secs(conn).await?;
            let sha = ctx.spring_sha.clone();
            let shared = conn.clone();
            drive(n, ctx.concurrency, move |i| {
                let mut conn = shared.clone();
                let sha = sha.clone();
                async move {
                    let id = format!("{id_prefix}{}", digits(i));
                    let reply: Vec<i64> = redis::cmd("EVALSHA")
                        .arg(&sha)
                        .arg(2)
                        .arg(format!("request_rate_limiter.{{{id}}}.tokens"))
                        .arg(format!("request_rate_limiter.{{{id}}}.timestamp"))
                        .arg(1)
                        .arg(10)
                        .arg(now)
                        .arg(1)
                        .query_async(&mut conn)
                        .await
                        .map_err(e2s)?;
                    if reply.first() != Some(&1) {
                        return Err(format!("{id}: unexpected reply {reply:?}"));
                    }
                    Ok(())
                }
            })
            .await?;
            format!(
                "request_rate_limiter.{{{id_prefix}000000012345}}.tokens + \
                 request_rate_limiter.{{{id_prefix}000000012345}}.timestamp"
            )
        }
    })
}

/// Waits (at most 3 s) for keys that are not buckets to appear in an empty database, and
/// returns how many there are.
async fn settle_aux_keys(conn: &mut MultiplexedConnection) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await.map_err(e2s)?;
        if keys > 0 || Instant::now() > deadline {
            return Ok(keys);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The keys of a database, sorted into the variant's bucket keys and the others.
struct Census {
    buckets_keys: u64,
    others: u64,
    /// Up to 10 of the others.
    examples: Vec<String>,
}

async fn census(conn: &mut MultiplexedConnection, variant: Variant) -> Result<Census, String> {
    let prefix = match variant {
        Variant::Ours { .. } => "svc:{",
        Variant::SpringBenchmark { .. } | Variant::SpringPaired { .. } => "request_rate_limiter.{",
        Variant::Peer { peer, .. } => peer.prefix(),
    };
    let mut c = Census {
        buckets_keys: 0,
        others: 0,
        examples: Vec::new(),
    };
    let mut cursor = 0u64;
    // SCAN visits every key in a bounded number of steps; the cap is a safety net.
    for _ in 0..1_000_000 {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(e2s)?;
        for key in batch {
            if key.starts_with(prefix) {
                c.buckets_keys += 1;
            } else {
                c.others += 1;
                if c.examples.len() < 10 {
                    c.examples.push(key);
                }
            }
        }
        cursor = next;
        if cursor == 0 {
            return Ok(c);
        }
    }
    Err("SCAN did not finish".to_owned())
}

async fn one_run(o: &Options, run: usize) -> Result<Vec<Sample>, String> {
    let server = match &o.maxmemory_policy {
        Some(p) => RedisServer::start_with(&["--maxmemory", "4gb", "--maxmemory-policy", p]),
        None => RedisServer::start(),
    };
    let mut conn = server.connection().await;
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("svc")
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(Duration::from_secs(5)))
        .build()
        .await
        .map_err(e2s)?;
    let spring_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SPRING_SCRIPT)
        .query_async(&mut conn)
        .await
        .map_err(e2s)?;
    if run == 0 {
        let server_info = info(&mut conn, "server").await?;
        let memory = info(&mut conn, "memory").await?;
        let get = |m: &HashMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
        println!(
            "redis_version {}, {}, maxmemory-policy {}; Spring script SHA1 {spring_sha}",
            get(&server_info, "redis_version"),
            get(&memory, "mem_allocator"),
            get(&memory, "maxmemory_policy"),
        );
    }
    let mut ctx = Ctx {
        server: &server,
        conn,
        limiter,
        spring_sha,
        buckets: o.buckets,
        concurrency: o.concurrency,
    };
    let mut samples = Vec::new();
    for variant in VARIANTS {
        let s = measure(&mut ctx, variant).await?;
        println!(
            "run {}: {:<52} {:>9} bytes / {:>9.1} buckets ({} keys) = {:>6.1} bytes/bucket  [{:.1} s]",
            run + 1,
            variant.label(),
            s.growth,
            s.buckets,
            s.keys,
            s.per_bucket,
            s.seconds
        );
        samples.push(s);
    }
    Ok(samples)
}

fn median_min_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        f64::midpoint(v[mid - 1], v[mid])
    };
    (median, v[0], v[v.len() - 1])
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let o = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench_memory: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    println!(
        "Redis memory per active bucket: {} buckets per variant, {} runs (fresh redis-server each)",
        o.buckets, o.runs
    );
    let mut runs = Vec::new();
    for run in 0..o.runs {
        match one_run(&o, run).await {
            Ok(samples) => runs.push(samples),
            Err(e) => {
                eprintln!("bench_memory: run {}: {e}", run + 1);
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!();
    println!("| variant | key(s) | key length | bytes per bucket, median (min-max) |");
    println!("|---|---|---|---|");
    let mut medians = Vec::new();
    for (i, variant) in VARIANTS.iter().enumerate() {
        let (median, min, max) = median_min_max(runs.iter().map(|r| r[i].per_bucket).collect());
        medians.push(median);
        let example = &runs[0][i].key_example;
        let lengths: Vec<String> = example.split(" + ").map(|k| k.len().to_string()).collect();
        let keys: Vec<String> = example.split(" + ").map(|k| format!("`{k}`")).collect();
        println!(
            "| {} | {} | {} | {median:.1} ({min:.1}-{max:.1}) |",
            variant.label(),
            keys.join(" + "),
            lengths.join(" + "),
        );
    }
    println!();
    println!(
        "ours / spring: {:.3} (ideal keys); {:.3} (40-char name)",
        medians[0] / medians[1],
        medians[2] / medians[3]
    );
    std::process::ExitCode::SUCCESS
}
