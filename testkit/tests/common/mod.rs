//! Shared helpers of the fault tests: a bounded load of real `check` calls, and what it saw.
#![allow(dead_code, clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratelimit_core::{FailurePolicy, Limit, RateLimiter, Source};

/// The wait for a limiter to decide on Redis again; not every test binary waits for it.
#[allow(unused_imports)]
pub(crate) use testkit::outage::until_store;

/// Hard cap on how long any load runs, whatever the test does.
pub(crate) const LOAD_CAP: Duration = Duration::from_secs(40);
/// Hard cap on the calls of one load task.
pub(crate) const MAX_CALLS_PER_TASK: usize = 200_000;

/// The per-call deadline of the limiters in tests of faults other than slowness: far above the
/// scheduling noise of a busy two-core test machine (where the default 50 ms can be missed
/// now and then), so that every decision not taken by Redis is due to the fault itself. The
/// default deadline is exercised by the pause test.
pub(crate) const TOLERANT_DEADLINE: Duration = Duration::from_millis(500);

/// One call of a load: when it ran and what it returned.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// The task that made it.
    pub(crate) task: usize,
    /// Index of the key in the load's key list.
    pub(crate) key: usize,
    /// Just before the call.
    pub(crate) start: Instant,
    /// Just after it returned.
    pub(crate) end: Instant,
    /// `(allowed, source)`, or the error's text.
    pub(crate) outcome: Result<(bool, Source), String>,
}

impl Call {
    /// How long the call took.
    pub(crate) fn latency(&self) -> Duration {
        self.end - self.start
    }

    /// The decision's source, if the call returned one.
    pub(crate) fn source(&self) -> Option<Source> {
        self.outcome.as_ref().ok().map(|o| o.1)
    }

    /// Whether Redis decided the call: the store itself, or the local deny cache repeating a
    /// refusal of the store's (it only ever refuses what the store would refuse).
    pub(crate) fn by_redis(&self) -> bool {
        matches!(self.source(), Some(Source::Store | Source::DenyCache))
    }

    /// Whether the call was admitted.
    pub(crate) fn allowed(&self) -> bool {
        self.outcome.as_ref().is_ok_and(|o| o.0)
    }
}

/// Tasks calling `check` in a loop until stopped (or capped).
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Vec<Call>>>,
}

impl Load {
    /// Starts `tasks` tasks; task `t` calls `check(keys[(t + i) % keys.len()])` then sleeps
    /// `pause`, until [`stop`](Load::stop), [`MAX_CALLS_PER_TASK`] calls or [`LOAD_CAP`].
    pub(crate) fn start(
        limiter: &RateLimiter,
        keys: Vec<String>,
        limit: Limit,
        tasks: usize,
        pause: Duration,
    ) -> Load {
        assert!(!keys.is_empty());
        let stop = Arc::new(AtomicBool::new(false));
        let keys = Arc::new(keys);
        let handles = (0..tasks)
            .map(|task| {
                let limiter = limiter.clone();
                let keys = Arc::clone(&keys);
                let stop = Arc::clone(&stop);
                tokio::spawn(async move {
                    let began = Instant::now();
                    let mut calls = Vec::new();
                    for i in 0..MAX_CALLS_PER_TASK {
                        if stop.load(Ordering::Relaxed) || began.elapsed() > LOAD_CAP {
                            break;
                        }
                        let key = (task + i) % keys.len();
                        let start = Instant::now();
                        let outcome = limiter
                            .check(&keys[key], &limit)
                            .await
                            .map(|d| (d.allowed, d.source))
                            .map_err(|e| e.to_string());
                        calls.push(Call {
                            task,
                            key,
                            start,
                            end: Instant::now(),
                            outcome,
                        });
                        if !pause.is_zero() {
                            tokio::time::sleep(pause).await;
                        }
                    }
                    calls
                })
            })
            .collect();
        Load { stop, handles }
    }

    /// Whether every task has ended by itself (at its cap), so that waiting for more calls
    /// would wait for nothing.
    pub(crate) fn finished(&self) -> bool {
        self.handles
            .iter()
            .all(tokio::task::JoinHandle::is_finished)
    }

    /// Stops the tasks and returns every call, in order of completion.
    pub(crate) async fn stop(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for h in self.handles {
            all.extend(h.await.unwrap());
        }
        all.sort_by_key(|c| c.end);
        all
    }
}

/// Calls that returned an error (none may).
pub(crate) fn errors(calls: &[Call]) -> Vec<&Call> {
    calls.iter().filter(|c| c.outcome.is_err()).collect()
}

/// Asserts that no call returned an error, showing the first few if some did.
pub(crate) fn assert_no_errors(calls: &[Call]) {
    let errs = errors(calls);
    assert!(
        errs.is_empty(),
        "{} of {} calls returned an error, e.g. {:?}",
        errs.len(),
        calls.len(),
        &errs[..errs.len().min(3)]
    );
}

/// The source a failure policy promises for the calls it decides.
pub(crate) fn policy_source(policy: FailurePolicy) -> Source {
    match policy {
        FailurePolicy::Fallback => Source::Fallback,
        FailurePolicy::Allow => Source::FailOpen,
        FailurePolicy::Deny => Source::FailClosed,
        _ => unreachable!("a new policy"),
    }
}

/// A limiter on `url` that fails closed and waits long for Redis: any decision not taken by
/// the store shows up as `Source::FailClosed` (so tests can assert there is none) and can
/// only lower an admitted count.
pub(crate) async fn strict_limiter(url: &str, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .redis(url)
        .prefix(prefix)
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(Duration::from_secs(5)))
        .circuit_cooldown(None)
        .build()
        .await
        .unwrap()
}

/// Milliseconds, for reports.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The limiter's own log lines, captured (`testkit::logs`); not every test binary reads them.
#[allow(unused_imports)]
pub(crate) use testkit::logs;

/// A generous bound for what should take milliseconds, so that a busy machine never fails a
/// test that is right: the one of every wait (`testkit::wait`).
pub(crate) const EVENTUALLY: Duration = testkit::wait::PATIENCE;

/// Another instance of a fleet: a `fleet_member` process, killed when dropped; its stdout
/// lines arrive on a channel.
pub(crate) struct OtherInstance {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Its commands, when it takes them (`--slots`).
    stdin: Option<std::process::ChildStdin>,
}

impl OtherInstance {
    /// Starts one holding a limiter on `url` under `prefix` (and with `key`, see the program).
    pub(crate) fn start(url: &str, prefix: &str, key: Option<&str>) -> OtherInstance {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet_member"));
        cmd.args(["--url", url, "--prefix", prefix, "--hold-ms", "60000"]);
        if let Some(key) = key {
            cmd.args(["--key", key]);
        }
        OtherInstance::spawn(cmd)
    }

    /// Starts one that holds slots of the concurrency limit `max` on `key` as it is told
    /// ([`say`](Self::say)).
    #[allow(dead_code)]
    pub(crate) fn start_slots(url: &str, prefix: &str, key: &str, max: u32) -> OtherInstance {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet_member"));
        let max = max.to_string();
        cmd.args(["--url", url, "--prefix", prefix, "--hold-ms", "60000"])
            .args(["--slots", key, "--max", &max])
            .stdin(Stdio::piped());
        OtherInstance::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> OtherInstance {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        OtherInstance {
            child,
            lines,
            stdin,
        }
    }

    /// Sends it `command` and returns its answer, which starts with `tag`.
    #[allow(dead_code)]
    pub(crate) fn say(&mut self, command: &str, tag: &str) -> String {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().expect("started with start_slots");
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
        self.expect(tag)
    }

    /// The next line starting with `tag`.
    pub(crate) fn expect(&self, tag: &str) -> String {
        let line = self
            .lines
            .recv_timeout(EVENTUALLY + EVENTUALLY)
            .unwrap_or_else(|e| panic!("no `{tag}` from fleet_member: {e}"));
        assert!(line.starts_with(tag), "expected `{tag}`, got `{line}`");
        line
    }
}

impl Drop for OtherInstance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Another version of this crate's function library, as a rolling deploy meets it on a
/// server: this version's library with one more line, named by its hash as the crate names
/// it (what a version whose scripts differ in any byte is).
pub(crate) struct OtherVersion {
    /// The first 16 hex digits of the SHA-1 of its code.
    pub(crate) hash: String,
    /// The text `FUNCTION LOAD` takes.
    pub(crate) text: String,
}

impl OtherVersion {
    pub(crate) fn new() -> OtherVersion {
        let ours = ratelimit_core::tools::scripts::library();
        let ours_hash = &ours.name()["redis_ratelimit_".len()..];
        // The library's code without its first two lines (its name and its function prefix),
        // with one more line at the end.
        let body = format!(
            "{}\n-- an older version\n",
            ours.text().split_once('\n').unwrap().1
        )
        .split_once('\n')
        .unwrap()
        .1
        .to_owned();
        let hash = redis::Script::new(&body).get_hash()[..16].to_owned();
        assert_ne!(hash, ours_hash);
        let text =
            format!("#!lua name=redis_ratelimit_{hash}\nlocal PREFIX = 'rl_{hash}_'\n{body}");
        OtherVersion { hash, text }
    }

    /// Loads it on the server of `con` (`FUNCTION LOAD REPLACE`).
    pub(crate) async fn load(&self, con: &mut redis::aio::MultiplexedConnection) {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&self.text)
            .query_async(con)
            .await
            .unwrap();
    }

    /// Whether the server of `con` holds it.
    pub(crate) async fn loaded(&self, con: &mut redis::aio::MultiplexedConnection) -> bool {
        has_library(con, &format!("redis_ratelimit_{}", self.hash)).await
    }

    /// One call of its token bucket on `bucket` (the key as the limiter names it) on the server
    /// of `con`: whether it admitted.
    pub(crate) async fn check(
        &self,
        con: &mut redis::aio::MultiplexedConnection,
        bucket: &str,
        limit: &Limit,
    ) -> bool {
        use ratelimit_core::tools::algorithms::{OfLimit as _, token_bucket};
        let args = token_bucket::args(token_bucket::Params::of(limit), 1);
        let reply: Vec<u64> = redis::cmd("FCALL")
            .arg(format!("rl_{}_token_bucket", self.hash))
            .arg(1)
            .arg(bucket)
            .arg(&args[..])
            .query_async(con)
            .await
            .unwrap();
        reply[0] == 1
    }

    /// One bucket of `limit`'s burst, called 16 times in turn by this version (on the server of
    /// `con`, which serves `key`'s bucket) and by `limiter`; then once more by this version.
    /// Returns what each admitted, and whether that last call was refused.
    pub(crate) async fn take_turns(
        &self,
        con: &mut redis::aio::MultiplexedConnection,
        limiter: &RateLimiter,
        key: &str,
        limit: &Limit,
    ) -> ([u32; 2], bool) {
        let bucket = limiter.bucket_key(key);
        let mut admitted = [0u32; 2];
        for i in 0..16 {
            if i % 2 == 0 {
                admitted[0] += u32::from(self.check(con, &bucket, limit).await);
            } else {
                let d = limiter.check(key, limit).await.unwrap();
                assert_eq!(d.source, Source::Store, "{key}");
                admitted[1] += u32::from(d.allowed);
            }
        }
        (admitted, !self.check(con, &bucket, limit).await)
    }
}

/// The rules of the least ACL in docs/operations.md (see [`testkit::acl::least_acl`]).
pub(crate) use testkit::acl::least_acl;

/// Gives the node of `con` the user `ratelimit` (password `pw`) with [`least_acl`].
pub(crate) async fn set_least_acl(con: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ratelimit")
        .arg(least_acl())
        .query_async(con)
        .await
        .unwrap();
}

/// A limiter as that user on `url` (which names it), under the prefix `app`, with no deny
/// cache: it decides by `FCALL`.
pub(crate) async fn least_acl_limiter(url: &str) -> RateLimiter {
    let limiter = RateLimiter::builder()
        .redis(url)
        .prefix("app")
        .deny_cache(0)
        .build()
        .await
        .unwrap();
    let debug = format!("{limiter:?}");
    assert!(!debug.contains("EVALSHA"), "{debug}");
    limiter
}

/// Everything a limiter does on Redis, once each, under the prefix `app`: every algorithm,
/// several limits at once, a peek, a concurrency limit entered and left, a reset. Each must be
/// Redis's decision; returns how many calls it made.
pub(crate) async fn everything_once(limiter: &RateLimiter) -> usize {
    use ratelimit_core::{Algorithm, Refill};
    let limits = [
        Limit::per_hour(1).burst(2),
        Limit::per_hour(2).algorithm(Algorithm::FixedWindow),
        Limit::per_hour(2).algorithm(Algorithm::SlidingWindow),
        Limit::per_hour(2).algorithm(Algorithm::SlidingLog),
        Limit::per_hour(2).refill(Refill::Interval),
    ];
    let mut calls = 0;
    for (i, limit) in limits.iter().enumerate() {
        let key = format!("every{i}");
        for allowed in [true, true, false] {
            let d = limiter.check(&key, limit).await.unwrap();
            assert_eq!((d.allowed, d.source), (allowed, Source::Store), "{limit}");
            calls += 1;
        }
        let d = limiter.peek(&key, limit).await.unwrap();
        assert_eq!((d.allowed, d.source), (false, Source::Store), "{limit}");
        calls += 1;
    }
    let d = limiter
        .check_all(&[("all0", &limits[0], 1), ("all1", &limits[1], 1)])
        .await;
    let d = d.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::Store));
    calls += 1;
    let one = Limit::concurrent(1);
    let entered = limiter.enter("slot", &one).await.unwrap();
    assert_eq!(
        (entered.decision.allowed, entered.decision.source),
        (true, Source::Store)
    );
    let refused = limiter.enter("slot", &one).await.unwrap();
    assert!(!refused.decision.allowed);
    entered
        .slot
        .expect("an admitted entry holds a slot")
        .release()
        .await
        .unwrap();
    let again = limiter.enter("slot", &one).await.unwrap();
    assert!(again.decision.allowed, "the released slot is free");
    drop(again);
    calls += 3;
    // A refund: the token bucket's two tokens back, so it admits again.
    limiter.refund("every0", &limits[0], 2).await.unwrap();
    let d = limiter.check("every0", &limits[0]).await.unwrap();
    assert_eq!(
        (d.allowed, d.source),
        (true, Source::Store),
        "after the refund"
    );
    calls += 2;
    limiter.reset("every0").await.unwrap();
    let d = limiter.check("every0", &limits[0]).await.unwrap();
    assert_eq!(
        (d.allowed, d.source),
        (true, Source::Store),
        "after the reset"
    );
    calls + 2
}

/// `ACL LOG` of the node of `con`: one line per entry (what was refused, and where).
pub(crate) async fn acl_log(con: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query_async(con).await.unwrap();
    testkit::acl::log_entries(&log)
}

/// Whether the node of `con` holds the function library called `name`.
pub(crate) async fn has_library(con: &mut redis::aio::MultiplexedConnection, name: &str) -> bool {
    let found: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(name)
        .query_async(con)
        .await
        .unwrap();
    !found.is_empty()
}

/// Whether the node of `con` holds this version's function library.
pub(crate) async fn holds_library(con: &mut redis::aio::MultiplexedConnection) -> bool {
    has_library(con, ratelimit_core::tools::scripts::library().name()).await
}

/// `field` of `line` in `INFO <section>` of the node of `con` (0 when absent).
pub(crate) async fn info_field(
    con: &mut redis::aio::MultiplexedConnection,
    section: &str,
    line: &str,
    field: &str,
) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .unwrap();
    testkit::info_number(&info, line, Some(field)).unwrap_or(0)
}

/// Waits until the master of `con`'s one replica has applied everything written so far
/// (`WAIT 1`, at most 5 s): what the master holds, the replica holds.
pub(crate) async fn replicated(con: &mut redis::aio::MultiplexedConnection) {
    let acked: u32 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(con)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the writes");
}

/// Holds every client of `server` for `ms` milliseconds (`CLIENT PAUSE .. ALL`): the limiter's
/// calls then miss their deadline, and the failure policy decides.
pub(crate) async fn pause(server: &testkit::RedisServer, ms: u64) {
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
}
