//! What `#[rate_limit]` costs over calling the limiter by hand: the same function, on the
//! same in-memory limiter, the same bucket and limit, once annotated and once calling
//! `RateLimiter::check_named` itself. Both run on Tokio's current-thread runtime (criterion's
//! `to_async`, one `block_on` per sample), outside any request scope (the macro then resolves
//! its key against an empty context), and once inside one. A second pair does the same with
//! a key that changes on every call (`Rotating`, 1,024 keys in turn), as `Uri` or `Ip` do
//! under many clients: the macro then cannot reuse the bucket key it remembers.
//!
//! `cargo bench -p redis-ratelimit-benches --bench macro_overhead`; results in
//! `docs/benchmarks.md`. With `--features metrics` the library counts every decision; with
//! `BENCH_RECORDER=prometheus` too, into a Prometheus recorder (what a service that exports
//! them pays).

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::borrow::Cow;
use std::cell::Cell;
use std::hint::black_box;
use std::sync::{LazyLock, OnceLock};

use criterion::{Criterion, criterion_group, criterion_main};
use redis_ratelimit::{
    Global, KeyResolver, Limit, RateLimited, RateLimiter, RequestContext, context::scope,
    rate_limit,
};

/// Both functions share this name, so both use the same bucket key.
const NAME: &str = "bench::limited";
/// Every call admitted, the bucket never full (so never dropped): the write path every time.
const LIMIT: Limit = Limit::per_second(1).burst(1_000_000_000);

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

#[derive(Debug)]
struct ApiError;

impl From<RateLimited> for ApiError {
    fn from(_: RateLimited) -> Self {
        ApiError
    }
}

#[rate_limit(
    replenish = 1,
    burst = 1_000_000_000,
    key = Global,
    name = "bench::limited",
    limiter = LIMITER
)]
async fn annotated(x: u64) -> Result<u64, ApiError> {
    Ok(x + 1)
}

async fn by_hand(x: u64) -> Result<u64, ApiError> {
    checked_by_hand(NAME, "global", x).await
}

/// What the annotated functions do, written out: `check_named`, then the body.
async fn checked_by_hand(name: &str, key: &str, x: u64) -> Result<u64, ApiError> {
    let limiter = LIMITER.get().ok_or(ApiError)?;
    let decision = limiter
        .check_named(name, key, &LIMIT, 1)
        .await
        .map_err(|_| ApiError)?;
    if !decision.allowed {
        return Err(ApiError);
    }
    Ok(x + 1)
}

/// The keys `Rotating` and `by_hand_rotating` take in turn.
static KEYS: LazyLock<Vec<String>> =
    LazyLock::new(|| (0..1024).map(|i| format!("client-{i:04}")).collect());

thread_local! {
    static TURN: Cell<usize> = const { Cell::new(0) };
}

/// The next of [`KEYS`], on this thread.
fn next_key() -> &'static str {
    let i = TURN.with(|t| {
        let i = t.get();
        t.set((i + 1) % KEYS.len());
        i
    });
    &KEYS[i]
}

/// A key that changes on every call.
struct Rotating;

impl KeyResolver for Rotating {
    fn resolve<'a>(&'a self, _: &'a RequestContext) -> Option<Cow<'a, str>> {
        Some(Cow::Borrowed(next_key()))
    }
}

#[rate_limit(
    replenish = 1,
    burst = 1_000_000_000,
    key = Rotating,
    name = "bench::rotating",
    limiter = LIMITER
)]
async fn annotated_rotating(x: u64) -> Result<u64, ApiError> {
    Ok(x + 1)
}

async fn by_hand_rotating(x: u64) -> Result<u64, ApiError> {
    checked_by_hand("bench::rotating", next_key(), x).await
}

fn macro_overhead(c: &mut Criterion) {
    #[cfg(feature = "metrics")]
    if std::env::var("BENCH_RECORDER").as_deref() == Ok("prometheus") {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = rt
        .block_on(RateLimiter::builder().memory().prefix("svc").build())
        .unwrap();
    LIMITER.set(limiter).unwrap();
    // Same key: the resolver gives what the hand-written call passes.
    let empty = RequestContext::new();
    let key = redis_ratelimit::KeyResolver::resolve(&Global, &empty);
    assert_eq!(key.as_deref(), Some("global"));
    assert!(rt.block_on(annotated(1)).is_ok());
    assert!(rt.block_on(by_hand(1)).is_ok());
    // Every rotating bucket exists before the clock starts, for both.
    for _ in 0..KEYS.len() {
        assert!(rt.block_on(annotated_rotating(1)).is_ok());
        assert!(rt.block_on(by_hand_rotating(1)).is_ok());
    }

    if std::env::var_os("BENCH_PAIRED").is_some() {
        paired(&rt);
        return;
    }
    let mut group = c.benchmark_group("macro_overhead");
    group.bench_function("by_hand", |b| {
        b.to_async(&rt).iter(|| by_hand(black_box(1)));
    });
    group.bench_function("annotated", |b| {
        b.to_async(&rt).iter(|| annotated(black_box(1)));
    });
    group.bench_function("by_hand_in_scope", |b| {
        b.to_async(&rt)
            .iter(|| scope(RequestContext::new(), by_hand(black_box(1))));
    });
    group.bench_function("annotated_in_scope", |b| {
        b.to_async(&rt)
            .iter(|| scope(RequestContext::new(), annotated(black_box(1))));
    });
    group.bench_function("by_hand_rotating", |b| {
        b.to_async(&rt).iter(|| by_hand_rotating(black_box(1)));
    });
    group.bench_function("annotated_rotating", |b| {
        b.to_async(&rt).iter(|| annotated_rotating(black_box(1)));
    });
    group.finish();
}

/// `BENCH_PAIRED=1`: instead of criterion, many short batches of each function in turn
/// (the order rotating), so that a busy period of a shared machine slows every function
/// alike; prints each function's median ns per call and the medians of the ratios taken
/// within each round. For before/after comparisons on a loaded machine, where criterion's
/// seconds-long runs of one function at a time catch other jobs' bursts unevenly.
fn paired(rt: &tokio::runtime::Runtime) {
    const ROUNDS: usize = 400;
    const CALLS: u32 = 2_000;
    type Call = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;
    let calls: [(&str, Call); 6] = [
        ("by_hand", || {
            Box::pin(async {
                for _ in 0..CALLS {
                    black_box(by_hand(black_box(1)).await.ok());
                }
            })
        }),
        ("annotated", || {
            Box::pin(async {
                for _ in 0..CALLS {
                    black_box(annotated(black_box(1)).await.ok());
                }
            })
        }),
        ("by_hand_in_scope", || {
            Box::pin(async {
                for _ in 0..CALLS {
                    black_box(
                        scope(RequestContext::new(), by_hand(black_box(1)))
                            .await
                            .ok(),
                    );
                }
            })
        }),
        ("annotated_in_scope", || {
            Box::pin(async {
                for _ in 0..CALLS {
                    let call = scope(RequestContext::new(), annotated(black_box(1)));
                    black_box(call.await.ok());
                }
            })
        }),
        ("by_hand_rotating", || {
            Box::pin(async {
                for _ in 0..CALLS {
                    black_box(by_hand_rotating(black_box(1)).await.ok());
                }
            })
        }),
        ("annotated_rotating", || {
            Box::pin(async {
                for _ in 0..CALLS {
                    black_box(annotated_rotating(black_box(1)).await.ok());
                }
            })
        }),
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); calls.len()];
    for round in 0..ROUNDS {
        for i in 0..calls.len() {
            let i = (i + round) % calls.len();
            let started = std::time::Instant::now();
            rt.block_on((calls[i].1)());
            ns[i].push(started.elapsed().as_secs_f64() * 1e9 / f64::from(CALLS));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 4], v[v.len() / 2], v[v.len() * 3 / 4])
    };
    let ratios =
        |a: usize, b: usize| -> Vec<f64> { ns[a].iter().zip(&ns[b]).map(|(x, y)| x / y).collect() };
    let mut outside = ratios(1, 0);
    let mut inside = ratios(3, 2);
    let mut rotating = ratios(5, 4);
    for (i, (name, _)) in calls.iter().enumerate() {
        let (q1, m, q3) = median(&mut ns[i].clone());
        println!("{name:<20} {m:8.1} ns  (quartiles {q1:.1}-{q3:.1})");
    }
    for (name, r) in [
        ("annotated / by_hand", &mut outside),
        ("in a scope", &mut inside),
        ("rotating key", &mut rotating),
    ] {
        let (q1, m, q3) = median(r);
        println!("{name:<20} {m:8.3}     (quartiles {q1:.3}-{q3:.3})");
    }
}

criterion_group!(benches, macro_overhead);
criterion_main!(benches);
