#!/usr/bin/env bash
# Server instructions per operation, counted by valgrind's callgrind: runs a
# Redis 7.0 built with symbols (as profile.sh does) under callgrind, drives
# one operation of the store at it with tools/cgprobe (its doc says
# what each operation and flag is), zeroes the counts after the warm-up and
# prints the instructions per operation. Unlike the server's CPU time,
# which varies by up to 3x on a shared machine, the count is the same from
# run to run (within a few per cent with concurrent callers, whose batching
# varies; exactly with --conc 1), so two builds can be compared one change
# at a time.
#
#   ./scripts/callgrind.sh allow3                     3,000 operations from 32 callers, no bucket moves
#   ./scripts/callgrind.sh add --step 300ms --conc 1  one bucket move in three, one caller
#   N=6000 CALLGRIND_OUT=/tmp/a.out ./scripts/callgrind.sh record6
#                                                     keep the profile (callgrind_annotate /tmp/a.out)
#
# It needs valgrind besides Go, a C compiler, make and curl (Redis is built
# once, under ${XDG_CACHE_HOME:-~/.cache}/windowstore).
set -euo pipefail
cd "$(dirname "$0")/.."

op=${1:?usage: ./scripts/callgrind.sh OPERATION [cgprobe flags]}
shift
n=${N:-3000}
# shellcheck source=scripts/lib/symbolized-redis.sh
. scripts/lib/symbolized-redis.sh
port=${CALLGRIND_PORT:-$(free_port)}
need_tools callgrind "on Debian: apt-get install valgrind gcc make curl" valgrind callgrind_control cc make curl
symbolized_redis

dir=$(mktemp -d)
(cd tools && go build -o "$dir/cgprobe" ./cgprobe)
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" "$server" --port "$port" --bind 127.0.0.1 \
  --save '' --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
trap 'kill "$vg" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
kill -0 "$vg" 2>/dev/null || { cat "$dir/valgrind.log" >&2; exit 1; }

"$dir/cgprobe" --addr "127.0.0.1:$port" --op "$op" --n "$n" --pid "$vg" "$@"
kill -INT "$vg"
wait "$vg" 2>/dev/null || true
# cgprobe's dump (callgrind_control -d) holds the measured operations alone.
dump=$(ls "$dir"/cg."$vg".* | head -1)
total=$(sed -n 's/^summary: *//p; s/^totals: *//p' "$dump" | head -1 | awk '{print $1}')
echo "$op${*:+ $*}: $((total / n)) server instructions per operation (callgrind, $n operations)"
if [ -n "${CALLGRIND_OUT:-}" ]; then cp "$dump" "$CALLGRIND_OUT"; fi
