#!/usr/bin/env bash
# Where the server's time goes, per operation: runs tools/bench for each
# operation against a Redis 7.0 built with symbols and frame pointers, records
# the server with `perf record -g` over the middle of the run, and sorts the
# samples with tools/perfcat (the script's own Lua, the commands it calls,
# redis.call's costs, the FCALL's tables, the garbage collector, and the
# reading, writing and waiting every request pays), in µs per operation.
#
#   ./scripts/profile.sh                     add allow allow3 record6 distinct
#   ./scripts/profile.sh add naive           any of tools/bench's operations
#
# Unlike the test and bench scripts it runs the server on the host, not in a
# container (perf needs its symbols), so it needs more than Go and Docker:
# perf, a C compiler and make, curl, and the right to profile another process
# (root, or kernel.perf_event_paranoid <= 1). It builds Redis 7.0.15 from the
# source tarball Debian ships (checked against its SHA-256) once, under
# ${XDG_CACHE_HOME:-~/.cache}/windowstore. perf itself slows the server: read
# the shares, and the µs only against each other.
set -euo pipefail
cd "$(dirname "$0")/.."

ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(add allow allow3 record6 distinct)
port=${PROFILE_PORT:-16391}
# shellcheck source=scripts/lib/symbolized-redis.sh
. scripts/lib/symbolized-redis.sh
need_tools profile "on Debian: apt-get install linux-perf gcc make curl util-linux" perf cc make curl taskset
symbolized_redis

cpus=$(nproc)
server_cpu=$((cpus - 1)) client_cpus=0-$((cpus > 1 ? cpus - 2 : 0))
dir=$(mktemp -d)
taskset -c "$server_cpu" "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do [ -s "$dir/redis.pid" ] && break; sleep 0.1; done
pid=$(cat "$dir/redis.pid")

(cd tools && go build -o "$dir/bench" ./bench && go build -o "$dir/perfcat" ./perfcat)
for op in "${ops[@]}"; do
  # The bench fills 2,000 keys, then runs op for 10 s; perf records 5 s of it.
  taskset -c "$client_cpus" "$dir/bench" --addr "127.0.0.1:$port" --json --keys 2000 --buckets 10 \
    --ops "$op" --runs 1 --duration 10s >"$dir/$op.json" &
  bench=$!
  sleep 4
  "$cli" -p "$port" config resetstat >/dev/null
  if ! perf record -q -F 4999 -g -p "$pid" -o "$dir/$op.data" -- sleep 5 >"$dir/perf.log" 2>&1; then
    cat "$dir/perf.log" >&2
    echo "profile: perf record failed (root, or sysctl kernel.perf_event_paranoid=1, lets it profile the server)" >&2
    exit 1
  fi
  calls=$("$cli" -p "$port" info commandstats | awk -F'[:=,]' '/^cmdstat_(fcall|evalsha):/ { n += $3 } END { print n + 0 }')
  wait "$bench"
  us=$(sed -n 's/.*"server_us_per_op":\([0-9.]*\).*/\1/p' "$dir/$op.json" | head -1)
  rate=$(sed -n 's/.*"ops_per_sec":\([0-9.]*\).*/\1/p' "$dir/$op.json" | head -1)
  per=$(awk -v r="$rate" -v c="${calls:-0}" 'BEGIN { if (c > 0) printf "%.1f", r * 5 / c; else print "-" }')
  printf '== %s: %.2f server µs per operation under perf, about %s operations per script call\n' "$op" "$us" "$per"
  perf script -i "$dir/$op.data" 2>/dev/null | "$dir/perfcat" -us "$us"
done
