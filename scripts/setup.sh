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
  python3                             # tests: the documentation checks (scripts/check-docs.py)
  python3-venv python3-setuptools python3-wheel  # tests: pip install ./python in a venv, offline
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
# Optional: Debian's PyTorch (CPU) for /usr/bin/python3, which the python
# tests (ctest label "python") and examples/pytorch use, and torchvision,
# whose ResNet-18 Horovod's synthetic benchmark trains (python_benchmark).
# Without them those tests skip, saying why; everything else is unaffected.
optional=(python3-torch python3-torchvision)
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" &&
    continue
  echo "setup: installing $p (optional)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$p"; }; then
    echo "setup: $p could not be installed; the python tests will skip"
  fi
done
echo "setup: all packages present"
