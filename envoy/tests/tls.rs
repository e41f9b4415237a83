//! Redis over TLS, as the reference's `REDIS_TLS=true`: the `ratelimit-envoy` binary, trusting
//! a certificate authority of the test's own (through `SSL_CERT_FILE`), decides every request
//! in a `redis-server` that serves TLS; the buckets are in that server.
#![cfg(unix)]

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use testkit::tls::TlsServer;

/// The service's process, killed if the test ends before it stops it.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const TWO_A_DAY: &str = "domain: api
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 2, algorithm: token_bucket }
";

#[tokio::test]
async fn with_redis_tls_every_request_is_decided_in_redis_over_tls() {
    let tls = TlsServer::start();
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).expect("created");
    std::fs::write(config.join("api.yaml"), TWO_A_DAY).expect("written");
    let ports: Vec<u16> = (0..3).map(|_| testkit::free_port()).collect();
    // `REDIS_URL` as the reference takes it (`host:port`), TLS by `REDIS_TLS`.
    let host_port = tls.tls_url().trim_start_matches("rediss://").to_owned();
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-envoy"))
            .env_clear()
            .env("SSL_CERT_FILE", tls.ca())
            .env("REDIS_URL", host_port)
            .env("REDIS_SOCKET_TYPE", "tcp")
            .env("REDIS_TLS", "true")
            .env("FAILURE_POLICY", "unavailable")
            .env("CACHE_KEY_PREFIX", "tls-test")
            .env("RUNTIME_ROOT", dir.path())
            .env("RUNTIME_WATCH_ROOT", "false")
            .env("HOST", "127.0.0.1")
            .env("GRPC_HOST", "127.0.0.1")
            .env("DEBUG_HOST", "127.0.0.1")
            .env("GRPC_PORT", ports[0].to_string())
            .env("PORT", ports[1].to_string())
            .env("DEBUG_PORT", ports[2].to_string())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("started"),
    );
    // Serving once its stderr says the gRPC listener is up.
    let stderr = child.0.stderr.take().expect("piped");
    let (lines, mut line) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(l);
        }
    });
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("GRPC_HOST: listening"))
    {
        let l = tokio::time::timeout(testkit::wait::PATIENCE, line.recv())
            .await
            .expect("started")
            .unwrap_or_else(|| panic!("exited early:\n{}", seen.join("\n")));
        seen.push(l);
    }
    let mut client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", ports[0]))
        .await
        .expect("connected");
    let ask = || RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "ann".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let mut codes = Vec::new();
    for _ in 0..3 {
        let answer = client
            .should_rate_limit(ask())
            .await
            .expect("answered: Redis over TLS decided (its failure would be UNAVAILABLE)")
            .into_inner();
        codes.push(answer.overall_code);
    }
    assert_eq!(
        codes,
        [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]
    );
    // The bucket is in the server: its plain port sees a key under the prefix.
    let mut con = tls.server.blocking_connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tls-test*")
        .query(&mut con)
        .expect("KEYS");
    assert!(keys.iter().any(|k| k.ends_with("user=ann}")), "{keys:?}");

    let pid = child.0.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill ran");
    assert!(killed.success());
    let status = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || child.0.wait()),
    )
    .await
    .expect("stopped")
    .expect("joined")
    .expect("waited");
    assert!(status.success(), "{status:?}");
}
