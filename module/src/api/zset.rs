//! A sorted set through an open [`Key`], by the module API's own sorted-set functions
//! (`RedisModule_ZsetAdd`, `ZsetRem`, `ZsetScore`, the score-range iterator, `ValueLength`):
//! no command is looked up, parsed or run. Each write is propagated to the replicas and the
//! AOF as the command whose effect it is (`ZADD`, `ZREM`, `ZREMRANGEBYSCORE`, `PEXPIREAT`,
//! with the same arguments), and exactly when Redis would have propagated that command (when
//! it changed the key), so that a replica or an AOF without the module holds the same set,
//! member for member, score for score, with the same expiry. A set emptied by a removal is
//! deleted, as those commands delete it.

use std::ffi::{CStr, c_char, c_double, c_int, c_longlong};

use super::ctx::Ctx;
use super::key::Key;
use super::raw::{
    self, Effect, KEYTYPE_EMPTY, KEYTYPE_ZSET, OK, RawString, ZADD_ADDED, ZADD_UPDATED,
};

/// One end of a range of scores: none (-inf below, +inf above), a score included, or one
/// excluded (`(` in a command's range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    Unbounded,
    Incl(u64),
    Excl(u64),
}

/// A range of scores, from `min` to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scores {
    pub(crate) min: Edge,
    pub(crate) max: Edge,
}

impl Edge {
    /// The bound as the iterator takes it: the score (`infinite` when unbounded) and whether
    /// it is excluded.
    fn bound(self, infinite: c_double) -> (c_double, c_int) {
        match self {
            Edge::Unbounded => (infinite, 0),
            // Scores are instants in µs, below 2^53: exact in a double.
            Edge::Incl(v) => (as_double(v), 0),
            Edge::Excl(v) => (as_double(v), 1),
        }
    }

    /// The bound as a command's text (`-inf` / `+inf`, `<v>`, `(<v>`), in `buf`.
    fn text<'b>(self, infinite: &'static [u8], buf: &'b mut [u8; 22]) -> &'b [u8] {
        let (open, v) = match self {
            Edge::Unbounded => return infinite,
            Edge::Incl(v) => (false, v),
            Edge::Excl(v) => (true, v),
        };
        let mut digits = [0u8; 20];
        let digits = ratelimit_vocab::native::write_decimal(&mut digits, v);
        let start = usize::from(open);
        if let (true, Some(first)) = (open, buf.first_mut()) {
            *first = b'(';
        }
        let end = start + digits.len();
        match buf.get_mut(start..end) {
            Some(out) => out.copy_from_slice(digits),
            None => return &[],
        }
        buf.get(..end).unwrap_or(&[])
    }
}

/// `v` as a double (exact below 2^53, which every score the scripts write is).
#[allow(clippy::cast_precision_loss)]
fn as_double(v: u64) -> c_double {
    v as c_double
}

/// A string the module created in a command (a member read from a set, or one to write),
/// freed when dropped, within that command.
#[derive(Debug)]
pub(crate) struct Member<'c> {
    /// Never null.
    raw: *mut RawString,
    ctx: &'c Ctx,
}

impl Ctx {
    /// A new string holding `bytes` (copied), for a sorted set's member or score.
    pub(crate) fn string(&self, bytes: &[u8]) -> Result<Member<'_>, &'static str> {
        // SAFETY: `self.raw()` is the context of the command running; Redis copies the
        // `bytes.len()` bytes at `bytes` into a new string, which `Member` frees once.
        let raw = unsafe {
            (raw::api().CreateString)(self.raw(), bytes.as_ptr().cast::<c_char>(), bytes.len())
        };
        Member::new(self, raw).ok_or(NO_STRING)
    }
}

const NO_STRING: &str = "ERR ratelimit: a sorted-set member could not be made";

impl<'c> Member<'c> {
    /// `raw`, a string created in the command whose context is `ctx` and owned by the caller;
    /// `None` when null.
    fn new(ctx: &'c Ctx, raw: *mut RawString) -> Option<Member<'c>> {
        (!raw.is_null()).then_some(Member { raw, ctx })
    }

    /// Its bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: `self.raw` is a live string (not null, freed only on drop); `len` is a
        // place for its length.
        let ptr = unsafe { (raw::api().StringPtrLen)(self.raw, &raw mut len) };
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: the string's `len` bytes at `ptr` live, unchanged, as long as the string,
        // which this borrow of `self` keeps.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

impl AsRef<[u8]> for Member<'_> {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for Member<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.raw` was created in the command whose context `self.ctx` is (which
        // has no automatic memory: nothing else frees it), and is freed here once; Redis took
        // its own reference to whatever it keeps of it (a replicated argument).
        unsafe { (raw::api().FreeString)(self.ctx.raw(), self.raw) };
    }
}

/// A walk through a range of a sorted set's scores, in order or from the last back: at most
/// one per key at a time (it borrows the key), stopped when dropped.
#[derive(Debug)]
pub(crate) struct Cursor<'k, 'c> {
    key: &'k mut Key<'c>,
    rev: bool,
    /// The iterator was set up (the key holds a sorted set).
    started: bool,
    /// It stands on an element.
    on: bool,
}

impl<'c> Key<'c> {
    /// Walks the elements of the sorted set whose scores are in `range`, from the lowest (or
    /// with `rev` the highest). Nothing, when the key holds no sorted set.
    pub(crate) fn scores(&mut self, range: Scores, rev: bool) -> Cursor<'_, 'c> {
        let started = !self.raw.is_null() && self.kind == KEYTYPE_ZSET;
        let mut on = false;
        if started {
            let api = raw::api();
            let (min, minex) = range.min.bound(c_double::NEG_INFINITY);
            let (max, maxex) = range.max.bound(c_double::INFINITY);
            let seek = if rev {
                api.ZsetLastInScoreRange
            } else {
                api.ZsetFirstInScoreRange
            };
            // SAFETY: `self.raw` is open (not null, closed only on drop) and holds a sorted
            // set; the iterator this sets up lives in the key, and `Cursor` stops it on drop.
            on = unsafe { seek(self.raw, min, max, minex, maxex) } == OK
                // SAFETY: as above.
                && unsafe { (api.ZsetRangeEndReached)(self.raw) } == 0;
        }
        Cursor {
            key: self,
            rev,
            started,
            on,
        }
    }

    /// The number of members of the sorted set (0 when the key holds none).
    pub(crate) fn zcard(&self) -> u64 {
        if self.raw.is_null() || self.kind != KEYTYPE_ZSET {
            return 0;
        }
        // SAFETY: `self.raw` is open and holds a sorted set.
        let len = unsafe { (raw::api().ValueLength)(self.raw) };
        u64::try_from(len).unwrap_or(u64::MAX)
    }

    /// The score of `member` in the sorted set (`ZSCORE`), `None` where it is not.
    pub(crate) fn zscore(&self, member: &[u8]) -> Result<Option<f64>, &'static str> {
        if self.raw.is_null() || self.kind != KEYTYPE_ZSET {
            return Ok(None);
        }
        let member = self.ctx.string(member)?;
        let mut score: c_double = 0.0;
        // SAFETY: `self.raw` is open and holds a sorted set; `member` is a live string;
        // `score` is a place for the score.
        let found = unsafe { (raw::api().ZsetScore)(self.raw, member.raw, &raw mut score) };
        Ok((found == OK).then_some(score))
    }

    /// `ZADD <key> <score> <member> ..`: each of `members` at `score`, the set made if the key
    /// is empty; propagated as that `ZADD` when it added a member or changed a score.
    pub(crate) fn zadd<M: AsRef<[u8]>>(
        &mut self,
        score: u64,
        members: &[M],
    ) -> Result<(), &'static str> {
        if self.raw.is_null() {
            return Err(NOT_OPEN);
        }
        let ctx = self.ctx;
        let mut digits = [0u8; 20];
        let score_text = ctx.string(ratelimit_vocab::native::write_decimal(&mut digits, score))?;
        // The common call adds one member: its arguments on the stack.
        if let [member] = members {
            let member = ctx.string(member.as_ref())?;
            let changed = self.add_one(score, &member)?;
            if changed {
                self.replicate_strings(c"ZADD", &[score_text.raw, member.raw]);
            }
            return Ok(());
        }
        let mut args: Vec<*mut RawString> = Vec::with_capacity(members.len() * 2);
        let mut made: Vec<Member<'_>> = Vec::with_capacity(members.len());
        let (mut changed, mut failed) = (false, None);
        for member in members {
            let added = ctx
                .string(member.as_ref())
                .and_then(|m| Ok((self.add_one(score, &m)?, m)));
            match added {
                Ok((c, member)) => {
                    changed |= c;
                    args.push(score_text.raw);
                    args.push(member.raw);
                    made.push(member);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        // What was made is propagated, even when a later member failed.
        if changed {
            self.replicate_strings(c"ZADD", &args);
        }
        failed.map_or(Ok(()), Err)
    }

    /// `member` added at `score`: whether that added it or changed its score.
    fn add_one(&mut self, score: u64, member: &Member<'_>) -> Result<bool, &'static str> {
        let mut flags: c_int = 0;
        // SAFETY: `self.raw` is open for writing (every caller checked it is not null), and
        // holds a sorted set or nothing (the algorithms checked, and dropped another type):
        // Redis makes one; `member` is a live string, whose bytes Redis copies; `flags` a
        // place for what it did.
        let added =
            unsafe { (raw::api().ZsetAdd)(self.raw, as_double(score), member.raw, &raw mut flags) };
        if added != OK {
            return Err(FAILED_WRITE);
        }
        self.kind = KEYTYPE_ZSET;
        Ok(flags & (ZADD_ADDED | ZADD_UPDATED) != 0)
    }

    /// Propagates `<command> <key> <args..>`, `args` strings made in this command.
    fn replicate_strings(&self, command: &'static CStr, args: &[*mut RawString]) {
        self.ctx.replicate(Effect::Strings {
            command,
            key: self.name,
            args,
        });
    }

    /// `ZREM <key> <member> ..`: the number of `members` removed; propagated as that `ZREM`
    /// when it removed any. Nothing on a key that holds no sorted set.
    pub(crate) fn zrem<M: AsRef<[u8]>>(&mut self, members: &[M]) -> Result<u64, &'static str> {
        if self.raw.is_null() || self.kind != KEYTYPE_ZSET {
            return Ok(0);
        }
        let ctx = self.ctx;
        let mut made: Vec<Member<'_>> = Vec::with_capacity(members.len());
        for member in members {
            made.push(ctx.string(member.as_ref())?);
        }
        let removed = self.remove(&made);
        if removed > 0 {
            let args: Vec<*mut RawString> = made.iter().map(|m| m.raw).collect();
            self.replicate_strings(c"ZREM", &args);
        }
        self.drop_if_empty();
        Ok(removed)
    }

    /// `ZREMRANGEBYSCORE <key> <min> <max>`: the members whose scores are in `range` removed;
    /// propagated as that command when it removed any. Nothing on a key that holds no sorted
    /// set.
    pub(crate) fn zrem_range(&mut self, range: Scores) -> u64 {
        if self.raw.is_null() || self.kind != KEYTYPE_ZSET {
            return 0;
        }
        let mut gone = Vec::new();
        {
            let mut cursor = self.scores(range, false);
            while let Some((member, _)) = cursor.at() {
                gone.push(member);
                cursor.advance();
            }
        }
        let removed = self.remove(&gone);
        if removed > 0 {
            let (mut min, mut max) = ([0u8; 22], [0u8; 22]);
            self.ctx.replicate(Effect::ZRemRangeByScore {
                key: self.name,
                min: range.min.text(b"-inf", &mut min),
                max: range.max.text(b"+inf", &mut max),
            });
        }
        self.drop_if_empty();
        removed
    }

    /// `PEXPIREAT <key> <at_ms>` on a key that holds a value (on an empty one nothing, as the
    /// command does nothing there), propagated as that command.
    pub(crate) fn expire_at(&mut self, at_ms: u64) -> Result<(), &'static str> {
        if self.raw.is_null() {
            return Err(NOT_OPEN);
        }
        if self.kind == KEYTYPE_EMPTY {
            return Ok(());
        }
        let at = c_longlong::try_from(at_ms).unwrap_or(c_longlong::MAX);
        // SAFETY: `self.raw` is open for writing and holds a value.
        if unsafe { (raw::api().SetAbsExpire)(self.raw, at) } != OK {
            return Err("ERR ratelimit: the key's expiry could not be set");
        }
        let mut digits = [0u8; 20];
        self.ctx.replicate(Effect::PExpireAt {
            key: self.name,
            at_ms: ratelimit_vocab::native::write_decimal(&mut digits, at_ms),
        });
        Ok(())
    }

    /// Removes each of `members` from the sorted set: how many were there.
    fn remove(&mut self, members: &[Member<'_>]) -> u64 {
        let mut removed = 0;
        for member in members {
            let mut deleted: c_int = 0;
            // SAFETY: `self.raw` is open for writing and holds a sorted set, or nothing once
            // a removal emptied it (Redis then removes nothing); `member` is a live string.
            let done = unsafe { (raw::api().ZsetRem)(self.raw, member.raw, &raw mut deleted) };
            if done == OK && deleted != 0 {
                removed += 1;
            }
        }
        removed
    }

    /// Deletes the key if its sorted set has no member left, as Redis deletes a set its
    /// commands empty (some servers' `ZsetRem` does it already). Not propagated: the command
    /// propagated for the removal empties and deletes it on a replica.
    fn drop_if_empty(&mut self) {
        // SAFETY: `self.raw` is open (the callers checked it is not null).
        self.kind = unsafe { (raw::api().KeyType)(self.raw) };
        if self.kind == KEYTYPE_ZSET && self.zcard() == 0 {
            // SAFETY: `self.raw` is open for writing.
            if unsafe { (raw::api().DeleteKey)(self.raw) } == OK {
                self.kind = KEYTYPE_EMPTY;
            }
        }
    }
}

const NOT_OPEN: &str = "ERR ratelimit: the key could not be opened";
const FAILED_WRITE: &str = "ERR ratelimit: a sorted-set write failed";

impl<'c> Cursor<'_, 'c> {
    /// The element it stands on, with its score; `None` past the end of the range.
    pub(crate) fn at(&self) -> Option<(Member<'c>, f64)> {
        if !self.on {
            return None;
        }
        let mut score: c_double = 0.0;
        // SAFETY: the key is open and its iterator stands on an element (`on`); Redis makes
        // a new string of the member, which `Member` frees (the context has no automatic
        // memory); `score` is a place for its score.
        let raw = unsafe { (raw::api().ZsetRangeCurrentElement)(self.key.raw, &raw mut score) };
        Member::new(self.key.ctx, raw).map(|m| (m, score))
    }

    /// The score of the element it stands on (the API reads it with its member, which is
    /// dropped).
    pub(crate) fn score(&self) -> Option<f64> {
        self.at().map(|(_, score)| score)
    }

    /// Whether it stands on an element (none: the range holds none, or the walk is past it).
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// Moves on to the next element of the range (walking back, the previous one): whether
    /// there is one.
    pub(crate) fn advance(&mut self) -> bool {
        if !self.on {
            return false;
        }
        let api = raw::api();
        let step = if self.rev {
            api.ZsetRangePrev
        } else {
            api.ZsetRangeNext
        };
        // SAFETY: the key is open and its iterator set up (`on`).
        self.on = unsafe { step(self.key.raw) } != 0
            // SAFETY: as above.
            && unsafe { (api.ZsetRangeEndReached)(self.key.raw) } == 0;
        self.on
    }

    /// Moves on by `n` elements: whether it stands on one then.
    pub(crate) fn skip(&mut self, n: u64) -> bool {
        for _ in 0..n {
            if !self.advance() {
                return false;
            }
        }
        self.on
    }

    /// The number of elements from where it stands to the end of the range.
    pub(crate) fn count(mut self) -> u64 {
        let mut n = 0;
        while self.on {
            n += 1;
            self.advance();
        }
        n
    }
}

impl Drop for Cursor<'_, '_> {
    fn drop(&mut self) {
        if self.started {
            // SAFETY: the key is open (not null: `started`), and its iterator is stopped
            // here, once, before anything else uses the key.
            unsafe { (raw::api().ZsetRangeStop)(self.key.raw) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds are propagated as the scripts write them in their commands.
    #[test]
    fn edges_read_as_the_commands_bounds() {
        let mut buf = [0u8; 22];
        assert_eq!(Edge::Unbounded.text(b"-inf", &mut buf), b"-inf");
        assert_eq!(
            Edge::Incl(1_795_960_743_806_109).text(b"+inf", &mut buf),
            b"1795960743806109"
        );
        assert_eq!(Edge::Excl(0).text(b"+inf", &mut buf), b"(0");
        assert_eq!(
            Edge::Excl(u64::MAX).text(b"+inf", &mut buf),
            b"(18446744073709551615"
        );
        assert_eq!(Edge::Excl(7).bound(f64::INFINITY), (7.0, 1));
        assert_eq!(
            Edge::Unbounded.bound(f64::NEG_INFINITY),
            (f64::NEG_INFINITY, 0)
        );
    }
}
