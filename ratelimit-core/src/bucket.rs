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
pub(crate) fn decide(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Outcome {
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
    }
}
