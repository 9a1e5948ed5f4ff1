#!/usr/bin/env bash
# Builds windowstored's image with the local Go toolchain and Docker alone (no
# registry): the static binary and the CA certificates, nothing else, as
# cmd/windowstored/Dockerfile builds it where a registry is reachable.
#
#   ./scripts/windowstored-image.sh    prints WINDOWSTORED_IMAGE=local/windowstored:dev
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${WINDOWSTORED_IMAGE:-local/windowstored:dev}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd cmd/windowstored && CGO_ENABLED=0 go build -trimpath -o "$dir/root/windowstored" .)
mkdir -p "$dir/root/etc/ssl/certs" "$dir/root/etc/windowstored"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$dir/root/etc/ssl/certs/"
fi
tar -C "$dir/root" -c . | docker import \
  --change 'USER 65534:65534' \
  --change 'EXPOSE 8080 8081' \
  --change 'ENTRYPOINT ["/windowstored"]' \
  --change 'CMD ["--config", "/etc/windowstored/config.yaml", "--grpc", "0.0.0.0:8081", "--http", "0.0.0.0:8080"]' \
  - "$tag" >/dev/null
echo "windowstored-image: built $tag" >&2
echo "WINDOWSTORED_IMAGE=$tag"
