//! The algorithms whose state is a sorted set (the sliding log, the concurrency limit), read
//! and written through the module API's own sorted-set functions on the key (`api`'s
//! `zset`: the score ranges walked, members added and removed, no command called), step for
//! step as the scripts' commands read and write it, in the scripts' order, so that the set
//! holds exactly what the script would write: the same members, scores and expiry. Each
//! write is propagated as the script's command (`ZADD`, `ZREM`, `ZREMRANGEBYSCORE`,
//! `PEXPIREAT`, its scores and instants absolute: its own effect), when that command would
//! have changed the key. A score the scripts never write (not a whole number of µs below
//! 2^53) is an error reply.

use ratelimit_algorithms::{WindowParams, concurrency};
use ratelimit_vocab::native::write_decimal;

use crate::api::{self, Arg, Ctx, Edge, Key, Scores};

/// The store failed a command's step: the error reply's text.
pub(crate) type Failed = &'static str;

/// Where a decision's writes go: made at once, or kept to be made once every limit of a call
/// has decided (`multi.lua` defers the same commands), or dropped (a peek).
#[derive(Debug)]
pub(crate) enum Writes {
    /// Made at once, each propagated as its command.
    Now,
    /// Kept, in order.
    Later(Vec<Write>),
}

/// A sorted-set write, as a script's command makes it on the limit's key.
#[derive(Debug)]
pub(crate) enum Write {
    /// `ZREMRANGEBYSCORE <key> <min> <max>`.
    RemoveRange(Scores),
    /// `ZREM <key> <member> ..`.
    Remove(Vec<Vec<u8>>),
    /// `ZADD <key> <score> <member> ..`, every member at the one score.
    Add(u64, Vec<Vec<u8>>),
    /// `PEXPIREAT <key> <ms>`.
    ExpireAt(u64),
}

impl Write {
    /// Makes the write on `key`, propagated as its command.
    fn make(&self, key: &mut Key<'_>) -> Result<(), Failed> {
        match self {
            Write::RemoveRange(range) => {
                key.zrem_range(*range);
                Ok(())
            }
            Write::Remove(members) => key.zrem(members).map(drop),
            Write::Add(score, members) => key.zadd(*score, members),
            Write::ExpireAt(at_ms) => key.expire_at(*at_ms),
        }
    }
}

impl Writes {
    /// Writes to keep, none yet.
    pub(crate) fn later() -> Writes {
        Writes::Later(Vec::new())
    }

    /// `ZREMRANGEBYSCORE` of `range` on `key`: made, or kept. `none_there`: the decision
    /// found no member in `range`, and has written nothing since, so that made at once it
    /// would change nothing (and propagate nothing): skipped then; kept all the same (other
    /// limits' writes may come before it).
    fn remove_range(
        &mut self,
        key: &mut Key<'_>,
        range: Scores,
        none_there: bool,
    ) -> Result<(), Failed> {
        match self {
            Writes::Now if none_there => Ok(()),
            Writes::Now => Write::RemoveRange(range).make(key),
            Writes::Later(kept) => {
                kept.push(Write::RemoveRange(range));
                Ok(())
            }
        }
    }

    /// `ZADD` of `members` at `score` on `key`: made, or kept.
    fn add<M: AsRef<[u8]>>(
        &mut self,
        key: &mut Key<'_>,
        score: u64,
        members: &[M],
    ) -> Result<(), Failed> {
        match self {
            Writes::Now => key.zadd(score, members),
            Writes::Later(kept) => {
                let members = members.iter().map(|m| m.as_ref().to_vec()).collect();
                kept.push(Write::Add(score, members));
                Ok(())
            }
        }
    }

    /// `ZREM` of `members` on `key`: made, or kept.
    fn remove<M: AsRef<[u8]>>(&mut self, key: &mut Key<'_>, members: &[M]) -> Result<(), Failed> {
        match self {
            Writes::Now => key.zrem(members).map(drop),
            Writes::Later(kept) => {
                let members = members.iter().map(|m| m.as_ref().to_vec()).collect();
                kept.push(Write::Remove(members));
                Ok(())
            }
        }
    }

    /// `PEXPIREAT` of `at_ms` on `key`: made, or kept.
    fn expire_at(&mut self, key: &mut Key<'_>, at_ms: u64) -> Result<(), Failed> {
        match self {
            Writes::Now => key.expire_at(at_ms),
            Writes::Later(kept) => {
                kept.push(Write::ExpireAt(at_ms));
                Ok(())
            }
        }
    }

    /// Makes the writes kept, in order, on `key`.
    pub(crate) fn make_kept(self, key: &mut Key<'_>) -> Result<(), Failed> {
        let Writes::Later(kept) = self else {
            return Ok(());
        };
        for write in &kept {
            write.make(key)?;
        }
        Ok(())
    }
}

/// Every score.
const ALL: Scores = Scores {
    min: Edge::Unbounded,
    max: Edge::Unbounded,
};

/// Scores up to `at`, included.
fn through(at: u64) -> Scores {
    Scores {
        min: Edge::Unbounded,
        max: Edge::Incl(at),
    }
}

/// Scores above `at`.
fn after(at: u64) -> Scores {
    Scores {
        min: Edge::Excl(at),
        max: Edge::Unbounded,
    }
}

/// `key`, open for a sorted-set algorithm: a value of another type (what no script writes)
/// dropped, with a warning, as the script drops it.
fn check_set(ctx: &Ctx, key: &mut Key<'_>, what: &str) -> Result<(), Failed> {
    if !matches!(key.read(), api::Value::Absent | api::Value::SortedSet) {
        ctx.warn(&format!(
            "redis-ratelimit: a {what} key held another type; dropped"
        ));
        key.delete()?;
    }
    Ok(())
}

/// `ZCOUNT <key> (<since> +inf`: the members scored after `since` (every member but those
/// scored up to it, which the sliding log removes as it admits a call: few to walk).
fn count_after(key: &mut Key<'_>, since: u64) -> u64 {
    let before = key.scores(through(since), false).count();
    key.zcard().saturating_sub(before)
}

/// The score of the element a walk of `range` (with `rev`, from its end) finds after `skip`
/// others: `Ok(None)` where there is none, an error where its score is none the scripts
/// write.
fn score_at(
    key: &mut Key<'_>,
    range: Scores,
    rev: bool,
    skip: u64,
    unreadable: Failed,
) -> Result<Option<u64>, Failed> {
    let mut cursor = key.scores(range, rev);
    if !cursor.skip(skip) {
        return Ok(None);
    }
    match cursor.score() {
        None => Ok(None),
        Some(s) => whole(s).map(Some).ok_or(unreadable),
    }
}

/// `multi.lua`'s give-back of a sliding log's `cost` tokens reserved at `reserved_at`: the
/// entries of that instant (any are the same tokens), at most `cost` of them, removed.
pub(crate) fn give_back_log(key: &mut Key<'_>, cost: u64, reserved_at: u64) -> Result<(), Failed> {
    let mut taken = Vec::new();
    {
        let at = Scores {
            min: Edge::Incl(reserved_at),
            max: Edge::Incl(reserved_at),
        };
        let mut cursor = key.scores(at, false);
        while u64::try_from(taken.len()).unwrap_or(u64::MAX) < cost {
            let Some((member, _)) = cursor.at() else {
                break;
            };
            taken.push(member);
            cursor.advance();
        }
    }
    if !taken.is_empty() {
        key.zrem(&taken)?;
    }
    Ok(())
}

const UNREADABLE_LOG: Failed = "ERR ratelimit: the sliding log could not be read";

/// `multi.lua`'s give-back of a concurrency limit's slots: the holder's own members
/// `h:<holder>:1 ..= cost` removed, where the key holds a sorted set.
pub(crate) fn give_back_slots(key: &mut Key<'_>, holder: u64, cost: u64) -> Result<(), Failed> {
    if key.read() != api::Value::SortedSet {
        return Ok(());
    }
    for chunk in slots(holder, cost).chunks(1000) {
        key.zrem(chunk)?;
    }
    Ok(())
}

/// `sliding_log.lua` on the log `name` (a sorted set of one entry per admitted token, scored
/// by its admission time): what its `ZCOUNT` and `ZRANGE`s read, its `ZREMRANGEBYSCORE`,
/// `ZADD` and `PEXPIREAT`. The script's five numbers.
pub(crate) fn sliding_log(
    ctx: &Ctx,
    key: &mut Key<'_>,
    p: WindowParams,
    cost: u64,
    now: u64,
    writes: &mut Writes,
) -> Result<[u64; 5], Failed> {
    let (limit, period) = (p.limit(), p.period_us());
    check_set(ctx, key, "sliding-log")?;
    let since = now.saturating_sub(period);
    let ended = key.scores(through(since), false).count();
    // `ZCOUNT <key> (<since> +inf`: every member but the ended ones (which an admission
    // removes: few to walk).
    let live = key.zcard().saturating_sub(ended);
    // The newest token's admission time (`ZRANGE <key> -1 -1 WITHSCORES`).
    let newest = |key: &mut Key<'_>| score_at(key, ALL, true, 0, UNREADABLE_LOG).ok().flatten();
    if live + cost > limit {
        // The (live + cost - limit)-th oldest live token must leave: then limit - cost remain
        // (`ZRANGE <key> (<since> +inf BYSCORE LIMIT <offset> 1`), found from whichever end
        // of the live tokens is nearer.
        let offset = live + cost - limit - 1;
        let nth = match live.checked_sub(offset + 1) {
            Some(from_newest) if from_newest < offset => {
                score_at(key, after(since), true, from_newest, UNREADABLE_LOG)?
            }
            Some(_) => score_at(key, after(since), false, offset, UNREADABLE_LOG)?,
            None => None,
        }
        .ok_or(UNREADABLE_LOG)?;
        let newest = newest(key).ok_or(UNREADABLE_LOG)?;
        return Ok([
            0,
            limit.saturating_sub(live),
            (nth + period).saturating_sub(now),
            (newest + period).saturating_sub(now),
            now,
        ]);
    }
    // The newest token before this call's: it sets the expiry only when it is after `now`
    // (the clock stepped back), or for a call of no tokens. Otherwise whether there is one
    // after `now` is all that matters, which a seek answers without reading it.
    let before = if cost == 0 || key.scores(after(now), false).is_on() {
        newest(key)
    } else {
        None
    };
    writes.remove_range(key, through(since), ended == 0)?;
    // One entry per token, `<now>:<its rank among the live ones>`, at most 1,000 per `ZADD`.
    let mut added = 0;
    while added < cost {
        let chunk = (cost - added).min(1000);
        if chunk == 1 {
            let member = Text::log_entry(now, live + added + 1);
            writes.add(key, now, &[member.as_bytes()])?;
        } else {
            let members: Vec<Text> = (added + 1..=added + chunk)
                .map(|j| Text::log_entry(now, live + j))
                .collect();
            writes.add(key, now, &members)?;
        }
        added += chunk;
    }
    let mut last = before.map_or(now, |b| b.max(now));
    // A call of no tokens (a peek of `multi`) adds none: the newest live token's, as before.
    if let Some(before) = before.filter(|&b| cost == 0 && b > since) {
        last = before;
    }
    writes.expire_at(key, (last + period).div_ceil(1000))?;
    Ok([1, limit - live - cost, 0, last + period - now, now])
}

/// `call.lua`'s settlement of a sliding log's overdraft of `extra` tokens at `now`: the live
/// tokens counted (`ZCOUNT`, on a sorted set), as many of `extra` taken as the limit and
/// `debt` leave room for, added by [`sliding_log`] under a limit of what the log may then
/// hold. The tokens taken (the twin: `sliding_log::take_over`).
pub(crate) fn take_over_log(
    ctx: &Ctx,
    key: &mut Key<'_>,
    p: WindowParams,
    extra: u64,
    debt: u64,
    now: u64,
) -> Result<u64, Failed> {
    let period = p.period_us();
    let live = if key.read() == api::Value::SortedSet {
        count_after(key, now.saturating_sub(period))
    } else {
        0
    };
    let taken = extra.min(p.limit().saturating_add(debt).saturating_sub(live));
    if taken == 0 {
        return Ok(0);
    }
    let room = WindowParams::try_new(live + taken, period).ok_or(UNREADABLE_LOG)?;
    sliding_log(ctx, key, room, taken, now, &mut Writes::Now)?;
    Ok(taken)
}

/// A score as the scripts read it (`tonumber` of what Redis answers, `%.17g` of the double:
/// the double itself), as a whole number of µs: `None` outside `[0, 2^53)`.
pub(crate) fn whole(value: f64) -> Option<u64> {
    // Scores are admission times below 2^53: exact in a double.
    (0.0..9_007_199_254_740_992.0).contains(&value).then(|| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let v = value as u64;
        v
    })
}

/// What a ticket's score adds to its lease end.
const TICKET: u64 = concurrency::TICKET;

/// Lua's `string.sub(s, i, j)` for `1 <= i`, `i - 1 <= j`: the bytes from the `i`th to the
/// `j`th, as many of them as `s` has.
fn sub(s: &[u8], i: usize, j: usize) -> &[u8] {
    let end = j.min(s.len());
    s.get((i - 1).min(end)..end).unwrap_or(&[])
}

/// A member's text on the stack: a log's entry `<now>:<n>`, or a slot `h:<holder>:<n>` (at
/// most 43 bytes).
#[derive(Debug, Clone, Copy)]
struct Text {
    buf: [u8; 44],
    len: usize,
}

impl Text {
    fn new() -> Text {
        Text {
            buf: [0; 44],
            len: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(out) = self.buf.get_mut(self.len..end) {
            out.copy_from_slice(bytes);
            self.len = end;
        }
    }

    fn number(&mut self, v: u64) {
        self.push(write_decimal(&mut [0u8; 20], v));
    }

    /// `<at>:<n>`, a sliding log's entry, as `sliding_log.lua` writes it.
    fn log_entry(at: u64, n: u64) -> Text {
        let mut text = Text::new();
        text.number(at);
        text.push(b":");
        text.number(n);
        text
    }

    /// `h:<holder>:<n>`, a slot's member, as the algorithms' [`concurrency::Member`] names it.
    fn slot(holder: u64, n: u64) -> Text {
        let mut text = Text::new();
        text.push(b"h:");
        text.number(holder);
        text.push(b":");
        text.number(n);
        text
    }

    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl AsRef<[u8]> for Text {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The slots `h:<holder>:1 ..= cost`.
fn slots(holder: u64, cost: u64) -> Vec<Text> {
    (1..=cost).map(|n| Text::slot(holder, n)).collect()
}

/// The holder in 20 digits, zeros first, as a ticket names it
/// ([`concurrency::padded_holder`]).
fn padded(holder: u64) -> [u8; 20] {
    let mut digits = [b'0'; 20];
    // The digits end the buffer, the zeros before them stay.
    write_decimal(&mut digits, holder);
    digits
}

/// The score of the first member in `range` (`ZRANGE <key> <min> <max> BYSCORE LIMIT 0 1
/// WITHSCORES`; with `rev`, the last: `.. REV ..`).
fn edge_score(key: &mut Key<'_>, range: Scores, rev: bool) -> Result<Option<u64>, Failed> {
    score_at(key, range, rev, 0, UNREADABLE)
}

const UNREADABLE: Failed = "ERR ratelimit: the concurrency set could not be read";

/// `Some` of the later of `a` and `b`, as the script's `later`.
fn later(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The slots held at `now`: scored after `now` and below [`TICKET`] (`ZCOUNT <key> (<now>
/// (<TICKET>`).
fn held_slots(now: u64) -> Scores {
    Scores {
        min: Edge::Excl(now),
        max: Edge::Excl(TICKET),
    }
}

/// The ended tickets at `now`: scored from [`TICKET`] to `TICKET + now`.
fn ended_tickets(now: u64) -> Scores {
    Scores {
        min: Edge::Incl(TICKET),
        max: Edge::Incl(TICKET + now),
    }
}

/// The tickets: `(ended, live)`, the number of those ended at `now` and the live ones, each
/// with its member and its score (`ZRANGE <key> (<TICKET + now> +inf BYSCORE WITHSCORES`).
/// Tickets are few (and ended ones removed by every write), so the walk reads every one.
fn tickets<'c>(key: &mut Key<'c>, now: u64) -> (u64, Vec<(api::Member<'c>, f64)>) {
    let (mut ended, mut live) = (0, Vec::new());
    let mut cursor = key.scores(
        Scores {
            min: Edge::Incl(TICKET),
            max: Edge::Unbounded,
        },
        false,
    );
    while let Some((member, score)) = cursor.at() {
        // A double compared with a whole number below 2^53, as Redis compares the range's.
        #[allow(clippy::cast_precision_loss)]
        if score <= (TICKET + now) as f64 {
            ended += 1;
        } else {
            live.push((member, score));
        }
        cursor.advance();
    }
    (ended, live)
}

/// `concurrency.lua` on the set `name`: the script's five numbers.
pub(crate) fn concurrency(
    ctx: &Ctx,
    key: &mut Key<'_>,
    p: concurrency::Params,
    cost: u64,
    now: u64,
    writes: &mut Writes,
) -> Result<[u64; 5], Failed> {
    check_set(ctx, key, "concurrency")?;
    // The slots from the first: those ended at `now` (which every write removes: few), then
    // the earliest lease end of the slots held (`ZRANGE <key> (<now> (<TICKET> BYSCORE LIMIT
    // 0 1 WITHSCORES`).
    let (mut ended, mut earliest) = (0, None);
    {
        let below_ticket = Scores {
            min: Edge::Unbounded,
            max: Edge::Excl(TICKET),
        };
        let mut cursor = key.scores(below_ticket, false);
        while let Some(score) = cursor.score() {
            // A double compared with a whole number below 2^53, as Redis compares the
            // range's.
            #[allow(clippy::cast_precision_loss)]
            if score > now as f64 {
                earliest = Some(whole(score).ok_or(UNREADABLE)?);
                break;
            }
            ended += 1;
            cursor.advance();
        }
    }
    // The latest lease end of the slots held: none if none is held.
    let mut latest = match earliest {
        Some(_) => edge_score(key, held_slots(now), true)?,
        None => None,
    };
    let (ended_tickets_there, tickets) = tickets(key, now);
    // `ZCOUNT <key> (<now> (<TICKET>`: every member but the ended slots and the tickets.
    let held = key
        .zcard()
        .checked_sub(ended + ended_tickets_there)
        .and_then(|n| n.checked_sub(u64::try_from(tickets.len()).ok()?))
        .ok_or(UNREADABLE)?;
    let padded = padded(p.holder);
    let (mut first, mut last): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let (mut mine, mut own_ticket): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    for (member, score) in &tickets {
        let member = member.bytes();
        let ends = whole(*score)
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
    }
    let reset = |last_end: Option<u64>| last_end.map_or(0, |e| e.saturating_sub(now));
    let free = p.max.saturating_sub(held);
    if cost == 0 {
        return Ok([1, free, 0, reset(latest), now]);
    }
    let ahead = first.is_some_and(|f| mine.is_none_or(|m| f < m));
    let until = now + p.lease_us;
    // The writes of an admission and of a queued refusal: the ended members gone, the call's
    // own ticket gone, `add` (at most 1000 members per `ZADD`, as the script writes them),
    // the key's expiry at the last lease end.
    let write = |key: &mut Key<'_>,
                 writes: &mut Writes,
                 add: &dyn Fn(&mut Key<'_>, &mut Writes) -> Result<(), Failed>,
                 latest: u64|
     -> Result<(), Failed> {
        writes.remove_range(key, through(now), ended == 0)?;
        writes.remove_range(key, ended_tickets(now), ended_tickets_there == 0)?;
        if let Some(own) = own_ticket {
            writes.remove(key, &[own])?;
        }
        add(key, writes)?;
        writes.expire_at(key, latest.div_ceil(1000))
    };
    if held + cost <= p.max && !ahead {
        let latest = later(latest, Some(until)).unwrap_or(until);
        let add = |key: &mut Key<'_>, writes: &mut Writes| {
            if cost == 1 {
                return writes.add(key, until, &[Text::slot(p.holder, 1)]);
            }
            for chunk in slots(p.holder, cost).chunks(1000) {
                writes.add(key, until, chunk)?;
            }
            Ok(())
        };
        write(key, writes, &add, latest)?;
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
        let add = |key: &mut Key<'_>, writes: &mut Writes| {
            writes.add(key, TICKET + until, &[member.as_bytes()])
        };
        write(key, writes, &add, latest.unwrap_or(until))?;
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
    let (removed, waiting) = {
        let mut key = ctx.open(name);
        if key.read() != api::Value::SortedSet {
            return Ok(0);
        }
        let padded = padded(holder);
        let mut gone: Vec<Vec<u8>> = slots(holder, cost)
            .iter()
            .map(|m| m.as_bytes().to_vec())
            .collect();
        let mut waiting = false;
        for (member, _) in tickets(&mut key, now).1 {
            let member = member.bytes();
            if sub(member, 21, 40) == padded {
                gone.push(member.to_vec());
            } else {
                waiting = true;
            }
        }
        let mut removed = 0;
        for chunk in gone.chunks(1000) {
            removed += key.zrem(chunk)?;
        }
        (removed, waiting)
    };
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
    let mut key = ctx.open(name);
    if !matches!(key.read(), api::Value::Absent | api::Value::SortedSet) {
        return Ok(0);
    }
    let until = now + lease_us;
    let mut renewed = 0;
    for chunk in slots(holder, cost).chunks(1000) {
        // `ZMSCORE`: a member that is not there has no score.
        for member in chunk {
            let s = key.zscore(member.as_bytes())?.and_then(whole);
            if s.is_some_and(|s| s > now && s < TICKET) {
                renewed += 1;
            }
        }
        key.zadd(until, chunk).map_err(|_| UNREADABLE)?;
    }
    // The key lives until the last lease ends: a slot's, or a ticket's.
    let below_ticket = Scores {
        min: Edge::Unbounded,
        max: Edge::Excl(TICKET),
    };
    let tickets = Scores {
        min: Edge::Incl(TICKET),
        max: Edge::Unbounded,
    };
    let slot = edge_score(&mut key, below_ticket, true)?;
    let ticket = edge_score(&mut key, tickets, true)?;
    let latest = later(
        later(Some(until), slot),
        ticket.map(|t| t.saturating_sub(TICKET)),
    )
    .unwrap_or(until);
    key.expire_at(latest.div_ceil(1000))
        .map_err(|_| UNREADABLE)?;
    Ok(renewed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]

    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The members written natively are the texts the scripts and the twin write.
        #[test]
        fn members_are_the_scripts_texts(
            holder in any::<u64>(),
            n in any::<u64>(),
            at in any::<u64>(),
        ) {
            let (slot, log) = (Text::slot(holder, n), Text::log_entry(at, n));
            let twin = concurrency::Member::Held { holder, n }.to_text();
            prop_assert_eq!(slot.as_bytes(), twin.as_bytes());
            let twin = concurrency::padded_holder(holder);
            prop_assert_eq!(&padded(holder)[..], twin.as_bytes());
            let script = format!("{at}:{n}");
            prop_assert_eq!(log.as_bytes(), script.as_bytes());
        }

        /// A whole score below 2^53 reads back as itself; a fraction as Lua's `tonumber`,
        /// truncated by the twin's reading; none outside `[0, 2^53)`.
        #[test]
        fn whole_scores_read_back(v in 0u64..(1 << 53)) {
            #[allow(clippy::cast_precision_loss)]
            let score = v as f64;
            prop_assert_eq!(whole(score), Some(v));
        }
    }

    #[test]
    fn scores_the_scripts_never_write_are_none() {
        for bad in [-1.0, 9_007_199_254_740_992.0, f64::INFINITY, f64::NAN] {
            assert_eq!(whole(bad), None, "{bad}");
        }
        assert_eq!(whole(2.5), Some(2));
    }
}
