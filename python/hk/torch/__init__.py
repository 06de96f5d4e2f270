"""horovod.torch's surface on hk: ``import hk.torch as hvd``.

A Horovod PyTorch script runs with that import instead of
``import horovod.torch as hvd``, under ``hkrun -np N python3 train.py``
(or alone, as a world of one). Everything goes through libhk's C API:
hk's negotiation, fusion, response cache, transports, timeline and stall
inspector apply unchanged.

Where hk differs from Horovod, the function's docstring (or its module's:
mpi_ops, functions, optimizer, compression) says so. In short: no Adasum,
no process sets, no elastic mode, no SyncBatchNorm, timeline from
HK_TIMELINE / ``hkrun --timeline-filename`` (start_timeline is refused),
and init() takes no MPI communicator.
"""

import hk as _hk
from hk import (is_initialized, rank, size, local_rank, local_size,
                cross_rank, cross_size, HKError, HKInvalidArgument,
                library_path, library_reason)

from .compression import Compression
from .mpi_ops import (Average, Sum, Adasum, Min, Max, Product,
                      HorovodInternalError, ProcessSet, global_process_set,
                      add_process_set, remove_process_set, Handle,
                      allreduce, allreduce_, allreduce_async,
                      allreduce_async_, grouped_allreduce,
                      grouped_allreduce_, grouped_allreduce_async,
                      grouped_allreduce_async_, allgather, allgather_async,
                      broadcast, broadcast_, broadcast_async,
                      broadcast_async_, alltoall, alltoall_async,
                      reducescatter, reducescatter_async, synchronize, poll,
                      join, barrier)
from .functions import (broadcast_parameters, broadcast_optimizer_state,
                        broadcast_object, allgather_object)
from .optimizer import DistributedOptimizer

# Load libhk now: a script learns at its import line, not at its first
# collective, that libhk is missing (LibraryNotFound lists what was tried).
_hk.lib()


def init(comm=None, process_sets=None):
    """Joins the job (hk_init; see hk.init). Horovod's ``comm`` (an MPI
    communicator or a list of ranks) and ``process_sets`` are refused with
    NotImplementedError: hk's world is the job hkrun started."""
    if comm is not None:
        raise NotImplementedError("hk.torch.init: comm is not supported; the "
                                  "world is the job hkrun started")
    if process_sets is not None:
        raise NotImplementedError("hk.torch.init: hk has no process sets")
    _hk.init()


def shutdown():
    """Leaves the job (hk_shutdown); runs at exit by itself too."""
    _hk.shutdown()


def mpi_threads_supported():
    """hk's API may be called from any thread: True."""
    return True


def mpi_enabled():
    """False: hk's control plane is its own (MPI only carries links with
    HK_CROSS_TRANSPORT=mpi)."""
    return False


def mpi_built():
    """False (see mpi_enabled)."""
    return False


def gloo_enabled():
    """False: hk is neither Gloo nor MPI."""
    return False


def gloo_built():
    """False."""
    return False


def _cuda_module():
    import os
    return os.path.join(os.path.dirname(_hk.library_path()), "libhk_cuda.so")


def nccl_built():
    """True when hk's CUDA backend (libhk_cuda.so, NCCL inside) sits next
    to the loaded libhk."""
    import os
    return os.path.exists(_cuda_module())


def cuda_built():
    """As nccl_built()."""
    return nccl_built()


def rocm_built():
    """False."""
    return False


def ddl_built():
    """False."""
    return False


def ccl_built():
    """False."""
    return False


def start_timeline(file_path, mark_cycles=False):
    """Refused: hk writes its timeline from the start of the job to
    HK_TIMELINE (``hkrun --timeline-filename FILE``)."""
    raise NotImplementedError("hk writes a timeline when the job starts with "
                              "HK_TIMELINE=FILE (hkrun --timeline-filename "
                              "FILE); it cannot be started later")


def stop_timeline():
    """Refused (see start_timeline)."""
    raise NotImplementedError("hk's timeline runs for the whole job "
                              "(HK_TIMELINE)")
