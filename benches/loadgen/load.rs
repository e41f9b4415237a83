//! Our side: N tasks deciding through one `RateLimiter` on the Redis store, closed loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use redis_ratelimit::store::RedisStore;
use redis_ratelimit::{Decision, Error, Limit, RateLimiter, Source};

use crate::redis_benchmark::{Bench, ScriptArgs, ServerWork};
use crate::stats::us;

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// One measurement at one concurrency.
#[derive(Debug)]
pub(crate) struct Point {
    pub(crate) tasks: usize,
    pub(crate) elapsed: Duration,
    pub(crate) stats: TaskStats,
    pub(crate) server: ServerWork,
    /// Script calls by batch size over the measurement, for a limiter whose store was kept.
    pub(crate) batches: Option<[u64; 8]>,
}

impl Point {
    pub(crate) fn decisions_per_sec(&self) -> f64 {
        us(self.stats.decisions) / self.elapsed.as_secs_f64()
    }

    /// Latency at `quantile`, in microseconds.
    pub(crate) fn latency_us(&self, quantile: f64) -> f64 {
        us(self.stats.latency_ns.value_at_quantile(quantile)) / 1000.0
    }
}

/// What one task (or all of them, merged) saw during the measurement.
#[derive(Debug)]
pub(crate) struct TaskStats {
    pub(crate) decisions: u64,
    pub(crate) denied: u64,
    /// Decided by the failure policy (the store failed or was late): must stay 0.
    pub(crate) not_by_store: u64,
    pub(crate) errors: u64,
    pub(crate) latency_ns: Histogram<u64>,
}

impl TaskStats {
    fn new() -> TaskStats {
        TaskStats {
            decisions: 0,
            denied: 0,
            not_by_store: 0,
            errors: 0,
            // 1 ns to 60 s, 3 significant digits.
            latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
        }
    }

    fn record(&mut self, latency: Duration, result: &Result<Decision, Error>) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns.saturating_record(ns);
        match result {
            Ok(d) => {
                self.decisions += 1;
                self.denied += u64::from(!d.allowed);
                self.not_by_store += u64::from(d.source != Source::Store);
            }
            Err(_) => self.errors += 1,
        }
    }

    fn merge(&mut self, other: &TaskStats) {
        self.decisions += other.decisions;
        self.denied += other.denied;
        self.not_by_store += other.not_by_store;
        self.errors += other.errors;
        self.latency_ns.add(&other.latency_ns).unwrap();
    }
}

/// `tasks` tasks call `limiter.check` in a closed loop on keys drawn uniformly from `keys`;
/// after `warmup`, the calls that complete within `duration` are counted.
pub(crate) async fn measure(
    client: &Client,
    keys: &Arc<[String]>,
    limit: Limit,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
    bench: &Bench,
) -> Point {
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let client = client.clone();
            let keys = Arc::clone(keys);
            let phase = Arc::clone(&phase);
            tokio::spawn(async move {
                let mut rng = XorShift::new(t);
                let mut stats = TaskStats::new();
                loop {
                    let key = &keys[rng.below(keys.len())];
                    let started = Instant::now();
                    let result = client.check(key, &limit).await;
                    let latency = started.elapsed();
                    // A call the deny cache answers never waits: give the other tasks and
                    // the timers their turn now and then, as a request's I/O would.
                    tokio::task::consume_budget().await;
                    match phase.load(Ordering::Relaxed) {
                        MEASURE => stats.record(latency, &result),
                        STOP => return stats,
                        _ => {}
                    }
                }
            })
        })
        .collect();

    tokio::time::sleep(warmup).await;
    bench.reset_stats_async().await;
    let sizes_before = client.batch_sizes();
    phase.store(MEASURE, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    phase.store(STOP, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let server = bench.server_work_async().await;
    let batches = client
        .batch_sizes()
        .zip(sizes_before)
        .map(|(after, before)| std::array::from_fn(|i| after[i] - before[i]));

    let mut stats = TaskStats::new();
    for w in workers {
        stats.merge(&w.await.unwrap());
    }
    Point {
        tasks,
        elapsed,
        stats,
        server,
        batches,
    }
}

/// What the tasks call: the limiter (what we measure), or, as a baseline, the same script
/// through redis-rs alone on one multiplexed connection (what the limiter is built on).
#[derive(Clone)]
pub(crate) enum Client {
    /// The limiter, and its store when the load generator made it (to read its batch sizes).
    Limiter(RateLimiter, Option<RedisStore>),
    RedisRs {
        conn: redis::aio::MultiplexedConnection,
        script: Arc<redis::Script>,
        args: ScriptArgs,
    },
}

impl Client {
    /// Its store's script calls by batch size so far (`RedisStore::batch_sizes`).
    fn batch_sizes(&self) -> Option<[u64; 8]> {
        match self {
            Client::Limiter(_, Some(store)) => Some(store.batch_sizes()),
            _ => None,
        }
    }

    async fn check(&self, key: &str, limit: &Limit) -> Result<Decision, Error> {
        match self {
            Client::Limiter(l, _) => l.check(key, limit).await,
            Client::RedisRs { conn, script, args } => {
                let mut conn = conn.clone();
                let reply: Vec<u64> = script
                    .key(format!("bench:{{{key}}}"))
                    .arg(args.interval)
                    .arg(args.per_micro)
                    .arg(args.tau)
                    .arg(args.cost)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(Decision::new(
                    reply.first() == Some(&1),
                    reply.get(1).copied().unwrap_or(0),
                    *limit,
                    args.cost,
                    Duration::ZERO,
                    Duration::ZERO,
                ))
            }
        }
    }
}

/// A small, fast generator for uniform key picks (one per task, no shared state).
struct XorShift(u64);

impl XorShift {
    fn new(seed: usize) -> XorShift {
        let seed = u64::try_from(seed).unwrap_or(0);
        XorShift(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xBF58_476D_1CE4_E5B9) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        // Multiply-shift: uniform enough for picking keys, no division.
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        usize::try_from((u128::from(x) * u128::from(n)) >> 64).unwrap_or(0)
    }
}
