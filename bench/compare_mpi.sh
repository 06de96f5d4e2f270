#!/usr/bin/env bash
# compare_mpi.sh - hk next to Open MPI's MPI_Allreduce on this machine:
# the comparison of bench/RESULTS.md's "hk next to Open MPI over loopback
# TCP" table.
#
#   bench/compare_mpi.sh [BUILD]          (default BUILD: build)
#
# For each of ROUNDS interleaved rounds and each NP in NPS, one allreduce
# size (SIZE bytes of float32 sum, in place, ITERS timed iterations, the
# time of an iteration the max over ranks, medians over iterations: the
# method of bench/peers/README.md, which both benchmarks follow):
#   hk            hkrun -np NP hkbench -b SIZE -e SIZE -n ITERS --raw
#   tcp           Open MPI, ob1 + tcp btl over loopback (what hk's
#                 transport is), out of the box
#   tcp-nommap    the same, glibc told not to mmap (Open MPI mallocs its
#                 allreduce temporaries per call; mmap'ed blocks re-fault
#                 at every call: MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_)
#   vader-nommap  ob1 + vader (shared memory, CMA single copy), no mmap
# Every run is bounded by LIMIT seconds. The raw outputs go to
# OUT/raw/<peer>_np<N>_r<k>.txt; the report (markdown, on stdout and in
# OUT/report.md) gives each peer's median time, and hk's time over the
# peer's per round (the same round, so the machine's load is shared) with
# their median.
#
# Environment: ROUNDS (3), NPS ("2 4"), SIZE (64M), ITERS (10), LIMIT
# (300), OUT (BUILD/compare-mpi). Needs Open MPI (openmpi-bin,
# libopenmpi-dev: BUILD/mpi_allreduce_bench is bench/peers'
# mpi_allreduce_bench.c, built by CMake where MPI is found).
# On a 2-core machine np=4 runs 4 ranks on 2 cores; run it when the
# machine is otherwise quiet, and read ratios rather than times.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$root/build}" && pwd)
ROUNDS=${ROUNDS:-3}
NPS=${NPS:-"2 4"}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-10}
LIMIT=${LIMIT:-300}
OUT=${OUT:-$BUILD/compare-mpi}

hkrun=$BUILD/hkrun
hkbench=$BUILD/hkbench
mab=$BUILD/mpi_allreduce_bench
for f in "$hkrun" "$hkbench" "$mab"; do
  [ -x "$f" ] || {
    echo "compare_mpi: $f is missing (build first: scripts/build.sh; MPI needed for mpi_allreduce_bench)" >&2
    exit 1
  }
done
command -v mpirun >/dev/null || { echo "compare_mpi: mpirun not found (openmpi-bin)" >&2; exit 1; }

M=(mpirun --oversubscribe --bind-to none --mca pml ob1)
[ "$(id -u)" = 0 ] && M+=(--allow-run-as-root)
NOMMAP=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184)
TCP=(--mca btl self,tcp --mca btl_tcp_if_include lo)
VADER=(--mca btl self,vader)
ARGS=(-b "$SIZE" -e "$SIZE" -n "$ITERS")
PEERS=(hk tcp tcp-nommap vader-nommap)

cmd() { # peer np
  case $1 in
  hk) echo "$hkrun" -np "$2" --no-tag-output "$hkbench" "${ARGS[@]}" --raw ;;
  tcp) echo "${M[@]}" -np "$2" "${TCP[@]}" "$mab" "${ARGS[@]}" ;;
  tcp-nommap) echo "${M[@]}" -np "$2" "${TCP[@]}" "${NOMMAP[@]}" "$mab" "${ARGS[@]}" ;;
  vader-nommap) echo "${M[@]}" -np "$2" "${VADER[@]}" "${NOMMAP[@]}" "$mab" "${ARGS[@]}" ;;
  esac
}

# time(us) of the one data line of a run's output (column 5), or "fail"
time_of() {
  awk '!/^#/ && NF >= 8 { t = $5 } END { print (t == "" ? "fail" : t) }' "$1"
}

median() { # numbers on stdin
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "fail"; exit }
    print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

mkdir -p "$OUT/raw"
for r in $(seq 1 "$ROUNDS"); do
  for np in $NPS; do
    for p in "${PEERS[@]}"; do
      f=$OUT/raw/${p}_np${np}_r$r.txt
      c=$(cmd "$p" "$np")
      start=$(date +%s)
      # shellcheck disable=SC2086
      { echo "# cmd: $c"; timeout "$LIMIT" $c 2>&1; echo "# rc=$? wall_s=$(($(date +%s) - start))"; } >"$f" || true
      echo "compare_mpi: round $r np $np $p: $(time_of "$f") us" >&2
    done
  done
done

{
  echo "# hk vs Open MPI MPI_Allreduce, $SIZE float32 sum, in place"
  echo
  echo "$(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg);"
  echo "$ROUNDS interleaved rounds, $ITERS iterations each; times in ms (median over rounds),"
  echo "hk / peer: the median over rounds of the ratio within a round."
  for np in $NPS; do
    echo
    echo "| np=$np | $(printf '%s | ' "${PEERS[@]}")"
    echo "|---|$(printf -- '---|%.0s' "${PEERS[@]}")"
    line="| time (ms) |"
    ratio="| hk / peer |"
    for p in "${PEERS[@]}"; do
      t=$(for r in $(seq 1 "$ROUNDS"); do time_of "$OUT/raw/${p}_np${np}_r$r.txt"; done |
        grep -v fail | median)
      [ "$t" = fail ] && line="$line fail |" || line="$line $(awk -v t="$t" 'BEGIN { printf "%.1f", t / 1000 }') |"
      if [ "$p" = hk ]; then
        ratio="$ratio |"
        continue
      fi
      q=$(for r in $(seq 1 "$ROUNDS"); do
        h=$(time_of "$OUT/raw/hk_np${np}_r$r.txt")
        o=$(time_of "$OUT/raw/${p}_np${np}_r$r.txt")
        [ "$h" != fail ] && [ "$o" != fail ] && awk -v h="$h" -v o="$o" 'BEGIN { print h / o }'
      done | median)
      [ "$q" = fail ] && ratio="$ratio fail |" || ratio="$ratio $(awk -v q="$q" 'BEGIN { printf "%.2f", q }') |"
    done
    echo "$line"
    echo "$ratio"
  done
  echo
  echo "Raw outputs: $OUT/raw (the first line of each is its command)."
} | tee "$OUT/report.md"
