#!/usr/bin/env bash
# Runs every test of windowstore: the library's unit tests and the integration
# suite against real servers (Redis 7.0, Redis 8.0, Valkey 8.1, Valkey 9.1, a
# Redis Cluster, replicas, TLS, fault injection; TairHash when TAIRHASH_IMAGE or
# TAIRHASH_ADDR is set). It needs Go and a Docker engine, nothing else: every
# server is a container on the host's network (no redis-server, no redis-cli).
#
#   ./scripts/test.sh                 the full run: pre-flight, go vet, unit tests,
#                                     each fuzz target on 100,000 inputs, the integration
#                                     suite, a benchmark check (printed, never
#                                     asserted) and the docker-compose check
#   ./scripts/test.sh -run X -v ...   any extra argument goes to every `go test`,
#                                     and makes a quick run: pre-flight, unit tests
#                                     and the integration suite only (no vet, no
#                                     fuzzing, no benchmark check, no compose check)
#
# Servers come from REDIS70_IMAGE, REDIS80_IMAGE, VALKEY_IMAGE, VALKEY9_IMAGE,
# TAIRHASH_IMAGE (for example redis:7.0 from a registry); those not given are
# built here from Debian packages (scripts/images.sh: a few minutes once, then
# cached), since this project's machines reach no container registry.
# REDIS70_ADDR, REDIS80_ADDR, VALKEY_ADDR, VALKEY9_ADDR, TAIRHASH_ADDR give the
# servers all tests share; tests that need a server of their own still start
# containers.
#
# WINDOWSTORE_REQUIRE (default: every area this script can provide) makes a
# test that cannot have its area fail instead of skipping; the suite's last
# lines list which areas ran and which were skipped, and why.
# WINDOWSTORE_PARALLEL (default 12) is go test's -parallel for the suite.
#
# Whatever this script installs (debootstrap, to build images), it says so first.
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
say() { echo "test.sh: $*"; }
lap=$t0 cur=pre-flight
section() { # says how long the current section took, then starts the next one
  local now
  now=$(date +%s)
  say "$cur: $((now - lap))s"
  lap=$now cur=${1:-}
  [ -z "$cur" ] || echo "== $1"
}
die() { # what is wrong, the one command that fixes it
  echo "test.sh: $1" >&2
  echo "test.sh: fix: $2" >&2
  exit 1
}
finish() {
  local rc=$?
  if [ -n "${WINDOWSTORE_RUN_ID:-}" ] && command -v docker >/dev/null 2>&1; then
    local ids
    ids=$(docker ps -aq --filter "label=windowstore.run=$WINDOWSTORE_RUN_ID" 2>/dev/null || true)
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
  fi
  [ $rc -ne 0 ] || [ -z "$cur" ] || section
  local took=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    say "PASS, wall time $((took / 60))m$((took % 60))s"
  else
    say "FAIL (exit $rc), wall time $((took / 60))m$((took % 60))s" >&2
  fi
}
trap finish EXIT

quick=false
[ $# -eq 0 ] || quick=true

# ---- pre-flight: Go, a Docker engine, host networking ----------------------
command -v go >/dev/null 2>&1 ||
  die "no Go on PATH" "install Go 1.26 (https://go.dev/dl/), then: export PATH=\$PATH:/usr/local/go/bin"
command -v docker >/dev/null 2>&1 ||
  die "no docker command: the tests run every server in a container" "apt-get install docker.io (or see https://docs.docker.com/engine/install/)"
if ! err=$(docker info 2>&1 >/dev/null); then
  if [ -n "${DOCKER_HOST:-}" ]; then
    die "the Docker engine at DOCKER_HOST=$DOCKER_HOST does not answer (docker info: $(echo "$err" | tail -n1))" \
      "unset DOCKER_HOST (to use this machine's engine), or start the engine it names"
  fi
  die "the Docker engine does not answer (docker info: $(echo "$err" | tail -n1))" \
    "start it: systemctl start docker (and give your user access to /var/run/docker.sock: usermod -aG docker \$USER)"
fi
say "pre-flight: $(go version | cut -d' ' -f3), Docker $(docker version --format '{{.Server.Version}}' 2>/dev/null)"

export WINDOWSTORE_RUN_ID="${WINDOWSTORE_RUN_ID:-$$-$(date +%s)}"
# Containers left by runs that died without cleaning up (their test.sh is gone).
for c in $(docker ps -aq --filter label=windowstore.run 2>/dev/null); do
  run=$(docker inspect -f '{{index .Config.Labels "windowstore.run"}}' "$c" 2>/dev/null || true)
  pid=${run%%-*}
  if [ -n "$pid" ] && [ "$run" != "$WINDOWSTORE_RUN_ID" ] && ! kill -0 "$pid" 2>/dev/null; then
    say "removing container ${c:0:12} of an earlier run ($run) that did not clean up"
    docker rm -f "$c" >/dev/null 2>&1 || true
  fi
done
export TESTCONTAINERS_RYUK_DISABLED=true # the Ryuk image cannot be pulled here; finish() cleans up

# freeport prints a TCP port on loopback that nothing listens on, below
# Linux's ephemeral range (32768 and up by default), where an outgoing
# connection cannot take it before the server binds it.
freeport() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  return 1
}

# serve IMAGE ARGS...: starts a container of IMAGE on the host's network with
# ARGS, in which the word PORT is replaced by a free loopback port; waits until
# that port answers PING with +PONG, and prints "CONTAINER PORT". It tries
# three ports. The container carries this run's label.
serve() {
  local image=$1 port id reply args a
  shift
  for _ in 1 2 3; do
    port=$(freeport)
    args=()
    for a in "$@"; do [ "$a" = PORT ] && args+=("$port") || args+=("$a"); done
    # shellcheck disable=SC2086 # SERVE_OPTS: extra docker run flags, word-split
    id=$(docker run -d --network host ${SERVE_OPTS:-} --label windowstore.test=true --label "windowstore.run=$WINDOWSTORE_RUN_ID" \
      "$image" "${args[@]}" 2>&1) || {
      echo "docker run $image: $id" >&2
      return 1
    }
    for _ in $(seq 100); do
      reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 && timeout 1 head -c 7 <&3) 2>/dev/null || true)
      if [ "${reply%$'\r'}" = "+PONG" ]; then
        echo "$id $port"
        return 0
      fi
      [ "$(docker inspect -f '{{.State.Running}}' "$id" 2>/dev/null)" = true ] || break
      sleep 0.1
    done
    docker rm -f "$id" >/dev/null 2>&1 || true # the port was taken, or the server did not start: another port
  done
  return 1
}

# Host networking: a probe (a static Go binary in an image of its own, built
# in seconds, no registry needed) on the host's network must answer on loopback.
probe=windowstore/hostnet-probe:v1
if ! docker image inspect "$probe" >/dev/null 2>&1; then
  pdir=$(mktemp -d)
  (cd tests && CGO_ENABLED=0 go build -o "$pdir/hostnet" ./harness/cmd/hostnet) ||
    die "cannot build the host-networking probe (tests/harness/cmd/hostnet)" "check the Go installation: go version"
  tar -C "$pdir" -c hostnet | docker import -c 'ENTRYPOINT ["/hostnet"]' - "$probe" >/dev/null
  rm -rf "$pdir"
fi
if s=$(serve "$probe" PORT); then
  docker rm -f "${s%% *}" >/dev/null 2>&1 || true
  say "pre-flight: host networking works"
else
  die "a container on the host's network (docker run --network host) is not reachable on 127.0.0.1" \
    "use a Docker engine that runs on this machine, not in a VM (Docker Desktop) or rootless: systemctl start docker && unset DOCKER_HOST"
fi

# Images: the given ones, or local ones built from Debian packages.
need_build=false
for v in REDIS70 REDIS80 VALKEY VALKEY9; do
  i="${v}_IMAGE"
  [ -n "${!i:-}" ] || need_build=true
done
if $need_build; then
  if ! bash scripts/images.sh --check >/dev/null 2>&1; then
    # Building images needs debootstrap, and root (debootstrap, chroot).
    [ "$(id -u)" -eq 0 ] || die "the server images must be built once, which needs root (debootstrap)" "sudo ./scripts/images.sh"
    if ! command -v debootstrap >/dev/null 2>&1; then
      command -v apt-get >/dev/null 2>&1 ||
        die "building the server images needs debootstrap, and there is no apt-get to install it" "install debootstrap with your package manager, or set REDIS70_IMAGE, REDIS80_IMAGE, VALKEY_IMAGE and VALKEY9_IMAGE"
      say "installing debootstrap (apt-get update && apt-get install debootstrap)"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq debootstrap >/dev/null
    fi
    say "building the server images from Debian packages (scripts/images.sh, about two minutes, once)"
  fi
  while IFS= read -r line; do
    name=${line%%=*}
    [ -n "${!name:-}" ] || export "$line"
  done < <(bash scripts/images.sh)
fi

# Every area this script can provide must run: a missing one fails.
req=redis70,redis80,valkey,valkey9,cluster,replication,tls,faults
if [ -n "${TAIRHASH_IMAGE:-}${TAIRHASH_ADDR:-}" ]; then req=$req,tairhash; fi
export WINDOWSTORE_REQUIRE="${WINDOWSTORE_REQUIRE:-$req}"
say "servers: REDIS70_IMAGE=$REDIS70_IMAGE REDIS80_IMAGE=$REDIS80_IMAGE VALKEY_IMAGE=$VALKEY_IMAGE VALKEY9_IMAGE=$VALKEY9_IMAGE${TAIRHASH_IMAGE:+ TAIRHASH_IMAGE=$TAIRHASH_IMAGE}"
say "required areas (WINDOWSTORE_REQUIRE): $WINDOWSTORE_REQUIRE"
$quick && say "extra go test arguments ($*): vet, fuzzing, the benchmark check and the compose check are skipped"

# ---- the library ------------------------------------------------------------
section "unit tests (every module but tests/: no server)"
# The modules of go.work: the library (rueidis alone), windowctl, the Lua
# checks, metrics/prom, metrics/otel, the measuring tools; tests/ is the integration suite, below.
mapfile -t modules < <(go list -m -f '{{.Dir}}' | sed "s|^$PWD|.|")
if ! $quick; then
  for m in "${modules[@]}"; do (cd "$m" && go vet ./...); done
  gofmt_out=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
  [ -z "$gofmt_out" ] || { echo "gofmt would change:"; echo "$gofmt_out"; exit 1; }
  (cd tools && go run ./figures -check)
fi
for m in "${modules[@]}"; do
  [ "$m" = ./tests ] && continue
  (cd "$m" && go test -count=1 "$@" ./...)
done

if ! $quick; then
  # A count, not a duration: with -fuzztime 3s, Go 1.26's fuzz coordinator
  # can fail a target with "context deadline exceeded" as the time runs out,
  # having found nothing (golang/go#75804, fixed in Go 1.27).
  section "fuzz targets, 100,000 inputs each"
  while IFS=: read -r file fn; do
    dir=./$(dirname "$file")
    say "fuzz $fn in $dir"
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime 100000x "$dir"
  done < <(grep -rHo --include='*_test.go' --exclude-dir=tests --exclude-dir=metrics '^func Fuzz[A-Za-z0-9_]*' . |
    sed -e 's|^\./||' -e 's|:func |:|' | sort)
fi

# ---- the integration suite --------------------------------------------------
section "integration tests (tests module, real servers)"
report=$(mktemp -d)/testreport # reads go test -json: failures in full, skips with their reasons, the slowest tests
verbose=
for a in "$@"; do case "$a" in -v | -v=true | -test.v | -test.v=true) verbose=-v ;; esac; done
json=${TMPDIR:-/tmp}/windowstore-suite-$WINDOWSTORE_RUN_ID.json # every test's log, with the figures tests print
say "the suite's full log (go test -json) goes to $json"
(cd tests && go build -o "$report" ./harness/cmd/testreport &&
  go test -json -count=1 -timeout 15m -parallel "${WINDOWSTORE_PARALLEL:-12}" "$@" ./... | tee "$json" | "$report" $verbose)

if $quick; then section; exit 0; fi

# ---- printed checks ---------------------------------------------------------
section "benchmark regression check (printed, never asserted)"
pin=()
[ "$(nproc 2>/dev/null || echo 1)" -lt 2 ] || pin=(--cpuset-cpus 1)
if s=$(SERVE_OPTS="${pin[*]:-}" serve "$REDIS70_IMAGE" redis-server --port PORT --bind 127.0.0.1 --save '' --appendonly no); then
  # Server CPU per operation beside the naive script, the ZSET log and raw
  # HINCRBY: the figures that matter; the server runs on a core of its own
  # where the machine has two. The targets' pairs are three (one pair's
  # ratio moves by a fifth from run to run).
  (cd tools && go run ./bench --addr "redis://127.0.0.1:${s##* }" --keys 2000 --duration 300ms --runs 1 --pairs 3 --buckets 10) ||
    say "the benchmark did not run (not a failure: it is a printed check)"
  docker rm -f "${s%% *}" >/dev/null 2>&1 || true
else
  say "*** benchmark check NOT RUN: no server from $REDIS70_IMAGE ***" >&2
fi

section "compose file: config, up, smoke test, down"
if docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; then
  # windowstored's image, from the local Go toolchain (a few seconds), so that
  # the smoke test runs it too.
  if [ -z "${WINDOWSTORED_IMAGE:-}" ]; then
    eval "$(./scripts/windowstored-image.sh)"
    export WINDOWSTORED_IMAGE
  fi
  bash compose/smoke.sh
else
  say "*** SKIPPED: compose/docker-compose.yml not checked: neither 'docker compose' (the v2 plugin) nor docker-compose is installed; install one: apt-get install docker-compose ***" >&2
fi
