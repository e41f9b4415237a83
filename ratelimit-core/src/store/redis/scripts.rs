//! How a script runs on its node: the Redis module's command while the node has it, else the
//! library's function (`FCALL`) or the script (`EVALSHA`, `EVAL` where it is missing), the
//! library loaded again when a node lost it; and the errors that say which one a node refused.

use ratelimit_vocab::native;
use redis::{RedisError, ToRedisArgs as _, Value};

use super::RedisStore;
use super::spec::{Call, Spec};
use crate::algorithm::library::{Library, Lua};

impl RedisStore {
    /// Runs `lua` on `keys`, with the arguments `args` adds, on the keys' node.
    ///
    /// With functions (chosen at `connect`), `FCALL` of its function; where the node has no
    /// library (a restart that lost the data, `FUNCTION FLUSH`, a node that joined after
    /// `connect`), this one call runs by `EVAL` of the script's text, which cannot miss,
    /// while the library is loaded again (`FUNCTION LOAD REPLACE`, once at a time per store,
    /// on every master of a cluster) for the calls after it.
    ///
    /// Without, `EVALSHA`, and on `NOSCRIPT` (a restart, a failover, `SCRIPT FLUSH`) `EVAL` with
    /// the text, on the same node. `EVAL` cannot miss, so no flush between a reload and a
    /// retry can fail the call, and it caches the script again for the next `EVALSHA`. In a
    /// cluster it goes to the key's node only, whereas `SCRIPT LOAD` goes to every master and
    /// fails while any of them is down.
    pub(super) async fn eval<T: redis::FromRedisValue>(
        &self,
        lua: Lua,
        keys: &[&str],
        args: impl Fn(&mut redis::Cmd) + Sync,
    ) -> Result<T, RedisError> {
        self.eval_or_native(lua, keys, &args, None).await
    }

    /// One algorithm's call of one limit on `key`: the module's command while the node has
    /// it, else its function or script, with the same arguments.
    pub(super) async fn alone(&self, key: &str, spec: &Spec) -> Result<Value, RedisError> {
        let keys = [key];
        let script = |cmd: &mut redis::Cmd| {
            cmd.arg(spec.args());
        };
        let packed = |out: &mut PackedArgs| spec.args().write_redis_args(out);
        let native = spec.alone().native().map(|command| Native {
            command,
            keys: &keys,
            counted: false,
            args: &packed,
            after: &[],
            reply: unpacked,
        });
        self.eval_or_native(spec.alone(), &keys, &script, native)
            .await
    }

    /// [`eval`](RedisStore::eval), or first, while the node has the Redis module, `native`:
    /// its command, which decides the same from its own form of the arguments.
    pub(super) async fn eval_or_native<T: redis::FromRedisValue>(
        &self,
        lua: Lua,
        keys: &[&str],
        args: &(dyn Fn(&mut redis::Cmd) + Sync),
        native: Option<Native<'_>>,
    ) -> Result<T, RedisError> {
        let functions = self.functions.load(std::sync::atomic::Ordering::Relaxed);
        let native = native.filter(|_| self.native.load(std::sync::atomic::Ordering::Relaxed));
        self.run(|mut c| async move {
            if let Some(native) = native {
                match native.cmd().query_async(&mut c).await {
                    // The node has no such command (it restarted without the module, or a
                    // failover reached a node without it), or refuses it: nothing ran, and
                    // the same decision runs by the library or the script below.
                    Err(e) if module_refused(&e) => self.stop_native(&e),
                    answer => {
                        return answer.and_then(|v| Ok(T::from_redis_value((native.reply)(v))?));
                    }
                }
            }
            let mut first = redis::cmd(if functions { "FCALL" } else { "EVALSHA" });
            if functions {
                first.arg(lua.function());
            } else {
                first.arg(lua.script().get_hash());
            }
            first.arg(keys.len()).arg(keys);
            args(&mut first);
            let e = match first.query_async(&mut c).await {
                Err(e) => e,
                answer => return answer,
            };
            // The script or function missing on this node, or `FCALL` refused there: the same
            // script by `EVAL`, which cannot miss.
            let refused = functions && fcall_refused(&e);
            if refused {
                self.stop_functions(&e);
            } else if !is_missing_script(&e) {
                return Err(e);
            } else if functions {
                self.load_library_soon(&e);
            }
            let mut eval = redis::cmd("EVAL");
            eval.arg(lua.text()).arg(keys.len()).arg(keys);
            args(&mut eval);
            eval.query_async(&mut c).await
        })
        .await
    }

    /// Whether `call` runs as a command of the Redis module now, in its batches when gathered
    /// with others: one limit the module decides together with others, or several by `multi`
    /// ([`multi_is_native`](RedisStore::multi_is_native)).
    pub(super) fn is_native(&self, call: Call<'_>) -> bool {
        self.native.load(std::sync::atomic::Ordering::Relaxed)
            && match call.specs {
                // (Alone, any the module decides; in its batches, those it decides together.)
                [spec] => spec.alone().native_together(),
                specs => self.multi_is_native(call.keys, specs),
            }
    }

    /// Whether the module's `multi` decides these limits: each of an algorithm the module
    /// decides, at most `MAX_LIMITS` of them, and on a cluster every key in one slot (the
    /// command declares every key, and a cluster node refuses keys of several slots, where
    /// `multi.lua` declares the first only and reaches the others as the node serves them).
    fn multi_is_native(&self, keys: &[&str], specs: &[Spec]) -> bool {
        Lua::Multi.native().is_some()
            && specs.len() <= ratelimit_vocab::native::MAX_LIMITS
            && specs.iter().all(|spec| spec.alone().native_together())
            && (!self.is_cluster() || {
                let slot = |key: &str| crate::naming::key_slot(key.as_bytes());
                keys.iter()
                    .all(|key| Some(slot(key)) == keys.first().map(|k| slot(k)))
            })
    }

    /// `multi.lua` (`FCALL` or `EVALSHA`) on `keys` with `specs` in `mode` (`tail` after the
    /// specs: a give-back's reservation time, a settlement's), or the module's `multi` where it
    /// decides them.
    pub(super) async fn multi<T: redis::FromRedisValue>(
        &self,
        keys: &[&str],
        specs: &[Spec],
        mode: native::Mode,
        tail: &[u64],
    ) -> Result<T, RedisError> {
        let mode = mode.as_number();
        let script = |cmd: &mut redis::Cmd| {
            cmd.arg(keys.len()).arg(mode).arg(keys).arg(specs).arg(tail);
        };
        let native = |out: &mut PackedArgs| {
            mode.write_redis_args(out);
            specs.write_redis_args(out);
            tail.write_redis_args(out);
        };
        let native = self
            .multi_is_native(keys, specs)
            .then(|| Lua::Multi.native())
            .flatten()
            .map(|command| Native {
                command,
                keys,
                counted: true,
                args: &native,
                after: &[],
                reply: unpacked,
            });
        self.eval_or_native(Lua::Multi, keys.get(..1).unwrap_or(&[]), &script, native)
            .await
    }

    /// Decides by `FCALL` or `EVALSHA` from now on, in every clone of this store: a node has
    /// no module command, or refused one (`refused`). Said once, at WARN.
    fn stop_native(&self, refused: &RedisError) {
        if self.native.swap(false, std::sync::atomic::Ordering::AcqRel) {
            crate::observe::log!(warn,
                url = %self.url,
                reason = %refused,
                "a Redis node has no ratelimit module commands now, or refuses them (a restart \
                 without the module, a failover to a node without it, an ACL): deciding by \
                 the function library or the scripts from now on"
            );
        }
    }

    /// Decides by `EVALSHA` from now on, in every clone of this store: a node refused `FCALL`
    /// itself (`refused`). Said once, at WARN.
    fn stop_functions(&self, refused: &RedisError) {
        if self
            .functions
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            crate::observe::log!(warn,
                url = %self.url,
                reason = %refused,
                "Redis refuses FCALL now (an ACL changed, or a failover reached a node with other \
                 ACLs): deciding by EVALSHA of each script from now on"
            );
        }
    }

    /// Loads the library again, in the background, unless a load is under way: a node said
    /// it has no such function (`missing`).
    fn load_library_soon(&self, missing: &RedisError) {
        if self
            .loading_library
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        crate::observe::log!(info,
            library = Library::get().name(),
            reason = %missing,
            "a Redis node has no rate-limit functions: loading them again"
        );
        let store = self.clone();
        let load = async move {
            if let Err(e) = store
                .run(|mut c| async move { load_library(&mut c).await })
                .await
            {
                crate::observe::log!(warn,
                    library = Library::get().name(),
                    error = %e,
                    "could not load the rate-limit functions; calls run by EVAL meanwhile"
                );
            }
            store
                .loading_library
                .store(false, std::sync::atomic::Ordering::Release);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(load)),
            Err(_) => self
                .loading_library
                .store(false, std::sync::atomic::Ordering::Release),
        }
    }
}

/// `FUNCTION LOAD REPLACE` of this version's library: on every master of a cluster, on the
/// one server otherwise. Replacing a library by the same code is a no-op for its callers, so
/// any instance may do it at any time.
pub(super) async fn load_library(
    c: &mut impl redis::aio::ConnectionLike,
) -> Result<(), RedisError> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(Library::get().text())
        .query_async::<Value>(c)
        .await
        .map(drop)
}

/// Calls the library once, for nothing: an empty batch (no key, nothing read or written). A
/// server may let a client load functions and not call them: `FUNCTION LOAD` is in `@write`,
/// `FCALL` in `@scripting`, so an ACL written for a client that runs scripts by `EVALSHA`
/// (`+@read +@write +evalsha`) allows the load and refuses every call.
/// On a cluster it goes to a master: with no key, it would go to any node, and a replica
/// refuses a function that may write.
pub(super) async fn call_library(c: &mut super::AnyConn) -> Result<(), RedisError> {
    let mut empty = redis::cmd("FCALL");
    empty.arg(Lua::Batch.function()).arg(0).arg(0);
    c.send_to_a_master(empty).await.map(drop)
}

/// A call of a command of the Redis module: its keys (with `counted`, after their number),
/// then the script's arguments that `args` adds, packed into one argument
/// (`ratelimit_vocab::native`).
#[derive(Clone, Copy)]
pub(super) struct Native<'a> {
    pub(super) command: &'static str,
    pub(super) keys: &'a [&'a str],
    pub(super) counted: bool,
    pub(super) args: &'a (dyn Fn(&mut PackedArgs) + Sync),
    /// Arguments after the packed one, as they are (a release's channel: text).
    pub(super) after: &'a [&'a str],
    /// Its reply as the script's: [`unpacked`], or [`unpacked_each`] for a batch's.
    pub(super) reply: fn(Value) -> Value,
}

impl Native<'_> {
    fn cmd(&self) -> redis::Cmd {
        let mut packed = PackedArgs(Vec::with_capacity(64));
        (self.args)(&mut packed);
        let mut cmd = redis::cmd(self.command);
        if self.counted {
            cmd.arg(self.keys.len());
        }
        cmd.arg(self.keys).arg(packed.0).arg(self.after);
        cmd
    }
}

/// A native command's last argument: the script's arguments written one after the other,
/// separated by `ratelimit_vocab::native::SEPARATOR`, straight from what would have been
/// its arguments (anything `ToRedisArgs` writes).
pub(super) struct PackedArgs(Vec<u8>);

impl redis::RedisWrite for PackedArgs {
    fn write_arg(&mut self, arg: &[u8]) {
        if !self.0.is_empty() {
            self.0.push(ratelimit_vocab::native::SEPARATOR);
        }
        self.0.extend_from_slice(arg);
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        if !self.0.is_empty() {
            self.0.push(ratelimit_vocab::native::SEPARATOR);
        }
        &mut self.0
    }
}

/// A native command's reply of numbers (`ratelimit_vocab::native`) as the array of integers
/// the script answers; any other reply as it is.
pub(super) fn unpacked(reply: Value) -> Value {
    let Value::BulkString(text) = &reply else {
        return reply;
    };
    let numbers: Option<Vec<Value>> = ratelimit_vocab::native::numbers(text)
        .map(|n| n.map(Value::Int))
        .collect();
    numbers.map_or(reply, Value::Array)
}

/// A native batch's reply as `batch.lua`'s: each call's numbers as the array of integers its
/// script answers (an entry the module answered with an error stays that error).
pub(super) fn unpacked_each(reply: Value) -> Value {
    match reply {
        Value::Array(items) => Value::Array(items.into_iter().map(unpacked).collect()),
        other => other,
    }
}

/// Whether the server has this version's Redis module and lets this client call its
/// commands: one command called with no argument, which the ACL checks (for the command: no
/// key is named) and the module refuses with its own error (nothing is read or written).
/// `Ok(false)` when the server does not know the command or this client may not call it. On
/// a cluster it asks a master.
pub(super) async fn probe_module(c: &mut super::AnyConn) -> Result<bool, RedisError> {
    let Some(command) = Lua::Alone(crate::algorithm::StateKind::TokenBucket).native() else {
        return Ok(false);
    };
    let probe = redis::cmd(command);
    match c.send_to_a_master(probe).await {
        // The module's own refusal of a call without its key: it is there.
        Err(e) if e.to_string().contains(MODULE_ERROR) => Ok(true),
        Err(e) if module_refused(&e) => Ok(false),
        Err(e) => Err(e),
        Ok(_) => Ok(true),
    }
}

/// What every error the module answers starts with, after its code.
const MODULE_ERROR: &str = "ratelimit:";

/// Whether a node refused a module command as a command (unknown there, or denied by an
/// ACL), not for one of its keys or arguments: nothing ran.
fn module_refused(e: &RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    !text.contains(MODULE_ERROR)
        && (text.contains("unknown command")
            || (e.code() == Some("NOPERM") && text.contains("command")))
}

/// Whether a script or function call failed for want of the script (`NOSCRIPT`) or the
/// function (`ERR Function not found`) on its node: nothing ran.
fn is_missing_script(e: &RedisError) -> bool {
    // The whole reply, not a part of it: an error a script raised after it wrote must never
    // run it again by EVAL.
    e.code() == Some("NOSCRIPT")
        || (e.code() == Some("ERR") && e.detail().map(str::trim) == Some("Function not found"))
}

/// Whether `FUNCTION LOAD` or the first `FCALL` failed because the server offers no
/// functions to this client: the command renamed away or unknown, or denied by an ACL. Any
/// other failure (a connection lost, a library Redis could not compile) is an error, not a
/// reason to run scripts instead.
pub(super) fn functions_unavailable(e: &RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("unknown command")
}

/// Whether a node refused an `FCALL` as a command (an ACL without `+fcall`, the command
/// unknown there), not for one of its keys: nothing ran, and the same script by `EVAL` may.
fn fcall_refused(e: &RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    (e.code() == Some("NOPERM") && text.contains("'fcall'"))
        || (text.contains("unknown command") && text.contains("fcall"))
}
