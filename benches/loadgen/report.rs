//! Medians over runs, the ratios against `redis-benchmark`, and the printed summary.

use crate::args::Args;
use crate::load::Point;
use crate::redis_benchmark::BenchResult;
use crate::stats::{Spread, thousands, us};

/// The concurrency compared with the `-c 50 -P 16` ceiling.
pub(crate) const CEILING_TASKS: usize = 64;
/// Target: decisions/s at [`CEILING_TASKS`] ÷ the ceiling.
pub(crate) const THROUGHPUT_TARGET: f64 = 0.95;
/// Target: our p50 at one task ÷ `redis-benchmark -c 1`'s p50.
pub(crate) const LATENCY_TARGET: f64 = 1.1;

/// Everything one run measured.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) ceiling: BenchResult,
    pub(crate) single: BenchResult,
    pub(crate) points: Vec<Point>,
    /// The deny-cache flood, when the limiter is measured.
    pub(crate) flood: Option<Point>,
    pub(crate) load: (String, String),
}

/// Target: decisions/s of the deny-cache flood ÷ the ceiling.
pub(crate) const FLOOD_TARGET: f64 = 10.0;

/// The deny-cache flood over all runs.
#[derive(Debug)]
pub(crate) struct Flood {
    pub(crate) decisions_per_sec: Spread,
    /// Per run: the flood's decisions/s ÷ that run's ceiling.
    pub(crate) ratio: Spread,
    pub(crate) p50_us: Spread,
    pub(crate) decisions: u64,
    /// Calls admitted during the measurement: must be 0 (Redis refuses the key all along).
    pub(crate) admitted: u64,
    /// Decisions made by the deny cache, without a round trip.
    pub(crate) by_cache: u64,
    /// `EVALSHA`s the server ran during the measurement.
    pub(crate) evalsha: u64,
    pub(crate) errors: u64,
}

/// One concurrency over all runs.
#[derive(Debug)]
pub(crate) struct Level {
    pub(crate) tasks: usize,
    pub(crate) decisions_per_sec: Spread,
    /// p50, p90, p99, p99.9 in µs.
    pub(crate) latency_us: [Spread; 4],
    pub(crate) server_us: Spread,
    pub(crate) denied: u64,
    pub(crate) not_by_store: u64,
    pub(crate) errors: u64,
}

pub(crate) const QUANTILES: [(f64, &str); 4] =
    [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")];

#[derive(Debug)]
pub(crate) struct Summary {
    pub(crate) runs: usize,
    pub(crate) ceiling_rps: Spread,
    pub(crate) ceiling_server_us: Spread,
    pub(crate) single_p50_us: Spread,
    pub(crate) single_p99_us: Spread,
    pub(crate) single_rps: Spread,
    pub(crate) single_server_us: Spread,
    pub(crate) levels: Vec<Level>,
    /// Per run: ours at [`CEILING_TASKS`] ÷ that run's ceiling.
    pub(crate) throughput_ratio: Option<Spread>,
    /// Per run: our p50 at one task ÷ that run's `-c 1` p50.
    pub(crate) latency_ratio: Option<Spread>,
    pub(crate) flood: Option<Flood>,
    pub(crate) loads: Vec<(String, String)>,
}

impl Summary {
    pub(crate) fn new(args: &Args, runs: &[Run]) -> Summary {
        let levels = args
            .concurrency
            .iter()
            .enumerate()
            .map(|(i, &tasks)| {
                let points: Vec<&Point> = runs.iter().map(|r| &r.points[i]).collect();
                Level {
                    tasks,
                    decisions_per_sec: Spread::of(points.iter().map(|p| p.decisions_per_sec())),
                    latency_us: QUANTILES
                        .map(|(q, _)| Spread::of(points.iter().map(|p| p.latency_us(q)))),
                    server_us: Spread::of(points.iter().map(|p| p.server.usec_per_call())),
                    denied: points.iter().map(|p| p.stats.denied).sum(),
                    not_by_store: points.iter().map(|p| p.stats.not_by_store).sum(),
                    errors: points.iter().map(|p| p.stats.errors).sum(),
                }
            })
            .collect();
        let at = |tasks: usize| args.concurrency.iter().position(|&t| t == tasks);
        let throughput_ratio = at(CEILING_TASKS).map(|i| {
            Spread::of(
                runs.iter()
                    .map(|r| r.points[i].decisions_per_sec() / r.ceiling.rps),
            )
        });
        let latency_ratio = at(1).map(|i| {
            Spread::of(
                runs.iter()
                    .map(|r| r.points[i].latency_us(0.5) / (r.single.p50_ms * 1000.0)),
            )
        });
        let floods: Vec<(&Point, f64)> = runs
            .iter()
            .filter_map(|r| r.flood.as_ref().map(|f| (f, r.ceiling.rps)))
            .collect();
        let flood = (!floods.is_empty()).then(|| Flood {
            decisions_per_sec: Spread::of(floods.iter().map(|(f, _)| f.decisions_per_sec())),
            ratio: Spread::of(floods.iter().map(|(f, c)| f.decisions_per_sec() / c)),
            p50_us: Spread::of(floods.iter().map(|(f, _)| f.latency_us(0.5))),
            decisions: floods.iter().map(|(f, _)| f.stats.decisions).sum(),
            admitted: floods
                .iter()
                .map(|(f, _)| f.stats.decisions - f.stats.denied)
                .sum(),
            by_cache: floods.iter().map(|(f, _)| f.stats.not_by_store).sum(),
            evalsha: floods.iter().map(|(f, _)| f.server.calls).sum(),
            errors: floods.iter().map(|(f, _)| f.stats.errors).sum(),
        });
        Summary {
            runs: runs.len(),
            ceiling_rps: Spread::of(runs.iter().map(|r| r.ceiling.rps)),
            ceiling_server_us: Spread::of(runs.iter().map(|r| r.ceiling.server.usec_per_call())),
            single_p50_us: Spread::of(runs.iter().map(|r| r.single.p50_ms * 1000.0)),
            single_p99_us: Spread::of(runs.iter().map(|r| r.single.p99_ms * 1000.0)),
            single_rps: Spread::of(runs.iter().map(|r| r.single.rps)),
            single_server_us: Spread::of(runs.iter().map(|r| r.single.server.usec_per_call())),
            levels,
            throughput_ratio,
            latency_ratio,
            flood,
            loads: runs.iter().map(|r| r.load.clone()).collect(),
        }
    }

    pub(crate) fn print(&self, args: &Args) {
        println!(
            "## Summary: median of {} runs (min–max); {}; {}",
            self.runs,
            args.runtime_label(),
            if args.redis_rs_only {
                "redis-rs alone (baseline), not the limiter"
            } else {
                "RateLimiter, Redis store"
            }
        );
        println!();
        println!(
            "| tasks | decisions/s | p50 µs | p90 µs | p99 µs | p99.9 µs | server µs/call | denied | not by the store | errors |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for l in &self.levels {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                l.tasks,
                l.decisions_per_sec.show_count(),
                l.latency_us[0].show(0),
                l.latency_us[1].show(0),
                l.latency_us[2].show(0),
                l.latency_us[3].show(0),
                l.server_us.show(2),
                l.denied,
                l.not_by_store,
                l.errors
            );
        }
        println!();
        println!("| redis-benchmark | calls/s | p50 µs | p99 µs | server µs/call |");
        println!("|---|---:|---:|---:|---:|");
        println!(
            "| `-c 50 -P 16` (ceiling) | {} | | | {} |",
            self.ceiling_rps.show_count(),
            self.ceiling_server_us.show(2)
        );
        println!(
            "| `-c 1` | {} | {} | {} | {} |",
            self.single_rps.show_count(),
            self.single_p50_us.show(0),
            self.single_p99_us.show(0),
            self.single_server_us.show(2)
        );
        println!();
        if let Some(r) = self.throughput_ratio {
            println!(
                "ratio: ours at {CEILING_TASKS} tasks ÷ redis-benchmark -c 50 -P 16 = {} \
                 (target ≥ {THROUGHPUT_TARGET}: {})",
                r.show(3),
                verdict(r.median >= THROUGHPUT_TARGET)
            );
        }
        if let Some(r) = self.latency_ratio {
            println!(
                "ratio: our p50 at 1 task ÷ redis-benchmark -c 1 p50 = {} (target ≤ \
                 {LATENCY_TARGET}: {})",
                r.show(3),
                verdict(r.median <= LATENCY_TARGET)
            );
        }
        if let Some(f) = &self.flood {
            println!(
                "deny-cache flood, {CEILING_TASKS} tasks on one refused key: {} decisions/s, \
                 p50 {} µs; {} decisions, {} by the cache, {} EVALSHA, {} admitted, {} errors",
                f.decisions_per_sec.show_count(),
                f.p50_us.show(2),
                thousands(us(f.decisions)),
                thousands(us(f.by_cache)),
                f.evalsha,
                f.admitted,
                f.errors
            );
            println!(
                "ratio: deny-cache flood ÷ redis-benchmark -c 50 -P 16 = {} (target ≥ \
                 {FLOOD_TARGET} with 0 admitted: {})",
                f.ratio.show(1),
                verdict(f.ratio.median >= FLOOD_TARGET && f.admitted == 0 && f.errors == 0)
            );
        }
        let loads: Vec<String> = self.loads.iter().map(|(a, b)| format!("{a}→{b}")).collect();
        println!(
            "load average per run (1 min, start→end): {}",
            loads.join(", ")
        );
        println!(
            "best of ours: {} decisions/s",
            thousands(
                self.levels
                    .iter()
                    .map(|l| l.decisions_per_sec.median)
                    .fold(0.0, f64::max)
            )
        );
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}
