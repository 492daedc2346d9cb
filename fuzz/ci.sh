#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (default 10) from a fresh copy of its
# committed seed corpus; fails on any crash, panic, timeout or OOM. Prints one line a target:
#   fuzz TARGET: N execs in S s, cov C, 0 crashes
#
# Usage: fuzz/ci.sh [SECONDS]
# Needs cargo-fuzz. The only toolchain is stable, so RUSTC_BOOTSTRAP=1 lets it take the `-Z`
# flags cargo-fuzz passes. Build parallelism follows CARGO_BUILD_JOBS.
#
# The build: by default the CI slice's, unoptimised with debug assertions and overflow checks
# and no sanitizer (`--dev --sanitizer none`): 3.5 minutes from nothing on 2 cores instead of
# about 12 for the release + AddressSanitizer build (one codegen unit per crate), and the
# targets' code is `forbid(unsafe_code)`. SAVEPOINT_FUZZ_BUILD=asan builds release + ASan
# (`-O`), for long runs and for the C and `unsafe` code of dependencies.
set -euo pipefail

secs="${1:-10}"
case "$secs" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz > /dev/null || { echo "fuzz: cargo-fuzz is not installed" >&2; exit 1; }

case "${SAVEPOINT_FUZZ_BUILD:-dev}" in
  dev) build=(--dev --sanitizer none) ;;
  asan) build=(-O) ;;
  *) echo "fuzz: SAVEPOINT_FUZZ_BUILD must be dev or asan, not ${SAVEPOINT_FUZZ_BUILD}" >&2; exit 2 ;;
esac

start=$(date +%s)
cargo fuzz build "${build[@]}"
echo "fuzz: built all targets (${build[*]}) in $(( $(date +%s) - start )) s"

mapfile -t targets < <(cargo fuzz list)
[ "${#targets[@]}" -gt 0 ] || { echo "fuzz: no targets" >&2; exit 1; }

failed=0
for t in "${targets[@]}"; do
  # The run writes the inputs it finds into corpus-run/ (ignored by git), never into the
  # committed seeds under corpus/.
  run="corpus-run/$t"
  rm -rf "$run"
  mkdir -p "$run" "artifacts/$t"
  if [ -d "corpus/$t" ]; then
    cp -r "corpus/$t/." "$run/"
  fi
  log="artifacts/$t/ci.log"
  before=$(find "artifacts/$t" -type f ! -name ci.log | wc -l)
  t0=$(date +%s.%N)
  rc=0
  cargo fuzz run "$t" "${build[@]}" "$run" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 > "$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  after=$(find "artifacts/$t" -type f ! -name ci.log | wc -l)
  crashes=$(( after - before ))
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
    crashes=1  # died without writing an artifact (e.g. a sanitizer abort)
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "fuzz $t: ${execs:-?} execs in $elapsed s, cov ${cov:-?}, $crashes crashes"
  if [ "$crashes" -ne 0 ]; then
    failed=1
    echo "fuzz $t: FAILED (exit $rc); the log's end, and the reproducer under fuzz/artifacts/$t/:" >&2
    tail -40 "$log" >&2
    find "artifacts/$t" -type f ! -name ci.log -newer "$run" >&2 || true
  fi
done
exit "$failed"
