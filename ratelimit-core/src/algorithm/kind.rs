//! The scripts of the kinds of state ([`StateKind`], whose ids and names are
//! `ratelimit-algorithms`'): the one list of each kind's script, from which the Redis store
//! picks a limit's script and `multi.lua` and `batch.lua` build their `ALGORITHMS` table; and
//! the kind an algorithm and a refill keep.

use crate::limit::Algorithm;
use crate::limit::Refill;
use ratelimit_algorithms::StateKind;

/// The scripts of [`StateKind`]'s list, each kind with its id (how a call's spec names its
/// script to `multi.lua` and `batch.lua`), its name, its script's file (with, after `+`, a
/// file of helpers that the script calls, defined once ahead of it rather than on every
/// decision) and the Lua local that names its id there; and the scripts made of every
/// algorithm's. The ids and names are written here as literals, for `concat!`; they are
/// checked, when this compiles, to be `ratelimit-algorithms`' own, every kind's, in its order.
macro_rules! state_kinds {
    (
        $(
            $kind:ident = $id:literal, $name:literal, $lua:literal $(+ $head:literal)?,
                $local:ident;
        )*
    ) => {
        /// Each kind's script, with the shared prelude, as Redis runs it for one limit, in the
        /// order of [`StateKind::ALL`].
        const SCRIPTS: [&str; StateKind::ALL.len()] = [$(
            concat!(
                include_str!("../scripts/prelude.lua"),
                $(include_str!(concat!("../scripts/", $head)),)?
                include_str!("../scripts/clock.lua"),
                include_str!(concat!("../scripts/", $lua)),
            ),
        )*];

        // The list is `StateKind::ALL` with its ids and names: a kind added there without a
        // script, or an id or a name that differs, fails here.
        const _: () = {
            let kinds = [$((StateKind::$kind, $id, $name)),*];
            assert!(kinds.len() == StateKind::ALL.len());
            let mut i = 0;
            while i < kinds.len() {
                let (kind, id, name) = kinds[i];
                assert!(kind.id() == StateKind::ALL[i].id());
                assert!(kind.id() == id);
                assert!(same_text(kind.name(), name));
                i += 1;
            }
        };

        /// Several limits of one call in one script (see `multi.lua`).
        pub(crate) const MULTI_SCRIPT: &str =
            with_algorithms!("../scripts/multi.lua"; $($id $lua [$($head)?] $local)*);

        /// Several independent calls bound for one node in one script, each decided as if
        /// alone (see `batch.lua`): how concurrent calls are coalesced.
        pub(crate) const BATCH_SCRIPT: &str =
            with_algorithms!("../scripts/batch.lua"; $($id $lua [$($head)?] $local)*);

        /// Every script above as one library of Redis functions, less its first two lines
        /// (its name and `PREFIX`, both made of this text's hash: see `library`).
        pub(crate) const LIBRARY_BODY: &str = concat!(
            include_str!("../scripts/prelude.lua"),
            "-- Each call's own, set by `entry` (library.lua) when it starts.\n",
            "local now, KEYS, ARGV = 0, nil, nil\n",
            algorithms!($($id $lua [$($head)?] $local)*),
            "local function MULTI(KEYS, ARGV, redis)\n",
            include_str!("../scripts/multi.lua"),
            "end\n",
            "local function BATCH(KEYS, ARGV, redis)\n",
            include_str!("../scripts/batch.lua"),
            "end\n",
            "local function CONCURRENCY_RELEASE(KEYS, ARGV, redis)\n",
            include_str!("../scripts/concurrency_release.lua"),
            "end\n",
            "local function CONCURRENCY_RENEW(KEYS, ARGV, redis)\n",
            include_str!("../scripts/concurrency_renew.lua"),
            "end\n",
            "local function HEARTBEAT(KEYS, ARGV, redis)\n",
            include_str!("../scripts/heartbeat.lua"),
            "end\n",
            include_str!("../scripts/library.lua"),
            $("register('", $name, "', ALGORITHMS[", stringify!($local), "])\n",)*
        );
    };
}

/// A local naming each algorithm's id, the locals naming `multi`'s modes and the shadow bit
/// (written by `ratelimit_vocab::lua_protocol!` from the numbers the module and the limiter
/// use: `MODE_DECIDE` .. `MODE_SETTLE`, `SHADOW_BIT`), the algorithms' helpers, every algorithm's script as a
/// function in `ALGORITHMS` under its id, and the functions that decide one call's limits
/// together (`call.lua`): what `multi.lua`, `batch.lua` and the library share (after the
/// prelude). The helpers are defined once here, not in each call of a script's function.
macro_rules! algorithms {
    ($($id:literal $lua:literal [$($head:literal)?] $local:ident)*) => {
        concat!(
            $("local ", stringify!($local), " = ", $id, "\n",)*
            ratelimit_vocab::lua_protocol!(),
            $($(include_str!(concat!("../scripts/", $head)),)?)*
            include_str!("../scripts/multi_head.lua"),
            $(
                "ALGORITHMS[", stringify!($local), "] = function(KEYS, ARGV, redis)\n",
                include_str!(concat!("../scripts/", $lua)),
                "end\n",
            )*
            include_str!("../scripts/call.lua"),
        )
    };
}

/// A script made of the prelude, the clock, [`algorithms!`] and `$main`. The flag lets a
/// Redis Cluster node run it on keys of several slots that it serves.
macro_rules! with_algorithms {
    ($main:literal; $($id:literal $lua:literal [$($head:literal)?] $local:ident)*) => {
        concat!(
            "#!lua flags=allow-cross-slot-keys\n",
            include_str!("../scripts/prelude.lua"),
            include_str!("../scripts/clock.lua"),
            algorithms!($($id $lua [$($head)?] $local)*),
            include_str!($main),
        )
    };
}

state_kinds! {
    TokenBucket = 1, "token_bucket", "gcra.lua" + "gcra_head.lua", TOKEN_BUCKET;
    IntervalBucket = 2, "interval_bucket", "interval_bucket.lua", INTERVAL_BUCKET;
    FixedWindow = 3, "fixed_window", "fixed_window.lua" + "fixed_window_head.lua", FIXED_WINDOW;
    SlidingWindow = 4, "sliding_window", "sliding_window.lua", SLIDING_WINDOW;
    SlidingLog = 5, "sliding_log", "sliding_log.lua", SLIDING_LOG;
    Concurrency = 6, "concurrency", "concurrency.lua", CONCURRENCY;
}

/// Whether `a` and `b` are the same text (`==` on `str` is not `const`).
const fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `kind`'s script, with the shared prelude, as Redis runs it for one limit.
pub(crate) const fn script(kind: StateKind) -> &'static str {
    SCRIPTS[kind.index()]
}

/// The state `algorithm` keeps with `refill` (a rate limit's: a concurrency limit's is
/// [`StateKind::Concurrency`]). Public as `StateKind::from_parts`
/// ([`tools::StateKindExt`](crate::tools::StateKindExt)).
pub(crate) const fn of_parts(algorithm: Algorithm, refill: Refill) -> StateKind {
    match (algorithm, refill) {
        (Algorithm::TokenBucket, Refill::Interval) => StateKind::IntervalBucket,
        (Algorithm::FixedWindow, _) => StateKind::FixedWindow,
        (Algorithm::SlidingWindow, _) => StateKind::SlidingWindow,
        (Algorithm::SlidingLog, _) => StateKind::SlidingLog,
        // The leaky bucket refills smoothly: GCRA's state.
        (Algorithm::TokenBucket | Algorithm::LeakyBucket, _) => StateKind::TokenBucket,
    }
}
