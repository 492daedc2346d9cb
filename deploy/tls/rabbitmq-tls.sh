#!/usr/bin/env bash
# deploy/tls/rabbitmq-tls.sh: a second, standalone RabbitMQ node that speaks AMQP only over TLS,
# beside the machine's own node (which it never touches): node sp-tls@localhost, its own Erlang
# cookie, config, data and log directories under DIR/rabbitmq, no plugins.
#
#   rabbitmq-tls.sh start DIR AMQPS_PORT [--mtls] [--server-cert NAME] [--plain-port PORT]
#                                        [--dist-port PORT]
#       AMQPS on 127.0.0.1:AMQPS_PORT with DIR/ca.pem, DIR/NAME.pem, DIR/NAME.key (certs.sh DIR
#       is run if DIR/ca.pem is missing; NAME defaults to server, `wronghost` for hostname
#       mismatch tests). No plain AMQP listener unless --plain-port. The peer certificate is
#       verified when sent (verify_peer); --mtls also makes it mandatory
#       (fail_if_no_peer_cert). Erlang distribution on --dist-port (default AMQPS_PORT+20000).
#       User guest/guest (loopback only, which 127.0.0.1 is). Returns once the node has booted
#       and `openssl s_client` verifies the TLS port against DIR/ca.pem.
#   rabbitmq-tls.sh stop DIR
#       stop that node (rabbitmqctl stop, then SIGKILL by pid if still alive) and delete
#       DIR/rabbitmq; the certificates in DIR are kept.
#   rabbitmq-tls.sh ctl DIR ARGS...
#       rabbitmqctl on that node, e.g. `ctl DIR list_connections`.
#
# URL for clients: amqps://guest:guest@localhost:AMQPS_PORT/%2f
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# The scripts under lib/, not the /usr/sbin wrappers: those switch to the rabbitmq user and
# read the machine's /etc/rabbitmq environment.
rmq=/usr/lib/rabbitmq/bin
node=sp-tls@localhost

usage() { sed -n '2,21p' "$0" >&2; exit 2; }
log() { echo "rabbitmq-tls: $*" >&2; }

node_env() { # DIR: the environment of the node (and of rabbitmqctl, for the cookie)
  local r=$1/rabbitmq
  echo "HOME=$r" \
    "RABBITMQ_NODENAME=$node" \
    "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1" \
    "RABBITMQ_DIST_PORT=$(cat "$r/dist_port")" \
    "RABBITMQ_CONF_ENV_FILE=$r/env.conf" \
    "RABBITMQ_CONFIG_FILE=$r/rabbitmq.conf" \
    "RABBITMQ_ADVANCED_CONFIG_FILE=$r/advanced.config" \
    "RABBITMQ_ENABLED_PLUGINS_FILE=$r/enabled_plugins" \
    "RABBITMQ_MNESIA_BASE=$r/mnesia" \
    "RABBITMQ_LOG_BASE=$r/log" \
    "RABBITMQ_PID_FILE=$r/pid" \
    "ERL_CRASH_DUMP=$r/erl_crash.dump" \
    "ERL_EPMD_ADDRESS=127.0.0.1"
}

ctl() { # DIR ARGS...
  local dir=$1; shift
  [[ -f $dir/rabbitmq/dist_port ]] || { log "no node state in $dir/rabbitmq"; return 1; }
  # shellcheck disable=SC2046
  env $(node_env "$dir") "$rmq/rabbitmqctl" -n "$node" "$@"
}

# The pid in DIR/rabbitmq/pid if it is still our node's beam, never the machine's node nor a
# reused pid: the node name is not on beam's command line, but `-home DIR/rabbitmq` is.
node_pid() {
  local pid
  pid=$(cat "$1/rabbitmq/pid" 2>/dev/null || true)
  [[ -n $pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-home $1/rabbitmq " && echo "$pid"
  return 0
}

port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }

start() {
  [[ $# -ge 2 ]] || usage
  local dir=$1 port=$2 mtls=false cert=server plain="" dist=""
  shift 2
  while [[ $# -gt 0 ]]; do
    case $1 in
      --mtls) mtls=true; shift ;;
      --server-cert) cert=${2:?--server-cert NAME}; shift 2 ;;
      --plain-port) plain=${2:?--plain-port PORT}; shift 2 ;;
      --dist-port) dist=${2:?--dist-port PORT}; shift 2 ;;
      *) usage ;;
    esac
  done
  dist=${dist:-$((port + 20000))}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -f $dir/ca.pem ]] || "$here/certs.sh" "$dir" >/dev/null
  [[ -f $dir/$cert.pem && -f $dir/$cert.key ]] || { log "no $dir/$cert.pem / $cert.key"; exit 1; }

  if [[ -n $(node_pid "$dir") ]]; then
    log "$node already running from $dir (pid $(node_pid "$dir")); stop it first"
    exit 1
  fi
  # A node of that name started from another DIR would make the start below fail obscurely.
  if epmd -names 2>/dev/null | grep -q "^name ${node%@*} "; then
    log "a node named $node is already registered with epmd (started from another DIR?)"
    exit 1
  fi
  local p
  for p in "$port" "$dist" $plain; do
    [[ $p =~ ^[0-9]+$ ]] && ((p > 0 && p < 65536)) || { log "bad port $p"; exit 1; }
    port_free "$p" || { log "port $p is in use"; exit 1; }
  done

  local r=$dir/rabbitmq
  rm -rf "$r" "$dir/rabbitmq-failed.log"
  mkdir -p "$r/log" "$r/mnesia"
  echo "$dist" >"$r/dist_port"
  : >"$r/env.conf" # so the machine's /etc/rabbitmq/rabbitmq-env.conf is not read
  echo "[]." >"$r/enabled_plugins"
  # Our own cookie (HOME=$r): rabbitmqctl with a wrong node name could not reach another node.
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | cut -c1-40 >"$r/.erlang.cookie"
  chmod 400 "$r/.erlang.cookie"
  {
    if [[ -n $plain ]]; then
      echo "listeners.tcp.default = 127.0.0.1:$plain"
    else
      echo "listeners.tcp = none"
    fi
    echo "listeners.ssl.default = 127.0.0.1:$port"
    echo "ssl_options.cacertfile = $dir/ca.pem"
    echo "ssl_options.certfile = $dir/$cert.pem"
    echo "ssl_options.keyfile = $dir/$cert.key"
    echo "ssl_options.verify = verify_peer"
    echo "ssl_options.fail_if_no_peer_cert = $mtls"
    # guest/guest stays usable: the default loopback_users only refuses it off 127.0.0.1.
  } >"$r/rabbitmq.conf"
  echo "[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}]." >"$r/advanced.config"

  # -detached forks; the erl_crash.dump of a failed boot goes to $r, not the current directory.
  # shellcheck disable=SC2046
  (cd "$r" && env $(node_env "$dir") "$rmq/rabbitmq-server" -detached >>"$r/startup.log" 2>&1)

  # rabbitmqctl fails at once while the node is not yet registered with epmd: poll, 90 s at
  # most, and give up early if the node's process has died.
  local deadline=$((SECONDS + 90)) up=0
  while ((SECONDS < deadline)); do
    if ctl "$dir" -q await_startup --timeout 30 >/dev/null 2>&1; then up=1; break; fi
    if [[ -f $r/pid && -z $(node_pid "$dir") ]]; then break; fi
    sleep 0.5
  done
  if [[ $up == 0 ]]; then
    log "$node did not start (its log is kept as $dir/rabbitmq-failed.log):"
    cat "$r"/log/"$node".log >"$dir/rabbitmq-failed.log" 2>/dev/null || true
    { grep -h -A3 '\[error\]' "$r/log/$node.log" | tail -n 20
      grep -h '^Slogan' "$r/erl_crash.dump" | cut -c1-500
      tail -n 10 "$r/startup.log"; } >&2 2>/dev/null || true
    stop "$dir" || true
    exit 1
  fi

  # The TLS port itself: chain and host name (localhost) verified against DIR/ca.pem. A
  # --server-cert wronghost node is checked for the chain only.
  local sc=(-connect "127.0.0.1:$port" -CAfile "$dir/ca.pem")
  [[ $cert == server ]] && sc+=(-verify_hostname localhost)
  [[ $mtls == true ]] && sc+=(-cert "$dir/client.pem" -key "$dir/client.key")
  # s_client prints "Verify return code: 0" once the chain checks out even if the handshake
  # then fails (a key that does not match the certificate): its exit status must be 0 too.
  local out="" i ok=0
  for i in $(seq 1 20); do
    if out=$(openssl s_client "${sc[@]}" </dev/null 2>&1) &&
      grep -q "Verify return code: 0 (ok)" <<<"$out"; then
      ok=1
      break
    fi
    sleep 0.5
  done
  if [[ $ok == 0 ]]; then
    log "TLS check on 127.0.0.1:$port failed:"
    grep -E "Verify return code|error|errno" <<<"$out" | sort -u >&2 || tail -5 <<<"$out" >&2
    stop "$dir" || true
    exit 1
  fi
  log "$node up (pid $(node_pid "$dir")): AMQPS 127.0.0.1:$port (cert $cert, mtls $mtls)${plain:+, plain AMQP 127.0.0.1:$plain}, distribution $dist; files in $r"
  echo "amqps://guest:guest@localhost:$port/%2f"
}

stop() {
  [[ $# -ge 1 ]] || usage
  local dir=$1 r pid
  [[ -d $dir/rabbitmq ]] || return 0
  dir=$(cd "$dir" && pwd) r=$dir/rabbitmq
  pid=$(node_pid "$dir")
  if [[ -n $pid ]]; then
    # Bounded: a wedged node must not hang the caller; it gets SIGKILL below.
    # shellcheck disable=SC2046
    timeout 20 env $(node_env "$dir") "$rmq/rabbitmqctl" -n "$node" -q stop >/dev/null 2>&1 || true
    local i
    for i in $(seq 1 50); do # 10 s
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if [[ -n $(node_pid "$dir") ]]; then
      log "$node still alive after rabbitmqctl stop: SIGKILL $pid"
      kill -9 "$pid" 2>/dev/null || true
      for i in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
    log "$node stopped (pid $pid)"
  fi
  # The Erlang port mapper daemon outlives the node and serves the machine's own node too: it
  # is left running.
  rm -rf "$r"
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  ctl) shift; ctl "$@" ;;
  *) usage ;;
esac
