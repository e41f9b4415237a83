//! One process of the multi-process accuracy test (`tests/accuracy.rs`): `--tasks` tasks call
//! `RateLimiter::check` on one key of a Redis store, as fast as they can, for `--duration-ms`,
//! then the process prints one `HAMMER admitted=.. denied=.. ...` line (see
//! `testkit::hammer::HammerReport`).
//!
//! ```text
//! hammer --url redis://127.0.0.1:PORT --key KEY --replenish 400 --burst 100 --unit second \
//!        --tasks 16 --duration-ms 5000 [--prefix hammer] [--ready LIST] [--start LIST] \
//!        [--start-timeout-s 30] [--policy deny|fallback|allow] [--deadline-ms 5000]
//! ```
//!
//! By default the limiter fails closed (`FailurePolicy::Deny`, 5 s deadline): a slow or failing
//! Redis can only lower the admitted count, never raise it. `--policy fallback --deadline-ms 50`
//! gives it the defaults users get, under which a call the failure policy decides may be
//! admitted too. Every decision the store did not take is counted as `nonstore`; the process
//! also reports how long it started no call (`paused_us`, see `HammerReport`). With `--start`, the process pushes its pid to the `--ready` list and
//! waits (`BLPOP`) for an element on the `--start` list, so that several processes start
//! together. Around its calls it reads the server's `TIME` on a separate connection: before
//! the first call (`t_first_us`) and, in each task, after its last call returned (the latest
//! of these is `t_last_us`, the earliest `t_stop_us`). It also reports its own wall clock
//! (`local_unix_us`), so a test can prove that a clock shift (`faketime`) took effect.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratelimit_core::{FailurePolicy, Limit, RateLimiter, Source, Unit};
use testkit::hammer::HammerReport;

/// A hard cap on the calls of one task, whatever the duration.
const MAX_CALLS_PER_TASK: u64 = 50_000_000;
/// The longest run accepted.
const MAX_DURATION: Duration = Duration::from_secs(600);

struct Args {
    url: String,
    key: String,
    prefix: String,
    limit: Limit,
    tasks: usize,
    duration: Duration,
    ready: Option<String>,
    start: Option<String>,
    start_timeout_s: u64,
    policy: FailurePolicy,
    deadline: Duration,
}

fn parse_args() -> Result<Args, String> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut map = HashMap::new();
    let mut it = raw.into_iter();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument `{flag}`"))?
            .to_owned();
        let value = it
            .next()
            .ok_or_else(|| format!("`--{name}` needs a value"))?;
        if map.insert(name.clone(), value).is_some() {
            return Err(format!("`--{name}` given twice"));
        }
    }
    let mut take = |name: &str| map.remove(name);
    fn num<T: FromStr>(name: &str, v: Option<String>) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let v = v.ok_or_else(|| format!("missing `--{name}`"))?;
        v.parse().map_err(|e| format!("`--{name} {v}`: {e}"))
    }
    let url = take("url").ok_or("missing `--url`")?;
    // Traffic only to a loopback server the caller started, never the default one.
    let port = url
        .strip_prefix("redis://127.0.0.1:")
        .ok_or_else(|| format!("`--url {url}`: only redis://127.0.0.1:PORT is accepted"))?;
    if port.trim_end_matches('/') == "6379" {
        return Err("refusing to use port 6379: start a server of your own".to_owned());
    }
    let key = take("key").ok_or("missing `--key`")?;
    let prefix = take("prefix").unwrap_or_else(|| "hammer".to_owned());
    let replenish: u32 = num("replenish", take("replenish"))?;
    let burst: u32 = num("burst", take("burst"))?;
    let unit: Unit = take("unit")
        .unwrap_or_else(|| "second".to_owned())
        .parse()
        .map_err(|e| format!("`--unit`: {e}"))?;
    let limit = Limit::try_new(replenish, burst, unit).map_err(|e| e.to_string())?;
    let tasks: usize = num("tasks", take("tasks"))?;
    if !(1..=1024).contains(&tasks) {
        return Err(format!("`--tasks {tasks}`: expected 1 to 1024"));
    }
    let duration = Duration::from_millis(num("duration-ms", take("duration-ms"))?);
    if duration > MAX_DURATION {
        return Err(format!("`--duration-ms`: at most {MAX_DURATION:?}"));
    }
    let ready = take("ready");
    let start = take("start");
    let start_timeout_s = match take("start-timeout-s") {
        Some(v) => num("start-timeout-s", Some(v))?,
        None => 30,
    };
    let policy: FailurePolicy = take("policy")
        .unwrap_or_else(|| "deny".to_owned())
        .parse()
        .map_err(|e| format!("`--policy`: {e}"))?;
    let deadline = Duration::from_millis(match take("deadline-ms") {
        Some(v) => num("deadline-ms", Some(v))?,
        None => 5_000,
    });
    if let Some(unknown) = map.keys().next() {
        return Err(format!("unknown option `--{unknown}`"));
    }
    Ok(Args {
        url,
        key,
        prefix,
        limit,
        tasks,
        duration,
        ready,
        start,
        start_timeout_s,
        policy,
        deadline,
    })
}

/// How long the process had no call in flight, in all: the bucket can fill up and lose tokens
/// only while no process has one (a process the machine does not run starts none). Counted
/// from a call's end to the next call's start, whichever tasks made them.
struct Pauses {
    origin: Instant,
    /// Calls in flight, when the last one ended (µs since `origin`), and the time paused.
    state: std::sync::Mutex<(u64, u64, u64)>,
}

impl Pauses {
    fn new() -> Pauses {
        Pauses {
            origin: Instant::now(),
            state: std::sync::Mutex::new((0, 0, 0)),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, (u64, u64, u64)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A call starts now.
    fn start(&self) {
        let now = self.now_us();
        let mut s = self.state();
        if s.0 == 0 {
            s.2 += now.saturating_sub(s.1);
        }
        s.0 += 1;
    }

    /// A call ended now.
    fn end(&self) {
        let now = self.now_us();
        let mut s = self.state();
        s.0 = s.0.saturating_sub(1);
        if s.0 == 0 {
            s.1 = now;
        }
    }

    /// The time paused, up to now: the tasks have ended.
    fn total(&self) -> u64 {
        let now = self.now_us();
        let s = self.state();
        s.2 + if s.0 == 0 { now.saturating_sub(s.1) } else { 0 }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    admitted: u64,
    denied: u64,
    errors: u64,
    nonstore: u64,
}

async fn server_time_us(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64, String> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(conn)
        .await
        .map_err(|e| format!("TIME: {e}"))?;
    Ok(secs * 1_000_000 + micros)
}

async fn run(args: Args) -> Result<HammerReport, String> {
    let limiter = RateLimiter::builder()
        .redis(args.url.as_str())
        .prefix(args.prefix.as_str())
        .failure_policy(args.policy)
        .deadline(Some(args.deadline))
        .build()
        .await
        .map_err(|e| format!("build the limiter: {e}"))?;
    let client = redis::Client::open(args.url.as_str()).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect: {e}"))?;

    if let Some(start) = &args.start {
        if let Some(ready) = &args.ready {
            let _len: i64 = redis::cmd("RPUSH")
                .arg(ready)
                .arg(std::process::id())
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("RPUSH {ready}: {e}"))?;
        }
        // The blocking pop needs a reply timeout longer than its own.
        let mut waiter = client
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Some(Duration::from_secs(args.start_timeout_s + 5))),
            )
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let popped: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(start)
            .arg(args.start_timeout_s)
            .query_async(&mut waiter)
            .await
            .map_err(|e| format!("BLPOP {start}: {e}"))?;
        if popped.is_none() {
            return Err(format!(
                "no start signal on `{start}` within {} s",
                args.start_timeout_s
            ));
        }
    }

    let t_first_us = server_time_us(&mut conn).await?;
    let pauses = Arc::new(Pauses::new());
    let deadline = Instant::now() + args.duration;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..args.tasks {
        let limiter = limiter.clone();
        let key = args.key.clone();
        let limit = args.limit;
        let mut time_conn = conn.clone();
        let pauses = Arc::clone(&pauses);
        set.spawn(async move {
            let mut c = Counts::default();
            let mut calls = 0u64;
            while calls < MAX_CALLS_PER_TASK && Instant::now() < deadline {
                calls += 1;
                pauses.start();
                let decided = limiter.check(&key, &limit).await;
                pauses.end();
                match decided {
                    Ok(d) => {
                        // The deny cache only repeats refusals Redis made: it counts as Redis.
                        if !matches!(d.source, Source::Store | Source::DenyCache) {
                            c.nonstore += 1;
                        }
                        if d.allowed {
                            c.admitted += 1;
                        } else {
                            c.denied += 1;
                        }
                    }
                    Err(e) => {
                        c.errors += 1;
                        if c.errors <= 3 {
                            eprintln!("hammer: check failed: {e}");
                        }
                    }
                }
            }
            // The server's clock right after this task's last call returned: the tightest
            // bracket that still follows every decision of the task.
            let t_last_us = server_time_us(&mut time_conn).await;
            (c, t_last_us)
        });
    }
    let mut total = Counts::default();
    let mut t_last_us = t_first_us;
    let mut t_stop_us = u64::MAX;
    while let Some(joined) = set.join_next().await {
        let (c, t_last) = joined.map_err(|e| format!("a task failed: {e}"))?;
        let t_last = t_last?;
        t_last_us = t_last_us.max(t_last);
        t_stop_us = t_stop_us.min(t_last);
        total.admitted += c.admitted;
        total.denied += c.denied;
        total.errors += c.errors;
        total.nonstore += c.nonstore;
    }
    let local = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| format!("local clock before 1970: {e}"))?;
    Ok(HammerReport {
        admitted: total.admitted,
        denied: total.denied,
        errors: total.errors,
        nonstore: total.nonstore,
        t_first_us,
        t_last_us,
        t_stop_us,
        local_unix_us: u64::try_from(local.as_micros()).map_err(|e| e.to_string())?,
        paused_us: pauses.total(),
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("hammer: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hammer: {e}");
            ExitCode::FAILURE
        }
    }
}
