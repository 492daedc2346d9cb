# shellcheck shell=bash
# deploy/chaos/lib.sh: helpers sourced by the chaos scripts in this directory.
#
# Not meant to be run: `source "$(dirname "$0")/lib.sh"` from a script that has
# `set -euo pipefail`. Everything it starts is recorded in a pid file under a temp dir and
# stopped by chaos_cleanup (installed as the EXIT trap by chaos_init), which also deletes the
# namespace's Redis keys and RabbitMQ queues/exchanges.
#
# Functions (globals they set in brackets):
#   chaos_init TAG                 namespace [NS], temp dir [CHAOS_TMP], traps
#   chaos_start_scheduler [PORT]   scheduler on 127.0.0.1:PORT, waits for /readyz [CHAOS_API]
#   chaos_start_worker NAME [VAR=VALUE...]          one worker, health port off [CHAOS_LAST_PID]
#   chaos_start_worker_netns NETNS NAME [VAR=VALUE...]  same, inside a network namespace
#   chaos_start_workers N          workers w1..wN [CHAOS_WORKER_PIDS]
#   chaos_wait_registered WORKFLOW [SECS]  until a worker put WORKFLOW in the catalog
#   chaos_start_loadgen ARGS...    `savepoint --json loadgen ARGS` in the background [CHAOS_LG_PID]
#   chaos_wait_loadgen [SECS]      waits (bounded) [CHAOS_LG_RC]
#   chaos_print_loadgen            loadgen's figures from its JSON
#   chaos_on_exit 'COMMAND'        run COMMAND at cleanup (after the processes are stopped)
#   chaos_register_ns NS REDIS_PORT|-   another namespace to purge at cleanup
#
# Environment: SAVEPOINT_NAMESPACE (default: a fresh chaos<epoch>), SAVEPOINT_REDIS_URL /
# SAVEPOINT_AMQP_URL (passed through to every process), SAVEPOINT_BIN_DIR (default
# <repo>/target/release), CHAOS_REDIS_PORT (Redis port the helpers use with redis-cli, default
# 6379), CHAOS_KEEP_LOGS=1 (keep the temp dir; it is also kept when the script fails),
# CHAOS_PURGE=1 (purge a namespace that was given and does not start with "chaos").

CHAOS_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHAOS_REPO=$(cd "$CHAOS_LIB_DIR/../.." && pwd)
CHAOS_BIN=${SAVEPOINT_BIN_DIR:-$CHAOS_REPO/target/release}
SP_CLI=$CHAOS_BIN/savepoint
SP_WORKER=$CHAOS_BIN/savepoint-worker
SP_SCHED=$CHAOS_BIN/savepoint-scheduler
CHAOS_REDIS_PORT=${CHAOS_REDIS_PORT:-6379}
CHAOS_T0=${EPOCHREALTIME:-0}
CHAOS_HOOKS=()
CHAOS_NAMESPACES=()
CHAOS_WORKER_PIDS=()
CHAOS_LG_PID=
CHAOS_LG_RC=
CHAOS_CLEANED=

chaos_elapsed() { awk -v a="$CHAOS_T0" -v b="${EPOCHREALTIME:-0}" 'BEGIN { printf "%.1f", b - a }'; }
chaos_log() { printf '[%6ss] %s\n' "$(chaos_elapsed)" "$*" >&2; }
chaos_die() {
  chaos_log "ERROR: $*"
  exit 1
}

chaos_need() { # commands that must exist
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || chaos_die "required command not found: $c"
  done
}

chaos_check_bins() {
  local b
  for b in "$SP_CLI" "$SP_WORKER" "$SP_SCHED"; do
    [[ -x $b ]] || chaos_die "missing binary $b (build with: cargo build --release)"
  done
}

chaos_redis() { redis-cli -h 127.0.0.1 -p "$CHAOS_REDIS_PORT" "$@"; }

# chaos_init TAG: namespace, temp dir, pid file, traps.
chaos_init() {
  local tag=$1
  chaos_need redis-cli rabbitmqctl curl jq awk ss timeout
  chaos_check_bins
  CHAOS_T0=$EPOCHREALTIME
  if [[ -n ${SAVEPOINT_NAMESPACE:-} ]]; then
    NS=$SAVEPOINT_NAMESPACE
    CHAOS_NS_GIVEN=1
  else
    NS=chaos$(date +%s)
    CHAOS_NS_GIVEN=0
  fi
  [[ $NS =~ ^[a-z0-9_-]{1,32}$ ]] || chaos_die "namespace '$NS': 1-32 characters of a-z 0-9 _ -"
  export SAVEPOINT_NAMESPACE=$NS
  CHAOS_TMP=$(mktemp -d "/tmp/spchaos-$tag.XXXXXX")
  CHAOS_PIDFILE=$CHAOS_TMP/pids
  : >"$CHAOS_PIDFILE"
  export RUST_LOG=${RUST_LOG:-info,lapin=warn,amq_protocol=warn}
  trap chaos_cleanup EXIT
  trap 'chaos_log "interrupted"; exit 130' INT TERM HUP
  chaos_register_ns "$NS" "$CHAOS_REDIS_PORT"
  chaos_log "namespace $NS, logs in $CHAOS_TMP"
}

chaos_register_ns() { CHAOS_NAMESPACES+=("$1 $2"); }
chaos_on_exit() { CHAOS_HOOKS+=("$1"); }

# chaos_track PID NAME EXE: remember a process we started.
chaos_track() { printf '%s %s %s\n' "$1" "$2" "$3" >>"$CHAOS_PIDFILE"; }

# True while PID runs (and is not a zombie).
chaos_alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ -n $st && $st != Z* ]]
}

# True when PID is still the process we started (guards against pid reuse).
chaos_is_ours() {
  local pid=$1 exe=$2 cmd
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$exe"* ]]
}

# chaos_stop PID EXE [SIGNAL]: signal one of our processes, wait up to 5 s, then SIGKILL.
chaos_stop() {
  local pid=$1 exe=$2 sig=${3:-TERM} i
  chaos_alive "$pid" && chaos_is_ours "$pid" "$exe" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    chaos_alive "$pid" || break
    sleep 0.1
  done
  if chaos_alive "$pid" && chaos_is_ours "$pid" "$exe"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

# chaos_free_port: a port no socket uses, below the kernel's ephemeral range (an outgoing
# connection may take any port inside it at any moment, and a server's bind to that port then
# fails), and not one this script was already given (a script may take two before starting
# either). 20000 up to that range (32767 with Linux's default).
chaos_free_port() {
  local p i eph=32768 lo=20000 hi
  read -r eph _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  hi=$((eph - 1))
  ((hi > lo + 1000)) || lo=61000 hi=65000 # an ephemeral range that starts low: above it
  for i in $(seq 1 200); do
    p=$((lo + RANDOM % (hi - lo + 1)))
    grep -qx "$p" "$CHAOS_TMP/ports" 2>/dev/null && continue
    if [[ -z $(ss -Htan "sport = :$p" 2>/dev/null) ]]; then
      echo "$p" >>"$CHAOS_TMP/ports"
      echo "$p"
      return 0
    fi
  done
  chaos_die "no free port found"
}

# chaos_wait_http URL SECS [PID LOG]: until URL answers 2xx. With PID, a process that exits
# meanwhile fails at once; with LOG, the failure shows that log's last lines (a CI run keeps
# nothing else of it).
chaos_wait_http() {
  local url=$1 secs=$2 pid=${3:-} log=${4:-} end=$((SECONDS + $2)) why
  while ((SECONDS < end)); do
    curl -fsS -m 2 "$url" >/dev/null 2>&1 && return 0
    if [[ -n $pid ]] && ! chaos_alive "$pid"; then
      why="the process (pid $pid) exited before $url answered"
      break
    fi
    sleep 0.2
  done
  why=${why:-"$url not ready within ${secs}s"}
  if [[ -n $log && -s $log ]]; then
    chaos_log "the last lines of $log:"
    tail -n 40 "$log" | sed 's/^/    /' >&2
  fi
  chaos_die "$why"
}

chaos_start_scheduler() {
  local port=${1:-$(chaos_free_port)}
  CHAOS_API=http://127.0.0.1:$port
  SAVEPOINT_HTTP_ADDR=127.0.0.1:$port "$SP_SCHED" >>"$CHAOS_TMP/scheduler.log" 2>&1 &
  CHAOS_SCHED_PID=$!
  disown "$CHAOS_SCHED_PID" # no "Killed" job notices; its status is not needed
  chaos_track "$CHAOS_SCHED_PID" scheduler "$SP_SCHED"
  chaos_wait_http "$CHAOS_API/readyz" 60 "$CHAOS_SCHED_PID" "$CHAOS_TMP/scheduler.log"
  chaos_log "scheduler pid $CHAOS_SCHED_PID ready on $CHAOS_API"
}

# chaos_start_worker NAME [VAR=VALUE...]: health port disabled unless a VAR sets it.
chaos_start_worker() {
  local name=$1
  shift
  env SAVEPOINT_WORKER_NAME="$name" SAVEPOINT_WORKER_HTTP_ADDR= "$@" "$SP_WORKER" \
    >>"$CHAOS_TMP/worker-$name.log" 2>&1 &
  CHAOS_LAST_PID=$!
  disown "$CHAOS_LAST_PID"
  chaos_track "$CHAOS_LAST_PID" "worker-$name" "$SP_WORKER"
  chaos_log "worker $name pid $CHAOS_LAST_PID"
}

# chaos_start_worker_netns NETNS NAME [VAR=VALUE...]
chaos_start_worker_netns() {
  local netns=$1 name=$2
  shift 2
  ip netns exec "$netns" env SAVEPOINT_WORKER_NAME="$name" SAVEPOINT_WORKER_HTTP_ADDR= "$@" "$SP_WORKER" \
    >>"$CHAOS_TMP/worker-$name.log" 2>&1 &
  CHAOS_LAST_PID=$!
  disown "$CHAOS_LAST_PID"
  chaos_track "$CHAOS_LAST_PID" "worker-$name" "$SP_WORKER"
  chaos_log "worker $name pid $CHAOS_LAST_PID in netns $netns"
}

chaos_start_workers() { # N
  local i
  CHAOS_WORKER_PIDS=()
  for i in $(seq 1 "$1"); do
    chaos_start_worker "w$i"
    CHAOS_WORKER_PIDS+=("$CHAOS_LAST_PID")
  done
}

chaos_wait_registered() { # WORKFLOW [SECS]
  chaos_wait_registration "\"name\":\"$1\"" "workflow $1" "${2:-60}"
}

# chaos_wait_registration PATTERN WHAT [SECS]: until a live worker's registration (JSON, in
# the hash incarnation -> registration) matches the grep PATTERN (WHAT names it on failure).
chaos_wait_registration() {
  local secs=${3:-60} end=$((SECONDS + ${3:-60}))
  while ((SECONDS < end)); do
    chaos_redis hgetall "$NS:workers" 2>/dev/null | grep -q -- "$1" && return 0
    sleep 0.2
  done
  chaos_die "no worker registered $2 within ${secs}s (see $CHAOS_TMP/worker-*.log)"
}

# chaos_start_loadgen ARGS...: loadgen JSON in $CHAOS_TMP/loadgen.json, stderr in loadgen.err.
chaos_start_loadgen() {
  "$SP_CLI" --api "$CHAOS_API" --json loadgen "$@" >"$CHAOS_TMP/loadgen.json" 2>"$CHAOS_TMP/loadgen.err" &
  CHAOS_LG_PID=$!
  chaos_track "$CHAOS_LG_PID" loadgen "$SP_CLI"
  chaos_log "loadgen pid $CHAOS_LG_PID: loadgen $*"
}

# chaos_wait_loadgen [SECS]: waits at most SECS (default 300), then stops it.
chaos_wait_loadgen() {
  local secs=${1:-300} end=$((SECONDS + ${1:-300}))
  while chaos_alive "$CHAOS_LG_PID" && ((SECONDS < end)); do sleep 0.5; done
  if chaos_alive "$CHAOS_LG_PID"; then
    chaos_log "loadgen still running after ${secs}s: stopping it"
    chaos_stop "$CHAOS_LG_PID" "$SP_CLI"
  fi
  CHAOS_LG_RC=0
  wait "$CHAOS_LG_PID" 2>/dev/null || CHAOS_LG_RC=$?
  chaos_log "loadgen exited with status $CHAOS_LG_RC"
}

chaos_loadgen_json_ok() { jq -e .runs "$CHAOS_TMP/loadgen.json" >/dev/null 2>&1; }

# chaos_lg FIELD-JQ: one value from loadgen's JSON ("?" when absent).
chaos_lg() { jq -r "$1 // \"?\"" "$CHAOS_TMP/loadgen.json" 2>/dev/null || echo "?"; }

chaos_print_loadgen() {
  if ! chaos_loadgen_json_ok; then
    echo "loadgen printed no report; its stderr:"
    sed 's/^/  /' "$CHAOS_TMP/loadgen.err" | tail -20
    return 0
  fi
  jq -r '
    def r(x): (x * 10 | round) / 10;
    "loadgen: \(.runs) \(.workflow) runs, wall \(r(.wall_s)) s, \(.steps_per_s | floor) steps/s, \(r(.runs_per_s)) runs/s",
    "  run latency ms      p50 \(r(.run_latency_ms.p50))  p90 \(r(.run_latency_ms.p90))  p99 \(r(.run_latency_ms.p99))  max \(r(.run_latency_ms.max))",
    "  by status           \(.by_status | to_entries | map("\(.key)=\(.value)") | join(" "))",
    "  lost                \(.lost)",
    "  repeated effect calls \(.repeated_effect_calls | length)  repeated webhook deliveries \(.repeated_deliveries | length)  (effect keys \(.effect_keys))",
    "  recovery ms (takeovers) n=\(.recovery_ms.n)  p50 \(r(.recovery_ms.p50))  p99 \(r(.recovery_ms.p99))  max \(r(.recovery_ms.max))"
  ' "$CHAOS_TMP/loadgen.json"
  if [[ -s $CHAOS_TMP/loadgen.err ]]; then
    echo "  loadgen stderr: $(tail -3 "$CHAOS_TMP/loadgen.err" | tr '\n' ' ')"
  fi
}

# Delete a namespace's Redis keys (in batches of 500) and its queues and exchanges.
chaos_purge_ns() { # NS REDIS_PORT|-
  local ns=$1 port=$2 deleted=0 q x out
  if [[ $CHAOS_NS_GIVEN == 1 && $ns != chaos* && ${CHAOS_PURGE:-0} != 1 ]]; then
    chaos_log "namespace $ns was given and does not start with 'chaos': left in place (CHAOS_PURGE=1 deletes it)"
    return 0
  fi
  if [[ $port != - ]]; then
    deleted=$(redis-cli -h 127.0.0.1 -p "$port" --scan --pattern "$ns:*" 2>/dev/null |
      xargs -r -d '\n' -n 500 redis-cli -h 127.0.0.1 -p "$port" del 2>/dev/null |
      awk '{ s += $1 } END { print s + 0 }') || deleted="?"
  fi
  local qs=() xs=()
  for q in "$ns.q.${SAVEPOINT_QUEUE:-default}" "$ns.dlq"; do
    if timeout 60 rabbitmqctl -q delete_queue "$q" >/dev/null 2>&1; then qs+=("$q"); fi
  done
  # rabbitmqadmin is not installed; RabbitMQ 3.10's rabbit_exchange:delete/3 does it.
  for x in "$ns.tasks" "$ns.dlx"; do
    out=$(timeout 60 rabbitmqctl eval \
      "rabbit_exchange:delete(rabbit_misc:r(<<\"/\">>, exchange, <<\"$x\">>), false, <<\"chaos\">>)." 2>&1) || true
    [[ $out == *ok* ]] && xs+=("$x")
  done
  if [[ $port == - ]]; then
    chaos_log "cleanup $ns: Redis keys went with the private Redis; queues deleted: ${qs[*]:-none}; exchanges deleted: ${xs[*]:-none}"
  else
    chaos_log "cleanup $ns: $deleted Redis keys deleted; queues deleted: ${qs[*]:-none}; exchanges deleted: ${xs[*]:-none}"
  fi
}

chaos_cleanup() {
  local rc=$? pid name exe i
  [[ -n $CHAOS_CLEANED ]] && return 0
  CHAOS_CLEANED=1
  set +e
  trap - INT TERM HUP
  disown -a 2>/dev/null # no "Killed" job notices for what is stopped below
  if [[ -n ${CHAOS_PIDFILE:-} && -f $CHAOS_PIDFILE ]]; then
    local n=0
    while read -r pid name exe; do
      if chaos_alive "$pid" && chaos_is_ours "$pid" "$exe"; then
        chaos_stop "$pid" "$exe" KILL
        n=$((n + 1))
      fi
    done < <(tac "$CHAOS_PIDFILE")
    chaos_log "cleanup: stopped $n processes still running (of $(wc -l <"$CHAOS_PIDFILE") started)"
  fi
  for ((i = ${#CHAOS_HOOKS[@]} - 1; i >= 0; i--)); do
    eval "${CHAOS_HOOKS[$i]}"
  done
  for i in "${CHAOS_NAMESPACES[@]}"; do
    # shellcheck disable=SC2086
    chaos_purge_ns $i
  done
  if [[ -n ${CHAOS_TMP:-} && -d $CHAOS_TMP ]]; then
    if [[ $rc != 0 || ${CHAOS_KEEP_LOGS:-0} == 1 ]]; then
      chaos_log "logs kept in $CHAOS_TMP"
    else
      rm -rf "$CHAOS_TMP"
    fi
  fi
  exit "$rc"
}
