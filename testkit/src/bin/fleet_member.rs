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
//!
//! With `--slots K --max M`, it answers commands read from its standard input, one a line,
//! each with one line: `count` (`COUNT <live instances>`), `enter <n>` (tries `n` calls
//! under the concurrency limit `M` on `K`, holding every slot it is granted:
//! `HELD <slots held> <granted by the fallback so far>`); it exits at the end of its input.

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
    if let Some(key) = flag(&args, "--slots") {
        let max: u32 = flag(&args, "--max")
            .ok_or("missing `--max`")?
            .parse()
            .map_err(|e| format!("`--max`: {e}"))?;
        return hold_slots(&limiter, &key, Limit::concurrent(max)).await;
    }
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

/// Answers the commands of standard input (see the module's docs), holding the slots granted.
async fn hold_slots(limiter: &RateLimiter, key: &str, limit: Limit) -> Result<(), String> {
    // Read by a thread of its own, so that the runtime (the heartbeat) runs meanwhile.
    let (lines, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut held = Vec::new();
    let mut by_fallback = 0u32;
    while let Some(command) = commands.recv().await {
        match command.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["count"] => say(&format!("COUNT {}", limiter.live_instances())),
            ["enter", n] => {
                let n: u32 = n.parse().map_err(|e| format!("`enter {n}`: {e}"))?;
                for _ in 0..n {
                    let entered = limiter
                        .enter(key, &limit)
                        .await
                        .map_err(|e| e.to_string())?;
                    if entered.decision.allowed {
                        by_fallback += u32::from(entered.decision.source == Source::Fallback);
                        held.push(entered);
                    }
                }
                say(&format!("HELD {} {by_fallback}", held.len()));
            }
            _ => return Err(format!("unknown command `{command}`")),
        }
    }
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
