//! The in-memory store against governor's keyed limiter, on the same keys.
//!
//! Three contenders, each on 1, 10,000 and 1,000,000 pre-generated keys visited in turn, from
//! one thread and from two:
//! - `store`: `MemoryStore::check_now(key)`, the store itself;
//! - `limiter`: `RateLimiter::check(key)` on a memory limiter (adds the bucket key's naming
//!   and allocation, and the cost validation);
//! - `governor`: `DefaultKeyedRateLimiter::<String>::check_key(key)` (governor 0.10, its
//!   default dashmap store and quanta clock).
//!
//! Every call is admitted and every bucket stays active (1 token per second, a burst of 10^9),
//! so both sides take their write path and keep every key: what a busy service sees.
//!
//! `cargo bench -p redis-ratelimit-benches --bench memory_store`; results in
//! `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Barrier, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota};
use redis_ratelimit::{Limit, RateLimiter, store::MemoryStore};

const KEY_COUNTS: [usize; 3] = [1, 10_000, 1_000_000];
const RATE: u32 = 1;
const BURST: u32 = 1_000_000_000;
const LIMIT: Limit = Limit::per_second(RATE).burst(BURST);

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i:012}")).collect()
}

fn governor() -> DefaultKeyedRateLimiter<String> {
    let quota = Quota::per_second(NonZeroU32::new(RATE).unwrap())
        .allow_burst(NonZeroU32::new(BURST).unwrap());
    DefaultKeyedRateLimiter::keyed(quota)
}

fn store() -> MemoryStore {
    // Twice the keys: the default bound (10^6) would evict active buckets at 10^6 keys, which
    // governor (unbounded) never does. The limiter has a store of its own (its bucket keys
    // are prefixed).
    MemoryStore::new().with_max_keys(2 * KEY_COUNTS[2])
}

fn limiter() -> RateLimiter {
    ready(
        RateLimiter::builder()
            .memory_store(store())
            .prefix("svc")
            .build(),
    )
    .unwrap()
}

/// The output of a future that never waits (the memory store's): no runtime in the way.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

/// One contender: decides on a key, returns whether it was admitted.
#[derive(Clone, Copy)]
enum Contender<'a> {
    Store(&'a MemoryStore),
    Limiter(&'a RateLimiter),
    Governor(&'a DefaultKeyedRateLimiter<String>),
}

impl Contender<'_> {
    #[inline]
    fn check(self, key: &String) -> bool {
        match self {
            Contender::Store(s) => s.check_now(key, &LIMIT, 1).allowed,
            Contender::Limiter(l) => ready(l.check(key, &LIMIT)).unwrap().allowed,
            Contender::Governor(g) => g.check_key(key).is_ok(),
        }
    }

    /// `iters` checks cycling over `keys` from `start`.
    fn run(self, keys: &[String], start: usize, iters: u64) -> u64 {
        let mut i = start % keys.len();
        let mut admitted = 0;
        for _ in 0..iters {
            admitted += u64::from(self.check(black_box(&keys[i])));
            i += 1;
            if i == keys.len() {
                i = 0;
            }
        }
        admitted
    }
}

const NAMES: [&str; 3] = ["store", "limiter", "governor"];

/// The keys and the three contenders of one key count, each built (and given every key) the
/// first time a selected benchmark needs it, so that a filtered run builds only what it uses.
struct Fixture {
    n: usize,
    keys: OnceLock<Vec<String>>,
    store: OnceLock<MemoryStore>,
    limiter: OnceLock<RateLimiter>,
    governor: OnceLock<DefaultKeyedRateLimiter<String>>,
}

impl Fixture {
    fn new(n: usize) -> Fixture {
        Fixture {
            n,
            keys: OnceLock::new(),
            store: OnceLock::new(),
            limiter: OnceLock::new(),
            governor: OnceLock::new(),
        }
    }

    fn keys(&self) -> &[String] {
        self.keys.get_or_init(|| keys(self.n))
    }

    fn contender(&self, which: usize) -> Contender<'_> {
        let fill = |c: Contender<'_>| {
            // Every key exists before the clock starts.
            assert_eq!(
                c.run(self.keys(), 0, self.n as u64),
                self.n as u64,
                "all admitted"
            );
        };
        match which {
            0 => {
                let mut new = false;
                let s = self.store.get_or_init(|| {
                    new = true;
                    store()
                });
                if new {
                    fill(Contender::Store(s));
                }
                Contender::Store(s)
            }
            1 => {
                let mut new = false;
                let l = self.limiter.get_or_init(|| {
                    new = true;
                    limiter()
                });
                if new {
                    fill(Contender::Limiter(l));
                }
                Contender::Limiter(l)
            }
            _ => {
                let mut new = false;
                let g = self.governor.get_or_init(|| {
                    new = true;
                    governor()
                });
                if new {
                    fill(Contender::Governor(g));
                }
                Contender::Governor(g)
            }
        }
    }
}

fn keyed_check(c: &mut Criterion) {
    for n in KEY_COUNTS {
        let fixture = Fixture::new(n);

        let mut group = c.benchmark_group("keyed_check/1_thread");
        group.throughput(Throughput::Elements(1));
        for (which, name) in NAMES.iter().enumerate() {
            group.bench_function(BenchmarkId::new(*name, n), |b| {
                let c = fixture.contender(which);
                let keys = fixture.keys();
                let mut i = 0;
                b.iter(|| {
                    let admitted = c.check(black_box(&keys[i]));
                    i += 1;
                    if i == keys.len() {
                        i = 0;
                    }
                    admitted
                });
            });
        }
        group.finish();

        // Two threads, each doing half of the checks on its own half-turn of the keys; the
        // time is the slower thread's, from a common start (thread start-up excluded).
        let mut group = c.benchmark_group("keyed_check/2_threads");
        group.throughput(Throughput::Elements(1));
        for (which, name) in NAMES.iter().enumerate() {
            group.bench_function(BenchmarkId::new(*name, n), |b| {
                let c = fixture.contender(which);
                let keys = fixture.keys();
                b.iter_custom(|iters| two_threads(c, keys, iters));
            });
        }
        group.finish();
    }
}

fn two_threads(c: Contender<'_>, keys: &[String], iters: u64) -> Duration {
    let per_thread = iters.div_ceil(2);
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    black_box(c.run(keys, t * keys.len() / 2, per_thread));
                    t0.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .max()
            .unwrap()
    })
}

criterion_group!(benches, keyed_check);
criterion_main!(benches);
