//! Hostile input: thousands of random keys, keys full of `{` and `}`, a 1 MB key, keys made
//! from invalid UTF-8 header bytes (as the `Header` resolver writes them), many client IPs.
//! Redis decides every call (no error, no CROSSSLOT on a cluster), bucket keys stay short,
//! Redis memory returns to its baseline once the buckets refill, and a bounded `MemoryStore`
//! stays within its bound.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use common::strict_limiter;
use ratelimit_core::{
    Header, Ip, KeyResolver, Limit, RateLimiter, RequestContext, Source, store::MemoryStore,
    tools::MAX_PART_LEN,
};
use testkit::cluster::RedisCluster;
use testkit::wait::{eventually, eventually_ok};
use testkit::{RedisServer, Rng};

/// Random printable keys of 1 to 64 characters, biased towards Redis-special characters.
fn random_keys(rng: &mut Rng, n: usize) -> Vec<String> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789{}{}%:/ *?[]\\\"'\t";
    let mut set = BTreeSet::new();
    while set.len() < n {
        let len = 1 + usize::try_from(rng.next_u64() % 64).unwrap();
        let key: String = (0..len)
            .map(|_| char::from(ALPHABET[usize::from(rng.byte()) % ALPHABET.len()]))
            .collect();
        set.insert(key);
    }
    set.into_iter().collect()
}

/// Keys that the `Header` resolver makes from header values that are not UTF-8 (it keys them
/// by a marker and their bytes in hex), through the resolver itself.
fn invalid_utf8_keys(rng: &mut Rng, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut bytes: Vec<u8> = (0..8 + i % 24).map(|_| rng.byte() | 0x80).collect();
            bytes.push(0xff);
            assert!(std::str::from_utf8(&bytes).is_err(), "0xff is never UTF-8");
            let mut headers = http::HeaderMap::new();
            headers.insert("x-api-key", http::HeaderValue::from_bytes(&bytes).unwrap());
            let ctx = RequestContext::new().with_headers(headers);
            Header("x-api-key").resolve(&ctx).unwrap().into_owned()
        })
        .collect()
}

fn brace_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "{",
        "}",
        "{}",
        "}{",
        "{{",
        "}}",
        "a{b}c",
        "{a}",
        "{a}{b}",
        "}a{",
        "{{{{x}}}}",
        "%7B",
        "%7D",
        "%",
        "%H",
        "%Hdeadbeef",
        "{%}",
        "\u{fffd}",
        "",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    keys.extend((0..200).map(|i| format!("{{user{i}}}")));
    keys.extend((0..200).map(|i| format!("}}{i}{{")));
    keys.push("{".repeat(MAX_PART_LEN));
    keys.push("}".repeat(MAX_PART_LEN / 2 - 1));
    keys
}

/// Client IPs as the `Ip` resolver keys them (IPv6 grouped by /64), through the resolver.
fn ip_keys(rng: &mut Rng, n: usize) -> Vec<String> {
    let mut set = BTreeSet::new();
    while set.len() < n {
        let r = rng.next_u64();
        let ip = if r.is_multiple_of(4) {
            IpAddr::V6(Ipv6Addr::from(u128::from(r) << 64 | 0x1234))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(r >> 32).unwrap()))
        };
        let ctx = RequestContext::new().with_peer(SocketAddr::new(ip, 443));
        set.insert(Ip.resolve(&ctx).unwrap().into_owned());
    }
    set.into_iter().collect()
}

/// Every hostile key, once.
fn hostile_keys(seed: u64, random: usize, ips: usize, utf8: usize) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut keys = random_keys(&mut rng, random);
    keys.extend(brace_keys());
    keys.extend(invalid_utf8_keys(&mut rng, utf8));
    keys.extend(ip_keys(&mut rng, ips));
    keys.push("k".repeat(1 << 20));
    keys.push("{".repeat(1 << 20));
    // Some random keys are brace keys too.
    let set: BTreeSet<String> = keys.into_iter().collect();
    set.into_iter().collect()
}

/// Checks every key once with `tasks` concurrent tasks; asserts that Redis admitted each call
/// (a fresh bucket) and that every bucket key is short.
async fn check_all(limiter: &RateLimiter, keys: &[String], limit: Limit, tasks: usize) {
    let prefix_len = limiter.prefix().len();
    let max_key = keys
        .iter()
        .map(|k| limiter.bucket_key(k).len())
        .max()
        .unwrap();
    assert!(
        max_key <= prefix_len + 3 + MAX_PART_LEN,
        "bucket keys are bounded: {max_key} bytes"
    );
    let chunk = keys.len().div_ceil(tasks);
    let mut handles = Vec::new();
    for part in keys.chunks(chunk) {
        let part = part.to_vec();
        let limiter = limiter.clone();
        handles.push(tokio::spawn(async move {
            let mut bad = Vec::new();
            for key in &part {
                match limiter.check(key, &limit).await {
                    Ok(d) if d.allowed && d.source == Source::Store => {}
                    other => bad.push((key.chars().take(40).collect::<String>(), other)),
                }
            }
            bad
        }));
    }
    let mut bad = Vec::new();
    for h in handles {
        bad.extend(h.await.unwrap());
    }
    assert!(
        bad.is_empty(),
        "{} of {} calls were not admitted by Redis, e.g. {:?}",
        bad.len(),
        keys.len(),
        bad.first()
    );
}

async fn used_memory(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(con)
        .await
        .unwrap();
    let bytes = testkit::info_number(&info, "used_memory", None).unwrap();
    i64::try_from(bytes).unwrap()
}

async fn dbsize(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("DBSIZE").query_async(con).await.unwrap()
}

/// On one server: every hostile key is decided by Redis, and once the buckets have refilled
/// (2 per second, burst 2: one call's token is back within 500 ms) the keys are gone and `used_memory` is back at its
/// baseline. The only other key is the heartbeat's `<prefix>:instances`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_leave_nothing_behind() {
    let server = RedisServer::start();
    let limiter = strict_limiter(&server.url(), "h").await;
    let limit = Limit::per_second(2).burst(2);
    let mut con = server.connection().await;
    // Warm up (script cache, heartbeat key, connection buffers), then take the baseline.
    check_all(&limiter, &hostile_keys(1, 100, 10, 10)[..120], limit, 4).await;
    // Their buckets are full after 1 s, when their keys expire; Redis reclaims expired keys
    // in the background: wait until it has.
    eventually("only the heartbeat key to remain", async || {
        dbsize(&mut con).await <= 1
    })
    .await;
    let base_keys = 1;
    let baseline = used_memory(&mut con).await;

    let keys = hostile_keys(0x9E37_79B9_7F4A_7C15, 10_000, 5_000, 1_000);
    let t0 = Instant::now();
    check_all(&limiter, &keys, limit, 8).await;
    let took = t0.elapsed();
    let peak_keys = dbsize(&mut con).await;
    let peak = used_memory(&mut con).await;

    let reclaimed = "every bucket key expired and used_memory back to its baseline";
    let (keys_after, mem_after) = eventually_ok(reclaimed, async || {
        let (n, m) = (dbsize(&mut con).await, used_memory(&mut con).await);
        if n <= base_keys && m <= baseline + 64 * 1024 {
            Ok((n, m))
        } else {
            Err(format!("{n} keys, used_memory {baseline} -> {m} bytes"))
        }
    })
    .await;
    println!(
        "hostile: {} keys (10,000 random, {} with braces, 1,000 from invalid UTF-8, 5,000 IPs, \
         two of 1 MB) decided by Redis in {:.0} ms; keys {base_keys} -> {peak_keys} -> \
         {keys_after}; used_memory {baseline} -> {peak} -> {mem_after} bytes",
        keys.len(),
        brace_keys().len(),
        common::ms(took),
    );
}

/// On a cluster: hostile keys spread over every master and every call is decided by Redis
/// (a CROSSSLOT, MOVED loop or any other error would show as a non-store decision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_on_a_cluster() {
    let cluster = RedisCluster::start();
    let limiter = strict_limiter(&cluster.url(), "hc").await;
    let limit = Limit::per_second(100).burst(2);
    let keys = hostile_keys(0x9E37_79B9_7F4A_7C15, 3_000, 1_000, 300);
    check_all(&limiter, &keys, limit, 8).await;
    let masters: BTreeSet<u16> = brace_keys()
        .iter()
        .map(|k| cluster.master_of_key(&limiter.bucket_key(k)))
        .collect();
    println!(
        "hostile on a cluster: {} keys decided by Redis; the brace keys alone reached masters \
         {masters:?}",
        keys.len()
    );
    assert_eq!(masters.len(), 3, "the keys spread over every master");
}

/// A `MemoryStore` bounded to 1,000 buckets stays within its bound under 100,000 distinct
/// keys whose buckets all stay active (the bound is rounded up to one bucket per shard, at
/// most 256 shards).
#[tokio::test]
async fn a_bounded_memory_store_stays_bounded() {
    let store = MemoryStore::new().with_max_keys(1000);
    let limiter = RateLimiter::builder()
        .memory_store(store.clone())
        .build()
        .await
        .unwrap();
    let limit = Limit::per_hour(1).burst(5);
    let bound = 1000 + 256;
    let mut max_len = 0;
    for i in 0..100_000 {
        let d = limiter.check(&format!("k{i}"), &limit).await.unwrap();
        assert!(d.allowed, "a fresh bucket admits");
        if i % 500 == 0 {
            max_len = max_len.max(store.len());
        }
    }
    max_len = max_len.max(store.len());
    println!(
        "memory store: 100,000 keys, at most {max_len} buckets held (bound 1,000 rounded up per \
         shard), {} active buckets evicted; {store:?}",
        store.evicted_active()
    );
    assert!(max_len <= bound, "{max_len} buckets held");
    assert!(max_len >= 500, "the store kept buckets: {max_len}");
    assert!(store.evicted_active() > 0);
}
