#!/usr/bin/env bash
# Validates compose/docker-compose.yml and smoke-tests it: config, up, windowctl
# detect and add on each service, down. CI runs it with the local images.
# Uses a project name and ports of its own so it never touches a developer's
# running stack.
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=windowstore-smoke
export REDIS70_PORT=${REDIS70_PORT:-16370} REDIS80_PORT=${REDIS80_PORT:-16380} VALKEY_PORT=${VALKEY_PORT:-16381} TAIRHASH_PORT=${TAIRHASH_PORT:-16382}
dc() { docker-compose -f compose/docker-compose.yml "$@"; }
profiles=()
if [ -n "${TAIRHASH_IMAGE:-}" ]; then profiles=(--profile tairhash); fi

dc "${profiles[@]}" config -q
trap 'dc "${profiles[@]}" down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
dc "${profiles[@]}" up -d >/dev/null 2>&1

bin=$(mktemp -d)/windowctl
go build -o "$bin" ./cmd/windowctl

check() { # port want-backend want-field-ttl
  local out
  for _ in $(seq 50); do
    out=$("$bin" --addr "redis://127.0.0.1:$1" --json detect 2>/dev/null) && break
    sleep 0.2
  done
  echo "compose smoke: 127.0.0.1:$1 $out"
  case "$out" in *"\"backend\":\"$2\",\"field_ttl\":$3"*) ;; *) echo "compose smoke: want backend $2 field_ttl $3" >&2; exit 1 ;; esac
  out=$("$bin" --addr "redis://127.0.0.1:$1" --json --prefix smoke: add k 3)
  [ "$out" = '{"key":"k","sum":3}' ] || { echo "compose smoke: add gave $out" >&2; exit 1; }
}
check "$REDIS70_PORT" nativehash false
check "$REDIS80_PORT" nativehash true
check "$VALKEY_PORT" nativehash false
if [ ${#profiles[@]} -gt 0 ]; then check "$TAIRHASH_PORT" tairhash true; fi
echo "compose smoke: ok"
