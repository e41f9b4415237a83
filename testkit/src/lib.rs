//! Test support: real `redis-server` processes that the tests start themselves, on free
//! loopback ports, in temporary directories, stopped when dropped. Never a shared server.
//! [`RedisServer`] is one server; [`cluster::RedisCluster`] a six-node Redis Cluster;
//! [`sentinel::SentinelSetup`] a master, a replica and three sentinels. [`wait`] is how a test
//! waits for an event: until it has happened, never for a fixed time; [`outage`] stages a
//! Redis that dies under a limiter; [`envoy`] runs a real Envoy in front of a small upstream.
//!
//! The crate also holds three programs: `hammer` (one process of the multi-process accuracy
//! test, `tests/accuracy.rs`), `bench_memory` (Redis memory per active bucket, written up
//! in `docs/benchmarks.md`) and `algorithms_plot` (seed 001's scenario through each
//! algorithm's script, plotted in `docs/algorithms.md`).

pub mod acl;
pub mod cluster;
pub mod envoy;
#[cfg(feature = "plots")]
pub mod font;
pub mod hammer;
pub mod logs;
pub mod module;
pub mod outage;
pub mod sentinel;
pub mod tls;
pub mod wait;

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `redis-server` binary: `$REDIS_SERVER_BIN`, else the one on `PATH`.
pub fn redis_server_bin() -> PathBuf {
    std::env::var_os("REDIS_SERVER_BIN")
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// A number in the text of `INFO`: the value of the line `line` (`used_memory`), or, with
/// `field`, of that field of a line of fields (`cmdstat_eval` and `calls`, from
/// `cmdstat_eval:calls=3,usec=..`). `None` when absent or not a number.
pub fn info_number(info: &str, line: &str, field: Option<&str>) -> Option<u64> {
    let rest = info
        .lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(':'))?;
    let value = match field {
        Some(field) => rest
            .split(',')
            .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))?,
        None => rest,
    };
    value.trim().parse().ok()
}

/// The script calls (`FCALL`, `EVALSHA` and `EVAL`) counted in the text of
/// `INFO commandstats`.
pub fn script_calls(commandstats: &str) -> u64 {
    ["cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"]
        .iter()
        .filter_map(|line| info_number(commandstats, line, Some("calls")))
        .sum()
}

/// The server's CPU time so far in the text of `INFO cpu`: `used_cpu_user` + `used_cpu_sys`,
/// in seconds (0 when absent).
pub fn cpu_seconds(info: &str) -> f64 {
    ["used_cpu_user:", "used_cpu_sys:"]
        .iter()
        .filter_map(|f| {
            info.lines()
                .find_map(|l| l.strip_prefix(f))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener.local_addr().expect("local address").port()
}

/// A `redis-server` owned by one test.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server with no persistence on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--appendonly", "yes"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("ratelimit-redis-")
            .tempdir()
            .expect("create a temporary directory");
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        // A port can be taken between choosing and binding it: try a few.
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            match spawn(dir.path(), port, &extra) {
                Ok(child) => {
                    return RedisServer {
                        child: Some(child),
                        port,
                        dir,
                        extra,
                    };
                }
                Err(e) => last_err = e,
            }
        }
        panic!("could not start redis-server: {last_err}");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client for it.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// The script calls (`FCALL`, `EVALSHA` and `EVAL`) it has run, from `INFO commandstats`.
    pub async fn script_calls(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.connection().await)
            .await
            .expect("INFO commandstats");
        script_calls(&info)
    }

    /// A fresh multiplexed connection to it.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis-server")
    }

    /// A blocking connection, for code outside a runtime.
    pub fn blocking_connection(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to the test redis-server")
    }

    /// Kills the server (SIGKILL: no chance to save), keeping its directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory (after [`kill`](RedisServer::kill)).
    pub fn restart(&mut self) {
        self.kill();
        let child = respawn(|| spawn(self.dir.path(), self.port, &self.extra))
            .unwrap_or_else(|e| panic!("restart redis-server: {e}"));
        self.child = Some(child);
    }
}

/// Starts a killed server again on its own port: `start` until it succeeds, for at most 10 s
/// (the port may not be free again at once).
pub(crate) fn respawn(start: impl FnMut() -> Result<Child, String>) -> Result<Child, String> {
    wait::poll_blocking(Duration::from_secs(10), start)
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(dir: &Path, port: u16, extra: &[String]) -> Result<Child, String> {
    let mut cmd = Command::new(redis_server_bin());
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .args(["--daemonize", "no", "--protected-mode", "yes"])
    .arg("--logfile")
    .arg(dir.join("redis.log"))
    .arg("--dir")
    .arg(dir)
    .args(extra);
    launch(cmd, dir, port)
}

/// Runs `cmd` (a `redis-server` that logs to `dir/redis.log` and listens on `port`) and waits
/// until it answers `PING` (at most 10 s).
pub(crate) fn launch(mut cmd: Command, dir: &Path, port: u16) -> Result<Child, String> {
    let bin = redis_server_bin();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run `{}`: {e}. Install Redis 7 (Debian: apt-get install redis-server), \
                 run the suite with scripts/test (it installs it), or set REDIS_SERVER_BIN",
                bin.display()
            )
        })?;
    // `Ok` once it answers or has exited (`Err` inside: why it never will), `Err` until then.
    let up = wait::poll_blocking(Duration::from_secs(10), || match child.try_wait() {
        Err(e) => Ok(Err(e.to_string())),
        Ok(Some(status)) => Ok(Err(format!("redis-server exited with {status}"))),
        Ok(None) if answers_ping(port) => Ok(Ok(())),
        Ok(None) => Err(format!("redis-server on port {port} does not answer PING")),
    });
    match up {
        Ok(Ok(())) => {
            drop(child.stderr.take());
            Ok(child)
        }
        Ok(Err(exited)) => {
            let mut out = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
            if let Some(mut se) = child.stderr.take() {
                let _ = se.read_to_string(&mut out);
            }
            Err(format!("{exited}: {out}"))
        }
        Err(never) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(never)
        }
    }
}

/// Whether a `redis-server` on `port` answers `PING` (within 200 ms).
fn answers_ping(port: u16) -> bool {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_millis(200)))
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
        .is_ok()
}

/// A small deterministic generator (xorshift64*) for the tests' random inputs, so that a
/// failure can be replayed from its seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (not 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        self.next_u64().to_le_bytes()[0]
    }
}
