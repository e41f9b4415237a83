//! `redis-benchmark` running the project's script, and the server's own count of the work.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::stats::us;

/// The script's ARGV for `Limit::per_second(rate).burst(burst)` (see `gcra.lua`): with
/// `g = gcd(1_000_000, rate)`, interval = 1_000_000 / g, per_micro = rate / g,
/// tau = burst × interval.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScriptArgs {
    pub(crate) interval: u64,
    pub(crate) per_micro: u64,
    pub(crate) tau: u64,
    pub(crate) cost: u32,
}

impl ScriptArgs {
    pub(crate) fn for_limit(rate: u32, burst: u32, cost: u32) -> ScriptArgs {
        const PERIOD_US: u64 = 1_000_000;
        let (mut a, mut b) = (PERIOD_US, u64::from(rate));
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let interval = PERIOD_US / a;
        ScriptArgs {
            interval,
            per_micro: u64::from(rate) / a,
            tau: u64::from(burst) * interval,
            cost,
        }
    }
}

/// One `redis-benchmark` run, as it reports it, and as the server counted it.
#[derive(Debug, Clone)]
pub(crate) struct BenchResult {
    pub(crate) rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p95_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) server: ServerWork,
}

impl BenchResult {
    pub(crate) fn line(&self, label: &str) -> String {
        format!(
            "redis-benchmark {label:<12} {:>9.0} calls/s   p50 {:>7.1} µs  p95 {:>7.1}  p99 {:>7.1}   {}",
            self.rps,
            self.p50_ms * 1000.0,
            self.p95_ms * 1000.0,
            self.p99_ms * 1000.0,
            self.server
        )
    }
}

/// What the server counted for script calls (`FCALL`, `EVALSHA`, `EVAL`) over a measurement
/// (`INFO commandstats`), and the CPU it used meanwhile (`INFO cpu`, user + sys: reading the
/// commands and writing the replies too).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerWork {
    pub(crate) calls: u64,
    pub(crate) usec: u64,
    pub(crate) failed: u64,
    /// The server's CPU time from the reset to the reading, in µs.
    pub(crate) cpu_us: f64,
    /// How long that was.
    pub(crate) window: Duration,
}

impl ServerWork {
    pub(crate) fn usec_per_call(&self) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        us(self.usec) / us(self.calls)
    }
}

impl std::fmt::Display for ServerWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server: {} script calls, {:.2} µs each, {} failed",
            self.calls,
            self.usec_per_call(),
            self.failed
        )
    }
}

/// `redis-benchmark` on one server, with the script loaded.
#[derive(Debug)]
pub(crate) struct Bench {
    pub(crate) bin: PathBuf,
    pub(crate) sha: String,
    port: u16,
    args: ScriptArgs,
    keys: usize,
    client: redis::Client,
    /// The server's CPU seconds (user + sys) and the instant at the last reset.
    reset_at: std::sync::Mutex<(f64, Instant)>,
}

impl Bench {
    pub(crate) fn new(url: &str, port: u16, script: &str, args: ScriptArgs, keys: usize) -> Bench {
        let client = redis::Client::open(url).unwrap();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query(&mut client.get_connection().unwrap())
            .unwrap();
        Bench {
            bin: std::env::var_os("REDIS_BENCHMARK_BIN")
                .map_or_else(|| PathBuf::from("redis-benchmark"), PathBuf::from),
            sha,
            port,
            args,
            keys,
            client,
            reset_at: std::sync::Mutex::new((0.0, Instant::now())),
        }
    }

    fn argv(&self, clients: usize, pipeline: usize, requests: u64) -> Vec<String> {
        let a = self.args;
        [
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-n",
            &requests.to_string(),
            "-c",
            &clients.to_string(),
            "-P",
            &pipeline.to_string(),
            "-r",
            &self.keys.to_string(),
            "--precision",
            "3",
            "--csv",
            "EVALSHA",
            &self.sha,
            "1",
            "bench:{:k:__rand_int__}",
            &a.interval.to_string(),
            &a.per_micro.to_string(),
            &a.tau.to_string(),
            &a.cost.to_string(),
        ]
        .map(str::to_owned)
        .into()
    }

    pub(crate) fn command_line(&self, clients: usize, pipeline: usize, requests: u64) -> String {
        let n = if requests == 0 {
            "<n>".to_owned()
        } else {
            requests.to_string()
        };
        let mut argv = self.argv(clients, pipeline, 1);
        argv[5] = n;
        let quoted: Vec<String> = argv
            .iter()
            .map(|a| {
                if a.contains('{') {
                    format!("'{a}'")
                } else {
                    a.clone()
                }
            })
            .collect();
        format!("{} {}", self.bin.display(), quoted.join(" "))
    }

    /// Requests that take about `duration` at `-c 50 -P 16` and at `-c 1`.
    pub(crate) fn calibrate(&self, duration: Duration) -> (u64, u64) {
        let scale = |rps: f64| {
            let n = (rps * duration.as_secs_f64()).max(1000.0);
            // A count of requests: finite, positive, far below 2^53.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = n as u64;
            n.next_multiple_of(1000)
        };
        let ceiling = self.run(50, 16, 100_000);
        let single = self.run(1, 1, 5_000);
        (scale(ceiling.rps), scale(single.rps))
    }

    /// Runs `redis-benchmark`; panics (with its output) if it fails or the server saw errors.
    pub(crate) fn run(&self, clients: usize, pipeline: usize, requests: u64) -> BenchResult {
        self.reset_stats();
        let started = Instant::now();
        let mut child = Command::new(&self.bin)
            .args(self.argv(clients, pipeline, requests))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `{}`: {e}. Install redis-tools (Debian: apt-get install \
                     redis-tools) or set REDIS_BENCHMARK_BIN",
                    self.bin.display()
                )
            });
        // Bounded: a run is sized for a few seconds; a stuck one is killed.
        let limit = Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-benchmark took more than {limit:?}; killed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "redis-benchmark failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let server = self.server_work();
        assert_eq!(
            server.failed, 0,
            "the script failed on the server: {stdout}"
        );
        let fields = parse_csv(&stdout)
            .unwrap_or_else(|| panic!("unexpected redis-benchmark output: {stdout}"));
        BenchResult {
            rps: fields[0],
            p50_ms: fields[3],
            p95_ms: fields[4],
            p99_ms: fields[5],
            server,
        }
    }

    /// Runs the script once on `key`, as `redis-benchmark` does.
    pub(crate) fn evalsha(&self, key: &str) -> Vec<u64> {
        let a = self.args;
        redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(key)
            .arg(a.interval)
            .arg(a.per_micro)
            .arg(a.tau)
            .arg(a.cost)
            .query(&mut self.client.get_connection().unwrap())
            .unwrap()
    }

    pub(crate) fn server_version(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut self.client.get_connection().unwrap())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map_or_else(
                || "version unknown".to_owned(),
                |v| format!("Redis {}", v.trim()),
            )
    }

    pub(crate) fn reset_stats(&self) {
        let mut c = self.client.get_connection().unwrap();
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
        let info: String = redis::cmd("INFO").arg("cpu").query(&mut c).unwrap();
        self.mark(&info);
    }

    pub(crate) fn server_work(&self) -> ServerWork {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query(&mut self.client.get_connection().unwrap())
            .unwrap();
        self.work(&info)
    }

    /// Notes the server's CPU time now (from `INFO cpu`), as of a reset.
    fn mark(&self, info: &str) {
        *self.reset_at.lock().unwrap() = (testkit::cpu_seconds(info), Instant::now());
    }

    /// The work since the last reset, from `INFO commandstats cpu`.
    fn work(&self, info: &str) -> ServerWork {
        let (cpu, at) = *self.reset_at.lock().unwrap();
        ServerWork {
            cpu_us: (testkit::cpu_seconds(info) - cpu) * 1e6,
            window: at.elapsed(),
            ..parse_commandstats(info)
        }
    }

    pub(crate) async fn reset_stats_async(&self) {
        let mut c = self
            .client
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .unwrap();
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut c)
            .await
            .unwrap();
        self.mark(&info);
    }

    /// Waits until `key` exists, on the caller's runtime (a current-thread one runs the
    /// limiter's tasks only while this awaits); panics after `limit`.
    pub(crate) async fn wait_for_key(&self, key: &str, limit: Duration) {
        let mut c = self
            .client
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let started = Instant::now();
        while !redis::cmd("EXISTS")
            .arg(key)
            .query_async::<bool>(&mut c)
            .await
            .unwrap()
        {
            assert!(
                started.elapsed() < limit,
                "`{key}` did not appear within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub(crate) async fn server_work_async(&self) -> ServerWork {
        let mut c = self
            .client
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut c)
            .await
            .unwrap();
        self.work(&info)
    }
}

/// rps, avg, min, p50, p95, p99, max (ms) from `--csv` output.
fn parse_csv(out: &str) -> Option<Vec<f64>> {
    let line = out.lines().find(|l| l.starts_with("\"EVALSHA"))?;
    let fields: Vec<f64> = line
        .trim_matches('"')
        .split("\",\"")
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (fields.len() == 7).then_some(fields)
}

/// The script calls in `INFO commandstats`: `FCALL` (the limiter, where the server has
/// functions), `EVALSHA` and `EVAL`.
fn parse_commandstats(info: &str) -> ServerWork {
    let mut work = ServerWork::default();
    for command in ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"] {
        let Some(line) = info.lines().find_map(|l| l.strip_prefix(command)) else {
            continue;
        };
        let field = |name: &str| -> u64 {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        work.calls += field("calls");
        work.usec += field("usec");
        work.failed += field("failed_calls") + field("rejected_calls");
    }
    work
}
