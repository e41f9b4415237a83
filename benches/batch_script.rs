//! Redis's own time per decision: one `gcra.lua` `EVALSHA` per decision against `batch.lua`
//! deciding M calls per `EVALSHA`, read from `INFO commandstats` (so the client's speed does
//! not matter). Also `batch.lua` with the token bucket replaced by a constant reply: what the
//! batch's own machinery (its arguments, parsing and reply) costs per call.
//!
//! ```sh
//! cargo bench -p redis-ratelimit-benches --bench batch_script
//! ```
//!
//! Starts its own `redis-server` on a free loopback port. Results in docs/benchmarks.md 3.6.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use redis::Value;

/// Decisions per measurement.
const DECISIONS: u64 = 128_000;
/// Distinct buckets, visited in a fixed scattered order.
const KEYS: u64 = 10_000;
/// `gcra.lua`'s arguments for 10^9 per second, burst 1000, cost 1: every call is admitted,
/// and every bucket is written (the same work as the load generator's).
const ARGS: [u64; 4] = [1, 1000, 1000, 1];

fn key(i: u64) -> String {
    format!("bench:{{:k:{:012}}}", (i * 7_919) % KEYS)
}

/// Redis's `EVALSHA` time per call (µs) and number of calls since the last reset.
async fn evalsha(c: &mut redis::aio::MultiplexedConnection) -> (f64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    let usec = testkit::info_number(&info, "cmdstat_evalsha", Some("usec")).unwrap_or(0);
    let calls = testkit::info_number(&info, "cmdstat_evalsha", Some("calls")).unwrap_or(0);
    (usec as f64 / calls.max(1) as f64, calls)
}

async fn reset(c: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut *c)
        .await
        .unwrap();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(c)
        .await
        .unwrap();
}

async fn alone(c: &mut redis::aio::MultiplexedConnection, gcra: &redis::Script) -> f64 {
    reset(c).await;
    let mut i = 0;
    while i < DECISIONS {
        let mut pipe = redis::pipe();
        for _ in 0..256 {
            pipe.cmd("EVALSHA")
                .arg(gcra.get_hash())
                .arg(1)
                .arg(key(i))
                .arg(&ARGS);
            i += 1;
        }
        let _: Vec<Value> = pipe.query_async(c).await.unwrap();
    }
    let (per_call, calls) = evalsha(c).await;
    assert_eq!(calls, i);
    per_call
}

async fn batched(c: &mut redis::aio::MultiplexedConnection, batch: &redis::Script, m: u64) -> f64 {
    reset(c).await;
    let mut i = 0;
    while i < DECISIONS {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(batch.get_hash()).arg(1).arg(key(i)).arg(m);
        for _ in 0..m {
            // As the store sends a one-limit call: 1 limit, its key, algorithm 1, 4 arguments.
            cmd.arg(1).arg(key(i)).arg(1).arg(ARGS.len()).arg(&ARGS);
            i += 1;
        }
        let reply: Value = cmd.query_async(c).await.unwrap();
        let Value::Array(items) = reply else {
            panic!("batch.lua: {reply:?}")
        };
        assert!(
            items.iter().all(|v| matches!(v, Value::Array(_))),
            "{items:?}"
        );
    }
    let (per_call, calls) = evalsha(c).await;
    per_call / (i as f64 / calls as f64)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = testkit::RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let gcra = redis::Script::new(redis_ratelimit::tools::scripts::TOKEN_BUCKET);
    let batch = redis::Script::new(redis_ratelimit::tools::scripts::BATCH);
    // The batch with the token bucket's work replaced by a constant reply.
    let call = "ok, reply = pcall(ALGORITHMS[algorithm], key1, args1, redis)";
    assert!(
        redis_ratelimit::tools::scripts::BATCH.contains(call),
        "batch.lua changed: update this bench's machinery-only variant"
    );
    let machinery = redis::Script::new(
        &redis_ratelimit::tools::scripts::BATCH
            .replace(call, "ok, reply = true, {1, 0, 0, 0, now}"),
    );
    for s in [&gcra, &batch, &machinery] {
        let _: String = s.prepare_invoke().load_async(&mut c).await.unwrap();
    }
    println!("Redis µs per decision ({DECISIONS} decisions on {KEYS} buckets each)");
    println!(
        "gcra.lua alone (pipelined EVALSHA): {:.2}",
        alone(&mut c, &gcra).await
    );
    for m in [1, 4, 16, 64, 128] {
        println!(
            "batch.lua, {m:>3} calls per EVALSHA: {:.2}",
            batched(&mut c, &batch, m).await
        );
    }
    for m in [16, 64] {
        println!(
            "batch.lua machinery only, {m:>3} calls per EVALSHA: {:.2}",
            batched(&mut c, &machinery, m).await
        );
    }
}
