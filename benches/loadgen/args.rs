//! The command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) const USAGE: &str = "\
usage: cargo bench -p redis-ratelimit-benches --bench loadgen -- [options]

  --url URL            a redis-server on this machine (redis://127.0.0.1:PORT, not 6379) to use
                       instead of starting one; never a shared server: it is loaded fully
  --runs N             repetitions of every measurement (default 5)
  --duration SECS      length of each measurement (default 3)
  --warmup SECS        warm-up before each of our measurements (default 1)
  --keys M             distinct keys (default 10000)
  --concurrency LIST   our task counts (default 1,4,16,64,256)
  --runtime KIND       multi (default) or current (Tokio's current-thread runtime)
  --workers N          worker threads of the multi-thread runtime (default: the CPUs less one,
                       at least 1: the redis-server on this machine needs a core of its own)
  --rate R             tokens per second of the limit (default 1000000000: all admitted)
  --burst B            burst of the limit (default 1000)
  --out DIR            where the plots go (default: docs/ of the repository)
  --prefix NAME        file name prefix of the plots (default loadgen)
  --font PATH          a TTF font for the plots (default: DejaVu Sans, found by path or fc-match)
  --no-plots           draw no plots
  --batch-limit N      RedisStore::batch_limit of the coalesced limiter (default 64); a second
                       limiter with batch_limit(1), one EVALSHA per call, is measured beside it
  --redis-rs-only      measure, instead of the limiter, the same EVALSHA through redis-rs alone
                       (Script::invoke_async on one multiplexed connection): the baseline that
                       shows what the limiter adds to the client it is built on
  --no-flexible        leave out rate-limiter-flexible. By default it is measured too: its
                       RateLimiterRedis on ioredis, from one Node process, on the same server,
                       keys and limit; installed on first use from benches/loadgen/flexible
                       (pinned package-lock.json) by `npm ci` into target/loadgen-flexible/.
                       Left out, with a message, when node (20+) or npm is missing (NODE_BIN,
                       NPM_BIN name other binaries) or the install fails
  --flexible-concurrency LIST
                       rate-limiter-flexible's in-flight consumes (default: --concurrency)
  --flexible-pipelining MODE
                       ioredis under rate-limiter-flexible: off (default: commands written as
                       issued on one connection; measured faster here) or auto
                       (enableAutoPipelining: one write per event-loop turn, one batch in
                       flight at a time)
  --help               this text

Arguments that cargo or criterion pass (--bench, filters) are ignored.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuntimeFlavor {
    MultiThread,
    CurrentThread,
}

#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) url: Option<String>,
    pub(crate) runs: usize,
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    pub(crate) keys: usize,
    pub(crate) concurrency: Vec<usize>,
    pub(crate) runtime: RuntimeFlavor,
    /// Measure redis-rs alone (the baseline) instead of the limiter.
    pub(crate) redis_rs_only: bool,
    /// `RedisStore::batch_limit` of the coalesced limiter.
    pub(crate) batch_limit: usize,
    /// Measure rate-limiter-flexible too (not `--no-flexible`).
    pub(crate) flexible: bool,
    /// Its in-flight consumes; `None`: the same as `concurrency`.
    pub(crate) flexible_concurrency: Option<Vec<usize>>,
    /// ioredis's `enableAutoPipelining` under rate-limiter-flexible.
    pub(crate) flexible_auto_pipelining: bool,
    pub(crate) workers: usize,
    pub(crate) rate: u32,
    pub(crate) burst: u32,
    pub(crate) out: PathBuf,
    pub(crate) prefix: String,
    pub(crate) font: Option<PathBuf>,
    pub(crate) plots: bool,
    pub(crate) help: bool,
}

impl Args {
    pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut args = Args {
            url: None,
            runs: 5,
            duration: Duration::from_secs(3),
            warmup: Duration::from_secs(1),
            keys: 10_000,
            concurrency: vec![1, 4, 16, 64, 256],
            runtime: RuntimeFlavor::MultiThread,
            redis_rs_only: false,
            batch_limit: 64,
            flexible: true,
            flexible_concurrency: None,
            flexible_auto_pipelining: false,
            // redis-server runs on this machine too and needs a core of its own: a client
            // thread on every core slows the server it measures (see docs/benchmarks.md).
            workers: std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1).max(1)),
            rate: 1_000_000_000,
            burst: 1000,
            // The repository's docs/; this package is its benches/.
            out: Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .map_or_else(|| PathBuf::from("docs"), |root| root.join("docs")),
            prefix: "loadgen".to_owned(),
            font: None,
            plots: true,
            help: false,
        };
        while let Some(arg) = it.next() {
            let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--url" => args.url = Some(value("--url")?),
                "--runs" => args.runs = number(&value("--runs")?, "--runs")?,
                "--duration" => args.duration = seconds(&value("--duration")?, "--duration")?,
                "--warmup" => args.warmup = seconds(&value("--warmup")?, "--warmup")?,
                "--keys" => args.keys = number(&value("--keys")?, "--keys")?,
                "--concurrency" => {
                    args.concurrency = list(&value("--concurrency")?, "--concurrency")?;
                }
                "--flexible-concurrency" => {
                    let name = "--flexible-concurrency";
                    args.flexible_concurrency = Some(list(&value(name)?, name)?);
                }
                "--flexible-pipelining" => {
                    args.flexible_auto_pipelining = match value("--flexible-pipelining")?.as_str() {
                        "auto" => true,
                        "off" => false,
                        other => {
                            return Err(format!(
                                "unknown pipelining `{other}`; expected `auto` or `off`"
                            ));
                        }
                    }
                }
                "--runtime" => {
                    args.runtime = match value("--runtime")?.as_str() {
                        "multi" => RuntimeFlavor::MultiThread,
                        "current" => RuntimeFlavor::CurrentThread,
                        other => {
                            return Err(format!(
                                "unknown runtime `{other}`; expected `multi` or `current`"
                            ));
                        }
                    }
                }
                "--batch-limit" => {
                    args.batch_limit = number(&value("--batch-limit")?, "--batch-limit")?;
                }
                "--workers" => args.workers = number(&value("--workers")?, "--workers")?,
                "--rate" => args.rate = number(&value("--rate")?, "--rate")?,
                "--burst" => args.burst = number(&value("--burst")?, "--burst")?,
                "--out" => args.out = PathBuf::from(value("--out")?),
                "--prefix" => args.prefix = value("--prefix")?,
                "--font" => args.font = Some(PathBuf::from(value("--font")?)),
                "--no-plots" => args.plots = false,
                "--redis-rs-only" => args.redis_rs_only = true,
                "--no-flexible" => args.flexible = false,
                "--help" | "-h" => args.help = true,
                // What `cargo bench` passes to every harness = false target.
                "--bench" => {}
                other => eprintln!("loadgen: ignoring `{other}`"),
            }
        }
        let lists = [Some(&args.concurrency), args.flexible_concurrency.as_ref()];
        if lists
            .into_iter()
            .flatten()
            .any(|l| l.is_empty() || l.contains(&0))
            || args.runs == 0
            || args.keys == 0
            || args.workers == 0
        {
            return Err(
                "--runs, --keys, --workers and the concurrency lists must be positive".to_owned(),
            );
        }
        Ok(args)
    }

    /// rate-limiter-flexible's in-flight consumes.
    pub(crate) fn flexible_concurrency(&self) -> &[usize] {
        self.flexible_concurrency
            .as_deref()
            .unwrap_or(&self.concurrency)
    }

    pub(crate) fn runtime_label(&self) -> String {
        match self.runtime {
            RuntimeFlavor::MultiThread => {
                let s = if self.workers == 1 { "" } else { "s" };
                format!("Tokio multi-thread, {} worker{s}", self.workers)
            }
            RuntimeFlavor::CurrentThread => "Tokio current-thread".to_owned(),
        }
    }
}

fn number<T: std::str::FromStr>(s: &str, name: &str) -> Result<T, String> {
    match s.replace('_', "").parse::<T>() {
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{name}: `{s}` is not a positive integer")),
    }
}

fn list(s: &str, name: &str) -> Result<Vec<usize>, String> {
    s.split(',').map(|n| number(n.trim(), name)).collect()
}

fn seconds(s: &str, name: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or(format!("{name}: `{s}` is not a number of seconds"))
}

/// The port of `url`, which must name a server on this machine.
pub(crate) fn loopback_port(url: &str) -> Result<u16, String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or(format!("--url {url}: only redis:// URLs"))?;
    let authority = rest.split('/').next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "6379"));
    if !matches!(host, "127.0.0.1" | "localhost") {
        return Err(format!(
            "--url {url}: the load generator only loads servers on this machine (127.0.0.1)"
        ));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("--url {url}: bad port `{port}`"))?;
    if port == 6379 {
        return Err(format!(
            "--url {url}: port 6379 is where a shared Redis usually runs; start a dedicated \
             redis-server on another port (or leave --url out: the benchmark starts its own)"
        ));
    }
    Ok(port)
}
