//! Tokens held provisionally: taken by calls of this process that are still running under a
//! limit that counts only some outcomes (`count = ..`), and that come back if the outcome does
//! not count. They are not spent yet, so a call refused while some of its bucket's are held
//! waits for those calls to end (at most [`HELD_WAIT`]) and is decided again; a refusal
//! while they are still held says they may come back soon, not when the bucket refills.
//! Process-wide, keyed by bucket (whose key carries the limiter's prefix): the calls of this
//! instance only; another instance's calls in flight are not seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a call refused while tokens of its bucket are held waits for them, and the
/// `retry_after` of a refusal while they are still held.
pub(crate) const HELD_WAIT: Duration = Duration::from_secs(1);

/// The calls of this process holding tokens, per bucket, and when such calls ended.
#[derive(Debug, Default)]
struct State {
    held: HashMap<String, Entry>,
    /// The stamp of the last end of each bucket no call holds any more (dropped whole once it
    /// grows past [`RECENT`], raising `floor`: a ticket older than that counts as passed).
    recent: HashMap<String, u64>,
    floor: u64,
}

/// Per bucket held: the tokens, the stamp of its last end, and what wakes its waiters.
#[derive(Debug)]
struct Entry {
    tokens: u64,
    last_end: u64,
    notify: Arc<Notify>,
}

/// The most buckets whose last end is remembered after nothing holds them.
const RECENT: usize = 4096;

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

/// How many calls holding tokens have ended: the stamp of the last end. Written under
/// [`STATE`]'s lock, read without it by [`Ticket::now`], which every call of a limit that
/// counts some outcomes takes before it is decided (one load, on the memory store's path).
static ENDS: AtomicU64 = AtomicU64::new(0);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `cost` tokens of `bucket` held by a call in flight, until dropped: after the call's
/// outcome is known and its tokens given back if it did not count.
#[derive(Debug)]
pub(crate) struct Hold {
    bucket: String,
    cost: u64,
    /// Let go without an end ([`withdraw`](Hold::withdraw)).
    withdrawn: bool,
}

impl Hold {
    pub(crate) fn new(bucket: String, cost: u32) -> Hold {
        let cost = u64::from(cost);
        state()
            .held
            .entry(bucket.clone())
            .or_insert_with(|| Entry {
                tokens: 0,
                last_end: 0,
                notify: Arc::new(Notify::new()),
            })
            .tokens += cost;
        Hold {
            bucket,
            cost,
            withdrawn: false,
        }
    }

    /// Lets the tokens go without an end: a call that asked and was refused took none, so
    /// nothing came back that a refusal lacked.
    pub(crate) fn withdraw(mut self) {
        self.withdrawn = true;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut state = state();
        let Some(entry) = state.held.get_mut(&self.bucket) else {
            return;
        };
        entry.tokens = entry.tokens.saturating_sub(self.cost);
        if !self.withdrawn {
            entry.last_end = ENDS.fetch_add(1, Ordering::AcqRel) + 1;
            entry.notify.notify_waiters();
        }
        if entry.tokens == 0 {
            let last_end = entry.last_end;
            state.held.remove(&self.bucket);
            if last_end > 0 {
                state.remember(std::mem::take(&mut self.bucket), last_end);
            }
        }
    }
}

impl State {
    /// Remembers when the last call holding tokens of `bucket` ended, within [`RECENT`].
    fn remember(&mut self, bucket: String, stamp: u64) {
        if self.recent.len() >= RECENT {
            self.recent.clear();
            self.floor = ENDS.load(Ordering::Acquire);
        }
        self.recent.insert(bucket, stamp);
    }
}

/// Whether calls of this process hold tokens of `bucket`.
pub(crate) fn is_held(bucket: &str) -> bool {
    state().held.contains_key(bucket)
}

/// Whether calls of this process hold tokens of `bucket`, or one that held some has ended
/// since `asked` was taken.
pub(crate) fn is_held_or_passed(bucket: &str, asked: Ticket) -> bool {
    is_held(bucket) || asked.passed(bucket)
}

/// When a decision was asked, as the calls holding tokens stood: a refusal asked before one of
/// them ended may have lacked just what it gave back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket(u64);

impl Ticket {
    /// Now: taken before a decision is asked.
    #[inline]
    pub(crate) fn now() -> Ticket {
        Ticket(ENDS.load(Ordering::Acquire))
    }

    /// Whether a call holding tokens of `bucket` has ended since this was taken.
    pub(crate) fn passed(self, bucket: &str) -> bool {
        let state = state();
        state.held.get(bucket).is_some_and(|e| e.last_end > self.0)
            || state.recent.get(bucket).is_some_and(|&end| end > self.0)
            || state.floor > self.0
    }
}

/// Waits until a call holding tokens of `bucket` ends, or `until`: true when one ended (its
/// tokens back if its outcome did not count), false when none held any or the time is up.
pub(crate) async fn one_ended(bucket: &str, until: tokio::time::Instant) -> bool {
    let Some(notify) = state().held.get(bucket).map(|e| Arc::clone(&e.notify)) else {
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
/// some says they may come back within [`HELD_WAIT`]. `asked` is where they stood when
/// `decision` was asked: one that ended while it was under way is decided again at once (a
/// loaded machine read the last holder's end before the refusal it had made wrong).
pub(crate) async fn decide_again<D, F, Fut>(
    bucket: &str,
    mut asked: Ticket,
    mut decision: D,
    mut decide: F,
) -> D
where
    D: Admits,
    F: FnMut() -> Fut,
    Fut: Future<Output = D>,
{
    if decision.admits() || tokio::runtime::Handle::try_current().is_err() {
        return decision;
    }
    let until = tokio::time::Instant::now() + HELD_WAIT;
    while !decision.admits() {
        if !asked.passed(bucket) {
            if !is_held(bucket) {
                // Nothing held, and nothing ended since it was asked: the refusal stands.
                break;
            }
            let ended = one_ended(bucket, until).await;
            if !ended && tokio::time::Instant::now() >= until {
                break;
            }
        }
        // One ended (perhaps all): decided again on what they left.
        asked = Ticket::now();
        decision = decide().await;
        if tokio::time::Instant::now() >= until {
            break;
        }
    }
    if is_held(bucket) {
        decision.wait_at_most(HELD_WAIT);
    }
    decision
}

/// What [`decide_again`] decides again: one limit's decision, or a slice's.
pub(crate) trait Admits {
    /// Whether the call was admitted.
    fn admits(&self) -> bool;
    /// A refusal's `retry_after` made at most `most`: the tokens held may come back by then.
    fn wait_at_most(&mut self, most: std::time::Duration);
}

impl Admits for crate::decision::Decision {
    fn admits(&self) -> bool {
        self.allowed
    }

    fn wait_at_most(&mut self, most: std::time::Duration) {
        if !self.allowed && !self.shadowed {
            self.retry_after = self.retry_after.min(most);
        }
    }
}

impl Admits for super::Decided {
    fn admits(&self) -> bool {
        self.parts.iter().all(|d| d.allowed)
    }

    fn wait_at_most(&mut self, most: std::time::Duration) {
        for part in &mut self.parts {
            part.wait_at_most(most);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_sees_an_end_after_it_was_taken_even_of_a_hold_begun_after() {
        let bucket = "provisional-test:ticket";
        // Nothing held: a ticket taken now has seen nothing end.
        let asked = Ticket::now();
        assert!(!asked.passed(bucket));
        // A hold begun after the ticket (a call admitted before this one's answer was read)
        // that ends before the refusal is read: its tokens may be what the refusal lacked.
        let hold = Hold::new(bucket.to_owned(), 1);
        assert!(!asked.passed(bucket), "held, not ended");
        assert!(is_held_or_passed(bucket, asked));
        drop(hold);
        assert!(!is_held(bucket));
        assert!(asked.passed(bucket), "the last holder's end is remembered");
        assert!(
            !Ticket::now().passed(bucket),
            "a ticket taken after it has not seen it"
        );
        // An asker refused withdraws its hold: that is no end.
        let later = Ticket::now();
        Hold::new(bucket.to_owned(), 1).withdraw();
        assert!(!later.passed(bucket));
        assert!(!is_held(bucket));
    }
}
