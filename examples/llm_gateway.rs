//! An LLM-style gateway sold by tokens, on axum (issue 36): a completion's cost is known only
//! when its streamed response ends, so each call takes an estimate before it runs and settles
//! the tokens it used after.
//!
//! | plan | tokens per minute (owing at most) | tokens per month (owing at most) |
//! |---|---|---|
//! | `free` | 1,000 (500) | 20,000 (1,000) |
//! | `pro` | 10,000 (5,000) | 500,000 (10,000) |
//! | `trial` | 5,000 (2,500) | 300 (100) |
//!
//! `POST /v1/completions` with `x-api-key` (`free-1`, `pro-1`, `trial-1`; any other key is
//! refused with 401) and a JSON body `{"prompt": "..", "max_tokens": n}`. The fake model
//! answers `min(max_tokens, 2 × the prompt's words)` completion tokens, streamed one chunk a
//! token, and the call uses those and the prompt's words: the estimate is `max_tokens` (1 to
//! 4,096), so a long prompt overdraws it, and a short answer gives most of it back. The
//! stream's last line says `[usage: n]`. Both limits of the key's plan take the estimate
//! together (all or nothing) and settle together when the stream ends; a stream the client
//! drops keeps its estimate.
//!
//! A refusal by the minute's rate is a 429 with `Retry-After`; by the month's quota, a 402
//! (the quota is exhausted until the month ends, `Retry-After` says when) with a
//! problem+json body. `GET /v1/usage` (with `x-api-key`) tells what is left of each.
//!
//! Without `REDIS_URL` the limits live in memory (one instance only).
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 PORT=8080 \
//!     cargo run -p redis-ratelimit-examples --example llm_gateway --features axum
//! curl -N -H 'x-api-key: free-1' -H 'content-type: application/json' \
//!     -d '{"prompt":"hello there","max_tokens":64}' localhost:8080/v1/completions
//! curl -H 'x-api-key: free-1' localhost:8080/v1/usage
//! ```
#![allow(clippy::print_stdout)]

mod api_keys;
mod report;
mod serve_axum;
mod service;

use std::process::ExitCode;

use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use redis_ratelimit::{Decision, Limit, RateLimiter, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

/// The limits' names: a bucket per name and API key.
const MINUTE: &str = "llm_gateway.minute";
const MONTH: &str = "llm_gateway.month";

/// What a caller pays for.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Free,
    Pro,
    Trial,
}

impl Plan {
    /// The plan's two limits: tokens per minute, and per month.
    const fn limits(self) -> [Limit; 2] {
        match self {
            Plan::Free => [
                Limit::per_minute(1_000).max_debt(500),
                Limit::per_month(20_000).max_debt(1_000),
            ],
            Plan::Pro => [
                Limit::per_minute(10_000).max_debt(5_000),
                Limit::per_month(500_000).max_debt(10_000),
            ],
            Plan::Trial => [
                Limit::per_minute(5_000).max_debt(2_500),
                Limit::per_month(300).max_debt(100),
            ],
        }
    }
}

/// Who calls, from the `x-api-key` header; an unknown key is refused with 401.
#[derive(Debug)]
struct Caller {
    key: &'static str,
    plan: Plan,
}

/// The API keys this gateway knows (a real one would look them up).
const CALLERS: &[(&str, Plan)] = &[
    ("free-1", Plan::Free),
    ("pro-1", Plan::Pro),
    ("trial-1", Plan::Trial),
];

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = (StatusCode, Json<Value>);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let (key, plan) = api_keys::caller(parts, CALLERS)?;
        Ok(Caller { key, plan })
    }
}

#[derive(Debug, Deserialize)]
struct Request {
    prompt: String,
    max_tokens: u32,
}

/// The most a call may ask for: an estimate must fit each plan's minute.
const MAX_TOKENS: u32 = 4_096;

async fn completions(
    State(limiter): State<&'static RateLimiter>,
    caller: Caller,
    Json(request): Json<Request>,
) -> Response {
    if !(1..=MAX_TOKENS).contains(&request.max_tokens) {
        return problem(
            StatusCode::BAD_REQUEST,
            &format!("max_tokens must be 1 to {MAX_TOKENS}"),
            None,
        );
    }
    let [minute, month] = caller.plan.limits();
    let estimate = request.max_tokens;
    let taken = limiter
        .check_all_estimates(&[
            (MINUTE, caller.key, &minute, estimate),
            (MONTH, caller.key, &month, estimate),
        ])
        .await;
    let usage = match taken {
        Ok(usage) if usage.decision().allowed => usage,
        Ok(refused) => return refusal(refused.decision()),
        // The store failed and the limits' failure policy refused, or a misuse.
        Err(e) => return problem(StatusCode::SERVICE_UNAVAILABLE, &e.to_string(), None),
    };
    let prompt_tokens =
        u32::try_from(request.prompt.split_whitespace().count()).unwrap_or(u32::MAX);
    let answer = request.max_tokens.min(prompt_tokens.saturating_mul(2));
    let mut response = Body::from_stream(stream(answer, prompt_tokens, usage)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The fake model's answer: `answer` tokens, one chunk each, then the usage line; the call's
/// usage settled once the last chunk is out (a stream dropped before keeps its estimate).
fn stream(
    answer: u32,
    prompt_tokens: u32,
    usage: Usage,
) -> impl futures_util::Stream<Item = Result<String, std::io::Error>> {
    futures_util::stream::unfold((0u32, Some(usage)), move |(sent, mut usage)| async move {
        if sent < answer {
            return Some((Ok(format!("tok{sent} ")), (sent + 1, usage)));
        }
        let usage = usage.take()?;
        let used = prompt_tokens.saturating_add(answer);
        if let Err(e) = usage.settle(used).await {
            // The estimate stays taken: logged, the answer was served.
            eprintln!("could not settle {used} tokens: {e}");
        }
        Some((Ok(format!("\n[usage: {used}]\n")), (sent, None)))
    })
}

/// A refusal: by the month's quota (402, until the month ends) or the minute's rate (429).
fn refusal(decision: &Decision) -> Response {
    let refusing = decision
        .parts()
        .get(decision.tightest())
        .unwrap_or(decision);
    let quota = refusing.limit.calendar().is_some();
    let (status, detail) = if quota {
        (
            StatusCode::PAYMENT_REQUIRED,
            format!(
                "the monthly token quota ({}) is used up; it resets in {} s",
                refusing.limit.replenish(),
                refusing.retry_after.as_secs()
            ),
        )
    } else {
        (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "over {} tokens a minute; retry in {} ms",
                refusing.limit.replenish(),
                refusing.retry_after.as_millis()
            ),
        )
    };
    problem(status, &detail, Some(refusing.retry_after.as_secs().max(1)))
}

fn problem(status: StatusCode, detail: &str, retry_after: Option<u64>) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason(),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(secs) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// What is left of each of the caller's limits, and what each owes beyond empty.
async fn usage(State(limiter): State<&'static RateLimiter>, caller: Caller) -> Response {
    let [minute, month] = caller.plan.limits();
    let mut left = serde_json::Map::new();
    for (name, limit) in [(MINUTE, minute), (MONTH, month)] {
        match limiter.peek_named(name, caller.key, &limit).await {
            Ok(d) => {
                left.insert(
                    name.to_owned(),
                    json!({
                        "limit": limit.replenish(),
                        "remaining": d.remaining,
                        "resets_in_ms": u64::try_from(d.reset_after.as_millis()).unwrap_or(u64::MAX),
                    }),
                );
            }
            Err(e) => return problem(StatusCode::SERVICE_UNAVAILABLE, &e.to_string(), None),
        }
    }
    Json(Value::Object(left)).into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

fn app(limiter: &'static RateLimiter) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/usage", get(usage))
        .route("/health", get(health))
        .with_state(limiter)
}

#[tokio::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let limiter = service::enable().await?;
    serve_axum::serve(app(limiter)).await
}
