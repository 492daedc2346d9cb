#!/usr/bin/env bash
# Sticky-busy benchmark (issue 49): the latency of a new run while one worker's own runs keep
# yielding. One worker (CONCURRENCY slots, a yield after every step) holds HELD long `chain`
# runs that go round its sticky queue; then SHORT one-step runs start one at a time through the
# HTTP API and each is timed from start to result. Printed for sticky queues on and off
# (SAVEPOINT_STICKY_MS=2000 and 0), each a fresh namespace.
#   deploy/bench/sticky-busy.sh
#   HELD=100 SHORT=50 CONCURRENCY=64 deploy/bench/sticky-busy.sh
#   BIN=/path/to/other/build/target/release deploy/bench/sticky-busy.sh   # an older build
set -euo pipefail
cd "$(dirname "$0")/../.."
HELD=${HELD:-100}; SHORT=${SHORT:-30}; CONCURRENCY=${CONCURRENCY:-64}; PORT=${PORT:-7171}
HELD_STEPS=${HELD_STEPS:-9000}; STICKY=${STICKY:-"2000 0"}
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  cargo build --release --quiet --bin savepoint --bin savepoint-worker --bin savepoint-scheduler \
    -p savepoint-scheduler -p savepoint-cli -p savepoint-demo
  BIN=target/release
fi
export SAVEPOINT_HTTP_ADDR=127.0.0.1:$PORT RUST_LOG=${RUST_LOG:-warn,lapin=off}
export SAVEPOINT_WORKER_HTTP_ADDR= SAVEPOINT_QUEUE_EXPIRES_MS=600000
API=http://127.0.0.1:$PORT
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  if [ -n "${NS:-}" ]; then
    redis-cli --scan --pattern "$NS:*" | xargs -r -n 500 redis-cli del >/dev/null
    rabbitmqctl -q delete_queue "$NS.q.default" >/dev/null 2>&1 || true
    rabbitmqctl -q delete_queue "$NS.dlq" >/dev/null 2>&1 || true
  fi
}
trap stop_all EXIT
for sticky in $STICKY; do
  NS=stickybench$(date +%s%N | tail -c 8)
  export SAVEPOINT_NAMESPACE=$NS SAVEPOINT_STICKY_MS=$sticky
  "$BIN"/savepoint-scheduler & PIDS+=($!)
  SAVEPOINT_WORKER_NAME=busy SAVEPOINT_WORKER_CONCURRENCY=$CONCURRENCY SAVEPOINT_SLICE_MAX_STEPS=1 \
    "$BIN"/savepoint-worker & PIDS+=($!)
  for _ in $(seq 1 100); do
    curl -fs "$API/readyz" >/dev/null 2>&1 && { redis-cli hgetall "$NS:workers" | grep -q '"chain"'; } && break
    sleep 0.2
  done
  for _ in $(seq 1 "$HELD"); do
    curl -fs -X POST "$API/v1/runs" -H 'content-type: application/json' \
      -d "{\"workflow\":\"chain\",\"input\":{\"steps\":$HELD_STEPS}}" >/dev/null
  done
  sleep 3 # the held runs are going round
  echo "== sticky_ms $sticky: $HELD held runs yielding after every step on one worker ($CONCURRENCY slots); $SHORT new 1-step runs, one at a time"
  "$BIN"/savepoint --api "$API" loadgen --workflow chain --runs "$SHORT" --steps 1 --inflight 1 --json > /tmp/sticky-busy.json
  python3 - <<'PY'
import json; r = json.load(open('/tmp/sticky-busy.json'))
l = r['run_latency_ms']
print(f"new run latency ms p50 {l['p50']:.0f} p90 {l['p90']:.0f} p99 {l['p99']:.0f} max {l['max']:.0f}  by status {r['by_status']}  lost {r['lost']}")
PY
  stop_all
done
