#![deny(warnings)]
//! Every algorithm, refill, initial fill, wait and shadow mode the attribute takes, literals
//! and constants.

use redis_ratelimit::{Algorithm, RateLimited, Refill, declared_limits, rate_limit};

const WARM: u32 = 0;

#[rate_limit(replenish = 10, algorithm = "token_bucket")]
async fn bucket() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 100, unit = "hour", refill = "interval", burst = 300, initial = WARM)]
async fn interval() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1000, unit = "minute", algorithm = "fixed_window")]
async fn fixed() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 5, unit = "day", algorithm = "sliding_window", cost = 5)]
async fn sliding() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 3, algorithm = "sliding_log", refill = "smooth")]
async fn log() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 5, burst = 20, algorithm = "leaky_bucket")]
async fn leaky() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, burst = 1, wait = "2s", shadow = true)]
async fn waits() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, burst = 1, wait = "2s", jitter = "50ms")]
async fn waits_jittered() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "minute", algorithm = "leaky_bucket", wait = "1m")]
async fn leaky_within_a_minute() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let jittered = declared_limits()
        .into_iter()
        .find(|d| d.name().ends_with("::waits_jittered"))
        .map(|d| d.declared_limit().max_jitter());
    assert_eq!(jittered, Some(Some(std::time::Duration::from_millis(50))));
    let algorithm_of = |suffix: &str| {
        declared_limits()
            .into_iter()
            .find(|d| d.name().ends_with(suffix))
            .map(|d| d.declared_limit())
    };
    assert_eq!(
        algorithm_of("::fixed").map(|l| l.algorithm_kind()),
        Some(Algorithm::FixedWindow)
    );
    assert_eq!(
        algorithm_of("::interval").map(|l| (l.refill_kind(), l.initial_tokens())),
        Some((Refill::Interval, 0))
    );
    assert_eq!(
        algorithm_of("::leaky").map(|l| (l.algorithm_kind(), l.burst_capacity())),
        Some((Algorithm::LeakyBucket, 20))
    );
    assert_eq!(
        algorithm_of("::waits").map(|l| (l.max_wait(), l.is_shadow())),
        Some((Some(std::time::Duration::from_secs(2)), true))
    );
    let _ = (bucket(), interval(), fixed(), sliding(), log());
    let _ = (leaky(), waits(), waits_jittered(), leaky_within_a_minute());
}
