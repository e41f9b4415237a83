//! A loop of calls to one rate-limited function, printing every decision.
//!
//! ```sh
//! cargo run --example quickstart                                   # in-memory store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart  # shared buckets in Redis
//! RUST_LOG=redis_ratelimit=debug cargo run --example quickstart      # each decision's span
//! ```
#![allow(clippy::print_stdout)]

mod report;

use std::process::ExitCode;
use std::time::Duration;

use redis_ratelimit::{
    Global, RateLimited, RequestContext, Source, context::scope_returning, enable_redis_rate_limit,
    rate_limit,
};

/// 2 calls per second on average, up to 5 at once, one bucket for every caller.
#[rate_limit(replenish = 2, burst = 5, key = Global)]
async fn fetch_report(call: u32) -> Result<String, RateLimited> {
    Ok(format!("report #{call}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "memory://".to_owned());
    enable_redis_rate_limit!(url = url.clone()).await?;
    if url.starts_with("memory:") {
        println!("store: in memory (set REDIS_URL to share buckets through Redis)");
    } else {
        println!("store: Redis at {url}");
    }
    for decl in redis_ratelimit::declared_limits() {
        println!(
            "limit `{}`: {} keyed by {}",
            decl.name(),
            decl.effective(),
            decl.key()
        );
    }

    for call in 1..=12 {
        // The scope gives back the verdict of the call, to print what is left.
        let (result, recorded) = scope_returning(RequestContext::new(), fetch_report(call)).await;
        let decision = recorded.map(|r| r.decision);
        match result {
            Ok(report) => match decision {
                Some(d) if d.source == Source::Disabled => {
                    println!("call {call:>2}: allowed: {report}, no limit applies (disabled)");
                }
                Some(d) => println!("call {call:>2}: allowed: {report}, {} left", d.remaining),
                None => println!("call {call:>2}: allowed: {report}"),
            },
            Err(rejected) => println!(
                "call {call:>2}: denied, retry in {:?}",
                rejected.retry_after()
            ),
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    Ok(())
}
