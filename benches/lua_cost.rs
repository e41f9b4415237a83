//! The Redis cost bench: what one decision costs Redis, for every script this crate runs (by
//! `EVALSHA` of its text, by `FCALL` of its function in the library, and as the Redis
//! module's command where the module decides it natively) and for the peers' scripts run
//! verbatim, in one sitting on one `redis-server` this bench starts on a free loopback port
//! with the module loaded. Commands are pipelined 256 at a time on one connection, as under
//! load, every call admitted and every bucket written. Two ways to measure:
//!
//! * by default, time: the median of `--rounds` (3) rounds of 128,000 decisions on 10,000
//!   buckets, two figures per case: **script**, Redis's own execution time per decision
//!   (`INFO commandstats`, `usec` of the command that ran, over the decisions it made), and
//!   **cpu**, the server's whole CPU per decision (`INFO cpu`, user + sys), which also counts
//!   reading the commands and writing the replies: what sizes a fleet;
//! * `--callgrind`: instructions, which repeat from run to run where this machine's noise
//!   moves times by 10-50 %. The server runs under `valgrind --tool=callgrind` with
//!   instrumentation off; per case, 10,000 decisions write each of the 10,000 buckets once,
//!   then it is switched on (`callgrind_control -i on`) over 5,000 more, on buckets that
//!   exist (a busy limiter's steady state), and the whole server process's instructions are
//!   divided by them (median of `--rounds`). Needs `valgrind`.
//!
//! ```sh
//! cargo bench -p redis-ratelimit-benches --bench lua_cost
//! cargo bench -p redis-ratelimit-benches --bench lua_cost -- --callgrind
//! # go-redis/redis_rate's allowN, which no registry here carries: its script from lua.go,
//! # saved as a file (not in this repository), measured beside the rest
//! cargo bench -p redis-ratelimit-benches --bench lua_cost -- --redis-rate /path/allow_n.lua
//! # only the cases whose label holds a text (or any of several, separated by `|`), more rounds
//! cargo bench -p redis-ratelimit-benches --bench lua_cost -- --only token_bucket --rounds 7
//! ```
//!
//! The probes in `benches/lua-costs/` (what part of a token-bucket decision costs what) are
//! measured too. Results in docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

#[path = "callgrind.rs"]
mod callgrind;

use callgrind::Callgrind;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redis_ratelimit::tools::algorithms::{
    OfLimit as _, WindowParams, concurrency, fixed_window, interval_bucket, sliding_log,
    sliding_window, token_bucket,
};
use redis_ratelimit::tools::scripts;
use redis_ratelimit::{Algorithm, Limit, Refill};

/// Decisions per measurement.
const DECISIONS: u64 = 128_000;
/// Distinct buckets, visited in a fixed scattered order.
const KEYS: u64 = 10_000;
/// Commands per round trip.
const PIPELINE: u64 = 256;

fn key(i: u64) -> String {
    format!("bench:{{:k:{:012}}}", (i * 7_919) % KEYS)
}

/// Appends one decision on bucket `i` to a command: its keys, its arguments.
type Decision = Box<dyn Fn(u64, &mut Vec<String>, &mut Vec<String>)>;

/// One script as measured: how to call it, and the arguments of one decision on bucket `i`.
struct Case {
    label: String,
    /// `FCALL`, `EVALSHA`, or the module's command.
    command: &'static str,
    /// The function's name, or the script's SHA-1; none for the module's command.
    name: Option<String>,
    /// Decisions per command (a batch's size; 1 otherwise).
    per_command: u64,
    decision: Decision,
    /// For a batch: the decision's keys go in ARGV, the first one also declared.
    batch: bool,
    /// No script: `command` (`INCRBY`) on the decision's key with its arguments, then
    /// `EXPIRE` of the key by these seconds, pipelined: envoyproxy/ratelimit's fixed window.
    then_expire: Option<u64>,
}

/// Loads `text` as a script; its SHA-1.
async fn load(c: &mut MultiplexedConnection, text: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(text)
        .query_async(c)
        .await
        .unwrap()
}

async fn info(c: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(c)
        .await
        .unwrap()
}

/// Sends `n` decisions of `case`, from the `from`-th: pipelined, every reply checked.
async fn send(c: &mut MultiplexedConnection, case: &Case, from: u64, n: u64) {
    let mut i = from;
    while i < from + n {
        let mut pipe = redis::pipe();
        for _ in 0..PIPELINE.div_ceil(case.per_command) {
            let (mut keys, mut args) = (Vec::new(), Vec::new());
            if case.batch {
                args.push(case.per_command.to_string());
            }
            for _ in 0..case.per_command {
                (case.decision)(i, &mut keys, &mut args);
                i += 1;
            }
            if let Some(seconds) = case.then_expire {
                pipe.cmd(case.command).arg(&keys).arg(&args);
                pipe.cmd("EXPIRE").arg(&keys).arg(seconds);
                continue;
            }
            let cmd = pipe.cmd(case.command);
            if let Some(name) = &case.name {
                cmd.arg(name);
            }
            if case.batch {
                cmd.arg(1).arg(key(i - case.per_command));
            } else if case.name.is_none() {
                // The module's command for one algorithm: its key, the arguments packed.
                cmd.arg(&keys).arg(args.join(" "));
                continue;
            } else {
                cmd.arg(keys.len()).arg(&keys);
            }
            cmd.arg(&args);
        }
        let replies: Vec<Value> = pipe.query_async(c).await.unwrap();
        // No error anywhere: not as a reply, nor as a batch's entry (an error's text, from
        // `batch.lua`; an error, from the module's `batch`).
        assert!(
            !replies.iter().any(failed),
            "{}: {:?}",
            case.label,
            replies.iter().find(|r| failed(r))
        );
    }
}

/// Whether `reply` is or holds an error: an error reply, or text that is not numbers (a
/// script's entry for a call whose decision raised one).
fn failed(reply: &Value) -> bool {
    match reply {
        Value::ServerError(_) => true,
        Value::BulkString(text) => !text.iter().all(|b| b.is_ascii_digit() || b" -".contains(b)),
        Value::Array(items) => items.iter().any(failed),
        _ => false,
    }
}

async fn flush_and_reset(c: &mut MultiplexedConnection) {
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut *c)
        .await
        .unwrap();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut *c)
        .await
        .unwrap();
}

/// One round of `case`: (script µs, cpu µs) per decision.
async fn round(c: &mut MultiplexedConnection, case: &Case) -> (f64, f64) {
    flush_and_reset(c).await;
    let cpu_before = testkit::cpu_seconds(&info(c, "cpu").await);
    send(c, case, 0, DECISIONS).await;
    let cpu = testkit::cpu_seconds(&info(c, "cpu").await) - cpu_before;
    let stats = info(c, "commandstats").await;
    let line = format!("cmdstat_{}", case.command.to_ascii_lowercase());
    let mut usec = testkit::info_number(&stats, &line, Some("usec")).unwrap();
    if case.then_expire.is_some() {
        usec += testkit::info_number(&stats, "cmdstat_expire", Some("usec")).unwrap();
    }
    let calls = testkit::info_number(&stats, &line, Some("calls")).unwrap();
    assert_eq!(calls * case.per_command, DECISIONS, "{}", case.label);
    (usec as f64 / DECISIONS as f64, cpu * 1e6 / DECISIONS as f64)
}

/// Decisions per window of `--callgrind`, after one on each bucket.
const CALLGRIND_DECISIONS: u64 = 5_000;

/// One `--callgrind` round of `case`: the server's instructions per decision, on buckets
/// that exist (every one was written once before the window: the steady state of a busy
/// limiter, where most calls find their bucket).
async fn instructions(c: &mut MultiplexedConnection, server: &Callgrind, case: &Case) -> f64 {
    flush_and_reset(c).await;
    send(c, case, 0, KEYS).await;
    let total = server.count(send(c, case, KEYS, CALLGRIND_DECISIONS)).await;
    total as f64 / CALLGRIND_DECISIONS as f64
}

/// Our algorithm `name` alone, by `command` (`FCALL`, `EVALSHA`, or the module's command),
/// with `args` per decision.
fn ours(name: &str, command: &'static str, sha: &str, args: Vec<u64>) -> Case {
    let function = scripts::library().function(name).unwrap().to_owned();
    Case {
        label: format!("ours: {name}, {}", by(command)),
        command,
        name: match command {
            "FCALL" => Some(function),
            "EVALSHA" => Some(sha.to_owned()),
            _ => None,
        },
        per_command: 1,
        decision: Box::new(move |i, keys, argv| {
            keys.push(key(i));
            argv.extend(args.iter().map(u64::to_string));
        }),
        batch: false,
        then_expire: None,
    }
}

/// How a case's label says it runs: `FCALL`, `EVALSHA`, or `module`.
fn by(command: &str) -> &str {
    if command.starts_with("ratelimit.") {
        "module"
    } else {
        command
    }
}

/// The ways ours runs `name`: `EVALSHA`, `FCALL`, and the module's command where it has one.
fn ways(name: &str) -> Vec<&'static str> {
    let mut ways = vec!["EVALSHA", "FCALL"];
    ways.extend(
        scripts::native_commands()
            .into_iter()
            .filter(|command| command.rsplit('.').next() == Some(name)),
    );
    ways
}

/// A peer's script, by `EVALSHA`, with `keys` bucket keys and `args` per decision.
fn peer(label: &str, sha: String, keys: usize, args: fn() -> Vec<String>) -> Case {
    Case {
        label: label.to_owned(),
        command: "EVALSHA",
        name: Some(sha),
        per_command: 1,
        decision: Box::new(move |i, k, argv| {
            for n in 0..keys {
                k.push(format!("{}:{n}", key(i)));
            }
            argv.extend(args());
        }),
        batch: false,
        then_expire: None,
    }
}

fn unix() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.iter().any(|a| a == "--list") {
        return;
    }
    let value_of = |flag: &str| {
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1).cloned())
    };
    let rounds: usize = value_of("--rounds").map_or(3, |r| r.parse().unwrap());
    let callgrind = argv.iter().any(|a| a == "--callgrind");
    let module = testkit::module::load_args();
    let (server, cg) = if callgrind {
        (None, Some(Callgrind::start(&module)))
    } else {
        (Some(testkit::RedisServer::start_with(&module)), None)
    };
    let url = match (&server, &cg) {
        (Some(s), _) => s.url(),
        (_, Some(cg)) => format!("redis://127.0.0.1:{}", cg.port),
        _ => unreachable!(),
    };
    let client = redis::Client::open(url).unwrap();
    // No response timeout: a server under callgrind runs some fifty times slower.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut c = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(scripts::library().text())
        .query_async::<String>(&mut c)
        .await
        .unwrap();

    // Every call admitted: 1,000 an hour, about 13 calls per bucket.
    let limit = Limit::per_hour(1000);
    let tb = token_bucket::args(token_bucket::Params::of(&limit), 1);
    // As the store sends a token bucket whose other arguments are their defaults.
    let tb = tb[..4].to_vec();
    let window = |a: Algorithm| WindowParams::of(&limit.algorithm(a)).unwrap();
    let fw = fixed_window::args(window(Algorithm::FixedWindow), 1).to_vec();
    let sw = sliding_window::args(
        sliding_window::SlidingParams::of(&limit.algorithm(Algorithm::SlidingWindow)).unwrap(),
        1,
    )
    .to_vec();
    let sl = sliding_log::args(window(Algorithm::SlidingLog), 1).to_vec();
    let ib = interval_bucket::args(
        interval_bucket::IntervalParams::of(&limit.refill(Refill::Interval)).unwrap(),
        1,
    )
    .to_vec();

    // A concurrency limit of 1,000 in flight, leases of an hour: one call's holder takes its
    // slot on each key again and again (each decision reads the set and writes the slot),
    // and renews it.
    let lease_us = 3_600_000_000;
    let cc = concurrency::args(
        concurrency::Params {
            max: 1000,
            lease_us,
            holder: 7,
            queue: false,
        },
        1,
    )
    .to_vec();
    let renew = vec![7, lease_us, 1];

    let mut cases = Vec::new();
    for (name, text, args) in [
        ("token_bucket", scripts::TOKEN_BUCKET, &tb),
        ("fixed_window", scripts::FIXED_WINDOW, &fw),
        ("sliding_window", scripts::SLIDING_WINDOW, &sw),
        ("sliding_log", scripts::SLIDING_LOG, &sl),
        ("interval_bucket", scripts::INTERVAL_BUCKET, &ib),
        ("concurrency", scripts::CONCURRENCY, &cc),
        ("concurrency_renew", scripts::CONCURRENCY_RENEW, &renew),
    ] {
        let sha = load(&mut c, text).await;
        for command in ways(name) {
            cases.push(ours(name, command, &sha, args.clone()));
        }
    }
    // Two limits of one call (a token bucket and a fixed window on two keys), all or
    // nothing: `multi` by FCALL, or the module's `multi`.
    let multi_sha = load(&mut c, scripts::MULTI).await;
    let specs: Vec<String> = [1, tb.len() as u64]
        .into_iter()
        .chain(tb.iter().copied())
        .chain([3, fw.len() as u64])
        .chain(fw.iter().copied())
        .map(|v| v.to_string())
        .collect();
    // And the same two limits settling a call's actual cost (`multi`'s mode 5): the estimate
    // (1) was taken; the actual (2) takes one more token from each, into debt up to 10. The
    // time of the take is 0: the fixed window's window is not the current one, and the
    // overdraft lands in the current one.
    let settled = ["0", "2", "10", "2", "10"].map(str::to_owned);
    for (mode, tail, what) in [
        ("0", &[][..], "(multi)"),
        ("5", &settled[..], "settled (multi mode 5)"),
    ] {
        for command in ways("multi") {
            let specs = specs.clone();
            let tail = tail.to_vec();
            let native = command.starts_with("ratelimit.");
            cases.push(Case {
                label: format!("ours: token_bucket + fixed_window {what}, {}", by(command)),
                command,
                name: match command {
                    "FCALL" => Some(scripts::library().function("multi").unwrap().to_owned()),
                    "EVALSHA" => Some(multi_sha.clone()),
                    _ => None,
                },
                per_command: 1,
                decision: Box::new(move |i, keys, argv| {
                    let (first, second) = (key(i), format!("{}:w", key(i)));
                    if native {
                        // numkeys and the keys; then the mode and the specs, packed.
                        keys.extend(["2".to_owned(), first, second]);
                        argv.push(mode.to_owned());
                    } else {
                        keys.push(first.clone());
                        argv.extend(["2".to_owned(), mode.to_owned(), first, second]);
                    }
                    argv.extend(specs.iter().cloned());
                    argv.extend(tail.iter().cloned());
                }),
                batch: false,
                then_expire: None,
            });
        }
    }
    let batch_sha = load(&mut c, scripts::BATCH).await;
    for m in [1, 4, 16, 64] {
        for command in ["EVALSHA", "FCALL"] {
            let tb = tb.clone();
            cases.push(Case {
                label: format!("ours: token_bucket in batches of {m}, {command}"),
                command,
                name: Some(if command == "FCALL" {
                    scripts::library().function("batch").unwrap().to_owned()
                } else {
                    batch_sha.clone()
                }),
                per_command: m,
                // As the store sends one-limit calls of one limit: the batch's first as 1
                // limit, its key, algorithm 1, the number of its arguments, them; each other
                // as 0 and its key.
                // (The first of a command: only the batch's size is in its arguments yet.)
                decision: Box::new(move |i, _, argv| {
                    if argv.len() == 1 {
                        argv.extend(["1".to_owned(), key(i), "1".to_owned(), tb.len().to_string()]);
                        argv.extend(tb.iter().map(u64::to_string));
                    } else {
                        argv.extend(["0".to_owned(), key(i)]);
                    }
                }),
                batch: true,
                then_expire: None,
            });
        }
    }
    // The module's `batch`, as the store sends a batch of one-limit calls of one limit: every
    // key declared after their number; packed, the number of calls, the first call as 1 limit
    // (algorithm 1, the number of its arguments, them), each other as 0.
    for command in ways("batch")
        .into_iter()
        .filter(|c| c.starts_with("ratelimit."))
    {
        for m in [16, 64] {
            let tb = tb.clone();
            cases.push(Case {
                label: format!("ours: token_bucket in batches of {m}, module"),
                command,
                name: None,
                per_command: m,
                decision: Box::new(move |i, keys, argv| {
                    if keys.is_empty() {
                        keys.push(m.to_string());
                        argv.extend([m.to_string(), "1".to_owned(), "1".to_owned()]);
                        argv.push(tb.len().to_string());
                        argv.extend(tb.iter().map(u64::to_string));
                    } else {
                        argv.push("0".to_owned());
                    }
                    keys.push(key(i));
                }),
                batch: false,
                then_expire: None,
            });
        }
    }
    // The peers, verbatim (each file's header says from which package and version).
    let spring = load(&mut c, include_str!("memory/request_rate_limiter.lua")).await;
    cases.push(peer(
        "Spring Cloud Gateway request_rate_limiter.lua",
        spring,
        2,
        || {
            // replenishRate 1/s, burstCapacity 1000, now in seconds, 1 requested.
            vec![
                "1".into(),
                "1000".into(),
                unix().as_secs().to_string(),
                "1".into(),
            ]
        },
    ));
    let flexible = load(&mut c, include_str!("memory/flexible_incr_ttl.lua")).await;
    cases.push(peer(
        "rate-limiter-flexible fixed window (INCR + PTTL)",
        flexible,
        1,
        || vec!["1".into(), "3600".into()],
    ));
    let limits = load(
        &mut c,
        include_str!("memory/limits_acquire_moving_window.lua"),
    )
    .await;
    cases.push(peer("Python limits moving window", limits, 1, || {
        vec![
            format!("{:.6}", unix().as_secs_f64()),
            "1000".into(),
            "3600".into(),
            "1".into(),
        ]
    }));
    // envoyproxy/ratelimit's fixed window, which no script decides: per descriptor, `INCRBY`
    // of the window's counter by the hits and `EXPIRE` by the unit, pipelined
    // (src/redis/fixed_cache_impl.go), on its key `domain_key_value_windowstart`; whether
    // the hit is over the limit is read from the count afterwards, by the service.
    let window_start = unix().as_secs() / 3600 * 3600;
    cases.push(Case {
        label: "envoyproxy/ratelimit fixed window (INCRBY + EXPIRE)".to_owned(),
        command: "INCRBY",
        name: None,
        per_command: 1,
        decision: Box::new(move |i, keys, argv| {
            keys.push(format!("{}_{window_start}", key(i)));
            argv.push("1".to_owned());
        }),
        batch: false,
        then_expire: Some(3600),
    });
    if let Some(path) = value_of("--redis-rate") {
        let text = std::fs::read_to_string(&path).unwrap();
        let sha = load(&mut c, &text).await;
        cases.push(peer("go-redis/redis_rate allowN (GCRA)", sha, 1, || {
            vec!["1000".into(), "1000".into(), "3600".into(), "1".into()]
        }));
    }
    // The probes: parts of a token-bucket decision.
    for (probe, text) in [
        ("empty (return 1)", "return 1".to_owned()),
        (
            "time_only",
            include_str!("lua-costs/time_only.lua").to_owned(),
        ),
        (
            "time_and_7_closures",
            include_str!("lua-costs/time_and_7_closures.lua").to_owned(),
        ),
        ("get_set", include_str!("lua-costs/get_set.lua").to_owned()),
        (
            "lean_bucket",
            include_str!("lua-costs/lean_bucket.lua").to_owned(),
        ),
    ] {
        let sha = load(&mut c, &text).await;
        let args = vec![1, 1, 1000, 1];
        let mut case = ours("token_bucket", "EVALSHA", &sha, args);
        case.label = format!("probe: {probe}");
        cases.push(case);
    }

    // `--only <text>`: the cases whose label holds it (a focused comparison, more rounds).
    // Several texts, separated by `|`: the cases whose label holds any.
    if let Some(only) = value_of("--only") {
        cases.retain(|c| only.split('|').any(|o| c.label.contains(o)));
    }
    let version = info(&mut c, "server")
        .await
        .lines()
        .find(|l| l.starts_with("redis_version:"))
        .unwrap_or("")
        .trim()
        .to_owned();
    if let Some(cg) = &cg {
        println!(
            "Redis instructions per decision (whole server, callgrind), median [min, max] of \
             {rounds} windows of {CALLGRIND_DECISIONS} decisions on {KEYS} buckets; {version}"
        );
        println!("{:<58} {:>30}", "script", "instructions");
        let mut results: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
        for _ in 0..rounds {
            for (case, out) in cases.iter().zip(&mut results) {
                out.push(instructions(&mut c, cg, case).await);
            }
        }
        for (case, out) in cases.iter().zip(&mut results) {
            out.sort_by(f64::total_cmp);
            println!(
                "{:<58} {:>30}",
                case.label,
                format!(
                    "{:.0} [{:.0}, {:.0}]",
                    out[out.len() / 2],
                    out[0],
                    out[out.len() - 1]
                )
            );
        }
        return;
    }
    println!(
        "Redis µs per decision, median [min, max] of {rounds} rounds of {DECISIONS} decisions \
         on {KEYS} buckets; {version}"
    );
    println!("{:<58} {:>22} {:>22}", "script", "script µs", "cpu µs");
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cases.len()];
    // Rounds interleaved, so that a slow moment of the machine falls on every case alike.
    for _ in 0..rounds {
        for (case, out) in cases.iter().zip(&mut results) {
            out.push(round(&mut c, case).await);
        }
    }
    for (case, out) in cases.iter().zip(&results) {
        let summary = |f: fn(&(f64, f64)) -> f64| {
            let mut v: Vec<f64> = out.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            format!("{:.2} [{:.2}, {:.2}]", v[v.len() / 2], v[0], v[v.len() - 1])
        };
        println!(
            "{:<58} {:>22} {:>22}",
            case.label,
            summary(|r| r.0),
            summary(|r| r.1)
        );
    }
}
