//! What this instance last heard from the store about each bucket: the refusals it can
//! repeat without a round trip (the deny cache), and what a bucket had left, which the
//! failure policy's fallback starts from when the store fails.
//!
//! **Refusals.** Once the store refuses a call on a bucket, calls on that bucket with the same
//! or a larger cost are refused here, without a round trip, until the earliest instant the
//! store could admit them. It can only refuse, never admit, and it refuses only what the store
//! would refuse too: a bucket refused at server time `s` with `retry_after` R cannot admit the
//! same cost before `s + R` (other instances can only take more tokens), and `s` is no earlier
//! than the moment the request was sent, so entries expire at `sent + R`. The `retry_after` it
//! reports counts from the moment the reply arrived (`received + R`), so it is never early
//! either.
//!
//! **What was left.** Every answer of the store on a bucket that is not full says how many
//! tokens it had left and when it is full again. A fallback that started from a full share
//! would hand out again what the fleet had already spent (issue: a global quota used up in
//! Redis admitted 13 more calls in a 15 ms failover); it starts from this instead (see
//! `Known::held`). An entry lives until its bucket is full again, then carries nothing.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::algorithm::OfLimit as _;
use crate::decision::Decision;
use crate::decision::Source;
use crate::limit::Limit;

/// Default bound on the number of buckets remembered (refused, or not full).
pub const DEFAULT_DENY_CACHE_CAPACITY: usize = 65_536;

const SHARDS: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Entry {
    limit: Limit,
    known: Known,
    refusal: Option<Refusal>,
    /// When the bucket was last forgotten (a reset, tokens given back): an answer to a request
    /// sent before it says nothing of the bucket now, and is not remembered.
    forgotten: Option<Instant>,
}

/// How long a forgotten bucket's answers sent before it are known to be stale: longer than a
/// request in flight can wait for its answer.
const FORGOTTEN_FOR: Duration = Duration::from_secs(5);

/// A refusal by the store, to repeat.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    cost: u32,
    /// Refuse locally while now < this: `sent + retry_after`.
    until: Instant,
    /// What to report: `received + retry_after`.
    retry_at: Instant,
}

/// What the store last said of a bucket: tokens left when the answer arrived, and when the
/// bucket is full again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Known {
    pub(crate) remaining: u64,
    pub(crate) received: Instant,
    pub(crate) full_at: Instant,
    /// Of a concurrency limit: the slots the store granted that this instance held when the
    /// answer came (0 for the others).
    pub(crate) held_here: u64,
}

impl Known {
    /// How far the bucket is from full at `now` at the least, as fine units of time under the
    /// limit's token-bucket parameters `p` (`p.tau` is an empty bucket; more is a bucket that
    /// owes calls it reserved for, which wait beyond it): the tokens it lacked when the store
    /// answered less what has refilled since, and no less than the time to full it said.
    /// Both are lower bounds (other instances can only have taken more since), so a fallback
    /// that starts here never admits what the store had already spent or promised.
    pub(crate) fn short_of_full(
        &self,
        p: &crate::algorithm::token_bucket::Params,
        now: Instant,
    ) -> u64 {
        let fine = |d: Duration| {
            u64::try_from(d.as_micros())
                .unwrap_or(u64::MAX)
                .saturating_mul(p.per_micro)
        };
        let refilled = fine(now.saturating_duration_since(self.received));
        // What `remaining` counts whole tokens of: the bucket, or a leaky bucket's queue.
        let full = if p.queue {
            p.tau.saturating_add(p.reach)
        } else {
            p.tau
        };
        let by_remaining = full.saturating_sub(
            self.remaining
                .saturating_mul(p.interval)
                .saturating_add(refilled),
        );
        let by_full = fine(self.full_at.saturating_duration_since(now));
        by_remaining.max(by_full).min(p.tau.saturating_add(p.hold))
    }
}

impl Entry {
    fn live_refusal(&self, now: Instant) -> bool {
        self.refusal.is_some_and(|r| now < r.until)
    }

    /// Whether the entry still says anything at `now`.
    fn live(&self, now: Instant) -> bool {
        now < self.known.full_at
            || self.live_refusal(now)
            || self.forgotten.is_some_and(|at| now < at + FORGOTTEN_FOR)
    }
}

type Shard = Mutex<HashMap<Box<str>, Entry>>;

#[derive(Debug)]
pub(crate) struct DenyCache {
    shards: Box<[Shard]>,
    hasher: RandomState,
    shard_cap: usize,
    /// Entries that hold a refusal (possibly expired): none, and a check needs no lock.
    refusals: AtomicUsize,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            shard_cap: capacity.div_ceil(SHARDS).max(1),
            refusals: AtomicUsize::new(0),
        }
    }

    fn shard(&self, bucket: &str) -> MutexGuard<'_, HashMap<Box<str>, Entry>> {
        let i = usize::try_from(self.hasher.hash_one(bucket) % SHARDS as u64).unwrap_or(0);
        self.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the refusal an entry holds, keeping the count right.
    fn drop_refusal(&self, entry: &mut Entry) {
        if entry.refusal.take().is_some() {
            self.refusals.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The local refusal of this call, if the store's last answer settles it.
    pub(crate) fn check(&self, bucket: &str, limit: &Limit, cost: u32) -> Option<Decision> {
        if self.refusals.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let now = Instant::now();
        let mut shard = self.shard(bucket);
        let entry = shard.get_mut(bucket)?;
        let refusal = entry.refusal?;
        if now >= refusal.until {
            self.drop_refusal(entry);
            if !entry.live(now) {
                shard.remove(bucket);
            }
            return None;
        }
        if entry.limit != *limit || cost < refusal.cost {
            return None;
        }
        Some(
            Decision::new(
                false,
                entry.known.remaining,
                *limit,
                cost,
                refusal
                    .retry_at
                    .saturating_duration_since(now)
                    .max(Duration::from_micros(1)),
                entry.known.full_at.saturating_duration_since(now),
            )
            .with_source(Source::DenyCache),
        )
    }

    /// What the store last said of `bucket` under `limit`, while it still says anything.
    pub(crate) fn known(&self, bucket: &str, limit: &Limit, now: Instant) -> Option<Known> {
        let shard = self.shard(bucket);
        let entry = shard.get(bucket)?;
        // Forgotten since it was said: it says nothing.
        let current = entry.forgotten.is_none_or(|at| entry.known.received > at);
        (entry.limit == *limit && now < entry.known.full_at && current).then_some(entry.known)
    }

    /// Remembers an answer of the store to a request sent at `sent`, answered at `received`:
    /// what the bucket has left, and the refusal if it refused.
    pub(crate) fn remember(&self, bucket: &str, d: &Decision, sent: Instant, received: Instant) {
        // A concurrency limit's slot may come back at any moment: no refusal of it lasts.
        if d.source != Source::Store || d.limit.is_concurrent() {
            return;
        }
        // A limit that may wait is never refused from here (the refusal was for a call that
        // could not wait), but what it left is known all the same.
        let refusal =
            (!d.allowed && !d.retry_after.is_zero() && !d.limit.reserves()).then(|| Refusal {
                cost: d.cost,
                until: sent + d.retry_after,
                retry_at: received + d.retry_after,
            });
        let known = Known {
            remaining: d.remaining,
            received,
            full_at: received + d.reset_after,
            held_here: 0,
        };
        let mut shard = self.shard(bucket);
        if let Some(old) = shard.get_mut(bucket) {
            // Sent before the bucket was forgotten (tokens given back, a reset), answered
            // after: what it says is older than the give-back (issue 44: a refusal repeated
            // for 15 minutes after the calls holding the tokens gave them back).
            if old.forgotten.is_some_and(|at| sent < at) {
                return;
            }
            // What it knew before it was forgotten gives way, however strong.
            let forgotten = old.forgotten.is_some_and(|at| old.known.received <= at);
            if old.limit != d.limit || forgotten {
                self.drop_refusal(old);
                old.limit = d.limit;
                old.known = known;
            } else {
                // Answers to calls in flight together arrive in any order: one sent before
                // another call took or reserved must not replace what that later answer said.
                // Both are lower bounds on how far from full the bucket is, compared at this
                // answer's arrival; the stronger stays (a reset or a refund forgets the
                // bucket, so it never stays too strong).
                let p = crate::algorithm::token_bucket::Params::of(&d.limit);
                if known.short_of_full(&p, received) >= old.known.short_of_full(&p, received) {
                    old.known = known;
                }
            }
            match (refusal, old.refusal) {
                (None, _) => {}
                // A smaller cost refused is the stronger statement; keep the one that refuses
                // more.
                (Some(new), Some(kept)) if kept.cost <= new.cost && kept.until >= new.until => {}
                (Some(new), Some(_)) => old.refusal = Some(new),
                (Some(new), None) => {
                    old.refusal = Some(new);
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                }
            }
            return;
        }
        // A full bucket is what an unknown one is taken to be: nothing to remember.
        if refusal.is_none() && d.reset_after.is_zero() {
            return;
        }
        if shard.len() >= self.shard_cap {
            self.make_room(&mut shard, received);
        }
        if refusal.is_some() {
            self.refusals.fetch_add(1, Ordering::Relaxed);
        }
        shard.insert(
            bucket.into(),
            Entry {
                limit: d.limit,
                known,
                refusal,
                forgotten: None,
            },
        );
    }

    /// Remembers the store's answer on a concurrency limit's set: the slots it had free, until
    /// the last of its leases would end, and the slots of it this instance held then
    /// (`held_here`). No refusal of it is ever repeated (a slot may come back at any moment);
    /// what it had free is what a fallback shares (see
    /// [`Resilience`](crate::policy::Resilience)'s seed of a concurrency limit).
    pub(crate) fn remember_slots(
        &self,
        bucket: &str,
        d: &Decision,
        received: Instant,
        held_here: u64,
    ) {
        if d.source != Source::Store {
            return;
        }
        let known = Known {
            remaining: d.remaining,
            received,
            full_at: received + d.reset_after,
            held_here,
        };
        let mut shard = self.shard(bucket);
        if let Some(old) = shard.get_mut(bucket) {
            self.drop_refusal(old);
            old.limit = d.limit;
            old.known = known;
            return;
        }
        // An empty set is what an unknown one is taken to be.
        if d.reset_after.is_zero() {
            return;
        }
        if shard.len() >= self.shard_cap {
            self.make_room(&mut shard, received);
        }
        shard.insert(
            bucket.into(),
            Entry {
                limit: d.limit,
                known,
                refusal: None,
                forgotten: None,
            },
        );
    }

    /// Frees room in a full shard: entries that say nothing any more, then what buckets had
    /// left (only the fallback's head start is lost), then, if every entry is a live refusal,
    /// all of them (only the shortcut is lost, never a limit).
    fn make_room(&self, shard: &mut HashMap<Box<str>, Entry>, now: Instant) {
        let mut dropped = 0;
        shard.retain(|_, e| {
            let keep = e.live(now);
            dropped += usize::from(!keep && e.refusal.is_some());
            keep
        });
        if shard.len() >= self.shard_cap {
            shard.retain(|_, e| {
                let keep = e.live_refusal(now);
                dropped += usize::from(!keep && e.refusal.is_some());
                keep
            });
        }
        if shard.len() >= self.shard_cap {
            dropped += shard.len();
            shard.clear();
        }
        self.refusals.fetch_sub(dropped, Ordering::Relaxed);
    }

    /// Forgets all that is known of `bucket` (it was reset, or given tokens back).
    pub(crate) fn forget(&self, bucket: &str) {
        let now = Instant::now();
        let mut shard = self.shard(bucket);
        match shard.get_mut(bucket) {
            // Kept, saying nothing, a while: answers to requests sent before now are stale.
            Some(entry) => {
                self.drop_refusal(entry);
                entry.known.full_at = now;
                entry.forgotten = Some(now);
            }
            None => {
                if shard.len() >= self.shard_cap {
                    self.make_room(&mut shard, now);
                }
                shard.insert(
                    bucket.into(),
                    Entry {
                        // Any limit: an entry only forgotten is read by nobody.
                        limit: crate::limit::Limit::per_second(1),
                        known: Known {
                            remaining: 0,
                            received: now,
                            full_at: now,
                            held_here: 0,
                        },
                        refusal: None,
                        forgotten: Some(now),
                    },
                );
            }
        }
    }

    /// Forgets every refusal (resets may have been missed). What buckets had left stays: a
    /// missed reset only makes it say less than there is, and the fallback only stricter.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            let mut s = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            s.retain(|_, e| {
                self.drop_refusal(e);
                now < e.known.full_at
            });
        }
    }

    /// How many refusals are remembered now (some may have expired, until next looked at).
    pub(crate) fn len(&self) -> usize {
        self.refusals.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(limit: Limit, cost: u32, retry_ms: u64) -> Decision {
        Decision::new(
            false,
            0,
            limit,
            cost,
            Duration::from_millis(retry_ms),
            Duration::from_secs(60),
        )
    }

    /// A refusal answered to a request sent before the bucket was forgotten (tokens given
    /// back, a reset) is older than the give-back: it is not remembered, while one sent after
    /// is. Calls refused while others held a bucket's tokens were refused for its whole refill
    /// after those gave them back (issue 44, item 5, on a loaded machine).
    #[test]
    fn an_answer_sent_before_a_give_back_is_not_remembered_after_it() {
        let cache = DenyCache::new(100);
        let limit = Limit::per_hour(4);
        let sent = Instant::now();
        // Known to be used up, then the tokens come back.
        cache.remember("b", &refused(limit, 1, 900_000), sent, sent);
        cache.forget("b");
        assert!(cache.check("b", &limit, 1).is_none());
        // A request sent before the give-back is answered after it.
        cache.remember("b", &refused(limit, 1, 900_000), sent, Instant::now());
        assert!(cache.check("b", &limit, 1).is_none(), "a stale refusal");
        // An unknown bucket forgotten (a reset heard of) is guarded too.
        cache.forget("c");
        cache.remember("c", &refused(limit, 1, 900_000), sent, Instant::now());
        assert!(cache.check("c", &limit, 1).is_none());
        // One sent after is the store's word on the bucket as it is.
        let after = Instant::now() + Duration::from_millis(1);
        cache.remember("b", &refused(limit, 1, 900_000), after, after);
        assert!(cache.check("b", &limit, 1).is_some());
    }

    #[test]
    fn refuses_the_same_or_larger_cost_until_the_store_could_admit() {
        let cache = DenyCache::new(100);
        let limit = Limit::per_minute(6).burst(5);
        let sent = Instant::now();
        cache.remember(
            "b",
            &refused(limit, 2, 10_000),
            sent,
            sent + Duration::from_millis(1),
        );
        let d = cache.check("b", &limit, 2).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.source, Source::DenyCache);
        // Reported from the reply's arrival: never early.
        assert!(d.retry_after > Duration::from_millis(9_990));
        assert!(cache.check("b", &limit, 3).is_some(), "a larger cost");
        assert!(
            cache.check("b", &limit, 1).is_none(),
            "a smaller cost may fit: ask the store"
        );
        assert!(
            cache.check("b", &Limit::per_minute(60), 2).is_none(),
            "another limit"
        );
        assert!(cache.check("other", &limit, 2).is_none());
        cache.forget("b");
        assert!(cache.check("b", &limit, 2).is_none());
    }

    /// Answers to calls in flight together arrive in any order: the answer to a call sent
    /// before another reserved its turn, arriving last, does not replace what the later
    /// answer said (the fallback would start a turn early); a forgotten bucket starts over.
    #[test]
    fn a_late_answer_does_not_weaken_what_is_known() {
        let cache = DenyCache::new(100);
        let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(10));
        let reserved = |owed_ms: u64| {
            Decision::new(
                true,
                0,
                limit,
                1,
                Duration::from_millis(owed_ms),
                Duration::from_millis(owed_ms + 100),
            )
        };
        let now = Instant::now();
        // The twentieth waiter's answer (owing 1.9 s) arrives first, the tenth's (0.9 s) last.
        cache.remember("b", &reserved(1_900), now, now);
        cache.remember("b", &reserved(900), now, now + Duration::from_millis(1));
        let known = cache.known("b", &limit, now).unwrap();
        assert_eq!(known.full_at, now + Duration::from_millis(2_000));
        // A stronger answer replaces it; a forgotten bucket takes what comes next.
        cache.remember("b", &reserved(2_900), now, now);
        assert_eq!(
            cache.known("b", &limit, now).unwrap().full_at,
            now + Duration::from_millis(3_000)
        );
        cache.forget("b");
        // (An answer sent before the forget is stale: see the test below.)
        let later = Instant::now() + Duration::from_millis(1);
        cache.remember("b", &reserved(500), later, later);
        assert_eq!(
            cache.known("b", &limit, later).unwrap().full_at,
            later + Duration::from_millis(600)
        );
    }

    #[test]
    fn entries_expire_from_the_moment_the_request_was_sent() {
        let cache = DenyCache::new(100);
        let limit = Limit::per_second(1);
        let sent = Instant::now() - Duration::from_millis(20);
        cache.remember("b", &refused(limit, 1, 10), sent, Instant::now());
        assert!(
            cache.check("b", &limit, 1).is_none(),
            "sent + retry_after has passed"
        );
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn only_store_refusals_are_remembered_and_the_bound_holds() {
        let cache = DenyCache::new(64);
        let limit = Limit::per_hour(1);
        let now = Instant::now();
        cache.remember(
            "a",
            &Decision::new(true, 0, limit, 1, Duration::ZERO, Duration::ZERO),
            now,
            now,
        );
        cache.remember(
            "f",
            &refused(limit, 1, 1000).with_source(Source::Fallback),
            now,
            now,
        );
        assert_eq!(cache.len(), 0);
        for i in 0..10_000 {
            cache.remember(&format!("k{i}"), &refused(limit, 1, 60_000), now, now);
        }
        assert!(cache.len() <= 64, "{}", cache.len());
        let held: usize = cache.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert_eq!(held, cache.len());
        cache.clear();
        assert_eq!(cache.len(), 0);
    }

    /// What a bucket had left is remembered from every answer that leaves it short of full,
    /// for the fallback; only refusals refuse, and clearing them keeps what was left.
    #[test]
    fn what_was_left_is_known_until_the_bucket_is_full_again() {
        let cache = DenyCache::new(100);
        let limit = Limit::per_minute(6).burst(6);
        let p = crate::algorithm::token_bucket::Params::of(&limit);
        let now = Instant::now();
        let admitted = Decision::new(true, 2, limit, 1, Duration::ZERO, Duration::from_secs(40));
        cache.remember("b", &admitted, now, now);
        assert_eq!(cache.len(), 0, "an admission is no refusal");
        assert!(cache.check("b", &limit, 1).is_none());
        let known = cache.known("b", &limit, now).unwrap();
        assert_eq!(known.remaining, 2);
        // 2 tokens, and no more than 40 s from full allows (6 - 4 tokens).
        assert_eq!(known.short_of_full(&p, now), 4 * p.interval);
        // 10 s later, 1 more token refilled.
        let later = now + Duration::from_secs(10);
        assert_eq!(known.short_of_full(&p, later), 3 * p.interval);
        assert!(
            cache.known("b", &Limit::per_minute(60), now).is_none(),
            "another limit"
        );
        assert!(
            cache
                .known("b", &limit, now + Duration::from_secs(40))
                .is_none(),
            "full"
        );
        // A full bucket is not remembered.
        let full = Decision::new(true, 6, limit, 0, Duration::ZERO, Duration::ZERO);
        cache.remember("f", &full, now, now);
        assert!(cache.known("f", &limit, now).is_none());
        // A refusal refuses; clearing forgets it and keeps what was left.
        cache.remember("b", &refused(limit, 1, 10_000), now, now);
        assert_eq!(cache.len(), 1);
        assert!(cache.check("b", &limit, 1).is_some());
        cache.clear();
        assert_eq!(cache.len(), 0);
        assert!(cache.check("b", &limit, 1).is_none());
        assert_eq!(cache.known("b", &limit, now).unwrap().remaining, 0);
        cache.forget("b");
        assert!(cache.known("b", &limit, now).is_none());
    }

    /// At the bound, what buckets had left gives way to refusals.
    #[test]
    fn at_the_bound_refusals_outlive_what_was_left() {
        let cache = DenyCache::new(SHARDS * 64);
        let limit = Limit::per_hour(10);
        let now = Instant::now();
        for i in 0..32 {
            cache.remember(&format!("r{i}"), &refused(limit, 1, 60_000), now, now);
        }
        let left = Decision::new(true, 3, limit, 1, Duration::ZERO, Duration::from_secs(600));
        for i in 0..10_000 {
            cache.remember(&format!("k{i}"), &left, now, now);
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= SHARDS * 64, "{held}");
        let refusing = (0..32)
            .filter(|i| cache.check(&format!("r{i}"), &limit, 1).is_some())
            .count();
        assert_eq!(refusing, 32, "every refusal kept");
        assert_eq!(cache.len(), 32);
    }
}
