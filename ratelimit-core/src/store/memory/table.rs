//! The table of buckets: shards, each behind a lock of its own, the hash that picks a
//! bucket's shard, the sweep that makes room, and the clock the store reads.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;

use super::slot::{Entry, Key, Slot};
use crate::algorithm::Kernel;
use crate::clock::{Clock, MonotonicClock};

/// How often (in clock microseconds) a shard drops its full buckets.
const SWEEP_EVERY_US: u64 = 1_000_000;

pub(super) struct Inner {
    pub(super) shards: Box<[ShardLock]>,
    pub(super) hasher: DefaultHashBuilder,
    pub(super) shard_shift: u32,
    pub(super) shard_cap: usize,
    pub(super) clock: TimeSource,
    pub(super) evicted: AtomicU64,
    /// Whether full buckets are kept (the fallback's shares, where an absent bucket is not a
    /// full one); they are then dropped only at the bound, or by `MemoryStore::clear`.
    pub(super) keep_full: AtomicBool,
    /// How far UTC is ahead of the clock (µs), read once, at the first decision of a quota by
    /// calendar period: constant, so that a window's end on the clock, which names its count,
    /// is the same at every call (a shift read per call would move it by the time between two
    /// clock reads). A wall clock stepped later does not move the windows of this process.
    pub(super) utc_shift: std::sync::OnceLock<i64>,
}

/// The store's clock: the monotonic one called directly (inlined on the hot path), any other
/// through the trait. Cloned with the same time base, so a store rebuilt from another keeps
/// its clock.
#[derive(Clone)]
pub(super) enum TimeSource {
    Monotonic(MonotonicClock),
    Other(Arc<dyn Clock>),
}

impl TimeSource {
    #[inline]
    pub(super) fn now_micros(&self) -> u64 {
        match self {
            TimeSource::Monotonic(c) => c.now_micros(),
            TimeSource::Other(c) => c.now_micros(),
        }
    }

    /// The wall clock, µs since the epoch (UTC).
    fn utc_micros(&self) -> u64 {
        match self {
            TimeSource::Monotonic(c) => c.utc_micros(),
            TimeSource::Other(c) => c.utc_micros(),
        }
    }
}

pub(super) struct Shard {
    pub(super) table: HashTable<Entry>,
    pub(super) next_sweep_us: u64,
}

/// A shard's lock on cache lines of its own: threads working on neighbouring shards never
/// contend for one line (128 bytes: a line and the one the adjacent-line prefetcher pairs
/// with it).
#[repr(align(128))]
///
/// A read-write lock: the common decision (an existing token bucket) takes the shared side
/// and commits with a compare-and-swap on the bucket's state, so that calls on one shard, or
/// one key, do not queue behind each other; adding or removing buckets, and every other
/// state, take the exclusive side.
pub(super) struct ShardLock(pub(super) RwLock<Shard>);

impl Inner {
    /// How far UTC is ahead of the store's clock, in µs, where `kernel` needs it (a quota by
    /// calendar period finds its windows on the wall clock and keeps its state on the store's):
    /// read once per store ([`Inner::utc_shift`]'s field). 0 for every other kernel.
    #[inline]
    pub(super) fn utc_shift(&self, kernel: &Kernel, now: u64) -> i64 {
        if !matches!(kernel, Kernel::Fixed(_, Some(_))) {
            return 0;
        }
        *self.utc_shift.get_or_init(|| {
            let utc = i64::try_from(self.clock.utc_micros()).unwrap_or(i64::MAX);
            utc - i64::try_from(now).unwrap_or(i64::MAX)
        })
    }

    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        hash_bytes(&self.hasher, key)
    }

    /// The shard of a key's hash. The table uses the low bits and the top 7; shard on the
    /// bits just below the top.
    pub(super) fn shard_of(&self, hash: u64) -> usize {
        usize::try_from((hash << 7) >> self.shard_shift).unwrap_or(0)
    }

    /// Adds a bucket the shard does not hold, making room first when it is due.
    pub(super) fn insert(&self, shard: &mut Shard, hash: u64, key: &[u8], state: Slot, now: u64) {
        if now >= shard.next_sweep_us || shard.table.len() >= self.shard_cap {
            self.make_room(shard, now);
        }
        let hasher = &self.hasher;
        shard
            .table
            .insert_unique(hash, Entry(Key::new(key), state), |e| {
                hash_bytes(hasher, &e.0)
            });
    }

    /// Stores `state` as the bucket `key`'s, updating it in place or adding it.
    pub(super) fn put(&self, shard: &mut Shard, hash: u64, key: &[u8], state: Slot, now: u64) {
        match shard.table.find_mut(hash, |e| &*e.0 == key) {
            Some(entry) => entry.1 = state,
            None => self.insert(shard, hash, key, state, now),
        }
    }

    /// Drops full buckets; if the shard is still at its bound, evicts the eighth of it that is
    /// closest to full (amortised O(log n) per insert).
    fn make_room(&self, shard: &mut Shard, now_us: u64) {
        shard.next_sweep_us = now_us + SWEEP_EVERY_US;
        let now_ms = now_us / 1000;
        if !self.keep_full.load(Ordering::Relaxed) {
            shard.table.retain(|e| e.1.expire_ms() > now_ms);
        }
        if shard.table.len() < self.shard_cap {
            return;
        }
        let mut expiries: Vec<u64> = shard.table.iter().map(|e| e.1.expire_ms()).collect();
        let cut = (self.shard_cap / 8).max(1).min(expiries.len() - 1);
        let (_, threshold, _) = expiries.select_nth_unstable(cut);
        let threshold = *threshold;
        let before = shard.table.len();
        shard.table.retain(|e| e.1.expire_ms() > threshold);
        let evicted = (before - shard.table.len()) as u64;
        self.evicted.fetch_add(evicted, Ordering::Relaxed);
        crate::observe::log!(
            warn,
            evicted,
            bound = self.shard_cap * self.shards.len(),
            "in-memory rate-limit store is full of active buckets; evicted the ones closest to \
             full (raise the bound with MemoryStore::with_max_keys)"
        );
    }
}

/// A key's hash: its bytes, in one write (the table compares whole keys, so no length is
/// needed to tell them apart).
#[inline]
pub(super) fn hash_bytes(hasher: &DefaultHashBuilder, key: &[u8]) -> u64 {
    let mut h = hasher.build_hasher();
    h.write(key);
    h.finish()
}

pub(super) fn lock(shard: &ShardLock) -> RwLockWriteGuard<'_, Shard> {
    // No code that can panic runs under the lock, so a poisoned shard is still consistent.
    shard
        .0
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(super) fn read(shard: &ShardLock) -> RwLockReadGuard<'_, Shard> {
    shard
        .0
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
