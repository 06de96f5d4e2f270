#!/usr/bin/env bash
# The consumer's view of hk (tests/package/CMakeLists.txt runs each step
# as a ctest of its own, label "package"):
#
#   test_package.sh install      BUILD PREFIX   cmake --install into PREFIX
#   test_package.sh layout       PREFIX SOURCE  what is installed, sonames,
#                                               exported symbols = hk.h,
#                                               no libmpi, no RPATH, tools run
#   test_package.sh cmake        PREFIX SOURCE WORK shared|static
#                                               find_package consumers (C, C++)
#   test_package.sh pkgconfig    PREFIX SOURCE WORK  pkg-config hk (shared and
#                                               --static)
#   test_package.sh subdirectory PREFIX SOURCE WORK  add_subdirectory(hk)
#   test_package.sh python       PREFIX PYTHON  the Python package cmake
#                                               --install put in the prefix
#   test_package.sh pip          SOURCE WORK PYTHON  pip install ./python in
#                                               a venv, offline: it builds
#                                               and ships libhk
#
# Every program runs as a world of one and under the installed hkrun
# (-np 2). Environment: CMAKE (cmake to use), CC, CXX (may be empty: no
# C++ program), GENERATOR.
set -euo pipefail
step=$1
shift
CMAKE=${CMAKE:-cmake}
fail() { echo "test_package: $*" >&2; exit 1; }
# The libraries FILE needs (readelf's NEEDED), one per line; and its
# dynamic section whole. Captured before any grep -q, which would end a
# pipe early (and pipefail would see the writer's SIGPIPE).
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
dynamic() { readelf -d "$1"; }

# Runs a consumer program (with ARGS) alone and under hkrun -np 2;
# checks its lines ("NAME: rank R of N ok ...").
run_program() { # PREFIX PROGRAM NAME [ARGS...]
  local prefix=$1 prog=$2 name=$3 out
  shift 3
  out=$(env -u LD_LIBRARY_PATH "$prog" "$@") || fail "$prog failed alone: $out"
  echo "$out"
  grep -q "^$name: rank 0 of 1 ok" <<<"$out" || fail "$prog alone: $out"
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/hkrun" -np 2 -- "$prog" "$@") ||
    fail "$prog under hkrun -np 2 failed: $out"
  echo "$out"
  for r in 0 1; do
    grep -q "^\[$r\] $name: rank $r of 2 ok" <<<"$out" ||
      fail "$prog under hkrun: no line from rank $r: $out"
  done
  if [ "$name" = app_c ]; then
    grep -q "mpi not loaded" <<<"$out" || fail "$prog loaded MPI: $out"
  fi
}

# Configures and builds the consumer project in WORK; returns 1 (after
# printing the log unless QUIET=1) if either fails.
consumer_build() { # WORK SOURCE ARGS...
  local work=$1 source=$2
  shift 2
  rm -rf "$work"
  if ! "$CMAKE" -S "$source/tests/package/consumer" -B "$work" \
    ${GENERATOR:+-G "$GENERATOR"} -DCMAKE_BUILD_TYPE=Release \
    ${CC:+-DCMAKE_C_COMPILER="$CC"} ${CXX:+-DCMAKE_CXX_COMPILER="$CXX"} \
    "$@" >"$work.configure.log" 2>&1; then
    [ "${QUIET:-0}" = 1 ] || cat "$work.configure.log"
    echo "configuring the consumer ($*) failed" >&2
    return 1
  fi
  if ! "$CMAKE" --build "$work" --parallel "$(nproc)" >"$work.build.log" 2>&1; then
    cat "$work.build.log"
    echo "building the consumer ($*) failed" >&2
    return 1
  fi
}

case $step in
install)
  build=$1 prefix=$2
  rm -rf "$prefix"
  "$CMAKE" --install "$build" --prefix "$prefix" >/dev/null ||
    fail "cmake --install $build --prefix $prefix"
  echo "installed into $prefix"
  ;;

layout)
  prefix=$1 source=$2
  lib=$(dirname "$(find "$prefix" -name 'libhk.so.0.*' -type f | head -1)")
  [ -d "$lib" ] || fail "no libhk.so.0.* under $prefix"
  for f in include/hk/hk.h bin/hkrun bin/hktopo bin/hkplan bin/hkbench \
           share/hk/configs/v100-sxm2-8gpu-dgx1.xml \
           share/hk/models/resnet50.tsv; do
    [ -e "$prefix/$f" ] || fail "$f is not installed"
  done
  for f in libhk.a libhk.so libhk.so.0 pkgconfig/hk.pc cmake/hk/hkConfig.cmake \
           cmake/hk/hkConfigVersion.cmake cmake/hk/hkTargets.cmake \
           cmake/hk/hkStaticTargets.cmake; do
    [ -e "$lib/$f" ] || fail "$lib/$f is not installed"
  done
  # the versioned soname: libhk.so -> libhk.so.0 -> libhk.so.0.N.M
  real=$(basename "$(readlink -f "$lib/libhk.so")")
  [[ $real =~ ^libhk\.so\.0\.[0-9]+\.[0-9]+$ ]] || fail "libhk.so is $real"
  [ "$(readlink "$lib/libhk.so")" = libhk.so.0 ] || fail "libhk.so -> ?"
  soname=$(dynamic "$lib/$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ "$soname" = libhk.so.0 ] || fail "SONAME is '$soname', not libhk.so.0"
  echo "soname: $soname ($real)"
  # exported symbols = the functions hk.h declares
  want=$(tr '\n' ' ' <"$source/include/hk/hk.h" |
    grep -oE 'HK_API [^;(]*\(' | grep -oE 'hk_[a-z0-9_]+ *\($' |
    tr -d ' (' | sort -u)
  got=$(nm -D --defined-only "$lib/$real" | awk '{print $3}' | sort -u)
  [ -n "$want" ] || fail "found no HK_API functions in hk.h"
  if [ "$want" != "$got" ]; then
    diff <(echo "$want") <(echo "$got") >&2 || true
    fail "libhk.so exports other symbols than hk.h declares (< hk.h, > nm)"
  fi
  echo "exports: $(wc -l <<<"$got") symbols, exactly hk.h's"
  # MPI is loaded at run time: libhk.so does not need libmpi
  libs=$(needed "$lib/$real")
  if grep -q mpi <<<"$libs"; then
    fail "libhk.so needs MPI: $libs"
  fi
  echo "libhk.so needs: $(echo $libs)"
  if [ -e "$lib/libhk_mpi.so" ]; then
    libs=$(needed "$lib/libhk_mpi.so")
    grep -q libmpi <<<"$libs" || fail "libhk_mpi.so does not need libmpi: $libs"
    syms=$(nm -D --defined-only "$lib/libhk_mpi.so" | awk '{print $3}')
    [ "$syms" = hk_mpi_module ] || fail "libhk_mpi.so exports: $syms"
    echo "MPI: in libhk_mpi.so only (exports hk_mpi_module)"
  fi
  # nothing installed carries an RPATH; the tools run without
  # LD_LIBRARY_PATH from any prefix
  for f in "$lib/$real" "$prefix/bin/hkrun" "$prefix/bin/hktopo" \
           "$prefix/bin/hkplan" "$prefix/bin/hkbench"; do
    d=$(dynamic "$f")
    if grep -qE 'RPATH|RUNPATH' <<<"$d"; then
      fail "$f has an RPATH: $(grep -E 'RPATH|RUNPATH' <<<"$d")"
    fi
  done
  # (each tool's whole output first: grep -q would end the pipe early)
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/hkrun" --version) ||
    fail "installed hkrun --version"
  echo "$out"
  grep -q '^hkrun (hk) ' <<<"$out" || fail "installed hkrun --version: $out"
  if [ -e "$lib/libhk_mpi.so" ]; then
    out=$(env -u LD_LIBRARY_PATH "$prefix/bin/hkrun" --check-build) ||
      fail "installed hkrun --check-build"
    grep -qF "[X] MPI: " <<<"$out" ||
      fail "installed hkrun --check-build sees no MPI: $out"
    grep -F "MPI: " <<<"$out" | grep -qF "$lib" ||
      fail "installed hkrun --check-build does not find $lib/libhk_mpi.so"
  fi
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/hktopo" \
    "$prefix/share/hk/configs/v100-sxm2-8gpu-dgx1.xml") ||
    fail "installed hktopo failed"
  grep -q "ring 0:" <<<"$out" || fail "installed hktopo: $out"
  # hkplan finds the installed models and configs by name, and hkrun --plan
  # runs it
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/hkrun" --plan --model resnet50 \
    --step-s 0.1 --batch 8 --server t4-4gpu-pcie-2socket --servers 1) ||
    fail "installed hkrun --plan failed"
  grep -q "^  1 t4-4gpu-pcie-2socket " <<<"$out" ||
    fail "installed hkplan: $out"
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/hkbench" --model list) ||
    fail "installed hkbench --model list failed"
  grep -q resnet50 <<<"$out" ||
    fail "installed hkbench does not find its models: $out"
  # pkg-config
  PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --exists --print-errors hk ||
    fail "pkg-config hk"
  echo "pkg-config: hk $(PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --modversion hk)"
  ;;

cmake)
  prefix=$1 source=$2 work=$3 how=$4
  consumer_build "$work" "$source" -DHK_CONSUME="$how" \
    -DCMAKE_PREFIX_PATH="$prefix" || fail "find_package consumer ($how)"
  run_program "$prefix" "$work/app_c" app_c
  if [ -x "$work/app_cxx" ]; then run_program "$prefix" "$work/app_cxx" app_cxx; fi
  if [ "$how" = static ]; then
    # libhk.a is self-contained: the program needs no libhk.so
    libs=$(needed "$work/app_c")
    if grep -q libhk <<<"$libs"; then
      fail "the static consumer needs $libs"
    fi
  else
    libs=$(needed "$work/app_c")
    grep -qx 'libhk\.so\.0' <<<"$libs" ||
      fail "the shared consumer does not need libhk.so.0: $libs"
    # a version find_package must refuse
    if QUIET=1 consumer_build "$work-v" "$source" -DHK_CONSUME=shared \
      -DCMAKE_PREFIX_PATH="$prefix" -DHK_WANT_VERSION=0.2 2>/dev/null; then
      fail "find_package(hk 0.2) accepted this hk"
    fi
    grep -q 'requested version "0.2"' "$work-v.configure.log" ||
      fail "find_package(hk 0.2) failed for another reason: $(cat "$work-v.configure.log")"
    echo "find_package(hk 0.2): refused, as it must be"
    rm -rf "$work-v"*
  fi
  ;;

pkgconfig)
  prefix=$1 source=$2 work=$3
  lib=$(dirname "$(find "$prefix" -name 'libhk.so.0.*' -type f | head -1)")
  export PKG_CONFIG_PATH=$lib/pkgconfig
  rm -rf "$work" && mkdir -p "$work"
  src=$source/tests/package/consumer
  cflags=$(pkg-config --cflags hk)
  libs=$(pkg-config --libs hk)
  libdir=$(pkg-config --variable=libdir hk)
  # shared: the prefix is not the loader's, so the program says where
  ${CC:-cc} -Wall -Wextra -Werror -o "$work/app_c" "$src/app.c" $cflags $libs \
    -Wl,-rpath,"$libdir" || fail "cc \$(pkg-config --cflags --libs hk)"
  run_program "$prefix" "$work/app_c" app_c
  if [ -n "${CXX:-}" ]; then
    "$CXX" -Wall -Wextra -Werror -o "$work/app_cxx" "$src/app.cpp" $cflags \
      $libs -Wl,-rpath,"$libdir" || fail "c++ \$(pkg-config ... hk)"
    run_program "$prefix" "$work/app_cxx" app_cxx
  fi
  # static: libhk.a and what Libs.private / Requires.private name
  static_libs=$(pkg-config --static --libs hk | sed 's/-lhk\b/-l:libhk.a/')
  ${CC:-cc} -Wall -Wextra -Werror -o "$work/app_c_static" "$src/app.c" \
    $cflags $static_libs || fail "cc ... \$(pkg-config --static --libs hk)"
  libs=$(needed "$work/app_c_static")
  if grep -q libhk <<<"$libs"; then
    fail "the pkg-config --static program needs libhk.so: $libs"
  fi
  run_program "$prefix" "$work/app_c_static" app_c
  ;;

subdirectory)
  prefix=$1 source=$2 work=$3
  consumer_build "$work" "$source" -DHK_CONSUME=subdirectory \
    -DHK_SOURCE="$source" || fail "add_subdirectory consumer"
  # hk's own tests and examples are not built inside a user's project
  if [ -e "$work/hk/tests" ] || [ -e "$work/hk/train" ]; then
    fail "add_subdirectory(hk) built hk's tests or examples"
  fi
  run_program "$prefix" "$work/app_c" app_c
  if [ -x "$work/app_cxx" ]; then run_program "$prefix" "$work/app_cxx" app_cxx; fi
  ;;

python)
  # PYTHONPATH=<prefix>/lib/python3/dist-packages finds the package, and
  # the package finds the prefix's libhk (hk/_installed.py), not the build
  # tree's: alone (a world of one) and under the installed hkrun
  prefix=$1 python=$2
  pydir="$prefix/lib/python3/dist-packages"
  [ -f "$pydir/hk/__init__.py" ] && [ -f "$pydir/hk/torch/__init__.py" ] ||
    fail "cmake --install put no Python package in $pydir"
  code='import hk; hk.init(); print("python: rank %d of %d ok %s | %s" % (hk.rank(), hk.size(), hk.library_path(), hk.library_reason())); hk.shutdown()'
  cd "$prefix" # not the checkout: its build tree must not be found
  lib=$(dirname "$(find "$prefix" -name 'libhk.so.0.*' -type f | head -1)")
  out=$(export PYTHONPATH="$pydir" && unset HK_LIBRARY &&
    run_program "$prefix" "$python" python -c "$code") || exit 1
  echo "$out"
  [ "$(grep -cF "ok $lib/libhk.so | where cmake --install put it" \
    <<<"$out")" = 3 ] || fail "the package did not load $lib/libhk.so: $out"
  ;;

pip)
  # pip install ./python inside a venv of Debian's python3 (its
  # setuptools and wheel: --system-site-packages, --no-build-isolation),
  # offline (--no-index): setup.py builds libhk with CMake and ships it in
  # the package, which then loads it from there. From a copy of the
  # checkout (links to its files; python/ copied, for pip builds in the
  # tree), so that the checkout is left as it was.
  source=$1 work=$2 python=$3
  "$python" -c 'import ensurepip, setuptools, wheel' 2>/dev/null ||
    { echo "test_package pip: $python lacks venv, setuptools or wheel" \
        "(Debian: python3-venv python3-setuptools python3-wheel): skipped"
      exit 77; }
  rm -rf "$work"
  mkdir -p "$work/src"
  for f in "$source"/*; do
    [ "$(basename "$f")" = python ] || ln -s "$f" "$work/src/"
  done
  cp -r "$source/python" "$work/src/python"
  rm -rf "$work/src/python/build" "$work/src/python"/*.egg-info
  find "$work/src/python" -name __pycache__ -prune -exec rm -rf {} +
  "$python" -m venv --system-site-packages --without-pip "$work/venv" ||
    fail "python3 -m venv"
  log=$("$work/venv/bin/python" -m pip install --no-build-isolation \
    --no-index --no-deps --disable-pip-version-check "$work/src/python" 2>&1) ||
    fail "pip install ./python in a venv: $log"
  site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  [ -f "$site/hk/libhk.so" ] || fail "no libhk.so in the installed package $site/hk: $log"
  cd "$work"
  out=$(env -u HK_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH \
    "$work/venv/bin/python" -c 'import hk; hk.init(); print("pip: rank %d of %d ok %s | %s" % (hk.rank(), hk.size(), hk.library_path(), hk.library_reason())); hk.shutdown()') ||
    fail "import hk from the venv: $out"
  echo "$out"
  grep -qF "pip: rank 0 of 1 ok $site/hk/libhk.so | next to the hk package" \
    <<<"$out" || fail "the venv's hk did not load its own libhk: $out"
  rm -rf "$work"
  ;;

*)
  fail "unknown step '$step'"
  ;;
esac
echo "test_package $step: ok"
