"""horovod.torch's surface on hk: ``import hk.torch as hvd``.

A Horovod PyTorch script runs with that import instead of
``import horovod.torch as hvd``, under ``hkrun -np N python3 train.py``
(or alone, as a world of one). Everything goes through libhk's C API:
hk's negotiation, fusion, response cache, transports, timeline and stall
inspector apply unchanged.

docs/pytorch.md has the table of every function and argument of
horovod.torch with hk's status; where hk differs, the function's
docstring (or its module's: mpi_ops, functions, optimizer, compression,
process_sets) says so too.
"""

import hk as _hk
from hk import (is_initialized, rank, size, local_rank, local_size,
                cross_rank, cross_size, library_path, library_reason)
from hk.build import (mpi_threads_supported, mpi_enabled, mpi_built,
                      gloo_enabled, gloo_built, nccl_built, ddl_built,
                      ccl_built, cuda_built, rocm_built)
from hk.errors import (HorovodInternalError, HostsUpdatedInterrupt, HKError,
                       HKInternalError, HKInvalidArgument, HKDuplicateName,
                       HKNotInitialized)

from .compression import Compression
from .mpi_ops import (Average, Sum, Adasum, Min, Max, Product, Handle,
                      allreduce, allreduce_, allreduce_async,
                      allreduce_async_, grouped_allreduce,
                      grouped_allreduce_, grouped_allreduce_async,
                      grouped_allreduce_async_, sparse_allreduce_async,
                      allgather, allgather_async, grouped_allgather,
                      grouped_allgather_async, broadcast, broadcast_,
                      broadcast_async, broadcast_async_, alltoall,
                      alltoall_async, reducescatter, reducescatter_async,
                      grouped_reducescatter, grouped_reducescatter_async,
                      synchronize, poll, join, barrier)
from .process_sets import (ProcessSet, global_process_set, add_process_set,
                           remove_process_set, init_process_sets)
from .functions import (broadcast_parameters, broadcast_optimizer_state,
                        broadcast_object, allgather_object)
from .optimizer import DistributedOptimizer
from . import elastic

# Load libhk now: a script learns at its import line, not at its first
# collective, that libhk is missing (LibraryNotFound lists what was tried).
_hk.lib()


def init(comm=None, process_sets=None):
    """Joins the job (hk_init; see hk.init), then registers
    ``process_sets``: a list of hvd.ProcessSet (each registered on every
    rank, in order; every rank must pass the same list), or "dynamic"
    (hk always allows add_process_set later). process_sets' module doc
    says how failures are reported. Horovod's ``comm`` (an MPI
    communicator or a list of ranks making the world) is refused with
    NotImplementedError: hk's world is the job hkrun (or mpirun)
    started."""
    if comm is not None:
        raise NotImplementedError("hk.torch.init: comm is not supported; the "
                                  "world is the job hkrun started")
    fresh = not _hk.is_initialized()
    _hk.init()
    global_process_set.ranks = list(range(_hk.size()))
    init_process_sets(process_sets, fresh)


def shutdown():
    """Leaves the job (hk_shutdown); runs at exit by itself too."""
    _hk.shutdown()


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
