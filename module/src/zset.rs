//! The algorithms whose state is a sorted set (the sliding log, the concurrency limit), by
//! the scripts' own commands on the same key, in the same order, called from the module
//! (`RedisModule_Call`), so that the set holds exactly what the script would write. Each
//! write is propagated as it is (its scores and instants are absolute: it is its own
//! effect). Pure arithmetic on what the commands answer, in the scripts' order; an answer
//! Redis could not give (a member or a score the scripts never write) is an error reply.

use ratelimit_algorithms::{WindowParams, concurrency};

use std::ffi::CStr;

use crate::api::{self, Arg, Ctx};

/// The store failed a command's step: the error reply's text.
pub(crate) type Failed = &'static str;

/// Where a decision's writes go: made at once, or kept to be made once every limit of a call
/// has decided (`multi.lua` defers the same commands), or dropped (a peek).
#[derive(Debug)]
pub(crate) enum Writes {
    /// Made at once, each propagated as it is.
    Now,
    /// Kept, in order.
    Later(Vec<Command>),
}

/// A write kept for later: a sorted-set command on the limit's key, with its arguments.
#[derive(Debug)]
pub(crate) struct Command {
    name: &'static CStr,
    args: Vec<Vec<u8>>,
}

impl Writes {
    /// Writes to keep, none yet.
    pub(crate) fn later() -> Writes {
        Writes::Later(Vec::new())
    }

    /// `command` on the key `name` with `args`: made (and propagated), or kept.
    fn make(
        &mut self,
        ctx: &Ctx,
        name: Arg<'_>,
        command: &'static CStr,
        args: &[&[u8]],
    ) -> Result<(), Failed> {
        match self {
            Writes::Now => ctx
                .call(command, name, args, true)
                .map(drop)
                .ok_or(FAILED_WRITE),
            Writes::Later(kept) => {
                kept.push(Command {
                    name: command,
                    args: args.iter().map(|a| a.to_vec()).collect(),
                });
                Ok(())
            }
        }
    }

    /// Makes the writes kept, in order, on the key `name`.
    pub(crate) fn make_kept(self, ctx: &Ctx, name: Arg<'_>) -> Result<(), Failed> {
        let Writes::Later(kept) = self else {
            return Ok(());
        };
        for command in kept {
            let args: Vec<&[u8]> = command.args.iter().map(Vec::as_slice).collect();
            Writes::Now.make(ctx, name, command.name, &args)?;
        }
        Ok(())
    }
}

const FAILED_WRITE: Failed = "ERR ratelimit: a sorted-set write failed";

/// `multi.lua`'s give-back of a sliding log's `cost` tokens reserved at `reserved_at`: the
/// entries of that instant (any are the same tokens), at most `cost` of them, removed.
pub(crate) fn give_back_log(
    ctx: &Ctx,
    name: Arg<'_>,
    cost: u64,
    reserved_at: u64,
) -> Result<(), Failed> {
    let (mut at, mut count) = (Decimal::new(), Decimal::new());
    let at = at.of(reserved_at);
    let taken = ctx
        .call(
            c"ZRANGE",
            name,
            &[at, at, b"BYSCORE", b"LIMIT", b"0", count.of(cost)],
            false,
        )
        .ok_or(UNREADABLE_LOG)?;
    let mut members: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while let Some(member) = taken.get().at(i) {
        members.push(member.bytes().ok_or(UNREADABLE_LOG)?);
        i += 1;
    }
    if !members.is_empty() {
        Writes::Now.make(ctx, name, c"ZREM", &members)?;
    }
    Ok(())
}

const UNREADABLE_LOG: Failed = "ERR ratelimit: the sliding log could not be read";

/// `multi.lua`'s give-back of a concurrency limit's slots: the holder's own members
/// `h:<holder>:1 ..= cost` removed, where the key holds a sorted set.
pub(crate) fn give_back_slots(
    ctx: &Ctx,
    name: Arg<'_>,
    holder: u64,
    cost: u64,
) -> Result<(), Failed> {
    if ctx.open(name).read() != api::Value::SortedSet {
        return Ok(());
    }
    let members: Vec<Vec<u8>> = (1..=cost).map(|n| slot_member(holder, n)).collect();
    for chunk in members.chunks(1000) {
        let chunk: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        Writes::Now.make(ctx, name, c"ZREM", &chunk)?;
    }
    Ok(())
}

/// `sliding_log.lua` on the log `name` (a sorted set of one entry per admitted token, scored
/// by its admission time): `ZCOUNT`, `ZRANGE`, `ZREMRANGEBYSCORE`, `ZADD`, `PEXPIREAT`. The
/// script's five numbers.
pub(crate) fn sliding_log(
    ctx: &Ctx,
    name: Arg<'_>,
    p: WindowParams,
    cost: u64,
    now: u64,
    writes: &mut Writes,
) -> Result<[u64; 5], Failed> {
    let (limit, period) = (p.limit(), p.period_us());
    {
        let mut key = ctx.open(name);
        if !matches!(key.read(), api::Value::Absent | api::Value::SortedSet) {
            ctx.warn("redis-ratelimit: a sliding-log key held another type; dropped");
            key.delete()?;
        }
    }
    let failed = || UNREADABLE_LOG;
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
        return Ok([
            0,
            limit.saturating_sub(live),
            (nth + period).saturating_sub(now),
            (newest + period).saturating_sub(now),
            now,
        ]);
    }
    let before = newest();
    let mut through = Decimal::new();
    writes.make(
        ctx,
        name,
        c"ZREMRANGEBYSCORE",
        &[b"-inf", through.of(since)],
    )?;
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
        writes.make(ctx, name, c"ZADD", &zadd)?;
        added += chunk;
    }
    let mut last = before.map_or(now, |b| b.max(now));
    // A call of no tokens (a peek of `multi`) adds none: the newest live token's, as before.
    if let Some(before) = before.filter(|&b| cost == 0 && b > since) {
        last = before;
    }
    let mut expire = Decimal::new();
    let expire = expire.of((last + period).div_ceil(1000));
    writes.make(ctx, name, c"PEXPIREAT", &[expire])?;
    Ok([1, limit - live - cost, 0, last + period - now, now])
}

/// `call.lua`'s settlement of a sliding log's overdraft of `extra` tokens at `now`: the live
/// tokens counted (`ZCOUNT`, on a sorted set), as many of `extra` taken as the limit and
/// `debt` leave room for, added by [`sliding_log`] under a limit of what the log may then
/// hold. The tokens taken (the twin: `sliding_log::take_over`).
pub(crate) fn take_over_log(
    ctx: &Ctx,
    name: Arg<'_>,
    p: WindowParams,
    extra: u64,
    debt: u64,
    now: u64,
) -> Result<u64, Failed> {
    let period = p.period_us();
    let live = if ctx.open(name).read() == api::Value::SortedSet {
        let mut open_from = Decimal::with_prefix(b'(');
        ctx.call(
            c"ZCOUNT",
            name,
            &[open_from.of(now.saturating_sub(period)), b"+inf"],
            false,
        )
        .and_then(|r| r.get().integer())
        .and_then(|v| u64::try_from(v).ok())
        .ok_or(UNREADABLE_LOG)?
    } else {
        0
    };
    let taken = extra.min(p.limit().saturating_add(debt).saturating_sub(live));
    if taken == 0 {
        return Ok(0);
    }
    let room = WindowParams::try_new(live + taken, period).ok_or(UNREADABLE_LOG)?;
    sliding_log(ctx, name, room, taken, now, &mut Writes::Now)?;
    Ok(taken)
}

/// A score as Redis answers it (`%.17g` of an integer below 2^53: its digits), read as Lua's
/// `tonumber` reads it.
pub(crate) fn score(text: &[u8]) -> Option<u64> {
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
pub(crate) struct Decimal {
    buf: [u8; 22],
    prefix: Option<u8>,
}

impl Decimal {
    pub(crate) fn new() -> Decimal {
        Decimal {
            buf: [0; 22],
            prefix: None,
        }
    }

    pub(crate) fn with_prefix(prefix: u8) -> Decimal {
        Decimal {
            buf: [0; 22],
            prefix: Some(prefix),
        }
    }

    /// `v`, after the prefix.
    pub(crate) fn of(&mut self, v: u64) -> &[u8] {
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

/// What a ticket's score adds to its lease end, as text for the ranges.
const TICKET: u64 = concurrency::TICKET;

/// Lua's `string.sub(s, i, j)` for `1 <= i`, `i - 1 <= j`: the bytes from the `i`th to the
/// `j`th, as many of them as `s` has.
fn sub(s: &[u8], i: usize, j: usize) -> &[u8] {
    let end = j.min(s.len());
    s.get((i - 1).min(end)..end).unwrap_or(&[])
}

/// `h:<holder>:<n>`, a slot's member, as the algorithms' [`concurrency::Member`] names it.
fn slot_member(holder: u64, n: u64) -> Vec<u8> {
    concurrency::Member::Held { holder, n }
        .to_text()
        .into_bytes()
}

/// The score of the first member by score from `from` to `to` (`ZRANGE <key> <from> <to>
/// BYSCORE [REV] LIMIT 0 1 WITHSCORES`: with `rev`, the last, `from` the higher bound).
fn edge_score(
    ctx: &Ctx,
    name: Arg<'_>,
    from: &[u8],
    to: &[u8],
    rev: bool,
) -> Result<Option<u64>, Failed> {
    let forward: [&[u8]; 7] = [from, to, b"BYSCORE", b"LIMIT", b"0", b"1", b"WITHSCORES"];
    let reverse: [&[u8]; 8] = [
        from,
        to,
        b"BYSCORE",
        b"REV",
        b"LIMIT",
        b"0",
        b"1",
        b"WITHSCORES",
    ];
    let args: &[&[u8]] = if rev { &reverse } else { &forward };
    let reply = ctx.call(c"ZRANGE", name, args, false).ok_or(UNREADABLE)?;
    match reply.get().at(1) {
        None => Ok(None),
        Some(s) => s.bytes().and_then(score).map(Some).ok_or(UNREADABLE),
    }
}

const UNREADABLE: Failed = "ERR ratelimit: the concurrency set could not be read";

/// `Some` of the later of `a` and `b`, as the script's `later`.
fn later(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// `concurrency.lua` on the set `name`: the script's five numbers.
pub(crate) fn concurrency(
    ctx: &Ctx,
    name: Arg<'_>,
    p: concurrency::Params,
    cost: u64,
    now: u64,
    writes: &mut Writes,
) -> Result<[u64; 5], Failed> {
    {
        let mut key = ctx.open(name);
        if !matches!(key.read(), api::Value::Absent | api::Value::SortedSet) {
            ctx.warn("redis-ratelimit: a concurrency key held another type; dropped");
            key.delete()?;
        }
    }
    let (mut d_now, mut d_ticket, mut d_ticket_now) = (
        Decimal::with_prefix(b'('),
        Decimal::with_prefix(b'('),
        Decimal::with_prefix(b'('),
    );
    let (open_now, open_ticket) = (d_now.of(now), d_ticket.of(TICKET));
    let open_ticket_now = d_ticket_now.of(TICKET + now);
    let held = ctx
        .call(c"ZCOUNT", name, &[open_now, open_ticket], false)
        .and_then(|r| r.get().integer())
        .and_then(|v| u64::try_from(v).ok())
        .ok_or(UNREADABLE)?;
    // The earliest and the latest lease end of the slots held.
    let mut earliest = edge_score(ctx, name, open_now, open_ticket, false)?;
    let mut latest = edge_score(ctx, name, open_ticket, open_now, true)?;
    let padded = concurrency::padded_holder(p.holder);
    let padded = padded.as_bytes();
    let tickets = ctx
        .call(
            c"ZRANGE",
            name,
            &[open_ticket_now, b"+inf", b"BYSCORE", b"WITHSCORES"],
            false,
        )
        .ok_or(UNREADABLE)?;
    let tickets = tickets.get();
    let (mut first, mut last): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let (mut mine, mut own_ticket): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let mut i = 0;
    while let Some(member) = tickets.at(i) {
        let member = member.bytes().ok_or(UNREADABLE)?;
        let ends = tickets
            .at(i + 1)
            .and_then(|s| score(s.bytes()?))
            .and_then(|s| s.checked_sub(TICKET))
            .ok_or(UNREADABLE)?;
        latest = later(latest, Some(ends));
        earliest = Some(earliest.map_or(ends, |e| e.min(ends)));
        let ticket = sub(member, 3, 40);
        if first.is_none_or(|f| ticket < f) {
            first = Some(ticket);
        }
        if last.is_none_or(|l| ticket > l) {
            last = Some(ticket);
        }
        if sub(member, 21, 40) == padded {
            mine = Some(ticket);
            own_ticket = Some(member);
        }
        i += 2;
    }
    let reset = |last_end: Option<u64>| last_end.map_or(0, |e| e.saturating_sub(now));
    let free = p.max.saturating_sub(held);
    if cost == 0 {
        return Ok([1, free, 0, reset(latest), now]);
    }
    let ahead = first.is_some_and(|f| mine.is_none_or(|m| f < m));
    let until = now + p.lease_us;
    // The writes of an admission and of a queued refusal: the ended members gone, the call's
    // own ticket gone, each of `adds` added (at most 1000 members per `ZADD`, as the script
    // writes them), the key's expiry at the last lease end.
    let write = |writes: &mut Writes, adds: &[Vec<&[u8]>], latest: u64| -> Result<(), Failed> {
        let mut d = Decimal::new();
        writes.make(ctx, name, c"ZREMRANGEBYSCORE", &[b"-inf", d.of(now)])?;
        let (mut from, mut to) = (Decimal::new(), Decimal::new());
        writes.make(
            ctx,
            name,
            c"ZREMRANGEBYSCORE",
            &[from.of(TICKET), to.of(TICKET + now)],
        )?;
        if let Some(own) = own_ticket {
            writes.make(ctx, name, c"ZREM", &[own])?;
        }
        for add in adds {
            writes.make(ctx, name, c"ZADD", add)?;
        }
        writes.make(ctx, name, c"PEXPIREAT", &[d.of(latest.div_ceil(1000))])
    };
    if held + cost <= p.max && !ahead {
        let latest = later(latest, Some(until)).unwrap_or(until);
        let mut at = Decimal::new();
        let at = at.of(until);
        let members: Vec<Vec<u8>> = (1..=cost).map(|n| slot_member(p.holder, n)).collect();
        let adds: Vec<Vec<&[u8]>> = members
            .chunks(1000)
            .map(|chunk| chunk.iter().flat_map(|m| [at, m.as_slice()]).collect())
            .collect();
        write(writes, &adds, latest)?;
        return Ok([1, p.max - held - cost, 0, reset(Some(latest)), now]);
    }
    let retry = earliest.map_or(1, |e| {
        e.saturating_sub(now).clamp(1, concurrency::RETRY_HINT_US)
    });
    if p.queue {
        // After every ticket there, even one of the same microsecond: tickets never tie.
        let arrival_of = |ticket: &[u8]| -> Result<u64, Failed> {
            std::str::from_utf8(sub(ticket, 1, 17))
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or(UNREADABLE)
        };
        let arrival = match (mine, last) {
            (Some(mine), _) => arrival_of(mine)?,
            (None, Some(last)) => now.max(arrival_of(last)? + 1),
            (None, None) => now,
        };
        let member = concurrency::Member::Waiting {
            arrival,
            holder: p.holder,
            cost,
        }
        .to_text();
        latest = later(latest, Some(until));
        let mut score = Decimal::new();
        write(
            writes,
            &[vec![score.of(TICKET + until), member.as_bytes()]],
            latest.unwrap_or(until),
        )?;
    }
    Ok([0, free, retry, reset(latest), now])
}

/// `concurrency_release.lua` on the set `name`: the slots `h:<holder>:1..cost` and the
/// holder's ticket removed; when calls still wait, `name` published on `channel` (not
/// propagated: the fleet's instances listen on the master). The number of members removed.
pub(crate) fn release(
    ctx: &Ctx,
    name: Arg<'_>,
    holder: u64,
    cost: u64,
    channel: Option<&[u8]>,
    now: u64,
) -> Result<u64, Failed> {
    if ctx.open(name).read() != api::Value::SortedSet {
        return Ok(0);
    }
    let padded = concurrency::padded_holder(holder);
    let padded = padded.as_bytes();
    let mut gone: Vec<Vec<u8>> = (1..=cost).map(|n| slot_member(holder, n)).collect();
    let mut from = Decimal::with_prefix(b'(');
    let tickets = ctx
        .call(
            c"ZRANGE",
            name,
            &[from.of(TICKET + now), b"+inf", b"BYSCORE"],
            false,
        )
        .ok_or(UNREADABLE)?;
    let mut waiting = false;
    let mut i = 0;
    while let Some(member) = tickets.get().at(i) {
        let member = member.bytes().ok_or(UNREADABLE)?;
        if sub(member, 21, 40) == padded {
            gone.push(member.to_vec());
        } else {
            waiting = true;
        }
        i += 1;
    }
    let mut removed = 0;
    for chunk in gone.chunks(1000) {
        let members: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        removed += ctx
            .call(c"ZREM", name, &members, true)
            .and_then(|r| r.get().integer())
            .and_then(|v| u64::try_from(v).ok())
            .ok_or(UNREADABLE)?;
    }
    if let Some(channel) = channel.filter(|_| removed > 0 && waiting) {
        ctx.publish(channel, name).ok_or(UNREADABLE)?;
    }
    Ok(removed)
}

/// `concurrency_renew.lua` on the set `name`: the holder's slots written with a lease to
/// `now + lease_us` whether or not they were there, the key's expiry at the last lease end.
/// The number of slots that were live.
pub(crate) fn renew(
    ctx: &Ctx,
    name: Arg<'_>,
    holder: u64,
    lease_us: u64,
    cost: u64,
    now: u64,
) -> Result<u64, Failed> {
    if !matches!(
        ctx.open(name).read(),
        api::Value::Absent | api::Value::SortedSet
    ) {
        return Ok(0);
    }
    let until = now + lease_us;
    let mut at = Decimal::new();
    let at = at.of(until);
    let mut renewed = 0;
    let members: Vec<Vec<u8>> = (1..=cost).map(|n| slot_member(holder, n)).collect();
    for chunk in members.chunks(1000) {
        let names: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let scores = ctx
            .call(c"ZMSCORE", name, &names, false)
            .ok_or(UNREADABLE)?;
        for j in 0..chunk.len() {
            // A member that is not there answers nil (no bytes).
            let s = scores.get().at(j).and_then(|s| score(s.bytes()?));
            if s.is_some_and(|s| s > now && s < TICKET) {
                renewed += 1;
            }
        }
        let zadd: Vec<&[u8]> = names.iter().flat_map(|m| [at, *m]).collect();
        ctx.call(c"ZADD", name, &zadd, true).ok_or(UNREADABLE)?;
    }
    // The key lives until the last lease ends: a slot's, or a ticket's.
    let mut below_ticket = Decimal::with_prefix(b'(');
    let below_ticket = below_ticket.of(TICKET);
    let mut ticket_floor = Decimal::new();
    let ticket_floor = ticket_floor.of(TICKET);
    let slot = edge_score(ctx, name, below_ticket, b"-inf", true)?;
    let ticket = edge_score(ctx, name, b"+inf", ticket_floor, true)?;
    let latest = later(
        later(Some(until), slot),
        ticket.map(|t| t.saturating_sub(TICKET)),
    )
    .unwrap_or(until);
    let mut expire = Decimal::new();
    ctx.call(
        c"PEXPIREAT",
        name,
        &[expire.of(latest.div_ceil(1000))],
        true,
    )
    .ok_or(UNREADABLE)?;
    Ok(renewed)
}
