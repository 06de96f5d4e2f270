#!/usr/bin/env bash
# The main job: set up, build, and train an MLP on Fashion-MNIST with 4
# data-parallel workers on this machine (hkrun -np 4 train, 5 epochs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
set -x
build/hkrun -np 4 build/train --epochs 5 "$@"
