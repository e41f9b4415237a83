//! A limit that counts only some outcomes (`count = ..`) under parallel calls: the tokens a
//! call in flight holds may come back when its outcome is known, so a call refused while this
//! instance's calls hold some of the bucket waits for them to end and is decided again.
//! Parallel calls that all succeed under "4 failures an hour" are all admitted; parallel
//! calls that all fail admit no more than the 4, on a handler's limit and a shared use; a
//! refusal while calls still hold tokens says they may come back soon, not in 15 minutes.
//! On both stores, each test in a process of its own (nextest) with the global limiter.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures_util::future::join_all;
use redis_ratelimit::{RateLimited, enable_redis_rate_limit, rate_limit};
use testkit::RedisServer;
use tokio::sync::watch;

mod support;

/// What a counted call fails with.
#[derive(Debug, PartialEq)]
enum Failure {
    Failed,
    Limited(Duration),
}

impl From<RateLimited> for Failure {
    fn from(refused: RateLimited) -> Self {
        Failure::Limited(refused.retry_after())
    }
}

/// Calls that were admitted and run (they then hold their tokens until `go`).
/// How many calls have been admitted and run, told to whoever waits for them.
static RUNNING: std::sync::LazyLock<watch::Sender<usize>> =
    std::sync::LazyLock::new(|| watch::Sender::new(0));

/// Waits until `n` more calls than `before` run: the event of their admission (the bound only
/// stops a hang).
async fn until_running(before: usize, n: usize) {
    let mut running = RUNNING.subscribe();
    let admitted = running.wait_for(|running| *running >= before + n);
    tokio::time::timeout(Duration::from_secs(60), admitted)
        .await
        .unwrap_or_else(|_| panic!("{n} calls were never admitted"))
        .unwrap();
}

/// Four failures an hour; a call runs until `go` says so, and fails when asked to.
#[rate_limit(replenish = 4, unit = "hour", key = "everyone", count = Result::is_err)]
async fn login(fail: bool, mut go: watch::Receiver<bool>) -> Result<(), Failure> {
    RUNNING.send_modify(|running| *running += 1);
    go.wait_for(|go| *go).await.unwrap();
    if fail { Err(Failure::Failed) } else { Ok(()) }
}

/// The same rule, declared by a function that is not called, and drawn from by another.
#[allow(dead_code)]
#[rate_limit(replenish = 4, unit = "hour", key = "everyone", name = "failures")]
async fn declared() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(shared = "failures", key = "everyone", count = Result::is_err)]
async fn shared_login(fail: bool, mut go: watch::Receiver<bool>) -> Result<(), Failure> {
    RUNNING.send_modify(|running| *running += 1);
    go.wait_for(|go| *go).await.unwrap();
    if fail { Err(Failure::Failed) } else { Ok(()) }
}

async fn enable(server: Option<&RedisServer>) {
    match server {
        Some(server) => enable_redis_rate_limit!(url = server.url(), prefix = "in-flight")
            .await
            .unwrap(),
        None => enable_redis_rate_limit!(url = "memory://", prefix = "in-flight")
            .await
            .unwrap(),
    };
}

/// Runs 20 calls at once, each `fail`ing or not, released together once they have all been
/// made (the 4 admitted ones then hold the bucket's tokens, the 16 others are refused or
/// waiting); what each returned.
async fn twenty<F, Fut>(call: F, fail: bool) -> Vec<Result<(), Failure>>
where
    F: Fn(bool, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = Result<(), Failure>> + Send + 'static,
{
    let (go, rx) = watch::channel(false);
    let before = *RUNNING.borrow();
    let calls: Vec<_> = (0..20)
        .map(|_| tokio::spawn(call(fail, rx.clone())))
        .collect();
    // The bucket's 4 tokens are held by calls in flight before any ends.
    until_running(before, 4).await;
    go.send(true).unwrap();
    join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

fn admitted(outcomes: &[Result<(), Failure>]) -> usize {
    outcomes
        .iter()
        .filter(|o| !matches!(o, Err(Failure::Limited(_))))
        .count()
}

async fn parallel_successes_are_all_admitted(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let outcomes = twenty(login, false).await;
    assert_eq!(admitted(&outcomes), 20, "{outcomes:?}");
    let outcomes = twenty(shared_login, false).await;
    assert_eq!(admitted(&outcomes), 20, "{outcomes:?}");
}

async fn parallel_failures_admit_no_more_than_the_limit(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let outcomes = twenty(login, true).await;
    assert_eq!(admitted(&outcomes), 4, "{outcomes:?}");
    // The tokens are spent: the refusals say so honestly (about 15 minutes each).
    assert!(
        outcomes
            .iter()
            .all(|o| !matches!(o, Err(Failure::Limited(d)) if *d < Duration::from_secs(600))),
        "{outcomes:?}"
    );
    let outcomes = twenty(shared_login, true).await;
    assert_eq!(admitted(&outcomes), 4, "{outcomes:?}");
}

/// A call that holds the last tokens longer than a refused call waits: the refusal says they
/// may come back soon, not when the bucket refills.
async fn a_refusal_while_tokens_are_held_says_they_may_come_back(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let (go, rx) = watch::channel(false);
    let before = *RUNNING.borrow();
    let holders: Vec<_> = (0..4)
        .map(|_| tokio::spawn(login(false, rx.clone())))
        .collect();
    until_running(before, 4).await;
    let (_never, held) = watch::channel(true);
    let refused = login(false, held).await;
    let Err(Failure::Limited(retry)) = refused else {
        panic!("admitted while the 4 tokens were held: {refused:?}");
    };
    assert!(
        retry <= Duration::from_secs(1),
        "the held tokens may come back at once, not in {retry:?}"
    );
    go.send(true).unwrap();
    for h in holders {
        h.await.unwrap().unwrap();
    }
    // Back: the bucket is full again.
    let (_go, rx) = watch::channel(true);
    login(false, rx).await.unwrap();
}

support::on_memory_and_redis!(
    parallel_successes_are_all_admitted,
    parallel_failures_admit_no_more_than_the_limit,
    a_refusal_while_tokens_are_held_says_they_may_come_back
);
