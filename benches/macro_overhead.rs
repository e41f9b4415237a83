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

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use redis_ratelimit::{Global, RateLimiter, RequestContext, context::scope};

#[path = "macro_pair.rs"]
mod macro_pair;

use macro_pair::{LIMITER, annotated, annotated_rotating, by_hand, by_hand_rotating, keys};

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
    for _ in 0..keys().len() {
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
