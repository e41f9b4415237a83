//! The token bucket with interval refill (`Refill::Interval`, seed 001): all `replenish`
//! tokens come back at once at every multiple of the period on the server clock, instead of
//! one at a time. The Rust twin of `scripts/interval_bucket.lua`, whose header gives the
//! representation.
//!
//! Refills are aligned to the server clock rather than to each bucket's first use: then a
//! refill instant is a multiple of the period, which the key's millisecond expiry names
//! exactly, so the state is one small integer plus the expiry (as `gcra.lua`'s), and clients
//! can be told the refill instant in advance ("at the top of the minute"). The price, which
//! aligning to first use would spread out: every bucket refills at the same instant, so
//! refused clients of all keys come back together. With `burst = replenish` it is the fixed
//! window, with its 2 x `limit` across a boundary.

use crate::{Cost, Outcome, Read, next_boundary};

/// A bucket of `burst` tokens, `replenish` of them added every `period_us`, `initial` in a
/// bucket the store does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalParams {
    replenish: u64,
    burst: u64,
    period_us: u64,
    initial: u64,
}

impl IntervalParams {
    /// `None` when `replenish` or `burst` is 0, `initial > burst`, the period is shorter than
    /// a millisecond, or an empty bucket would take too long to refill for exact arithmetic.
    pub const fn try_new(replenish: u64, burst: u64, period_us: u64, initial: u64) -> Option<Self> {
        if initial <= burst
            && ratelimit_vocab::limits::interval_is_exact(replenish, burst, period_us)
        {
            Some(IntervalParams {
                replenish,
                burst,
                period_us,
                initial,
            })
        } else {
            None
        }
    }
}

/// The script's `ARGV` for a call of `cost` tokens.
pub fn args(p: IntervalParams, cost: u64) -> [u64; 5] {
    [p.replenish, p.burst, p.period_us, p.initial, cost]
}

/// The bucket and the cost that `interval_bucket.lua` reads from `args`, its arguments as a
/// Redis module receives them: the inverse of [`args`]. The cost is negative when `call.lua`
/// gives tokens back ([`Cost`]). `None` for arguments that no valid limit sends: not five, a
/// negative parameter, a bucket [`IntervalParams::try_new`] refuses, or a cost of more tokens
/// than the burst.
///
/// ```
/// use ratelimit_algorithms::Cost;
/// use ratelimit_algorithms::interval_bucket::{self, IntervalParams};
///
/// // 4 a second, up to 10, starting full.
/// let p = IntervalParams::try_new(4, 10, 1_000_000, 10).expect("a valid bucket");
/// assert_eq!(interval_bucket::from_args(&[4, 10, 1_000_000, 10, 3]), Some((p, Cost::Take(3))));
/// assert_eq!(interval_bucket::from_args(&[4, 10, 1_000_000, 10, -3]), Some((p, Cost::GiveBack(3))));
/// assert_eq!(interval_bucket::from_args(&[4, 10, 1_000_000, 11, 3]), None, "initial above burst");
/// ```
#[must_use]
pub fn from_args(args: &[i64]) -> Option<(IntervalParams, Cost)> {
    let &[replenish, burst, period_us, initial, cost] = args else {
        return None;
    };
    let [replenish, burst, period_us, initial] =
        crate::unsigned([replenish, burst, period_us, initial])?;
    let p = IntervalParams::try_new(replenish, burst, period_us, initial)?;
    Some((p, Cost::of_arg(cost, burst)?))
}

/// Exactly what Redis keeps: the slack of the refill that fills the bucket (the value), and
/// the key's expiry in milliseconds (that refill's instant, rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// Tokens the filling refill adds beyond full.
    pub slack: u64,
    /// The key's expiry (`PEXPIRETIME`).
    pub expire_ms: u64,
}

impl State {
    /// The state a key holding `value` until `expire_ms` (its `PEXPIRETIME`) stands for, as
    /// `interval_bucket.lua` reads it: a slack in decimal (`^%d+$`); `None` for any other
    /// value, which the script reads as an empty bucket and overwrites.
    ///
    /// ```
    /// use ratelimit_algorithms::interval_bucket::State;
    ///
    /// let s = State::decode("2", 1_800_000_060_000).expect("a slack");
    /// assert_eq!((s.slack, s.expire_ms), (2, 1_800_000_060_000));
    /// assert_eq!(s.encode(), "2");
    /// assert_eq!(State::decode("-2", 1_800_000_060_000), None);
    /// ```
    #[must_use]
    pub fn decode(value: &str, expire_ms: u64) -> Option<State> {
        Some(State {
            slack: crate::digits(value)?,
            expire_ms,
        })
    }

    /// [`decode`](State::decode) of a value's bytes, as Redis hands them (any bytes: what
    /// is not this form is `None`).
    #[must_use]
    pub fn decode_bytes(value: &[u8], expire_ms: u64) -> Option<State> {
        State::decode(std::str::from_utf8(value).ok()?, expire_ms)
    }

    /// The key's value.
    #[must_use]
    pub fn encode(&self) -> String {
        self.encoded().to_text()
    }

    /// [`encode`](State::encode) on the stack, for a writer that must not allocate (the
    /// Redis module).
    #[must_use]
    pub fn encoded(&self) -> crate::Encoded {
        let mut out = crate::Encoded::new();
        out.push(self.slack, 1);
        out
    }
}

/// Decides a call of `cost` tokens at `now_us` on a bucket in `state` (`None`: absent). The
/// caller guarantees `1 <= cost <= burst`.
pub fn decide(now_us: u64, state: Option<State>, p: IntervalParams, cost: u64) -> Outcome<State> {
    decide_read(now_us, state.map_or(Read::Absent, Read::State), p, cost)
}

/// [`decide`] on what a key holds: what `interval_bucket.lua` decides and stores for every
/// value a key may hold. An [`Unreadable`](Read::Unreadable) one is an empty bucket (the
/// script cannot know what was taken), stored even when the call is refused, so that the
/// refusal's `retry_after` comes true.
///
/// ```
/// use ratelimit_algorithms::Read;
/// use ratelimit_algorithms::interval_bucket::{self, IntervalParams};
///
/// // 5 a minute, up to 5: from garbage, an empty bucket until the next minute.
/// let p = IntervalParams::try_new(5, 5, 60_000_000, 5).expect("a valid bucket");
/// let now = 1_800_000_010_000_000;
/// let o = interval_bucket::decide_read(now, Read::Unreadable, p, 1);
/// assert!(!o.allowed && o.retry_after_us == 50_000_000);
/// let written = o.new_state.expect("overwritten even though refused");
/// let again = interval_bucket::decide_read(now, Read::State(written), p, 1);
/// assert_eq!((again.allowed, again.retry_after_us, again.new_state), (false, 50_000_000, None));
/// ```
pub fn decide_read(now_us: u64, read: Read<State>, p: IntervalParams, cost: u64) -> Outcome<State> {
    let IntervalParams {
        replenish,
        burst,
        period_us: period,
        ..
    } = p;
    let (debt, stale) = debt_of(now_us, read, p);
    let next = next_boundary(now_us, period);
    let reset_after = |d: u64| {
        if d == 0 {
            0
        } else {
            full_again(now_us, p, d) - now_us
        }
    };
    if debt + cost > burst {
        let refills = (debt + cost - burst).div_ceil(replenish);
        return Outcome {
            allowed: false,
            remaining: burst - debt,
            retry_after_us: next + (refills - 1) * period - now_us,
            reset_after_us: reset_after(debt),
            new_state: stale.then(|| stored(now_us, p, debt)),
        };
    }
    let debt = debt + cost;
    Outcome {
        allowed: true,
        remaining: burst - debt,
        retry_after_us: 0,
        reset_after_us: reset_after(debt),
        new_state: Some(stored(now_us, p, debt)),
    }
}

/// Gives `cost` tokens back to a bucket in `state` at `now_us` (a refund): the bucket as it is
/// now, less that debt, floored at full, as `interval_bucket.lua` does for a negative cost
/// ([`Cost::GiveBack`]).
/// `None`: full (forgotten, as Redis drops the key).
#[must_use]
pub fn give_back(now_us: u64, state: Option<State>, p: IntervalParams, cost: u64) -> Option<State> {
    give_back_read(now_us, state.map_or(Read::Absent, Read::State), p, cost)
}

/// [`give_back`] on what a key holds, as `call.lua` runs `interval_bucket.lua` with a negative
/// cost on a key that exists: an [`Unreadable`](Read::Unreadable) value is an empty bucket,
/// given the tokens back and stored. `None`: full (the key goes).
#[must_use]
pub fn give_back_read(
    now_us: u64,
    read: Read<State>,
    p: IntervalParams,
    cost: u64,
) -> Option<State> {
    let (debt, _) = debt_of(now_us, read, p);
    let debt = debt.saturating_sub(cost);
    (debt > 0).then(|| stored(now_us, p, debt))
}

/// The tokens a bucket in `state` lacks at `now_us`, and whether what is stored must be
/// written again (it reads otherwise than it says: absent and not full, foreign, stale).
fn debt_of(now_us: u64, read: Read<State>, p: IntervalParams) -> (u64, bool) {
    let IntervalParams {
        replenish,
        burst,
        period_us: period,
        initial,
    } = p;
    let absent = (burst - initial, initial < burst);
    match read {
        Read::Absent => absent,
        Read::Unreadable => (burst, true),
        Read::State(s) => {
            let full_at = s.expire_ms.saturating_mul(1000) / period * period;
            let due = (full_at / period).saturating_sub(now_us / period);
            if full_at <= now_us {
                // Full; but forgotten once Redis may have dropped the key (see the script).
                if now_us < (s.expire_ms + 1) * 1000 {
                    (0, false)
                } else {
                    absent
                }
            } else if s.slack >= replenish || due > burst + 1 {
                (burst, true)
            } else {
                match (due * replenish).saturating_sub(s.slack) {
                    d if d > burst => (burst, true),
                    d => (d, false),
                }
            }
        }
    }
}

/// When a bucket lacking `debt` tokens at `now_us` is full again.
fn full_again(now_us: u64, p: IntervalParams, debt: u64) -> u64 {
    // `next >= period`: no underflow for `debt == 0` (a peek's cost of 0 on a full bucket).
    next_boundary(now_us, p.period_us) + debt.div_ceil(p.replenish) * p.period_us - p.period_us
}

/// What is stored for a bucket lacking `debt` tokens at `now_us`.
fn stored(now_us: u64, p: IntervalParams, debt: u64) -> State {
    State {
        slack: debt.div_ceil(p.replenish) * p.replenish - debt,
        expire_ms: full_again(now_us, p, debt).div_ceil(1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{T0, keep, replay};
    use proptest::prelude::*;

    fn step(state: &mut Option<State>, now: u64, p: IntervalParams, cost: u64) -> Outcome<State> {
        keep(state, decide(now, *state, p, cost))
    }

    #[test]
    fn all_tokens_come_back_at_each_boundary() {
        // 4 per second, up to 10.
        let p = IntervalParams::try_new(4, 10, 1_000_000, 10).unwrap();
        let mut s = None;
        let o = step(&mut s, T0 + 300_000, p, 7);
        // 7 missing: refills at T0 + 1 s (+4) and T0 + 2 s (+4, 1 beyond full).
        assert_eq!(
            (o.allowed, o.remaining, o.reset_after_us),
            (true, 3, 1_700_000)
        );
        assert_eq!(
            s,
            Some(State {
                slack: 1,
                expire_ms: (T0 + 2_000_000) / 1000
            })
        );
        let refused = step(&mut s, T0 + 400_000, p, 5);
        assert_eq!(
            (refused.allowed, refused.remaining, refused.retry_after_us),
            (false, 3, 600_000)
        );
        assert!(refused.new_state.is_none());
        // 9 needs 6 more: two refills.
        assert_eq!(decide(T0 + 400_000, s, p, 9).retry_after_us, 1_600_000);
        let at_boundary = step(&mut s, T0 + 1_000_000, p, 7);
        assert_eq!((at_boundary.allowed, at_boundary.remaining), (true, 0));
    }

    #[test]
    fn a_give_back_returns_the_tokens_floored_at_full() {
        // 4 per second, up to 10.
        let p = IntervalParams::try_new(4, 10, 1_000_000, 10).unwrap();
        let mut s = None;
        assert_eq!(step(&mut s, T0 + 300_000, p, 7).remaining, 3);
        s = give_back(T0 + 300_000, s, p, 3);
        assert_eq!(decide(T0 + 300_000, s, p, 0).remaining, 6);
        // More than it lacks: full, and forgotten, never fuller than full.
        assert_eq!(give_back(T0 + 300_000, s, p, 9), None);
        assert_eq!(give_back(T0 + 300_000, s, p, 4), None);
        // A bucket the store does not hold has nothing to give back to.
        assert_eq!(give_back(T0, None, p, 3), None);
    }

    #[test]
    fn an_initial_fill_starts_below_full_and_is_stored_when_refused() {
        let p = IntervalParams::try_new(5, 10, 1_000_000, 0).unwrap();
        let mut s = None;
        let refused = step(&mut s, T0 + 1, p, 1);
        assert_eq!((refused.allowed, refused.retry_after_us), (false, 999_999));
        assert_eq!(refused.reset_after_us, 1_999_999);
        assert!(s.is_some(), "an absent bucket that is not full is stored");
        let o = step(&mut s, T0 + 1_000_000, p, 5);
        assert_eq!((o.allowed, o.remaining), (true, 0));
        // Full again at T0 + 3 s; forgotten a millisecond later, and empty again.
        assert_eq!(o.reset_after_us, 2_000_000);
        assert_eq!(decide(T0 + 3_000_999, s, p, 10).remaining, 0);
        assert!(!decide(T0 + 3_001_000, s, p, 1).allowed);
    }

    #[test]
    fn a_bucket_owing_more_than_a_lowered_burst_reads_empty() {
        let p = IntervalParams::try_new(1, 10, 1_000_000, 10).unwrap();
        let mut s = None;
        step(&mut s, T0, p, 10);
        let lower = IntervalParams::try_new(1, 2, 1_000_000, 2).unwrap();
        let refused = step(&mut s, T0, lower, 1);
        assert_eq!(
            (refused.allowed, refused.retry_after_us),
            (false, 1_000_000)
        );
        assert!(refused.new_state.is_some());
        assert!(step(&mut s, T0 + 1_000_000, lower, 1).allowed);
    }

    proptest! {
        /// Between any two admissions, no more than the bucket's content at the first plus the
        /// refills in between was admitted; retry_after is exact (see `replay`).
        #[test]
        fn never_over_admits_and_retry_after_is_exact(
            replenish in 1u64..20,
            burst in 1u64..40,
            initial in 0u64..40,
            period_ms in 1u64..3000,
            calls in prop::collection::vec((0u64..1_500_000, 1u64..6), 1..120),
        ) {
            let period = period_ms * 1000;
            let p = IntervalParams::try_new(replenish, burst, period, initial.min(burst)).unwrap();
            let calls: Vec<_> = calls.into_iter().map(|(dt, c)| (dt, c.min(burst))).collect();
            let admitted = replay(None, &calls, |now, s, cost| decide(now, s.copied(), p, cost))?;
            let refills = |a: u64, b: u64| b / period - a / period;
            for (i, &(a, _)) in admitted.iter().enumerate() {
                let mut taken = 0;
                for &(b, cost) in &admitted[i..] {
                    taken += cost;
                    prop_assert!(taken <= burst + replenish * refills(a, b));
                }
            }
            let mut taken = 0;
            for &(b, cost) in &admitted {
                taken += cost;
                prop_assert!(taken <= initial.min(burst) + replenish * refills(T0, b));
            }
        }
    }

    proptest! {
        /// From any state (written under another replenish or burst, owing more than a
        /// lowered burst, far ahead after the clock stepped back), every refusal's
        /// retry_after is exact.
        #[test]
        fn retry_after_is_exact_from_any_state(
            replenish in 1u64..10,
            burst in 1u64..30,
            initial in 0u64..30,
            period_ms in 1u64..2000,
            slack in 0u64..20,
            ahead_ms in prop_oneof![0u64..60_000, 0u64..(1 << 40)],
            calls in prop::collection::vec((0u64..1_000_000, 1u64..5), 1..60),
        ) {
            let p = IntervalParams::try_new(replenish, burst, period_ms * 1000, initial.min(burst)).unwrap();
            let initial = State { slack, expire_ms: (T0 / 1000).saturating_add(ahead_ms) - 30_000 };
            let calls: Vec<_> = calls.into_iter().map(|(dt, c)| (dt, c.min(burst))).collect();
            replay(Some(initial), &calls, |now, s, cost| decide(now, s.copied(), p, cost))?;
        }
    }

    proptest! {
        /// Every call's arguments read back as its bucket and cost, and a cost given back
        /// (`call.lua`'s mode 3) as one.
        #[test]
        fn args_read_back(
            replenish in prop_oneof![1u64..100, 1u64..(1 << 40)],
            burst in prop_oneof![1u64..100, 1u64..(1 << 40)],
            period_us in prop_oneof![(1u64..100_000).prop_map(|ms| ms * 1000), 1000u64..(1 << 40)],
            initial in any::<u64>(),
            cost in any::<u64>(),
        ) {
            let Some(p) = IntervalParams::try_new(replenish, burst, period_us, initial % (burst + 1))
            else {
                return Ok(());
            };
            let cost = cost % (burst + 1);
            let mut args = args(p, cost).map(|a| i64::try_from(a).unwrap());
            prop_assert_eq!(from_args(&args), Some((p, Cost::Take(cost))));
            if cost > 0 {
                args[4] = -args[4];
                prop_assert_eq!(from_args(&args), Some((p, Cost::GiveBack(cost))));
            }
        }
    }

    #[test]
    fn arguments_no_limit_sends_are_refused() {
        assert!(from_args(&[4, 10, 1_000_000, 10, 10]).is_some());
        assert_eq!(from_args(&[4, 10, 1_000_000, 10]), None);
        assert_eq!(from_args(&[0, 10, 1_000_000, 10, 1]), None, "no refill");
        assert_eq!(from_args(&[4, 0, 1_000_000, 0, 0]), None, "no burst");
        assert_eq!(from_args(&[4, 10, 999, 10, 1]), None, "under a millisecond");
        assert_eq!(
            from_args(&[4, 10, 1_000_000, 11, 1]),
            None,
            "initial above burst"
        );
        assert_eq!(
            from_args(&[4, 10, -1_000_000, 10, 1]),
            None,
            "a negative period"
        );
        assert_eq!(
            from_args(&[4, 10, 1_000_000, 10, 11]),
            None,
            "more than the burst"
        );
        assert_eq!(
            from_args(&[4, 10, 1_000_000, 10, -11]),
            None,
            "more than the burst back"
        );
    }
}
