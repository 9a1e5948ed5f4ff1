#!/usr/bin/env bash
# Measures the README's benchmark table and records it: starts a Redis 7.0
# server in a container pinned to a core of its own, runs the bench
# (tools/bench) on the other core(s), records the medians in
# tests/figures.json and renders the README (go run ./tools/figures).
#
#   ./scripts/bench.sh            3 runs of every operation at 10 buckets, then
#                                 add and the naive script at 10 and 1,440
#                                 buckets (fewer keys: a 1,440-bucket counter
#                                 is some 90 kB)
#   RUNS=5 PAIRS=9 DURATION=5s ./scripts/bench.sh
#                                 (PAIRS: the targets' back-to-back pairs, 7
#                                 by default: their median moves less)
#
# The server image is REDIS70_IMAGE (default: the one scripts/images.sh builds).
# It needs two cores to pin; with one, the figures are noisier. Time the figures
# on a quiet machine: they are medians of RUNS rounds, with their range.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-3}
pairs=${PAIRS:-7}
duration=${DURATION:-3s}
port=${BENCH_PORT:-16390}
# shellcheck source=scripts/lib/pinned-redis.sh
. scripts/lib/pinned-redis.sh
name=windowstore-bench-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
pinned_redis "$name" "$port"

bin=$(mktemp -d)/bench
(cd tools && go build -o "$bin" ./bench)

out=$(mktemp)
echo "bench: every operation at 10 buckets, $runs runs of $duration, $pairs pairs per target" >&2
"${client_pin[@]}" "$bin" --addr "127.0.0.1:$port" --json --keys 10000 --buckets 10 --runs "$runs" --pairs "$pairs" --duration "$duration" | tee -a "$out" >&2
echo "bench: add and the naive script at 10 and 1,440 buckets" >&2
"${client_pin[@]}" "$bin" --addr "127.0.0.1:$port" --json --keys 1000 --buckets 10,1440 --ops add,naive --runs "$runs" --duration "$duration" |
  grep '"buckets":1440' | tee -a "$out" >&2

how="Redis $version in a container pinned to a core of its own (docker --cpuset-cpus), tools/bench on the other core, \
$(date -u +%Y-%m-%d), $cpus cores; 10,000 keys with full windows at 10 buckets (1,000 at 1,440), $duration per run, \
medians of $runs runs and their range; the table's ratios are of medians measured in the same invocation (the targets' \
below it, in $pairs back-to-back pairs and round by round), and the 1,440-bucket rows compare with the naive script at 1,440 buckets. Reproduce: \`./scripts/bench.sh\`."
(cd tools && go run ./figures -bench "$out" -how "$how")
rm -f "$out"
