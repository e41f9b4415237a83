//! `limited_status`: a limit's refusals by its bucket answered with a status of its own (a
//! monthly quota used up is a 402 or a 403, not a "slow down"), with a problem body that
//! says which quota and when it comes back, on every kind of limit: a handler's, stacked
//! with a rate that keeps 429, a shared use (its own status), a concurrency limit and a
//! router's `layer_limit!`. In memory (the statuses are the response's, not the store's).
#![cfg(feature = "axum")]
#![allow(clippy::unwrap_used)]

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse as _;
use axum::routing::get;
use redis_ratelimit::{
    Global, RateLimitLayer, RateLimited, enable_redis_rate_limit, layer_limit, rate_limit,
};
use tower::ServiceExt as _;

/// Two calls a month (402 when used up), and ten a day (429: only a rate).
#[rate_limit(replenish = 2, unit = "month", key = Global, name = "qs.month", limited_status = 402)]
#[rate_limit(replenish = 10, unit = "day", key = Global, name = "qs.rate")]
async fn quota() -> Result<(), RateLimited> {
    Ok(())
}

/// One a day, its refusal a plain 429: the rate of a stacked call refusing it.
#[rate_limit(replenish = 1, unit = "day", key = "r", name = "qs.tight_rate")]
#[rate_limit(
    replenish = 5,
    unit = "month",
    key = "r",
    name = "qs.loose_month",
    limited_status = 402
)]
async fn rate_first() -> Result<(), RateLimited> {
    Ok(())
}

/// Draws from the month above, answering its own refusals with 403.
#[rate_limit(shared = "qs.month", key = Global, limited_status = 403)]
async fn shared_use() -> Result<(), RateLimited> {
    Ok(())
}

/// One in flight: a second call at once is refused with 503 (the slot's status).
#[rate_limit(concurrent = 1, key = Global, name = "qs.slots", limited_status = 503)]
async fn one_at_a_time(
    entered: tokio::sync::oneshot::Sender<()>,
    gate: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), RateLimited> {
    let _ = entered.send(());
    let _ = gate.await;
    Ok(())
}

async fn body_of(response: axum::response::Response) -> serde_json::Value {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_answers_its_refusals_with_its_own_status() {
    enable_redis_rate_limit!(url = "memory://").await.unwrap();

    quota().await.unwrap();
    quota().await.unwrap();
    let refused = quota().await.unwrap_err();
    assert_eq!(refused.name(), Some("qs.month"));
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    let response = refused.clone().into_response();
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(response.headers().get("retry-after").is_some());
    let body = body_of(response).await;
    assert_eq!(body["status"], 402);
    assert_eq!(body["violated-policies"][0], "qs.month");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the quota of 2 per month (fixed window) is used up; it resets in "),
        "{detail}"
    );
    assert!(body["retry-after"].as_u64().unwrap() >= 1, "{body}");

    // The rate of a stacked call refuses first: its own 429, no detail.
    rate_first().await.unwrap();
    let refused = rate_first().await.unwrap_err();
    assert_eq!(refused.name(), Some("qs.tight_rate"));
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        body_of(refused.into_response())
            .await
            .get("detail")
            .is_none()
    );

    // A shared use answers with its own status.
    let refused = shared_use().await.unwrap_err();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    // A concurrency limit's refusal, while the first call holds the slot (it says so).
    let (open, gate) = tokio::sync::oneshot::channel();
    let (entered, inside) = tokio::sync::oneshot::channel();
    let first = tokio::spawn(one_at_a_time(entered, gate));
    inside.await.unwrap();
    let (second, _) = tokio::sync::oneshot::channel();
    let (_, idle) = tokio::sync::oneshot::channel();
    let refused = one_at_a_time(second, idle).await.unwrap_err();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    open.send(()).unwrap();
    first.await.unwrap().unwrap();

    // A router's limit: a day's quota answered with 403 by the layer, before the handler.
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new().limit(layer_limit!(
            name = "qs.router",
            replenish = 1,
            unit = "month",
            key = Global,
            limited_status = 403
        )));
    let get = || {
        app.clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
    };
    assert_eq!(get().await.unwrap().status(), StatusCode::OK);
    let refused = get().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let body = body_of(refused).await;
    assert!(
        body["detail"].as_str().unwrap().contains("1 per month"),
        "{body}"
    );
    // The limit says its status to whoever lists the declarations.
    let listed = redis_ratelimit::declared_limits();
    let month = listed.iter().find(|d| d.name() == "qs.month").unwrap();
    assert_eq!(month.limited_status(), Some(402));
}
