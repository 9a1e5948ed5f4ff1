#!/usr/bin/env bash
# Validates compose/docker-compose.yml and smoke-tests it: config, up, windowctl
# detect and add on each service, down. CI runs it with the local images.
# Uses a project name and ports of its own so it never touches a developer's
# running stack.
#
# It runs with `docker compose` (the v2 plugin) or `docker-compose` (v1),
# whichever exists (COMPOSE="docker-compose" picks one), and says which.
# The ports are free ones picked at run time unless REDIS70_PORT etc. are set.
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=windowstore-smoke

if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose <<<"$COMPOSE"
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
else
  echo "compose smoke: neither 'docker compose' (the v2 plugin) nor docker-compose is installed: install one (apt-get install docker-compose)" >&2
  exit 1
fi
echo "compose smoke: using ${compose[*]} ($("${compose[@]}" version --short 2>/dev/null || "${compose[@]}" version | head -n1))"
dc() { "${compose[@]}" -f compose/docker-compose.yml "$@"; }

# pickport sets the variable $1 to a loopback port nothing listens on (and
# that no other service of this run was given). The ports are below Linux's
# ephemeral range (32768 and up by default), so an outgoing connection of a
# concurrent process cannot take one between the pick and docker's bind.
taken=" "
pickport() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 12000))
    case "$taken" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      taken="$taken$p "
      export "$1=$p"
      return
    fi
  done
  echo "compose smoke: no free port" >&2
  exit 1
}
ports=(REDIS70_PORT REDIS80_PORT VALKEY_PORT TAIRHASH_PORT WINDOWSTORED_HTTP_PORT WINDOWSTORED_GRPC_PORT)
picked=()
for v in "${ports[@]}"; do
  if [ -z "${!v:-}" ]; then pickport "$v"; picked+=("$v"); fi
done
profiles=()
if [ -n "${TAIRHASH_IMAGE:-}" ]; then profiles=(--profile tairhash); fi
if [ -n "${WINDOWSTORED_IMAGE:-}" ]; then profiles+=(--profile windowstored); fi

dc "${profiles[@]}" config -q
trap 'dc "${profiles[@]}" down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
log=$(mktemp)
# A port can still be taken between the pick and docker's bind (another
# process on a shared machine): then the stack comes down and up again on
# freshly picked ports, at most 3 times. Any other failure fails at once.
for try in 1 2 3; do
  if dc "${profiles[@]}" up -d >"$log" 2>&1; then break; fi
  if [ "$try" = 3 ] || [ "${#picked[@]}" = 0 ] || ! grep -q "address already in use" "$log"; then
    cat "$log" >&2
    echo "compose smoke: up failed" >&2
    exit 1
  fi
  echo "compose smoke: a picked port was taken meanwhile; up again on other ports"
  dc "${profiles[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  for v in "${picked[@]}"; do pickport "$v"; done
done

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
check "$REDIS70_PORT" nativehash-plain false
check "$REDIS80_PORT" nativehash-fieldttl true
check "$VALKEY_PORT" nativehash-plain false
if [ -n "${TAIRHASH_IMAGE:-}" ]; then check "$TAIRHASH_PORT" tairhash true; fi
if [ -n "${WINDOWSTORED_IMAGE:-}" ]; then
  # windowstored: healthy, then its example domain's limit of 3 per minute
  # admits 3 requests and refuses the fourth (HTTP 429). HTTP/1.0 over
  # bash's /dev/tcp: a fresh machine may have no curl.
  httpcode() { # PATH [BODY]: prints the status code
    local body=${2:-} method=GET
    [ -z "$body" ] || method=POST
    exec 3<>"/dev/tcp/127.0.0.1/$WINDOWSTORED_HTTP_PORT" || { echo 000; return; }
    printf '%s %s HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s' "$method" "$1" "${#body}" "$body" >&3
    local line
    read -r line <&3 || line=""
    exec 3<&-
    line=${line#* }
    echo "${line%% *}"
  }
  code=000
  for _ in $(seq 100); do
    code=$(httpcode /healthcheck 2>/dev/null || true)
    [ "$code" = 200 ] && break
    sleep 0.2
  done
  [ "$code" = 200 ] || { dc "${profiles[@]}" logs windowstored >&2; echo "compose smoke: windowstored's health check gave $code" >&2; exit 1; }
  codes=""
  for _ in 1 2 3 4; do
    codes="$codes $(httpcode /json '{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"smoke"}]}]}')"
  done
  echo "compose smoke: windowstored answered$codes"
  [ "$codes" = " 200 200 200 429" ] || { echo "compose smoke: want 200 200 200 429" >&2; exit 1; }
fi
echo "compose smoke: ok"
