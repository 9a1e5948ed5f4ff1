# Sourced by the profiling scripts (profile.sh, callgrind.sh): Redis 7.0.15
# built from the source tarball Debian ships (checked against its SHA-256),
# with symbols and frame pointers, once, under
# ${XDG_CACHE_HOME:-~/.cache}/windowstore. After `symbolized_redis`:
#
#   server   the redis-server binary
#   cli      the redis-cli binary
#
# It needs a C compiler, make and curl. need_tools checks a script's tools.

symbolized_redis() {
  local version=7.0.15
  local sha=4b1dc4ee6d622a09fff9c6777191209750fb5e5a725ef78ea012d6eef4c22982
  local url=https://deb.debian.org/debian/pool/main/r/redis/redis_$version.orig.tar.gz
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/windowstore
  server=$cache/redis-$version/src/redis-server
  cli=$cache/redis-$version/src/redis-cli
  if [ ! -x "$server" ]; then
    mkdir -p "$cache"
    echo "building Redis $version with symbols in $cache (once, a few minutes)" >&2
    curl -fsSL -o "$cache/redis-$version.tar.gz" "$url"
    echo "$sha  $cache/redis-$version.tar.gz" | sha256sum -c --quiet
    tar -xzf "$cache/redis-$version.tar.gz" -C "$cache"
    make -C "$cache/redis-$version" -j"$(nproc)" BUILD_TLS=no OPTIMIZATION=-O2 CFLAGS=-fno-omit-frame-pointer >"$cache/build.log" 2>&1 ||
      { tail -20 "$cache/build.log" >&2; return 1; }
  fi
}

# free_port prints a port on 127.0.0.1 that nothing listens on.
free_port() {
  local port
  for _ in $(seq 20); do
    port=$((20000 + RANDOM % 10000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  done
  echo "$port"
}

# need_tools WHO HINT TOOL... exits, saying which are missing and HINT (how
# to install them), unless every TOOL is on PATH.
need_tools() {
  local who=$1 hint=$2 missing=() c
  shift 2
  for c in "$@"; do command -v "$c" >/dev/null || missing+=("$c"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$who: missing ${missing[*]}; $hint" >&2
    exit 1
  fi
}

# luaprof_redis: the same Redis, built again in a tree of its own whose
# Functions engine keeps Lua's debug library (stock Redis sets debug to nil),
# for scripts/luaprof.sh: never for serving. After it, server is that binary.
luaprof_redis() {
  symbolized_redis
  local version=7.0.15
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/windowstore
  local tree=$cache/redis-$version-luaprof
  if [ ! -x "$tree/src/redis-server" ]; then
    echo "building Redis $version with Lua's debug library kept in $tree (once, a few minutes)" >&2
    rm -rf "$tree"
    mkdir -p "$tree"
    tar -xzf "$cache/redis-$version.tar.gz" -C "$tree" --strip-components=1
    grep -q '"debug = nil\\n"' "$tree/src/function_lua.c" || { echo "luaprof: function_lua.c has changed" >&2; return 1; }
    sed -i 's/"debug = nil\\n"/""/' "$tree/src/function_lua.c"
    make -C "$tree" -j"$(nproc)" BUILD_TLS=no OPTIMIZATION=-O2 >"$cache/build-luaprof.log" 2>&1 ||
      { tail -20 "$cache/build-luaprof.log" >&2; return 1; }
  fi
  server=$tree/src/redis-server
}
