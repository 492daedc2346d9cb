#!/usr/bin/env bash
# restart-redis.sh: SIGKILL a private AOF Redis under load, restart it, count what was lost.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: deploy/chaos/restart-redis.sh [options]

Never touches the machine's Redis on 6379. For each fsync setting it starts its own
redis-server on 127.0.0.1:--port with
  --appendonly yes --appendfsync <setting> --dir <temp dir> --save ""
points a scheduler, 2 workers and `savepoint loadgen` at it (SAVEPOINT_REDIS_URL, all
three read it), submits all runs at once, waits until every run exists, then SIGKILLs that
redis-server mid-load, keeps it down for --down seconds, restarts it on the same dir (AOF
replay) and waits for the load generator. Reported per setting: DBSIZE just before the kill
and right after the restart, loadgen's by_status / lost / runs, and its exit status. The
engine must reconnect by itself and every run must still end (exit status 0).

What it can and cannot show: a SIGKILL of the Redis *process* does not lose what Redis
already wrote to the AOF file, because the data is in the OS page cache; so `everysec`
normally loses nothing here, like `always`. Only an OS crash or a power loss (not
reproducible here) shows the difference: everysec can then lose up to ~1 s of writes.

Options:
  --fsync everysec|always|both  (default both: one round each)
  --runs R             runs per round (default 300, all submitted at once)
  --steps S            steps per run (chain workflow, default 30)
  --down SECONDS       how long Redis stays dead (default 2)
  --port PORT          private Redis port (default 6390; must be free)
  --timeout SECONDS    longest wait for loadgen per round (default 180)
  -h, --help           this text
EOF
}

FSYNC=both RUNS=300 STEPS=30 DOWN=2 PORT=6390 TIMEOUT=180
while (($#)); do
  case $1 in
    --fsync) FSYNC=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --down) DOWN=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $FSYNC in
  everysec | always) SETTINGS=("$FSYNC") ;;
  both) SETTINGS=(everysec always) ;;
  *) echo "--fsync must be everysec, always or both" >&2; exit 2 ;;
esac
for v in RUNS STEPS PORT TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "--${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $DOWN =~ ^[0-9]+$ ]] || { echo "--down must be a number of seconds" >&2; exit 2; }
[[ $PORT != 6379 ]] || { echo "--port 6379 is the machine's Redis: refused" >&2; exit 2; }

export CHAOS_REDIS_PORT=$PORT
export SAVEPOINT_REDIS_URL=redis://127.0.0.1:$PORT
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_need redis-server
[[ -z $(ss -Htln "sport = :$PORT") ]] || chaos_die "port $PORT is in use: pick another with --port"
chaos_init restart-redis
BASE_NS=$NS
CHAOS_NAMESPACES=() # the private Redis goes with the temp dir; only queues/exchanges to purge

start_redis() { # DIR FSYNC
  redis-server --port "$PORT" --bind 127.0.0.1 --appendonly yes --appendfsync "$2" \
    --dir "$1" --save "" --daemonize no --logfile "$1/redis.log" >/dev/null 2>&1 &
  REDIS_PID=$!
  disown "$REDIS_PID"
  chaos_track "$REDIS_PID" redis "redis-server"
  local end=$((SECONDS + 60))
  until [[ $(chaos_redis ping 2>/dev/null) == PONG ]]; do
    ((SECONDS < end)) || chaos_die "private redis-server did not answer PONG within 60s ($1/redis.log)"
    chaos_alive "$REDIS_PID" || chaos_die "private redis-server exited ($1/redis.log)"
    sleep 0.05
  done
}

# One round trip: runs, completed runs, journal entries (sum of `steps`), DBSIZE.
# (KEYS is fine on this private Redis.)
run_figures() {
  chaos_redis eval "local c, d, e = 0, 0, 0
    for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
      local h = redis.call('HMGET', k, 'status', 'steps')
      c = c + 1
      if h[1] == 'completed' then d = d + 1 end
      e = e + (tonumber(h[2]) or 0)
    end
    return c .. ' ' .. d .. ' ' .. e .. ' ' .. redis.call('DBSIZE')" 0 "$NS:*:run:*" | tr -d '"'
}

count_runs() {
  local n
  n=$(chaos_redis --scan --pattern "$NS:*:run:*" 2>/dev/null | wc -l) || true
  echo "${n:-0}"
}

SUMMARY=()
FINAL_RC=0
for setting in "${SETTINGS[@]}"; do
  NS=$BASE_NS-$setting
  export SAVEPOINT_NAMESPACE=$NS
  chaos_register_ns "$NS" -
  dir=$CHAOS_TMP/redis-$setting
  mkdir -p "$dir"
  chaos_log "=== round appendfsync $setting, namespace $NS, Redis dir $dir"
  start_redis "$dir" "$setting"
  chaos_start_scheduler
  sched=$CHAOS_SCHED_PID
  chaos_start_workers 2
  workers=("${CHAOS_WORKER_PIDS[@]}")
  chaos_wait_registered chain 60
  chaos_start_loadgen --workflow chain --runs "$RUNS" --steps "$STEPS" --rate 0 --timeout "$TIMEOUT"
  # Kill only once every run exists (a start refused while Redis is down would abort loadgen).
  end=$((SECONDS + 60))
  while (($(count_runs) < RUNS)) && ((SECONDS < end)) && chaos_alive "$CHAOS_LG_PID"; do sleep 0.05; done
  read -r created completed entries before < <(run_figures)
  kill -KILL "$REDIS_PID"
  chaos_log "SIGKILLed redis-server pid $REDIS_PID: $created runs created, $completed completed, $entries journal entries, DBSIZE $before"
  sleep "$DOWN"
  t0=$EPOCHREALTIME
  start_redis "$dir" "$setting"
  read -r created2 completed2 entries2 after < <(run_figures)
  load_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  aof=$(du -sk "$dir" | awk '{ print $1 }')
  chaos_log "restarted redis-server pid $REDIS_PID (AOF replay ${load_s}s, dir ${aof} KiB): DBSIZE $after"
  chaos_wait_loadgen "$((TIMEOUT + 30))"
  reconnect_lines=$(cat "$CHAOS_TMP"/worker-*.log "$CHAOS_TMP"/scheduler.log 2>/dev/null |
    grep -ciE 'redis not reachable|transient|connecting to Redis failed|due scan failed' || true)
  echo
  echo "== appendfsync $setting: Redis SIGKILLed mid-load, down ${DOWN}s, restarted on the same AOF"
  echo "read just before the kill:  DBSIZE $before, runs $created/$RUNS, completed $completed, journal entries $entries"
  echo "read right after restart:    DBSIZE $after, runs $created2, completed $completed2, journal entries $entries2 ($(
    ((entries2 >= entries && completed2 >= completed && created2 >= created)) && echo 'nothing seen before the kill was lost' || echo 'LOST writes seen before the kill'))"
  echo "Redis-error log lines (scheduler+workers): $reconnect_lines; AOF replay ${load_s}s"
  chaos_print_loadgen
  echo "loadgen exit status $CHAOS_LG_RC"
  SUMMARY+=("$setting: DBSIZE $before -> $after, journal entries $entries -> $entries2, by_status $(chaos_lg '.by_status | to_entries | map("\(.key)=\(.value)") | join(" ")'), lost $(chaos_lg .lost), runs $(chaos_lg .runs), loadgen exit $CHAOS_LG_RC")
  ((CHAOS_LG_RC == 0)) || FINAL_RC=$CHAOS_LG_RC
  # Stop this round's processes before the next round.
  for p in "$CHAOS_LG_PID" "${workers[@]}" "$sched"; do chaos_stop "$p" "$CHAOS_BIN" KILL; done
  chaos_stop "$REDIS_PID" redis-server TERM
  mkdir -p "$CHAOS_TMP/$setting"
  mv "$CHAOS_TMP"/worker-*.log "$CHAOS_TMP"/scheduler.log "$CHAOS_TMP"/loadgen.* "$CHAOS_TMP/$setting/" 2>/dev/null || true
done

echo
echo "== restart-redis summary (port $PORT, SIGKILL of the redis-server process; see --help for what an OS crash would add)"
for s in "${SUMMARY[@]}"; do echo "  $s"; done
echo "note: a SIGKILL of the redis-server process loses nothing Redis already wrote to the AOF (it is in the"
echo "      OS page cache), so everysec and always both keep everything here; only an OS crash or power"
echo "      loss (not reproducible here) shows the difference: everysec can lose up to ~1 s of writes."
exit "$FINAL_RC"
