//! The algorithms' scripts against their Rust twins, on a real `redis-server` this test starts:
//! random call sequences run through each script (by `EVALSHA` of its text and `FCALL` of its
//! function in the library, picked at random per call, as the store runs one or the other), and the twin
//! is replayed at the server time the script decided at (its reply's fifth element). Every
//! field of every reply must be equal, and after every write the key Redis holds (value and
//! expiry) must be exactly the twin's state. Windows of a few milliseconds make real time
//! cross many window boundaries and expiries within a few seconds; each key switches between
//! two limits; a second pass plants arbitrary states (counts above the limit, other windows',
//! tokens in the future as after the server clock stepped back) in Redis and in the twin.
//!
//! What Redis holds is also read back as the library's tools read it (`State::decode`, and the
//! `ratelimit` CLI's path: the read script, `Stored`, `decode_state`, `peek`), which must give
//! the twin's state (what the memory store keeps) and the twin's answers.
//!
//! Also here: the token bucket's initial fill on Redis, and (ignored by default, run with
//! `--ignored --nocapture`) the memory per active key of each algorithm, written up in
//! `docs/algorithms.md`.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::fmt::Debug;
use std::time::Duration;

use ratelimit_core::tools::algorithms::{
    OfLimit as _, Outcome, WindowParams, calendar, concurrency, fixed_window, interval_bucket,
    sliding_log, sliding_window, token_bucket,
};
use ratelimit_core::tools::{
    self, BucketState, Decoded, StateKind, StateKindExt as _, Stored, scripts,
};
use ratelimit_core::{Algorithm, Limit, Refill};
use redis::{Connection, Script};
use testkit::{RedisServer, Rng};

/// One script reply: the decision's four fields and the server time it decided at.
/// One script run every way the store runs it, picked at random per call: by `EVALSHA` of
/// its text, by `FCALL` of its function in the library (both loaded on the test's server),
/// and by the Redis module's command where the module decides it (the test's servers load
/// the module). All must equal the twin, and so each other on one key's state: a state one
/// way wrote is read by the others.
struct BothWays {
    sha: String,
    function: &'static str,
    /// The module's command, where it has one.
    native: Option<&'static str>,
    /// Calls made by `FCALL`, by `EVALSHA` and by the module's command.
    counts: [u64; 3],
}

/// A server for the differential tests: with the Redis module loaded.
fn server() -> RedisServer {
    RedisServer::start_with(&testkit::module::load_args())
}

impl BothWays {
    /// `text`, whose function in the library is `name` (`token_bucket`, `concurrency_renew`).
    fn load(con: &mut Connection, text: &str, name: &str) -> BothWays {
        let library = scripts::library();
        let _: () = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(library.text())
            .query(con)
            .unwrap();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(text)
            .query(con)
            .unwrap();
        let native = scripts::native_commands()
            .into_iter()
            .find(|command| command.rsplit('.').next() == Some(name));
        BothWays {
            sha,
            function: library.function(name).unwrap(),
            native,
            counts: [0; 3],
        }
    }

    /// The command and its first argument for the next call: `FCALL <function>`,
    /// `EVALSHA <sha>`, or the module's command and nothing (`None`).
    fn pick(&mut self, rng: &mut Rng) -> (&'static str, Option<&str>) {
        let ways = if self.native.is_some() { 3 } else { 2 };
        let way = usize::try_from(rng.below(ways)).unwrap();
        self.counts[way] += 1;
        match (way, self.native) {
            (0, _) => ("FCALL", Some(self.function)),
            (1, _) => ("EVALSHA", Some(&self.sha)),
            (_, Some(command)) => (command, None),
            _ => unreachable!("a third way only with a module command"),
        }
    }

    /// Adds the next call to `pipe`, by a way picked at random: `FCALL` or `EVALSHA` with
    /// `key` and `args`, or the module's command with `key` and `args` packed. Its reply is
    /// read by [`numbers_of`] (a packed reply) or as the script's.
    fn push(&mut self, rng: &mut Rng, pipe: &mut redis::Pipeline, key: &str, args: &[u64]) {
        match self.pick(rng) {
            (command, Some(name)) => {
                pipe.cmd(command).arg(name).arg(1).arg(key).arg(args);
            }
            (command, None) => {
                let packed: Vec<String> = args.iter().map(u64::to_string).collect();
                pipe.cmd(command).arg(key).arg(packed.join(" "));
            }
        }
    }

    /// Every way ran.
    fn check(&self) {
        let ways = if self.native.is_some() { 3 } else { 2 };
        assert!(
            self.counts[..ways].iter().all(|&n| n > 0),
            "FCALL, EVALSHA and module calls: {:?}",
            self.counts
        );
    }
}

fn invoke(con: &mut Connection, script: &Script, key: &str, args: &[u64]) -> ([u64; 4], u64) {
    let mut call = script.key(key);
    for a in args {
        call.arg(*a);
    }
    let reply: Vec<u64> = call.invoke(con).unwrap();
    assert_eq!(reply.len(), 5, "{reply:?}");
    ([reply[0], reply[1], reply[2], reply[3]], reply[4])
}

/// A reply of numbers, the script's (an array) or the module's (packed into one string).
fn numbers_of(reply: &redis::Value) -> Vec<u64> {
    match reply {
        redis::Value::BulkString(text) => std::str::from_utf8(text)
            .unwrap()
            .split(' ')
            .map(|n| n.parse().unwrap_or_else(|_| panic!("{reply:?}")))
            .collect(),
        other => redis::FromRedisValue::from_redis_value(other.clone()).unwrap(),
    }
}

/// The module's `command` on `key` with the script's `args`, packed as the limiter packs
/// them (one argument, numbers separated by spaces), and its reply unpacked.
fn native(con: &mut Connection, command: &str, key: &str, args: &[u64]) -> Vec<u64> {
    let packed: Vec<String> = args.iter().map(u64::to_string).collect();
    let reply: String = redis::cmd(command)
        .arg(key)
        .arg(packed.join(" "))
        .query(con)
        .unwrap();
    reply
        .split(' ')
        .map(|n| n.parse().unwrap_or_else(|_| panic!("{reply:?}")))
        .collect()
}

fn fields<S>(o: &Outcome<S>) -> [u64; 4] {
    [
        u64::from(o.allowed),
        o.remaining,
        o.retry_after_us,
        o.reset_after_us,
    ]
}

fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

/// A sorted set's members and scores (`ZRANGE .. WITHSCORES`), and its key's expiry (ms;
/// -2 when the key is gone), read together.
fn set_and_expiry(con: &mut Connection, key: &str) -> (Written, i64) {
    redis::pipe()
        .cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .unwrap()
}

/// [`holds`] for what a state keeps: a string, or a sorted set's scores or members.
fn holds_kept(con: &mut Connection, key: &str, kept: &Kept, expire_ms: u64) {
    let Kept::String(value) = kept else {
        let (scores, expiry): (Written, i64) = set_and_expiry(con, key);
        if expiry == -2 || scores.is_empty() {
            let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
            assert!(
                secs * 1000 + micros / 1000 >= expire_ms,
                "{key} gone before {expire_ms}"
            );
            return;
        }
        let held = match kept {
            Kept::Scores(_) => Kept::Scores(scores.iter().map(|s| s.1).collect()),
            _ => {
                let mut members = scores;
                members.sort();
                Kept::Members(members)
            }
        };
        assert_eq!(
            (&held, expiry),
            (kept, i64::try_from(expire_ms).unwrap()),
            "{key}"
        );
        return;
    };
    holds(con, key, Some(value), expire_ms);
}

/// Checks that Redis holds `value` under `key` until exactly `expire_ms`, or has dropped the
/// key because that time has passed (windows of a millisecond end before the check).
fn holds(con: &mut Connection, key: &str, value: Option<&str>, expire_ms: u64) {
    // GET only a string.
    let mut pipe = redis::pipe();
    pipe.cmd("PEXPIRETIME").arg(key);
    if value.is_some() {
        pipe.cmd("GET").arg(key);
    }
    let (expiry, got): (i64, Option<String>) = if value.is_some() {
        pipe.query(con).unwrap()
    } else {
        (pipe.query::<(i64,)>(con).unwrap().0, None)
    };
    // Each command reads the clock anew: the key may expire between the two. Gone already in
    // its expiry's own millisecond is fine too: Redis deletes at once a key whose `PEXPIREAT`
    // is at or before its clock, and on a loaded machine a script may reach its `PEXPIREAT` a
    // millisecond after the `TIME` it computed the expiry from. Every state carries nothing
    // from the first microsecond of its expiry's millisecond on (the expiry is rounded up).
    if expiry == -2 || (value.is_some() && got.is_none()) {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
        assert!(
            secs * 1000 + micros / 1000 >= expire_ms,
            "{key} gone before {expire_ms}"
        );
        return;
    }
    if let Some(v) = value {
        assert_eq!(got.as_deref(), Some(v), "{key}");
    }
    assert_eq!(expiry, i64::try_from(expire_ms).unwrap(), "{key}");
}

/// One algorithm as the differential test drives it.
struct Kernel<S, P> {
    script: &'static str,
    /// Its function in the library (`StateKind::name`).
    function: &'static str,
    /// Two limits for one key, and the most a call may cost under both.
    params: fn(&mut Rng) -> ([P; 2], u64),
    args: fn(P, u64) -> Vec<u64>,
    /// The twin: (now, state, limit, cost).
    decide: fn(u64, Option<&S>, P, u64) -> Outcome<S>,
    /// Checks Redis's copy of a state the twin just wrote.
    stored: fn(&mut Connection, &str, &S, P),
    /// An arbitrary state near the server time `now` (a count above the limit, another
    /// window's, tokens in the future as after the clock stepped back), and how to write it.
    plant: fn(&mut Rng, u64, P) -> S,
    write: fn(&mut Connection, &str, &S, P),
    /// The millisecond a state's key expires in (its `PXAT`) when the state still counts
    /// during it (the interval bucket reads full until that millisecond ends), else `None`.
    /// Redis 8.2 may drop the key during that millisecond, Redis 7.0 and Valkey 9 only after
    /// it: there, and only there, the script may read the state or an absent key.
    last_ms: fn(&S) -> Option<u64>,
}

/// Runs `calls` random calls over 8 keys through the script and through the twin, comparing
/// replies and stored states; with `planting`, one call in 20 first overwrites its key with an
/// arbitrary state, written to Redis and given to the twin alike.
fn differential<S: Clone + Debug, P: Copy + Debug>(
    k: &Kernel<S, P>,
    seed: u64,
    calls: usize,
    planting: bool,
) {
    let server = server();
    let mut con = server.blocking_connection();
    let mut both = BothWays::load(&mut con, k.script, k.function);
    let mut rng = Rng(seed);
    // Each key has two limits, the second used for one call in four: a changed limit must
    // read the state the other wrote the same way in both.
    let keys: Vec<(String, [P; 2], u64)> = (0..8)
        .map(|i| {
            let (limits, max_cost) = (k.params)(&mut rng);
            (format!("app:{{algo:{i}}}"), limits, max_cost)
        })
        .collect();
    let mut states: Vec<Option<S>> = vec![None; keys.len()];
    let (mut admitted, mut refused, mut gone_in_last_ms) = (0, 0, 0);
    for n in 0..calls {
        let i = usize::try_from(rng.below(keys.len() as u64)).unwrap();
        let (key, limits, max_cost) = &keys[i];
        let p = limits[usize::from(rng.below(4) == 0)];
        let cost = 1 + rng.below(*max_cost);
        if planting && rng.below(20) == 0 {
            let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
            let planted = (k.plant)(&mut rng, secs * 1_000_000 + micros, p);
            (k.write)(&mut con, key, &planted, p);
            // Redis drops at once a key whose expiry has passed when it is written: then the
            // twin holds nothing either (the state had ended, or, for the interval bucket, was
            // in its last millisecond, which Redis did not keep).
            let exists: bool = redis::cmd("EXISTS").arg(key).query(&mut con).unwrap();
            states[i] = exists.then_some(planted);
        }
        if rng.below(8) == 0 {
            std::thread::sleep(Duration::from_micros(rng.below(4000)));
        }
        let (command, name) = both.pick(&mut rng);
        let args = (k.args)(p, cost);
        let reply: Vec<u64> = match name {
            // A script or function: its name, numkeys, the key, the arguments.
            Some(name) => redis::cmd(command)
                .arg(name)
                .arg(1)
                .arg(key)
                .arg(args)
                .query(&mut con)
                .unwrap(),
            // The module's command: the key, the arguments packed, the reply packed.
            None => native(&mut con, command, key, &args),
        };
        assert_eq!(reply.len(), 5, "{reply:?}");
        let (reply, now) = ([reply[0], reply[1], reply[2], reply[3]], reply[4]);
        let mut twin = (k.decide)(now, states[i].as_ref(), p, cost);
        if states[i].as_ref().and_then(k.last_ms) == Some(now / 1000) && reply != fields(&twin) {
            // In the state's last millisecond: its key may be gone already.
            twin = (k.decide)(now, None, p, cost);
            gone_in_last_ms += 1;
        }
        assert_eq!(
            reply,
            fields(&twin),
            "call {n} (seed {seed}) on {key} with {p:?}, cost {cost}, at {now}: script vs twin \
             {twin:?}, from {:?}",
            states[i]
        );
        if twin.allowed {
            admitted += 1;
        } else {
            refused += 1;
        }
        if let Some(s) = twin.new_state {
            (k.stored)(&mut con, key, &s, p);
            states[i] = Some(s);
        }
    }
    both.check();
    println!(
        "seed {seed}: {admitted} admitted, {refused} refused, all equal ({:?} by FCALL, EVALSHA, \
         module; {gone_in_last_ms} read absent in their last millisecond)",
        both.counts
    );
    // A floor only: on a loaded machine calls are slower, windows pass between them, and
    // fewer are refused (a few hundred of each on an idle one).
    assert!(
        admitted >= 10 && refused >= 10,
        "both outcomes exercised: {admitted} admitted, {refused} refused"
    );
}

/// Runs `k` plainly and with planted states, for each seed.
fn run_all<S: Clone + Debug, P: Copy + Debug>(k: &Kernel<S, P>) {
    for seed in SEEDS {
        differential(k, seed, CALLS, false);
        differential(k, seed ^ 1, CALLS / 2, true);
    }
}

/// `SET key value PXAT expire_ms` (Redis drops the key at once if that time has passed).
fn set_pxat(con: &mut Connection, key: &str, value: &str, expire_ms: u64) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PXAT")
        .arg(expire_ms)
        .query::<()>(con)
        .unwrap();
}

/// A whole number of periods from `now`'s: -2 to 2.
fn periods_around(rng: &mut Rng, now: u64, period: u64) -> u64 {
    (now / period + rng.below(5)).saturating_sub(2)
}

/// Windows of 1 to 9 tokens per 1 to 20 ms, or per an odd 1.5 ms (the sliding window's
/// microsecond ticks); two limits of one period. (A window changed to a longer period may
/// find its key already expired under the shorter one: what it forgets then depends on
/// Redis's expiry, which the twin does not model.)
fn window(rng: &mut Rng) -> ([WindowParams; 2], u64) {
    let period = if rng.below(4) == 0 {
        1500
    } else {
        1000 * (1 + rng.below(20))
    };
    let (a, b) = (1 + rng.below(9), 1 + rng.below(9));
    let limits = [a, b].map(|limit| WindowParams::try_new(limit, period).unwrap());
    (limits, a.min(b).min(3))
}

/// Where `fixed_window_head.lua` ends a window holding an instant, against the twin
/// (`fixed_window::window_end`), at 10,000 instants: random ones from 1971 to 2250 and the
/// microseconds around the ends of their windows, for weeks from every weekday and months
/// from every day (the 29th to the 31st across February in leap and common years), at offsets
/// from UTC-14:00 to UTC+14:00; and windows of a fixed period. The script reads no clock
/// here: the instants are its arguments, so any date can be checked on today's server.
#[test]
fn calendar_windows_end_where_the_twin_says() {
    let server = RedisServer::start();
    let mut con = server.blocking_connection();
    let script = Script::new(concat!(
        include_str!("../../ratelimit-core/src/scripts/prelude.lua"),
        include_str!("../../ratelimit-core/src/scripts/fixed_window_head.lua"),
        "local out = {}\n",
        "for i = 1, #ARGV, 7 do\n",
        "  local args = {ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]}\n",
        "  if ARGV[i + 3] == '0' then args = {ARGV[i + 1], ARGV[i + 2], ARGV[i + 6]} end\n",
        "  out[#out + 1] = int(window_end(tonumber(ARGV[i]), args))\n",
        "end\n",
        "return out\n",
    ));
    let mut rng = Rng(0xca1e_da25);
    let from = calendar::Calendar::midnight_utc_us(1971, 1, 1).unwrap();
    let to = calendar::Calendar::midnight_utc_us(2250, 1, 1).unwrap();
    let month = WindowParams::try_new(100, 31 * calendar::DAY_US).unwrap();
    let (mut checked, mut months) = (0, 0);
    for _ in 0..100 {
        // 100 instants per script call, each with its own calendar (or none).
        let mut argv: Vec<u64> = Vec::new();
        let mut expected: Vec<u64> = Vec::new();
        for _ in 0..100 {
            let offset = i32::try_from(rng.below(1681)).unwrap() - 840;
            let (p, c) = match rng.below(5) {
                0 => (
                    WindowParams::try_new(7, 1000 * (1 + rng.below(100_000))).unwrap(),
                    None,
                ),
                1 => (
                    month,
                    calendar::Calendar::week(1 + u8::try_from(rng.below(7)).unwrap(), offset),
                ),
                _ => {
                    months += 1;
                    let day = [1, 15, 28, 29, 30, 31][usize::try_from(rng.below(6)).unwrap()];
                    (month, calendar::Calendar::month(day, offset))
                }
            };
            let mut at = from + rng.below(to - from);
            // Around a window's end: the last microsecond of a window, or the first of the
            // next; or a February's end.
            match rng.below(4) {
                0 => at = fixed_window::window_end(at, p, c) - 1,
                1 => at = fixed_window::window_end(at, p, c),
                2 => {
                    let year = 1971 + i64::try_from(rng.below(270)).unwrap();
                    let march = calendar::Calendar::midnight_utc_us(year, 3, 1).unwrap();
                    at = march - rng.below(2 * calendar::DAY_US);
                }
                _ => {}
            }
            let args = match c {
                Some(c) => fixed_window::calendar_args(p, c, 1).to_vec(),
                None => {
                    let a = fixed_window::args(p, 1);
                    vec![a[0], a[1], 0, 0, 0, a[2]]
                }
            };
            argv.push(at);
            argv.extend(args);
            expected.push(fixed_window::window_end(at, p, c));
        }
        let mut call = script.prepare_invoke();
        for a in &argv {
            call.arg(*a);
        }
        let ends: Vec<u64> = call.invoke(&mut con).unwrap();
        for (i, (end, want)) in ends.iter().zip(&expected).enumerate() {
            assert_eq!(end, want, "{:?}", &argv[i * 7..i * 7 + 7]);
            checked += 1;
        }
    }
    assert!(
        checked == 10_000 && months > 4000,
        "{checked} checked, {months} months"
    );
}

const CALLS: usize = 3000;
const SEEDS: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xD1B5_4A32_D192_ED03];

#[test]
fn fixed_window_script_equals_its_twin() {
    run_all(&Kernel {
        script: fixed_window::SCRIPT,
        function: "fixed_window",
        params: window,
        args: |p, cost| fixed_window::args(p, cost).to_vec(),
        decide: |now, s, p, cost| fixed_window::decide(now, s.copied(), p, cost),
        stored: |con, key, s, _| {
            holds(con, key, Some(&s.encode()), s.expire_ms);
            assert_eq!(
                fixed_window::State::decode(&s.encode(), s.expire_ms),
                Some(*s)
            );
        },
        plant: |rng, now, p| fixed_window::State {
            count: 1 + rng.below(3 * p.limit()),
            expire_ms: ((periods_around(rng, now, p.period_us()) + 1) * p.period_us())
                .div_ceil(1000),
        },
        write: |con, key, s, _| set_pxat(con, key, &s.encode(), s.expire_ms),
        last_ms: |_| None,
    });
}

/// Windows that are calendar periods (weeks, months; in UTC and at offsets; anchored on
/// days the month may lack), by the fixed window's script, function and module command,
/// against the twin. At today's clock a call rarely meets a window's end: the ends
/// themselves are held to the twin at every date by `calendar_windows_end_where_the_twin_says`;
/// here the arguments, the count, the expiry that names the window, a limit changed within
/// one, and planted states of other windows.
#[test]
fn calendar_windows_by_the_fixed_window_equal_the_twin() {
    type P = (WindowParams, calendar::Calendar);
    run_all(&Kernel::<fixed_window::State, P> {
        script: fixed_window::SCRIPT,
        function: "fixed_window",
        params: |rng| {
            let offset = i32::try_from(rng.below(1681)).unwrap() - 840;
            let c = if rng.below(3) == 0 {
                calendar::Calendar::week(1 + u8::try_from(rng.below(7)).unwrap(), offset)
            } else {
                calendar::Calendar::month(1 + u8::try_from(rng.below(31)).unwrap(), offset)
            }
            .unwrap();
            let (a, b) = (1 + rng.below(9), 1 + rng.below(9));
            let p = |limit| {
                (
                    WindowParams::try_new(limit, 31 * calendar::DAY_US).unwrap(),
                    c,
                )
            };
            ([p(a), p(b)], a.min(b).min(3))
        },
        args: |(p, c), cost| fixed_window::calendar_args(p, c, cost).to_vec(),
        decide: |now, s, (p, c), cost| fixed_window::decide_in(now, s.copied(), p, Some(c), cost),
        stored: |con, key, s, _| holds(con, key, Some(&s.encode()), s.expire_ms),
        // Another window's count: the one before, this one, or the next.
        plant: |rng, now, (p, c)| {
            let end = fixed_window::window_end(now, p, Some(c));
            let end = match rng.below(3) {
                0 => c.window(now).0,
                1 => end,
                _ => fixed_window::window_end(end, p, Some(c)),
            };
            fixed_window::State {
                count: 1 + rng.below(3 * p.limit()),
                expire_ms: end.div_ceil(1000),
            }
        },
        write: |con, key, s, _| set_pxat(con, key, &s.encode(), s.expire_ms),
        last_ms: |_| None,
    });
}

#[test]
fn sliding_window_script_equals_its_twin() {
    run_all(&Kernel {
        script: sliding_window::SCRIPT,
        function: "sliding_window",
        params: |rng| {
            let (limits, max_cost) = window(rng);
            let sliding = |w: WindowParams| {
                sliding_window::SlidingParams::try_new(w.limit(), w.period_us()).unwrap()
            };
            (limits.map(sliding), max_cost)
        },
        args: |p, cost| sliding_window::args(p, cost).to_vec(),
        decide: |now, s, p, cost| sliding_window::decide(now, s.copied(), p, cost),
        stored: |con, key, s, p| {
            holds(con, key, Some(&s.encode()), s.expire_ms(p));
            assert_eq!(sliding_window::State::decode(&s.encode()), Some(*s));
        },
        plant: |rng, now, p| sliding_window::State {
            window: periods_around(rng, now, p.window().period_us()),
            previous: rng.below(3 * p.window().limit()),
            current: rng.below(3 * p.window().limit()),
        },
        write: |con, key, s, p| set_pxat(con, key, &s.encode(), s.expire_ms(p)),
        last_ms: |_| None,
    });
}

#[test]
fn sliding_log_script_equals_its_twin() {
    run_all(&Kernel {
        script: sliding_log::SCRIPT,
        function: "sliding_log",
        params: window,
        args: |p, cost| sliding_log::args(p, cost).to_vec(),
        decide: |now, s, p, cost| {
            sliding_log::decide(now, s.map_or(&[][..], Vec::as_slice), p, cost)
        },
        stored: |con, key, log, p| {
            let expire_ms = sliding_log::expire_ms(log, p).unwrap();
            // The members and scores as written, unless the whole log has expired since.
            let (scores, expiry): (Vec<(String, u64)>, i64) = set_and_expiry(con, key);
            if expiry != -2 {
                let times: Vec<u64> = scores.iter().map(|(_, t)| *t).collect();
                assert_eq!(&times, log);
                let mut members: Vec<&String> = scores.iter().map(|(m, _)| m).collect();
                members.dedup();
                assert_eq!(members.len(), log.len(), "one member per token");
            }
            holds(con, key, None, expire_ms);
        },
        // Up to 3 x limit tokens from two periods back to two ahead (a clock stepped back).
        plant: |rng, now, p| {
            let span = 4 * p.period_us();
            let n = 1 + rng.below(3 * p.limit());
            let mut log: Vec<u64> = (0..n).map(|_| now - span / 2 + rng.below(span)).collect();
            log.sort_unstable();
            log
        },
        write: |con, key, log, p| {
            let mut pipe = redis::pipe();
            pipe.cmd("DEL").arg(key).ignore();
            for (i, t) in log.iter().enumerate() {
                pipe.cmd("ZADD")
                    .arg(key)
                    .arg(*t)
                    .arg(format!("{t}:p{i}"))
                    .ignore();
            }
            let expire_ms = sliding_log::expire_ms(log, p).unwrap();
            pipe.cmd("PEXPIREAT").arg(key).arg(expire_ms).ignore();
            pipe.query::<()>(con).unwrap();
        },
        last_ms: |_| None,
    });
}

/// A concurrency set's live members (lease not ended at `now`), sorted by their text.
fn live_members(entries: &[concurrency::Entry], now: u64) -> Vec<(String, u64)> {
    let mut live: Vec<(String, u64)> = entries
        .iter()
        .filter(|e| e.1 > now)
        .map(|e| (e.0.to_text(), e.1))
        .collect();
    live.sort();
    live
}

/// A concurrency set as `ZRANGE .. WITHSCORES` answers it.
type Written = Vec<(String, u64)>;

/// Runs `pipe` (one script call, in a transaction) followed by a read of the set `key`, its
/// expiry (ms, negative without one) and the server time of that read (µs): the script's
/// reply, the set, the expiry, the time. On a loaded machine the server can be descheduled
/// between the script and the read, long enough for a lease of a few milliseconds to end and
/// its key to go: what is live is compared then.
fn then_read<T: redis::FromRedisValue>(
    pipe: &mut redis::Pipeline,
    con: &mut Connection,
    key: &str,
) -> (T, Written, i64, u64) {
    let (reply, written, expiry, (secs, micros)): (T, Written, i64, (u64, u64)) = pipe
        .cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("PEXPIRETIME")
        .arg(key)
        .cmd("TIME")
        .query(con)
        .unwrap();
    (reply, written, expiry, secs * 1_000_000 + micros)
}

/// The members of a concurrency set as `ZRANGE .. WITHSCORES` answered them.
fn members_of(scores: &[(String, u64)]) -> Vec<concurrency::Entry> {
    scores
        .iter()
        .map(|(m, score)| {
            let member = concurrency::Member::parse(m).unwrap();
            // A ticket is scored above `TICKET`; a slot by its lease end.
            let end = match member {
                concurrency::Member::Waiting { .. } => {
                    assert!(*score > concurrency::TICKET, "{m} {score}");
                    score - concurrency::TICKET
                }
                concurrency::Member::Held { .. } => {
                    assert!(*score < concurrency::TICKET, "{m} {score}");
                    *score
                }
            };
            (member, end)
        })
        .collect()
}

/// The concurrency scripts (acquire, release, renew) against their twin: random calls of a
/// few holders over two keys, with leases of a few milliseconds so that real time ends many
/// of them; every reply equal to the twin's at the server time the script decided at, and the
/// live members Redis holds equal to the twin's after every call.
#[test]
fn concurrency_scripts_equal_their_twin() {
    let server = server();
    let mut con = server.blocking_connection();
    // Loaded up front: the decision and the renewal run inside transactions.
    let mut acquire = BothWays::load(&mut con, concurrency::SCRIPT, "concurrency");
    let mut release = BothWays::load(&mut con, concurrency::RELEASE_SCRIPT, "concurrency_release");
    let mut renew = BothWays::load(&mut con, concurrency::RENEW_SCRIPT, "concurrency_renew");
    let mut rng = Rng(0x5eed_c0c0);
    let keys = ["c0", "c1"];
    let mut twins: [Vec<concurrency::Entry>; 2] = [Vec::new(), Vec::new()];
    let (mut admitted, mut refused, mut queued) = (0, 0, 0);
    // Renewals, and those whose writes had ended before they could be read.
    let (mut renewals, mut unseen) = (0, 0);
    for step in 0..3000 {
        let k = usize::try_from(rng.below(2)).unwrap();
        let key = keys[k];
        // Holders from a small pool, some above 2^53 (ids are text to the scripts).
        let holder = [1, 2, 3, 4, 5, u64::MAX - 7][usize::try_from(rng.below(6)).unwrap()];
        let lease_us = 2_000 + rng.below(8_000);
        match rng.below(10) {
            0..=5 => {
                let p = concurrency::Params {
                    max: 1 + rng.below(3),
                    lease_us,
                    holder,
                    queue: rng.below(2) == 0,
                };
                let cost = rng.below(3).min(p.max);
                // The decision and a read of what it wrote in one transaction, as for a
                // renewal below.
                let mut pipe = redis::pipe();
                pipe.atomic();
                acquire.push(&mut rng, &mut pipe, key, &concurrency::args(p, cost));
                let (reply, written, expiry, read_at): (redis::Value, _, _, _) =
                    then_read(&mut pipe, &mut con, key);
                let reply = numbers_of(&reply);
                assert_eq!(reply.len(), 5, "{reply:?}");
                let (reply, now) = ([reply[0], reply[1], reply[2], reply[3]], reply[4]);
                let o = concurrency::decide(now, &twins[k], p, cost);
                assert_eq!(
                    reply,
                    fields(&o),
                    "step {step}: {p:?} cost {cost} on {:?}",
                    twins[k]
                );
                match (o.allowed, p.queue) {
                    (true, _) => admitted += 1,
                    (false, true) => queued += 1,
                    (false, false) => refused += 1,
                }
                if let Some(next) = o.new_state {
                    // Written in this transaction: the key's expiry is the last lease end
                    // the reply counts (the latest before the call, the call's own one
                    // included where it renews a slot of a longer lease, or its new one).
                    if !written.is_empty() {
                        let last_end = (now + reply[3]).div_ceil(1000);
                        assert_eq!(expiry, i64::try_from(last_end).unwrap(), "step {step}");
                    }
                    twins[k] = next;
                }
                assert_eq!(
                    live_members(&members_of(&written), read_at.max(now)),
                    live_members(&twins[k], read_at.max(now)),
                    "step {step}"
                );
            }
            6 | 7 => {
                // Every slot a holder may hold (cost at most 3).
                let mut pipe = redis::pipe();
                release.push(&mut rng, &mut pipe, key, &[holder, 3]);
                let (_removed,): (u64,) = pipe.query(&mut con).unwrap();
                // What the twin drops besides the holder's is ended already.
                twins[k] = concurrency::release(0, &twins[k], holder, 3);
            }
            _ => {
                // The renewal and a read of what it wrote in one transaction: a lease of a
                // few milliseconds may end (and the key with it) before a later read.
                let mut pipe = redis::pipe();
                pipe.atomic();
                renew.push(&mut rng, &mut pipe, key, &[holder, lease_us, 3]);
                let (renewed, written, expiry, read_at): (u64, _, _, _) =
                    then_read(&mut pipe, &mut con, key);
                renewals += 1;
                // A renewal writes the holder's slots whether or not they were live.
                {
                    // The server time the script renewed at, from the leases it wrote.
                    let written = members_of(&written);
                    let latest = written
                        .iter()
                        .filter(|e| {
                            matches!(e.0, concurrency::Member::Held { holder: h, .. } if h == holder)
                        })
                        .map(|e| e.1)
                        .max();
                    let Some(latest) = latest else {
                        // None of them left to read: the server was descheduled between the
                        // renewal and the read for longer than the lease (2 ms or more) and
                        // the key ended (a fresh-clone run beside other builds did). The
                        // renewal's time is unknown, so this step is not compared; the twin
                        // takes what Redis holds.
                        unseen += 1;
                        twins[k] = written;
                        continue;
                    };
                    let at = latest - lease_us;
                    let twin = concurrency::renew(at, &mut twins[k], holder, 3, lease_us);
                    assert_eq!(renewed, twin, "step {step}");
                    let twin_expiry = i64::try_from(concurrency::expire_ms(&twins[k])).unwrap();
                    assert_eq!(expiry, twin_expiry, "step {step}: the key's expiry");
                    assert_eq!(
                        live_members(&written, read_at.max(at)),
                        live_members(&twins[k], read_at.max(at)),
                        "step {step}"
                    );
                }
            }
        }
        if rng.below(50) == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(6)));
        }
    }
    println!(
        "concurrency: {admitted} admitted, {queued} queued, {refused} refused; \
         {unseen} of {renewals} renewals ended before their read"
    );
    assert!(admitted > 100 && queued > 100 && refused > 100);
    // A renewal that wrote nothing would end up here every time: most are read.
    assert!(
        unseen * 2 < renewals,
        "{unseen} of {renewals} renewals unseen"
    );
    for way in [&acquire, &release, &renew] {
        way.check();
    }
}

#[test]
fn interval_bucket_script_equals_its_twin() {
    run_all(&Kernel {
        script: interval_bucket::SCRIPT,
        function: "interval_bucket",
        // Any two limits: the state says itself when it ends, whatever limit reads it.
        params: |rng| {
            let mut one = || {
                let replenish = 1 + rng.below(4);
                let burst = 1 + rng.below(8);
                let period = 1000 * (1 + rng.below(10));
                let initial = rng.below(burst + 1);
                let p = interval_bucket::IntervalParams::try_new(replenish, burst, period, initial)
                    .unwrap();
                (p, burst.min(3))
            };
            let ((p, a), (q, b)) = (one(), one());
            ([p, q], a.min(b))
        },
        args: |p, cost| interval_bucket::args(p, cost).to_vec(),
        decide: |now, s, p, cost| interval_bucket::decide(now, s.copied(), p, cost),
        stored: |con, key, s, _| {
            holds(con, key, Some(&s.encode()), s.expire_ms);
            assert_eq!(
                interval_bucket::State::decode(&s.encode(), s.expire_ms),
                Some(*s)
            );
        },
        // Any slack, full again from 20 ms ago to 100 ms ahead, or a day ahead.
        plant: |rng, now, _| interval_bucket::State {
            slack: rng.below(8),
            expire_ms: if rng.below(8) == 0 {
                now / 1000 + 86_400_000
            } else {
                now / 1000 + rng.below(120) - 20
            },
        },
        write: |con, key, s, _| set_pxat(con, key, &s.encode(), s.expire_ms),
        last_ms: |s| Some(s.expire_ms),
    });
}

#[test]
fn token_bucket_script_equals_its_twin() {
    run_all(&Kernel {
        script: token_bucket::SCRIPT,
        function: "token_bucket",
        // Two limits of a few milliseconds per period, whole and fractional microseconds per
        // token (7 per 3 ms is 428.57 µs), some starting below full: the second one reads the
        // first one's buckets, converting what they owe.
        params: |rng| {
            let mut one = || {
                let replenish = 1 + u32::try_from(rng.below(7)).unwrap();
                let period = Duration::from_micros(1000 * (1 + rng.below(6)));
                let burst = 1 + u32::try_from(rng.below(8)).unwrap();
                let mut limit = Limit::per(replenish, period).try_burst(burst).unwrap();
                match rng.below(6) {
                    0 => {
                        let initial = u32::try_from(rng.below(u64::from(burst) + 1)).unwrap();
                        limit = limit.try_initial(Some(initial)).unwrap();
                    }
                    // Calls that reserve and wait: a bound of up to 20 ms, or a leaky bucket.
                    1 | 2 => {
                        let wait = Duration::from_micros(1 + rng.below(20_000));
                        limit = limit.try_wait(wait).unwrap();
                    }
                    3 => limit = limit.try_algorithm(Algorithm::LeakyBucket).unwrap(),
                    _ => {}
                }
                (token_bucket::params(&limit), u64::from(burst).min(3))
            };
            let ((p, a), (q, b)) = (one(), one());
            ([p, q], a.min(b))
        },
        args: |p, cost| token_bucket::args(p, cost).to_vec(),
        decide: |now, s, p, cost| token_bucket::decide(now, s.copied(), p, cost),
        // What Redis holds is the twin's state in the form `State::encode` writes and
        // `State::decode` (the library's tools) reads.
        stored: |con, key, s, _| {
            holds(con, key, Some(&s.encode()), s.expire_ms);
            assert_eq!(
                token_bucket::State::decode(&s.encode(), s.expire_ms),
                Some(*s)
            );
        },
        // Full again from 20 ms ago to 100 ms ahead, or a day ahead (the clock stepped back),
        // written under this limit or another with any fine unit.
        plant: |rng, now, p| {
            let (per_micro, interval) = if rng.below(2) == 0 {
                (p.per_micro, p.interval)
            } else {
                (1 + rng.below(12), 1 + rng.below(20_000))
            };
            token_bucket::State {
                expire_ms: if rng.below(8) == 0 {
                    now / 1000 + 86_400_000
                } else {
                    now / 1000 + rng.below(120) - 20
                },
                remainder: rng.below(1000 * per_micro),
                per_micro,
                interval,
            }
        },
        write: |con, key, s, _| set_pxat(con, key, &s.encode(), s.expire_ms),
        last_ms: |_| None,
    });
}

/// One call of cost 2 under `limit` through its script on an absent key, then the key read
/// back as the `ratelimit` CLI reads it (the library's read script, `Stored::from_reply`):
/// `tools::peek` on it answers what the twin answers on its own state (what the memory store
/// keeps) at the instant of the read. Returns the state as `tools::decode_state` describes it.
fn read_back<S>(
    con: &mut Connection,
    limit: Limit,
    script: &str,
    args: &[u64],
    decide: impl Fn(u64, Option<&S>, u64) -> Outcome<S>,
) -> Decoded {
    let script = Script::new(script);
    let key = format!("app:{{{}}}", script.get_hash());
    let (reply, at) = invoke(con, &script, &key, args);
    let twin = decide(at, None, 2);
    assert_eq!(reply, fields(&twin), "{limit}");
    let state = twin.new_state.unwrap();
    let reply: redis::Value = Script::new(tools::READ_SCRIPT)
        .key(&key)
        .arg("full")
        .invoke(con)
        .unwrap();
    let stored = Stored::from_reply(&reply).unwrap();
    let peeked = tools::peek(&limit, 1, &stored).unwrap();
    let expected = Outcome::peek(|c| decide(stored.now_us, Some(&state), c), 1);
    assert_eq!(
        [
            u64::from(peeked.allowed),
            peeked.remaining,
            peeked.retry_after_us,
            peeked.reset_after_us
        ],
        fields(&expected),
        "{limit}: {stored:?}"
    );
    tools::decode_state(&stored, StateKind::of(&limit))
}

/// What each script writes reads back through the library's tools as its twin's state.
#[test]
fn stored_states_read_back_through_tools() {
    let server = RedisServer::start();
    let mut con = server.blocking_connection();

    let limit = Limit::per_minute(5);
    let p = token_bucket::params(&limit);
    let decoded = read_back(
        &mut con,
        limit,
        scripts::TOKEN_BUCKET,
        &token_bucket::args(p, 2),
        |now, s, c| token_bucket::decide(now, s.copied(), p, c),
    );
    assert!(
        matches!(
            decoded,
            Decoded::State(BucketState::TokenBucket { tokens_owed: 2, .. })
        ),
        "{decoded:?}"
    );

    let limit = Limit::per_minute(5).refill(Refill::Interval);
    let p = interval_bucket::IntervalParams::of(&limit).unwrap();
    let decoded = read_back(
        &mut con,
        limit,
        scripts::INTERVAL_BUCKET,
        &interval_bucket::args(p, 2),
        |now, s, c| interval_bucket::decide(now, s.copied(), p, c),
    );
    assert!(
        matches!(decoded, Decoded::State(BucketState::IntervalBucket { .. })),
        "{decoded:?}"
    );

    let limit = Limit::per_minute(5).algorithm(Algorithm::FixedWindow);
    let p = WindowParams::of(&limit).unwrap();
    let decoded = read_back(
        &mut con,
        limit,
        scripts::FIXED_WINDOW,
        &fixed_window::args(p, 2),
        |now, s, c| fixed_window::decide(now, s.copied(), p, c),
    );
    assert!(
        matches!(
            decoded,
            Decoded::State(BucketState::FixedWindow { count: 2, .. })
        ),
        "{decoded:?}"
    );

    let limit = Limit::per_minute(5).algorithm(Algorithm::SlidingWindow);
    let p = sliding_window::SlidingParams::of(&limit).unwrap();
    let decoded = read_back(
        &mut con,
        limit,
        scripts::SLIDING_WINDOW,
        &sliding_window::args(p, 2),
        |now, s, c| sliding_window::decide(now, s.copied(), p, c),
    );
    assert!(
        matches!(
            decoded,
            Decoded::State(BucketState::SlidingWindow { current: 2, .. })
        ),
        "{decoded:?}"
    );

    let limit = Limit::per_minute(5).algorithm(Algorithm::SlidingLog);
    let p = WindowParams::of(&limit).unwrap();
    let decoded = read_back(
        &mut con,
        limit,
        scripts::SLIDING_LOG,
        &sliding_log::args(p, 2),
        |now, s: Option<&Vec<u64>>, c| {
            sliding_log::decide(now, s.map_or(&[][..], Vec::as_slice), p, c)
        },
    );
    assert!(
        matches!(
            decoded,
            Decoded::State(BucketState::SlidingLog { tokens: 2, .. })
        ),
        "{decoded:?}"
    );
}

/// A key holding what no script writes (another type, text, a count without expiry) costs
/// that key its state, never an error: the windows read it as empty, the interval bucket as
/// an empty bucket (it cannot know what was taken), and each script overwrites it with a
/// state of its own that expires. The module's commands read it alike.
#[test]
fn foreign_values_are_overwritten_not_errors() {
    let server = server();
    let mut con = server.blocking_connection();
    let w = WindowParams::try_new(5, 60_000_000).unwrap();
    let sw = sliding_window::SlidingParams::try_new(5, 60_000_000).unwrap();
    let ib = interval_bucket::IntervalParams::try_new(5, 5, 60_000_000, 5).unwrap();
    let scripts: [(&str, &str, Vec<u64>, u64); 4] = [
        (
            fixed_window::SCRIPT,
            "fixed_window",
            fixed_window::args(w, 1).to_vec(),
            1,
        ),
        (
            sliding_window::SCRIPT,
            "sliding_window",
            sliding_window::args(sw, 1).to_vec(),
            1,
        ),
        (
            sliding_log::SCRIPT,
            "sliding_log",
            sliding_log::args(w, 1).to_vec(),
            1,
        ),
        (
            interval_bucket::SCRIPT,
            "interval_bucket",
            interval_bucket::args(ib, 1).to_vec(),
            0,
        ),
    ];
    let mut natively = 0;
    for (text, name, args, allowed) in scripts {
        let script = Script::new(text);
        let command = scripts::native_commands()
            .into_iter()
            .find(|command| command.rsplit('.').next() == Some(name));
        let ways = if command.is_some() { 2 } else { 1 };
        for way in 0..ways {
            for (i, foreign) in ["list", "text", "no expiry"].into_iter().enumerate() {
                let key = format!("foreign:{i}");
                redis::cmd("DEL").arg(&key).query::<()>(&mut con).unwrap();
                match foreign {
                    "list" => redis::cmd("RPUSH").arg(&key).arg("x").query::<()>(&mut con),
                    "text" => redis::cmd("SET")
                        .arg(&key)
                        .arg("1:2:x")
                        .query::<()>(&mut con),
                    _ => redis::cmd("SET").arg(&key).arg("3").query::<()>(&mut con),
                }
                .unwrap();
                let call = |con: &mut Connection| match (way, command) {
                    (1, Some(command)) => native(con, command, &key, &args)[0],
                    _ => invoke(con, &script, &key, &args).0[0],
                };
                assert_eq!(call(&mut con), allowed, "{name} ({way}), {foreign}");
                assert!(
                    pexpiretime(&mut con, &key) > 0,
                    "{name} ({way}), {foreign}: overwritten with an expiry"
                );
                // And the state written reads back: a second call answers too.
                call(&mut con);
                natively += way;
            }
        }
    }
    assert!(natively >= 9, "the module's commands ran too: {natively}");
}

/// gcra.lua's optional fifth argument: an absent bucket starts with `initial` tokens. A limit
/// of 1 per hour, so the test's own time cannot add a token.
#[test]
fn token_bucket_initial_fill_on_redis() {
    const GCRA: &str = scripts::TOKEN_BUCKET;
    let server = RedisServer::start();
    let mut con = server.blocking_connection();
    let script = Script::new(GCRA);
    // 1 per hour in fine units of 1 µs: interval 3600 s, burst 10, initial 3.
    let interval: u64 = 3_600_000_000;
    let run = |con: &mut Connection, key: &str, absent: Option<u64>| -> Vec<u64> {
        let mut call = script.key(key);
        call.arg(interval).arg(1).arg(10 * interval).arg(1);
        if let Some(a) = absent {
            call.arg(a);
        }
        call.invoke(con).unwrap()
    };
    for remaining in [2, 1, 0] {
        let reply = run(&mut con, "warm", Some(7 * interval));
        assert_eq!(reply[..3], [1, remaining, 0]);
    }
    let refused = run(&mut con, "warm", Some(7 * interval));
    assert_eq!(refused[..2], [0, 0]);
    assert!(refused[2] > interval - 60_000_000 && refused[2] <= interval);
    // Without the argument, an absent bucket is full, as before.
    assert_eq!(run(&mut con, "cold", None)[..2], [1, 9]);
    // An empty start is stored even when refused, so that its wait comes true.
    let empty = run(&mut con, "empty", Some(10 * interval));
    assert_eq!(empty[0], 0);
    assert!(pexpiretime(&mut con, "empty") > 0);
}

fn used_memory(con: &mut Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
    testkit::info_number(&info, "used_memory", None).unwrap()
}

/// Bytes of `used_memory` per key over `n` keys that `write` fills, from an empty database.
fn per_key(con: &mut Connection, n: u64, mut write: impl FnMut(&mut Connection, &str)) -> f64 {
    redis::cmd("FLUSHALL").arg("SYNC").query::<()>(con).unwrap();
    let before = used_memory(con);
    for i in 0..n {
        // The shape of a real bucket key: prefix, a 40-character limit name, a user key.
        write(
            con,
            &format!("app:{{orders_service::handlers::list_orders_v2:user-{i:08}}}"),
        );
    }
    let keys: u64 = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(keys, n);
    (used_memory(con) - before) as f64 / n as f64
}

#[test]
#[ignore = "a measurement for docs/algorithms.md: run with --ignored --nocapture"]
fn memory_per_active_key() {
    let server = RedisServer::start();
    let mut con = server.blocking_connection();
    const N: u64 = 10_000;
    // Keys that stay active through the measurement: windows of a minute, 100 tokens.
    let w = WindowParams::try_new(100, 60_000_000).unwrap();
    let sw = sliding_window::SlidingParams::try_new(100, 60_000_000).unwrap();
    let scripts = [
        (
            "fixed_window",
            fixed_window::SCRIPT,
            fixed_window::args(w, 1).to_vec(),
        ),
        (
            "sliding_window",
            sliding_window::SCRIPT,
            sliding_window::args(sw, 1).to_vec(),
        ),
        (
            "sliding_log, 1 token",
            sliding_log::SCRIPT,
            sliding_log::args(w, 1).to_vec(),
        ),
        (
            "sliding_log, 10 tokens",
            sliding_log::SCRIPT,
            sliding_log::args(w, 10).to_vec(),
        ),
        (
            "sliding_log, 100 tokens",
            sliding_log::SCRIPT,
            sliding_log::args(w, 100).to_vec(),
        ),
    ];
    // Beyond 128 members a sorted set leaves its compact encoding: fewer keys, more tokens.
    let script = Script::new(sliding_log::SCRIPT);
    let big = WindowParams::try_new(1000, 60_000_000).unwrap();
    let args = sliding_log::args(big, 1000);
    let thousand = per_key(&mut con, 1000, |c, k| {
        assert_eq!(invoke(c, &script, k, &args).0[0], 1);
    });
    let interval = interval_bucket::IntervalParams::try_new(100, 100, 60_000_000, 100).unwrap();
    let mut rows = Vec::new();
    // A first pass of the first variant, discarded: it pays for the server's one-off growth
    // (script cache, buffers) that later variants reuse.
    let script = Script::new(fixed_window::SCRIPT);
    let args = fixed_window::args(w, 1);
    per_key(&mut con, N, |c, k| {
        assert_eq!(invoke(c, &script, k, &args).0[0], 1);
    });
    for (label, text, args) in &scripts {
        let script = Script::new(text);
        rows.push((
            *label,
            per_key(&mut con, N, |c, k| {
                assert_eq!(invoke(c, &script, k, args).0[0], 1);
            }),
        ));
    }
    let script = Script::new(interval_bucket::SCRIPT);
    let args = interval_bucket::args(interval, 1).to_vec();
    rows.push((
        "interval_bucket",
        per_key(&mut con, N, |c, k| {
            assert_eq!(invoke(c, &script, k, &args).0[0], 1);
        }),
    ));
    // The token bucket (gcra.lua), for comparison: 100 per minute, all taken (active 60 s).
    let gcra = Script::new(scripts::TOKEN_BUCKET);
    rows.push((
        "token_bucket (gcra.lua)",
        per_key(&mut con, N, |c, k| {
            let reply: Vec<u64> = gcra
                .key(k)
                .arg(600_000)
                .arg(1)
                .arg(60_000_000)
                .arg(100)
                .invoke(c)
                .unwrap();
            assert_eq!(reply[0], 1);
        }),
    ));
    // The sliding window's alternative representation: a hash of the same three fields.
    rows.push((
        "sliding_window as a hash (not used)",
        per_key(&mut con, N, |c, k| {
            redis::cmd("HSET")
                .arg(k)
                .arg("w")
                .arg(29_400_000)
                .arg("p")
                .arg(57)
                .arg("c")
                .arg(1)
                .query::<()>(c)
                .unwrap();
            redis::cmd("PEXPIRE")
                .arg(k)
                .arg(120_000)
                .query::<()>(c)
                .unwrap();
        }),
    ));
    rows.push(("sliding_log, 1000 tokens (1,000 keys)", thousand));
    for (label, bytes) in rows {
        println!("{label:40} {bytes:7.1} bytes per key");
    }
}

/// One limit of a `multi` call in
/// [`several_limits_and_batches_by_the_module_and_by_fcall_equal_the_twins`]: its
/// kind of state and parameters.
#[derive(Debug, Clone, Copy)]
enum MultiLimit {
    Token(token_bucket::Params),
    Interval(interval_bucket::IntervalParams),
    Fixed(WindowParams),
    Sliding(sliding_window::SlidingParams),
    Log(WindowParams),
    /// A concurrency limit, with the holder of the call at hand.
    Slots(concurrency::Params),
}

/// Every limit of the multi test as they stood for one call (the holders of its concurrency
/// limits are that call's).
type Limits = Vec<MultiLimit>;

/// One call of a batch in the multi test: its limits (indices), their costs, which are in
/// shadow mode, and every limit as it stood for it.
type BatchCall = (Vec<usize>, Vec<u64>, Vec<bool>, Limits);

/// A state one of those limits keeps (a sorted set's with its key's expiry, ms: a
/// concurrency set's is the last lease end its script counted, which the set alone may not
/// say).
#[derive(Debug, Clone, PartialEq, Eq)]
enum MultiState {
    Token(token_bucket::State),
    Interval(interval_bucket::State),
    Fixed(fixed_window::State),
    Sliding(sliding_window::State),
    Log(Vec<u64>, u64),
    Slots(Vec<concurrency::Entry>, u64),
}

/// What Redis keeps for a state: a string, a sliding log's scores in order (its members'
/// names are the script's own), or a concurrency set's members and scores sorted by member.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kept {
    String(String),
    Scores(Vec<u64>),
    Members(Vec<(String, u64)>),
}

impl MultiLimit {
    /// Its id and script arguments for a call of `cost`, as `multi.lua` takes them.
    fn spec(self, cost: u64) -> (StateKind, Vec<u64>) {
        match self {
            MultiLimit::Token(p) => (StateKind::TokenBucket, token_bucket::args(p, cost).to_vec()),
            MultiLimit::Interval(p) => (
                StateKind::IntervalBucket,
                interval_bucket::args(p, cost).to_vec(),
            ),
            MultiLimit::Fixed(p) => (StateKind::FixedWindow, fixed_window::args(p, cost).to_vec()),
            MultiLimit::Sliding(p) => (
                StateKind::SlidingWindow,
                sliding_window::args(p, cost).to_vec(),
            ),
            MultiLimit::Log(p) => (StateKind::SlidingLog, sliding_log::args(p, cost).to_vec()),
            MultiLimit::Slots(p) => (StateKind::Concurrency, concurrency::args(p, cost).to_vec()),
        }
    }

    /// The twin's decision (its state `None`: absent).
    fn decide(self, now: u64, state: Option<&MultiState>, cost: u64) -> Outcome<MultiState> {
        let state = state.cloned();
        match (self, state) {
            (MultiLimit::Token(p), s) => {
                let s = s.map(|s| match s {
                    MultiState::Token(s) => s,
                    other => panic!("{other:?}"),
                });
                token_bucket::decide(now, s, p, cost).map_state(MultiState::Token)
            }
            (MultiLimit::Interval(p), s) => {
                let s = s.map(|s| match s {
                    MultiState::Interval(s) => s,
                    other => panic!("{other:?}"),
                });
                interval_bucket::decide(now, s, p, cost).map_state(MultiState::Interval)
            }
            (MultiLimit::Fixed(p), s) => {
                let s = s.map(|s| match s {
                    MultiState::Fixed(s) => s,
                    other => panic!("{other:?}"),
                });
                fixed_window::decide(now, s, p, cost).map_state(MultiState::Fixed)
            }
            (MultiLimit::Sliding(p), s) => {
                let s = s.map(|s| match s {
                    MultiState::Sliding(s) => s,
                    other => panic!("{other:?}"),
                });
                sliding_window::decide(now, s, p, cost).map_state(MultiState::Sliding)
            }
            (MultiLimit::Log(p), s) => {
                let log = match s {
                    Some(MultiState::Log(log, _)) => log,
                    None => Vec::new(),
                    Some(other) => panic!("{other:?}"),
                };
                let o = sliding_log::decide(now, &log, p, cost);
                let expire_ms = (now + o.reset_after_us).div_ceil(1000);
                o.map_state(|log| MultiState::Log(log, expire_ms))
            }
            (MultiLimit::Slots(p), s) => {
                let entries = match s {
                    Some(MultiState::Slots(entries, _)) => entries,
                    None => Vec::new(),
                    Some(other) => panic!("{other:?}"),
                };
                let o = concurrency::decide(now, &entries, p, cost);
                let expire_ms = (now + o.reset_after_us).div_ceil(1000);
                o.map_state(|entries| MultiState::Slots(entries, expire_ms))
            }
        }
    }

    /// What `multi.lua`'s give-back (mode 3) leaves of `state` at `now`, for `cost` tokens a
    /// reservation took at `at`: `None` the key goes, else the state kept.
    fn give_back(
        self,
        now: u64,
        state: Option<MultiState>,
        cost: u64,
        at: u64,
    ) -> Option<MultiState> {
        match (self, state?) {
            (MultiLimit::Token(p), MultiState::Token(s)) => {
                token_bucket::give_back(now, Some(s), p, cost).map(MultiState::Token)
            }
            (MultiLimit::Interval(p), MultiState::Interval(s)) => {
                interval_bucket::give_back(now, Some(s), p, cost).map(MultiState::Interval)
            }
            (MultiLimit::Fixed(p), MultiState::Fixed(s)) => {
                let window = at / p.period_us();
                if window != now / p.period_us()
                    || s.expire_ms != ((window + 1) * p.period_us()).div_ceil(1000)
                {
                    return Some(MultiState::Fixed(s));
                }
                (s.count > cost).then_some(MultiState::Fixed(fixed_window::State {
                    count: s.count - cost,
                    ..s
                }))
            }
            (MultiLimit::Sliding(p), MultiState::Sliding(mut s)) => {
                let window = at / p.window().period_us();
                if s.window == window {
                    s.current = s.current.saturating_sub(cost);
                }
                if s.window == window + 1 {
                    s.previous = s.previous.saturating_sub(cost);
                }
                Some(MultiState::Sliding(s))
            }
            (MultiLimit::Log(_), MultiState::Log(log, expire_ms)) => {
                // Up to `cost` entries of the reservation's instant go (any are its tokens).
                let log = sliding_log::give_back(&log, cost, at);
                (!log.is_empty()).then_some(MultiState::Log(log, expire_ms))
            }
            (MultiLimit::Slots(p), MultiState::Slots(entries, expire_ms)) => {
                // The holder's slots go; its ticket stays (a reservation holds no ticket).
                let entries: Vec<concurrency::Entry> = entries
                    .into_iter()
                    .filter(|e| {
                        !matches!(e.0, concurrency::Member::Held { holder, n }
                            if holder == p.holder && n <= cost)
                    })
                    .collect();
                (!entries.is_empty()).then_some(MultiState::Slots(entries, expire_ms))
            }
            (limit, state) => panic!("{limit:?} on {state:?}"),
        }
    }

    /// What a settlement's overdraft of `extra` tokens at `now` leaves of `state`, into debt up
    /// to `debt` tokens (`call.lua`'s mode 5), and the tokens taken: the twins'.
    fn take_over(
        self,
        now: u64,
        state: Option<&MultiState>,
        extra: u64,
        debt: u64,
    ) -> (Option<MultiState>, u64) {
        match (self, state) {
            (MultiLimit::Token(p), None | Some(MultiState::Token(_))) => {
                let s = state.map(|s| match s {
                    MultiState::Token(s) => *s,
                    _ => unreachable!(),
                });
                let (s, taken) = token_bucket::take_over(now, s, p, extra, debt);
                (Some(MultiState::Token(s)), taken)
            }
            (MultiLimit::Fixed(p), None | Some(MultiState::Fixed(_))) => {
                let s = state.map(|s| match s {
                    MultiState::Fixed(s) => *s,
                    _ => unreachable!(),
                });
                let (s, taken) = fixed_window::take_over(now, s, p, None, extra, debt);
                (Some(MultiState::Fixed(s)), taken)
            }
            (MultiLimit::Log(p), None | Some(MultiState::Log(..))) => {
                let (log, expire_ms) = match state {
                    Some(MultiState::Log(log, expire_ms)) => (log.as_slice(), Some(*expire_ms)),
                    _ => (&[][..], None),
                };
                match sliding_log::take_over(now, log, p, extra, debt) {
                    (Some(log), taken) => {
                        let expire_ms = sliding_log::expire_ms(&log, p).unwrap_or(0);
                        (Some(MultiState::Log(log, expire_ms)), taken)
                    }
                    (None, taken) => (expire_ms.map(|e| MultiState::Log(log.to_vec(), e)), taken),
                }
            }
            (limit, state) => panic!("{limit:?} cannot settle on {state:?}"),
        }
    }

    /// Whether `state` has ended at `now` (a bucket full, a window over): it reads as absent.
    fn ended(self, state: &MultiState, now: u64) -> bool {
        match (self, state) {
            (_, MultiState::Token(s)) => s.owed_at(u128::from(now)) == 0,
            (_, MultiState::Log(_, expire_ms) | MultiState::Slots(_, expire_ms)) => {
                *expire_ms * 1000 <= now
            }
            (MultiLimit::Interval(p), MultiState::Interval(s)) => {
                let period = interval_bucket::args(p, 0)[2];
                s.expire_ms * 1000 / period * period <= now
            }
            (_, MultiState::Fixed(s)) => s.expire_ms * 1000 <= now,
            (MultiLimit::Sliding(p), MultiState::Sliding(s)) => s.expire_ms(p) * 1000 <= now,
            (limit, state) => panic!("{limit:?} on {state:?}"),
        }
    }

    /// The value and expiry (ms) Redis keeps for `state`.
    fn stored(self, state: MultiState) -> (Kept, u64) {
        match (self, state) {
            (_, MultiState::Token(s)) => (Kept::String(s.encode()), s.expire_ms),
            (_, MultiState::Interval(s)) => (Kept::String(s.encode()), s.expire_ms),
            (_, MultiState::Fixed(s)) => (Kept::String(s.encode()), s.expire_ms),
            (MultiLimit::Sliding(p), MultiState::Sliding(s)) => {
                (Kept::String(s.encode()), s.expire_ms(p))
            }
            (_, MultiState::Log(log, expire_ms)) => (Kept::Scores(log), expire_ms),
            (_, MultiState::Slots(entries, expire_ms)) => {
                let mut members: Vec<(String, u64)> = entries
                    .iter()
                    .map(|&(m, end)| {
                        let score = match m {
                            concurrency::Member::Waiting { .. } => end + concurrency::TICKET,
                            concurrency::Member::Held { .. } => end,
                        };
                        (m.to_text(), score)
                    })
                    .collect();
                members.sort();
                (Kept::Members(members), expire_ms)
            }
            (limit, state) => panic!("{limit:?} on {state:?}"),
        }
    }
}

/// Several limits of one call (`multi.lua`, by `FCALL` and by `EVALSHA`, and the Redis
/// module's `multi`, picked at random per call) in every mode (decide, reserve, veto, give
/// back, peek, settle), some in shadow mode, on keys of every algorithm (two sorted sets'
/// among them: sliding logs and concurrency limits, whose holder changes per call; two slow
/// token buckets now and then put in debt, into which reservations made before are given
/// back, in any order), against a model of the
/// script built on the twins, replayed at the server time of each reply: every number of
/// every reply equal, and after each call every key holds exactly the model's state. A give
/// back answers no time: its effect is checked against the model at the instants before and
/// after it (a boundary may pass between them), and what Redis holds is kept. One step in
/// six is instead a batch of the module's (`batch`) of two to four such calls in mode 0, some
/// on the previous call's limit again (sent as 0): each entry is the model's for that call,
/// decided in order at the batch's one server time.
#[test]
fn several_limits_and_batches_by_the_module_and_by_fcall_equal_the_twins() {
    let server = server();
    let mut con = server.blocking_connection();
    let library = scripts::library();
    let _: () = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library.text())
        .query(&mut con)
        .unwrap();
    let function = library.function("multi").unwrap();
    let multi_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(scripts::MULTI)
        .query(&mut con)
        .unwrap();
    let command = scripts::native_commands()
        .into_iter()
        .find(|c| c.ends_with(".multi"))
        .expect("the module decides several limits");
    let batch_command = scripts::native_commands()
        .into_iter()
        .find(|c| c.ends_with(".batch"))
        .expect("the module decides batches");
    let mut rng = Rng(0x3017_1b1e_5eed);
    let ms = |n: u64| Duration::from_micros(1000 * n);
    // Eight keys, two of each algorithm of a string, with limits of a few milliseconds; then
    // two sliding logs and two concurrency limits (leases of a few milliseconds, one
    // queueing), whose holder is drawn per call.
    let mut limits: Vec<MultiLimit> = (0..8u64)
        .map(|i| {
            let limit = Limit::per(1 + (i % 3) as u32 * 2, ms(2 + i % 5));
            let limit = if i % 4 < 2 {
                limit.try_burst(2 + (i % 4) as u32).unwrap()
            } else {
                limit
            };
            match i % 4 {
                0 => MultiLimit::Token(token_bucket::params(&limit)),
                1 => MultiLimit::Interval(
                    interval_bucket::IntervalParams::of(&limit.refill(Refill::Interval)).unwrap(),
                ),
                2 => MultiLimit::Fixed(
                    WindowParams::of(&limit.algorithm(Algorithm::FixedWindow)).unwrap(),
                ),
                _ => MultiLimit::Sliding(
                    sliding_window::SlidingParams::of(&limit.algorithm(Algorithm::SlidingWindow))
                        .unwrap(),
                ),
            }
        })
        .collect();
    limits.extend([
        MultiLimit::Log(
            WindowParams::of(&Limit::per(3, ms(3)).algorithm(Algorithm::SlidingLog)).unwrap(),
        ),
        MultiLimit::Log(
            WindowParams::of(&Limit::per(2, ms(5)).algorithm(Algorithm::SlidingLog)).unwrap(),
        ),
        MultiLimit::Slots(concurrency::Params {
            max: 2,
            lease_us: 3_000,
            holder: 1,
            queue: false,
        }),
        MultiLimit::Slots(concurrency::Params {
            max: 3,
            lease_us: 5_000,
            holder: 1,
            queue: true,
        }),
    ]);
    // Two token buckets slow to refill (a token in 25 or 40 ms), whose debt after an
    // overdraft lasts for many calls: a give-back of an earlier reservation may land in it.
    for (every, burst) in [(25, 3), (40, 4)] {
        let limit = Limit::per(1, ms(every)).try_burst(burst).unwrap();
        limits.push(MultiLimit::Token(token_bucket::params(&limit)));
    }
    let keys: Vec<String> = (0..limits.len())
        .map(|i| format!("app:{{m}}:{i}"))
        .collect();
    let mut states: Vec<Option<MultiState>> = vec![None; keys.len()];
    // The last three reservations that every limit admitted: their limits, costs and server
    // times, and the limits as they were (the holders of their concurrency limits). Given back
    // in any order, so that a give-back may find its bucket in a debt a later call made.
    let mut reserved: Vec<(Vec<usize>, Vec<u64>, u64, Limits)> = Vec::new();
    let (mut by_module, mut by_fcall, mut by_evalsha, mut modes) = (0, 0, 0, [0u32; 6]);
    let mut settlements = 0;
    // Give-backs to a token bucket that still owes beyond what a call may take after them.
    let mut into_debt = 0;
    let mut batches = 0;
    for n in 0..3000 {
        if rng.below(6) == 0 {
            // The module's `batch`: two to four calls, each decided as alone, in order, at
            // one server time; a one-limit call on the previous one's limit goes as 0.
            let mut call_keys: Vec<&str> = Vec::new();
            let mut packed: Vec<u64> = Vec::new();
            let mut calls: Vec<BatchCall> = Vec::new();
            let count = 2 + rng.below(3);
            packed.push(count);
            let mut previous: Option<(usize, u64)> = None;
            for _ in 0..count {
                let again = previous.filter(|_| rng.below(3) == 0);
                let (chosen, costs) = if let Some((i, cost)) = again {
                    packed.push(0);
                    (vec![i], vec![cost])
                } else {
                    let (chosen, costs) = pick_limits(&mut rng, &mut limits);
                    packed.push(chosen.len() as u64);
                    for (&i, &cost) in chosen.iter().zip(&costs) {
                        let (kind, args) = limits[i].spec(cost);
                        packed.push(u64::from(kind.id()));
                        packed.push(args.len() as u64);
                        packed.extend(args);
                    }
                    (chosen, costs)
                };
                previous = (chosen.len() == 1).then(|| (chosen[0], costs[0]));
                call_keys.extend(chosen.iter().map(|&i| keys[i].as_str()));
                let shadow = vec![false; chosen.len()];
                calls.push((chosen, costs, shadow, limits.clone()));
            }
            let text: Vec<String> = packed.iter().map(u64::to_string).collect();
            let reply: Vec<String> = redis::cmd(batch_command)
                .arg(call_keys.len())
                .arg(&call_keys)
                .arg(text.join(" "))
                .query(&mut con)
                .unwrap();
            assert_eq!(reply.len(), calls.len(), "call {n}: a batch of {packed:?}");
            let entries: Vec<Vec<u64>> = reply
                .iter()
                .map(|e| e.split(' ').map(|v| v.parse().unwrap()).collect())
                .collect();
            let now = *entries[0].last().unwrap();
            // What each key holds after the whole batch: its last write.
            let mut last: Vec<Option<(Kept, u64)>> = vec![None; keys.len()];
            for (k, ((chosen, costs, shadow, limits), entry)) in
                calls.iter().zip(&entries).enumerate()
            {
                let (expected, written, _) =
                    model_call(limits, &mut states, chosen, costs, shadow, 0, now);
                assert_eq!(
                    entry, &expected,
                    "call {n}: batch entry {k} of {packed:?}, limits {chosen:?}"
                );
                for (i, kept, expire_ms) in written {
                    last[i] = Some((kept, expire_ms));
                }
            }
            for (i, held) in last.into_iter().enumerate() {
                if let Some((kept, expire_ms)) = held {
                    holds_kept(&mut con, &keys[i], &kept, expire_ms);
                }
            }
            batches += 1;
            continue;
        }
        if rng.below(16) == 0 {
            // A slow bucket in debt, as after an overdraft, for the give-backs pending on it.
            let i = 12 + usize::try_from(rng.below(2)).unwrap();
            let MultiLimit::Token(p) = limits[i] else {
                unreachable!("limits 12 and 13 are token buckets")
            };
            let owing = 1 + rng.below(3);
            let (s, _) = token_bucket::take_over(
                server_now(&mut con),
                None,
                p,
                p.tau / p.interval + owing,
                owing,
            );
            set_pxat(&mut con, &keys[i], &s.encode(), s.expire_ms);
            states[i] = Some(MultiState::Token(s));
        }
        let give_back = !reserved.is_empty() && rng.below(6) == 0;
        // A settlement (mode 5) of the reservation's limits, where they all can settle: the
        // token buckets, the fixed windows and the sliding logs.
        // (The logs are limits 8 and 9, the slow token buckets 12 and 13.)
        let settles = |chosen: &[usize]| {
            chosen
                .iter()
                .all(|&i| (i < 8 && i % 2 == 0) || i == 8 || i == 9 || i >= 12)
        };
        let (chosen, costs, mode, at) = if give_back {
            let which = usize::try_from(rng.below(reserved.len() as u64)).unwrap();
            let (chosen, costs, at, then) = reserved.remove(which);
            limits = then;
            let mode = if settles(&chosen) && rng.below(3) > 0 {
                5u8
            } else {
                3u8
            };
            (chosen, costs, mode, Some(at))
        } else {
            let (chosen, costs) = pick_limits(&mut rng, &mut limits);
            let mode: u8 = [0, 0, 0, 1, 1, 2, 4][usize::try_from(rng.below(7)).unwrap()];
            (chosen, costs, mode, None)
        };
        modes[usize::from(mode)] += 1;
        let shadow: Vec<bool> = chosen.iter().map(|_| rng.below(8) == 0).collect();
        let call_keys: Vec<&str> = chosen.iter().map(|&i| keys[i].as_str()).collect();
        let mut specs: Vec<u64> = Vec::new();
        for ((&i, &cost), &shadow) in chosen.iter().zip(&costs).zip(&shadow) {
            let (kind, args) = limits[i].spec(cost);
            specs.push(u64::from(kind.id()) + if shadow { 8 } else { 0 });
            specs.push(args.len() as u64);
            specs.extend(args);
        }
        specs.extend(at);
        // A settlement's actual cost and debt allowed, per limit.
        let settled: Vec<(u64, u64)> = chosen
            .iter()
            .zip(&costs)
            .map(|(_, &cost)| (rng.below(cost + 4), rng.below(4)))
            .collect();
        if mode == 5 {
            specs.extend(settled.iter().flat_map(|&(actual, debt)| [actual, debt]));
        }
        if rng.below(8) == 0 {
            std::thread::sleep(Duration::from_micros(rng.below(3000)));
        }
        let before = server_now(&mut con);
        if give_back {
            for ((&i, &cost), &(actual, _)) in chosen.iter().zip(&costs).zip(&settled) {
                let given = if mode == 5 {
                    cost.saturating_sub(actual)
                } else {
                    cost
                };
                if let (MultiLimit::Token(p), Some(MultiState::Token(s))) = (limits[i], &states[i])
                {
                    let room = u128::from(p.tau + p.reach);
                    let back = u128::from(given) * u128::from(p.interval);
                    if given > 0 && s.owed_at(u128::from(before)) > room + back {
                        into_debt += 1;
                    }
                }
            }
        }
        // Half by the module, a quarter each by FCALL and by EVALSHA of the same script.
        let way = rng.below(4);
        let natively = way < 2;
        let reply: Vec<u64> = if natively {
            by_module += 1;
            let packed: Vec<String> = std::iter::once(u64::from(mode))
                .chain(specs.iter().copied())
                .map(|v| v.to_string())
                .collect();
            let text: String = redis::cmd(command)
                .arg(call_keys.len())
                .arg(&call_keys)
                .arg(packed.join(" "))
                .query(&mut con)
                .unwrap();
            text.split(' ').map(|v| v.parse().unwrap()).collect()
        } else {
            let (command, name) = if way == 2 {
                by_fcall += 1;
                ("FCALL", function)
            } else {
                by_evalsha += 1;
                ("EVALSHA", multi_sha.as_str())
            };
            // Mode 3 answers one integer, the others an array of them.
            let reply: redis::Value = redis::cmd(command)
                .arg(name)
                .arg(1)
                .arg(call_keys[0])
                .arg(call_keys.len())
                .arg(mode)
                .arg(&call_keys)
                .arg(&specs)
                .query(&mut con)
                .unwrap();
            match reply {
                redis::Value::Int(n) => vec![u64::try_from(n).unwrap()],
                other => redis::from_redis_value(other).unwrap(),
            }
        };
        let how = ["module", "module", "FCALL", "EVALSHA"][usize::try_from(way).unwrap()];
        let context = format!("call {n} by {how}, mode {mode}, keys {chosen:?}, costs {costs:?}");
        if mode == 5 {
            let at = at.unwrap();
            assert_eq!(reply.len(), 2 * chosen.len() + 1, "{context}: {reply:?}");
            let now = *reply.last().unwrap();
            let mut expected = Vec::new();
            for ((&i, &cost), &(actual, debt)) in chosen.iter().zip(&costs).zip(&settled) {
                if actual < cost {
                    states[i] = limits[i].give_back(now, states[i].clone(), cost - actual, at);
                    expected.extend([0, cost - actual]);
                } else if actual > cost {
                    let (state, taken) =
                        limits[i].take_over(now, states[i].as_ref(), actual - cost, debt);
                    states[i] = state;
                    expected.extend([taken, 0]);
                } else {
                    expected.extend([0, 0]);
                }
            }
            expected.push(now);
            assert_eq!(reply, expected, "{context}: settled {settled:?}");
            // What each key holds, against the model, as a state that has not ended.
            let held: Vec<Option<MultiState>> = chosen
                .iter()
                .map(|&i| read_multi_state(&mut con, &keys[i], limits[i]))
                .collect();
            let after = server_now(&mut con);
            for (&i, held) in chosen.iter().zip(held) {
                let live = |s: Option<MultiState>| {
                    s.filter(|s| !limits[i].ended(s, after))
                        .map(|s| limits[i].stored(s))
                };
                assert_eq!(
                    live(held.clone()),
                    live(states[i].clone()),
                    "{context}: {} after settling {settled:?}",
                    keys[i]
                );
                states[i] = held;
            }
            settlements += 1;
            continue;
        }
        if let Some(at) = at {
            assert_eq!(reply, [chosen.len() as u64], "{context}");
            // What each key holds, read before the instant `after`, which is then at or after
            // every read (a state that ended between the give-back and its read is absent).
            let held: Vec<Option<MultiState>> = chosen
                .iter()
                .map(|&i| read_multi_state(&mut con, &keys[i], limits[i]))
                .collect();
            let after = server_now(&mut con);
            for ((&i, &cost), held) in chosen.iter().zip(&costs).zip(held) {
                // A state that has ended reads as an absent one: the script may write one
                // (a bucket given back to full expires within the millisecond), the module
                // deletes the key.
                let live = |s: Option<MultiState>| {
                    s.filter(|s| !limits[i].ended(s, after))
                        .map(|s| limits[i].stored(s))
                };
                let expected = [before, after]
                    .map(|now| live(limits[i].give_back(now, states[i].clone(), cost, at)));
                let actual = live(held.clone());
                assert!(
                    expected.contains(&actual),
                    "{context}: {} holds {actual:?}, the model {expected:?} from {:?}",
                    keys[i],
                    states[i]
                );
                states[i] = held;
            }
            continue;
        }
        let m = chosen.len();
        assert!(
            reply.len() == 4 * m + 1 || reply.len() == 6 * m + 1,
            "{context}: {reply:?}"
        );
        let now = reply[4 * m];
        let (expected, written, all) =
            model_call(&limits, &mut states, &chosen, &costs, &shadow, mode, now);
        assert_eq!(reply, expected, "{context}");
        for (i, kept, expire_ms) in written {
            holds_kept(&mut con, &keys[i], &kept, expire_ms);
        }
        // A reservation to give back, or any call every limit admitted to settle (its tokens
        // taken at `now`: estimates).
        if (mode == 1 || (mode == 0 && settles(&chosen))) && all {
            if reserved.len() == 3 {
                reserved.remove(0);
            }
            reserved.push((chosen, costs, now, limits.clone()));
        }
    }
    println!(
        "{by_module} calls by the module, {by_fcall} by FCALL, {by_evalsha} by EVALSHA, \
         by mode {modes:?} \
         ({settlements} settled, {into_debt} given back into debt), {batches} batches"
    );
    assert!(
        by_module > 800
            && by_fcall > 400
            && by_evalsha > 400
            && into_debt > 0
            && batches > 300
            && modes[..5].iter().all(|&n| n > 50)
            && settlements > 40,
        "{modes:?}, {settlements} settled, {into_debt} given back into debt, {batches} batches"
    );
}

/// One to three of the fourteen keys of the multi test, distinct, and a cost for each: 1 or 2
/// tokens, 1 under a window of 1 (a call costs at most the limit); a concurrency limit's
/// holder drawn anew (from a few, one above 2^63: holders are text to the scripts).
fn pick_limits(rng: &mut Rng, limits: &mut [MultiLimit]) -> (Vec<usize>, Vec<u64>) {
    let count = 1 + usize::try_from(rng.below(3)).unwrap();
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < count {
        let i = usize::try_from(rng.below(limits.len() as u64)).unwrap();
        if !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    for &i in &chosen {
        if let MultiLimit::Slots(p) = &mut limits[i] {
            p.holder = [1, 2, 3, u64::MAX - 7][usize::try_from(rng.below(4)).unwrap()];
        }
    }
    let costs = chosen
        .iter()
        .map(|&i| {
            1 + rng.below(if i < 8 && i % 4 >= 2 && i % 3 == 0 {
                1
            } else {
                2
            })
        })
        .collect();
    (chosen, costs)
}

/// What `multi.lua` answers for one call of the limits `chosen` (not a give-back) in `mode`
/// at `now`, by the model on `states`, which it updates with what the call writes: the
/// reply, each write (the key's index, its value and expiry), and whether every limit
/// admitted the call.
fn model_call(
    limits: &[MultiLimit],
    states: &mut [Option<MultiState>],
    chosen: &[usize],
    costs: &[u64],
    shadow: &[bool],
    mode: u8,
    now: u64,
) -> (Vec<u64>, Vec<(usize, Kept, u64)>, bool) {
    let outcomes: Vec<Outcome<MultiState>> = chosen
        .iter()
        .zip(costs)
        .map(|(&i, &cost)| limits[i].decide(now, states[i].as_ref(), cost))
        .collect();
    let peek = |i: usize| limits[i].decide(now, states[i].as_ref(), 0);
    let all = mode != 2
        && outcomes
            .iter()
            .zip(shadow)
            .all(|(o, &shadow)| o.allowed || shadow);
    let mut expected: Vec<u64> = Vec::new();
    for (&i, o) in chosen.iter().zip(&outcomes) {
        let mut fields = fields(o);
        if !all && o.allowed {
            let p = peek(i);
            fields[1] = p.remaining;
            fields[3] = p.reset_after_us;
        }
        if mode == 4 {
            // A peek: what the limit holds now, and when it is full again as it stands.
            let p = peek(i);
            fields[1] = p.remaining;
            fields[3] = p.reset_after_us;
        }
        expected.extend(fields);
    }
    expected.push(now);
    if mode == 1 && all {
        for &i in chosen {
            let p = peek(i);
            expected.extend([p.remaining, p.reset_after_us]);
        }
    }
    let mut written = Vec::new();
    for (&i, o) in chosen.iter().zip(outcomes) {
        if let Some(s) = o.new_state.filter(|_| mode != 4 && (all || !o.allowed)) {
            let (kept, expire_ms) = limits[i].stored(s.clone());
            written.push((i, kept, expire_ms));
            states[i] = Some(s);
        }
    }
    (expected, written, all)
}

/// The server's clock, in microseconds.
fn server_now(con: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000 + micros
}

/// The state `key` holds for `limit`, as its script reads it (`None`: absent, or not one).
fn read_multi_state(con: &mut Connection, key: &str, limit: MultiLimit) -> Option<MultiState> {
    if let MultiLimit::Log(_) | MultiLimit::Slots(_) = limit {
        let (scores, expire): (Written, i64) = set_and_expiry(con, key);
        let expire = u64::try_from(expire).ok()?;
        if scores.is_empty() {
            return None;
        }
        return Some(match limit {
            MultiLimit::Log(_) => MultiState::Log(scores.iter().map(|s| s.1).collect(), expire),
            _ => MultiState::Slots(members_of(&scores), expire),
        });
    }
    let value: Option<String> = redis::cmd("GET").arg(key).query(con).unwrap();
    let expire = u64::try_from(pexpiretime(con, key)).ok()?;
    let value = value?;
    match limit {
        MultiLimit::Token(_) => token_bucket::State::decode(&value, expire).map(MultiState::Token),
        MultiLimit::Interval(_) => {
            interval_bucket::State::decode(&value, expire).map(MultiState::Interval)
        }
        MultiLimit::Fixed(_) => fixed_window::State::decode(&value, expire).map(MultiState::Fixed),
        MultiLimit::Sliding(_) => sliding_window::State::decode(&value).map(MultiState::Sliding),
        MultiLimit::Log(_) | MultiLimit::Slots(_) => unreachable!("read above"),
    }
}
