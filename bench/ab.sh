#!/usr/bin/env bash
# ab.sh - two builds of hk side by side: does a change cost speed?
#
#   bench/ab.sh OLD_BUILD NEW_BUILD
#
# For each of ROUNDS rounds, for each size in SIZES, runs hkbench through
# each build's own hkrun, the two builds one after the other in the same
# round (their order alternating from round to round), so the machine's
# load falls on both alike:
#   BUILD/hkrun -np NP BUILD/hkbench -b SIZE -e SIZE -n ITERS --raw
# at normal priority, as users run hk (no chrt, no pinning). The report
# (markdown, on stdout) gives each build's median over rounds of hkbench's
# time(us) (itself a median over iterations of the max over ranks), the
# median over rounds of new/old (each round's ratio: same load), and the
# spread of that ratio (min-max). Raw outputs: OUT/<old|new>_<size>_r<k>.txt.
#
# Environment: ROUNDS (5), SIZES ("8 1M 64M"), NP (2), ITERS (200 for
# sizes under 1 MiB, else 20), LIMIT (300 s a run), OUT (a new folder
# under TMPDIR), ENV (extra VAR=value words for both, e.g.
# "HK_INTRA_TRANSPORT=tcp").
set -euo pipefail
[ $# = 2 ] || {
  echo "usage: bench/ab.sh OLD_BUILD NEW_BUILD" >&2
  exit 2
}
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-"8 1M 64M"}
NP=${NP:-2}
LIMIT=${LIMIT:-300}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/hk-ab.XXXXXX")}
mkdir -p "$OUT"
for b in "$OLD" "$NEW"; do
  [ -x "$b/hkrun" ] && [ -x "$b/hkbench" ] || {
    echo "$b: no hkrun or hkbench (build it first)" >&2
    exit 2
  }
done

bytes() { numfmt --from=iec "$1"; }

# time(us) of one run's only data line: the 5th column
run_one() { # build tag size round
  local b=$1 tag=$2 size=$3 k=$4 n
  n=${ITERS:-$([ "$(bytes "$size")" -lt 1048576 ] && echo 200 || echo 20)}
  local f="$OUT/${tag}_${size}_r$k.txt"
  env ${ENV:-} timeout "$LIMIT" "$b/hkrun" --no-tag-output -np "$NP" \
    "$b/hkbench" -b "$size" -e "$size" -n "$n" --raw >"$f" 2>&1 || {
    echo "$tag $size round $k failed: $f" >&2
    return 1
  }
  awk '!/^#/ && NF >= 5 {print $5; exit}' "$f"
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR % 2) print v[(NR+1)/2];
  else print (v[NR/2] + v[NR/2+1]) / 2}'; }

declare -A t_old t_new ratios
for ((k = 1; k <= ROUNDS; k++)); do
  for size in $SIZES; do
    if ((k % 2)); then
      o=$(run_one "$OLD" old "$size" "$k")
      n=$(run_one "$NEW" new "$size" "$k")
    else
      n=$(run_one "$NEW" new "$size" "$k")
      o=$(run_one "$OLD" old "$size" "$k")
    fi
    t_old[$size]+="$o "
    t_new[$size]+="$n "
    ratios[$size]+="$(awk -v a="$n" -v b="$o" 'BEGIN {printf "%.4f", a / b}') "
  done
done

echo "# hkbench, np $NP, $ROUNDS interleaved rounds${ENV:+, $ENV}"
echo "# old: $OLD"
echo "# new: $NEW"
echo
echo "| size | old time(us) | new time(us) | new/old (median) | new/old (min-max) |"
echo "|---|---|---|---|---|"
for size in $SIZES; do
  mo=$(tr ' ' '\n' <<<"${t_old[$size]}" | grep . | median)
  mn=$(tr ' ' '\n' <<<"${t_new[$size]}" | grep . | median)
  mr=$(tr ' ' '\n' <<<"${ratios[$size]}" | grep . | median)
  lo=$(tr ' ' '\n' <<<"${ratios[$size]}" | grep . | sort -g | head -1)
  hi=$(tr ' ' '\n' <<<"${ratios[$size]}" | grep . | sort -g | tail -1)
  echo "| $size | $mo | $mn | $mr | $lo-$hi |"
done
echo
echo "raw outputs: $OUT"
