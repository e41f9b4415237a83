//! One service process under load: 64 `ShouldRateLimit` requests in flight from one gRPC
//! client, decisions per second and the Redis server's CPU per decision, beside limitador
//! (Kuadrant/limitador, built from its repository) on its `redis` storage.
//!
//! Each system is a process of its own with a `redis-server` of its own that this bench
//! starts (free loopback port, temporary directory, no persistence):
//! - `ours-module`: the `ratelimit-envoy` binary on a server with the project's module
//!   (`RATELIMIT_MODULE`, else built as the tests build it);
//! - `ours-scripts`: the same binary on a server without it (the function library by `FCALL`);
//! - `limitador`: `$LIMITADOR_BIN` (or `--limitador PATH`) with `redis redis://..`, skipped with
//!   a message when not given; `--limitador-cached` adds its `redis_cached` storage as a
//!   row of its own (not exact across instances: counters are flushed in the background).
//!
//! Traffic, the same for every system: one client (this process, a runtime of 2 threads),
//! `--connections` HTTP/2 connections, `--tasks` tasks each with one request in flight at a
//! time (task `i` on connection `i % connections`), one descriptor per request: domain
//! `bench`, entry `user=<n>`, `n` uniform over `--users` users. The limit is a fixed window of
//! 1,000,000 a minute per user, so every request is admitted and every request writes its
//! bucket. Each run: `--warm-up` seconds, then `--duration` seconds measured; rounds
//! interleave the systems. Before measuring, each system is checked to enforce: domain
//! `check`, a limit of 2 a minute, the third request of one user must be `OVER_LIMIT`.
//!
//! Measured per run, over the measured window only: answers (OK, OVER_LIMIT, errors: any
//! error or OVER_LIMIT fails the run), decisions per second, p50 and p99 latency, the Redis
//! server's CPU (`INFO cpu`, user + sys) per decision, the service process's CPU per
//! decision (`/proc/<pid>/stat`), Redis's socket reads and writes per decision
//! (`total_reads_processed`, `total_writes_processed`), and each command's calls and µs per
//! decision (`INFO commandstats` after `CONFIG RESETSTAT`; the µs a script's commands take
//! are also in the script's own, so they add up only over the commands the client sends).
//!
//! `RATELIMIT_ENVOY_BIN` runs another build of the service instead of the one Cargo built;
//! `--compare-bin LABEL=PATH` adds one more, on a server with the module, to the rounds (two
//! commits compared in one sitting).
//!
//! ```sh
//! CARGO_TARGET_DIR=target/module cargo build --release -p redis-ratelimit-module
//! RATELIMIT_MODULE=target/module/release/libratelimit_module.so \
//! LIMITADOR_BIN=/path/to/limitador/target/release/limitador-server \
//!   cargo bench -p redis-ratelimit-envoy --bench load -- --rounds 3 --connections 1
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

/// Our configuration: every request admitted, every bucket written.
const OURS_YAML: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000000 }
";
/// The enforcement check's, in a file of its own.
const OURS_CHECK_YAML: &str = "
domain: check
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
";
/// limitador's: the same limits (its windows open at a counter's first hit).
const LIMITADOR_YAML: &str = "
- namespace: bench
  max_value: 1000000
  seconds: 60
  conditions: []
  variables:
    - descriptors[0].user
- namespace: check
  max_value: 2
  seconds: 60
  conditions: []
  variables:
    - descriptors[0].user
";

struct Options {
    rounds: usize,
    warm_up: Duration,
    duration: Duration,
    tasks: usize,
    connections: usize,
    users: u64,
    limitador: Option<PathBuf>,
    limitador_cached: bool,
    only: Option<Vec<String>>,
    /// Other builds of the service, `(label, binary)`, each on a server with the module.
    compare: Vec<(String, PathBuf)>,
}

fn options() -> Options {
    let mut o = Options {
        rounds: 3,
        warm_up: Duration::from_secs(1),
        duration: Duration::from_secs(3),
        tasks: 64,
        connections: 1,
        users: 10_000,
        limitador: std::env::var_os("LIMITADOR_BIN").map(PathBuf::from),
        limitador_cached: false,
        only: None,
        compare: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--rounds" => o.rounds = value().parse().unwrap(),
            "--warm-up" => o.warm_up = Duration::from_secs_f64(value().parse().unwrap()),
            "--duration" => o.duration = Duration::from_secs_f64(value().parse().unwrap()),
            "--tasks" => o.tasks = value().parse().unwrap(),
            "--connections" => o.connections = value().parse().unwrap(),
            "--users" => o.users = value().parse().unwrap(),
            "--limitador" => o.limitador = Some(PathBuf::from(value())),
            "--limitador-cached" => o.limitador_cached = true,
            "--compare-bin" => {
                let v = value();
                let (label, path) = v.split_once('=').expect("--compare-bin LABEL=PATH");
                o.compare.push((label.to_owned(), PathBuf::from(path)));
            }
            "--only" => o.only = Some(value().split(',').map(str::to_owned).collect()),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

/// A service under test: its process, its Redis, where it answers.
struct System {
    name: String,
    child: Child,
    redis: testkit::RedisServer,
    addr: SocketAddr,
    /// Its working files: configuration, `stderr`.
    dir: tempfile::TempDir,
}

impl Drop for System {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], testkit::free_port()))
}

/// The service's binary: `$RATELIMIT_ENVOY_BIN`, else the one Cargo built with this bench.
fn ours_bin() -> PathBuf {
    std::env::var_os("RATELIMIT_ENVOY_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_ratelimit-envoy")),
        PathBuf::from,
    )
}

fn start_ours(name: &str, bin: &Path, redis: testkit::RedisServer) -> System {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/bench.yaml"), OURS_YAML).unwrap();
    std::fs::write(dir.path().join("config/check.yaml"), OURS_CHECK_YAML).unwrap();
    let addr = free_addr();
    let mut command = Command::new(bin);
    command
        .env_clear()
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", addr.port().to_string())
        .env("HOST", "127.0.0.1")
        .env("PORT", testkit::free_port().to_string())
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", testkit::free_port().to_string())
        .env("REDIS_URL", redis.url())
        .env("RUNTIME_ROOT", dir.path())
        .env("RUNTIME_SUBDIRECTORY", "")
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("LOG_LEVEL", "warn");
    spawn(name, &mut command, redis, addr, dir)
}

/// `command` started with its output to `dir/stderr`, as the system `name` listening at `addr`.
fn spawn(
    name: &str,
    command: &mut Command,
    redis: testkit::RedisServer,
    addr: SocketAddr,
    dir: tempfile::TempDir,
) -> System {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("stderr")).unwrap(),
        ))
        .spawn()
        .unwrap();
    System {
        name: name.to_owned(),
        child,
        redis,
        addr,
        dir,
    }
}

fn start_limitador(name: &str, bin: &Path, storage: &str) -> System {
    let redis = testkit::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITADOR_YAML).unwrap();
    let addr = free_addr();
    let mut command = Command::new(bin);
    command
        .args(["--rls-ip", "127.0.0.1", "--rls-port"])
        .arg(addr.port().to_string())
        .args(["--http-ip", "127.0.0.1", "--http-port"])
        .arg(testkit::free_port().to_string())
        .arg(&limits)
        .arg(storage)
        .arg(redis.url())
        .env_remove("RUST_LOG");
    spawn(name, &mut command, redis, addr, dir)
}

fn request(domain: &str, user: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.to_string(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

/// Waits for the system to answer, then checks that it enforces: the third of three
/// requests of one user under a limit of 2 is refused.
async fn ready_and_enforcing(system: &mut System) {
    let start = Instant::now();
    let mut client = loop {
        if let Some(status) = system.child.try_wait().unwrap() {
            let stderr = std::fs::read_to_string(system.dir.path().join("stderr"));
            panic!(
                "{} exited at start-up ({status}): {}",
                system.name,
                stderr.unwrap_or_default()
            );
        }
        if let Ok(ch) = Endpoint::from_shared(format!("http://{}", system.addr))
            .unwrap()
            .connect()
            .await
        {
            let mut c = RateLimitServiceClient::new(ch);
            if c.should_rate_limit(request("bench", 0)).await.is_ok() {
                break c;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} did not answer in 30 s",
            system.name
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut codes = Vec::new();
    for _ in 0..3 {
        let r = client
            .should_rate_limit(request("check", 424_242))
            .await
            .unwrap()
            .into_inner();
        codes.push(Code::try_from(r.overall_code).unwrap());
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::OverLimit],
        "{} does not enforce a limit of 2",
        system.name
    );
}

fn redis_info(redis: &testkit::RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut redis.blocking_connection())
        .unwrap()
}

/// CPU seconds (user + system) of a process so far, from `/proc/<pid>/stat`.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's `(name)`: state is field 3; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().map(|v| v.parse::<f64>().unwrap_or(0.0)).sum()
    });
    ticks / clock_ticks()
}

/// `getconf CLK_TCK` (100 on Linux), asked once.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `cmdstat_<name>` → (calls, µs inside the command), from `INFO commandstats`.
fn command_calls(info: &str) -> BTreeMap<String, (u64, u64)> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| -> Option<u64> {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), (field("calls")?, field("usec")?)))
        })
        .filter(|(name, _)| name != "info" && name != "config|resetstat")
        .collect()
}

struct Run {
    decisions: u64,
    ok: u64,
    over: u64,
    errors: u64,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    redis_cpu_us: f64,
    service_cpu_us: f64,
    client_cpu_us: f64,
    commands: BTreeMap<String, (u64, u64)>,
    /// Redis's reads and writes of client sockets (`total_reads_processed`,
    /// `total_writes_processed`), per decision.
    reads: f64,
    writes: f64,
    load: String,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.decisions as f64 / self.seconds
    }
}

const WARMING: u8 = 0;
const MEASURING: u8 = 1;
const DONE: u8 = 2;

fn run(
    system: &System,
    client_rt: &tokio::runtime::Runtime,
    o: &Options,
    seed: u64,
    first_error: &std::sync::Mutex<Option<String>>,
) -> Run {
    let load = load_average();
    let channels: Vec<Channel> = client_rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..o.connections {
            v.push(channel(system.addr).await);
        }
        v
    });
    let phase = Arc::new(AtomicU8::new(WARMING));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let handles: Vec<_> = (0..o.tasks)
        .map(|i| {
            let mut client = RateLimitServiceClient::new(channels[i % channels.len()].clone());
            let (phase, counts, users) = (Arc::clone(&phase), Arc::clone(&counts), o.users);
            let mut state = seed ^ ((i as u64 + 1) * 0x9E37_79B9_7F4A_7C15);
            client_rt.spawn(async move {
                let mut times: Vec<u32> = Vec::with_capacity(1 << 16);
                let mut error = None;
                loop {
                    let p = phase.load(Ordering::Relaxed);
                    if p == DONE {
                        break;
                    }
                    // xorshift64
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let start = Instant::now();
                    let answer = client
                        .should_rate_limit(request("bench", state % users))
                        .await;
                    let took = start.elapsed();
                    let slot = match answer {
                        Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => 0,
                        Ok(r) if r.get_ref().overall_code == Code::OverLimit as i32 => 1,
                        Ok(r) => {
                            error.get_or_insert_with(|| format!("code {:?}", r.into_inner()));
                            2
                        }
                        Err(e) => {
                            error.get_or_insert_with(|| e.to_string());
                            2
                        }
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                    if p == MEASURING && phase.load(Ordering::Relaxed) == MEASURING {
                        times.push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
                    }
                }
                (times, error)
            })
        })
        .collect();
    let snapshot = |counts: &[AtomicU64; 3]| counts.each_ref().map(|c| c.load(Ordering::Relaxed));
    let pid = system.child.id();
    std::thread::sleep(o.warm_up);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut system.redis.blocking_connection())
        .unwrap();
    let redis_before = testkit::cpu_seconds(&redis_info(&system.redis, "cpu"));
    let service_before = process_cpu(pid);
    let client_before = process_cpu(std::process::id());
    let before = snapshot(&counts);
    let t0 = Instant::now();
    phase.store(MEASURING, Ordering::Relaxed);
    std::thread::sleep(o.duration);
    phase.store(DONE, Ordering::Relaxed);
    let after = snapshot(&counts);
    let seconds = t0.elapsed().as_secs_f64();
    let client_after = process_cpu(std::process::id());
    let service_after = process_cpu(pid);
    let redis_after = testkit::cpu_seconds(&redis_info(&system.redis, "cpu"));
    let commands = command_calls(&redis_info(&system.redis, "commandstats"));
    let stats = redis_info(&system.redis, "stats");
    let mut times = Vec::new();
    for h in handles {
        let (t, e) = client_rt.block_on(h).unwrap();
        times.extend(t);
        if let Some(e) = e {
            first_error.lock().unwrap().get_or_insert(e);
        }
    }
    times.sort_unstable();
    let pct = |per_mille: usize| {
        times
            .get((times.len().saturating_sub(1)) * per_mille / 1000)
            .map_or(f64::NAN, |&t| f64::from(t))
    };
    let [ok, over, errors] = [0, 1, 2].map(|i| after[i] - before[i]);
    let decisions = ok + over + errors;
    let per = |s: f64| s * 1e6 / decisions.max(1) as f64;
    Run {
        decisions,
        ok,
        over,
        errors,
        seconds,
        p50_us: pct(500),
        p99_us: pct(990),
        redis_cpu_us: per(redis_after - redis_before),
        service_cpu_us: per(service_after - service_before),
        client_cpu_us: per(client_after - client_before),
        commands,
        reads: per_event(&stats, "total_reads_processed", decisions),
        writes: per_event(&stats, "total_writes_processed", decisions),
        load,
    }
}

/// One system's rounds: median, min, max of each figure.
struct Summary {
    name: String,
    rate: (f64, f64, f64),
    redis_cpu: (f64, f64, f64),
    p50: (f64, f64, f64),
    service_cpu: (f64, f64, f64),
}

/// A counter of `INFO stats` (reset by `CONFIG RESETSTAT`) per decision.
fn per_event(stats: &str, line: &str, decisions: u64) -> f64 {
    testkit::info_number(stats, line, None).unwrap_or(0) as f64 / decisions.max(1) as f64
}

fn median_min_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let o = options();
    let wanted = |name: &str| o.only.as_ref().is_none_or(|v| v.iter().any(|n| n == name));
    println!(
        "load average at start: {}; {} cores; {} tasks, each one ShouldRateLimit in flight, \
         over {} HTTP/2 connection(s) from one tonic client (2 runtime threads); {} users \
         uniform, one descriptor each; every request admitted (1,000,000 a minute per user); \
         {} round(s) of {:.0} s warm-up + {:.0} s measured, systems interleaved",
        load_average(),
        std::thread::available_parallelism().map_or(0, usize::from),
        o.tasks,
        o.connections,
        o.users,
        o.rounds,
        o.warm_up.as_secs_f64(),
        o.duration.as_secs_f64()
    );

    let mut systems = Vec::new();
    if wanted("ours-module") {
        let module = testkit::module::load_args();
        println!(
            "ours-module: {}, redis-server --loadmodule {}",
            ours_bin().display(),
            module[1]
        );
        systems.push(start_ours(
            "ours-module",
            &ours_bin(),
            testkit::RedisServer::start_with(&module),
        ));
    }
    for (label, bin) in &o.compare {
        let module = testkit::module::load_args();
        println!("{label}: {}, redis-server with the module", bin.display());
        systems.push(start_ours(
            label,
            bin,
            testkit::RedisServer::start_with(&module),
        ));
    }
    if wanted("ours-scripts") {
        println!(
            "ours-scripts: {}, redis-server without the module",
            ours_bin().display()
        );
        systems.push(start_ours(
            "ours-scripts",
            &ours_bin(),
            testkit::RedisServer::start(),
        ));
    }
    match &o.limitador {
        Some(bin) => {
            let version = Command::new(bin)
                .arg("--version")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('\n', " "))
                .unwrap_or_default();
            if wanted("limitador") {
                println!("limitador: {} ({version}), storage redis", bin.display());
                systems.push(start_limitador("limitador", bin, "redis"));
            }
            if o.limitador_cached && wanted("limitador-cached") {
                println!(
                    "limitador-cached: the same, storage redis_cached (its defaults; not exact \
                     across instances)"
                );
                systems.push(start_limitador("limitador-cached", bin, "redis_cached"));
            }
        }
        None => println!(
            "limitador: skipped (give its binary with LIMITADOR_BIN=... or --limitador PATH)"
        ),
    }
    println!(
        "redis-server: {}",
        String::from_utf8_lossy(
            &Command::new(testkit::redis_server_bin())
                .arg("--version")
                .output()
                .unwrap()
                .stdout
        )
        .trim()
    );

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for s in &mut systems {
        client_rt.block_on(ready_and_enforcing(s));
        println!(
            "{}: answering, enforces a limit of 2 (OK, OK, OVER_LIMIT)",
            s.name
        );
    }

    let mut results: Vec<Vec<Run>> = systems.iter().map(|_| Vec::new()).collect();
    let mut failed = false;
    println!(
        "\n{:<17} {:>5} {:>10} {:>9} {:>5} {:>5} {:>8} {:>8} {:>10} {:>10} {:>10} {:>6} {:>6}  {:<14} commands: calls (µs) per decision",
        "system",
        "round",
        "decisions",
        "per s",
        "over",
        "err",
        "p50 µs",
        "p99 µs",
        "redis µs/d",
        "svc µs/d",
        "client µs/d",
        "reads",
        "writes",
        "load avg"
    );
    for round in 1..=o.rounds {
        for (i, s) in systems.iter().enumerate() {
            let first_error = std::sync::Mutex::new(None);
            let r = run(s, &client_rt, &o, 0x5EED + round as u64, &first_error);
            let mut cmds = String::new();
            // Those under one in 2,000 decisions (the limiter's heartbeat) left out.
            for (name, (calls, usec)) in &r.commands {
                let d = r.decisions.max(1) as f64;
                let per = *calls as f64 / d;
                if per >= 0.0005 {
                    let _ = write!(cmds, "{name} {per:.3} ({:.2} µs)  ", *usec as f64 / d);
                }
            }
            println!(
                "{:<17} {:>5} {:>10} {:>9.0} {:>5} {:>5} {:>8.0} {:>8.0} {:>10.2} {:>10.2} {:>10.2} {:>6.3} {:>6.3}  {:<14} {}",
                s.name,
                round,
                r.decisions,
                r.per_second(),
                r.over,
                r.errors,
                r.p50_us,
                r.p99_us,
                r.redis_cpu_us,
                r.service_cpu_us,
                r.client_cpu_us,
                r.reads,
                r.writes,
                r.load,
                cmds.trim_end()
            );
            if r.errors > 0 || r.over > 0 || r.ok != r.decisions {
                failed = true;
                println!(
                    "  FAILED: {} OVER_LIMIT and {} errors (first: {})",
                    r.over,
                    r.errors,
                    first_error.lock().unwrap().take().unwrap_or_default()
                );
            }
            results[i].push(r);
        }
    }

    println!(
        "\nmedian (min–max) of {} rounds; µs/d: CPU microseconds per decision",
        o.rounds
    );
    let summary: Vec<Summary> = systems
        .iter()
        .zip(&results)
        .map(|(s, runs)| Summary {
            name: s.name.clone(),
            rate: median_min_max(runs.iter().map(Run::per_second).collect()),
            redis_cpu: median_min_max(runs.iter().map(|r| r.redis_cpu_us).collect()),
            p50: median_min_max(runs.iter().map(|r| r.p50_us).collect()),
            service_cpu: median_min_max(runs.iter().map(|r| r.service_cpu_us).collect()),
        })
        .collect();
    for s in &summary {
        let (rate, cpu, p50, svc) = (s.rate, s.redis_cpu, s.p50, s.service_cpu);
        println!(
            "{:<17} decisions/s {:.0} ({:.0}–{:.0}); Redis CPU µs/decision {:.2} ({:.2}–{:.2}); \
             p50 µs {:.0} ({:.0}–{:.0}); service CPU µs/decision {:.2} ({:.2}–{:.2})",
            s.name,
            rate.0,
            rate.1,
            rate.2,
            cpu.0,
            cpu.1,
            cpu.2,
            p50.0,
            p50.1,
            p50.2,
            svc.0,
            svc.1,
            svc.2
        );
    }
    if let Some(theirs) = summary.iter().find(|s| s.name == "limitador") {
        for ours in summary.iter().filter(|s| !s.name.starts_with("limitador")) {
            println!(
                "{} ÷ limitador: decisions/s {:.2} × (target ≥ 2), Redis CPU per decision \
                 {:.2} × (target ≤ 0.5)",
                ours.name,
                ours.rate.0 / theirs.rate.0,
                ours.redis_cpu.0 / theirs.redis_cpu.0
            );
        }
    }
    assert!(!failed, "a run had errors or refusals: not a data point");
}
