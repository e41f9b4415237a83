//! The token bucket (GCRA, refilled smoothly; also the leaky bucket): its decision in exact
//! integer arithmetic, with its parameters and stored state.
//!
//! This is the Rust twin of `scripts/gcra.lua`: the memory store runs it in process, the
//! Redis store runs the script on the server, and the conformance tests hold both to the same
//! results. See the script's header for the representation. A limit's parameters are
//! `Params::of` (`ratelimit_core::tools::algorithms::OfLimit`).

use ratelimit_vocab::limits;

use crate::{Cost, Encoded};

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
    #[must_use]
    pub fn shared(self, n: u32, cost: u32) -> Params {
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
    /// `gcra_head.lua`'s `tb_read` reads it (`gcra.lua`'s header gives the form):
    /// `interval * 1000 + r` in whole microseconds, else the interval, `r` in k + 3 digits,
    /// the fine unit in its k digits and k - 1, negated. `None` for any other value, which the script reads as an
    /// empty bucket and overwrites.
    ///
    /// ```
    /// use ratelimit_algorithms::token_bucket::State;
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
        State::decode_bytes(value.as_bytes(), expire_ms)
    }

    /// [`decode`](State::decode) of a value's bytes, as Redis hands them (any bytes: what
    /// is not this form is `None`).
    #[must_use]
    pub fn decode_bytes(value: &[u8], expire_ms: u64) -> Option<State> {
        let state = |remainder, per_micro, interval| State {
            expire_ms,
            remainder,
            per_micro,
            interval,
        };
        let Some(digits) = value.strip_prefix(b"-") else {
            // `^[1-9]%d*$`, 4 to 19 digits: `number` checks each digit as it reads it.
            if value.first() == Some(&b'0') || !(4..=19).contains(&value.len()) {
                return None;
            }
            let (interval, r) = value.split_at(value.len() - 3);
            return Some(state(number(r)?, 1, number(interval)?));
        };
        if !canonical_bytes(digits) {
            return None;
        }
        let n = digits.len();
        let k = usize::from(digits.last()? - b'0') + 1;
        if n < 2 * k + 5 || n > 2 * k + 20 {
            return None;
        }
        let unit_digits = digits.get(n - 1 - k..n - 1)?;
        if unit_digits.first() == Some(&b'0') {
            return None;
        }
        let unit = number(unit_digits)?;
        let r = number(digits.get(n - 4 - 2 * k..n - 1 - k)?)?;
        let interval = number(digits.get(..n - 4 - 2 * k)?)?;
        if unit < 2 || r >= 1000 * unit {
            return None;
        }
        Some(state(r, unit, interval))
    }

    /// The key's value, as `gcra_head.lua`'s `tb_write` writes it (see [`State::decode`]).
    #[must_use]
    pub fn encode(&self) -> String {
        self.encoded().to_text()
    }

    /// [`encode`](State::encode) on the stack, for a writer that must not allocate (the
    /// Redis module).
    #[must_use]
    pub fn encoded(&self) -> Encoded {
        let mut out = Encoded::new();
        if self.per_micro == 1 {
            out.push(self.interval, 1);
            out.push(self.remainder, 3);
            return out;
        }
        let k = Encoded::digits(self.per_micro);
        out.push_byte(b'-');
        out.push(self.interval, 1);
        out.push(self.remainder, k + 3);
        out.push(self.per_micro, 1);
        out.push(k as u64 - 1, 1);
        out
    }

    /// What the bucket owes at `now` (microseconds), in the fine units it was written in
    /// (`gcra.lua`'s `x` before any conversion); 0 once full.
    #[must_use]
    pub fn owed_at(&self, now: u128) -> u128 {
        let until = i128::try_from(u128::from(self.expire_ms) * 1000).unwrap_or(i128::MAX)
            - i128::try_from(now).unwrap_or(i128::MAX);
        let owed = until.saturating_mul(i128::from(self.per_micro)) - i128::from(self.remainder);
        u128::try_from(owed.max(0)).unwrap_or(0)
    }
}

/// Whether `v` is `^[1-9]%d*$` (canonical decimal above 0), as bytes.
fn canonical_bytes(v: &[u8]) -> bool {
    v.first().is_some_and(|&b| b != b'0') && v.iter().all(u8::is_ascii_digit)
}

/// The number ASCII digits `v` write (at most 19, so within 64 bits), `None` for anything
/// else.
fn number(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    let mut n = 0u64;
    for &d in v {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n = n * 10 + u64::from(digit);
    }
    Some(n)
}

/// The outcome of one decision: what the caller sees, and the state to store if it changed
/// (`Some` always when admitted; when refused, only if the stored state had to be read
/// differently from what it says, see [`decide`]).
type Outcome = crate::Outcome<State>;

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

/// The parameters and the cost that `gcra.lua` reads from `args`, its arguments as a Redis
/// module receives them (integers of the command's text): the inverse of [`args`], and of its
/// first four alone, which the limiter sends when the rest are their defaults. The script
/// takes any of arguments 5 to 8 as absent: `absent` and `reach` 0, `hold` what
/// `ratelimit_vocab::limits::hold_for(tau, per_micro)` computes (as the script does), `queue`
/// false. `forgotten` is `absent`, as for every limit (only the memory store's shares differ,
/// and they are never sent). The cost is the fourth argument, negative when `call.lua` gives
/// tokens back ([`Cost`]).
///
/// `None` for arguments that no valid limit sends: fewer than 4 or more than 8; a negative
/// parameter; `interval`, `per_micro` or `tau` 0, or `tau` below `interval` (less than a
/// token); a bucket beyond exact arithmetic (`2 * tau + 2048 * per_micro` above 2^51, as
/// `ratelimit_vocab::limits::bucket_is_exact`); `absent` above `tau`; `hold` above 2^51 or
/// `reach` above `hold`; `queue` other than 0 or 1; a cost of more tokens than the bucket holds
/// (`tau`, or a leaky bucket's queue, at most `hold`). Within them the script's every sum stays
/// below 2^53, exact in Lua.
///
/// ```
/// use ratelimit_algorithms::Cost;
/// use ratelimit_algorithms::token_bucket::{self, Params};
///
/// // 3 per second, burst 3, as the limiter sends it: 1/3 µs fine units.
/// let (p, cost) = token_bucket::from_args(&[1_000_000, 3, 3_000_000, 1]).expect("valid");
/// assert_eq!((p.interval, p.per_micro, p.tau, p.reach, p.queue), (1_000_000, 3, 3_000_000, 0, false));
/// assert_eq!(cost, Cost::Take(1));
/// assert_eq!(token_bucket::from_args(&token_bucket::args(p, 1).map(|a| a as i64)), Some((p, cost)));
/// // `call.lua` giving the token back.
/// assert_eq!(token_bucket::from_args(&[1_000_000, 3, 3_000_000, -1]), Some((p, Cost::GiveBack(1))));
/// // More than the bucket holds.
/// assert_eq!(token_bucket::from_args(&[1_000_000, 3, 3_000_000, 4]), None);
/// ```
#[must_use]
pub fn from_args(args: &[i64]) -> Option<(Params, Cost)> {
    let (&[interval, per_micro, tau, cost], rest) = args.split_first_chunk::<4>()?;
    if rest.len() > 4 {
        return None;
    }
    let [interval, per_micro, tau] = crate::unsigned([interval, per_micro, tau])?;
    let exact = 2 * u128::from(tau) + 2048 * u128::from(per_micro) <= u128::from(limits::MAX_EXACT);
    if interval == 0 || per_micro == 0 || tau < interval || !exact {
        return None;
    }
    let optional = |i: usize| rest.get(i).map(|&a| u64::try_from(a).ok());
    let absent = optional(0).unwrap_or(Some(0))?;
    let reach = optional(1).unwrap_or(Some(0))?;
    let hold = optional(2).unwrap_or(Some(limits::hold_for(tau.into(), per_micro.into())))?;
    let queue = match optional(3).unwrap_or(Some(0))? {
        0 => false,
        1 => true,
        _ => return None,
    };
    if absent > tau || hold > limits::MAX_EXACT || reach > hold {
        return None;
    }
    let holds = if queue { hold.max(tau) } else { tau };
    let cost = Cost::of_arg(cost, holds / interval)?;
    let p = Params {
        interval,
        per_micro,
        tau,
        absent,
        forgotten: absent,
        reach,
        hold,
        queue,
    };
    Some((p, cost))
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
pub fn decide(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Outcome {
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

/// [`decide`] of a bucket kept as the instant it is full again, `tat_us` (whole microseconds,
/// rounded up: what the memory store keeps), under `p` in whole microseconds
/// (`p.per_micro == 1`) and written under its interval. The same outcome as [`decide`] of the
/// state `tat_us` stands for (its expiry `tat_us` rounded up to the millisecond, and the
/// remainder between them); its `new_state` is the instant to keep instead (`None`: the state
/// stays as it is). No conversion to Redis's expiry and remainder and back, no division: the
/// memory store's hot path. `None` for parameters not in whole microseconds, and where a step
/// would overflow, which no valid limit reaches at a clock's times (the caller then asks
/// [`decide`]).
///
/// ```
/// use ratelimit_algorithms::token_bucket::{Params, decide_whole};
///
/// // 10 a second with a burst of 5: a token every 100,000 µs.
/// let p = Params {
///     interval: 100_000, per_micro: 1, tau: 500_000, absent: 0, forgotten: 0,
///     reach: 0, hold: 86_400_000_000, queue: false,
/// };
/// // Full again 400,000 µs from now: 4 tokens owed, one left; this call takes it.
/// let o = decide_whole(1_000_000, 1_400_000, p, 1).expect("no overflow");
/// assert!(o.allowed);
/// assert_eq!((o.remaining, o.new_state), (0, Some(1_500_000)));
/// // The next one is refused: the next token comes back 100,000 µs later.
/// let o = decide_whole(1_000_000, 1_500_000, p, 1).expect("no overflow");
/// assert!(!o.allowed);
/// assert_eq!((o.retry_after_us, o.new_state), (100_000, None));
/// ```
#[inline]
#[must_use]
pub fn decide_whole(now_us: u64, tat_us: u64, p: Params, cost: u64) -> Option<crate::Outcome<u64>> {
    // Not in whole microseconds: the caller asks `decide`.
    if p.per_micro != 1 {
        return None;
    }
    // What `decide_narrow` reads of the state: its expiry, in microseconds, must exist.
    tat_us.div_ceil(1000).checked_mul(1000)?;
    let owed = tat_us.saturating_sub(now_us);
    let (x, stale) = if owed == 0 {
        (p.forgotten, p.forgotten > 0)
    } else if owed > p.tau.checked_add(p.hold)? {
        (p.tau, true)
    } else {
        (owed, false)
    };
    let new_x = x.checked_add(cost.checked_mul(p.interval)?)?;
    let room = p.tau.checked_add(p.reach)?;
    let full = if p.queue { room } else { p.tau };
    // The instant a bucket `x` from full is full again, as `stored_narrow` keeps it.
    let kept = |x: u64| -> Option<u64> {
        let full_at = now_us.checked_add(x)?;
        full_at.div_ceil(1000).checked_mul(1000)?;
        Some(full_at)
    };
    if new_x > room {
        return Some(crate::Outcome {
            allowed: false,
            remaining: full.saturating_sub(x) / p.interval,
            retry_after_us: new_x - room,
            reset_after_us: x,
            new_state: if stale { Some(kept(x)?) } else { None },
        });
    }
    Some(crate::Outcome {
        allowed: true,
        remaining: full.saturating_sub(new_x) / p.interval,
        retry_after_us: new_x.saturating_sub(p.tau),
        reset_after_us: new_x,
        new_state: Some(kept(new_x)?),
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

/// What a bucket's key holds, as `gcra.lua` reads it: an
/// [`Unreadable`](crate::Read::Unreadable) value is an empty bucket, overwritten with one
/// whatever the decision, so that it costs that key a refill, never an error for every call
/// on it.
pub type Read = crate::Read<State>;

/// [`decide`] on what a key holds: what `gcra.lua` decides and stores, for every value a
/// key may hold. An [`Unreadable`](Read::Unreadable) one is an empty bucket stored at `now_us`
/// in `p`'s terms (as the script's `tb_store` writes it), and that is stored even when the
/// call is refused.
///
/// ```
/// use ratelimit_algorithms::token_bucket::{self, Read};
///
/// // 1 per second, burst 2: from garbage, an empty bucket, refused for a second.
/// let (p, _) = token_bucket::from_args(&[1_000_000, 1, 2_000_000, 1]).expect("valid");
/// let now = 1_800_000_000_000_000;
/// let o = token_bucket::decide_read(now, Read::Unreadable, p, 1);
/// assert!(!o.allowed && o.retry_after_us == 1_000_000);
/// let written = o.new_state.expect("overwritten even though refused");
/// // Read back, it is that empty bucket: refused alike, and nothing more to store.
/// let again = token_bucket::decide_read(now, Read::State(written), p, 1);
/// assert_eq!((again.allowed, again.retry_after_us, again.new_state), (false, 1_000_000, None));
/// ```
#[must_use]
pub fn decide_read(now_us: u64, read: Read, p: Params, cost: u64) -> Outcome {
    match read {
        Read::Absent => decide(now_us, None, p, cost),
        Read::State(state) => decide(now_us, Some(state), p, cost),
        Read::Unreadable => {
            let empty = stored_wide(u128::from(now_us), u128::from(p.tau), p);
            let mut outcome = decide(now_us, Some(empty), p, cost);
            outcome.new_state.get_or_insert(empty);
            outcome
        }
    }
}

/// Gives `cost` tokens back to a bucket in `state` at `now_us` (a reservation its caller
/// gave up): the bucket as it is now, less those tokens, floored at full. `None`: full. What
/// `gcra.lua` does for a negative cost ([`Cost::GiveBack`]).
#[must_use]
pub fn give_back(now_us: u64, state: Option<State>, p: Params, cost: u64) -> Option<State> {
    let now = u128::from(now_us);
    let (x, _) = owed_wide(now, state, p);
    let x = x.saturating_sub(u128::from(cost) * u128::from(p.interval));
    (x > 0).then(|| stored_wide(now, x, p))
}

/// Takes `extra` more tokens from a bucket in `state` at `now_us`, whatever it holds: a call
/// that took an estimate settles a larger actual cost (issue 36). The bucket may go below
/// empty, into debt, by at most `max_debt` tokens (what it takes beyond that is not taken);
/// the calls after it wait until the debt has come back and their own tokens with it, which
/// their `retry_after` says. The debt is bounded by the bucket's `hold` too (a state owing
/// more than `tau + hold` reads as a clock stepped back, see [`Params::hold`]). What the
/// bucket then holds, and the tokens taken.
#[must_use]
pub fn take_over(
    now_us: u64,
    state: Option<State>,
    p: Params,
    extra: u64,
    max_debt: u64,
) -> (State, u64) {
    let now = u128::from(now_us);
    let (owed, _) = owed_wide(now, state, p);
    let interval = u128::from(p.interval);
    let debt = (u128::from(max_debt) * interval).min(u128::from(p.hold));
    let most = u128::from(p.tau) + debt;
    // Whole tokens only: what fits of `extra` below the bound.
    let room = most.saturating_sub(owed) / interval;
    let taken = u128::from(extra).min(room);
    let owed = owed + taken * interval;
    (stored_wide(now, owed, p), narrow(taken))
}

/// [`take_over`] on what a key holds, as `call.lua` reads it: an
/// [`Unreadable`](crate::Read::Unreadable) value is an empty bucket.
#[must_use]
pub fn take_over_read(
    now_us: u64,
    read: Read,
    p: Params,
    extra: u64,
    max_debt: u64,
) -> (State, u64) {
    let state = match read {
        Read::Absent => None,
        Read::State(s) => Some(s),
        Read::Unreadable => Some(stored_wide(u128::from(now_us), u128::from(p.tau), p)),
    };
    take_over(now_us, state, p, extra, max_debt)
}

/// [`give_back`] on what a key holds, as `call.lua` runs `gcra.lua` with a negative cost on a
/// key that exists: an [`Unreadable`](crate::Read::Unreadable) value is an empty bucket, given
/// the tokens back and stored. `None`: full (the key goes). The caller gives nothing back to
/// an [`Absent`](crate::Read::Absent) key (a full bucket), which this reads as `give_back`
/// reads `None`.
#[must_use]
pub fn give_back_read(now_us: u64, read: Read, p: Params, cost: u64) -> Option<State> {
    let state = match read {
        Read::Absent => None,
        Read::State(s) => Some(s),
        Read::Unreadable => Some(stored_wide(u128::from(now_us), u128::from(p.tau), p)),
    };
    give_back(now_us, state, p, cost)
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
/// The fraction of a token is computed in `f64` exactly as `gcra_head.lua`'s `tb_convert`
/// computes it with Lua's doubles, plus one fine unit for the rounding, so both stores decide
/// alike.
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
mod tests;
