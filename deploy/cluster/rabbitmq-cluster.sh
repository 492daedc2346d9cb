#!/usr/bin/env bash
# deploy/cluster/rabbitmq-cluster.sh: a real 3-node RabbitMQ cluster on this machine, beside
# the machine's own node (which it does not touch): distinct node names, AMQP ports and
# distribution ports, its own Erlang cookie and data directories, no plugins.
#
#   rabbitmq-cluster.sh start [BASE_PORT] [DIR]   nodes sp-rmq1..3@localhost on AMQP ports
#                                                 BASE..BASE+2 (default 5701), joined into one
#                                                 cluster; prints DIR and the comma-separated
#                                                 SAVEPOINT_AMQP_URL of the three nodes
#   rabbitmq-cluster.sh stop DIR                  stop every node started in DIR (by pid)
#   rabbitmq-cluster.sh ctl DIR N ARGS...          rabbitmqctl on node N (1..3), e.g.
#                                                 `ctl DIR 2 stop_app`, `ctl DIR 2 start_app`
#   rabbitmq-cluster.sh kill DIR N                SIGKILL node N
#   rabbitmq-cluster.sh restart DIR N             start node N again (after kill or stop)
#
# Quorum queues declared on this cluster (Savepoint's task and dead-letter queues are quorum
# queues) get a member on each of the three nodes. Each node's pid is in DIR/N/pid.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rmq=/usr/lib/rabbitmq/bin

log() { echo "rabbitmq-cluster: $*" >&2; }

node_env() { # DIR N: the environment of node N
  local dir=$1 n=$2 base
  base=$(cat "$dir/base")
  echo "HOME=$dir" \
    "RABBITMQ_NODENAME=sp-rmq$n@localhost" \
    "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1" \
    "RABBITMQ_NODE_PORT=$((base + n - 1))" \
    "RABBITMQ_DIST_PORT=$((base + 20000 + n - 1))" \
    "RABBITMQ_CONF_ENV_FILE=$dir/env.conf" \
    "RABBITMQ_CONFIG_FILE=$dir/$n/rabbitmq.conf" \
    "RABBITMQ_ADVANCED_CONFIG_FILE=$dir/$n/advanced.config" \
    "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" \
    "RABBITMQ_MNESIA_BASE=$dir/$n/mnesia" \
    "RABBITMQ_LOG_BASE=$dir/$n/log" \
    "RABBITMQ_PID_FILE=$dir/$n/pid" \
    "ERL_EPMD_ADDRESS=127.0.0.1"
}

ctl() { # DIR N ARGS...
  local dir=$1 n=$2; shift 2
  # shellcheck disable=SC2046
  env $(node_env "$dir" "$n") "$rmq/rabbitmqctl" -n "sp-rmq$n@localhost" "$@"
}

start_node() { # DIR N
  local dir=$1 n=$2
  mkdir -p "$dir/$n/log" "$dir/$n/mnesia"
  # shellcheck disable=SC2046
  env $(node_env "$dir" "$n") "$rmq/rabbitmq-server" -detached >>"$dir/$n/startup.log" 2>&1
  # rabbitmqctl fails at once while the node is not yet registered with epmd: poll first.
  local i
  for i in $(seq 1 120); do
    ctl "$dir" "$n" -q await_startup --timeout 120 >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "node $n did not start"
  tail -20 "$dir/$n/log/"*.log >&2 || true
  return 1
}

start() {
  local base=${1:-5701} dir=${2:-}
  [[ -n $dir ]] || dir=$(mktemp -d /tmp/savepoint-rabbitmq-cluster.XXXXXX)
  mkdir -p "$dir"
  echo "$base" >"$dir/base"
  : >"$dir/env.conf"
  echo "[]." >"$dir/enabled_plugins"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | cut -c1-40 >"$dir/.erlang.cookie"
  chmod 400 "$dir/.erlang.cookie"
  local n
  for n in 1 2 3; do
    mkdir -p "$dir/$n"
    printf 'listeners.tcp.default = 127.0.0.1:%s\nloopback_users = none\n' "$((base + n - 1))" >"$dir/$n/rabbitmq.conf"
    echo "[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}]." >"$dir/$n/advanced.config"
  done
  start_node "$dir" 1 || { stop "$dir"; return 1; }
  for n in 2 3; do
    start_node "$dir" "$n" || { stop "$dir"; return 1; }
    ctl "$dir" "$n" -q stop_app >/dev/null
    ctl "$dir" "$n" -q join_cluster "sp-rmq1@localhost" >/dev/null
    ctl "$dir" "$n" -q start_app >/dev/null
  done
  local running
  running=$(ctl "$dir" 1 -q cluster_status --formatter json | grep -o '"running_nodes":\[[^]]*\]' || true)
  log "cluster on AMQP ports $base..$((base + 2)): $running (files in $dir)"
  echo "$dir"
  echo "amqp://guest:guest@127.0.0.1:$base/%2f,amqp://guest:guest@127.0.0.1:$((base + 1))/%2f,amqp://guest:guest@127.0.0.1:$((base + 2))/%2f"
}

node_pid() { cat "$1/$2/pid" 2>/dev/null || true; }

kill_node() { # DIR N
  local pid
  pid=$(node_pid "$1" "$2")
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
}

stop() {
  local dir=$1 n
  for n in 1 2 3; do kill_node "$dir" "$n"; done
  # The Erlang port mapper daemon outlives the nodes and serves the machine's own node too:
  # it is left running.
  rm -rf "$dir"
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  ctl) shift; ctl "$@" ;;
  kill) shift; kill_node "$@" ;;
  restart) shift; start_node "$@" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
: "$here"
