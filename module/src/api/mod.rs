//! The part of the Redis module API this module calls, and the only unsafe code of the crate.
//!
//! Redis hands a module its API as a table of functions looked up by name: the first word of
//! the context `RedisModule_OnLoad` receives is `RedisModule_GetApi`, which fills a function
//! pointer given the function's name (what `redismodule.h`'s `RedisModule_Init` does in C).
//! The table is looked up once, at load; a server that lacks a function refuses the module,
//! rather than crashing on a call.
//!
//! - `raw`: the C side, as `redismodule.h` (Redis 7.0) declares it: the opaque types, the
//!   structs (their layouts checked when this compiles), the table, and one typed wrapper per
//!   variadic function, its format strings written there only; and a command's argument
//!   ([`Arg`]), which those wrappers pass;
//! - `load`: `RedisModule_OnLoad` and the creation of the commands ([`Registrar`]);
//! - `ctx`: a command's run: its [`entry`] point and its context ([`Ctx`]: its replies);
//! - `key` and `reply`: an open [`Key`] and the reply of a command the module calls (only
//!   `PUBLISH`), each with the method of [`Ctx`] that makes one ([`Ctx::open`] and
//!   [`Ctx::publish`]);
//! - `zset`: a sorted set through an open [`Key`] (its score ranges walked by a `Cursor`,
//!   members added and removed, its expiry set, each write propagated as the command whose
//!   effect it is), and the strings it reads and writes ([`Member`]).
//!
//! Each file takes only from those listed before it, `load` aside (it takes from `raw` and
//! `ctx`): `raw` from none, `ctx` from `raw`, `key` and `reply` from `ctx` and `raw`, `zset`
//! from `key`, `ctx` and `raw`.
//!
//! The rest of the crate uses the safe wrappers only. Every pointer they hold lives only
//! while Redis runs one command, and their lifetimes say so: an [`Arg`], a [`Key`], a
//! [`Member`] and a called command's reply are made only within a command's run and cannot
//! outlive it. Every `unsafe`
//! block says why it is sound (`// SAFETY:`; the crate denies one without), and every unsafe
//! function what its caller must ensure (`# Safety`).
#![allow(unsafe_code)]

mod ctx;
mod key;
mod load;
mod raw;
mod reply;
mod zset;

pub(crate) use ctx::{Body, Ctx, MAX_REPLY_NUMBERS, entry};
pub(crate) use key::{Key, Value};
pub use load::RedisModule_OnLoad;
pub(crate) use load::{Command, Registrar};
pub(crate) use raw::{Arg, CommandFn};
pub use raw::{RawCtx, RawString};
pub(crate) use zset::{Edge, Member, Scores};
