//! A concurrency limit on the axum layer (`layer_limit!(concurrent = ..)`), in memory: at most
//! N requests of one key in flight (counted inside the handlers), refused at once beyond it
//! with `qu="concurrent-requests"`, the slots given back when the response is made; the same
//! on a route whose handler has a rate limit of its own, where the layer's slot is taken in
//! the handler's check. One test for the file: the limiter is a process-wide static.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use redis_ratelimit::{
    Global, Header, RateLimitLayer, RateLimited, enable_redis_rate_limit, layer_limit, rate_limit,
};
use tokio::sync::{Semaphore, mpsc};
use tower::ServiceExt as _;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);
/// The handlers wait here until the test lets them finish.
static GATE: Semaphore = Semaphore::const_new(0);

async fn run() {
    let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    GATE.acquire().await.unwrap().forget();
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
}

async fn report() -> &'static str {
    run().await;
    "report"
}

#[rate_limit(replenish = 100, unit = "hour", key = Global, name = "audits")]
async fn audit() -> Result<&'static str, RateLimited> {
    run().await;
    Ok("audit")
}

fn app() -> Router {
    Router::new()
        .route("/report", get(report))
        .route("/audit", get(audit))
        .layer(RateLimitLayer::new().limit(layer_limit!(
            name = "runs",
            concurrent = 2,
            key = Header("x-tenant")
        )))
}

/// Sends `n` requests for `tenant` to `path` at once; their statuses arrive on the channel as
/// each response is made, with its policy header.
fn burst(app: &Router, path: &str, tenant: &str, n: usize) -> mpsc::Receiver<(u16, String)> {
    let (tx, rx) = mpsc::channel(n);
    for _ in 0..n {
        let req = Request::get(path)
            .header("x-tenant", tenant)
            .body(Body::empty())
            .unwrap();
        let (app, tx) = (app.clone(), tx.clone());
        tokio::spawn(async move {
            let r = app.oneshot(req).await.unwrap();
            let policy = r
                .headers()
                .get("ratelimit-policy")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            tx.send((r.status().as_u16(), policy)).await.unwrap();
        });
    }
    rx
}

/// Takes the next `n` statuses; fails rather than hang when they do not come (more requests
/// admitted than the limit lets through wait at the gate for ever).
async fn next(rx: &mut mpsc::Receiver<(u16, String)>, n: usize) -> Vec<(u16, String)> {
    let mut got = Vec::with_capacity(n);
    for _ in 0..n {
        let status = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await;
        got.push(status.expect("a response that never came").unwrap());
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_requests_of_a_key_are_in_flight() {
    enable_redis_rate_limit!(url = "memory://", prefix = "layer-concurrent")
        .await
        .unwrap();
    let app = app();

    for path in ["/report", "/audit", "/audit"] {
        MOST.store(0, Ordering::SeqCst);
        // Five at once: two run (and wait at the gate), three are refused at once.
        let mut done = burst(&app, path, "acme", 5);
        let refused = next(&mut done, 3).await;
        for (status, policy) in &refused {
            assert_eq!(*status, 429, "{path}");
            assert!(
                policy.contains("\"runs\";q=2;qu=\"concurrent-requests\""),
                "{path}: {policy}"
            );
        }
        // The two admitted reach the handler (their refusals may come back first).
        while IN_FLIGHT.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        // Another tenant has slots of its own.
        let mut other = burst(&app, path, "globex", 1);
        while IN_FLIGHT.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        GATE.add_permits(3);
        let served: Vec<_> = next(&mut done, 2).await.into_iter().map(|s| s.0).collect();
        assert_eq!(served, [200, 200], "{path}");
        assert_eq!(next(&mut other, 1).await[0].0, 200, "{path}");
        assert_eq!(
            MOST.load(Ordering::SeqCst),
            3,
            "{path}: two of acme and one of globex"
        );
        // The slots came back with the responses: two run again.
        let mut again = burst(&app, path, "acme", 2);
        while IN_FLIGHT.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        GATE.add_permits(2);
        let served: Vec<_> = next(&mut again, 2).await.into_iter().map(|s| s.0).collect();
        assert_eq!(served, [200, 200], "{path}");
    }
}
