#!/usr/bin/env bash
# Configures and builds one flavour of hk.
#   scripts/build.sh [DIR] [extra cmake args...]   (default DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
