//! The C side of the module API: the types, constants and structs of `redismodule.h` that the
//! module uses, the table of API functions looked up at load, and one typed wrapper for each
//! variadic function (its format strings written here only, each beside the arguments it
//! describes). The safe wrappers are the other files of `api`.
//!
//! Written from `redismodule.h` of Redis 7.0 (the oldest server the library supports), with
//! no bindgen: the module needs a few dozen functions, and this way it builds with no C
//! toolchain and no libclang. The structs the module hands Redis are checked, when this
//! compiles, against the sizes and alignments that header gives them on x86_64.

use std::ffi::{CStr, c_char, c_double, c_int, c_long, c_longlong, c_void};
use std::marker::PhantomData;
use std::sync::OnceLock;

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
/// `RedisModuleKey`: opaque.
#[repr(C)]
pub(super) struct RawKey {
    _opaque: [u8; 0],
}
/// `RedisModuleCommand`: opaque.
#[repr(C)]
pub(super) struct RawCommand {
    _opaque: [u8; 0],
}
/// `RedisModuleCallReply`: opaque.
#[repr(C)]
pub(super) struct RawCallReply {
    _opaque: [u8; 0],
}

/// `REDISMODULE_OK`.
pub(crate) const OK: c_int = 0;
/// `REDISMODULE_ERR`.
pub(crate) const ERR: c_int = 1;
pub(super) const APIVER_1: c_int = 1;
/// `REDISMODULE_READ`.
pub(super) const READ: c_int = 1 << 0;
/// `REDISMODULE_WRITE`.
pub(super) const WRITE: c_int = 1 << 1;
pub(super) const KEYTYPE_EMPTY: c_int = 0;
pub(super) const KEYTYPE_STRING: c_int = 1;
pub(super) const KEYTYPE_ZSET: c_int = 5;
/// `REDISMODULE_NO_EXPIRE`.
pub(super) const NO_EXPIRE: c_longlong = -1;
/// `REDISMODULE_ZADD_ADDED` and `REDISMODULE_ZADD_UPDATED`: what `ZsetAdd` reports it did (the
/// member added, or its score changed), in the flags it writes back.
pub(super) const ZADD_ADDED: c_int = 1 << 2;
pub(super) const ZADD_UPDATED: c_int = 1 << 3;

/// `RedisModuleCmdFunc`.
pub(crate) type CommandFn =
    unsafe extern "C" fn(ctx: *mut RawCtx, argv: *mut *mut RawString, argc: c_int) -> c_int;

/// `RedisModuleCommandKeySpec` (7.0): where a command's keys are, so that Redis Cluster routes
/// it and checks its slots, and the ACL checks its keys.
#[repr(C)]
pub(super) struct KeySpec {
    pub(super) notes: *const c_char,
    pub(super) flags: u64,
    pub(super) begin_search_type: c_int,
    pub(super) bs: BeginSearch,
    pub(super) find_keys_type: c_int,
    /// `fk`: a union of three structs of three `int`s each (`range`: lastkey, keystep,
    /// limit; `keynum`: keynumidx, firstkey, keystep), laid out alike.
    pub(super) fk: [c_int; 3],
}

/// `bs`, the union of a key spec's begin-search step: `index` (`int pos`) or `keyword`
/// (`const char *keyword; int startfrom`). Only `index` is ever written.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) union BeginSearch {
    pub(super) index: c_int,
    keyword: BeginSearchKeyword,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct BeginSearchKeyword {
    keyword: *const c_char,
    startfrom: c_int,
}

/// `RedisModuleCommandInfoVersion`: which fields of [`CommandInfo`] the module knows, and the
/// sizes of the arrays' elements, by which Redis walks them.
#[repr(C)]
pub(super) struct CommandInfoVersion {
    pub(super) version: c_int,
    pub(super) sizeof_historyentry: usize,
    pub(super) sizeof_keyspec: usize,
    pub(super) sizeof_arg: usize,
}

/// `RedisModuleCommandHistoryEntry`, only for its size (no command has a history).
#[repr(C)]
pub(super) struct CommandHistoryEntry {
    since: *const c_char,
    changes: *const c_char,
}

/// `RedisModuleCommandArg`, only for its size (no command declares its arguments).
#[repr(C)]
pub(super) struct CommandArg {
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

/// `RedisModuleCommandInfo` (version 1, Redis 7.0).
#[repr(C)]
pub(super) struct CommandInfo {
    pub(super) version: *const CommandInfoVersion,
    pub(super) summary: *const c_char,
    pub(super) complexity: *const c_char,
    pub(super) since: *const c_char,
    pub(super) history: *mut CommandHistoryEntry,
    pub(super) tips: *const c_char,
    pub(super) arity: c_int,
    pub(super) key_specs: *mut KeySpec,
    pub(super) args: *mut CommandArg,
}

// The layouts `redismodule.h` (Redis 7.0) gives these structs on x86_64 (LP64: pointers,
// `size_t` and `uint64_t` 8 bytes aligned to 8, `int` and the enums 4 aligned to 4), from its
// field lists: a field that differed here would have Redis read the module's structs wrong,
// and it walks the arrays by the sizes `CommandInfoVersion` gives.
// - `RedisModuleCommandKeySpec`: notes 0..8, flags 8..16, begin_search_type 16..20 (4 bytes of
//   padding), the union bs 24..40 (its larger member a pointer and an int: 16, aligned to 8),
//   find_keys_type 40..44, the union fk 44..56 (three ints): 56, aligned to 8.
// - `RedisModuleCommandInfoVersion`: version 0..4 (4 of padding), three `size_t` 8..32: 32.
// - `RedisModuleCommandHistoryEntry`: two pointers: 16.
// - `RedisModuleCommandArg`: name 0..8, type 8..12, key_spec_index 12..16, token, summary and
//   since 16..40, flags 40..44 (4 of padding), deprecated_since, subargs and display_text
//   48..72: 72.
// - `RedisModuleCommandInfo`: six pointers 0..48, arity 48..52 (4 of padding), key_specs and
//   args 56..72: 72.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<BeginSearch>() == 16 && align_of::<BeginSearch>() == 8);
    assert!(size_of::<KeySpec>() == 56 && align_of::<KeySpec>() == 8);
    assert!(size_of::<CommandInfoVersion>() == 32 && align_of::<CommandInfoVersion>() == 8);
    assert!(size_of::<CommandHistoryEntry>() == 16 && align_of::<CommandHistoryEntry>() == 8);
    assert!(size_of::<CommandArg>() == 72 && align_of::<CommandArg>() == 8);
    assert!(size_of::<CommandInfo>() == 72 && align_of::<CommandInfo>() == 8);
};

pub(super) const KSPEC_BS_INDEX: c_int = 2;
pub(super) const KSPEC_FK_RANGE: c_int = 2;
pub(super) const KSPEC_FK_KEYNUM: c_int = 3;
pub(super) const KEY_RW: u64 = 1 << 1;
pub(super) const KEY_ACCESS: u64 = 1 << 4;
pub(super) const KEY_UPDATE: u64 = 1 << 5;

/// `RedisModule_GetApi`: fills `out` with the API function named `name`.
pub(super) type GetApiFn = unsafe extern "C" fn(name: *const c_char, out: *mut c_void) -> c_int;

/// Declares the table of API functions and its loader: each field is looked up by its name
/// with the `RedisModule_` prefix. The variadic ones are private to this file: they are
/// called through their typed wrappers only ([`publish`], [`replicate`], [`log`]).
macro_rules! api {
    ($($field:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        #[allow(non_snake_case)]
        pub(super) struct Api {
            $(pub(super) $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            Replicate: unsafe extern "C" fn(*mut RawCtx, *const c_char, *const c_char, ...) -> c_int,
            Log: unsafe extern "C" fn(*mut RawCtx, *const c_char, *const c_char, ...),
            Call: unsafe extern "C" fn(*mut RawCtx, *const c_char, *const c_char, ...) -> *mut RawCallReply,
        }

        impl Api {
            /// Looks up every function; `Err` names the first the server does not have.
            ///
            /// # Safety
            /// `get` is the `RedisModule_GetApi` of the server that loads the module.
            pub(super) unsafe fn load(get: GetApiFn) -> Result<Api, &'static str> {
                Ok(Api {
                    $($field: {
                        // SAFETY: `get` is the server's `RedisModule_GetApi` (this
                        // function's contract), and the field's type is the C signature
                        // `redismodule.h` declares for the function of its name.
                        unsafe {
                            lookup(get, concat!("RedisModule_", stringify!($field), "\0"))?
                        }
                    },)*
                    // SAFETY: as each above; these three are variadic in C as here.
                    Replicate: unsafe { lookup(get, "RedisModule_Replicate\0")? },
                    // SAFETY: as above.
                    Log: unsafe { lookup(get, "RedisModule_Log\0")? },
                    // SAFETY: as above.
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
    ReplyWithArray: fn(*mut RawCtx, c_long) -> c_int;
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
    FreeCallReply: fn(*mut RawCallReply);
    ValueLength: fn(*mut RawKey) -> usize;
    ZsetAdd: fn(*mut RawKey, c_double, *mut RawString, *mut c_int) -> c_int;
    ZsetRem: fn(*mut RawKey, *mut RawString, *mut c_int) -> c_int;
    ZsetScore: fn(*mut RawKey, *mut RawString, *mut c_double) -> c_int;
    ZsetFirstInScoreRange: fn(*mut RawKey, c_double, c_double, c_int, c_int) -> c_int;
    ZsetLastInScoreRange: fn(*mut RawKey, c_double, c_double, c_int, c_int) -> c_int;
    ZsetRangeCurrentElement: fn(*mut RawKey, *mut c_double) -> *mut RawString;
    ZsetRangeNext: fn(*mut RawKey) -> c_int;
    ZsetRangePrev: fn(*mut RawKey) -> c_int;
    ZsetRangeEndReached: fn(*mut RawKey) -> c_int;
    ZsetRangeStop: fn(*mut RawKey);
}

/// One API function by its NUL-terminated name.
///
/// # Safety
/// `get` is the server's `RedisModule_GetApi`, and `F` is a function pointer type with the C
/// signature of the function named `name`.
unsafe fn lookup<F: Copy>(get: GetApiFn, name: &'static str) -> Result<F, &'static str> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    let mut slot: *mut c_void = std::ptr::null_mut();
    // SAFETY: `name` is NUL-terminated and static, `slot` is a pointer-sized place `get`
    // writes a function pointer into (or leaves null).
    let found = unsafe { get(name.as_ptr().cast(), (&raw mut slot).cast()) };
    if found != OK || slot.is_null() {
        return Err(name.trim_end_matches('\0'));
    }
    // SAFETY: Redis filled `slot` with the function of that name, whose C signature `F`
    // mirrors (the caller's contract), and a function pointer has the size of a data pointer
    // here (checked above).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&slot) })
}

static API: OnceLock<Api> = OnceLock::new();

/// Sets the table, at load; the table already set if the module was loaded before.
pub(super) fn install(api: Api) -> &'static Api {
    API.get_or_init(|| api)
}

/// The table. Commands are registered only after it is set, so a command always finds it.
pub(super) fn api() -> &'static Api {
    match API.get() {
        Some(api) => api,
        None => std::process::abort(),
    }
}

/// One of a command's arguments (a `RedisModuleString` Redis passed the command): only the
/// entry point of a command (`ctx::entry`) makes one, for the run of that command (`'c`), and
/// it is valid for that long.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arg<'c> {
    raw: *mut RawString,
    _run: PhantomData<&'c RawString>,
}

impl<'c> Arg<'c> {
    /// The argument's bytes, borrowed from Redis for the command's run.
    pub(crate) fn bytes(self) -> &'c [u8] {
        let mut len = 0usize;
        // SAFETY: `self.raw` is an argument of the command running (only `entry` makes an
        // `Arg`, for `'c`); `len` is a place for its length.
        let ptr = unsafe { (api().StringPtrLen)(self.raw, &raw mut len) };
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: Redis keeps the argument alive, unchanged, while the command runs (`'c`),
        // and its `len` bytes start at `ptr`.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }

    /// The argument as Redis passed it.
    pub(super) fn raw(self) -> *mut RawString {
        self.raw
    }
}

/// `RedisModule_Call` of `PUBLISH <channel> <message>` (format `bs`, not propagated) in the
/// command whose context is `ctx`: its reply, null when Redis refused the call.
///
/// # Safety
/// `ctx` is the context of the command running, whose argument `message` is.
pub(super) unsafe fn publish(
    ctx: *mut RawCtx,
    channel: &[u8],
    message: Arg<'_>,
) -> *mut RawCallReply {
    // SAFETY: the caller's contract for `ctx` and `message`; `b` reads a pointer and a
    // `size_t` length, the channel's bytes, which Redis copies during the call.
    unsafe {
        (api().Call)(
            ctx,
            c"PUBLISH".as_ptr(),
            c"bs".as_ptr(),
            channel.as_ptr().cast::<c_char>(),
            channel.len(),
            message.raw(),
        )
    }
}

/// A write's effect, as the module propagates it (`RedisModule_Replicate`) to the replicas and
/// the AOF: each with its command and the format string of its arguments.
#[derive(Clone, Copy)]
pub(super) enum Effect<'a> {
    /// `SET <key> <value>` (format `sb`), or with `PXAT <expire_ms>` (`sbcb`).
    Set {
        key: Arg<'a>,
        value: &'a [u8],
        expire_ms: Option<&'a [u8]>,
    },
    /// `INCRBY <key> <by>` (format `sb`).
    IncrBy { key: Arg<'a>, by: &'a [u8] },
    /// `DEL <key>` (format `s`).
    Del { key: Arg<'a> },
    /// `PEXPIREAT <key> <ms>` (format `sb`).
    PExpireAt { key: Arg<'a>, at_ms: &'a [u8] },
    /// `ZREMRANGEBYSCORE <key> <min> <max>` (format `sbb`), the bounds as the command's text.
    ZRemRangeByScore {
        key: Arg<'a>,
        min: &'a [u8],
        max: &'a [u8],
    },
    /// `<command> <key> <args..>` (format `sv`): `ZADD` and `ZREM`, whose arguments are
    /// strings the module created (a sorted set's scores and members).
    Strings {
        command: &'a CStr,
        key: Arg<'a>,
        args: &'a [*mut RawString],
    },
}

/// Every command the module propagates a write as: what a gathered write's name is read back
/// to ([`replicate_fields`]), so that replaying one needs no name of its own made.
const PROPAGATED: [&CStr; 7] = [
    c"SET",
    c"INCRBY",
    c"DEL",
    c"PEXPIREAT",
    c"ZREMRANGEBYSCORE",
    c"ZADD",
    c"ZREM",
];

impl Effect<'_> {
    /// The command it is propagated as.
    fn command(&self) -> &CStr {
        match *self {
            Effect::Set { .. } => c"SET",
            Effect::IncrBy { .. } => c"INCRBY",
            Effect::Del { .. } => c"DEL",
            Effect::PExpireAt { .. } => c"PEXPIREAT",
            Effect::ZRemRangeByScore { .. } => c"ZREMRANGEBYSCORE",
            Effect::Strings { command, .. } => command,
        }
    }

    /// The key it writes.
    pub(super) fn key(&self) -> Arg<'_> {
        match *self {
            Effect::Set { key, .. }
            | Effect::IncrBy { key, .. }
            | Effect::Del { key }
            | Effect::PExpireAt { key, .. }
            | Effect::ZRemRangeByScore { key, .. }
            | Effect::Strings { key, .. } => key,
        }
    }

    /// Appends it to `packed` as `ratelimit_vocab::native::EFFECTS_SCRIPT` replays it: the
    /// command's name and its arguments after the key.
    ///
    /// # Safety
    /// The strings of an `Effect::Strings` were created in the command running and are not
    /// freed yet.
    pub(super) unsafe fn encode(&self, packed: &mut Vec<u8>) {
        use ratelimit_vocab::native::push_effect;
        let name = self.command().to_bytes();
        match *self {
            Effect::Set {
                value,
                expire_ms: Some(ms),
                ..
            } => push_effect(packed, name, &[value, b"PXAT", ms]),
            Effect::Set {
                value,
                expire_ms: None,
                ..
            } => push_effect(packed, name, &[value]),
            Effect::IncrBy { by, .. } => push_effect(packed, name, &[by]),
            Effect::Del { .. } => push_effect(packed, name, &[]),
            Effect::PExpireAt { at_ms, .. } => push_effect(packed, name, &[at_ms]),
            Effect::ZRemRangeByScore { min, max, .. } => {
                push_effect(packed, name, &[min, max]);
            }
            Effect::Strings { args, .. } => {
                let args: Vec<&[u8]> = args
                    .iter()
                    .map(|&string| {
                        let mut len = 0usize;
                        // SAFETY: `string` is a live string of the command running (this
                        // function's contract); `len` is a place for its length.
                        let ptr = unsafe { (api().StringPtrLen)(string, &raw mut len) };
                        if ptr.is_null() {
                            return &[][..];
                        }
                        // SAFETY: Redis's `len` bytes at `ptr`, alive while the string is
                        // (past this function: `push_effect` copies them).
                        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
                    })
                    .collect();
                push_effect(packed, name, &args);
            }
        }
    }
}

/// `RedisModule_Replicate` of `EVAL <script> <numkeys> <keys..> <packed>` in the command whose
/// context is `ctx`: whether Redis took it (it refuses a command it does not know, as an
/// `EVAL` renamed away).
///
/// # Safety
/// `ctx` is the context of the command running; every one of `keys` is one of its arguments.
pub(super) unsafe fn replicate_script(
    ctx: *mut RawCtx,
    script: &[u8],
    keys: &[*mut RawString],
    packed: &[u8],
) -> bool {
    let numkeys = std::ffi::c_longlong::try_from(keys.len()).unwrap_or(0);
    // SAFETY: the caller's contract for `ctx` and `keys` (each `RedisModuleString *` of the
    // `v` array an argument alive for the command; Redis takes a reference to each); each `b`
    // is a pointer and a `size_t` length of bytes Redis copies during the call; `l` a
    // `long long`. The format lists exactly the arguments that follow it.
    let replicated = unsafe {
        (api().Replicate)(
            ctx,
            c"EVAL".as_ptr(),
            c"blvb".as_ptr(),
            script.as_ptr().cast::<c_char>(),
            script.len(),
            numkeys,
            keys.as_ptr(),
            keys.len(),
            packed.as_ptr().cast::<c_char>(),
            packed.len(),
        )
    };
    replicated == OK
}

/// `RedisModule_Replicate` of `<command> <key> <args..>` in the command whose context is
/// `ctx`, each of `args` made a string for it and freed after: one gathered write propagated
/// as the command it is (see [`replicate_script`]'s callers).
///
/// # Safety
/// `ctx` is the context of the command running; `key` one of its arguments.
pub(super) unsafe fn replicate_fields(
    ctx: *mut RawCtx,
    key: *mut RawString,
    command: &[u8],
    args: &[&[u8]],
) {
    // (Only this module's writes are gathered: a name it never propagates is none of them.)
    let Some(command) = PROPAGATED.into_iter().find(|c| c.to_bytes() == command) else {
        return;
    };
    let api = api();
    let made: Vec<*mut RawString> = args
        .iter()
        // SAFETY: `ctx` is the command's context; Redis copies the bytes into a new string,
        // freed below.
        .map(|a| unsafe { (api.CreateString)(ctx, a.as_ptr().cast::<c_char>(), a.len()) })
        .collect();
    if made.iter().all(|m| !m.is_null()) {
        // SAFETY: the caller's contract for `ctx` and `key`; `v` an array of live strings
        // (made above) and its length; Redis takes a reference to what it keeps.
        unsafe {
            (api.Replicate)(
                ctx,
                command.as_ptr(),
                c"sv".as_ptr(),
                key,
                made.as_ptr(),
                made.len(),
            )
        };
    }
    for m in made.into_iter().filter(|m| !m.is_null()) {
        // SAFETY: made above in this command, freed once.
        unsafe { (api.FreeString)(ctx, m) };
    }
}

/// `RedisModule_Replicate` of `effect` in the command whose context is `ctx`.
///
/// # Safety
/// `ctx` is the context of the command running, whose argument the key of `effect` is; the
/// strings of an `Effect::Strings` were created in that command and are not freed yet.
pub(super) unsafe fn replicate(ctx: *mut RawCtx, effect: Effect<'_>) {
    let replicate = api().Replicate;
    let bytes = |b: &[u8]| (b.as_ptr().cast::<c_char>(), b.len());
    let command = effect.command().as_ptr();
    // Each arm: the caller's contract for `ctx` and the key (`s`); every `b` is a pointer and
    // a `size_t` length, bytes Redis copies during the call; `c` a NUL-terminated string.
    // Each format string lists exactly the arguments that follow it.
    match effect {
        Effect::Set {
            key,
            value,
            expire_ms: Some(expire_ms),
        } => {
            let ((value, value_len), (expire, expire_len)) = (bytes(value), bytes(expire_ms));
            let pxat = c"PXAT".as_ptr();
            // SAFETY: as above.
            unsafe {
                replicate(
                    ctx,
                    command,
                    c"sbcb".as_ptr(),
                    key.raw(),
                    value,
                    value_len,
                    pxat,
                    expire,
                    expire_len,
                )
            }
        }
        Effect::Set {
            key,
            value,
            expire_ms: None,
        }
        | Effect::IncrBy { key, by: value }
        | Effect::PExpireAt { key, at_ms: value } => {
            let (value, value_len) = bytes(value);
            // SAFETY: as above.
            unsafe { replicate(ctx, command, c"sb".as_ptr(), key.raw(), value, value_len) }
        }
        // SAFETY: as above.
        Effect::Del { key } => unsafe { replicate(ctx, command, c"s".as_ptr(), key.raw()) },
        Effect::ZRemRangeByScore { key, min, max } => {
            let ((min, min_len), (max, max_len)) = (bytes(min), bytes(max));
            // SAFETY: as above.
            unsafe {
                replicate(
                    ctx,
                    command,
                    c"sbb".as_ptr(),
                    key.raw(),
                    min,
                    min_len,
                    max,
                    max_len,
                )
            }
        }
        Effect::Strings { key, args, .. } => {
            // SAFETY: as above for `ctx` and the key; `v` reads an array of
            // `RedisModuleString *` and its length (a `size_t`): strings the caller created in
            // this command and has not freed (this function's contract), each of which Redis
            // takes a reference to for what it keeps.
            unsafe {
                replicate(
                    ctx,
                    command,
                    c"sv".as_ptr(),
                    key.raw(),
                    args.as_ptr(),
                    args.len(),
                )
            }
        }
    };
}

/// `RedisModule_Log` of `message` at `level` (`warning`, ...), as one `%s`: a `%` in it is
/// written as it is.
///
/// # Safety
/// `ctx` is a context Redis passed the module (a command's, or the load's).
pub(super) unsafe fn log(ctx: *mut RawCtx, level: &CStr, message: &CStr) {
    // SAFETY: the caller's contract for `ctx`; `level`, the format and `message` are
    // NUL-terminated, and the format reads exactly one string.
    unsafe { (api().Log)(ctx, level.as_ptr(), c"%s".as_ptr(), message.as_ptr()) };
}
