#!/usr/bin/env bash
# partition-worker.sh: cut one worker off the network mid-run (network namespace + veth);
# its runs must be taken over by the other worker, no effect repeated, its late writes refused.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: deploy/chaos/partition-worker.sh [options]     (needs root: ip netns, ip link)

Builds a private network: namespace `spchaos` and a veth pair sp-host (10.213.0.1/30, host)
<-> sp-ns (10.213.0.2/30, in the namespace). Redis and RabbitMQ are reached from inside at
10.213.0.1: when a service listens on loopback only (checked with `ss -ltn`), a socat TCP
forwarder on 10.213.0.1 bridges it to 127.0.0.1. It then starts a scheduler, one normal
worker ("free") and one worker inside the namespace ("isolated", AMQP URL with
?heartbeat=N so the broker drops its dead connection after ~2N s), a slow webhook receiver
(socat; it logs every delivery's Idempotency-Key and answers after --effect-delay s,
reachable as 127.0.0.1:<port> in both namespaces) and
  savepoint loadgen --workflow webhook --runs R --steps S --webhook-url <that receiver>
Once the isolated worker holds at least one run (from --cut-at s), it cuts the namespace
off (`ip link set sp-host down`), waits --cut-for s (longer than the lease, SAVEPOINT_LEASE_MS
= --lease-ms), heals it (`ip link set sp-host up`) and waits for loadgen. Checked:
  - every run the isolated worker held at the cut got a `takeover` event by the free worker
    (read from the runs' event streams), and how each ended (blocked = its effect was in
    doubt under the block policy: the safe outcome, nothing guessed);
  - no Idempotency-Key delivered twice (policy block);
  - the isolated worker's late writes were refused: its log shows "lease lost" (fenced);
  - loadgen exit status 0 (every run ended).
On exit it stops everything it started and deletes the namespace, the veth pair, the socat
forwarders and the Savepoint namespace's keys and queues. If `ip netns add` is not
permitted it says so and exits with status 4.

Options:
  --runs R             runs (default 30), at R/(2*cut-at) runs/s
  --steps S            steps per run (default 10); the effect is at S/2
  --effect-delay SECS  webhook answer delay (default 1.5)
  --policy P           block or retry_safe (default block)
  --lease-ms MS        SAVEPOINT_LEASE_MS for the fleet (default 3000)
  --cut-at SECONDS     earliest cut, after loadgen starts (default 4)
  --cut-for SECONDS    partition length (default 12)
  --amqp-heartbeat N   heartbeat of the isolated worker's AMQP link (default 3; 0 = none:
                       the broker then only notices after its default heartbeat, 60 s)
  --timeout SECONDS    longest wait for loadgen (default 120)
  -h, --help           this text
EOF
}

RUNS=30 STEPS=10 DELAY=1.5 POLICY=block LEASE=3000 CUT_AT=4 CUT_FOR=12 HB=3 TIMEOUT=120
while (($#)); do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --effect-delay) DELAY=$2; shift 2 ;;
    --policy) POLICY=$2; shift 2 ;;
    --lease-ms) LEASE=$2; shift 2 ;;
    --cut-at) CUT_AT=$2; shift 2 ;;
    --cut-for) CUT_FOR=$2; shift 2 ;;
    --amqp-heartbeat) HB=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in RUNS STEPS LEASE CUT_AT CUT_FOR TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "--${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $HB =~ ^[0-9]+$ ]] || { echo "--amqp-heartbeat must be a number" >&2; exit 2; }
[[ $DELAY =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--effect-delay must be a number" >&2; exit 2; }
[[ $POLICY == block || $POLICY == retry_safe ]] || { echo "--policy must be block or retry_safe" >&2; exit 2; }
((CUT_FOR * 1000 > LEASE)) || { echo "--cut-for must be longer than the lease" >&2; exit 2; }

NETNS=spchaos HOST_IF=sp-host NS_IF=sp-ns HOST_IP=10.213.0.1 NS_IP=10.213.0.2
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_need ip socat
export SAVEPOINT_LEASE_MS=$LEASE

# --- Is this allowed here at all? ---------------------------------------------------------
if ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$NETNS"; then
  chaos_die "network namespace $NETNS already exists (not ours): delete it with 'ip netns del $NETNS'"
fi
if ip link show "$HOST_IF" >/dev/null 2>&1; then
  chaos_die "interface $HOST_IF already exists (not ours): delete it with 'ip link del $HOST_IF'"
fi
if ! err=$(ip netns add "$NETNS" 2>&1); then
  echo "partition-worker: cannot create a network namespace here: 'ip netns add $NETNS' failed: $err" >&2
  echo "partition-worker: this test needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN); nothing was started." >&2
  exit 4
fi
trap 'ip netns del $NETNS 2>/dev/null' EXIT # until chaos_init installs the full cleanup
chaos_init partition-worker
chaos_on_exit "ip netns del $NETNS 2>/dev/null; ip link del $HOST_IF 2>/dev/null; chaos_log 'cleanup: netns $NETNS and veth $HOST_IF/$NS_IF removed'"

# --- The private network ------------------------------------------------------------------
ip link add "$HOST_IF" type veth peer name "$NS_IF"
ip link set "$NS_IF" netns "$NETNS"
ip addr add "$HOST_IP/30" dev "$HOST_IF"
ip link set "$HOST_IF" up
ip netns exec "$NETNS" ip addr add "$NS_IP/30" dev "$NS_IF"
ip netns exec "$NETNS" ip link set "$NS_IF" up
ip netns exec "$NETNS" ip link set lo up
chaos_log "netns $NETNS: $HOST_IF $HOST_IP/30 <-> $NS_IF $NS_IP/30"

# start_socat NAME NETNS|- LISTEN_ADDR PORT TARGET_ADDR TARGET_PORT
start_socat() {
  local name=$1 netns=$2 la=$3 lp=$4 ta=$5 tp=$6 pre=()
  [[ $netns != - ]] && pre=(ip netns exec "$netns")
  "${pre[@]}" socat "TCP-LISTEN:$lp,bind=$la,fork,reuseaddr" "TCP:$ta:$tp" >>"$CHAOS_TMP/socat.log" 2>&1 &
  local pid=$!
  disown "$pid"
  chaos_track "$pid" "socat-$name" socat
  local end=$((SECONDS + 10))
  until "${pre[@]}" ss -Htln "sport = :$lp" | grep -q "$la"; do
    ((SECONDS < end)) || chaos_die "socat $name did not listen on $la:$lp"
    sleep 0.1
  done
  chaos_log "socat $name: $la:$lp -> $ta:$tp$([[ $netns != - ]] && echo " (inside $netns)") (pid $pid)"
}

# bridge PORT NAME: make 127.0.0.1:PORT reachable at $HOST_IP:PORT from the namespace.
bridge() {
  local port=$1 name=$2 listen
  listen=$(ss -Htln "sport = :$port" | awk '{ print $4 }' | tr '\n' ' ')
  [[ -n $listen ]] || chaos_die "nothing listens on port $port ($name)"
  if grep -qE '(^| )(0\.0\.0\.0|\*|\[::\]):' <<<"$listen"; then
    chaos_log "$name listens on all interfaces ($listen): reached directly at $HOST_IP:$port"
  else
    chaos_log "$name listens on loopback only ($listen): bridging with socat"
    start_socat "$name" - "$HOST_IP" "$port" 127.0.0.1 "$port"
  fi
}
bridge 6379 redis
bridge 5672 rabbitmq
[[ $(ip netns exec "$NETNS" redis-cli -h "$HOST_IP" -p 6379 ping 2>&1) == PONG ]] ||
  chaos_die "Redis is not reachable from $NETNS at $HOST_IP:6379"

# --- Slow webhook receiver (same URL in both network namespaces) ----------------------------
HOOK_PORT=$(chaos_free_port)
DELIVERIES=$CHAOS_TMP/deliveries
: >"$DELIVERIES"
cat >"$CHAOS_TMP/hook.sh" <<EOF
#!/usr/bin/env bash
# One HTTP request on stdin/stdout (socat SYSTEM): log the Idempotency-Key, wait, answer 200.
len=0 key=-
while IFS= read -r line; do
  line=\${line%\$'\r'}
  [[ -z \$line ]] && break
  case \${line,,} in
    idempotency-key:*) key=\${line#*:}; key=\${key// /} ;;
    content-length:*) len=\${line#*:}; len=\${len// /} ;;
  esac
done
((len > 0)) && head -c "\$len" >/dev/null
echo "\$key" >>"$DELIVERIES"
sleep $DELAY
printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'
EOF
chmod +x "$CHAOS_TMP/hook.sh"
socat "TCP-LISTEN:$HOOK_PORT,bind=127.0.0.1,fork,reuseaddr" "SYSTEM:$CHAOS_TMP/hook.sh" \
  >>"$CHAOS_TMP/socat.log" 2>&1 &
HOOK_PID=$!
disown "$HOOK_PID"
chaos_track "$HOOK_PID" hook socat
start_socat hook-host - "$HOST_IP" "$HOOK_PORT" 127.0.0.1 "$HOOK_PORT"
start_socat hook-ns "$NETNS" 127.0.0.1 "$HOOK_PORT" "$HOST_IP" "$HOOK_PORT"
HOOK_URL=http://127.0.0.1:$HOOK_PORT/hook

# --- Fleet ------------------------------------------------------------------------------
chaos_start_scheduler
chaos_start_worker free
chaos_wait_registered webhook 60
amqp_ns="amqp://guest:guest@$HOST_IP:5672/%2f"
((HB > 0)) && amqp_ns+="?heartbeat=$HB"
chaos_start_worker_netns "$NETNS" isolated SAVEPOINT_AMQP_URL="$amqp_ns" \
  SAVEPOINT_REDIS_URL="redis://$HOST_IP:6379"
ISO_PID=$CHAOS_LAST_PID
ISO_LOG=$CHAOS_TMP/worker-isolated.log
end=$((SECONDS + 60))
until grep -q 'worker started' "$ISO_LOG" 2>/dev/null; do
  ((SECONDS < end)) || chaos_die "isolated worker did not start (see $ISO_LOG)"
  chaos_alive "$ISO_PID" || chaos_die "isolated worker exited: $(tail -3 "$ISO_LOG")"
  sleep 0.2
done
chaos_log "isolated worker started inside $NETNS"

RATE=$(awk -v r="$RUNS" -v c="$CUT_AT" 'BEGIN { printf "%.3f", r / (2 * c) }')
chaos_start_loadgen --workflow webhook --runs "$RUNS" --steps "$STEPS" --rate "$RATE" \
  --webhook-url "$HOOK_URL" --policy "$POLICY" --timeout "$TIMEOUT"

# Run keys whose lease the isolated worker holds right now.
held_by_isolated() {
  local keys=()
  mapfile -t keys < <(chaos_redis --scan --pattern "$NS:*:run:*")
  ((${#keys[@]})) || return 0
  chaos_redis eval "local out = {}
    for _, k in ipairs(KEYS) do
      local h = redis.call('HMGET', k, 'status', 'owner')
      if h[1] == 'running' and h[2] and string.sub(h[2], 1, 9) == 'isolated-' then out[#out + 1] = k end
    end
    return out" "${#keys[@]}" "${keys[@]}"
}

sleep "$CUT_AT"
held=()
end=$((SECONDS + 20))
while ((SECONDS < end)) && chaos_alive "$CHAOS_LG_PID"; do
  mapfile -t held < <(held_by_isolated | grep . || true)
  ((${#held[@]})) && break
  sleep 0.05
done
((${#held[@]})) || chaos_die "the isolated worker never held a run (see $ISO_LOG); nothing to cut"
ip link set "$HOST_IF" down
cut_t=$EPOCHREALTIME
chaos_log "CUT: $HOST_IF down while the isolated worker held ${#held[@]} runs"
sleep "$CUT_FOR"
ip link set "$HOST_IF" up
chaos_log "HEALED: $HOST_IF up after ${CUT_FOR}s"
chaos_wait_loadgen "$((TIMEOUT + 30))"
sleep 2 # let the isolated worker's late writes reach Redis and be refused

# --- Verdict --------------------------------------------------------------------------------
# Per held run: final status | takeovers by a non-isolated worker | other takeovers | reason
# Lua: the events of a run as {type, detail} pairs, from either event log layout: a stream
# (fields type/detail/at) or, in newer builds, a capped list of "<ms>\31<type>\31<detail>".
EVENTS_LUA="local function events(key)
  local out = {}
  local ty = redis.call('TYPE', key).ok
  if ty == 'stream' then
    for _, e in ipairs(redis.call('XRANGE', key, '-', '+')) do
      local f = {}
      for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
      out[#out + 1] = { f.type or '', f.detail or '' }
    end
  elseif ty == 'list' then
    for _, s in ipairs(redis.call('LRANGE', key, 0, -1)) do
      local a = string.find(s, '\31', 1, true)
      local b = a and string.find(s, '\31', a + 1, true)
      if b then out[#out + 1] = { string.sub(s, a + 1, b - 1), string.sub(s, b + 1) } end
    end
  end
  return out
end
"
# Per held run: final status | takeovers by a non-isolated worker | other takeovers | reason
outcome() { # run key
  local ev=${1/:run:/:ev:}
  chaos_redis eval "$EVENTS_LUA
    local st = redis.call('HMGET', KEYS[1], 'status', 'reason')
    local free, other = 0, 0
    for _, e in ipairs(events(KEYS[2])) do
      if e[1] == 'takeover' and string.find(e[2], 'expired lease of isolated-', 1, true) then
        if string.sub(e[2], 1, 9) == 'isolated-' then other = other + 1 else free = free + 1 end
      end
    end
    return (st[1] or 'missing') .. '|' .. free .. '|' .. other .. '|' .. (st[2] or '')" 2 "$1" "$ev"
}
taken_free=0 taken_self=0 not_taken=0
declare -A ends=()
for k in "${held[@]}"; do
  IFS='|' read -r st free other reason < <(outcome "$k")
  ends[$st]=$((${ends[$st]:-0} + 1))
  if ((free > 0)); then taken_free=$((taken_free + 1)); elif ((other > 0)); then taken_self=$((taken_self + 1)); else not_taken=$((not_taken + 1)); fi
  echo "${k##*:run:} ended $st, takeovers by free worker $free, by isolated itself $other${reason:+, reason: $reason}" >>"$CHAOS_TMP/held.txt"
done
all_takeovers=0
mapfile -t allkeys < <(chaos_redis --scan --pattern "$NS:*:ev:*" | grep . || true)
for e in "${allkeys[@]}"; do
  n=$(chaos_redis eval "$EVENTS_LUA
    local n = 0
    for _, e in ipairs(events(KEYS[1])) do
      if e[1] == 'takeover' then n = n + 1 end
    end
    return n" 1 "$e")
  all_takeovers=$((all_takeovers + n))
done
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }
lease_lost=$(strip "$ISO_LOG" | grep -ciE 'lease lost' || true)
fenced=$(strip "$ISO_LOG" | grep -ciE 'fenced' || true)
delivered=$(sort "$DELIVERIES" | uniq | wc -l)
twice=$(sort "$DELIVERIES" | uniq -d | wc -l)
status_line=$(for s in "${!ends[@]}"; do printf '%s=%s ' "$s" "${ends[$s]}"; done)

echo
echo "== partition-worker: isolated worker in netns $NETNS cut for ${CUT_FOR}s (lease ${LEASE} ms, policy $POLICY), namespace $NS"
echo "runs held by the isolated worker at the cut: ${#held[@]}; taken over by the free worker: $taken_free; by the isolated worker itself after the heal: $taken_self; no takeover: $not_taken"
echo "how the held runs ended: $status_line"
sed 's/^/  /' "$CHAOS_TMP/held.txt" | head -10
echo "takeover events in all runs: $all_takeovers"
echo "webhook: $delivered keys delivered, $twice delivered more than once"
echo "isolated worker log: $lease_lost 'lease lost' lines, $fenced mentioning 'fenced'; e.g.:"
strip "$ISO_LOG" | grep -iE 'lease lost' | head -2 | cut -c1-220 | sed 's/^/  /'
chaos_print_loadgen
echo "loadgen exit status $CHAOS_LG_RC"

rc=$CHAOS_LG_RC
fail() { echo "FAILED: $*"; rc=${rc/#0/1}; }
((taken_free == ${#held[@]})) || fail "$((${#held[@]} - taken_free)) held runs were not taken over by the free worker"
[[ $POLICY != block ]] || ((twice == 0)) || fail "$twice webhook keys delivered twice under the block policy"
((lease_lost > 0)) || fail "the isolated worker's log shows no refused (lease lost) write"
((CHAOS_LG_RC == 0)) || fail "loadgen exited with $CHAOS_LG_RC"
((rc != 0)) || echo "OK: held runs taken over, nothing delivered twice, late writes refused, every run ended"
exit "$rc"
