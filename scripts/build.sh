#!/usr/bin/env bash
# Configures and builds one flavour of hk.
#   scripts/build.sh [DIR] [extra cmake args...]   (default DIR: build)
# BUILD_TARGET=T builds only target T and what it needs (the test
# command's TSan and fuzz stages: threaded_tests, fuzz_tests).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
