# Sourced by the benchmark scripts (bench.sh, rls-bench.sh): a Redis 7.0
# server in a container pinned to the machine's last core, the client pinned
# to the others. After `pinned_redis NAME PORT`:
#
#   server_pin   docker run's pinning flags (empty on one core)
#   client_pin   the prefix that pins a client command (empty on one core or
#                without taskset)
#   cpus         the machine's cores
#   version      the server's version, once it answers on 127.0.0.1:PORT
#
# The image is REDIS70_IMAGE (default: the one scripts/images.sh builds). The
# caller removes the container (docker rm -f NAME) in its own EXIT trap.

pinned_redis() {
  local name=$1 port=$2
  if [ -z "${REDIS70_IMAGE:-}" ]; then
    REDIS70_IMAGE=$(./scripts/images.sh | sed -n 's/^REDIS70_IMAGE=//p')
  fi
  cpus=$(nproc 2>/dev/null || echo 1)
  server_pin=() client_pin=()
  if [ "$cpus" -ge 2 ]; then
    server_pin=(--cpuset-cpus "$((cpus - 1))")
    client_pin=(taskset -c "0-$((cpus - 2))")
    command -v taskset >/dev/null || client_pin=()
  fi
  docker run -d --rm --name "$name" --label windowstore.test=true --network host "${server_pin[@]}" \
    "$REDIS70_IMAGE" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  version=$(docker exec "$name" redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
}
