#!/usr/bin/env bash
# soak.sh - issue 13's soak: STEPS steps x TENSORS allreduces at np NP
# (bench/soakw.c checks every result); reports each rank's resident set
# after the warm-up and at the end (VmRSS, and the peak VmHWM), its
# descriptors at the first report and the last, errors and wrong elements.
# Not run by CI; asserts nothing (its exit status is hkrun's). Bounded by
# LIMIT seconds (then the job is killed and that is reported).
#
#   bench/soak.sh
#
# Environment (defaults):
#   BUILD=build  NP=8  STEPS=10000  TENSORS=200
#   EVERY=STEPS/50   steps between reports
#   WARM=STEPS/10    the warm-up: growth is measured from the first report
#                    at or after it
#   LIMIT=7200       seconds
#   OUT=$BUILD/soak  soak.out (every rank's lines), summary.txt
#   any HK_* setting reaches the job (e.g. HK_CACHE_CAPACITY)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-8}
STEPS=${STEPS:-10000}
TENSORS=${TENSORS:-200}
EVERY=${EVERY:-$(((STEPS + 49) / 50))}
WARM=${WARM:-$((STEPS / 10))}
LIMIT=${LIMIT:-7200}
OUT=${OUT:-$BUILD/soak}
mkdir -p "$OUT"
start=$(date +%s)
timeout -k 10 "$LIMIT" "$BUILD/hkrun" -np "$NP" "$BUILD/hksoakw" "$STEPS" \
  "$TENSORS" "$EVERY" >"$OUT/soak.out" 2>"$OUT/soak.err"
status=$?
wall=$(($(date +%s) - start))
{
  echo "# soak: np $NP, $STEPS steps x $TENSORS tensors, warm-up $WARM" \
    "steps, hkrun status $status, $wall s ($(awk -v s="$STEPS" -v w="$wall" \
      'BEGIN { printf "%.1f", w ? s / w : 0 }') steps/s)," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)"
  awk -v warm="$WARM" -v np="$NP" '
    / soak rank [0-9]+ step / {
      for (i = 1; i <= NF; i++) if ($i == "rank") r = $(i + 1)
      for (i = 1; i <= NF; i++) v[$i] = $(i + 1)
      s = v["step"]
      if (!(r in f0)) f0[r] = v["fds"]
      f1[r] = v["fds"]
      if (s >= warm && !(r in w)) { w[r] = v["rss_kb"]; wh[r] = v["hwm_kb"] }
      last[r] = v["rss_kb"]; lh[r] = v["hwm_kb"]; ls[r] = s
    }
    / soak rank [0-9]+ done / { done++; for (i = 1; i <= NF; i++)
      if ($i == "wrong") wrong += $(i + 1) }
    / error / { err++ }
    END {
      printf "%-5s %12s %12s %10s %12s %12s %10s %8s\n", "rank", "rss_warm_kb",
        "rss_end_kb", "growth_kb", "hwm_warm_kb", "hwm_end_kb", "hwm_growth", "fds"
      for (r = 0; r < np; r++) {
        if (!(r in last)) { printf "%-5d no report\n", r; continue }
        g = last[r] - w[r]; gh = lh[r] - wh[r]
        if (g > mg) mg = g; if (gh > mgh) mgh = gh
        if (f1[r] != f0[r]) fdl++
        printf "%-5d %12d %12d %10d %12d %12d %10d %4d->%d\n", r, w[r], last[r],
          g, wh[r], lh[r], gh, f0[r], f1[r]
      }
      printf "max growth after warm-up: rss %d kB, peak %d kB; ranks whose " \
        "descriptors changed: %d; ranks done: %d of %d; wrong elements: %d; " \
        "error lines: %d\n", mg, mgh, fdl, done, np, wrong, err
    }' "$OUT/soak.out"
} | tee "$OUT/summary.txt"
exit $status
