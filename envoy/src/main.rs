//! `ratelimit-envoy`: the rate-limit service for Envoy, configured as envoyproxy/ratelimit is
//! (its environment variables, its configuration directory), serving
//! `envoy.service.ratelimit.v3.RateLimitService` and `grpc.health.v1` on `GRPC_HOST:GRPC_PORT`,
//! `/healthcheck` and `/json` on `HOST:PORT`, `/rlconfig` on `DEBUG_HOST:DEBUG_PORT`, and with
//! `USE_PROMETHEUS=true` the metrics on `PROMETHEUS_ADDR` at `PROMETHEUS_PATH` (see
//! [`ratelimit_envoy::http`] and [`ratelimit_envoy::stats`]). The configuration is reloaded
//! when it changes ([`ratelimit_envoy::watch`]).
//!
//! Besides the reference's variables (see [`Settings::from_vars`]):
//! - `FAILURE_POLICY`: what a limit without its own `failure_policy` does when Redis fails:
//!   `fallback` (default: this instance's share), `allow`, `deny`, or `unavailable` (answer
//!   gRPC `UNAVAILABLE`, so that Envoy's `failure_mode_deny` decides);
//! - `MEMORY_STORE=true`: keep the buckets in this process's memory instead of Redis (one
//!   instance only; for trials and tests). Without it, `REDIS_URL` (or its default) is used.
//! - `RUNTIME_POLL_MS` (default 1000): how often the configuration's files are looked at.
//! - `REDIS_BATCH_AFTER` (default 1): requests in flight to Redis, each sent on its own,
//!   before the next ones gather into one command (see [`RedisStore::batch_after`]); 16 is
//!   the library's default, a few µs quicker at a handful of requests in flight, dearer for
//!   Redis under load.
//! - `RATELIMIT_HEADERS` (default `off`; read by [`Settings`]): `draft11` adds the IETF
//!   draft-11 `RateLimit-Policy` and `RateLimit` headers to the response to the client.
//!
//! Logs go to stderr at `LOG_LEVEL`, as text or with `LOG_FORMAT=json` one JSON object a line
//! (`timestamp`, `level`, `target`, and the event's `fields`, its `message` among them: the
//! field names of `tracing-subscriber`, not the reference's logrus `@timestamp` and
//! `@message`). With `USE_PROMETHEUS=true`, the library's own counters
//! ([`ratelimit_envoy::stats`]) are rendered after the reference's. On SIGTERM or ctrl-c, `/healthcheck` turns `500` at once, then every server stops
//! taking connections and answers the requests in flight; exits 0 then, 1 when it cannot
//! start (every error of a bad configuration is printed, each with its file and line).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ratelimit_core::RateLimiter;
use ratelimit_core::store::RedisStore;
use ratelimit_envoy::config::{Config, LoadOptions};
use ratelimit_envoy::http::Health;
use ratelimit_envoy::service::{Service, parse_failure};
use ratelimit_envoy::settings::{LogFormat, LogLevel, Settings};
use ratelimit_envoy::stats::Stats;
use ratelimit_envoy::watch::Watcher;

/// mimalloc rather than glibc's malloc: allocation was a fifth of the service's CPU under load
/// (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Calls in flight to Redis, each on its own, before the next ones gather into batches
/// ([`RedisStore::batch_after`]), unless `REDIS_BATCH_AFTER` says otherwise: 1, where the
/// library's default is 16. A call that finds one in flight waits for it and leaves with every
/// call that arrived meanwhile, as one command (group commit): a rate-limit service under load
/// always has many requests in flight, and Redis's wake-ups are most of its CPU per decision.
/// At 64 requests in flight Redis spent 0.47 x limitador's CPU per decision with 1, 0.56-0.59 x
/// with 4 and 0.61 x with 16, decisions per second no fewer; at 16 in flight 4.04 us against
/// 5.25 us, p50 the same; at 4 in flight the p50 rose from 177-183 to 207 us. One request at a
/// time is sent at once either way (docs/benchmarks.md, issue 46 under load).
const BATCH_AFTER: usize = 1;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ratelimit-envoy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ratelimit-envoy: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let settings = Settings::from_vars(vars.iter().cloned()).map_err(|e| e.to_string())?;
    let level = match settings.log_level {
        LogLevel::Trace => tracing::Level::TRACE,
        LogLevel::Debug => tracing::Level::DEBUG,
        LogLevel::Info => tracing::Level::INFO,
        LogLevel::Warn => tracing::Level::WARN,
        _ => tracing::Level::ERROR,
    };
    let logs = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    match settings.log_format {
        LogFormat::Json => logs.json().init(),
        _ => logs.init(),
    }
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let (policy, store_failure) = parse_failure(var("FAILURE_POLICY").unwrap_or("fallback"))
        .map_err(|e| format!("FAILURE_POLICY={e}"))?;
    let memory = match var("MEMORY_STORE").map(str::to_ascii_lowercase).as_deref() {
        None | Some("" | "false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => return Err(format!("MEMORY_STORE={other}: expected true or false")),
    };
    let poll = match var("RUNTIME_POLL_MS") {
        None | Some("") => Duration::from_secs(1),
        Some(ms) => match ms.parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                return Err(format!(
                    "RUNTIME_POLL_MS={ms}: expected milliseconds, at least 1"
                ));
            }
        },
    };

    let batch_after = match var("REDIS_BATCH_AFTER") {
        None | Some("") => BATCH_AFTER,
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "REDIS_BATCH_AFTER={n}: expected a number of calls, at least 1"
                ));
            }
        },
    };

    let dir = settings.config_dir();
    let options = LoadOptions::new()
        .merge_domains(settings.merge_domain_config)
        .ignore_dot_files(settings.runtime_ignore_dot_files);
    let config = Config::load_dir(&dir, &options).map_err(|errors| {
        format!(
            "the configuration in {} cannot be loaded:\n{errors}",
            dir.display()
        )
    })?;

    let stats = Arc::new(Stats::new(settings.near_limit_permille));
    if settings.use_prometheus {
        // Before the limiter is built: its gauge of a failing store is set from `build` on.
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| format!("the metrics recorder: {e}"))?;
        stats.also_render(move || handle.render());
    }
    let mut builder = RateLimiter::builder().failure_policy(policy);
    builder = if memory {
        builder.memory()
    } else {
        let store = RedisStore::connect(&settings.redis_url)
            .await
            .map_err(|e| e.to_string())?;
        builder.redis_store(store.batch_after(batch_after))
    };
    if !settings.cache_key_prefix.is_empty() {
        builder = builder.prefix(settings.cache_key_prefix.clone());
    }
    let limiter = builder.build().await.map_err(|e| e.to_string())?;

    stats.record_load(true);
    let service = Arc::new(
        Service::new(limiter, config)
            .global_shadow(settings.shadow_mode)
            .store_failure(store_failure)
            .response_headers(settings.ratelimit_headers)
            .stats(Arc::clone(&stats)),
    );

    let grpc = listen("GRPC_HOST", &settings.grpc_host, settings.grpc_port).await?;
    let http = listen("HOST", &settings.host, settings.port).await?;
    let debug = listen("DEBUG_HOST", &settings.debug_host, settings.debug_port).await?;
    let prometheus = if settings.use_prometheus {
        // Go's `:9090`: every interface.
        let addr = &settings.prometheus_addr;
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("PROMETHEUS_ADDR={addr}: expected host:port or :port"))?;
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        Some(listen("PROMETHEUS_ADDR", host, port).await?)
    } else {
        None
    };

    // One signal stops everything: health first, then each server drains.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let health = Arc::new(Health::new());
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    {
        let health = Arc::clone(&health);
        tokio::spawn(async move {
            shutdown().await;
            health.fail();
            let _ = stop.send(true);
        });
    }
    let watcher = Watcher::from_settings(&settings).interval(poll);
    tokio::spawn(watcher.run(Arc::clone(&service), until_stopped()));
    let http_server = tokio::spawn(ratelimit_envoy::http::serve(
        ratelimit_envoy::http::router(Arc::clone(&service), health),
        http,
        until_stopped(),
    ));
    let debug_server = tokio::spawn(ratelimit_envoy::http::serve(
        ratelimit_envoy::http::debug_router(Arc::clone(&service)),
        debug,
        until_stopped(),
    ));
    let prometheus_server = prometheus.map(|listener| {
        tokio::spawn(ratelimit_envoy::http::serve(
            ratelimit_envoy::http::metrics_router(stats, &settings.prometheus_path),
            listener,
            until_stopped(),
        ))
    });
    let served = ratelimit_envoy::server::serve(service, grpc, until_stopped())
        .await
        .map_err(|e| format!("gRPC: {e}"));
    for (name, server) in [("HTTP", Some(http_server)), ("debug", Some(debug_server))]
        .into_iter()
        .chain([("Prometheus", prometheus_server)])
    {
        if let Some(server) = server {
            match server.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("{name}: {e}")),
                Err(e) => return Err(format!("{name}: {e}")),
            }
        }
    }
    served
}

/// A listener on `host:port`, announced on stderr.
async fn listen(variable: &str, host: &str, port: u16) -> Result<tokio::net::TcpListener, String> {
    let addr: SocketAddr = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("{variable}={host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{variable}={host}: no address"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({variable}): {e}"))?;
    eprintln!(
        "ratelimit-envoy: {variable}: listening on {}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    Ok(listener)
}

/// SIGTERM or ctrl-c.
async fn shutdown() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
