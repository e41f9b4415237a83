//! End-to-end tests live in `tests/`; the binaries are the example services. This library is
//! what the tests share: an example service as a running process, and an HTTP client.
// Test support: a failed step is the test's failure, reported where it happens.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;

use reqwest::{Client, Response, StatusCode};
use testkit::RedisServer;

/// One running instance of an example service, killed when dropped; its stdout lines arrive
/// on a channel.
#[derive(Debug)]
pub struct Service {
    child: Child,
    base: String,
    stdout: Mutex<mpsc::UnboundedReceiver<String>>,
}

impl Service {
    /// Starts `bin` on a free port, its limits on `redis`, with `env` on top of `PORT` and
    /// `REDIS_URL` (and without the forwarding settings of the test's own environment), and
    /// waits (30 s at most) until it says it listens, then checks that it answers `/health`.
    pub async fn start(bin: &str, redis: &RedisServer, env: &[(&str, &str)]) -> Service {
        let port = testkit::free_port();
        let mut child = Command::new(bin)
            .env("PORT", port.to_string())
            .env("REDIS_URL", redis.url())
            .env_remove("TRUSTED_PROXIES")
            .env_remove("TRUSTED_PROXY_HEADER")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin}: {e}"));
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, stdout) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let service = Service {
            child,
            base: format!("http://127.0.0.1:{port}"),
            stdout: Mutex::new(stdout),
        };
        // The service prints its address once its socket is bound: connections from then on
        // wait in the backlog until it accepts them.
        let listening = service
            .printed_within(Duration::from_secs(30), "listening on")
            .await;
        let health = client().get(service.url("/health")).send().await;
        assert!(
            health.as_ref().is_ok_and(|r| r.status() == StatusCode::OK),
            "{bin} printed `{listening}` but /health answered {health:?}"
        );
        service
    }

    /// The URL of `path` on this instance.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The process id, to signal it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (10 s at most) for the next line the service prints that contains `needle`.
    pub async fn printed(&self, needle: &str) -> String {
        self.printed_within(Duration::from_secs(10), needle).await
    }

    /// Waits (`within` at most) for the next line the service prints that contains `needle`:
    /// each line as it arrives, and the end of its output if it exits first.
    async fn printed_within(&self, within: Duration, needle: &str) -> String {
        let deadline = Instant::now() + within;
        let mut lines = self.stdout.lock().await;
        loop {
            match tokio::time::timeout_at(deadline, lines.recv()).await {
                Ok(Some(line)) if line.contains(needle) => return line,
                Ok(Some(_)) => {}
                Ok(None) => panic!("exited before printing `{needle}`"),
                Err(_) => panic!("never printed `{needle}` within {within:?}"),
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client that never goes through a proxy and gives up on a request after 10 s.
pub fn client() -> Client {
    Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The response's header `name`, as text.
pub fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The name of the limit on `function` in the service `bin`: its crate (the binary's name) and
/// the function.
pub fn limit_name(bin: &str, function: &str) -> String {
    let crate_name = std::path::Path::new(bin)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    format!("{crate_name}::{function}")
}
