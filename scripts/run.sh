#!/usr/bin/env bash
# The main job: set up, build, and run a 4-rank job on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
set -x
build/hkrun -np 4 build/allreduce_demo 16777216
