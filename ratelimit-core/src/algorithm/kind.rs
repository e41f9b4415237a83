//! The kinds of state the scripts keep, one per algorithm script: the one list of their ids,
//! names and scripts, from which the Redis store picks a limit's script, the tools read a
//! key, and `multi.lua` and `batch.lua` build their `ALGORITHMS` table.

use super::Kernel;
use crate::{Algorithm, Limit, Refill};

/// Defines [`StateKind`] from its list, each kind with its id (how a call's spec names its
/// script to `multi.lua` and `batch.lua`), its name, its script's file (with, after `+`, a
/// file of helpers that the script calls, defined once ahead of it rather than on every
/// decision) and the Lua local that names its id there; and the scripts made of every
/// algorithm's.
macro_rules! state_kinds {
    (
        $(#[$attr:meta])*
        pub enum StateKind {
            $(
                $(#[$doc:meta])*
                $kind:ident = $id:literal, $name:literal, $lua:literal $(+ $head:literal)?,
                    $local:ident;
            )*
        }
    ) => {
        $(#[$attr])*
        #[repr(u8)]
        pub enum StateKind {
            $($(#[$doc])* $kind = $id,)*
        }

        impl StateKind {
            /// Every kind, in the order of its id.
            pub(crate) const ALL: [StateKind; [$($id),*].len()] = [$(StateKind::$kind),*];

            /// Its name in `snake_case`: `token_bucket`, `interval_bucket`, `fixed_window`,
            /// `sliding_window`, `sliding_log`, `concurrency`.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(StateKind::$kind => $name,)*
                }
            }

            /// Its script, with the shared prelude, as Redis runs it for one limit.
            pub(crate) const fn script(self) -> &'static str {
                match self {
                    $(StateKind::$kind => concat!(
                        include_str!("../scripts/prelude.lua"),
                        $(include_str!(concat!("../scripts/", $head)),)?
                        include_str!("../scripts/clock.lua"),
                        include_str!(concat!("../scripts/", $lua)),
                    ),)*
                }
            }
        }

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

/// A local naming each algorithm's id, the algorithms' helpers, every algorithm's script as a
/// function in `ALGORITHMS` under its id, and the functions that decide one call's limits
/// together (`call.lua`): what `multi.lua`, `batch.lua` and the library share (after the
/// prelude). The helpers are defined once here, not in each call of a script's function.
macro_rules! algorithms {
    ($($id:literal $lua:literal [$($head:literal)?] $local:ident)*) => {
        concat!(
            $("local ", stringify!($local), " = ", $id, "\n",)*
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
    /// Which script's state a key holds: the algorithms, with the token bucket's two refills
    /// apart (their states differ) and the leaky bucket with the token bucket (they share one).
    /// Public as [`tools::StateKind`](crate::tools::StateKind).
    ///
    /// ```
    /// use ratelimit_core::tools::{StateKind, Stored, StoredValue};
    /// use ratelimit_core::{Algorithm, Limit, Refill};
    ///
    /// let leaky = Limit::per_second(3).algorithm(Algorithm::LeakyBucket);
    /// assert_eq!(StateKind::of(&leaky), StateKind::TokenBucket);
    /// assert_eq!(
    ///     StateKind::from_parts(Algorithm::TokenBucket, Refill::Interval),
    ///     StateKind::IntervalBucket
    /// );
    /// assert_eq!(StateKind::SlidingWindow.name(), "sliding_window");
    ///
    /// // `window:previous:current` can only be a sliding window's.
    /// let stored = Stored::new(0, StoredValue::Text("3:1:2".to_owned()), Some(9_000));
    /// assert_eq!(StateKind::guess(&stored), Some((StateKind::SlidingWindow, true)));
    /// ```
    #[non_exhaustive]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum StateKind {
        /// GCRA: the token bucket refilled smoothly, and the leaky bucket.
        TokenBucket = 1, "token_bucket", "gcra.lua" + "gcra_head.lua", TOKEN_BUCKET;
        /// The token bucket refilled at once each period.
        IntervalBucket = 2, "interval_bucket", "interval_bucket.lua", INTERVAL_BUCKET;
        /// The fixed window.
        FixedWindow = 3, "fixed_window", "fixed_window.lua", FIXED_WINDOW;
        /// The sliding window.
        SlidingWindow = 4, "sliding_window", "sliding_window.lua", SLIDING_WINDOW;
        /// The sliding log.
        SlidingLog = 5, "sliding_log", "sliding_log.lua", SLIDING_LOG;
        /// A concurrency limit's slots ([`Limit::concurrent`]).
        Concurrency = 6, "concurrency", "concurrency.lua", CONCURRENCY;
    }
}

// The ids count from 1 in the order of `ALL`, which indexes by them.
const _: () = {
    let mut i = 0;
    while i < StateKind::ALL.len() {
        assert!(StateKind::ALL[i] as usize == i + 1);
        i += 1;
    }
};

impl StateKind {
    /// The state `algorithm` keeps with `refill` (a rate limit's: a concurrency limit's is
    /// [`StateKind::Concurrency`]).
    #[must_use]
    pub const fn from_parts(algorithm: Algorithm, refill: Refill) -> StateKind {
        match (algorithm, refill) {
            (Algorithm::TokenBucket, Refill::Interval) => StateKind::IntervalBucket,
            (Algorithm::FixedWindow, _) => StateKind::FixedWindow,
            (Algorithm::SlidingWindow, _) => StateKind::SlidingWindow,
            (Algorithm::SlidingLog, _) => StateKind::SlidingLog,
            // The leaky bucket refills smoothly: GCRA's state.
            (Algorithm::TokenBucket | Algorithm::LeakyBucket, _) => StateKind::TokenBucket,
        }
    }

    /// The state `limit`'s script reads and writes, as the limiter picks the script.
    #[must_use]
    pub fn of(limit: &Limit) -> StateKind {
        Kernel::of(limit).kind()
    }

    /// The number a call's spec names this kind's script by.
    pub(crate) const fn id(self) -> u8 {
        self as u8
    }

    /// Its place in [`ALL`](StateKind::ALL).
    pub(crate) const fn index(self) -> usize {
        self as usize - 1
    }
}
