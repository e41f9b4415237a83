//! A key a command opens: read in place, written in place, its writes propagated as their
//! effects.

use std::ffi::{c_int, c_longlong};

use super::ctx::Ctx;
use super::raw::{
    self, Arg, Effect, KEYTYPE_EMPTY, KEYTYPE_STRING, KEYTYPE_ZSET, NO_EXPIRE, OK, READ, RawKey,
    WRITE,
};

/// What a key holds, as a decision reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    /// No such key.
    Absent,
    /// A string, with its expiry (ms since the epoch, `None` without one).
    String(&'a [u8], Option<u64>),
    /// A sorted set.
    SortedSet,
    /// Any other type.
    Other,
}

/// An open key, closed when dropped; opened by [`Ctx::open`] only, within a command.
#[derive(Debug)]
pub(crate) struct Key<'c> {
    pub(super) ctx: &'c Ctx,
    /// Null when Redis could not open the key.
    pub(super) raw: *mut RawKey,
    pub(super) name: Arg<'c>,
    /// Its type (`REDISMODULE_KEYTYPE_*`): when it was opened, then as this module's writes
    /// left it.
    pub(super) kind: c_int,
}

impl Ctx {
    /// Opens the key named by `name` (a command argument) for reading and writing.
    pub(crate) fn open<'k>(&'k self, name: Arg<'k>) -> Key<'k> {
        // SAFETY: `self.raw()` is the context of the command running, `name` one of its
        // arguments; the key is closed when the `Key` drops, within the command.
        let raw = unsafe { (raw::api().OpenKey)(self.raw(), name.raw(), READ | WRITE) };
        Key::new(self, raw, name)
    }

    /// Propagates `effect` (whose key is an argument of this command) to the replicas and
    /// the AOF.
    pub(super) fn replicate(&self, effect: Effect<'_>) {
        if self.gather(&effect) {
            return;
        }
        // SAFETY: `self.raw()` is the context of the command running, and the key of `effect`
        // an `Arg`, one of the command's arguments.
        unsafe { raw::replicate(self.raw(), effect) };
    }
}

impl<'c> Key<'c> {
    /// The key `raw` that `ctx` opened by the name `name`.
    pub(super) fn new(ctx: &'c Ctx, raw: *mut RawKey, name: Arg<'c>) -> Key<'c> {
        let kind = if raw.is_null() {
            KEYTYPE_EMPTY
        } else {
            // SAFETY: `raw` is a key open in the command running (`Ctx::open` opened it).
            unsafe { (raw::api().KeyType)(raw) }
        };
        Key {
            ctx,
            raw,
            name,
            kind,
        }
    }
}

impl Key<'_> {
    /// What the key holds now. A string is read in place (an integer-encoded one is decoded
    /// by Redis first, as its DMA access requires).
    pub(crate) fn read(&self) -> Value<'_> {
        if self.raw.is_null() {
            return Value::Absent;
        }
        let api = raw::api();
        match self.kind {
            KEYTYPE_EMPTY => Value::Absent,
            KEYTYPE_STRING => {
                let mut len = 0usize;
                // SAFETY: `self.raw` is open (not null, closed only on drop), a string.
                let ptr = unsafe { (api.StringDMA)(self.raw, &raw mut len, READ) };
                if ptr.is_null() {
                    return Value::Other;
                }
                // SAFETY: as above.
                let expire = unsafe { (api.GetAbsExpire)(self.raw) };
                // SAFETY: Redis gave `len` readable bytes of the value at `ptr`, which stay
                // there while the key is open and unwritten: the slice borrows this `Key`,
                // whose writes take `&mut self`, and the module neither writes the key by
                // another handle nor calls a command on it while a value it read is in use.
                let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
                let expire = (expire != NO_EXPIRE).then(|| u64::try_from(expire).unwrap_or(0));
                Value::String(bytes, expire)
            }
            KEYTYPE_ZSET => Value::SortedSet,
            _ => Value::Other,
        }
    }

    /// Sets the key to `value`, expiring at `expire_ms` (ms since the epoch), and propagates
    /// the same as `SET .. PXAT`.
    ///
    /// Written in place: the value is resized (`StringTruncate`, a no-op when its length is
    /// unchanged, as a bucket's mostly is) and its bytes copied (`StringDMA`), and the expiry
    /// set, with no key deleted and added again (which `StringSet` does) and nothing
    /// allocated when the key holds a string already. The value is kept as a raw string, so
    /// that the next read is in place too (an integer-encoded value, as a script's `SET`
    /// leaves it, is decoded on its first read).
    pub(crate) fn set(&mut self, value: &[u8], expire_ms: u64) -> Result<(), &'static str> {
        self.write(value, Some(expire_ms))
    }

    /// Sets the key, a string, to `value`, keeping its expiry (or its lack of one), as
    /// `SET .. KEEPTTL` and `INCRBY` do; propagated as `SET .. PXAT` with that expiry.
    pub(crate) fn set_keeping_expiry(&mut self, value: &[u8]) -> Result<(), &'static str> {
        if self.raw.is_null() || self.kind != KEYTYPE_STRING {
            return Err("ERR ratelimit: the key holds no string to update");
        }
        // SAFETY: `self.raw` is open (checked not null).
        let expire = unsafe { (raw::api().GetAbsExpire)(self.raw) };
        self.write(
            value,
            (expire != NO_EXPIRE).then(|| u64::try_from(expire).unwrap_or(0)),
        )
    }

    /// Sets the key, a string holding a count, to `value`, `by` more than it holds, keeping
    /// its expiry; propagates `INCRBY <key> <by>` (its effect: the replica holds the same
    /// count, and the same expiry, which the key had already).
    pub(crate) fn add(&mut self, value: &[u8], by: u64) -> Result<(), &'static str> {
        if self.raw.is_null() || self.kind != KEYTYPE_STRING {
            return Err("ERR ratelimit: the key holds no count to add to");
        }
        self.write_in_place(value)?;
        let mut digits = itoa_buf();
        let by = write_u64(&mut digits, by);
        self.ctx.replicate(Effect::IncrBy { key: self.name, by });
        Ok(())
    }

    /// Deletes the key, if it is there, and propagates `DEL`.
    pub(crate) fn delete(&mut self) -> Result<(), &'static str> {
        if self.raw.is_null() {
            return Err("ERR ratelimit: the key could not be opened");
        }
        if self.kind == KEYTYPE_EMPTY {
            return Ok(());
        }
        // SAFETY: `self.raw` is open (checked not null) for writing.
        if unsafe { (raw::api().DeleteKey)(self.raw) } != OK {
            return Err("ERR ratelimit: the key could not be deleted");
        }
        self.kind = KEYTYPE_EMPTY;
        self.ctx.replicate(Effect::Del { key: self.name });
        Ok(())
    }

    fn write(&mut self, value: &[u8], expire_ms: Option<u64>) -> Result<(), &'static str> {
        if self.raw.is_null() {
            return Err("ERR ratelimit: the key could not be opened");
        }
        let api = raw::api();
        if self.kind != KEYTYPE_EMPTY && self.kind != KEYTYPE_STRING {
            // Another type (what no script writes): replaced, as `SET` replaces it.
            // SAFETY: `self.raw` is open (checked not null) for writing.
            unsafe { (api.DeleteKey)(self.raw) };
        }
        self.write_in_place(value)?;
        let mut digits = itoa_buf();
        let expire_text = match expire_ms {
            Some(expire_ms) => {
                let expire = c_longlong::try_from(expire_ms).unwrap_or(c_longlong::MAX);
                // SAFETY: `self.raw` is open for writing, and holds a value now.
                if unsafe { (api.SetAbsExpire)(self.raw, expire) } != OK {
                    return Err("ERR ratelimit: the key's expiry could not be set");
                }
                Some(write_u64(&mut digits, expire_ms))
            }
            None => None,
        };
        self.ctx.replicate(Effect::Set {
            key: self.name,
            value,
            expire_ms: expire_text,
        });
        Ok(())
    }

    /// The key's value, a string, made `value` in place (resized, then its bytes copied).
    fn write_in_place(&mut self, value: &[u8]) -> Result<(), &'static str> {
        let api = raw::api();
        // SAFETY: `self.raw` is open for writing (every caller checked it is not null), and
        // holds a string or nothing (a string is made).
        if unsafe { (api.StringTruncate)(self.raw, value.len()) } != OK {
            return Err("ERR ratelimit: the key could not be written");
        }
        self.kind = KEYTYPE_STRING;
        let mut len = 0usize;
        // SAFETY: as above; the key is a string now.
        let ptr = unsafe { (api.StringDMA)(self.raw, &raw mut len, READ | WRITE) };
        if ptr.is_null() || len != value.len() {
            return Err("ERR ratelimit: the key could not be written");
        }
        // SAFETY: Redis gave `len` writable bytes of the key's value at `ptr`, which nothing
        // else touches while the command runs, and `value` has `len` bytes, elsewhere.
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len) };
        Ok(())
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: `self.raw` is open, and closed here once.
            unsafe { (raw::api().CloseKey)(self.raw) };
        }
    }
}

/// A buffer for a `u64`'s decimal digits.
const fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `v` in decimal, written at the end of `buf`.
fn write_u64(buf: &mut [u8; 20], v: u64) -> &[u8] {
    ratelimit_vocab::native::write_decimal(buf, v)
}
