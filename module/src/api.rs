//! The part of the Redis module API this module calls, and the only unsafe code of the crate.
//!
//! Redis hands a module its API as a table of functions looked up by name: the first word of
//! the context `RedisModule_OnLoad` receives is `RedisModule_GetApi`, which fills a function
//! pointer given the function's name (what `redismodule.h`'s `RedisModule_Init` does in C).
//! [`Api::load`] looks up every function below once, at load; a server that lacks one
//! refuses the module with a message naming it, rather than crashing on a call.
//!
//! Written from `redismodule.h` of Redis 7.0 (the oldest server the library supports), with
//! no bindgen: the module needs a few dozen functions, and this way it builds with no C
//! toolchain and no libclang. The safe wrappers ([`Ctx`], [`Key`]) are what the rest of
//! the crate uses; every pointer they hold lives only while Redis runs one command.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_longlong, c_void};
use std::sync::OnceLock;

use crate::args::Keys;

/// `RedisModuleCtx`: opaque, only ever behind a pointer Redis passes.
#[repr(C)]
#[derive(Debug)]
pub struct RawCtx {
    _opaque: [u8; 0],
}
/// `RedisModuleString`: opaque, only ever behind a pointer Redis passes.
#[repr(C)]
#[derive(Debug)]
pub struct RawString {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawKey {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawCommand {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RawCallReply {
    _opaque: [u8; 0],
}

/// `REDISMODULE_OK`.
pub(crate) const OK: c_int = 0;
/// `REDISMODULE_ERR`.
pub(crate) const ERR: c_int = 1;
const APIVER_1: c_int = 1;
const READ: c_int = 1 << 0;
const WRITE: c_int = 1 << 1;
const KEYTYPE_EMPTY: c_int = 0;
const KEYTYPE_STRING: c_int = 1;
const KEYTYPE_ZSET: c_int = 5;
const NO_EXPIRE: c_longlong = -1;

/// `RedisModuleCmdFunc`.
pub(crate) type CommandFn =
    unsafe extern "C" fn(ctx: *mut RawCtx, argv: *mut *mut RawString, argc: c_int) -> c_int;

/// `RedisModuleCommandKeySpec` (7.0): where a command's keys are, so that Redis Cluster routes
/// it and checks its slots, and the ACL checks its keys.
#[repr(C)]
struct KeySpec {
    notes: *const c_char,
    flags: u64,
    begin_search_type: c_int,
    bs: [usize; 2],
    find_keys_type: c_int,
    fk: [c_int; 3],
}

#[repr(C)]
struct CommandInfoVersion {
    version: c_int,
    sizeof_historyentry: usize,
    sizeof_keyspec: usize,
    sizeof_arg: usize,
}

/// `RedisModuleCommandArg`, only for its size (no command declares its arguments).
#[repr(C)]
struct CommandArg {
    name: *const c_char,
    kind: c_int,
    key_spec_index: c_int,
    token: *const c_char,
    summary: *const c_char,
    since: *const c_char,
    flags: c_int,
    deprecated_since: *const c_char,
    subargs: *mut CommandArg,
    display_text: *const c_char,
}

#[repr(C)]
struct CommandInfo {
    version: *const CommandInfoVersion,
    summary: *const c_char,
    complexity: *const c_char,
    since: *const c_char,
    history: *mut c_void,
    tips: *const c_char,
    arity: c_int,
    key_specs: *mut KeySpec,
    args: *mut CommandArg,
}

const KSPEC_BS_INDEX: c_int = 2;
const KSPEC_FK_RANGE: c_int = 2;
const KSPEC_FK_KEYNUM: c_int = 3;
const KEY_RW: u64 = 1 << 1;
const KEY_ACCESS: u64 = 1 << 4;
const KEY_UPDATE: u64 = 1 << 5;

type GetApiFn = unsafe extern "C" fn(name: *const c_char, out: *mut c_void) -> c_int;

/// Declares the table of API functions and its loader: each field is looked up by its name
/// with the `RedisModule_` prefix.
macro_rules! api {
    ($($field:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        #[allow(non_snake_case)]
        struct Api {
            $($field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            Replicate: unsafe extern "C" fn(*mut RawCtx, *const c_char, *const c_char, ...) -> c_int,
            Log: unsafe extern "C" fn(*mut RawCtx, *const c_char, *const c_char, ...),
            Call: unsafe extern "C" fn(*mut RawCtx, *const c_char, *const c_char, ...) -> *mut RawCallReply,
        }

        impl Api {
            /// Looks up every function; `Err` names the first the server does not have.
            unsafe fn load(get: GetApiFn) -> Result<Api, &'static str> {
                Ok(Api {
                    $($field: unsafe {
                        lookup(get, concat!("RedisModule_", stringify!($field), "\0"))?
                    },)*
                    Replicate: unsafe { lookup(get, "RedisModule_Replicate\0")? },
                    Log: unsafe { lookup(get, "RedisModule_Log\0")? },
                    Call: unsafe { lookup(get, "RedisModule_Call\0")? },
                })
            }
        }
    };
}

api! {
    SetModuleAttribs: fn(*mut RawCtx, *const c_char, c_int, c_int);
    IsModuleNameBusy: fn(*const c_char) -> c_int;
    CreateCommand: fn(*mut RawCtx, *const c_char, CommandFn, *const c_char, c_int, c_int, c_int) -> c_int;
    GetCommand: fn(*mut RawCtx, *const c_char) -> *mut RawCommand;
    SetCommandInfo: fn(*mut RawCommand, *const CommandInfo) -> c_int;
    ReplyWithStringBuffer: fn(*mut RawCtx, *const c_char, usize) -> c_int;
    ReplyWithError: fn(*mut RawCtx, *const c_char) -> c_int;
    ReplyWithArray: fn(*mut RawCtx, std::ffi::c_long) -> c_int;
    ReplyWithLongLong: fn(*mut RawCtx, c_longlong) -> c_int;
    StringPtrLen: fn(*const RawString, *mut usize) -> *const c_char;
    OpenKey: fn(*mut RawCtx, *mut RawString, c_int) -> *mut RawKey;
    CloseKey: fn(*mut RawKey);
    KeyType: fn(*mut RawKey) -> c_int;
    StringDMA: fn(*mut RawKey, *mut usize, c_int) -> *mut c_char;
    StringTruncate: fn(*mut RawKey, usize) -> c_int;
    DeleteKey: fn(*mut RawKey) -> c_int;
    GetAbsExpire: fn(*mut RawKey) -> c_longlong;
    SetAbsExpire: fn(*mut RawKey, c_longlong) -> c_int;
    CreateString: fn(*mut RawCtx, *const c_char, usize) -> *mut RawString;
    FreeString: fn(*mut RawCtx, *mut RawString);
    CallReplyType: fn(*mut RawCallReply) -> c_int;
    CallReplyInteger: fn(*mut RawCallReply) -> c_longlong;
    CallReplyLength: fn(*mut RawCallReply) -> usize;
    CallReplyArrayElement: fn(*mut RawCallReply, usize) -> *mut RawCallReply;
    CallReplyStringPtr: fn(*mut RawCallReply, *mut usize) -> *const c_char;
    FreeCallReply: fn(*mut RawCallReply);
}

/// One API function by its NUL-terminated name.
unsafe fn lookup<F: Copy>(get: GetApiFn, name: &'static str) -> Result<F, &'static str> {
    debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    let mut slot: *mut c_void = std::ptr::null_mut();
    let found = unsafe { get(name.as_ptr().cast(), (&raw mut slot).cast()) };
    if found != OK || slot.is_null() {
        return Err(name.trim_end_matches('\0'));
    }
    // SAFETY: Redis filled `slot` with the function of that name, whose C signature `F`
    // mirrors (redismodule.h), and a function pointer has the size of a data pointer here.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&slot) })
}

static API: OnceLock<Api> = OnceLock::new();

fn api() -> &'static Api {
    // Commands are registered only after the table is set, so a command always finds it.
    match API.get() {
        Some(api) => api,
        None => std::process::abort(),
    }
}

/// What `RedisModule_OnLoad` does, in order: the API, the module's name and version, then
/// `register` (which creates the commands). Returns `REDISMODULE_OK` or `REDISMODULE_ERR`.
///
/// # Safety
/// `ctx` is the context Redis passed to `RedisModule_OnLoad`.
unsafe fn on_load(
    ctx: *mut RawCtx,
    name: &CStr,
    version: c_int,
    register: impl FnOnce(&Registrar) -> Result<(), String>,
) -> c_int {
    // SAFETY: the first word of the load context is `RedisModule_GetApi` (redismodule.h).
    let get: GetApiFn = unsafe { *ctx.cast::<GetApiFn>() };
    let loaded = match unsafe { Api::load(get) } {
        Ok(api) => api,
        Err(_) => return ERR,
    };
    let api = API.get_or_init(|| loaded);
    unsafe {
        if (api.IsModuleNameBusy)(name.as_ptr()) != 0 {
            return ERR;
        }
        (api.SetModuleAttribs)(ctx, name.as_ptr(), version, APIVER_1);
    }
    let registrar = Registrar { ctx };
    match register(&registrar) {
        Ok(()) => OK,
        Err(why) => {
            registrar.warn(&why);
            ERR
        }
    }
}

/// Called by Redis when it loads the module: the API, the module's name and version, then
/// the commands ([`crate::register`]).
///
/// # Safety
/// Called by Redis only, with the load context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut RawCtx,
    _argv: *mut *mut RawString,
    _argc: c_int,
) -> c_int {
    let Ok(name) = std::ffi::CString::new(ratelimit_vocab::native::MODULE_NAME) else {
        return ERR;
    };
    // SAFETY: `ctx` is the load context Redis passed.
    unsafe { on_load(ctx, &name, crate::MODULE_VERSION, crate::register) }
}

/// Creates the module's commands, at load.
#[derive(Debug)]
pub(crate) struct Registrar {
    ctx: *mut RawCtx,
}

/// A command to create.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command<'a> {
    /// Where its keys are (its key spec).
    pub(crate) keys: Keys,
    /// The command's name, NUL-terminated.
    pub(crate) name: &'a CStr,
    /// Redis's command flags (`"write deny-oom"`).
    pub(crate) flags: &'a CStr,
    /// One line for `COMMAND DOCS`.
    pub(crate) summary: &'a CStr,
}

impl Registrar {
    /// Creates `command`, run by `run`, with its key spec: its key (argument 1), or the
    /// keys `numkeys` (argument 1) counts, each read and written.
    pub(crate) fn command(&self, command: Command<'_>, run: CommandFn) -> Result<(), String> {
        let api = api();
        let name = command.name.to_string_lossy();
        // No legacy key range (0, 0, 0, as `FCALL`): the key spec says where the keys are.
        let created = unsafe {
            (api.CreateCommand)(
                self.ctx,
                command.name.as_ptr(),
                run,
                command.flags.as_ptr(),
                0,
                0,
                0,
            )
        };
        if created != OK {
            return Err(format!("could not create the command {name}"));
        }
        let handle = unsafe { (api.GetCommand)(self.ctx, command.name.as_ptr()) };
        if handle.is_null() {
            return Err(format!("could not find the command {name} just created"));
        }
        let version = CommandInfoVersion {
            version: 1,
            sizeof_historyentry: 2 * size_of::<*const c_char>(),
            sizeof_keyspec: size_of::<KeySpec>(),
            sizeof_arg: size_of::<CommandArg>(),
        };
        let mut specs = [
            KeySpec {
                notes: std::ptr::null(),
                flags: KEY_RW | KEY_ACCESS | KEY_UPDATE,
                begin_search_type: KSPEC_BS_INDEX,
                bs: [1, 0],
                find_keys_type: match command.keys {
                    Keys::One => KSPEC_FK_RANGE,
                    Keys::Counted => KSPEC_FK_KEYNUM,
                },
                fk: match command.keys {
                    // The one key: last key 0 after it, step 1, no limit.
                    Keys::One => [0, 1, 0],
                    // keynumidx 0 (argument 1 itself), first key 1 after it, step 1.
                    Keys::Counted => [0, 1, 1],
                },
            },
            // The list ends with a zeroed spec.
            KeySpec {
                notes: std::ptr::null(),
                flags: 0,
                begin_search_type: 0,
                bs: [0, 0],
                find_keys_type: 0,
                fk: [0, 0, 0],
            },
        ];
        let info = CommandInfo {
            version: &raw const version,
            summary: command.summary.as_ptr(),
            complexity: std::ptr::null(),
            since: std::ptr::null(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            // Any number of arguments: the command answers a call without its key with an
            // error of its own, after the ACL has checked that this client may call it
            // (Redis checks the arity first), which the limiter's probe reads.
            arity: -1,
            key_specs: specs.as_mut_ptr(),
            args: std::ptr::null_mut(),
        };
        if unsafe { (api.SetCommandInfo)(handle, &raw const info) } != OK {
            return Err(format!("could not declare the keys of {name}"));
        }
        Ok(())
    }

    /// Logs `message` at `warning` in the server's log.
    pub(crate) fn warn(&self, message: &str) {
        log(self.ctx, c"warning", message);
    }
}

fn log(ctx: *mut RawCtx, level: &CStr, message: &str) {
    let mut text = Vec::with_capacity(message.len() + 1);
    text.extend(message.bytes().filter(|&b| b != 0));
    text.push(0);
    unsafe { (api().Log)(ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
}

/// One command's context: its arguments, its reply, and the keys it opens.
#[derive(Debug)]
pub(crate) struct Ctx {
    raw: *mut RawCtx,
}

/// A command's argument as bytes, borrowed from Redis for the command's run.
pub(crate) fn arg_bytes<'a>(arg: *mut RawString) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = unsafe { (api().StringPtrLen)(arg, &raw mut len) };
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis keeps the argument alive, unchanged, while the command runs.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// The arguments of a command, borrowed for its run: `argv` and `argc` must be what Redis
/// passed to the command (the commands' entry points are the only callers).
pub(crate) fn args<'a>(argv: *mut *mut RawString, argc: c_int) -> &'a [*mut RawString] {
    let n = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() || n == 0 {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(argv, n) }
}

impl Ctx {
    /// The context Redis passed to a command.
    pub(crate) fn new(raw: *mut RawCtx) -> Ctx {
        Ctx { raw }
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
        unsafe { (api().ReplyWithStringBuffer)(self.raw, text.as_ptr().cast(), text.len()) };
    }

    /// Calls `command` on the key `key` (a command argument) followed by `args`, as a client
    /// would, but on this node only and without the ACL (the command's own keys were checked);
    /// with `replicate`, the call is propagated as it is to the replicas and the AOF (a call
    /// whose arguments are its effect: absolute scores and instants). `None` when Redis
    /// refuses the call (an unknown command, a wrong type).
    pub(crate) fn call(
        &self,
        command: &CStr,
        key: *mut RawString,
        args: &[&[u8]],
        replicate: bool,
    ) -> Option<CallReply> {
        let api = api();
        let mut strings: Vec<*mut RawString> = args
            .iter()
            .map(|a| unsafe { (api.CreateString)(self.raw, a.as_ptr().cast::<c_char>(), a.len()) })
            .collect();
        let format = if replicate { c"!sv" } else { c"sv" };
        let raw = unsafe {
            (api.Call)(
                self.raw,
                command.as_ptr(),
                format.as_ptr(),
                key,
                strings.as_mut_ptr(),
                strings.len(),
            )
        };
        for string in strings {
            unsafe { (api.FreeString)(self.raw, string) };
        }
        (!raw.is_null()).then_some(CallReply { raw })
    }

    /// `PUBLISH <channel> <key>` on this node, not propagated (the channel's listeners are
    /// the limiter's instances, connected to the master). `None` when Redis refuses it.
    pub(crate) fn publish(&self, channel: &[u8], key: *mut RawString) -> Option<CallReply> {
        let raw = unsafe {
            (api().Call)(
                self.raw,
                c"PUBLISH".as_ptr(),
                c"bs".as_ptr(),
                channel.as_ptr().cast::<c_char>(),
                channel.len(),
                key,
            )
        };
        (!raw.is_null()).then_some(CallReply { raw })
    }

    /// Replies with an integer.
    pub(crate) fn reply_integer(&self, value: u64) {
        let value = c_longlong::try_from(value).unwrap_or(c_longlong::MAX);
        unsafe { (api().ReplyWithLongLong)(self.raw, value) };
    }

    /// Starts an array reply of `len` elements: the next `len` replies are its elements.
    pub(crate) fn reply_array(&self, len: usize) {
        let len = std::ffi::c_long::try_from(len).unwrap_or(0);
        unsafe { (api().ReplyWithArray)(self.raw, len) };
    }

    /// Replies with an error: `message` starts with its code (`ERR ...`).
    pub(crate) fn reply_error(&self, message: &str) {
        let mut text = Vec::with_capacity(message.len() + 1);
        text.extend(
            message
                .bytes()
                .filter(|&b| b != 0 && b != b'\r' && b != b'\n'),
        );
        text.push(0);
        unsafe { (api().ReplyWithError)(self.raw, text.as_ptr().cast()) };
    }

    /// Logs `message` at `warning` in the server's log.
    pub(crate) fn warn(&self, message: &str) {
        log(self.raw, c"warning", message);
    }

    /// Opens the key named by `name` (a command argument) for reading and writing.
    pub(crate) fn open(&self, name: *mut RawString) -> Key<'_> {
        let api = api();
        let raw = unsafe { (api.OpenKey)(self.raw, name, READ | WRITE) };
        let kind = if raw.is_null() {
            KEYTYPE_EMPTY
        } else {
            unsafe { (api.KeyType)(raw) }
        };
        Key {
            ctx: self,
            raw,
            name,
            kind,
        }
    }

    /// Propagates `SET <key> <value> PXAT <expire_ms>` (without an expiry: `SET <key>
    /// <value>`) to the replicas and the AOF: the effect of a decision, never the command, so
    /// that a replica or a restart from the AOF holds what this server holds whatever its
    /// clock says when it replays it.
    fn replicate_set(&self, key: *mut RawString, value: &[u8], expire_ms: Option<&[u8]>) {
        let (value_ptr, value_len) = (value.as_ptr().cast::<c_char>(), value.len());
        unsafe {
            match expire_ms {
                Some(expire_ms) => (api().Replicate)(
                    self.raw,
                    c"SET".as_ptr(),
                    c"sbcb".as_ptr(),
                    key,
                    value_ptr,
                    value_len,
                    c"PXAT".as_ptr(),
                    expire_ms.as_ptr().cast::<c_char>(),
                    expire_ms.len(),
                ),
                None => (api().Replicate)(
                    self.raw,
                    c"SET".as_ptr(),
                    c"sb".as_ptr(),
                    key,
                    value_ptr,
                    value_len,
                ),
            }
        };
    }

    /// Propagates `DEL <key>`.
    fn replicate_del(&self, key: *mut RawString) {
        unsafe { (api().Replicate)(self.raw, c"DEL".as_ptr(), c"s".as_ptr(), key) };
    }
}

/// The most numbers one reply holds: `multi`'s, six per limit and the server time.
pub(crate) const MAX_REPLY_NUMBERS: usize = 6 * ratelimit_vocab::native::MAX_LIMITS + 1;

/// `REDISMODULE_REPLY_*`: the kinds of reply a call returns.
const REPLY_STRING: c_int = 0;
const REPLY_INTEGER: c_int = 2;
const REPLY_ARRAY: c_int = 3;

/// The reply of a command the module called ([`Ctx::call`]), freed when dropped.
#[derive(Debug)]
pub(crate) struct CallReply {
    raw: *mut RawCallReply,
}

/// An element of a [`CallReply`]'s array, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Element<'r> {
    raw: *mut RawCallReply,
    _reply: std::marker::PhantomData<&'r CallReply>,
}

impl CallReply {
    /// The reply as an element, to read it.
    pub(crate) fn get(&self) -> Element<'_> {
        Element {
            raw: self.raw,
            _reply: std::marker::PhantomData,
        }
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            unsafe { (api().FreeCallReply)(self.raw) };
        }
    }
}

impl<'r> Element<'r> {
    /// An integer reply's value.
    pub(crate) fn integer(self) -> Option<i64> {
        if self.raw.is_null() || unsafe { (api().CallReplyType)(self.raw) } != REPLY_INTEGER {
            return None;
        }
        Some(unsafe { (api().CallReplyInteger)(self.raw) })
    }

    /// An array reply's element `i`.
    pub(crate) fn at(self, i: usize) -> Option<Element<'r>> {
        if self.raw.is_null() || unsafe { (api().CallReplyType)(self.raw) } != REPLY_ARRAY {
            return None;
        }
        if i >= unsafe { (api().CallReplyLength)(self.raw) } {
            return None;
        }
        let raw = unsafe { (api().CallReplyArrayElement)(self.raw, i) };
        (!raw.is_null()).then_some(Element {
            raw,
            _reply: std::marker::PhantomData,
        })
    }

    /// A string reply's bytes.
    pub(crate) fn bytes(self) -> Option<&'r [u8]> {
        if self.raw.is_null() || unsafe { (api().CallReplyType)(self.raw) } != REPLY_STRING {
            return None;
        }
        let mut len = 0usize;
        let ptr = unsafe { (api().CallReplyStringPtr)(self.raw, &raw mut len) };
        // SAFETY: the bytes live as long as the reply, which `'r` borrows.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}

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

/// An open key, closed when dropped.
#[derive(Debug)]
pub(crate) struct Key<'c> {
    ctx: &'c Ctx,
    raw: *mut RawKey,
    name: *mut RawString,
    /// Its type when it was opened (`REDISMODULE_KEYTYPE_*`).
    kind: c_int,
}

impl Key<'_> {
    /// What the key holds now. A string is read in place (an integer-encoded one is decoded
    /// by Redis first, as its DMA access requires).
    pub(crate) fn read(&self) -> Value<'_> {
        if self.raw.is_null() {
            return Value::Absent;
        }
        let api = api();
        match self.kind {
            KEYTYPE_EMPTY => Value::Absent,
            KEYTYPE_STRING => {
                let mut len = 0usize;
                let ptr = unsafe { (api.StringDMA)(self.raw, &raw mut len, READ) };
                if ptr.is_null() {
                    return Value::Other;
                }
                let expire = unsafe { (api.GetAbsExpire)(self.raw) };
                // SAFETY: the key stays open and unwritten while the slice is used (it is
                // dropped before any write: `set` takes `&mut self`).
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
        let expire = unsafe { (api().GetAbsExpire)(self.raw) };
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
        unsafe {
            (api().Replicate)(
                self.ctx.raw,
                c"INCRBY".as_ptr(),
                c"sb".as_ptr(),
                self.name,
                by.as_ptr().cast::<c_char>(),
                by.len(),
            )
        };
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
        if unsafe { (api().DeleteKey)(self.raw) } != OK {
            return Err("ERR ratelimit: the key could not be deleted");
        }
        self.kind = KEYTYPE_EMPTY;
        self.ctx.replicate_del(self.name);
        Ok(())
    }

    fn write(&mut self, value: &[u8], expire_ms: Option<u64>) -> Result<(), &'static str> {
        if self.raw.is_null() {
            return Err("ERR ratelimit: the key could not be opened");
        }
        let api = api();
        if self.kind != KEYTYPE_EMPTY && self.kind != KEYTYPE_STRING {
            // Another type (what no script writes): replaced, as `SET` replaces it.
            unsafe { (api.DeleteKey)(self.raw) };
        }
        self.write_in_place(value)?;
        let mut digits = itoa_buf();
        let expire_text = match expire_ms {
            Some(expire_ms) => {
                let expire = c_longlong::try_from(expire_ms).unwrap_or(c_longlong::MAX);
                if unsafe { (api.SetAbsExpire)(self.raw, expire) } != OK {
                    return Err("ERR ratelimit: the key's expiry could not be set");
                }
                Some(write_u64(&mut digits, expire_ms))
            }
            None => None,
        };
        self.ctx.replicate_set(self.name, value, expire_text);
        Ok(())
    }
}

impl Key<'_> {
    /// The key's value, a string, made `value` in place (resized, then its bytes copied).
    fn write_in_place(&mut self, value: &[u8]) -> Result<(), &'static str> {
        let api = api();
        if unsafe { (api.StringTruncate)(self.raw, value.len()) } != OK {
            return Err("ERR ratelimit: the key could not be written");
        }
        self.kind = KEYTYPE_STRING;
        let mut len = 0usize;
        let ptr = unsafe { (api.StringDMA)(self.raw, &raw mut len, READ | WRITE) };
        if ptr.is_null() || len != value.len() {
            return Err("ERR ratelimit: the key could not be written");
        }
        // SAFETY: Redis gave `len` writable bytes of the key's value, which nothing else
        // touches while the command runs.
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len) };
        Ok(())
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            unsafe { (api().CloseKey)(self.raw) };
        }
    }
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

/// A buffer for a `u64`'s decimal digits.
pub(crate) const fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `v` in decimal, written at the end of `buf`.
pub(crate) fn write_u64(buf: &mut [u8; 20], v: u64) -> &[u8] {
    ratelimit_vocab::native::write_decimal(buf, v)
}
