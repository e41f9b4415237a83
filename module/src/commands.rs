//! The commands: each parses its arguments, reads its keys, decides with the algorithm of
//! `ratelimit-algorithms`, writes and replicates what changed, and answers what the Lua
//! function of the same name answers.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use ratelimit_algorithms::{
    Cost, Encoded, Outcome, Read, fixed_window, interval_bucket, sliding_window, token_bucket,
};

use crate::api::{self, CommandFn, Ctx, RawCtx, RawString, Value};
use crate::args::{ArgError, Args, Keys, MAX_NUMBERS};

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
pub(crate) const ALL: [Spec; 4] = [
    Spec {
        short: "token_bucket",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a token bucket (GCRA), as the library's `token_bucket` \
                  function",
        run: token_bucket_command,
    },
    Spec {
        short: "fixed_window",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a fixed window, as the library's `fixed_window` function",
        run: fixed_window_command,
    },
    Spec {
        short: "sliding_window",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a sliding window, as the library's `sliding_window` \
                  function",
        run: sliding_window_command,
    },
    Spec {
        short: "interval_bucket",
        keys: Keys::One,
        flags: "write deny-oom fast",
        summary: "Decides one call on a token bucket refilled at intervals, as the library's \
                  `interval_bucket` function",
        run: interval_bucket_command,
    },
];

/// A command's answer, built before anything is replied, so that a failure never leaves a
/// reply half written.
enum Reply {
    /// One decision: the Lua function's five integers, as one bulk string of the five
    /// separated by spaces (one reply element instead of six: less for Redis to write).
    Decision([u64; 5]),
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
        Ok(Ok(Reply::Decision(values))) => ctx.reply_numbers(&values),
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

fn arg(a: &*mut RawString) -> &[u8] {
    api::arg_bytes(*a)
}

/// One algorithm's call: its key, and its numbers (at least `min`) with how many there are.
fn one_key(
    argv: &[*mut RawString],
    min: usize,
) -> Result<(*mut RawString, [i64; MAX_NUMBERS], usize), Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let (numbers, n) = args.numbers(arg, min)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    Ok((name, numbers, n))
}

/// A bucket's call (token bucket, interval bucket): its key, and what `from_args` reads from
/// its numbers, which must be a cost to take: a give-back (a negative cost) runs only within
/// `multi`, as `call.lua` runs it.
fn bucket_call<P>(
    argv: &[*mut RawString],
    min: usize,
    from_args: fn(&[i64]) -> Option<(P, Cost)>,
) -> Result<(*mut RawString, P, u64), Failure> {
    let (name, numbers, n) = one_key(argv, min)?;
    match from_args(numbers.get(..n).unwrap_or(&[])) {
        Some((p, Cost::Take(cost))) => Ok((name, p, cost)),
        _ => Err(ArgError::BadLimit.into()),
    }
}

/// A window's call (fixed, sliding): its key, and what `from_args` reads from its numbers,
/// none of which may be negative.
fn window_call<P>(
    argv: &[*mut RawString],
    min: usize,
    from_args: fn(&[u64]) -> Option<(P, u64)>,
) -> Result<(*mut RawString, P, u64), Failure> {
    let (name, numbers, n) = one_key(argv, min)?;
    let mut unsigned = [0u64; MAX_NUMBERS];
    for (to, from) in unsigned.iter_mut().zip(numbers.get(..n).unwrap_or(&[])) {
        *to = u64::try_from(*from).map_err(|_| ArgError::BadLimit)?;
    }
    let (p, cost) = from_args(unsigned.get(..n).unwrap_or(&[])).ok_or(ArgError::BadLimit)?;
    Ok((name, p, cost))
}

/// A value a bucket's script never writes: warned about, as the script cannot, then read as
/// the algorithm's `decide_read` says.
fn warn_unreadable<S>(ctx: &Ctx, read: &Read<S>) {
    if matches!(read, Read::Unreadable) {
        ctx.warn(
            "redis-ratelimit: a bucket key held a value it never writes; read as an empty \
             bucket and overwritten",
        );
    }
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

/// The reply to one decision: what the Lua function returns.
fn decided<S>(outcome: &Outcome<S>, now: u64) -> Reply {
    Reply::Decision([
        u64::from(outcome.allowed),
        outcome.remaining,
        outcome.retry_after_us,
        outcome.reset_after_us,
        now,
    ])
}

/// An entry point Redis calls for a command, running `decide` under [`serve`].
macro_rules! entry_point {
    ($name:ident, $decide:ident) => {
        extern "C" fn $name(ctx: *mut RawCtx, argv: *mut *mut RawString, argc: c_int) -> c_int {
            serve(ctx, argv, argc, $decide)
        }
    };
}

entry_point!(token_bucket_command, token_bucket_decide);
entry_point!(fixed_window_command, fixed_window_decide);
entry_point!(sliding_window_command, sliding_window_decide);
entry_point!(interval_bucket_command, interval_bucket_decide);

/// `gcra.lua`: the bucket (its KEYS[1]); interval, d, tau, cost, then optionally absent,
/// reach, hold and queue.
fn token_bucket_decide(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
    bucket(
        ctx,
        argv,
        &Bucket {
            min: 4,
            from_args: token_bucket::from_args,
            decode: token_bucket::State::decode_bytes,
            decide: token_bucket::decide_read,
            stored: |s| (s.encoded(), s.expire_ms),
        },
    )
}

/// `interval_bucket.lua`: the bucket (its KEYS[1]); replenish, burst, period (µs), initial,
/// cost.
fn interval_bucket_decide(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
    bucket(
        ctx,
        argv,
        &Bucket {
            min: 5,
            from_args: interval_bucket::from_args,
            decode: interval_bucket::State::decode_bytes,
            decide: interval_bucket::decide_read,
            stored: |s| (s.encoded(), s.expire_ms),
        },
    )
}

/// One of the two buckets, whose state is a string that expires when the bucket is full:
/// how its call and its state are read, decided and written.
struct Bucket<P, S> {
    /// The fewest numbers its call has.
    min: usize,
    from_args: fn(&[i64]) -> Option<(P, Cost)>,
    decode: fn(&[u8], u64) -> Option<S>,
    decide: fn(u64, Read<S>, P, u64) -> Outcome<S>,
    /// The value and the expiry (ms) to write.
    stored: fn(&S) -> (Encoded, u64),
}

/// A bucket's decision: a value it never writes is warned about (the script cannot) and read
/// as its `decide_read` says.
fn bucket<P: Copy, S>(
    ctx: &Ctx,
    argv: &[*mut RawString],
    b: &Bucket<P, S>,
) -> Result<Reply, Failure> {
    let (name, p, cost) = bucket_call(argv, b.min, b.from_args)?;
    let mut key = ctx.open(name);
    let now = now_us();
    let read = read_expiring(&key.read(), b.decode);
    warn_unreadable(ctx, &read);
    let outcome = (b.decide)(now, read, p, cost);
    if let Some(state) = &outcome.new_state {
        let (value, expire_ms) = (b.stored)(state);
        key.set(value.as_bytes(), expire_ms)
            .map_err(Failure::Store)?;
    }
    Ok(decided(&outcome, now))
}

/// `fixed_window.lua`: the counter (its KEYS[1]); limit, period (µs), cost.
fn fixed_window_decide(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
    let (name, p, cost) = window_call(argv, 3, fixed_window::from_args)?;
    let mut key = ctx.open(name);
    let now = now_us();
    // Another type, text, no expiry: not a count, read as an empty window (and overwritten
    // by the call it admits), as the script reads it.
    let state = match key.read() {
        Value::String(bytes, Some(expire_ms)) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| fixed_window::State::decode(text, expire_ms)),
        _ => None,
    };
    let outcome = fixed_window::decide(now, state, p, cost);
    if let Some(state) = outcome.new_state {
        let mut digits = api::itoa_buf();
        key.set(api::write_u64(&mut digits, state.count), state.expire_ms)
            .map_err(Failure::Store)?;
    }
    Ok(decided(&outcome, now))
}

/// `sliding_window.lua`: the state (its KEYS[1]); limit, period (µs), tick (µs), cost.
fn sliding_window_decide(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
    let (name, p, cost) = window_call(argv, 4, sliding_window::from_args)?;
    let mut key = ctx.open(name);
    let now = now_us();
    // Any value not "window:previous:current", of any type, with or without an expiry: empty
    // windows (overwritten by the call it admits), as the script reads it.
    let state = match key.read() {
        Value::String(bytes, _) => sliding_window::State::decode_bytes(bytes),
        _ => None,
    };
    let outcome = sliding_window::decide(now, state, p, cost);
    if let Some(state) = outcome.new_state {
        key.set(state.encoded().as_bytes(), state.expire_ms(p))
            .map_err(Failure::Store)?;
    }
    Ok(decided(&outcome, now))
}
