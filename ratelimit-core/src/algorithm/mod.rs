//! The algorithms as the limiter runs them: [`Kernel`] picks one for a [`Limit`]; the memory
//! store runs its decision and the Redis store its script. The decisions themselves, in exact
//! integer arithmetic, with each algorithm's parameters and stored state, are the
//! `ratelimit-algorithms` crate's (shared with the Redis module and the CLI); here are what
//! needs this crate: the Lua scripts ([`kind`]'s list gives each kind its script, and
//! [`library`] makes them one library of Redis functions), each algorithm's parameters of a
//! [`Limit`] ([`OfLimit`], [`OfConcurrentLimit`]; a limit's kind of state is
//! [`tools::StateKindExt`](crate::tools::StateKindExt)'s), and the module of each
//! algorithm that [`tools::algorithms`](crate::tools::algorithms) makes public: the crate's,
//! with its script. `testkit/tests/algorithms.rs` holds every script to its twin on a real
//! `redis-server`, and [`tools`](crate::tools) reads stored states with them.

mod kind;
pub(crate) mod library;
mod of_limit;
#[cfg(test)]
mod tests;

pub(crate) use kind::{BATCH_SCRIPT, MULTI_SCRIPT, of_parts, script};
pub use of_limit::{OfConcurrentLimit, OfLimit};
pub(crate) use ratelimit_algorithms::MAX_TIME_US;
pub use ratelimit_algorithms::{Outcome, StateKind, WindowParams};

use crate::limit::Limit;

/// The token bucket (GCRA, refilled smoothly; also the leaky bucket):
/// [`ratelimit_algorithms::token_bucket`], with its script.
pub mod token_bucket {
    pub use ratelimit_algorithms::token_bucket::*;

    use crate::limit::Limit;

    /// The script, with the shared prelude, as Redis runs it.
    pub const SCRIPT: &str = super::script(super::StateKind::TokenBucket);

    /// The script's parameters for `limit` (a smooth refill), in fine units:
    /// [`Params::of`](super::OfLimit::of).
    #[must_use]
    pub const fn params(limit: &Limit) -> Params {
        super::of_limit::bucket_params(limit)
    }
}

/// The token bucket with interval refill: [`ratelimit_algorithms::interval_bucket`], with its
/// script.
pub mod interval_bucket {
    pub use ratelimit_algorithms::interval_bucket::*;

    /// The script, with the shared prelude, as Redis runs it.
    pub const SCRIPT: &str = super::script(super::StateKind::IntervalBucket);
}

/// Calendar periods (weeks, months) as windows: [`ratelimit_algorithms::calendar`].
pub mod calendar {
    pub use ratelimit_algorithms::calendar::*;
}

/// The fixed window: [`ratelimit_algorithms::fixed_window`], with its script.
pub mod fixed_window {
    pub use ratelimit_algorithms::fixed_window::*;

    /// The script, with the shared prelude, as Redis runs it.
    pub const SCRIPT: &str = super::script(super::StateKind::FixedWindow);
}

/// The sliding window: [`ratelimit_algorithms::sliding_window`], with its script.
pub mod sliding_window {
    pub use ratelimit_algorithms::sliding_window::*;

    /// The script, with the shared prelude, as Redis runs it.
    pub const SCRIPT: &str = super::script(super::StateKind::SlidingWindow);
}

/// The sliding log: [`ratelimit_algorithms::sliding_log`], with its script.
pub mod sliding_log {
    pub use ratelimit_algorithms::sliding_log::*;

    /// The script, with the shared prelude, as Redis runs it.
    pub const SCRIPT: &str = super::script(super::StateKind::SlidingLog);
}

/// A concurrency limit: [`ratelimit_algorithms::concurrency`], with its three scripts.
pub mod concurrency {
    pub use ratelimit_algorithms::concurrency::*;

    /// The script of one acquire (after the prelude).
    pub const SCRIPT: &str = super::script(super::StateKind::Concurrency);

    /// The script that gives a holder's slots (and ticket) back.
    pub const RELEASE_SCRIPT: &str = concat!(
        include_str!("../scripts/prelude.lua"),
        include_str!("../scripts/clock.lua"),
        include_str!("../scripts/concurrency_release.lua"),
    );

    /// The script that renews a holder's leases.
    pub const RENEW_SCRIPT: &str = concat!(
        include_str!("../scripts/prelude.lua"),
        include_str!("../scripts/clock.lua"),
        include_str!("../scripts/concurrency_renew.lua"),
    );
}

/// A limit's arithmetic, with its exact integer parameters: one per algorithm (and refill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// The token bucket refilled smoothly (GCRA).
    Bucket(token_bucket::Params),
    /// The token bucket refilled at once each period.
    Interval(interval_bucket::IntervalParams),
    /// The fixed window.
    /// A fixed window, its windows a calendar's periods where it has one.
    Fixed(WindowParams, Option<calendar::Calendar>),
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
    #[inline]
    pub(crate) fn held_by(limit: &Limit, holder: u64) -> Kernel {
        // The token bucket first, with nothing else asked of the limit: every call of most
        // limits comes here (the memory limiter's hot path, where the rest was a tenth of
        // a check).
        if !limit.is_concurrent()
            && matches!(
                of_parts(limit.algorithm_kind(), limit.refill_kind()),
                StateKind::TokenBucket
            )
        {
            return Kernel::Bucket(of_limit::bucket_params(limit));
        }
        Kernel::other_held_by(limit, holder)
    }

    /// [`held_by`](Kernel::held_by) of every limit but a token bucket's.
    fn other_held_by(limit: &Limit, holder: u64) -> Kernel {
        if let Some(p) = concurrency::Params::of(limit, holder) {
            return Kernel::Concurrency(p);
        }
        let kernel = match of_parts(limit.algorithm_kind(), limit.refill_kind()) {
            StateKind::IntervalBucket => {
                interval_bucket::IntervalParams::of(limit).map(Kernel::Interval)
            }
            StateKind::FixedWindow => {
                WindowParams::of(limit).map(|p| Kernel::Fixed(p, limit.calendar()))
            }
            StateKind::SlidingWindow => {
                sliding_window::SlidingParams::of(limit).map(Kernel::Sliding)
            }
            StateKind::SlidingLog => WindowParams::of(limit).map(Kernel::Log),
            // The token bucket's is the default below; a concurrency limit's was decided
            // above (`kind.rs` checks that every kind has a script).
            _ => None,
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
            Kernel::Fixed(..) => StateKind::FixedWindow,
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
            Kernel::Fixed(p, None) => ScriptArgs::new(&fixed_window::args(p, cost)),
            Kernel::Fixed(p, Some(c)) => ScriptArgs::new(&fixed_window::calendar_args(p, c, cost)),
            Kernel::Sliding(p) => ScriptArgs::new(&sliding_window::args(p, cost)),
            Kernel::Log(p) => ScriptArgs::new(&sliding_log::args(p, cost)),
            Kernel::Concurrency(p) => ScriptArgs::new(&concurrency::args(p, cost)),
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
