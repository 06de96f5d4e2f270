#!/usr/bin/env bash
# monitor_overhead.sh - what the straggler monitor (observe/monitor.h)
# costs a training step: `hkbench --model resnet50` at np 4 with the
# monitor off and on (HK_MONITOR=1, telemetry every second, no NVML on a
# CPU machine), in interleaved pairs, medians of the per-run step medians.
# Asserts nothing. Run it when the machine is otherwise idle (uptime).
#
#   bench/monitor_overhead.sh
#
# Environment (defaults):
#   BUILD=build   hkrun and hkbench
#   PAIRS=5       off/on pairs (the order alternates within each pair)
#   NP=4 MODEL=resnet50 STEPS=10 WARM=2
#   ON="HK_MONITOR=1"   the "on" setting (e.g. add HK_METRICS_FILE=...)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} PAIRS=${PAIRS:-5} NP=${NP:-4} MODEL=${MODEL:-resnet50}
STEPS=${STEPS:-10} WARM=${WARM:-2} ON=${ON:-HK_MONITOR=1}

# One run: prints its median step time, ms.
run() {
  env "$@" "$BUILD/hkrun" -np "$NP" "$BUILD/hkbench" --model "$MODEL" \
    -n "$STEPS" -w "$WARM" 2>&1 | sed -n 's/.*, step \([0-9.]*\) ms,.*/\1/p'
}
median() { sort -g | awk '{v[NR] = $1} END {m = int((NR + 1) / 2);
  print (NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2)}'; }

off=() on=()
for ((i = 0; i < PAIRS; i++)); do
  if ((i % 2)); then
    on+=("$(run $ON)"); off+=("$(run HK_MONITOR=0)")
  else
    off+=("$(run HK_MONITOR=0)"); on+=("$(run $ON)")
  fi
  echo "pair $((i + 1)): off ${off[i]} ms, on ${on[i]} ms ($(uptime | sed 's/.*load/load/'))"
done
mo=$(printf '%s\n' "${off[@]}" | median)
mn=$(printf '%s\n' "${on[@]}" | median)
echo "$MODEL np $NP: median step off $mo ms, on $mn ms," \
  "on/off $(awk -v a="$mn" -v b="$mo" 'BEGIN {printf "%.3f", a / b}')"
