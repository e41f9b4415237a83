//! The commands: each parses its arguments, reads its keys, decides with the algorithm of
//! `ratelimit-algorithms`, writes and replicates what changed, and answers what the Lua
//! function of the same name answers.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use ratelimit_algorithms::{Cost, StateKind, WindowParams, concurrency};
use ratelimit_vocab::native::{self, MAX_ARGUMENTS, MAX_BATCH, MAX_LIMITS};

use crate::api::{self, Arg, Body, CommandFn, Ctx};
use crate::args::{ArgError, Args, Keys, Packed};
use crate::kernel::{Kernel, State, Write};
use crate::zset;

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
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

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

/// One algorithm's function (`gcra.lua`, `fixed_window.lua`, ...): its key, then its
/// arguments packed; the five numbers the function returns.
///
/// Inlined into each command's entry point, so that each is compiled for its own algorithm
/// (`kind` a constant there: no dispatch on it per call).
#[inline(always)]
fn one(ctx: &Ctx, argv: &[Arg<'_>], kind: StateKind) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0i64; MAX_ARGUMENTS];
    let n = args.numbers(arg, &mut numbers)?;
    // A give-back (a negative cost) runs only within `multi`, as `call.lua` runs it.
    let (kernel, cost) = match Kernel::from_args(kind, numbers.get(..n).unwrap_or(&[])) {
        Some((kernel, Cost::Take(cost))) => (kernel, cost),
        _ => return Err(ArgError::BadLimit.into()),
    };
    decide_one(ctx, name, kernel, cost, now_us()).map(Reply::Decision)
}

/// One limit's call of `cost` on the key `name` at `now`, as its script runs it alone: the
/// script's five numbers.
#[inline(always)]
fn decide_one(
    ctx: &Ctx,
    name: Arg<'_>,
    kernel: Kernel,
    cost: u64,
    now: u64,
) -> Result<[u64; 5], Failure> {
    let mut key = ctx.open(name);
    let state = kernel.read(&key.read());
    warn_if_unreadable(ctx, &state);
    let answer = kernel.decide(now, &state, cost);
    if let Some(write) = &answer.write {
        apply(&mut key, write)?;
    }
    let [allowed, remaining, retry, reset] = answer.numbers();
    Ok([allowed, remaining, retry, reset, now])
}

/// A value a bucket's script never writes: warned about, as the script does, then read as the
/// algorithm's `decide_read` says.
fn warn_if_unreadable(ctx: &Ctx, state: &State) {
    if Kernel::unreadable(state) {
        ctx.warn(
            "redis-ratelimit: a bucket key held a value it never writes; read as an empty \
             bucket and overwritten",
        );
    }
}

/// Makes `write` on `key`, replicated as its effect.
fn apply(key: &mut api::Key<'_>, write: &Write) -> Result<(), Failure> {
    match write {
        Write::Set(value, expire_ms) => key.set(value.as_bytes(), *expire_ms),
        Write::Keep(value) => key.set_keeping_expiry(value.as_bytes()),
        Write::Delete => key.delete(),
        Write::Add(value, by) => key.add(value.as_bytes(), *by),
    }
    .map_err(Failure::Store)
}

/// `sliding_log.lua`: the log (its KEYS[1]); limit, period (µs), cost ([`zset::sliding_log`]).
fn sliding_log(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0u64; 3];
    let (p, cost) = match args.unsigned(arg, &mut numbers)? {
        3 => ratelimit_algorithms::sliding_log::from_args(&numbers).ok_or(ArgError::BadLimit)?,
        _ => return Err(ArgError::BadLimit.into()),
    };
    zset::sliding_log(ctx, name, p, cost, now_us(), &mut zset::Writes::Now)
        .map(Reply::Decision)
        .map_err(Failure::Store)
}

/// `concurrency.lua`: the set (its KEYS[1]); max, lease (µs), holder, queue (0 or 1), cost
/// ([`zset::concurrency`]).
fn concurrency(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0u64; 5];
    let (p, cost) = match args.unsigned(arg, &mut numbers)? {
        5 => concurrency::from_args(&numbers).ok_or(ArgError::BadLimit)?,
        _ => return Err(ArgError::BadLimit.into()),
    };
    zset::concurrency(ctx, name, p, cost, now_us(), &mut zset::Writes::Now)
        .map(Reply::Decision)
        .map_err(Failure::Store)
}

/// The holder and a count of slots that a release or a renewal names: the holder any `u64`,
/// the slots at most a concurrency limit's most.
fn holder_and_slots(holder: u64, slots: u64) -> Result<(u64, u64), ArgError> {
    let most = u64::from(ratelimit_vocab::limits::MAX_CONCURRENT);
    (slots <= most)
        .then_some((holder, slots))
        .ok_or(ArgError::BadLimit)
}

/// `concurrency_release.lua`: the set; holder and cost packed; optionally the fleet's
/// channel, a third argument ([`zset::release`]).
fn concurrency_release(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let (packed, channel) = match args.rest {
        [packed] => (std::slice::from_ref(packed), None),
        [packed, channel] => (std::slice::from_ref(packed), Some(arg(channel))),
        _ => return Err(ArgError::BadLimit.into()),
    };
    let packed = Args {
        keys: args.keys,
        rest: packed,
    };
    let mut numbers = [0u64; 2];
    let [holder, cost] = match packed.unsigned(arg, &mut numbers)? {
        2 => numbers,
        _ => return Err(ArgError::BadLimit.into()),
    };
    let (holder, cost) = holder_and_slots(holder, cost)?;
    zset::release(ctx, name, holder, cost, channel, now_us())
        .map(Reply::Integer)
        .map_err(Failure::Store)
}

/// `concurrency_renew.lua`: the set; holder, lease (µs) and cost packed
/// ([`zset::renew`]).
fn concurrency_renew(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0u64; 3];
    let [holder, lease_us, cost] = match args.unsigned(arg, &mut numbers)? {
        3 => numbers,
        _ => return Err(ArgError::BadLimit.into()),
    };
    let leases = ratelimit_vocab::limits::MIN_LEASE_US..=ratelimit_vocab::limits::MAX_LEASE_US;
    if !leases.contains(&lease_us) {
        return Err(ArgError::BadLimit.into());
    }
    let (holder, cost) = holder_and_slots(holder, cost)?;
    zset::renew(ctx, name, holder, lease_us, cost, now_us())
        .map(Reply::Integer)
        .map_err(Failure::Store)
}

/// What `multi` does with its limits ([`native::Mode`], but settling, which has a function of
/// its own), with what the mode reads after the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Decide.
    Decide,
    /// Decide, and also answer what each limit held before the call.
    Reserve,
    /// Another part of the call refused it: answer, take nothing.
    Veto,
    /// Give back what a reservation took at this server time (µs).
    GiveBack(u64),
    /// Answer as `Decide` would, with each limit's remaining as it stands; write nothing.
    Peek,
}

/// One limit of a `multi` call: its algorithm, its cost, and whether it is in shadow mode (its
/// refusal does not refuse the call).
#[derive(Debug, Clone, Copy)]
struct Limit {
    algorithm: Algorithm,
    cost: u64,
    shadow: bool,
}

/// A limit's algorithm: one whose state is a string ([`Kernel`]: read once, decided in
/// memory), or one kept in a sorted set, decided by the script's own commands ([`zset`]).
#[derive(Debug, Clone, Copy)]
enum Algorithm {
    Kernel(Kernel),
    SlidingLog(WindowParams),
    Concurrency(concurrency::Params),
}

/// One limit's decision within `multi`: the script's four numbers, and what it would write.
struct Decided {
    allowed: bool,
    remaining: u64,
    retry_after_us: u64,
    reset_after_us: u64,
    write: Pending,
}

/// What a decision would write, not made yet.
enum Pending {
    Nothing,
    Kernel(Write),
    Commands(zset::Writes),
}

impl Decided {
    fn numbers(&self) -> [u64; 4] {
        [
            u64::from(self.allowed),
            self.remaining,
            self.retry_after_us,
            self.reset_after_us,
        ]
    }

    /// From a sorted-set algorithm's five numbers and its writes kept.
    fn of_zset(numbers: [u64; 5], writes: zset::Writes) -> Decided {
        let [allowed, remaining, retry_after_us, reset_after_us, _now] = numbers;
        Decided {
            allowed: allowed == 1,
            remaining,
            retry_after_us,
            reset_after_us,
            write: Pending::Commands(writes),
        }
    }
}

impl Limit {
    /// Decides a call of `cost` at `now` on the key `name` (a string's state read already,
    /// `state`), writing nothing: its writes are kept in the answer.
    fn decide(
        &self,
        ctx: &Ctx,
        name: Arg<'_>,
        state: Option<&State>,
        cost: u64,
        now: u64,
    ) -> Result<Decided, Failure> {
        match self.algorithm {
            Algorithm::Kernel(kernel) => {
                let state = state.ok_or(Failure::Store(PANICKED))?;
                let answer = kernel.decide(now, state, cost);
                Ok(Decided {
                    allowed: answer.allowed,
                    remaining: answer.remaining,
                    retry_after_us: answer.retry_after_us,
                    reset_after_us: answer.reset_after_us,
                    write: answer.write.map_or(Pending::Nothing, Pending::Kernel),
                })
            }
            Algorithm::SlidingLog(p) => {
                let mut writes = zset::Writes::later();
                let numbers = zset::sliding_log(ctx, name, p, cost, now, &mut writes)
                    .map_err(Failure::Store)?;
                Ok(Decided::of_zset(numbers, writes))
            }
            Algorithm::Concurrency(p) => {
                let mut writes = zset::Writes::later();
                let numbers = zset::concurrency(ctx, name, p, cost, now, &mut writes)
                    .map_err(Failure::Store)?;
                Ok(Decided::of_zset(numbers, writes))
            }
        }
    }

    /// Decides a call of this limit alone on the key `name` at `now`, writing at once, as its
    /// own command does: the script's five numbers.
    fn decide_alone(&self, ctx: &Ctx, name: Arg<'_>, now: u64) -> Result<[u64; 5], Failure> {
        match self.algorithm {
            Algorithm::Kernel(kernel) => decide_one(ctx, name, kernel, self.cost, now),
            Algorithm::SlidingLog(p) => {
                zset::sliding_log(ctx, name, p, self.cost, now, &mut zset::Writes::Now)
                    .map_err(Failure::Store)
            }
            Algorithm::Concurrency(p) => {
                zset::concurrency(ctx, name, p, self.cost, now, &mut zset::Writes::Now)
                    .map_err(Failure::Store)
            }
        }
    }

    /// Gives back what a reservation at `reserved_at` took, as `multi.lua`'s
    /// [`native::Mode::GiveBack`].
    fn give_back(
        &self,
        ctx: &Ctx,
        name: Arg<'_>,
        state: Option<&State>,
        now: u64,
        reserved_at: u64,
    ) -> Result<(), Failure> {
        match self.algorithm {
            Algorithm::Kernel(kernel) => {
                let state = state.ok_or(Failure::Store(PANICKED))?;
                match kernel.give_back(now, state, self.cost, reserved_at) {
                    Some(write) => apply(&mut ctx.open(name), &write),
                    None => Ok(()),
                }
            }
            Algorithm::SlidingLog(_) => {
                zset::give_back_log(ctx, name, self.cost, reserved_at).map_err(Failure::Store)
            }
            Algorithm::Concurrency(p) => {
                zset::give_back_slots(ctx, name, p.holder, self.cost).map_err(Failure::Store)
            }
        }
    }
}

/// Makes `write` on the key `name`.
fn make(ctx: &Ctx, name: Arg<'_>, write: Pending) -> Result<(), Failure> {
    match write {
        Pending::Nothing => Ok(()),
        Pending::Kernel(write) => apply(&mut ctx.open(name), &write),
        Pending::Commands(writes) => writes.make_kept(ctx, name).map_err(Failure::Store),
    }
}

/// `multi.lua`: `numkeys`, every limit's key, then packed: the mode ([`native::Mode`]); per
/// limit its algorithm's id (plus [`native::SHADOW_BIT`] in shadow mode), the number of its
/// arguments and them; to give back, the reservation's server time; to settle, that time and
/// each limit's actual cost and debt. Answers four numbers per limit and the server time (to
/// reserve, when every limit admits, two more per limit: its remaining and reset before the
/// call); a give-back answers the number of limits.
fn multi(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::Counted)?;
    let n = args.keys.len();
    if n == 0 || n > MAX_LIMITS {
        return Err(ArgError::BadLimit.into());
    }
    let mut packed = args.packed(arg)?;
    let mode = packed.next_number()?;
    let mut limits = [None; MAX_LIMITS];
    for slot in limits.iter_mut().take(n) {
        *slot = Some(read_limit(&mut packed)?);
    }
    let mode = u64::try_from(mode)
        .ok()
        .and_then(native::Mode::from_number)
        .ok_or(ArgError::BadLimit)?;
    let mode = match mode {
        native::Mode::Decide => Mode::Decide,
        native::Mode::Reserve => Mode::Reserve,
        native::Mode::Veto => Mode::Veto,
        native::Mode::GiveBack => {
            Mode::GiveBack(u64::try_from(packed.next_number()?).map_err(|_| ArgError::BadLimit)?)
        }
        native::Mode::Peek => Mode::Peek,
        native::Mode::Settle => {
            let reserved_at = packed.next_unsigned()?;
            let mut settle = [(0, 0); MAX_LIMITS];
            for slot in settle.iter_mut().take(n) {
                *slot = (packed.next_unsigned()?, packed.next_unsigned()?);
            }
            if !packed.is_done() {
                return Err(ArgError::BadLimit.into());
            }
            let limits = limits.get(..n).unwrap_or(&[]);
            let settle = settle.get(..n).unwrap_or(&[]);
            return settle_several(ctx, args.keys, limits, reserved_at, settle, now_us())
                .map(Reply::Numbers);
        }
    };
    if !packed.is_done() {
        return Err(ArgError::BadLimit.into());
    }
    let limits = limits.get(..n).unwrap_or(&[]);
    decide_several(ctx, args.keys, limits, mode, now_us()).map(Reply::Numbers)
}

/// `multi.lua`'s [`native::Mode::Settle`]: each limit's call took its cost (an estimate) at
/// `reserved_at`; each limit's actual cost (`settle`: actual, debt allowed) gives the
/// difference back, as mode 3, or takes it at once, into debt up to that bound. Answers, per
/// limit, the tokens taken and those given back, then the server time. The token bucket, the
/// fixed window and the sliding log settle (an error for any other limit, which the limiter
/// never sends).
fn settle_several(
    ctx: &Ctx,
    keys: &[Arg<'_>],
    limits: &[Option<Limit>],
    reserved_at: u64,
    settle: &[(u64, u64)],
    now: u64,
) -> Result<Box<Numbers>, Failure> {
    let mut reply = Box::new(Numbers::new());
    for ((limit, &name), &(actual, debt)) in limits.iter().flatten().zip(keys).zip(settle) {
        let kernel = match limit.algorithm {
            Algorithm::Kernel(kernel) => kernel,
            Algorithm::SlidingLog(p) => {
                let (mut taken, mut given) = (0, 0);
                if actual < limit.cost {
                    given = limit.cost - actual;
                    zset::give_back_log(ctx, name, given, reserved_at).map_err(Failure::Store)?;
                } else if actual > limit.cost {
                    taken = zset::take_over_log(ctx, name, p, actual - limit.cost, debt, now)
                        .map_err(Failure::Store)?;
                }
                reply.push(taken);
                reply.push(given);
                continue;
            }
            Algorithm::Concurrency(_) => return Err(ArgError::BadLimit.into()),
        };
        let state = kernel.read(&ctx.open(name).read());
        warn_if_unreadable(ctx, &state);
        let (mut taken, mut given) = (0, 0);
        if actual < limit.cost {
            given = limit.cost - actual;
            if let Some(write) = kernel.give_back(now, &state, given, reserved_at) {
                apply(&mut ctx.open(name), &write)?;
            }
        } else if actual > limit.cost {
            let (write, took) = kernel
                .take_over(now, &state, actual - limit.cost, debt)
                .ok_or(ArgError::BadLimit)?;
            if let Some(write) = write {
                apply(&mut ctx.open(name), &write)?;
            }
            taken = took;
        }
        reply.push(taken);
        reply.push(given);
    }
    reply.push(now);
    Ok(reply)
}

/// One limit of `multi` or a batch: its algorithm's id (plus [`native::SHADOW_BIT`] in shadow
/// mode), the number of its arguments, and them.
fn read_limit(packed: &mut Packed<'_>) -> Result<Limit, ArgError> {
    let bad = ArgError::BadLimit;
    let (id, shadow) = u64::try_from(packed.next_number()?)
        .ok()
        .and_then(native::read_spec_id)
        .ok_or(bad)?;
    let count = packed.next_count()?;
    let kind = StateKind::from_id(id).ok_or(bad)?;
    // The sorted sets' arguments are unsigned (a holder may be any `u64`).
    let mut unsigned = [0u64; 5];
    let (algorithm, cost) = match kind {
        StateKind::SlidingLog | StateKind::Concurrency => {
            let args = unsigned.get_mut(..count).ok_or(bad)?;
            for slot in args.iter_mut() {
                *slot = packed.next_unsigned()?;
            }
            let args = &*args;
            if kind == StateKind::SlidingLog {
                let (p, cost) = ratelimit_algorithms::sliding_log::from_args(args).ok_or(bad)?;
                (Algorithm::SlidingLog(p), cost)
            } else {
                let (p, cost) = concurrency::from_args(args).ok_or(bad)?;
                (Algorithm::Concurrency(p), cost)
            }
        }
        _ => {
            let mut args = [0i64; MAX_ARGUMENTS];
            let args = args.get_mut(..count).ok_or(bad)?;
            packed.fill(args)?;
            let (kernel, cost) = Kernel::from_args(kind, args).ok_or(bad)?;
            // A negative cost runs only as mode 3's give-back, which negates the spec's own.
            let Cost::Take(cost) = cost else {
                return Err(bad);
            };
            (Algorithm::Kernel(kernel), cost)
        }
    };
    Ok(Limit {
        algorithm,
        cost,
        shadow,
    })
}

/// Several limits of one call on `keys` (one per limit) at `now`, in `mode`, as `multi.lua`
/// decides them: every key is read before any is written, and the call's writes are made
/// once every limit has decided: all of them if all admit, else only those of the limits
/// that refused (a refusal writes only a state that must be read otherwise than it says).
/// (A string's state is read once, up front; a sorted set is read by its algorithm's
/// commands as it decides, and its writes kept until the end, as `multi.lua` keeps them.)
fn decide_several(
    ctx: &Ctx,
    keys: &[Arg<'_>],
    limits: &[Option<Limit>],
    mode: Mode,
    now: u64,
) -> Result<Box<Numbers>, Failure> {
    let n = limits.iter().flatten().count();
    let mut states: [Option<State>; MAX_LIMITS] = [None; MAX_LIMITS];
    for ((state, limit), &name) in states.iter_mut().zip(limits.iter().flatten()).zip(keys) {
        if let Algorithm::Kernel(kernel) = limit.algorithm {
            *state = Some(kernel.read(&ctx.open(name).read()));
        }
    }
    let each = || {
        limits
            .iter()
            .zip(&states)
            .zip(keys)
            .filter_map(|((limit, state), &name)| Some((limit.as_ref()?, state.as_ref(), name)))
    };
    for state in each().filter_map(|(_, state, _)| state) {
        warn_if_unreadable(ctx, state);
    }
    let mut reply = Box::new(Numbers::new());
    if let Mode::GiveBack(reserved_at) = mode {
        for (limit, state, name) in each() {
            limit.give_back(ctx, name, state, now, reserved_at)?;
        }
        reply.push(u64::try_from(n).unwrap_or(0));
        return Ok(reply);
    }
    let mut answers: [Option<Decided>; MAX_LIMITS] = Default::default();
    let mut all = mode != Mode::Veto;
    for (answer, (limit, state, name)) in answers.iter_mut().zip(each()) {
        let decided = limit.decide(ctx, name, state, limit.cost, now)?;
        all &= decided.allowed || limit.shadow;
        *answer = Some(decided);
    }
    // A limit's remaining and reset as they stand: a cost of 0, its writes dropped.
    let peek = |limit: &Limit, state: Option<&State>, name| limit.decide(ctx, name, state, 0, now);
    for (answer, (limit, state, name)) in answers.iter_mut().zip(each()) {
        let Some(answer) = answer.as_mut() else {
            continue;
        };
        if !all && answer.allowed {
            let now_held = peek(limit, state, name)?;
            answer.remaining = now_held.remaining;
            answer.reset_after_us = now_held.reset_after_us;
        }
        if mode == Mode::Peek {
            answer.remaining = peek(limit, state, name)?.remaining;
        }
    }
    // Reserve's numbers as they stood before the call: read before any write.
    let mut before = [(0, 0); MAX_LIMITS];
    if mode == Mode::Reserve && all {
        for (slot, (limit, state, name)) in before.iter_mut().zip(each()) {
            let p = peek(limit, state, name)?;
            *slot = (p.remaining, p.reset_after_us);
        }
    }
    for (answer, (_, _, name)) in answers.iter_mut().zip(each()) {
        let Some(answer) = answer.as_mut() else {
            continue;
        };
        let write = std::mem::replace(&mut answer.write, Pending::Nothing);
        if mode != Mode::Peek && (all || !answer.allowed) {
            make(ctx, name, write)?;
        }
        for v in answer.numbers() {
            reply.push(v);
        }
    }
    reply.push(now);
    if mode == Mode::Reserve && all {
        for &(remaining, reset) in before.iter().take(n) {
            reply.push(remaining);
            reply.push(reset);
        }
    }
    Ok(reply)
}

/// `batch.lua`: `numkeys`, every call's keys in order, then packed: the number of calls; per
/// call, the number of its limits and each limit as `multi` takes it (its id, the number of
/// its arguments, them), or 0 for a call of one limit whose spec is the previous one-limit
/// call's. Each call is decided exactly as alone, in order (a later call sees what an earlier
/// one took), at one server time; its entry in the reply is what its own command answers
/// (one limit: five numbers; several: `multi`'s in mode 0), or its error. A call that cannot
/// be read ends the batch: it and every call after it answer that error, the calls before it
/// stand.
///
/// Replies as it goes: an array of exactly as many entries as the first number says, every
/// call under its own `catch_unwind`, so that a failure leaves no reply half written.
fn batch(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::Counted)?;
    let mut packed = args.packed(arg)?;
    let calls = packed.next_count()?;
    if calls == 0 || calls > MAX_BATCH {
        return Err(ArgError::BadLimit.into());
    }
    ctx.reply_array(calls);
    let now = now_us();
    let mut keys = args.keys;
    let mut previous: Option<Limit> = None;
    let mut unreadable: Option<ArgError> = None;
    for _ in 0..calls {
        if let Some(e) = unreadable {
            ctx.reply_error(e.message());
            continue;
        }
        let entry = catch_unwind(AssertUnwindSafe(|| {
            batch_call(ctx, &mut packed, &mut keys, &mut previous, now)
        }));
        match entry {
            Ok(Ok(Reply::Decision(values))) => ctx.reply_decision(&values),
            Ok(Ok(Reply::Numbers(numbers))) => ctx.reply_numbers(numbers.as_slice()),
            // (A call does not reply itself, nor answer an integer.)
            Ok(Ok(Reply::Sent | Reply::Integer(_))) => ctx.reply_error(PANICKED),
            Ok(Err(Failure::Args(e))) => {
                ctx.reply_error(e.message());
                unreadable = Some(e);
            }
            Ok(Err(Failure::Store(message))) => ctx.reply_error(message),
            Err(_) => {
                ctx.reply_error(PANICKED);
                unreadable = Some(ArgError::BadLimit);
            }
        }
    }
    if unreadable.is_none() && (!packed.is_done() || !keys.is_empty()) {
        ctx.warn("redis-ratelimit: a batch held more numbers or keys than its calls read");
    }
    Ok(Reply::Sent)
}

/// One call of a batch: its limits read from `packed`, its keys taken from the front of
/// `keys`, decided at `now`.
fn batch_call(
    ctx: &Ctx,
    packed: &mut Packed<'_>,
    keys: &mut &[Arg<'_>],
    previous: &mut Option<Limit>,
    now: u64,
) -> Result<Reply, Failure> {
    let n = packed.next_count()?;
    if n > MAX_LIMITS {
        return Err(ArgError::BadLimit.into());
    }
    let (mine, rest) = keys.split_at_checked(n.max(1)).ok_or(ArgError::NumKeys)?;
    *keys = rest;
    let one = |limit: Limit| {
        let name = *mine.first().ok_or(ArgError::NumKeys)?;
        limit.decide_alone(ctx, name, now).map(Reply::Decision)
    };
    match n {
        // The previous one-limit call's limit, on another key.
        0 => one(previous.ok_or(ArgError::BadLimit)?),
        1 => {
            let limit = read_limit(packed)?;
            *previous = Some(limit);
            one(limit)
        }
        _ => {
            let mut limits = [None; MAX_LIMITS];
            for slot in limits.iter_mut().take(n) {
                *slot = Some(read_limit(packed)?);
            }
            let limits = limits.get(..n).unwrap_or(&[]);
            decide_several(ctx, mine, limits, Mode::Decide, now).map(Reply::Numbers)
        }
    }
}
