#!/usr/bin/env bash
# plot.sh - busbw against message size, one line per result file, as PNG.
#
#   bench/plot.sh [-o OUT.png] [--raw] [-t TITLE] FILE [FILE...]
#
# FILE is an hkbench --csv file (columns size_bytes, type, redop,
# busbw_gbs, raw_busbw_gbs) or the text output of hkbench or of
# bench/peers' benchmarks (a '# size(B) ... busbw(GB/s)' header line,
# whitespace columns; hkrun's '[r] ' prefixes are stripped). Each file is
# one line labelled with its base name (plus type and redop when the file
# holds several). --raw adds hkbench's ring-only busbw (rawbusbw /
# raw_busbw_gbs) as dashed lines. x: size in bytes, log2 axis; y: busbw in
# GB/s (1e9 bytes/s; busbw = algbw * 2(n-1)/n, nccl-tests' convention).
# Needs gnuplot (Debian gnuplot-nox; scripts/setup.sh installs it).
set -euo pipefail

out=busbw.png raw=0 title="allreduce busbw"
while [ $# -gt 0 ]; do
  case $1 in
  -o) out=$2; shift 2 ;;
  --raw) raw=1; shift ;;
  -t) title=$2; shift 2 ;;
  -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --) shift; break ;;
  -*) echo "plot.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: plot.sh [-o OUT.png] [--raw] [-t TITLE] FILE..." >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Writes FILE's rows as gnuplot blocks "size busbw rawbusbw" (raw "?" when
# absent), one block per type+redop; "HASRAW<TAB>key" per block to
# $2.titles; the largest size to $2.titles.max.
to_blocks() { # file out
  awk -v titles="$2.titles" '
    function header(line,   n, i, tok) {
      sub(/^#/, "", line)
      n = split(line, tok, csv ? "," : " ")
      for (i = 1; i <= n; i++) col[tok[i]] = i
      cs = col["size_bytes"] ? col["size_bytes"] : col["size(B)"]
      cb = col["busbw_gbs"] ? col["busbw_gbs"] : col["busbw(GB/s)"]
      cr = col["raw_busbw_gbs"] ? col["raw_busbw_gbs"] : col["rawbusbw"]
      ct = col["type"]; co = col["redop"]
    }
    FNR == 1 { csv = ($0 ~ /^size_bytes,/) }
    { sub(/^\[[0-9]+\] */, "") }
    csv && FNR == 1 { header($0); next }
    !csv && /^#/ && /busbw\(GB\/s\)/ { header($0); next }
    /^#/ || NF == 0 || !cs || !cb { next }
    {
      n = split($0, f, csv ? "," : " ")
      if (f[cs] !~ /^[0-9]+$/) next
      key = (ct ? f[ct] : "") " " (co ? f[co] : "")
      if (!(key in rows)) order[++ngroups] = key
      has_raw[key] += (cr && f[cr] != "")
      rows[key] = rows[key] f[cs] " " f[cb] " " (cr && f[cr] != "" ? f[cr] : "?") "\n"
      if (f[cs] + 0 > maxsize) maxsize = f[cs] + 0
    }
    END {
      for (g = 1; g <= ngroups; g++) {
        printf "%s\n\n", rows[order[g]]
        print (has_raw[order[g]] ? 1 : 0) "\t" order[g] > titles
      }
      print maxsize > (titles ".max")
      if (!ngroups) exit 1
    }' "$1" >"$2" || { echo "plot.sh: no data rows in $1" >&2; exit 1; }
}

plots=()
i=0
maxsize=1
for f in "$@"; do
  [ -r "$f" ] || { echo "plot.sh: cannot read $f" >&2; exit 1; }
  d="$tmp/$i.dat"
  to_blocks "$f" "$d"
  base=$(basename "$f"); base=${base%.*}
  ngroups=$(wc -l <"$d.titles")
  m=$(cat "$d.titles.max")
  [ "$m" -gt "$maxsize" ] && maxsize=$m
  j=0
  while IFS=$'\t' read -r hasraw key; do
    label=$base
    [ "$ngroups" -gt 1 ] && label="$base $key"
    plots+=("'$d' index $j using 1:2 with linespoints lw 2 pt 7 ps 0.6 title '$label'")
    if [ "$raw" = 1 ] && [ "$hasraw" = 1 ]; then
      plots+=("'$d' index $j using 1:3 with linespoints lw 1 dt 2 pt 6 ps 0.6 title '$label (ring only)'")
    fi
    j=$((j + 1))
  done <"$d.titles"
  i=$((i + 1))
done

# Tick labels every 16x, up to the largest size: "1B" 1, "16B" 16, ...
xtics() { # max
  local v=1 p=0 units=(B KiB MiB GiB TiB) sep=""
  while :; do
    printf '%s"%d%s" %s' "$sep" $((v >> (10 * p))) "${units[p]}" "$v"
    sep=", "
    [ "$v" -ge "$1" ] && break
    v=$((v * 16))
    [ $((v >> (10 * (p + 1)))) -ge 1 ] && p=$((p + 1))
  done
}

{
  echo "set terminal pngcairo size 1000,620 font ',11' noenhanced"
  echo "set output '$out'"
  echo "set title '$title'"
  echo "set logscale x 2"
  echo "set xtics ($(xtics "$maxsize"))"
  echo "set xlabel 'message size (bytes, log2 scale)'"
  echo "set ylabel 'busbw (GB/s)'"
  echo "set yrange [0:*]"
  echo "set grid"
  echo "set key top left"
  echo "set datafile missing '?'"
  (IFS=,; echo "plot ${plots[*]}")
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "plot.sh: wrote $out"
