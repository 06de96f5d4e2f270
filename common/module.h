/*
 * module.h - finding and opening hk's separately loaded modules
 * (libhk_mpi.so; libhk_cuda.so is opened the same way by device/), so
 * that libhk, hkrun and the programs linked with libhk.a run on machines
 * where what a module needs (Open MPI, CUDA, NCCL) is absent, and load it
 * only when a job needs it.
 *
 * Where a module is looked for, in this order (the first that dlopen
 * accepts wins):
 *   1. the folder of the object holding this code: libhk.so's own folder
 *      (the build tree, or the installed libdir), or the folder of a
 *      program linked with libhk.a or hk_common (hkrun);
 *   2. that folder's ../<libdir> (`rel_libdir`, e.g. "../lib": hkrun and
 *      hktopo installed in <prefix>/bin find <prefix>/lib), if given;
 *   3. the ':'-separated folders `dirs` (CMake passes the build tree's
 *      and the configured install libdir);
 *   4. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
 * Thread-safety: reentrant (dlopen/dlerror are thread-safe in glibc;
 * the message of the last failure is kept in the caller's buffer).
 */
#ifndef HK_COMMON_MODULE_H
#define HK_COMMON_MODULE_H

#include <stddef.h>

/**
 * Opens module `file` ("libhk_mpi.so") with dlopen(flags) from the first
 * place above that has it. Returns the handle (never closed by hk: a
 * module stays loaded for the process's life), or NULL with why[cap]
 * holding the loader's reason for the last place tried (e.g.
 * "libmpi.so.40: cannot open shared object file: No such file or
 * directory"), or "not found in ..." when no place had the file. When
 * `where` is not NULL it receives the path that was opened (cap bytes).
 */
void *hk_module_open(const char *file, const char *rel_libdir, const char *dirs,
                     int flags, char *why, size_t why_cap, char *where,
                     size_t where_cap);

#endif
