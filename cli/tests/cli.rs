//! The `ratelimit` binary against a real `redis-server` each test starts: buckets made by the
//! library itself, read, reset, listed and watched by the CLI, compared with what the library
//! says.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ratelimit_core::{Algorithm, Decision, Limit, RateLimiter, Refill, Source};
use serde_json::Value;
use testkit::RedisServer;

/// The binary, with nothing from the environment that would change what it does.
fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratelimit"))
        .args(args)
        .env_remove("REDIS_URL")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// `inspect` of `key`'s bucket under `api::orders`, 3 per minute with a burst of 5.
fn inspect_orders(key: &str) -> [&str; 11] {
    [
        "inspect",
        "--name",
        "api::orders",
        "--key",
        key,
        "--replenish",
        "3",
        "--burst",
        "5",
        "--unit",
        "minute",
    ]
}

/// Runs the CLI with `--url` and `--prefix t`, and returns its JSON document (exit 0).
fn json(server: &RedisServer, args: &[&str]) -> Value {
    let o = run(server, args, true);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn run(server: &RedisServer, args: &[&str], as_json: bool) -> Output {
    let url = server.url();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--url", &url, "--prefix", "t"]);
    if as_json {
        all.push("--json");
    }
    cli(&all)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn limiter(server: &RedisServer) -> RateLimiter {
    RateLimiter::builder()
        .redis(server.url())
        .prefix("t")
        .build()
        .await
        .unwrap()
}

/// The Redis clock, in microseconds.
fn server_time(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.blocking_connection())
        .unwrap();
    secs * 1_000_000 + micros
}

/// The limits of the buckets [`fill`] makes.
const ORDERS: Limit = Limit::per_minute(3).burst(5);
const SOLO: Limit = Limit::per_hour(7);
/// A key with everything the naming escapes or splits on.
const WEIRD: &str = "we:ird{key}%x";

/// What the library answered for the buckets [`fill`] made, and the server time around the
/// refusal of the drained one.
struct Filled {
    orders: Decision,
    drained: Decision,
    drained_between: (u64, u64),
    solo: Decision,
    windows: Vec<(&'static str, Limit, Decision)>,
}

/// Makes buckets through the library: named, unnamed, drained, one per algorithm.
async fn fill(server: &RedisServer, limiter: &RateLimiter) -> Filled {
    let mut orders = None;
    for _ in 0..3 {
        orders = Some(
            limiter
                .check_named("api::orders", "user:42", &ORDERS, 1)
                .await
                .unwrap(),
        );
    }
    for _ in 0..5 {
        assert!(
            limiter
                .check_named("api::orders", WEIRD, &ORDERS, 1)
                .await
                .unwrap()
                .allowed
        );
    }
    let before = server_time(server);
    let drained = limiter
        .check_named("api::orders", WEIRD, &ORDERS, 1)
        .await
        .unwrap();
    let after = server_time(server);
    assert!(!drained.allowed);
    let solo = limiter.check("solo", &SOLO).await.unwrap();
    let mut windows = Vec::new();
    for (name, limit) in [
        ("win", Limit::per_day(5).algorithm(Algorithm::FixedWindow)),
        (
            "slide",
            Limit::per_day(5).algorithm(Algorithm::SlidingWindow),
        ),
        ("log", Limit::per_day(5).algorithm(Algorithm::SlidingLog)),
        ("interval", Limit::per_day(5).refill(Refill::Interval)),
    ] {
        limiter.check_named(name, "k", &limit, 1).await.unwrap();
        let d = limiter.check_named(name, "k", &limit, 1).await.unwrap();
        windows.push((name, limit, d));
    }
    Filled {
        orders: orders.unwrap(),
        drained,
        drained_between: (before, after),
        solo,
        windows,
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn inspect_reads_each_bucket_as_the_library_left_it() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    let filled = rt.block_on(fill(&server, &limiter));

    // A named token bucket, without the limit: what Redis holds.
    let doc = json(
        &server,
        &["inspect", "--name", "api::orders", "--key", "user:42"],
    );
    assert_eq!(doc["bucket"], "t:{11:api::orders:user:42}");
    assert_eq!(
        (doc["name"].as_str(), doc["key"].as_str()),
        (Some("api::orders"), Some("user:42"))
    );
    assert_eq!(doc["exists"], true);
    assert_eq!(doc["algorithm"], "token_bucket");
    assert_eq!(doc["state"]["kind"], "token_bucket");
    assert_eq!(doc["state"]["tokens_owed"], 3);
    assert_eq!(doc["state"]["token_interval_us"], 20_000_000.0);
    // Three tokens at one per 20 s: full in at most a minute.
    let full_in = u(&doc["full_in_ms"]);
    assert!((50_000..=60_000).contains(&full_in), "{full_in}");
    assert!(doc["decision"].is_null());

    // With the limit: what a call would be told, by the library's arithmetic.
    let doc = json(&server, &inspect_orders("user:42"));
    let d = &doc["decision"];
    assert_eq!(d["allowed"], true);
    // As `peek` answers: the tokens held now, what the last call left (exactly that many
    // calls would pass).
    assert_eq!(u(&d["remaining"]), filled.orders.remaining);
    assert_eq!(doc["algorithm_inferred"], false);

    // The drained bucket, by a key with `:`, `{`, `}` and `%`: refused, and its retry_after is
    // the library's, less the time that passed since the library answered.
    let doc = json(&server, &inspect_orders(WEIRD));
    assert_eq!(doc["bucket"], "t:{11:api::orders:we:ird%7Bkey%7D%25x}");
    let d = &doc["decision"];
    assert_eq!(d["allowed"], false);
    assert_eq!(u(&d["remaining"]), filled.drained.remaining);
    let now = u(&doc["server_time_us"]);
    let lib_retry = u64::try_from(filled.drained.retry_after.as_micros()).unwrap();
    let (before, after) = filled.drained_between;
    let retry = u(&d["retry_after_us"]);
    assert!(
        lib_retry - (now - before) <= retry && retry <= lib_retry - (now - after),
        "retry {retry}, library {lib_retry} between {before} and {after}, now {now}"
    );
    assert_eq!(doc["state"]["tokens_owed"], 5);

    // The same bucket by its Redis key.
    let by_key = json(
        &server,
        &[
            "inspect",
            "--bucket",
            "t:{11:api::orders:we:ird%7Bkey%7D%25x}",
        ],
    );
    assert_eq!(
        (by_key["name"].as_str(), by_key["key"].as_str()),
        (Some("api::orders"), Some(WEIRD))
    );
    assert_eq!(by_key["state"]["tokens_owed"], 5);

    // An unnamed bucket whose token interval is no whole number of microseconds (7 per hour):
    // the negative encoding, certain to be a token bucket.
    let doc = json(
        &server,
        &[
            "inspect",
            "--key",
            "solo",
            "--replenish",
            "7",
            "--unit",
            "hour",
        ],
    );
    assert_eq!(doc["bucket"], "t:{:solo}");
    assert!(doc["name"].is_null());
    assert_eq!(doc["state"]["per_micro"], 7);
    assert_eq!(doc["state"]["tokens_owed"], 1);
    assert_eq!(u(&doc["decision"]["remaining"]), filled.solo.remaining);
    let doc = json(&server, &["inspect", "--key", "solo"]);
    assert_eq!(
        (
            doc["algorithm"].as_str(),
            doc["algorithm_inferred"].as_bool()
        ),
        (Some("token_bucket"), Some(false))
    );

    // Every other algorithm, read with its limit, says what the library said.
    for (name, limit, d) in &filled.windows {
        let mut args = vec![
            "inspect",
            "--name",
            name,
            "--key",
            "k",
            "--replenish",
            "5",
            "--unit",
            "day",
        ];
        let expected = match limit.algorithm_kind() {
            Algorithm::FixedWindow => {
                args.extend(["--algorithm", "fixed_window"]);
                "fixed_window"
            }
            Algorithm::SlidingWindow => {
                args.extend(["--algorithm", "sliding_window"]);
                "sliding_window"
            }
            Algorithm::SlidingLog => {
                args.extend(["--algorithm", "sliding_log"]);
                "sliding_log"
            }
            _ => {
                args.extend(["--refill", "interval"]);
                "interval_bucket"
            }
        };
        let doc = json(&server, &args);
        assert_eq!(doc["algorithm"], expected, "{name}");
        assert_eq!(doc["state"]["kind"], expected, "{name}: {doc}");
        assert_eq!(
            u(&doc["decision"]["remaining"]),
            d.remaining,
            "{name}: what the last call left: {doc}"
        );
        assert_eq!(doc["decision"]["allowed"], true);
    }
    // Without a limit, the shapes that cannot be another's are recognised.
    let doc = json(&server, &["inspect", "--name", "slide", "--key", "k"]);
    assert_eq!(
        (doc["algorithm"].as_str(), doc["state"]["current"].as_u64()),
        (Some("sliding_window"), Some(2))
    );
    let doc = json(&server, &["inspect", "--name", "log", "--key", "k"]);
    assert_eq!(
        (doc["algorithm"].as_str(), doc["state"]["tokens"].as_u64()),
        (Some("sliding_log"), Some(2))
    );
    let doc = json(
        &server,
        &[
            "inspect",
            "--name",
            "win",
            "--key",
            "k",
            "--algorithm",
            "fixed_window",
        ],
    );
    assert_eq!(doc["state"]["count"], 2);

    // Every decision is the library's own `peek` (asked just before and just after the CLI):
    // the same answer and tokens left, and a retry_after between the two.
    let minute = ["--replenish", "3", "--burst", "5", "--unit", "minute"];
    let day = ["--replenish", "5", "--unit", "day"];
    let cases: Vec<(Option<&str>, &str, Limit, Vec<&str>)> = vec![
        (Some("api::orders"), "user:42", ORDERS, minute.to_vec()),
        (Some("api::orders"), WEIRD, ORDERS, minute.to_vec()),
        (Some("api::orders"), "absent", ORDERS, minute.to_vec()),
        (
            None,
            "solo",
            SOLO,
            vec!["--replenish", "7", "--unit", "hour"],
        ),
        (
            Some("win"),
            "k",
            Limit::per_day(5).algorithm(Algorithm::FixedWindow),
            [&day[..], &["--algorithm", "fixed_window"]].concat(),
        ),
        (
            Some("slide"),
            "k",
            Limit::per_day(5).algorithm(Algorithm::SlidingWindow),
            [&day[..], &["--algorithm", "sliding_window"]].concat(),
        ),
        (
            Some("log"),
            "k",
            Limit::per_day(5).algorithm(Algorithm::SlidingLog),
            [&day[..], &["--algorithm", "sliding_log"]].concat(),
        ),
        (
            Some("interval"),
            "k",
            Limit::per_day(5).refill(Refill::Interval),
            [&day[..], &["--refill", "interval"]].concat(),
        ),
    ];
    for (name, key, limit, flags) in cases {
        let peek = || match name {
            Some(name) => rt.block_on(limiter.peek_named(name, key, &limit)).unwrap(),
            None => rt.block_on(limiter.peek(key, &limit)).unwrap(),
        };
        let mut args = vec!["inspect", "--key", key];
        if let Some(name) = name {
            args.extend(["--name", name]);
        }
        args.extend(flags);
        let before = peek();
        let o = run(&server, &args, true);
        let after = peek();
        assert_eq!(code(&o), if key == "absent" { 3 } else { 0 }, "{args:?}");
        let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let d = &doc["decision"];
        assert_eq!(d["allowed"], before.allowed, "{args:?}: {doc}");
        assert_eq!(u(&d["remaining"]), before.remaining, "{args:?}: {doc}");
        assert_eq!(
            before.remaining, after.remaining,
            "nothing came back meanwhile"
        );
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap();
        let reset = u(&d["reset_after_us"]);
        assert!(
            micros(after.reset_after) <= reset && reset <= micros(before.reset_after),
            "{args:?}: reset {reset} not between {:?} and {:?}",
            after.reset_after,
            before.reset_after
        );
        let retry = u(&d["retry_after_us"]);
        assert!(
            micros(after.retry_after) <= retry && retry <= micros(before.retry_after),
            "{args:?}: {retry} not between {:?} and {:?}",
            after.retry_after,
            before.retry_after
        );
    }

    // For people.
    let o = run(&server, &inspect_orders(WEIRD), false);
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    println!("{text}");
    assert!(
        text.contains("owes 5 tokens (one back every 20 s)"),
        "{text}"
    );
    assert!(
        text.contains("3 per minute (burst 5): a call would be refused (0 remaining), retry after"),
        "{text}"
    );
    let text = stdout(&run(&server, &inspect_orders("user:42"), false));
    let held = rt
        .block_on(limiter.peek_named("api::orders", "user:42", &ORDERS))
        .unwrap()
        .remaining;
    assert_eq!(held, 2, "five tokens, three taken");
    assert!(
        text.contains("a call would be admitted (2 remaining)"),
        "the tokens held now, as `peek`: {text}"
    );
    assert!(!text.contains('\x1b'), "no colours off a terminal");
    drop(limiter);
}

#[test]
fn an_absent_bucket_is_full_and_not_found() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    rt.block_on(limiter.check_named("api", "someone", &ORDERS, 1))
        .unwrap();

    let o = run(
        &server,
        &[
            "inspect",
            "--name",
            "api",
            "--key",
            "nobody",
            "--replenish",
            "3",
            "--burst",
            "5",
            "--unit",
            "minute",
        ],
        true,
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["exists"], false);
    assert!(doc["state"].is_null());
    assert_eq!(
        doc["decision"]["remaining"], 5,
        "a full bucket of 5: five calls would pass"
    );
    assert_eq!(doc["decision"]["allowed"], true);
    assert!(doc["note"].is_null(), "the prefix is live: {doc}");

    let o = run(
        &server,
        &["inspect", "--name", "api", "--key", "nobody"],
        false,
    );
    assert_eq!(code(&o), 3);
    assert!(
        stdout(&o).contains("absent: the bucket is full"),
        "{}",
        stdout(&o)
    );

    // Under a prefix nothing uses, the document says so.
    let o = cli(&[
        "inspect",
        "--key",
        "x",
        "--prefix",
        "nope",
        "--url",
        &server.url(),
        "--json",
    ]);
    assert_eq!(code(&o), 3);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        doc["note"].as_str().unwrap().contains("is --prefix right?"),
        "{doc}"
    );
    drop(limiter);
}

#[test]
fn reset_reaches_every_instance_deny_cache() {
    let server = RedisServer::start();
    let rt = runtime();
    // Another instance of the service, with its deny cache (the default).
    let other = rt.block_on(limiter(&server));
    let mut con = server.blocking_connection();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("t:resets")
            .query::<(String, u64)>(&mut con)
            .unwrap();
        if n > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the instance never listened for resets"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let limit = Limit::per_hour(1);
    assert!(
        rt.block_on(other.check_named("login", WEIRD, &limit, 1))
            .unwrap()
            .allowed
    );
    assert!(
        !rt.block_on(other.check_named("login", WEIRD, &limit, 1))
            .unwrap()
            .allowed
    );
    let cached = rt
        .block_on(other.check_named("login", WEIRD, &limit, 1))
        .unwrap();
    assert_eq!((cached.allowed, cached.source), (false, Source::DenyCache));

    let o = run(&server, &["reset", "--name", "login", "--key", WEIRD], true);
    let reset_at = Instant::now();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["existed"], true);
    assert_eq!(doc["bucket"], other.named_bucket_key("login", WEIRD));
    let exists: bool = redis::cmd("EXISTS")
        .arg(other.named_bucket_key("login", WEIRD))
        .query(&mut con)
        .unwrap();
    assert!(!exists, "the bucket is gone");
    // The CLI is no instance of the service: only `other`'s process beats.
    let instances: u64 = redis::cmd("ZCARD")
        .arg("t:instances")
        .query(&mut con)
        .unwrap();
    assert_eq!(instances, 1, "the CLI counted itself in the fleet");
    // The other instance admits again at once, an hour before its retry_after: the reset
    // reached its deny cache (measured in milliseconds, docs/operations.md; the bound here is
    // generous, so that a loaded machine cannot fail it, and still an hour short).
    loop {
        let d = rt
            .block_on(other.check_named("login", WEIRD, &limit, 1))
            .unwrap();
        if d.allowed {
            break;
        }
        assert!(
            reset_at.elapsed() < Duration::from_secs(5),
            "still refused ({:?}) {:?} after the reset",
            d.source,
            reset_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // By the bucket's Redis key, for people; then a bucket that is full already.
    assert!(
        !rt.block_on(other.check_named("login", WEIRD, &limit, 1))
            .unwrap()
            .allowed
    );
    let bucket = other.named_bucket_key("login", WEIRD);
    let o = run(&server, &["reset", "--bucket", &bucket], false);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains(": reset; every instance's deny cache told"),
        "{}",
        stdout(&o)
    );
    let o = run(&server, &["reset", "--bucket", &bucket], true);
    assert_eq!(code(&o), 0);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()["existed"],
        false
    );

    // The unnamed bucket of `check`.
    assert!(rt.block_on(other.check("solo", &limit)).unwrap().allowed);
    let o = run(&server, &["reset", "--key", "solo"], true);
    assert_eq!(code(&o), 0);
    assert!(rt.block_on(other.check("solo", &limit)).unwrap().allowed);

    // A key kept as a digest cannot be named back from the bucket.
    let long = "k".repeat(300);
    let o = run(
        &server,
        &["reset", "--bucket", &other.named_bucket_key("login", &long)],
        false,
    );
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--name and --key"), "{}", stderr(&o));
    drop(other);
}

#[test]
fn top_lists_the_most_drained_first_by_scan() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    rt.block_on(fill(&server, &limiter));
    // Enough buckets that SCAN takes many steps.
    for i in 0..40 {
        rt.block_on(limiter.check_named("many", &format!("k{i}"), &ORDERS, 1))
            .unwrap();
    }
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut server.blocking_connection())
        .unwrap();

    let doc = json(&server, &["top", "--limit", "5", "--scan-count", "7"]);
    assert_eq!(doc["buckets"], 2 + 1 + 4 + 40, "{doc}");
    assert_eq!(
        doc["other_keys"], 0,
        "t:instances is no bucket and no other key"
    );
    let shown = doc["shown"].as_array().unwrap();
    assert_eq!(shown.len(), 5);
    let full_in: Vec<u64> = shown.iter().map(|r| u(&r["full_in_ms"])).collect();
    assert!(full_in.windows(2).all(|w| w[0] >= w[1]), "{full_in:?}");
    // The windows of a day and the hour's bucket outlast the minute's.
    let first: Vec<&str> = shown
        .iter()
        .take(5)
        .map(|r| r["bucket"].as_str().unwrap())
        .collect();
    assert!(first.contains(&"t:{:solo}"), "{first:?}");
    assert!(!first.iter().any(|b| b.contains("many")), "{first:?}");

    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.blocking_connection())
        .unwrap();
    assert!(!info.contains("cmdstat_keys"), "KEYS was called: {info}");
    let scans = testkit::info_number(&info, "cmdstat_scan", Some("calls")).unwrap();
    // COUNT is a hint: Redis 7.0 takes more than 5 steps here, Valkey 9.1 took 5; one step
    // would mean no cursor was followed.
    assert!(scans > 2, "{scans} SCAN steps of 7 keys for 48 keys");

    // With the limits file, each bucket of a limit it names says what a call would be told.
    let file = server.dir().join("limits.toml");
    std::fs::write(
        &file,
        "[limits.\"api::orders\"]\nreplenish = 3\nburst = 5\nunit = \"minute\"\n",
    )
    .unwrap();
    let doc = json(
        &server,
        &["top", "--limit", "100", "--config", file.to_str().unwrap()],
    );
    let weird = doc["shown"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == WEIRD)
        .unwrap();
    assert_eq!(weird["decision"]["allowed"], false);
    assert_eq!(weird["name"], "api::orders");

    // For people.
    let o = run(&server, &["top", "--limit", "3"], false);
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    println!("{text}");
    assert!(text.starts_with("FULL IN"), "{text}");
    assert_eq!(text.lines().count(), 1 + 3 + 1, "{text}");
    assert!(text.contains("3 of 47 buckets under `t`"), "{text}");
    drop(limiter);
}

#[test]
fn watch_samples_buckets_per_limit() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    rt.block_on(fill(&server, &limiter));
    // A second empty bucket of the limit beside its one with tokens left.
    for _ in 0..5 {
        rt.block_on(limiter.check_named("api::orders", "drained", &ORDERS, 1))
            .unwrap();
    }
    let file = server.dir().join("limits.toml");
    std::fs::write(
        &file,
        "[limits.\"api::orders\"]\nreplenish = 3\nburst = 5\nunit = \"minute\"\n",
    )
    .unwrap();

    let started = Instant::now();
    let o = run(
        &server,
        &[
            "watch",
            "--count",
            "2",
            "--interval-ms",
            "200",
            "--config",
            file.to_str().unwrap(),
        ],
        true,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(started.elapsed() >= Duration::from_millis(200));
    let samples: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), 2);
    for (i, s) in samples.iter().enumerate() {
        assert_eq!(u(&s["sample"]), i as u64 + 1);
        assert_eq!(s["buckets"], 8);
        let orders = s["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "api::orders")
            .unwrap();
        assert_eq!(
            (orders["buckets"].as_u64(), orders["empty"].as_u64()),
            (Some(3), Some(2)),
            "{s}"
        );
        let unnamed = s["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"].is_null())
            .unwrap();
        assert!(unnamed["empty"].is_null(), "no limit given for it");
    }
    assert!(u(&samples[1]["elapsed_ms"]) >= 200);

    let o = run(
        &server,
        &["watch", "--count", "2", "--interval-ms", "50"],
        false,
    );
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    println!("{text}");
    assert_eq!(text.matches("sample ").count(), 2, "{text}");
    assert!(text.contains("api::orders"), "{text}");
    drop(limiter);
}

/// Every command that connects to Redis, with what it needs besides `--url`.
const CONNECTING: [&[&str]; 4] = [
    &["top"],
    &["inspect", "--key", "k"],
    &["reset", "--key", "k"],
    &["watch", "--count", "1"],
];

#[test]
fn errors_say_what_is_wrong_with_their_exit_codes() {
    let server = RedisServer::start();
    // Bad URLs: the command line is wrong.
    for (url, says) in [
        // A URL that does not parse may be anything, a password included: none of it shows.
        (
            "not a url",
            "invalid Redis URL (not shown: it may hold a password): not a URL",
        ),
        (
            "http://127.0.0.1:6379",
            "invalid Redis URL (not shown: it may hold a password): Redis URL did not parse",
        ),
        ("redis://127.0.0.1:notaport", "invalid Redis URL"),
        (
            "redis://h/0?protocol=s3cret-pw",
            "Invalid protocol version;",
        ),
        (
            "redis+sentinel://127.0.0.1:26379/m",
            "does not follow Sentinel",
        ),
        ("memory://", "keeps buckets inside one process"),
    ] {
        for command in [
            &["top"][..],
            &["inspect", "--key", "k"],
            &["reset", "--key", "k"],
        ] {
            let mut args = command.to_vec();
            args.extend(["--url", url]);
            let o = cli(&args);
            assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        }
    }
    // A password never shows, nor any part of a URL that does not parse.
    for url in [
        "http://:s3cret@h:1",
        "redis://h/0?protocol=s3cret-pw",
        "?a://s3cret#__=",
    ] {
        let o = cli(&["top", "--url", url]);
        assert!(!stderr(&o).contains("s3cret"), "{}", stderr(&o));
    }

    // A closed port: Redis cannot be reached, and the message says where.
    let port = testkit::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    for command in CONNECTING {
        let mut args = command.to_vec();
        args.extend(["--url", &url]);
        let o = cli(&args);
        assert_eq!(code(&o), 1, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("cannot connect to Redis at {url}")),
            "{}",
            stderr(&o)
        );
    }
    // REDIS_URL is the default.
    let o = Command::new(env!("CARGO_BIN_EXE_ratelimit"))
        .args(["top"])
        .env("REDIS_URL", &url)
        .output()
        .unwrap();
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains(&url), "{}", stderr(&o));

    // An unknown prefix: said, not an empty table.
    let live = server.url();
    for command in [&["top"][..], &["watch", "--count", "1"]] {
        let mut args = command.to_vec();
        args.extend(["--url", &live, "--prefix", "nope"]);
        let o = cli(&args);
        assert_eq!(code(&o), 3, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("unknown prefix `nope`"),
            "{}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    // The prefixes it does find are named: a service enabled by the macro uses its crate's
    // name, which the CLI cannot guess (issue 44).
    let rt = runtime();
    rt.block_on(async {
        let limiter = RateLimiter::builder()
            .redis(server.url())
            .prefix("my_service")
            .build()
            .await
            .unwrap();
        let d = limiter.check("k", &Limit::per_minute(3)).await.unwrap();
        assert!(d.allowed);
    });
    let o = cli(&["top", "--url", &live]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("prefixes found: `my_service`"),
        "{}",
        stderr(&o)
    );

    // Usage: clap's code, and the library's own checks of a limit and a prefix.
    let url = server.url();
    for (args, says) in [
        (vec!["inspect"], "--key"),
        (
            vec!["inspect", "--key", "k", "--bucket", "b"],
            "cannot be used with",
        ),
        (
            vec!["inspect", "--key", "k", "--replenish", "0"],
            "--replenish",
        ),
        (
            vec![
                "inspect",
                "--key",
                "k",
                "--unit",
                "minutes",
                "--replenish",
                "1",
            ],
            "unknown unit `minutes`",
        ),
        (vec!["inspect", "--key", "k", "--burst", "3"], "--replenish"),
        (
            vec!["inspect", "--key", "k", "--replenish", "2", "--cost", "3"],
            "exceeds the burst capacity",
        ),
        (
            vec![
                "inspect",
                "--key",
                "k",
                "--replenish",
                "2",
                "--burst",
                "3",
                "--algorithm",
                "fixed_window",
            ],
            "invalid limit",
        ),
        (vec!["top", "--prefix", "a{b"], "invalid prefix"),
        (vec!["frobnicate"], "unrecognized subcommand"),
    ] {
        let mut all = args.clone();
        all.extend(["--url", &url]);
        let o = cli(&all);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }

    // The exit codes are in every --help.
    for command in [&["--help"][..], &["inspect", "--help"], &["top", "--help"]] {
        let o = cli(command);
        assert_eq!(code(&o), 0);
        let text = stdout(&o);
        assert!(
            text.contains("Exit codes:") && text.contains("3  not found"),
            "{text}"
        );
    }
    let o = cli(&["watch", "--help"]);
    assert!(
        stdout(&o).contains("samples the buckets' state, not the decisions"),
        "{}",
        stdout(&o)
    );
}

/// On a Redis Cluster, `top` and `watch` scan every master, and `inspect` and `reset` reach
/// the bucket's node.
#[test]
fn a_cluster_is_scanned_on_every_master() {
    let cluster = testkit::cluster::RedisCluster::start();
    let url = cluster.url();
    let rt = runtime();
    let limiter = rt.block_on(async {
        RateLimiter::builder()
            .redis(url.as_str())
            .prefix("t")
            .build()
            .await
            .unwrap()
    });
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    for key in &keys {
        rt.block_on(limiter.check_named("api", key, &ORDERS, 1))
            .unwrap();
    }
    let masters: std::collections::BTreeSet<u16> = keys
        .iter()
        .map(|k| cluster.master_of_key(&limiter.named_bucket_key("api", k)))
        .collect();
    assert_eq!(masters.len(), 3, "the buckets are on every master");

    let cli_on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--url", &url, "--prefix", "t", "--json"]);
        cli(&all)
    };
    let o = cli_on(&["top", "--limit", "100"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["buckets"], 30, "{doc}");

    let o = cli_on(&["inspect", "--name", "api", "--key", "user:7"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["state"]["tokens_owed"], 1);

    let o = cli_on(&["reset", "--name", "api", "--key", "user:7"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cli_on(&["watch", "--count", "1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["buckets"], 29, "{doc}");
    drop(limiter);
}

/// No password reaches the output, whatever it holds (`/`, `@`, `?`, `#` make URL parsers
/// disagree on where it ends) and whichever command fails: the URL is shown through the
/// library's own redaction.
#[test]
fn passwords_never_show_whatever_they_hold() {
    let closed = testkit::free_port();
    let mut urls = Vec::new();
    for sep in ["/", "@", "?", "#", "/@?#"] {
        let password = format!("Xy9{sep}Zq7");
        urls.push(format!("redis://:{password}@127.0.0.1:{closed}"));
        urls.push(format!("redis://admin:{password}@127.0.0.1:{closed}/0"));
        urls.push(format!("rediss://:{password}@127.0.0.1:{closed}"));
        urls.push(format!(
            "redis+cluster://:{password}@127.0.0.1:{closed},127.0.0.1:1"
        ));
    }
    urls.push(format!("redis://127.0.0.1:{closed}/0?password=Xy9Zq7"));
    // Another program's garbage in the environment: not a URL at all.
    urls.push("Xy9Zq7".to_owned());
    for url in &urls {
        for command in CONNECTING {
            let mut args = command.to_vec();
            args.extend(["--url", url]);
            let o = cli(&args);
            assert_ne!(code(&o), 0, "{args:?}");
            let (out, err) = (stdout(&o), stderr(&o));
            assert!(!err.is_empty(), "{args:?}: says nothing");
            for secret in ["Xy9", "Zq7"] {
                assert!(
                    !out.contains(secret) && !err.contains(secret),
                    "{args:?} shows the password: {out}{err}"
                );
            }
        }
    }

    // A server that needs the password: every output that names the server hides it.
    let password = "Xy9@Zq7";
    let server = RedisServer::start();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(password)
        .query::<()>(&mut server.blocking_connection())
        .unwrap();
    let url = format!("redis://:{password}@127.0.0.1:{}", server.port());
    for args in [
        &["top", "--prefix", "nope"][..],
        &["watch", "--count", "1", "--prefix", "nope"],
        &["inspect", "--key", "k", "--prefix", "nope"],
        &["inspect", "--key", "k", "--prefix", "nope", "--json"],
    ] {
        let mut args = args.to_vec();
        args.extend(["--url", &url]);
        let o = cli(&args);
        assert_eq!(code(&o), 3, "{args:?}: {}", stderr(&o));
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(all.contains(":***@127.0.0.1"), "{args:?}: {all}");
        assert!(!all.contains("Xy9") && !all.contains("Zq7"), "{all}");
    }
}

/// Buckets whose name or key hold non-ASCII text, `:`, braces and `%`, made through the
/// library's public API (the key from a request header, as `Header` resolves it): `inspect`
/// finds each by the text the client sent, and `top` shows that text.
#[test]
fn the_cli_names_buckets_as_the_library_does() {
    use ratelimit_core::{Header, KeyResolver, RequestContext};

    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    let limit = Limit::per_hour(3);
    let header_key = |value: &str| {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-api-key", http::HeaderValue::from_str(value).unwrap());
        let ctx = RequestContext::new().with_headers(headers);
        Header("x-api-key").resolve(&ctx).unwrap().into_owned()
    };
    let buckets = [
        ("api::café", "café"),
        ("ns:{x}%", "k:{ключ}%🔑"),
        ("plain", &"é".repeat(100)),
    ];
    for (name, value) in buckets {
        let key = header_key(value);
        for _ in 0..3 {
            assert!(
                rt.block_on(limiter.check_named(name, &key, &limit, 1))
                    .unwrap()
                    .allowed
            );
        }
        let refused = rt
            .block_on(limiter.check_named(name, &key, &limit, 1))
            .unwrap();
        assert!(!refused.allowed);
    }

    for (name, value) in buckets {
        let doc = json(
            &server,
            &[
                "inspect",
                "--name",
                name,
                "--key",
                value,
                "--replenish",
                "3",
                "--unit",
                "hour",
            ],
        );
        assert_eq!(doc["exists"], true, "{name}/{value}: {doc}");
        assert_eq!(doc["bucket"], limiter.named_bucket_key(name, value));
        assert_eq!(doc["decision"]["allowed"], false, "{doc}");
        assert_eq!(doc["decision"]["remaining"], 0, "{doc}");
        let o = run(&server, &["inspect", "--name", name, "--key", value], false);
        assert_eq!(code(&o), 0, "{name}/{value}: {}", stdout(&o));
        assert!(stdout(&o).contains(value), "{}", stdout(&o));
    }

    let doc = json(&server, &["top", "--limit", "10"]);
    let shown = doc["shown"].as_array().unwrap();
    assert_eq!(shown.len(), buckets.len(), "{doc}");
    for (name, value) in buckets {
        // A key too long to keep is listed by its bucket, its key kept only as a digest.
        let key = if value.len() > ratelimit_core::tools::MAX_PART_LEN {
            Value::Null
        } else {
            Value::from(value)
        };
        assert!(
            shown.iter().any(|r| r["name"] == name
                && r["key"] == key
                && r["bucket"] == limiter.named_bucket_key(name, value)),
            "{name}/{value} not in {doc}"
        );
    }
    let o = run(&server, &["top"], false);
    assert!(stdout(&o).contains("k:{ключ}%🔑"), "{}", stdout(&o));
    drop(limiter);
}

#[test]
fn inspect_and_top_read_a_concurrency_limits_slots() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    let limit = Limit::concurrent(3);
    let entered = rt
        .block_on(limiter.enter_named("api::exports", "tenant", &limit))
        .unwrap();
    assert!(entered.decision.allowed);
    let doc = json(
        &server,
        &["inspect", "--name", "api::exports", "--key", "tenant"],
    );
    assert_eq!(doc["exists"], true, "{doc}");
    assert_eq!(doc["algorithm"], "concurrency", "{doc}");
    assert_eq!(doc["state"]["kind"], "concurrency", "{doc}");
    assert_eq!(doc["state"]["held"], 1, "{doc}");
    assert_eq!(doc["state"]["waiting"], 0, "{doc}");
    assert!(
        u(&doc["state"]["last_lease_ends_in_us"]) > 20_000_000,
        "{doc}"
    );
    let people = run(
        &server,
        &["inspect", "--name", "api::exports", "--key", "tenant"],
        false,
    );
    assert!(
        stdout(&people).contains("1 slot held, 0 calls waiting"),
        "{}",
        stdout(&people)
    );
    // `top` reads each set by count only (a sliding log's every time is not needed to list
    // it), and still knows a concurrency limit's set from a sliding log's, as `inspect` does.
    let log = Limit::per_minute(5).algorithm(Algorithm::SlidingLog);
    rt.block_on(limiter.check_named("api::log", "tenant", &log, 1))
        .unwrap();
    let doc = json(&server, &["top"]);
    let algorithm = |name: &str| {
        let shown = doc["shown"].as_array().unwrap();
        let bucket = shown.iter().find(|r| r["name"] == name).unwrap();
        (bucket["algorithm"].clone(), bucket["state"]["kind"].clone())
    };
    assert_eq!(
        algorithm("api::exports"),
        ("concurrency".into(), "concurrency".into()),
        "{doc}"
    );
    assert_eq!(
        algorithm("api::log"),
        ("sliding_log".into(), "sliding_log".into()),
        "{doc}"
    );
    let people = stdout(&run(&server, &["top"], false));
    println!("{people}");
    assert!(people.contains("1 slot held"), "{people}");
    rt.block_on(entered.slot.unwrap().release()).unwrap();
}

/// The CLI works through the user of the least ACL in docs/operations.md, with `+scan` for
/// `top` as the docs say, and the server refuses it nothing: `ACL LOG` stays empty (on
/// Redis 7.2 and newer and on Valkey, a connection that sent `CLIENT SETINFO` would be logged
/// there).
#[test]
fn the_cli_reads_through_the_least_acl() {
    let server = RedisServer::start();
    let mut con = server.blocking_connection();
    let mut rules = testkit::acl::least_acl();
    rules.push("+scan".to_owned());
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ratelimit")
        .arg(rules)
        .query::<()>(&mut con)
        .unwrap();
    let rt = runtime();
    let limiter = rt
        .block_on(
            RateLimiter::builder()
                .redis(server.url())
                .prefix("app")
                .build(),
        )
        .unwrap();
    rt.block_on(limiter.check_named("api::orders", "user:42", &ORDERS, 1))
        .unwrap();
    let url = format!("redis://ratelimit:pw@127.0.0.1:{}", server.port());
    for args in [
        &inspect_orders("user:42")[..],
        &["top"],
        &["reset", "--name", "api::orders", "--key", "user:42"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--url", &url, "--prefix", "app"]);
        let o = cli(&all);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    }
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut con).unwrap();
    let log = testkit::acl::log_entries(&log);
    assert!(log.is_empty(), "{log:#?}");
    drop(limiter);
}

/// `servers` says how a limiter decides on each server, as the library's own choice does: by
/// the module where the server loaded it, by the function library where it did not.
#[test]
fn servers_says_how_each_server_decides() {
    let with = RedisServer::start_with(&testkit::module::load_args());
    let without = RedisServer::start();
    for (server, path, runs) in [
        (&with, "module", "ratelimit_v1".to_owned()),
        (
            &without,
            "functions",
            ratelimit_core::tools::scripts::library().name().to_owned(),
        ),
    ] {
        let doc = json(server, &["servers"]);
        let servers = doc["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 1, "{doc}");
        assert_eq!(servers[0]["path"], path, "{doc}");
        assert_eq!(servers[0]["runs"], runs.as_str(), "{doc}");
        let text = stdout(&run(server, &["servers"], false));
        assert!(text.contains(&format!("{path} ({runs})")), "{text}");
    }
}

/// A settlement's overdraft (`Usage::settle` above the estimate) shows as the bucket's debt,
/// with the limit: what it owes beyond empty, in JSON and for people; none on a bucket that
/// only took what it held.
#[test]
fn inspect_shows_a_settlements_debt() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    rt.block_on(async {
        // 5 estimated, 8 used: 3 below empty (the debt bound is a burst, 5).
        let usage = limiter
            .check_estimate_named("api::orders", "debtor", &ORDERS, 5)
            .await
            .unwrap();
        assert_eq!(usage.settle(8).await.unwrap().taken(), 3);
        let usage = limiter
            .check_estimate_named("api::orders", "payer", &ORDERS, 4)
            .await
            .unwrap();
        assert_eq!(usage.settle(2).await.unwrap().given_back(), 2);
    });
    let doc = json(&server, &inspect_orders("debtor"));
    assert_eq!(doc["state"]["tokens_owed"], 8);
    assert_eq!(doc["debt"], 3);
    assert_eq!(doc["decision"]["allowed"], false);
    let doc = json(&server, &inspect_orders("payer"));
    assert_eq!(doc["debt"], 0);
    // Without the limit, the burst is unknown, and so is the debt.
    let doc = json(
        &server,
        &["inspect", "--name", "api::orders", "--key", "debtor"],
    );
    assert!(doc["debt"].is_null());
    let o = run(&server, &inspect_orders("debtor"), false);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("3 tokens below empty"),
        "{}",
        stdout(&o)
    );
}

/// A quota by calendar month is read as the service keeps it: a fixed window of the month,
/// not a token bucket of 31 days ("owes 27313433137 tokens"), with `--algorithm fixed_window`
/// or without (issue 44).
#[test]
fn inspect_reads_a_calendar_quota_as_its_month() {
    let server = RedisServer::start();
    let rt = runtime();
    let limiter = rt.block_on(limiter(&server));
    let quota = Limit::per_month(10);
    rt.block_on(async {
        for _ in 0..10 {
            let d = limiter
                .check_named("api::quota", "k", &quota, 1)
                .await
                .unwrap();
            assert!(d.allowed);
        }
        let refused = limiter
            .check_named("api::quota", "k", &quota, 1)
            .await
            .unwrap();
        assert!(!refused.allowed);
    });
    let month = [
        "inspect",
        "--name",
        "api::quota",
        "--key",
        "k",
        "--replenish",
        "10",
        "--unit",
        "month",
    ];
    for algorithm in [&[][..], &["--algorithm", "fixed_window"]] {
        let args = [&month[..], algorithm].concat();
        let doc = json(&server, &args);
        assert_eq!(doc["decision"]["allowed"], false, "{args:?}: {doc}");
        assert_eq!(doc["decision"]["remaining"], 0, "{args:?}: {doc}");
        let o = run(&server, &args, false);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(!stdout(&o).contains("owes"), "{args:?}: {}", stdout(&o));
    }
}
