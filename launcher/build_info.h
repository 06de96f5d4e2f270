/*
 * build_info.h - what this hk was built with and what works here: `hkrun
 * --version` (one line per optional part) and `hkrun --check-build`
 * (horovodrun --check-build's layout). Each optional part says both,
 * labelled: "built:" what this hk was built with, "here:" what was found
 * on this machine; a box is ticked only when the part works here:
 *   PyTorch: the PATH's python3 imports torch and hk.torch (run with a
 *     limit of 60 s; its own message when it cannot);
 *   MPI: the module libhk_mpi.so loads (mpirun/srun jobs, MPI links);
 *   CUDA: the module libhk_cuda.so loads and a CUDA driver
 *     (libcuda.so.1) loads and sees at least one GPU;
 *   NCCL: its version (ncclGetVersion through the CUDA module's libraries
 *     or libnccl.so.2), with a GPU to run it on.
 * The modules are looked for as libhk looks for them (common/module.h);
 * hkrun dlopens them, the driver and python3 only for these two commands.
 * Thread-safety: not reentrant (dlerror); hkrun's one thread.
 */
#ifndef HK_LAUNCHER_BUILD_INFO_H
#define HK_LAUNCHER_BUILD_INFO_H

#include <stdio.h>

/** `hkrun --version`: "hkrun (hk) 0.1.0" and the optional parts. */
void hkrun_print_version(FILE *out);

/** `hkrun --check-build`: frameworks, controllers, tensor operations. */
void hkrun_print_check_build(FILE *out);

#endif
