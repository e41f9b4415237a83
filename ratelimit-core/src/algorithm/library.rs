//! Every script the Redis store runs, named once ([`Lua`]), and all of them as one library of
//! Redis functions ([`Library`], Redis 7.0 and newer).
//!
//! A script sent by `EVALSHA` is a new Lua function each time it runs: everything it defines
//! (`batch.lua` defines every algorithm before it decides anything) is made again per call.
//! A library is loaded once per server (`FUNCTION LOAD`) and defines them once; `FCALL` runs
//! one of its functions with the keys, arguments and reply of the script it stands for.
//! Functions are replicated and persisted with the data, so a failover or a restart that
//! keeps the data needs no reload. The library and its functions are named by a hash of its
//! code: two versions of the crate on one server (a rolling deploy) each load and call their
//! own, never the other's.

use std::sync::LazyLock;

use redis::Script;

use super::StateKind;

/// The heartbeat's script (the instances' sorted set), which takes no prelude.
pub(crate) const HEARTBEAT_SCRIPT: &str = include_str!("../scripts/heartbeat.lua");

/// One script the Redis store runs: by `EVALSHA` of its text ([`text`](Lua::text)), or by
/// `FCALL` of its function ([`function`](Lua::function)), with the same keys, arguments and
/// reply either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lua {
    /// One limit of the kind, alone.
    Alone(StateKind),
    /// Several limits of one call (`multi.lua`).
    Multi,
    /// Several calls of one node (`batch.lua`).
    Batch,
    /// A concurrency limit's release.
    Release,
    /// A concurrency limit's renewal.
    Renew,
    /// An instance's heartbeat.
    Heartbeat,
}

/// The scripts that are not one algorithm's, with their functions' names (less the prefix),
/// as `library.lua` registers them.
const OTHERS: [(Lua, &str); 5] = [
    (Lua::Multi, "multi"),
    (Lua::Batch, "batch"),
    (Lua::Release, "concurrency_release"),
    (Lua::Renew, "concurrency_renew"),
    (Lua::Heartbeat, "heartbeat"),
];

const COUNT: usize = StateKind::ALL.len() + OTHERS.len();

impl Lua {
    /// Every script, in the order of [`index`](Lua::index).
    const ALL: [Lua; COUNT] = {
        let mut all = [Lua::Multi; COUNT];
        let mut i = 0;
        while i < StateKind::ALL.len() {
            all[i] = Lua::Alone(StateKind::ALL[i]);
            i += 1;
        }
        while i < COUNT {
            all[i] = OTHERS[i - StateKind::ALL.len()].0;
            i += 1;
        }
        all
    };

    const fn index(self) -> usize {
        let kinds = StateKind::ALL.len();
        match self {
            Lua::Alone(kind) => kind.index(),
            Lua::Multi => kinds,
            Lua::Batch => kinds + 1,
            Lua::Release => kinds + 2,
            Lua::Renew => kinds + 3,
            Lua::Heartbeat => kinds + 4,
        }
    }

    /// Its function's name in the library, less the library's prefix.
    const fn short_name(self) -> &'static str {
        match self {
            Lua::Alone(kind) => kind.name(),
            other => OTHERS[other.index() - StateKind::ALL.len()].1,
        }
    }

    /// Its text, as `EVAL` runs it.
    pub(crate) const fn text(self) -> &'static str {
        match self {
            Lua::Alone(kind) => super::script(kind),
            Lua::Multi => super::MULTI_SCRIPT,
            Lua::Batch => super::BATCH_SCRIPT,
            Lua::Release => super::concurrency::RELEASE_SCRIPT,
            Lua::Renew => super::concurrency::RENEW_SCRIPT,
            Lua::Heartbeat => HEARTBEAT_SCRIPT,
        }
    }

    /// Its text hashed, for `EVALSHA` (once per process).
    pub(crate) fn script(self) -> &'static Script {
        static SCRIPTS: LazyLock<[Script; COUNT]> =
            LazyLock::new(|| Lua::ALL.map(|lua| Script::new(lua.text())));
        &SCRIPTS[self.index()]
    }

    /// Its function's name in [`Library::get`], for `FCALL`.
    pub(crate) fn function(self) -> &'static str {
        &Library::get().functions[self.index()]
    }

    /// Its command in the Redis module (`module/`), `ratelimit.v1.<its function's short
    /// name>`, which decides the same from the same arguments; `None` where the module has
    /// none (see [`NATIVE`]). One algorithm's takes its key, then the arguments packed into
    /// one, and answers its numbers packed the same way (`ratelimit_vocab::native`).
    pub(crate) fn native(self) -> Option<&'static str> {
        static NAMES: LazyLock<[Option<String>; COUNT]> = LazyLock::new(|| {
            Lua::ALL.map(|lua| {
                NATIVE.contains(&lua).then(|| {
                    format!(
                        "{}{}",
                        ratelimit_vocab::native::COMMAND_PREFIX,
                        lua.short_name()
                    )
                })
            })
        });
        NAMES[self.index()].as_deref()
    }
}

/// The scripts the Redis module decides natively, this version's: the module registers a
/// command for each and for no other (`testkit/tests/module.rs` holds the two lists equal on
/// a server that loaded it). The others run by `FCALL` or `EVALSHA` on every server.
///
/// `multi` decides natively only calls whose every limit's algorithm is native, of at most
/// `ratelimit_vocab::native::MAX_LIMITS` limits, and declares every key (on a cluster, all
/// of one slot): the store checks each call (`RedisStore`).
///
/// `batch` decides natively only batches whose every call the module decides, on one server
/// or through Sentinel (it declares every key: a cluster would refuse keys of several
/// slots), of at most `ratelimit_vocab::native::MAX_BATCH` calls.
pub(crate) const NATIVE: [Lua; 10] = [
    Lua::Alone(StateKind::TokenBucket),
    Lua::Alone(StateKind::FixedWindow),
    Lua::Alone(StateKind::SlidingWindow),
    Lua::Alone(StateKind::IntervalBucket),
    Lua::Alone(StateKind::SlidingLog),
    Lua::Alone(StateKind::Concurrency),
    Lua::Multi,
    Lua::Batch,
    Lua::Release,
    Lua::Renew,
];

impl Lua {
    /// Whether the module decides this algorithm within `multi` and `batch` too: every
    /// algorithm it decides alone (the sorted sets' by their scripts' own commands, their
    /// writes kept until every limit of the call has decided, as `multi.lua` keeps them).
    pub(crate) fn native_together(self) -> bool {
        matches!(self, Lua::Alone(_)) && self.native().is_some()
    }
}

/// Every decision script of this version of the crate as one library of Redis functions.
///
/// Its first line names it `redis_ratelimit_<hash>` and every function it registers is
/// `rl_<hash>_<script>`, where `<hash>` is the first 16 hex digits of the SHA-1 of the rest of
/// its code; a version whose scripts differ in any byte has another name, and one that does
/// not shares this one (and its functions, which are then the same code). `FUNCTION LOAD
/// REPLACE` of it is therefore safe to repeat from any instance at any time.
#[derive(Debug)]
pub struct Library {
    name: String,
    text: String,
    functions: [String; COUNT],
}

impl Library {
    /// This version's library, built once per process.
    pub fn get() -> &'static Library {
        static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
            let body = super::kind::LIBRARY_BODY;
            let hash = Script::new(body).get_hash()[..16].to_owned();
            let prefix = format!("rl_{hash}_");
            Library {
                name: format!("redis_ratelimit_{hash}"),
                text: format!(
                    "#!lua name=redis_ratelimit_{hash}\nlocal PREFIX = '{prefix}'\n{body}"
                ),
                functions: Lua::ALL.map(|lua| format!("{prefix}{}", lua.short_name())),
            }
        });
        &LIBRARY
    }

    /// Its name, as `FUNCTION LIST LIBRARYNAME` finds it: `redis_ratelimit_<hash>`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its code, as `FUNCTION LOAD` takes it.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The function that runs the script `script` as `EVALSHA` runs its text alone (the same
    /// keys, arguments and reply): `script` is an algorithm's name
    /// ([`StateKind::name`]: `token_bucket`, `fixed_window`, ...) or `multi`, `batch`,
    /// `concurrency_release`, `concurrency_renew`, `heartbeat`. `None` for any other name.
    #[must_use]
    pub fn function(&self, script: &str) -> Option<&str> {
        Lua::ALL
            .iter()
            .position(|lua| lua.short_name() == script)
            .map(|i| self.functions[i].as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_its_own_function_and_the_library_registers_each() {
        let library = Library::get();
        assert!(library.text().starts_with("#!lua name=redis_ratelimit_"));
        let mut seen = std::collections::HashSet::new();
        for lua in Lua::ALL {
            assert_eq!(Lua::ALL[lua.index()], lua);
            let name = lua.function();
            assert!(seen.insert(name), "{name} twice");
            assert_eq!(library.function(lua.short_name()), Some(name));
            // Registered under its short name after the prefix, once.
            let registered = format!("register('{}'", lua.short_name());
            assert_eq!(
                library.text().matches(&registered).count(),
                1,
                "{registered}"
            );
        }
        assert_eq!(library.function("gcra"), None);
    }

    #[test]
    fn the_name_is_the_hash_of_the_code() {
        let library = Library::get();
        let hash = &library.name()["redis_ratelimit_".len()..];
        assert_eq!(hash.len(), 16);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(
            library
                .function("batch")
                .unwrap()
                .starts_with(&format!("rl_{hash}_"))
        );
        assert!(
            Script::new(super::super::kind::LIBRARY_BODY)
                .get_hash()
                .starts_with(hash)
        );
    }
}
