//! The command of each algorithm alone (its key, then its arguments packed: the five numbers
//! its script answers), and a concurrency limit's release and renewal.

use ratelimit_algorithms::{Cost, StateKind, concurrency};
use ratelimit_vocab::native::MAX_ARGUMENTS;

use super::{Failure, Reply, apply, arg, now_us, warn_if_unreadable};
use crate::api::{Arg, Ctx, Key};
use crate::args::{ArgError, Args, Keys};
use crate::kernel::Kernel;
use crate::zset;

/// One algorithm's function (`gcra.lua`, `fixed_window.lua`, ...): its key, then its
/// arguments packed; the five numbers the function returns.
///
/// Inlined into each command's entry point, so that each is compiled for its own algorithm
/// (`kind` a constant there: no dispatch on it per call).
#[inline(always)]
pub(super) fn one(ctx: &Ctx, argv: &[Arg<'_>], kind: StateKind) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0i64; MAX_ARGUMENTS];
    let n = args.numbers(arg, &mut numbers)?;
    // A give-back (a negative cost) runs only within `multi`, as `call.lua` runs it.
    let (kernel, cost) = match Kernel::from_args(kind, numbers.get(..n).unwrap_or(&[])) {
        Some((kernel, Cost::Take(cost))) => (kernel, cost),
        _ => return Err(ArgError::BadLimit.into()),
    };
    let now = now_us();
    decide_one(ctx, &mut ctx.open(name), kernel, cost, now).map(Reply::Decision)
}

/// One limit's call of `cost` on `key` at `now`, as its script runs it alone: the script's
/// five numbers.
#[inline(always)]
pub(super) fn decide_one(
    ctx: &Ctx,
    key: &mut Key<'_>,
    kernel: Kernel,
    cost: u64,
    now: u64,
) -> Result<[u64; 5], Failure> {
    let state = kernel.read(&key.read());
    warn_if_unreadable(ctx, &state);
    let answer = kernel.decide(now, &state, cost);
    if let Some(write) = &answer.write {
        apply(key, write)?;
    }
    let [allowed, remaining, retry, reset] = answer.numbers();
    Ok([allowed, remaining, retry, reset, now])
}

/// `sliding_log.lua`: the log (its KEYS[1]); limit, period (µs), cost ([`zset::sliding_log`]).
pub(super) fn sliding_log(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0u64; 3];
    let (p, cost) = match args.unsigned(arg, &mut numbers)? {
        3 => ratelimit_algorithms::sliding_log::from_args(&numbers).ok_or(ArgError::BadLimit)?,
        _ => return Err(ArgError::BadLimit.into()),
    };
    let mut key = ctx.open(name);
    zset::sliding_log(ctx, &mut key, p, cost, now_us(), &mut zset::Writes::Now)
        .map(Reply::Decision)
        .map_err(Failure::Store)
}

/// `concurrency.lua`: the set (its KEYS[1]); max, lease (µs), holder, queue (0 or 1), cost
/// ([`zset::concurrency`]).
pub(super) fn concurrency(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0u64; 5];
    let (p, cost) = match args.unsigned(arg, &mut numbers)? {
        5 => concurrency::from_args(&numbers).ok_or(ArgError::BadLimit)?,
        _ => return Err(ArgError::BadLimit.into()),
    };
    let mut key = ctx.open(name);
    zset::concurrency(ctx, &mut key, p, cost, now_us(), &mut zset::Writes::Now)
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
pub(super) fn concurrency_release(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
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
pub(super) fn concurrency_renew(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
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
