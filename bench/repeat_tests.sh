#!/usr/bin/env bash
# repeat_tests.sh - runs multi-process tests again and again, two at once,
# to find what hangs or fails once in many runs (issue 13 item 10: "a hang
# that shows once in 50 runs here shows every day on a cluster"). Not run
# by CI; asserts nothing beyond reporting the counts. Bounded: every run
# has a deadline (its ctest timeout, and LIMIT at most).
#
#   bench/repeat_tests.sh [TEST...]      (default: the list below)
#
# Environment (defaults):
#   BUILD=build     the build whose ctest runs (scripts/build.sh build)
#   RUNS=20         runs of each test, in all (half in each of 2 slots)
#   SLOTS=2         runs at once
#   LIMIT=1260      seconds one run may take before it counts as a hang:
#                   above every test's own ctest TIMEOUT (1200 at most), so
#                   that a slow run is ended by ctest's deadline, not here
#   OUT=$BUILD/repeat  a log per failed run (slot-test-run.log), summary.txt
#
# Each run gets a scratch directory of its own for every temporary file
# (TMPDIR, Open MPI's shared memory, flight records: scripts/test_tmp.sh),
# removed after it; what a run left there other than flight records (which
# failing jobs write on purpose) is listed in slot-test-run.left and
# counted in the "left" column. Nothing of a campaign stays in the build.
#   STOP_AT=        a time (anything `date -d` reads, e.g. 16:20): no run
#                   starts after it, so a campaign ends on time; the
#                   summary then counts the runs that did (each test's own
#                   count is in its row)
#
# The slots go through the tests in opposite orders, so different tests
# overlap as well as copies of the same one. Prints, per test, runs,
# failures, runs that hit LIMIT, the slowest run, and runs that left a
# temporary file behind.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${RUNS:-20}
SLOTS=${SLOTS:-2}
LIMIT=${LIMIT:-1260}
OUT=${OUT:-$BUILD/repeat}
STOP_AT=${STOP_AT:-}
stop=
if [ -n "$STOP_AT" ]; then
  stop=$(date -d "$STOP_AT" +%s) || {
    echo "repeat_tests: STOP_AT='$STOP_AT' is not a time date -d reads" >&2
    exit 2
  }
fi
if [ $# -gt 0 ]; then
  tests=("$@")
else
  tests=(test_mpi_link test_mpi_exchange test_hkrun test_hosts_cli
    test_netbed test_netbed_collectives test_netbed_faults test_device)
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.left "$OUT"/results.* "$OUT"/stopped
. scripts/test_tmp.sh
scratch=$(mktemp -d /tmp/hk-repeat.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

slot() { # slot index; writes "test rc seconds" lines to results.$1
  local s=$1 per=$(((RUNS + SLOTS - 1) / SLOTS)) order=("${tests[@]}")
  if [ $((s % 2)) = 1 ]; then # the other way round
    order=()
    for ((i = ${#tests[@]} - 1; i >= 0; i--)); do order+=("${tests[$i]}"); done
  fi
  for ((r = 1; r <= per; r++)); do
    for t in "${order[@]}"; do
      local log="$OUT/$s-$t-$r.log" t0 rc
      if [ -n "$stop" ] && [ "$(date +%s)" -ge "$stop" ]; then
        echo "slot $s: STOP_AT $STOP_AT reached in round $r" >>"$OUT/stopped"
        return
      fi
      local tmp="$scratch/$s-$t-$r" left
      mkdir "$tmp"
      t0=$(date +%s.%N)
      (
        hk_test_tmp "$tmp"
        # --verbose: the output as it comes, so that a killed run's log
        # shows where it was
        timeout -k 10 "$LIMIT" ctest --test-dir "$BUILD" -R "^$t\$" \
          --verbose >"$log" 2>&1
      )
      rc=$?
      grep -q '\*\*\*Timeout' "$log" && rc=124 # ctest's own deadline
      find "$tmp" -mindepth 1 -maxdepth 1 ! -name 'hk-flight.*' \
        >"$OUT/$s-$t-$r.left"
      left=$(wc -l <"$OUT/$s-$t-$r.left")
      [ "$left" = 0 ] && rm -f "$OUT/$s-$t-$r.left"
      rm -rf "$tmp"
      echo "$t $rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }') $left" \
        >>"$OUT/results.$s"
      [ $rc = 0 ] && rm -f "$log"
    done
  done
}

start=$(date +%s)
for ((s = 0; s < SLOTS; s++)); do slot $s & done
wait
{
  echo "# $(date -u +%FT%TZ) RUNS=$RUNS SLOTS=$SLOTS LIMIT=$LIMIT" \
    "load: $(cut -d' ' -f1-3 /proc/loadavg) wall $(($(date +%s) - start)) s"
  [ -f "$OUT/stopped" ] && sed 's/^/# /' "$OUT/stopped"
  printf '%-26s %5s %6s %6s %9s %5s\n' test runs failed hangs slowest_s left
  cat "$OUT"/results.* 2>/dev/null | awk '
    { n[$1]++; if ($2 != 0) f[$1]++; if ($2 == 124 || $2 == 137) h[$1]++;
      if ($3 > m[$1]) m[$1] = $3; if ($4 > 0) l[$1]++ }
    END { for (t in n) printf "%-26s %5d %6d %6d %9.1f %5d\n", t, n[t],
          f[t] + 0, h[t] + 0, m[t], l[t] + 0 }' | sort
  ls "$OUT"/*.log 2>/dev/null | sed 's/^/failed run: /'
  ls "$OUT"/*.left 2>/dev/null | sed 's/^/left files: /'
} | tee "$OUT/summary.txt"
