#!/usr/bin/env bash
# Gathers, HERE (a Debian 12 machine that reaches its package registry),
# what scripts/device-check.sh needs on the GPU machine, which has no
# network and none of Debian's -dev packages:
#   .devdeps/debs/     the .deb files of every package hk builds and tests
#                      against (apt-get download: no install, no root);
#                      device-check.sh unpacks them with dpkg -x into a
#                      private prefix there
#   .devdeps/nccl/     this machine's nccl.h (CUDA's), for an NCCL wheel
#                      that ships no header
#   .devdeps/MANIFEST  package, version and size of every .deb
#   .devdeps/fashion-mnist/  the first DEVDEPS_DATA (8000; 0: none)
#                      training and 2000 test records of this machine's
#                      Fashion-MNIST (Debian's dataset-fashion-mnist), for
#                      device-check.sh's train-vs-torch step (~4 MB)
# .devdeps/ is git-ignored; it travels as a carried folder. The device
# tool carries at most 64 MiB in all (tree + carried folders): the script
# prints the total and fails above DEVDEPS_LIMIT_MB (default 60).
#
#   scripts/device-deps.sh          # all, Open MPI included
#   DEVDEPS_MPI=0 scripts/device-deps.sh   # without Open MPI (-7.4 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.devdeps
limit_mb=${DEVDEPS_LIMIT_MB:-60}

# What CMakeLists.txt and tests/ find: libuv (hkrun), OpenSSL's libcrypto,
# expat (topology/), cmocka (tests), jansson (tests reading the timeline),
# zlib + OpenBLAS (examples/train), pkg-config itself; runtime libraries
# with their -dev packages, since the GPU machine may lack them.
packages=(
  libuv1 libuv1-dev
  libcmocka0 libcmocka-dev
  libexpat1 libexpat1-dev
  libssl3 libssl-dev
  zlib1g zlib1g-dev
  libjansson4 libjansson-dev
  libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev
  libgfortran5 libquadmath0
  pkg-config pkgconf pkgconf-bin libpkgconf3
)
# Open MPI (optional in hk: HK_CROSS_TRANSPORT=mpi, the MPI bootstrap and
# their tests) with the libraries libopenmpi3 needs; ~7.4 MB of .debs.
mpi_packages=(
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libhwloc15
  libhwloc-plugins libibverbs1 ibverbs-providers librdmacm1 libnl-3-200
  libnl-route-3-200 libpmix2 libpsm-infinipath1 libpsm2-2 libucx0 libmunge2
  libnuma1 libatomic1
)
if [ "${DEVDEPS_MPI:-1}" = 1 ]; then
  packages+=("${mpi_packages[@]}")
fi

rm -rf "$out/debs"
mkdir -p "$out/debs" "$out/nccl"
download() { (cd "$out/debs" && apt-get download -q "${packages[@]}"); }
if ! download >/dev/null 2>"$out/apt.err"; then
  echo "device-deps: apt-get download failed; apt-get update, then again"
  apt-get update -qq
  download >/dev/null
fi
rm -f "$out/apt.err"

if [ -f /usr/local/cuda/include/nccl.h ]; then
  cp /usr/local/cuda/include/nccl.h "$out/nccl/"
fi

# the head of each IDX file: header with the count rewritten, n records
rm -rf "$out/fashion-mnist"
data=/usr/share/datasets/fashion-mnist
if [ "${DEVDEPS_DATA:-8000}" != 0 ] && [ -e "$data/t10k-labels-idx1-ubyte.gz" ]; then
  python3 - "$data" "$out/fashion-mnist" "${DEVDEPS_DATA:-8000}" <<'PY'
import gzip, os, struct, sys
src, dst, ntrain = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
for name, n in (("train-images-idx3-ubyte", ntrain), ("train-labels-idx1-ubyte", ntrain),
                ("t10k-images-idx3-ubyte", 2000), ("t10k-labels-idx1-ubyte", 2000)):
    with gzip.open(os.path.join(src, name + ".gz"), "rb") as f:
        data = f.read()
    dims = data[3]
    shape = list(struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims]))
    n = min(n, shape[0])
    rec = 1
    for d in shape[1:]:
        rec *= d
    shape[0] = n
    head = data[:4] + struct.pack(">" + "I" * dims, *shape)
    body = data[4 + 4 * dims:4 + 4 * dims + n * rec]
    with gzip.open(os.path.join(dst, name + ".gz"), "wb") as f:
        f.write(head + body)
PY
fi

(
  cd "$out/debs"
  for f in *.deb; do
    printf '%-32s %-28s %9s\n' "$(dpkg-deb -f "$f" Package)" \
      "$(dpkg-deb -f "$f" Version)" "$(stat -c %s "$f")"
  done
) >"$out/MANIFEST"

mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
deps_b=$(du -sb "$out" | cut -f1)
tree_b=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
total_b=$((deps_b + tree_b))
echo "device-deps: $(find "$out/debs" -name '*.deb' | wc -l) packages in $out/debs;" \
  ".devdeps $(mb "$deps_b") MiB + tracked tree $(mb "$tree_b") MiB" \
  "= $(mb "$total_b") MiB carried (limit 64 MiB)"
if [ "$total_b" -gt $((limit_mb * 1048576)) ]; then
  echo "device-deps: over ${limit_mb} MiB: drop Open MPI (DEVDEPS_MPI=0)" >&2
  exit 1
fi
