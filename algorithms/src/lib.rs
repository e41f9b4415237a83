//! Every rate-limit algorithm's decision in exact integer arithmetic, and the form of its
//! stored state: the one owner that redis-ratelimit's memory store, its Redis module, its
//! command-line tool and the twin tests of its Lua scripts share.
//!
//! Each algorithm has a module: its parameters, its script's arguments (`args`), its decision
//! (`decide`, the Rust twin of one atomic Lua script of `ratelimit-core/src/scripts/`), and
//! its stored `State` (`decode` reads a key's value as the script does, `encode` writes it).
//! [`StateKind`] names the kinds of state, with the ids by which a call names its script. The
//! memory store runs these functions, the Redis store runs the scripts, and
//! `testkit/tests/algorithms.rs` holds each script to its twin on a real `redis-server`. The
//! parameters of a `Limit` (a type of `ratelimit-core`) come from
//! `ratelimit_core::tools::algorithms::OfLimit`.
//!
//! Shared rules:
//! * the server's clock (`TIME`, in microseconds) decides, never a node's;
//! * a refusal's `retry_after`, waited exactly with nothing else happening, admits the same
//!   call; it is never early;
//! * a key expires when it carries no information, and a refusal writes nothing unless the
//!   stored state must be read differently from what it says;
//! * the decision never depends on whether Redis has already dropped a key whose expiry has
//!   passed: Redis expires keys on a millisecond clock frozen when the script starts, while
//!   the script reads `TIME` in microseconds, so a key may outlive its expiry by up to a
//!   millisecond. Every state therefore says itself when it ends, and an ended state reads as
//!   an absent one;
//! * times are microseconds below 2^53 (the year 2255), where Lua's doubles are exact; the
//!   parameters are validated so that every quantity stays there too;
//! * every script replies `{allowed, remaining, retry_after_us, reset_after_us, now_us}`: the
//!   last is the server time it decided at, which lets a test replay the twin at that instant.
//!
//! A script's arguments are integers in canonical decimal, as the limiter writes them (a
//! script reads some as text: the concurrency limit's holder, the fixed window's cost).
//! `from_args`, in each module, reads them back as the module receives them: the two buckets'
//! (`token_bucket`, `interval_bucket`) as `i64`, their cost being negative when tokens are
//! given back ([`Cost`]); every other script's as `u64` (a concurrency limit's holder may be
//! any `u64`). It answers `None` for arguments that no valid limit sends.
//!
//! ```
//! use ratelimit_algorithms::{StateKind, WindowParams, fixed_window};
//!
//! // 3 per second; 2 taken a quarter into a window, as `fixed_window.lua` is asked.
//! let (p, cost) = fixed_window::from_args(&[3, 1_000_000, 2]).expect("a valid call");
//! assert_eq!(p, WindowParams::try_new(3, 1_000_000).unwrap());
//! assert_eq!(fixed_window::args(p, cost), [3, 1_000_000, 2]);
//! let now = 1_800_000_000_250_000;
//! let first = fixed_window::decide(now, None, p, cost);
//! assert!(first.allowed);
//! let state = first.new_state.expect("a count to store");
//! assert_eq!(state.encode(), "2");
//! assert_eq!(fixed_window::State::decode("2", state.expire_ms), Some(state));
//! assert!(!fixed_window::decide(now, Some(state), p, 2).allowed);
//! assert_eq!(StateKind::from_id(3), Some(StateKind::FixedWindow));
//! ```

pub mod calendar;
pub mod concurrency;
pub mod fixed_window;
pub mod interval_bucket;
mod kind;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub use kind::StateKind;

/// What a caller sees of one decision, and the state to store when it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome<S> {
    /// Whether the call is admitted.
    pub allowed: bool,
    /// Calls of cost 1 that would still be admitted now.
    pub remaining: u64,
    /// When refused: microseconds until the same call would be admitted; 0 when admitted.
    pub retry_after_us: u64,
    /// Microseconds until the state carries no information any more (an idle key is gone).
    pub reset_after_us: u64,
    /// `Some` when the stored state changes.
    pub new_state: Option<S>,
}

/// A window's limit: at most `limit` tokens per `period_us` microseconds. The windows have no
/// burst of their own: a window admits `limit` tokens, so a limit's window (`WindowParams::of`
/// in `ratelimit_core::tools::algorithms::OfLimit`) reads its `replenish` per `unit` and
/// ignores its `burst`. Nor an initial fill: a window's count starts at 0 in every window, and
/// no window is "full" at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowParams {
    limit: u64,
    period_us: u64,
}

impl WindowParams {
    /// `limit` tokens per `period_us`; `None` when either is 0, either is beyond exact
    /// arithmetic in Lua, or the period is shorter than a millisecond (Redis keeps expiries in
    /// milliseconds, and a state is told apart from the next window's by its expiry). The
    /// sliding window bounds its weighted count further: see
    /// [`SlidingParams`](sliding_window::SlidingParams).
    pub const fn try_new(limit: u64, period_us: u64) -> Option<WindowParams> {
        if ratelimit_vocab::limits::window_is_exact(limit, period_us) {
            Some(WindowParams { limit, period_us })
        } else {
            None
        }
    }

    /// Tokens admitted per window.
    pub const fn limit(self) -> u64 {
        self.limit
    }

    /// The window's length in microseconds.
    pub const fn period_us(self) -> u64 {
        self.period_us
    }

    /// The window and the cost of `[limit, period, cost]` (the fixed window's and the sliding
    /// log's arguments), `None` beyond what a valid limit sends: see
    /// [`fixed_window::from_args`].
    fn from_args(args: &[u64]) -> Option<(WindowParams, u64)> {
        let &[limit, period_us, cost] = args else {
            return None;
        };
        let p = WindowParams::try_new(limit, period_us)?;
        (cost <= limit).then_some((p, cost))
    }
}

impl<S> Outcome<S> {
    /// The same outcome with its state stored as `f` makes it (the memory store keeps each
    /// algorithm's state in one enum).
    #[doc(hidden)]
    pub fn map_state<T>(self, f: impl FnOnce(S) -> T) -> Outcome<T> {
        Outcome {
            allowed: self.allowed,
            remaining: self.remaining,
            retry_after_us: self.retry_after_us,
            reset_after_us: self.reset_after_us,
            new_state: self.new_state.map(f),
        }
    }
}

impl Outcome<()> {
    /// What a peek answers for a call of `cost`, with `decide` an algorithm's decision on the
    /// bucket as it stands for a given cost: whether the call would be admitted and when
    /// (`decide(cost)`), with `remaining` the whole tokens the bucket holds now, not those it
    /// would keep after the call (`decide(0)`: every algorithm answers a cost of 0 taking
    /// nothing), so that exactly `remaining` calls of cost 1 would be admitted now, and
    /// `reset_after` when the bucket as it stands is full again (also `decide(0)`: after the
    /// call it would be later). Nothing is stored.
    pub fn peek<S>(decide: impl Fn(u64) -> Outcome<S>, cost: u64) -> Outcome<()> {
        let call = decide(cost);
        let now_held = decide(0);
        Outcome {
            allowed: call.allowed,
            remaining: now_held.remaining,
            retry_after_us: call.retry_after_us,
            reset_after_us: now_held.reset_after_us,
            new_state: None,
        }
    }
}

/// What a key holds, as an algorithm's script reads it, for a reader that sees the key's raw
/// value (the Redis module): the `Option<State>` of `decide`, plus the values no script
/// writes. Each algorithm's `decide_read` says what it makes of those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<S> {
    /// No key.
    Absent,
    /// A state this algorithm wrote (its `State::decode` of the value and expiry).
    State(S),
    /// A value the script never writes (another type, text, a number without an expiry).
    Unreadable,
}

/// A stored value written on the stack: at most 64 bytes of ASCII, as the states' `encoded`
/// write them, for a writer that must not allocate per decision (the Redis module).
#[derive(Clone, Copy)]
pub struct Encoded {
    buf: [u8; 64],
    len: usize,
}

impl Encoded {
    const fn new() -> Encoded {
        Encoded {
            buf: [0; 64],
            len: 0,
        }
    }

    /// The value's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// The number of decimal digits of `v`.
    fn digits(mut v: u64) -> usize {
        let mut n = 1;
        while v >= 10 {
            v /= 10;
            n += 1;
        }
        n
    }

    fn push_byte(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    /// `v` in decimal, zero-padded to at least `width` digits.
    fn push(&mut self, v: u64, width: usize) {
        let mut digits = [0u8; 20];
        let digits = ratelimit_vocab::native::write_decimal(&mut digits, v);
        for _ in digits.len()..width {
            self.push_byte(b'0');
        }
        let end = self.len + digits.len();
        if let Some(out) = self.buf.get_mut(self.len..end) {
            out.copy_from_slice(digits);
            self.len = end;
        }
    }
}

impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl Encoded {
    /// The value as text (it is ASCII): what each state's `encode` returns.
    #[must_use]
    pub fn to_text(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

/// A bucket's cost as its script reads it (`gcra.lua`, `interval_bucket.lua`): the tokens a
/// call takes, or, written negative, tokens given back.
///
/// Only `call.lua` writes a negative cost: its mode 3 (`multi.lua`'s "give back", for the
/// tokens a call reserved on one node when another node refused it) runs each bucket's script
/// with the call's cost negated, and only on a key that exists (a bucket whose key is gone is
/// full: there is nothing to give back). The script reads the bucket as a call would (a state
/// of another limit converted, one owing too much read as empty), returns the tokens, floored
/// at full, and stores the result: a bucket full again expires there and then, and reads as
/// absent.
/// The twin is the algorithm's `give_back` ([`token_bucket::give_back`],
/// [`interval_bucket::give_back`]), whose `None` is that forgotten bucket; a call's own cost
/// is `decide`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// A call takes this many tokens. 0 takes nothing: `call.lua` runs a script with it to
    /// read a limit as it stands (a peek), and drops what it writes.
    Take(u64),
    /// This many tokens, at least 1, come back.
    GiveBack(u64),
}

impl Cost {
    /// The cost an argument says (`-n` gives `n` back), if its tokens are at most `most`.
    fn of_arg(arg: i64, most: u64) -> Option<Cost> {
        let tokens = arg.unsigned_abs();
        if tokens > most {
            None
        } else if arg < 0 {
            Some(Cost::GiveBack(tokens))
        } else {
            Some(Cost::Take(tokens))
        }
    }
}

/// Whether `v` matches `^%d+$`.
fn all_digits(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `v` matches `^[1-9]%d*$`: a whole number above 0 in canonical decimal, as the
/// scripts match a stored count.
pub fn canonical(v: &str) -> bool {
    all_digits(v) && !v.starts_with('0')
}

/// The end of the scripts' time, in microseconds: Lua's doubles are exact below 2^53 (the
/// year 2255). No script writes a count, a window or an expiry beyond it, and the twins are
/// not asked to decide beyond it.
pub const MAX_TIME_US: u64 = 1 << 53;

/// `^%d+$`: a whole number as the scripts match it; `None` from 2^53 on, which no script
/// writes.
pub fn digits(v: &str) -> Option<u64> {
    all_digits(v)
        .then(|| v.parse().ok())
        .flatten()
        .filter(|&n| n < MAX_TIME_US)
}

/// `^[1-9]%d*$`: a whole number above 0 in canonical decimal, as the scripts match it;
/// `None` from 2^53 on.
pub fn positive(v: &str) -> Option<u64> {
    if v.starts_with('0') { None } else { digits(v) }
}

/// The first microsecond of the window after the one holding `now_us`.
fn next_boundary(now_us: u64, period_us: u64) -> u64 {
    (now_us / period_us + 1) * period_us
}

/// `args` as unsigned values, `None` if any is negative.
fn unsigned<const N: usize>(args: [i64; N]) -> Option<[u64; N]> {
    let mut out = [0; N];
    for (o, a) in out.iter_mut().zip(args) {
        *o = u64::try_from(a).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{Outcome, WindowParams};
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    /// A second boundary, and a millisecond one.
    pub(crate) const T0: u64 = 1_800_000_000_000_000;

    /// Keeps the state `o` stores, and returns `o`.
    pub(crate) fn keep<S: Clone>(state: &mut Option<S>, o: Outcome<S>) -> Outcome<S> {
        if let Some(s) = &o.new_state {
            *state = Some(s.clone());
        }
        o
    }

    /// Runs `calls` (microseconds since the last call, cost) from `initial` (at `T0`) through
    /// `decide`, keeping what it stores; checks that every refusal's `retry_after`, waited
    /// exactly with nothing else happening, admits the same call and a microsecond less does
    /// not; returns the admitted calls (time, cost) for the kernel's own bound.
    pub(crate) fn replay<S: Clone + std::fmt::Debug>(
        initial: Option<S>,
        calls: &[(u64, u64)],
        decide: impl Fn(u64, Option<&S>, u64) -> Outcome<S>,
    ) -> Result<Vec<(u64, u64)>, TestCaseError> {
        let mut state = initial;
        let mut now = T0;
        let mut admitted = Vec::new();
        for &(dt, cost) in calls {
            now += dt;
            let o = decide(now, state.as_ref(), cost);
            let o = keep(&mut state, o);
            if o.allowed {
                admitted.push((now, cost));
                continue;
            }
            let wait = o.retry_after_us;
            if wait == 0 {
                return Err(TestCaseError::fail(format!(
                    "refused at {now} with no wait"
                )));
            }
            if decide(now + wait - 1, state.as_ref(), cost).allowed {
                return Err(TestCaseError::fail(format!(
                    "admitted before retry_after at {now}"
                )));
            }
            let later = decide(now + wait, state.as_ref(), cost);
            if !later.allowed {
                return Err(TestCaseError::fail(format!(
                    "refused after waiting retry_after {wait} at {now}: {later:?} from {state:?}"
                )));
            }
        }
        Ok(admitted)
    }

    /// Any window within exact arithmetic, briefly or widely.
    fn any_window() -> impl Strategy<Value = WindowParams> {
        let max = ratelimit_vocab::limits::MAX_EXACT;
        (
            prop_oneof![1u64..100, 1u64..=max],
            prop_oneof![(1u64..100_000).prop_map(|ms| ms * 1000), 1000u64..=max],
        )
            .prop_map(|(limit, period_us)| WindowParams::try_new(limit, period_us).unwrap())
    }

    type FromArgs = fn(&[u64]) -> Option<(WindowParams, u64)>;
    type Args = fn(WindowParams, u64) -> [u64; 3];

    /// The fixed window's and the sliding log's: the same arguments.
    const WINDOWS: [(FromArgs, Args); 2] = [
        (crate::fixed_window::from_args, crate::fixed_window::args),
        (crate::sliding_log::from_args, crate::sliding_log::args),
    ];

    proptest! {
        /// Every window's arguments read back as its window and cost.
        #[test]
        fn window_args_read_back(p in any_window(), cost in any::<u64>()) {
            let cost = cost % (p.limit() + 1);
            for (from_args, args) in WINDOWS {
                prop_assert_eq!(from_args(&args(p, cost)), Some((p, cost)));
            }
        }
    }

    #[test]
    fn window_arguments_no_limit_sends_are_refused() {
        for (from_args, _) in WINDOWS {
            assert!(from_args(&[5, 1_000_000, 5]).is_some());
            assert_eq!(from_args(&[5, 1_000_000]), None);
            assert_eq!(from_args(&[5, 1_000_000, 1, 1]), None);
            assert_eq!(from_args(&[0, 1_000_000, 0]), None, "no tokens");
            assert_eq!(from_args(&[5, 999, 1]), None, "under a millisecond");
            assert_eq!(
                from_args(&[5, (1 << 51) + 1, 1]),
                None,
                "beyond exact arithmetic"
            );
            assert_eq!(
                from_args(&[(1 << 51) + 1, 1_000_000, 1]),
                None,
                "beyond exact arithmetic"
            );
            assert_eq!(from_args(&[5, 1_000_000, 6]), None, "more than the limit");
        }
    }
}
