//! Concurrency limits (`Limit::concurrent`, `RateLimiter::enter`) on both stores: two
//! instances never hold more than `max` calls in flight; a slot comes back however its call
//! ends (return, cancellation, panic) and after its lease when its holder dies; a long call
//! keeps its slot by renewing it; waiters are served in arrival order; beside a rate limit it
//! is all or nothing.
//!
//! The memory store runs on paused Tokio time (its clock is Tokio's), so leases and renewals
//! pass in virtual time. Redis keeps its own clock: there the events are awaited by asking the
//! store again within a bound, never by a sleep whose length is asserted.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis_ratelimit::{Error, Limit, RateLimiter, Source, error::InvalidLimit, store::MemoryStore};
use testkit::RedisServer;
use testkit::wait::eventually;

/// Two instances on one store, and the server behind them.
struct Store {
    limiter: RateLimiter,
    memory: Option<MemoryStore>,
    server: Option<RedisServer>,
}

impl Store {
    /// On Tokio's clock: run it on paused time.
    async fn memory() -> Store {
        let store = MemoryStore::with_clock(support::TokioClock::new());
        let limiter = memory_limiter(&store).await;
        Store {
            limiter,
            memory: Some(store),
            server: None,
        }
    }

    async fn redis() -> Store {
        let server = RedisServer::start();
        let limiter = support::redis_limiter(&server, "conc").await;
        Store {
            limiter,
            memory: None,
            server: Some(server),
        }
    }

    /// Another instance on the same store: on Redis, another limiter with its own
    /// connections; in memory, another limiter on the same store.
    async fn other(&self) -> RateLimiter {
        match (&self.server, &self.memory) {
            (Some(server), _) => support::redis_limiter(server, "conc").await,
            (None, Some(store)) => memory_limiter(store).await,
            _ => unreachable!(),
        }
    }

    /// Waits until `n` members (slots and tickets) are stored under `key`: in memory, a
    /// waiter's first ask runs in its first poll, so letting the spawned tasks run is enough.
    async fn members(&self, key: &str, n: usize) {
        let Some(server) = &self.server else {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            return;
        };
        let bucket = self.limiter.bucket_key(key);
        let client = ::redis::Client::open(server.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        eventually(format!("{n} members under {bucket}"), async || {
            let stored: usize = ::redis::cmd("ZCARD")
                .arg(&bucket)
                .query_async(&mut con)
                .await
                .unwrap();
            stored == n
        })
        .await;
    }
}

async fn memory_limiter(store: &MemoryStore) -> RateLimiter {
    RateLimiter::builder()
        .memory_store(store.clone())
        .prefix("conc")
        .build()
        .await
        .unwrap()
}

/// Asks until `key` has `free` slots free under `limit` (on Redis a slot given back by a
/// dropped guard comes back through a spawned task); panics after a bound.
async fn until_free(limiter: &RateLimiter, key: &str, limit: &Limit, free: u64) {
    eventually(format!("{key} to have {free} slots free"), async || {
        limiter.peek(key, limit).await.unwrap().remaining == free
    })
    .await;
}

/// Many tasks on two instances, each entering with a wait, never hold more than `max` slots
/// at once (counted inside the guarded section), and every one of them gets in.
async fn two_instances_never_exceed_max(store: Store) {
    const MAX: usize = 3;
    let limit = Limit::concurrent(3).wait(Duration::from_secs(60));
    let instances = [store.limiter.clone(), store.other().await];
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..24 {
        let limiter = instances[i % 2].clone();
        let (in_flight, most) = (Arc::clone(&in_flight), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            let entered = limiter.enter("report", &limit).await.unwrap();
            assert!(entered.decision.allowed, "{:?}", entered.decision);
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(entered);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    println!("at most {most} of {MAX} in flight");
    assert!(most <= MAX, "{most} calls in flight, max {MAX}");
    until_free(&store.limiter, "report", &limit, 3).await;
    if let Some(memory) = &store.memory {
        assert!(memory.is_empty(), "a key with no slot held is dropped");
    }
}

/// A full key refuses at once (no wait set), says how many are free, and admits again once a
/// slot is given back.
async fn a_full_key_refuses_until_a_slot_comes_back(store: Store) {
    let limit = Limit::concurrent(2);
    let a = store.limiter.enter("k", &limit).await.unwrap();
    let b = store.other().await.enter("k", &limit).await.unwrap();
    assert_eq!(a.decision.remaining, 1);
    assert_eq!(a.decision.limit, limit, "the limit as given");
    assert!(b.decision.allowed && b.decision.remaining == 0);
    let c = store.limiter.enter("k", &limit).await.unwrap();
    assert!(!c.decision.allowed && c.slot.is_none());
    assert!(c.decision.retry_after > Duration::ZERO);
    a.slot.unwrap().release().await.unwrap();
    assert!(
        store
            .limiter
            .enter("k", &limit)
            .await
            .unwrap()
            .decision
            .allowed
    );
}

/// A call cancelled while it holds its slot (its future dropped) gives the slot back.
async fn a_cancelled_call_gives_its_slot_back(store: Store) {
    let limit = Limit::concurrent(1);
    let (entered, held) = tokio::sync::oneshot::channel();
    let limiter = store.limiter.clone();
    let call = tokio::spawn(async move {
        let _entered = limiter.enter("k", &limit).await.unwrap();
        entered.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    held.await.unwrap();
    assert!(
        !store
            .limiter
            .enter("k", &limit)
            .await
            .unwrap()
            .decision
            .allowed
    );
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    until_free(&store.limiter, "k", &limit, 1).await;
}

/// A call that panics while it holds its slot gives the slot back.
async fn a_panicking_call_gives_its_slot_back(store: Store) {
    let limit = Limit::concurrent(1);
    let limiter = store.limiter.clone();
    let call = tokio::spawn(async move {
        let entered = limiter.enter("k", &limit).await.unwrap();
        assert!(entered.decision.allowed);
        panic!("the handler failed");
    });
    assert!(call.await.unwrap_err().is_panic());
    until_free(&store.limiter, "k", &limit, 1).await;
}

/// A holder that dies (its guard abandoned: no renewal, no release) loses its slot once the
/// lease ends.
async fn a_dead_holder_loses_its_slot_after_the_lease(store: Store) {
    let limit = Limit::concurrent(1).lease(Duration::from_millis(300));
    let dead = store.other().await;
    let entered = dead.enter("k", &limit).await.unwrap();
    entered.slot.unwrap().abandon();
    assert!(
        !store
            .limiter
            .enter("k", &limit)
            .await
            .unwrap()
            .decision
            .allowed
    );
    until_free(&store.limiter, "k", &limit, 1).await;
    assert!(
        store
            .limiter
            .enter("k", &limit)
            .await
            .unwrap()
            .decision
            .allowed
    );
}

/// A call that runs for several leases keeps its slot: its guard renews the lease.
async fn a_long_call_keeps_its_slot(store: Store) {
    let limit = Limit::concurrent(1).lease(Duration::from_secs(1));
    let long = store.limiter.enter("k", &limit).await.unwrap();
    assert!(long.decision.allowed);
    // Three leases: without renewal the slot would be free.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other = store.other().await;
    assert!(!other.enter("k", &limit).await.unwrap().decision.allowed);
    drop(long);
    until_free(&other, "k", &limit, 1).await;
}

/// Waiters are served in arrival order, across instances: each queued before the next asks.
async fn waiters_are_served_in_arrival_order(store: Store) {
    let limit = Limit::concurrent(1).wait(Duration::from_secs(30));
    let holder = store.limiter.enter("k", &limit).await.unwrap();
    let (served, mut order) = tokio::sync::mpsc::unbounded_channel();
    let instances = [store.limiter.clone(), store.other().await];
    let mut tasks = Vec::new();
    for i in 0..5 {
        let limiter = instances[i % 2].clone();
        let served = served.clone();
        tasks.push(tokio::spawn(async move {
            let entered = limiter.enter("k", &limit).await.unwrap();
            assert!(entered.decision.allowed);
            served.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }));
        // The holder and every ticket so far.
        store.members("k", i + 2).await;
    }
    drop(holder);
    for task in tasks {
        task.await.unwrap();
    }
    let mut seen = Vec::new();
    while let Ok(i) = order.try_recv() {
        seen.push(i);
    }
    assert_eq!(seen, [0, 1, 2, 3, 4]);
}

/// A waiter whose wait ends is refused and leaves no ticket behind: the next call gets in.
async fn a_waiter_that_gives_up_leaves_no_ticket(store: Store) {
    let limit = Limit::concurrent(1).wait(Duration::from_millis(200));
    let holder = store.limiter.enter("k", &limit).await.unwrap();
    let late = store.other().await.enter("k", &limit).await.unwrap();
    assert!(!late.decision.allowed && late.slot.is_none());
    drop(holder);
    until_free(&store.limiter, "k", &limit, 1).await;
    // No ticket ahead: a call that does not wait gets in at once.
    assert!(
        store
            .limiter
            .enter("k", &Limit::concurrent(1))
            .await
            .unwrap()
            .decision
            .allowed
    );
}

/// Beside a rate limit, all or nothing: a full slot takes no token, and an empty bucket takes
/// no slot.
async fn beside_a_rate_limit_it_is_all_or_nothing(store: Store) {
    let slots = Limit::concurrent(1);
    let hourly = Limit::per_hour(2);
    let call = [("slots", &slots, 1), ("hourly", &hourly, 1)];
    let first = store.limiter.enter_all(&call).await.unwrap();
    assert!(first.decision.allowed);
    let refused = store.limiter.enter_all(&call).await.unwrap();
    assert!(!refused.decision.allowed);
    assert!(!refused.decision.parts()[0].allowed && refused.decision.parts()[1].allowed);
    assert_eq!(
        store
            .limiter
            .peek("hourly", &hourly)
            .await
            .unwrap()
            .remaining,
        1,
        "the full slot took no token"
    );
    drop(first);
    until_free(&store.limiter, "slots", &slots, 1).await;
    // Empty the bucket: now the rate limit refuses, and no slot is taken.
    assert!(
        store
            .limiter
            .check("hourly", &hourly)
            .await
            .unwrap()
            .allowed
    );
    let refused = store.limiter.enter_all(&call).await.unwrap();
    assert!(!refused.decision.allowed && refused.decision.parts()[0].allowed);
    assert_eq!(
        store.limiter.peek("slots", &slots).await.unwrap().remaining,
        1,
        "the empty bucket took no slot"
    );
}

/// `check` and `check_all` refuse a concurrency limit: they would take a slot nobody gives
/// back.
async fn check_needs_a_slot(store: Store) {
    let limit = Limit::concurrent(1);
    let needs_slot = |r: Result<redis_ratelimit::Decision, Error>| {
        matches!(r, Err(Error::InvalidLimit(InvalidLimit::NeedsSlot)))
    };
    assert!(needs_slot(store.limiter.check("k", &limit).await));
    assert!(needs_slot(
        store
            .limiter
            .check_all(&[("k", &limit, 1), ("r", &Limit::per_second(1), 1)])
            .await
    ));
    assert!(store.limiter.peek("k", &limit).await.unwrap().allowed);
}

/// In shadow mode a full key lets the call through and says it would have refused it.
async fn a_shadow_limit_lets_a_call_through_and_says_so(store: Store) {
    let limit = Limit::concurrent(1).shadow();
    let first = store.limiter.enter("k", &limit).await.unwrap();
    assert!(first.decision.allowed && !first.decision.shadowed);
    let second = store.limiter.enter("k", &limit).await.unwrap();
    assert!(second.decision.allowed && second.decision.shadowed);
    assert!(second.slot.is_some(), "a guard, holding nothing");
    drop(second);
    assert_eq!(
        store.limiter.peek("k", &limit).await.unwrap().remaining,
        0,
        "the first still holds the one slot; the second took none"
    );
    drop(first);
    until_free(&store.limiter, "k", &limit, 1).await;
}

support::on_both_stores!(
    crate::Store,
    #[tokio::test(start_paused = true)]:
    two_instances_never_exceed_max,
    a_full_key_refuses_until_a_slot_comes_back,
    a_cancelled_call_gives_its_slot_back,
    a_panicking_call_gives_its_slot_back,
    a_dead_holder_loses_its_slot_after_the_lease,
    a_long_call_keeps_its_slot,
    waiters_are_served_in_arrival_order,
    a_waiter_that_gives_up_leaves_no_ticket,
    beside_a_rate_limit_it_is_all_or_nothing,
    check_needs_a_slot,
    a_shadow_limit_lets_a_call_through_and_says_so,
);

/// Redis down: the fallback holds the slots in memory (this instance's share: the whole limit
/// for a lone instance), gives them back there, and queues waiters there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_holds_slots_while_redis_is_down() {
    let (limiter, _server) = support::fallback_without_redis().await;
    let limit = Limit::concurrent(2);
    let a = limiter.enter("k", &limit).await.unwrap();
    let b = limiter.enter("k", &limit).await.unwrap();
    let c = limiter.enter("k", &limit).await.unwrap();
    assert_eq!(a.decision.source, Source::Fallback);
    assert!(a.decision.allowed && b.decision.allowed && !c.decision.allowed);
    drop(a);
    let waiting = limit.wait(Duration::from_secs(5));
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.enter("k", &waiting).await.unwrap() })
    };
    let d = limiter.enter("k", &limit).await.unwrap();
    drop(b);
    drop(d);
    let served = waiter.await.unwrap();
    assert!(served.decision.allowed, "{:?}", served.decision);
    assert_eq!(served.decision.source, Source::Fallback);
}

/// A slot given back while calls wait for one is published on the fleet's channel, so that
/// waiters on every instance ask again at once (a release with nobody waiting publishes
/// nothing: the script looks for a live ticket first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_waiters_is_published_to_the_fleet() {
    use futures_util::StreamExt as _;
    let store = Store::redis().await;
    let server = store.server.as_ref().unwrap();
    let mut messages = server.client().get_async_pubsub().await.unwrap();
    messages.subscribe("conc:resets").await.unwrap();
    let mut messages = messages.into_on_message();
    let bucket = store.limiter.bucket_key("k");

    let limit = Limit::concurrent(1);
    let holder = store.limiter.enter("k", &limit).await.unwrap();
    let other = store.other().await;
    let waiter = tokio::spawn(async move {
        let waiting = Limit::concurrent(1).wait(Duration::from_secs(30));
        other.enter("k", &waiting).await.unwrap().decision.allowed
    });
    store.members("k", 2).await;
    holder.slot.unwrap().release().await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .expect("a message within 10 s")
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), bucket);
    assert!(waiter.await.unwrap());
}
