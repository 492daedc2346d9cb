#!/usr/bin/env bash
# Horizontal throughput: W1 (RUNS x STEPS of `chain`) with 1, 2, 4 and 8 worker processes, on
# the single local Redis and on a 6-node Redis Cluster started for the purpose
# (deploy/cluster/redis-cluster.sh, ports 7000-7005, stopped by pid at the end), with the
# machine's CPU use during each run and the Redis CPU seconds it took.
#   deploy/bench/horizontal.sh                  # RUNS=6000 STEPS=10, workers 1 2 4 8
#   WORKER_COUNTS="1 2" TARGETS=cluster deploy/bench/horizontal.sh
#   SAVEPOINT_REDIS_WAIT_REPLICAS=1 SAVEPOINT_REDIS_WAIT_SCOPE=writes TARGETS=cluster \
#     deploy/bench/horizontal.sh                # the cost of WAIT 1 on every write
# Prints one line per run; the figures are in docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-6000}; STEPS=${STEPS:-10}
WORKER_COUNTS=${WORKER_COUNTS:-"1 2 4 8"}; TARGETS=${TARGETS:-"single cluster"}
cargo build --release --quiet --bin savepoint --bin savepoint-worker --bin savepoint-scheduler \
  -p savepoint-scheduler -p savepoint-cli -p savepoint-demo
CLUSTER_DIR=
trap '[ -n "$CLUSTER_DIR" ] && deploy/cluster/redis-cluster.sh stop "$CLUSTER_DIR"' EXIT

redis_cpu() { # summed used_cpu_sys + used_cpu_user (s) of the given ports
  local total=0 p v
  for p in "$@"; do
    v=$(redis-cli -p "$p" info cpu | awk -F: '/^used_cpu_(sys|user):/{ s+=$2 } END { print s }')
    total=$(awk -v a="$total" -v b="$v" 'BEGIN { print a + b }')
  done
  echo "$total"
}

for target in $TARGETS; do
  ports=(6379); url=redis://127.0.0.1:6379; cli=
  if [ "$target" = cluster ]; then
    out=$(deploy/cluster/redis-cluster.sh start 7000)
    CLUSTER_DIR=$(sed -n 1p <<<"$out"); url=$(sed -n 2p <<<"$out")
    ports=(7000 7001 7002 7003 7004 7005); cli="redis-cli -c -p 7000"
    # Six Redis processes on this machine's two cores, beside RabbitMQ and the fleet: a burst
    # of 6,000 starts queues commands past the default 1 s timeout (lease / 3); allow the
    # most the lease permits (half of it).
    export SAVEPOINT_REDIS_TIMEOUT_MS=${SAVEPOINT_REDIS_TIMEOUT_MS:-1500}
  fi
  for w in $WORKER_COUNTS; do
    r0=$(redis_cpu "${ports[@]}")
    SAVEPOINT_REDIS_URL=$url REDIS_CLI=$cli BIN=target/release FLOOR=0 RUNS=$RUNS STEPS=$STEPS WORKERS=$w \
      deploy/bench/w1.sh >/tmp/horizontal-w1.log 2>&1 || { cat /tmp/horizontal-w1.log; exit 1; }
    r1=$(redis_cpu "${ports[@]}")
    python3 - "$target" "$w" "$r0" "$r1" <<'PY'
import json, sys
target, w, r0, r1 = sys.argv[1:]
r = json.load(open('/tmp/w1-savepoint.json'))
busy = float(open('/tmp/w1-cpu.txt').read())
print(f"{target:7s} workers {int(w):2d}: {r['steps_per_s']:6.0f} steps/s  run p99 {r['run_latency_ms']['p99']:5.0f} ms  "
      f"machine CPU {busy:3.0f}% of 2 cores while loaded  redis CPU {1e6 * (float(r1) - float(r0)) / r['steps']:4.0f} us/step "
      f"(all nodes, whole script)  lost {r['lost']}")
PY
  done
  if [ -n "$CLUSTER_DIR" ]; then deploy/cluster/redis-cluster.sh stop "$CLUSTER_DIR"; CLUSTER_DIR=; fi
done
