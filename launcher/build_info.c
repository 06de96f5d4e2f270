/*
 * build_info.c - hkrun --version and --check-build (build_info.h).
 */
#include "launcher/build_info.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "collectives/transport/mpi_module.h"
#include "common/module.h"
#include "hk/hk.h"

#ifndef HK_VERSION_STRING /* CMake: the project's version */
#define HK_VERSION_STRING "0.1.0"
#endif
#ifndef HK_BIN_TO_LIB /* CMake: bindir -> libdir, e.g. "../lib" */
#define HK_BIN_TO_LIB "../lib"
#endif
#ifndef HK_MODULE_DIRS /* CMake: the build tree's and the install libdir */
#define HK_MODULE_DIRS ""
#endif
#ifndef HK_BUILT_MPI /* CMake: 1 if libhk_mpi.so was built */
#define HK_BUILT_MPI 0
#endif
#ifndef HK_BUILD_DESC /* CMake: compiler and build type */
#define HK_BUILD_DESC ""
#endif

#define CUDA_MODULE "libhk_cuda.so"

/* What was found of one module. */
typedef struct part {
  int loaded;        /* dlopen succeeded */
  char detail[1024]; /* version, path, or why it did not load */
} part;

static void find_mpi(part *p) {
  char why[512], where[512];
  void *h = hk_module_open(HK_MPI_MODULE_FILE, HK_BIN_TO_LIB, HK_MODULE_DIRS,
                           RTLD_NOW | RTLD_LOCAL, why, sizeof why, where,
                           sizeof where);
  p->loaded = 0;
  if (!h) {
    snprintf(p->detail, sizeof p->detail, "%s: %s",
             HK_BUILT_MPI ? "not loadable here" : "not built", why);
    return;
  }
  const hk_mpi_module_ops *ops = dlsym(h, HK_MPI_MODULE_SYMBOL);
  if (!ops || ops->abi != HK_MPI_MODULE_ABI ||
      ops->size != sizeof(hk_mpi_module_ops)) {
    snprintf(p->detail, sizeof p->detail,
             "%s is from another hk build: reinstall", where);
    return;
  }
  char version[256];
  ops->library_version(version, sizeof version);
  p->loaded = 1;
  snprintf(p->detail, sizeof p->detail, "%s (%s)", version, where);
}

typedef int (*nccl_get_version_fn)(int *);
typedef int (*cuda_runtime_version_fn)(int *);

static void find_cuda(part *cuda, part *nccl) {
  char why[512], where[512];
  void *h = hk_module_open(CUDA_MODULE, HK_BIN_TO_LIB, HK_MODULE_DIRS,
                           RTLD_NOW | RTLD_LOCAL, why, sizeof why, where,
                           sizeof where);
  cuda->loaded = nccl->loaded = 0;
  if (!h) {
    snprintf(cuda->detail, sizeof cuda->detail,
             "not built or not loadable here: %s", why);
    snprintf(nccl->detail, sizeof nccl->detail, "needs the CUDA module");
    return;
  }
  cuda->loaded = 1;
  cuda_runtime_version_fn rt =
      (cuda_runtime_version_fn)dlsym(h, "cudaRuntimeGetVersion");
  int v = 0;
  if (rt && rt(&v) == 0 && v > 0)
    snprintf(cuda->detail, sizeof cuda->detail, "CUDA runtime %d.%d (%s)",
             v / 1000, (v % 1000) / 10, where);
  else
    snprintf(cuda->detail, sizeof cuda->detail, "%s", where);
  nccl_get_version_fn nv = (nccl_get_version_fn)dlsym(h, "ncclGetVersion");
  void *lib = NULL;
  if (!nv && (lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)))
    nv = (nccl_get_version_fn)dlsym(lib, "ncclGetVersion");
  int code = 0;
  if (nv && nv(&code) == 0 && code > 0) {
    /* NCCL_VERSION(X,Y,Z): X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z
     * before */
    int major = code >= 10000 ? code / 10000 : code / 1000;
    int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
    nccl->loaded = 1;
    snprintf(nccl->detail, sizeof nccl->detail, "NCCL %d.%d.%d", major, minor,
             code % 100);
  } else {
    snprintf(nccl->detail, sizeof nccl->detail,
             "ncclGetVersion not found (libnccl.so.2: %s)",
             lib || nv ? "present" : "not loadable");
  }
}

static const char *mark(int on) { return on ? "X" : " "; }

void hkrun_print_version(FILE *out) {
  part mpi, cuda, nccl;
  find_mpi(&mpi);
  find_cuda(&cuda, &nccl);
  fprintf(out, "hkrun (hk) %s\n", HK_VERSION_STRING);
  fprintf(out, "MPI: %s %s\n", mpi.loaded ? "yes," : "no,", mpi.detail);
  fprintf(out, "CUDA: %s %s\n", cuda.loaded ? "yes," : "no,", cuda.detail);
  fprintf(out, "NCCL: %s %s\n", nccl.loaded ? "yes," : "no,", nccl.detail);
}

void hkrun_print_check_build(FILE *out) {
  part mpi, cuda, nccl;
  find_mpi(&mpi);
  find_cuda(&cuda, &nccl);
  fprintf(out,
          "hk v%s:%s%s\n"
          "\n"
          "Available Frameworks:\n"
          "    [X] C and C++ (include/hk/hk.h; libhk.so, libhk.a)\n"
          "    [ ] TensorFlow, PyTorch, MXNet: no bindings in hk\n"
          "\n"
          "Available Controllers:\n"
          "    [X] hkrun (hk's TCP rendezvous and negotiation: what Gloo is "
          "to Horovod)\n"
          "    [%s] MPI: %s\n"
          "\n"
          "Available Tensor Operations:\n"
          "    [X] hk's rings over TCP (host tensors)\n"
          "    [%s] MPI links (HK_CROSS_TRANSPORT=mpi): %s\n"
          "    [%s] CUDA (device tensors): %s\n"
          "    [%s] NCCL: %s\n"
          "    [ ] Gloo, DDL, CCL: not part of hk\n",
          HK_VERSION_STRING, *HK_BUILD_DESC ? " " : "", HK_BUILD_DESC,
          mark(mpi.loaded), mpi.detail, mark(mpi.loaded), mpi.detail,
          mark(cuda.loaded), cuda.detail, mark(nccl.loaded), nccl.detail);
}
