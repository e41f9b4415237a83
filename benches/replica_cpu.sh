#!/usr/bin/env bash
# What the module's propagation costs a replica: a master (redis-server, the module loaded) and
# a replica without the module, each started here on a free loopback port in a temporary
# directory; `batches` batches of 64 token-bucket calls on 6,400 keys sent to the master by
# redis-cli, then polled until the replica has applied the master's whole stream. Prints the
# CPU (INFO cpu: used_cpu_user + used_cpu_sys, so wall-clock noise applies) the master spent per
# decision and the replica per write. Usage:
#   benches/replica_cpu.sh path/to/libratelimit_module.so [burst (1000: every call admitted
#   and written; 5: most refused)] [batches (2000)]
# (docs/benchmarks.md, "What it costs a replica"; issue47-replica-cpu.txt.)
set -euo pipefail
module="$1"
burst="${2:-1000}"
batches="${3:-2000}"
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
a=$(free); b=$(free); dir=$(mktemp -d)
trap 'kill $(cat "$dir/a/pid" "$dir/b/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir "$dir/a" "$dir/b"
redis-server --port "$a" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/a" \
  --loadmodule "$module" --daemonize yes --pidfile "$dir/a/pid" > /dev/null
redis-server --port "$b" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/b" \
  --replicaof 127.0.0.1 "$a" --daemonize yes --pidfile "$dir/b/pid" > /dev/null
for _ in $(seq 1 100); do
  redis-cli -p "$b" info replication 2>/dev/null | grep -q "master_link_status:up" && break
  sleep 0.2
done
# One batch a line: 64 keys of one of 100 groups, each call a token bucket of 1 a second with
# `burst` (the batch's first call spells the limit, the others repeat it: `0`).
python3 - "$burst" "$batches" > "$dir/commands" <<'PY'
import sys
burst, batches = int(sys.argv[1]), int(sys.argv[2])
spec = f"1 4 1000000 1 {burst * 1000000} 1"
for b in range(batches):
    keys = " ".join(f"app:{{b}}:{b % 100}:{i}" for i in range(64))
    print(f'ratelimit.v1.batch 64 {keys} "64 1 {spec}{" 0" * 63}"')
PY
cpu() { redis-cli -p "$1" info cpu | awk -F: '/used_cpu_(user|sys):/ {s+=$2} END {printf "%.6f", s}'; }
writes() { redis-cli -p "$b" info commandstats | awk -F'[=,]' '/^cmdstat_set:/ {print $2}'; }
r0=$(cpu "$b"); m0=$(cpu "$a"); w0=$(writes); w0=${w0:-0}
redis-cli -p "$a" < "$dir/commands" > /dev/null
offset() { redis-cli -p "$1" info replication | awk -F: "/^$2:/ {print \$2}" | tr -d '\r'; }
target=$(offset "$a" master_repl_offset)
for _ in $(seq 1 600); do
  [ "$(offset "$b" slave_repl_offset)" = "$target" ] && break
  sleep 0.1
done
r1=$(cpu "$b"); m1=$(cpu "$a"); w1=$(writes)
python3 -c "
d = 64 * $batches; w = $w1 - $w0
print(f'master CPU µs per decision {($m1 - $m0) * 1e6 / d:.3f} ({d:,} decisions)  '
      f'replica CPU µs per write {($r1 - $r0) * 1e6 / w:.3f} ({w:,} writes)')"
