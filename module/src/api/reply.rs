//! The reply of a command the module called (`RedisModule_Call`), read, then freed.

use std::ffi::{CStr, c_char};
use std::marker::PhantomData;

use super::ctx::Ctx;
use super::raw::{
    self, Arg, Called, REPLY_ARRAY, REPLY_INTEGER, REPLY_STRING, RawCallReply, RawString,
};

/// The reply of a command the module called ([`Ctx::call`]), freed when dropped, within the
/// command that called it (`'c`: Redis frees it in that command's context).
#[derive(Debug)]
pub(crate) struct CallReply<'c> {
    /// Never null.
    raw: *mut RawCallReply,
    _ctx: PhantomData<&'c Ctx>,
}

/// An element of a [`CallReply`]'s array, or the reply itself, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Element<'r> {
    /// Never null.
    raw: *mut RawCallReply,
    _reply: PhantomData<&'r ()>,
}

impl Ctx {
    /// Calls `command` on the key `key` (a command argument) followed by `args`, as a client
    /// would, but on this node only and without the ACL (the command's own keys were checked);
    /// with `replicate`, the call is propagated as it is to the replicas and the AOF (a call
    /// whose arguments are its effect: absolute scores and instants). `None` when Redis
    /// refuses the call (an unknown command, a wrong type).
    pub(crate) fn call(
        &self,
        command: &CStr,
        key: Arg<'_>,
        args: &[&[u8]],
        replicate: bool,
    ) -> Option<CallReply<'_>> {
        let api = raw::api();
        let strings: Vec<*mut RawString> = args
            .iter()
            .map(|a| {
                // SAFETY: `self.raw()` is the context of the command running; Redis copies the
                // `a.len()` bytes at `a` into a new string, freed below.
                unsafe { (api.CreateString)(self.raw(), a.as_ptr().cast::<c_char>(), a.len()) }
            })
            .collect();
        let called = Called::OnKey {
            command,
            key,
            args: &strings,
            propagate: replicate,
        };
        // SAFETY: `self.raw()` is the context of the command running, `key` one of its
        // arguments, and `strings` were created in it just above.
        let reply = unsafe { raw::call(self.raw(), called) };
        for string in strings {
            // SAFETY: created above in this context, freed once; the call took its own
            // references to what it keeps.
            unsafe { (api.FreeString)(self.raw(), string) };
        }
        CallReply::new(reply)
    }

    /// `PUBLISH <channel> <key>` on this node, not propagated (the channel's listeners are
    /// the limiter's instances, connected to the master). `None` when Redis refuses it.
    pub(crate) fn publish(&self, channel: &[u8], key: Arg<'_>) -> Option<CallReply<'_>> {
        let called = Called::Publish {
            channel,
            message: key,
        };
        // SAFETY: `self.raw()` is the context of the command running, `key` one of its
        // arguments.
        CallReply::new(unsafe { raw::call(self.raw(), called) })
    }
}

impl CallReply<'_> {
    /// The reply `raw` returned, `None` when it is null (Redis refused the call).
    pub(super) fn new(raw: *mut RawCallReply) -> Option<Self> {
        (!raw.is_null()).then_some(CallReply {
            raw,
            _ctx: PhantomData,
        })
    }

    /// The reply as an element, to read it.
    pub(crate) fn get(&self) -> Element<'_> {
        Element {
            raw: self.raw,
            _reply: PhantomData,
        }
    }
}

impl Drop for CallReply<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.raw` is a reply of this command's call (not null), freed here once;
        // its elements, which borrow it, are gone.
        unsafe { (raw::api().FreeCallReply)(self.raw) };
    }
}

impl<'r> Element<'r> {
    /// Its type (`REDISMODULE_REPLY_*`).
    fn kind(self) -> std::ffi::c_int {
        // SAFETY: `self.raw` is a reply, or an element of one, alive for `'r` (not null).
        unsafe { (raw::api().CallReplyType)(self.raw) }
    }

    /// An integer reply's value.
    pub(crate) fn integer(self) -> Option<i64> {
        if self.kind() != REPLY_INTEGER {
            return None;
        }
        // SAFETY: `self.raw` is alive for `'r`, an integer reply.
        Some(unsafe { (raw::api().CallReplyInteger)(self.raw) })
    }

    /// An array reply's element `i`.
    pub(crate) fn at(self, i: usize) -> Option<Element<'r>> {
        if self.kind() != REPLY_ARRAY {
            return None;
        }
        // SAFETY: `self.raw` is alive for `'r`, an array reply.
        if i >= unsafe { (raw::api().CallReplyLength)(self.raw) } {
            return None;
        }
        // SAFETY: as above, and `i` is within its length; the element lives as long as the
        // reply it belongs to (`'r`).
        let raw = unsafe { (raw::api().CallReplyArrayElement)(self.raw, i) };
        (!raw.is_null()).then_some(Element {
            raw,
            _reply: PhantomData,
        })
    }

    /// A string reply's bytes.
    pub(crate) fn bytes(self) -> Option<&'r [u8]> {
        if self.kind() != REPLY_STRING {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: `self.raw` is alive for `'r`, a string reply; `len` is a place for its
        // length.
        let ptr = unsafe { (raw::api().CallReplyStringPtr)(self.raw, &raw mut len) };
        // SAFETY: the reply's `len` bytes at `ptr` live, unchanged, as long as the reply,
        // which `'r` borrows.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}
