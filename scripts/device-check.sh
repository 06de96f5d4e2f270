#!/usr/bin/env bash
# device-check.sh OUTDIR - does hk work on this GPU, and how fast: builds,
# tests and benchmarks hk on the GPU machine the project is lent (one
# GPU, no network, no Debian -dev packages; nvcc, CMake, ninja, python3
# with PyTorch and the nvidia-nccl-cu13 wheel) in one go, bounded in time
# (DEVICE_CHECK_BUDGET_S, default 450 s: one call of under 8 minutes with
# the machine's start), never asking anything.
#
# Before: scripts/device-deps.sh HERE fills .devdeps/ (the .deb files hk
# builds against); carry .devdeps with the tree.
#
# Two stages, each step a row of STEPS below (stage, name, bound, what it
# needs, the function that runs it):
#   stage 1 (at most DEVICE_CHECK_STAGE1_S, 180 s): the machine and NCCL,
#     hk's dependencies, configure and build for the GPU's own
#     architecture (only what stage 1 runs), test_cuda, test_cuda_pair, the
#     device unit tests, the GPU python check (--quick), the kernel
#     bandwidth table. OUTDIR/stage1.log alone answers "does hk work on
#     this GPU".
#   stage 2 (the rest of the budget): the rest of the build, the
#     multi-rank tests that apply to one GPU (gpu_check.py's phases at np 4
#     as pseudo-hosts), the staged allreduce at np 4 as pseudo-hosts next
#     to torch gloo on CUDA tensors (each checks its #wrong column), the
#     trainer next to PyTorch, the NCCL multi-rank-per-GPU probes, and
#     hkbench at np 2 on one host (two ranks of one NCCL communicator on
#     the GPU) where a probe found NCCL takes it.
# Every step runs under `timeout` (its bound, cut to what is left of its
# stage; past it the step and its children are killed and it counts as
# failed), with stdin closed, its output in OUTDIR/logs/NN-NAME.log. Each
# step adds one verdict line to OUTDIR/summary.txt:
#   PASS|FAIL|SKIP  stage  name  seconds  reason
# A step exits 77 to say it does not apply (its last "SKIP: ..." line is
# the reason); a step whose needs are not met (the build failed, NCCL
# refuses several ranks of one communicator on one GPU) is skipped by the
# script, naming why. The summary ends with "N passed, N failed, N
# skipped". The stages' logs are also joined into OUTDIR/stage1.log and
# OUTDIR/stage2.log, so that three files (with summary.txt) say it all.
# Exit: 0 when no step failed; 1 when one did; 2 when there is no GPU
# (nothing run; DEVICE_CHECK_FORCE=1 goes on anyway, HK_DEVICE=auto
# HK_TEST_GPU=0, to try the script on a CPU machine).
#
# Environment: DEVICE_CHECK_BUDGET_S (450), DEVICE_CHECK_STAGE1_S (180),
# DEVICE_CHECK_BOUNDS ("name=seconds ...": a step's bound instead of the
# table's), DEVICE_CHECK_MPI (1: build with the carried Open MPI),
# DEVICE_CHECK_FORCE, DEVICE_CHECK_DATA and DEVICE_CHECK_TRAIN_SAMPLES
# (train-vs-torch).
# Dry run: DEVICE_CHECK_STUB=DIR runs DIR/NAME (an executable) instead of
# step NAME's function, and skips a step that has none; nothing else is
# looked at (no GPU needed). tests/gpu/test_device_check.sh checks the
# control flow, bounds and summary this way.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: scripts/device-check.sh OUTDIR" >&2
  exit 2
fi
START=$(date +%s)
BUDGET=${DEVICE_CHECK_BUDGET_S:-450}
STAGE1_S=${DEVICE_CHECK_STAGE1_S:-180}
STUB=${DEVICE_CHECK_STUB:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=$ROOT/.devdeps
WORK=$ROOT/.devcheck # git-ignored
BUILD=$WORK/build
P=$WORK/prefix
A=$P/usr/lib/x86_64-linux-gnu
export ROOT DEPS WORK BUILD P A
mkdir -p "$1/logs" || exit 2
OUT=$(cd "$1" && pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
rm -f "$OUT"/logs/*.log "$OUT"/stage[12].log
NPASS=0 NFAIL=0 NSKIP=0 N=0

now() { echo $(($(date +%s) - START)); }
say() { echo "[$(now)s] $*" | tee -a "$SUMMARY"; }

# ==== the steps' functions (each runs in its own bash, under timeout) ====

machine() {
  set -x
  date -u
  uname -a
  cat /etc/os-release
  nproc
  free -g
  df -h "$ROOT"
  ldd --version | head -1
  gcc --version | head -1
  command -v nvcc && nvcc --version
  ls -d /usr/local/cuda* 2>&1
  cmake --version | head -1
  ninja --version
  python3 --version
  command -v pkg-config dpkg dpkg-deb ar mpirun
  ls -l /usr/include/openssl/opensslv.h /usr/local/cuda/include/nccl.h \
    /usr/local/cuda/lib64/libnccl* 2>&1
  ldconfig -p | grep -E 'libcrypto|libnccl|libcuda\.' || true
  nvidia-smi -L
  nvidia-smi
  nvidia-smi topo -m
  nvidia-smi -q
  return 0
}
export -f machine

find_nccl() {
  python3 - <<'EOF'
import glob, os, site
dirs = []
try:
    import nvidia.nccl as m
    dirs += [os.path.join(p, "lib") for p in list(getattr(m, "__path__", []))]
except Exception:
    pass
sp = site.getsitepackages() + [site.getusersitepackages()]
for s in sp:
    dirs += glob.glob(os.path.join(s, "nvidia", "nccl", "lib"))
    dirs += glob.glob(os.path.join(s, "nvidia", "*", "lib"))
    dirs += glob.glob(os.path.join(s, "torch", "lib"))
for d in dirs:
    if os.path.exists(os.path.join(d, "libnccl.so.2")):
        print(d)
        break
EOF
}
export -f find_nccl

nccl_info() {
  echo "library: $NCCL_LIBDIR/libnccl.so.2"
  echo "header:  $NCCL_INC/nccl.h"
  grep -E '^#define NCCL_(MAJOR|MINOR|PATCH)' "$NCCL_INC/nccl.h"
  python3 -c "
import ctypes
l = ctypes.CDLL('$NCCL_LIBDIR/libnccl.so.2')
v = ctypes.c_int()
l.ncclGetVersion(ctypes.byref(v))
print('ncclGetVersion:', v.value)"
  python3 -c "
import torch
print('torch', torch.__version__, 'cuda', torch.version.cuda,
      'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.device_count() else '')"
  python3 -m pip list 2>/dev/null | grep -iE 'nccl|torch|mpi4py' || true
}
export -f nccl_info

unpack() {
  set -e
  rm -rf "$P"
  mkdir -p "$P"
  local n=0 f
  for f in "$DEPS"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$P"
    else # ar + tar: data.tar.{xz,zst,gz}
      local d
      d=$(ar t "$f" | grep '^data\.tar')
      case $d in
      *.xz) ar p "$f" "$d" | tar -xJ -C "$P" ;;
      *.zst) ar p "$f" "$d" | zstd -dc | tar -x -C "$P" ;;
      *) ar p "$f" "$d" | tar -xz -C "$P" ;;
      esac
    fi
    n=$((n + 1))
  done
  echo "$n packages unpacked into $P"
  # .pc files say prefix=/usr: point them at the prefix
  find "$P" -name '*.pc' -exec sed -i -E "s#^([A-Za-z_]+)=/usr#\1=$P/usr#" {} +
  # the symlinks Debian makes with update-alternatives at install time
  local b=$P/usr/bin
  local x
  for x in mpirun mpiexec mpicc; do
    if [ -e "$b/$x.openmpi" ]; then ln -sf "$x.openmpi" "$b/$x"; fi
  done
  if [ -e "$b/pkgconf" ] && [ ! -e "$b/pkg-config" ]; then
    ln -sf pkgconf "$b/pkg-config"
  fi
  ls "$b"
  # A library the machine has itself (same soname in ldconfig's cache) is
  # the machine's at run time: the prefix's soname becomes a link to it, so
  # the prefix on LD_LIBRARY_PATH never shadows a system library that
  # cmake, ctest or python were built against (an older libcrypto or
  # libexpat would break them); the carried file stays for linking only.
  # Open MPI's family stays as carried: it must match its own mpirun.
  local so sys l t
  # Debian's absolute links (libz.so -> /lib/x86_64-linux-gnu/...): into
  # the prefix
  while IFS= read -r l; do
    t=$(readlink "$l")
    if [ -e "$P$t" ]; then ln -sf "$P$t" "$l"; fi
  done < <(find "$P" -type l -lname '/*')
  ldconfig -p | awk '$1 ~ /^lib/ {print $1, $NF}' >"$WORK/system-libs"
  for so in "$A"/*.so.* "$P"/lib/x86_64-linux-gnu/*.so.* \
    "$A"/openblas-pthread/*.so.*; do
    [ -e "$so" ] || continue
    case ${so##*/} in
    *mpi* | *open-rte* | *open-pal* | *oshmem* | *mca_* | *pmix* | *hwloc* | \
      *event* | libuc[mpst]* | *fabric* | *ibverbs* | *rdmacm* | libnl-* | \
      *psm* | *infinipath* | *munge* | *numa* | libmlx* | libefa* | libmana*)
      continue
      ;;
    esac
    sys=$(awk -v n="${so##*/}" '$1 == n {print $2; exit}' "$WORK/system-libs")
    if [ -n "$sys" ] && [ -e "$sys" ]; then
      # a soname that is the file itself (libcrypto.so.3) is kept aside
      [ -L "$so" ] || mv "$so" "$so.carried"
      ln -sf "$sys" "$so"
      echo "${so##*/}: the machine's $sys"
    fi
  done
  return 0
}
export -f unpack

configure() {
  local gen=() mpi=() # (no carried Open MPI: the machine's own, if any)
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ "$MPI" = 1 ]; then
    mpi=(-DMPI_C_COMPILER="$P/usr/bin/mpicc.openmpi")
  elif [ "${DEVICE_CHECK_MPI:-1}" = 0 ]; then
    mpi=(-DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
  fi
  rm -rf "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
    -DNCCL_INCLUDE_DIR="$NCCL_INC" -DNCCL_LIBRARY="$NCCL_LIBDIR/libnccl.so.2" \
    -DCMAKE_PREFIX_PATH="$P/usr" -DCMAKE_LIBRARY_PATH="$A;$P/lib/x86_64-linux-gnu" \
    -DCMAKE_INCLUDE_PATH="$P/usr/include" -DOPENSSL_ROOT_DIR="$P/usr" \
    -DCMAKE_C_FLAGS="-I$P/usr/include -I$P/usr/include/x86_64-linux-gnu" \
    "${mpi[@]}" &&
    grep -E '^(CMOCKA_LIB|OPENSSL_CRYPTO_LIBRARY|EXPAT_LIBRARY|ZLIB_LIBRARY|NCCL_|MPI_C_LIB|HK_CUDA|CMAKE_CUDA_ARCH|pkgcfg_lib)' \
      "$BUILD/CMakeCache.txt"
}
export -f configure

# deps: the carried .deb files, or the machine's own libraries
deps() {
  if ! ls "$DEPS"/debs/*.deb >/dev/null 2>&1; then
    echo "SKIP: no $DEPS/debs/*.deb (run scripts/device-deps.sh where the registry is, carry .devdeps): the machine's own libraries"
    return 77
  fi
  unpack
}
export -f deps

# build_core: what stage 1 runs, for the GPU's own architecture
build_core() {
  configure &&
    cmake --build "$BUILD" -j "$(nproc)" --target hk hkrun hk_cuda test_cuda \
      cuda_pair cuda_copybw test_cuda_kernels 2>&1
}
export -f build_core

# ctest_gpu NAME-REGEX: ctest on the GPU (HK_DEVICE=cuda HK_TEST_GPU=1)
ctest_gpu() {
  ctest --test-dir "$BUILD" --output-on-failure -j 4 --timeout 120 -R "$1"
}
export -f ctest_gpu

# probe [--multi-rank] [--hostid]: two ranks of one NCCL communicator on
# the GPU (--multi-rank: with NCCL_MULTI_RANK_GPU_ENABLE=1, NCCL 2.30's
# switch); prints "cuda_pair: works|refused ..." (one-comm-np2 needs
# "works")
probe() {
  if [ "${1:-}" = --multi-rank ]; then
    shift
    NCCL_MULTI_RANK_GPU_ENABLE=1 "$BUILD/tests/cuda_pair" --timeout 15 "$@"
  else
    "$BUILD/tests/cuda_pair" --timeout 15 "$@"
  fi
}
export -f probe

# no_wrong: passes a benchmark's table (hkbench's, device-gloo-peer.py's)
# through; fails when a row's #wrong is not 0, or when there is no row.
# hkrun's "[rank] " prefix is dropped first.
no_wrong() {
  awk '{print; if ($1 ~ /^\[[0-9]+\]$/) {$1 = ""; $0 = $0}}
    $1 ~ /^#/ {for (i = 1; i <= NF; i++) if ($i == "#wrong") c = i - 1; next}
    c && NF >= c && $1 ~ /^[0-9]+$/ {rows++; if ($c != 0) bad++}
    END {if (!rows) {print "no_wrong: no result rows"; exit 1}
      if (bad) {print "no_wrong: " bad " rows with wrong elements"; exit 1}
      print "no_wrong: " rows " rows, every element right"}'
}
export -f no_wrong

# several ranks of one NCCL communicator on the GPU: hkbench --device gpu
# at np 2 on one host (hk's device communicator of 2 ranks), the way the
# probes found NCCL allows it: plainly, NCCL_MULTI_RANK_GPU_ENABLE=1, or
# a NCCL_HOSTID per rank
one_comm() {
  local how="" p
  for p in plain multi-rank hostid; do
    if grep -q '^cuda_pair: works' "$OUT"/logs/*-probe-$p.log 2>/dev/null; then
      how=$p
      break
    fi
  done
  echo "NCCL took two ranks of one communicator on one GPU: ${how:-no probe said so}"
  local bench="$BUILD/hkbench --device gpu -b 1M -e 64M -f 4 -n 5 -w 1"
  case $how in
  plain) "$BUILD/hkrun" -np 2 $bench | no_wrong ;;
  multi-rank) "$BUILD/hkrun" -np 2 env NCCL_MULTI_RANK_GPU_ENABLE=1 $bench | no_wrong ;;
  hostid) "$BUILD/hkrun" -np 2 sh -c "NCCL_HOSTID=hk-\$HK_RANK exec $bench" | no_wrong ;;
  *) return 1 ;;
  esac
}
export -f one_comm

# the staged allreduce: 4 processes sharing the GPU, each its own pseudo-
# host (every byte crosses hk's staging and ring), 1 MiB .. 256 MiB
staged_hk() {
  "$BUILD/hkrun" -np 4 env HK_LOCAL_RANK=0 HK_LOCAL_SIZE=1 HK_GPU=0 \
    "$BUILD/hkbench" --device gpu -b 1M -e 256M -f 4 -n 10 -w 2 | no_wrong
}
export -f staged_hk
staged_gloo() {
  python3 "$ROOT/scripts/device-gloo-peer.py" --np 4 -b 1M -e 256M -f 4 \
    -n 10 -w 2 | no_wrong
}
export -f staged_gloo

# synth_idx DIR N_TRAIN N_TEST: random Fashion-MNIST-shaped IDX files
synth_idx() {
  python3 - "$@" <<'PY'
import gzip, os, random, struct, sys
d, ntr, nte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
rnd = random.Random(1)
for prefix, n in (("train", ntr), ("t10k", nte)):
    with gzip.open(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + rnd.randbytes(n * 784))
    with gzip.open(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) +
                bytes(rnd.randrange(10) for _ in range(n)))
PY
}
# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
# train_vs_torch: 3 rounds of train then torch_cnn.py, same data, batch
# and precision; prints "train-vs-torch: ..." lines for the summary
train_vs_torch() {
  local data="" d
  for d in "${DEVICE_CHECK_DATA:-}" /usr/share/datasets/fashion-mnist \
    "$DEPS/fashion-mnist"; do
    if [ -n "$d" ] && [ -e "$d/train-images-idx3-ubyte.gz" ]; then
      data=$d
      break
    fi
  done
  local kind=fashion-mnist
  if [ -z "$data" ]; then
    data=$WORK/synthetic-idx
    kind="synthetic (random pixels: accuracy means nothing)"
    synth_idx "$data" "${DEVICE_CHECK_TRAIN_SAMPLES:-4000}" 2000 || return 1
  fi
  local n=${DEVICE_CHECK_TRAIN_SAMPLES:-4000} b=32 r line rc=0
  local args=(--data "$data" --limit-train "$n" --limit-test 2000
    --batch-size "$b" --epochs 1 --precision bf16)
  echo "data: $data ($kind)"
  : >"$WORK/tvt-hk" && : >"$WORK/tvt-torch"
  for r in 1 2 3; do
    line=$(timeout 12 "$BUILD/hkrun" -np 1 "$BUILD/train" --device cuda \
      --model cnn --prefetch 2 "${args[@]}" 2>&1 | tee /dev/stderr |
      grep -m1 'epoch 1 loss')
    [ -n "$line" ] || rc=1
    # "[0] epoch 1 loss L test_acc A train_acc T samples/s S data_wait D% ..."
    echo "$line" | awk '{for (i = 1; i < NF; i++) {
      if ($i == "samples/s") s = $(i + 1); if ($i == "test_acc") a = $(i + 1)
      if ($i == "data_wait") w = $(i + 1)} print s, a, w}' >>"$WORK/tvt-hk"
    line=$(timeout 12 python3 "$ROOT/examples/train/torch_cnn.py" \
      --device cuda "${args[@]}" 2>&1 | tee /dev/stderr | grep -m1 '^torch_cnn:')
    [ -n "$line" ] || rc=1
    echo "$line" | awk '{for (i = 1; i < NF; i++) {
      if ($i == "samples/s") s = $(i + 1); if ($i == "test_acc") a = $(i + 1)
      if ($i == "data_wait") w = $(i + 1)} print s, a, w}' >>"$WORK/tvt-torch"
  done
  local hs ts
  hs=$(awk '{print $1}' "$WORK/tvt-hk" | median)
  ts=$(awk '{print $1}' "$WORK/tvt-torch" | median)
  echo "train-vs-torch: data $kind, $n samples, batch $b, bf16, 1 epoch, 3 rounds interleaved"
  echo "train-vs-torch: hk train --device cuda (samples/s test_acc data_wait per round): $(tr '\n' ';' <"$WORK/tvt-hk")"
  echo "train-vs-torch: torch_cnn.py (samples/s test_acc data_wait per round): $(tr '\n' ';' <"$WORK/tvt-torch")"
  echo "train-vs-torch: median samples/s hk ${hs:-?} torch ${ts:-?} ratio hk/torch $(awk -v h="${hs:-0}" -v t="${ts:-0}" 'BEGIN {if (t > 0) printf "%.2f", h / t; else print "?"}')"
  return $rc
}
export -f synth_idx median train_vs_torch

# ==== the table of steps ====================================================
# stage name bound_s needs command...
# needs: - (nothing), build (stage 1's build), all (the whole build),
# multirank (a probe found two ranks of one NCCL communicator on one GPU
# work: plainly, with NCCL_MULTI_RANK_GPU_ENABLE=1, or with a NCCL_HOSTID
# per rank over loopback sockets)
STEPS=(
  "1 env 20 - machine"
  "1 nccl 20 - nccl_info"
  "1 deps 30 - deps"
  "1 build 120 - withlibs build_core"
  "1 test_cuda 30 build withlibs $BUILD/tests/test_cuda"
  "1 test_cuda_pair 30 build withlibs ctest_gpu ^test_cuda_pair\$"
  "1 device-unit 30 build withlibs ctest_gpu ^test_cuda_kernels\$"
  "1 gpu-python 60 build withlibs python3 $ROOT/tests/python/gpu_check.py --quick --require --hkrun $BUILD/hkrun --lib $BUILD/libhk.so --timeout 50"
  "1 copybw 30 build withlibs $BUILD/tests/cuda_copybw 1 16 64 256 1024"
  "2 build-rest 120 build withlibs cmake --build $BUILD -j $(nproc)"
  "2 gpu-python-np4 90 build withlibs python3 $ROOT/tests/python/gpu_check.py --require --hkrun $BUILD/hkrun --lib $BUILD/libhk.so --timeout 80"
  "2 staged-hk-np4 50 all withlibs staged_hk"
  "2 staged-gloo-np4 50 - staged_gloo"
  "2 train-vs-torch 80 all withlibs train_vs_torch"
  "2 probe-plain 20 build withlibs probe"
  "2 probe-multi-rank 20 build withlibs probe --multi-rank"
  "2 probe-hostid 20 build withlibs probe --hostid"
  "2 one-comm-np2 40 multirank withlibs one_comm"
)

# ==== running them ============================================================

# bound NAME DEFAULT: DEVICE_CHECK_BOUNDS's value for NAME, else DEFAULT
bound() {
  local kv
  for kv in ${DEVICE_CHECK_BOUNDS:-}; do
    [ "${kv%%=*}" = "$1" ] && echo "${kv#*=}" && return
  done
  echo "$2"
}

# verdict WORD STAGE NAME SECONDS REASON: the summary's line and the count
verdict() {
  case $1 in
  PASS) NPASS=$((NPASS + 1)) ;;
  FAIL) NFAIL=$((NFAIL + 1)) ;;
  SKIP) NSKIP=$((NSKIP + 1)) ;;
  esac
  printf '%-4s  stage %s  %-22s %4ss  %s\n' "$1" "$2" "$3" "$4" "$5" |
    tee -a "$SUMMARY"
}

# unmet NEEDS: why a step's needs are not met (nothing when they are)
unmet() {
  case $1 in
  build) [ "$BUILT" = 1 ] || echo "stage 1's build failed" ;;
  all) [ "$BUILT_ALL" = 1 ] || echo "the build failed" ;;
  multirank)
    local logs=("$OUT"/logs/*-probe-plain.log "$OUT"/logs/*-probe-multi-rank.log
      "$OUT"/logs/*-probe-hostid.log) seen
    seen=$(grep -h '^cuda_pair: \(works\|refused\|FAILED\|skipped\)' \
      "${logs[@]}" 2>/dev/null | head -3 |
      tr '\n' ' ')
    grep -q '^cuda_pair: works' "${logs[@]}" 2>/dev/null ||
      echo "NCCL does not take two ranks of one communicator on one GPU (probes: ${seen:-no answer})"
    ;;
  esac
}

# run_step STAGE DEADLINE NAME BOUND NEEDS CMD...: one row of STEPS
run_step() {
  local stage=$1 deadline=$2 name=$3 max needs=$5
  max=$(bound "$name" "$4")
  shift 5
  N=$((N + 1))
  local logf
  logf=$OUT/logs/$(printf %02d "$N")-$name.log
  local why
  why=$(unmet "$needs")
  if [ -n "$STUB" ] && [ ! -x "$STUB/$name" ]; then
    why="dry run: no stand-in $STUB/$name"
  fi
  if [ -n "$why" ]; then
    echo "SKIP: $why" >"$logf"
    verdict SKIP "$stage" "$name" 0 "$why"
    echo "==== $(basename "$logf") SKIP: $why" >>"$OUT/stage$stage.log"
    return 77
  fi
  local left=$((deadline - $(now)))
  if [ "$left" -lt 2 ]; then
    why="not run: stage $stage's time was spent"
    echo "$why" >"$logf"
    verdict FAIL "$stage" "$name" 0 "$why"
    echo "==== $(basename "$logf") FAIL: $why" >>"$OUT/stage$stage.log"
    return 125
  fi
  local t=$max
  [ "$left" -lt "$t" ] && t=$left
  [ -n "$STUB" ] && set -- "$STUB/$name"
  local t0 rc
  t0=$(date +%s)
  # through bash -c, so that the command may be a function above (timeout
  # runs programs only; pipefail: a pipe fails when any part does);
  # timeout kills its whole process group
  timeout -k 3 "$t" bash -o pipefail -c '"$@"' "$name" "$@" >"$logf" 2>&1 </dev/null
  rc=$?
  local dt=$(($(date +%s) - t0)) last
  case $rc in
  0) verdict PASS "$stage" "$name" "$dt" "" ;;
  77) # the step's "SKIP: why", else its last line
    last=$(grep '^SKIP: ' "$logf" | tail -1)
    [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$logf" | tail -1 | cut -c1-100)
    verdict SKIP "$stage" "$name" "$dt" "${last#SKIP: }"
    ;;
  124 | 137)
    verdict FAIL "$stage" "$name" "$dt" "timed out after ${t}s (killed)"
    ;;
  *)
    last=$(grep -v '^[[:space:]]*$' "$logf" | tail -1 | cut -c1-100)
    verdict FAIL "$stage" "$name" "$dt" "rc=$rc: $last"
    ;;
  esac
  {
    echo "==== $(basename "$logf")"
    cat "$logf"
  } >>"$OUT/stage$stage.log"
  return $rc
}

# stage NUMBER DEADLINE: every row of that stage, in order, none past
# DEADLINE (seconds since the start)
stage() {
  local row n name max needs rc _
  local -a cmd
  for row in "${STEPS[@]}"; do
    read -r n name max needs _ <<<"$row"
    [ "$n" = "$1" ] || continue
    read -r -a cmd <<<"$row"
    run_step "$1" "$2" "$name" "$max" "$needs" "${cmd[@]:4}"
    rc=$?
    [ "$name" = build ] && [ $rc = 0 ] && BUILT=1
    [ "$name" = build-rest ] && [ $rc = 0 ] && BUILT_ALL=1
  done
}

say "device-check: hk $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null ||
  echo '(no git)') in $ROOT, budget ${BUDGET}s (stage 1: ${STAGE1_S}s), logs in $OUT${STUB:+, dry run with $STUB}"

BUILT=0 BUILT_ALL=0
export HK_DEVICE=cuda HK_TEST_GPU=1
ARCH=
if [ -z "$STUB" ]; then
  ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    head -1 | tr -d ' .')
  if [ -z "$ARCH" ]; then
    say "no GPU here: $(nvidia-smi -L 2>&1 | head -1)"
    if [ "${DEVICE_CHECK_FORCE:-0}" != 1 ]; then
      say "stopping (DEVICE_CHECK_FORCE=1 goes on without one)"
      exit 2
    fi
    export HK_DEVICE=auto HK_TEST_GPU=0
    ARCH=90
  else
    say "GPU: $(nvidia-smi -L | head -1); building for sm_$ARCH"
  fi
  # NCCL: the wheel's library (libnccl.so.2 is 218 MB: it never travels),
  # a header from the wheel, the machine's CUDA, or .devdeps
  NCCL_LIBDIR=$(timeout 30 bash -c find_nccl 2>/dev/null)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    if [ -z "$NCCL_LIBDIR" ] && [ -e $d/libnccl.so.2 ]; then
      NCCL_LIBDIR=$d
    fi
  done
  NCCL_INC=""
  for h in "$NCCL_LIBDIR/../include" /usr/local/cuda/include "$DEPS/nccl"; do
    if [ -n "$NCCL_LIBDIR" ] && [ -f "$h/nccl.h" ]; then
      NCCL_INC=$(cd "$h" && pwd)
      break
    fi
  done
  say "NCCL: library '$NCCL_LIBDIR', header '$NCCL_INC'"
fi
export ARCH NCCL_LIBDIR NCCL_INC
MPI=0
if [ "${DEVICE_CHECK_MPI:-1}" = 1 ] && ls "$DEPS"/debs/libopenmpi*.deb >/dev/null 2>&1; then
  MPI=1
fi
export MPI
export PATH=$P/usr/bin:$BUILD:$PATH
export PKG_CONFIG_PATH=$A/pkgconfig:$A/openblas-pthread/pkgconfig:$P/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
# The prefix's libraries (and NCCL's), for the steps that run what was
# built or carried (mpicc and mpirun have no run path of their own): only
# through withlibs, never for the whole script.
export RUNLIB=$A:$P/lib/x86_64-linux-gnu:$A/openblas-pthread:$A/openmpi/lib${NCCL_LIBDIR:+:$NCCL_LIBDIR}
withlibs() { LD_LIBRARY_PATH=$RUNLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
export -f withlibs
if [ $MPI = 1 ]; then
  export OPAL_PREFIX=$P/usr # Open MPI, relocated (its libdir etc. follow)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} # no network here

S1_END=$STAGE1_S
[ "$S1_END" -gt "$BUDGET" ] && S1_END=$BUDGET
stage 1 "$S1_END"
if [ "$NFAIL" = 0 ]; then
  say "stage 1: hk works on this GPU ($NPASS passed, $NSKIP skipped)"
else
  say "stage 1: FAILED ($NFAIL failed): see stage1.log"
fi
stage 2 "$BUDGET"
say "done in $(now)s"
echo "$NPASS passed, $NFAIL failed, $NSKIP skipped" | tee -a "$SUMMARY"
[ "$NFAIL" = 0 ]
