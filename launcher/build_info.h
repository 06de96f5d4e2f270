/*
 * build_info.h - what this hk was built with and what it finds here:
 * `hkrun --version` (one line per optional part) and `hkrun
 * --check-build` (horovodrun --check-build's layout).
 *
 * The optional parts are separately loaded modules, looked for as libhk
 * looks for them (common/module.h): libhk_mpi.so (MPI: mpirun/srun jobs,
 * MPI links), libhk_cuda.so (GPU tensors: cudart, NCCL). Each is reported
 * as present and loadable, present but not loadable here (with the
 * loader's reason: e.g. Open MPI or the CUDA driver is missing on this
 * machine), or absent. NCCL's version comes from ncclGetVersion, through
 * the CUDA module's libraries or libnccl.so.2, only when the CUDA module
 * loads. hkrun dlopens the modules only for these two commands.
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
