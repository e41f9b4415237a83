#![allow(clippy::unwrap_used)]

use std::sync::LazyLock;

use crate::limit::Limit;
use crate::limiter::inner::RateLimiter;
use crate::pipeline::verdict::RateLimited;
use crate::pipeline::{Call, KeyArg, check, check_all};
use crate::registry::LimitDeclaration;
use crate::resolvers::Global;
use crate::resolvers::Ip;
use crate::resolvers::Uri;

static LIMITER: LazyLock<RateLimiter> = LazyLock::new(RateLimiter::unenabled);
static LOGIN: LimitDeclaration =
    LimitDeclaration::new("login", Limit::per_minute(1), 1, "Uri", file!(), line!());
static TRIAL: LimitDeclaration = LimitDeclaration::new(
    "trial",
    Limit::per_minute(1).shadow(),
    1,
    "Uri",
    file!(),
    line!(),
);

/// Every header of the `spring` family.
pub(crate) const SPRING_HEADERS: [&str; 4] = [
    "x-ratelimit-remaining",
    "x-ratelimit-replenish-rate",
    "x-ratelimit-burst-capacity",
    "x-ratelimit-requested-tokens",
];

/// A handler's error type whose response is the rejection's own.
#[derive(Debug)]
pub(crate) struct Limited(pub(crate) RateLimited);

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Limited {
    fn into_response(self) -> axum::response::Response {
        self.0.into_response()
    }
}

#[cfg(feature = "actix-web")]
impl std::fmt::Display for Limited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(feature = "actix-web")]
impl actix_web::ResponseError for Limited {
    fn status_code(&self) -> actix_web::http::StatusCode {
        self.0.status_code()
    }
    fn error_response(&self) -> actix_web::HttpResponse {
        self.0.error_response()
    }
}

/// What a `#[rate_limit(replenish = 1, unit = "minute", key = Uri, shadow = true)]`
/// handler does.
pub(crate) async fn shadowed_call() -> Result<&'static str, Limited> {
    check(&TRIAL, &Uri, Call::NONE, Some(&LIMITER))
        .await
        .map_err(|r| Limited(*r))?;
    Ok("ok")
}

/// The headers of the second call to [`shadowed_call`]'s path: served, and described as
/// a spent limit, with nothing that asks the client to wait.
pub(crate) fn assert_shadowed(status: u16, headers: &http::HeaderMap) {
    assert_eq!(status, 200, "a shadow limit never refuses");
    let policy = headers.get("ratelimit").unwrap().to_str().unwrap();
    assert!(policy.contains(";r=0"), "{policy}");
    assert_eq!(headers.get("x-ratelimit-remaining").unwrap(), "0");
    assert!(headers.get("retry-after").is_none());
}

/// What a `#[rate_limit(replenish = 1, unit = "minute", key = Uri)]` handler does.
pub(crate) async fn limited_call() -> Result<&'static str, Limited> {
    check(&LOGIN, &Uri, Call::NONE, Some(&LIMITER))
        .await
        .map_err(|r| Limited(*r))?;
    Ok("ok")
}

/// What a handler under two stacked attributes does: 1 a minute per path (`decl`), and
/// `decl_daily`, 100 a day in all.
pub(crate) async fn limited_twice(
    decl: &'static LimitDeclaration,
    decl_daily: &'static LimitDeclaration,
) -> Result<&'static str, Limited> {
    check_all(
        &[
            (decl, &KeyArg::Resolver(&Uri), Call::NONE),
            (decl_daily, &KeyArg::Resolver(&Global), Call::NONE),
        ],
        Some(&LIMITER),
    )
    .await
    .map_err(|r| Limited(*r))?;
    Ok("ok")
}

/// The two limits of [`limited_twice`], named `name` and `name#2`.
pub(crate) fn twice(
    name: &'static str,
    daily: &'static str,
) -> (&'static LimitDeclaration, &'static LimitDeclaration) {
    let leak = |name, limit, key| -> &'static LimitDeclaration {
        Box::leak(Box::new(LimitDeclaration::new(
            name,
            limit,
            1,
            key,
            file!(),
            line!(),
        )))
    };
    (
        leak(name, Limit::per_minute(1), "Uri"),
        leak(daily, Limit::per_day(100), "Global"),
    )
}

/// What the responses to two calls of [`limited_twice`] (admitted, then refused by the
/// first limit) must say: every limit in the IETF headers, the tightest in Spring's.
pub(crate) fn assert_two_limits_described(
    name: &str,
    ok: &http::HeaderMap,
    refused: &http::HeaderMap,
    refused_body: &str,
) {
    assert_eq!(
        ok["ratelimit-policy"],
        format!("\"{name}\";q=1;w=60, \"{name}#2\";q=100;w=86400").as_str()
    );
    assert_eq!(
        ok["ratelimit"],
        format!("\"{name}\";r=0;t=60, \"{name}#2\";r=99;t=864").as_str()
    );
    assert_eq!(ok["x-ratelimit-burst-capacity"], "1");
    assert_eq!(
        refused["ratelimit"],
        format!("\"{name}\";r=0;t=60, \"{name}#2\";r=99;t=864").as_str(),
        "the refusal took nothing from the daily limit"
    );
    assert_eq!(refused["retry-after"], "60");
    assert_eq!(refused["x-ratelimit-burst-capacity"], "1");
    assert!(
        refused_body.contains(&format!("\"violated-policies\":[\"{name}\"]")),
        "{refused_body}"
    );
}

/// What a `#[rate_limit(replenish = 1, unit = "minute", key = Ip)]` handler does, under
/// the limit `decl`.
pub(crate) async fn limited_by_ip(
    decl: &'static LimitDeclaration,
) -> Result<&'static str, Limited> {
    check(decl, &Ip, Call::NONE, Some(&LIMITER))
        .await
        .map_err(|r| Limited(*r))?;
    Ok("ok")
}

/// A `#[rate_limit(replenish = 2, unit = "minute", key = Ip)]` limit named `name`.
pub(crate) fn twice_a_minute_by_ip(name: &'static str) -> &'static LimitDeclaration {
    Box::leak(Box::new(LimitDeclaration::new(
        name,
        Limit::per_minute(2),
        1,
        "Ip",
        file!(),
        line!(),
    )))
}

/// The status of `GET /ip` with `headers`, sent over a real HTTP/1.1 connection to
/// `server` from 127.0.0.1.
pub(crate) async fn status_over_http(
    server: std::net::SocketAddr,
    headers: &[(&str, String)],
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut request = format!("GET /ip HTTP/1.1\r\nhost: {server}\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(server).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    let status = response.split(' ').nth(1).unwrap_or_default();
    status
        .parse()
        .unwrap_or_else(|_| panic!("no status in {response:?}"))
}

/// Issue 22's bypass, against `xff`, a service that trusts 127.0.0.0/8 and limits `GET
/// /ip` to 2 a minute by `Ip` (the default header, `X-Forwarded-For`), and `forwarded`,
/// the same reading `Forwarded`.
pub(crate) async fn assert_a_client_cannot_pick_its_bucket(
    xff: std::net::SocketAddr,
    forwarded: std::net::SocketAddr,
) {
    let mut statuses = Vec::new();
    for i in 0..6 {
        let headers = [
            ("x-forwarded-for", "8.8.4.4".to_owned()),
            ("forwarded", format!("for=1.1.1.{i}")),
            ("x-real-ip", format!("2.2.2.{i}")),
        ];
        statuses.push(status_over_http(xff, &headers).await);
    }
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429, 429],
        "the client is the address the proxy appended to X-Forwarded-For; the client's \
         own Forwarded and X-Real-IP are not read"
    );

    let mut statuses = Vec::new();
    for i in 0..3 {
        let headers = [
            ("x-forwarded-for", format!("1.1.1.{i}")),
            ("forwarded", "for=unknown".to_owned()),
        ];
        statuses.push(status_over_http(forwarded, &headers).await);
    }
    assert_eq!(
        statuses,
        [200, 200, 429],
        "`for=unknown` from a trusted proxy is keyed by that proxy, never \"no key\""
    );
}

/// Runs `requests` with every event captured; returns the ERRORs that mention `name`.
pub(crate) fn errors_while<F: std::future::Future>(name: &str, requests: F) -> Vec<String> {
    let capture = crate::pipeline::test_support::Capture::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(capture.clone(), || runtime.block_on(requests));
    capture.errors_about(name)
}
