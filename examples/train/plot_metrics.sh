#!/usr/bin/env bash
# plot_metrics.sh - the loss and accuracy curves of a train --metrics CSV,
# as one PNG: training loss on the left axis, train and test accuracy on
# the right, against the epoch.
#
#   examples/train/plot_metrics.sh [-o OUT.png] [-t TITLE] FILE.csv
#
# FILE.csv: the columns of examples/train/metrics.h (epoch, loss,
# train_acc, test_acc, samples_per_s, data_wait, allreduce_wait, lr), with
# its header line; at least one row. Default OUT: FILE.png beside it.
# Needs gnuplot (Debian gnuplot-nox; scripts/setup.sh installs it).
# Exit status: 0, 1 (gnuplot missing or failed), 2 (bad usage or file).
set -euo pipefail

out="" title="training curves"
while [ $# -gt 0 ]; do
  case $1 in
  -o) out=$2; shift 2 ;;
  -t) title=$2; shift 2 ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --) shift; break ;;
  -*) echo "plot_metrics.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: plot_metrics.sh [-o OUT.png] [-t TITLE] FILE.csv" >&2; exit 2; }
csv=$1
[ -r "$csv" ] || { echo "plot_metrics.sh: $csv: cannot read" >&2; exit 2; }
want="epoch,loss,train_acc,test_acc,samples_per_s,data_wait,allreduce_wait,lr"
head=$(head -n 1 "$csv")
[ "$head" = "$want" ] || {
  echo "plot_metrics.sh: $csv: not a train --metrics file (header '$head')" >&2
  exit 2
}
rows=$(($(wc -l <"$csv") - 1))
[ "$rows" -ge 1 ] || { echo "plot_metrics.sh: $csv: no epochs yet" >&2; exit 2; }
[ -n "$out" ] || out="${csv%.csv}.png"
command -v gnuplot >/dev/null || {
  echo "plot_metrics.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2
  exit 1
}

# Quotes for gnuplot's single-quoted strings ('' stands for ').
q() { printf "'%s'" "${1//\'/\'\'}"; }
gnuplot <<GP
set terminal pngcairo size 900,540 noenhanced
set output $(q "$out")
set datafile separator ','
set title $(q "$title")
set key outside bottom center horizontal
set grid
set xtics 1
set xlabel 'epoch'
set ylabel 'training loss (nats)'
set y2label 'accuracy'
set y2range [0:1]
set y2tics
set ytics nomirror
$( [ "$rows" -eq 1 ] && echo "set xrange [0.5:1.5]" )
plot $(q "$csv") every ::1 using 1:2 axes x1y1 with linespoints lw 2 title 'loss', \
     '' every ::1 using 1:3 axes x1y2 with linespoints lw 2 title 'train accuracy', \
     '' every ::1 using 1:4 axes x1y2 with linespoints lw 2 title 'test accuracy'
GP
echo "$out"
