//! The algorithms, the token bucket included: each decision as a pure function in exact integer
//! arithmetic, the Rust twin of one atomic Lua script in `scripts/`. [`Kernel`] picks one for
//! a [`Limit`]; the memory store runs the twin and the Redis store the script. Each module
//! also owns its state's stored form (`State::decode`, `State::encode`: what the script
//! writes). [`tools::algorithms`](crate::tools::algorithms) makes them public so that
//! `testkit/tests/algorithms.rs` can hold every script to its twin on a real
//! `redis-server`, and [`tools`](crate::tools) reads stored states with them.
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

pub mod concurrency;
pub mod fixed_window;
pub mod interval_bucket;
mod kind;
pub(crate) mod library;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub use kind::StateKind;
pub(crate) use kind::{BATCH_SCRIPT, MULTI_SCRIPT};

use crate::Limit;

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
/// burst of their own: a window admits `limit` tokens, so [`WindowParams::of`] reads a
/// [`Limit`]'s `replenish` per `unit` and ignores its `burst`. Nor an initial fill: a window's
/// count starts at 0 in every window, and no window is "full" at start.
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

    /// The window of a [`Limit`]: `replenish` tokens per period.
    pub fn of(limit: &Limit) -> Option<WindowParams> {
        WindowParams::try_new(u64::from(limit.replenish()), limit.period_micros())
    }

    /// Tokens admitted per window.
    pub const fn limit(self) -> u64 {
        self.limit
    }

    /// The window's length in microseconds.
    pub const fn period_us(self) -> u64 {
        self.period_us
    }
}

impl<S> Outcome<S> {
    /// The same outcome with its state stored as `f` makes it.
    pub(crate) fn map_state<T>(self, f: impl FnOnce(S) -> T) -> Outcome<T> {
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
    /// nothing), so that exactly `remaining` calls of cost 1 would be admitted now. Nothing is
    /// stored.
    pub fn peek<S>(decide: impl Fn(u64) -> Outcome<S>, cost: u64) -> Outcome<()> {
        let call = decide(cost);
        Outcome {
            allowed: call.allowed,
            remaining: decide(0).remaining,
            retry_after_us: call.retry_after_us,
            reset_after_us: call.reset_after_us,
            new_state: None,
        }
    }
}

/// A limit's arithmetic, with its exact integer parameters: one per algorithm (and refill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// The token bucket refilled smoothly (GCRA).
    Bucket(token_bucket::Params),
    /// The token bucket refilled at once each period.
    Interval(interval_bucket::IntervalParams),
    /// The fixed window.
    Fixed(WindowParams),
    /// The sliding window.
    Sliding(sliding_window::SlidingParams),
    /// The sliding log.
    Log(WindowParams),
    /// A concurrency limit.
    Concurrency(concurrency::Params),
}

impl Kernel {
    /// The kernel of `limit`, where no call holds a slot (a peek, a read). Every [`Limit`]
    /// was checked when it was built to have valid parameters for its algorithm; should one
    /// not, its token bucket decides (the arithmetic every limit has).
    pub(crate) fn of(limit: &Limit) -> Kernel {
        Kernel::held_by(limit, 0)
    }

    /// The kernel of `limit` for the call `holder` (a concurrency limit's slot is the call's;
    /// a rate limit has no holder, and 0 is none).
    pub(crate) fn held_by(limit: &Limit, holder: u64) -> Kernel {
        if let Some(p) = concurrency::Params::of(limit, holder) {
            return Kernel::Concurrency(p);
        }
        let kernel = match StateKind::from_parts(limit.algorithm_kind(), limit.refill_kind()) {
            StateKind::TokenBucket => None,
            StateKind::IntervalBucket => {
                interval_bucket::IntervalParams::of(limit).map(Kernel::Interval)
            }
            StateKind::FixedWindow => WindowParams::of(limit).map(Kernel::Fixed),
            StateKind::SlidingWindow => {
                sliding_window::SlidingParams::of(limit).map(Kernel::Sliding)
            }
            StateKind::SlidingLog => WindowParams::of(limit).map(Kernel::Log),
            // Not a rate limit's: decided above.
            StateKind::Concurrency => None,
        };
        kernel.unwrap_or_else(|| Kernel::Bucket(token_bucket::Params::of(limit)))
    }
}

impl Kernel {
    /// The kind of state its script keeps.
    pub(crate) const fn kind(self) -> StateKind {
        match self {
            Kernel::Bucket(_) => StateKind::TokenBucket,
            Kernel::Interval(_) => StateKind::IntervalBucket,
            Kernel::Fixed(_) => StateKind::FixedWindow,
            Kernel::Sliding(_) => StateKind::SlidingWindow,
            Kernel::Log(_) => StateKind::SlidingLog,
            Kernel::Concurrency(_) => StateKind::Concurrency,
        }
    }

    /// Its script's arguments for a call of `cost` (those its kind's script takes alone, and
    /// `multi.lua` after the kind's id).
    pub(crate) fn script_args(self, cost: u64) -> ScriptArgs {
        match self {
            // A call that does not wait on a token bucket's own hold leaves the last four out:
            // the script defaults them (`hold` to what it computes, as `hold_for` does).
            Kernel::Bucket(p)
                if p.absent == 0
                    && p.reach == 0
                    && !p.queue
                    && p.hold
                        == ratelimit_vocab::limits::hold_for(p.tau.into(), p.per_micro.into()) =>
            {
                ScriptArgs::new(&[p.interval, p.per_micro, p.tau, cost])
            }
            Kernel::Bucket(p) => ScriptArgs::new(&token_bucket::args(p, cost)),
            Kernel::Interval(p) => ScriptArgs::new(&interval_bucket::args(p, cost)),
            Kernel::Fixed(p) => ScriptArgs::new(&fixed_window::args(p, cost)),
            Kernel::Sliding(p) => ScriptArgs::new(&sliding_window::args(p, cost)),
            Kernel::Log(p) => ScriptArgs::new(&sliding_log::args(p, cost)),
            Kernel::Concurrency(p) => concurrency::script_args(p, cost),
        }
    }
}

/// A script's numeric arguments, on the stack (at most eight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScriptArgs {
    values: [u64; 8],
    len: usize,
}

impl ScriptArgs {
    fn new(values: &[u64]) -> ScriptArgs {
        let mut args = ScriptArgs {
            values: [0; 8],
            len: values.len().min(8),
        };
        args.values[..args.len].copy_from_slice(&values[..args.len]);
        args
    }

    pub(crate) fn as_slice(&self) -> &[u64] {
        &self.values[..self.len]
    }
}

/// Whether `v` matches `^%d+$`.
fn all_digits(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `v` matches `^[1-9]%d*$`: a whole number above 0 in canonical decimal.
pub(crate) fn canonical(v: &str) -> bool {
    all_digits(v) && !v.starts_with('0')
}

/// The end of the scripts' time, in microseconds: Lua's doubles are exact below 2^53 (the
/// year 2255). No script writes a count, a window or an expiry beyond it, and the twins are
/// not asked to decide beyond it.
pub(crate) const MAX_TIME_US: u64 = 1 << 53;

/// `^%d+$`: a whole number as the scripts match it; `None` from 2^53 on, which no script
/// writes.
pub(crate) fn digits(v: &str) -> Option<u64> {
    all_digits(v)
        .then(|| v.parse().ok())
        .flatten()
        .filter(|&n| n < MAX_TIME_US)
}

/// `^[1-9]%d*$`: a whole number above 0 in canonical decimal, as the scripts match it;
/// `None` from 2^53 on.
pub(crate) fn positive(v: &str) -> Option<u64> {
    if v.starts_with('0') { None } else { digits(v) }
}

/// The first microsecond of the window after the one holding `now_us`.
fn next_boundary(now_us: u64, period_us: u64) -> u64 {
    (now_us / period_us + 1) * period_us
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use proptest::test_runner::TestCaseError;

    /// A second boundary, and a millisecond one.
    pub(super) const T0: u64 = 1_800_000_000_000_000;

    /// Keeps the state `o` stores, and returns `o`.
    pub(super) fn keep<S: Clone>(state: &mut Option<S>, o: Outcome<S>) -> Outcome<S> {
        if let Some(s) = &o.new_state {
            *state = Some(s.clone());
        }
        o
    }

    /// Runs `calls` (microseconds since the last call, cost) from `initial` (at `T0`) through
    /// `decide`, keeping what it stores; checks that every refusal's `retry_after`, waited
    /// exactly with nothing else happening, admits the same call and a microsecond less does
    /// not; returns the admitted calls (time, cost) for the kernel's own bound.
    pub(super) fn replay<S: Clone + std::fmt::Debug>(
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
}
