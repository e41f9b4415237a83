//! One limit of a call, as the module decides it: its algorithm's parameters (from the Lua
//! function's arguments), how it reads its key, decides, and what it writes. The commands of
//! one algorithm and `multi` share it, so that both read, decide and write alike.

use ratelimit_algorithms::calendar::Calendar;
use ratelimit_algorithms::{
    Cost, Encoded, Outcome, Read, StateKind, WindowParams, fixed_window, interval_bucket,
    sliding_window, token_bucket,
};

use crate::api::Value;

/// A limit's algorithm and parameters: the kinds of state the module decides.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kernel {
    TokenBucket(token_bucket::Params),
    IntervalBucket(interval_bucket::IntervalParams),
    /// A window, and its calendar where its windows are calendar periods.
    FixedWindow(WindowParams, Option<Calendar>),
    SlidingWindow(sliding_window::SlidingParams),
}

/// What a limit's key holds, as its algorithm's script reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum State {
    TokenBucket(Read<token_bucket::State>),
    IntervalBucket(Read<interval_bucket::State>),
    FixedWindow(Option<fixed_window::State>),
    SlidingWindow(Option<sliding_window::State>),
}

/// What a decision writes to its key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Write {
    /// The value, expiring at this instant (ms).
    Set(Encoded, u64),
    /// The value, the key's expiry kept (`SET .. KEEPTTL`, `INCRBY`).
    Keep(Encoded),
    /// The key goes.
    Delete,
    /// The value, `by` more than the count the key holds, its expiry kept: a window's count
    /// within its window (propagated as `INCRBY`, as `fixed_window.lua` writes it).
    Add(Encoded, u64),
}

/// One limit's answer, as its script returns it (less the server time), and its write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) write: Option<Write>,
}

impl Answer {
    fn of<S>(outcome: &Outcome<S>, write: impl FnOnce(&S) -> Write) -> Answer {
        Answer {
            allowed: outcome.allowed,
            remaining: outcome.remaining,
            retry_after_us: outcome.retry_after_us,
            reset_after_us: outcome.reset_after_us,
            write: outcome.new_state.as_ref().map(write),
        }
    }

    /// Its four numbers, as the script returns them.
    pub(crate) fn numbers(&self) -> [u64; 4] {
        [
            u64::from(self.allowed),
            self.remaining,
            self.retry_after_us,
            self.reset_after_us,
        ]
    }
}

impl Kernel {
    /// The kernel and cost that the function `kind` reads from `args` (its arguments as the
    /// library sends them); `None` for a kind the module does not decide, or arguments no
    /// valid limit sends (the windows' may not be negative).
    #[inline(always)]
    pub(crate) fn from_args(kind: StateKind, args: &[i64]) -> Option<(Kernel, Cost)> {
        match kind {
            StateKind::TokenBucket => {
                token_bucket::from_args(args).map(|(p, cost)| (Kernel::TokenBucket(p), cost))
            }
            StateKind::IntervalBucket => {
                interval_bucket::from_args(args).map(|(p, cost)| (Kernel::IntervalBucket(p), cost))
            }
            StateKind::FixedWindow => {
                let window = match args.len() {
                    3 => fixed_window::from_any_args(&unsigned::<3>(args)?),
                    _ => fixed_window::from_any_args(&unsigned::<6>(args)?),
                };
                window
                    .map(|(p, calendar, cost)| (Kernel::FixedWindow(p, calendar), Cost::Take(cost)))
            }
            StateKind::SlidingWindow => sliding_window::from_args(&unsigned::<4>(args)?)
                .map(|(p, cost)| (Kernel::SlidingWindow(p), Cost::Take(cost))),
            // The sliding log, concurrency limits, and any kind of a later version.
            _ => None,
        }
    }

    /// What a key holding `value` holds for this limit, as its script reads it.
    #[inline(always)]
    pub(crate) fn read(&self, value: &Value<'_>) -> State {
        match self {
            Kernel::TokenBucket(_) => {
                State::TokenBucket(read_expiring(value, token_bucket::State::decode_bytes))
            }
            Kernel::IntervalBucket(_) => {
                State::IntervalBucket(read_expiring(value, interval_bucket::State::decode_bytes))
            }
            // Another type, text, no expiry: not a count, read as an empty window (and
            // overwritten by the call it admits), as the script reads it.
            Kernel::FixedWindow(..) => State::FixedWindow(match *value {
                Value::String(bytes, Some(expire_ms)) => {
                    fixed_window::State::decode_bytes(bytes, expire_ms)
                }
                _ => None,
            }),
            // Any value not "window:previous:current", of any type, with or without an
            // expiry: empty windows, as the script reads it.
            Kernel::SlidingWindow(_) => State::SlidingWindow(match *value {
                Value::String(bytes, _) => sliding_window::State::decode_bytes(bytes),
                _ => None,
            }),
        }
    }

    /// Decides a call of `cost` tokens at `now` (µs) on `state`; a cost of 0 answers what the
    /// limit holds and takes nothing (a peek).
    #[inline(always)]
    pub(crate) fn decide(&self, now: u64, state: &State, cost: u64) -> Answer {
        match (*self, *state) {
            (Kernel::TokenBucket(p), State::TokenBucket(read)) => {
                Answer::of(&token_bucket::decide_read(now, read, p, cost), |s| {
                    Write::Set(s.encoded(), s.expire_ms)
                })
            }
            (Kernel::IntervalBucket(p), State::IntervalBucket(read)) => {
                Answer::of(&interval_bucket::decide_read(now, read, p, cost), |s| {
                    Write::Set(s.encoded(), s.expire_ms)
                })
            }
            (Kernel::FixedWindow(p, calendar), State::FixedWindow(held)) => {
                Answer::of(
                    &fixed_window::decide_in(now, held, p, calendar, cost),
                    |s| {
                        match held {
                            // The window's count, its expiry as it is.
                            Some(h) if h.expire_ms == s.expire_ms && h.count < s.count => {
                                Write::Add(s.encoded(), s.count - h.count)
                            }
                            _ => Write::Set(s.encoded(), s.expire_ms),
                        }
                    },
                )
            }
            (Kernel::SlidingWindow(p), State::SlidingWindow(s)) => {
                Answer::of(&sliding_window::decide(now, s, p, cost), |s| {
                    Write::Set(s.encoded(), s.expire_ms(p))
                })
            }
            // A state read by another kernel: never (each limit's state is read by its own).
            _ => Answer {
                allowed: false,
                remaining: 0,
                retry_after_us: 0,
                reset_after_us: 0,
                write: None,
            },
        }
    }

    /// What giving back `cost` tokens that a reservation took at `reserved_at` (µs) writes,
    /// at `now`, as `call.lua`'s mode 3 does: a bucket gets them back as it is now (one
    /// whose key is gone is full: nothing to give back); a window only to the window that
    /// counted them (a later one never had them).
    pub(crate) fn give_back(
        &self,
        now: u64,
        state: &State,
        cost: u64,
        reserved_at: u64,
    ) -> Option<Write> {
        let bucket = |state: Option<Encoded>, expire_ms: u64| match state {
            Some(value) => Write::Set(value, expire_ms),
            None => Write::Delete,
        };
        match (*self, *state) {
            (_, State::TokenBucket(Read::Absent) | State::IntervalBucket(Read::Absent)) => None,
            (Kernel::TokenBucket(p), State::TokenBucket(read)) => {
                let s = token_bucket::give_back_read(now, read, p, cost);
                Some(bucket(s.map(|s| s.encoded()), s.map_or(0, |s| s.expire_ms)))
            }
            (Kernel::IntervalBucket(p), State::IntervalBucket(read)) => {
                let s = interval_bucket::give_back_read(now, read, p, cost);
                Some(bucket(s.map(|s| s.encoded()), s.map_or(0, |s| s.expire_ms)))
            }
            (Kernel::FixedWindow(p, calendar), State::FixedWindow(s)) => {
                // Only the count of the reservation's window, still current, with the expiry
                // that window writes.
                fixed_window::give_back(now, s, p, calendar, cost, reserved_at)
                    .map(|left| left.map_or(Write::Delete, |left| Write::Keep(left.encoded())))
            }
            (Kernel::SlidingWindow(p), State::SlidingWindow(Some(mut s))) => {
                let window = reserved_at / p.window().period_us();
                if s.window == window {
                    s.current = s.current.saturating_sub(cost);
                }
                if s.window == window + 1 {
                    s.previous = s.previous.saturating_sub(cost);
                }
                Some(Write::Keep(s.encoded()))
            }
            _ => None,
        }
    }

    /// What taking `extra` more tokens at `now` writes, into debt up to `debt` tokens, as
    /// `call.lua`'s settlement does (mode 5), and the tokens taken; `None` for a limit that
    /// cannot settle (the limiter never asks it to).
    pub(crate) fn take_over(
        &self,
        now: u64,
        state: &State,
        extra: u64,
        debt: u64,
    ) -> Option<(Option<Write>, u64)> {
        match (*self, *state) {
            (Kernel::TokenBucket(p), State::TokenBucket(read)) => {
                let (s, taken) = token_bucket::take_over_read(now, read, p, extra, debt);
                Some((Some(Write::Set(s.encoded(), s.expire_ms)), taken))
            }
            (Kernel::FixedWindow(p, calendar), State::FixedWindow(held)) => {
                let (s, taken) = fixed_window::take_over(now, held, p, calendar, extra, debt);
                let write = match held {
                    _ if taken == 0 => None,
                    Some(h) if h.expire_ms == s.expire_ms && h.count < s.count => {
                        Some(Write::Add(s.encoded(), taken))
                    }
                    _ => Some(Write::Set(s.encoded(), s.expire_ms)),
                };
                Some((write, taken))
            }
            _ => None,
        }
    }

    /// Whether a bucket read a value its script never writes (the script logs it).
    pub(crate) fn unreadable(state: &State) -> bool {
        matches!(
            state,
            State::TokenBucket(Read::Unreadable) | State::IntervalBucket(Read::Unreadable)
        )
    }
}

/// Exactly `N` arguments, none negative (a window's: the library sends no other).
#[inline(always)]
fn unsigned<const N: usize>(args: &[i64]) -> Option<[u64; N]> {
    let args: &[i64; N] = args.try_into().ok()?;
    let mut out = [0u64; N];
    for (to, &from) in out.iter_mut().zip(args) {
        *to = u64::try_from(from).ok()?;
    }
    Some(out)
}

/// A string with an expiry read by `decode` (`None`: not this algorithm's form); any other
/// value unreadable.
fn read_expiring<S>(value: &Value<'_>, decode: fn(&[u8], u64) -> Option<S>) -> Read<S> {
    match *value {
        Value::Absent => Read::Absent,
        Value::String(bytes, Some(expire_ms)) => {
            decode(bytes, expire_ms).map_or(Read::Unreadable, Read::State)
        }
        Value::String(_, None) | Value::SortedSet | Value::Other => Read::Unreadable,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Numbers as a hostile client sends them: small, near the limits' bounds, any at all.
    fn number() -> impl Strategy<Value = i64> {
        prop_oneof![
            0i64..12,
            -3i64..3,
            0i64..5_000_000,
            999_000i64..1_001_000,
            Just(i64::MAX),
            Just(i64::MIN),
            any::<i64>(),
        ]
    }

    /// A key's value as a hostile client may have left it: a state's digits and separators,
    /// or any bytes, with or without an expiry; or no key.
    fn value() -> impl Strategy<Value = Option<(Vec<u8>, Option<u64>)>> {
        let bytes = prop_oneof![
            vec(prop_oneof![Just(b'-'), Just(b':'), b'0'..=b'9'], 0..30),
            vec(any::<u8>(), 0..30),
        ];
        let expiry = prop_oneof![
            Just(None),
            (0u64..(1 << 45)).prop_map(Some),
            any::<u64>().prop_map(Some)
        ];
        prop::option::of((bytes, expiry))
    }

    /// A valid call's arguments for each kind (1 per second, burst 5; 4 per second up to 10 at
    /// intervals; 5 per second in windows), one of them replaced by `number()`'s, or any
    /// arguments at all.
    fn arguments() -> impl Strategy<Value = (u8, Vec<i64>)> {
        let templates: [(u8, &[i64]); 5] = [
            (1, &[1_000_000, 1, 5_000_000, 1]),
            (1, &[333_334, 3, 1_666_667, 2, 1, 2_000_000, 0, 1]),
            (2, &[4, 10, 1_000_000, 10, 1]),
            (3, &[5, 1_000_000, 1]),
            (4, &[5, 1_000_000, 1000, 1]),
        ];
        prop_oneof![
            (0..templates.len(), any::<prop::sample::Index>(), number()).prop_map(
                move |(t, at, v)| {
                    let (kind, args) = templates[t];
                    let mut args = args.to_vec();
                    let i = at.index(args.len());
                    args[i] = v;
                    (kind, args)
                }
            ),
            (1u8..=6, vec(number(), 0..10)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Whatever arguments a command's parsing admits and whatever its key holds, deciding
        /// (at any cost up to the call's, a peek included) and giving back never panic: in
        /// this build an overflow panics, where the module's release build would wrap.
        #[test]
        fn every_admitted_call_decides_on_any_value(
            (kind, args) in arguments(),
            held in value(),
            now in 0u64..(1 << 53),
            at in 0u64..(1 << 53),
        ) {
            let Some(kind) = StateKind::from_id(kind) else { return Ok(()) };
            let Some((kernel, cost)) = Kernel::from_args(kind, &args) else { return Ok(()) };
            let value = match &held {
                None => Value::Absent,
                Some((bytes, expiry)) => Value::String(bytes, *expiry),
            };
            let state = kernel.read(&value);
            let cost = match cost {
                Cost::Take(cost) | Cost::GiveBack(cost) => cost,
            };
            for c in [cost, 0] {
                // A refusal says when to retry.
                let answer = kernel.decide(now, &state, c);
                prop_assert!(answer.allowed || answer.retry_after_us > 0, "{answer:?}");
            }
            let _ = kernel.give_back(now, &state, cost, at);
        }
    }
}
