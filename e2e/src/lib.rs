//! End-to-end tests live in `tests/`; the binaries are the example services. This library is
//! what the tests share: an example service as a running process, and an HTTP client.
// Test support: a failed step is the test's failure, reported where it happens.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{self, TryRecvError};
use std::time::{Duration, Instant};

use reqwest::{Client, Response, StatusCode};
use testkit::RedisServer;

/// One running instance of an example service, killed when dropped; its stdout lines arrive
/// on a channel.
#[derive(Debug)]
pub struct Service {
    child: Child,
    base: String,
    stdout: Mutex<mpsc::Receiver<String>>,
}

impl Service {
    /// Starts `bin` on a free port, its limits on `redis`, with `env` on top of `PORT` and
    /// `REDIS_URL` (and without the forwarding settings of the test's own environment), and
    /// waits (30 s at most) until it answers `/health`.
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
        let (tx, stdout) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut service = Service {
            child,
            base: format!("http://127.0.0.1:{port}"),
            stdout: Mutex::new(stdout),
        };
        let client = client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(service.url("/health")).send().await
                && r.status() == StatusCode::OK
            {
                return service;
            }
            if let Some(status) = service.child.try_wait().unwrap() {
                panic!("{bin} exited during startup: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "{bin} did not answer /health within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let next = self.stdout.lock().unwrap().try_recv();
            match next {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(TryRecvError::Empty) => {
                    assert!(Instant::now() < deadline, "never printed `{needle}`");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(TryRecvError::Disconnected) => panic!("exited before printing `{needle}`"),
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
