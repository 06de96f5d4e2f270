#!/usr/bin/env bash
# plan_horovod.sh - hkplan against Horovod's published scaling (Sergeev and
# Del Balso 2018, "Horovod: fast and easy distributed deep learning in
# TensorFlow", and Horovod's docs/benchmarks: 128 servers of 4 Pascal GPUs
# on a 25 Gbit/s network; Inception V3 and ResNet-101 about 88-90 %, VGG-16
# 68 % at 512 GPUs), fed with the published single-GPU throughputs
# (TensorFlow's benchmarks page, tf_cnn_benchmarks on one Tesla P100 of a
# DGX-1, synthetic data, batch 64: Inception V3 142 images/s, VGG-16 154;
# ResNet-101 is not listed there: 128.7 images/s interpolated in FLOPs
# between ResNet-50's 219 and ResNet-152's 91.8, with He et al.'s 3.8, 7.6
# and 11.3 GFLOPs). Pure computation: nothing runs on a network.
#
# The server: configs/t4-4gpu-pcie-2socket.xml's layout (4 PCIe GPUs over
# two sockets) with the GPU named P100-PCIE-16GB. Prints, for 32 and 128
# servers, each model's efficiency against one GPU with the GPU batches run
# as Horovod then ran them, by NCCL's flat ring over every GPU
# (--collective nccl-ring: NCCL 2 before its trees), and as hk's own table
# would run them (--collective hk). VGG-16 once more with its gradients ready as
# the backward pass's FLOPs reach them (a profile in timeline form, from
# VGG-16's layer shapes) instead of by parameters.
#
# Usage: bench/plan_horovod.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: plan_horovod.sh BUILD_DIR}
plan="$build/hkplan"
[ -x "$plan" ] || { echo "plan_horovod.sh: no $plan (build the hkplan target)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/plan_horovod.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# model  published-images/s  published-efficiency
cases="inception_v3 142 88-90
resnet101 128.7 88-90
vgg16 154 68"

run() { # model rate extra...
  local model=$1 rate=$2
  shift 2
  "$plan" --model "$model" --step-s "$(awk -v r="$rate" 'BEGIN{print 64/r}')" \
    --batch 64 --server t4-4gpu-pcie-2socket:P100-PCIE-16GB --servers 32,128 \
    --net 25 --optimizer sgd --csv "$@" |
    awk -F, 'NR > 1 { printf " %s GPUs %s %%", $4, $14 }'
}

# VGG-16's backward profile: layer l's gradients are ready when the
# backward pass has done the FLOPs of every layer after it and its own
# (conv: weights x output pixels; fully connected: weights).
/usr/bin/python3 - "$tmp/vgg16_ready.json" <<'PY'
import sys
px = {0: 224, 2: 224, 5: 112, 7: 112, 10: 56, 12: 56, 14: 56, 17: 28, 19: 28,
      21: 28, 24: 14, 26: 14, 28: 14}
cin = {0: 3, 2: 64, 5: 64, 7: 128, 10: 128, 12: 256, 14: 256, 17: 256,
       19: 512, 21: 512, 24: 512, 26: 512, 28: 512}
cout = {0: 64, 2: 64, 5: 128, 7: 128, 10: 256, 12: 256, 14: 256, 17: 512,
        19: 512, 21: 512, 24: 512, 26: 512, 28: 512}
layers = [("features.%d" % i, cin[i] * cout[i] * 9 * px[i] ** 2) for i in sorted(px)]
layers += [("classifier.0", 25088 * 4096), ("classifier.3", 4096 * 4096),
           ("classifier.6", 4096 * 1000)]
total = sum(f for _, f in layers)
done, ev = 0.0, []
for name, f in reversed(layers):          # the backward pass
    done += f
    t = 1e6 * done / total                 # µs, any scale: hkplan normalises
    for p in ("bias", "weight"):
        ev.append('{"name":"WAIT_FOR_DATA","cat":"hk","ph":"X","pid":0,'
                  '"tid":1,"ts":0.000,"dur":%.3f,"args":{"tensor":"%s.%s"}}'
                  % (t, name, p))
open(sys.argv[1], "w").write("[\n" + ",\n".join(ev) + "\n]\n")
PY

printf '%-13s %-10s  %-40s  %s\n' model published "NCCL's flat ring (Horovod's)" "hk's own schedules"
while read -r model rate pub; do
  printf '%-13s %-10s %s  %s\n' "$model" "$pub %" \
    "$(run "$model" "$rate" --collective nccl-ring)" \
    "$(run "$model" "$rate" --collective hk)"
done <<<"$cases"
printf '%-13s %-10s %s  %s\n' "vgg16 FLOPs" "68 %" \
  "$(run vgg16 154 --timeline "$tmp/vgg16_ready.json" --collective nccl-ring)" \
  "$(run vgg16 154 --timeline "$tmp/vgg16_ready.json" --collective hk)"
