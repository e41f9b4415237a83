//! A command's run: the entry point Redis calls, which lends the command its arguments (an
//! `Arg`, of `raw`) and its context (its reply), each living only while Redis runs the
//! command. What the context opens and calls is `key`'s and `reply`'s (their `impl Ctx`
//! blocks), which read the context by [`Ctx::raw`].

use std::cell::RefCell;
use std::ffi::{CString, c_int, c_long, c_longlong};

use super::raw::{self, Arg, Effect, OK, RawCtx, RawString};

/// A command's body: what [`entry`] runs for one call of the command, with its context and
/// its arguments, lent for that call only (so that nothing keeps them past it).
pub(crate) trait Body {
    /// Runs the command and replies through `ctx`.
    fn run(ctx: &Ctx, args: &[Arg<'_>]);
}

/// The function Redis calls for the command whose body is `B` (a `RedisModuleCmdFunc`).
///
/// # Safety
/// Called by Redis only, for a command it runs: `ctx` that command's context, `argv` its
/// `argc` arguments.
pub(crate) unsafe extern "C" fn entry<B: Body>(
    ctx: *mut RawCtx,
    argv: *mut *mut RawString,
    argc: c_int,
) -> c_int {
    let n = usize::try_from(argc).unwrap_or(0);
    let args: &[Arg<'_>] = if argv.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: Redis passes a command `argc` valid arguments at `argv`, alive and unchanged
        // until the command returns (this function's contract), and the slice is lent to
        // `B::run` only; `Arg` is `repr(transparent)` over the pointer, so the array is one of
        // `Arg`s.
        unsafe { std::slice::from_raw_parts(argv.cast::<Arg<'_>>(), n) }
    };
    B::run(
        &Ctx {
            raw: ctx,
            gathered: RefCell::new(None),
        },
        args,
    );
    OK
}

/// One command's context: its reply, the keys it opens, the commands it calls (those two
/// written beside the key and the call's reply, in `key` and `reply`). Only [`entry`] makes
/// one, lent to the command's body for its run.
#[derive(Debug)]
pub(crate) struct Ctx {
    raw: *mut RawCtx,
    /// The writes of a `batch`, gathered to be propagated together when it ends
    /// ([`Ctx::gather_writes`]); `None`: each write is propagated as it is made.
    gathered: RefCell<Option<Gathered>>,
}

/// The script a batch's writes are propagated with
/// (`ratelimit_vocab::native::effects_script_body`), made once.
fn effects_script() -> &'static [u8] {
    static BODY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BODY.get_or_init(ratelimit_vocab::native::effects_script_body)
        .as_bytes()
}

/// Writes made and not propagated yet: the key of each (an argument of the command), and each
/// one's command and arguments as `ratelimit_vocab::native::push_effect` packs them.
#[derive(Debug)]
struct Gathered {
    keys: Vec<*mut RawString>,
    packed: Vec<u8>,
}

/// The most numbers one reply holds: `multi`'s, six per limit and the server time.
pub(crate) const MAX_REPLY_NUMBERS: usize = 6 * ratelimit_vocab::native::MAX_LIMITS + 1;

impl Ctx {
    /// From now until [`replicate_gathered`](Self::replicate_gathered), the writes of this
    /// command are gathered instead of each propagated as it is made.
    /// `calls`: how many calls the command decides (room is made for a write of each).
    pub(crate) fn gather_writes(&self, calls: usize) {
        *self.gathered.borrow_mut() = Some(Gathered {
            keys: Vec::with_capacity(calls),
            // A token bucket's write: `4;3:SET`, a value, `4:PXAT`, 13 digits: about 45 bytes.
            packed: Vec::with_capacity(calls.saturating_mul(48)),
        });
    }

    /// Gathers `effect`, if writes are being gathered: whether it did.
    pub(super) fn gather(&self, effect: &Effect<'_>) -> bool {
        let mut gathered = self.gathered.borrow_mut();
        let Some(g) = gathered.as_mut() else {
            return false;
        };
        g.keys.push(effect.key().raw());
        // SAFETY: the strings of an `Effect::Strings` are alive while it is (its maker's
        // contract: created in this command, not freed yet), and copied here.
        unsafe { effect.encode(&mut g.packed) };
        true
    }

    /// Propagates the writes gathered since [`gather_writes`](Self::gather_writes), and
    /// propagates each write as it is made again: one write as its own command; more as one
    /// `EVAL` of `ratelimit_vocab::native::EFFECTS_SCRIPT`, which replays them in order (one
    /// command looked up and four objects made, instead of a lookup and up to five objects a
    /// write); each as its own command should Redis refuse the `EVAL` (renamed away).
    pub(crate) fn replicate_gathered(&self) {
        let Some(g) = self.gathered.borrow_mut().take() else {
            return;
        };
        if g.keys.len() > 1
            // SAFETY: `self.raw` is the command's context; every key an argument of it
            // (`Effect` keys are `Arg`s).
            && unsafe {
                raw::replicate_script(
                    self.raw,
                    effects_script(),
                    &g.keys,
                    &g.packed,
                )
            }
        {
            return;
        }
        let writes = ratelimit_vocab::native::read_effects(&g.packed).unwrap_or_default();
        for (&key, (command, args)) in g.keys.iter().zip(writes) {
            // SAFETY: as above.
            unsafe { raw::replicate_fields(self.raw, key, command, &args) };
        }
    }

    /// The context as Redis passed it, for the wrappers in the other files of `api` (the keys
    /// it opens, the commands it calls): that of the command running, as only [`entry`] makes
    /// a `Ctx`.
    #[inline(always)]
    pub(super) fn raw(&self) -> *mut RawCtx {
        self.raw
    }

    /// Replies with `values` in decimal, separated by spaces, as one bulk string
    /// (`ratelimit_vocab::native::SEPARATOR`): copied as it is, where a status reply would be
    /// copied again and scanned for line breaks. At most [`MAX_REPLY_NUMBERS`] (more are an
    /// error reply, never a reply cut short).
    pub(crate) fn reply_numbers(&self, values: &[u64]) {
        if values.len() <= MAX_REPLY_NUMBERS {
            self.reply_packed::<{ MAX_REPLY_NUMBERS * 21 }>(values);
        } else {
            self.reply_error("ERR ratelimit: internal error (a reply of too many numbers)");
        }
    }

    /// [`reply_numbers`](Ctx::reply_numbers) of one decision's five numbers (every call of
    /// one algorithm), in a buffer that fits them: zeroing one sized for `multi` costs a
    /// tenth of such a decision's own work.
    pub(crate) fn reply_decision(&self, values: &[u64; 5]) {
        self.reply_packed::<{ 5 * 21 }>(values);
    }

    /// [`reply_numbers`](Ctx::reply_numbers) in a buffer of `B` bytes, which holds them.
    #[inline(always)]
    fn reply_packed<const B: usize>(&self, values: &[u64]) {
        let mut text = [0u8; B];
        let mut at = 0;
        for (i, &v) in values.iter().enumerate() {
            if i > 0 {
                if let Some(slot) = text.get_mut(at) {
                    *slot = ratelimit_vocab::native::SEPARATOR;
                }
                at += 1;
            }
            at = put_u64(&mut text, at, v);
        }
        let text = text.get(..at).unwrap_or(&[]);
        // SAFETY: `self.raw` is the context of the command running (only `entry` makes a
        // `Ctx`); Redis copies the `text.len()` bytes at `text`.
        unsafe { (raw::api().ReplyWithStringBuffer)(self.raw, text.as_ptr().cast(), text.len()) };
    }

    /// Replies with an integer.
    pub(crate) fn reply_integer(&self, value: u64) {
        let value = c_longlong::try_from(value).unwrap_or(c_longlong::MAX);
        // SAFETY: `self.raw` is the context of the command running.
        unsafe { (raw::api().ReplyWithLongLong)(self.raw, value) };
    }

    /// Starts an array reply of `len` elements: the next `len` replies are its elements.
    pub(crate) fn reply_array(&self, len: usize) {
        let len = c_long::try_from(len).unwrap_or(0);
        // SAFETY: `self.raw` is the context of the command running.
        unsafe { (raw::api().ReplyWithArray)(self.raw, len) };
    }

    /// Replies with an error: `message` starts with its code (`ERR ...`).
    pub(crate) fn reply_error(&self, message: &str) {
        let text = c_text(message, true);
        // SAFETY: `self.raw` is the context of the command running; `text` is NUL-terminated
        // and copied by Redis.
        unsafe { (raw::api().ReplyWithError)(self.raw, text.as_ptr()) };
    }

    /// Logs `message` at `warning` in the server's log.
    pub(crate) fn warn(&self, message: &str) {
        let message = c_text(message, false);
        // SAFETY: `self.raw` is the context of the command running.
        unsafe { raw::log(self.raw, c"warning", &message) };
    }
}

/// `message` as a C string, less its NUL bytes, and with `one_line` its line breaks (which
/// would end an error reply early).
pub(super) fn c_text(message: &str, one_line: bool) -> CString {
    let text: Vec<u8> = message
        .bytes()
        .filter(|&b| b != 0 && !(one_line && (b == b'\r' || b == b'\n')))
        .collect();
    CString::new(text).unwrap_or_default()
}

/// Writes `v` in decimal into `out` from `at`: where it ends. Nothing past `out`'s end.
fn put_u64(out: &mut [u8], at: usize, v: u64) -> usize {
    let mut digits = [0u8; 20];
    let digits = ratelimit_vocab::native::write_decimal(&mut digits, v);
    match out.get_mut(at..at + digits.len()) {
        Some(slots) => {
            slots.copy_from_slice(digits);
            at + digits.len()
        }
        None => at,
    }
}
