#!/usr/bin/env bash
# Installs every Debian package hk's build, tests and examples need.
# Run as root on Debian 12. Safe to run again (apt skips what is there).
set -euo pipefail
packages=(
  build-essential cmake pkg-config clang-format
  libuv1-dev libcmocka-dev libssl-dev
  libexpat1-dev                       # topology/: NCCL topology XML
  openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev            # libFuzzer + sanitizer runtimes
  zlib1g-dev libopenblas-dev          # examples/train
  dataset-fashion-mnist               # examples/train's data
  iproute2                            # multi-host test bed (network namespaces)
  libjansson-dev                      # tests: reading the timeline back
  gnuplot-nox                         # bench/plot.sh
  python3-torch                       # python/: hk.torch's tests and example (CPU)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present"
