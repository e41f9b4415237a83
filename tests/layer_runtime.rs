//! A layer's limit built at run time from the service's own configuration
//! (`LayerLimit::new`), on the axum layer, in memory and on a real `redis-server`: it decides
//! requests; `declared_limits()` lists it at the line that built it; an override of its name
//! applies whether it was built before enable or after, and a reload covers it; a router
//! rebuilt a thousand times leaves one declaration; a name that clashes is refused with both
//! places; and `on_rejection` renders the layer's own refusals, with the rate-limit headers on
//! them. Each test runs in a process of its own (nextest) and enables the global limiter on
//! the store it tests. The actix-web middleware is in `tests/layer_runtime_actix.rs`.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use redis_ratelimit::http::LayerLimit;
use redis_ratelimit::{
    Error, Header, Ip, Limit, LimitDeclaration, RateLimitLayer, RateLimited, Unit, declared_limits,
    enable_redis_rate_limit, layer_limit, rate_limit, reload_overrides,
};
use testkit::RedisServer;
use tower::ServiceExt as _;

mod support;

/// The service's own configuration: its route groups and their quotas, as its config file
/// holds them (read at run time: the program is not rebuilt to change them).
const GROUPS: &str = "
[api]
replenish = 2
unit = day

[partners]
replenish = 600
unit = minute
";

/// One group of [`GROUPS`].
#[derive(Debug)]
struct Group {
    name: String,
    replenish: u32,
    unit: Unit,
}

/// The groups of a configuration written as [`GROUPS`] is.
fn groups(text: &str) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            out.push(Group {
                name: name.to_owned(),
                replenish: 1,
                unit: Unit::Second,
            });
            continue;
        }
        let (field, value) = line.split_once('=').unwrap();
        let group = out.last_mut().unwrap();
        match field.trim() {
            "replenish" => group.replenish = value.trim().parse().unwrap(),
            "unit" => group.unit = value.trim().parse().unwrap(),
            other => panic!("unknown field `{other}`"),
        }
    }
    out
}

/// The layer's limit of `group`, keyed by the client's header, and the line that built it.
fn build(group: &Group) -> (Result<LayerLimit, Error>, u32) {
    let limit = Limit::try_new(group.replenish, group.replenish, group.unit).unwrap();
    let line = line!() + 1;
    let built = LayerLimit::new(&group.name, limit, Header("x-client"));
    (built, line)
}

/// A route without limits of its own.
async fn work() -> &'static str {
    "done"
}

/// A route with a limit of its own: one request a day per client.
#[rate_limit(replenish = 1, unit = "day", key = Header("x-client"), name = "own_handler")]
async fn own() -> Result<&'static str, RateLimited> {
    Ok("own")
}

fn router(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/work", get(work))
        .route("/own", get(own))
        .layer(layer)
}

/// A router whose layer's limit is declared in the source: its name is not free at run time.
fn source_router() -> Router {
    router(RateLimitLayer::new().limit(layer_limit!(
        name = "from_source",
        replenish = 5,
        unit = "day",
        key = Header("x-client")
    )))
}

async fn enable(server: Option<&RedisServer>, config: &Path) -> Result<(), Error> {
    let url = server.map_or_else(|| "memory://".to_owned(), RedisServer::url);
    enable_redis_rate_limit!(url = url, prefix = "layer-runtime", config = config)
        .await
        .map(drop)
}

/// `path` requested by `client` (none: no `x-client` header).
async fn get_as(app: &Router, path: &str, client: Option<&str>) -> Response {
    let mut request = Request::get(path);
    if let Some(client) = client {
        request = request.header("x-client", client);
    }
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

/// How many of `n` requests of `path` by `client` were served.
async fn served(app: &Router, path: &str, client: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if get_as(app, path, Some(client)).await.status() == StatusCode::OK {
            ok += 1;
        }
    }
    ok
}

fn header(response: &Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn body(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn declared(name: &str) -> Vec<&'static LimitDeclaration> {
    declared_limits()
        .into_iter()
        .filter(|d| d.name() == name)
        .collect()
}

async fn a_limit_built_from_configuration_decides_requests(server: Option<RedisServer>) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, "").unwrap();
    enable(server.as_ref(), &config).await.unwrap();

    let groups = groups(GROUPS);
    let api = groups.iter().find(|g| g.name == "api").unwrap();
    let (limit, line) = build(api);
    let app = router(RateLimitLayer::new().limit(limit.unwrap()));

    // Two requests a day per client, the third refused with the limit's headers.
    assert_eq!(served(&app, "/work", "a", 2).await, 2);
    let refused = get_as(&app, "/work", Some("a")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        header(&refused, "ratelimit").contains("\"api\""),
        "{refused:?}"
    );
    assert_eq!(
        served(&app, "/work", "b", 1).await,
        1,
        "a bucket per client"
    );

    // Listed as a declared limit, at the line that built it.
    let [decl] = declared("api")[..] else {
        panic!("{:?}", declared("api"));
    };
    assert!(decl.is_built_at_run_time());
    assert!(decl.file().ends_with("layer_runtime.rs"), "{decl:?}");
    assert_eq!((decl.line(), decl.key()), (line, "Header"));
    assert_eq!(decl.effective().limit, Limit::per_day(2));
    assert!(
        !declared("own_handler")[0].is_built_at_run_time(),
        "a macro's is not"
    );

    // A router rebuilt from the same configuration a thousand times (on every reload, say):
    // one declaration, whose buckets the rebuilt router shares.
    for _ in 0..1000 {
        let again = build(api).0.unwrap();
        assert!(std::ptr::eq(again.declaration(), decl));
    }
    assert_eq!(declared("api").len(), 1);
    let rebuilt = router(RateLimitLayer::new().limit(build(api).0.unwrap()));
    assert_eq!(
        get_as(&rebuilt, "/work", Some("a")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// `[limits."<name>"]` at `replenish` (and as much burst) a day, for each of `limits`.
fn overrides(limits: &[(&str, u32)]) -> String {
    limits
        .iter()
        .map(|(name, n)| {
            format!("[limits.\"{name}\"]\nreplenish = {n}\nburst = {n}\nunit = \"day\"\n")
        })
        .collect()
}

/// One request a day per client; built where this is called (the error names that line).
#[track_caller]
fn per_day_by_client(name: &str) -> Result<LayerLimit, Error> {
    LayerLimit::new(name, Limit::per_day(1), Header("x-client"))
}

async fn an_override_applies_to_a_limit_built_before_or_after_enable(server: Option<RedisServer>) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");

    // Built before enable: enable applies its override with the rest.
    let early = per_day_by_client("early").unwrap();
    assert_eq!(early.declaration().effective().limit, Limit::per_day(1));
    // An override of a name not built yet is refused as a typo would be, saying what to do.
    std::fs::write(&config, overrides(&[("early", 3), ("late", 3)])).unwrap();
    let e = enable(server.as_ref(), &config)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`[limits.\"late\"]` names no declared limit")
            && e.contains("build it before `enable_redis_rate_limit!`"),
        "{e}"
    );
    std::fs::write(&config, overrides(&[("early", 3)])).unwrap();
    enable(server.as_ref(), &config).await.unwrap();
    assert_eq!(early.declaration().effective().limit, Limit::per_day(3));
    let app = router(RateLimitLayer::new().limit(early));
    assert_eq!(served(&app, "/work", "a", 5).await, 3);

    // Built after enable: the override in force for it applies at once.
    std::fs::write(&config, overrides(&[("early", 3), ("late", 3)])).unwrap();
    let late = per_day_by_client("late").unwrap();
    assert_eq!(late.declaration().effective().limit, Limit::per_day(3));
    let app = router(RateLimitLayer::new().limit(late));
    assert_eq!(served(&app, "/work", "a", 5).await, 3);

    // A reload covers it: a burst of 5, of which 3 are taken.
    std::fs::write(&config, overrides(&[("early", 3), ("late", 5)])).unwrap();
    reload_overrides().await.unwrap();
    assert_eq!(declared("late")[0].effective().limit, Limit::per_day(5));
    assert_eq!(served(&app, "/work", "a", 5).await, 2);

    // An invalid override of a limit built after enable fails its building, and lists
    // nothing; once the file is right, it builds.
    let broken = format!(
        "{}[limits.broken]\ncost = 9\n",
        overrides(&[("early", 3), ("late", 5)])
    );
    std::fs::write(&config, broken).unwrap();
    let e = per_day_by_client("broken").unwrap_err().to_string();
    assert!(
        e.contains("limit `broken`") && e.contains("field `cost`"),
        "{e}"
    );
    assert!(declared("broken").is_empty());
    std::fs::write(
        &config,
        overrides(&[("early", 3), ("late", 5), ("broken", 2)]),
    )
    .unwrap();
    let fixed = per_day_by_client("broken").unwrap();
    assert_eq!(fixed.declaration().effective().limit, Limit::per_day(2));
}

async fn the_layers_own_refusals_are_rendered_by_on_rejection(server: Option<RedisServer>) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, "").unwrap();
    enable(server.as_ref(), &config).await.unwrap();

    let layer = RateLimitLayer::new()
        .limit(per_day_by_client("custom").unwrap())
        .on_rejection(|rejected| {
            let body = format!("refused: {}", rejected.status().as_u16());
            // Its own `Retry-After` is replaced by the one the limit renders.
            let headers = [("retry-after", "0"), ("x-refused-by", "config")];
            (rejected.status(), headers, body).into_response()
        });
    let app = router(layer);

    assert_eq!(served(&app, "/work", "a", 1).await, 1);
    let refused = get_as(&app, "/work", Some("a")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "x-refused-by"), "config");
    assert_eq!(
        header(&refused, "content-type"),
        "text/plain; charset=utf-8"
    );
    assert!(
        header(&refused, "ratelimit").contains("\"custom\""),
        "{refused:?}"
    );
    assert!(
        header(&refused, "ratelimit-policy").contains("\"custom\";q=1"),
        "{refused:?}"
    );
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    let retry_after: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!(retry_after > 0, "{refused:?}");
    assert_eq!(body(refused).await, "refused: 429");

    // A request without a key: the 403 is the service's too.
    let refused = get_as(&app, "/work", None).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&refused, "x-refused-by"), "config");
    assert_eq!(body(refused).await, "refused: 403");

    // A refusal decided in a handler's check is its error type's, the layer's limit included
    // once the route is learned: here `RateLimited`'s own problem body.
    assert_eq!(served(&app, "/own", "b", 1).await, 1);
    let refused = get_as(&app, "/own", Some("b")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "content-type"), "application/problem+json");
    assert!(header(&refused, "x-refused-by").is_empty());
}

/// A name built at run time may not be one the source declares, nor one built with another
/// limit or key; nor blank, nor a limit that waits. Each error names the places involved.
#[test]
fn a_name_that_clashes_is_refused_with_both_places() {
    let _ = source_router();
    let place = |d: &LimitDeclaration| format!("layer_runtime.rs:{}", d.line());
    let here = |line: u32| format!("layer_runtime.rs:{line}");
    let refused = |built: Result<LayerLimit, Error>| match built {
        Err(Error::Config(message)) => message,
        other => panic!("not refused: {other:?}"),
    };

    for name in ["from_source", "own_handler"] {
        let source = declared(name)[0];
        let (e, line) = (refused(per_day_by_client(name)), line!());
        assert!(
            e.contains(&place(source)) && e.contains(&here(line)),
            "{name}: {e}"
        );
        assert!(e.contains("is declared in the source already"), "{e}");
        assert!(!declared(name)[0].is_built_at_run_time());
    }

    let first = per_day_by_client("dup").unwrap();
    let line = line!() + 1;
    let e = refused(LayerLimit::new(
        "dup",
        Limit::per_day(2),
        Header("x-client"),
    ));
    assert!(
        e.contains(&place(first.declaration())) && e.contains(&here(line)),
        "{e}"
    );
    assert!(e.contains("1 per day") && e.contains("2 per day"), "{e}");
    let e = refused(LayerLimit::new("dup", Limit::per_day(1), Ip));
    assert!(
        e.contains("keyed by Ip") && e.contains("keyed by Header"),
        "{e}"
    );
    assert_eq!(declared("dup").len(), 1);

    for blank in ["", "  "] {
        let e = refused(per_day_by_client(blank));
        assert!(e.contains("a limit's name must not be empty"), "{e}");
    }
    let waits = Limit::per_day(1).wait(Duration::from_secs(1));
    let e = refused(LayerLimit::new("waits", waits, Ip));
    assert!(e.contains("refuses at once"), "{e}");
    assert!(declared("waits").is_empty());
}

support::on_memory_and_redis!(
    a_limit_built_from_configuration_decides_requests,
    an_override_applies_to_a_limit_built_before_or_after_enable,
    the_layers_own_refusals_are_rendered_by_on_rejection
);
