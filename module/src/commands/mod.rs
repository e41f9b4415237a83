//! The commands: each parses its arguments, reads its keys, decides with the algorithm of
//! `ratelimit-algorithms`, writes and replicates what changed, and answers what the Lua
//! function of the same name answers.
//!
//! - `one`: the command of each algorithm alone, and a concurrency limit's release and
//!   renewal;
//! - `multi`: several limits of one call, all or nothing, in each of `multi`'s modes;
//! - `batch`: several calls of one node, each as alone.

mod batch;
mod multi;
mod one;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use ratelimit_algorithms::StateKind;

use crate::api::{self, Arg, Body, CommandFn, Ctx};
use crate::args::{ArgError, Keys};
use crate::kernel::{Kernel, State, Write};

use batch::batch;
use multi::multi;
use one::{concurrency, concurrency_release, concurrency_renew, one, sliding_log};

/// One command: its short name (the Lua function's), Redis's flags for it, a summary, and
/// the function Redis calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) short: &'static str,
    pub(crate) keys: Keys,
    pub(crate) flags: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) run: CommandFn,
}

/// Every command of the module.
pub(crate) const ALL: [Spec; 10] = [
    Spec {
        short: "token_bucket",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a token bucket (GCRA), as the library's `token_bucket` \
                  function",
        run: api::entry::<TokenBucketCommand>,
    },
    Spec {
        short: "fixed_window",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a fixed window, as the library's `fixed_window` function",
        run: api::entry::<FixedWindowCommand>,
    },
    Spec {
        short: "sliding_window",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a sliding window, as the library's `sliding_window` \
                  function",
        run: api::entry::<SlidingWindowCommand>,
    },
    Spec {
        short: "interval_bucket",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a token bucket refilled at intervals, as the library's \
                  `interval_bucket` function",
        run: api::entry::<IntervalBucketCommand>,
    },
    Spec {
        short: "sliding_log",
        keys: Keys::One,
        flags: "write deny-oom",
        summary: "Decides one call on a sliding log, as the library's `sliding_log` function",
        run: api::entry::<SlidingLogCommand>,
    },
    Spec {
        short: "concurrency",
        keys: Keys::One,
        flags: "write deny-oom",
        summary: "Decides one call on a concurrency limit (a slot, or a ticket to wait for one), \
                  as the library's `concurrency` function",
        run: api::entry::<ConcurrencyCommand>,
    },
    Spec {
        short: "concurrency_release",
        keys: Keys::One,
        // Not deny-oom: giving slots back frees memory, and must work when Redis is full.
        flags: "write",
        summary: "Gives back a call's concurrency slots and ticket, as the library's \
                  `concurrency_release` function",
        run: api::entry::<ConcurrencyReleaseCommand>,
    },
    Spec {
        short: "concurrency_renew",
        keys: Keys::One,
        flags: "write deny-oom",
        summary: "Renews the leases of a call's concurrency slots, as the library's \
                  `concurrency_renew` function",
        run: api::entry::<ConcurrencyRenewCommand>,
    },
    Spec {
        short: "multi",
        keys: Keys::Counted,
        flags: "write deny-oom",
        summary: "Decides the limits of one call all or nothing, as the library's `multi` \
                  function (each limit's key declared: on a cluster, all in one slot)",
        run: api::entry::<MultiCommand>,
    },
    Spec {
        short: "batch",
        keys: Keys::Counted,
        flags: "write deny-oom",
        summary: "Decides several calls, each as alone, in order, as the library's `batch` \
                  function (every call's keys declared: on a cluster, all in one slot)",
        run: api::entry::<BatchCommand>,
    },
];

/// A command's answer, built before anything is replied, so that a failure never leaves a
/// reply half written.
enum Reply {
    /// One decision: the Lua function's five integers, as one bulk string of the five
    /// separated by spaces (one reply element instead of six: less for Redis to write).
    Decision([u64; 5]),
    /// `multi`'s numbers, packed the same way (boxed: the one decision's reply, on every
    /// call, stays small).
    Numbers(Box<Numbers>),
    /// An integer (a concurrency limit's release and renewal).
    Integer(u64),
    /// The command has replied already (a batch, entry by entry).
    Sent,
}

/// Up to [`api::MAX_REPLY_NUMBERS`] numbers, on the stack.
struct Numbers {
    values: [u64; api::MAX_REPLY_NUMBERS],
    len: usize,
}

impl Numbers {
    fn new() -> Numbers {
        Numbers {
            values: [0; api::MAX_REPLY_NUMBERS],
            len: 0,
        }
    }

    fn push(&mut self, v: u64) {
        if let Some(slot) = self.values.get_mut(self.len) {
            *slot = v;
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[u64] {
        self.values.get(..self.len).unwrap_or(&[])
    }
}

/// Why a command answers an error.
enum Failure {
    Args(ArgError),
    Store(&'static str),
}

impl From<ArgError> for Failure {
    fn from(e: ArgError) -> Failure {
        Failure::Args(e)
    }
}

/// Runs `decide` for a command Redis called: its arguments, its answer, and no panic out.
fn serve(ctx: &Ctx, args: &[Arg<'_>], decide: fn(&Ctx, &[Arg<'_>]) -> Result<Reply, Failure>) {
    match catch_unwind(AssertUnwindSafe(|| decide(ctx, args))) {
        Ok(Ok(Reply::Decision(values))) => ctx.reply_decision(&values),
        Ok(Ok(Reply::Numbers(numbers))) => ctx.reply_numbers(numbers.as_slice()),
        Ok(Ok(Reply::Integer(value))) => ctx.reply_integer(value),
        Ok(Ok(Reply::Sent)) => {}
        Ok(Err(Failure::Args(e))) => ctx.reply_error(e.message()),
        Ok(Err(Failure::Store(message))) => ctx.reply_error(message),
        // (A batch's calls are each under their own `catch_unwind`, after its reply began.)
        Err(_) => ctx.reply_error(PANICKED),
    }
}

const PANICKED: &str = "ERR ratelimit: internal error (the module panicked)";

/// The server's wall clock in microseconds, as `TIME` reads it (the host's clock).
#[inline]
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[inline]
fn arg<'a>(a: &'a Arg<'_>) -> &'a [u8] {
    a.bytes()
}

/// A command's body (`$name`), running `decide` under [`serve`]; Redis calls it through
/// `api::entry::<$name>`.
macro_rules! entry_point {
    ($name:ident, $decide:expr) => {
        #[derive(Debug)]
        struct $name;

        impl Body for $name {
            fn run(ctx: &Ctx, args: &[Arg<'_>]) {
                serve(ctx, args, $decide);
            }
        }
    };
}

/// The entry point of the command of one algorithm, `kind`'s.
macro_rules! one_limit {
    ($name:ident, $kind:ident) => {
        entry_point!($name, |ctx, argv| one(ctx, argv, StateKind::$kind));
    };
}

one_limit!(TokenBucketCommand, TokenBucket);
one_limit!(FixedWindowCommand, FixedWindow);
one_limit!(SlidingWindowCommand, SlidingWindow);
one_limit!(IntervalBucketCommand, IntervalBucket);
entry_point!(SlidingLogCommand, sliding_log);
entry_point!(ConcurrencyCommand, concurrency);
entry_point!(ConcurrencyReleaseCommand, concurrency_release);
entry_point!(ConcurrencyRenewCommand, concurrency_renew);
entry_point!(MultiCommand, multi);
entry_point!(BatchCommand, batch);

/// A value a bucket's script never writes: warned about, as the script does, then read as the
/// algorithm's `decide_read` says.
#[inline]
fn warn_if_unreadable(ctx: &Ctx, state: &State) {
    if Kernel::unreadable(state) {
        ctx.warn(
            "redis-ratelimit: a bucket key held a value it never writes; read as an empty \
             bucket and overwritten",
        );
    }
}

/// Makes `write` on `key`, replicated as its effect.
#[inline]
fn apply(key: &mut api::Key<'_>, write: &Write) -> Result<(), Failure> {
    match write {
        Write::Set(value, expire_ms) => key.set(value.as_bytes(), *expire_ms),
        Write::Keep(value) => key.set_keeping_expiry(value.as_bytes()),
        Write::Delete => key.delete(),
        Write::Add(value, by) => key.add(value.as_bytes(), *by),
    }
    .map_err(Failure::Store)
}
