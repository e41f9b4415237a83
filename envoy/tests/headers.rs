//! The draft-11 `RateLimit-Policy` and `RateLimit` headers the service asks Envoy to add
//! (`RATELIMIT_HEADERS=draft11`), as `Service::decide` renders them: buckets in memory on a
//! manual clock, so that every `t` is exact.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use ratelimit_core::RateLimiter;
use ratelimit_core::clock::ManualClock;
use ratelimit_core::store::MemoryStore;
use ratelimit_envoy::config::Config;
use ratelimit_envoy::service::{ResponseHeaders, Service};

const API: &str = "
domain: api
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3, name: per-user, algorithm: token_bucket }
  - key: wide
    rate_limit: { unit: hour, requests_per_unit: 10, algorithm: token_bucket }
  - key: narrow
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 5, name: per-tenant, algorithm: token_bucket }
  - key: free
    rate_limit: { unlimited: true }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: watched
    rate_limit: { unit: hour, requests_per_unit: 1, algorithm: token_bucket }
    shadow_mode: true
  - key: open
";

/// A service on buckets in memory, its clock standing still until a test moves it.
async fn service(headers: ResponseHeaders) -> (Service, ManualClock) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder()
        .memory_store(MemoryStore::with_clock(clock.clone()))
        .build()
        .await
        .expect("a limiter in memory");
    let config = Config::parse("api.yaml", API).expect("valid");
    (
        Service::new(limiter, config).response_headers(headers),
        clock,
    )
}

fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn decide(s: &Service, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    s.decide(&request(descriptors)).await.expect("an answer")
}

/// The headers to add, as `(name, value)`.
fn added(r: &RateLimitResponse) -> Vec<(&str, String)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.clone()))
        .collect()
}

fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("a known code")
}

#[tokio::test]
async fn off_by_default() {
    let (s, _) = service(ResponseHeaders::default()).await;
    let r = decide(&s, vec![descriptor("user", "alice")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
}

#[tokio::test]
async fn each_bucket_once_in_the_request_order_by_name_else_statistics_key() {
    let (s, _) = service(ResponseHeaders::Draft11).await;
    // No rule, unlimited: no quota, left out. `user=alice` twice: one bucket (cost 2), one
    // item, where it first appears.
    let r = decide(
        &s,
        vec![
            descriptor("user", "alice"),
            descriptor("free", "x"),
            descriptor("open", "x"),
            descriptor("wide", "x"),
            descriptor("narrow", "x"),
            descriptor("user", "alice"),
        ],
    )
    .await;
    assert_eq!(overall(&r), Code::Ok);
    // The fixed hour ends where the store's clock says: the status Envoy reads says when.
    let window_end = r.statuses[4].duration_until_reset.unwrap().seconds;
    assert!((1..=3600).contains(&window_end), "{window_end}");
    assert_eq!(
        added(&r),
        [
            (
                "ratelimit-policy",
                "\"per-user\";q=3;w=3600, \"api.wide\";q=10;w=3600, \"api.narrow\";q=1;w=3600"
                    .to_owned()
            ),
            // Token buckets: full again one token's interval per token taken (1200 s, 360 s);
            // the fixed hour: at its end.
            (
                "ratelimit",
                format!(
                    "\"per-user\";r=1;t=2400, \"api.wide\";r=9;t=360, \"api.narrow\";r=0;t={window_end}"
                )
            ),
        ]
    );
    // `r` is each descriptor's `limit_remaining`.
    let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, [1, u32::MAX, 0, 9, 0, 1]);
}

#[tokio::test]
async fn a_refused_request_describes_its_buckets_as_they_are_since_nothing_was_taken() {
    let (s, clock) = service(ResponseHeaders::Draft11).await;
    let first = decide(&s, vec![descriptor("narrow", "x")]).await;
    let window_end = first.statuses[0].duration_until_reset.unwrap().seconds;
    // A second on: the window ends a second sooner.
    clock.advance(Duration::from_secs(1));
    let r = decide(&s, vec![descriptor("wide", "x"), descriptor("narrow", "x")]).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        added(&r),
        [
            (
                "ratelimit-policy",
                "\"api.wide\";q=10;w=3600, \"api.narrow\";q=1;w=3600".to_owned()
            ),
            // `wide` full (nothing taken: t=0); `narrow` spent until its window ends.
            (
                "ratelimit",
                format!(
                    "\"api.wide\";r=10;t=0, \"api.narrow\";r=0;t={}",
                    window_end - 1
                )
            ),
        ]
    );
    // Envoy's `Retry-After` comes from the refusing status: the same wait.
    assert_eq!(
        r.statuses[1].duration_until_reset.unwrap().seconds,
        window_end - 1
    );
}

#[tokio::test]
async fn a_cost_no_burst_holds_lists_the_policy_alone() {
    let (s, _) = service(ResponseHeaders::Draft11).await;
    let mut costly = descriptor("wide", "y");
    costly.hits_addend = Some(UInt64Value { value: 11 });
    let r = decide(&s, vec![costly]).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        added(&r),
        [("ratelimit-policy", "\"api.wide\";q=10;w=3600".to_owned())]
    );
}

#[tokio::test]
async fn a_shadow_rule_is_described_as_it_is_spent_included_and_never_refuses() {
    let (s, _) = service(ResponseHeaders::Draft11).await;
    let watched = || vec![descriptor("watched", "x"), descriptor("wide", "w")];
    decide(&s, watched()).await;
    let r = decide(&s, watched()).await;
    assert_eq!(overall(&r), Code::Ok, "a shadow rule never refuses");
    assert_eq!(
        added(&r),
        [
            (
                "ratelimit-policy",
                "\"api.watched\";q=1;w=3600, \"api.wide\";q=10;w=3600".to_owned()
            ),
            // The shadow rule's bucket stays spent (its refusal took nothing); the request
            // was admitted, so `wide` was charged twice.
            (
                "ratelimit",
                "\"api.watched\";r=0;t=3600, \"api.wide\";r=8;t=720".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn no_quota_no_headers_and_a_repeated_name_is_numbered() {
    let (s, _) = service(ResponseHeaders::Draft11).await;
    // Unlimited, `requests_per_unit: 0` (refused, but no quota to describe), no rule, an
    // unknown domain.
    let r = decide(
        &s,
        vec![
            descriptor("free", "x"),
            descriptor("blocked", "x"),
            descriptor("open", "x"),
        ],
    )
    .await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
    let mut elsewhere = request(vec![descriptor("user", "alice")]);
    elsewhere.domain = "nowhere".into();
    let r = s.decide(&elsewhere).await.expect("an answer");
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
    // One rule, two buckets: told apart by position.
    let r = decide(
        &s,
        vec![descriptor("tenant", "a"), descriptor("tenant", "b")],
    )
    .await;
    assert_eq!(
        added(&r),
        [
            (
                "ratelimit-policy",
                "\"per-tenant\";q=5;w=60, \"per-tenant#2\";q=5;w=60".to_owned()
            ),
            (
                "ratelimit",
                "\"per-tenant\";r=4;t=12, \"per-tenant#2\";r=4;t=12".to_owned()
            ),
        ]
    );
}
