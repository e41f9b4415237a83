//! Loading the module: the API table, the module's name and version, and the commands,
//! each created with its key spec.

use std::ffi::{CStr, CString, c_int};

use super::ctx::c_text;
use super::raw::{
    self, APIVER_1, Api, BeginSearch, CommandArg, CommandFn, CommandHistoryEntry, CommandInfo,
    CommandInfoVersion, ERR, GetApiFn, KEY_ACCESS, KEY_RW, KEY_UPDATE, KSPEC_BS_INDEX,
    KSPEC_FK_KEYNUM, KSPEC_FK_RANGE, KeySpec, OK, RawCtx, RawString,
};
use crate::args::Keys;

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
    // SAFETY: the first word of the load context is `RedisModule_GetApi` (redismodule.h's
    // `RedisModule_Init` reads it so), and `ctx` is the load context (the caller's contract).
    let get: GetApiFn = unsafe { *ctx.cast::<GetApiFn>() };
    // SAFETY: `get` is that server's `RedisModule_GetApi`.
    let loaded = match unsafe { Api::load(get) } {
        Ok(api) => api,
        Err(_) => return ERR,
    };
    let api = raw::install(loaded);
    // SAFETY: `name` is NUL-terminated and outlives the call, which copies it.
    if unsafe { (api.IsModuleNameBusy)(name.as_ptr()) } != 0 {
        return ERR;
    }
    // SAFETY: `ctx` is the load context, where a module sets its name (copied) and version.
    unsafe { (api.SetModuleAttribs)(ctx, name.as_ptr(), version, APIVER_1) };
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
    let Ok(name) = CString::new(ratelimit_vocab::native::MODULE_NAME) else {
        return ERR;
    };
    // SAFETY: `ctx` is the load context Redis passed (this function's contract).
    unsafe { on_load(ctx, &name, crate::MODULE_VERSION, crate::register) }
}

/// Creates the module's commands, at load: made only by `on_load`, with the load context,
/// and lent to `register` for the load only.
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
        let api = raw::api();
        let name = command.name.to_string_lossy();
        // No legacy key range (0, 0, 0, as `FCALL`): the key spec says where the keys are.
        // SAFETY: `self.ctx` is the load context (only `on_load` makes a `Registrar`, and lends
        // it for the load); the name and flags are NUL-terminated and copied by Redis; `run`
        // is a `RedisModuleCmdFunc`.
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
        // SAFETY: as above; the name is NUL-terminated.
        let handle = unsafe { (api.GetCommand)(self.ctx, command.name.as_ptr()) };
        if handle.is_null() {
            return Err(format!("could not find the command {name} just created"));
        }
        let version = CommandInfoVersion {
            version: 1,
            sizeof_historyentry: size_of::<CommandHistoryEntry>(),
            sizeof_keyspec: size_of::<KeySpec>(),
            sizeof_arg: size_of::<CommandArg>(),
        };
        let mut specs = [
            KeySpec {
                notes: std::ptr::null(),
                flags: KEY_RW | KEY_ACCESS | KEY_UPDATE,
                begin_search_type: KSPEC_BS_INDEX,
                bs: BeginSearch { index: 1 },
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
            // The list ends with a zeroed spec (its type 0, `REDISMODULE_KSPEC_BS_INVALID`).
            KeySpec {
                notes: std::ptr::null(),
                flags: 0,
                begin_search_type: 0,
                bs: BeginSearch { index: 0 },
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
        // SAFETY: `handle` is the command just created in this load context; `info` and what
        // it points to (the version, the summary, the specs ending with a zeroed one) are laid
        // out as redismodule.h's structs (checked in `raw`) and outlive the call, which copies
        // them.
        if unsafe { (api.SetCommandInfo)(handle, &raw const info) } != OK {
            return Err(format!("could not declare the keys of {name}"));
        }
        Ok(())
    }

    /// Logs `message` at `warning` in the server's log.
    pub(crate) fn warn(&self, message: &str) {
        let message = c_text(message, false);
        // SAFETY: `self.ctx` is the load context (see `command`).
        unsafe { raw::log(self.ctx, c"warning", &message) };
    }
}
