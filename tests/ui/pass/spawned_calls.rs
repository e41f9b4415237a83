#![deny(warnings)]
//! Every call can be spawned on a multi-threaded runtime without raising the recursion limit:
//! the futures are `Send`, and shallow enough for the compiler to prove it.

use std::time::Duration;

use redis_ratelimit::{Global, Limit, RateLimited, RateLimiter, rate_limit};

#[rate_limit(replenish = 10, burst = 1, wait = "1s", key = Global)]
#[rate_limit(replenish = 100, unit = "minute", key = Global)]
async fn stacked_and_waiting() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(concurrent = 2, key = Global, wait = "1s")]
async fn in_flight() -> Result<(), RateLimited> {
    Ok(())
}

const LIMIT: Limit = Limit::per_second(10);

fn spawn_all(limiter: RateLimiter) {
    let l = limiter.clone();
    drop(tokio::spawn(async move { l.check("k", &LIMIT).await }));
    let l = limiter.clone();
    drop(tokio::spawn(async move {
        l.acquire("k", &LIMIT, Duration::from_secs(1)).await
    }));
    let l = limiter.clone();
    drop(tokio::spawn(async move {
        l.check_all(&[("a", &LIMIT, 1), ("b", &LIMIT, 1)]).await
    }));
    drop(tokio::spawn(async move { limiter.peek("k", &LIMIT).await }));
    drop(tokio::spawn(stacked_and_waiting()));
    drop(tokio::spawn(in_flight()));
}

fn main() {
    let _ = spawn_all;
}
