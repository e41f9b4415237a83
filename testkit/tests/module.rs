//! The Redis module (`module/`) on real `redis-server` processes this test starts: the
//! commands it registers are the ones the limiter calls, with key specs; a bad argument from
//! any client is an error reply and the server lives on; its writes reach a replica and the
//! AOF as their effects (a replica without the module holds what the master holds); and a
//! limiter built on it uses it, and goes on by `FCALL` when the module is lost or refused.
//! That each command decides exactly as its script and its twin, on one state, is
//! `tests/algorithms.rs` (every call there picks `FCALL`, `EVALSHA` or the module's command).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ratelimit_core::store::{RedisPath, RedisStore};
use ratelimit_core::tools::algorithms::token_bucket;
use ratelimit_core::tools::scripts;
use ratelimit_core::{Limit, RateLimiter, Source};
use redis::{Connection, Value};
use testkit::wait::{eventually_blocking, eventually_ok};
use testkit::{RedisServer, Rng};

fn with_module(extra: &[&str]) -> RedisServer {
    let mut args = testkit::module::load_args().to_vec();
    args.extend_from_slice(extra);
    RedisServer::start_with(&args)
}

/// `ratelimit.v1.token_bucket <key> <args>` for a call of `cost` under `limit`: the reply,
/// the five numbers separated by spaces.
fn token_bucket(con: &mut Connection, key: &str, limit: &Limit, cost: u64) -> String {
    let args = token_bucket::args(token_bucket::params(limit), cost).map(|a| a.to_string());
    redis::cmd("ratelimit.v1.token_bucket")
        .arg(key)
        .arg(args.join(" "))
        .query(con)
        .unwrap()
}

#[test]
fn the_module_registers_the_commands_the_limiter_calls() {
    let server = with_module(&[]);
    let mut con = server.blocking_connection();
    let mut registered: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg(ratelimit_vocab_name())
        .query(&mut con)
        .unwrap();
    registered.sort();
    let mut expected: Vec<String> = scripts::native_commands()
        .into_iter()
        .map(str::to_owned)
        .collect();
    expected.sort();
    assert_eq!(registered, expected);
    // Each declares its keys: Redis Cluster routes it by the bucket and the ACL checks it.
    // One algorithm's command takes its key first; `multi`, numkeys and every limit's key.
    let bucket = "app:{7:orders:alice}";
    for command in &expected {
        let mut getkeys = redis::cmd("COMMAND");
        getkeys.arg("GETKEYS").arg(command);
        let expected_keys: Vec<String> =
            if command.ends_with(".multi") || command.ends_with(".batch") {
                let keys = [bucket.to_owned(), format!("{bucket}:day")];
                getkeys.arg(2).arg(&keys);
                keys.to_vec()
            } else {
                getkeys.arg(bucket);
                vec![bucket.to_owned()]
            };
        let keys: Vec<String> = getkeys.arg("1 1 1 1").query(&mut con).unwrap();
        assert_eq!(keys, expected_keys, "{command}");
    }
}

/// The module's name as `MODULE LIST` and `COMMAND LIST FILTERBY MODULE` know it.
fn ratelimit_vocab_name() -> &'static str {
    "ratelimit_v1"
}

#[test]
fn the_module_is_named_with_its_protocol_version() {
    let server = with_module(&[]);
    let mut con = server.blocking_connection();
    let modules: Vec<Vec<Value>> = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let text = format!("{modules:?}");
    assert!(text.contains("ratelimit_v1"), "{text}");
    // Every command carries the version too, so that another version loads beside it.
    for command in scripts::native_commands() {
        assert!(command.starts_with("ratelimit.v1."), "{command}");
    }
}

/// What a client may send: every command with arguments from a hostile mix (missing,
/// extra, negative, huge, not numbers, empty, binary), thousands of times. Each is answered
/// (an error, or a decision when it happens to be a valid call), the server lives on, and
/// nothing is written but bucket keys that expire.
#[test]
fn any_arguments_get_an_answer_and_the_server_lives_on() {
    let server = with_module(&[]);
    let mut con = server.blocking_connection();
    let pieces: [&[u8]; 18] = [
        b"1 1",
        b"5 1000000 1",
        b"0",
        b"1",
        b"2",
        b"-1",
        b"3",
        b"1000",
        b"18446744073709551615",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"99999999999999999999999",
        b"",
        b"x",
        b"1e3",
        b" 1",
        b"\x00\xff",
        b"app:{k}",
    ];
    // A valid call's arguments for each command, to mutate: 1 per second with a burst of 5,
    // 5 per second in windows, 4 per second up to 10 at intervals, or 3 in flight, cost 1.
    let valid = |command: &str| -> Vec<&[u8]> {
        match command.rsplit('.').next() {
            Some("token_bucket") => vec![b"app:{k}", b"1000000 1 5000000 1"],
            Some("fixed_window") => vec![b"app:{k}", b"5 1000000 1"],
            Some("sliding_window") => vec![b"app:{k}", b"5 1000000 1000 1"],
            Some("interval_bucket") => vec![b"app:{k}", b"4 10 1000000 10 1"],
            Some("sliding_log") => vec![b"app:{k}", b"5 1000000 1"],
            // At most 3 in flight, leases of a second, holder 7, queueing, one slot.
            Some("concurrency") => vec![b"app:{k}", b"3 1000000 7 1 1"],
            Some("concurrency_renew") => vec![b"app:{k}", b"7 1000000 1"],
            Some("concurrency_release") => vec![b"app:{k}", b"7 1"],
            // Two limits of one call: a token bucket and a fixed window, on two keys.
            Some("multi") => vec![
                b"2",
                b"app:{k}",
                b"app:{k}:w",
                b"0 1 4 1000000 1 5000000 1 3 3 5 1000000 1",
            ],
            // Three calls: one limit, the same limit on another key (0), two limits.
            Some("batch") => vec![
                b"5",
                b"app:{k}",
                b"app:{k}:2",
                b"app:{k}:3",
                b"app:{k}:w",
                b"app:{k}:4",
                b"3 1 1 4 1000000 1 5000000 1 0 2 1 4 1000000 1 5000000 1 3 3 5 1000000 1 0",
            ],
            other => panic!("no valid call written for {other:?}"),
        }
    };
    // Numbers at the edges of what an algorithm computes, to put in place of one of a valid
    // call's numbers.
    let edges = [
        "0",
        "1",
        "-1",
        "2",
        "5",
        "999",
        "1000",
        "1001",
        "4294967296",
        "9007199254740992",
        "9223372036854775807",
        "-9223372036854775808",
    ];
    let mut rng = Rng(0x0005_eed0_fa11);
    let (mut errors, mut decisions) = (0, 0);
    for _ in 0..3000 {
        for command in scripts::native_commands() {
            let mut args: Vec<&[u8]> = Vec::new();
            let edged;
            if rng.below(3) == 0 {
                // A valid call with one of its numbers at an edge (a cost of 0, a period of
                // a microsecond, one beyond exact arithmetic).
                let valid = valid(command);
                let (packed, keys) = valid.split_last().unwrap();
                let mut numbers: Vec<&str> =
                    std::str::from_utf8(packed).unwrap().split(' ').collect();
                let at = usize::try_from(rng.below(numbers.len() as u64)).unwrap();
                numbers[at] = edges[usize::try_from(rng.below(edges.len() as u64)).unwrap()];
                edged = numbers.join(" ");
                args.extend_from_slice(keys);
                args.push(edged.as_bytes());
            } else if rng.below(2) == 0 {
                // Anything at all.
                for _ in 0..rng.below(11) {
                    args.push(pieces[usize::try_from(rng.below(18)).unwrap()]);
                }
            } else {
                // A valid call, one argument changed, dropped or added.
                let valid = valid(command);
                args.extend_from_slice(&valid);
                let at = usize::try_from(rng.below(valid.len() as u64)).unwrap();
                let piece = pieces[usize::try_from(rng.below(18)).unwrap()];
                match rng.below(4) {
                    0 => args[at] = piece,
                    1 => drop(args.remove(at)),
                    2 => args.insert(at, piece),
                    _ => args.push(piece),
                }
            }
            let mut cmd = redis::cmd(command);
            for arg in args {
                cmd.arg(arg);
            }
            match cmd.query::<Value>(&mut con) {
                Ok(Value::BulkString(_)) => decisions += 1,
                // A concurrency limit's release or renewal: a count.
                Ok(Value::Int(n))
                    if command.ends_with(".concurrency_release")
                        || command.ends_with(".concurrency_renew") =>
                {
                    assert!((0..=1_000_000).contains(&n), "{command}: {n}");
                    decisions += 1;
                }
                // A batch: each call's decision or error.
                Ok(Value::Array(entries)) if command.ends_with(".batch") => {
                    for entry in entries {
                        match entry {
                            Value::BulkString(_) => decisions += 1,
                            Value::ServerError(e) => {
                                assert!(e.code() == "ERR", "{command}: {e:?}");
                                errors += 1;
                            }
                            other => panic!(
                                "{command}: an entry neither an error nor a decision: {other:?}"
                            ),
                        }
                    }
                }
                Ok(other) => panic!("{command}: neither an error nor a decision: {other:?}"),
                Err(e) => {
                    assert!(e.code() == Some("ERR"), "{command}: {e}");
                    errors += 1;
                }
            }
        }
    }
    assert!(
        errors > 1000 && decisions > 0,
        "{errors} errors, {decisions} decisions"
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    // Only keys that expire were written.
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(!keys.is_empty(), "the valid calls wrote their buckets");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert!(ttl > 0, "{key:?} written without an expiry");
    }
}

/// Reads `key`'s value and absolute expiry.
fn state(con: &mut Connection, key: &str) -> (Option<String>, i64) {
    redis::pipe()
        .cmd("GET")
        .arg(key)
        .cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .unwrap()
}

/// A replica without the module holds exactly what the master holds after its decisions:
/// the module replicates `SET .. PXAT` (what was decided, with the absolute expiry) and `DEL`,
/// or a sorted set's own commands (a sliding log's, a concurrency set's: absolute scores and
/// instants), never its own command, which such a replica would not know, and which would
/// decide again on the replica's clock; so for one limit, a batch of several limits, a
/// give-back, and a concurrency limit's slots, ticket, renewal and release. The AOF holds the
/// same effects.
#[test]
fn writes_reach_a_replica_and_the_aof_as_their_effects() {
    let (master, replica) = master_and_replica();
    let (mut m, mut r) = (master.blocking_connection(), replica.blocking_connection());
    let limit = Limit::per_hour(7).burst(5);
    let keys: Vec<String> = (0..20).map(|i| format!("app:{{r:{i}}}")).collect();
    for (i, key) in keys.iter().enumerate() {
        for _ in 0..=(i % 7) {
            token_bucket(&mut m, key, &limit, 1);
        }
    }
    // The sliding log (a sorted set, written by the script's own commands) and a batch with
    // several limits of one call (a bucket and a window, given back in part by `multi`).
    let log = "app:{r:log}";
    for _ in 0..3 {
        let reply: String = redis::cmd("ratelimit.v1.sliding_log")
            .arg(log)
            .arg("6 3600000000 2")
            .query(&mut m)
            .unwrap();
        assert!(reply.starts_with("1 "), "{reply}");
    }
    let two = "1 4 1000000 1 5000000 1 3 3 5 3600000000 2";
    let entries: Vec<String> = redis::cmd("ratelimit.v1.batch")
        .arg(4)
        .arg(&["app:{r:b}", "app:{r:b}:w", "app:{r:c}", "app:{r:c}:w"][..])
        .arg(format!("2 2 {two} 2 {two}"))
        .query(&mut m)
        .unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    let now: u64 = entries[0].rsplit(' ').next().unwrap().parse().unwrap();
    let _: String = redis::cmd("ratelimit.v1.multi")
        .arg(2)
        .arg(&["app:{r:c}", "app:{r:c}:w"][..])
        .arg(format!("3 {two} {now}"))
        .query(&mut m)
        .unwrap();
    // A window's count, taken three times in one window: written in place and propagated as
    // `INCRBY` after the first.
    for _ in 0..3 {
        let reply: String = redis::cmd("ratelimit.v1.fixed_window")
            .arg("app:{r:fw}")
            .arg("10 3600000000 2")
            .query(&mut m)
            .unwrap();
        assert!(reply.starts_with("1 "), "{reply}");
    }
    // A concurrency set: two holders take slots (one by a batch with a sliding log beside
    // it), one renews, the other gives back, a third queues a ticket.
    let slots = "app:{r:slots}";
    let hour = 3_600_000_000u64;
    let acquire = |m: &mut Connection, holder: u64| -> String {
        redis::cmd("ratelimit.v1.concurrency")
            .arg(slots)
            .arg(format!("2 {hour} {holder} 1 1"))
            .query(m)
            .unwrap()
    };
    assert!(acquire(&mut m, 18_446_744_073_709_551_615).starts_with("1 "));
    let entries: Vec<String> = redis::cmd("ratelimit.v1.batch")
        .arg(2)
        .arg(&[slots, "app:{r:log2}"][..])
        .arg(format!("1 2 6 5 2 {hour} 7 1 1 5 3 6 {hour} 2"))
        .query(&mut m)
        .unwrap();
    assert!(entries[0].starts_with("1 "), "{entries:?}");
    assert!(acquire(&mut m, 9).starts_with("0 "), "queued");
    let renewed: u64 = redis::cmd("ratelimit.v1.concurrency_renew")
        .arg(slots)
        .arg(format!("7 {hour} 1"))
        .query(&mut m)
        .unwrap();
    assert_eq!(renewed, 1);
    let released: u64 = redis::cmd("ratelimit.v1.concurrency_release")
        .arg(slots)
        .arg("18446744073709551615 1")
        .arg("a-channel")
        .query(&mut m)
        .unwrap();
    assert_eq!(released, 1);
    let synced: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(synced, 1, "the replica acknowledged the writes");
    for key in keys
        .iter()
        .map(String::as_str)
        .chain(["app:{r:b}", "app:{r:b}:w", "app:{r:fw}"])
    {
        let on_master = state(&mut m, key);
        assert!(
            on_master.0.is_some() && on_master.1 > 0,
            "{key}: {on_master:?}"
        );
        assert_eq!(state(&mut r, key), on_master, "{key}");
    }
    // The bucket and the window given all their tokens back are gone on both.
    for key in ["app:{r:c}", "app:{r:c}:w"] {
        assert_eq!(state(&mut m, key), (None, -2), "{key}");
        assert_eq!(state(&mut r, key), (None, -2), "{key}");
    }
    let on_master = zset_entries(&mut m, log);
    assert_eq!(on_master.len(), 6, "{on_master:?}");
    assert_eq!(zset_entries(&mut r, log), on_master);
    assert_eq!(pexpiretime(&mut r, log), pexpiretime(&mut m, log));
    // Holder 7's slot and holder 9's ticket; the other holder's slot given back.
    let on_master = zset_entries(&mut m, slots);
    let members: Vec<&str> = on_master.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(members.len(), 2, "{on_master:?}");
    assert!(members.contains(&"h:7:1"), "{on_master:?}");
    assert!(members.iter().any(|m| m.starts_with("w:")), "{on_master:?}");
    for key in [slots, "app:{r:log2}"] {
        assert_eq!(
            zset_entries(&mut r, key),
            zset_entries(&mut m, key),
            "{key}"
        );
        assert_eq!(pexpiretime(&mut r, key), pexpiretime(&mut m, key), "{key}");
    }
    // The AOF holds the writes as `SET .. PXAT`, and no module command.
    let mut aof = Vec::new();
    let dir = master.dir().join("appendonlydir");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".aof") {
            aof.extend(std::fs::read(path).unwrap());
        }
    }
    let aof = String::from_utf8_lossy(&aof).to_lowercase();
    assert!(
        !aof.contains("ratelimit.v1"),
        "a module command reached the AOF"
    );
    assert!(
        aof.contains("pxat"),
        "the writes reached the AOF as SET .. PXAT"
    );
    assert!(
        aof.contains("incrby"),
        "a window's count reached the AOF as INCRBY"
    );
    assert_eq!(state(&mut m, "app:{r:fw}").0.as_deref(), Some("6"));
}

/// The sorted sets, which the module reads and writes through the module API's own functions
/// (no command called), reach a replica without the module and the AOF as the scripts' own
/// commands, each exactly when it changed the set: ended tokens and slots removed
/// (`ZREMRANGEBYSCORE`, which a replica missing it would keep), an ended ticket, tokens and
/// slots added (`ZADD`), renewed, released (`ZREM`), given back and settled within `multi`,
/// and a set emptied by a release (deleted, as `ZREM` deletes it). The replica, and a server
/// without the module started from the master's AOF, hold every set member for member, score
/// for score, with the master's expiry.
#[test]
fn sorted_sets_written_natively_reach_a_replica_and_the_aof_alike() {
    let (master, replica) = master_and_replica();
    let (mut m, mut r) = (master.blocking_connection(), replica.blocking_connection());
    let (hour, short) = (3_600_000_000u64, 300_000u64);
    let (log, slots, settled, emptied) = (
        "app:{z:log}",
        "app:{z:slots}",
        "app:{z:settled}",
        "app:{z:emptied}",
    );
    let one = |m: &mut Connection, command: &str, key: &str, args: String| -> String {
        redis::cmd(&format!("ratelimit.v1.{command}"))
            .arg(key)
            .arg(args)
            .query(m)
            .unwrap()
    };
    let batch = |m: &mut Connection, keys: &[&str], args: String| -> Vec<String> {
        redis::cmd("ratelimit.v1.batch")
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(m)
            .unwrap()
    };
    let multi = |m: &mut Connection, keys: &[&str], args: String| -> String {
        redis::cmd("ratelimit.v1.multi")
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(m)
            .unwrap()
    };
    let numbers =
        |reply: &str| -> Vec<u64> { reply.split(' ').map(|n| n.parse().unwrap()).collect() };
    // Four tokens (the last under an hour, which keeps the log's key), two slots (one for
    // a short lease) and a ticket (short): all but the hour's slot end before the next calls.
    for _ in 0..3 {
        assert!(one(&mut m, "sliding_log", log, format!("3 {short} 1")).starts_with("1 "));
    }
    assert!(one(&mut m, "sliding_log", log, format!("10 {hour} 1")).starts_with("1 "));
    assert!(one(&mut m, "concurrency", slots, format!("2 {short} 1 0 1")).starts_with("1 "));
    assert!(one(&mut m, "concurrency", slots, format!("2 {hour} 2 0 1")).starts_with("1 "));
    assert!(one(&mut m, "concurrency", slots, format!("2 {short} 4 1 1")).starts_with("0 "));
    // Waited for on the server's clock, which the module decides by: every short entry
    // was written before this reading.
    let ended = server_micros(&mut m) + short;
    testkit::wait::eventually_blocking("the short entries ended on the server's clock", || {
        server_micros(&mut m) > ended
    });
    // One batch (one instant: the log cannot expire between its calls): a call under the
    // short period removes the four tokens, ended for it, and takes one, then one under an
    // hour takes two.
    let calls = batch(
        &mut m,
        &[log, log],
        format!("2 1 5 3 3 {short} 1 1 5 3 10 {hour} 2"),
    );
    assert!(calls.iter().all(|c| c.starts_with("1 ")), "{calls:?}");
    // A slot taken removes the ended slot and the ended ticket; renewed; another released.
    assert!(one(&mut m, "concurrency", slots, format!("2 {hour} 3 0 1")).starts_with("1 "));
    assert_eq!(
        one(&mut m, "concurrency_renew", slots, format!("3 {hour} 1")),
        "1"
    );
    assert_eq!(one(&mut m, "concurrency_release", slots, "2 1".into()), "1");
    // A slot and two tokens reserved together, then given back.
    let specs = format!("6 5 3 {hour} 7 0 1 5 3 10 {hour} 2");
    let reserved = numbers(&multi(&mut m, &[slots, log], format!("1 {specs}")));
    assert_eq!((reserved[0], reserved[4]), (1, 1), "{reserved:?}");
    let at = reserved[8];
    assert_eq!(multi(&mut m, &[slots, log], format!("3 {specs} {at}")), "2");
    // A log's estimate settled: two tokens more, then one given back.
    let estimate = "5 3 10 3600000000 2";
    let reserved = numbers(&multi(&mut m, &[settled], format!("1 {estimate}")));
    let at = reserved[4];
    let taken = numbers(&multi(&mut m, &[settled], format!("5 {estimate} {at} 4 0")));
    assert_eq!(taken[..2], [2, 0], "{taken:?}");
    let given = numbers(&multi(&mut m, &[settled], format!("5 {estimate} {at} 1 0")));
    assert_eq!(given[..2], [0, 1], "{given:?}");
    // A set emptied by a release is gone.
    assert!(one(&mut m, "concurrency", emptied, format!("1 {hour} 9 0 1")).starts_with("1 "));
    assert_eq!(
        one(&mut m, "concurrency_release", emptied, "9 1".into()),
        "1"
    );
    let synced: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(synced, 1, "the replica acknowledged the writes");

    let on_master: Vec<_> = [log, slots, settled]
        .iter()
        .map(|key| (zset_entries(&mut m, key), pexpiretime(&mut m, key)))
        .collect();
    let (tokens, held, settled_tokens) = (&on_master[0].0, &on_master[1].0, &on_master[2].0);
    // The batch's three tokens of one instant; the four before gone.
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert!(tokens.iter().all(|t| t.1 == tokens[0].1), "{tokens:?}");
    assert_eq!(held.len(), 1, "only holder 3's slot: {held:?}");
    assert_eq!(held[0].0, "h:3:1");
    assert_eq!(settled_tokens.len(), 3, "{settled_tokens:?}");
    for (key, on_master) in [log, slots, settled].iter().zip(&on_master) {
        assert!(on_master.1 > 0, "{key} has its expiry: {on_master:?}");
        let on_replica = (zset_entries(&mut r, key), pexpiretime(&mut r, key));
        assert_eq!(&on_replica, on_master, "{key} on the replica");
    }
    for c in [&mut m, &mut r] {
        let exists: u64 = redis::cmd("EXISTS").arg(emptied).query(c).unwrap();
        assert_eq!(exists, 0, "the emptied set is gone");
    }

    // A server without the module, from the master's AOF, holds the same.
    let (aof, reloaded, _copy) = from_aof(&master);
    for command in ["zremrangebyscore", "zadd", "zrem", "pexpireat"] {
        assert!(aof.contains(command), "no {command} in the AOF");
    }
    let mut a = reloaded.blocking_connection();
    for (key, on_master) in [log, slots, settled].iter().zip(&on_master) {
        let from_aof = (zset_entries(&mut a, key), pexpiretime(&mut a, key));
        assert_eq!(&from_aof, on_master, "{key} from the AOF");
    }
    let exists: u64 = redis::cmd("EXISTS").arg(emptied).query(&mut a).unwrap();
    assert_eq!(exists, 0, "the emptied set is gone from the AOF");
}

/// A server without the module started from a copy of `master`'s AOF (which must hold no
/// module command): the AOF's text, lowercased, the server, and the copy's directory.
fn from_aof(master: &RedisServer) -> (String, RedisServer, tempfile::TempDir) {
    let copy = tempfile::tempdir().unwrap();
    let aof_dir = copy.path().join("appendonlydir");
    std::fs::create_dir(&aof_dir).unwrap();
    let mut aof = String::new();
    for entry in std::fs::read_dir(master.dir().join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        aof.push_str(&String::from_utf8_lossy(&bytes).to_lowercase());
        std::fs::write(aof_dir.join(path.file_name().unwrap()), bytes).unwrap();
    }
    assert!(
        !aof.contains("ratelimit.v1"),
        "a module command reached the AOF"
    );
    let dir = copy.path().to_str().unwrap();
    let reloaded = RedisServer::start_with(&["--appendonly", "yes", "--dir", dir]);
    (aof, reloaded, copy)
}

/// A batch propagates its writes once: one `EVAL` of the script that replays them
/// (`ratelimit_vocab::native::EFFECTS_SCRIPT`), which a replica without the module runs once,
/// and a server without the module replays from the AOF, each holding every bucket and window
/// as the master does (value and expiry), whatever the kinds of the batch's calls. Where the
/// master has no `EVAL` (renamed away), each write is propagated as its own command instead,
/// with the same result: a bucket's `SET .. PXAT`, a window's, a sorted set's `ZADD` and
/// `PEXPIREAT`.
#[test]
fn a_batch_replicates_once_and_a_replica_and_the_aof_hold_every_write() {
    for without_eval in [false, true] {
        let mut extra = vec!["--appendonly", "yes", "--appendfsync", "always"];
        if without_eval {
            extra.extend(["--rename-command", "EVAL", ""]);
        }
        let master = with_module(&extra);
        let port = master.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let (mut m, mut r) = (master.blocking_connection(), replica.blocking_connection());
        wait_for_link(&mut r);
        // 64 calls: a token bucket each on 40 keys, then a bucket and a window together on
        // 12 pairs (3 of them given back in part by the window's refusal: nothing changes).
        let bucket = "1 4 1000000 1 5000000 1";
        let two = "1 4 1000000 1 5000000 1 3 3 5 3600000000 2";
        let mut keys: Vec<String> = (0..40).map(|i| format!("app:{{b}}:{i}")).collect();
        let mut packed = format!("52 1 {bucket}");
        packed.push_str(&" 0".repeat(39));
        for i in 0..12 {
            keys.push(format!("app:{{b}}:p{i}"));
            keys.push(format!("app:{{b}}:p{i}:w"));
            packed.push_str(&format!(" 2 {two}"));
        }
        let entries: Vec<String> = redis::cmd("ratelimit.v1.batch")
            .arg(keys.len())
            .arg(&keys)
            .arg(packed)
            .query(&mut m)
            .unwrap();
        assert_eq!(entries.len(), 52, "{entries:?}");
        assert!(
            entries.iter().all(|e| e.starts_with("1 ")),
            "every call admitted: {entries:?}"
        );
        // And a sorted set's writes: two tokens of a sliding log (`ZADD`, `PEXPIREAT` each).
        let log = "app:{b}:log";
        let entries: Vec<String> = redis::cmd("ratelimit.v1.batch")
            .arg(2)
            .arg(&[log, log][..])
            .arg("2 1 5 3 10 3600000000 1 0")
            .query(&mut m)
            .unwrap();
        assert!(
            entries.iter().all(|e| e.starts_with("1 ")),
            "both tokens taken: {entries:?}"
        );
        let synced: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
        assert_eq!(synced, 1, "the replica acknowledged the writes");
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut r)
            .unwrap();
        let evals = testkit::info_number(&stats, "cmdstat_eval", Some("calls"));
        let sets = testkit::info_number(&stats, "cmdstat_set", Some("calls"));
        let zadds = testkit::info_number(&stats, "cmdstat_zadd", Some("calls"));
        assert_eq!(zadds, Some(2), "{stats}");
        if without_eval {
            assert_eq!(evals, None, "{stats}");
            assert_eq!(sets, Some(64), "each write its own SET: {stats}");
        } else {
            assert_eq!(evals, Some(2), "each batch replicated once: {stats}");
            // (The script's own calls are counted too: all 64 writes made.)
            assert_eq!(sets, Some(64), "{stats}");
        }
        let (aof, reloaded, _copy) = from_aof(&master);
        assert_eq!(aof.contains("eval"), !without_eval, "{without_eval}");
        let mut a = reloaded.blocking_connection();
        for key in &keys {
            let on_master = state(&mut m, key);
            assert!(
                on_master.0.is_some() && on_master.1 > 0,
                "{key}: {on_master:?}"
            );
            assert_eq!(state(&mut r, key), on_master, "{key} on the replica");
            assert_eq!(state(&mut a, key), on_master, "{key} from the AOF");
        }
        let on_master = (zset_entries(&mut m, log), pexpiretime(&mut m, log));
        assert_eq!(on_master.0.len(), 2, "{on_master:?}");
        assert_eq!(
            (zset_entries(&mut r, log), pexpiretime(&mut r, log)),
            on_master
        );
        assert_eq!(
            (zset_entries(&mut a, log), pexpiretime(&mut a, log)),
            on_master
        );
    }
}

/// A master with the module, its AOF written on every write, and a replica without the
/// module, linked to it.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = with_module(&["--appendonly", "yes", "--appendfsync", "always"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_for_link(&mut replica.blocking_connection());
    (master, replica)
}

/// A sorted set's members and scores, in order.
fn zset_entries(con: &mut Connection, key: &str) -> Vec<(String, u64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
        .unwrap()
}

fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

/// Waits for the replica to report its link to the master up: a full sync, which a loaded
/// machine may take many seconds to finish (a fresh-clone .ci/run beside another build took
/// more than 5).
fn wait_for_link(replica: &mut Connection) {
    eventually_blocking("the replica linked to its master", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(replica)
            .unwrap();
        info.contains("master_link_status:up")
    });
}

/// A limiter built on a server with the module decides by it; when the server loses the
/// module, the next call is decided by the function library on the same bucket (nothing
/// lost, nothing given twice), and every later one too; the loss is said once, at WARN, under
/// the `redis_ratelimit` target operators filter by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_module_falls_back_per_call_on_the_same_bucket() {
    testkit::logs::install();
    let server = with_module(&["--enable-module-command", "yes"]);
    let limiter = limiter_on(&server).await;
    assert_eq!(limiter.redis_path(), Some(RedisPath::Module));
    let limit = Limit::per_hour(1).burst(4);
    for remaining in [3, 2] {
        let d = limiter.check_n("k", &limit, 1).await.unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.source),
            (true, remaining, Source::Store)
        );
    }
    let mut con = server.connection().await;
    let _: () = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("ratelimit_v1")
        .query_async(&mut con)
        .await
        .unwrap();
    for remaining in [1, 0] {
        let d = limiter.check_n("k", &limit, 1).await.unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.source),
            (true, remaining, Source::Store)
        );
        assert_eq!(limiter.redis_path(), Some(RedisPath::Functions));
    }
    let lost = testkit::logs::with_message("no ratelimit module commands");
    assert!(
        lost.len() == 1 && lost[0].level == testkit::logs::Level::WARN,
        "{lost:?}"
    );
    let refused = limiter.check_n("k", &limit, 1).await.unwrap();
    assert!(
        !refused.allowed && refused.source == Source::Store,
        "{refused:?}"
    );
}

/// The module lost while calls flood in (batched by the module's `batch`, several limits by
/// its `multi`): the calls that meet its loss run by `FCALL` (`batch.lua`, `multi.lua`) on the
/// same buckets, and each bucket takes exactly its burst, before and across the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_lost_under_a_flood_loses_no_decision() {
    let server = with_module(&["--enable-module-command", "yes"]);
    let limiter = limiter_on(&server).await;
    let one = Limit::per_hour(9);
    let window = Limit::per_hour(6).algorithm(ratelimit_core::Algorithm::FixedWindow);
    let round = |pairs: bool| flood_round(&limiter, &one, &window, pairs);
    // Before: 3 of 9 taken from each key alone, then 3 more with 3 of 6 from its window, by
    // the module (batched: several limits of one call ride in its batches too).
    assert_eq!(round(false).await, 48);
    assert_eq!(round(true).await, 48);
    assert_eq!(limiter.redis_path(), Some(RedisPath::Module));
    let batches = calls_of(&server, "ratelimit.v1.batch").await;
    assert!(
        batches[0] > 0 && batches[1] == 0,
        "48 calls at once rode in batches: {batches:?}"
    );
    let _: () = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("ratelimit_v1")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    // Across the loss: pairs again (each takes one from a key and one from its window), the
    // buckets' last tokens and the windows'; nothing more.
    assert_eq!(round(true).await, 48);
    assert_eq!(limiter.redis_path(), Some(RedisPath::Functions));
    assert_eq!(round(false).await, 0, "each key had 9 and gave 9");
    assert_eq!(round(true).await, 0);
    for key in 0..16 {
        let left = limiter.peek(&format!("k{key}:w"), &window).await.unwrap();
        assert_eq!(left.remaining, 0, "k{key}:w gave its 6 to the pairs");
    }
}

/// 16 keys, 3 calls per key at once: of `one` alone, or with `pairs` of `one` and `window` (on
/// the key and `<key>:w`). How many were admitted, every decision the store's (or a refusal
/// of the deny cache).
async fn flood_round(limiter: &RateLimiter, one: &Limit, window: &Limit, pairs: bool) -> u32 {
    let calls: Vec<_> = (0..48)
        .map(|i| {
            let (limiter, one, window) = (limiter.clone(), *one, *window);
            tokio::spawn(async move {
                let key = format!("k{}", i % 16);
                if pairs {
                    let w = format!("{key}:w");
                    limiter
                        .check_all(&[(&key, &one, 1), (&w, &window, 1)])
                        .await
                } else {
                    limiter.check(&key, &one).await
                }
            })
        })
        .collect();
    let mut admitted = 0;
    for call in calls {
        let d = call.await.unwrap().unwrap();
        // A refusal may come from the deny cache, which a refusal of the store filled (the
        // bucket is empty for a while); anything else is the store's.
        assert!(
            d.source == Source::Store || (!d.allowed && d.source == Source::DenyCache),
            "{d:?}"
        );
        admitted += u32::from(d.allowed);
    }
    admitted
}

/// A client whose ACL does not grant the module's commands decides by `FCALL`, from the
/// start: the module loaded is no reason to fail. `ACL LOG` holds the one refusal of
/// `build()`'s probe (docs/operations.md says so), and nothing of the decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_refused_the_module_decides_by_functions() {
    let server = with_module(&[]);
    let limiter = under_least_acl(&server, &[]).await;
    assert_eq!(limiter.redis_path(), Some(RedisPath::Functions));
    for _ in 0..3 {
        let d = limiter.check("k", &Limit::per_second(5)).await.unwrap();
        assert!(d.allowed && d.source == Source::Store, "{d:?}");
    }
    let log: Vec<Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    let entries = testkit::acl::log_entries(&log);
    let probe = "ratelimit.v1.token_bucket";
    assert!(
        entries.len() == 1
            && entries[0].contains("reason command")
            && entries[0].contains(&format!("object {probe}")),
        "{entries:#?}"
    );
    let Value::Array(fields) = &log[0] else {
        panic!("{entries:?}")
    };
    let count = fields
        .iter()
        .position(|f| *f == Value::BulkString(b"count".to_vec()))
        .and_then(|at| fields.get(at + 1));
    assert_eq!(count, Some(&Value::Int(1)), "{entries:?}");
}

/// The least ACL of docs/operations.md plus the module's commands (the line the docs give
/// for a server with the module) lets a limiter decide by the module, with nothing refused in
/// `ACL LOG`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_acl_with_the_module_commands_decides_by_the_module() {
    let server = with_module(&[]);
    // The rules docs/operations.md gives, which name every command the limiter calls.
    let module_rules = testkit::acl::module_rules();
    let mut documented: Vec<&str> = module_rules.iter().map(|r| &r[1..]).collect();
    let mut called = scripts::native_commands();
    documented.sort_unstable();
    called.sort_unstable();
    assert_eq!(documented, called, "docs/operations.md's module ACL rules");
    let limiter = under_least_acl(&server, &module_rules).await;
    assert_eq!(limiter.redis_path(), Some(RedisPath::Module));
    let mut admin = server.connection().await;
    for _ in 0..3 {
        let d = limiter.check("k", &Limit::per_second(5)).await.unwrap();
        assert!(d.allowed && d.source == Source::Store, "{d:?}");
    }
    let log: Vec<Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(log.is_empty(), "{:?}", testkit::acl::log_entries(&log));
    // Build's probe (refused by the module, as it asks) and the three decisions.
    assert_eq!(token_bucket_calls(&server).await, [4, 1]);
}

/// `ratelimit.v1.token_bucket`'s calls on `server`, and those that failed.
async fn token_bucket_calls(server: &RedisServer) -> [u64; 2] {
    calls_of(server, "ratelimit.v1.token_bucket").await
}

/// `command`'s calls on `server`, and those that failed (`INFO commandstats`).
async fn calls_of(server: &RedisServer, command: &str) -> [u64; 2] {
    calls_on(server.port(), command)
}

/// `command`'s calls on the node listening on `port`, and those that failed.
fn calls_on(port: u16, command: &str) -> [u64; 2] {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    let line = format!("cmdstat_{command}");
    ["calls", "failed_calls"]
        .map(|field| testkit::info_number(&stats, &line, Some(field)).unwrap_or(0))
}

/// Several limits of one call (a token bucket and a fixed window) are one command of the
/// module, all or nothing: the call the bucket refuses takes nothing from the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_of_a_call_are_one_module_command() {
    let server = with_module(&[]);
    let limiter = limiter_on(&server).await;
    let bucket = Limit::per_hour(2);
    let window = Limit::per_hour(3).algorithm(ratelimit_core::Algorithm::FixedWindow);
    let both = [("k:bucket", &bucket, 1), ("k:window", &window, 1)];
    let mut seen = Vec::new();
    for _ in 0..4 {
        let d = limiter.check_all(&both).await.unwrap();
        assert_eq!(d.source, Source::Store, "{d:?}");
        seen.push((d.allowed, d.remaining));
    }
    // Two admitted; then the bucket is empty, and the window keeps the one it has left.
    assert_eq!(seen, [(true, 1), (true, 0), (false, 0), (false, 0)]);
    let left = limiter.peek("k:window", &window).await.unwrap();
    assert_eq!(
        left.remaining, 1,
        "the refused calls took nothing from the window"
    );
    let multi = format!("{}multi", ratelimit_vocab::native::COMMAND_PREFIX);
    // The four calls, and the peek (`multi`'s peek mode, of one limit): each answered by the
    // module (a call it did not answer would have gone by `FCALL` only after the module
    // refused it, and every limiter decision here is the store's).
    assert_eq!(calls_of(&server, &multi).await, [5, 0]);
}

/// Two limits of one call on one key, which `multi` opens once (one handle for both): two
/// sliding logs decide as `multi.lua` decides them on a key of its own (both read the log
/// before either writes, then each writes in order), answer for answer and member count for
/// member count, through decisions, a reservation and its give-back. And a key named by
/// limits of a string and of a sorted set (one drops the other's value) gets an answer, and
/// the server lives on.
#[test]
fn two_limits_on_one_key_decide_as_multi_lua() {
    let server = with_module(&[]);
    let mut con = server.blocking_connection();
    let library = scripts::library();
    let _: () = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library.text())
        .query(&mut con)
        .unwrap();
    let function = library.function("multi").unwrap();
    // Two sliding logs of an hour: five taking one, four taking two.
    let specs = "5 3 5 3600000000 1 5 3 4 3600000000 2";
    let (native_key, script_key) = ("app:{dup}:native", "app:{dup}:script");
    let native = |con: &mut Connection, args: String| -> Vec<u64> {
        let reply: String = redis::cmd("ratelimit.v1.multi")
            .arg(2)
            .arg(&[native_key, native_key][..])
            .arg(args)
            .query(con)
            .unwrap();
        reply.split(' ').map(|n| n.parse().unwrap()).collect()
    };
    let script = |con: &mut Connection, args: String| -> Vec<u64> {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(function).arg(1).arg(script_key).arg(2);
        let mut args = args.split(' ');
        fcall
            .arg(args.next().unwrap())
            .arg(script_key)
            .arg(script_key);
        for arg in args {
            fcall.arg(arg);
        }
        // An array of numbers; a give-back's one integer.
        match fcall.query(con).unwrap() {
            Value::Int(n) => vec![u64::try_from(n).unwrap()],
            reply => redis::from_redis_value(reply).unwrap(),
        }
    };
    // Each limit's allowed and remaining (the times differ by when each ran).
    let decided = |reply: &[u64]| -> Vec<u64> {
        reply
            .chunks(4)
            .take(2)
            .flat_map(|limit| limit[..2].to_vec())
            .collect()
    };
    let members = |con: &mut Connection, key: &str| -> u64 {
        redis::cmd("ZCARD").arg(key).query(con).unwrap()
    };
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (n, s) = (
            native(&mut con, format!("0 {specs}")),
            script(&mut con, format!("0 {specs}")),
        );
        assert_eq!(decided(&n), decided(&s), "{n:?} / {s:?}");
        assert_eq!(members(&mut con, native_key), members(&mut con, script_key));
        seen.push(decided(&n));
    }
    // Both read the log before either writes: each call adds two entries (the second's
    // `<now>:1` is the first's again), until the second limit has no room.
    assert_eq!(
        seen,
        [vec![1, 4, 1, 2], vec![1, 2, 1, 0], vec![1, 1, 0, 0]],
        "{seen:?}"
    );
    assert_eq!(members(&mut con, native_key), 4);
    let (n, s) = (
        native(&mut con, format!("1 {specs}")),
        script(&mut con, format!("1 {specs}")),
    );
    assert_eq!(decided(&n), decided(&s), "{n:?} / {s:?}");
    let (n, s) = (
        native(&mut con, format!("3 {specs} {}", n[8])),
        script(&mut con, format!("3 {specs} {}", s[8])),
    );
    assert_eq!((n, s), (vec![2], vec![2]));
    assert_eq!(members(&mut con, native_key), members(&mut con, script_key));
    // A string's limit and a sorted set's on one key.
    let _ = redis::cmd("ratelimit.v1.multi")
        .arg(2)
        .arg(&["app:{mixed}", "app:{mixed}"][..])
        .arg("0 3 3 5 3600000000 1 5 3 5 3600000000 1")
        .query::<Value>(&mut con);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// A limiter (prefix `app`) of the user `ratelimit`, set to the least ACL of
/// docs/operations.md and `extra` rules.
async fn under_least_acl(server: &RedisServer, extra: &[String]) -> RateLimiter {
    let mut admin = server.connection().await;
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg("ratelimit");
    for rule in testkit::acl::least_acl().iter().chain(extra) {
        acl.arg(rule);
    }
    let _: () = acl.query_async(&mut admin).await.unwrap();
    let url = format!("redis://ratelimit:pw@127.0.0.1:{}", server.port());
    RateLimiter::builder()
        .redis(url)
        .prefix("app")
        .build()
        .await
        .unwrap()
}

/// Concurrent calls the module decides are gathered only among themselves, into the
/// module's `batch` command (a batch script costs Redis more per decision than the commands):
/// each decided exactly once (8 admitted per key, the ninth refused), none by a script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_native_calls_are_batched_by_the_module() {
    let server = with_module(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    // No instance heartbeat: every script call after build's is a decision's.
    let limiter = RateLimiter::builder()
        .redis_store(store.clone())
        .prefix("app")
        .instance(false)
        .build()
        .await
        .unwrap();
    let scripts = server.script_calls().await;
    let limit = Limit::per_hour(8);
    let calls = (0..256).map(|i| {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.check(&format!("k{}", i % 32), &limit).await })
    });
    for call in calls.collect::<Vec<_>>() {
        let d = call.await.unwrap().unwrap();
        assert!(d.allowed && d.source == Source::Store, "{d:?}");
    }
    for key in 0..32 {
        let d = limiter.check(&format!("k{key}"), &limit).await.unwrap();
        assert!(!d.allowed && d.source == Source::Store, "k{key}: {d:?}");
    }
    assert_eq!(
        server.script_calls().await,
        scripts,
        "a decision went by a script"
    );
    let sizes = store.batch_sizes();
    let batches = calls_of(&server, "ratelimit.v1.batch").await;
    assert_eq!(
        batches,
        [sizes[1..].iter().sum::<u64>(), 0],
        "every batch by the module: {sizes:?}"
    );
    assert!(
        batches[0] > 0,
        "256 calls at once rode in batches: {sizes:?}"
    );
}

/// A limiter (prefix `app`) on `server`, as the default user.
async fn limiter_on(server: &RedisServer) -> RateLimiter {
    limiter_at(server.url()).await
}

/// A limiter (prefix `app`) at `url`.
async fn limiter_at(url: String) -> RateLimiter {
    RateLimiter::builder()
        .redis(url)
        .prefix("app")
        .build()
        .await
        .unwrap()
}

/// The module's token-bucket calls on the node listening on `port`.
fn module_calls_on(port: u16) -> u64 {
    calls_on(port, "ratelimit.v1.token_bucket")[0]
}

/// A Redis Cluster whose every node loaded the module: the limiter decides by it on every
/// master (each master answers the calls of its slots), and the buckets hold exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_master_decides_by_the_module() {
    let cluster = testkit::cluster::RedisCluster::start_with(&testkit::module::load_args());
    let limiter = limiter_at(cluster.url()).await;
    assert_eq!(limiter.redis_path(), Some(RedisPath::Module));
    let limit = Limit::per_hour(1).burst(3);
    // Keys on every master: 3 admitted each, the fourth refused.
    let keys: Vec<String> = (0..24).map(|i| format!("user{i}")).collect();
    for key in &keys {
        for remaining in [2, 1, 0] {
            let d = limiter.check_n(key, &limit, 1).await.unwrap();
            assert_eq!(
                (d.allowed, d.remaining, d.source),
                (true, remaining, Source::Store)
            );
        }
        let refused = limiter.check_n(key, &limit, 1).await.unwrap();
        assert!(
            !refused.allowed && refused.source == Source::Store,
            "{refused:?}"
        );
    }
    // Several limits of one call, whose buckets are in other slots (each bucket's slot is its
    // name's and key's): decided by `multi.lua`, which reaches keys of any slot its node
    // serves (the module's `multi` declares every key, so a cluster takes it only for keys of
    // one slot), across the masters as one all-or-nothing call.
    let window = Limit::per_hour(2).algorithm(ratelimit_core::Algorithm::FixedWindow);
    let both = [("user0", &limit, 1), ("user0:w", &window, 1)];
    assert_ne!(
        ratelimit_core::tools::key_slot(b"app:{:user0}"),
        ratelimit_core::tools::key_slot(b"app:{:user0:w}")
    );
    let d = limiter.check_all(&both).await.unwrap();
    assert!(
        !d.allowed && d.source == Source::Store,
        "user0's bucket is empty: {d:?}"
    );
    let fresh = [("fresh", &limit, 1), ("fresh:w", &window, 1)];
    let d = limiter.check_all(&fresh).await.unwrap();
    assert!(d.allowed && d.source == Source::Store, "{d:?}");
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    for master in masters {
        assert!(
            module_calls_on(master) > 0,
            "master {master} decided nothing natively"
        );
    }
}

/// Under Sentinel, with the module on the master and its replica: decided by the module,
/// and after a failover (the replica promoted), by the module on the new master, on the
/// state the old one replicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_the_module_decides_before_and_after_a_failover() {
    let setup = testkit::sentinel::SentinelSetup::start_with(&testkit::module::load_args());
    let limiter = limiter_at(setup.url()).await;
    assert_eq!(limiter.redis_path(), Some(RedisPath::Module));
    let limit = Limit::per_hour(1).burst(4);
    for remaining in [3, 2] {
        let d = limiter.check_n("k", &limit, 1).await.unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.source),
            (true, remaining, Source::Store)
        );
    }
    // What the replica holds is what the master decided: wait for it before the failover.
    let old = setup.master_port().unwrap();
    let mut master = setup.server(old).blocking_connection();
    let synced: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(30_000)
        .query(&mut master)
        .unwrap();
    assert_eq!(synced, 1);
    setup.force_failover().unwrap();
    // The sentinels name a new master, which says it is one.
    let new = tokio::task::block_in_place(|| setup.wait_new_master(old, Duration::from_secs(30)))
        .unwrap();
    // Calls go on: the first ones may still reach the old master (which takes writes until
    // the sentinels turn it into a replica, and then loses them) or fall to the failure
    // policy, until the limiter follows the new master, which decides by its module.
    eventually_ok("the new master deciding by its module", async || {
        let d = limiter.check_n("k", &limit, 1).await.unwrap();
        // Wherever it was decided, the bucket held the two calls before the failover.
        assert!(d.source != Source::Store || d.remaining <= 1, "{d:?}");
        assert_eq!(limiter.redis_path(), Some(RedisPath::Module), "after {d:?}");
        if module_calls_on(new) > 0 {
            return Ok(());
        }
        // Not the old master's calls: it drops its clients as it becomes a replica.
        Err(format!("the last call: {d:?}"))
    })
    .await;
    assert_eq!(limiter.redis_path(), Some(RedisPath::Module));
    // On the state the old master replicated: its two calls, and at least the one the new
    // master decided, are taken.
    let now = limiter.peek("k", &limit).await.unwrap();
    assert!(now.remaining <= 1, "{now:?}");
}

/// The server's clock (`TIME`), in µs.
fn server_micros(con: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000 + micros
}
