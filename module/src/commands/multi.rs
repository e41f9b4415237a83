//! `multi`: the limits of one call, decided all or nothing, in each of its modes
//! ([`native::Mode`]).

use ratelimit_algorithms::{Cost, StateKind, WindowParams, concurrency};
use ratelimit_vocab::native::{self, MAX_ARGUMENTS, MAX_LIMITS};

use super::one::decide_one;
use super::{Failure, Numbers, PANICKED, Reply, apply, arg, now_us, warn_if_unreadable};
use crate::api::{Arg, Ctx, Key};
use crate::args::{ArgError, Args, Keys, Packed};
use crate::kernel::{Kernel, State, Write};
use crate::zset;

/// What `multi` does with its limits ([`native::Mode`], but settling, which has a function of
/// its own), with what the mode reads after the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
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
pub(super) struct Limit {
    algorithm: Algorithm,
    cost: u64,
    shadow: bool,
}

/// A limit's algorithm: one whose state is a string ([`Kernel`]: read once, decided in
/// memory), or one kept in a sorted set, decided step for step as its script ([`zset`]).
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
    /// Decides a call of `cost` at `now` on `key` (a string's state read already, `state`),
    /// writing nothing: its writes are kept in the answer.
    fn decide(
        &self,
        ctx: &Ctx,
        key: &mut Key<'_>,
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
                let numbers = zset::sliding_log(ctx, key, p, cost, now, &mut writes)
                    .map_err(Failure::Store)?;
                Ok(Decided::of_zset(numbers, writes))
            }
            Algorithm::Concurrency(p) => {
                let mut writes = zset::Writes::later();
                let numbers = zset::concurrency(ctx, key, p, cost, now, &mut writes)
                    .map_err(Failure::Store)?;
                Ok(Decided::of_zset(numbers, writes))
            }
        }
    }

    /// Decides a call of this limit alone on the key `name` at `now`, writing at once, as its
    /// own command does: the script's five numbers.
    pub(super) fn decide_alone(
        &self,
        ctx: &Ctx,
        name: Arg<'_>,
        now: u64,
    ) -> Result<[u64; 5], Failure> {
        let key = &mut ctx.open(name);
        match self.algorithm {
            Algorithm::Kernel(kernel) => decide_one(ctx, key, kernel, self.cost, now),
            Algorithm::SlidingLog(p) => {
                zset::sliding_log(ctx, key, p, self.cost, now, &mut zset::Writes::Now)
                    .map_err(Failure::Store)
            }
            Algorithm::Concurrency(p) => {
                zset::concurrency(ctx, key, p, self.cost, now, &mut zset::Writes::Now)
                    .map_err(Failure::Store)
            }
        }
    }

    /// Gives back what a reservation at `reserved_at` took, on `key`, as `multi.lua`'s
    /// [`native::Mode::GiveBack`].
    fn give_back(
        &self,
        key: &mut Key<'_>,
        state: Option<&State>,
        now: u64,
        reserved_at: u64,
    ) -> Result<(), Failure> {
        match self.algorithm {
            Algorithm::Kernel(kernel) => {
                let state = state.ok_or(Failure::Store(PANICKED))?;
                match kernel.give_back(now, state, self.cost, reserved_at) {
                    Some(write) => apply(key, &write),
                    None => Ok(()),
                }
            }
            Algorithm::SlidingLog(_) => {
                zset::give_back_log(key, self.cost, reserved_at).map_err(Failure::Store)
            }
            Algorithm::Concurrency(p) => {
                zset::give_back_slots(key, p.holder, self.cost).map_err(Failure::Store)
            }
        }
    }
}

/// Makes `write` on `key`.
fn make(key: &mut Key<'_>, write: Pending) -> Result<(), Failure> {
    match write {
        Pending::Nothing => Ok(()),
        Pending::Kernel(write) => apply(key, &write),
        Pending::Commands(writes) => writes.make_kept(key).map_err(Failure::Store),
    }
}

/// `multi.lua`: `numkeys`, every limit's key, then packed: the mode ([`native::Mode`]); per
/// limit its algorithm's id (plus [`native::SHADOW_BIT`] in shadow mode), the number of its
/// arguments and them; to give back, the reservation's server time; to settle, that time and
/// each limit's actual cost and debt. Answers four numbers per limit and the server time (to
/// reserve, when every limit admits, two more per limit: its remaining and reset before the
/// call); a give-back answers the number of limits.
pub(super) fn multi(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
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
        // Each limit read and written before the next, on its key opened once.
        let kernel = match limit.algorithm {
            Algorithm::Kernel(kernel) => kernel,
            Algorithm::SlidingLog(p) => {
                let key = &mut ctx.open(name);
                let (mut taken, mut given) = (0, 0);
                if actual < limit.cost {
                    given = limit.cost - actual;
                    zset::give_back_log(key, given, reserved_at).map_err(Failure::Store)?;
                } else if actual > limit.cost {
                    taken = zset::take_over_log(ctx, key, p, actual - limit.cost, debt, now)
                        .map_err(Failure::Store)?;
                }
                reply.push(taken);
                reply.push(given);
                continue;
            }
            Algorithm::Concurrency(_) => return Err(ArgError::BadLimit.into()),
        };
        let key = &mut ctx.open(name);
        let state = kernel.read(&key.read());
        warn_if_unreadable(ctx, &state);
        let (mut taken, mut given) = (0, 0);
        if actual < limit.cost {
            given = limit.cost - actual;
            if let Some(write) = kernel.give_back(now, &state, given, reserved_at) {
                apply(key, &write)?;
            }
        } else if actual > limit.cost {
            let (write, took) = kernel
                .take_over(now, &state, actual - limit.cost, debt)
                .ok_or(ArgError::BadLimit)?;
            if let Some(write) = write {
                apply(key, &write)?;
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
pub(super) fn read_limit(packed: &mut Packed<'_>) -> Result<Limit, ArgError> {
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
/// (A string's state is read once, up front; a sorted set is read as its algorithm decides,
/// and its writes kept until the end, as `multi.lua` keeps them. Each key is opened once for
/// all of it.)
pub(super) fn decide_several(
    ctx: &Ctx,
    keys: &[Arg<'_>],
    limits: &[Option<Limit>],
    mode: Mode,
    now: u64,
) -> Result<Box<Numbers>, Failure> {
    let n = limits.iter().flatten().count();
    // Every key opened once for the whole call, read, decided and written through that one
    // handle; a key two limits name is one handle (two would each hold a value the other's
    // write may replace).
    let mut open: [Option<Key<'_>>; MAX_LIMITS] = std::array::from_fn(|_| None);
    let mut handle = [0usize; MAX_LIMITS];
    for (i, (&name, slot)) in keys.iter().zip(handle.iter_mut()).take(n).enumerate() {
        let first = keys
            .iter()
            .take(i)
            .position(|k| k.bytes() == name.bytes())
            .unwrap_or(i);
        *slot = first;
        if first == i
            && let Some(key) = open.get_mut(i)
        {
            *key = Some(ctx.open(name));
        }
    }
    let mut states: [Option<State>; MAX_LIMITS] = [None; MAX_LIMITS];
    for (i, (state, limit)) in states.iter_mut().zip(limits.iter().flatten()).enumerate() {
        if let Algorithm::Kernel(kernel) = limit.algorithm {
            *state = Some(kernel.read(&key_at(&mut open, &handle, i)?.read()));
        }
    }
    let each = || {
        limits
            .iter()
            .zip(&states)
            .enumerate()
            .filter_map(|(i, (limit, state))| Some((i, limit.as_ref()?, state.as_ref())))
    };
    for state in each().filter_map(|(_, _, state)| state) {
        warn_if_unreadable(ctx, state);
    }
    let mut reply = Box::new(Numbers::new());
    if let Mode::GiveBack(reserved_at) = mode {
        for (i, limit, state) in each() {
            limit.give_back(key_at(&mut open, &handle, i)?, state, now, reserved_at)?;
        }
        reply.push(u64::try_from(n).unwrap_or(0));
        return Ok(reply);
    }
    let mut answers: [Option<Decided>; MAX_LIMITS] = Default::default();
    let mut all = mode != Mode::Veto;
    for (answer, (i, limit, state)) in answers.iter_mut().zip(each()) {
        let decided = limit.decide(ctx, key_at(&mut open, &handle, i)?, state, limit.cost, now)?;
        all &= decided.allowed || limit.shadow;
        *answer = Some(decided);
    }
    // A limit's remaining and reset as they stand: a cost of 0, its writes dropped.
    let peek = |limit: &Limit, state: Option<&State>, key: &mut Key<'_>| {
        limit.decide(ctx, key, state, 0, now)
    };
    for (answer, (i, limit, state)) in answers.iter_mut().zip(each()) {
        let Some(answer) = answer.as_mut() else {
            continue;
        };
        if !all && answer.allowed {
            let now_held = peek(limit, state, key_at(&mut open, &handle, i)?)?;
            answer.remaining = now_held.remaining;
            answer.reset_after_us = now_held.reset_after_us;
        }
        if mode == Mode::Peek {
            let now_held = peek(limit, state, key_at(&mut open, &handle, i)?)?;
            answer.remaining = now_held.remaining;
            answer.reset_after_us = now_held.reset_after_us;
        }
    }
    // Reserve's numbers as they stood before the call: read before any write.
    let mut before = [(0, 0); MAX_LIMITS];
    if mode == Mode::Reserve && all {
        for (slot, (i, limit, state)) in before.iter_mut().zip(each()) {
            let p = peek(limit, state, key_at(&mut open, &handle, i)?)?;
            *slot = (p.remaining, p.reset_after_us);
        }
    }
    for (answer, (i, _, _)) in answers.iter_mut().zip(each()) {
        let Some(answer) = answer.as_mut() else {
            continue;
        };
        let write = std::mem::replace(&mut answer.write, Pending::Nothing);
        if mode != Mode::Peek && (all || !answer.allowed) {
            make(key_at(&mut open, &handle, i)?, write)?;
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

/// The open key of limit `i` of a call: the handle `decide_several` opened for the first
/// limit on that key.
fn key_at<'a, 'k>(
    open: &'a mut [Option<Key<'k>>],
    handle: &[usize; MAX_LIMITS],
    i: usize,
) -> Result<&'a mut Key<'k>, Failure> {
    handle
        .get(i)
        .and_then(|&h| open.get_mut(h))
        .and_then(Option::as_mut)
        .ok_or(Failure::Store(PANICKED))
}
