//! The HTTP endpoints envoyproxy/ratelimit serves beside gRPC (its `src/server/server_impl.go`
//! and `src/service_cmd/runner/runner.go`), on HTTP/1.1:
//!
//! - [`router`], on `HOST:PORT` (default `0.0.0.0:8080`):
//!   - `GET /healthcheck`: `200 OK` (body `OK`) while serving; `500` once shutting down
//!     ([`Health::fail`], which the binary calls on SIGTERM, before the servers drain), as the
//!     reference's health checker does. The reference also turns it `500` when its Redis
//!     client reports the connection lost (with `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`); this
//!     service has a failure policy for Redis failures instead and stays healthy.
//!   - `POST /json`: a `RateLimitRequest` in protobuf's JSON mapping (as the reference's
//!     `protojson`: `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value":
//!     "v"}]}]}`, fields in `lowerCamelCase` or as in the `.proto`, `hitsAddend` a number or a
//!     string), decided as over gRPC ([`Service::decide`]); the `RateLimitResponse` in the same
//!     mapping (`overallCode`, `statuses` with `code`, `currentLimit`, `limitRemaining`,
//!     `durationUntilReset` as `"12s"`; default values left out). `200` when the overall code
//!     is `OK`, `429` when `OVER_LIMIT`, `400` for a body that is not such a request (unknown
//!     fields included) or a request the service refuses to decide (`INVALID_ARGUMENT`,
//!     `UNIMPLEMENTED`), with the reason as text. One difference: the reference answers every
//!     error of the service `400`; here an `UNAVAILABLE` (Redis failing with no failure policy
//!     answering) is `503`, so that a client can tell its request from the service's state.
//! - [`debug_router`], on `DEBUG_HOST:DEBUG_PORT` (default `0.0.0.0:6070`):
//!   - `GET /`: the endpoints, one a line (`/rlconfig: print out ...`), as the reference;
//!   - `GET /rlconfig`: the configuration in force, one line per rule, as the reference's
//!     `Dump`: `domain.key_value: unit=MINUTE requests_per_unit=10, shadow_mode: false,
//!     quota_mode: false`, and for this library's extensions the limit as it is decided
//!     (`, limit: 10 per 30s, token bucket ...`).
//! - [`metrics_router`], on `PROMETHEUS_ADDR` (default `:9090`) at `PROMETHEUS_PATH` (default
//!   `/metrics`) when `USE_PROMETHEUS=true`, as the reference's Prometheus sink: the counters of
//!   [`Stats`] in the Prometheus text format.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{Map, Value};
use tokio::net::TcpListener;

use crate::config::{Action, Config};
use crate::service::Service;
use crate::stats::Stats;

/// The most bytes of a `/json` body read.
pub const MAX_JSON_BYTES: usize = 1024 * 1024;

/// Whether `/healthcheck` answers `200`: true from the start, false once [`Health::fail`]ed.
#[derive(Debug)]
pub struct Health {
    ok: AtomicBool,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            ok: AtomicBool::new(true),
        }
    }
}

impl Health {
    /// Healthy.
    pub fn new() -> Health {
        Health::default()
    }

    /// `/healthcheck` answers `500` from now on (the service is shutting down).
    pub fn fail(&self) {
        self.ok.store(false, Ordering::SeqCst);
    }

    /// Whether `/healthcheck` answers `200`.
    pub fn is_ok(&self) -> bool {
        self.ok.load(Ordering::SeqCst)
    }
}

/// `/healthcheck` and `/json`.
pub fn router(service: Arc<Service>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck).with_state(health))
        .route("/json", post(json).with_state(service))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_JSON_BYTES))
}

/// `/` and `/rlconfig`.
pub fn debug_router(service: Arc<Service>) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async {
                "/rlconfig: print out the currently loaded configuration for debugging\n"
            }),
        )
        .route("/rlconfig", get(rlconfig).with_state(service))
}

/// The counters of `stats` at `path` (`PROMETHEUS_PATH`).
pub fn metrics_router(stats: Arc<Stats>, path: &str) -> Router {
    Router::new().route(path, get(metrics).with_state(stats))
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish.
///
/// # Errors
/// The listener's.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn healthcheck(State(health): State<Arc<Health>>) -> Response {
    if health.is_ok() {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

async fn json(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let request = match request_from_json(&body) {
        Ok(request) => request,
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    match service.decide(&request).await {
        Ok(response) => {
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => StatusCode::OK,
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                response_to_json(&response).to_string(),
            )
                .into_response()
        }
        Err(status) => {
            let code = if status.code() == tonic::Code::Unavailable {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::BAD_REQUEST
            };
            (code, format!("{}\n", status.message())).into_response()
        }
    }
}

async fn rlconfig(State(service): State<Arc<Service>>) -> String {
    dump(&service.config())
}

async fn metrics(State(stats): State<Arc<Stats>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        stats.render(),
    )
        .into_response()
}

/// The configuration, one line per rule, as the reference's `Dump` writes it.
pub fn dump(config: &Config) -> String {
    let mut out = String::new();
    for domain in config.domains() {
        for rule in config.rules(domain) {
            let unit = rule
                .unit()
                .map_or_else(|| "UNKNOWN".to_owned(), |u| u.as_str().to_ascii_uppercase());
            let _ = write!(
                out,
                "{}: unit={unit} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                rule.stats_key(),
                rule.requests_per_unit(),
                rule.shadow_mode(),
                rule.quota_mode()
            );
            match rule.action() {
                Action::Unlimited => out.push_str(", unlimited: true"),
                Action::Limit(limit) if rule.unit().is_none() || rule.shared().is_some() => {
                    let _ = write!(out, ", limit: {limit}");
                }
                _ => {}
            }
            if let Some(shared) = rule.shared() {
                let _ = write!(out, ", shared: {shared}");
            }
            out.push('\n');
        }
    }
    out
}

/// A `RateLimitRequest` from protobuf's JSON mapping.
///
/// # Errors
/// What is not such a request: not JSON, a field of the wrong type, an unknown field.
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let object = as_object(&value, "the request")?;
    let mut request = RateLimitRequest::default();
    for (field, value) in object {
        match field.as_str() {
            "domain" => request.domain = as_string(value, "domain")?,
            "descriptors" => {
                for (i, d) in as_array(value, "descriptors")?.iter().enumerate() {
                    request.descriptors.push(descriptor_from_json(d, i)?);
                }
            }
            "hitsAddend" | "hits_addend" => {
                let n = as_u64(value, "hitsAddend")?;
                request.hits_addend =
                    u32::try_from(n).map_err(|_| "hitsAddend: above 2^32 - 1".to_owned())?;
            }
            other => return Err(format!("unknown field `{other}` in the request")),
        }
    }
    Ok(request)
}

fn descriptor_from_json(value: &Value, i: usize) -> Result<RateLimitDescriptor, String> {
    let at = format!("descriptors[{i}]");
    let mut descriptor = RateLimitDescriptor::default();
    for (field, value) in as_object(value, &at)? {
        match field.as_str() {
            "entries" => {
                for (j, e) in as_array(value, &format!("{at}.entries"))?
                    .iter()
                    .enumerate()
                {
                    let at = format!("{at}.entries[{j}]");
                    let mut entry = Entry::default();
                    for (field, value) in as_object(e, &at)? {
                        match field.as_str() {
                            "key" => entry.key = as_string(value, &format!("{at}.key"))?,
                            "value" => entry.value = as_string(value, &format!("{at}.value"))?,
                            other => return Err(format!("unknown field `{other}` in {at}")),
                        }
                    }
                    descriptor.entries.push(entry);
                }
            }
            "hitsAddend" | "hits_addend" => {
                if !value.is_null() {
                    descriptor.hits_addend = Some(UInt64Value {
                        value: as_u64(value, &format!("{at}.hitsAddend"))?,
                    });
                }
            }
            "isNegativeHits" | "is_negative_hits" => {
                descriptor.is_negative_hits = value
                    .as_bool()
                    .ok_or_else(|| format!("{at}.isNegativeHits: expected true or false"))?;
            }
            "limit" => {
                if !value.is_null() {
                    descriptor.limit = Some(limit_from_json(value, &format!("{at}.limit"))?);
                }
            }
            other => return Err(format!("unknown field `{other}` in {at}")),
        }
    }
    Ok(descriptor)
}

/// A descriptor's `limit` override: `requestsPerUnit` (a number or a decimal string) and
/// `unit`, by its name (`"MINUTE"`, as protojson writes enums) or its number.
fn limit_from_json(value: &Value, at: &str) -> Result<RateLimitOverride, String> {
    let mut limit = RateLimitOverride::default();
    for (field, value) in as_object(value, at)? {
        match field.as_str() {
            "requestsPerUnit" | "requests_per_unit" => {
                let n = as_u64(value, &format!("{at}.requestsPerUnit"))?;
                limit.requests_per_unit = u32::try_from(n)
                    .map_err(|_| format!("{at}.requestsPerUnit: above 2^32 - 1"))?;
            }
            "unit" => {
                limit.unit = match value {
                    // The names of the protocol's enum (the response's `Unit`, whose numbers
                    // `envoy.type.v3.RateLimitUnit` shares, `WEEK` included).
                    Value::String(name) => Unit::from_str_name(name)
                        .ok_or_else(|| format!("{at}.unit: `{name}` is no unit"))?
                        as i32,
                    _ => i32::try_from(as_u64(value, &format!("{at}.unit"))?)
                        .map_err(|_| format!("{at}.unit: no such unit"))?,
                };
            }
            other => return Err(format!("unknown field `{other}` in {at}")),
        }
    }
    Ok(limit)
}

fn as_object<'v>(value: &'v Value, at: &str) -> Result<&'v Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{at}: expected an object"))
}

fn as_array<'v>(value: &'v Value, at: &str) -> Result<&'v Vec<Value>, String> {
    match value {
        Value::Null => Ok(const { &Vec::new() }),
        Value::Array(a) => Ok(a),
        _ => Err(format!("{at}: expected an array")),
    }
}

fn as_string(value: &Value, at: &str) -> Result<String, String> {
    match value {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        _ => Err(format!("{at}: expected a string")),
    }
}

/// A protobuf JSON integer: a number or a decimal string.
fn as_u64(value: &Value, at: &str) -> Result<u64, String> {
    match value {
        Value::Null => Ok(0),
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{at}: expected an unsigned integer")),
        Value::String(s) => s
            .parse()
            .map_err(|_| format!("{at}: expected an unsigned integer")),
        _ => Err(format!("{at}: expected an unsigned integer")),
    }
}

/// A `RateLimitResponse` in protobuf's JSON mapping, default values left out.
pub fn response_to_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    let code_name = |code: i32| Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name());
    if response.overall_code != 0 {
        out.insert(
            "overallCode".into(),
            code_name(response.overall_code).into(),
        );
    }
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|s| {
            let mut status = Map::new();
            if s.code != 0 {
                status.insert("code".into(), code_name(s.code).into());
            }
            if let Some(limit) = &s.current_limit {
                let mut l = Map::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), limit.name.clone().into());
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
                }
                if limit.unit != 0 {
                    let unit = Unit::try_from(limit.unit).map_or("UNKNOWN", |u| u.as_str_name());
                    l.insert("unit".into(), unit.into());
                }
                status.insert("currentLimit".into(), l.into());
            }
            if s.limit_remaining != 0 {
                status.insert("limitRemaining".into(), s.limit_remaining.into());
            }
            if let Some(d) = &s.duration_until_reset {
                status.insert(
                    "durationUntilReset".into(),
                    duration(d.seconds, d.nanos).into(),
                );
            }
            status.into()
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), statuses.into());
    }
    let headers = |list: &[envoy_types::pb::envoy::config::core::v3::HeaderValue]| -> Vec<Value> {
        list.iter()
            .map(|h| serde_json::json!({ "key": h.key, "value": h.value }))
            .collect()
    };
    if !response.response_headers_to_add.is_empty() {
        out.insert(
            "responseHeadersToAdd".into(),
            headers(&response.response_headers_to_add).into(),
        );
    }
    if !response.request_headers_to_add.is_empty() {
        out.insert(
            "requestHeadersToAdd".into(),
            headers(&response.request_headers_to_add).into(),
        );
    }
    out.into()
}

/// A `google.protobuf.Duration` as JSON writes it: `"12s"`, `"1.500s"`.
fn duration(seconds: i64, nanos: i32) -> String {
    if nanos == 0 {
        format!("{seconds}s")
    } else {
        // As protojson: 3, 6 or 9 digits.
        let n = nanos.unsigned_abs();
        let frac = if n.is_multiple_of(1_000_000) {
            format!("{:03}", n / 1_000_000)
        } else if n.is_multiple_of(1000) {
            format!("{:06}", n / 1000)
        } else {
            format!("{n:09}")
        };
        format!("{seconds}.{frac}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_references_example_reads() {
        let r = request_from_json(
            br#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "perday"}]}]}"#,
        )
        .expect("a request");
        assert_eq!(r.domain, "dummy");
        assert_eq!(r.descriptors[0].entries[0].key, "perday");
        assert_eq!(r.descriptors[0].entries[0].value, "");
        let r = request_from_json(
            br#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[],"hitsAddend":"0"}]}"#,
        )
        .expect("a request");
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].hits_addend, Some(UInt64Value { value: 0 }));
        assert!(request_from_json(br#"{"domain":"d","extra":1}"#).is_err());
        assert!(request_from_json(br#"{"domain":1}"#).is_err());
        assert!(request_from_json(b"not json").is_err());
    }

    #[test]
    fn a_limit_override_reads_with_its_unit_by_name_or_number() {
        let r = request_from_json(
            br#"{"domain":"d","descriptors":[
                {"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"}},
                {"entries":[],"limit":{"requests_per_unit":"7","unit":7}}]}"#,
        )
        .expect("a request");
        assert_eq!(
            r.descriptors[0].limit,
            Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: 2
            })
        );
        assert_eq!(
            r.descriptors[1].limit,
            Some(RateLimitOverride {
                requests_per_unit: 7,
                unit: 7
            })
        );
        for bad in [
            r#"{"domain":"d","descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
            r#"{"domain":"d","descriptors":[{"limit":{"requestsPerUnit":4294967296}}]}"#,
            r#"{"domain":"d","descriptors":[{"limit":{"per":1}}]}"#,
            r#"{"domain":"d","descriptors":[{"limit":3}]}"#,
        ] {
            assert!(request_from_json(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_read_as_protobuf_writes_them() {
        assert_eq!(duration(12, 0), "12s");
        assert_eq!(duration(1, 500_000_000), "1.500s");
        assert_eq!(duration(0, 1000), "0.000001s");
    }
}
