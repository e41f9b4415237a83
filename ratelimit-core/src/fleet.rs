//! This process as one instance of the fleet that shares a Redis deployment and a prefix.
//!
//! An instance is a process: however many limiters it builds on one deployment and prefix, it
//! beats once in the set of live instances (what the fallback divides a limit by), under one
//! id for the whole process, and one connection listens for the resets other instances
//! publish, on behalf of every limiter's deny cache and of the calls of this process waiting
//! for a concurrency slot ([`waiters`]). One task per (deployment, prefix) does both; it
//! stops when the last limiter using it is dropped.
//!
//! Resets travel by Redis pub/sub rather than client-side caching invalidation: the deny cache
//! holds refusals, not values read from Redis, so there is no key read to track (the bucket's
//! key may not even exist), and tracking works per connection while one message per reset
//! reaches every listener at once, on standalone, Sentinel and Cluster alike.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_core::Stream;

use crate::deny_cache::DenyCache;
use crate::errors::Error;
use crate::store::{MemoryStore, RedisStore};

pub(crate) mod waiters;

/// How often each instance says it is alive.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long an instance counts as alive after its last heartbeat.
const HEARTBEAT_TTL: Duration = Duration::from_secs(3);

/// How many of the heartbeat's answers a fall in the count must last before it is believed:
/// the answers of one TTL and one more beat, by when every instance still alive has beaten
/// again, whatever the set held before (see [`Recount`]).
const RECOUNT: usize = 4;
const _: () = assert!(RECOUNT as u128 * HEARTBEAT_EVERY.as_millis() > HEARTBEAT_TTL.as_millis());

/// The count of live instances the fallback divides a limit by: the largest of the
/// heartbeat's last [`RECOUNT`] answers. A count that rises is believed at once (a smaller
/// share is the safe side); one that falls, only once every live instance has had time to
/// beat again. Redis restarted without its data, or a set of instances lost with a failover,
/// fills up again one heartbeat at a time: read as it fills, the counts 1, 2, 3 of a fleet of
/// four would hand each instance a share of a half or all of the limit, and an outage at that
/// moment would keep those shares for its whole length.
#[derive(Debug, Default)]
struct Recount {
    answers: [u32; RECOUNT],
    next: usize,
}

impl Recount {
    /// Adds an answer of the heartbeat; returns the count to divide by (at least 1).
    fn answer(&mut self, n: u32) -> u32 {
        self.answers[self.next] = n;
        self.next = (self.next + 1) % RECOUNT;
        self.answers.iter().copied().max().unwrap_or(n).max(1)
    }
}

// Every instance has beaten once more within the hold-off: it had the time to tell the store.
const _: () = assert!(crate::policy::HOLD_OFF.as_millis() > 2 * HEARTBEAT_EVERY.as_millis());

/// This process's share of one fleet, held by every limiter of the process in that fleet.
#[derive(Debug)]
pub(crate) struct Member {
    /// Live instances, as last seen by the heartbeat (at least 1).
    pub(crate) count: Arc<AtomicU32>,
    /// The failure policy's fallback of every limiter of the process in this fleet: the
    /// process is one instance, so it holds one share of each limit however many limiters
    /// it builds (with one fallback each, two limiters on one prefix granted two shares).
    pub(crate) fallback: MemoryStore,
    /// When the store came back after failing, as this process saw it.
    pub(crate) recovery: Arc<crate::policy::Recovery>,
    /// The deny caches to tell about resets.
    caches: Mutex<Vec<Weak<DenyCache>>>,
    channel: Box<str>,
    /// Cleared when the task stops (its runtime shut down): the next limiter starts another.
    running: Arc<AtomicBool>,
    /// Set once the task has beaten and tried to listen for the first time.
    started: tokio::sync::watch::Sender<bool>,
}

impl Member {
    /// The pub/sub channel of resets. Like the set of instances, it has no hash tag braces
    /// after the prefix, so it never names a bucket.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Tells `cache` about the resets this process hears from now on.
    pub(crate) fn listen(&self, cache: &Arc<DenyCache>) {
        let mut caches = lock(&self.caches);
        // Limiters come and go: forget the dropped ones' caches here too, not only on resets.
        caches.retain(|c| c.strong_count() > 0);
        caches.push(Arc::downgrade(cache));
    }

    /// Returns once the task has tried its first heartbeat and subscription, or after both
    /// could have timed out: from then on the instance count is Redis's, not a guess of 1, and
    /// the deny cache hears resets instead of being cleared by a late first subscription.
    pub(crate) async fn started(&self) {
        let mut started = self.started.subscribe();
        let _ = tokio::time::timeout(2 * HEARTBEAT_EVERY, started.wait_for(|s| *s)).await;
    }

    /// Runs `f` on every deny cache still in use.
    fn each_cache(&self, f: impl Fn(&DenyCache)) {
        lock(&self.caches).retain(|cache| match cache.upgrade() {
            Some(cache) => {
                f(&cache);
                true
            }
            None => false,
        });
    }
}

type Fleet = (Box<str>, Box<str>);

/// The members of this process, by (deployment, prefix).
static MEMBERS: LazyLock<Mutex<HashMap<Fleet, Weak<Member>>>> = LazyLock::new(Default::default);

/// This process's id in every set of live instances.
static PROCESS_ID: LazyLock<String> = LazyLock::new(|| {
    use std::hash::BuildHasher;
    let nonce =
        std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    format!("{}-{nonce:016x}", std::process::id())
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This process's member of the fleet on `store`'s deployment under `prefix`: the existing one,
/// or a new one whose task runs on the current Tokio runtime.
///
/// # Errors
/// [`Error::NoRuntime`] outside a Tokio runtime.
pub(crate) fn join(store: &RedisStore, prefix: &str) -> Result<Arc<Member>, Error> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let fleet: Fleet = (store.deployment().into(), prefix.into());
    let mut members = lock(&MEMBERS);
    members.retain(|_, m| m.strong_count() > 0);
    if let Some(member) = members.get(&fleet).and_then(Weak::upgrade)
        && member.running.load(Ordering::Acquire)
    {
        return Ok(member);
    }
    let member = Arc::new(Member {
        count: Arc::new(AtomicU32::new(1)),
        fallback: MemoryStore::new(),
        recovery: Arc::default(),
        caches: Mutex::default(),
        channel: resets_channel(prefix).into(),
        running: Arc::new(AtomicBool::new(true)),
        started: tokio::sync::watch::Sender::new(false),
    });
    let task = Task {
        member: Arc::downgrade(&member),
        store: store.clone(),
        instances: instances_key(prefix),
        channel: member.channel.to_string(),
        refused: AtomicBool::new(false),
        recount: Recount::default(),
        answered: None,
        _running: Running(Arc::clone(&member.running)),
    };
    runtime.spawn(task.run());
    members.insert(fleet, Arc::downgrade(&member));
    Ok(member)
}

/// The heartbeat's sorted set of the live instances of the fleet under `prefix` (no braces
/// after the prefix: never a bucket's name).
pub(crate) fn instances_key(prefix: &str) -> String {
    format!("{prefix}:instances")
}

/// The pub/sub channel of the resets of the fleet under `prefix`.
pub(crate) fn resets_channel(prefix: &str) -> String {
    format!("{prefix}:resets")
}

/// Marks the member stopped when its task ends, or is dropped with its runtime.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

struct Task {
    member: Weak<Member>,
    store: RedisStore,
    instances: String,
    channel: String,
    /// Whether the heartbeat's key refused it (logged once).
    refused: AtomicBool,
    recount: Recount,
    /// How the last beat went: `None` before the first, `Some(false)` when it failed.
    answered: Option<bool>,
    _running: Running,
}

type Resets = Pin<Box<redis::aio::PubSubStream>>;

enum Event {
    Tick,
    Reset(Option<redis::Msg>),
}

impl Task {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resets: Option<Resets> = None;
        loop {
            let event = tokio::select! {
                _ = tick.tick() => Event::Tick,
                message = next(&mut resets) => Event::Reset(message),
            };
            let Some(member) = self.member.upgrade() else {
                return;
            };
            match event {
                Event::Tick => {
                    if !self.beat(&member).await {
                        // A subscription can outlive its server unnoticed (no traffic, no
                        // error): take it again once Redis answers.
                        resets = None;
                    } else if resets.is_none() {
                        resets = self.subscribe().await;
                        if resets.is_some() {
                            // Resets published while nobody listened are lost: forget every
                            // refusal rather than keep one that a reset has lifted.
                            member.each_cache(DenyCache::clear);
                        }
                    }
                    member.started.send_replace(true);
                }
                Event::Reset(Some(message)) => match message.get_payload::<String>() {
                    Ok(bucket) => {
                        member.each_cache(|cache| cache.forget(&bucket));
                        // A concurrency slot given back elsewhere, with calls waiting for one.
                        waiters::wake(&bucket);
                    }
                    Err(e) => crate::observe::log!(debug, %e, "ignoring a malformed reset message"),
                },
                Event::Reset(None) => {
                    crate::observe::log!(
                        debug,
                        "lost the rate-limit reset subscription; reconnecting"
                    );
                    resets = None;
                }
            }
        }
    }

    /// Whether Redis answered (with the count, or with an error reply).
    async fn beat(&mut self, member: &Member) -> bool {
        let beat = self
            .store
            .heartbeat(&self.instances, &PROCESS_ID, HEARTBEAT_TTL);
        let answered = match tokio::time::timeout(HEARTBEAT_EVERY, beat).await {
            Ok(Ok((n, new))) => {
                member
                    .count
                    .store(self.recount.answer(n), Ordering::Relaxed);
                // Back after failing, or missing from a set it beat in before (within its TTL:
                // the store lost its data, or this process was away for longer).
                if self.answered == Some(false) || (new && self.answered.is_some()) {
                    member.recovery.came_back();
                }
                true
            }
            // Redis answered with an error: it is up, but the key holds a value of the
            // application's (the prefix is shared with it). The key is not ours to delete;
            // say so once, and keep listening for resets, which do not need it.
            Ok(Err(Error::Redis(e))) if e.code().is_some() => {
                if !self.refused.swap(true, Ordering::Relaxed) {
                    crate::observe::log!(warn, key = %self.instances,
                        error = %e,
                        "the rate-limit heartbeat cannot write its key, so this instance is not \
                         counted and the fallback's shares assume it is alone; the key holds \
                         another value: choose a prefix the application does not use"
                    );
                }
                true
            }
            // While Redis is down the count stands, and so do the answers it comes from.
            Ok(Err(e)) => {
                crate::observe::log!(debug, %e, "rate-limit heartbeat failed");
                false
            }
            Err(_) => {
                crate::observe::log!(debug, "rate-limit heartbeat timed out");
                false
            }
        };
        self.answered = Some(answered);
        answered
    }

    async fn subscribe(&self) -> Option<Resets> {
        match tokio::time::timeout(HEARTBEAT_EVERY, self.store.listen(&self.channel)).await {
            Ok(Ok(messages)) => Some(Box::pin(messages)),
            Ok(Err(e)) => {
                crate::observe::log!(debug, %e, "cannot listen for rate-limit resets");
                None
            }
            Err(_) => {
                crate::observe::log!(debug, "listening for rate-limit resets timed out");
                None
            }
        }
    }
}

/// The next reset message; never, while not subscribed; `None` once the connection is lost.
async fn next(resets: &mut Option<Resets>) -> Option<redis::Msg> {
    match resets {
        Some(stream) => std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_that_falls_is_believed_only_after_every_instance_could_beat_again() {
        let mut recount = Recount::default();
        assert_eq!(recount.answer(0), 1, "at least this instance");
        assert_eq!(recount.answer(4), 4, "a rise at once");
        // Redis restarted empty: the set fills up one heartbeat at a time.
        assert_eq!(recount.answer(1), 4);
        assert_eq!(recount.answer(3), 4);
        assert_eq!(recount.answer(4), 4);
        // An instance died: its absence is believed after RECOUNT answers.
        for _ in 1..RECOUNT {
            assert_eq!(recount.answer(3), 4);
        }
        assert_eq!(recount.answer(3), 3);
    }
}
