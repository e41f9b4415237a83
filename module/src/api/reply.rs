//! The reply of a command the module called (`RedisModule_Call`: only `PUBLISH`), freed when
//! dropped.

use std::marker::PhantomData;

use super::ctx::Ctx;
use super::raw::{self, Arg, RawCallReply};

/// The reply of a command the module called ([`Ctx::publish`]), freed when dropped, within
/// the command that called it (`'c`: Redis frees it in that command's context).
#[derive(Debug)]
pub(crate) struct CallReply<'c> {
    /// Never null.
    raw: *mut RawCallReply,
    _ctx: PhantomData<&'c Ctx>,
}

impl Ctx {
    /// `PUBLISH <channel> <key>` on this node, not propagated (the channel's listeners are
    /// the limiter's instances, connected to the master). `None` when Redis refuses it.
    pub(crate) fn publish(&self, channel: &[u8], key: Arg<'_>) -> Option<CallReply<'_>> {
        // SAFETY: `self.raw()` is the context of the command running, `key` one of its
        // arguments.
        CallReply::new(unsafe { raw::publish(self.raw(), channel, key) })
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
}

impl Drop for CallReply<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.raw` is a reply of this command's call (not null), freed here once.
        unsafe { (raw::api().FreeCallReply)(self.raw) };
    }
}
