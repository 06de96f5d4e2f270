#!/usr/bin/env bash
# intra_bench.sh - one server: hk's small allreduces next to Open MPI's
# shared-memory transport, the main job's scaling, and model replays.
# Needs a build (scripts/build.sh build) with MPI found (mpi_allreduce_bench,
# built from bench/peers/mpi_allreduce_bench.c). Asserts nothing.
#
#   bench/intra_bench.sh          report: $OUT/report.md, runs: $OUT/raw/
#
# Environment (defaults):
#   BUILD=build        hkrun, hkbench, train, mpi_allreduce_bench
#   OUT=$BUILD/intra-bench
#   ROUNDS=3           interleaved rounds: each runs every program once
#   NPS="2 4"          ranks of (a) and (c)
#   ITERS=200          iterations per size in (a) (-n; warm-up -w 20)
#   TRAIN_NPS="1 2 4"  ranks of (b)
#   MODELS="resnet50 small1000"
#   BASE=              another build of hk (e.g. the previous commit's): its
#                      hkrun, hkbench and train run in the same rounds, each
#                      right after this build's, and the report adds
#                      this/BASE ratios (medians of per-round ratios)
#   PRIO=              a prefix for every measured run, hk and Open MPI alike:
#                         "chrt -r 1" keeps other work on the machine (builds,
#                         other tests) off the cores while they run (as root)
#   LIMIT=600          seconds any one run may take (timeout)
#
# What it runs:
#  (a) float32 sum, 8 B .. 64 KiB (x2): hkbench --raw (public API time,
#      the collective alone, and ctl(us): from the last rank's submit to
#      the last rank's start of the collective) and Open MPI's
#      MPI_Allreduce with its shared-memory transport (btl self,vader) and
#      glibc kept from mmap'ing its temporaries ("-nommap", Open MPI's
#      best setting on this machine in the project's peer measurements), in turn, ROUNDS rounds; medians over rounds,
#      and hk / MPI time as the median of the per-round ratios.
#  (b) hkrun -np N train --epochs 1: samples/s and allreduce_wait (rank 0's
#      share of the epoch spent in hk_wait), medians; scaling efficiency =
#      samples/s(N) / (N x samples/s(1)).
#  (c) hkbench --model M at each np: a step (every tensor submitted, last
#      layer first, then waited) against one allreduce of the same bytes
#      in the same run; medians of the per-run medians.
# hk's ranks of one host talk over shared memory (HK_INTRA_TRANSPORT=auto)
# unless a variant says otherwise. The machine is small and shared: read medians.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
OUT=${OUT:-$BUILD/intra-bench}
ROUNDS=${ROUNDS:-3}
NPS=${NPS:-"2 4"}
ITERS=${ITERS:-200}
TRAIN_NPS=${TRAIN_NPS:-"1 2 4"}
MODELS=${MODELS:-"resnet50 small1000"}
LIMIT=${LIMIT:-600}
PRIO=${PRIO:-}
BASE=${BASE:-}
[ -z "$BASE" ] || case $BASE in /*) ;; *) BASE=$root/$BASE ;; esac
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1"
NOMMAP="-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184"
SWEEP="-b 8 -e 64K -f 2 -n $ITERS -w 20"

for f in hkrun hkbench train mpi_allreduce_bench; do
  [ -x "$BUILD/$f" ] || { echo "intra_bench: $BUILD/$f missing" >&2; exit 1; }
done
for f in hkrun hkbench train; do
  [ -z "$BASE" ] || [ -x "$BASE/$f" ] || { echo "intra_bench: $BASE/$f missing" >&2; exit 1; }
done
# the builds measured: "hk" (BUILD) and, with BASE, "base"
builds="hk"
[ -z "$BASE" ] || builds="hk base"
dir_of() { if [ "$1" = base ]; then echo "$BASE"; else echo "$BUILD"; fi; }
mkdir -p "$OUT/raw"
raw=$OUT/raw
run() { # file command...
  local f=$1
  shift
  { echo "# cmd: $*"; timeout "$LIMIT" $PRIO "$@" || echo "# rc=$?"; } >"$f" 2>&1
}

for r in $(seq 1 "$ROUNDS"); do
  for np in $NPS; do
    echo "round $r np $np: small allreduces" >&2
    for b in $builds; do
      d=$(dir_of "$b")
      run "$raw/${b}_np${np}_r$r.txt" "$d/hkrun" -np "$np" --no-tag-output \
        "$d/hkbench" $SWEEP --raw
    done
    run "$raw/mpi_np${np}_r$r.txt" $MPIRUN -np "$np" --mca btl self,vader \
      $NOMMAP "$BUILD/mpi_allreduce_bench" $SWEEP
  done
  for np in $TRAIN_NPS; do
    echo "round $r np $np: train" >&2
    for b in $builds; do
      d=$(dir_of "$b")
      pre=train
      [ "$b" = base ] && pre=basetrain
      run "$raw/${pre}_np${np}_r$r.txt" "$d/hkrun" -np "$np" \
        "$d/train" --epochs 1
    done
  done
  for m in $MODELS; do
    for np in $NPS; do
      echo "round $r np $np: model $m" >&2
      for b in $builds; do
        d=$(dir_of "$b")
        pre=model
        [ "$b" = base ] && pre=basemodel
        run "$raw/${pre}_${m}_np${np}_r$r.txt" "$d/hkrun" -np "$np" \
          --no-tag-output "$d/hkbench" --model "$m"
      done
    done
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END {
  if (NR == 0) { print "-"; exit }
  print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
# col FILE SIZE N: field N of the data row for SIZE
col() { awk -v s="$2" -v n="$3" '$1 == s && $1 ~ /^[0-9]+$/ { print $n }' "$1"; }
# ratios A_PREFIX B_PREFIX SIZE: median over rounds of A's time / B's
ratios() { for r in $(seq 1 "$ROUNDS"); do
  a=$(col "$1$r.txt" "$3" 5)
  b=$(col "$2$r.txt" "$3" 5)
  [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f\n", a / b }'
done | median; }

{
  echo "# One server: hk (shared memory) vs Open MPI (vader, no mmap)"
  echo
  echo "$(date -u +%F) on $(nproc) cores, ROUNDS=$ROUNDS, load average" \
    "$(cut -d' ' -f1-3 /proc/loadavg) at the end; git $(git -C "$root" \
    rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  echo "## (a) float32 sum allreduce, 8 B .. 64 KiB"
  for np in $NPS; do
    echo
    echo "np $np: times in us, medians over rounds (each a median of $ITERS" \
      "iterations of the max over ranks); hk/MPI = median of per-round ratios"
    echo
    if [ -n "$BASE" ]; then
      echo "| size | hk public API | hk collective alone | hk control path (ctl) | Open MPI vader | hk / MPI | base public API | base / MPI | hk / base |"
      echo "|---|---|---|---|---|---|---|---|---|"
    else
      echo "| size | hk public API | hk collective alone | hk control path (ctl) | Open MPI vader | hk / MPI |"
      echo "|---|---|---|---|---|---|"
    fi
    for s in $(awk '$1 ~ /^[0-9]+$/ { print $1 }' "$raw/hk_np${np}_r1.txt"); do
      t=$(for r in $(seq 1 "$ROUNDS"); do col "$raw/hk_np${np}_r$r.txt" "$s" 5; done | median)
      w=$(for r in $(seq 1 "$ROUNDS"); do col "$raw/hk_np${np}_r$r.txt" "$s" 6; done | median)
      c=$(for r in $(seq 1 "$ROUNDS"); do col "$raw/hk_np${np}_r$r.txt" "$s" 12; done | median)
      m=$(for r in $(seq 1 "$ROUNDS"); do col "$raw/mpi_np${np}_r$r.txt" "$s" 5; done | median)
      q=$(for r in $(seq 1 "$ROUNDS"); do
        a=$(col "$raw/hk_np${np}_r$r.txt" "$s" 5)
        b=$(col "$raw/mpi_np${np}_r$r.txt" "$s" 5)
        [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f\n", a / b }'
      done | median)
      if [ -n "$BASE" ]; then
        bt=$(for r in $(seq 1 "$ROUNDS"); do col "$raw/base_np${np}_r$r.txt" "$s" 5; done | median)
        bq=$(ratios "$raw/base_np${np}_r" "$raw/mpi_np${np}_r" "$s")
        hb=$(ratios "$raw/hk_np${np}_r" "$raw/base_np${np}_r" "$s")
        echo "| $s | $t | $w | $c | $m | $q | $bt | $bq | $hb |"
      else
        echo "| $s | $t | $w | $c | $m | $q |"
      fi
    done
  done
  echo
  echo "## (b) hkrun -np N train --epochs 1"
  echo
  echo "| build | N | samples/s | allreduce_wait | scaling efficiency |"
  echo "|---|---|---|---|---|"
  for b in $builds; do
    pre=train
    [ "$b" = base ] && pre=basetrain
    base=
    for np in $TRAIN_NPS; do
      sps=$(for r in $(seq 1 "$ROUNDS"); do
        sed -n 's/.*samples\/s \([0-9.]*\) .*/\1/p' "$raw/${pre}_np${np}_r$r.txt"; done | median)
      wait=$(for r in $(seq 1 "$ROUNDS"); do
        sed -n 's/.*allreduce_wait \([0-9.]*\)%.*/\1/p' "$raw/${pre}_np${np}_r$r.txt"; done | median)
      [ -z "$base" ] && [ "$np" = 1 ] && base=$sps
      eff=$(awk -v s="$sps" -v b="${base:-0}" -v n="$np" 'BEGIN { if (b > 0 && s != "-") printf "%.2f", s / (n * b); else print "-" }')
      echo "| $b | $np | $sps | $wait% | $eff |"
    done
  done
  echo
  echo "## (c) model replays: a step vs one allreduce of the same bytes"
  echo
  echo "| build | model | np | step (ms) | one allreduce (ms) | ratio | rounds / collectives per step |"
  echo "|---|---|---|---|---|---|---|"
  for b in $builds; do
    pre=model
    [ "$b" = base ] && pre=basemodel
    for m in $MODELS; do
      for np in $NPS; do
        f() { for r in $(seq 1 "$ROUNDS"); do
          sed -n "/^$m: /s/.*$1 \([0-9.]*\).*/\1/p" "$raw/${pre}_${m}_np${np}_r$r.txt"; done | median; }
        st=$(f "step"); fu=$(f "one fused buffer"); ra=$(f "ratio")
        rc=$(sed -n 's/# per step (median): \([0-9]*\) negotiation rounds, \([0-9]*\) collectives.*/\1 \/ \2/p' \
          "$raw/${pre}_${m}_np${np}_r1.txt")
        echo "| $b | $m | $np | $st | $fu | $ra | $rc |"
      done
    done
  done
} >"$OUT/report.md"
cat "$OUT/report.md"
