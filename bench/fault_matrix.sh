#!/usr/bin/env bash
# fault_matrix.sh - issue 13's fault matrix: SIGKILL of each rank in each
# phase of a job at np 4 on this host (start-up, negotiation, inside the
# ring, the fused path, shutdown), TRIALS times each; counts hangs and
# orphans and measures how long the survivors and hkrun take to notice.
# Not run by CI; asserts nothing. Bounded: a job not over LIMIT seconds
# after the kill is a hang (then killed with its session).
#
#   bench/fault_matrix.sh
#
# Environment (defaults):
#   BUILD=build       hkrun and hkfaultw (bench/faultw.c)
#   NP=4
#   TRIALS=20         per (phase, victim rank)
#   PHASES="startup negotiation ring fusion shutdown"
#   LIMIT=60          seconds after the kill before a job counts as a hang
#   OUT=$BUILD/fault-matrix   trials.csv, summary.md, a log per trial
#   HKRUN_ARGS=       more hkrun flags (e.g. --grace-period 1)
#   any HK_* setting reaches the job as usual (e.g. HK_TIMEOUT_S)
#
# Per trial (trials.csv): phase, victim, trial, hang (0/1), orphans (job
# processes alive 1 s after hkrun ended: the session's, or any hkfaultw),
# survivors that printed an error, the last such error's time after the
# kill, hkrun's exit time after the kill, hkrun's exit status.
# summary.md: per phase, the totals and the median and max times.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-4}
TRIALS=${TRIALS:-20}
PHASES=${PHASES:-startup negotiation ring fusion shutdown}
LIMIT=${LIMIT:-60}
OUT=${OUT:-$BUILD/fault-matrix}
HKRUN=$PWD/$BUILD/hkrun
W=$PWD/$BUILD/hkfaultw
[ -x "$HKRUN" ] && [ -x "$W" ] || {
  echo "build $BUILD first (hkrun, hkfaultw)" >&2
  exit 2
}
mkdir -p "$OUT"
csv=$OUT/trials.csv
echo "phase,victim,trial,hang,orphans,errors,error_s,exit_s,status" >"$csv"

sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

# job processes still there: hkrun's session, or any hkfaultw of this
# build (each rank has a session of its own)
leftovers() {
  local sid=$1
  { ps -eo pid=,sid= | awk -v s="$sid" '$2 == s { print $1 }'
    pgrep -f "^$W "; } | sort -u | grep -c . || true
}
current=
cleanup() { [ -n "$current" ] && kill -9 -- -"$current" 2>/dev/null
  pkill -9 -f "^$W " 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM

trial() { # phase victim n
  local phase=$1 victim=$2 n=$3 log="$OUT/$1-$2-$3.log"
  # the rank as a third argument: who the victim is before hk_init
  setsid "$HKRUN" -np "$NP" ${HKRUN_ARGS:-} \
    sh -c 'exec "$0" "$1" "$2" "$HK_RANK"' "$W" "$phase" "$victim" \
    >"$log.out" 2>"$log.err" &
  local hk=$! pid="" t_kill t_end i
  current=$hk
  for ((i = 0; i < LIMIT * 100; i++)); do
    [ -n "$pid" ] && break
    pid=$(sed -n "s/.*phase $phase rank $victim pid \([0-9]*\) .*/\1/p" \
      "$log.out" 2>/dev/null | head -1)
    [ -z "$pid" ] && { kill -0 $hk 2>/dev/null || break; sleep 0.01; }
  done
  if [ -z "$pid" ]; then # never reached the phase: report, not a kill
    wait $hk
    echo "$phase,$victim,$n,never-reached,,,,,$?" >>"$csv"
    return
  fi
  [ "$phase" = ring ] || [ "$phase" = fusion ] &&
    sleep "0.0$((RANDOM % 10))" # somewhere in the loop, not at its start
  kill -9 "$pid"
  t_kill=$EPOCHREALTIME # no fork: one may take 100 ms on a loaded host
  local hang=0 status
  for ((i = 0; i < LIMIT * 20; i++)); do
    kill -0 $hk 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 $hk 2>/dev/null; then
    hang=1
    kill -9 -- -$hk 2>/dev/null
  fi
  wait $hk
  status=$?
  t_end=$EPOCHREALTIME
  sleep 1
  local orphans
  orphans=$(leftovers $hk)
  [ "$orphans" != 0 ] && cleanup
  current=
  local errs last
  errs=$(grep -c "^\[[0-9]*\] rank [0-9]* error t \|^rank [0-9]* error t " \
    "$log.out" || true)
  last=$(sed -n 's/.*rank [0-9]* error t \([0-9.]*\):.*/\1/p' "$log.out" |
    sort -n | tail -1)
  echo "$phase,$victim,$n,$hang,$orphans,$errs,$([ -n "$last" ] &&
    sub "$last" "$t_kill"),$(sub "$t_end" "$t_kill"),$status" >>"$csv"
  [ $hang = 0 ] && [ "$orphans" = 0 ] && rm -f "$log.out" "$log.err"
}

start=$(date +%s)
for phase in $PHASES; do
  for ((v = 0; v < NP; v++)); do
    for ((n = 1; n <= TRIALS; n++)); do
      trial "$phase" $v $n
    done
  done
done

{
  echo "# fault matrix: np $NP, $TRIALS trials per rank and phase," \
    "HKRUN_ARGS='${HKRUN_ARGS:-}', $(($(date +%s) - start)) s," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| phase | kills | hangs | orphans | survivors' errors | last error after kill, median / max (s) | hkrun exit after kill, median / max (s) | hkrun status |"
  echo "|---|---|---|---|---|---|---|---|"
  for phase in $PHASES; do
    awk -F, -v p="$phase" -v np="$NP" '
      function med(a, n,   i, j, t) { for (i = 2; i <= n; i++)
          for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        return n ? (n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2) : -1 }
      $1 == p && $4 != "never-reached" { k++; h += $4; o += $5; e += $6;
        if ($7 != "") { ne++; E[ne] = $7; if ($7 > me) me = $7 }
        nx++; X[nx] = $8; if ($8 > mx) mx = $8; st[$9]++ }
      $1 == p && $4 == "never-reached" { nr++ }
      END { s = ""; for (c in st) s = s (s ? ", " : "") c " x" st[c]
        if (nr) s = s "; " nr " never reached the phase"
        printf "| %s | %d | %d | %d | %d of %d | %s | %.2f / %.2f | %s |\n",
          p, k, h, o, e, k * (np - 1),
          ne ? sprintf("%.2f / %.2f", med(E, ne), me) : "none",
          med(X, nx), mx, s }' "$csv"
  done
} | tee "$OUT/summary.md"
