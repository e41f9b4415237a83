//! The calls of this process waiting for a concurrency slot, by bucket: a release wakes them
//! at once, whether this process gave the slot back or another instance did (heard on the
//! fleet's channel).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// The calls of this process waiting for a slot, by bucket: a release here wakes them at
/// once. An entry lives while someone waits on it, so the map holds only live waiters.
static WAITERS: LazyLock<Mutex<HashMap<Box<str>, Weak<Notify>>>> = LazyLock::new(Default::default);

fn waiters() -> MutexGuard<'static, HashMap<Box<str>, Weak<Notify>>> {
    WAITERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many calls of this process wait for a slot: a release takes the lock of [`WAITERS`]
/// only when some do.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Wakes this process's waiters on `bucket` (a release here, or one another instance
/// published on the fleet's channel).
pub(crate) fn wake(bucket: &str) {
    if WAITING.load(Ordering::Acquire) == 0 {
        return;
    }
    let notify = waiters().get(bucket).and_then(Weak::upgrade);
    if let Some(notify) = notify {
        notify.notify_waiters();
    }
}

/// One waiter's place in [`WAITERS`].
pub(crate) struct Listener {
    bucket: Box<str>,
    notify: Arc<Notify>,
}

impl Listener {
    /// Takes a place among the waiters on `bucket`, until dropped.
    pub(crate) fn new(bucket: &str) -> Listener {
        WAITING.fetch_add(1, Ordering::AcqRel);
        let mut map = waiters();
        let notify = match map.get(bucket).and_then(Weak::upgrade) {
            Some(notify) => notify,
            None => {
                let notify = Arc::new(Notify::new());
                map.insert(bucket.into(), Arc::downgrade(&notify));
                notify
            }
        };
        Listener {
            bucket: bucket.into(),
            notify,
        }
    }

    /// Completes at the next [`wake`] of the bucket after it is enabled (or first polled).
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let mut map = waiters();
        // The last waiter on the bucket takes its entry away.
        if Arc::strong_count(&self.notify) == 1 {
            map.remove(&self.bucket);
        }
        WAITING.fetch_sub(1, Ordering::AcqRel);
    }
}
