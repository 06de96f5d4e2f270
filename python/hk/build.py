"""What the loaded libhk was built with and what this job uses, answered
as Horovod's build queries answer (horovod/common/basics.py).

hk's optional parts are modules next to libhk.so, built when their
dependencies were found (``hkrun --check-build`` lists them):
``libhk_mpi.so`` (Open MPI: jobs started by mpirun or srun, and MPI links)
and ``libhk_cuda.so`` (CUDA and NCCL: device tensors). A module counts
as built when its file sits next to the libhk this process loaded; MPI
counts as enabled when libhk loaded its MPI module in this process (it
does so only for a job that uses MPI).

================  ==========================================================
query             hk's answer
================  ==========================================================
nccl_built        NCCL's version code (ncclGetVersion: 2708 for 2.7.8,
                  21809 for 2.18.9) of the NCCL libhk_cuda.so uses; 0
                  without libhk_cuda.so or when it does not load here
cuda_built        True when libhk_cuda.so is built
rocm_built        False: hk has no ROCm backend
mpi_built         True when libhk_mpi.so is built
mpi_enabled       True when this process loaded libhk_mpi.so (after init)
mpi_threads_sup-  as Horovod: ValueError when MPI is not enabled, else
ported            whether MPI provides MPI_THREAD_MULTIPLE (MPI_Query_thread)
gloo_built,       False: hk's own TCP controller and collectives take
gloo_enabled      Gloo's place, and Gloo is not part of hk
ddl_built,        False: not part of hk
ccl_built
================  ==========================================================

Thread-safety: any thread; the answers are computed once (but
mpi_enabled and mpi_threads_supported, which ask the process each time).
"""

import ctypes
import functools
import os

from . import _lib
from .errors import HKInternalError

__all__ = ["nccl_built", "cuda_built", "rocm_built", "mpi_built",
           "mpi_enabled", "mpi_threads_supported", "gloo_built",
           "gloo_enabled", "ddl_built", "ccl_built", "module_path"]

MPI_MODULE = "libhk_mpi.so"
CUDA_MODULE = "libhk_cuda.so"
_MPI_THREAD_MULTIPLE = 3  # the MPI standard's order: Open MPI's and MPICH's
SYSTEM = 11  # HK_ERR_SYSTEM


def module_path(file):
    """The path of hk's module ``file`` next to the loaded libhk (whether
    or not it exists)."""
    here = os.path.dirname(os.path.realpath(_lib.library_path()))
    return os.path.join(here, file)


def _loaded(pattern):
    """The path of the first object mapped in this process whose file name
    starts with ``pattern``, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith(pattern):
                    return path
    except OSError:  # pragma: no cover - Linux has /proc
        pass
    return None


@functools.lru_cache(maxsize=None)
def nccl_built():
    """The NCCL version code (NCCL_VERSION_CODE's encoding) of the NCCL
    behind libhk_cuda.so, 0 when there is none (see the module doc)."""
    path = module_path(CUDA_MODULE)
    if not os.path.exists(path):
        return 0
    version = ctypes.c_int(0)
    for lib in (path, "libnccl.so.2"):
        try:
            get = ctypes.CDLL(lib, mode=os.RTLD_LOCAL).ncclGetVersion
        except (OSError, AttributeError):
            continue
        get.argtypes = [ctypes.POINTER(ctypes.c_int)]
        get.restype = ctypes.c_int
        if get(ctypes.byref(version)) == 0 and version.value > 0:
            return version.value
    return 0


@functools.lru_cache(maxsize=None)
def cuda_built():
    """True when hk's CUDA backend, libhk_cuda.so, was built."""
    return os.path.exists(module_path(CUDA_MODULE))


def rocm_built():
    """False: hk has no ROCm backend."""
    return False


@functools.lru_cache(maxsize=None)
def mpi_built():
    """True when hk's MPI module, libhk_mpi.so, was built."""
    return os.path.exists(module_path(MPI_MODULE))


def mpi_enabled():
    """True when this process loaded hk's MPI module: the job was started
    by mpirun or srun, or its links run over MPI (only after init)."""
    return _loaded(MPI_MODULE) is not None


def mpi_threads_supported():
    """As Horovod: ValueError when MPI is not enabled, else whether MPI
    runs with MPI_THREAD_MULTIPLE (so that the program may make MPI calls
    of its own, mpi4py's, from any thread)."""
    if not mpi_enabled():
        raise ValueError("hk's MPI is not enabled: this job does not use MPI "
                         "(it does when mpirun or srun starts it, or with "
                         "HK_CROSS_TRANSPORT=mpi)")
    # libhk loads libmpi with RTLD_GLOBAL: its symbols are the process's
    query = getattr(ctypes.CDLL(None), "MPI_Query_thread", None)
    if query is None:
        raise HKInternalError(SYSTEM, "hk's MPI module is loaded but "
                              "MPI_Query_thread cannot be found")
    provided = ctypes.c_int(-1)
    query.argtypes = [ctypes.POINTER(ctypes.c_int)]
    query(ctypes.byref(provided))
    return provided.value == _MPI_THREAD_MULTIPLE


def gloo_built():
    """False: Gloo is not part of hk."""
    return False


def gloo_enabled():
    """False: Gloo is not part of hk."""
    return False


def ddl_built():
    """False: DDL is not part of hk."""
    return False


def ccl_built():
    """False: oneCCL is not part of hk."""
    return False
