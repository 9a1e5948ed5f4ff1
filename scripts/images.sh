#!/usr/bin/env bash
# Builds the local server images the integration tests use, from Debian packages,
# because this machine reaches no container registry. See docs/testing.md ("Tests").
#
# Each image is tagged with a recipe version; an image that already exists is kept,
# so a second run costs a few milliseconds. Bump RECIPE when this file changes.
#
# Prints the environment the test suite reads (REDIS70_IMAGE=... lines) on stdout.
# With --check it builds nothing: it exits 0 when every image is present, 1 if not.
#
# Building needs root (debootstrap, chroot) and debootstrap; when debootstrap is
# missing it says so, then installs it (apt-get update && apt-get install debootstrap).
set -euo pipefail

RECIPE=v1
REDIS70_TAG="local/redis:7.0-bookworm-${RECIPE}"
REDIS80_TAG="local/redis:8.0-trixie-${RECIPE}"
VALKEY_TAG="local/valkey:8.1-trixie-${RECIPE}"
# Debian's unstable suite moves: the tag names the version the build checks
# (valkey_version below), and a build that finds another version fails.
VALKEY9_VERSION=9.1
VALKEY9_TAG="local/valkey:${VALKEY9_VERSION}-sid-${RECIPE}"

log() { echo "images: $*" >&2; }

# mirror prints the Debian mirror this machine's apt uses; no host name is written here.
mirror() {
  local m
  m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -e security -e nodesource -e google | head -n1 || true)
  if [ -z "$m" ]; then
    m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -n1 || true)
  fi
  [ -n "$m" ] || { log "no Debian mirror found in the apt sources"; exit 1; }
  echo "$m"
}

# entrypoint writes an entrypoint that takes the official images' arguments:
# "redis-server [args]", "valkey-server [args]", bare "--flag" arguments, or a .conf file.
entrypoint() {
  local server=$1 dst=$2
  cat >"$dst" <<SH
#!/bin/sh
set -e
case "\$1" in
  redis-server|valkey-server) shift ;;
  -*|*.conf|"") ;;
  *) exec "\$@" ;;
esac
if [ -n "\$1" ] && [ "\${1%.conf}" != "\$1" ]; then
  conf=\$1; shift
  exec /usr/bin/${server} "\$conf" --protected-mode no "\$@"
fi
exec /usr/bin/${server} --protected-mode no "\$@"
SH
  chmod 755 "$dst"
}

# rootfs SUITE PACKAGES DIR builds a minimal root filesystem.
rootfs() {
  local suite=$1 pkgs=$2 dir=$3
  command -v debootstrap >/dev/null || {
    log "installing debootstrap (apt-get update && apt-get install debootstrap)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq debootstrap >/dev/null
  }
  log "debootstrap $suite ($pkgs), about a minute"
  debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$(mirror)" >"$dir.log" 2>&1 || {
    tail -20 "$dir.log" >&2; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  mkdir -p "$dir/data"
}

# import DIR SERVER TAG turns a root filesystem into an image.
import() {
  local dir=$1 server=$2 tag=$3
  LC_ALL=C chroot "$dir" "/usr/bin/$server" --version >&2
  entrypoint "$server" "$dir/usr/local/bin/docker-entrypoint.sh"
  tar -C "$dir" --numeric-owner -c . | docker import \
    -c 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
    -c "CMD [\"$server\"]" -c 'WORKDIR /data' -c 'EXPOSE 6379' \
    -c 'ENV LC_ALL=C' - "$tag" >/dev/null
  log "built $tag"
}

have() { docker image inspect "$1" >/dev/null 2>&1; }

if [ "${1:-}" = --check ]; then
  have "$REDIS70_TAG" && have "$REDIS80_TAG" && have "$VALKEY_TAG" && have "$VALKEY9_TAG"
  exit
fi

work=$(mktemp -d /tmp/windowstore-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

if ! have "$REDIS70_TAG"; then
  rootfs bookworm redis-server "$work/bookworm"
  import "$work/bookworm" redis-server "$REDIS70_TAG"
fi
if ! have "$REDIS80_TAG" || ! have "$VALKEY_TAG"; then
  rootfs trixie redis-server,valkey-server "$work/trixie"
  import "$work/trixie" redis-server "$REDIS80_TAG"
  import "$work/trixie" valkey-server "$VALKEY_TAG"
fi

if ! have "$VALKEY9_TAG"; then
  rootfs sid valkey-server "$work/sid"
  got=$(LC_ALL=C chroot "$work/sid" /usr/bin/valkey-server --version | sed -n 's/.*v=\([0-9]*\.[0-9]*\).*/\1/p')
  [ "$got" = "$VALKEY9_VERSION" ] || { log "Debian sid has valkey-server $got, not $VALKEY9_VERSION: update VALKEY9_VERSION"; exit 1; }
  import "$work/sid" valkey-server "$VALKEY9_TAG"
fi

echo "REDIS70_IMAGE=$REDIS70_TAG"
echo "REDIS80_IMAGE=$REDIS80_TAG"
echo "VALKEY_IMAGE=$VALKEY_TAG"
echo "VALKEY9_IMAGE=$VALKEY9_TAG"
