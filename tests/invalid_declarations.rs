//! Declarations that are wrong together, on a limiter of the program's own and without
//! `enable_redis_rate_limit!` (which refuses them: `tests/enable_shared.rs`): a `shared` use of
//! a name that nobody declares (dangling), and a name declared by two functions (duplicated).
//! `validate_declared_limits()` reports both with the place of each declaration; their calls
//! are refused, take nothing from any bucket and are logged once per declaration; the valid
//! declarations beside them are decided as usual.
//!
//! The wrong declarations live in this test binary alone (each binary registers its own), so
//! that no other test's declarations are wrong.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;

use redis_ratelimit::{
    Error, Global, Limit, RateLimited, RateLimiter, Source, rate_limit, validate_declared_limits,
};
use testkit::logs;

/// The limiter of this program's own: nothing here calls `enable_redis_rate_limit!`.
static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

/// Valid: declared once, 100 a day.
#[rate_limit(replenish = 100, unit = "day", key = Global, name = "search", limiter = LIMITER)]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

/// Valid: a use of `search`.
#[rate_limit(shared = "search", key = Global, limiter = LIMITER)]
async fn suggest() -> Result<(), RateLimited> {
    Ok(())
}

/// Dangling: no function declares `nobody`.
#[rate_limit(shared = "nobody", key = Global, limiter = LIMITER)]
async fn dangling() -> Result<(), RateLimited> {
    Ok(())
}

/// A valid limit stacked with a dangling use: all or nothing, so the call is refused and
/// `report` takes nothing.
#[rate_limit(replenish = 100, unit = "day", key = Global, name = "report", limiter = LIMITER)]
#[rate_limit(shared = "nobody", key = Global)]
async fn report() -> Result<(), RateLimited> {
    Ok(())
}

/// Duplicated: `twice`, 1 a day, declared here and by `twice_b`. One bucket between them
/// would admit the first call of either and refuse the other's.
#[rate_limit(replenish = 1, unit = "day", key = Global, name = "twice", limiter = LIMITER)]
async fn twice_a() -> Result<(), RateLimited> {
    Ok(())
}

/// Duplicated: see `twice_a`.
#[rate_limit(replenish = 1, unit = "day", key = Global, name = "twice", limiter = LIMITER)]
async fn twice_b() -> Result<(), RateLimited> {
    Ok(())
}

/// `tests/invalid_declarations.rs:<line>` of each `#[rate_limit(` attribute of this file that
/// names `"name"`, read from the source itself.
fn places_of(name: &str) -> Vec<String> {
    let quoted = format!("\"{name}\"");
    include_str!("invalid_declarations.rs")
        .lines()
        .enumerate()
        .filter(|(_, line)| line.starts_with("#[rate_limit(") && line.contains(&quoted))
        .map(|(i, _)| format!("{}:{}", file!(), i + 1))
        .collect()
}

async fn limiter() -> &'static RateLimiter {
    let built = RateLimiter::builder().memory().build().await.unwrap();
    let _ = LIMITER.set(built);
    LIMITER.get().unwrap()
}

/// The public validation finds both mistakes, and names every declaration of each by its
/// place; the valid names are not reported.
#[test]
fn validation_reports_every_dangling_and_duplicated_name_with_its_places() {
    let Err(Error::Config(message)) = validate_declared_limits() else {
        panic!("not a config error: {:?}", validate_declared_limits());
    };
    assert!(message.starts_with("2 mistakes"), "{message}");
    assert!(
        message.contains("`shared = \"nobody\"`") && message.contains("names no declared limit"),
        "{message}"
    );
    assert!(
        message.contains("the limit `twice` is declared 2 times"),
        "{message}"
    );
    let (nobody, twice) = (places_of("nobody"), places_of("twice"));
    assert_eq!((nobody.len(), twice.len()), (2, 2));
    for place in nobody.iter().chain(&twice) {
        assert!(message.contains(place.as_str()), "{place} in {message}");
    }
    for valid in places_of("search").iter().chain(&places_of("report")) {
        assert!(!message.contains(valid.as_str()), "{valid} in {message}");
    }
}

/// A call of a dangling or duplicated declaration is refused (failing closed, by its name),
/// never decided under an invented limit or in a bucket it would share, and takes nothing;
/// each such declaration logs one error, however often it is called; the valid declarations
/// are admitted.
#[tokio::test]
async fn calls_of_wrong_declarations_are_refused_and_logged_once() {
    logs::install();
    let limiter = limiter().await;

    for _ in 0..3 {
        refused_by(dangling().await, "nobody");
        refused_by(twice_a().await, "twice");
        refused_by(twice_b().await, "twice");
        refused_by(report().await, "nobody");
    }
    // Nothing was decided in a bucket: `twice` would have admitted one call a day, `nobody`
    // one a second, and `report` is whole.
    let peek = |name, limit| async move {
        limiter
            .peek_named(name, "global", &limit)
            .await
            .unwrap()
            .remaining
    };
    assert_eq!(peek("twice", Limit::per_day(1)).await, 1);
    assert_eq!(peek("nobody", Limit::per_second(1)).await, 1);
    assert_eq!(peek("report", Limit::per_day(100)).await, 100);

    // The valid declarations beside them are decided as usual, in their one bucket.
    search().await.unwrap();
    suggest().await.unwrap();
    assert_eq!(peek("search", Limit::per_day(100)).await, 98);

    // One error per wrong declaration, naming the mistake and the declaration's place.
    for name in ["nobody", "twice"] {
        let lines = logs::of_limit(name);
        assert_eq!(lines.len(), 2, "{name}: {lines:#?}");
        for line in &lines {
            assert_eq!(line.level, logs::Level::ERROR, "{line:?}");
        }
        for place in places_of(name) {
            let said = format!("`{name}` ({place}) refuses every call");
            assert!(
                lines.iter().any(|l| l.message.contains(&said)),
                "{said}: {lines:#?}"
            );
        }
    }
    assert!(logs::of_limit("search").is_empty());
    assert!(logs::of_limit("report").is_empty());
}

/// Asserts that `outcome` is a refusal by the limit `name`, failing closed.
fn refused_by(outcome: Result<(), RateLimited>, name: &str) {
    let refused = outcome.unwrap_err();
    assert_eq!(refused.name(), Some(name), "{refused}");
    assert!(!refused.decision().allowed, "{refused}");
    assert_eq!(refused.decision().source, Source::FailClosed, "{refused}");
}
