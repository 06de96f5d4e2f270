#!/usr/bin/env bash
# autotune_bench.sh - what `hkrun --autotune` wins on a replayed model
# (`hkbench --model M`): the step time with the defaults, with the setting
# the autotuner chose (a tuning run saves it with --autotune-save, a
# measuring run loads it with --autotune-load), and with every setting of
# a grid of fusion thresholds x cycle times (x sockets per peer, with
# GRID_SOCKETS; x hierarchical allreduce, with GRID_HIER), measured the
# same way; then
# the three side by side, the grid's best, and how many steps the tuning
# took. Every setting is measured once per round, ROUNDS interleaved
# rounds, and reported as the median over rounds; then the grid's best,
# the defaults and the tuned setting again (CONFIRM rounds), the
# ratios to read. Asserts nothing. Run it
# when the machine is otherwise idle (uptime), at normal priority.
#
#   bench/autotune_bench.sh
#
# Environment (defaults):
#   BUILD=build            hkrun and hkbench
#   NP=2 MODEL=resnet50    the job
#   STEPS=20 WARM=3        steps measured (-n) and warm-up steps (-w) of
#                          each measuring run
#   TUNE_STEPS=600         steps of the tuning run (the search must end
#                          in them: its last line says so)
#   GRID_MB="0 1 4 16 64 128"   fusion thresholds of the grid, MiB
#   GRID_MS="0 1 5"        cycle times of the grid, ms
#   GRID_SOCKETS=""        sockets per peer of the grid (HK_SOCKETS_PER_PEER;
#                          empty: the defaults'); for jobs with TCP links
#   GRID_HIER=""           HK_HIERARCHICAL_ALLREDUCE values of the grid (0,
#                          1; "-" the default, auto; empty: auto alone);
#                          for jobs across hosts
#   HKRUN_ARGS=""          more hkrun flags for every run (-H, ...)
#   ROUNDS=5               interleaved rounds of the measuring runs
#   CONFIRM=ROUNDS         interleaved rounds measuring the defaults, the
#                          tuned setting and the grid's best again (0:
#                          none), the grid's best then no longer the
#                          least of many noisy medians
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} NP=${NP:-2} MODEL=${MODEL:-resnet50}
STEPS=${STEPS:-20} WARM=${WARM:-3} TUNE_STEPS=${TUNE_STEPS:-600}
GRID_MB=${GRID_MB:-0 1 4 16 64 128} GRID_MS=${GRID_MS:-0 1 5}
GRID_SOCKETS=${GRID_SOCKETS:-}
GRID_HIER=${GRID_HIER:-}
HKRUN_ARGS=${HKRUN_ARGS:-}
ROUNDS=${ROUNDS:-5}
CONFIRM=${CONFIRM:-$ROUNDS}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hk-autotune-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# One measuring run with hkrun flags "$@": prints its median step, ms.
step_ms() {
  # shellcheck disable=SC2086
  "$BUILD/hkrun" -np "$NP" $HKRUN_ARGS "$@" "$BUILD/hkbench" \
    --model "$MODEL" -n "$STEPS" -w "$WARM" 2>&1 |
    sed -n 's/.*, step \([0-9.]*\) ms,.*/\1/p'
}
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
per_s() { awk -v m="$1" 'BEGIN {printf "%.2f", (m > 0 ? 1000 / m : 0)}'; }

echo "# $MODEL np $NP, $ROUNDS rounds ($(uptime | sed 's/.*load/load/'))"

# the tuning run: its steps include the search's slower trials; they are
# the replay's steps alone (--steps-only), as a trainer's, so the search
# scores what the measuring runs' "step" measures
# shellcheck disable=SC2086
"$BUILD/hkrun" -np "$NP" $HKRUN_ARGS --autotune \
  --autotune-log-file "$tmp/trials.csv" --autotune-save "$tmp/tuned.env" \
  "$BUILD/hkbench" --model "$MODEL" -n "$TUNE_STEPS" -w 0 --steps-only \
  >"$tmp/tune.out" 2>&1 || true
chose=$(grep -oE 'autotune: (chose|kept|the search stopped).*' "$tmp/tune.out" | head -1 || true)
if [ ! -s "$tmp/tuned.env" ]; then
  echo "the tuning run saved nothing:" >&2
  tail -5 "$tmp/tune.out" >&2
  exit 1
fi
for r in $(seq 1 "$ROUNDS"); do
  step_ms >>"$tmp/defaults"
  step_ms --autotune-load "$tmp/tuned.env" >>"$tmp/tuned"
  for mb in $GRID_MB; do
    for ms in $GRID_MS; do
      for k in ${GRID_SOCKETS:--}; do
        for hi in ${GRID_HIER:--}; do
          sk=()
          [ "$k" = - ] || sk=(-x "HK_SOCKETS_PER_PEER=$k")
          [ "$hi" = - ] || sk+=(-x "HK_HIERARCHICAL_ALLREDUCE=$hi")
          step_ms --fusion-threshold-mb "$mb" --cycle-time-ms "$ms" "${sk[@]}" \
            >>"$tmp/grid_${mb}_${ms}_${k}_$hi"
        done
      done
    done
  done
done
defaults=$(median <"$tmp/defaults")
tuned=$(median <"$tmp/tuned")

best="" best_ms="" best_args=()
printf '%-40s %12s %10s\n' "setting" "step(ms)" "steps/s"
for mb in $GRID_MB; do
  for ms in $GRID_MS; do
    for k in ${GRID_SOCKETS:--}; do
      for hi in ${GRID_HIER:--}; do
        t=$(median <"$tmp/grid_${mb}_${ms}_${k}_$hi")
        what="${mb} MiB, ${ms} ms"
        [ "$k" = - ] || what="$what, $k sockets"
        [ "$hi" = - ] || what="$what, hierarchical $hi"
        printf '%-40s %12s %10s\n' "grid $what" "$t" "$(per_s "$t")"
        if [ -n "$t" ] && { [ -z "$best_ms" ] ||
          awk -v a="$t" -v b="$best_ms" 'BEGIN {exit !(a < b)}'; }; then
          best_ms=$t best=$what
          best_args=(--fusion-threshold-mb "$mb" --cycle-time-ms "$ms")
          [ "$k" = - ] || best_args+=(-x "HK_SOCKETS_PER_PEER=$k")
          [ "$hi" = - ] || best_args+=(-x "HK_HIERARCHICAL_ALLREDUCE=$hi")
        fi
      done
    done
  done
done
printf '%-40s %12s %10s\n' "defaults" "$defaults" "$(per_s "$defaults")"
printf '%-40s %12s %10s\n' "autotuned" "$tuned" "$(per_s "$tuned")"
printf '%-40s %12s %10s\n' "grid best ($best)" "$best_ms" \
  "$(per_s "$best_ms")"
echo "tuned: $(grep -v '^#' "$tmp/tuned.env" | tr '\n' ' ')"
echo "search: ${chose:-did not end within TUNE_STEPS=$TUNE_STEPS steps}"
# the search's trials (--autotune-log-file), to see what it compared
[ -s "$tmp/trials.csv" ] && sed 's/^/trials: /' "$tmp/trials.csv"
echo "tuned/defaults $(awk -v a="$tuned" -v b="$defaults" \
  'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}'), tuned/grid best" \
  "$(awk -v a="$tuned" -v b="$best_ms" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')" \
  "(step time ratios: below 1 is faster)"

# The grid's best is the least of many noisy medians, so it is biased low
# (the winner's curse): CONFIRM more interleaved rounds measure it again
# beside the defaults and the tuned setting, and these ratios are the
# ones to read.
if [ "$CONFIRM" -gt 0 ] && [ -n "$best_ms" ]; then
  : >"$tmp/c_defaults"
  : >"$tmp/c_tuned"
  : >"$tmp/c_best"
  for r in $(seq 1 "$CONFIRM"); do
    step_ms >>"$tmp/c_defaults"
    step_ms --autotune-load "$tmp/tuned.env" >>"$tmp/c_tuned"
    step_ms "${best_args[@]}" >>"$tmp/c_best"
  done
  cd_=$(median <"$tmp/c_defaults") ct=$(median <"$tmp/c_tuned")
  cb=$(median <"$tmp/c_best")
  echo "confirmation ($CONFIRM rounds): defaults $cd_, tuned $ct, grid best" \
    "($best) $cb ms; tuned/defaults $(awk -v a="$ct" -v b="$cd_" \
      'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}'), tuned/grid best" \
    "$(awk -v a="$ct" -v b="$cb" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')"
fi
