//! The commands: each parses its arguments, reads its keys, decides with the algorithm of
//! `ratelimit-algorithms`, writes and replicates what changed, and answers what the Lua
//! function of the same name answers.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use ratelimit_algorithms::{Cost, StateKind};
use ratelimit_vocab::native::{MAX_ARGUMENTS, MAX_BATCH, MAX_LIMITS};

use crate::api::{self, CommandFn, Ctx, RawCtx, RawString};
use crate::args::{ArgError, Args, Keys, Packed};
use crate::kernel::{Answer, Kernel, State, Write};

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
pub(crate) const ALL: [Spec; 7] = [
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
    Spec {
        short: "sliding_log",
        keys: Keys::One,
        flags: "write deny-oom",
        summary: "Decides one call on a sliding log, as the library's `sliding_log` function",
        run: sliding_log_command,
    },
    Spec {
        short: "multi",
        keys: Keys::Counted,
        flags: "write deny-oom",
        summary: "Decides the limits of one call all or nothing, as the library's `multi` \
                  function (each limit's key declared: on a cluster, all in one slot)",
        run: multi_command,
    },
    Spec {
        short: "batch",
        keys: Keys::Counted,
        flags: "write deny-oom",
        summary: "Decides several calls, each as alone, in order, as the library's `batch` \
                  function (every call's keys declared: on a cluster, all in one slot)",
        run: batch_command,
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
fn serve(
    raw: *mut RawCtx,
    argv: *mut *mut RawString,
    argc: c_int,
    decide: fn(&Ctx, &[*mut RawString]) -> Result<Reply, Failure>,
) -> c_int {
    let ctx = Ctx::new(raw);
    let args = api::args(argv, argc);
    match catch_unwind(AssertUnwindSafe(|| decide(&ctx, args))) {
        Ok(Ok(Reply::Decision(values))) => ctx.reply_decision(&values),
        Ok(Ok(Reply::Numbers(numbers))) => ctx.reply_numbers(numbers.as_slice()),
        Ok(Ok(Reply::Sent)) => {}
        Ok(Err(Failure::Args(e))) => ctx.reply_error(e.message()),
        Ok(Err(Failure::Store(message))) => ctx.reply_error(message),
        // (A batch's calls are each under their own `catch_unwind`, after its reply began.)
        Err(_) => ctx.reply_error(PANICKED),
    }
    api::OK
}

const PANICKED: &str = "ERR ratelimit: internal error (the module panicked)";

/// The server's wall clock in microseconds, as `TIME` reads it (the host's clock).
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn arg(a: &*mut RawString) -> &[u8] {
    api::arg_bytes(*a)
}

/// An entry point Redis calls for a command, running `decide` under [`serve`].
macro_rules! entry_point {
    ($name:ident, $decide:expr) => {
        extern "C" fn $name(ctx: *mut RawCtx, argv: *mut *mut RawString, argc: c_int) -> c_int {
            serve(ctx, argv, argc, $decide)
        }
    };
}

/// The entry point of the command of one algorithm, `kind`'s.
macro_rules! one_limit {
    ($name:ident, $kind:ident) => {
        entry_point!($name, |ctx, argv| one(ctx, argv, StateKind::$kind));
    };
}

one_limit!(token_bucket_command, TokenBucket);
one_limit!(fixed_window_command, FixedWindow);
one_limit!(sliding_window_command, SlidingWindow);
one_limit!(interval_bucket_command, IntervalBucket);
entry_point!(sliding_log_command, sliding_log);
entry_point!(multi_command, multi);
entry_point!(batch_command, batch);

/// One algorithm's function (`gcra.lua`, `fixed_window.lua`, ...): its key, then its
/// arguments packed; the five numbers the function returns.
///
/// Inlined into each command's entry point, so that each is compiled for its own algorithm
/// (`kind` a constant there: no dispatch on it per call).
#[inline(always)]
fn one(ctx: &Ctx, argv: &[*mut RawString], kind: StateKind) -> Result<Reply, Failure> {
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
    name: *mut RawString,
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
    }
    .map_err(Failure::Store)
}

/// `sliding_log.lua`: the log (its KEYS[1], a sorted set of one entry per admitted token,
/// scored by its admission time); limit, period (µs), cost. The same commands on the same
/// key as the script's, in the same order (`ZCOUNT`, `ZRANGE`, `ZREMRANGEBYSCORE`, `ZADD`,
/// `PEXPIREAT`), the writes propagated as they are (their scores and instants are absolute:
/// they are their own effects), so the log holds exactly what the script would write. Not
/// in `multi` or a batch: those run by `FCALL` with a sliding log among their limits.
fn sliding_log(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
    let args = Args::split(argv, arg, Keys::One)?;
    let name = *args.keys.first().ok_or(ArgError::NumKeys)?;
    let mut numbers = [0i64; MAX_ARGUMENTS];
    let n = args.numbers(arg, &mut numbers)?;
    let (p, cost) = match numbers.get(..n) {
        Some(&[limit, period, cost]) => {
            let unsigned = |v: i64| u64::try_from(v).map_err(|_| ArgError::BadLimit);
            ratelimit_algorithms::sliding_log::from_args(&[
                unsigned(limit)?,
                unsigned(period)?,
                unsigned(cost)?,
            ])
            .ok_or(ArgError::BadLimit)?
        }
        _ => return Err(ArgError::BadLimit.into()),
    };
    let (limit, period) = (p.limit(), p.period_us());
    let now = now_us();
    {
        let mut key = ctx.open(name);
        if !matches!(key.read(), api::Value::Absent | api::Value::SortedSet) {
            ctx.warn("redis-ratelimit: a sliding-log key held another type; dropped");
            key.delete().map_err(Failure::Store)?;
        }
    }
    let failed = || Failure::Store("ERR ratelimit: the sliding log could not be read");
    let since = now.saturating_sub(period);
    let mut open_from = Decimal::with_prefix(b'(');
    let open_from = open_from.of(since);
    let live = ctx
        .call(c"ZCOUNT", name, &[open_from, b"+inf"], false)
        .and_then(|r| r.get().integer())
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(failed)?;
    // The newest token's admission time.
    let newest = || -> Option<u64> {
        let reply = ctx.call(c"ZRANGE", name, &[b"-1", b"-1", b"WITHSCORES"], false)?;
        score(reply.get().at(1)?.bytes()?)
    };
    if live + cost > limit {
        // The (live + cost - limit)-th oldest live token must leave: then limit - cost remain.
        let mut offset = Decimal::new();
        let offset = offset.of(live + cost - limit - 1);
        let reply = ctx
            .call(
                c"ZRANGE",
                name,
                &[
                    open_from,
                    b"+inf",
                    b"BYSCORE",
                    b"LIMIT",
                    offset,
                    b"1",
                    b"WITHSCORES",
                ],
                false,
            )
            .ok_or_else(failed)?;
        let nth = reply
            .get()
            .at(1)
            .and_then(|s| score(s.bytes()?))
            .ok_or_else(failed)?;
        let newest = newest().ok_or_else(failed)?;
        return Ok(Reply::Decision([
            0,
            limit.saturating_sub(live),
            (nth + period).saturating_sub(now),
            (newest + period).saturating_sub(now),
            now,
        ]));
    }
    let before = newest();
    let mut through = Decimal::new();
    ctx.call(
        c"ZREMRANGEBYSCORE",
        name,
        &[b"-inf", through.of(since)],
        true,
    )
    .ok_or_else(failed)?;
    // One entry per token, `<now>:<its rank among the live ones>`, at most 1,000 per `ZADD`.
    let mut at = Decimal::new();
    let at = at.of(now);
    let mut added = 0;
    while added < cost {
        let chunk = (cost - added).min(1000);
        let mut members: Vec<Vec<u8>> = Vec::with_capacity(usize::try_from(chunk).unwrap_or(0));
        for j in added + 1..=added + chunk {
            let mut member = at.to_vec();
            member.push(b':');
            member.extend_from_slice(Decimal::new().of(live + j));
            members.push(member);
        }
        let mut zadd: Vec<&[u8]> = Vec::with_capacity(members.len() * 2);
        for member in &members {
            zadd.push(at);
            zadd.push(member);
        }
        ctx.call(c"ZADD", name, &zadd, true).ok_or_else(failed)?;
        added += chunk;
    }
    let last = before.map_or(now, |b| b.max(now));
    let mut expire = Decimal::new();
    let expire = expire.of((last + period).div_ceil(1000));
    ctx.call(c"PEXPIREAT", name, &[expire], true)
        .ok_or_else(failed)?;
    Ok(Reply::Decision([
        1,
        limit - live - cost,
        0,
        last + period - now,
        now,
    ]))
}

/// A score as Redis answers it (`%.17g` of an integer below 2^53: its digits), read as Lua's
/// `tonumber` reads it.
fn score(text: &[u8]) -> Option<u64> {
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    // Scores are admission times below 2^53: exact in a double.
    (0.0..9_007_199_254_740_992.0).contains(&value).then(|| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let v = value as u64;
        v
    })
}

/// A number in decimal on the stack, with an optional one-byte prefix (`(` for an open
/// interval).
struct Decimal {
    buf: [u8; 22],
    prefix: Option<u8>,
}

impl Decimal {
    fn new() -> Decimal {
        Decimal {
            buf: [0; 22],
            prefix: None,
        }
    }

    fn with_prefix(prefix: u8) -> Decimal {
        Decimal {
            buf: [0; 22],
            prefix: Some(prefix),
        }
    }

    /// `v`, after the prefix.
    fn of(&mut self, v: u64) -> &[u8] {
        let mut digits = [0u8; 20];
        let digits = ratelimit_vocab::native::write_decimal(&mut digits, v);
        let start = usize::from(self.prefix.is_some());
        if let (Some(p), Some(first)) = (self.prefix, self.buf.first_mut()) {
            *first = p;
        }
        let end = start + digits.len();
        match self.buf.get_mut(start..end) {
            Some(out) => out.copy_from_slice(digits),
            None => return &[],
        }
        self.buf.get(..end).unwrap_or(&[])
    }
}

/// What `multi` does (`multi.lua`'s modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// 0: decide.
    Decide,
    /// 1: decide, and also answer what each limit held before the call.
    Reserve,
    /// 2: another part of the call refused it: answer, take nothing.
    Veto,
    /// 3: give back what a reservation took at this server time (µs).
    GiveBack(u64),
    /// 4: answer as `Decide` would, with each limit's remaining as it stands; write nothing.
    Peek,
}

/// One limit of a `multi` call: its kernel, its cost, and whether it is in shadow mode (its
/// refusal does not refuse the call).
#[derive(Debug, Clone, Copy)]
struct Limit {
    kernel: Kernel,
    cost: u64,
    shadow: bool,
}

/// `multi.lua`: `numkeys`, every limit's key, then packed: the mode; per limit its
/// algorithm's id (plus 8 in shadow mode), the number of its arguments and them; in mode 3
/// the reservation's server time. Answers four numbers per limit and the server time (in
/// mode 1, when every limit admits, two more per limit: its remaining and reset before the
/// call); mode 3 answers the number of limits.
fn multi(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
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
    let mode = match mode {
        0 => Mode::Decide,
        1 => Mode::Reserve,
        2 => Mode::Veto,
        3 => Mode::GiveBack(u64::try_from(packed.next_number()?).map_err(|_| ArgError::BadLimit)?),
        4 => Mode::Peek,
        _ => return Err(ArgError::BadLimit.into()),
    };
    if !packed.is_done() {
        return Err(ArgError::BadLimit.into());
    }
    let limits = limits.get(..n).unwrap_or(&[]);
    decide_several(ctx, args.keys, limits, mode, now_us()).map(Reply::Numbers)
}

/// One limit of `multi` or a batch: its algorithm's id (plus 8 in shadow mode), the number of
/// its arguments, and them.
fn read_limit(packed: &mut Packed<'_>) -> Result<Limit, ArgError> {
    let bad = ArgError::BadLimit;
    let id = u8::try_from(packed.next_number()?)
        .ok()
        .filter(|&id| id < 2 * SHADOW)
        .ok_or(bad)?;
    let count = packed.next_count()?;
    let mut args = [0i64; MAX_ARGUMENTS];
    let args = args.get_mut(..count).ok_or(bad)?;
    packed.fill(args)?;
    let kind = StateKind::from_id(id % SHADOW).ok_or(bad)?;
    let (kernel, cost) = Kernel::from_args(kind, args).ok_or(bad)?;
    // A negative cost runs only as mode 3's give-back, which negates the spec's own.
    let Cost::Take(cost) = cost else {
        return Err(bad);
    };
    Ok(Limit {
        kernel,
        cost,
        shadow: id >= SHADOW,
    })
}

/// Several limits of one call on `keys` (one per limit) at `now`, in `mode`, as `multi.lua`
/// decides them: every key is read before any is written, and the call's writes are made
/// once every limit has decided: all of them if all admit, else only those of the limits
/// that refused (a refusal writes only a state that must be read otherwise than it says).
fn decide_several(
    ctx: &Ctx,
    keys: &[*mut RawString],
    limits: &[Option<Limit>],
    mode: Mode,
    now: u64,
) -> Result<Box<Numbers>, Failure> {
    let n = limits.iter().flatten().count();
    let mut states: [Option<State>; MAX_LIMITS] = [None; MAX_LIMITS];
    for ((state, limit), &name) in states.iter_mut().zip(limits.iter().flatten()).zip(keys) {
        *state = Some(limit.kernel.read(&ctx.open(name).read()));
    }
    let each = || {
        limits
            .iter()
            .zip(&states)
            .zip(keys)
            .filter_map(|((limit, state), &name)| Some((limit.as_ref()?, state.as_ref()?, name)))
    };
    for (_, state, _) in each() {
        warn_if_unreadable(ctx, state);
    }
    let mut reply = Box::new(Numbers::new());
    if let Mode::GiveBack(reserved_at) = mode {
        for (limit, state, name) in each() {
            if let Some(write) = limit.kernel.give_back(now, state, limit.cost, reserved_at) {
                apply(&mut ctx.open(name), &write)?;
            }
        }
        reply.push(u64::try_from(n).unwrap_or(0));
        return Ok(reply);
    }
    let mut answers: [Option<Answer>; MAX_LIMITS] = [None; MAX_LIMITS];
    let mut all = mode != Mode::Veto;
    for (answer, (limit, state, _)) in answers.iter_mut().zip(each()) {
        let decided = limit.kernel.decide(now, state, limit.cost);
        all &= decided.allowed || limit.shadow;
        *answer = Some(decided);
    }
    // A limit's remaining and reset as they stand: a cost of 0, its writes dropped.
    let peek = |limit: &Limit, state: &State| limit.kernel.decide(now, state, 0);
    for (answer, (limit, state, name)) in answers.iter_mut().zip(each()) {
        let Some(answer) = answer.as_mut() else {
            continue;
        };
        if !all && answer.allowed {
            let now_held = peek(limit, state);
            answer.remaining = now_held.remaining;
            answer.reset_after_us = now_held.reset_after_us;
        }
        if mode == Mode::Peek {
            answer.remaining = peek(limit, state).remaining;
        } else if let Some(write) = answer.write.as_ref().filter(|_| all || !answer.allowed) {
            apply(&mut ctx.open(name), write)?;
        }
        for v in answer.numbers() {
            reply.push(v);
        }
    }
    reply.push(now);
    if mode == Mode::Reserve && all {
        for (limit, state, _) in each() {
            let before = peek(limit, state);
            reply.push(before.remaining);
            reply.push(before.reset_after_us);
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
fn batch(ctx: &Ctx, argv: &[*mut RawString]) -> Result<Reply, Failure> {
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
            // (A call does not reply itself.)
            Ok(Ok(Reply::Sent)) => ctx.reply_error(PANICKED),
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
    keys: &mut &[*mut RawString],
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
        decide_one(ctx, name, limit.kernel, limit.cost, now).map(Reply::Decision)
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

/// What `multi.lua` adds to a limit's algorithm id in shadow mode.
const SHADOW: u8 = 8;
