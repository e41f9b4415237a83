//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use ratelimit_core::{
    Algorithm, Limit, Refill, Unit, defaults::DEFAULT_PREFIX, defaults::DEFAULT_REDIS_URL,
};

use crate::failure::Failure;

/// Exit codes and environment, at the end of every `--help`.
const AFTER_HELP: &str = "\
Exit codes:
  0  done
  1  Redis could not be reached, or failed a command
  2  the command line is wrong: an unknown flag, a missing argument, a bad URL, an invalid limit
  3  not found: the bucket is absent, that is full (inspect); no key and no live instance
     under the prefix (top, watch)

Environment:
  REDIS_URL  the default of --url
  NO_COLOR   no colours, even on a terminal";

/// Inspect, reset and watch the rate-limit buckets that redis-ratelimit keeps in Redis.
#[derive(Debug, Parser)]
#[command(name = "ratelimit", version, after_help = AFTER_HELP, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show one bucket's state as Redis holds it, and with a limit what a call would be told.
    #[command(after_help = AFTER_HELP)]
    Inspect(Inspect),
    /// Refill one bucket on every instance: delete it and tell every instance's deny cache, as
    /// `RateLimiter::reset_named` does.
    #[command(after_help = AFTER_HELP)]
    Reset(Reset),
    /// List the most drained buckets under the prefix (longest until full first), found by
    /// SCAN, never KEYS.
    #[command(after_help = AFTER_HELP)]
    Top(Top),
    /// Sample, every interval, how many buckets each limit holds and how many are empty. It
    /// samples the buckets' state, not the decisions made between samples.
    #[command(after_help = AFTER_HELP)]
    Watch(Watch),
    /// Say how a limiter decides on each server (each master of a cluster): by the Redis
    /// module's commands, by `FCALL` of the function library, or by `EVALSHA`. It asks as a
    /// limiter's `build()` does, which loads this version's function library where the
    /// server allows it.
    #[command(after_help = AFTER_HELP)]
    Servers(Servers),
}

/// Where the buckets are, and how to answer.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// The Redis the limiters use: redis://[user[:password]@]host[:port][/db], or
    /// redis+cluster://host:port[,host:port...] for a Redis Cluster.
    #[arg(long, env = "REDIS_URL", default_value = DEFAULT_REDIS_URL, hide_env_values = true)]
    pub(crate) url: String,
    /// The prefix of the limiters' keys (`RateLimiter::builder().prefix(..)`;
    /// `enable_redis_rate_limit!` uses the crate's name unless given `prefix = ".."`).
    #[arg(long, default_value = DEFAULT_PREFIX)]
    pub(crate) prefix: String,
    /// One JSON document on stdout (for `watch`, one per sample, a line each).
    #[arg(long)]
    pub(crate) json: bool,
}

/// One bucket: by limit name and key, or by its Redis key.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("bucket_by").required(true).args(["key", "bucket"])))]
pub(crate) struct Which {
    /// The limit's name (`#[rate_limit]`'s `name`, by default `module::function`); without
    /// it, the bucket of `RateLimiter::check(key)`.
    #[arg(long, requires = "key")]
    pub(crate) name: Option<String>,
    /// The caller's key (what the limit's key resolver returned: a path, an IP, a user...).
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// The bucket's Redis key, as it is (`<prefix>:{<n>:<name>:<key>}`), instead of
    /// --name/--key.
    #[arg(long, conflicts_with_all = ["name", "key"])]
    pub(crate) bucket: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct Inspect {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(flatten)]
    pub(crate) which: Which,
    #[command(flatten)]
    pub(crate) limit: LimitArgs,
    /// The limits file (the overrides format: `[limits."name"]` with `replenish`, `burst`,
    /// `unit`, `algorithm`, `refill`, `initial`), for the limit of --name when no --replenish.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// The limit, to say what a call would be told.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Tokens added per unit (the limit's `replenish`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) replenish: Option<u32>,
    /// The bucket's capacity (default: --replenish).
    #[arg(long, requires = "replenish", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) burst: Option<u32>,
    /// The period of --replenish: second, minute, hour, day, or a calendar week or month
    /// (counted by a fixed window) [default: second].
    #[arg(long, requires = "replenish", conflicts_with = "period_ms")]
    pub(crate) unit: Option<Unit>,
    /// The period of --replenish in milliseconds (`Limit::per`), instead of --unit.
    #[arg(long, requires = "replenish", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) period_ms: Option<u64>,
    /// token_bucket, fixed_window, sliding_window, sliding_log or leaky_bucket; without a
    /// limit, the state is read as this algorithm's rather than guessed from its shape
    /// [default with --replenish: token_bucket].
    #[arg(long)]
    pub(crate) algorithm: Option<Algorithm>,
    /// A token bucket's refill: smooth or interval [default: smooth].
    #[arg(long)]
    pub(crate) refill: Option<Refill>,
    /// Tokens in a new token bucket (default: the burst).
    #[arg(long, requires = "replenish")]
    pub(crate) initial: Option<u32>,
    /// The tokens of the call to decide.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) cost: u32,
}

impl LimitArgs {
    /// The limit the flags give, checked by the library; `None` without --replenish.
    pub(crate) fn limit(&self) -> Result<Option<Limit>, Failure> {
        let Some(replenish) = self.replenish else {
            return Ok(None);
        };
        let burst = self.burst.unwrap_or(replenish);
        let refill = self.refill.unwrap_or_default();
        let limit = match (self.period_ms, self.unit) {
            (Some(ms), _) => Limit::from_parts(
                replenish,
                burst,
                Duration::from_millis(ms),
                self.algorithm.unwrap_or_default(),
                refill,
                self.initial,
            ),
            // A week or a month is a calendar period, counted by a fixed window (as the
            // attribute's `unit = "month"`), not a token bucket of 31 days.
            (None, unit) => {
                let unit = unit.unwrap_or(Unit::Second);
                let algorithm = self.algorithm.unwrap_or(if unit.is_calendar() {
                    Algorithm::FixedWindow
                } else {
                    Algorithm::default()
                });
                Limit::from_unit(replenish, burst, unit, algorithm, refill, self.initial)
            }
        };
        limit
            .map(Some)
            .map_err(|e| Failure::Usage(format!("invalid limit: {e}")))
    }
}

#[derive(Debug, Args)]
pub(crate) struct Servers {
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct Reset {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(flatten)]
    pub(crate) which: Which,
}

#[derive(Debug, Args)]
pub(crate) struct Top {
    #[command(flatten)]
    pub(crate) common: Common,
    /// How many buckets to show.
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: usize,
    /// The limits file (see `inspect --help`): buckets of the limits it names show their
    /// remaining tokens and whether a call would be refused.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Keys SCAN looks at per step (its COUNT).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}

#[derive(Debug, Args)]
pub(crate) struct Watch {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Milliseconds between samples.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) interval_ms: u64,
    /// Stop after this many samples (default: never).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
    /// The limits file (see `inspect --help`): limits it names show how many of their buckets
    /// are empty (would refuse a call now).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Keys SCAN looks at per step (its COUNT).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) scan_count: u32,
}
