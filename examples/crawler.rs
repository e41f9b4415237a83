//! Crawler workers that share one rate per host across processes: each fetch waits for its
//! turn when that is near ("wait"), and a URL whose host is booked further ahead than
//! `--max-wait-ms` is put back for later while the worker moves on ("skip").
//!
//! ```sh
//! cargo run --example crawler -- --workers 4 --fetches 20        # in memory, one process
//!
//! # Two processes sharing 10 fetches a second per host through Redis:
//! cargo build --example crawler
//! export REDIS_URL=redis://127.0.0.1:6379
//! target/debug/examples/crawler --name a & target/debug/examples/crawler --name b; wait
//! ```
//!
//! Options: `--workers N` (4), `--fetches N` (URLs this process fetches, 20), `--rate N`
//! (fetches a second per host, over every process, 10), `--max-wait-ms N` (1000),
//! `--name NAME` (the process id).
//!
//! Nothing goes on the network: a fetch is a short sleep. Every process crawls the same
//! small list; a real crawler would share its frontier too, here only the rate is shared.
//! Each fetch prints one line, its time the moment it was admitted (microseconds since the
//! UNIX epoch, comparable between processes on one machine):
//!
//! ```text
//! fetched t_us=1732460000123456 waited_us=98211 instance=a worker=2 url=https://example.org/about source=store
//! skipped t_us=1732460000125001 instance=b worker=1 url=https://example.net/ retry_after_us=412000
//! ```
#![allow(clippy::print_stdout)]

mod report;

use std::collections::{HashMap, VecDeque};
use std::error::Error;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_ratelimit::{Limit, RateLimiter, Unit};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The pages to crawl, on two hosts: each host has its own rate.
const URLS: [&str; 8] = [
    "https://example.org/",
    "https://example.net/",
    "https://example.org/about",
    "https://example.net/docs",
    "https://example.org/blog",
    "https://example.net/pricing",
    "https://example.org/contact",
    "https://example.net/status",
];

/// How long a simulated fetch takes.
const FETCH_TIME: Duration = Duration::from_millis(20);

const USAGE: &str = "usage: crawler [--workers N] [--fetches N] [--rate N] [--max-wait-ms N] \
                     [--name NAME]";

#[tokio::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn Error>> {
    let Some(options) = Options::parse(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    // Burst 1: a host never sees two fetches closer than 1/rate apart, from any process.
    let limit = Limit::try_new(options.rate, 1, Unit::Second)?;
    // Checked now rather than on the first fetch: a wait longer than a limit can hold.
    let shown = limit
        .try_wait(options.max_wait)
        .map_err(|e| format!("`--max-wait-ms {}`: {e}", options.max_wait.as_millis()))?;

    let url = std::env::var("REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "memory://".to_owned());
    let limiter = RateLimiter::builder()
        .redis(url.clone())
        .prefix("crawler")
        // A crawler can wait for Redis longer than a request handler: past this deadline the
        // in-memory fallback decides, and every process would then go at the full rate.
        .deadline(Duration::from_secs(1))
        .build()
        .await?;
    if url.starts_with("memory:") {
        println!("store: in memory (set REDIS_URL to share the rate between processes)");
    } else {
        println!("store: Redis at {url}");
    }
    println!(
        "start instance={} workers={} fetches={} limit per host: {shown}",
        options.name, options.workers, options.fetches
    );

    let crawl = Arc::new(Crawl {
        limiter,
        limit,
        max_wait: options.max_wait,
        name: options.name,
        frontier: Mutex::new(Frontier {
            urls: URLS.iter().copied().cycle().take(options.fetches).collect(),
            skip_until: HashMap::new(),
        }),
    });
    let mut workers = JoinSet::new();
    for worker in 1..=options.workers {
        workers.spawn(Arc::clone(&crawl).work(worker));
    }
    let mut stats = Stats::default();
    while let Some(done) = workers.join_next().await {
        let s = done??;
        stats.fetched += s.fetched;
        stats.skipped += s.skipped;
    }
    println!(
        "done instance={} fetched={} skipped={}",
        crawl.name, stats.fetched, stats.skipped
    );
    Ok(())
}

/// What every worker of this process shares.
struct Crawl {
    limiter: RateLimiter,
    limit: Limit,
    max_wait: Duration,
    name: String,
    frontier: Mutex<Frontier>,
}

/// The URLs left to fetch, and the hosts that refused a fetch lately.
struct Frontier {
    urls: VecDeque<&'static str>,
    /// When each host that refused can take a fetch within the wait again: until then its
    /// URLs are skipped without asking.
    skip_until: HashMap<&'static str, Instant>,
}

enum Next {
    Fetch(&'static str),
    WaitUntil(Instant),
    Done,
}

#[derive(Default)]
struct Stats {
    fetched: u64,
    skipped: u64,
}

impl Crawl {
    async fn work(self: Arc<Self>, worker: usize) -> Result<Stats, redis_ratelimit::Error> {
        let mut stats = Stats::default();
        loop {
            let url = match self.next() {
                Next::Fetch(url) => url,
                Next::WaitUntil(at) => {
                    tokio::time::sleep_until(at).await;
                    continue;
                }
                Next::Done => return Ok(stats),
            };
            let asked = SystemTime::now();
            // Wait: due within `max_wait`, this returns when the turn comes.
            let d = self
                .limiter
                .acquire(host(url), &self.limit, self.max_wait)
                .await?;
            let admitted = SystemTime::now();
            if d.allowed {
                fetch(url).await;
                stats.fetched += 1;
                // `store`, or `fallback` while Redis is failing (then the rate is this
                // process's alone).
                let source = format!("{:?}", d.source).to_lowercase();
                let waited = admitted.duration_since(asked).unwrap_or_default();
                println!(
                    "fetched t_us={} waited_us={} instance={} worker={worker} url={url} \
                     source={source}",
                    micros(admitted),
                    waited.as_micros(),
                    self.name,
                );
            } else {
                // Skip: the host is booked further ahead than we wait. Fetch other hosts'
                // URLs meanwhile, and this one once its host can take it within the wait.
                stats.skipped += 1;
                println!(
                    "skipped t_us={} instance={} worker={worker} url={url} retry_after_us={}",
                    micros(admitted),
                    self.name,
                    d.retry_after.as_micros(),
                );
                self.skip(url, Instant::now() + d.retry_after);
            }
        }
    }

    /// The first URL whose host is not skipped, else when the first skip ends, else done. A
    /// URL that another worker puts back after this one is done is that worker's to fetch.
    fn next(&self) -> Next {
        let mut frontier = self.frontier.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let Frontier { urls, skip_until } = &mut *frontier;
        skip_until.retain(|_, until| *until > now);
        if let Some(i) = urls.iter().position(|u| !skip_until.contains_key(host(u))) {
            return urls.remove(i).map_or(Next::Done, Next::Fetch);
        }
        urls.iter()
            .filter_map(|u| skip_until.get(host(u)))
            .min()
            .map_or(Next::Done, |&until| Next::WaitUntil(until))
    }

    /// Puts `url` back, and skips its host until `until`.
    fn skip(&self, url: &'static str, until: Instant) {
        let mut frontier = self.frontier.lock().unwrap_or_else(|e| e.into_inner());
        frontier.urls.push_back(url);
        let host = frontier.skip_until.entry(host(url)).or_insert(until);
        *host = (*host).max(until);
    }
}

/// The host of `url`: the key of its rate.
fn host(url: &'static str) -> &'static str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or(rest)
}

/// Stands in for an HTTP GET.
async fn fetch(_url: &str) {
    tokio::time::sleep(FETCH_TIME).await;
}

fn micros(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()
}

struct Options {
    workers: usize,
    fetches: usize,
    rate: u32,
    max_wait: Duration,
    name: String,
}

impl Options {
    /// The options, or `None` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
        let mut options = Options {
            workers: 4,
            fetches: 20,
            rate: 10,
            max_wait: Duration::from_millis(1000),
            name: std::process::id().to_string(),
        };
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                return Ok(None);
            }
            let value = args
                .next()
                .ok_or_else(|| format!("`{flag}` needs a value\n{USAGE}"))?;
            match flag.as_str() {
                "--workers" => options.workers = at_least_one(&flag, &value)?,
                "--fetches" => options.fetches = number(&flag, &value)?,
                "--rate" => options.rate = at_least_one(&flag, &value)?,
                "--max-wait-ms" => options.max_wait = Duration::from_millis(number(&flag, &value)?),
                "--name" if value.is_empty() || value.contains(char::is_whitespace) => {
                    return Err(format!(
                        "`--name {value:?}`: expected a word with no spaces"
                    ));
                }
                "--name" => options.name = value,
                _ => return Err(format!("unknown option `{flag}`\n{USAGE}")),
            }
        }
        Ok(Some(options))
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("`{flag} {value}`: expected a whole number"))
}

fn at_least_one<T: std::str::FromStr + PartialOrd + From<u8>>(
    flag: &str,
    value: &str,
) -> Result<T, String> {
    let n: T = number(flag, value)?;
    if n < T::from(1) {
        return Err(format!("`{flag} {value}`: expected at least 1"));
    }
    Ok(n)
}
