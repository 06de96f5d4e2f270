#!/usr/bin/env bash
# Sets up, builds and runs every test:
#   1. the whole suite (unit, integration, large, python) in a normal build;
#   2. the suite again under AddressSanitizer + UBSan (without "large",
#      which would need ~3x its 4 GiB under ASan, and without "python":
#      an ASan-built libhk loaded into Debian's python3 needs the ASan
#      runtime preloaded, and torch's own allocator and threads do not
#      run under it);
#   3. the threaded tests under ThreadSanitizer (the python tests are not
#      labelled threaded, for the same reason);
#   4. the fuzz targets (libFuzzer, bounded runs);
#   5. clang-format of every C file.
# Each stage prints ctest's summary; the script fails on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
start=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - start )) s) ==="; }

stage "format"
sources() { find include common coordinator collectives worker launcher topology \
  examples bench tests -name '*.[ch]' -print; }
bad=$(sources | xargs clang-format --dry-run 2>&1 | grep -c warning || true)
if [ "$bad" != 0 ]; then
  sources | xargs clang-format --dry-run 2>&1 | head -20
  echo "clang-format: $bad places need formatting (run clang-format -i)"
  exit 1
fi

stage "build and test (RelWithDebInfo)"
scripts/build.sh build
ctest --test-dir build --output-on-failure -j1

stage "ASan+UBSan"
scripts/build.sh build-asan -DHK_SANITIZE=address
# (the fusion run checks bits in the normal build; here it hunts memory
# errors, on fewer steps)
HKT_FUSION_STEPS=60 HKT_ALLREDUCE_BIG=200003 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -LE 'large|python'

stage "TSan (threaded tests)"
scripts/build.sh build-tsan -DHK_SANITIZE=thread
HKT_FUSION_STEPS=30 HKT_ALLREDUCE_BIG=20011 TSAN_OPTIONS=halt_on_error=1 \
  ctest --test-dir build-tsan --output-on-failure -L threaded

stage "fuzz"
scripts/build.sh build-fuzz -DHK_FUZZ=ON -DCMAKE_C_COMPILER=clang
ctest --test-dir build-fuzz --output-on-failure -L fuzz

stage "all stages passed"
