//! The in-memory path counted in instructions: one contender, `--calls` checks cycling over
//! `--keys` keys, every one admitted, after every key was written once. Under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=*measured*` only the
//! measured calls are counted (not the setup, nor the clock's calibration, whose length
//! depends on the machine's load): the total over `--calls` is what one check costs. The
//! contenders are those of `memory_store` (criterion, wall clock): `store`
//! (`MemoryStore::check_now`), `limiter` (`RateLimiter::check` on a memory limiter),
//! `governor` (`check_key`), `named` (`RateLimiter::check_named`, what `#[rate_limit]`
//! calls by hand), and `by_hand` and `annotated`, `macro_overhead`'s pair (the same
//! functions, from `macro_pair.rs`): a function calling
//! `check_named` itself on the key `global`, and the same function under `#[rate_limit]` with
//! the key `Global` (both ignore `--keys`); and `by_hand_rotating` and `annotated_rotating`,
//! the same on a key that changes every call (the `--keys` keys in turn, which the attribute
//! reads through a resolver).
//!
//! ```sh
//! cargo bench -p redis-ratelimit-benches --bench memory_instructions --no-run
//! valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*measured*' \
//!   target/release/deps/memory_instructions-<hash> --contender limiter --keys 1 --calls 100000
//! ```
//! docs/benchmarks.md ("The in-memory store against governor") has the figures.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::task::{Context, Poll, Waker};

use governor::{DefaultKeyedRateLimiter, Quota};
use redis_ratelimit::{Limit, RateLimiter, store::MemoryStore};

const RATE: u32 = 1;
const BURST: u32 = 1_000_000_000;
const LIMIT: Limit = Limit::per_second(RATE).burst(BURST);

#[path = "macro_pair.rs"]
mod macro_pair;

/// The output of a future that never waits (the memory store's).
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let contender = arg("--contender").unwrap_or_else(|| "limiter".into());
    let n: usize = arg("--keys").map_or(1, |k| k.parse().unwrap());
    let calls: u64 = arg("--calls").map_or(100_000, |c| c.parse().unwrap());
    let keys: Vec<String> = (0..n).map(|i| format!("user:{i:012}")).collect();
    let store = || MemoryStore::new().with_max_keys(2 * n.max(1_000_000));
    let mut check: Box<dyn FnMut(&String) -> bool> = match contender.as_str() {
        "store" => {
            let s = store();
            Box::new(move |k| s.check_now(k, &LIMIT, 1).allowed)
        }
        "limiter" | "named" => {
            let l = ready(
                RateLimiter::builder()
                    .memory_store(store())
                    .prefix("svc")
                    .build(),
            )
            .unwrap();
            if contender == "named" {
                Box::new(move |k| {
                    ready(l.check_named("bench::limited", k, &LIMIT, 1))
                        .unwrap()
                        .allowed
                })
            } else {
                Box::new(move |k| ready(l.check(k, &LIMIT)).unwrap().allowed)
            }
        }
        "governor" => {
            let g = DefaultKeyedRateLimiter::<String>::keyed(
                Quota::per_second(NonZeroU32::new(RATE).unwrap())
                    .allow_burst(NonZeroU32::new(BURST).unwrap()),
            );
            Box::new(move |k| g.check_key(k).is_ok())
        }
        "by_hand" | "annotated" | "by_hand_rotating" | "annotated_rotating" => {
            let l = ready(
                RateLimiter::builder()
                    .memory_store(store())
                    .prefix("svc")
                    .build(),
            )
            .unwrap();
            macro_pair::LIMITER.set(l).unwrap();
            macro_pair::set_keys(keys.clone());
            match contender.as_str() {
                "annotated" => Box::new(|_| ready(macro_pair::annotated(black_box(1))).is_ok()),
                "by_hand" => Box::new(|_| ready(macro_pair::by_hand(black_box(1))).is_ok()),
                "annotated_rotating" => {
                    Box::new(|_| ready(macro_pair::annotated_rotating(black_box(1))).is_ok())
                }
                _ => Box::new(|_| ready(macro_pair::by_hand_rotating(black_box(1))).is_ok()),
            }
        }
        other => {
            panic!(
                "--contender {other}: store, limiter, named, governor, by_hand, annotated, \
                 by_hand_rotating or annotated_rotating"
            )
        }
    };
    for k in &keys {
        assert!(check(k), "admitted");
    }
    let admitted = measured(&mut check, &keys, calls);
    assert_eq!(admitted, calls, "every call admitted");
    println!("{contender} {n} keys: {calls} calls");
}

/// The measured calls, alone in a function of their own: callgrind counts this function
/// (`--collect-atstart=no --toggle-collect=*measured*`), the setup and the clock's calibration
/// left out.
#[inline(never)]
fn measured(check: &mut dyn FnMut(&String) -> bool, keys: &[String], calls: u64) -> u64 {
    let mut i = 0;
    let mut admitted = 0u64;
    for _ in 0..calls {
        admitted += u64::from(check(black_box(&keys[i])));
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    admitted
}
