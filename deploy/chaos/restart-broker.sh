#!/usr/bin/env bash
# restart-broker.sh: restart the local RabbitMQ under load; every run must still end.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: deploy/chaos/restart-broker.sh [options]

Starts a scheduler and 2 workers in a fresh namespace, runs `savepoint loadgen`, and --at
seconds in restarts the machine's RabbitMQ (this affects everything using it):
  --mode app    rabbitmqctl stop_app; sleep 1; rabbitmqctl start_app   (node stays up)
  --mode node   rabbitmqctl stop; rabbitmq-server -detached; rabbitmqctl await_startup
                (the whole Erlang node; the Debian wrapper starts it as user rabbitmq)
Then waits for the load generator, prints its figures and how long the broker was down, and
exits with loadgen's status: 0 = every run ended and no effect repeated. On exit (also on
failure or Ctrl-C) it makes sure RabbitMQ is running again (start_app / rabbitmq-server
-detached, then await_startup), stops what it started and deletes the namespace.

Options:
  --mode app|node      (default app)
  --at SECONDS         when to restart, after loadgen starts (default 5)
  --runs R             runs submitted (default 200), spread over 2*--at seconds
  --workflow WF        chain or webhook (default chain)
  --steps S            steps per run (default 10)
  --timeout SECONDS    longest wait for loadgen after the restart (default 180)
  -h, --help           this text
EOF
}

MODE=app AT=5 RUNS=200 WF=chain STEPS=10 TIMEOUT=180
while (($#)); do
  case $1 in
    --mode) MODE=$2; shift 2 ;;
    --at) AT=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --workflow) WF=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $MODE == app || $MODE == node ]] || { echo "--mode must be app or node" >&2; exit 2; }
for v in AT RUNS STEPS TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "--${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $WF == chain || $WF == webhook ]] || { echo "--workflow must be chain or webhook" >&2; exit 2; }

# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_need rabbitmq-server

rabbit_up() { timeout 30 rabbitmqctl -q status >/dev/null 2>&1; }
app_running() { timeout 30 rabbitmqctl -q eval 'rabbit:is_running().' 2>/dev/null | grep -q true; }

# Cleanup hook: whatever happened, leave RabbitMQ running.
ensure_rabbit() {
  if ! rabbit_up; then
    chaos_log "cleanup: RabbitMQ node is down: rabbitmq-server -detached"
    rabbitmq-server -detached >/dev/null 2>&1 || true
    local end=$((SECONDS + 120))
    until timeout 30 rabbitmqctl -q ping >/dev/null 2>&1 || ((SECONDS >= end)); do sleep 0.5; done
  fi
  timeout 150 rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 || true
  if ! app_running; then
    chaos_log "cleanup: RabbitMQ app is stopped: start_app"
    timeout 60 rabbitmqctl -q start_app >/dev/null 2>&1 || true
    timeout 150 rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 || true
  fi
  if app_running; then chaos_log "RabbitMQ is running"; else chaos_log "WARNING: RabbitMQ is NOT running"; fi
}

rabbit_up || chaos_die "RabbitMQ is not running before the test"
chaos_init restart-broker
chaos_on_exit ensure_rabbit
RATE=$(awk -v r="$RUNS" -v a="$AT" 'BEGIN { printf "%.3f", r / (2 * a) }')
chaos_start_scheduler
chaos_start_workers 2
chaos_wait_registered "$WF" 60
chaos_start_loadgen --workflow "$WF" --runs "$RUNS" --steps "$STEPS" --rate "$RATE" \
  --timeout "$((AT + TIMEOUT))"

sleep "$AT"
chaos_alive "$CHAOS_LG_PID" || chaos_log "loadgen already finished before the restart (raise --runs)"
created=$(chaos_redis --scan --pattern "$NS:*:run:*" | wc -l)
t0=$EPOCHREALTIME
if [[ $MODE == app ]]; then
  chaos_log "restart: rabbitmqctl stop_app ($created runs created so far)"
  timeout 120 rabbitmqctl -q stop_app
  sleep 1
  timeout 120 rabbitmqctl -q start_app
  timeout 150 rabbitmqctl -q await_startup --timeout 120
else
  chaos_log "restart: rabbitmqctl stop (whole node; $created runs created so far)"
  timeout 120 rabbitmqctl -q stop
  rabbitmq-server -detached
  # await_startup fails at once while the new node is not registered with epmd yet.
  end=$((SECONDS + 120))
  until timeout 30 rabbitmqctl -q ping >/dev/null 2>&1; do
    ((SECONDS < end)) || chaos_die "RabbitMQ node did not come back within 120s"
    sleep 0.5
  done
  timeout 150 rabbitmqctl -q await_startup --timeout 120
fi
down_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
chaos_log "RabbitMQ back after ${down_s}s"

chaos_wait_loadgen "$((TIMEOUT + 30))"
reconnects=$(cat "$CHAOS_TMP"/worker-*.log "$CHAOS_TMP"/scheduler.log |
  grep -cE 'consumer reconnected|publisher reconnected' || true)

echo
echo "== restart-broker: mode $MODE at ${AT}s, broker down/restarting for ${down_s}s, namespace $NS"
echo "AMQP reconnects logged by scheduler+workers: $reconnects"
chaos_print_loadgen
not_ended=$(chaos_lg '.lost')
echo "loadgen exit status: $CHAOS_LG_RC; runs not ended: $not_ended ($([[ $CHAOS_LG_RC == 0 ]] && echo 'every run ended' || echo 'FAILED'))"
exit "$CHAOS_LG_RC"
