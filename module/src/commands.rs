//! The commands: each parses its arguments, reads its keys, decides with the algorithm of
//! `ratelimit-algorithms`, writes and replicates what changed, and answers what the Lua
//! function of the same name answers.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use ratelimit_algorithms::{Cost, token_bucket};

use crate::api::{self, CommandFn, Ctx, RawCtx, RawString, Value};
use crate::args::{ArgError, Args, Keys};

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
pub(crate) const ALL: [Spec; 1] = [Spec {
    short: "token_bucket",
    keys: Keys::One,
    flags: "write deny-oom fast",
    summary: "Decides one call on a token bucket (GCRA), as the library's `token_bucket` function",
    run: token_bucket_command,
}];

/// A command's answer, built before anything is replied, so that a failure never leaves a
/// reply half written.
enum Reply {
    Integers([i64; 5]),
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
fn serve(
    raw: *mut RawCtx,
    argv: *mut *mut RawString,
    argc: c_int,
    decide: fn(&Ctx, &[*mut RawString]) -> Result<Reply, Failure>,
) -> c_int {
    let ctx = Ctx::new(raw);
    let args = api::args(argv, argc);
    match catch_unwind(AssertUnwindSafe(|| decide(&ctx, args))) {
        Ok(Ok(Reply::Integers(values))) => {
            ctx.reply_array(values.len());
            for v in values {
                ctx.reply_integer(v);
            }
        }
        Ok(Err(Failure::Args(e))) => ctx.reply_error(e.message()),
        Ok(Err(Failure::Store(message))) => ctx.reply_error(message),
        Err(_) => ctx.reply_error("ERR ratelimit: internal error (the module panicked)"),
    }
    api::OK
}

/// The server's wall clock in microseconds, as `TIME` reads it (the host's clock).
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn arg(a: &*mut RawString) -> &[u8] {
    api::arg_bytes(*a)
}

extern "C" fn token_bucket_command(
    ctx: *mut RawCtx,
    argv: *mut *mut RawString,
    argc: c_int,
) -> c_int {
    serve(ctx, argv, argc, token_bucket_decide)
}

/// `gcra.lua`: the bucket (its KEYS[1]); interval, d, tau, cost, then optionally absent,
/// reach, hold and queue.
fn token_bucket_decide(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let (numbers, n) = args.numbers(arg, 4)?;
    // A give-back (a negative cost) runs only within `multi`, as `call.lua` runs it.
    let (p, cost) = match token_bucket::from_args(numbers.get(..n).unwrap_or(&[])) {
        Some((p, Cost::Take(cost))) => (p, cost),
        _ => return Err(ArgError::BadLimit.into()),
    };
    let Some(name) = args.keys.first() else {
        return Err(ArgError::NumKeys.into());
    };
    let mut key = ctx.open(*name);
    let now = now_us();
    let read = match key.read() {
        Value::Absent => token_bucket::Read::Absent,
        Value::String(bytes, Some(expire_ms)) => {
            token_bucket::State::decode_bytes(bytes, expire_ms)
                .map_or(token_bucket::Read::Unreadable, token_bucket::Read::State)
        }
        Value::String(_, None) | Value::SortedSet | Value::Other => token_bucket::Read::Unreadable,
    };
    if read == token_bucket::Read::Unreadable {
        ctx.warn(
            "redis-ratelimit: a bucket key held a value it never writes; read as an empty \
             bucket and overwritten",
        );
    }
    let outcome = token_bucket::decide_read(now, read, p, cost);
    if let Some(state) = outcome.new_state {
        key.set(state.encoded().as_bytes(), state.expire_ms)
            .map_err(Failure::Store)?;
    }
    Ok(Reply::Integers([
        i64::from(outcome.allowed),
        as_i64(outcome.remaining),
        as_i64(outcome.retry_after_us),
        as_i64(outcome.reset_after_us),
        as_i64(now),
    ]))
}
