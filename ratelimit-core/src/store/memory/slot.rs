//! What the store keeps per key: the key itself (inline when short), the state of the
//! algorithm that wrote it (exactly what that algorithm's script keeps in Redis, packed), and
//! the one function that decides a call on it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithm::token_bucket::{self, Params};
use crate::algorithm::{Kernel, OfLimit as _, Outcome};
use crate::algorithm::{concurrency, fixed_window, interval_bucket, sliding_log, sliding_window};
use crate::pipeline::check::Check;

/// One bucket: its key and its state, in one cache line when the key is short (most are): a
/// lookup then reads one line, where a key on the heap costs a second, dependent miss.
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct Entry(pub(super) Key, pub(super) Slot);

const _: () = assert!(std::mem::size_of::<Entry>() == 64);

/// Keys up to this long are kept in the entry.
pub(super) const INLINE_KEY_LEN: usize = 38;

/// A bucket's key, as bytes (the limiter looks buckets up by keys it built on the stack).
#[derive(Debug)]
pub(super) enum Key {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_LEN],
    },
    Heap(Box<[u8]>),
}

impl Key {
    pub(super) fn new(key: &[u8]) -> Key {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY_LEN => {
                let mut bytes = [0; INLINE_KEY_LEN];
                bytes[..key.len()].copy_from_slice(key);
                Key::Inline { len, bytes }
            }
            _ => Key::Heap(key.into()),
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(key) => key,
        }
    }
}

/// What the store keeps for one key: the state of the algorithm that wrote it, exactly what
/// the algorithm's script keeps in Redis. As small as the token bucket's state alone (24
/// bytes, asserted below): the token bucket's state carries a one-value tag byte whose other
/// 255 values are this enum's tags, every other variant fits in the two words before it, and
/// the two rarer states are boxed.
#[derive(Debug)]
pub(super) enum Slot {
    Bucket(PackedBucket),
    Interval(interval_bucket::State),
    Fixed(fixed_window::State),
    /// With its expiry, which the state says only with the limit's period.
    Sliding(Box<(sliding_window::State, u64)>),
    /// Admission times, oldest first, and the expiry.
    Log(Box<(Box<[u64]>, u64)>),
    /// A concurrency limit's slots and tickets, and the expiry.
    Held(Box<(Vec<concurrency::Entry>, u64)>),
}

const _: () = assert!(std::mem::size_of::<Slot>() == 24);

/// A [`token_bucket::State`] laid out for [`Slot`], in 24 bytes with the tag byte last: the instant
/// the bucket is full again as whole microseconds rounded up (`tat_us`) less `frac` fine units
/// (below `per_micro`); the fine unit in 32 bits (it is `replenish / gcd(period, replenish)`,
/// so it always fits); and the interval in 56 bits (a limit's is below 2^51, a fallback
/// share's below 2^56, see `Params::shared`).
///
/// `tat_us` alone changes under the shard's shared lock, by compare-and-swap, when the state
/// is in whole microseconds (`per_micro == 1`, so `frac == 0`) and written under the limit
/// deciding (see [`PackedBucket::decide_shared`]); every other field, and `tat_us` in any other
/// case, changes only under the shard's exclusive lock.
#[derive(Debug)]
#[repr(C)]
pub(super) struct PackedBucket {
    pub(super) tat_us: AtomicU64,
    pub(super) frac: u32,
    pub(super) per_micro: u32,
    pub(super) interval_low: u32,
    pub(super) interval_mid: u16,
    pub(super) interval_high: u8,
    pub(super) tag: BucketTag,
}

/// One value; the byte's other values are free for [`Slot`]'s other variants.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(super) enum BucketTag {
    Bucket = 0,
}

impl PackedBucket {
    #[inline]
    #[allow(clippy::cast_possible_truncation)]
    pub(super) fn pack(s: token_bucket::State) -> PackedBucket {
        let d = s.per_micro.max(1);
        // The expiry is the full instant rounded up to the millisecond, and the remainder is
        // below 1000 * d: so the full instant in microseconds, rounded up, and its fraction.
        // Most limits have a whole number of microseconds per token (`d == 1`): no division.
        let (whole, frac) = if d == 1 {
            (s.remainder, 0)
        } else {
            (s.remainder / d, s.remainder % d)
        };
        let tat_us = s.expire_ms.saturating_mul(1000) - whole;
        let interval = s.interval.min((1 << 56) - 1);
        PackedBucket {
            tat_us: AtomicU64::new(tat_us),
            frac: frac as u32,
            per_micro: u32::try_from(d).unwrap_or(u32::MAX),
            interval_low: interval as u32,
            interval_mid: (interval >> 32) as u16,
            interval_high: (interval >> 48) as u8,
            tag: BucketTag::Bucket,
        }
    }

    #[inline]
    pub(super) fn unpack(&self) -> token_bucket::State {
        self.unpack_at(self.tat_us.load(Ordering::Acquire))
    }

    /// The state, with `tat_us` as given (read once by the caller).
    #[inline]
    pub(super) fn unpack_at(&self, tat_us: u64) -> token_bucket::State {
        let d = u64::from(self.per_micro);
        let expire_ms = tat_us.div_ceil(1000);
        token_bucket::State {
            expire_ms,
            remainder: expire_ms.saturating_mul(1000).saturating_sub(tat_us) * d
                + u64::from(self.frac),
            per_micro: d,
            interval: self.interval(),
        }
    }

    #[inline]
    pub(super) fn interval(&self) -> u64 {
        u64::from(self.interval_low)
            | u64::from(self.interval_mid) << 32
            | u64::from(self.interval_high) << 48
    }

    /// Decides a call under the shard's shared lock, the common case: the state is in whole
    /// microseconds and was written under `p`, so a decision changes `tat_us` alone, which a
    /// compare-and-swap commits (retried on the state another call left). The same decision
    /// as under the exclusive lock: [`token_bucket::decide`] on the same state, asked of the
    /// instant itself ([`token_bucket::decide_whole`], a fifth of a memory check less). `None`
    /// when the state is in other terms, or a step would overflow (the caller takes the
    /// exclusive lock).
    #[inline]
    pub(super) fn decide_shared(&self, now: u64, p: Params, cost: u64) -> Option<Outcome<()>> {
        if p.per_micro != 1 || self.per_micro != 1 || self.interval() != p.interval {
            return None;
        }
        let mut tat_us = self.tat_us.load(Ordering::Acquire);
        loop {
            // `token_bucket::decide` on the state `tat_us` stands for, on the instant itself
            // (the state it writes is under `p`, in whole microseconds: only the instant
            // differs). Where a step would overflow, the exclusive lock's path decides.
            let mut outcome = token_bucket::decide_whole(now, tat_us, p, cost)?;
            let Some(new_tat) = outcome.new_state.take() else {
                return Some(outcome.map_state(drop));
            };
            match self.tat_us.compare_exchange_weak(
                tat_us,
                new_tat,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(outcome.map_state(drop)),
                Err(now_there) => tat_us = now_there,
            }
        }
    }
}

impl Slot {
    /// When the state carries no information any more, in milliseconds (the key's expiry).
    pub(super) fn expire_ms(&self) -> u64 {
        match self {
            Slot::Bucket(s) => s.tat_us.load(Ordering::Acquire).div_ceil(1000),
            Slot::Interval(s) => s.expire_ms,
            Slot::Fixed(s) => s.expire_ms,
            Slot::Sliding(s) => s.1,
            Slot::Log(log) => log.1,
            Slot::Held(held) => held.1,
        }
    }
}

/// Decides one call of `cost` tokens at `now` on `slot` (`None`: absent) with `kernel`. A slot
/// another algorithm wrote (the limit's algorithm changed) reads as absent. `utc_shift`: how
/// far UTC is ahead of the store's clock (µs), where a quota by calendar period finds its
/// windows; its state stays on the store's clock.
#[inline]
pub(super) fn decide(
    kernel: Kernel,
    now: u64,
    utc_shift: i64,
    slot: Option<&Slot>,
    cost: u64,
) -> Outcome<Slot> {
    match kernel {
        Kernel::Bucket(p) => {
            let state = match slot {
                Some(Slot::Bucket(s)) => Some(s.unpack()),
                _ => None,
            };
            token_bucket::decide(now, state, p, cost)
                .map_state(|s| Slot::Bucket(PackedBucket::pack(s)))
        }
        Kernel::Interval(p) => {
            let state = match slot {
                Some(Slot::Interval(s)) => Some(*s),
                _ => None,
            };
            interval_bucket::decide(now, state, p, cost).map_state(Slot::Interval)
        }
        Kernel::Fixed(p, calendar) => {
            let state = match slot {
                Some(Slot::Fixed(s)) => Some(*s),
                _ => None,
            };
            fixed_window::decide_in_frame(now, state, p, calendar, utc_shift, cost)
                .map_state(Slot::Fixed)
        }
        Kernel::Sliding(p) => {
            let state = match slot {
                Some(Slot::Sliding(s)) => Some(s.0),
                _ => None,
            };
            sliding_window::decide(now, state, p, cost)
                .map_state(|s| Slot::Sliding(Box::new((s, s.expire_ms(p)))))
        }
        Kernel::Log(p) => {
            let log: &[u64] = match slot {
                Some(Slot::Log(log)) => &log.0,
                _ => &[],
            };
            sliding_log::decide(now, log, p, cost).map_state(|log| {
                let expire_ms = sliding_log::expire_ms(&log, p).unwrap_or(0);
                Slot::Log(Box::new((log.into_boxed_slice(), expire_ms)))
            })
        }
        Kernel::Concurrency(p) => {
            let entries: &[concurrency::Entry] = match slot {
                Some(Slot::Held(held)) => &held.0,
                _ => &[],
            };
            concurrency::decide(now, entries, p, cost).map_state(held_slot)
        }
    }
}

/// The slot of a concurrency limit's set.
pub(super) fn held_slot(entries: Vec<concurrency::Entry>) -> Slot {
    let expire_ms = concurrency::expire_ms(&entries);
    Slot::Held(Box::new((entries, expire_ms)))
}

/// The kernel of `instances` instances' share of `limit` for a call of `cost`, and whether it
/// starts from `short_of_full` (see [`MemoryStore::check_share`](crate::store::memory::MemoryStore::check_share)): how far from full the store
/// last said the bucket was, reservations it owes included. A share is a smooth token
/// bucket whatever the limit's algorithm (a window's count cannot be split between instances
/// that do not talk to each other), and so is a bucket the store said something of, on one
/// instance too: what it said (tokens left, calls owed, when it is full again, which for
/// interval refill and the windows is the refill instant or the window's end) is an amount
/// of a token bucket, which no other algorithm's fresh state can start from. A concurrency
/// limit is shared as whole slots; for it, `short_of_full` is instead the most slots this
/// instance may hold, from what the store last said (see `Resilience`'s seed).
pub(super) fn share_kernel(
    check: &Check<'_>,
    instances: u32,
    short_of_full: Option<u64>,
) -> (Kernel, bool) {
    let kernel = match check.kernel() {
        Kernel::Concurrency(p) => {
            let p = match short_of_full {
                Some(most) => concurrency::Params {
                    max: most.min(p.max),
                    ..p
                },
                None => p.shared(instances),
            };
            return (Kernel::Concurrency(p), false);
        }
        kernel if instances <= 1 && short_of_full.is_none() => kernel,
        _ => Kernel::Bucket(Params::of(check.limit).shared(instances, check.cost)),
    };
    match (kernel, short_of_full) {
        (Kernel::Bucket(mut p), Some(short_of_full)) => {
            // A share holds fine units of its own interval (`n` times the limit's), so the
            // same time from full is its exact part of the tokens; beyond its capacity, the
            // same time owed.
            p.absent = p
                .absent
                .max(short_of_full.min(p.tau.saturating_add(p.hold)));
            (Kernel::Bucket(p), true)
        }
        (kernel, _) => (kernel, false),
    }
}

/// The slot a seeded share decides on: the one there, unless the seeded absent bucket is
/// stricter (further from full), as after an outage when the fleet drained the bucket since.
pub(super) fn stricter(kernel: Kernel, now: u64, slot: Option<&Slot>) -> Option<&Slot> {
    let there = slot?;
    // (A share's kernel is a bucket's: no calendar, no wall clock.)
    let as_is = decide(kernel, now, 0, Some(there), 0);
    let seeded = decide(kernel, now, 0, None, 0);
    if seeded.reset_after_us > as_is.reset_after_us {
        None
    } else {
        Some(there)
    }
}
