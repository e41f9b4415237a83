//! One client of a TLS Redis, for `tests/tls.rs`: builds a limiter on the URL it is given (the
//! CA it trusts comes from `SSL_CERT_FILE`, as for any program using the system's roots),
//! makes three calls under a limit of two, and prints `ALLOWED` or `REFUSED` for each, or
//! `ERROR: <message>` and exits 1.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use ratelimit_core::{Limit, RateLimiter};

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        println!("ERROR: usage: tls_client <rediss://...>");
        return ExitCode::FAILURE;
    };
    let limiter = match RateLimiter::builder()
        .redis(url)
        .prefix("tls")
        .build()
        .await
    {
        Ok(l) => l,
        Err(e) => {
            println!("ERROR: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limit = Limit::per_minute(2);
    for _ in 0..3 {
        match limiter.check("k", &limit).await {
            Ok(d) if d.allowed => println!("ALLOWED {:?}", d.source),
            Ok(d) => println!("REFUSED {:?}", d.source),
            Err(e) => {
                println!("ERROR: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
