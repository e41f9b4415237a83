//! Declarations that are wrong together stop the service at startup, in one error that names
//! every mistake and the place of each declaration: a `shared` limit that no function declares
//! (with the limits that are declared), and a name declared by two functions.
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

#[rate_limit(replenish = 1, unit = "day", key = Ip, name = "export")]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "hour", key = Ip, name = "export")]
async fn export_all() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn dangling_and_duplicated_names_fail_enable() {
    let err = enable_redis_rate_limit!(url = "memory://")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.starts_with("2 mistakes"), "{msg}");
    assert!(msg.contains("`shared = \"serch\"`"), "{msg}");
    assert!(
        msg.contains("(tests/enable_shared.rs:15)"),
        "names the place: {msg}"
    );
    assert!(msg.contains("declared limits: export, search"), "{msg}");
    assert!(
        msg.contains(
            "the limit `export` is declared 2 times \
             (tests/enable_shared.rs:20 and tests/enable_shared.rs:25)"
        ),
        "names both places: {msg}"
    );
    let _ = (search, suggest, export, export_all);
}
