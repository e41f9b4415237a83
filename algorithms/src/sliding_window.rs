//! The sliding window: two fixed-window counters, the previous one weighted by the part of it
//! still inside the sliding period (O(1) memory). The Rust twin of
//! `scripts/sliding_window.lua`, whose header gives the representation.
//!
//! The estimate `prev x (1 - elapsed / period) + cur` assumes the previous window's calls were
//! spread evenly; it is exact arithmetic on an approximation: it can admit more than `limit`
//! within some sliding period when the previous window's calls came late, and fewer when they
//! came early (never more than the fixed window's 2 x `limit`). Its `retry_after` is exact for
//! the estimate: the first tick at which the same call passes if nothing else happens.

use crate::{Outcome, WindowParams};

/// A sliding window's limit: a window whose weighted count, `limit x period in ticks`, is
/// exact in Lua (below 2^49: a daily window of up to about 6.5 million tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingParams {
    window: WindowParams,
    tick_us: u64,
}

impl SlidingParams {
    /// `limit` tokens per `period_us`, or `None` (see [`WindowParams::try_new`], and above).
    pub const fn try_new(limit: u64, period_us: u64) -> Option<SlidingParams> {
        let Some(window) = WindowParams::try_new(limit, period_us) else {
            return None;
        };
        if ratelimit_vocab::limits::sliding_is_exact(limit, period_us) {
            Some(SlidingParams {
                window,
                tick_us: ratelimit_vocab::limits::sliding_tick_us(period_us),
            })
        } else {
            None
        }
    }

    /// The limit and the period.
    pub fn window(self) -> WindowParams {
        self.window
    }

    /// The clock step of the previous window's weight, in microseconds.
    pub fn tick_us(self) -> u64 {
        self.tick_us
    }

    fn ticks(self) -> u64 {
        self.window.period_us / self.tick_us
    }
}

/// The script's `ARGV` for a call of `cost` tokens.
pub fn args(p: SlidingParams, cost: u64) -> [u64; 4] {
    [p.window.limit, p.window.period_us, p.tick_us, cost]
}

/// The window and the cost that `sliding_window.lua` reads from `args`, its arguments as a
/// Redis module receives them: the inverse of [`args`]. `None` for arguments that no valid
/// limit sends: not four, a window [`SlidingParams::try_new`] refuses, a tick other than the
/// one it takes for the period ([`SlidingParams::tick_us`]), or a cost above the limit.
///
/// ```
/// use ratelimit_algorithms::sliding_window::{self, SlidingParams};
///
/// let p = SlidingParams::try_new(10, 1_500).expect("10 per 1.5 ms");
/// assert_eq!(sliding_window::args(p, 2), [10, 1_500, 1, 2]);
/// assert_eq!(sliding_window::from_args(&[10, 1_500, 1, 2]), Some((p, 2)));
/// assert_eq!(sliding_window::from_args(&[10, 1_500, 500, 2]), None, "another tick");
/// ```
#[must_use]
pub fn from_args(args: &[u64]) -> Option<(SlidingParams, u64)> {
    let &[limit, period_us, tick_us, cost] = args else {
        return None;
    };
    let p = SlidingParams::try_new(limit, period_us)?;
    (tick_us == p.tick_us && cost <= limit).then_some((p, cost))
}

/// Exactly what Redis keeps: the value `"window:previous:current"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The index (`now / period`) of the window `current` counts.
    pub window: u64,
    /// Tokens taken in the window before it.
    pub previous: u64,
    /// Tokens taken in it.
    pub current: u64,
}

impl State {
    /// The state a key holding `value` stands for, as `sliding_window.lua` reads it
    /// (`^(%d+):(%d+):(%d+)$`); `None` for any other value, which the script reads as empty
    /// windows and overwrites.
    ///
    /// ```
    /// use ratelimit_algorithms::sliding_window::State;
    ///
    /// let s = State::decode("30000:4:1").expect("a sliding window's state");
    /// assert_eq!((s.window, s.previous, s.current), (30_000, 4, 1));
    /// assert_eq!(s.encode(), "30000:4:1");
    /// assert_eq!(State::decode("1:2"), None);
    /// ```
    #[must_use]
    pub fn decode(value: &str) -> Option<State> {
        let mut parts = value.split(':').map(crate::digits);
        let (window, previous, current) = (parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(State {
            window,
            previous,
            current,
        })
    }

    /// [`decode`](State::decode) of a value's bytes, as Redis hands them (any bytes: what
    /// is not this form is `None`, read as empty windows).
    #[must_use]
    pub fn decode_bytes(value: &[u8]) -> Option<State> {
        State::decode(std::str::from_utf8(value).ok()?)
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
        out.push(self.window, 1);
        out.push_byte(b':');
        out.push(self.previous, 1);
        out.push_byte(b':');
        out.push(self.current, 1);
        out
    }

    /// The key's expiry in milliseconds: the end of the window after `window`.
    pub fn expire_ms(&self, p: SlidingParams) -> u64 {
        ((self.window + 2) * p.window.period_us).div_ceil(1000)
    }
}

/// Decides a call of `cost` tokens at `now_us` on `state` (`None`: absent). The caller
/// guarantees `1 <= cost <= limit`.
pub fn decide(now_us: u64, state: Option<State>, p: SlidingParams, cost: u64) -> Outcome<State> {
    let (limit, period, tick, ticks) = (p.window.limit, p.window.period_us, p.tick_us, p.ticks());
    let window = now_us / period;
    let start = window * period;
    let elapsed = (now_us - start) / tick;
    let (prev, cur) = match state {
        Some(s) if s.window == window => (s.previous, s.current),
        Some(s) if s.window + 1 == window => (s.current, 0),
        _ => (0, 0),
    };
    let (prev, cur) = (prev.min(limit), cur.min(limit));
    // All below 2^53: `SlidingParams` bounds limit x ticks.
    let weighted = prev * (ticks - elapsed);
    let cap = limit * ticks;
    if weighted + (cur + cost) * ticks > cap {
        // Refused at `elapsed`, so this tick is after it: the weight only falls.
        let in_this = (cur + cost <= limit && prev > 0)
            .then(|| ticks.saturating_sub((limit - cur - cost) * ticks / prev))
            .filter(|&e| e < ticks)
            .map(|e| start + e * tick);
        let at = in_this.unwrap_or_else(|| {
            let e = ((limit - cost) * ticks)
                .checked_div(cur)
                .map_or(0, |room| ticks - room.min(ticks));
            start + period + e * tick
        });
        let reset = if cur > 0 {
            start + 2 * period - now_us
        } else if prev > 0 {
            start + period - now_us
        } else {
            0
        };
        return Outcome {
            allowed: false,
            remaining: cap.saturating_sub(weighted + cur * ticks) / ticks,
            retry_after_us: at - now_us,
            reset_after_us: reset,
            new_state: None,
        };
    }
    let cur = cur + cost;
    Outcome {
        allowed: true,
        remaining: (cap - weighted - cur * ticks) / ticks,
        retry_after_us: 0,
        reset_after_us: start + 2 * period - now_us,
        new_state: Some(State {
            window,
            previous: prev,
            current: cur,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{T0, keep, replay};
    use proptest::prelude::*;

    fn step(state: &mut Option<State>, now: u64, p: SlidingParams, cost: u64) -> Outcome<State> {
        keep(state, decide(now, *state, p, cost))
    }

    #[test]
    fn the_previous_window_weighs_by_its_part_still_inside() {
        // 10 per second; 10 taken late in one window.
        let p = SlidingParams::try_new(10, 1_000_000).unwrap();
        let mut s = None;
        let full = step(&mut s, T0 + 900_000, p, 10);
        assert_eq!(
            (full.allowed, full.remaining, full.reset_after_us),
            (true, 0, 1_100_000)
        );
        assert_eq!(s.unwrap().encode(), format!("{}:0:10", T0 / 1_000_000));
        // 250 ms into the next: 10 x 0.75 = 7.5 counted, 2 more fit.
        let o = step(&mut s, T0 + 1_250_000, p, 2);
        assert_eq!((o.allowed, o.remaining), (true, 0));
        assert_eq!(
            s.unwrap(),
            State {
                window: T0 / 1_000_000 + 1,
                previous: 10,
                current: 2
            }
        );
        // A third waits until 10 x (1 - e) + 3 <= 10: e = 0.3 s, exactly.
        let refused = step(&mut s, T0 + 1_250_000, p, 1);
        assert_eq!((refused.allowed, refused.retry_after_us), (false, 50_000));
        assert_eq!(refused.reset_after_us, 1_750_000);
        assert!(!decide(T0 + 1_299_999, s, p, 1).allowed);
        assert!(decide(T0 + 1_300_000, s, p, 1).allowed);
        // Cost 9 cannot fit in this window (2 + 9 > 10): at the next one's start 2 x 1 + 9 > 10
        // still, until 2 x (1 - e) + 9 <= 10, e = 0.5 s.
        let big = step(&mut s, T0 + 1_250_000, p, 9);
        assert_eq!(big.retry_after_us, 2_500_000 - 1_250_000);
    }

    #[test]
    fn a_period_of_odd_microseconds_steps_by_the_microsecond() {
        let p = SlidingParams::try_new(2, 1_500).unwrap();
        assert_eq!(p.tick_us(), 1);
        let mut s = None;
        assert!(step(&mut s, T0 + 1_499, p, 2).allowed); // T0 is a multiple of 1500 µs
        let refused = step(&mut s, T0 + 1_500, p, 1);
        // 2 x (1 - e / 1500) + 1 <= 2: e = 750 µs.
        assert_eq!(refused.retry_after_us, 750);
    }

    proptest! {
        /// After every admission the estimate, recomputed from the admissions alone, is within
        /// the limit, and no fixed window holds more; retry_after is exact (see `replay`).
        #[test]
        fn never_over_admits_and_retry_after_is_exact(
            limit in 1u64..40,
            period_us in prop_oneof![(1u64..3000).prop_map(|ms| ms * 1000), 1000u64..50_000],
            calls in prop::collection::vec((0u64..2_000_000, 1u64..6), 1..150),
        ) {
            let p = SlidingParams::try_new(limit, period_us).unwrap();
            let calls: Vec<_> = calls.into_iter().map(|(dt, c)| (dt, c.min(limit))).collect();
            let admitted = replay(None, &calls, |now, s, cost| decide(now, s.copied(), p, cost))?;
            let (tick, ticks) = (p.tick_us(), period_us / p.tick_us());
            for (i, &(now, _)) in admitted.iter().enumerate() {
                let k = now / period_us;
                let sum = |w: u64| admitted[..=i].iter().filter(|a| a.0 / period_us == w).map(|a| a.1).sum::<u64>();
                let (prev, cur) = (if k > 0 { sum(k - 1) } else { 0 }, sum(k));
                let e = (now - k * period_us) / tick;
                prop_assert!(cur <= limit);
                prop_assert!(prev * (ticks - e) + cur * ticks <= limit * ticks);
            }
        }
    }

    proptest! {
        /// From any state (counts above a lowered limit, an old or a future window after the
        /// clock stepped back), every refusal's retry_after is exact.
        #[test]
        fn retry_after_is_exact_from_any_state(
            limit in 1u64..20,
            period_us in prop_oneof![(1u64..2000).prop_map(|ms| ms * 1000), 1000u64..20_000],
            previous in 0u64..60,
            current in 0u64..60,
            windows_ahead in -3i64..3,
            calls in prop::collection::vec((0u64..1_000_000, 1u64..5), 1..60),
        ) {
            let p = SlidingParams::try_new(limit, period_us).unwrap();
            let window = (T0 / period_us).saturating_add_signed(windows_ahead);
            let initial = State { window, previous, current };
            let calls: Vec<_> = calls.into_iter().map(|(dt, c)| (dt, c.min(limit))).collect();
            replay(Some(initial), &calls, |now, s, cost| decide(now, s.copied(), p, cost))?;
        }
    }

    proptest! {
        /// Every call's arguments read back as its window and cost.
        #[test]
        fn args_read_back(
            limit in prop_oneof![1u64..100, 1u64..(1 << 49)],
            period_us in prop_oneof![(1u64..100_000).prop_map(|ms| ms * 1000), 1000u64..(1 << 49)],
            cost in any::<u64>(),
        ) {
            let Some(p) = SlidingParams::try_new(limit, period_us) else {
                return Ok(());
            };
            let cost = cost % (limit + 1);
            prop_assert_eq!(from_args(&args(p, cost)), Some((p, cost)));
        }
    }

    #[test]
    fn arguments_no_limit_sends_are_refused() {
        assert!(from_args(&[10, 1_000_000, 1000, 10]).is_some());
        assert_eq!(from_args(&[10, 1_000_000, 1000]), None);
        assert_eq!(from_args(&[10, 1_000_000, 1, 1]), None, "another tick");
        assert_eq!(from_args(&[10, 1_000_000, 0, 1]), None, "no tick");
        assert_eq!(from_args(&[10, 999, 1, 1]), None, "under a millisecond");
        assert_eq!(
            from_args(&[1_000_000_000, 86_400_000_000, 1000, 1]),
            None,
            "a weighted count beyond exact arithmetic"
        );
        assert_eq!(
            from_args(&[10, 1_000_000, 1000, 11]),
            None,
            "more than the limit"
        );
    }
}
