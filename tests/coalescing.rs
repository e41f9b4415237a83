//! Coalesced decisions on a real Redis: concurrent calls leave in batches (one `batch.lua`
//! call decides many), and each is decided exactly as if alone: no over-admission, several
//! limits all or nothing, a caller that gave up takes nothing, and one call's error is its
//! own. Every test starts its own redis-server.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use redis_ratelimit::{Error, FailurePolicy, Limit, RateLimiter, Source, store::RedisStore};
use testkit::RedisServer;

async fn limiter(server: &RedisServer, batch_limit: usize) -> RateLimiter {
    limiter_at(&server.url(), batch_limit).await
}

async fn limiter_at(url: &str, batch_limit: usize) -> RateLimiter {
    let store = RedisStore::connect(url)
        .await
        .unwrap()
        .batch_limit(batch_limit);
    RateLimiter::builder()
        .redis_store(store)
        .prefix("co")
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(Duration::from_secs(10)))
        // No heartbeat: the tests count script calls.
        .instance(false)
        .build()
        .await
        .unwrap()
}

/// A limiter on `store` (a clone: the test reads its batch sizes), without the heartbeat, whose
/// script calls would be counted too.
async fn counting(store: &RedisStore, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .redis_store(store.clone())
        .prefix(prefix)
        .deadline(Some(Duration::from_secs(10)))
        .instance(false)
        .build()
        .await
        .unwrap()
}

/// `n` calls on one key, started together (so all but the first few queue).
async fn flood(limiter: &RateLimiter, key: &str, limit: &Limit, n: usize) -> usize {
    let calls = (0..n).map(|_| limiter.check(key, limit));
    let decisions = futures_util::future::join_all(calls).await;
    decisions
        .into_iter()
        .map(|d| {
            let d = d.unwrap();
            assert_eq!(d.source, Source::Store, "{d:?}");
            usize::from(d.allowed)
        })
        .sum()
}

#[tokio::test]
async fn concurrent_calls_leave_in_batches_and_never_over_admit() {
    let server = RedisServer::start();
    let limiter = limiter(&server, 64).await;
    // Burst 50, a token an hour: of 200 concurrent calls exactly 50 go in.
    let limit = Limit::per_hour(1).burst(50);
    let before = server.script_calls().await;
    assert_eq!(flood(&limiter, "k", &limit, 200).await, 50);
    let scripts = server.script_calls().await - before;
    // 16 alone (the places in flight), then the others in batches of at most 64 (join_all
    // starts them 32 at a time, so batches may be smaller).
    assert!(scripts <= 50, "200 calls took {scripts} script calls");
    // Every bucket of a batch is its own: 100 keys of burst 1, each asked twice at once.
    let one = Limit::per_hour(1).burst(1);
    let keys: Vec<String> = (0..100).map(|i| format!("u{i}")).collect();
    let calls = keys.iter().chain(&keys).map(|k| limiter.check(k, &one));
    let admitted = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .filter(|d| d.as_ref().unwrap().allowed)
        .count();
    assert_eq!(admitted, 100);
}

#[tokio::test]
async fn a_batch_limit_of_one_sends_every_call_alone() {
    let server = RedisServer::start();
    let limiter = limiter(&server, 1).await;
    let limit = Limit::per_hour(1).burst(50);
    let before = server.script_calls().await;
    assert_eq!(flood(&limiter, "k", &limit, 80).await, 50);
    assert_eq!(server.script_calls().await - before, 80);
}

#[tokio::test]
async fn several_limits_stay_all_or_nothing_inside_a_batch() {
    let server = RedisServer::start();
    let limiter = limiter(&server, 64).await;
    // Every call takes from a shared limit of 10 and from its own bucket of 1.
    let shared = Limit::per_hour(1).burst(10);
    let own = Limit::per_hour(1).burst(1);
    let keys: Vec<String> = (0..60).map(|i| format!("own{i}")).collect();
    let before = server.script_calls().await;
    let sets: Vec<[(&str, &Limit, u32); 2]> = keys
        .iter()
        .map(|k| [("shared", &shared, 1), (k.as_str(), &own, 1)])
        .collect();
    let calls = sets.iter().map(|set| limiter.check_all(set));
    let decisions = futures_util::future::join_all(calls).await;
    assert!(server.script_calls().await - before < 60);
    let mut admitted = 0;
    for (k, d) in keys.iter().zip(decisions) {
        let d = d.unwrap();
        admitted += usize::from(d.allowed);
        // A refused call took nothing from its own bucket (of 1): a call would still go in.
        let untouched = limiter.peek(k, &own).await.unwrap().allowed;
        assert_eq!(untouched, !d.allowed, "{k}: {d:?}");
    }
    assert_eq!(admitted, 10);
}

/// Polls `f` once.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
async fn a_call_dropped_while_queued_takes_nothing() {
    let server = RedisServer::start();
    let limiter = limiter(&server, 64).await;
    let limit = Limit::per_hour(1).burst(100);
    // The first calls take the node's places in flight (16); the last 20 of 40 queue.
    let mut calls: Vec<_> = (0..40)
        .map(|_| Box::pin(limiter.check("k", &limit)))
        .collect();
    for call in &mut calls {
        assert!(poll_once(call).is_pending());
    }
    let queued = calls.split_off(20);
    drop(queued);
    for call in calls {
        assert!(call.await.unwrap().allowed);
    }
    // Let any batch that might have left arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // 20 tokens taken: 80 left.
    assert_eq!(limiter.peek("k", &limit).await.unwrap().remaining, 80);
}

#[tokio::test]
async fn one_calls_error_does_not_fail_its_batch_mates() {
    let server = RedisServer::start();
    // A user that may touch only keys with "good" in them: the bucket of "bad" is denied to
    // it, which fails that call's script (NOPERM) and nothing else.
    let mut con = server.connection().await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~*good*",
            "allchannels",
            "+@all",
        ])
        .query_async(&mut con)
        .await
        .unwrap();
    let url = server.url().replacen("redis://", "redis://app:pw@", 1);
    let limiter = limiter_at(&url, 64).await;
    let limit = Limit::per_hour(1).burst(5);
    // Alone (the first calls take the places in flight), first of a batch, inside one.
    for bad_at in [0, 16, 20] {
        let keys: Vec<String> = (0..40)
            .map(|i| {
                if i == bad_at {
                    "bad".to_owned()
                } else {
                    format!("good{bad_at}-{i}")
                }
            })
            .collect();
        let before = server.script_calls().await;
        let calls = keys.iter().map(|k| limiter.check(k, &limit));
        let decisions = futures_util::future::join_all(calls).await;
        assert!(server.script_calls().await - before < 40, "not batched");
        for (k, d) in keys.iter().zip(decisions) {
            let d = d.unwrap();
            if k == "bad" {
                // Its own failure policy (deny) decided it.
                assert_eq!((d.allowed, d.source), (false, Source::FailClosed), "{d:?}");
            } else {
                assert_eq!(
                    (d.allowed, d.source, d.remaining),
                    (true, Source::Store, 4),
                    "{k}"
                );
            }
        }
    }
    // What failed it: the server's refusal, as the error of that call alone.
    let store = RedisStore::connect(&url).await.unwrap();
    let e = redis_ratelimit::store::Store::check(&store, &limiter.bucket_key("bad"), &limit, 1)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Redis(_)), "{e}");
}

/// A batch lost with its server (killed while the calls wait: 16 in flight, the rest queued)
/// fails each of its calls alone, and each is decided by its own limit's failure policy:
/// none is an error, and calls of two policies in one batch keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_batch_leaves_each_call_to_its_own_failure_policy() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, 64).await;
    let open = Limit::per_hour(100).on_failure(FailurePolicy::Allow);
    let closed = Limit::per_hour(100).on_failure(FailurePolicy::Deny);
    limiter.check("warm", &closed).await.unwrap();
    // Redis holds every command while the calls gather.
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5_000)
        .arg("ALL")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    let keys: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
    let limit_of = |i: usize| if i.is_multiple_of(2) { &open } else { &closed };
    let calls = keys
        .iter()
        .enumerate()
        .map(|(i, k)| limiter.check(k, limit_of(i)));
    let (decisions, ()) = tokio::join!(futures_util::future::join_all(calls), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.kill();
    });
    for (i, d) in decisions.into_iter().enumerate() {
        let d = d.unwrap();
        let expected = if i.is_multiple_of(2) {
            (true, Source::FailOpen)
        } else {
            (false, Source::FailClosed)
        };
        assert_eq!((d.allowed, d.source), expected, "call {i}: {d:?}");
    }
}

/// `RedisStore::batch_sizes` counts every script call once, by how many calls it decided: a
/// lone caller's calls go alone; a flood's mostly in batches.
#[tokio::test]
async fn the_store_counts_its_script_calls_by_batch_size() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let limiter = counting(&store, "sizes").await;
    let limit = Limit::per_hour(1).burst(50);
    assert_eq!(store.batch_sizes(), [0; 8]);
    for _ in 0..3 {
        limiter.check("alone", &limit).await.unwrap();
    }
    assert_eq!(store.batch_sizes(), [3, 0, 0, 0, 0, 0, 0, 0]);
    let before = server.script_calls().await;
    assert_eq!(flood(&limiter, "k", &limit, 200).await, 50);
    let scripts = server.script_calls().await - before;
    let sizes = store.batch_sizes();
    assert_eq!(sizes.iter().sum::<u64>() - 3, scripts, "{sizes:?}");
    assert!(
        sizes[1..].iter().sum::<u64>() > 0,
        "some calls rode in batches: {sizes:?}"
    );
}

#[tokio::test]
async fn batching_after_one_call_in_flight_gathers_every_other_and_stays_exact() {
    let server = RedisServer::start();
    // At least 1: 0 means 1.
    let store = RedisStore::connect(&server.url())
        .await
        .unwrap()
        .batch_after(0);
    let limiter = counting(&store, "after").await;
    let limit = Limit::per_hour(1).burst(50);
    // One call at a time: each sent at once, alone.
    for _ in 0..3 {
        limiter.check("alone", &limit).await.unwrap();
    }
    assert_eq!(store.batch_sizes(), [3, 0, 0, 0, 0, 0, 0, 0]);
    // 200 at once: one goes alone, the others wait for it and leave in batches of at most
    // 64, one batch in flight at a time. By default 16 would have gone alone.
    let before = server.script_calls().await;
    assert_eq!(flood(&limiter, "k", &limit, 200).await, 50);
    let scripts = server.script_calls().await - before;
    let sizes = store.batch_sizes();
    assert!(
        scripts < 16,
        "200 calls took {scripts} script calls: {sizes:?}"
    );
    assert!(sizes[0] - 3 < 16, "{sizes:?}");
}

/// A batch sends a call under the previous call's limit as its key alone: calls of two limits
/// interleaved in one batch are each decided under their own (burst 3 and burst 7).
#[tokio::test]
async fn interleaved_limits_in_one_batch_each_keep_their_own() {
    let server = RedisServer::start();
    let limiter = limiter(&server, 64).await;
    let three = Limit::per_hour(1).burst(3);
    let seven = Limit::per_hour(1).burst(7);
    let keys: Vec<String> = (0..200).map(|i| format!("mixed{i}")).collect();
    let before = server.script_calls().await;
    let calls = keys.iter().enumerate().map(|(i, k)| {
        let limit = if i % 2 == 0 { &three } else { &seven };
        limiter.check(k, limit)
    });
    let decisions = futures_util::future::join_all(calls).await;
    assert!(
        server.script_calls().await - before < 200,
        "the calls rode in batches"
    );
    for (i, d) in decisions.into_iter().enumerate() {
        let d = d.unwrap();
        let remaining = if i % 2 == 0 { 2 } else { 6 };
        assert_eq!((d.allowed, d.remaining), (true, remaining), "call {i}");
    }
}
