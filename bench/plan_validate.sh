#!/usr/bin/env bash
# plan_validate.sh - hkplan's predicted step time against the step measured
# on the netns bed (tests/netbed): hosts x ranks per host x link rate x
# model, each run an `hkbench --model M --compute-ms C` replay (a synthetic
# backward pass of C ms: tensor k submitted when C x (parameters up to k) /
# (all parameters) ms have passed, hkplan's own default spread) through
# hkrun across the bed's hosts; the prediction is `hkplan --model M
# --step-s C/1000 --bwd-frac 1 --server cpu:R --servers H --net G`, or
# with NET=measured `--net-bench` of an hkbench sweep between two of the
# bed's hosts (one rank each) at that rate, run in the bed before its
# cases, as a user would measure two candidate servers; with NET=cluster
# the sweep runs across all of the bed's hosts (one rank each), as a user
# would measure the servers rented, the same ones the job will run on.
# Prints one row per case (measured = hkbench's median step) and at the
# end the median absolute error and the worst case. Needs root, iproute2,
# Open MPI (hkrun -H runs mpirun) and a build with hkrun, hkbench, hkplan.
# Asserts nothing. It measures: run it on a quiet machine.
#
#   bench/plan_validate.sh
#
# Environment (defaults: the issue's matrix, several hours):
#   BUILD=build
#   HOSTS_LIST="2 3 4"        hosts of each bed
#   RANKS_LIST="1 2 3 4"      ranks per host
#   RATES="1gbit 2500mbit 10gbit"   each host's link (tbf, both directions)
#   MODELS="resnet50 vgg16 vit_b_16"  gradient sets (bench/models)
#   COMPUTE_MS=200            the synthetic backward pass per step
#   STEPS=5 WARMUP=1          hkbench -n, -w
#   LIMIT=900                 seconds one run may take
#   NET=given                 given: --net at the shaped rate; measured:
#                             --net-bench of the sweep (raw/sweep_*.csv)
#                             between two hosts; cluster: of a sweep across
#                             every host of the bed
#   OUT=$BUILD/plan-validate  rows.txt and every run's output (raw/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
HOSTS_LIST=${HOSTS_LIST:-2 3 4}
RANKS_LIST=${RANKS_LIST:-1 2 3 4}
RATES=${RATES:-1gbit 2500mbit 10gbit}
MODELS=${MODELS:-resnet50 vgg16 vit_b_16}
COMPUTE_MS=${COMPUTE_MS:-200}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-1}
LIMIT=${LIMIT:-900}
NET=${NET:-given}
OUT=${OUT:-$BUILD/plan-validate}
export BUILD HOSTS_LIST RANKS_LIST RATES MODELS COMPUTE_MS STEPS WARMUP LIMIT OUT NET

say() { echo "plan_validate: $*" >&2; }
die() {
  say "$*"
  exit 1
}

gbit_of() { # 2500mbit -> 2.5
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = tolower(substr(r, length(n "") + 1))
    if (u == "gbit") g = n; else if (u == "mbit") g = n / 1e3;
    else if (u == "kbit") g = n / 1e6; else g = 0
    print g }'
}

# Inside a bed (the second call): every ranks x model case at this rate.
if [ -n "${NETBED_DIR:-}" ]; then
  read -r -a hosts <<<"$NETBED_HOSTS"
  # shellcheck disable=SC2206 # word splitting wanted
  agent_args=($NETBED_AGENT_ARGS)
  H=${#hosts[@]}
  G=$(gbit_of "$PV_RATE")
  net=(--net "$G")
  if [ "$NET" = measured ] || [ "$NET" = cluster ]; then # one rank a host
    sweep="$OUT/raw/sweep_h${H}_${PV_RATE}.csv"
    n=2 swept="${hosts[0]}:1,${hosts[1]}:1"
    if [ "$NET" = cluster ]; then
      n=$H swept=""
      for h in "${hosts[@]}"; do swept="$swept${swept:+,}$h:1"; done
    fi
    timeout --kill-after=10 "$LIMIT" "$BUILD/hkrun" -np "$n" \
      -H "$swept" --no-tag-output \
      --network-interface "$NETBED_SUBNET" --mpi-args "${agent_args[*]}" -- \
      "$BUILD/hkbench" -b 8 -e 64M -f 4 -n 20 -w 3 --csv "$sweep" \
      >"$OUT/raw/sweep_h${H}_${PV_RATE}.txt" 2>&1 ||
      say "the sweep at $PV_RATE failed (output: $OUT/raw/sweep_h${H}_${PV_RATE}.txt)"
    net=(--net-bench "$sweep")
  fi
  for R in $RANKS_LIST; do
    list=""
    for h in "${hosts[@]}"; do list="$list${list:+,}$h:$R"; done
    for M in $MODELS; do
      name="h${H}_r${R}_${PV_RATE}_${M}"
      rc=0
      timeout --kill-after=10 "$LIMIT" "$BUILD/hkrun" -np $((H * R)) -H "$list" \
        --no-tag-output --network-interface "$NETBED_SUBNET" \
        --mpi-args "${agent_args[*]}" -- "$BUILD/hkbench" --model "$M" \
        --compute-ms "$COMPUTE_MS" -n "$STEPS" -w "$WARMUP" \
        >"$OUT/raw/$name.txt" 2>&1 || rc=$?
      measured=$(awk '$1 == "step" { print $2; exit }' "$OUT/raw/$name.txt")
      if [ "$rc" != 0 ] || [ -z "$measured" ]; then
        say "$name: exit $rc, no step time (output: $OUT/raw/$name.txt)"
        echo "$H $R $G $M - - -" >>"$OUT/rows.txt"
        continue
      fi
      predicted=$("$BUILD/hkplan" --model "$M" \
        --step-s "$(awk -v c="$COMPUTE_MS" 'BEGIN { print c / 1000 }')" \
        --bwd-frac 1 --batch 1 --server "cpu:$R" --servers "$H" "${net[@]}" \
        --csv 2>>"$OUT/raw/hkplan.txt" | awk -F, 'NR == 2 { print $6 }')
      err=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%+.1f", (p - m) / m * 100 }')
      echo "$H $R $G $M $measured $predicted $err" >>"$OUT/rows.txt"
      say "$name: measured $measured ms, predicted $predicted ms ($err %)"
    done
  done
  exit 0
fi

for f in hkrun hkbench hkplan; do
  [ -x "$BUILD/$f" ] || die "$BUILD/$f missing: build the hkrun, hkbench and hkplan targets"
done
"$root/tests/netbed/netbed.sh" check || exit $?
mkdir -p "$OUT/raw"
: >"$OUT/rows.txt"
for H in $HOSTS_LIST; do
  for RATE in $RATES; do
    [ "$(gbit_of "$RATE")" != 0 ] || die "RATES: '$RATE': give gbit, mbit or kbit"
    PV_RATE=$RATE NETBED_TIMEOUT_S=${NETBED_TIMEOUT_S:-14400} \
      "$root/tests/netbed/netbed.sh" run "$H" "$RATE" none -- "$0" ||
      say "the bed of $H hosts at $RATE failed"
  done
done

echo "# hkplan against the netns bed: compute $COMPUTE_MS ms a step, $STEPS steps (median), network $NET"
echo
echo "| hosts | ranks/host | Gbit/s | model | measured (ms) | predicted (ms) | error |"
echo "|---|---|---|---|---|---|---|"
awk '{ printf "| %s | %s | %s | %s | %s | %s | %s %% |\n", $1, $2, $3, $4, $5, $6, $7 }' "$OUT/rows.txt"
# median absolute error and worst case (mawk has no asort: sort does it)
awk '$7 != "-" { e = ($7 < 0 ? -$7 : $7) + 0; print e, $0 }' "$OUT/rows.txt" |
  sort -n | awk '{ v[++n] = $1; last = $0 }
  END {
    if (!n) { print "\nno case ran"; exit }
    m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    sub(/^[^ ]+ /, "", last)
    printf "\n%d cases: median absolute error %.1f %%; worst %.1f %% (%s)\n", n, m, v[n], last }'
