//! `ratelimit`: the command line of [redis-ratelimit](https://docs.rs/redis-ratelimit), for the
//! buckets a fleet keeps in Redis.
//!
//! ```text
//! ratelimit inspect --name shop::orders --key /orders [--replenish 3 --burst 300 --unit minute]
//! ratelimit reset   --name shop::orders --key /orders
//! ratelimit top     [--limit 20] [--config limits.toml]
//! ratelimit watch   [--interval-ms 1000] [--count N] [--config limits.toml]
//! ```
//!
//! Every subcommand takes `--url` (default: env `REDIS_URL`, else `redis://127.0.0.1:6379`;
//! `redis+cluster://h1:p1,h2:p2` for a Redis Cluster, whose every master `top` and `watch`
//! scan), `--prefix` (default `ratelimit`, the library's `defaults::DEFAULT_PREFIX`; a service
//! enabled with `enable_redis_rate_limit!` uses its crate's name) and `--json`. A bucket is named by
//! `--name` (the limit's name) and `--key` (the caller's key), `--key` alone for the bucket of
//! `RateLimiter::check`, or `--bucket` with its Redis key.
//!
//! The CLI reads what the library wrote with the library's own code (`ratelimit_core::tools`):
//! its key naming, URL parsing and redaction, read script and decoding of stored states, and
//! its algorithms' decision functions (the twins its conformance tests hold to its Lua
//! scripts), run on the state read from Redis at the server's time; and its reset
//! (`RateLimiter::reset_named`). It writes nothing but a reset; `top`
//! and `watch` use `SCAN`, never `KEYS`.
//!
//! # JSON
//! One document per command on stdout (`watch`: one line per sample). Times are integers in
//! the unit their name ends with (`_us`, `_ms`).
//!
//! `inspect` prints one bucket:
//! - `bucket`: its Redis key; `name` (`null`: unnamed, or kept only as a digest), `key`
//!   (`null`: kept only as a digest);
//! - `exists`: `false` when the key is absent, that is the bucket is full;
//! - `algorithm`: `token_bucket` (also the leaky bucket's state), `interval_bucket` (a token
//!   bucket with interval refill), `fixed_window`, `sliding_window`, `sliding_log`,
//!   `concurrency` (a concurrency limit's slots; guessed from leases that end in the future),
//!   or `null`;
//!   `algorithm_inferred`: whether it was guessed from the state's shape (a positive integer
//!   may be a token bucket's or a counter's: `--algorithm` says which);
//! - `state`: tagged by `kind`, the algorithm: `token_bucket` `{tokens_owed,
//!   token_interval_us, full_in_us, interval, per_micro, remainder}`, `interval_bucket`
//!   `{slack}`, `fixed_window` `{count}`, `sliding_window` `{window, previous, current}`,
//!   `sliding_log` `{tokens}`, `concurrency` `{held, waiting, last_lease_ends_in_us}`, `unknown`
//!   `{type, value}`; `null` when absent;
//! - `full_at_ms` (the key's `PEXPIRETIME`, ms since the epoch) and `full_in_ms` (its `PTTL`):
//!   when the bucket is full again; `server_time_us`: the Redis clock when read;
//! - `decision`, with a limit (`--replenish` ..., or `--config` with `--name`): `{limit,
//!   cost, allowed, remaining, retry_after_us, reset_after_us}`: what a call of `--cost`
//!   (default 1) would be told now, as the library's `RateLimiter::peek` answers
//!   (`remaining`: the tokens the bucket holds now, before the call);
//! - `note`: anything worth knowing (a guess, another algorithm's state, an unknown prefix).
//!
//! `reset` prints `{bucket, name, key, existed}`. `top` prints `{prefix, buckets, other_keys,
//! shown}`, `shown` holding `inspect`'s documents of the most drained buckets, longest until
//! full first (`decision` for the limits `--config` names). `watch` prints, per sample,
//! `{sample, elapsed_ms, buckets, limits: [{name, buckets, empty, longest_full_in_ms}]}`,
//! `empty` (buckets that would refuse a call now) `null` unless `--config` gives the limit.
//!
//! # Exit codes
//! - 0: done.
//! - 1: Redis could not be reached, or failed a command.
//! - 2: the command line is wrong: an unknown flag, a missing argument (clap's own code), a bad
//!   URL, an invalid limit.
//! - 3: not found: `inspect` of an absent bucket (it is full; the JSON document is printed
//!   all the same), `top` or `watch` of a prefix with no key and no live instance.
//!
//! `reset` of a bucket that is already full succeeds (exit 0, `existed: false`).

mod args;
mod commands;
mod config;
mod conn;
mod decide;
mod failure;
mod output;
mod report;
mod state;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::failure::Failure;
use crate::output::Out;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ratelimit: cannot start the runtime: {e}");
            return ExitCode::from(failure::REDIS);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::from(failure::OK),
        Err(failure) => {
            if let Some(message) = failure.message() {
                eprintln!("ratelimit: {message}");
            }
            failure.code()
        }
    }
}

async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Inspect(args) => {
            let out = Out::new(args.common.json);
            commands::inspect::run(args, out).await
        }
        Command::Reset(args) => {
            let out = Out::new(args.common.json);
            commands::reset::run(args, out).await
        }
        Command::Top(args) => {
            let out = Out::new(args.common.json);
            commands::top::run(args, out).await
        }
        Command::Watch(args) => {
            let out = Out::new(args.common.json);
            commands::watch::run(args, out).await
        }
        Command::Servers(args) => {
            let out = Out::new(args.common.json);
            commands::servers::run(args, out).await
        }
    }
}
