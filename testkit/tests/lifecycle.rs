//! The limiter's life beside others: instances counted once per process, resets reaching
//! every instance's deny cache, a clear error outside Tokio, and no password in any error.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ratelimit_core::{Error, Limit, RateLimiter, Source, enable::EnableOptions, store::RedisStore};
use testkit::wait::eventually;
use testkit::{RedisServer, free_port};

use common::{EVENTUALLY, OtherInstance};

async fn limiter(url: &str, prefix: &str) -> RateLimiter {
    RateLimiter::builder()
        .redis(url)
        .prefix(prefix)
        .deadline(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

async fn members(server: &RedisServer, prefix: &str) -> u32 {
    redis::cmd("ZCARD")
        .arg(format!("{prefix}:instances"))
        .query_async(&mut server.connection().await)
        .await
        .unwrap()
}

async fn listeners(server: &RedisServer, prefix: &str) -> u32 {
    let (_, n): (String, u32) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("{prefix}:resets"))
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    n
}

/// A tool's limiter (`instance(false)`: the CLI, an admin job) never beats in the fleet, yet
/// its resets are published for every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_that_is_no_instance_does_not_count_but_its_resets_reach_all() {
    let server = RedisServer::start();
    let mut resets = server.client().get_async_pubsub().await.unwrap();
    resets.subscribe("tool:resets").await.unwrap();
    let tool = RateLimiter::builder()
        .redis(server.url())
        .prefix("tool")
        .instance(false)
        .build()
        .await
        .unwrap();
    // An instance built after the tool beats twice: the tool, had it been one, would have
    // beaten by then too (`build` returns after an instance's first beat).
    let _witness = limiter(&server.url(), "witness").await;
    more_beats(&server, "witness", 2).await;
    assert_eq!(members(&server, "tool").await, 0, "the tool counted itself");
    assert_eq!(tool.live_instances(), 1);
    tool.reset_named("orders::list", "user:1").await.unwrap();
    let message = tokio::time::timeout(
        EVENTUALLY,
        futures_util::StreamExt::next(&mut resets.on_message()),
    )
    .await
    .expect("the reset was published")
    .unwrap();
    let bucket: String = message.get_payload().unwrap();
    assert_eq!(bucket, tool.named_bucket_key("orders::list", "user:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_of_one_process_count_as_one_instance() {
    let server = RedisServer::start();
    let a = limiter(&server.url(), "svc").await;
    let b = limiter(&server.url(), "svc").await;
    eventually("a heartbeat", async || members(&server, "svc").await >= 1).await;
    // Two more beats of each limiter, had each its own.
    more_beats(&server, "svc", 2).await;
    assert_eq!(
        members(&server, "svc").await,
        1,
        "one process is one instance"
    );
    assert_eq!((a.live_instances(), b.live_instances()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_count_once_each_and_other_prefixes_not_at_all() {
    let server = RedisServer::start();
    let child = OtherInstance::start(&server.url(), "svc", None);
    child.expect("READY");
    let here = limiter(&server.url(), "svc").await;
    let also_here = limiter(&server.url(), "svc").await;
    let other = limiter(&server.url(), "other-svc").await;
    // `build` returns after the first heartbeat: the count is the fleet's from the start.
    assert_eq!(here.live_instances(), 2, "counted when built");
    eventually("one beat of the other prefix", async || {
        members(&server, "other-svc").await == 1
    })
    .await;
    // Two more beats of every instance of both fleets: the counts are those beats' answers.
    tokio::join!(
        more_beats(&server, "svc", 2),
        more_beats(&server, "other-svc", 2)
    );
    assert_eq!(here.live_instances(), 2, "this process and the child");
    assert_eq!(also_here.live_instances(), 2);
    assert_eq!(other.live_instances(), 1, "another prefix is another fleet");
    assert_eq!(members(&server, "svc").await, 2);
    drop(child);
    // The child's entry expires with the heartbeat's TTL.
    eventually("the child forgotten", async || here.live_instances() == 1).await;
}

/// Drains `key` on `limiter` until its deny cache refuses it.
async fn refused_by_deny_cache(limiter: &RateLimiter, key: &str, limit: &Limit) {
    for _ in 0..10 {
        if limiter.check(key, limit).await.unwrap().source == Source::DenyCache {
            return;
        }
    }
    panic!("the deny cache never refused {key}");
}

/// `build` returns once the instance listens for resets: its deny cache answers from the
/// first refusal on, instead of being cleared by a subscription that arrives later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_limiter_listens_and_caches_from_its_first_refusal() {
    let server = RedisServer::start();
    let limiter = limiter(&server.url(), "svc").await;
    assert_eq!(listeners(&server, "svc").await, 1, "listening when built");
    let limit = Limit::per_hour(1);
    let mut sources = Vec::new();
    for _ in 0..3 {
        sources.push(limiter.check("user:1", &limit).await.unwrap().source);
    }
    assert_eq!(sources[2], Source::DenyCache, "{sources:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_the_deny_cache_of_another_limiter() {
    let server = RedisServer::start();
    let a = limiter(&server.url(), "svc").await;
    let b = limiter(&server.url(), "svc").await;
    eventually("listening", async || listeners(&server, "svc").await >= 1).await;
    let limit = Limit::per_hour(1);
    refused_by_deny_cache(&b, "user:1", &limit).await;
    refused_by_deny_cache(&b, "user:2", &limit).await;
    a.reset("user:1").await.unwrap();
    let reset = Instant::now();
    eventually("b admits after the reset", async || {
        b.check("user:1", &limit).await.unwrap().allowed
    })
    .await;
    println!("reset heard by another limiter after {:?}", reset.elapsed());
    // Only that bucket: the other is still refused (by the deny cache, or by Redis should a
    // slow heartbeat have made b subscribe again, which forgets every refusal on purpose).
    let d = b.check("user:2", &limit).await.unwrap();
    assert!(!d.allowed, "only that bucket: {d:?}");
    // A macro's bucket, by its limit's name.
    refused_by_deny_cache(&b, "user:1", &limit).await;
    let named = |l: &RateLimiter| {
        let l = l.clone();
        async move {
            l.check_named("orders::list", "user:1", &limit, 1)
                .await
                .unwrap()
        }
    };
    assert!(named(&b).await.allowed);
    let mut cached = false;
    for _ in 0..10 {
        if named(&b).await.source == Source::DenyCache {
            cached = true;
            break;
        }
    }
    assert!(cached, "the deny cache refuses the named bucket");
    a.reset_named("orders::list", "user:1").await.unwrap();
    eventually("b admits on the named bucket", async || {
        named(&b).await.allowed
    })
    .await;
    assert!(
        !b.check("user:1", &limit).await.unwrap().allowed,
        "not the unnamed one"
    );
}

/// The application keeps a value of its own at `<prefix>:instances`: the heartbeat cannot
/// count there, but resets still reach every deny cache, and the application's value stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_instances_key_does_not_stop_resets() {
    let server = RedisServer::start();
    let () = redis::cmd("SET")
        .arg("app:instances")
        .arg("the application's own")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    let a = limiter(&server.url(), "app").await;
    let b = limiter(&server.url(), "app").await;
    eventually("listening despite the key", async || {
        listeners(&server, "app").await >= 1
    })
    .await;
    let limit = Limit::per_hour(1);
    refused_by_deny_cache(&b, "user:1", &limit).await;
    a.reset("user:1").await.unwrap();
    eventually("b admits after the reset", async || {
        b.check("user:1", &limit).await.unwrap().allowed
    })
    .await;
    let kept: String = redis::cmd("GET")
        .arg("app:instances")
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
    assert_eq!(kept, "the application's own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_another_process_within_100_ms() {
    let server = RedisServer::start();
    let here = limiter(&server.url(), "svc").await;
    let child = OtherInstance::start(&server.url(), "svc", Some("user:1"));
    child.expect("READY");
    eventually("both listening", async || {
        listeners(&server, "svc").await == 2
    })
    .await;
    child.expect("REFUSED");
    let reset = Instant::now();
    here.reset("user:1").await.unwrap();
    let line = tokio::task::spawn_blocking(move || child.expect("ADMITTED"))
        .await
        .unwrap();
    println!(
        "reset heard by another process: {line} ms after its refusal, {:?} after the reset \
         (includes the pipe)",
        reset.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_hear_resets_keeps_no_deny_cache() {
    let server = RedisServer::start();
    let manager = redis::aio::ConnectionManager::new(server.client())
        .await
        .unwrap();
    let store = RedisStore::from_connection(manager).await.unwrap();
    let deaf = RateLimiter::builder()
        .redis_store(store)
        .build()
        .await
        .unwrap();
    let other = limiter(&server.url(), "ratelimit").await;
    let limit = Limit::per_hour(1);
    for _ in 0..3 {
        let d = deaf.check("k", &limit).await.unwrap();
        assert_ne!(d.source, Source::DenyCache);
    }
    other.reset("k").await.unwrap();
    assert!(
        deaf.check("k", &limit).await.unwrap().allowed,
        "the reset holds at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_every_instance_on_a_cluster() {
    let cluster = testkit::cluster::RedisCluster::start();
    let a = limiter(&cluster.url(), "svc").await;
    let b = limiter(&cluster.url(), "svc").await;
    let limit = Limit::per_hour(1);
    // `build` returns once the instance listens: no wait for a heartbeat.
    for key in ["user:1", "user:2", "user:3"] {
        refused_by_deny_cache(&b, key, &limit).await;
        a.reset(key).await.unwrap();
        let reset = Instant::now();
        eventually("b admits after the reset", async || {
            b.check(key, &limit).await.unwrap().allowed
        })
        .await;
        println!("cluster: reset of {key} heard after {:?}", reset.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_takes_every_setting_of_the_builder() {
    let server = RedisServer::start();
    let builder = RateLimiter::builder()
        .redis(server.url())
        .deny_cache(0)
        .circuit_cooldown(None)
        .deadline(Duration::from_secs(5));
    let limiter = ratelimit_core::enable::enable(EnableOptions::with_builder("app", builder))
        .await
        .unwrap();
    assert_eq!(
        limiter.prefix(),
        "app",
        "the crate's name when the builder has none"
    );
    let limit = Limit::per_hour(1);
    for _ in 0..3 {
        limiter.check("k", &limit).await.unwrap();
    }
    let d = limiter.check("k", &limit).await.unwrap();
    assert_eq!(
        (d.allowed, d.source),
        (false, Source::Store),
        "no deny cache"
    );
    assert_eq!(limiter.deny_cache_len(), 0);
}

/// A minimal executor that is not Tokio: polls on this thread, parks between wake-ups.
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn a_redis_limiter_outside_tokio_is_an_error_not_a_panic() {
    let server = RedisServer::start();
    let built = block_on(RateLimiter::builder().redis(server.url()).build());
    assert!(matches!(built, Err(Error::NoRuntime)), "{built:?}");
    let message = built.unwrap_err().to_string();
    assert!(message.contains("Tokio runtime"), "{message}");
    // A store connected on Tokio, the limiter built elsewhere.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(RedisStore::connect(&server.url()))
        .unwrap();
    let built = block_on(RateLimiter::builder().redis_store(store).build());
    assert!(matches!(built, Err(Error::NoRuntime)), "{built:?}");
    // A limiter built on Tokio, then used from another executor.
    let limiter = runtime.block_on(limiter(&server.url(), "elsewhere"));
    let limit = Limit::per_second(1);
    let checked = block_on(limiter.check("k", &limit));
    assert!(matches!(checked, Err(Error::NoRuntime)), "{checked:?}");
    let reset = block_on(limiter.reset("k"));
    assert!(matches!(reset, Err(Error::NoRuntime)), "{reset:?}");
    // On Tokio again, the same limiter decides.
    assert!(
        runtime
            .block_on(limiter.check("k", &limit))
            .unwrap()
            .allowed
    );
}

/// Percent-decoded, as a URL parser hands the password to the server.
fn decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)),
        ) {
            (b'%', Some(Ok(b))) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `text` shows any 6-character piece of `secret`.
fn shows(text: &str, secret: &str) -> bool {
    let chars: Vec<char> = secret.chars().collect();
    chars
        .windows(6.min(chars.len()))
        .map(|w| w.iter().collect::<String>())
        .any(|piece| text.contains(&piece))
}

fn every_text(e: &Error) -> Vec<String> {
    let mut texts = vec![e.to_string(), format!("{e:?}"), format!("{e:#?}")];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        texts.push(s.to_string());
        texts.push(format!("{s:?}"));
        source = s.source();
    }
    texts
}

/// Any password, in every URL form, in every error and `Debug` text: no 6 characters of it.
/// The server is the test's own, stopped when it ends (a `static` one outlived the process).
#[test]
fn no_error_shows_any_part_of_a_password() {
    // Set after start: the start-up check pings without a password.
    let server = RedisServer::start();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("not-the-one-tried")
        .exec(&mut server.blocking_connection())
        .unwrap();
    let port = server.port();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    let passwords = "[A-Za-z0-9@:/%?#!$&'()*+,;=._~-]{10,24}";
    let property = |password: String| {
        let closed = free_port();
        let urls = [
            format!("redis://:{password}@127.0.0.1:{port}"),
            format!("redis://user:{password}@127.0.0.1:{port}/0"),
            format!("redis://{password}@127.0.0.1:{port}"),
            // TLS to a closed port: the TLS path's errors, without a handshake to wait out.
            format!("rediss://:{password}@127.0.0.1:{closed}"),
            format!("redis+cluster://:{password}@127.0.0.1:{port},127.0.0.1:{closed}"),
            format!("redis+sentinel://u:{password}@127.0.0.1:{closed},127.0.0.1:{closed}/mymaster"),
            format!("redis://127.0.0.1:{port}/0?password={password}&protocol=resp3"),
            // redis-rs quotes a protocol it does not know in its error.
            format!("redis://127.0.0.1:{port}/0?protocol={password}"),
            password.clone(),
        ];
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // In `redis://<text>@host` the text stands where the user name goes: what precedes its
        // first `:`, when plain, is a user name, which an error may show; what follows is the
        // password. Everywhere else the whole text is the password.
        let plain = |u: &str| {
            u.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        };
        let user_form = format!("redis://{password}@127.0.0.1:{port}");
        let secret_of = |url: &str| match password.split_once(':') {
            Some((user, secret)) if url == user_form && plain(user) => secret.to_owned(),
            _ => password.clone(),
        };
        for url in urls {
            let secret = secret_of(&url);
            // The property is about 6 characters of a password: a shorter secret (`u:?` in the
            // user form) is a character or two that any message may hold (`reachable?`).
            if secret.chars().count() < 6 {
                continue;
            }
            let builder = RateLimiter::builder().redis(url.as_str());
            let options =
                EnableOptions::with_builder("app", RateLimiter::builder().redis(url.as_str()));
            let mut texts = vec![format!("{builder:?}"), format!("{options:?}")];
            let built = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), builder.build()).await
            });
            match built {
                Ok(Err(e)) => texts.extend(every_text(&e)),
                Ok(Ok(limiter)) => texts.push(format!("{limiter:?}")),
                Err(_) => panic!("connecting to {port} timed out"),
            }
            for text in texts {
                prop_assert!(
                    !shows(&text, &secret) && !shows(&text, &decoded(&secret)),
                    "{url} shows its password in: {text}"
                );
            }
        }
        Ok(())
    };
    // Found by the runner once (issue 44): a text that only looks like a URL.
    for found in ["?a://a#__="] {
        if let Err(e) = property(found.to_owned()) {
            panic!("{found}: {e}");
        }
    }
    if let Err(e) = runner.run(&passwords, property) {
        panic!("{e}");
    }
}

/// The scores of the set of instances under `prefix`, by member.
async fn beats(server: &RedisServer, prefix: &str) -> Vec<(String, i64)> {
    redis::cmd("ZRANGE")
        .arg(format!("{prefix}:instances"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut server.connection().await)
        .await
        .unwrap_or_default()
}

/// Waits until every instance now in the set under `prefix` has beaten `n` more times (its
/// score has moved `n` times; a beat a second, polled every few milliseconds).
async fn more_beats(server: &RedisServer, prefix: &str, n: usize) {
    let mut seen: HashMap<String, (i64, usize)> = beats(server, prefix)
        .await
        .into_iter()
        .map(|(member, score)| (member, (score, 0)))
        .collect();
    assert!(!seen.is_empty(), "no instance beats under {prefix}");
    eventually(&format!("{n} more beats under {prefix}"), async || {
        for (member, score) in beats(server, prefix).await {
            if let Some((last, moved)) = seen.get_mut(&member)
                && score != *last
            {
                *last = score;
                *moved += 1;
            }
        }
        seen.values().all(|&(_, moved)| moved >= n)
    })
    .await;
}

/// Redis restarted without its data: the set of instances fills up again one heartbeat at a
/// time, and the count the fallback divides by does not fall with it (a share of the whole
/// limit each, had an outage come then) until every instance has had time to beat again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_does_not_fall_while_an_emptied_set_fills_up_again() {
    let mut server = RedisServer::start();
    let here = limiter(&server.url(), "svc").await;
    // Three other instances, alive as far as the set can tell.
    let far: i64 = 4_000_000_000_000;
    for i in 0..3 {
        let _: i64 = redis::cmd("ZADD")
            .arg("svc:instances")
            .arg(far)
            .arg(format!("other-{i}"))
            .query_async(&mut server.connection().await)
            .await
            .unwrap();
    }
    eventually("four instances", async || here.live_instances() == 4).await;

    server.restart();
    // Two heartbeats of this instance on the empty server: the set says 1 twice.
    let mut first = None;
    eventually("two beats after the restart", async || {
        match (beats(&server, "svc").await.as_slice(), first) {
            ([(_, score)], None) => first = Some(*score),
            ([(_, score)], Some(then)) => return *score > then,
            _ => {}
        }
        false
    })
    .await;
    assert_eq!(
        here.live_instances(),
        4,
        "the fleet had no time to beat again"
    );
    // Once it had, the count is the set's.
    eventually("the count is the set's", async || {
        here.live_instances() == 1
    })
    .await;
}
