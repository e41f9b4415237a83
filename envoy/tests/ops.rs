//! Operating the service: the configuration reloaded under traffic (on a real Redis), the
//! HTTP endpoints over real HTTP, the Prometheus counters, and the binary itself.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_core::RateLimiter;
use ratelimit_envoy::config::{Config, LoadOptions};
use ratelimit_envoy::http::Health;
use ratelimit_envoy::service::Service;
use ratelimit_envoy::stats::Stats;
use ratelimit_envoy::watch::Watcher;
use testkit::RedisServer;

const DAILY_5: &str = "domain: api
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 5 }
";

fn request(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).to_owned(),
                    value: (*v).to_owned(),
                })
                .collect(),
            ..RateLimitDescriptor::default()
        }],
        ..RateLimitRequest::default()
    }
}

async fn ask(service: &Service, domain: &str, entries: &[(&str, &str)]) -> RateLimitResponse {
    service
        .decide(&request(domain, entries))
        .await
        .expect("an answer")
}

/// Waits for the watcher's next load, successful or not.
async fn next_load(loads: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::time::timeout(Duration::from_secs(30), loads.changed())
        .await
        .expect("a load within 30 s")
        .expect("the stats live");
}

fn write(dir: &Path, name: &str, text: &str) {
    // Written aside and renamed in, as a deployment tool does: never seen half written.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("written");
    std::fs::rename(&tmp, dir.join(name)).expect("renamed");
}

async fn redis_limiter(redis: &RedisServer) -> RateLimiter {
    RateLimiter::builder()
        .redis(redis.url())
        .prefix("envoy-ops")
        .build()
        .await
        .expect("a limiter on the test's Redis")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_under_traffic_applies_the_new_limits_and_keeps_every_bucket() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().expect("a directory");
    let dir = root.path();
    write(dir, "api.yaml", DAILY_5);
    let options = LoadOptions::new().ignore_dot_files(true);
    let stats = Arc::new(Stats::default());
    let service = Arc::new(
        Service::new(
            redis_limiter(&redis).await,
            Config::load_dir(dir, &options).expect("loads"),
        )
        .stats(Arc::clone(&stats)),
    );
    let mut loads = stats.loads();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = Watcher::new(dir, options.clone()).interval(Duration::from_millis(10));
    let watching = tokio::spawn(watcher.clone().run(Arc::clone(&service), async {
        let _ = stopped.await;
    }));

    // Three taken from alice's bucket before the reload.
    for left in [4, 3, 2] {
        let r = ask(&service, "api", &[("user", "alice")]).await;
        assert_eq!(r.statuses[0].limit_remaining, left);
    }
    // Traffic all along: every request answered while the files change.
    let traffic = {
        let service = Arc::clone(&service);
        tokio::spawn(async move {
            let mut answered = 0u64;
            loop {
                service
                    .decide(&request("api", &[("user", "carol")]))
                    .await
                    .expect("answered during a reload");
                answered += 1;
                if answered >= 200 {
                    return answered;
                }
                tokio::task::yield_now().await;
            }
        })
    };

    // A new limit for alice's rule, and a new domain.
    write(
        dir,
        "api.yaml",
        "domain: api
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 10 }
",
    );
    write(
        dir,
        "tenant.yaml",
        "domain: tenant
descriptors:
  - key: plan
    value: free
    rate_limit: { unit: day, requests_per_unit: 1 }
",
    );
    // The two files may be seen in one poll or two.
    while service.config().domains().count() < 2
        || service
            .config()
            .rules("api")
            .all(|r| r.requests_per_unit() != 10)
    {
        next_load(&mut loads).await;
    }
    assert_eq!(stats.load_errors(), 0);
    assert!(stats.load_successes() >= 1);
    // The same bucket, its three hits kept, under the new limit: 10 - 3 - 1.
    let r = ask(&service, "api", &[("user", "alice")]).await;
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(10)
    );
    assert_eq!(r.statuses[0].limit_remaining, 6);
    // The new domain applies.
    assert_eq!(
        ask(&service, "tenant", &[("plan", "free")])
            .await
            .overall_code,
        Code::Ok as i32
    );
    assert_eq!(
        ask(&service, "tenant", &[("plan", "free")])
            .await
            .overall_code,
        Code::OverLimit as i32
    );
    assert_eq!(traffic.await.expect("the traffic ran"), 200);

    // A broken file: the configuration in force stays, the error is counted and says where.
    let before = stats.load_successes();
    write(
        dir,
        "broken.yaml",
        "domain: broken
descriptors:
  - key: user
    rate_limit: { unit: fortnight, requests_per_unit: 1 }
",
    );
    next_load(&mut loads).await;
    assert_eq!(stats.load_errors(), 1);
    assert_eq!(stats.load_successes(), before);
    assert_eq!(
        service.config().domains().collect::<Vec<_>>(),
        ["api", "tenant"]
    );
    let r = ask(&service, "api", &[("user", "alice")]).await;
    assert_eq!(
        r.statuses[0].limit_remaining, 5,
        "alice's bucket is still counted"
    );
    let errors = watcher.load_into(&service).expect_err("still broken");
    let shown = errors.to_string();
    assert!(shown.contains("broken.yaml:4:"), "{shown}");
    assert!(shown.contains("fortnight"), "{shown}");
    assert_eq!(stats.load_errors(), 2);
    // That load was this test's own: the watcher's next one is waited for from here.
    loads.borrow_and_update();

    // Fixed: it loads again.
    std::fs::remove_file(dir.join("broken.yaml")).expect("removed");
    next_load(&mut loads).await;
    assert_eq!(stats.load_successes(), before + 1);

    let _ = stop.send(());
    watching.await.expect("the watcher stops");
}

#[cfg(unix)]
#[tokio::test]
async fn with_watch_root_a_swapped_symlink_reloads_and_edits_in_place_do_not() {
    let top = tempfile::tempdir().expect("a directory");
    let (a, b) = (top.path().join("a"), top.path().join("b"));
    for (dir, limit) in [(&a, 5), (&b, 7)] {
        std::fs::create_dir_all(dir.join("config")).expect("created");
        write(
            &dir.join("config"),
            "api.yaml",
            &DAILY_5.replace(
                "requests_per_unit: 5",
                &format!("requests_per_unit: {limit}"),
            ),
        );
    }
    let root = top.path().join("current");
    std::os::unix::fs::symlink(&a, &root).expect("linked");
    let settings = ratelimit_envoy::settings::Settings::from_vars([
        ("RUNTIME_ROOT", root.to_str().expect("UTF-8")),
        ("RUNTIME_WATCH_ROOT", "true"),
    ])
    .expect("settings");
    let watcher = Watcher::from_settings(&settings).interval(Duration::from_millis(10));
    let limiter = RateLimiter::builder()
        .memory()
        .build()
        .await
        .expect("a limiter");
    let config = Config::load_dir(watcher.dir(), &LoadOptions::new()).expect("loads");
    let service = Arc::new(Service::new(limiter, config));
    let stats = Arc::clone(service.counters());
    let mut loads = stats.loads();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watching = tokio::spawn(watcher.run(Arc::clone(&service), async {
        let _ = stopped.await;
    }));
    let limit = |s: &Service| {
        s.config()
            .rules("api")
            .map(|r| r.requests_per_unit())
            .next()
    };

    // An edit in place in the directory `current` points at: not watched in this mode...
    write(
        &a.join("config"),
        "api.yaml",
        &DAILY_5.replace(": 5", ": 6"),
    );
    // ...then the swap, as a deployment makes it: a new link renamed over the old.
    let next = top.path().join("next");
    std::os::unix::fs::symlink(&b, &next).expect("linked");
    std::fs::rename(&next, &root).expect("swapped");
    next_load(&mut loads).await;
    assert_eq!(limit(&service), Some(7));
    assert_eq!((stats.load_successes(), stats.load_errors()), (1, 0));
    let _ = stop.send(());
    watching.await.expect("the watcher stops");
}

/// A server on a free loopback port, stopped when `stop` is dropped.
async fn serve(router: axum::Router) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().expect("bound");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(ratelimit_envoy::http::serve(router, listener, async {
        let _ = stopped.await;
    }));
    (format!("http://{addr}"), stop)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
}

async fn memory_service(yaml: &str) -> Arc<Service> {
    let limiter = RateLimiter::builder()
        .memory()
        .build()
        .await
        .expect("a limiter");
    Arc::new(Service::new(
        limiter,
        Config::parse("api.yaml", yaml).expect("parses"),
    ))
}

#[tokio::test]
async fn healthcheck_and_json_answer_as_the_references() {
    let service = memory_service(
        "domain: api
descriptors:
  - key: user
    rate_limit: { unit: day, requests_per_unit: 2, name: per-user }
",
    )
    .await;
    let health = Arc::new(Health::new());
    let (base, _stop) = serve(ratelimit_envoy::http::router(
        Arc::clone(&service),
        Arc::clone(&health),
    ))
    .await;
    let http = client();

    let r = http
        .get(format!("{base}/healthcheck"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.expect("a body"), "OK");

    let body =
        r#"{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}"#;
    let post = || http.post(format!("{base}/json")).body(body).send();
    let r = post().await.expect("answered");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("content-type").map(|v| v.to_str().ok()),
        Some(Some("application/json"))
    );
    let json: serde_json::Value = r.json_text().await;
    assert_eq!(json["overallCode"], "OK");
    assert_eq!(json["statuses"][0]["code"], "OK");
    assert_eq!(json["statuses"][0]["currentLimit"]["name"], "per-user");
    assert_eq!(json["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    assert_eq!(json["statuses"][0]["currentLimit"]["unit"], "DAY");
    assert_eq!(json["statuses"][0]["limitRemaining"], 1);
    assert!(
        json["statuses"][0]["durationUntilReset"]
            .as_str()
            .is_some_and(|d| d.ends_with('s')),
        "{json}"
    );
    assert_eq!(post().await.expect("answered").status(), 200);
    let r = post().await.expect("answered");
    assert_eq!(r.status(), 429);
    let json: serde_json::Value = r.json_text().await;
    assert_eq!(json["overallCode"], "OVER_LIMIT");
    assert!(
        json["statuses"][0].get("limitRemaining").is_none(),
        "0 is left out: {json}"
    );

    for bad in [
        "not json",
        r#"{"domain": "api", "descriptors": [{"entries": [{"key": 1}]}]}"#,
        r#"{"domain": "api", "descriptorz": []}"#,
        r#"{"domain": "", "descriptors": [{"entries": []}]}"#,
    ] {
        let r = http
            .post(format!("{base}/json"))
            .body(bad)
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 400, "{bad}");
    }
    assert_eq!(
        http.get(format!("{base}/json"))
            .send()
            .await
            .expect("answered")
            .status(),
        405
    );

    health.fail();
    let r = http
        .get(format!("{base}/healthcheck"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 500);
}

trait JsonText {
    async fn json_text(self) -> serde_json::Value;
}

impl JsonText for reqwest::Response {
    async fn json_text(self) -> serde_json::Value {
        let text = self.text().await.expect("a body");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

#[tokio::test]
async fn rlconfig_shows_the_configuration_in_force_and_metrics_count_under_the_references_names() {
    let service = memory_service(
        "domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: remote_address
    detailed_metric: true
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: tier
    value: gold
    descriptors:
      - key: route
        rate_limit: { period: 30s, requests_per_unit: 5, algorithm: token_bucket }
",
    )
    .await;
    let (debug, _stop) = serve(ratelimit_envoy::http::debug_router(Arc::clone(&service))).await;
    let http = client();
    let text = http
        .get(format!("{debug}/rlconfig"))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    assert!(
        text.contains(
            "api.user: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("api.remote_address: unit=SECOND requests_per_unit=2, shadow_mode: true"),
        "{text}"
    );
    assert!(
        text.contains("api.tier_gold.route: unit=UNKNOWN requests_per_unit=5"),
        "{text}"
    );
    assert!(text.contains(", limit: "), "{text}");
    let index = http
        .get(format!("{debug}/"))
        .send()
        .await
        .expect("answered");
    assert!(
        index
            .text()
            .await
            .expect("a body")
            .starts_with("/rlconfig: ")
    );

    // 12 hits on one user (10 admitted, of which 2 near the limit, then 2 over), 3 on one
    // address in shadow mode (2 within, 1 over and let through), 1 on a nested rule.
    for _ in 0..12 {
        ask(&service, "api", &[("user", "alice")]).await;
    }
    for _ in 0..3 {
        let r = ask(&service, "api", &[("remote_address", "10.0.0.1")]).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    ask(&service, "api", &[("tier", "gold"), ("route", "/a")]).await;
    ask(&service, "elsewhere", &[("user", "alice")]).await;

    let stats = Arc::clone(service.counters());
    let (metrics, _stop_metrics) =
        serve(ratelimit_envoy::http::metrics_router(stats, "/metrics")).await;
    let r = http
        .get(format!("{metrics}/metrics"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain; version=0.0.4"))
    );
    let text = r.text().await.expect("a body");
    for line in [
        "# TYPE ratelimit_service_rate_limit_total_hits counter",
        r#"ratelimit_service_rate_limit_total_hits{domain="api",key1="user"} 12"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="api",key1="user"} 10"#,
        r#"ratelimit_service_rate_limit_near_limit{domain="api",key1="user"} 2"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="api",key1="user"} 2"#,
        r#"ratelimit_service_rate_limit_shadow_mode{domain="api",key1="user"} 0"#,
        // detailed_metric: the value, its IPv4 dots sanitized as the reference does.
        r#"ratelimit_service_rate_limit_total_hits{domain="api",key1="remote_address_10_0_0_1"} 3"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="api",key1="remote_address_10_0_0_1"} 1"#,
        r#"ratelimit_service_rate_limit_shadow_mode{domain="api",key1="remote_address_10_0_0_1"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="api",key1="tier_gold",key2="route"} 1"#,
        "ratelimit_service_config_load_success 0",
        "ratelimit_service_config_load_error 0",
    ] {
        assert!(text.contains(&format!("{line}\n")), "{line} in:\n{text}");
    }
    assert!(
        !text.contains("elsewhere"),
        "an unknown domain has no series"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn the_binary_serves_every_endpoint_and_turns_unhealthy_on_sigterm() {
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).expect("created");
    write(&config, "api.yaml", DAILY_5);
    let ports: Vec<u16> = (0..4).map(|_| testkit::free_port()).collect();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-envoy"))
        .env_clear()
        .env("MEMORY_STORE", "true")
        .env("RUNTIME_ROOT", dir.path())
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("RUNTIME_POLL_MS", "10")
        .env("HOST", "127.0.0.1")
        .env("GRPC_HOST", "127.0.0.1")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("GRPC_PORT", ports[0].to_string())
        .env("PORT", ports[1].to_string())
        .env("DEBUG_PORT", ports[2].to_string())
        .env("USE_PROMETHEUS", "true")
        .env("PROMETHEUS_ADDR", format!("127.0.0.1:{}", ports[3]))
        .env("PROMETHEUS_PATH", "/prom")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("started");
    // Started once its stderr says the last listener is up.
    let stderr = child.stderr.take().expect("piped");
    let (ready, mut is_ready) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = ready.send(line);
        }
    });
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("PROMETHEUS_ADDR: listening"))
    {
        let line = tokio::time::timeout(Duration::from_secs(30), is_ready.recv())
            .await
            .expect("started within 30 s")
            .unwrap_or_else(|| panic!("exited early:\n{}", seen.join("\n")));
        seen.push(line);
    }
    let http = client();
    let base = format!("http://127.0.0.1:{}", ports[1]);
    let r = http
        .get(format!("{base}/healthcheck"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    let body = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}"#;
    let r = http
        .post(format!("{base}/json"))
        .body(body)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    let rlconfig = http
        .get(format!("http://127.0.0.1:{}/rlconfig", ports[2]))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    assert!(
        rlconfig.starts_with("api.user: unit=DAY requests_per_unit=5"),
        "{rlconfig}"
    );
    // One gRPC call, admitted, and one refused as invalid (no descriptor): counted per call.
    let mut grpc = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
        format!("http://127.0.0.1:{}", ports[0]),
    )
    .await
    .expect("connected");
    let answer = grpc
        .should_rate_limit(request("api", &[("user", "y")]))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let invalid = grpc
        .should_rate_limit(RateLimitRequest {
            domain: "api".into(),
            ..RateLimitRequest::default()
        })
        .await
        .expect_err("no descriptor is invalid");
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
    let prom = http
        .get(format!("http://127.0.0.1:{}/prom", ports[3]))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    for line in [
        "ratelimit_service_config_load_success 1",
        "ratelimit_service_rate_limit_total_hits{domain=\"api\",key1=\"user\"} 2",
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 2",
        "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 1",
        "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 0",
        "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 2",
        // The library's own, by the binary's recorder: both decisions (/json's and gRPC's)
        // under the domain's bucket name.
        "ratelimit_decisions_total{limit=\"envoy:api\",outcome=\"allowed\"} 2",
    ] {
        assert!(prom.contains(&format!("{line}\n")), "{line} in:\n{prom}");
    }

    let pid = i32::try_from(child.id()).expect("a pid");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill ran");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("joined")
        .expect("waited");
    assert!(status.success(), "{status:?}");
}

#[cfg(unix)]
#[test]
fn the_binary_refuses_a_batching_figure_it_cannot_use_and_says_which() {
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).expect("created");
    write(&config, "api.yaml", DAILY_5);
    for bad in ["0", "four", "-1"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-envoy"))
            .env_clear()
            .env("MEMORY_STORE", "true")
            .env("RUNTIME_ROOT", dir.path())
            .env("REDIS_BATCH_AFTER", bad)
            .output()
            .expect("ran");
        assert_eq!(out.status.code(), Some(1), "{bad}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "REDIS_BATCH_AFTER={bad}: expected a number of calls"
            )),
            "{stderr}"
        );
    }
}
