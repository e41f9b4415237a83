#!/usr/bin/env bash
# Runs the Redis module under valgrind's memcheck: a redis-server this script starts on a free
# loopback port, in a temporary directory, with the module loaded, takes the commands below, of
# every native command (valid calls in every mode, batches with and without bad calls,
# malformed arguments, keys of other types), and is shut down; memcheck's leak summary and
# errors follow. Usage: benches/memcheck/module.sh [path/to/libratelimit_module.so]
# (MEMCHECK_LOG=<file> keeps memcheck's whole log there.) The slow log is off: under valgrind
# a command the module calls may run slowly enough to be logged, and its entry, which Redis
# keeps, would read as a block the module's call allocated.
# (docs/operations.md, "The Redis module", says what it found.)
set -euo pipefail
cd "$(dirname "$0")/../.."
module="${1:-}"
if [ -z "$module" ]; then
  CARGO_TARGET_DIR="$PWD/target/module" cargo build --quiet --release -p redis-ratelimit-module
  module="$PWD/target/module/release/libratelimit_module.so"
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible \
  --log-file="$dir/memcheck.log" redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
  --save "" --appendonly no --slowlog-log-slower-than -1 --loadmodule "$module" >/dev/null 2>&1 &
for _ in $(seq 1 120); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.5; done
python3 - > "$dir/commands.txt" <<'EOF'
valid = [
    ('ratelimit.v1.token_bucket', 'app:{k}', '1000000 1 5000000 1'),
    ('ratelimit.v1.token_bucket', 'app:{k}', '1000000 3 5000000 1 2 0 0 1'),
    ('ratelimit.v1.fixed_window', 'app:{w}', '5 1000000 1'),
    ('ratelimit.v1.sliding_window', 'app:{s}', '5 1000000 1000 1'),
    ('ratelimit.v1.interval_bucket', 'app:{i}', '4 10 1000000 10 1'),
    ('ratelimit.v1.sliding_log', 'app:{l}', '5 1000000 2'),
    ('ratelimit.v1.concurrency', 'app:{c}', '2 1000000 18446744073709551615 1 1'),
    ('ratelimit.v1.concurrency', 'app:{c}', '2 1000000 8 1 1'),
    ('ratelimit.v1.concurrency', 'app:{c}', '2 1000000 9 1 2'),
    ('ratelimit.v1.concurrency_renew', 'app:{c}', '8 1000000 1'),
    ('ratelimit.v1.concurrency_release', 'app:{c}', '18446744073709551615 1'),
]
two = '1 4 1000000 1 5000000 1 3 3 5 1000000 1'
# A sliding log and a concurrency limit beside a bucket: sorted sets within multi and batch.
sets = '1 4 1000000 1 5000000 1 5 3 5 1000000 1 6 5 3 1000000 77 1 1'
out = []
for r in range(600):
    for command, key, args in valid:
        out.append(f'{command} {key}{r % 7} "{args}"')
    for mode in [0, 1, 2, 4]:
        out.append(f'ratelimit.v1.multi 2 app:{{m}}{r % 5} app:{{m}}{r % 5}:w "{mode} {two}"')
    out.append(f'ratelimit.v1.multi 2 app:{{m}}{r % 5} app:{{m}}{r % 5}:w "3 {two} 1800000000000000"')
    # A settlement: the bucket's call cost 3 (1 taken, into a debt of 2), the window's 0.
    out.append(f'ratelimit.v1.multi 2 app:{{m}}{r % 5} app:{{m}}{r % 5}:w "5 {two} 1800000000000000 3 2 0 0"')
    # A sliding log's settlement: a call of 1 that used 4 (3 more, into a debt of up to 2),
    # and one that used none (its entry of the take's instant given back).
    out.append(f'ratelimit.v1.multi 1 app:{{z}}{r % 3}:l "5 5 3 5 1000000 1 0 4 2"')
    out.append(f'ratelimit.v1.multi 1 app:{{z}}{r % 3}:l "5 5 3 5 1000000 1 1800000000000000 0 0"')
    out.append('ratelimit.v1.batch 5 app:{b}1 app:{b}2 app:{b}3 app:{b}w app:{b}4 '
               f'"3 1 1 4 1000000 1 5000000 1 0 2 {two}"')
    for mode in [0, 1, 2, 4]:
        out.append(f'ratelimit.v1.multi 3 app:{{z}}{r % 3} app:{{z}}{r % 3}:l app:{{z}}{r % 3}:c "{mode} {sets}"')
    out.append(f'ratelimit.v1.multi 3 app:{{z}}{r % 3} app:{{z}}{r % 3}:l app:{{z}}{r % 3}:c "3 {sets} 1800000000000000"')
    out.append(f'ratelimit.v1.batch 4 app:{{y}}1 app:{{y}}2 app:{{y}}3 app:{{y}}4 "2 1 5 3 5 1000000 1 3 {sets}"')
    out.append(f'ratelimit.v1.concurrency_release app:{{c}}{r % 7} "9 2" a-channel')
    out.append('ratelimit.v1.batch 2 app:{b}1 app:{b}2 "3 1 1 4 1000000 1 5000000 1 x 0"')
    out.append('ratelimit.v1.batch 1 app:{b}1 "2 0"')
    out.append('ratelimit.v1.token_bucket app:{k} "x y"')
    out.append('ratelimit.v1.multi 99 a')
    out.append('ratelimit.v1.batch')
    out.append('ratelimit.v1.sliding_window app:{s} "5 1000000 999 1"')
for command, key, args in valid:
    out += ['DEL app:{f}', 'RPUSH app:{f} x', f'{command} app:{{f}} "{args}"']
print('\n'.join(out))
EOF
redis-cli -p "$port" < "$dir/commands.txt" > "$dir/replies.txt" 2>&1
echo "$(wc -l < "$dir/commands.txt") commands, $(grep -c ERR "$dir/replies.txt") error replies or entries"
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait
[ -n "${MEMCHECK_LOG:-}" ] && cp "$dir/memcheck.log" "$MEMCHECK_LOG"
grep -E "definitely lost|indirectly lost|possibly lost:|ERROR SUMMARY" "$dir/memcheck.log"
echo "memory errors (invalid reads or writes, uninitialised values, mismatched frees): $(grep -cE 'Invalid (read|write)|uninitialised|Mismatched free' "$dir/memcheck.log" || true)"
echo "possibly lost blocks allocated through the module: $(grep -A6 'are possibly lost' "$dir/memcheck.log" | grep -c 'ratelimit_module' || true) frames;" \
  "of those, blocks neither of the module's registration at load nor held by a key in the database (dbAdd, setKey, StringTruncate of a live key):" \
  "$(awk '/are possibly lost/{p=1;b=""} p{b=b"\n"$0} /^==[0-9]+== $/{if(p && b ~ /ratelimit_module/ && b !~ /dbAdd|setKey|RM_StringTruncate|RedisModule_OnLoad/) n++; p=0} END{print n+0}' "$dir/memcheck.log")"
