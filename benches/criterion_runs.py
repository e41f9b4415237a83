#!/usr/bin/env python3
"""Runs the criterion benchmarks several times; prints each figure as the median of the runs
with min-max, and the ratios that docs/benchmarks.md reports against their targets.

    benches/criterion_runs.py                  # 5 rounds of every criterion bench, release
    benches/criterion_runs.py --runs 3 --benches macro_overhead
    benches/criterion_runs.py --summarize benches/results/criterion-runs.json

Rounds are interleaved (round 1 of every bench, then round 2, ...) so that a slow period of
the machine hits every bench alike. A ratio is computed within each round (both figures a few
seconds apart), then summarized over the rounds. Each figure is criterion's own estimate of
the time per iteration (the slope of its linear sampling), as it prints in `time:`.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "redis-ratelimit-benches"
BENCHES = ["memory_store", "macro_overhead", "key_naming"]

# (what, numerator, denominator, target or None): numerator / denominator, lower is better.
RATIOS = [
    ("in-memory store ÷ governor, 10,000 keys, 1 thread",
     "keyed_check/1_thread/store/10000", "keyed_check/1_thread/governor/10000", 1.0),
    ("in-memory store ÷ governor, 10,000 keys, 2 threads",
     "keyed_check/2_threads/store/10000", "keyed_check/2_threads/governor/10000", 1.0),
]
for threads in ("1_thread", "2_threads"):
    for n in ("1", "1000000"):
        RATIOS.append((f"in-memory store ÷ governor, {int(n):,} key(s), {threads.replace('_', ' ')}",
                       f"keyed_check/{threads}/store/{n}", f"keyed_check/{threads}/governor/{n}", None))
    for n in ("1", "10000", "1000000"):
        RATIOS.append((f"RateLimiter::check (memory) ÷ governor, {int(n):,} key(s), {threads.replace('_', ' ')}",
                       f"keyed_check/{threads}/limiter/{n}", f"keyed_check/{threads}/governor/{n}", None))
RATIOS += [
    ("#[rate_limit] ÷ check_named by hand",
     "macro_overhead/annotated", "macro_overhead/by_hand", 1.02),
    ("#[rate_limit] ÷ check_named by hand, both in a request scope",
     "macro_overhead/annotated_in_scope", "macro_overhead/by_hand_in_scope", 1.02),
]


def criterion_dir():
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return pathlib.Path(os.environ.get("CRITERION_HOME", pathlib.Path(target) / "criterion"))


def collect(since):
    """Every benchmark whose estimates were written after `since`: full id -> ns/iter."""
    found = {}
    for bench_json in criterion_dir().glob("**/new/benchmark.json"):
        estimates = bench_json.with_name("estimates.json")
        if not estimates.exists() or estimates.stat().st_mtime < since:
            continue
        full_id = json.loads(bench_json.read_text())["full_id"]
        e = json.loads(estimates.read_text())
        typical = e.get("slope") or e["mean"]
        found[full_id] = typical["point_estimate"]
    return found


def run(args):
    results = {"runs": [], "load": [], "args": vars(args).copy()}
    raw = pathlib.Path(args.raw) if args.raw else None
    if raw:
        raw.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cargo", "bench", "-p", PACKAGE, "--no-run"]
                   + sum([["--bench", b] for b in args.benches], []),
                   cwd=ROOT, check=True)
    for r in range(args.runs):
        figures = {}
        load = [open("/proc/loadavg").read().split()[0]]
        for bench in args.benches:
            since = time.time()
            cmd = ["cargo", "bench", "-p", PACKAGE, "--bench", bench, "--",
                   "--warm-up-time", str(args.warm_up), "--measurement-time", str(args.measurement)]
            print(f"round {r + 1}/{args.runs}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
            if raw:
                (raw / f"{bench}.round{r + 1}.txt").write_text(out.stdout + out.stderr)
            figures.update(collect(since))
        load.append(open("/proc/loadavg").read().split()[0])
        results["runs"].append(figures)
        results["load"].append(load)
    return results


def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}–{fmt(values[-1])})"


def summarize(results):
    runs = results["runs"]
    ids = sorted({i for r in runs for i in r})
    print(f"### Criterion figures: median of {len(runs)} rounds (min–max), ns per call\n")
    print("| benchmark | ns per call | calls/s (median) |")
    print("|---|---:|---:|")
    for i in ids:
        v = [r[i] for r in runs if i in r]
        print(f"| `{i}` | {spread(v, lambda x: f'{x:.1f}')} | {1e9 / statistics.median(v):,.0f} |")
    print("\n### Ratios, per round then over rounds: median (min–max)\n")
    print("| ratio | value | target |")
    print("|---|---:|---|")
    for what, num, den, target in RATIOS:
        v = [r[num] / r[den] for r in runs if num in r and den in r]
        if not v:
            continue
        verdict = ""
        if target is not None:
            met = statistics.median(v) <= target
            verdict = f"≤ {target}: {'met' if met else 'MISSED'}"
        print(f"| {what} | {spread(v, lambda x: f'{x:.3f}')} | {verdict} |")
    loads = ", ".join(f"{a}→{b}" for a, b in results.get("load", []))
    print(f"\nload average (1 min) at the start→end of each round: {loads}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--benches", nargs="+", default=BENCHES)
    p.add_argument("--warm-up", type=float, default=1.0, help="criterion --warm-up-time (s)")
    p.add_argument("--measurement", type=float, default=3.0, help="criterion --measurement-time (s)")
    p.add_argument("--out", default=str(ROOT / "benches/results/criterion-runs.json"))
    p.add_argument("--raw", default=str(ROOT / "benches/results/criterion-raw"),
                   help="where each round's criterion output goes ('' for nowhere)")
    p.add_argument("--summarize", metavar="JSON", help="only summarize a saved run")
    args = p.parse_args()
    if args.summarize:
        summarize(json.loads(pathlib.Path(args.summarize).read_text()))
        return
    results = run(args)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"saved {out}", file=sys.stderr)
    summarize(results)


if __name__ == "__main__":
    main()
