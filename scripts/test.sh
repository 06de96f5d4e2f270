#!/usr/bin/env bash
# Sets up, builds and runs every test:
#   0. a Release build of libhk and hkrun, warnings as errors (~30 s of
#      CPU, a fresh configure and build);
#   1. the whole suite (unit, integration, large, python) in a normal build;
#   2. the suite again under AddressSanitizer + UBSan (without "large",
#      which would need ~3x its 4 GiB under ASan, "package", whose
#      consumer programs are not built with the sanitizers, and "python":
#      an ASan-built libhk loaded into Debian's python3 needs the ASan
#      runtime preloaded, and torch's own allocator and threads do not
#      run under it);
#   3. the threaded tests under ThreadSanitizer (the python tests are not
#      labelled threaded, for the same reason);
#   4. the fuzz targets (libFuzzer, bounded runs);
#   5. clang-format of every C file.
# Each stage prints ctest's summary; the script fails on the first failure.
# Warnings are errors here (HK_WERROR=ON), not in users' builds.
#
# 30 to 35 minutes on the 2-core machine (normal suite about 14, ASan
# 11, TSan 6, fuzz 1: bench/RESULTS.md, "Build and test times").
# A quick subset:
#   ctest --test-dir build -L unit           (~25 s)
#   ctest --test-dir build -R test_hkrun     (one test; -LE netbed: no beds)
#
# Nothing is left behind, however the run ends (a failure, Ctrl-C,
# SIGTERM, a timeout): every temporary file of the tests goes under a
# TMPDIR of this run, removed at the end; each command runs with
# PR_SET_PDEATHSIG, so a killed run ends ctest, which ends the tests,
# which end what they started (tests/integration/harness.h); every netns
# bed goes with the test that owns it (tests/netbed/netbed.sh's guard),
# and the end of the run waits (at most 30 s) for the beds of its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
start=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - start )) s) ==="; }

# every temporary file of the tests (theirs, Open MPI's shared memory, the
# flight records of failing test jobs) under one directory
. scripts/test_tmp.sh
hk_test_tmp "$(mktemp -d /tmp/hk-test.XXXXXX)"
child=

# The beds this run's tests own (same session) are gone, or 30 s passed.
wait_for_beds() {
  [ "$(id -u)" = 0 ] && command -v ip >/dev/null || return 0
  local sid end=$((SECONDS + 30)) f owner live
  sid=$(ps -o sid= -p $$ | tr -d ' ')
  while :; do
    tests/netbed/netbed.sh gc >/dev/null 2>&1 || true
    live=0
    for f in /tmp/hknetbed-*/env; do
      [ -e "$f" ] || continue
      owner=$(sed -n 's/^NETBED_OWNER=//p' "$f" 2>/dev/null || true)
      if [ -n "$owner" ] &&
        [ "$(ps -o sid= -p "$owner" 2>/dev/null | tr -d ' ')" = "$sid" ]; then
        live=1
      fi
    done
    if [ $live = 0 ] || [ $SECONDS -ge $end ]; then
      break
    fi
    sleep 1
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  wait_for_beds
  # processes that are still ending (an mpirun's daemons) may write into
  # it meanwhile: try again for a few seconds
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    rm -rf "$TMPDIR" 2>/dev/null || true
    [ -e "$TMPDIR" ] || break
    sleep 1
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Runs a command so that it (and so what it starts) ends with this
# script, waiting for it in a way a signal interrupts.
run() {
  setpriv --pdeathsig TERM -- "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=
  return "$rc"
}

stage "format"
# (bench/peers is the peers' harness as they wrote it: not hk's style)
sources() { find include common coordinator collectives worker launcher topology observe planner \
  device examples bench tests -path bench/peers -prune -o \( -name '*.[ch]' \
  -o -name '*.cu' -o -name '*.cpp' \) -print; }
bad=$(sources | xargs clang-format --dry-run 2>&1 | grep -c warning || true)
if [ "$bad" != 0 ]; then
  sources | xargs clang-format --dry-run 2>&1 | head -20
  echo "clang-format: $bad places need formatting (run clang-format -i)"
  exit 1
fi

stage "Release build of libhk, hkrun and the CUDA module's C (no warnings)"
# -O3's analyses warn where -O2's do not (-Wmaybe-uninitialized,
# -Wformat-truncation): what users build must stay warning-free
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DHK_WERROR=ON >/dev/null
run cmake --build build-release -j"$(nproc)" --target hk hkrun
# the CUDA module's C half too, where the toolkit is found (its kernels'
# nvcc build is the normal build's)
if [ -f build-release/device/cuda/Makefile ]; then
  run make -C build-release/device/cuda cuda.c.o
fi

stage "build and test (RelWithDebInfo)"
run scripts/build.sh build -DHK_WERROR=ON
run ctest --test-dir build --output-on-failure -j1

stage "ASan+UBSan"
run scripts/build.sh build-asan -DHK_WERROR=ON -DHK_SANITIZE=address
# (the fusion run checks bits in the normal build; here it hunts memory
# errors, on fewer steps)
HKT_FUSION_STEPS=60 HKT_ALLREDUCE_BIG=200003 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1 \
  run ctest --test-dir build-asan --output-on-failure -LE "large|package|python"

stage "TSan (threaded tests)"
BUILD_TARGET=threaded_tests run scripts/build.sh build-tsan -DHK_WERROR=ON -DHK_SANITIZE=thread
# (races are the same under every allreduce algorithm: the fusion run
# compares on and off for the default choice only; the other stages run all)
HKT_FUSION_STEPS=30 HKT_FUSION_ALGOS=auto HKT_ALLREDUCE_BIG=20011 TSAN_OPTIONS=halt_on_error=1 \
  run ctest --test-dir build-tsan --output-on-failure -L threaded

stage "fuzz"
BUILD_TARGET=fuzz_tests run scripts/build.sh build-fuzz -DHK_WERROR=ON -DHK_FUZZ=ON -DCMAKE_C_COMPILER=clang
run ctest --test-dir build-fuzz --output-on-failure -L fuzz

stage "all stages passed"
