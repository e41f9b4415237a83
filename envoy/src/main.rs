//! `ratelimit-envoy`: the rate-limit service for Envoy, configured as envoyproxy/ratelimit is
//! (its environment variables, its configuration directory), serving
//! `envoy.service.ratelimit.v3.RateLimitService` and `grpc.health.v1` on `GRPC_HOST:GRPC_PORT`.
//!
//! Besides the reference's variables (see [`Settings::from_vars`]):
//! - `FAILURE_POLICY`: what a limit without its own `failure_policy` does when Redis fails:
//!   `fallback` (default: this instance's share), `allow`, `deny`, or `unavailable` (answer
//!   gRPC `UNAVAILABLE`, so that Envoy's `failure_mode_deny` decides);
//! - `MEMORY_STORE=true`: keep the buckets in this process's memory instead of Redis (one
//!   instance only; for trials and tests). Without it, `REDIS_URL` (or its default) is used.
//!
//! Exits 0 on SIGTERM or ctrl-c, after the requests in flight are answered; 1 when it cannot
//! start (every error of a bad configuration is printed, each with its file and line).

use std::net::SocketAddr;
use std::process::ExitCode;

use ratelimit_core::RateLimiter;
use ratelimit_envoy::config::{Config, LoadOptions};
use ratelimit_envoy::service::{Service, parse_failure};
use ratelimit_envoy::settings::Settings;

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

    let mut builder = RateLimiter::builder().failure_policy(policy);
    builder = if memory {
        builder.memory()
    } else {
        builder.redis(settings.redis_url.clone())
    };
    if !settings.cache_key_prefix.is_empty() {
        builder = builder.prefix(settings.cache_key_prefix.clone());
    }
    let limiter = builder.build().await.map_err(|e| e.to_string())?;

    let service = Service::new(limiter, config)
        .global_shadow(settings.shadow_mode)
        .store_failure(store_failure);
    let addr: SocketAddr =
        tokio::net::lookup_host((settings.grpc_host.as_str(), settings.grpc_port))
            .await
            .map_err(|e| format!("GRPC_HOST={}: {e}", settings.grpc_host))?
            .next()
            .ok_or_else(|| format!("GRPC_HOST={}: no address", settings.grpc_host))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    eprintln!(
        "ratelimit-envoy: serving gRPC on {}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    ratelimit_envoy::server::serve(service, listener, shutdown())
        .await
        .map_err(|e| e.to_string())
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
