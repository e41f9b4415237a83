//! The token bucket's arithmetic in fine units, shared by the scripts and the memory store.

/// The bucket arithmetic in "fine units" of `1 / per_micro` microseconds, chosen so that the
/// time one token takes is an exact integer. Shared by the Lua script (as its arguments) and
/// the memory store, so both compute the same decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Fine units one token takes to come back.
    pub interval: u64,
    /// Fine units per microsecond.
    pub per_micro: u64,
    /// Fine units an empty bucket takes to fill: `burst * interval`.
    pub tau: u64,
    /// Fine units an absent bucket is from full: 0 (an absent bucket is full) except for a
    /// fallback share whose capacity exceeds its share of the burst.
    pub absent: u64,
    /// Fine units from full a bucket reads as once it is full again: a bucket that is full
    /// carries no information, is dropped (its key expires), and starts again as an absent
    /// one, so this is `absent` for a limit (the scripts know no other). A fallback share
    /// remembers the room it saved for a costly call (its `absent` leaves that room out) and
    /// forgets only the limit's initial fill.
    pub forgotten: u64,
    /// Fine units beyond `tau` this call may reserve and wait for (0: refuse at once).
    pub reach: u64,
    /// Fine units beyond `tau` any call on the bucket may have reserved: a state owing more is
    /// no reservation but a clock stepped far back (or a burst lowered by more than a day's
    /// worth), and reads as empty.
    pub hold: u64,
    /// A leaky bucket: `remaining` counts the free places in its queue (`tau + reach`), not
    /// the tokens left of `tau`.
    pub queue: bool,
}

impl Params {
    /// One instance's share when `n` instances split the limit, for calls of `cost` tokens:
    /// the rate divided by `n`, and the burst too, exactly (a share may hold a fraction of a
    /// token: the shares add up to the limit, never more).
    ///
    /// A call that costs more than the share of the burst could never pass it; its bucket may
    /// then save up to `cost` tokens at the share's rate, but an absent bucket holds only the
    /// share of the burst, so no instance admits such a call before it has earned it, and
    /// every refusal's `retry_after` comes true.
    pub(crate) fn shared(self, n: u32, cost: u32) -> Params {
        if n <= 1 {
            return self;
        }
        // At most 10,000 instances, and few enough that `interval * n` fits the memory
        // store's 56 bits (its arithmetic falls back to u128 beyond 64, never wraps).
        let fit = (1u64 << 56) / self.tau.max(1);
        let n = u64::from(n).min(10_000).min(fit).max(1);
        let interval = self.interval * n;
        let tau = self.tau.max(u64::from(cost) * interval);
        Params {
            interval,
            per_micro: self.per_micro,
            tau,
            // The room saved for a costly call, plus what the limit's initial fill leaves out:
            // a share holds `burst` tokens of `n` times the interval, the same fine units, so
            // an initial fill carries over as it is.
            absent: tau - self.tau + self.absent,
            // At most what leaves room for the call, or it would never pass.
            forgotten: self.absent.min(tau - u64::from(cost) * interval),
            // Waits are time, the same in a share.
            reach: self.reach,
            hold: self.hold,
            queue: self.queue,
        }
    }
}
