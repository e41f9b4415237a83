//! One instance of a fleet, in its own process, for `tests/lifecycle.rs`: it builds a Redis
//! limiter and holds it for `--hold-ms` (its heartbeat counts it as an instance).
//!
//! ```text
//! fleet_member --url redis://127.0.0.1:PORT --prefix P --hold-ms 5000 [--key K]
//! ```
//!
//! It prints `READY` once built. With `--key`, it then drains `K` (1 per hour) until its deny
//! cache refuses it, prints `REFUSED`, and calls every millisecond until a call is admitted
//! (another instance reset the bucket): it prints `ADMITTED <ms since REFUSED>` and exits.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ratelimit_core::{Limit, RateLimiter, Source};

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

async fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let url = flag(&args, "--url").ok_or("missing `--url`")?;
    // Traffic only to a loopback server the caller started, never the default one.
    if !url.starts_with("redis://127.0.0.1:") || url.ends_with(":6379") {
        return Err(format!(
            "`--url {url}`: only a test server on loopback is accepted"
        ));
    }
    let prefix = flag(&args, "--prefix").ok_or("missing `--prefix`")?;
    let hold: u64 = flag(&args, "--hold-ms")
        .ok_or("missing `--hold-ms`")?
        .parse()
        .map_err(|e| format!("`--hold-ms`: {e}"))?;
    let until = Instant::now() + Duration::from_millis(hold.min(60_000));
    let limiter = RateLimiter::builder()
        .redis(url)
        .prefix(prefix)
        .deadline(Duration::from_secs(5))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    say("READY");
    if let Some(key) = flag(&args, "--key") {
        let limit = Limit::per_hour(1);
        loop {
            let d = limiter
                .check(&key, &limit)
                .await
                .map_err(|e| e.to_string())?;
            if d.source == Source::DenyCache {
                break;
            }
            if Instant::now() > until {
                return Err("the deny cache never refused".to_owned());
            }
        }
        say("REFUSED");
        let refused = Instant::now();
        while Instant::now() < until {
            if limiter
                .check(&key, &limit)
                .await
                .map_err(|e| e.to_string())?
                .allowed
            {
                say(&format!("ADMITTED {}", refused.elapsed().as_millis()));
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        return Err("never admitted".to_owned());
    }
    tokio::time::sleep_until(until.into()).await;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet_member: {e}");
            ExitCode::FAILURE
        }
    }
}
