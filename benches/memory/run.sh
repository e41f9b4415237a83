#!/bin/sh
# Redis memory per active bucket: ours beside Spring Cloud Gateway's two-key script run by
# redis-benchmark, on a redis-server the program starts itself. See docs/benchmarks.md.
# Needs redis-server and redis-benchmark (Debian: redis-server, redis-tools).
# Options: --runs 3 --buckets 100000 --concurrency 64 [--maxmemory-policy allkeys-lru]
set -eu
cd "$(dirname "$0")/../.."
exec cargo run --release --quiet -p testkit --bin bench_memory -- "$@"
