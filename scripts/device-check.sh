#!/usr/bin/env bash
# device-check.sh OUTDIR - builds, tests and benchmarks hk on the GPU
# machine the project is lent (one H200, no network, no Debian
# -dev packages; nvcc 13, CMake, ninja, python3 with PyTorch and the
# nvidia-nccl-cu13 wheel), in one go, bounded in time, never asking
# anything. Every log goes to OUTDIR; OUTDIR/summary.txt says what ran,
# how long it took and how it ended.
#
# Before: scripts/device-deps.sh HERE fills .devdeps/ (the .deb files hk
# builds against); carry .devdeps with the tree.
#
# Steps (each under `timeout`, all within DEVICE_CHECK_BUDGET_S, default
# 450 s: under 8 minutes with the machine's start):
#   env       the machine: OS, compilers, nvidia-smi (-L, -q, topo -m),
#             what is there of OpenSSL and NCCL
#   nccl      the NCCL wheel's library and header, its ncclGetVersion, and
#             torch's view (torch.cuda.nccl.version())
#   deps      dpkg -x (or ar + tar) of every .devdeps/debs/*.deb into a
#             private prefix; .pc files and Open MPI pointed at it
#   configure hk with -DHK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, NCCL from
#             the wheel, the prefix's libraries
#   build
#   test_cuda the cuda backend's own tests, verbose
#   copybw    the batched copy kernels against cudaMemcpy D2D (tests/gpu)
#   pair*     two processes on the GPU in one NCCL communicator: plain,
#             NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30+; older ones ignore
#             it), and a NCCL_HOSTID per process over loopback sockets
#   ctest     every test with HK_DEVICE=cuda HK_TEST_GPU=1, except label
#             netbed (several hosts in network namespaces: needs ip, tc,
#             CAP_NET_ADMIN, and 2-3 minutes; not a GPU matter), and
#             test_hosts_cli, which runs alone without those two variables
#             (it expects hkrun's mpirun command to forward no HK_* but its
#             own)
#   train-vs-torch  (after every test) examples/train's CNN: `train --device cuda --model cnn
#             --precision bf16` at np 1 and the same model in PyTorch
#             (examples/train/torch_cnn.py, bf16 autocast) at the same batch
#             size, 3 rounds interleaved, 1 epoch of up to
#             DEVICE_CHECK_TRAIN_SAMPLES (8000) samples each (each run
#             under 25 s); samples/s,
#             accuracy, data wait of both and the ratio go to the summary.
#             Data: DEVICE_CHECK_DATA, /usr/share/datasets/fashion-mnist,
#             .devdeps/fashion-mnist (scripts/device-deps.sh), else a
#             synthetic IDX set (random pixels: speed only, accuracy ~0.1)
#   monitor-* the straggler report and metrics with the real NVML (4
#             ranks on GPU 0, one 50 ms late), and the monitor's cost on
#             hkbench --model resnet50 (bench/monitor_overhead.sh)
#   bench     GPU benchmarks: hkbench --device gpu --kernels (pack/unpack
#             vs a device copy), 4 pseudo-hosts sharing the GPU staged
#             through hk's ring, the torch gloo peer on CUDA tensors at
#             np 4, one rank alone (hkbench's part skipped where it has no
#             --device option)
# Exit: 0 when the build and every test passed; 1 when one failed; 2 when
# there is no GPU (nothing built; DEVICE_CHECK_FORCE=1 goes on anyway,
# with HK_DEVICE=auto HK_TEST_GPU=0, to try the script on a CPU machine).
#
# Environment: DEVICE_CHECK_BUDGET_S (450), DEVICE_CHECK_JOBS (ctest -j,
# 6), DEVICE_CHECK_MPI (1: use the carried Open MPI), DEVICE_CHECK_FORCE.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: scripts/device-check.sh OUTDIR" >&2
  exit 2
fi
START=$(date +%s)
BUDGET=${DEVICE_CHECK_BUDGET_S:-450}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=$ROOT/.devdeps
WORK=$ROOT/.devcheck # git-ignored
BUILD=$WORK/build
P=$WORK/prefix
A=$P/usr/lib/x86_64-linux-gnu
export ROOT DEPS WORK BUILD P A
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FAILED=0
N=0

log() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME MAX_S CMD...: runs CMD with stdin closed, output in
# OUTDIR/NN-NAME.log, killed after min(MAX_S, time left - 10 s); returns
# its status (124: timed out, 125: not started, out of time).
step() {
  local name=$1 max=$2 t
  shift 2
  N=$((N + 1))
  local logf
  logf=$OUT/$(printf %02d "$N")-$name.log
  t=$(($(left) - 10))
  [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 5 ]; then
    log "SKIP $name: out of time"
    return 125
  fi
  local t0 rc
  t0=$(date +%s)
  # (through bash -c, so that CMD may be one of the functions below,
  # exported with export -f, as timeout runs programs only)
  timeout -k 5 "$t" bash -c '"$@"' "$name" "$@" >"$logf" 2>&1 </dev/null
  rc=$?
  local word=FAIL
  [ $rc = 0 ] && word=ok
  [ $rc = 77 ] && word=skip # a test's "no usable GPU"
  log "$(printf '%-4s %-24s %4ss  rc=%s%s' "$word" "$name" \
    $(($(date +%s) - t0)) $rc "$([ $rc = 124 ] && echo " (timed out after ${t}s)")")"
  return $rc
}
# must NAME MAX_S CMD...: a step whose failure fails the check (77, the
# tests' "skipped without a GPU", does not).
must() {
  step "$@"
  local rc=$?
  [ $rc = 0 ] || [ $rc = 77 ] || FAILED=1
  return $rc
}

log "device-check: hk $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null ||
  echo '(no git)') in $ROOT, budget ${BUDGET}s, logs in $OUT"

# ---- the machine ----
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
step env 30 machine
if ! nvidia-smi -L >"$OUT/gpus.txt" 2>&1 || ! grep -q '^GPU ' "$OUT/gpus.txt"; then
  log "no GPU here: $(head -1 "$OUT/gpus.txt" 2>/dev/null)"
  if [ "${DEVICE_CHECK_FORCE:-0}" != 1 ]; then
    log "stopping (DEVICE_CHECK_FORCE=1 goes on without one)"
    exit 2
  fi
  TEST_GPU=0
else
  log "GPU: $(head -1 "$OUT/gpus.txt")"
  TEST_GPU=1
fi

# ---- NCCL: the wheel's library (libnccl.so.2 is 218 MB: it never
# travels), a header from the wheel, the machine's CUDA, or .devdeps ----
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
NCCL_LIBDIR=$(timeout 30 bash -c find_nccl 2>/dev/null)
if [ -z "$NCCL_LIBDIR" ] && [ -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  NCCL_LIBDIR=/usr/local/cuda/lib64
fi
export NCCL_LIBDIR
NCCL_INC=""
for h in "$NCCL_LIBDIR/../include" /usr/local/cuda/include "$DEPS/nccl"; do
  if [ -n "$NCCL_LIBDIR" ] && [ -f "$h/nccl.h" ]; then
    NCCL_INC=$(cd "$h" && pwd)
    break
  fi
done
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
export NCCL_INC
export -f nccl_info
if [ -z "$NCCL_LIBDIR" ] || [ -z "$NCCL_INC" ]; then
  log "FAIL NCCL not found (library: '${NCCL_LIBDIR}', header: '${NCCL_INC}')"
  FAILED=1
else
  step nccl 30 nccl_info
  NCCL_CODE=$(grep -h -m1 '^ncclGetVersion' "$OUT"/*-nccl.log | awk '{print $2}')
  log "NCCL: ${NCCL_CODE:-?} at run time ($NCCL_LIBDIR), header $NCCL_INC"
fi

# ---- hk's Debian dependencies, unpacked into a private prefix ----
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
MPI=0
if ls "$DEPS"/debs/*.deb >/dev/null 2>&1; then
  if step deps 60 unpack; then
    [ "${DEVICE_CHECK_MPI:-1}" = 1 ] && [ -x "$P/usr/bin/mpicc.openmpi" ] && MPI=1
  else
    FAILED=1
  fi
else
  log "no $DEPS/debs/*.deb (run scripts/device-deps.sh where the registry is, carry .devdeps): using the machine's own libraries"
fi

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
export MPI
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} # no network here

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
    -DHK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
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
BUILT=0
if [ $FAILED = 0 ]; then
  if step configure 60 withlibs configure &&
    step build 150 withlibs cmake --build "$BUILD" -j "$(nproc)"; then
    BUILT=1
    log "libhk.so needs: $(withlibs ldd "$BUILD/libhk.so" | awk '{print $1}' | tr '\n' ' ')"
  else
    FAILED=1
  fi
fi

# ---- examples/train's CNN next to the same model in PyTorch ----
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
    synth_idx "$data" "${DEVICE_CHECK_TRAIN_SAMPLES:-8000}" 2000 || return 1
  fi
  local n=${DEVICE_CHECK_TRAIN_SAMPLES:-8000} b=32 r line rc=0
  local args=(--data "$data" --limit-train "$n" --limit-test 2000
    --batch-size "$b" --epochs 1 --precision bf16)
  echo "data: $data ($kind)"
  : >"$WORK/tvt-hk" && : >"$WORK/tvt-torch"
  for r in 1 2 3; do
    line=$(timeout 25 "$BUILD/hkrun" -np 1 "$BUILD/train" --device cuda \
      --model cnn --prefetch 2 "${args[@]}" 2>&1 | tee /dev/stderr |
      grep -m1 'epoch 1 loss')
    [ -n "$line" ] || rc=1
    # "[0] epoch 1 loss L test_acc A train_acc T samples/s S data_wait D% ..."
    echo "$line" | awk '{for (i = 1; i < NF; i++) {
      if ($i == "samples/s") s = $(i + 1); if ($i == "test_acc") a = $(i + 1)
      if ($i == "data_wait") w = $(i + 1)} print s, a, w}' >>"$WORK/tvt-hk"
    line=$(timeout 25 python3 "$ROOT/examples/train/torch_cnn.py" \
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

# (DEVICE_CHECK_FORCE on a machine without a GPU: auto, so that what
# does not need a GPU still passes)
if [ "$TEST_GPU" = 1 ]; then
  export HK_DEVICE=cuda HK_TEST_GPU=1
else
  export HK_DEVICE=auto HK_TEST_GPU=0
fi
if [ $BUILT = 1 ]; then
  must test_cuda 90 withlibs "$BUILD/tests/test_cuda"
  step copybw 60 withlibs "$BUILD/tests/cuda_copybw" 1 16 64 256 1024
  must pair 40 withlibs "$BUILD/tests/cuda_pair" --timeout 30
  step pair-multi-rank 40 withlibs env NCCL_MULTI_RANK_GPU_ENABLE=1 \
    "$BUILD/tests/cuda_pair" --timeout 30
  step pair-hostid 40 withlibs "$BUILD/tests/cuda_pair" --hostid --timeout 30
  for f in pair pair-multi-rank pair-hostid; do
    log "  $f: $(grep -h '^cuda_pair: \(works\|refused\|FAILED\|skipped\)' "$OUT"/*-"$f".log)"
  done
  # test_hosts_cli compares hkrun's mpirun command, which forwards every
  # HK_* variable set (-x HK_DEVICE -x HK_TEST_GPU here), with a fixed
  # list: it runs alone, without them
  must ctest 200 withlibs ctest --test-dir "$BUILD" --output-on-failure \
    -j "${DEVICE_CHECK_JOBS:-6}" -LE netbed -E '^test_hosts_cli$' --timeout 180
  grep -h -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Skipped' \
    "$OUT"/*-ctest.log | sed 's/^/  /' | tee -a "$SUMMARY"
  must ctest-hosts-cli 60 withlibs env -u HK_DEVICE -u HK_TEST_GPU \
    ctest --test-dir "$BUILD" --output-on-failure -R '^test_hosts_cli$'
  # after every test: the comparison may take the rest of its 160 s
  step train-vs-torch 160 withlibs train_vs_torch
  grep -h '^train-vs-torch:' "$OUT"/*-train-vs-torch.log | sed 's/^/  /' |
    tee -a "$SUMMARY"
fi

# ==== GPU benchmarks =====================================================
# hkbench --device gpu (bench/devbuf.c): --kernels, the pack/unpack kernels
# next to a device-to-device copy of the same bytes; the issue's "staged
# allreduce of 4 processes sharing the GPU, each its own pseudo-host
# (HK_LOCAL_RANK=0 HK_LOCAL_SIZE=1: every byte crosses hk's ring)" next to
# the torch gloo peer on CUDA tensors at np 4, 1 MiB .. 256 MiB; then one
# rank alone. Skipped (and the script goes on) where hkbench has no
# --device option.
if [ $BUILT = 1 ]; then
  if withlibs "$BUILD/hkbench" --help 2>&1 | grep -q -- '--device'; then
    step bench-hk-kernels 60 withlibs "$BUILD/hkrun" -np 1 "$BUILD/hkbench" \
      --device gpu --kernels -b 1M -e 1G -f 4 -n 20 -w 3
    step bench-hk-np4-staged 120 withlibs "$BUILD/hkrun" -np 4 env HK_LOCAL_RANK=0 \
      HK_LOCAL_SIZE=1 HK_GPU=0 "$BUILD/hkbench" --device gpu -b 1M -e 256M \
      -f 4 -n 10 -w 2
  else
    log "SKIP bench-hk: this hkbench has no --device option"
  fi
fi
# the peer needs no hk: it runs even when hk did not build
if [ "$TEST_GPU" = 1 ] || [ "${DEVICE_CHECK_FORCE:-0}" = 1 ]; then
  step bench-torch-gloo-cuda-np4 120 python3 \
    "$ROOT/scripts/device-gloo-peer.py" --np 4 -b 1M -e 256M -f 4 -n 10 -w 2
fi
if [ $BUILT = 1 ] && withlibs "$BUILD/hkbench" --help 2>&1 | grep -q -- '--device'; then
  step bench-hk-np1 60 withlibs "$BUILD/hkrun" -np 1 "$BUILD/hkbench" --device gpu \
    -b 1M -e 256M -f 4 -n 10 -w 2
fi
# hk.torch on CUDA tensors (issue 16): dtype x op at np 1 and as 4 pseudo-
# hosts sharing the GPU, DistributedOptimizer and the state broadcasts on
# CUDA, next to torch.distributed (gloo, CUDA tensors) in the same job.
if [ $BUILT = 1 ]; then
  step torch-gpu 120 withlibs python3 "$ROOT/tests/python/gpu_check.py" \
    --hkrun "$BUILD/hkrun" --lib "$BUILD/libhk.so"
fi
# The straggler monitor (issue 15) with the real NVML: 4 ranks sharing
# GPU 0 (HK_GPU=0), rank 2 50 ms late a step; the report and the metrics
# file show the H200's figures. Then what the monitor costs a step:
# hkbench --model resnet50 off/on, interleaved (bench/monitor_overhead.sh).
if [ $BUILT = 1 ]; then
  step monitor-report 60 withlibs env HK_MONITOR=1 HK_GPU=0 \
    HK_METRICS_FILE="$OUT/monitor.prom" HK_METRICS_INTERVAL_S=1 \
    "$BUILD/hkrun" --monitor -np 4 \
    "$BUILD/tests/integration/workers/w_straggler" 2 50 0 3
  grep -h 'hk monitor: ' "$OUT"/*-monitor-report.log | sed 's/^/  /' |
    tee -a "$SUMMARY"
  grep -h '^hk_gpu_temperature_celsius\|^hk_gpu_sm_clock_hertz' \
    "$OUT/monitor.prom" 2>/dev/null | sed 's/^/  /' | tee -a "$SUMMARY"
  step monitor-overhead 120 withlibs env BUILD="$BUILD" PAIRS=2 \
    ON="HK_MONITOR=1 HK_GPU=0" "$ROOT/bench/monitor_overhead.sh"
  tail -1 "$OUT"/*-monitor-overhead.log | sed 's/^/  /' | tee -a "$SUMMARY"
fi
# ==========================================================================

log "done in $(($(date +%s) - START))s: $([ $FAILED = 0 ] && echo 'build and tests passed' || echo 'FAILED (see the logs)')"
exit $FAILED
