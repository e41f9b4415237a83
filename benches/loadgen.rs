//! Load generator: decisions per second and latency of `RateLimiter` on a real Redis, against
//! `redis-benchmark` running the project's own script on the same server.
//!
//! ```sh
//! cargo bench -p redis-ratelimit-benches --bench loadgen             # 5 runs, plots in docs/
//! cargo bench -p redis-ratelimit-benches --bench loadgen -- --runs 1 --duration 1 --no-plots   # a quick look
//! cargo bench -p redis-ratelimit-benches --bench loadgen -- --help
//! ```
//!
//! Each run measures, on one `redis-server` (started here on a free loopback port, or the one
//! given by `--url`, which must be on this machine):
//! 1. `redis-benchmark -c 50 -P 16` running `EVALSHA <gcra.lua> 1 bench:{:k:__rand_int__} ..`:
//!    what one Redis can do of this work (the ceiling);
//! 2. `redis-benchmark -c 1`, same command: the latency of one call with nothing queued;
//! 3. the `RateLimiter` (Redis store, prefix `bench`, `FailurePolicy::Deny`, a 5 s deadline)
//!    from N tasks of this process on the same keys, for each N of `--concurrency`;
//! 4. rate-limiter-flexible (Node): `RateLimiterRedis.consume(key, 1)` on ioredis from one Node
//!    process with C calls in flight, for each C of `--flexible-concurrency` (default: the
//!    same list); installed on first use by `npm ci` from `loadgen/flexible/` (`--no-flexible`
//!    leaves it out, and so does a machine without Node);
//! 5. the deny cache: 64 tasks flooding one key that Redis refused (1 call per hour), against
//!    the ceiling of 1., with the admissions and `EVALSHA`s during the flood.
//!
//! `redis-benchmark` and ours use the same keys (`bench:{:k:<12 digits>}`, uniformly drawn
//! from `--keys`) and the same script arguments, so Redis does the same work for each.
//! rate-limiter-flexible draws from the same key names under its own prefix
//! (`flexible:k:<12 digits>`) and runs its own script (a fixed-window counter). Each
//! contender is a labelled series of the report and the plots ([`Contender`]). Results in
//! `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

#[path = "loadgen/args.rs"]
mod args;
#[path = "loadgen/flexible.rs"]
mod flexible;
#[path = "loadgen/flexible_dir.rs"]
mod flexible_dir;
#[path = "loadgen/load.rs"]
mod load;
#[path = "loadgen/plot.rs"]
mod plot;
#[path = "loadgen/redis_benchmark.rs"]
mod redis_benchmark;
#[path = "loadgen/report.rs"]
mod report;
#[path = "loadgen/stats.rs"]
mod stats;

use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit::{FailurePolicy, Limit, RateLimiter, store::RedisStore};

use crate::args::{Args, RuntimeFlavor};
use crate::flexible::Flexible;
use crate::load::Client;
use crate::redis_benchmark::{Bench, ScriptArgs};
use crate::report::{Run, Sample, SeriesRun, Side};

/// The deny-cache flood's limit: one call an hour, so after the warm-up's first call Redis
/// refuses the key for the whole measurement, and any admission in it would be an error.
const FLOOD_LIMIT: Limit = Limit::per_hour(1);

/// The decision script, exactly as the limiter loads it.
const SCRIPT: &str = redis_ratelimit::tools::scripts::TOKEN_BUCKET;

/// One series of the report and the plots: who is measured, under which label.
enum Contender {
    /// Tasks of this process through `client`, at each of `--concurrency`.
    Ours {
        label: &'static str,
        legend: String,
        client: Client,
    },
    /// rate-limiter-flexible's Node runner, at each of `--flexible-concurrency`.
    Flexible(Flexible),
}

impl Contender {
    fn label(&self) -> &'static str {
        match self {
            Contender::Ours { label, .. } => label,
            Contender::Flexible(_) => "rate-limiter-flexible",
        }
    }

    fn legend(&self) -> String {
        match self {
            Contender::Ours { legend, .. } => legend.clone(),
            Contender::Flexible(f) => {
                format!("RateLimiterRedis, one Node process ({})", f.versions)
            }
        }
    }

    /// Every concurrency of this contender, one run's worth.
    fn measure(
        &self,
        rt: &tokio::runtime::Runtime,
        args: &Args,
        bench: &Bench,
        keys: &Arc<[String]>,
        limit: Limit,
        run: usize,
    ) -> SeriesRun {
        let (side, concurrency) = match self {
            Contender::Ours { .. } => (Side::Ours, args.concurrency.as_slice()),
            Contender::Flexible(_) => (Side::Flexible, args.flexible_concurrency()),
        };
        let samples = concurrency
            .iter()
            .map(|&tasks| {
                let sample = match self {
                    Contender::Ours { client, .. } => Sample::of(&rt.block_on(load::measure(
                        client,
                        keys,
                        limit,
                        tasks,
                        args.warmup,
                        args.duration,
                        bench,
                    ))),
                    Contender::Flexible(f) => f.measure(args, bench, tasks),
                };
                println!("run {run}/{}  {}", args.runs, sample.line(self.label()));
                sample
            })
            .collect();
        SeriesRun {
            label: self.label().to_owned(),
            legend: self.legend(),
            side,
            samples,
        }
    }
}

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("loadgen: {e}\n\n{}", args::USAGE);
            std::process::exit(2);
        }
    };
    if args.help {
        println!("{}", args::USAGE);
        return;
    }

    // Our own server unless told otherwise; kept alive until the end of main.
    let (_server, url) = match &args.url {
        Some(url) => (None, url.clone()),
        None => {
            let server = testkit::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let port = args::loopback_port(&url).unwrap_or_else(|e| {
        eprintln!("loadgen: {e}");
        std::process::exit(2);
    });

    let limit = Limit::try_new(args.rate, args.burst, redis_ratelimit::Unit::Second)
        .unwrap_or_else(|e| panic!("--rate {} --burst {}: {e}", args.rate, args.burst));
    let script = ScriptArgs::for_limit(args.rate, args.burst, 1);
    let keys: Arc<[String]> = (0..args.keys).map(|i| format!("k:{i:012}")).collect();

    let rt = runtime(&args);
    // The limiter as users get it (calls coalesced), and one that sends every call alone.
    let connect = |batch_limit: usize| {
        rt.block_on(async {
            let store = RedisStore::connect(&url)
                .await
                .unwrap()
                .batch_limit(batch_limit);
            let limiter = RateLimiter::builder()
                .redis_store(store.clone())
                .prefix("bench")
                .failure_policy(FailurePolicy::Deny)
                .deadline(Some(Duration::from_secs(5)))
                .build()
                .await
                .unwrap();
            (limiter, store)
        })
    };
    let limiter = connect(args.batch_limit);
    let per_command = connect(1);
    let bench = Bench::new(&url, port, SCRIPT, script, args.keys);
    // The limiter's first heartbeat runs a moment after `build` returns and loads its script
    // (a NOSCRIPT, then EVAL): let it land before any measurement, whose check that the server
    // failed no call would count it. It writes the set of live instances.
    rt.block_on(bench.wait_for_key("bench:instances", Duration::from_secs(5)));
    check_same_work(&rt, &limiter.0, &bench, &keys, &limit, &script);
    let client = if args.redis_rs_only {
        let conn = rt.block_on(async {
            redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap()
        });
        Client::RedisRs {
            conn,
            script: Arc::new(redis::Script::new(SCRIPT)),
            args: script,
        }
    } else {
        Client::Limiter(limiter.0, Some(limiter.1))
    };

    // Every series of the report and the plots. Another configuration of ours is one more
    // `Contender::Ours { .. }` here.
    let mut contenders = vec![Contender::Ours {
        label: "ours",
        legend: if args.redis_rs_only {
            "redis-rs alone, Script::invoke_async (this project's baseline)".to_owned()
        } else {
            format!(
                "RateLimiter::check, Redis store, calls coalesced (batch_limit({}))",
                args.batch_limit
            )
        },
        client: client.clone(),
    }];
    if !args.redis_rs_only {
        contenders.push(Contender::Ours {
            label: "per-command",
            legend: "RateLimiter::check, one EVALSHA per call (batch_limit(1))".to_owned(),
            client: Client::Limiter(per_command.0, None),
        });
    }
    let flexible_note = match flexible::prepare(&args, port) {
        Ok(f) => {
            let note = format!(
                "measured ({}; in flight {:?})",
                f.versions,
                args.flexible_concurrency()
            );
            contenders.push(Contender::Flexible(f));
            note
        }
        Err(why) => why,
    };

    print_setup(&args, &url, &bench, &script);
    println!("rate-limiter-flexible: {flexible_note}\n");
    let (ceiling_n, single_n) = bench.calibrate(args.duration);
    println!(
        "calibrated: redis-benchmark -n {ceiling_n} at -c 50 -P 16, -n {single_n} at -c 1 \
         (about {:.1} s each)\n",
        args.duration.as_secs_f64()
    );

    let flood_keys: Arc<[String]> = Arc::new(["flood".to_owned()]);
    let mut runs = Vec::with_capacity(args.runs);
    for r in 1..=args.runs {
        let load_before = stats::load_average();
        let ceiling = bench.run(50, 16, ceiling_n);
        println!("run {r}/{}  {}", args.runs, ceiling.line("-c 50 -P 16"));
        let single = bench.run(1, 1, single_n);
        println!("run {r}/{}  {}", args.runs, single.line("-c 1"));
        let series = contenders
            .iter()
            .map(|c| c.measure(&rt, &args, &bench, &keys, limit, r))
            .collect();
        // The deny cache: every task on one key Redis has refused for the next hour.
        let flood = match &client {
            Client::Limiter(..) => {
                let point = rt.block_on(load::measure(
                    &client,
                    &flood_keys,
                    FLOOD_LIMIT,
                    report::CEILING_TASKS,
                    args.warmup,
                    args.duration,
                    &bench,
                ));
                println!(
                    "run {r}/{}  deny-cache flood: {}",
                    args.runs,
                    Sample::of(&point).line("ours")
                );
                Some(point)
            }
            Client::RedisRs { .. } => None,
        };
        let load_after = stats::load_average();
        println!(
            "run {r}/{}  load average {load_before} -> {load_after}\n",
            args.runs
        );
        runs.push(Run {
            ceiling,
            single,
            series,
            flood,
            load: (load_before, load_after),
        });
    }

    let summary = report::Summary::new(&runs);
    summary.print(&args);
    println!("rate-limiter-flexible: {flexible_note}");
    if args.plots {
        match plot::draw(&args, &summary) {
            Ok(files) => {
                for f in files {
                    println!("wrote {}", f.display());
                }
            }
            Err(e) => eprintln!("loadgen: no plots: {e}"),
        }
    }
}

fn runtime(args: &Args) -> tokio::runtime::Runtime {
    let mut builder = match args.runtime {
        RuntimeFlavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        RuntimeFlavor::MultiThread => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(args.workers);
            b
        }
    };
    builder.enable_all().build().unwrap()
}

/// Fails loudly unless `redis-benchmark` and the limiter would do the same thing: the script
/// `redis-benchmark` runs is the one the limiter loaded, a bucket key of ours is spelled as
/// `redis-benchmark`'s, and the script arguments give the limiter's decision.
fn check_same_work(
    rt: &tokio::runtime::Runtime,
    limiter: &RateLimiter,
    bench: &Bench,
    keys: &[String],
    limit: &Limit,
    script: &ScriptArgs,
) {
    assert_eq!(
        bench.sha,
        redis::Script::new(SCRIPT).get_hash(),
        "SCRIPT LOAD and the limiter hash the same script"
    );
    assert_eq!(limiter.bucket_key(&keys[42]), "bench:{:k:000000000042}");
    let ours = rt.block_on(limiter.check("k:check-a", limit)).unwrap();
    let theirs = bench.evalsha("bench:{:k:check-b}");
    assert_eq!(
        (u64::from(ours.allowed), ours.remaining),
        (theirs[0], theirs[1]),
        "the script arguments {script:?} do what the limiter asks"
    );
    assert!(ours.allowed, "the limit must admit the calls");
}

fn print_setup(args: &Args, url: &str, bench: &Bench, script: &ScriptArgs) {
    println!("# loadgen");
    println!(
        "server: {url} ({}); redis-benchmark: {}",
        bench.server_version(),
        bench.bin.display()
    );
    println!(
        "limit: {} per second, burst {} (script ARGV {} {} {} {}); {} keys; prefix `bench`",
        args.rate,
        args.burst,
        script.interval,
        script.per_micro,
        script.tau,
        script.cost,
        args.keys
    );
    println!(
        "runtime: {}; {} runs; each measurement {:.1} s after {:.1} s of warm-up; tasks {:?}",
        args.runtime_label(),
        args.runs,
        args.duration.as_secs_f64(),
        args.warmup.as_secs_f64(),
        args.concurrency
    );
    println!(
        "measured client (\"ours\"): {}",
        if args.redis_rs_only {
            "redis-rs alone: Script::invoke_async on one MultiplexedConnection (--redis-rs-only)"
        } else {
            "RateLimiter::check, Redis store, FailurePolicy::Deny, 5 s deadline"
        }
    );
    println!(
        "redis-benchmark command: {}\n",
        bench.command_line(50, 16, 0)
    );
}
