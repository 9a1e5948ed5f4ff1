#!/usr/bin/env bash
# Lua instructions per operation, line by line: runs a Redis 7.0 whose Lua
# keeps its debug library (built once, as callgrind.sh's Redis), drives one
# operation of the store at it with tools/cgprobe --luaprof, which hooks the
# store's loaded libraries with a count hook after the warm-up, and prints the
# instructions per operation: the total, each file's and the top lines. Like
# callgrind's count it is the same from run to run, and it says which lines
# of which script a change moves.
#
#   ./scripts/luaprof.sh allow3                        1,000 operations, one caller, the top 40 lines
#   N=300 TOP=80 ./scripts/luaprof.sh record6 --step 300ms
#
# It needs Go, a C compiler, make and curl (Redis is built once, under
# ${XDG_CACHE_HOME:-~/.cache}/windowstore).
set -euo pipefail
cd "$(dirname "$0")/.."

op=${1:?usage: ./scripts/luaprof.sh OPERATION [cgprobe flags]}
shift
n=${N:-1000}
top=${TOP:-40}
# shellcheck source=scripts/lib/symbolized-redis.sh
. scripts/lib/symbolized-redis.sh
port=${LUAPROF_PORT:-$(free_port)}
need_tools luaprof "on Debian: apt-get install gcc make curl" cc make curl
luaprof_redis

dir=$(mktemp -d)
(cd tools && go build -o "$dir/cgprobe" ./cgprobe)
"$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$dir/server.log" 2>&1 &
srv=$!
trap 'kill "$srv" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
kill -0 "$srv" 2>/dev/null || { cat "$dir/server.log" >&2; exit 1; }
"$dir/cgprobe" --addr "127.0.0.1:$port" --op "$op" --n "$n" --conc 1 --luaprof "$top" "$@"
