#!/usr/bin/env bash
# What the deterministic simulator reaches: the lines of every Lua script of the store (the
# embedded engine's line hook, `savepoint sim --lua-coverage`) and the regions and lines of
# the engine's decision code (LLVM source-based coverage of an instrumented `savepoint`).
#   deploy/sim/coverage.sh                     # 200 seeds from 1
#   SEEDS=1000 FIRST=5000 deploy/sim/coverage.sh
# Builds into target/coverage (a separate, instrumented debug build: ~12 min cold on 2 cores).
# Needs the toolchain's llvm-tools component (`rustup component add llvm-tools`, done here).
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-200}; FIRST=${FIRST:-1}; JOBS=${JOBS:-2}
rustup component add llvm-tools >/dev/null 2>&1 || true
TOOLS=$(dirname "$(find "$(rustc --print sysroot)/lib/rustlib" -name llvm-profdata -type f | head -1)")
[ -x "$TOOLS/llvm-profdata" ] || { echo "llvm-profdata not found: rustup component add llvm-tools" >&2; exit 1; }
export CARGO_TARGET_DIR=${COVERAGE_TARGET:-target/coverage}
RUSTFLAGS="-C instrument-coverage" cargo build --quiet -p savepoint-cli --bin savepoint
PROF="$CARGO_TARGET_DIR/prof"; rm -rf "$PROF"; mkdir -p "$PROF"
# (A failing seed is reported, and the coverage still is; the exit status is the sim's.)
status=0
LLVM_PROFILE_FILE="$PROF/sim-%p-%m.profraw" "$CARGO_TARGET_DIR/debug/savepoint" sim \
  --seeds "$SEEDS" --seed "$FIRST" --jobs "$JOBS" --lua-coverage || status=$?
"$TOOLS/llvm-profdata" merge -sparse "$PROF"/*.profraw -o "$PROF/sim.profdata"
COV=("$TOOLS/llvm-cov" report "$CARGO_TARGET_DIR/debug/savepoint" -instr-profile="$PROF/sim.profdata")
echo "== the decision functions (pure: what to do with a reply, a gate, a slice's end)"
"${COV[@]}" core/src/decide.rs core/src/lease.rs
echo "== the engine's code the simulation runs (shared/src/workflow, store/src, worker/src)"
"${COV[@]}" shared/src/workflow store/src worker/src | tail -1
echo "(per line: ${TOOLS}/llvm-cov show $CARGO_TARGET_DIR/debug/savepoint -instr-profile=$PROF/sim.profdata <file>)"
exit "$status"
