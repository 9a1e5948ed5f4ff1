#!/usr/bin/env bash
# Runs every test of windowstore: the library's unit tests and the integration
# suite against real servers (Redis 7.0, Redis 8.0, Valkey 8.1; TairHash when
# TAIRHASH_IMAGE or TAIRHASH_ADDR is set).
#
# Where no server address is given (REDIS70_ADDR, REDIS80_ADDR, VALKEY_ADDR), the
# suite starts containers with testcontainers-go. With no image names given it
# builds local images from Debian packages (scripts/images.sh), since this
# project's machines reach no container registry; set REDIS70_IMAGE etc. (for
# example to redis:7.0) to use registry images instead.
#
# Extra arguments go to every `go test` call, for example -run or -v.
set -euo pipefail
cd "$(dirname "$0")/.."

export TESTCONTAINERS_RYUK_DISABLED="${TESTCONTAINERS_RYUK_DISABLED:-true}"
# A machine that is itself a container makes testcontainers guess the gateway
# as the Docker host; with the engine on this host, the ports are on loopback.
if [ -z "${TESTCONTAINERS_HOST_OVERRIDE:-}" ] && [ -S /var/run/docker.sock ] && ip link show docker0 >/dev/null 2>&1; then
  export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
fi

docker_ok=false
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then docker_ok=true; fi

if $docker_ok; then
  need_images=false
  for v in REDIS70 REDIS80 VALKEY; do
    a="${v}_ADDR"; i="${v}_IMAGE"
    if [ -z "${!a:-}" ] && [ -z "${!i:-}" ]; then need_images=true; fi
  done
  if $need_images; then
    while IFS= read -r line; do
      name=${line%%=*}
      [ -n "${!name:-}" ] || export "$line"
    done < <(bash scripts/images.sh)
  fi
  # Every kind but TairHash must run: a missing server fails instead of skipping.
  export WINDOWSTORE_REQUIRE="${WINDOWSTORE_REQUIRE:-redis70,redis80,valkey}"
  cleanup() {
    ids=$(docker ps -aq --filter label=windowstore.test=true 2>/dev/null || true)
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
  }
  trap cleanup EXIT
else
  echo "test.sh: no usable Docker engine: the plain Redis tests use a local redis-server; Redis 8 and Valkey are skipped" >&2
  export WINDOWSTORE_REQUIRE="${WINDOWSTORE_REQUIRE:-redis70}"
fi

echo "== unit tests (library module, metrics/prom module)"
go vet ./...
go test -count=1 "$@" ./...
(cd metrics/prom && go vet ./... && go test -count=1 "$@" ./...)
echo "== integration tests (tests module, real servers)"
(cd tests && go vet ./... && go test -count=1 -timeout 15m "$@" ./...)
echo "== benchmark regression check (printed, never asserted)"
if command -v redis-server >/dev/null; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16399)
  bdir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$bdir" --daemonize yes --pidfile "$bdir/pid" >/dev/null
  sleep 0.3
  go run ./cmd/windowctl --addr "redis://127.0.0.1:$port" bench --keys 2000 --duration 300ms --buckets 10,60 || echo "test.sh: bench failed" >&2
  kill "$(cat "$bdir/pid")" 2>/dev/null || true
  rm -rf "$bdir"
else
  echo "test.sh: no local redis-server: benchmark check skipped" >&2
fi
if $docker_ok && command -v docker-compose >/dev/null; then
  echo "== compose file: config, up, smoke test, down"
  bash compose/smoke.sh
else
  echo "test.sh: no Docker engine or no docker-compose: compose/docker-compose.yml not checked" >&2
fi
