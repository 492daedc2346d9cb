#!/usr/bin/env bash
# deploy/cluster/redis-cluster.sh: a real 6-node Redis Cluster (3 masters, 3 replicas) on
# local ports, for tests and for trying Savepoint on a cluster.
#
#   redis-cluster.sh start [BASE_PORT] [DIR]   start nodes BASE..BASE+5 (default 7000) with
#                                              their files in DIR (default a new temp dir),
#                                              create the cluster, wait until it is ok; prints
#                                              DIR and the SAVEPOINT_REDIS_URL to use
#   redis-cluster.sh stop DIR                  stop every node started in DIR (by pid)
#   redis-cluster.sh restart-node DIR PORT     start a node again (after a kill) with its
#                                              identity: it rejoins, as a replica if its
#                                              replica was promoted meanwhile
#   redis-cluster.sh test [BASE_PORT]          start, run the integration suite's core groups
#                                              (seed, crash, delivery, api) against it, stop
#
# Nodes run without persistence (like the machine's Redis; REDIS_CLUSTER_AOF=yes starts or
# restarts them with an append-only file, fsynced on every write) and with a short
# cluster-node-timeout (REDIS_CLUSTER_NODE_TIMEOUT_MS, default 1000) so a failover takes
# seconds, not the default 15 s. Each node's pid is in DIR/<port>/pid; `stop` kills by those
# pids only, never by name.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
node_timeout=${REDIS_CLUSTER_NODE_TIMEOUT_MS:-1000}

log() { echo "redis-cluster: $*" >&2; }

start_node() { # DIR PORT: one node; its nodes.conf in DIR/PORT keeps its identity across restarts
  local dir=$1 port=$2
  mkdir -p "$dir/$port"
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$dir/$port/nodes.conf" --cluster-node-timeout "$node_timeout" \
    --dir "$dir/$port" --save "" --appendonly "${REDIS_CLUSTER_AOF:-no}" --appendfsync always --daemonize yes \
    --pidfile "$dir/$port/pid" --logfile "$dir/$port/log"
}

start() {
  local base=${1:-7000} dir=${2:-}
  [[ -n $dir ]] || dir=$(mktemp -d /tmp/savepoint-redis-cluster.XXXXXX)
  mkdir -p "$dir"
  local port addrs=()
  for port in $(seq "$base" $((base + 5))); do
    start_node "$dir" "$port"
    addrs+=("127.0.0.1:$port")
  done
  for port in $(seq "$base" $((base + 5))); do
    for _ in $(seq 1 50); do
      redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
      sleep 0.1
    done
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log" >&2; stop "$dir"; return 1; }
  for _ in $(seq 1 300); do
    local ok=1
    for port in $(seq "$base" $((base + 5))); do
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
    done
    # Every replica attached to its master and in sync (so WAIT can be answered and a
    # failover has someone to promote).
    [[ $(redis-cli -p "$base" cluster nodes | grep -c ' slave ') -eq 3 ]] || ok=0
    local linked=0
    for port in $(seq "$base" $((base + 5))); do
      redis-cli -p "$port" info replication 2>/dev/null | grep -q 'master_link_status:up' && linked=$((linked + 1))
    done
    [[ $linked -eq 3 ]] || ok=0
    if [[ $ok == 1 ]]; then
      log "cluster ok on ports $base..$((base + 5)) (files in $dir)"
      echo "$dir"
      echo "redis+cluster://127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
      return 0
    fi
    sleep 0.1
  done
  log "cluster did not become ok"; stop "$dir"; return 1
}

stop() {
  local dir=$1 pidfile pid
  for pidfile in "$dir"/*/pid; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}

run_tests() {
  local base=${1:-7000} out url
  out=$(start "$base")
  CLUSTER_DIR=$(sed -n 1p <<<"$out")
  url=$(sed -n 2p <<<"$out")
  trap 'stop "$CLUSTER_DIR"' EXIT
  log "core groups against $url"
  cd "$repo"
  # The long-poll test watches one Redis with MONITOR, which a cluster spreads over its
  # masters (it runs against the single node in the main suite).
  SAVEPOINT_TEST_REDIS_URL=$url SAVEPOINT_TEST_FORCE_LOCAL=1 \
    cargo test --workspace --all-features --test services --test inproc \
    -- seed:: crash:: delivery:: http_api:: --skip result_long_poll_waits_until_the_run_ends
  log "keys per master after the run: $(for p in $(seq "$base" $((base + 2))); do
    printf '%s=%s ' "$p" "$(redis-cli -p "$p" dbsize)"; done)"
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  restart-node) shift; start_node "$@" ;;
  test) shift; run_tests "$@" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
