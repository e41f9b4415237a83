//! The local deny cache: once the store refuses a call on a bucket, calls on that bucket with
//! the same or a larger cost are refused here, without a round trip, until the earliest
//! instant the store could admit them.
//!
//! It can only refuse, never admit, and it refuses only what the store would refuse too: a
//! bucket refused at server time `s` with `retry_after` R cannot admit the same cost before
//! `s + R` (other instances can only take more tokens), and `s` is no earlier than the moment
//! the request was sent, so entries expire at `sent + R`. The `retry_after` it reports counts
//! from the moment the reply arrived (`received + R`), so it is never early either.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::decision::Source;
use crate::{Decision, Limit};

/// Default bound on the number of refused buckets remembered.
pub const DEFAULT_DENY_CACHE_CAPACITY: usize = 65_536;

const SHARDS: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Entry {
    limit: Limit,
    cost: u32,
    remaining: u64,
    /// Refuse locally while now < this: `sent + retry_after`.
    until: Instant,
    /// What to report: `received + retry_after`, `received + reset_after`.
    retry_at: Instant,
    full_at: Instant,
}

type Shard = Mutex<HashMap<Box<str>, Entry>>;

#[derive(Debug)]
pub(crate) struct DenyCache {
    shards: Box<[Shard]>,
    hasher: RandomState,
    shard_cap: usize,
    len: AtomicUsize,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            shard_cap: capacity.div_ceil(SHARDS).max(1),
            len: AtomicUsize::new(0),
        }
    }

    fn shard(&self, bucket: &str) -> MutexGuard<'_, HashMap<Box<str>, Entry>> {
        let i = usize::try_from(self.hasher.hash_one(bucket) % SHARDS as u64).unwrap_or(0);
        self.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The local refusal of this call, if the store's last answer settles it.
    pub(crate) fn check(&self, bucket: &str, limit: &Limit, cost: u32) -> Option<Decision> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let now = Instant::now();
        let mut shard = self.shard(bucket);
        let entry = *shard.get(bucket)?;
        if now >= entry.until {
            shard.remove(bucket);
            self.len.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        if entry.limit != *limit || cost < entry.cost {
            return None;
        }
        Some(
            Decision::new(
                false,
                entry.remaining,
                *limit,
                cost,
                entry
                    .retry_at
                    .saturating_duration_since(now)
                    .max(Duration::from_micros(1)),
                entry.full_at.saturating_duration_since(now),
            )
            .with_source(Source::DenyCache),
        )
    }

    /// Remembers a refusal by the store of a request sent at `sent`, answered at `received`.
    pub(crate) fn remember(&self, bucket: &str, d: &Decision, sent: Instant, received: Instant) {
        if d.allowed || d.source != Source::Store || d.retry_after.is_zero() {
            return;
        }
        let entry = Entry {
            limit: d.limit,
            cost: d.cost,
            remaining: d.remaining,
            until: sent + d.retry_after,
            retry_at: received + d.retry_after,
            full_at: received + d.reset_after,
        };
        let mut shard = self.shard(bucket);
        if shard.len() >= self.shard_cap && !shard.contains_key(bucket) {
            let before = shard.len();
            shard.retain(|_, e| e.until > received);
            if shard.len() >= self.shard_cap {
                // Every entry is live: forget them (only the shortcut is lost, never a limit).
                shard.clear();
            }
            self.len.fetch_sub(before - shard.len(), Ordering::Relaxed);
        }
        // A smaller cost refused is the stronger statement; keep the entry that refuses more.
        match shard.get_mut(bucket) {
            Some(old)
                if old.limit == entry.limit
                    && old.cost <= entry.cost
                    && old.until >= entry.until => {}
            Some(old) => *old = entry,
            None => {
                shard.insert(bucket.into(), entry);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn forget(&self, bucket: &str) {
        if self.shard(bucket).remove(bucket).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            let mut s = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.len.fetch_sub(s.len(), Ordering::Relaxed);
            s.clear();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
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
}
