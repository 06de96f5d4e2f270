#!/usr/bin/env bash
# netbed_ab.sh - two or more builds of hk replaying models across "hosts"
# that are network namespaces (tests/netbed), side by side: every round
# runs `hkbench --model M -n STEPS -w WARM` once per model and build, in
# turn, through `hkrun -H` across the bed's hosts; then for each model the
# median step (ms) of every build and its ratio to the first build's
# (below 1 is faster). A model written bytes:N is a lone allreduce of N
# bytes instead (`hkbench -b N -e N -n ITERS --raw`): its median time
# through the public API and of the collective alone (µs). Needs root,
# iproute2, Open MPI (hkrun -H runs mpirun) and the builds (hkrun,
# hkbench). Asserts nothing. It measures: run it on a quiet machine.
#
#   BUILDS="old/build new/build" bench/netbed_ab.sh
#
# Environment (defaults):
#   BUILDS=build               the builds, the first the reference
#   HOSTS=2 RANKS=2            the bed's hosts, ranks on each
#   RATE=10gbit                each host's link (tbf, both directions)
#   MODELS="small1000 resnet50"  gradient sets (bench/models)
#   ROUNDS=5 STEPS=20 WARM=3   interleaved rounds; hkbench -n, -w
#   ITERS=500                  iterations of a bytes:N run (-w ITERS/10)
#   HKRUN_ARGS=""              more hkrun flags for every run (-x VAR=V, ...)
#   LIMIT=600                  seconds one run may take
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILDS=${BUILDS:-build} HOSTS=${HOSTS:-2} RANKS=${RANKS:-2}
RATE=${RATE:-10gbit} MODELS=${MODELS:-small1000 resnet50}
ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-20} WARM=${WARM:-3} LIMIT=${LIMIT:-600}
ITERS=${ITERS:-500} HKRUN_ARGS=${HKRUN_ARGS:-}
abs=()
for b in $BUILDS; do
  case $b in /*) ;; *) b=$root/$b ;; esac
  for f in hkrun hkbench; do
    [ -x "$b/$f" ] || {
      echo "netbed_ab: $b/$f missing: build the hkrun and hkbench targets" >&2
      exit 1
    }
  done
  abs+=("$b")
done
export BUILDS="${abs[*]}" HOSTS RANKS MODELS ROUNDS STEPS WARM LIMIT ITERS \
  HKRUN_ARGS
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

if [ -n "${NETBED_DIR:-}" ]; then # inside the bed: the rounds
  read -r -a hosts <<<"$NETBED_HOSTS"
  read -r -a agent_args <<<"$NETBED_AGENT_ARGS"
  read -r -a more <<<"$HKRUN_ARGS"
  list=""
  for h in "${hosts[@]}"; do list="$list${list:+,}$h:$RANKS"; done
  for r in $(seq 1 "$ROUNDS"); do
    for M in $MODELS; do
      case $M in
      bytes:*) args=(-b "${M#bytes:}" -e "${M#bytes:}" -n "$ITERS" -w $((ITERS / 10)) --raw) ;;
      *) args=(--model "$M" -n "$STEPS" -w "$WARM") ;;
      esac
      for i in "${!abs[@]}"; do
        # a model: its median step; bytes:N: the sweep row's time and raw
        v=$(timeout --kill-after=10 "$LIMIT" "${abs[$i]}/hkrun" \
          -np $((HOSTS * RANKS)) -H "$list" --network-interface "$NETBED_SUBNET" \
          --mpi-args "${agent_args[*]}" --no-tag-output "${more[@]}" \
          "${abs[$i]}/hkbench" \
          "${args[@]}" 2>&1 |
          awk '/, step [0-9.]* ms,/ { sub(/.*, step /, ""); print $1; exit }
               /^ +[0-9]+ +[0-9]+ / { print $5, $6; exit }' || true)
        echo "$r $M $i ${v:--}" >>"$AB_ROWS"
        echo "round $r $M build $i: ${v:-failed}"
      done
    done
  done
  exit 0
fi

"$root/tests/netbed/netbed.sh" check || exit $?
AB_ROWS=$(mktemp "${TMPDIR:-/tmp}/hk-netbed-ab.XXXXXX")
trap 'rm -f "$AB_ROWS"' EXIT
export AB_ROWS
echo "# $HOSTS hosts x $RANKS ranks at $RATE, $ROUNDS rounds${HKRUN_ARGS:+, hkrun $HKRUN_ARGS} ($(uptime | sed 's/.*load/load/'))"
NETBED_TIMEOUT_S=${NETBED_TIMEOUT_S:-14400} \
  "$root/tests/netbed/netbed.sh" run "$HOSTS" "$RATE" none -- "$0"
echo "| model | build | median (step ms; bytes:N: API us) | min-max | / first build | collective alone (us) |"
echo "|---|---|---|---|---|---|"
for M in $MODELS; do
  ref=""
  for i in "${!abs[@]}"; do
    vals=$(awk -v m="$M" -v i="$i" '$2 == m && $3 == i && $4 != "-" { print $4 }' "$AB_ROWS")
    raw=$(awk -v m="$M" -v i="$i" '$2 == m && $3 == i && $5 != "" { print $5 }' "$AB_ROWS" | median)
    med=$(echo "$vals" | median)
    range=$(echo "$vals" | sort -g | sed -n '1p;$p' | paste -sd-)
    ref=${ref:-$med}
    ratio=$(awk -v a="$med" -v b="$ref" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
    echo "| $M | ${abs[$i]} | ${med:--} | $range | $ratio | ${raw:--} |"
  done
done
