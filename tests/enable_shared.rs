//! A `shared` limit that no function declares stops the service at startup, naming the use
//! and the limits that are declared.
//!
//! One test per file: enabling is once per process.
#![allow(clippy::unwrap_used)]

use redis_ratelimit::{Error, Ip, RateLimited, enable_redis_rate_limit, rate_limit};

#[rate_limit(replenish = 4, unit = "day", key = Ip, name = "search")]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(shared = "serch", key = Ip)]
async fn suggest() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn a_shared_use_of_no_declared_limit_fails_enable() {
    let err = enable_redis_rate_limit!(url = "memory://")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("`shared = \"serch\"`"), "{msg}");
    assert!(
        msg.contains("tests/enable_shared.rs:14"),
        "names the place: {msg}"
    );
    assert!(msg.contains("declared limits: search"), "{msg}");
    let _ = (search, suggest);
}
