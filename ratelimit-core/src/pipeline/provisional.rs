//! Tokens held provisionally: taken by calls of this process that are still running under a
//! limit that counts only some outcomes (`count = ..`), and that come back if the outcome does
//! not count. They are not spent yet, so a call refused while some of its bucket's are held
//! waits for those calls to end (at most [`HELD_WAIT`]) and is decided again; a refusal
//! while they are still held says they may come back soon, not when the bucket refills.
//! Process-wide, keyed by bucket (whose key carries the limiter's prefix): the calls of this
//! instance only; another instance's calls in flight are not seen.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a call refused while tokens of its bucket are held waits for them, and the
/// `retry_after` of a refusal while they are still held.
pub(crate) const HELD_WAIT: Duration = Duration::from_secs(1);

/// Per bucket: the tokens held, and what wakes the calls waiting for them.
type Held = HashMap<String, (u64, Arc<Notify>)>;

static HELD: LazyLock<Mutex<Held>> = LazyLock::new(Mutex::default);

fn held_map() -> MutexGuard<'static, Held> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `cost` tokens of `bucket` held by a call in flight, until dropped: after the call's
/// outcome is known and its tokens given back if it did not count.
#[derive(Debug)]
pub(crate) struct Hold {
    bucket: String,
    cost: u64,
}

impl Hold {
    pub(crate) fn new(bucket: String, cost: u32) -> Hold {
        let cost = u64::from(cost);
        held_map()
            .entry(bucket.clone())
            .or_insert_with(|| (0, Arc::new(Notify::new())))
            .0 += cost;
        Hold { bucket, cost }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut map = held_map();
        let Some(entry) = map.get_mut(&self.bucket) else {
            return;
        };
        entry.0 = entry.0.saturating_sub(self.cost);
        entry.1.notify_waiters();
        if entry.0 == 0 {
            map.remove(&self.bucket);
        }
    }
}

/// Whether calls of this process hold tokens of `bucket`.
pub(crate) fn is_held(bucket: &str) -> bool {
    held_map().contains_key(bucket)
}

/// Waits until a call holding tokens of `bucket` ends, or `until`: true when one ended (its
/// tokens back if its outcome did not count), false when none held any or the time is up.
pub(crate) async fn one_ended(bucket: &str, until: tokio::time::Instant) -> bool {
    let Some(notify) = held_map().get(bucket).map(|e| Arc::clone(&e.1)) else {
        return false;
    };
    let ended = notify.notified();
    tokio::pin!(ended);
    // Registered before the count is read again: an end between the two is not missed.
    ended.as_mut().enable();
    if !is_held(bucket) {
        return true;
    }
    tokio::time::timeout_at(until, ended).await.is_ok()
}

/// Decides again, while `decision` refuses and calls of this process hold tokens of `bucket`
/// (at most [`HELD_WAIT`]), each time one of them ends; a refusal left while they still hold
/// some says they may come back within [`HELD_WAIT`].
pub(crate) async fn decide_again<F, Fut>(
    bucket: &str,
    mut decision: crate::Decision,
    mut decide: F,
) -> crate::Decision
where
    F: FnMut() -> Fut,
    Fut: Future<Output = crate::Decision>,
{
    if decision.allowed || !is_held(bucket) || tokio::runtime::Handle::try_current().is_err() {
        return decision;
    }
    let until = tokio::time::Instant::now() + HELD_WAIT;
    while !decision.allowed {
        let ended = one_ended(bucket, until).await;
        let time_up = !ended && tokio::time::Instant::now() >= until;
        if time_up && is_held(bucket) {
            break;
        }
        // One ended, or all had (before this call looked, or as its time ran out): decided
        // again on what they left.
        decision = decide().await;
        if time_up || !is_held(bucket) {
            break;
        }
    }
    if !decision.allowed && !decision.shadowed && is_held(bucket) {
        decision.retry_after = decision.retry_after.min(HELD_WAIT);
    }
    decision
}
