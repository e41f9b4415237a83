#![deny(warnings)]
//! Every algorithm, refill and initial fill the attribute takes, literals and constants.

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

fn main() {
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
    let _ = (bucket(), interval(), fixed(), sliding(), log());
}
