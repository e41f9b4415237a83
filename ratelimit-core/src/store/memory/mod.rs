use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;

use super::Store;
use crate::algorithm::{Kernel, Outcome, fixed_window, interval_bucket, sliding_log, token_bucket};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::errors::Error;
use crate::limit::Limit;
use crate::pipeline::check::{self, Check};

mod slot;
mod table;

use slot::{Entry, PackedBucket, Slot, decide, held_slot, share_kernel, stricter};
use table::{Inner, Shard, ShardLock, TimeSource, lock, read};

/// Default bound on the number of buckets a [`MemoryStore`] keeps.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// Token buckets in this process's memory, with exactly the arithmetic of the Redis script.
///
/// It is the store of a single-process service, the fallback when Redis fails, and the oracle
/// of the conformance tests. Buckets are spread over independently locked shards (no global
/// lock on the hot path); full buckets are dropped, so memory tracks active keys; the number of
/// buckets is bounded (see [`MemoryStore::with_max_keys`]).
///
/// ```
/// use ratelimit_core::Limit;
/// use ratelimit_core::clock::ManualClock;
/// use ratelimit_core::store::{MemoryStore, Store};
/// use std::time::Duration;
///
/// # tokio_test_block_on(async {
/// let clock = ManualClock::new();
/// let store = MemoryStore::with_clock(clock.clone());
/// let limit = Limit::per_hour(1);
/// assert!(store.check("k", &limit, 1).await?.allowed);
/// assert!(!store.check("k", &limit, 1).await?.allowed);
/// clock.advance(Duration::from_secs(3600));
/// assert!(store.check("k", &limit, 1).await?.allowed);
/// # Ok::<(), ratelimit_core::Error>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl MemoryStore {
    /// A store on the process's monotonic clock, bounded to [`DEFAULT_MAX_KEYS`] buckets.
    pub fn new() -> MemoryStore {
        MemoryStore::build(
            TimeSource::Monotonic(MonotonicClock::new()),
            DEFAULT_MAX_KEYS,
        )
    }

    /// A store on `clock` (a [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn with_clock(clock: impl Clock) -> MemoryStore {
        MemoryStore::build(TimeSource::Other(Arc::new(clock)), DEFAULT_MAX_KEYS)
    }

    /// A store on the same clock, bounded to about `max_keys` buckets (at least one per
    /// shard). It starts empty: call it before the store is used or cloned, as a builder step
    /// (`MemoryStore::with_clock(clock).with_max_keys(n)`); clones made before it keep the
    /// old store.
    ///
    /// When the bound is reached the full buckets are dropped first; if every bucket is still
    /// active, the ones closest to full are evicted (each eviction can admit at most that
    /// bucket's missing tokens early) and [`evicted_active`](MemoryStore::evicted_active)
    /// counts them, with a warning in the log.
    #[must_use]
    pub fn with_max_keys(self, max_keys: usize) -> MemoryStore {
        MemoryStore::build(self.inner.clock.clone(), max_keys)
    }

    fn build(clock: TimeSource, max_keys: usize) -> MemoryStore {
        let parallelism = std::thread::available_parallelism().map_or(4, usize::from);
        let shards = (parallelism * 8).next_power_of_two().clamp(8, 256);
        let shard_shift = 64 - shards.trailing_zeros();
        let shard_cap = max_keys.div_ceil(shards).max(1);
        MemoryStore {
            inner: Arc::new(Inner {
                shards: (0..shards)
                    .map(|_| {
                        ShardLock(RwLock::new(Shard {
                            table: HashTable::new(),
                            next_sweep_us: 0,
                        }))
                    })
                    .collect(),
                hasher: DefaultHashBuilder::default(),
                shard_shift,
                shard_cap,
                clock,
                evicted: AtomicU64::new(0),
                keep_full: AtomicBool::new(false),
                utc_shift: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The number of buckets held now (full ones may linger until the next sweep).
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| read(s).table.len()).sum()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Deletes the bucket `key` (it is full again).
    pub fn remove(&self, key: &str) {
        let key = key.as_bytes();
        let inner = &*self.inner;
        let hash = inner.hash(key);
        let mut shard = lock(&inner.shards[inner.shard_of(hash)]);
        if let Ok(entry) = shard.table.find_entry(hash, |e| &*e.0 == key) {
            entry.remove();
        }
    }

    /// Drops every bucket: they are all full again.
    pub fn clear(&self) {
        for shard in &*self.inner.shards {
            lock(shard).table.clear();
        }
    }

    /// Makes this the store of the fallback policy, whose shares of a limit may hold more
    /// than an absent bucket does: full buckets are then kept until the bound needs room.
    pub(crate) fn keep_full_buckets(&self) {
        self.inner.keep_full.store(true, Ordering::Relaxed);
    }

    /// Active buckets evicted because the store was at its bound.
    pub fn evicted_active(&self) -> u64 {
        self.inner.evicted.load(Ordering::Relaxed)
    }

    /// Decides synchronously: the memory store never waits. A call that reserved its tokens
    /// ahead (a limit with a [`wait`](Limit::wait), or a leaky bucket) is admitted with the
    /// wait before it may go in `retry_after`: the caller waits it (the limiter does).
    pub fn check_now(&self, key: &str, limit: &Limit, cost: u32) -> Decision {
        let outcome = self.check_bytes(key.as_bytes(), limit, cost);
        Decision::from_outcome(&outcome, *limit, cost)
    }

    /// [`check_now`](MemoryStore::check_now) on a key given as its bytes (the limiter's, built
    /// on the stack), answering the bucket's outcome: 40 bytes, against a [`Decision`]'s 112,
    /// which the limiter builds once, where it returns it (moving a `Decision` out through
    /// each layer was a fifth of a memory check, benches/results/history.md 4.6).
    #[inline]
    pub(crate) fn check_bytes(&self, key: &[u8], limit: &Limit, cost: u32) -> Outcome<u64> {
        self.check_with(key, Kernel::of(limit), cost)
    }

    /// Answers as [`check_now`](MemoryStore::check_now) would, and takes nothing; `remaining`
    /// is what the bucket holds now (see [`Store::peek`]).
    pub fn peek_now(&self, key: &str, limit: &Limit, cost: u32) -> Decision {
        let key = key.as_bytes();
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let hash = inner.hash(key);
        let shard = read(&inner.shards[inner.shard_of(hash)]);
        let slot = shard.table.find(hash, |e| &*e.0 == key).map(|e| &e.1);
        let kernel = Kernel::of(limit);
        let shift = inner.utc_shift(&kernel, now);
        let outcome = Outcome::peek(|c| decide(kernel, now, shift, slot, c), u64::from(cost));
        drop(shard);
        Decision::from_outcome(&outcome, *limit, cost)
    }

    /// Decides `check` with this instance's share of its limit when `instances` share it (1:
    /// the whole limit; what the pipeline asks of a memory limiter). A share is a
    /// token bucket's exact share of the rate and the burst, whatever the limit's algorithm:
    /// a window's count cannot be split between instances that do not talk to each other.
    ///
    /// `short_of_full`: how far from full the store last said the bucket is now, owed
    /// reservations included (fine units of the limit's token bucket, see
    /// [`Known::short_of_full`](crate::deny_cache::Known::short_of_full)). The share then holds no
    /// more than its part of what that leaves: an absent bucket starts from it, and one left
    /// by an earlier outage that holds more is read as starting from it.
    pub(crate) fn check_share(
        &self,
        check: Check<'_>,
        instances: u32,
        short_of_full: Option<u64>,
    ) -> Decision {
        let (kernel, seeded) = share_kernel(&check, instances, short_of_full);
        let key = check.bucket.as_bytes();
        let outcome = if seeded {
            self.check_seeded(key, kernel, check.cost)
        } else {
            self.check_with(key, kernel, check.cost)
        };
        Decision::from_store_outcome(&outcome, *check.limit, check.cost)
    }

    /// [`check_with`](Self::check_with) for a kernel seeded from what the store last said:
    /// under the exclusive lock, on the stricter of the bucket there and the seeded one.
    fn check_seeded(&self, key: &[u8], kernel: Kernel, cost: u32) -> Outcome<u64> {
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let hash = inner.hash(key);
        let shift = inner.utc_shift(&kernel, now);
        let mut shard = lock(&inner.shards[inner.shard_of(hash)]);
        match shard.table.find_mut(hash, |e| &*e.0 == key) {
            Some(entry) => {
                let slot = stricter(kernel, now, Some(&entry.1));
                let outcome = decide(kernel, now, shift, slot, u64::from(cost));
                outcome.map_state(|new_state| {
                    entry.1 = new_state;
                    now
                })
            }
            None => {
                let outcome = decide(kernel, now, shift, None, u64::from(cost));
                outcome.map_state(|new_state| {
                    inner.insert(&mut shard, hash, key, new_state, now);
                    now
                })
            }
        }
    }

    /// Gives `cost` tokens back to the bucket `key` (a reservation whose caller gave up
    /// waiting, a refund), with this instance's share of `limit` as
    /// [`check_share`](Self::check_share) decided it: the bucket as it is now, less those
    /// tokens, floored at full. Only the buckets (the token bucket, either refill, and the
    /// leaky bucket) can give back without the time of the take; a window, or a bucket the
    /// store does not hold (full, or forgotten), is left as it is.
    pub(crate) fn give_back(&self, key: &str, limit: &Limit, cost: u32, instances: u32) {
        let kernel = share_kernel(&Check::new(key, limit, cost), instances, None).0;
        if !matches!(kernel, Kernel::Bucket(_) | Kernel::Interval(_)) {
            return;
        }
        let key = key.as_bytes();
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let hash = inner.hash(key);
        let mut shard = lock(&inner.shards[inner.shard_of(hash)]);
        let Ok(mut entry) = shard.table.find_entry(hash, |e| &*e.0 == key) else {
            return;
        };
        let cost = u64::from(cost);
        let given = match (kernel, &entry.get().1) {
            (Kernel::Bucket(p), Slot::Bucket(s)) => {
                token_bucket::give_back(now, Some(s.unpack()), p, cost)
                    .map(|state| Slot::Bucket(PackedBucket::pack(state)))
            }
            (Kernel::Interval(p), Slot::Interval(s)) => {
                interval_bucket::give_back(now, Some(*s), p, cost).map(Slot::Interval)
            }
            // Another algorithm's state: not this limit's tokens.
            _ => return,
        };
        match given {
            Some(slot) => entry.get_mut().1 = slot,
            None => drop(entry.remove()),
        }
    }

    /// Settles a call that took `estimate` tokens from `key` under `limit` at `taken_at` (this
    /// store's clock), with this instance's share when `instances` share it (as
    /// [`check_share`](Self::check_share)): a smaller `actual` gives the difference back (as
    /// [`give_back`](Self::give_back); a window only while the window the call took from is
    /// the current one), a larger one takes it at once, below empty if need be, by at most the
    /// limit's [debt bound](Limit::debt_bound) (its share of it). The twins' arithmetic, as
    /// `multi.lua`'s mode 5. Returns the tokens taken and those given back. Only the token
    /// bucket (smooth), the leaky bucket, the fixed window and the sliding log settle; any
    /// other limit is left as it is (the limiter never asks).
    pub(crate) fn settle(
        &self,
        key: &str,
        limit: &Limit,
        instances: u32,
        (estimate, actual): (u32, u32),
        taken_at: u64,
    ) -> (u64, u64) {
        let check = Check::new(key, limit, estimate);
        let kernel = share_kernel(&check, instances, None).0;
        let debt = u64::from(limit.debt_bound()).div_ceil(u64::from(instances.max(1)));
        let key = key.as_bytes();
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let shift = inner.utc_shift(&kernel, now);
        let hash = inner.hash(key);
        let mut shard = lock(&inner.shards[inner.shard_of(hash)]);
        let (estimate, actual) = (u64::from(estimate), u64::from(actual));
        let found = shard.table.find_entry(hash, |e| &*e.0 == key);
        if actual < estimate {
            let given = estimate - actual;
            let Ok(mut entry) = found else {
                return (0, given);
            };
            let left = match (kernel, &entry.get().1) {
                // A bucket full again is dropped.
                (Kernel::Bucket(p), Slot::Bucket(b)) => Some(
                    token_bucket::give_back(now, Some(b.unpack()), p, given)
                        .map(|state| Slot::Bucket(PackedBucket::pack(state))),
                ),
                (Kernel::Fixed(p, calendar), Slot::Fixed(w)) => fixed_window::give_back_in_frame(
                    now,
                    Some(*w),
                    p,
                    calendar,
                    shift,
                    given,
                    taken_at,
                )
                .map(|left| left.map(Slot::Fixed)),
                (Kernel::Log(_), Slot::Log(log)) => {
                    let left = sliding_log::give_back(&log.0, given, taken_at);
                    let expire_ms = log.1;
                    Some(
                        (!left.is_empty())
                            .then(|| Slot::Log(Box::new((left.into_boxed_slice(), expire_ms)))),
                    )
                }
                _ => None,
            };
            match left {
                Some(Some(slot)) => entry.get_mut().1 = slot,
                Some(None) => drop(entry.remove()),
                None => {}
            }
            return (0, given);
        }
        let extra = actual - estimate;
        if extra == 0 {
            return (0, 0);
        }
        let there = found.as_ref().ok().map(|entry| &entry.get().1);
        let (slot, taken) = match (kernel, there) {
            (Kernel::Bucket(p), there) => {
                let state = match there {
                    Some(Slot::Bucket(b)) => Some(b.unpack()),
                    _ => None,
                };
                let (state, taken) = token_bucket::take_over(now, state, p, extra, debt);
                (Slot::Bucket(PackedBucket::pack(state)), taken)
            }
            (Kernel::Fixed(p, calendar), there) => {
                let state = match there {
                    Some(Slot::Fixed(w)) => Some(*w),
                    _ => None,
                };
                let (state, taken) =
                    fixed_window::take_over_in_frame(now, state, p, calendar, shift, extra, debt);
                (Slot::Fixed(state), taken)
            }
            (Kernel::Log(p), there) => {
                let log: &[u64] = match there {
                    Some(Slot::Log(log)) => &log.0,
                    _ => &[],
                };
                let (Some(log), taken) = sliding_log::take_over(now, log, p, extra, debt) else {
                    return (0, 0);
                };
                let expire_ms = sliding_log::expire_ms(&log, p).unwrap_or(0);
                (
                    Slot::Log(Box::new((log.into_boxed_slice(), expire_ms))),
                    taken,
                )
            }
            _ => return (0, 0),
        };
        match found {
            Ok(mut entry) => entry.get_mut().1 = slot,
            Err(_) => inner.insert(&mut shard, hash, key, slot, now),
        }
        (taken, 0)
    }

    /// Gives back the concurrency slots (1 ..= `cost`, and the ticket) of the call `holder`
    /// on the key `key`: the key is dropped once it holds nothing live.
    pub(crate) fn release(&self, key: &str, holder: u64, cost: u64) {
        self.with_held(key, false, |now, entries| {
            *entries = crate::algorithm::concurrency::release(now, entries, holder, cost);
        });
    }

    /// Renews the leases of the concurrency slots of the call `holder` on `key`, writing them
    /// whether or not they are there (see [`concurrency::renew`](crate::algorithm::concurrency::renew));
    /// returns how many were live (0: the call had lost them, or never had them here).
    pub(crate) fn renew(&self, key: &str, holder: u64, cost: u64, lease_us: u64) -> u64 {
        let mut renewed = 0;
        self.with_held(key, true, |now, entries| {
            renewed = crate::algorithm::concurrency::renew(now, entries, holder, cost, lease_us);
        });
        renewed
    }

    /// Runs `f` on the concurrency set `key` under its shard's lock, and stores what it
    /// leaves (dropping the key when nothing is left). An absent key is an empty set when
    /// `create`, else left alone; a key of another algorithm is always left alone.
    fn with_held(
        &self,
        key: &str,
        create: bool,
        f: impl FnOnce(u64, &mut Vec<crate::algorithm::concurrency::Entry>),
    ) {
        let key = key.as_bytes();
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let hash = inner.hash(key);
        let mut shard = lock(&inner.shards[inner.shard_of(hash)]);
        let Ok(mut entry) = shard.table.find_entry(hash, |e| &*e.0 == key) else {
            if create {
                let mut entries = Vec::new();
                f(now, &mut entries);
                if entries.iter().any(|e| e.1 > now) {
                    inner.insert(&mut shard, hash, key, held_slot(entries), now);
                }
            }
            return;
        };
        let Slot::Held(held) = &mut entry.get_mut().1 else {
            return;
        };
        let mut entries = std::mem::take(&mut held.0);
        f(now, &mut entries);
        if entries.iter().any(|e| e.1 > now) {
            entry.get_mut().1 = held_slot(entries);
        } else {
            entry.remove();
        }
    }

    /// Decides several limits of one call together (see [`Store::check_all`]), with this
    /// instance's share of each when `instances` share them (as
    /// [`check_share`](MemoryStore::check_share)). With `veto`, another limit of the call
    /// refused it already: nothing is taken, and each limit still answers as it would.
    ///
    /// `short_of_full`, when given, has one entry per check: how far from full the store last
    /// said that bucket is (as [`check_share`](Self::check_share) takes it).
    pub(crate) fn check_all_shared(
        &self,
        checks: &[Check<'_>],
        instances: u32,
        veto: bool,
        short_of_full: Option<&[Option<u64>]>,
    ) -> Vec<Decision> {
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let located: Vec<(u64, usize)> = checks
            .iter()
            .map(|check| {
                let hash = inner.hash(check.bucket.as_bytes());
                (hash, inner.shard_of(hash))
            })
            .collect();
        // Every shard involved, locked in one order, so that two calls never wait on each
        // other.
        let mut order: Vec<usize> = located.iter().map(|l| l.1).collect();
        order.sort_unstable();
        order.dedup();
        let mut shards: Vec<RwLockWriteGuard<'_, Shard>> =
            order.iter().map(|&i| lock(&inner.shards[i])).collect();
        let guard_of = |shard: usize| order.binary_search(&shard).unwrap_or(0);

        // Each limit's outcome for the call's cost, with what it would answer for a cost of
        // 0: its state as it stands, for a limit that would admit a call that is refused.
        let decide_at = |i: usize, cost: u64| {
            let check = &checks[i];
            let (hash, shard) = located[i];
            let seed = short_of_full.and_then(|h| h.get(i).copied().flatten());
            let (kernel, seeded) = share_kernel(check, instances, seed);
            let slot = shards[guard_of(shard)]
                .table
                .find(hash, |e| *e.0 == *check.bucket.as_bytes())
                .map(|e| &e.1);
            let slot = if seeded {
                stricter(kernel, now, slot)
            } else {
                slot
            };
            decide(kernel, now, inner.utc_shift(&kernel, now), slot, cost)
        };
        let mut outcomes: Vec<Outcome<Slot>> = (0..checks.len())
            .map(|i| decide_at(i, u64::from(checks[i].cost)))
            .collect();
        // A limit in shadow mode does not refuse the call.
        let admitted = !veto
            && outcomes
                .iter()
                .zip(checks)
                .all(|(o, check)| o.allowed || check.limit.is_shadow());
        if !admitted {
            for (i, o) in outcomes.iter_mut().enumerate() {
                if o.allowed {
                    let as_is = decide_at(i, 0);
                    o.remaining = as_is.remaining;
                    o.reset_after_us = as_is.reset_after_us;
                }
            }
        }
        let mut decisions = Vec::with_capacity(checks.len());
        for ((o, check), &(hash, shard)) in outcomes.iter_mut().zip(checks).zip(&located) {
            // A refusal writes what it must (a state read differently from what it says);
            // a limit that would have admitted a refused call writes nothing.
            if let Some(state) = o.new_state.take()
                && (admitted || !o.allowed)
            {
                inner.put(
                    &mut shards[guard_of(shard)],
                    hash,
                    check.bucket.as_bytes(),
                    state,
                    now,
                );
            }
            decisions.push(Decision::from_outcome(o, *check.limit, check.cost).decided_at(now));
        }
        decisions
    }

    /// The call's outcome; its `new_state` the store's time when it wrote the bucket (what a
    /// settlement of the tokens it took needs), read once, as the decision's.
    fn check_with(&self, key: &[u8], kernel: Kernel, cost: u32) -> Outcome<u64> {
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let hash = inner.hash(key);
        let shard = &inner.shards[inner.shard_of(hash)];
        if let Kernel::Bucket(p) = kernel {
            let shared = read(shard);
            if let Some(Entry(_, Slot::Bucket(bucket))) = shared.table.find(hash, |e| *e.0 == *key)
                && let Some(outcome) = bucket.decide_shared(now, p, u64::from(cost))
            {
                drop(shared);
                return outcome.map_state(|()| now);
            }
        }
        let mut shard = lock(shard);

        let shift = inner.utc_shift(&kernel, now);
        // One probe of the table: a bucket that exists is updated in place.
        let outcome = match shard.table.find_mut(hash, |e| &*e.0 == key) {
            Some(entry) => {
                let outcome = decide(kernel, now, shift, Some(&entry.1), u64::from(cost));
                outcome.map_state(|new_state| {
                    entry.1 = new_state;
                    now
                })
            }
            None => {
                let outcome = decide(kernel, now, shift, None, u64::from(cost));
                outcome.map_state(|new_state| {
                    inner.insert(&mut shard, hash, key, new_state, now);
                    now
                })
            }
        };
        drop(shard);
        outcome
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.inner.shards.len())
            .field(
                "max_keys",
                &(self.inner.shard_cap * self.inner.shards.len()),
            )
            .field("evicted_active", &self.evicted_active())
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    async fn check(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        Ok(self.check_now(key, limit, cost))
    }

    async fn reset(&self, key: &str) -> Result<(), Error> {
        self.remove(key);
        Ok(())
    }

    async fn peek(&self, key: &str, limit: &Limit, cost: u32) -> Result<Decision, Error> {
        Ok(self.peek_now(key, limit, cost))
    }

    async fn check_all(&self, checks: &[(&str, &Limit, u32)]) -> Result<Vec<Decision>, Error> {
        Ok(self.check_all_shared(&check::from_tuples(checks), 1, false, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::OfLimit as _;
    use crate::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn full_buckets_are_dropped() {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let limit = Limit::per_second(10);
        for i in 0..1000 {
            store.check_now(&format!("k{i}"), &limit, 1);
        }
        assert_eq!(store.len(), 1000);
        clock.advance(Duration::from_secs(2));
        // Any insert after the sweep period drops the full buckets of its shard; touch every shard.
        for i in 0..1000 {
            store.check_now(&format!("k{i}"), &limit, 1);
        }
        clock.advance(Duration::from_secs(2));
        for i in 0..4000 {
            store.check_now(&format!("new{i}"), &limit, 1);
        }
        assert_eq!(store.len(), 4000, "every old bucket was full and is gone");
    }

    #[test]
    fn a_bound_set_on_a_clone_keeps_the_clock() {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let shared = store.clone();
        let bounded = shared.with_max_keys(64);
        let limit = Limit::per_hour(1);
        assert!(bounded.check_now("k", &limit, 1).allowed);
        assert!(!bounded.check_now("k", &limit, 1).allowed);
        clock.advance(Duration::from_secs(3600));
        assert!(
            bounded.check_now("k", &limit, 1).allowed,
            "the manual clock still drives the bounded store"
        );
        drop(store);
    }

    #[test]
    fn the_bound_holds_under_active_keys() {
        let store = MemoryStore::with_clock(ManualClock::new()).with_max_keys(1024);
        let limit = Limit::per_hour(1);
        for i in 0..100_000 {
            store.check_now(&format!("k{i}"), &limit, 1);
        }
        let shards = store.inner.shards.len();
        assert!(
            store.len() <= 1024usize.div_ceil(shards) * shards,
            "{}",
            store.len()
        );
        assert!(store.evicted_active() > 0);
    }

    #[test]
    fn calls_from_many_threads_on_one_bucket_take_each_token_once() {
        // The clock stands still: exactly the burst is admitted, however the calls interleave
        // on the bucket's compare-and-swap.
        let store = MemoryStore::with_clock(ManualClock::new());
        let limit = Limit::per_hour(1).burst(2000);
        assert!(store.check_now("k", &limit, 1).allowed, "the bucket exists");
        let admitted: u64 = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..1000)
                            .map(|_| u64::from(store.check_now("k", &limit, 1).allowed))
                            .sum::<u64>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        assert_eq!(admitted, 1999);
        assert_eq!(store.check_now("k", &limit, 1).remaining, 0);
    }

    proptest::proptest! {
        /// The store decides as the token bucket's arithmetic does on the state it keeps,
        /// whether a call takes the shared path (a state in whole microseconds, written under
        /// the limit deciding) or the exclusive one (a new bucket, another fine unit, another
        /// limit).
        #[test]
        fn the_store_decides_as_the_arithmetic(
            steps in proptest::collection::vec((0u64..400_000, 1u32..4, 0usize..4), 1..80),
        ) {
            let limits = [
                Limit::per_second(10).burst(5),
                Limit::per_second(3).burst(4),
                Limit::per_second(20).burst(3),
                Limit::per_second(10).burst(5).wait(Duration::from_millis(300)),
            ];
            let clock = ManualClock::new();
            let store = MemoryStore::with_clock(clock.clone());
            let mut state: Option<token_bucket::State> = None;
            for (dt, cost, which) in steps {
                clock.advance(Duration::from_micros(dt));
                let limit = limits[which];
                let cost = cost.min(limit.burst_capacity());
                let now = clock.now_micros();
                let p = token_bucket::Params::of(&limit);
                let o = token_bucket::decide(now, state, p, u64::from(cost));
                if o.new_state.is_some() {
                    state = o.new_state;
                }
                let d = store.check_now("k", &limit, cost);
                proptest::prop_assert_eq!(d, Decision::from_outcome(&o, limit, cost));
            }
        }

        /// Every state the token bucket stores survives the 24-byte layout unchanged.
        #[test]
        fn packed_buckets_round_trip(
            expire_ms in 1u64..(1 << 50),
            per_micro in 1u64..=u64::from(u32::MAX),
            remainder in 0u64..(1 << 42),
            interval in 1u64..(1 << 56),
        ) {
            let s = token_bucket::State {
                expire_ms,
                remainder: remainder % (1000 * per_micro),
                per_micro,
                interval,
            };
            proptest::prop_assert_eq!(PackedBucket::pack(s).unpack(), s);
        }
    }
}
