/*
 * build_info.c - hkrun --version and --check-build (build_info.h).
 */
#include "launcher/build_info.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

extern char **environ;

#ifndef HK_BUILT_CUDA /* CMake: 1 if libhk_cuda.so was built */
#define HK_BUILT_CUDA 0
#endif

#define CUDA_MODULE "libhk_cuda.so"
/* The Python probe's time limit: importing torch takes seconds */
#define PYTHON_PROBE_S 60

/* What was built of one part, and what of it works on this machine. */
typedef struct part {
  int found;        /* usable here */
  char built[1024]; /* what this hk was built with */
  char here[2048];  /* what was found on this machine, or why not */
} part;

static void find_mpi(part *p) {
  char why[512], where[512];
  void *h = hk_module_open(HK_MPI_MODULE_FILE, HK_BIN_TO_LIB, HK_MODULE_DIRS,
                           RTLD_NOW | RTLD_LOCAL, why, sizeof why, where,
                           sizeof where);
  p->found = 0;
  snprintf(p->built, sizeof p->built, "%s",
           HK_BUILT_MPI ? "the module " HK_MPI_MODULE_FILE : "no");
  if (!h) {
    snprintf(p->here, sizeof p->here, "not loadable: %s", why);
    return;
  }
  const hk_mpi_module_ops *ops = dlsym(h, HK_MPI_MODULE_SYMBOL);
  if (!ops || ops->abi != HK_MPI_MODULE_ABI ||
      ops->size != sizeof(hk_mpi_module_ops)) {
    snprintf(p->here, sizeof p->here, "%s is from another hk build: reinstall",
             where);
    return;
  }
  char version[256];
  ops->library_version(version, sizeof version);
  p->found = 1;
  snprintf(p->here, sizeof p->here, "%s (%s)", version, where);
}

typedef int (*nccl_get_version_fn)(int *);
typedef int (*cuda_runtime_version_fn)(int *);
typedef int (*cu_int_fn)(int *);
typedef int (*cu_init_fn)(unsigned);

/* A CUDA driver (libcuda.so.1) that loads and sees a device: 0 and what
 * it is into out, or -1 and why not. */
static int find_driver(char *out, size_t cap) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(out, cap, "no CUDA driver (%s)", e ? e : "libcuda.so.1");
    return -1;
  }
  cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
  cu_int_fn count = (cu_int_fn)dlsym(lib, "cuDeviceGetCount");
  cu_int_fn version = (cu_int_fn)dlsym(lib, "cuDriverGetVersion");
  int n = 0, v = 0, rc = init && count ? init(0) : -1;
  if (rc != 0 || count(&n) != 0 || n < 1) {
    snprintf(out, cap, "the CUDA driver sees no GPU (cuInit: %d, devices: %d)",
             rc, n);
    return -1;
  }
  if (!version || version(&v) != 0)
    v = 0;
  snprintf(out, cap, "%d GPU%s, driver for CUDA %d.%d", n, n > 1 ? "s" : "",
           v / 1000, (v % 1000) / 10);
  return 0;
}

static void find_cuda(part *cuda, part *nccl) {
  char why[512], where[512], driver[512];
  cuda->found = nccl->found = 0;
  const int gpu = find_driver(driver, sizeof driver) == 0;
  void *h = hk_module_open(CUDA_MODULE, HK_BIN_TO_LIB, HK_MODULE_DIRS,
                           RTLD_NOW | RTLD_LOCAL, why, sizeof why, where,
                           sizeof where);
  snprintf(cuda->built, sizeof cuda->built, "%s",
           HK_BUILT_CUDA ? "the module " CUDA_MODULE : "no");
  snprintf(nccl->built, sizeof nccl->built, "%s",
           HK_BUILT_CUDA ? "through " CUDA_MODULE : "no");
  if (!h) {
    snprintf(cuda->here, sizeof cuda->here, "%s not loadable: %s; %s",
             CUDA_MODULE, why, driver);
    snprintf(nccl->here, sizeof nccl->here, "needs the CUDA module");
    return;
  }
  cuda_runtime_version_fn rt =
      (cuda_runtime_version_fn)dlsym(h, "cudaRuntimeGetVersion");
  int v = 0;
  char runtime[64] = "";
  if (rt && rt(&v) == 0 && v > 0)
    snprintf(runtime, sizeof runtime, ", CUDA runtime %d.%d", v / 1000,
             (v % 1000) / 10);
  cuda->found = gpu;
  snprintf(cuda->here, sizeof cuda->here, "%s; the module loads%s (%s)", driver,
           runtime, where);
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
    nccl->found = gpu;
    snprintf(nccl->here, sizeof nccl->here, "NCCL %d.%d.%d%s", major, minor,
             code % 100, gpu ? "" : ", but no GPU to run it on");
  } else {
    snprintf(nccl->here, sizeof nccl->here,
             "ncclGetVersion not found (libnccl.so.2: %s)",
             lib || nv ? "present" : "not loadable");
  }
}

/* python3 (the PATH's) runs this: one line naming the interpreter (a
 * python3 earlier on PATH than the system's may lack torch), exit 0 when
 * it imports torch and hk.torch */
static const char python_probe[] =
    "import sys\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    print('python3 (%s) cannot import torch: %s: %s' %\n"
    "          (sys.executable, type(e).__name__, e))\n"
    "    sys.exit(1)\n"
    "try:\n"
    "    import hk, hk.torch\n"
    "except Exception as e:\n"
    "    print('python3 (%s) imports torch %s, but not hk.torch: %s: %s' %\n"
    "          (sys.executable, torch.__version__, type(e).__name__, e))\n"
    "    sys.exit(1)\n"
    "print('python3 (%s) imports torch %s and hk.torch (%s)' %\n"
    "      (sys.executable, torch.__version__, hk.__file__))\n";

/* Runs python3 on the probe, at most PYTHON_PROBE_S: its exit status (-1:
 * not run, killed) and the last line it printed into out. */
static int run_python(char *out, size_t cap) {
  int fds[2];
  out[0] = '\0';
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(out, cap, "cannot run python3: %s", strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  char *argv[] = {"python3", "-c", (char *)python_probe, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, "python3", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    snprintf(out, cap, "no python3 to run (%s)", strerror(rc));
    return -1;
  }
  char text[4096];
  size_t len = 0;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    long left = PYTHON_PROBE_S * 1000L - ((t.tv_sec - t0.tv_sec) * 1000L +
                                          (t.tv_nsec - t0.tv_nsec) / 1000000);
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    if (left <= 0 || poll(&p, 1, (int)left) == 0) {
      kill(pid, SIGKILL);
      snprintf(text, sizeof text, "python3 took over %d s to import torch",
               PYTHON_PROBE_S);
      len = strlen(text);
      break;
    }
    ssize_t n = read(fds[0], text + len, sizeof text - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
    if (len == sizeof text - 1) /* keep the end: the last line counts */
      len = 0;
  }
  close(fds[0]);
  text[len] = '\0';
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  while (len > 0 && text[len - 1] == '\n')
    text[--len] = '\0';
  const char *last = strrchr(text, '\n');
  snprintf(out, cap, "%s", last ? last + 1 : text);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void find_pytorch(part *p) {
  snprintf(p->built, sizeof p->built,
           "hk.torch (python/: import hk.torch as hvd, over libhk)");
  p->found = run_python(p->here, sizeof p->here) == 0;
}

static const char *mark(int on) { return on ? "X" : " "; }

void hkrun_print_version(FILE *out) {
  part mpi, cuda, nccl;
  find_mpi(&mpi);
  find_cuda(&cuda, &nccl);
  fprintf(out, "hkrun (hk) %s\n", HK_VERSION_STRING);
  fprintf(out, "MPI: %s built: %s; here: %s\n", mpi.found ? "yes," : "no,",
          mpi.built, mpi.here);
  fprintf(out, "CUDA: %s built: %s; here: %s\n", cuda.found ? "yes," : "no,",
          cuda.built, cuda.here);
  fprintf(out, "NCCL: %s built: %s; here: %s\n", nccl.found ? "yes," : "no,",
          nccl.built, nccl.here);
}

/* "    [X] NAME: built: ...; here: ..." */
static void line(FILE *out, const char *name, const part *p) {
  fprintf(out, "    [%s] %s: built: %s; here: %s\n", mark(p->found), name,
          p->built, p->here);
}

void hkrun_print_check_build(FILE *out) {
  part mpi, cuda, nccl, torch;
  find_mpi(&mpi);
  find_cuda(&cuda, &nccl);
  find_pytorch(&torch);
  fprintf(out,
          "hk v%s:%s%s\n"
          "(a box is ticked when the part works on this machine: what was "
          "built, and what was found here)\n"
          "\n"
          "Available Frameworks:\n"
          "    [X] C and C++ (include/hk/hk.h; libhk.so, libhk.a)\n",
          HK_VERSION_STRING, *HK_BUILD_DESC ? " " : "", HK_BUILD_DESC);
  line(out, "PyTorch", &torch);
  fprintf(out, "    [ ] TensorFlow, MXNet: no bindings in hk\n"
               "\n"
               "Available Controllers:\n"
               "    [X] hkrun (hk's TCP rendezvous and negotiation: what "
               "Gloo is to Horovod)\n");
  line(out, "MPI", &mpi);
  fprintf(out, "\n"
               "Available Tensor Operations:\n"
               "    [X] hk's collectives over shared memory inside a host and "
               "TCP across hosts (host tensors)\n"
               "    [X] emulated device (HK_DEVICE=emu: device tensors "
               "without a GPU)\n");
  line(out, "MPI links (HK_CROSS_TRANSPORT=mpi)", &mpi);
  line(out, "CUDA (device tensors)", &cuda);
  line(out, "NCCL", &nccl);
  fprintf(out, "    [ ] Gloo, DDL, CCL: not part of hk\n");
}
