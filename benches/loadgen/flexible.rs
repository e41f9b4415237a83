//! rate-limiter-flexible (Node, `RateLimiterRedis` on ioredis) as a contender: installed on
//! first use from the pinned `loadgen/flexible/package-lock.json` with `npm ci` into a cache
//! under `target/`, run as one Node process per measurement (`loadgen/flexible/run.js`)
//! against the same `redis-server`, keys and limit as ours.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::redis_benchmark::Bench;
use crate::report::Sample;

/// The Node project, in the source tree: `package.json`, `package-lock.json`, `run.js`.
const FILES: [&str; 3] = ["package.json", "package-lock.json", "run.js"];
/// ioredis 6 needs Node 20.
const MIN_NODE_MAJOR: u32 = 20;
/// `npm ci` of two packages and their seven dependencies: seconds on a normal network.
const INSTALL_LIMIT: Duration = Duration::from_secs(300);
/// Slack past warm-up + duration before a runner that says nothing is killed.
const SLACK: Duration = Duration::from_secs(30);

/// The installed runner.
#[derive(Debug)]
pub(crate) struct Flexible {
    node: PathBuf,
    dir: PathBuf,
    port: u16,
    /// `node vX, rate-limiter-flexible X, ioredis X auto-pipelined`: what runs.
    pub(crate) versions: String,
}

/// Installs the runner unless told not to; `Err` says why it is left out.
pub(crate) fn prepare(args: &Args, port: u16) -> Result<Flexible, String> {
    if !args.flexible {
        return Err("left out (--no-flexible)".to_owned());
    }
    let node = std::env::var_os("NODE_BIN").map_or_else(|| PathBuf::from("node"), PathBuf::from);
    let version = output(Command::new(&node).arg("--version")).map_err(|e| {
        format!(
            "left out: cannot run `{}` ({e}); install Node {MIN_NODE_MAJOR} or later and npm \
             (Debian 12's own nodejs is 18: too old) or pass --no-flexible",
            node.display()
        )
    })?;
    let major: u32 = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < MIN_NODE_MAJOR {
        return Err(format!(
            "left out: Node {} is older than {MIN_NODE_MAJOR} (ioredis 6 needs {MIN_NODE_MAJOR})",
            version.trim()
        ));
    }
    let dir = crate::flexible_dir::flexible_dir();
    install(&dir)?;
    let pkg = |name: &str| -> String {
        std::fs::read_to_string(dir.join("node_modules").join(name).join("package.json"))
            .ok()
            .and_then(|text| {
                let v: serde_json::Value = serde_json::from_str(&text).ok()?;
                v["version"].as_str().map(str::to_owned)
            })
            .unwrap_or_else(|| "?".to_owned())
    };
    let versions = format!(
        "node {}, rate-limiter-flexible {}, ioredis {} {}",
        version.trim(),
        pkg("rate-limiter-flexible"),
        pkg("ioredis"),
        if args.flexible_auto_pipelining {
            "auto-pipelined"
        } else {
            "not auto-pipelined"
        }
    );
    Ok(Flexible {
        node,
        dir,
        port,
        versions,
    })
}

/// Copies the project into `dir` and runs `npm ci` there when its lock file is new to it.
fn install(dir: &Path) -> Result<(), String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("loadgen/flexible");
    std::fs::create_dir_all(dir).map_err(|e| format!("left out: {}: {e}", dir.display()))?;
    for f in FILES {
        std::fs::copy(source.join(f), dir.join(f))
            .map_err(|e| format!("left out: copying {f} to {}: {e}", dir.display()))?;
    }
    // The lock that the installed node_modules came from.
    let stamp = dir.join("node_modules/.loadgen-installed-lock.json");
    let lock = std::fs::read(dir.join("package-lock.json")).unwrap_or_default();
    if std::fs::read(&stamp).ok().as_ref() == Some(&lock) {
        return Ok(());
    }
    let npm = std::env::var_os("NPM_BIN").map_or_else(|| PathBuf::from("npm"), PathBuf::from);
    println!(
        "rate-limiter-flexible: installing the pinned packages: {} ci --no-audit --no-fund in {}",
        npm.display(),
        dir.display()
    );
    let mut cmd = Command::new(&npm);
    cmd.args(["ci", "--no-audit", "--no-fund", "--loglevel", "error"])
        .current_dir(dir);
    output(&mut cmd)
        .map_err(|e| format!("left out: `{} ci` failed: {e}", npm.display()))
        .map(drop)?;
    std::fs::write(&stamp, &lock).map_err(|e| format!("left out: {}: {e}", stamp.display()))
}

/// Runs `cmd` to the end (bounded by [`INSTALL_LIMIT`]); its stdout, or why it failed.
fn output(cmd: &mut Command) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if started.elapsed() > INSTALL_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {INSTALL_LIMIT:?}; killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        return Err(format!(
            "{}: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Flexible {
    /// One Node process, `tasks` in-flight consumes for `args.duration` after `args.warmup`;
    /// the server's statistics are reset when the runner starts measuring. Panics if the
    /// runner fails, as a failing `redis-benchmark` does.
    pub(crate) fn measure(&self, args: &Args, bench: &Bench, tasks: usize) -> Sample {
        let mut child = Command::new(&self.node)
            .arg("run.js")
            .args(["--port", &self.port.to_string()])
            .args(["--concurrency", &tasks.to_string()])
            .args(["--keys", &args.keys.to_string()])
            .args(["--rate", &args.rate.to_string()])
            .args(["--warmup", &args.warmup.as_secs_f64().to_string()])
            .args(["--duration", &args.duration.as_secs_f64().to_string()])
            .args(args.flexible_auto_pipelining.then_some("--auto-pipelining"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", self.node.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut next_line = |within: Duration| match rx.recv_timeout(within) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("rate-limiter-flexible's runner at {tasks} in flight: no output ({e})");
            }
        };
        let measuring = next_line(args.warmup + SLACK);
        assert_eq!(measuring, "measuring", "the runner's first line");
        bench.reset_stats();
        let json = next_line(args.duration + SLACK);
        let server = bench.server_work();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        assert!(status.success(), "rate-limiter-flexible's runner: {status}");
        let v: serde_json::Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("the runner's result `{json}`: {e}"));
        let num = |name: &str| {
            v[name]
                .as_f64()
                .unwrap_or_else(|| panic!("no `{name}` in the runner's result `{json}`"))
        };
        let count = |name: &str| {
            v[name]
                .as_u64()
                .unwrap_or_else(|| panic!("no count `{name}` in the runner's result `{json}`"))
        };
        if let Some(e) = v["first_error"].as_str() {
            eprintln!("rate-limiter-flexible at {tasks} in flight: first error: {e}");
        }
        Sample {
            tasks,
            decisions_per_sec: num("decisions_per_sec"),
            latency_us: ["p50_us", "p90_us", "p99_us", "p999_us"].map(num),
            server,
            batches: None,
            denied: count("rejections"),
            not_by_store: None,
            errors: count("errors"),
        }
    }
}
