#!/usr/bin/env node
// rate-limiter-flexible's side of the loadgen bench (benches/loadgen/flexible.rs runs it):
// C in-flight `RateLimiterRedis.consume(key, 1)` calls from this one Node process, on keys
// drawn uniformly from --keys, against a redis-server on 127.0.0.1 (never port 6379).
//
//   node run.js --port P --concurrency C [--keys 10000] [--rate 1000000000]
//               [--warmup 1] [--duration 3] [--window 1] [--auto-pipelining]
//
// Prints `measuring` when the measurement starts (the loadgen resets the server's command
// statistics then), and at the end one line of JSON: decisions/s, latency quantiles in µs,
// errors, rejections and the settings used. Bounded: it exits by itself after
// warm-up + duration, and a watchdog kills it 30 s later if the server stops answering.
'use strict';

const { performance } = require('node:perf_hooks');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

function parseArgs(argv) {
  const opts = {
    port: null,
    concurrency: 1,
    keys: 10000,
    rate: 1e9,
    warmup: 1,
    duration: 3,
    window: 1,
    autoPipelining: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i];
    const value = () => {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v) || v < 0) throw new Error(`${name} needs a non-negative number`);
      return v;
    };
    switch (name) {
      case '--port': opts.port = value(); break;
      case '--concurrency': opts.concurrency = value(); break;
      case '--keys': opts.keys = value(); break;
      case '--rate': opts.rate = value(); break;
      case '--warmup': opts.warmup = value(); break;
      case '--duration': opts.duration = value(); break;
      case '--window': opts.window = value(); break;
      case '--auto-pipelining': opts.autoPipelining = true; break;
      default: throw new Error(`unknown argument ${name}`);
    }
  }
  if (!Number.isInteger(opts.port) || opts.port <= 0 || opts.port > 65535) {
    throw new Error('--port PORT is required');
  }
  // The same guard as the loadgen's: a dedicated server on this machine, never a shared one.
  if (opts.port === 6379) throw new Error('port 6379 is where a shared Redis usually runs');
  if (!(opts.concurrency >= 1 && opts.keys >= 1 && opts.rate >= 1)) {
    throw new Error('--concurrency, --keys and --rate must be at least 1');
  }
  return opts;
}

// Latencies in µs, in a growable typed array (no per-sample allocation).
class Samples {
  constructor() {
    this.data = new Float64Array(1 << 16);
    this.length = 0;
  }

  push(v) {
    if (this.length === this.data.length) {
      const bigger = new Float64Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.length++] = v;
  }

  // The value at rank ceil(q × n), as HdrHistogram's value_at_quantile on the Rust side.
  quantiles(qs) {
    const sorted = this.data.subarray(0, this.length).sort();
    return qs.map((q) => {
      if (sorted.length === 0) return 0;
      const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
      return sorted[rank - 1];
    });
  }
}

const WARMUP = 0;
const MEASURE = 1;
const STOP = 2;

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const watchdog = setTimeout(() => {
    process.stderr.write('flexible: no end 30 s after the measurement; giving up\n');
    process.exit(3);
  }, (opts.warmup + opts.duration + 30) * 1000);
  watchdog.unref();

  // ioredis settings: one connection (the natural deployment of one Node process). Its
  // commands are written as they are issued and their replies matched in order, so calls in
  // flight already share the connection. Auto-pipelining (--auto-pipelining) gathers the
  // commands of one event-loop turn into one write, but keeps one such batch in flight at a
  // time; on loopback it measured slower here (benches/results/history.md, 3.1), so it is off.
  const redis = new Redis({
    host: '127.0.0.1',
    port: opts.port,
    lazyConnect: true,
    enableAutoPipelining: opts.autoPipelining,
  });
  let connectionErrors = 0;
  redis.on('error', (err) => {
    if (connectionErrors++ === 0) process.stderr.write(`flexible: redis: ${err.message}\n`);
  });
  await redis.connect();

  // rate-limiter-flexible's settings: RateLimiterRedis on ioredis (its default client; no
  // useRedisPackage), a limit that admits every call (`rate` points per window of `window`
  // seconds: 1 by default, as the loadgen's limit of `rate` per second; load_instructions
  // passes an hour, so that its keys stay live as ours do), no insurance limiter, no in-memory block (nothing
  // is ever over the limit), no execEvenly (it would delay admitted calls on purpose), no
  // blockDuration.
  const limiter = new RateLimiterRedis({
    storeClient: redis,
    keyPrefix: 'flexible',
    points: opts.rate,
    duration: opts.window,
    blockDuration: 0,
    execEvenly: false,
    inMemoryBlockOnConsumed: 0,
  });

  const keys = Array.from({ length: opts.keys }, (_, i) => `k:${String(i).padStart(12, '0')}`);
  const samples = new Samples();
  let phase = WARMUP;
  let decisions = 0;
  let rejections = 0;
  let errors = 0;
  let firstError = null;

  async function worker() {
    for (;;) {
      const key = keys[Math.floor(Math.random() * keys.length)];
      const started = performance.now();
      let outcome;
      try {
        await limiter.consume(key, 1);
        outcome = 'admitted';
      } catch (res) {
        // rate-limiter-flexible rejects with a RateLimiterRes when over the limit, with an
        // Error when the store failed.
        outcome = res instanceof Error ? 'error' : 'rejected';
        if (outcome === 'error' && firstError === null) firstError = res.message;
      }
      const latencyUs = (performance.now() - started) * 1000;
      if (phase === MEASURE) {
        samples.push(latencyUs);
        if (outcome === 'error') {
          errors++;
        } else {
          decisions++;
          if (outcome === 'rejected') rejections++;
        }
      } else if (phase === STOP) {
        return;
      }
    }
  }

  const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
  const workers = Array.from({ length: opts.concurrency }, () => worker());
  await sleep(opts.warmup);
  process.stdout.write('measuring\n');
  phase = MEASURE;
  const started = performance.now();
  await sleep(opts.duration);
  phase = STOP;
  const elapsed = (performance.now() - started) / 1000;
  await Promise.all(workers);

  const [p50, p90, p99, p999] = samples.quantiles([0.5, 0.9, 0.99, 0.999]);
  const result = {
    concurrency: opts.concurrency,
    elapsed_s: elapsed,
    decisions,
    decisions_per_sec: decisions / elapsed,
    p50_us: p50,
    p90_us: p90,
    p99_us: p99,
    p999_us: p999,
    rejections,
    errors,
    first_error: firstError,
    versions: {
      node: process.versions.node,
      ioredis: require('ioredis/package.json').version,
      'rate-limiter-flexible': require('rate-limiter-flexible/package.json').version,
    },
    settings: {
      enableAutoPipelining: opts.autoPipelining,
      keyPrefix: 'flexible',
      points: opts.rate,
      duration: 1,
      insuranceLimiter: null,
      inMemoryBlockOnConsumed: 0,
      execEvenly: false,
    },
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  await redis.quit();
}

main().catch((err) => {
  process.stderr.write(`flexible: ${err.stack || err}\n`);
  process.exit(1);
});
