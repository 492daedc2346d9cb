#!/usr/bin/env bash
# W1 benchmark: R runs x S steps of `chain` on N local workers, and the I/O floor measured
# in the same run (one checkpoint CAS + one confirmed quorum-queue message per step).
#   deploy/bench/w1.sh                      # 500 x 10, 2 workers
#   RUNS=200 STEPS=1000 WORKERS=1 deploy/bench/w1.sh
#   PAYLOAD=10000 deploy/bench/w1.sh        # bytes of padding per step result
#   FLOW_KEYS=50 FLOW_LIMIT=4 deploy/bench/w1.sh   # under flow control: 50 keys, 4 runs each at once
#   INFLIGHT=200 deploy/bench/w1.sh         # at most 200 runs in flight (default: all at once)
#   WORKFLOW=webhook deploy/bench/w1.sh     # a webhook effect in the middle step
#   INFLIGHT=1 RUNS=200 deploy/bench/w1.sh  # unloaded: one run at a time
#   NAP_MS=1 RUNS=10 STEPS=1000 deploy/bench/w1.sh  # a 1 ms durable sleep after every step
#   SAVEPOINT_CHECKPOINTS=sync deploy/bench/w1.sh  # one acknowledged commit per step
#   PROFILE=1 deploy/bench/w1.sh            # also a system-wide CPU profile (perf) of the load:
#                                           # each process's hottest functions, in µs per step
#   SAVEPOINT_REDIS_URL=redis+cluster://127.0.0.1:7000 REDIS_CLI="redis-cli -c -p 7000" \
#     FLOOR=0 deploy/bench/w1.sh            # on a Redis Cluster (the I/O floor is single-node)
# Prints loadgen's figures, the floor and the ratio. Uses a fresh namespace, cleans up.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-500}; STEPS=${STEPS:-10}; WORKERS=${WORKERS:-2}; PAYLOAD=${PAYLOAD:-0}
PORT=${PORT:-7170}; FLOOR=${FLOOR:-1}; FLOW_KEYS=${FLOW_KEYS:-0}; FLOW_LIMIT=${FLOW_LIMIT:-4}
INFLIGHT=${INFLIGHT:-0}; WORKFLOW=${WORKFLOW:-chain}; NAP_MS=${NAP_MS:-0}
# How this script itself reaches Redis (readiness, clean-up); on a cluster `redis-cli -c -p N`,
# whose clean-up then covers that node's keys only (throwaway clusters are stopped whole).
read -r -a RCLI <<<"${REDIS_CLI:-redis-cli}"
DEL_BATCH=500; [ -n "${REDIS_CLI:-}" ] && DEL_BATCH=1 # keys of several slots never share a DEL
# BIN=dir runs prebuilt binaries (e.g. a copy of an older build, for before/after figures);
# LOADGEN=path runs the load from another build's `savepoint` (one whose loadgen has the
# options an older server's does not need to know).
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  cargo build --release --quiet --bin savepoint --bin savepoint-worker --bin savepoint-scheduler \
    -p savepoint-scheduler -p savepoint-cli -p savepoint-demo
  [ "$FLOOR" = 1 ] && cargo build --release --quiet -p savepoint-benches --bin io-floor
  BIN=target/release
fi
NS=${SAVEPOINT_NAMESPACE:-bench$(date +%s)}
export SAVEPOINT_NAMESPACE=$NS SAVEPOINT_HTTP_ADDR=127.0.0.1:$PORT RUST_LOG=${RUST_LOG:-warn,lapin=off}
export SAVEPOINT_WORKER_HTTP_ADDR= SAVEPOINT_QUEUE_EXPIRES_MS=600000
PIDS=(); WPIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "${RCLI[@]}" --scan --pattern "$NS:*" | xargs -r -n "$DEL_BATCH" "${RCLI[@]}" del >/dev/null
  rabbitmqctl -q delete_queue "$NS.q.default" >/dev/null 2>&1 || true
  rabbitmqctl -q delete_queue "$NS.dlq" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$BIN"/savepoint-scheduler & PIDS+=($!)
for i in $(seq 1 "$WORKERS"); do SAVEPOINT_WORKER_NAME=w$i "$BIN"/savepoint-worker & PIDS+=($!); WPIDS+=($!); done
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && { "${RCLI[@]}" hgetall "$NS:workers" | grep -q '"chain"'; } && break
  sleep 0.2
done
echo "== savepoint: $RUNS runs x $STEPS steps of $WORKFLOW, $WORKERS workers, payload $PAYLOAD B, flow keys $FLOW_KEYS, in flight ${INFLIGHT/#0/all} (namespace $NS)"
FLOW_ARGS=(); [ "$FLOW_KEYS" -gt 0 ] && FLOW_ARGS=(--flow-keys "$FLOW_KEYS" --flow-limit "$FLOW_LIMIT")
[ "$INFLIGHT" -gt 0 ] && FLOW_ARGS+=(--inflight "$INFLIGHT")
[ "$NAP_MS" -gt 0 ] && FLOW_ARGS+=(--nap-ms "$NAP_MS")
# CPU seconds (user + system) of processes, and Redis's own (INFO cpu), before and after.
proc_cpu() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
redis_cpu() { "${RCLI[@]}" info cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'; }
redis_out() { "${RCLI[@]}" info stats | awk -F: '/^total_net_output_bytes:/ { print $2 + 0 }'; }
# Every process the load runs through, for the CPU split (Redis and RabbitMQ when local).
SPID=${PIDS[0]}
REDIS_PID=$("${RCLI[@]}" info server | awk -F: '/^process_id:/ { print $2 + 0 }')
[ -r "/proc/$REDIS_PID/stat" ] || REDIS_PID=
RABBIT_PID=$(pgrep -o -f beam.smp || true)
# CPU seconds of the reaped children of this shell (the load generator, once it has ended):
# `times` in this shell (in a command substitution it would report the subshell's).
child_cpu() { # -> LCPU
  times >/tmp/w1-times.txt
  LCPU=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } } END { printf "%.3f", t }' /tmp/w1-times.txt)
}
"${RCLI[@]}" config resetstat >/dev/null
WCPU0=$(proc_cpu "${WPIDS[@]}"); RCPU0=$(redis_cpu); ROUT0=$(redis_out)
SCPU0=$(proc_cpu "$SPID"); QCPU0=$(proc_cpu ${RABBIT_PID:+"$RABBIT_PID"})
child_cpu; LCPU0=$LCPU
if [ "${PROFILE:-0}" = 1 ]; then
  perf record -e cpu-clock -a -F 499 -o /tmp/w1-perf.data -q >/dev/null 2>&1 & PERF_PID=$!
  sleep 0.5
fi
cpu_jiffies() { awk '/^cpu /{ idle=$5+$6; t=0; for(i=2;i<=NF;i++) t+=$i; print t-idle, t }' /proc/stat; }
read -r BUSY0 TOTAL0 < <(cpu_jiffies)
"${LOADGEN:-$BIN/savepoint}" --api "http://127.0.0.1:$PORT" loadgen --workflow "$WORKFLOW" --runs "$RUNS" --steps "$STEPS" \
  --payload-bytes "$PAYLOAD" "${FLOW_ARGS[@]}" --json > /tmp/w1-savepoint.json
read -r BUSY1 TOTAL1 < <(cpu_jiffies)
WCPU1=$(proc_cpu "${WPIDS[@]}"); RCPU1=$(redis_cpu); ROUT1=$(redis_out)
SCPU1=$(proc_cpu "$SPID"); QCPU1=$(proc_cpu ${RABBIT_PID:+"$RABBIT_PID"})
child_cpu; LCPU1=$LCPU
if [ "${PROFILE:-0}" = 1 ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" || true; fi
"${RCLI[@]}" info commandstats > /tmp/w1-commandstats.txt
TCK=$(getconf CLK_TCK)
# CPU seconds over the load: the scheduler (API and scanners), RabbitMQ, the load generator,
# and the whole machine (busy time of every core).
awk -v s=$((SCPU1 - SCPU0)) -v q=$((QCPU1 - QCPU0)) -v l0="$LCPU0" -v l1="$LCPU1" -v b=$((BUSY1 - BUSY0)) \
  -v t=$((TOTAL1 - TOTAL0)) -v tck="$TCK" 'BEGIN { printf "%f %f %f %f %f\n", s / tck, q / tck, l1 - l0, b / tck, (t - b) / tck }' \
  >/tmp/w1-cpu-more.txt
echo "$(( (WCPU1 - WCPU0) * 10000 / $(getconf CLK_TCK) ))e-4 $(awk -v a="$RCPU0" -v b="$RCPU1" 'BEGIN { print b - a }') $((ROUT1 - ROUT0))" > /tmp/w1-cpu-split.txt
# The machine's CPU use while the load ran (every process on it), in % of all its cores.
awk -v b=$((BUSY1 - BUSY0)) -v t=$((TOTAL1 - TOTAL0)) 'BEGIN { printf "%.0f\n", 100 * b / (t ? t : 1) }' >/tmp/w1-cpu.txt
python3 - <<'PY'
import json; r = json.load(open('/tmp/w1-savepoint.json'))
print(f"steps/s {r['steps_per_s']:.0f}  runs/s {r['runs_per_s']:.1f}  wall {r['wall_s']:.2f}s")
l = r['run_latency_ms']; s = r['step_latency_ms']
print(f"run latency ms p50 {l['p50']:.0f} p90 {l['p90']:.0f} p99 {l['p99']:.0f} max {l['max']:.0f}")
print(f"step latency ms p50 {s['p50']:.1f} p99 {s['p99']:.1f}")
print(f"redis bytes/run {r['redis_bytes_per_run']:.0f}  by status {r['by_status']}  lost {r['lost']}")
print(f"machine CPU during the load {open('/tmp/w1-cpu.txt').read().strip()}% of all cores")
# Redis scripts per run and CPU per step (INFO commandstats and cpu over the load; the
# scanner's and the API's scripts included), worker CPU per step.
calls = usec = 0
for line in open('/tmp/w1-commandstats.txt'):
    if line.startswith(('cmdstat_evalsha:', 'cmdstat_eval:')):
        f = dict(kv.split('=') for kv in line.split(':', 1)[1].strip().split(','))
        calls += int(f['calls']); usec += int(f['usec'])
wcpu, rcpu, rout = (float(x) for x in open('/tmp/w1-cpu-split.txt').read().split())
runs, steps = r['runs'], max(r['steps'], 1)
print(f"scripts/run {calls / runs:.1f}  script µs/step {usec / steps:.1f}  redis CPU µs/step {1e6 * rcpu / steps:.1f}  worker CPU µs/step {1e6 * wcpu / steps:.1f}  redis bytes out/step {rout / steps:.0f}")
# Where a step's CPU goes, machine-wide: each process the load runs through, and the rest
# (the kernel's own threads, AOF fsync, anything else running), against the idle cores.
sched, rabbit, load, busy, idle = (float(x) for x in open('/tmp/w1-cpu-more.txt').read().split())
us = lambda x: 1e6 * x / steps
rest = busy - wcpu - rcpu - sched - rabbit - load
print(f"CPU µs/step: workers {us(wcpu):.1f}, redis {us(rcpu):.1f}, rabbitmq {us(rabbit):.1f}, scheduler {us(sched):.1f}, "
      f"load generator {us(load):.1f}, rest of the machine {us(rest):.1f}; busy {us(busy):.1f}, idle {us(idle):.1f}")
PY
if [ "${PROFILE:-0}" = 1 ]; then
  # The hottest functions of each process, as µs of CPU per step (samples x period / steps).
  steps=$(python3 -c "import json; print(max(json.load(open('/tmp/w1-savepoint.json'))['steps'], 1))")
  show() { # LABEL PIDS
    [ -n "$2" ] || return 0
    echo "== profile: $1 (self time by binary and function, in µs of CPU per step and % of all samples)"
    perf report -i /tmp/w1-perf.data --pid "$2" --no-children --sort dso,sym -q --stdio -F overhead,period,dso,sym 2>/dev/null |
      awk -v n="$steps" 'NF >= 4 && $1 ~ /%$/ { p = $2; $2 = sprintf("%7.2f µs/step", p / 1000 / n); print }' |
      sort -k2,2 -g -r | head -"${TOP:-12}"
  }
  show workers "$(IFS=,; echo "${WPIDS[*]}")"
  show redis "$REDIS_PID"
  show rabbitmq "$RABBIT_PID"
  show scheduler "$SPID"
fi
if [ "$FLOOR" = 1 ]; then
  echo "== I/O floor: same shape"
  "$BIN"/io-floor --runs "$RUNS" --steps "$STEPS" --workers "$WORKERS" --json > /tmp/w1-floor.json
  python3 - <<'PY'
import json; s = json.load(open('/tmp/w1-savepoint.json')); f = json.load(open('/tmp/w1-floor.json'))
print(f"floor steps/s {f['steps_per_s']:.0f}; savepoint / floor = {100*s['steps_per_s']/f['steps_per_s']:.0f}%")
PY
fi
