//! redis-ratelimit's Redis module: each decision of the limiter as a native command.
//!
//! The limiter decides by `FCALL` of a Lua function library, or `EVALSHA` of each script, on
//! the Redis server's clock; running Lua at all costs Redis more than the whole decision does
//! natively (docs/benchmarks.md). Loaded into the server (`loadmodule` in redis.conf, or
//! `MODULE LOAD`), this module adds a command for functions of the library, which takes the
//! same key and arguments (packed into one argument, as `ratelimit_vocab::native` says),
//! keeps the same state in the same keys, byte for byte, and answers the same numbers
//! (packed the same way): a bucket written by one path is read by the other, so a fleet may run
//! servers with and without the module, and a rolling upgrade may add it or take it away.
//! The limiter uses the commands when the server has this version of them (chosen when it is
//! built) and falls back, per call, to `FCALL` where a server has lost them.
//!
//! The arithmetic is not here: each command parses its arguments, reads its keys, calls the
//! algorithm's decision in `ratelimit-algorithms` (the one the memory store runs, and the
//! twin the scripts are held to), writes what it decided, and replicates the writes as their
//! effects (`SET .. PXAT`, `DEL`), never as the command, so that a replica or a restart from
//! the AOF holds what this server holds. The names are `ratelimit-vocab`'s
//! ([`ratelimit_vocab::native`]): the module `ratelimit_v1`, the commands
//! `ratelimit.v1.<function>`.
//!
//! The sorted sets (the sliding log, the concurrency set) are decided in the module too, but
//! step for step as their scripts read and write them (`zset`): read through the module
//! API's own sorted-set functions (the score-range iterator, no command called), written the
//! same way, and each write propagated as the script's command (`ZADD`, `ZREM`,
//! `ZREMRANGEBYSCORE`, `PEXPIREAT`: absolute scores and instants are their own effects),
//! exactly when that command would have changed the key. The differential tests hold every
//! command to the script and the twin on shared state (`testkit/tests/algorithms.rs`).
//!
//! No panic crosses into the server: every command runs under `catch_unwind`, and a bad
//! argument from any client is an error reply (the argument readers are property-tested over
//! arbitrary bytes here and fuzzed, `fuzz/run module_args`; the commands are run with
//! thousands of hostile argument vectors on a real server in `testkit/tests/module.rs`).

mod api;
pub mod args;
mod commands;
mod kernel;
mod zset;

use std::ffi::{CString, c_int};

pub use api::{RawCtx, RawString, RedisModule_OnLoad};

use api::{Command, Registrar};
use ratelimit_vocab::native;

/// The module's version in `MODULE LIST`: the protocol's.
const MODULE_VERSION: c_int = 1;
const _: () = assert!(MODULE_VERSION as u32 == native::PROTOCOL);

/// Registers every command (at load, from `api::RedisModule_OnLoad`).
fn register(registrar: &Registrar) -> Result<(), String> {
    for command in commands::ALL {
        let name = CString::new(format!("{}{}", native::COMMAND_PREFIX, command.short))
            .map_err(|e| e.to_string())?;
        let flags = CString::new(command.flags).map_err(|e| e.to_string())?;
        let summary = CString::new(command.summary).map_err(|e| e.to_string())?;
        registrar.command(
            Command {
                keys: command.keys,
                name: &name,
                flags: &flags,
                summary: &summary,
            },
            command.run,
        )?;
    }
    Ok(())
}
