#!/usr/bin/env bash
# rolling.sh: upgrade a live fleet from the previous build to this one, one process at a
# time, under load; then roll it back the same way. Every run must end, no effect twice.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: deploy/upgrade/rolling.sh [--from-ref REF | --from-bin DIR] [--runs N] [--debug]

Builds the previous build (REF, default the `PREVIOUS` line below: the upgrade policy's
floor, the oldest build allowed beside this one) from its own source in a git worktree
(target/upgrade/src-COMMIT), unless --from-bin names a directory holding its savepoint,
savepoint-worker and savepoint-scheduler. The worktree's package version is marked
`+previous`, so its crates and this build's have distinct artifacts in this checkout's
target directory and share every dependency's: after this build, the previous one compiles
only the workspace's own crates (about 50 s in debug on 2 cores). Its binaries are kept in
target/upgrade/COMMIT-PROFILE and this build's, which its build replaced in target/PROFILE, are
put back. Only one previous commit is kept there: another's worktree and binaries are
removed. This build's binaries are target/release, or target/debug with --debug
(SAVEPOINT_BIN_DIR overrides), built if missing.

Upgrade: two schedulers and two workers of the previous build run a fresh namespace on the
local RabbitMQ and Redis. Runs are left in every state the demo workflows reach: waiting for
a human (`approval`), in a flow-control line holding its one slot (`metered`, a key of limit
1), under a run deadline (`metered`, timeout 600 s), a parent (`family`) waiting for
children that wait for a signal, fired by a schedule every second, and `webhook` load from
the load generator (runs pending and running, an effect each, delivered to the load
generator's receiver, which counts every delivery). Then each process is replaced by this
build's, one at a time (SIGTERM: a worker yields its runs), while the load goes on. The
approvals are answered, the schedule deleted, and the script waits for every run to end.

Mid-roll, with workers of both builds live, the `webhook` workflow is paused for 8 s
through the API: it must be taken, stop runs, and no webhook run may call its provider while
it holds (the demo's effects log, outside the engine, gains no `webhook.post` line).

Rollback: the same with this build's fleet first and the previous build's after.

Checks, outside the engine: the load generator lost no run and its receiver saw no
delivery twice; every run the script started completed, with the output it expects; no run
of the namespace is left in any other state (the schedule's included); no task was
dead-lettered; a witness outside the engine saw at most one run of the flow key inside a step
at once; the demo's effects log has no key twice.

Sleeping and blocked runs are made for real before the fleet is replaced, by workers of the
phase's first build on task queues of their own that die (SIGABRT) right after an effect's
call (`SAVEPOINT_FAILPOINTS=effect.after_call=abort`): an `invoice` run keeps its ledger key
in doubt with no worker left on its queue, a second `invoice` run of the same invoice sleeps
backing off that key, and a third is blocked with its email in doubt. Once the fleet is the
second build, the blocked run is resolved through the API (`applied: true`) and a worker of
the second build serves the two queues: all three complete, each effect performed once.

Options:
  --from-ref REF    the previous build's commit (default: PREVIOUS below)
  --from-bin DIR    its prebuilt binaries instead
  --runs N          webhook runs from the load generator per phase (default 300, at 15 a
                    second: the load lasts while the fleet is replaced)
  --debug           both builds' debug binaries (what .ci/run runs) instead of release
  -h, --help        this text
EOF
}

# The previous build: the upgrade policy's floor, the oldest build allowed beside this one
# (README, "Upgrading Savepoint itself"): the first whose workers register their pace
# (`slices_per_sec`), by which this build's API knows they keep pauses.
PREVIOUS=d84b766
FROM_REF=$PREVIOUS FROM_BIN='' RUNS=300 PROFILE=release
while (($#)); do
  case $1 in
    --debug) PROFILE=debug; shift ;;
    --from-ref) FROM_REF=$2; shift 2 ;;
    --from-bin) FROM_BIN=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $RUNS =~ ^[0-9]+$ && $RUNS -gt 0 ]] || { echo "--runs must be a positive integer" >&2; exit 2; }

REPO=$(cd "$(dirname "$0")/../.." && pwd)
BINS=(savepoint savepoint-worker savepoint-scheduler)
CARGO_PROFILE=(); [[ $PROFILE == release ]] && CARGO_PROFILE=(--release)
# (The workspace's own lints are not the previous build's to pass: no Clippy driver.)
plain_cargo() { env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS cargo "$@"; }
NEW_BIN=${SAVEPOINT_BIN_DIR:-$REPO/target/$PROFILE}
if [[ ! -x $NEW_BIN/savepoint-worker || ! -x $NEW_BIN/savepoint-scheduler || ! -x $NEW_BIN/savepoint ]]; then
  (cd "$REPO" && plain_cargo build "${CARGO_PROFILE[@]}" -p savepoint-cli -p savepoint-scheduler -p savepoint-demo --bins)
fi

# The previous build from its own source, in this checkout's target directory (see --help),
# kept by commit. It builds with the features the build stage of .ci/run resolves (the whole
# workspace, every feature, and the dev-dependencies' features, which `--examples` brings in
# though no package has an example), so every dependency is the one already built. It links
# its binaries and libraries into target/PROFILE as this build's do: every file there is set
# aside (hard links) while it builds and put back after, also when the build fails or the
# script is stopped.
build_previous() { # REF -> FROM_BIN
  local commit wt b f
  commit=$(git -C "$REPO" rev-parse --verify "$1^{commit}") || { echo "no such commit: $1" >&2; exit 2; }
  wt=$REPO/target/upgrade/src-$commit FROM_BIN=$REPO/target/upgrade/$commit-$PROFILE
  KEEP=$REPO/target/upgrade/this-$PROFILE HERE=$REPO/target/$PROFILE
  # (Left by a run that was stopped while the previous build built: this build's, put back.)
  [[ -d $KEEP ]] && put_back
  prune_previous "$commit"
  [[ -x $FROM_BIN/savepoint-worker && -x $FROM_BIN/savepoint-scheduler && -x $FROM_BIN/savepoint ]] && return 0
  if [[ ! -d $wt ]]; then
    git -C "$REPO" worktree prune
    git -C "$REPO" worktree add --detach "$wt" "$commit" >/dev/null
  fi
  # Every package's own version is marked, the workspace's and those that set theirs (the
  # example's): cargo keys a path crate's artifacts by name, version and path inside the
  # workspace, so an unmarked one would overwrite this build's.
  while IFS= read -r -d '' f; do
    sed -i -E '/^\[(workspace\.)?package\]$/,/^\[/s/^version = "([^"+]*)"$/version = "\1+previous"/' "$wt/$f"
  done < <(git -C "$wt" ls-files -z -- Cargo.toml '*/Cargo.toml')
  grep -q '^version = ".*+previous"$' "$wt/Cargo.toml" || { echo "cannot mark $wt/Cargo.toml's version" >&2; exit 2; }
  mkdir -p "$KEEP" "$FROM_BIN" "$HERE"
  while IFS= read -r -d '' f; do ln "$f" "$KEEP/"; done < <(find "$HERE" -maxdepth 1 -type f ! -name .cargo-lock -print0)
  trap 'put_back; exit 130' INT TERM
  if ! (cd "$wt" && CARGO_TARGET_DIR=$REPO/target plain_cargo build "${CARGO_PROFILE[@]}" \
    --workspace --all-features --bins --examples); then
    put_back
    echo "the previous build ($1) did not build; this build's files are back in $HERE" >&2
    exit 1
  fi
  for b in "${BINS[@]}"; do
    cp "$HERE/$b" "$FROM_BIN/$b.part" || { put_back; exit 1; }
    mv "$FROM_BIN/$b.part" "$FROM_BIN/$b"
  done
  put_back
  trap - INT TERM
}

# Only one previous build is kept: the worktrees and binaries of any other commit (a
# PREVIOUS or --from-ref since moved on) are removed.
prune_previous() { # COMMIT
  local d c
  for d in "$REPO"/target/upgrade/*; do
    [[ -d $d ]] || continue
    c=${d##*/}
    case $c in
      this-*) continue ;; # this build's files, set aside (handled by put_back)
      src-"$1" | "$1"-*) continue ;;
      src-*) git -C "$REPO" worktree remove --force "$d" 2>/dev/null || rm -rf "$d" ;;
      *) rm -rf "$d" ;;
    esac
    echo "removed the kept previous build target/upgrade/$c (not $1)" >&2
  done
  git -C "$REPO" worktree prune
}

# This build's files, set aside in KEEP, back in HERE, and none of the previous build's
# left there. (Cargo does not link a binary again over a file it finds in its place.)
put_back() {
  local f
  while IFS= read -r -d '' f; do rm -f "$f"; done < <(find "$HERE" -maxdepth 1 -type f ! -name .cargo-lock -print0)
  while IFS= read -r -d '' f; do ln "$f" "$HERE/"; done < <(find "$KEEP" -maxdepth 1 -type f -print0)
  rm -rf "${KEEP:?}"
}
[[ -n $FROM_BIN ]] || build_previous "$FROM_REF"
OLD_BIN=$FROM_BIN

export SAVEPOINT_BIN_DIR=$NEW_BIN
# shellcheck source=deploy/chaos/lib.sh
source "$REPO/deploy/chaos/lib.sh"
chaos_init upgrade

use_build() { # DIR: the binaries the next process starts from (lib.sh's SP_WORKER, SP_SCHED)
  # shellcheck disable=SC2034
  SP_WORKER=$1/savepoint-worker SP_SCHED=$1/savepoint-scheduler
}

api() { # METHOD PATH [BODY] -> body on stdout; fails on a status >= 400
  local out code
  out=$(curl -sS -X "$1" "$API_A$2" -H 'content-type: application/json' ${3:+-d "$3"} -w '\n%{http_code}')
  code=${out##*$'\n'}
  ((code < 400)) || chaos_die "$1 $2 answered $code: ${out%$'\n'*}"
  printf '%s' "${out%$'\n'*}"
}

declare -A EXPECT=() # thread id -> what its output must be (a jq filter that is true)

start_run() { # WORKFLOW INPUT EXTRA(json object merged into the body) CHECK
  local id
  id=$(api POST /v1/runs "$(jq -nc --arg w "$1" --argjson i "$2" --argjson x "$3" '{workflow: $w, input: $i} + $x')" |
    jq -r .thread_id)
  EXPECT[$id]=$4
  LAST_RUN=$id
}

# A fleet of two schedulers (A serves the script's calls, B the load generator's starts) and
# two workers, all of one build.
start_fleet() { # DIR
  use_build "$1"
  chaos_start_scheduler "$PORT_A"; PID_A=$CHAOS_SCHED_PID
  chaos_start_scheduler "$PORT_B"; PID_B=$CHAOS_SCHED_PID
  chaos_start_worker w1; PID_W1=$CHAOS_LAST_PID
  chaos_start_worker w2; PID_W2=$CHAOS_LAST_PID
  chaos_wait_registered approval
}

# Runs in the states the demo workflows reach on their own (the load generator adds pending
# and running webhook runs with effects; `leave_stuck` sleeping and blocked ones): waiting for
# a human, in a flow-control line and holding its slot (`metered`: 20 steps of 200 ms, a
# witness outside the engine counts the runs of the key inside a step at once), under a run
# deadline, a parent waiting for children that wait for a signal, and a schedule's runs.
leave_runs() { # TAG
  local i
  for i in 1 2 3 4 5 6; do
    start_run approval '{}' '{}' '.log == ["first", "gate=yes"]'
  done
  for i in 1 2 3 4; do
    start_run metered "{\"customer\": \"line-$1\", \"steps\": 20, \"step_ms\": 200}" \
      '{"flow": {"key_from": "/customer", "limit": 1}}' '(.together | max) == 1'
  done
  for i in 1 2; do
    start_run metered "{\"customer\": \"late-$1-$i\", \"steps\": 30, \"step_ms\": 200}" '{"timeout_secs": 600}' \
      '(.together | length) == 30'
  done
  for i in 1 2; do
    start_run family '{"kids": 2, "hold": true, "detached": 1}' '{}' \
      '(.children | map(.doubled)) == [0, 2] and (.detached | length) == 1'
  done
  api POST /v1/schedules "$(jq -nc --arg id "tick-$1" '{id: $id, workflow: "chain", input: {steps: 3}, every_secs: 1}')" >/dev/null
  chaos_log "$1: ${#EXPECT[@]} runs started, schedule tick-$1 firing every second"
}

wait_status() { # ID STATUS SECS: until the run has STATUS, or fail naming what it has
  local end=$((SECONDS + $3)) status=
  while ((SECONDS < end)); do
    status=$(api GET "/v1/runs/$1" | jq -r .status)
    [[ $status == "$2" ]] && return 0
    sleep 0.3
  done
  chaos_die "run $1 is $status, not $2, after $3 s"
}

wait_gone() { # PID SECS: until the process has exited
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    chaos_alive "$1" || return 0
    sleep 0.2
  done
  chaos_die "process $1 did not exit within $2 s"
}

# A run blocked with an effect in doubt, and one sleeping on an effect key another run holds,
# made for real by workers of the phase's first build, each on a task queue of its own, that
# die (SIGABRT, as under kill -9) right after an effect's call:
# - HOLD (`invoice` hold-TAG, queue hold-TAG): its worker dies after `ledger.post`, so the run
#   keeps the key `ledger:hold-TAG` with its outcome in doubt, and no worker serves its queue;
# - SLEEPER (`invoice` hold-TAG as well, the fleet's queue): its `ledger.post` finds the key
#   held by HOLD and sleeps, backing off, until the key is settled;
# - BLOCKED (`invoice` doubt-TAG, queue doubt-TAG): its worker dies after `email.send`
#   (policy block), and the next worker of its queue blocks the run.
# After the fleet is replaced, `settle_stuck` resolves BLOCKED through the API and starts a
# worker of the new build on the two queues: all three complete, every effect once.
leave_stuck() { # TAG
  local tag=$1 out='.total_cents == 125000 and .lines == 2'
  chaos_start_worker "hold-$tag" SAVEPOINT_WORKER_QUEUES="hold-$tag" SAVEPOINT_FAILPOINTS=effect.after_call=abort
  local crash=$CHAOS_LAST_PID
  chaos_wait_registration "hold-$tag" "task queue hold-$tag"
  start_run invoice "{\"invoice_id\": \"hold-$tag\"}" "{\"queue\": \"hold-$tag\"}" "$out"
  HOLD=$LAST_RUN
  wait_gone "$crash" 30
  start_run invoice "{\"invoice_id\": \"hold-$tag\"}" '{}' "$out"
  SLEEPER=$LAST_RUN
  wait_status "$SLEEPER" sleeping 30
  chaos_start_worker "doubt-$tag" SAVEPOINT_WORKER_QUEUES="doubt-$tag" SAVEPOINT_FAILPOINTS=effect.after_call=abort@2
  crash=$CHAOS_LAST_PID
  chaos_wait_registration "doubt-$tag" "task queue doubt-$tag"
  start_run invoice "{\"invoice_id\": \"doubt-$tag\"}" "{\"queue\": \"doubt-$tag\"}" "$out"
  BLOCKED=$LAST_RUN
  wait_gone "$crash" 30
  chaos_start_worker "doubt-$tag-2" SAVEPOINT_WORKER_QUEUES="doubt-$tag"
  wait_status "$BLOCKED" blocked 60
  chaos_stop "$CHAOS_LAST_PID" "$SP_WORKER"
  chaos_log "$tag: $HOLD holds ledger:hold-$tag in doubt, $SLEEPER sleeps on it, $BLOCKED is blocked"
}

settle_stuck() { # TAG DIR -> RESCUE_PID
  local key=email:$BLOCKED
  api POST "/v1/runs/$BLOCKED/effects/$key/resolve" "$(jq -nc --arg k "$key" '{applied: true, result: {sent: $k}}')" >/dev/null
  use_build "$2"
  chaos_start_worker "rescue-$1" SAVEPOINT_WORKER_QUEUES="hold-$1,doubt-$1"
  RESCUE_PID=$CHAOS_LAST_PID
}

# Answers what the namespace's runs wait for: a human's approval, and the signal `go` every
# held child (awaited or detached) waits for. Children appear one after another, so this is
# called until every run has ended.
answer_waits() {
  local id wf
  while read -r id wf; do
    case $wf in
      approval) api POST "/v1/runs/$id/resume" '{"value": "yes"}' >/dev/null ;;
      kid) api POST "/v1/runs/$id/signals/go" '{"value": true}' >/dev/null ;;
    esac
  done < <(api GET "/v1/runs?status=waiting&limit=1000" | jq -r '.runs[] | "\(.thread_id) \(.workflow)"')
}

# A pause taken mid-roll, with workers of both builds live (the older build is the upgrade
# policy's floor, the oldest allowed beside this one): the API must take it (every live worker
# keeps pauses), it must stop runs, and while it holds no `webhook` run may call its provider
# although the load generator keeps starting them: the demo's effects log, outside the engine,
# gains no `webhook.post` line from one heartbeat after the pause (a slice in flight yields at
# its next call, within a third of the 3 s lease) until the resume. After the resume the runs
# go on, and the phase's checks (every run completed, no effect twice) cover them.
posts() { chaos_redis lrange "$NS:demo:effects" 0 -1 | jq -r 'select(.effect == "webhook.post") | .key' | wc -l; }
pause_check() { # NAME
  local before after stopped
  api POST /v1/pauses '{"workflow": "webhook", "note": "mid-roll check"}' >/dev/null
  sleep 2
  before=$(posts)
  sleep 6
  after=$(posts)
  stopped=$(api GET /v1/pauses | jq .paused_runs)
  api POST /v1/pauses/resume '{"workflow": "webhook", "note": "mid-roll check done"}' >/dev/null
  chaos_log "$1: webhook paused 8 s mid-roll: $stopped run(s) stopped, $((after - before)) provider call(s) in the last 6 s"
  ((after == before)) || { chaos_log "$1: $((after - before)) webhook call(s) while webhook was paused"; PAUSE_BAD=1; }
  ((stopped > 0)) || { chaos_log "$1: the pause stopped no run (the load was not reaching it)"; PAUSE_BAD=1; }
}

replace() { # NAME PID DIR -> new pid in REPLACED
  use_build "$3"
  case $1 in
    A) chaos_stop "$2" "$OLD_SCHED_EXE"; chaos_stop "$2" "$NEW_SCHED_EXE"; chaos_start_scheduler "$PORT_A"; REPLACED=$CHAOS_SCHED_PID ;;
    B) chaos_stop "$2" "$OLD_SCHED_EXE"; chaos_stop "$2" "$NEW_SCHED_EXE"; chaos_start_scheduler "$PORT_B"; REPLACED=$CHAOS_SCHED_PID ;;
    *) chaos_stop "$2" "$OLD_WORKER_EXE"; chaos_stop "$2" "$NEW_WORKER_EXE"; chaos_start_worker "$1"; REPLACED=$CHAOS_LAST_PID ;;
  esac
  chaos_log "replaced $1 with $(basename "$(dirname "$3")")/$(basename "$3") build (pid $REPLACED)"
  sleep 3
}

# Rolls the fleet from build FROM to build TO under load; answers, waits, checks.
phase() { # NAME FROM TO
  local name=$1 from=$2 to=$3 id status out bad=0 left
  EXPECT=()
  start_fleet "$from"
  CHAOS_API=http://127.0.0.1:$PORT_B chaos_start_loadgen --workflow webhook --runs "$RUNS" --steps 10 --rate 15 --timeout 240
  # shellcheck disable=SC2034 # (lib.sh's: the API the helpers call)
  CHAOS_API=$API_A
  sleep 2
  leave_runs "$name"
  leave_stuck "$name"
  replace w1 "$PID_W1" "$to"; PID_W1=$REPLACED
  replace A "$PID_A" "$to"; PID_A=$REPLACED
  PAUSE_BAD=0
  pause_check "$name"
  replace w2 "$PID_W2" "$to"; PID_W2=$REPLACED
  settle_stuck "$name" "$to"
  answer_waits
  chaos_wait_loadgen 300
  replace B "$PID_B" "$to"; PID_B=$REPLACED
  api DELETE "/v1/schedules/tick-$name" >/dev/null
  chaos_print_loadgen
  ((CHAOS_LG_RC == 0)) || { chaos_log "$name: the load generator failed (status $CHAOS_LG_RC)"; bad=1; }
  ((PAUSE_BAD == 0)) || bad=1
  for id in "${!EXPECT[@]}"; do
    for _ in $(seq 1 240); do
      answer_waits
      status=$(api GET "/v1/runs/$id" | jq -r .status)
      [[ $status == completed || $status == failed || $status == cancelled || $status == blocked ]] && break
      sleep 0.5
    done
    out=$(api GET "/v1/runs/$id" | jq -c .output)
    if [[ $status != completed ]] || ! jq -e "${EXPECT[$id]}" <<<"$out" >/dev/null; then
      chaos_log "$name: run $id ended $status with $out (expected ${EXPECT[$id]})"
      bad=1
    fi
  done
  # Nothing of the namespace is left anywhere but completed (the schedule's runs included).
  for _ in $(seq 1 60); do
    answer_waits
    left=0
    for status in pending running sleeping waiting blocked paused failed cancelled; do
      left=$((left + $(api GET "/v1/runs?status=$status&limit=1000" | jq '.runs | length')))
    done
    ((left == 0)) && break
    sleep 1
  done
  ((left == 0)) || { chaos_log "$name: $left run(s) of the namespace not completed"; bad=1; }
  # The flow-control witness: never two runs of one customer inside a step at once.
  local most
  most=$(chaos_redis hvals "$NS:demo:witness_max" | sort -n | tail -1)
  [[ ${most:-0} -le 1 ]] || { chaos_log "$name: $most runs of one flow key were inside a step at once"; bad=1; }
  # The demo's effects log, outside the engine: no key performed twice, and the three stuck
  # runs' effects each once (HOLD's ledger post, which SLEEPER shares, and BLOCKED's email).
  local twice once
  twice=$(chaos_redis lrange "$NS:demo:effects" 0 -1 | jq -r .key | sort | uniq -d | head -3)
  [[ -z $twice ]] || { chaos_log "$name: effects performed twice: $twice"; bad=1; }
  for key in "ledger:hold-$name" "email:$BLOCKED" "email:$SLEEPER"; do
    once=$(chaos_redis lrange "$NS:demo:effects" 0 -1 | jq -r .key | grep -cxF "$key" || true)
    [[ $once == 1 ]] || { chaos_log "$name: effect $key performed $once time(s)"; bad=1; }
  done
  local dlq
  dlq=$(timeout 30 rabbitmqctl -q list_queues name messages 2>/dev/null | awk -v q="$NS.dlq" '$1 == q { print $2 }')
  [[ ${dlq:-0} == 0 ]] || { chaos_log "$name: $dlq task(s) dead-lettered"; bad=1; }
  local completed
  completed=$(api GET "/v1/runs?status=completed&limit=1000" | jq '.runs | length')
  echo "$name: ${#EXPECT[@]} scripted runs and the load generator's $RUNS, $completed completed runs listed (at most 1000), at most ${most:-?} run(s) of a flow key inside a step at once, $((bad == 0 ? 0 : 1)) failure(s)"
  for p in "$PID_A" "$PID_B" "$PID_W1" "$PID_W2" "$RESCUE_PID"; do
    chaos_stop "$p" "$OLD_WORKER_EXE"; chaos_stop "$p" "$NEW_WORKER_EXE"
    chaos_stop "$p" "$OLD_SCHED_EXE"; chaos_stop "$p" "$NEW_SCHED_EXE"
  done
  return "$bad"
}

OLD_WORKER_EXE=$OLD_BIN/savepoint-worker NEW_WORKER_EXE=$NEW_BIN/savepoint-worker
OLD_SCHED_EXE=$OLD_BIN/savepoint-scheduler NEW_SCHED_EXE=$NEW_BIN/savepoint-scheduler
PORT_A=$(chaos_free_port) PORT_B=$(chaos_free_port)
API_A=http://127.0.0.1:$PORT_A
failed=0
phase upgrade "$OLD_BIN" "$NEW_BIN" || failed=1
phase rollback "$NEW_BIN" "$OLD_BIN" || failed=1
((failed == 0)) && echo "rolling upgrade and rollback: every run completed, nothing lost, no effect twice"
exit "$failed"
