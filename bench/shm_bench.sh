#!/usr/bin/env bash
# shm_bench.sh - hk's allreduce between the ranks of one host (shared
# memory, HK_INTRA_TRANSPORT) next to Open MPI's shared-memory transport
# with glibc kept from mmap'ing its per-call temporaries (the fair
# setting of the project's peer measurements: "mpi-vader-nommap"),
# float32 sum, in place, measured in the same run, in interleaved rounds,
# medians. Needs Open MPI (mpicc, mpirun) and a build
# (scripts/build.sh build). Asserts nothing.
#
#   bench/shm_bench.sh
#
# Environment (defaults):
#   BUILD=build           hkrun, hkbench; the MPI benchmark is built from
#                         bench/peers/mpi_allreduce_bench.c into
#                         $BUILD/peers
#   OUT=$BUILD/shm-bench  report.md and every run's output (raw/)
#   ROUNDS=3              rounds; each runs every program once per np
#   NPS="2 4"             world sizes (np 4 runs 4 ranks on 2 cores)
#   MIN=1M MAX=256M F=2   the sweep: MIN, MIN*F, ... MAX bytes
#   HK_VARIANTS="hk:HK_CYCLE_TIME_MS=0 hk-tcp:HK_INTRA_TRANSPORT=tcp,HK_CYCLE_TIME_MS=0"
#                         hk runs: NAME[:VAR=V[,VAR=V...]]. hkbench --raw
#                         gives the public API's time and the collective's
#                         alone (raw, timed by the background thread);
#                         HK_CYCLE_TIME_MS=0 takes the negotiation timer
#                         out of the API time (issue 11 part 2 removes it)
#   PRIO=              a prefix for every measured run, hk and Open MPI alike:
#                         "chrt -r 1" keeps other work on the machine (builds,
#                         other tests) off the cores while they run (as root)
#   LIMIT=600             seconds any one run may take
#
# Report: per np and size, the median busbw (GB/s, nccl-tests' busbw =
# size/time * 2(n-1)/n) of Open MPI and of each hk variant (API and raw),
# and the ratios hk/MPI. The machine is shared and small: the rounds are
# interleaved so that every program sees the same load, and the ratios are
# what to read.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
OUT=${OUT:-$BUILD/shm-bench}
ROUNDS=${ROUNDS:-3}
NPS=${NPS:-"2 4"}
MIN=${MIN:-1M}
MAX=${MAX:-256M}
F=${F:-2}
HK_VARIANTS=${HK_VARIANTS:-"hk:HK_CYCLE_TIME_MS=0 hk-tcp:HK_INTRA_TRANSPORT=tcp,HK_CYCLE_TIME_MS=0"}
LIMIT=${LIMIT:-600}
PRIO=${PRIO:-}

for t in hkrun hkbench; do
  [ -x "$BUILD/$t" ] || { echo "shm_bench: no $BUILD/$t (scripts/build.sh build)" >&2; exit 1; }
done
mkdir -p "$OUT/raw" "$BUILD/peers"
mpicc -O2 -o "$BUILD/peers/mpi_allreduce_bench" "$root/bench/peers/mpi_allreduce_bench.c"

MPIRUN=(mpirun --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader
        -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

run() { # file cmd...
  local f=$1
  shift
  { echo "# cmd: $*"; timeout "$LIMIT" $PRIO "$@" 2>&1; echo "# rc=$?"; } >"$f" || true
}

for r in $(seq 1 "$ROUNDS"); do
  for np in $NPS; do
    echo "round $r np $np: mpi"
    run "$OUT/raw/mpi_np${np}_r$r.txt" "${MPIRUN[@]}" -np "$np" \
      "$BUILD/peers/mpi_allreduce_bench" -b "$MIN" -e "$MAX" -f "$F"
    for v in $HK_VARIANTS; do
      name=${v%%:*}
      vars=""
      [ "$name" != "$v" ] && vars=${v#*:}
      echo "round $r np $np: $name ${vars}"
      env_args=()
      IFS=, read -ra kv <<<"$vars"
      for a in "${kv[@]}"; do [ -n "$a" ] && env_args+=("$a"); done
      run "$OUT/raw/${name}_np${np}_r$r.txt" env "${env_args[@]}" \
        "$BUILD/hkrun" -np "$np" --no-tag-output "$BUILD/hkbench" \
        -b "$MIN" -e "$MAX" -f "$F" --raw
    done
  done
done

# medians: mpi columns size..busbw = $1 $7; hkbench --raw: busbw $8, raw $9
{
  echo "# shm_bench: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "rounds $ROUNDS, float32 sum in place; busbw GB/s, medians over rounds;"
  echo "Open MPI: \`${MPIRUN[*]} -np N mpi_allreduce_bench -b $MIN -e $MAX -f $F\`;"
  echo "hk: \`VARS hkrun -np N hkbench -b $MIN -e $MAX -f $F --raw\`"
  echo
  for np in $NPS; do
    echo "## np $np"
    echo
    hdr="| size | mpi |"
    sep="|---|---|"
    for v in $HK_VARIANTS; do
      n=${v%%:*}
      hdr="$hdr $n api | $n raw | $n api/mpi | $n raw/mpi |"
      sep="$sep---|---|---|---|"
    done
    echo "$hdr"
    echo "$sep"
    awk -v np="$np" -v variants="$HK_VARIANTS" -v out="$OUT/raw" '
      function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
          if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        if (n == 0) return -1
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      function collect(name, col,    f, r, line, k) {
        for (r = 1; ; r++) {
          f = out "/" name "_np" np "_r" r ".txt"
          if ((getline line < f) <= 0) break
          do {
            if (line ~ /^ *[0-9]/) {
              split(line, k, " ")
              vals[name, col, k[1]] = vals[name, col, k[1]] " " k[col]
              sizes[k[1]] = 1
            }
          } while ((getline line < f) > 0)
          close(f)
        }
      }
      BEGIN {
        nv = split(variants, v, " ")
        collect("mpi", 7)
        for (i = 1; i <= nv; i++) {
          split(v[i], nm, ":"); names[i] = nm[1]
          collect(names[i], 8); collect(names[i], 9)
        }
        ns = 0
        for (s in sizes) order[++ns] = s + 0
        for (i = 1; i <= ns; i++) for (j = i + 1; j <= ns; j++)
          if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
        for (i = 1; i <= ns; i++) {
          s = order[i]
          m = median(vals["mpi", 7, s])
          line = sprintf("| %d MiB | %.2f |", s / 1048576, m)
          for (k = 1; k <= nv; k++) {
            a = median(vals[names[k], 8, s]); w = median(vals[names[k], 9, s])
            line = line sprintf(" %.2f | %.2f | %.2f | %.2f |", a, w,
                                m > 0 ? a / m : 0, m > 0 ? w / m : 0)
          }
          print line
        }
      }' </dev/null
    echo
  done
} >"$OUT/report.md"
cat "$OUT/report.md"
