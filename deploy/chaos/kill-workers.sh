#!/usr/bin/env bash
# kill-workers.sh: SIGKILL random workers under load; every run must still end, no effect twice.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: deploy/chaos/kill-workers.sh [options]

Local mode (default): starts a scheduler and N workers (target/release binaries) in a fresh
namespace on the local RabbitMQ and Redis, runs `savepoint loadgen` against them and every
--every seconds SIGKILLs a random worker and starts a replacement, until --duration passes
or the load generator exits. Then it waits for the load generator (which waits for every
run), prints the kills and loadgen's figures and exits with loadgen's status (non-zero when
a run was lost or an effect repeated). Everything started is stopped on exit and the
namespace's Redis keys and RabbitMQ queues/exchanges are deleted.

Options:
  --every SECONDS      seconds between kills (default 2)
  --duration SECONDS   how long to keep killing (default 30)
  --workers N          workers running at once (default 3)
  --runs R             runs submitted (default 300), at about 2*R/duration runs/s
  --workflow WF        chain or webhook (default chain)
  --steps S            steps per run (default 20)
  --payload-bytes B    padding per step result, chain only (default 0; larger = longer runs,
                       so a kill is more likely to hit a run mid-slice)
  --timeout SECONDS    longest wait for loadgen after the chaos (default 180)
  --k8s                Kubernetes mode (see below) instead of local processes
  --k8s-namespace NS   namespace of the worker pods (default: kubectl's current)
  --selector SEL       pod label selector (default app=savepoint-worker)
  --api URL            (k8s mode) also run loadgen against this scheduler API; loadgen
                       reads the namespace and Redis URL from SAVEPOINT_* like the fleet
  -h, --help           this text

Kubernetes mode: every --every seconds, for --duration, picks a random Running pod matching
--selector and runs `kubectl delete pod <pod> --grace-period=0 --force`. It is implemented
(plain kubectl calls) but has NOT been exercised: the machine it was written on has kubectl
and no cluster (no current context).

Environment: SAVEPOINT_NAMESPACE (default chaos<epoch>), SAVEPOINT_AMQP_URL,
SAVEPOINT_REDIS_URL, SAVEPOINT_LEASE_MS, ... are passed to every process (see lib.sh).
EOF
}

EVERY=2 DURATION=30 WORKERS=3 RUNS=300 WF=chain STEPS=20 PAYLOAD=0 TIMEOUT=180
K8S=0 K8S_NS= SELECTOR=app=savepoint-worker API=
while (($#)); do
  case $1 in
    --every) EVERY=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --workflow) WF=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --payload-bytes) PAYLOAD=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --k8s) K8S=1; shift ;;
    --k8s-namespace) K8S_NS=$2; shift 2 ;;
    --selector) SELECTOR=$2; shift 2 ;;
    --api) API=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in EVERY DURATION WORKERS RUNS STEPS TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "--${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $WF == chain || $WF == webhook ]] || { echo "--workflow must be chain or webhook" >&2; exit 2; }
[[ $PAYLOAD =~ ^[0-9]+$ ]] || { echo "--payload-bytes must be a number" >&2; exit 2; }

# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
RATE=$(awk -v r="$RUNS" -v d="$DURATION" 'BEGIN { printf "%.3f", 2 * r / d }')

# ---------------------------------------------------------------------------------------
# KUBERNETES MODE (--k8s). Not exercised on the machine this was written on (no cluster).
# ---------------------------------------------------------------------------------------
k8s_mode() {
  chaos_need kubectl awk
  local kns=() pods=() pod kills=0 end lg_pid= lg_rc=0 tmp
  kns=(--request-timeout=10s)
  [[ -n $K8S_NS ]] && kns+=(-n "$K8S_NS")
  kubectl "${kns[@]}" get pods -l "$SELECTOR" -o name >/dev/null ||
    chaos_die "kubectl cannot list pods with -l $SELECTOR (is a cluster configured?)"
  tmp=$(mktemp -d /tmp/spchaos-k8s.XXXXXX)
  trap 'if [[ -n $lg_pid ]] && kill -0 "$lg_pid" 2>/dev/null; then kill "$lg_pid"; fi; rm -rf "$tmp"' EXIT
  if [[ -n $API ]]; then
    chaos_check_bins
    "$SP_CLI" --api "$API" --json loadgen --workflow "$WF" --runs "$RUNS" --steps "$STEPS" \
      --rate "$RATE" --payload-bytes "$PAYLOAD" --timeout "$TIMEOUT" >"$tmp/loadgen.json" 2>"$tmp/loadgen.err" &
    lg_pid=$!
    chaos_log "loadgen pid $lg_pid against $API"
  fi
  end=$((SECONDS + DURATION))
  while ((SECONDS < end)); do
    sleep "$EVERY"
    [[ -n $lg_pid ]] && ! kill -0 "$lg_pid" 2>/dev/null && break
    mapfile -t pods < <(kubectl "${kns[@]}" get pods -l "$SELECTOR" \
      --field-selector=status.phase=Running -o name)
    ((${#pods[@]})) || { chaos_log "no Running pod matches $SELECTOR"; continue; }
    pod=${pods[RANDOM % ${#pods[@]}]}
    if kubectl "${kns[@]}" delete "$pod" --grace-period=0 --force --wait=false >/dev/null 2>&1; then
      kills=$((kills + 1))
      chaos_log "force-deleted $pod (kill $kills)"
    else
      chaos_log "could not delete $pod"
    fi
  done
  echo "k8s mode: $kills pods force-deleted (selector $SELECTOR, every ${EVERY}s for up to ${DURATION}s)"
  if [[ -n $lg_pid ]]; then
    wait "$lg_pid" || lg_rc=$?
    CHAOS_TMP=$tmp chaos_print_loadgen
    echo "loadgen exit status $lg_rc"
    return "$lg_rc"
  fi
}

if ((K8S)); then
  k8s_mode
  exit $?
fi

# ---------------------------------------------------------------------------------------
# Local mode.
# ---------------------------------------------------------------------------------------
chaos_init kill-workers
chaos_start_scheduler
chaos_start_workers "$WORKERS"
chaos_wait_registered "$WF" 60
chaos_start_loadgen --workflow "$WF" --runs "$RUNS" --steps "$STEPS" --rate "$RATE" \
  --payload-bytes "$PAYLOAD" --timeout "$((DURATION + TIMEOUT))"

kills=0 replacements=0
end=$((SECONDS + DURATION))
while ((SECONDS < end)) && chaos_alive "$CHAOS_LG_PID"; do
  sleep "$EVERY"
  chaos_alive "$CHAOS_LG_PID" || break
  i=$((RANDOM % WORKERS))
  victim=${CHAOS_WORKER_PIDS[$i]}
  if chaos_alive "$victim" && chaos_is_ours "$victim" "$SP_WORKER"; then
    kill -KILL "$victim"
    wait "$victim" 2>/dev/null || true
    kills=$((kills + 1))
  fi
  chaos_start_worker "r$kills-$i"
  CHAOS_WORKER_PIDS[$i]=$CHAOS_LAST_PID
  replacements=$((replacements + 1))
  chaos_log "SIGKILLed worker pid $victim (slot $i), replacement pid $CHAOS_LAST_PID"
done
chaos_log "chaos over after $kills kills; waiting for loadgen"
chaos_wait_loadgen "$((TIMEOUT + 30))"

echo
echo "== kill-workers: $WORKERS workers, a SIGKILL every ${EVERY}s for up to ${DURATION}s, namespace $NS"
echo "kills: $kills SIGKILLs, $replacements replacement workers started"
chaos_print_loadgen
if [[ $(chaos_lg .recovery_ms.n) == 0 ]]; then
  echo "note: no kill hit a run in flight (no takeover): the workers were mostly idle; load them harder"
  echo "      (more --runs per --duration, more --steps or --payload-bytes) to exercise recovery"
fi
echo "loadgen exit status: $CHAOS_LG_RC ($([[ $CHAOS_LG_RC == 0 ]] && echo 'every run ended, no effect repeated' || echo 'FAILED: a run was lost or an effect repeated, see above'))"
exit "$CHAOS_LG_RC"
