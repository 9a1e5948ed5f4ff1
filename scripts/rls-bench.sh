#!/usr/bin/env bash
# windowstored beside envoyproxy/ratelimit: the same config and load of Envoy
# rate-limit calls against one Redis 7.0 server, pinned to a core of its own
# (tools/rlsbench). Prints decisions per second and the Redis server's CPU
# time per decision, medians of RUNS runs with their range.
#
#   ENVOY_RATELIMIT_BIN=/path/to/ratelimit ./scripts/rls-bench.sh
#   RUNS=5 DURATION=10s ENVOY_RATELIMIT_BIN=... ./scripts/rls-bench.sh
#   ENVOY_RATELIMIT_BIN=... ./scripts/rls-bench.sh --windowstored-rule "bucket: 6s"
#                                         more flags go to tools/rlsbench
#   RECORD=sliding60 RUNS=5 ENVOY_RATELIMIT_BIN=... ./scripts/rls-bench.sh
#   RECORD=bucket6s RUNS=5 ENVOY_RATELIMIT_BIN=... ./scripts/rls-bench.sh --windowstored-rule "bucket: 6s"
#                                         record the figures as the README's
#                                         table's setting, and render it
#
# envoyproxy/ratelimit is not part of this repository, and nothing here builds
# it: build it yourself from its public source (README.md shows how) and point
# ENVOY_RATELIMIT_BIN at the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${ENVOY_RATELIMIT_BIN:-}" ] || [ ! -x "$ENVOY_RATELIMIT_BIN" ]; then
  echo "rls-bench: set ENVOY_RATELIMIT_BIN to an envoyproxy/ratelimit binary you built (see README.md)" >&2
  exit 2
fi
runs=${RUNS:-3}
duration=${DURATION:-5s}
port=${BENCH_PORT:-16391}
# shellcheck source=scripts/lib/pinned-redis.sh
. scripts/lib/pinned-redis.sh
name=windowstore-rlsbench-$$
bin=$(mktemp -d)
trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
pinned_redis "$name" "$port"

(cd cmd/windowstored && go build -o "$bin/windowstored" .)
(cd tools && go build -o "$bin/rlsbench" ./rlsbench)
how="Redis $version pinned to a core of its own; medians of $runs alternating runs of $duration per service, and their range; $(date -u +%Y-%m-%d)."
echo "rls-bench: $how" >&2
if [ -z "${RECORD:-}" ]; then
  "${client_pin[@]}" "$bin/rlsbench" --redis "127.0.0.1:$port" --windowstored "$bin/windowstored" \
    --envoy "$ENVOY_RATELIMIT_BIN" --runs "$runs" --duration "$duration" "$@"
  exit 0
fi
"${client_pin[@]}" "$bin/rlsbench" --redis "127.0.0.1:$port" --windowstored "$bin/windowstored" \
  --envoy "$ENVOY_RATELIMIT_BIN" --runs "$runs" --duration "$duration" --json "$@" | tee "$bin/rls.json"
(cd tools && go run ./figures -rls "$bin/rls.json" -rls-name "$RECORD" -how "$how")
