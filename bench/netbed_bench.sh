#!/usr/bin/env bash
# netbed_bench.sh - hk's allreduce across "hosts" that are network
# namespaces linked at 1 Gbit/s (tests/netbed), next to Open MPI's
# MPI_Allreduce on the same bed, and next to an alpha-beta model whose
# alpha and beta are measured on the bed. Needs root, iproute2, Open MPI
# (mpicc, mpirun) and a build (scripts/build.sh build). Asserts nothing.
#
#   bench/netbed_bench.sh            (makes a bed of 4 hosts and removes it)
#
# Environment (defaults):
#   BUILD=build            hkrun, hkbench, hkpingpong; the MPI benchmark is
#                          built into $BUILD/peers from bench/peers
#   OUT=$BUILD/netbed-bench  report.md and every run's output (raw/)
#   RATE=1gbit             each host's link (both directions)
#   ROUNDS=3               rounds of (a), each runs every program once, in turn
#   SWEEP_ROUNDS=3         rounds of (b): flat then hierarchical
#   SWEEP_MAX=256M         largest size of the (b) sweep (from 1K, x2)
#   LIMIT=900              seconds any one run may take (timeout, then kill)
#   HK_VARIANTS="hk hk-mpi:HK_CROSS_TRANSPORT=mpi"
#                          hk runs of (a): NAME[:VAR=V[,VAR=V...]] each, e.g.
#                          add "hk-4sock:HK_SOCKETS_PER_PEER=4"
#   PEER_VARIANTS="mpi mpi-nommap mpi-ring"
#                          Open MPI runs of (a): out of the box; glibc
#                          kept from mmap'ing its per-call temporaries
#                          (bench/peers' -nommap); and that with the
#                          ring algorithm forced (coll_tuned algorithm 4)
#
# What it runs (every run bounded by LIMIT):
#  (a) 4 hosts x 1 rank: float32 sum, 64 MiB and 256 MiB, hkbench --raw
#      (public API and the collective alone; hk's default algorithm choice,
#      which the report quotes) and bench/peers/mpi_allreduce_bench,
#      interleaved, ROUNDS rounds; medians; busbw in Gbit/s and % of RATE.
#  (b) 4 hosts x 2 ranks: hkbench sweep 1 KiB..SWEEP_MAX, flat ring
#      (HK_ALLREDUCE_ALGO=ring HK_HIERARCHICAL_ALLREDUCE=0) then
#      hierarchical (HK_HIERARCHICAL_ALLREDUCE=1), interleaved,
#      SWEEP_ROUNDS rounds; medians.
#  (c) alpha and beta: hkpingpong (TCP, as hk's transport) between hosts 0
#      and 1 (the link) and inside host 0 (loopback): alpha = median one-way
#      time of 1 byte; beta = least-squares slope of the median one-way
#      time over sizes >= 1 MiB (so the tbf burst, which lets the first
#      256 KB after an idle moment through unshaped, does not bias it).
#      Model (p = H x L ranks, H hosts of L; nccl-tests' busbw from the
#      predicted time):
#        flat ring:     T = 2(p-1) (a_net + S/p b_net)
#                       (every step waits for its slowest link, a host link)
#        hierarchical:  T = 2(L-1) (a_lo + S/L b_lo) + 2(H-1) (a_net + S/H b_net)
#                       (reduce-scatter inside the host, the L shards'
#                       allreduces across hosts sharing the host's link,
#                       allgather inside the host; a leader-based variant
#                       has the same cross-host term)
#      printed next to (b), with |measured/model - 1| > 15% flagged.
# The machine is shared and small: run it when it is quiet, and read the
# medians as such.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
OUT=${OUT:-$BUILD/netbed-bench}
RATE=${RATE:-1gbit}
ROUNDS=${ROUNDS:-3}
SWEEP_ROUNDS=${SWEEP_ROUNDS:-3}
SWEEP_MAX=${SWEEP_MAX:-256M}
LIMIT=${LIMIT:-900}
HK_VARIANTS=${HK_VARIANTS:-hk hk-mpi:HK_CROSS_TRANSPORT=mpi}
PEER_VARIANTS=${PEER_VARIANTS:-mpi mpi-nommap mpi-ring}
PEERS=${PEERS:-$root/bench/peers}
HOSTS=4

say() { echo "netbed_bench: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# Outside a bed: make one for the whole run (removed whatever happens).
if [ -z "${NETBED_DIR:-}" ]; then
  for f in hkrun hkbench hkpingpong; do
    [ -x "$BUILD/$f" ] || die "$BUILD/$f missing: run scripts/build.sh first"
  done
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    die "needs Open MPI (mpicc, mpirun: openmpi-bin, libopenmpi-dev)"
  fi
  "$root/tests/netbed/netbed.sh" check || exit $?
  export BUILD OUT
  NETBED_TIMEOUT_S=${NETBED_TIMEOUT_S:-14400} exec "$root/tests/netbed/netbed.sh" \
    run "$HOSTS" "$RATE" none -- "$0" "$@"
fi

mkdir -p "$OUT/raw" "$BUILD/peers"
# Open MPI's benchmark, built as bench/peers/Makefile says, here.
cp "$PEERS/Makefile" "$PEERS/mpi_allreduce_bench.c" "$BUILD/peers/"
make -s -C "$BUILD/peers" mpi_allreduce_bench >&2

read -r -a hosts <<<"$NETBED_HOSTS"
read -r -a nss <<<"$NETBED_NAMESPACES"
hostlist() { # SLOTS -> "A:SLOTS,B:SLOTS,..."
  local h out=""
  for h in "${hosts[@]}"; do out="$out${out:+,}$h:$1"; done
  echo "$out"
}
link_gbit=$(awk -v r="$RATE" 'BEGIN {
  n = r + 0; u = tolower(substr(r, length(n "") + 1))
  if (u == "gbit") g = n; else if (u == "mbit") g = n / 1e3;
  else if (u == "kbit") g = n / 1e6; else g = 0
  print g }')
[ "$link_gbit" != 0 ] || die "RATE=$RATE: give it in gbit, mbit or kbit"
# shellcheck disable=SC2206 # word splitting wanted
agent_args=($NETBED_AGENT_ARGS)
# shellcheck disable=SC2206
mpi_args=($NETBED_MPI_ARGS)

# Runs one program, bounded; output in $OUT/raw/NAME.txt. Returns its status.
bounded() {
  local name=$1
  shift
  say "run $name: $*"
  local rc=0
  timeout --kill-after=10 "$LIMIT" "$@" >"$OUT/raw/$name.txt" 2>&1 || rc=$?
  [ "$rc" = 0 ] || say "$name exited $rc (output: $OUT/raw/$name.txt)"
  return "$rc"
}

hk_run() { # NAME NP SLOTS ENV-LIST hkbench-args...
  local name=$1 np=$2 slots=$3 envs=$4
  shift 4
  local -a e=()
  [ -n "$envs" ] && IFS=, read -r -a e <<<"$envs"
  bounded "$name" env "${e[@]}" "$BUILD/hkrun" -np "$np" -H "$(hostlist "$slots")" \
    --no-tag-output --network-interface "$NETBED_SUBNET" \
    --mpi-args "${agent_args[*]}" -- "$BUILD/hkbench" "$@"
}

mpi_run() { # NAME VARIANT NP SLOTS bench-args...
  local name=$1 variant=$2 np=$3 slots=$4
  shift 4
  local -a v=()
  case $variant in
  mpi) ;;
  mpi-nommap) v=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184) ;;
  mpi-ring) v=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184
    --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4) ;;
  *) die "unknown peer variant '$variant'" ;;
  esac
  bounded "$name" mpirun --allow-run-as-root -np "$np" -H "$(hostlist "$slots")" \
    --map-by slot --bind-to none "${mpi_args[@]}" "${v[@]}" \
    "$BUILD/peers/mpi_allreduce_bench" "$@"
}

# Data lines of a result file: "size time busbw wrong [raw rawbusbw]".
rows_hk() { awk '$1 ~ /^[0-9]+$/ && NF >= 11 { print $1, $5, $8, $10, $6, $9 }' "$1"; }
rows_mpi() { awk '$1 ~ /^[0-9]+$/ && NF >= 9 { print $1, $5, $7, $8 }' "$1"; }

# Median of the numbers on stdin ("-" if none).
median() { sort -g | awk '{ v[NR] = $1 } END {
  if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
  else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# med FILES COLUMN SIZE: median over files of COLUMN at SIZE (rows format)
med() {
  local col=$1 size=$2
  shift 2
  local f
  for f in "$@"; do cat "$f"; done | awk -v c="$col" -v s="$size" '$1 == s && $c != "" { print $c }' | median
}

note_features=""
for v in HK_HIERARCHICAL_ALLREDUCE HK_CROSS_TRANSPORT HK_SOCKETS_PER_PEER; do
  grep -qa "$v" "$BUILD/hkbench" ||
    note_features="$note_features${note_features:+, }$v"
done

report=$OUT/report.md
started=$(date -u +%FT%TZ)
{
  echo "# hk on a netns bed: $HOSTS hosts at $RATE ($started)"
  echo
  echo "bed: $NETBED_HOSTS on $NETBED_SUBNET; $(nproc) cores; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
  [ -z "$note_features" ] ||
    echo "note: this build does not know $note_features: those settings run the flat TCP ring."
  echo
} >"$report"

# ---- (c) alpha and beta -------------------------------------------------
pingpong() { # NAME SERVER_NS CLIENT_NS ADDR
  local name=$1 sns=$2 cns=$3 addr=$4 port="" line
  coproc PP { timeout "$LIMIT" ip netns exec "$sns" "$BUILD/hkpingpong" serve "$addr"; }
  local pid=$PP_PID # (bash unsets PP_PID once the server has exited)
  read -r -t 30 line <&"${PP[0]}" || die "hkpingpong did not start in $sns"
  port=${line#listening }
  bounded "$name" ip netns exec "$cns" "$BUILD/hkpingpong" ping "$addr" "$port" \
    -b 1 -e 16M -f 4
  wait "$pid" || true
}
pingpong pingpong-link "${nss[1]}" "${nss[0]}" "${hosts[1]}"
pingpong pingpong-loopback "${nss[0]}" "${nss[0]}" "${hosts[0]}"
# alpha (s), beta (s/B) from a ping-pong table
fit() {
  awk '!/^#/ && NF >= 4 {
    if ($1 == 1) a = $4 * 1e-6
    if ($1 >= 1048576) { n++; x = $1; y = $4 * 1e-6; sx += x; sy += y; sxx += x * x; sxy += x * y }
  } END { b = (n > 1) ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0; printf "%.9g %.9g\n", a, b }' "$1"
}
read -r a_net b_net < <(fit "$OUT/raw/pingpong-link.txt")
read -r a_lo b_lo < <(fit "$OUT/raw/pingpong-loopback.txt")
{
  echo "## (c) alpha and beta, measured on the bed (hkpingpong, TCP)"
  echo
  echo "| path | alpha (one-way, 1 B) | beta | 1/beta |"
  echo "|---|---|---|---|"
  awk -v a="$a_net" -v b="$b_net" 'BEGIN { printf "| host link (host 0 <-> 1) | %.1f us | %.3f ns/B | %.3f Gbit/s |\n", a * 1e6, b * 1e9, 8 / b / 1e9 }'
  awk -v a="$a_lo" -v b="$b_lo" 'BEGIN { printf "| inside a host (loopback) | %.1f us | %.3f ns/B | %.3f Gbit/s |\n", a * 1e6, b * 1e9, 8 / b / 1e9 }'
  echo
  echo "(alpha: median one-way time of 1 byte; beta: least-squares slope of the median one-way time over 1-16 MiB; raw tables in raw/pingpong-*.txt)"
  echo
} >>"$report"

# ---- (a) 4 x 1 at the link rate: hk vs Open MPI --------------------------
names=()
for r in $(seq 1 "$ROUNDS"); do
  for v in $HK_VARIANTS; do
    n=${v%%:*} envs=""
    [ "$n" != "$v" ] && envs=${v#*:}
    hk_run "a-$n-r$r" 4 1 "HK_LOG_LEVEL=info${envs:+,$envs}" \
      -b 64M -e 256M -f 4 -n 5 -w 1 --raw || true
    [ "$r" = 1 ] && names+=("$n")
  done
  for p in $PEER_VARIANTS; do
    mpi_run "a-$p-r$r" "$p" 4 1 -b 64M -e 256M -f 4 -n 5 -w 1 || true
    [ "$r" = 1 ] && names+=("$p")
  done
done
{
  echo "## (a) 4 hosts x 1 rank at $RATE: float32 sum, medians of $ROUNDS interleaved rounds"
  echo
  echo "| program | size | time (ms) | busbw (Gbit/s) | % of $RATE | % of 1/beta | #wrong (max) | ring alone: busbw (Gbit/s), % of $RATE |"
  echo "|---|---|---|---|---|---|---|---|"
} >>"$report"
for n in "${names[@]}"; do
  for r in $(seq 1 "$ROUNDS"); do
    f=$OUT/raw/a-$n-r$r.txt
    if [ -f "$f" ]; then
      if grep -q "peer=hk" "$f"; then rows_hk "$f"; else rows_mpi "$f"; fi >"$f.rows"
    fi
  done
  rows=()
  for f in "$OUT"/raw/a-"$n"-r*.txt.rows; do [ -s "$f" ] && rows+=("$f"); done
  for s in 67108864 268435456; do
    if [ ${#rows[@]} = 0 ]; then
      echo "| $n | $((s >> 20)) MiB | (no result) | | | | | |" >>"$report"
      continue
    fi
    t=$(med 2 "$s" "${rows[@]}") traw=$(med 5 "$s" "${rows[@]}")
    wrong=$(cat "${rows[@]}" | awk -v s="$s" '$1 == s && $4 > m { m = $4 } END { print m + 0 }')
    awk -v n="$n" -v s="$s" -v t="$t" -v tr="$traw" -v w="$wrong" -v g="$link_gbit" -v b="$b_net" -v np=4 'BEGIN {
      if (t == "-") { printf "| %s | %d MiB | (no result) | | | | | |\n", n, s / 1048576; exit }
      bw = busbw(s, t); raw = (tr == "-") ? "" : sprintf("%.3f, %.1f%%", busbw(s, tr), busbw(s, tr) / g * 100)
      printf "| %s | %d MiB | %.1f | %.3f | %.1f%% | %.1f%% | %d | %s |\n", n, s / 1048576, t / 1e3, bw,
        bw / g * 100, bw / (8 / b / 1e9) * 100, w, raw }
    function busbw(s, us) { return s / (us * 1e-6) * 2 * (np - 1) / np * 8 / 1e9 }' >>"$report"
  done
done
{
  echo
  for v in $HK_VARIANTS; do
    n=${v%%:*}
    choice=$(grep -ho "allreduce algorithm ([a-z]*): .*" "$OUT/raw/a-$n-r1.txt" 2>/dev/null | head -1)
    [ -z "$choice" ] || printf '%s: %s (rank 0'"'"'s log)\n\n' "$n" "$choice"
  done
  echo "busbw = algbw x 2(n-1)/n (nccl-tests), n = 4; each round runs every program once, in the order listed. The most a TCP stream gets through the shaper here is 1/beta above (Ethernet, IP and TCP headers are inside the $RATE)."
  echo
} >>"$report"

# ---- (b) 4 x 2: flat vs hierarchical, and the model ---------------------
for r in $(seq 1 "$SWEEP_ROUNDS"); do
  hk_run "b-flat-r$r" 8 2 HK_ALLREDUCE_ALGO=ring,HK_HIERARCHICAL_ALLREDUCE=0 \
    -b 1K -e "$SWEEP_MAX" -f 2 -n 20 -w 2 -B 256M --raw || true
  hk_run "b-hier-r$r" 8 2 HK_HIERARCHICAL_ALLREDUCE=1 \
    -b 1K -e "$SWEEP_MAX" -f 2 -n 20 -w 2 -B 256M --raw || true
done
for k in flat hier; do
  for f in "$OUT/raw/b-$k-r"*.txt; do rows_hk "$f" >"$f.rows"; done
done
{
  echo "## (b) 4 hosts x 2 ranks: flat ring (HK_ALLREDUCE_ALGO=ring) vs hierarchical (HK_HIERARCHICAL_ALLREDUCE=1), float32 sum, medians of $SWEEP_ROUNDS rounds, next to the alpha-beta model"
  echo
  echo "busbw in Gbit/s (public API; ring alone in parentheses); model from (c); '!' marks |measured/model - 1| > 15%."
  echo
  echo "| size | flat | flat model | flat/model | hierarchical | hier. model | hier./model | hier./flat |"
  echo "|---|---|---|---|---|---|---|---|"
} >>"$report"
flat_rows=("$OUT"/raw/b-flat-r*.txt.rows)
hier_rows=("$OUT"/raw/b-hier-r*.txt.rows)
sizes=$(cat "${flat_rows[@]}" "${hier_rows[@]}" | awk '{ print $1 }' | sort -n | uniq)
for s in $sizes; do
  ft=$(med 2 "$s" "${flat_rows[@]}") fr=$(med 5 "$s" "${flat_rows[@]}")
  ht=$(med 2 "$s" "${hier_rows[@]}") hr=$(med 5 "$s" "${hier_rows[@]}")
  awk -v s="$s" -v ft="$ft" -v fr="$fr" -v ht="$ht" -v hr="$hr" \
    -v an="$a_net" -v bn="$b_net" -v al="$a_lo" -v bl="$b_lo" -v H="$HOSTS" -v L=2 'BEGIN {
    p = H * L
    tf = 2 * (p - 1) * (an + s / p * bn)
    th = 2 * (L - 1) * (al + s / L * bl) + 2 * (H - 1) * (an + s / H * bn)
    mf = busbw(tf * 1e6); mh = busbw(th * 1e6)
    fb = ft == "-" ? "-" : busbw(ft); hb = ht == "-" ? "-" : busbw(ht)
    if (s >= 1048576) sz = sprintf("%d MiB", s / 1048576); else sz = sprintf("%d KiB", s / 1024)
    printf "| %s | %s | %.3f | %s | %s | %.3f | %s | %s |\n", sz, cell(fb, fr), mf, ratio(fb, mf),
      cell(hb, hr), mh, ratio(hb, mh), (fb == "-" || hb == "-") ? "-" : sprintf("%.2f", hb / fb)
  }
  function busbw(us) { return s / (us * 1e-6) * 2 * (p - 1) / p * 8 / 1e9 }
  function cell(b, r) { return b == "-" ? "-" : sprintf("%.3f (%.3f)", b, r == "-" ? 0 : busbw(r)) }
  function ratio(b, m,   q) { if (b == "-") return "-"; q = b / m
    return sprintf("%.2f%s", q, (q > 1.15 || q < 0.85) ? " !" : "") }' >>"$report"
done
{
  echo
  echo "Model: flat T = 2(p-1)(a_net + S/p b_net); hierarchical T = 2(L-1)(a_lo + S/L b_lo) + 2(H-1)(a_net + S/H b_net); p = 8, H = 4, L = 2; busbw = S/T x 2(p-1)/p."
  echo
  echo "finished $(date -u +%FT%TZ); every run's output in raw/."
} >>"$report"
cat "$report"
