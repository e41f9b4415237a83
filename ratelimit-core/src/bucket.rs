//! The token-bucket decision, in exact integer arithmetic.
//!
//! This is the Rust twin of `scripts/gcra.lua`: the memory store runs it in process, the
//! Redis store runs the script on the server, and the conformance tests hold both to the same
//! results. See the script's header for the representation.

use std::time::Duration;

use crate::limit::Params;

/// A bucket that is not full: it is full again at `expire_ms` minus `remainder` fine units.
/// Exactly what Redis keeps: the key's expiry (ms) and its integer value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) expire_ms: u64,
    pub(crate) remainder: u64,
}

/// The outcome of one decision: what the caller sees, and the state to store if it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: u64,
    pub(crate) reset_after_us: u64,
    /// `Some` when admitted (the state always changes then); `None` when denied.
    pub(crate) new_state: Option<State>,
}

impl Outcome {
    pub(crate) fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_us)
    }

    pub(crate) fn reset_after(&self) -> Duration {
        Duration::from_micros(self.reset_after_us)
    }
}

/// Decides one call of `cost` tokens at `now_us` on a bucket in `state` (`None`: full).
/// The caller guarantees `1 <= cost <= burst`.
#[inline]
pub(crate) fn decide(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Outcome {
    match decide_narrow(now_us, state, p, cost) {
        Some(outcome) => outcome,
        None => decide_wide(now_us, state, p, cost),
    }
}

/// [`decide_wide`] in `u64`, `None` when any step would overflow (never for valid limits at
/// realistic times, but a far-future state or clock must not wrap). The hot path: a third of
/// the time of the `u128` code, whose divisions are calls into compiler-rt.
#[inline]
fn decide_narrow(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Option<Outcome> {
    let Params {
        interval,
        per_micro: d,
        tau,
    } = p;
    // Fine units to microseconds, rounded up; most limits have a whole number of
    // microseconds per token (`d == 1`), which needs no division.
    let to_micros = |fine: u64| if d == 1 { fine } else { fine.div_ceil(d) };
    let x = match state {
        None => 0,
        Some(s) => {
            let expire_us = s.expire_ms.checked_mul(1000)?;
            match expire_us.checked_sub(now_us) {
                // Full again already, or now: nothing owed (the remainder is never negative).
                None | Some(0) => 0,
                Some(until) => until.checked_mul(d)?.saturating_sub(s.remainder).min(tau),
            }
        }
    };
    let new_x = x.checked_add(cost.checked_mul(interval)?)?;
    if new_x > tau {
        return Some(Outcome {
            allowed: false,
            remaining: (tau - x) / interval,
            retry_after_us: to_micros(new_x - tau),
            reset_after_us: to_micros(x),
            new_state: None,
        });
    }
    let reset = to_micros(new_x);
    let expire_ms = now_us.checked_add(reset)?.div_ceil(1000);
    let remainder = (expire_ms.checked_mul(1000)? - now_us).checked_mul(d)? - new_x;
    Some(Outcome {
        allowed: true,
        remaining: (tau - new_x) / interval,
        retry_after_us: 0,
        reset_after_us: reset,
        new_state: Some(State {
            expire_ms,
            remainder,
        }),
    })
}

/// The reference decision, in `u128`: exact for every state and time.
fn decide_wide(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Outcome {
    let d = u128::from(p.per_micro);
    let interval = u128::from(p.interval);
    let tau = u128::from(p.tau);
    let now = u128::from(now_us);

    // x: fine units until the bucket is full again, clamped to [0, tau] like the script.
    let x = match state {
        None => 0,
        Some(s) => {
            let until = i128::try_from(u128::from(s.expire_ms) * 1000).unwrap_or(i128::MAX)
                - i128::try_from(now).unwrap_or(i128::MAX);
            let x = until.saturating_mul(i128::try_from(d).unwrap_or(i128::MAX))
                - i128::from(s.remainder);
            u128::try_from(x.max(0)).unwrap_or(0).min(tau)
        }
    };

    let new_x = x + u128::from(cost) * interval;
    if new_x > tau {
        return Outcome {
            allowed: false,
            remaining: narrow((tau - x) / interval),
            retry_after_us: narrow((new_x - tau).div_ceil(d)),
            reset_after_us: narrow(x.div_ceil(d)),
            new_state: None,
        };
    }
    let reset = new_x.div_ceil(d);
    let expire_ms = (now + reset).div_ceil(1000);
    let remainder = (expire_ms * 1000 - now) * d - new_x;
    Outcome {
        allowed: true,
        remaining: narrow((tau - new_x) / interval),
        retry_after_us: 0,
        reset_after_us: narrow(reset),
        new_state: Some(State {
            expire_ms: narrow(expire_ms),
            remainder: narrow(remainder),
        }),
    }
}

/// Every quantity here is bounded by `Limit`'s validation (below 2^51), so this never clamps.
fn narrow(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limit;
    use proptest::prelude::*;

    fn run(limit: Limit, calls: &[(u64, u64)]) -> Vec<Outcome> {
        let mut state = None;
        calls
            .iter()
            .map(|&(now, cost)| {
                let o = decide(now, state, limit.params(), cost);
                if let Some(s) = o.new_state {
                    state = Some(s);
                }
                o
            })
            .collect()
    }

    const T0: u64 = 1_800_000_000_000_000;

    #[test]
    fn full_bucket_admits_exactly_burst() {
        let limit = Limit::per_second(3).burst(5);
        let outs = run(limit, &[(T0, 1); 6]);
        let allowed: Vec<bool> = outs.iter().map(|o| o.allowed).collect();
        assert_eq!(allowed, [true, true, true, true, true, false]);
        assert_eq!(outs[4].remaining, 0);
        // 5 tokens at 3/s: full again after 5/3 s, rounded up to the microsecond.
        assert_eq!(outs[4].reset_after_us, 1_666_667);
        // One token comes back after 1/3 s.
        assert_eq!(outs[5].retry_after_us, 333_334);
    }

    #[test]
    fn waiting_exactly_retry_after_is_admitted() {
        let limit = Limit::per_second(7).burst(2);
        let p = limit.params();
        let mut state = None;
        let mut now = T0;
        for _ in 0..50 {
            let o = decide(now, state, p, 1);
            if o.allowed {
                state = o.new_state;
                continue;
            }
            let wait = o.retry_after_us;
            assert!(wait > 0);
            // A microsecond early is still denied; exactly on time is admitted.
            assert!(!decide(now + wait - 1, state, p, 1).allowed);
            now += wait;
        }
    }

    proptest! {
        /// Over any sequence of calls, admissions never exceed burst + rate x elapsed, the
        /// stored state always fits, and a refused call never changes the state.
        #[test]
        fn never_over_admits(
            replenish in 1u32..5000,
            burst in 1u32..500,
            unit in 0usize..4,
            steps in prop::collection::vec((0u64..2_000_000, 1u64..4), 1..200),
        ) {
            let limit = Limit::try_new(replenish, burst, crate::Unit::ALL[unit]).unwrap();
            let p = limit.params();
            let mut state = None;
            let mut now = T0;
            let mut admitted: u128 = 0;
            for (dt, cost) in steps {
                now += dt;
                let cost = cost.min(u64::from(burst));
                let o = decide(now, state, p, cost);
                if o.allowed {
                    admitted += u128::from(cost);
                    let s = o.new_state.unwrap();
                    prop_assert!(s.remainder < 1001 * p.per_micro);
                    prop_assert!(s.expire_ms * 1000 > now);
                    state = Some(s);
                } else {
                    prop_assert!(o.new_state.is_none());
                    prop_assert!(o.retry_after_us > 0);
                }
                let elapsed = u128::from(now - T0);
                let bound = u128::from(burst)
                    + (elapsed * u128::from(replenish)).div_ceil(u128::from(limit.unit().as_micros()));
                prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
            }
        }

        /// The `u64` path gives the reference's answer whenever it answers, and answers for
        /// every valid limit at the times a clock gives (below 2^62 µs) with the states it
        /// stores.
        #[test]
        fn narrow_equals_wide(
            replenish in prop_oneof![1u32..1000, 1u32..=u32::MAX],
            burst in prop_oneof![1u32..1000, 1u32..=u32::MAX],
            unit in 0usize..4,
            // Whole milliseconds too, where the expiry's rounding up shows.
            now in prop_oneof![0u64..(1 << 62), (0u64..(1 << 50)).prop_map(|ms| ms * 1000)],
            state in prop::option::of((-(1i64 << 40)..(1i64 << 40), 0u64..(1 << 52))),
            near in prop::option::of((0u64..(1 << 40), 0u64..(1 << 40))),
            cost in 1u64..=u64::from(u32::MAX),
        ) {
            let Ok(limit) = Limit::try_new(replenish, burst, crate::Unit::ALL[unit]) else {
                return Ok(());
            };
            let p = limit.params();
            let cost = cost.min(u64::from(burst));
            // Arbitrary states, and states a little after `now` (what a store holds).
            let arbitrary = state.map(|(offset_us, remainder)| State {
                expire_ms: now.saturating_add_signed(offset_us) / 1000,
                remainder,
            });
            // A stored bucket is full again within `tau`, plus the expiry's rounding.
            let refill_us = p.tau.div_ceil(p.per_micro) + 1000;
            let stored = near.map(|(ahead, remainder)| State {
                expire_ms: (now + ahead % refill_us) / 1000 + 1,
                remainder: remainder % (1001 * p.per_micro),
            });
            for state in [None, arbitrary, stored] {
                let wide = decide_wide(now, state, p, cost);
                match decide_narrow(now, state, p, cost) {
                    Some(narrow) => prop_assert_eq!(narrow, wide),
                    None => prop_assert!(
                        state == arbitrary && state.is_some(),
                        "only a far-off arbitrary state may need the wide path"
                    ),
                }
            }
        }
    }
}
