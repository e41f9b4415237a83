//! Medians over runs, the ratios against `redis-benchmark` and between the series, and the
//! printed summary: one row per series (contender) and concurrency.

use crate::args::Args;
use crate::load::Point;
use crate::redis_benchmark::{BenchResult, ServerWork};
use crate::stats::{Spread, thousands, us};

/// The concurrency compared with the `-c 50 -P 16` ceiling.
pub(crate) const CEILING_TASKS: usize = 64;
/// Target: the server's CPU per decision at [`CEILING_TASKS`] ÷ rate-limiter-flexible's.
const FLEXIBLE_CPU_TARGET: f64 = 0.5;
/// Target: decisions/s at [`CEILING_TASKS`] ÷ the ceiling.
pub(crate) const THROUGHPUT_TARGET: f64 = 1.8;
/// Target: our p50 at one task ÷ `redis-benchmark -c 1`'s p50.
pub(crate) const LATENCY_TARGET: f64 = 1.05;
/// Target: decisions/s at [`CEILING_TASKS`] ÷ rate-limiter-flexible's at as many in flight.
pub(crate) const FLEXIBLE_TARGET: f64 = 2.0;

/// Everything one run measured.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) ceiling: BenchResult,
    pub(crate) single: BenchResult,
    /// One entry per contender, in the same order in every run.
    pub(crate) series: Vec<SeriesRun>,
    /// The deny-cache flood, when the limiter is measured.
    pub(crate) flood: Option<Point>,
    pub(crate) load: (String, String),
}

/// Whose client a series measures: the targets and the comparison with
/// rate-limiter-flexible apply to this project's series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// This project (the limiter, or redis-rs alone with `--redis-rs-only`).
    Ours,
    /// rate-limiter-flexible (Node).
    Flexible,
}

/// One contender's measurements in one run, one per concurrency.
#[derive(Debug)]
pub(crate) struct SeriesRun {
    /// Short name: the first column of the table (`ours`, `rate-limiter-flexible`).
    pub(crate) label: String,
    /// What it is: the legend of the plots.
    pub(crate) legend: String,
    pub(crate) side: Side,
    pub(crate) samples: Vec<Sample>,
}

/// One measurement of one contender at one concurrency: what the summary needs of it,
/// whoever measured it (our tasks here, or the Node runner).
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) tasks: usize,
    pub(crate) decisions_per_sec: f64,
    /// p50, p90, p99, p99.9 in µs, as [`QUANTILES`].
    pub(crate) latency_us: [f64; 4],
    pub(crate) server: ServerWork,
    /// Script calls by the number of calls each decided (`RedisStore::batch_sizes` over the
    /// measurement), for a limiter whose store was kept.
    pub(crate) batches: Option<[u64; 8]>,
    /// Refused calls (must stay 0: the limit admits every call).
    pub(crate) denied: u64,
    /// Decided by our failure policy (a store failure or a late reply); `None` for a client
    /// that has no such thing.
    pub(crate) not_by_store: Option<u64>,
    pub(crate) errors: u64,
}

impl Sample {
    /// The server's whole CPU (user + sys) per decision, in µs.
    pub(crate) fn cpu_us_per_decision(&self) -> f64 {
        self.server.cpu_us / (self.decisions_per_sec * self.server.window.as_secs_f64())
    }

    pub(crate) fn of(point: &Point) -> Sample {
        Sample {
            tasks: point.tasks,
            decisions_per_sec: point.decisions_per_sec(),
            latency_us: QUANTILES.map(|(q, _)| point.latency_us(q)),
            server: point.server,
            batches: point.batches,
            denied: point.stats.denied,
            not_by_store: Some(point.stats.not_by_store),
            errors: point.stats.errors,
        }
    }

    pub(crate) fn line(&self, label: &str) -> String {
        let [p50, p90, p99, p999] = self.latency_us;
        let by_policy = self
            .not_by_store
            .map_or_else(String::new, |n| format!(", not by the store {n}"));
        format!(
            "{label} {:>3} tasks  {:>9.0} decisions/s  p50 {p50:>7.1} µs  p90 {p90:>7.1}  p99 {p99:>7.1}  p99.9 {p999:>7.1}   {}; denied {}{by_policy}, errors {}",
            self.tasks, self.decisions_per_sec, self.server, self.denied, self.errors,
        )
    }
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

/// One concurrency of one series over all runs.
#[derive(Debug)]
pub(crate) struct Level {
    pub(crate) tasks: usize,
    pub(crate) decisions_per_sec: Spread,
    /// p50, p90, p99, p99.9 in µs.
    pub(crate) latency_us: [Spread; 4],
    pub(crate) server_us: Spread,
    /// The server's whole CPU per decision (µs).
    pub(crate) cpu_us: Spread,
    /// Script calls by batch size, summed over the runs.
    pub(crate) batches: Option<[u64; 8]>,
    pub(crate) denied: u64,
    pub(crate) not_by_store: Option<u64>,
    pub(crate) errors: u64,
}

pub(crate) const QUANTILES: [(f64, &str); 4] =
    [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")];

/// One contender over all runs: its levels and its ratios.
#[derive(Debug)]
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) legend: String,
    pub(crate) side: Side,
    pub(crate) levels: Vec<Level>,
    /// Per run: decisions/s at [`CEILING_TASKS`] ÷ that run's ceiling.
    pub(crate) throughput_ratio: Option<Spread>,
    /// Per run: p50 at one task ÷ that run's `redis-benchmark -c 1` p50.
    pub(crate) latency_ratio: Option<Spread>,
    /// Per run: decisions/s at [`CEILING_TASKS`] ÷ rate-limiter-flexible's at as many
    /// in-flight calls (this project's series only, when both were measured).
    pub(crate) flexible_ratio: Option<Spread>,
    /// Per run: the server's CPU per decision at [`CEILING_TASKS`] ÷ rate-limiter-flexible's
    /// at as many in flight.
    pub(crate) flexible_cpu_ratio: Option<Spread>,
}

impl Series {
    pub(crate) fn best(&self) -> f64 {
        self.levels
            .iter()
            .map(|l| l.decisions_per_sec.median)
            .fold(0.0, f64::max)
    }
}

#[derive(Debug)]
pub(crate) struct Summary {
    pub(crate) runs: usize,
    pub(crate) ceiling_rps: Spread,
    pub(crate) ceiling_server_us: Spread,
    pub(crate) single_p50_us: Spread,
    pub(crate) single_p99_us: Spread,
    pub(crate) single_rps: Spread,
    pub(crate) single_server_us: Spread,
    /// Every contender, in the order measured; this project's first.
    pub(crate) series: Vec<Series>,
    pub(crate) flood: Option<Flood>,
    pub(crate) loads: Vec<(String, String)>,
}

/// Where `tasks` is among a series' samples (the same in every run).
fn at(samples: &[Sample], tasks: usize) -> Option<usize> {
    samples.iter().position(|s| s.tasks == tasks)
}

impl Summary {
    pub(crate) fn new(runs: &[Run]) -> Summary {
        let first = &runs[0];
        let flexible = first.series.iter().position(|s| s.side == Side::Flexible);
        let series = first
            .series
            .iter()
            .enumerate()
            .map(|(k, head)| {
                let levels = head
                    .samples
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let samples: Vec<&Sample> =
                            runs.iter().map(|r| &r.series[k].samples[i]).collect();
                        Level {
                            tasks: s.tasks,
                            decisions_per_sec: Spread::of(
                                samples.iter().map(|s| s.decisions_per_sec),
                            ),
                            latency_us: [0, 1, 2, 3]
                                .map(|q| Spread::of(samples.iter().map(|s| s.latency_us[q]))),
                            server_us: Spread::of(samples.iter().map(|s| s.server.usec_per_call())),
                            cpu_us: Spread::of(samples.iter().map(|s| s.cpu_us_per_decision())),
                            batches: samples.iter().try_fold([0u64; 8], |mut sum, s| {
                                for (t, n) in sum.iter_mut().zip(s.batches?) {
                                    *t += n;
                                }
                                Some(sum)
                            }),
                            denied: samples.iter().map(|s| s.denied).sum(),
                            not_by_store: samples.iter().map(|s| s.not_by_store).sum(),
                            errors: samples.iter().map(|s| s.errors).sum(),
                        }
                    })
                    .collect();
                let throughput_ratio = at(&head.samples, CEILING_TASKS).map(|i| {
                    Spread::of(
                        runs.iter()
                            .map(|r| r.series[k].samples[i].decisions_per_sec / r.ceiling.rps),
                    )
                });
                let latency_ratio =
                    at(&head.samples, 1).map(|i| {
                        Spread::of(runs.iter().map(|r| {
                            r.series[k].samples[i].latency_us[0] / (r.single.p50_ms * 1000.0)
                        }))
                    });
                let flexible_ratio = flexible.filter(|_| head.side == Side::Ours).and_then(|f| {
                    let ours = at(&head.samples, CEILING_TASKS)?;
                    let theirs = at(&first.series[f].samples, CEILING_TASKS)?;
                    Some(Spread::of(runs.iter().map(|r| {
                        r.series[k].samples[ours].decisions_per_sec
                            / r.series[f].samples[theirs].decisions_per_sec
                    })))
                });
                let flexible_cpu_ratio =
                    flexible.filter(|_| head.side == Side::Ours).and_then(|f| {
                        let ours = at(&head.samples, CEILING_TASKS)?;
                        let theirs = at(&first.series[f].samples, CEILING_TASKS)?;
                        Some(Spread::of(runs.iter().map(|r| {
                            r.series[k].samples[ours].cpu_us_per_decision()
                                / r.series[f].samples[theirs].cpu_us_per_decision()
                        })))
                    });
                Series {
                    label: head.label.clone(),
                    legend: head.legend.clone(),
                    side: head.side,
                    levels,
                    throughput_ratio,
                    latency_ratio,
                    flexible_ratio,
                    flexible_cpu_ratio,
                }
            })
            .collect();
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
            series,
            flood,
            loads: runs.iter().map(|r| r.load.clone()).collect(),
        }
    }

    pub(crate) fn print(&self, args: &Args) {
        println!(
            "## Summary: median of {} runs (min–max); ours: {}, {}",
            self.runs,
            if args.redis_rs_only {
                "redis-rs alone (baseline), not the limiter"
            } else {
                "RateLimiter, Redis store"
            },
            args.runtime_label(),
        );
        println!();
        println!(
            "| series | tasks | decisions/s | p50 µs | p90 µs | p99 µs | p99.9 µs | server µs/call | Redis CPU µs/decision | denied | not by the store | errors |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for s in &self.series {
            for l in &s.levels {
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    s.label,
                    l.tasks,
                    l.decisions_per_sec.show_count(),
                    l.latency_us[0].show(0),
                    l.latency_us[1].show(0),
                    l.latency_us[2].show(0),
                    l.latency_us[3].show(0),
                    l.server_us.show(2),
                    l.cpu_us.show(2),
                    l.denied,
                    l.not_by_store
                        .map_or_else(|| "–".to_owned(), |n| n.to_string()),
                    l.errors
                );
            }
        }
        // How the coalesced limiter's calls left: script calls per batch size.
        for s in &self.series {
            for l in &s.levels {
                let Some(b) = l.batches else { continue };
                let total: u64 = b.iter().sum();
                let classes = [
                    "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127", "128+",
                ];
                let shares: Vec<String> = classes
                    .iter()
                    .zip(b)
                    .filter(|(_, n)| *n > 0)
                    .map(|(c, n)| format!("{c}: {:.1} %", 100.0 * us(n) / us(total.max(1))))
                    .collect();
                println!(
                    "batch sizes, {} at {} tasks: {} script calls; {}",
                    s.label,
                    l.tasks,
                    thousands(us(total)),
                    shares.join(", ")
                );
            }
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
        for s in &self.series {
            // The targets are this project's; other contenders get the bare ratio.
            let ours = s.side == Side::Ours;
            if let Some(r) = s.throughput_ratio {
                let target = if ours {
                    format!(
                        " (target ≥ {THROUGHPUT_TARGET}: {})",
                        verdict(r.median >= THROUGHPUT_TARGET)
                    )
                } else {
                    String::new()
                };
                println!(
                    "ratio: {} at {CEILING_TASKS} tasks ÷ redis-benchmark -c 50 -P 16 = {}{target}",
                    s.label,
                    r.show(3)
                );
            }
            if let Some(r) = s.latency_ratio {
                let target = if ours {
                    format!(
                        " (target ≤ {LATENCY_TARGET}: {})",
                        verdict(r.median <= LATENCY_TARGET)
                    )
                } else {
                    String::new()
                };
                println!(
                    "ratio: {} p50 at 1 task ÷ redis-benchmark -c 1 p50 = {}{target}",
                    s.label,
                    r.show(3)
                );
            }
            if let Some(r) = s.flexible_cpu_ratio {
                println!(
                    "ratio: {} Redis CPU per decision at {CEILING_TASKS} tasks ÷ \
                     rate-limiter-flexible's at {CEILING_TASKS} in flight = {} (target ≤ \
                     {FLEXIBLE_CPU_TARGET}: {})",
                    s.label,
                    r.show(2),
                    verdict(r.median <= FLEXIBLE_CPU_TARGET)
                );
            }
            if let Some(r) = s.flexible_ratio {
                println!(
                    "ratio: {} at {CEILING_TASKS} tasks ÷ rate-limiter-flexible at {CEILING_TASKS} \
                     in flight = {} (target ≥ {FLEXIBLE_TARGET}: {})",
                    s.label,
                    r.show(2),
                    verdict(r.median >= FLEXIBLE_TARGET)
                );
            }
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
        for s in &self.series {
            println!("best of {}: {} decisions/s", s.label, thousands(s.best()));
        }
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}
