#!/usr/bin/env bash
# fuzz_long.sh - issue 13's fuzz figure: every libFuzzer target for RUNS
# executions (10 M) or SECONDS each, whichever ends first. Not run by CI
# (whose fuzz stage runs each target for a bounded number of inputs).
# Needs the fuzz build: scripts/build.sh build-fuzz -DHK_FUZZ=ON
# -DCMAKE_C_COMPILER=clang.
#
#   bench/fuzz_long.sh [TARGET...]   (default: every fuzz_* target built)
#
# Environment (defaults):
#   BUILD=build-fuzz
#   RUNS=10000000   executions per target
#   SECONDS_EACH=0  a time bound per target too (0: none)
#   PAR=1           targets at once
#   OUT=$BUILD/fuzz-long   scratch corpora (the seeds are copied there, the
#                   source tree's corpora are never written), crash inputs
#                   (crashes/TARGET-*), each target's log, summary.txt
#   ADD=0           1: copy every crash input into the target's seed corpus
#                   in tests/fuzz (then fix the crash and commit both)
#
# summary.txt: per target, executions, seconds, executions/s, crashes
# (inputs libFuzzer saved: crash-, leak-, timeout-, oom-), libFuzzer's exit.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-fuzz}
RUNS=${RUNS:-10000000}
SECONDS_EACH=${SECONDS_EACH:-0}
PAR=${PAR:-1}
OUT=${OUT:-$BUILD/fuzz-long}
ADD=${ADD:-0}
F=$BUILD/tests/fuzz
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for t in "$F"/fuzz_*; do [ -x "$t" ] && targets+=("$(basename "$t")"); done
fi
[ ${#targets[@]} -gt 0 ] || {
  echo "no fuzz targets in $F (build $BUILD first)" >&2
  exit 2
}
mkdir -p "$OUT/crashes"

seeds() { # the seed directories of a target, as tests/fuzz/CMakeLists.txt
  case $1 in
  fuzz_wire) echo tests/fuzz/corpus ;;
  fuzz_hosts) echo tests/fuzz/corpus_hosts ;;
  fuzz_topo_smi) echo tests/fuzz/corpus_topo_smi tests/data/topologies/smi ;;
  fuzz_topo_xml) echo tests/fuzz/corpus_topo_xml tests/data/topologies/ncclxml ;;
  esac
}
maxlen() { case $1 in fuzz_topo_*) echo 8192 ;; *) echo 4096 ;; esac; }

one() {
  local t=$1 scratch=$OUT/corpus_$t t0 rc
  rm -rf "$scratch" && mkdir -p "$scratch"
  for d in $(seeds "$t"); do cp -r "$d"/. "$scratch"/ 2>/dev/null; done
  t0=$(date +%s)
  "$F/$t" -runs="$RUNS" -max_total_time="$SECONDS_EACH" \
    -max_len="$(maxlen "$t")" -seed=1 -print_final_stats=1 \
    -artifact_prefix="$OUT/crashes/$t-" "$scratch" >"$OUT/$t.log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0)) execs crashes
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/$t.log" | tail -1)
  crashes=$(ls "$OUT/crashes/$t-"* 2>/dev/null | grep -c . || true)
  printf '%-16s %12s %7d %9s %7d %4d\n' "$t" "${execs:-?}" "$secs" \
    "$(awk -v e="${execs:-0}" -v s="$secs" 'BEGIN { printf "%.0f", s ? e / s : 0 }')" \
    "$crashes" "$rc" >"$OUT/$t.row"
  if [ "$ADD" = 1 ] && [ "$crashes" != 0 ]; then
    local dst
    dst=$(seeds "$t" | cut -d' ' -f1)
    cp "$OUT/crashes/$t-"* "$dst"/
  fi
}

start=$(date +%s)
running=0
for t in "${targets[@]}"; do
  one "$t" &
  running=$((running + 1))
  if [ $running -ge "$PAR" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
{
  echo "# fuzz: RUNS=$RUNS SECONDS_EACH=$SECONDS_EACH PAR=$PAR," \
    "$(($(date +%s) - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%-16s %12s %7s %9s %7s %4s\n' target executions seconds 'exec/s' \
    crashes exit
  for t in "${targets[@]}"; do cat "$OUT/$t.row"; done
  ls "$OUT/crashes" | sed 's/^/crash input: /'
} | tee "$OUT/summary.txt"
