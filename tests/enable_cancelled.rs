//! An `enable_redis_rate_limit!` cancelled by a start-up timeout gives its claim back: a later
//! one installs the limiter instead of failing with `AlreadyEnabled` for the life of the
//! process.
//!
//! One test per file: enabling is once per process.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use redis_ratelimit::{Error, enable_redis_rate_limit};
use testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_enable_lets_the_next_one_try() {
    // Accepts connections and never answers: the enable below waits until cancelled.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("redis://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });

    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        enable_redis_rate_limit!(url = silent_url, prefix = "ec"),
    )
    .await;
    assert!(cancelled.is_err(), "the silent server never answers");

    let server = RedisServer::start();
    let limiter = enable_redis_rate_limit!(url = server.url(), prefix = "ec")
        .await
        .expect("the claim of the cancelled enable was given back");
    assert_eq!(limiter.prefix(), "ec");
    let again = enable_redis_rate_limit!(url = server.url(), prefix = "ec").await;
    assert!(matches!(again, Err(Error::AlreadyEnabled)), "{again:?}");
    held.abort();
}
