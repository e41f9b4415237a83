//! The token-bucket decision, in exact integer arithmetic.
//!
//! This is the Rust twin of `scripts/gcra.lua`: the memory store runs it in process, the
//! Redis store runs the script on the server, and the conformance tests hold both to the same
//! results. See the script's header for the representation.

use crate::limit::Params;

/// The script, with the shared prelude, as Redis runs it.
pub const SCRIPT: &str = concat!(
    include_str!("scripts/prelude.lua"),
    include_str!("scripts/gcra.lua")
);

/// A bucket that is not full: it is full again at `expire_ms` minus `remainder` fine units of
/// `1 / per_micro` microsecond, and one token takes `interval` of those fine units. Exactly
/// what Redis keeps: the key's expiry (ms) and its value, which carries the limit's interval
/// and fine unit it was written under (see `gcra.lua`), so that a bucket read under another
/// limit still owes the tokens it owed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The key's expiry: the instant the bucket is full again, rounded up to the millisecond.
    pub expire_ms: u64,
    /// Fine units from the full instant to the expiry, below `1000 * per_micro`.
    pub remainder: u64,
    /// The fine unit it was written in: fine units per microsecond.
    pub per_micro: u64,
    /// The interval it was written under: fine units one token takes.
    pub interval: u64,
}

impl State {
    /// The state a key holding `value` until `expire_ms` (its `PEXPIRETIME`) stands for, as
    /// `gcra.lua`'s `read_value` reads it (its header gives the form): `interval * 1000 + r`
    /// in whole microseconds, else the interval, `r` in k + 3 digits, the fine unit in its k
    /// digits and k - 1, negated. `None` for any other value, which the script reads as an
    /// empty bucket and overwrites.
    ///
    /// ```
    /// use ratelimit_core::tools::algorithms::token_bucket::State;
    ///
    /// // One token every 20 s (3 per minute), full again 417 µs before the expiry.
    /// let s = State::decode("20000000417", 1_800_000_001_000).expect("a GCRA value");
    /// assert_eq!((s.interval, s.per_micro, s.remainder), (20_000_000, 1, 417));
    /// assert_eq!(s.encode(), "20000000417");
    /// // 3 per second: 1/3 µs fine units (k = 1), written negated.
    /// let s = State::decode("-1000000123430", 1_800_000_001_000).expect("a GCRA value");
    /// assert_eq!((s.interval, s.per_micro, s.remainder), (1_000_000, 3, 1234));
    /// assert_eq!(State::decode("0123", 1), None);
    /// ```
    #[must_use]
    pub fn decode(value: &str, expire_ms: u64) -> Option<State> {
        let state = |remainder, per_micro, interval| State {
            expire_ms,
            remainder,
            per_micro,
            interval,
        };
        let Some(digits) = value.strip_prefix('-') else {
            if !crate::algorithm::canonical(value) || !(4..=19).contains(&value.len()) {
                return None;
            }
            let (interval, r) = value.split_at(value.len() - 3);
            return Some(state(r.parse().ok()?, 1, interval.parse().ok()?));
        };
        if !crate::algorithm::canonical(digits) {
            return None;
        }
        let n = digits.len();
        let k = usize::from(digits.as_bytes()[n - 1] - b'0') + 1;
        if n < 2 * k + 5 || n > 2 * k + 20 {
            return None;
        }
        let unit_digits = &digits[n - 1 - k..n - 1];
        if unit_digits.starts_with('0') {
            return None;
        }
        let unit: u64 = unit_digits.parse().ok()?;
        let r: u64 = digits[n - 4 - 2 * k..n - 1 - k].parse().ok()?;
        let interval: u64 = digits[..n - 4 - 2 * k].parse().ok()?;
        if unit < 2 || r >= 1000 * unit {
            return None;
        }
        Some(state(r, unit, interval))
    }

    /// The key's value, as `gcra.lua`'s `write_value` writes it (see [`State::decode`]).
    #[must_use]
    pub fn encode(&self) -> String {
        if self.per_micro == 1 {
            return format!("{}{:03}", self.interval, self.remainder);
        }
        let unit = self.per_micro.to_string();
        let k = unit.len();
        format!(
            "-{}{:0w$}{unit}{}",
            self.interval,
            self.remainder,
            k - 1,
            w = k + 3
        )
    }

    /// What the bucket owes at `now` (microseconds), in the fine units it was written in
    /// (`gcra.lua`'s `x` before any conversion); 0 once full.
    pub(crate) fn owed_at(&self, now: u128) -> u128 {
        let until = i128::try_from(u128::from(self.expire_ms) * 1000).unwrap_or(i128::MAX)
            - i128::try_from(now).unwrap_or(i128::MAX);
        let owed = until.saturating_mul(i128::from(self.per_micro)) - i128::from(self.remainder);
        u128::try_from(owed.max(0)).unwrap_or(0)
    }
}

/// The outcome of one decision: what the caller sees, and the state to store if it changed
/// (`Some` always when admitted; when refused, only if the stored state had to be read
/// differently from what it says, see [`decide`]).
pub(crate) type Outcome = crate::algorithm::Outcome<State>;

/// The script's eight arguments for a call of `cost` under `p` (`gcra.lua`'s header names
/// them); the script takes the first four alone when the rest are their defaults.
#[must_use]
pub fn args(p: Params, cost: u64) -> [u64; 8] {
    [
        p.interval,
        p.per_micro,
        p.tau,
        cost,
        p.absent,
        p.reach,
        p.hold,
        u64::from(p.queue),
    ]
}

/// Decides one call of `cost` tokens at `now_us` on a bucket in `state` (`None`: full).
/// The caller guarantees `1 <= cost <= burst`.
///
/// A call over the limit may reserve: when its tokens are due within `p.reach` (a wait, or a
/// leaky bucket's queue), it is admitted at once, its tokens taken ahead (the bucket's state
/// goes beyond `tau`), and `retry_after_us` says how long it must wait before it goes. Calls
/// reserve in the order they arrive, so waiters are served in that order, at the rate.
///
/// A state written under another limit (another rate) still owes the tokens it owed: its
/// debt is converted to this limit's interval, rounded towards empty, and stored again in
/// this limit's terms even when the call is refused. A state may owe more than the limit
/// holds: reservations, a lower burst, or a clock stepped back. It is honest as it stands (a
/// refusal's `retry_after` counts every token owed), up to `p.hold` beyond `tau`; beyond
/// that it cannot be reservations, only a clock stepped far back, and reads as empty, which
/// is stored even when the call is refused, so that the refusal's `retry_after` comes true.
#[inline]
pub fn decide(
    now_us: u64,
    state: Option<State>,
    p: Params,
    cost: u64,
) -> crate::algorithm::Outcome<State> {
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
        absent,
        forgotten,
        reach,
        hold,
        queue,
    } = p;
    // Fine units to microseconds, rounded up; most limits have a whole number of
    // microseconds per token (`d == 1`), which needs no division.
    let to_micros = |fine: u64| if d == 1 { fine } else { fine.div_ceil(d) };
    // An absent bucket that is not full must be stored even when refused: read again, it
    // would not have drained.
    let (x, stale) = match state {
        None => (absent, absent > 0),
        Some(s) => {
            let expire_us = s.expire_ms.checked_mul(1000)?;
            let owed = match expire_us.checked_sub(now_us) {
                None => 0,
                Some(until) if s.per_micro == d && s.interval == interval => {
                    until.checked_mul(d)?.saturating_sub(s.remainder)
                }
                // Written under another limit: the rare case, exact in `decide_wide`.
                Some(_) => return None,
            };
            if owed == 0 {
                // Full: an ended state reads as an absent one, whether or not Redis has
                // dropped it yet (see `Params::forgotten`).
                (forgotten, forgotten > 0)
            } else if owed > tau.checked_add(hold)? {
                (tau, true)
            } else {
                (owed, false)
            }
        }
    };
    let new_x = x.checked_add(cost.checked_mul(interval)?)?;
    let room = tau.checked_add(reach)?;
    // What `remaining` counts whole tokens of: the bucket, or a leaky bucket's queue.
    let full = if queue { room } else { tau };
    if new_x > room {
        return Some(Outcome {
            allowed: false,
            remaining: full.saturating_sub(x) / interval,
            retry_after_us: to_micros(new_x - room),
            reset_after_us: to_micros(x),
            new_state: if stale {
                Some(stored_narrow(now_us, x, p, to_micros(x))?)
            } else {
                None
            },
        });
    }
    let reset = to_micros(new_x);
    Some(Outcome {
        allowed: true,
        remaining: full.saturating_sub(new_x) / interval,
        retry_after_us: if new_x > tau {
            to_micros(new_x - tau)
        } else {
            0
        },
        reset_after_us: reset,
        new_state: Some(stored_narrow(now_us, new_x, p, reset)?),
    })
}

/// The state of a bucket `x` fine units (`reset` microseconds, rounded up) from full.
#[inline]
fn stored_narrow(now_us: u64, x: u64, p: Params, reset: u64) -> Option<State> {
    let Params {
        interval,
        per_micro: d,
        ..
    } = p;
    let expire_ms = now_us.checked_add(reset)?.div_ceil(1000);
    let remainder = (expire_ms.checked_mul(1000)? - now_us).checked_mul(d)? - x;
    Some(State {
        expire_ms,
        remainder,
        per_micro: d,
        interval,
    })
}

/// What a bucket in `state` owes at `now` under `p`, in `p`'s fine units, and whether the
/// stored state must be written again to say so (exact for every state and time).
fn owed_wide(now: u128, state: Option<State>, p: Params) -> (u128, bool) {
    let tau = u128::from(p.tau);
    match state {
        None => (u128::from(p.absent), p.absent > 0),
        Some(s) => {
            let owed = s.owed_at(now);
            let (owed, stale) = if owed == 0 {
                // Full: ended, read as absent (see `Params::forgotten`).
                (u128::from(p.forgotten), p.forgotten > 0)
            } else if s.per_micro == p.per_micro && s.interval == p.interval {
                (owed, false)
            } else {
                (convert(owed, s.interval, p), true)
            };
            if owed > tau + u128::from(p.hold) {
                (tau, true)
            } else {
                (owed, stale)
            }
        }
    }
}

/// The reference decision, in `u128`: exact for every state and time.
fn decide_wide(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Outcome {
    let d = u128::from(p.per_micro);
    let interval = u128::from(p.interval);
    let tau = u128::from(p.tau);
    let room = tau + u128::from(p.reach);
    let full = if p.queue { room } else { tau };
    let now = u128::from(now_us);
    let (x, stale) = owed_wide(now, state, p);

    let new_x = x + u128::from(cost) * interval;
    if new_x > room {
        return Outcome {
            allowed: false,
            remaining: narrow(full.saturating_sub(x) / interval),
            retry_after_us: narrow((new_x - room).div_ceil(d)),
            reset_after_us: narrow(x.div_ceil(d)),
            new_state: stale.then(|| stored_wide(now, x, p)),
        };
    }
    Outcome {
        allowed: true,
        remaining: narrow(full.saturating_sub(new_x) / interval),
        retry_after_us: narrow(new_x.saturating_sub(tau).div_ceil(d)),
        reset_after_us: narrow(new_x.div_ceil(d)),
        new_state: Some(stored_wide(now, new_x, p)),
    }
}

/// Gives `cost` tokens back to a bucket in `state` at `now_us` (a reservation its caller
/// gave up): the bucket as it is now, less those tokens, floored at full. `None`: full.
pub(crate) fn give_back(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Option<State> {
    let now = u128::from(now_us);
    let (x, _) = owed_wide(now, state, p);
    let x = x.saturating_sub(u128::from(cost) * u128::from(p.interval));
    (x > 0).then(|| stored_wide(now, x, p))
}

fn stored_wide(now: u128, x: u128, p: Params) -> State {
    let d = u128::from(p.per_micro);
    let expire_ms = (now + x.div_ceil(d)).div_ceil(1000);
    State {
        expire_ms: narrow(expire_ms),
        remainder: narrow((expire_ms * 1000 - now) * d - x),
        per_micro: p.per_micro,
        interval: p.interval,
    }
}

/// Above this, what a bucket owes is no state a limit could have written (a valid limit fills
/// in under 2^51 fine units), only a clock stepped far back: it reads as empty. `gcra.lua` uses the same bound, below which its doubles are exact.
const MAX_OWED: u128 = 1 << 52;

/// What a bucket that owes `owed` fine units at `old_interval` per token owes under `p`, in
/// `p`'s fine units, rounded up (never fuller): the same tokens, each at the new interval.
/// Tokens beyond the burst (reservations, a lower burst) stay owed, up to `p.hold` beyond
/// `p.tau`; more reads as empty (`p.tau`).
///
/// The fraction of a token is computed in `f64` exactly as `gcra.lua` computes it with Lua's
/// doubles, plus one fine unit for the rounding, so both stores decide alike.
fn convert(owed: u128, old_interval: u64, p: Params) -> u128 {
    let (tau, interval) = (u128::from(p.tau), u128::from(p.interval));
    if owed > MAX_OWED || old_interval == 0 {
        return tau;
    }
    let old = u128::from(old_interval);
    let (tokens, rest) = (owed / old, owed % old);
    if tokens >= (tau + u128::from(p.hold)) / interval {
        return tau;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let fraction = if rest == 0 {
        0
    } else {
        // Every operand is below 2^53, so each converts exactly; the result is below interval.
        ((rest as f64 / old as f64 * interval as f64).ceil() as u128 + 1).min(interval)
    };
    tokens * interval + fraction
}

/// Every quantity here is bounded by `Limit`'s validation (below 2^51), so this never clamps.
fn narrow(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Limit};
    use proptest::prelude::*;
    use std::time::Duration;

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

    /// Runs `calls` (time, cost) under `limit` from `state`, keeping what is stored.
    fn step(state: &mut Option<State>, now: u64, limit: Limit, cost: u64) -> Outcome {
        let o = decide(now, *state, limit.params(), cost);
        if o.new_state.is_some() {
            *state = o.new_state;
        }
        o
    }

    #[test]
    fn a_raised_quota_keeps_the_tokens_taken() {
        // 3 per minute, burst 5, drained; then the quota becomes 60 per minute, burst 5.
        let old = Limit::per_minute(3).burst(5);
        let mut state = None;
        for _ in 0..5 {
            assert!(step(&mut state, T0, old, 1).allowed);
        }
        // Still 5 tokens owed, now at one a second: not the 100 s the old rate needed.
        let new = Limit::per_minute(60).burst(5);
        let refused = step(&mut state, T0, new, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_us, 1_000_000, "one token at 1/s");
        assert_eq!(refused.reset_after_us, 5_000_000, "five tokens at 1/s");
        // Waiting exactly that is admitted, not refused again with the same answer.
        assert!(step(&mut state, T0 + 1_000_000, new, 1).allowed);
        assert!(!step(&mut state, T0 + 1_000_000, new, 1).allowed);
        // A larger burst keeps the 5 taken and offers the rest at once.
        let larger = Limit::per_minute(60);
        let mut state2 = None;
        for _ in 0..5 {
            assert!(step(&mut state2, T0, old, 1).allowed);
        }
        for i in 0..55 {
            assert!(
                step(&mut state2, T0, larger, 1).allowed,
                "call {i} of the 55 left"
            );
        }
        assert!(!step(&mut state2, T0, larger, 1).allowed);
    }

    #[test]
    fn a_lowered_rate_keeps_the_tokens_taken() {
        // 100 per minute drained, then 5 per minute with the same burst: still 100 owed, at
        // 12 s each, where reading the old time-to-full (60 s) would give 95 back at once.
        let old = Limit::per_minute(100);
        let new = Limit::per_minute(5).burst(100);
        let mut state = None;
        for _ in 0..100 {
            assert!(step(&mut state, T0, old, 1).allowed);
        }
        let refused = step(&mut state, T0, new, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert_eq!(refused.retry_after_us, 12_000_000);
        assert_eq!(refused.reset_after_us, 1_200_000_000);
        assert!(!step(&mut state, T0 + 11_999_999, new, 1).allowed);
        assert!(step(&mut state, T0 + 12_000_000, new, 1).allowed);
        assert!(!step(&mut state, T0 + 12_000_000, new, 1).allowed);
    }

    #[test]
    fn a_lowered_burst_keeps_its_retry_after() {
        // 1 per second, burst 10, drained; then the burst becomes 1. The 10 tokens taken stay
        // taken: the first refusal waits for all of them, then one a second.
        let old = Limit::per_second(1).burst(10);
        let mut state = None;
        for _ in 0..10 {
            assert!(step(&mut state, T0, old, 1).allowed);
        }
        let new = Limit::per_second(1).burst(1);
        let mut now = T0;
        for expected in [10_000_000, 1_000_000, 1_000_000, 1_000_000] {
            let refused = step(&mut state, now, new, 1);
            assert!(!refused.allowed);
            assert_eq!(refused.retry_after_us, expected);
            now += refused.retry_after_us;
            assert!(
                !step(&mut state, now - 1, new, 1).allowed,
                "admitted before retry_after"
            );
            assert!(step(&mut state, now, new, 1).allowed, "waited retry_after");
        }
    }

    #[test]
    fn a_clock_stepped_back_keeps_its_retry_after() {
        let limit = Limit::per_second(1).burst(1);
        // Back an hour: the bucket owes that hour too, and says so.
        let mut state = None;
        assert!(step(&mut state, T0, limit, 1).allowed);
        let back = T0 - 3_600_000_000;
        let refused = step(&mut state, back, limit, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_us, 3_601_000_000);
        assert!(!step(&mut state, back + 3_600_999_999, limit, 1).allowed);
        assert!(step(&mut state, back + 3_601_000_000, limit, 1).allowed);
        // Back more than a day: no reservation reaches that far, so it reads as empty.
        let mut state = None;
        assert!(step(&mut state, T0, limit, 1).allowed);
        let back = T0 - 2 * 86_400_000_000;
        let refused = step(&mut state, back, limit, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_us, 1_000_000);
        assert!(step(&mut state, back + 1_000_000, limit, 1).allowed);
    }

    #[test]
    fn waiters_reserve_in_order_at_the_rate_never_early() {
        // 10 per second, burst 1, waits up to 1 s: the first goes at once, the next ten are
        // due 100 ms apart, the twelfth would wait 1.1 s and is refused, taking nothing.
        let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(1));
        let mut state = None;
        for k in 0..11u64 {
            let o = step(&mut state, T0, limit, 1);
            assert!(o.allowed, "call {k}");
            assert_eq!(o.retry_after_us, k * 100_000, "call {k} waits its turn");
        }
        let refused = step(&mut state, T0, limit, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_us, 100_000);
        assert_eq!(refused.remaining, 0);
        // A call that does not wait sees every reservation: it is refused until they are due.
        let plain = Limit::per_second(10).burst(1);
        let o = step(&mut state, T0 + 500_000, plain, 1);
        assert_eq!(o.retry_after_us, 600_000);
        assert!(!step(&mut state, T0 + 1_099_999, plain, 1).allowed);
        assert!(step(&mut state, T0 + 1_100_000, plain, 1).allowed);
    }

    #[test]
    fn a_new_rate_keeps_the_reservations() {
        // Ten calls reserved at 10 per second (1 s of tokens owed), then the rate doubles:
        // the ten tokens are still owed, at 50 ms each, so the next call waits 500 ms, not
        // nothing (which would let it go with the waiters of the old rate).
        let old = Limit::per_second(10).burst(1).wait(Duration::from_secs(2));
        let mut state = None;
        for _ in 0..10 {
            assert!(step(&mut state, T0, old, 1).allowed);
        }
        let new = Limit::per_second(20).burst(1).wait(Duration::from_secs(2));
        let o = step(&mut state, T0, new, 1);
        assert!(o.allowed);
        assert_eq!(o.retry_after_us, 500_000);
        // A waiting bucket's `remaining` counts tokens in the bucket, never the wait.
        assert_eq!(o.remaining, 0);
        let mut fresh = None;
        assert_eq!(
            step(&mut fresh, T0, old, 1).remaining,
            0,
            "burst 1, one taken"
        );
    }

    #[test]
    fn a_leaky_bucket_lets_calls_out_at_the_rate_with_a_bounded_queue() {
        // 2 per second, a queue of 3: one leaves now, three wait 0.5, 1 and 1.5 s, the fifth
        // finds the queue full.
        let limit = Limit::per_second(2)
            .burst(3)
            .algorithm(Algorithm::LeakyBucket);
        let mut state = None;
        for (k, remaining) in [3u64, 2, 1, 0].into_iter().enumerate() {
            let o = step(&mut state, T0, limit, 1);
            assert!(o.allowed);
            assert_eq!(o.retry_after_us, k as u64 * 500_000);
            assert_eq!(o.remaining, remaining, "free places in the queue");
        }
        let full = step(&mut state, T0, limit, 1);
        assert!(!full.allowed);
        assert_eq!(full.retry_after_us, 500_000);
        // A shorter wait than the queue's bound refuses sooner.
        let short = limit.wait(Duration::from_millis(600));
        assert!(!step(&mut state, T0 + 400_000, short, 1).allowed);
        // Once the first has left, a place is free again, at the end of the queue.
        let o = step(&mut state, T0 + 500_000, limit, 1);
        assert!(o.allowed);
        assert_eq!(o.retry_after_us, 1_500_000);
    }

    #[test]
    fn a_reservation_given_back_frees_its_place() {
        let limit = Limit::per_second(10).burst(1).wait(Duration::from_secs(1));
        let mut state = None;
        for _ in 0..3 {
            assert!(step(&mut state, T0, limit, 1).allowed);
        }
        // The third (due at 200 ms) gives up: the next call takes its place.
        state = give_back(T0 + 10_000, state, limit.params(), 1);
        let o = step(&mut state, T0 + 10_000, limit, 1);
        assert_eq!(o.retry_after_us, 190_000);
        // Given back entirely, a bucket is full (forgotten).
        let mut state = None;
        assert!(step(&mut state, T0, limit, 1).allowed);
        assert_eq!(give_back(T0, state, limit.params(), 1), None);
    }

    #[test]
    fn a_state_in_another_fine_unit_reads_no_fuller() {
        // 3 per second (d = 3) leaves a sub-microsecond remainder; 10 per second (d = 1)
        // must read the tokens it owes, not whole microseconds of credit.
        let old = Limit::per_second(3).burst(3);
        let mut state = None;
        for _ in 0..3 {
            assert!(step(&mut state, T0 + 7, old, 1).allowed);
        }
        let s = state.unwrap();
        assert_eq!((s.per_micro, s.interval), (3, 1_000_000));
        assert!(s.remainder > 0);
        // Owed: 3 tokens. Under 10 per second (burst 10) that is 300 ms, so 7 tokens remain.
        let new = Limit::per_second(10);
        for _ in 0..7 {
            assert!(step(&mut state, T0 + 7, new, 1).allowed);
        }
        let refused = step(&mut state, T0 + 7, new, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_us, 100_000);
        // A third of a token later, the fraction carries over, rounded towards empty by at
        // most a microsecond: 3 per second owes 1 token 333,333.3 µs after the first call.
        let mut state = None;
        assert!(step(&mut state, T0, old, 1).allowed);
        let one = Limit::per_second(1).burst(3);
        let half = step(&mut state, T0 + 1, one, 3);
        assert!(!half.allowed);
        // 1 token less 1 µs owed at 3/s is (333,333.3 - 1) / 333,333.3 of a token: at 1/s,
        // 999,997 µs, plus at most two fine units of rounding.
        assert!(
            (999_997..=999_999).contains(&half.retry_after_us),
            "{}",
            half.retry_after_us
        );
    }

    /// Limits with a whole and a fractional number of microseconds per token.
    fn any_limit() -> impl Strategy<Value = Limit> {
        (1u32..2000, 1u32..50, 0usize..2)
            .prop_map(|(r, b, u)| Limit::try_new(r, b, crate::Unit::ALL[u]).unwrap())
    }

    proptest! {
        /// After any change of limit, every refusal's `retry_after`, waited exactly, is
        /// admitted; and no call is admitted before the time already owed allows it (the
        /// bucket is never fuller than before the change, only never emptier than empty).
        #[test]
        fn every_change_of_limit_stays_honest(
            first in any_limit(),
            second in any_limit(),
            before in prop::collection::vec((0u64..500_000, 1u64..4), 1..40),
            switch_after in 0u64..3_000_000,
            cost in 1u64..4,
        ) {
            let mut state = None;
            let mut now = T0;
            for (dt, c) in before {
                now += dt;
                step(&mut state, now, first, c.min(u64::from(first.burst_capacity())));
            }
            now += switch_after;
            let p = second.params();
            let cost = cost.min(u64::from(second.burst_capacity()));
            // What is owed at the first call under the new limit: fine units of the old
            // limit, and the old interval, to count it in tokens.
            let first_call = now;
            let owed = state.map(|s| {
                let tat = i128::from(s.expire_ms) * 1000 * i128::from(s.per_micro)
                    - i128::from(s.remainder);
                ((tat - i128::from(first_call) * i128::from(s.per_micro)).max(0), i128::from(s.interval))
            });
            let o = step(&mut state, now, second, cost);
            if !o.allowed {
                prop_assert!(o.retry_after_us > 0);
                now += o.retry_after_us;
                let again = step(&mut state, now, second, cost);
                prop_assert!(again.allowed, "waiting retry_after must be admitted");
            }
            if let Some((x_old, old_interval)) = owed {
                // The tokens taken stay taken: admitted at `now` only if the tokens owed (at
                // most a full bucket), less what refilled since at the new rate, leave room
                // for `cost`. Compared exactly, in new fine units times the old interval.
                let (tau, interval) = (i128::from(p.tau), i128::from(p.interval));
                let owed_new = (x_old * interval).min(tau * old_interval);
                let refilled = i128::from(now - first_call) * i128::from(p.per_micro) * old_interval;
                let room = (tau - i128::from(cost) * interval) * old_interval;
                prop_assert!(owed_new - refilled <= room, "admitted early: {} > {}", owed_new - refilled, room);
            }
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
                    prop_assert!(s.remainder < 1000 * p.per_micro);
                    prop_assert!(s.expire_ms * 1000 > now);
                    state = Some(s);
                } else {
                    prop_assert!(o.new_state.is_none(), "under one limit a refusal writes nothing");
                    prop_assert!(o.retry_after_us > 0);
                }
                let elapsed = u128::from(now - T0);
                let bound = u128::from(burst)
                    + (elapsed * u128::from(replenish)).div_ceil(u128::from(limit.period_micros()));
                prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
            }
        }

        /// Calls that wait (any bound, mixed with calls that do not, and leaky buckets) go
        /// no more often than the limit allows: sorted by the instant each goes (decided +
        /// its wait), any `n` of them span at least `(n - burst)` intervals. No call waits
        /// longer than its bound, and a refused one takes nothing.
        #[test]
        fn reservations_never_go_early(
            replenish in 1u32..2000,
            burst in 1u32..20,
            leaky in any::<bool>(),
            steps in prop::collection::vec((0u64..300_000, 1u64..3, 0u64..3_000_000), 1..150),
        ) {
            let mut base = Limit::try_new(replenish, burst, crate::Unit::Second).unwrap();
            if leaky {
                base = base.algorithm(Algorithm::LeakyBucket);
            }
            let p = base.params();
            let mut state = None;
            let mut now = T0;
            let mut goes: Vec<(u64, u64)> = Vec::new();
            for (dt, cost, wait) in steps {
                now += dt;
                let cost = cost.min(u64::from(burst));
                // A third of the calls do not wait (a bound of 0 or none).
                let limit = match wait % 3 {
                    0 => base,
                    _ => base.wait(Duration::from_micros(wait)),
                };
                let before = state;
                let o = decide(now, state, limit.params(), cost);
                if o.allowed {
                    let bound = if leaky {
                        u64::from(burst) * p.interval.div_ceil(p.per_micro)
                    } else {
                        limit.max_wait().map_or(0, |w| u64::try_from(w.as_micros()).unwrap())
                    };
                    let bound = limit.max_wait().map_or(bound, |w| {
                        bound.min(u64::try_from(w.as_micros()).unwrap())
                    });
                    prop_assert!(o.retry_after_us <= bound + 1, "waits {} > {}", o.retry_after_us, bound);
                    goes.push((now + o.retry_after_us, cost));
                    state = o.new_state;
                } else {
                    prop_assert!(o.new_state.is_none());
                    prop_assert_eq!(state, before);
                }
            }
            goes.sort_unstable();
            // Any run of departures i..=j: their tokens beyond the burst take their intervals.
            let capacity = if leaky { 1 } else { u128::from(burst) };
            for i in 0..goes.len() {
                let mut tokens = 0u128;
                for j in i..goes.len() {
                    tokens += u128::from(goes[j].1);
                    let span = u128::from(goes[j].0 - goes[i].0) * u128::from(p.per_micro);
                    // The first call's own tokens may all go at once (up to the capacity).
                    let need = tokens.saturating_sub(capacity.max(u128::from(goes[i].1)));
                    prop_assert!(
                        need * u128::from(p.interval) <= span + u128::from(p.per_micro),
                        "{} tokens in {} us", tokens, goes[j].0 - goes[i].0
                    );
                }
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
                per_micro: if remainder % 3 == 0 { p.per_micro } else { 1 + remainder % 7 },
                interval: if remainder % 5 == 0 { p.interval } else { 1 + remainder % 1_000_003 },
            });
            // A stored bucket is full again within `tau`, plus the expiry's rounding.
            let refill_us = p.tau.div_ceil(p.per_micro) + 1000;
            let stored = near.map(|(ahead, remainder)| State {
                expire_ms: (now + ahead % refill_us) / 1000 + 1,
                remainder: remainder % (1000 * p.per_micro),
                per_micro: p.per_micro,
                interval: p.interval,
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
