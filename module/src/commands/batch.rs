//! `batch`: several calls bound for one node, each decided as if alone, in order.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ratelimit_vocab::native::{MAX_BATCH, MAX_LIMITS};

use super::multi::{Limit, Mode, decide_several, read_limit};
use super::{Failure, PANICKED, Reply, arg, now_us};
use crate::api::{Arg, Ctx};
use crate::args::{ArgError, Args, Keys, Packed};

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
pub(super) fn batch(ctx: &Ctx, argv: &[Arg<'_>]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::Counted)?;
    let mut packed = args.packed(arg)?;
    let calls = packed.next_count()?;
    if calls == 0 || calls > MAX_BATCH {
        return Err(ArgError::BadLimit.into());
    }
    ctx.reply_array(calls);
    // Propagated together at the end: a batch replicates once, not once per write.
    ctx.gather_writes(calls);
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
    ctx.replicate_gathered();
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
