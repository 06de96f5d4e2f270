"""Collectives on torch tensors through libhk, with horovod.torch's names,
arguments, defaults, results and errors.

Every operation hands hk the tensor's memory and shape (_submit.py says
how, and which tensors it takes); hk names each in-flight operation, so a
call without ``name`` gets a Horovod-style one (``allreduce.noname.<n>``,
a counter per kind of operation: ranks that make the same calls in the
same order agree on it). Explicit names become ``allreduce.<name>``,
``broadcast.<name>``, ...; a group's members ``<group name>.<i>``.

The blocking forms (allreduce, grouped_allreduce, allgather,
grouped_allgather, broadcast, alltoall, reducescatter,
grouped_reducescatter) are differentiable, with Horovod's gradients
(_grad.py); the in-place and *_async forms are not, as in Horovod.

Errors (hk.errors): wrong arguments raise ValueError (TypeError for a
root_rank or name of the wrong type), a name already in flight on this
rank ValueError; what hk reports when the operation runs (ranks that
disagree on a tensor's shape, dtype, op, ...; a rank that died; a
timeout) raises HorovodInternalError carrying hk's message from
synchronize() (or the blocking form), on every rank; nothing waits
forever.

Process sets: every collective (and barrier) takes ``process_set``, a
registered hvd.ProcessSet (process_sets.py) or the global one by default:
the collective runs among its members only, concurrently with the other
sets; Average divides by the set's size; an allgather's blocks, an
alltoall's splits and a reduce-scatter's shares are in the order of the
members' ranks (ProcessSet.rank()); a broadcast's root_rank is a rank of
the job, as in Horovod. A rank outside the set, and a set never
registered or removed, raise ValueError at once on that rank (Horovod's
"is not a member of the provided process set"); an operation pending when
its set is removed raises HorovodInternalError naming the set.

Join: after hvd.join() on a rank, the others' collectives go on without
it: it contributes the op's identity to reductions (an average divides by
the ranks that contributed) and no rows to allgather and alltoall, until
every rank has joined; a broadcast whose root joined fails
(HorovodInternalError). Horovod refuses allgather, alltoall, broadcast
and reducescatter while a rank is joined; hk runs them.

Where hk differs from Horovod otherwise: op=Adasum is refused
(NotImplementedError); Average on integer tensors truncates toward zero
(hk.h); a synchronize() of sparse_allreduce_async's handle returns the
result (Horovod's returns None: call the handle).
"""

import torch

import hk as _hk
from hk.errors import HorovodInternalError
from . import _grad
from ._submit import (Average, Sum, Adasum, Min, Max, Product, Handle,
                      require_init, resolve_op, start)
from .compression import Compression
from .process_sets import (ProcessSet, global_process_set, add_process_set,
                           remove_process_set, set_id, set_size)

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "HorovodInternalError", "Handle",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "synchronize", "poll", "join", "barrier",
]


def _ps(process_set):
    """The process set a call names (None: the global one), checked."""
    process_set = global_process_set if process_set is None else process_set
    set_id(process_set)
    return process_set


def _compressed(compression, tensors):
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    return compression, [p[0] for p in pairs], [p[1] for p in pairs]


# --------------------------------------------------------------- allreduce

def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of ``tensor`` into a new tensor (op: Average by
    default, Sum, Min, Max, Product; the input is multiplied by
    prescale_factor before and the result by postscale_factor after);
    returns a handle for synchronize()."""
    op = resolve_op(op, average)
    return start("allreduce", tensor, name, _ps(process_set), op=op,
                 prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of ``tensor``; synchronize() returns
    the tensor itself."""
    op = resolve_op(op, average)
    return start("allreduce", tensor, name, _ps(process_set), inplace=True,
                 op=op, prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor)


def allreduce(tensor, average=None, name=None, compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Returns the allreduce of ``tensor`` (see allreduce_async), through
    ``compression``; differentiable."""
    op = resolve_op(op, average)
    compression, (t,), (ctx,) = _compressed(compression, [tensor])
    out = _grad.HorovodAllreduce.apply(t, name, op, prescale_factor,
                                       postscale_factor, _ps(process_set))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(allreduce_async_(tensor, average, name, op,
                                        prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts an allreduce of a list of tensors (any dtypes) that hk
    negotiates as one unit and fuses; synchronize() returns the list of
    new tensors."""
    op = resolve_op(op, average)
    return start("allreduce", tensors, name, _ps(process_set), group=True,
                 op=op, prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    op = resolve_op(op, average)
    return start("allreduce", tensors, name, _ps(process_set), group=True,
                 inplace=True, op=op, prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor)


def grouped_allreduce(tensors, average=None, name=None,
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Returns the list of reduced tensors (see grouped_allreduce_async);
    differentiable."""
    op = resolve_op(op, average)
    compression, ts, ctxs = _compressed(compression, tensors)
    outs = _grad.HorovodGroupedAllreduce.apply(
        name, op, prescale_factor, postscale_factor, _ps(process_set), *ts)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the tensors."""
    return synchronize(grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor,
        process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's allreduce of a sparse COO tensor: its indices and values
    are allgathered ('<name>.indices', '<name>.values'); the result is a
    sparse tensor of every rank's entries (not coalesced: entries at the
    same index add up when it is used or coalesced), the values divided
    by the set's size for op=Average. Returns a handle: call it (as
    Horovod's) or pass it to synchronize() for the result."""
    ps = _ps(process_set)
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async: expected a sparse tensor")
    op = resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async: op must be hvd.Average or "
                         "hvd.Sum (the values are gathered, then added)")
    hi = allgather_async(tensor._indices().transpose(0, 1).contiguous(),
                         name="%s.indices" % name, process_set=ps)
    hv = allgather_async(tensor._values(), name="%s.values" % name,
                         process_set=ps)
    done = []

    def handle():
        if not done:
            values = synchronize(hv)
            indices = synchronize(hi)
            if op == Average:
                values = values / set_size(ps)
            done.append(torch.sparse_coo_tensor(
                indices.transpose(0, 1), values, tensor.size(),
                dtype=tensor.dtype, device=tensor.device))
        return done[0]
    return handle


# --------------------------------------------------------------- allgather

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: the concatenation along the first dimension of
    every rank's tensor (the first dimension may differ between ranks, the
    others must not; a 0-d tensor counts as one row)."""
    return start("allgather", tensor, name, _ps(process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns the concatenation of every rank's tensor along the first
    dimension; differentiable."""
    return _grad.HorovodAllgather.apply(tensor, name, _ps(process_set))


def grouped_allgather_async(tensors, name=None,
                            process_set=global_process_set):
    """Starts an allgather of each tensor of a list, negotiated as one
    unit; synchronize() returns the list of results."""
    return start("allgather", tensors, name, _ps(process_set), group=True)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns the list of allgathers of the tensors (see
    grouped_allgather_async); differentiable."""
    return list(_grad.HorovodGroupedAllgather.apply(name, _ps(process_set),
                                                    *tensors))


# --------------------------------------------------------------- broadcast

def broadcast_async(tensor, root_rank, name=None,
                    process_set=global_process_set):
    """Starts a broadcast of root_rank's tensor into a new tensor."""
    return start("broadcast", tensor, name, _ps(process_set),
                 root_rank=root_rank)


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=global_process_set):
    """Starts an in-place broadcast of root_rank's tensor."""
    return start("broadcast", tensor, name, _ps(process_set), inplace=True,
                 root_rank=root_rank)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every rank, as a new tensor;
    differentiable."""
    return _grad.HorovodBroadcast.apply(tensor, root_rank, name,
                                        _ps(process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---------------------------------------------------------------- alltoall

def alltoall_async(tensor, splits=None, name=None,
                   process_set=global_process_set):
    """Starts an alltoall: splits[j] rows (first dimension) of ``tensor``
    go to rank j, in rank order; without splits the first dimension is
    split equally (it must then be divisible by the set's size).
    synchronize() returns (output, received splits as int32)."""
    return start("alltoall", tensor, name, _ps(process_set), splits=splits)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters ``tensor``'s rows to the ranks and gathers what they sent
    here. Returns the received tensor; with ``splits`` given, also a
    tensor of how many rows came from each rank (int32), as Horovod;
    differentiable."""
    return _grad.HorovodAlltoall.apply(tensor, splits, name, _ps(process_set))


# ----------------------------------------------------------- reducescatter

def reducescatter_async(tensor, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reduce-scatter: the tensors are reduced across ranks (op,
    Average by default) and split along the first dimension; rank r gets
    rows [r*q + min(r, m), ...), q = rows // size, m = rows % size (the
    first m ranks get one more row). A 0-d tensor is refused
    (HorovodInternalError, as Horovod)."""
    op = resolve_op(op, None)
    return start("reducescatter", tensor, name, _ps(process_set), op=op,
                 prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Returns this rank's share of the reduced tensor (see
    reducescatter_async); differentiable."""
    op = resolve_op(op, None)
    compression, (t,), (ctx,) = _compressed(compression, [tensor])
    out = _grad.HorovodReducescatter.apply(t, name, op, _ps(process_set),
                                           prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter of each tensor of a list, negotiated as one
    unit; synchronize() returns the list of this rank's shares."""
    op = resolve_op(op, None)
    return start("reducescatter", tensors, name, _ps(process_set),
                 group=True, op=op, prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor)


def grouped_reducescatter(tensors, name=None, compression=Compression.none,
                          op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Returns the list of this rank's shares (see
    grouped_reducescatter_async); differentiable."""
    op = resolve_op(op, None)
    compression, ts, ctxs = _compressed(compression, tensors)
    outs = _grad.HorovodGroupedReducescatter.apply(
        name, op, _ps(process_set), prescale_factor, postscale_factor, *ts)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


# ------------------------------------------------- synchronize, join, ...

def synchronize(handle):
    """Waits for an operation started by a *_async call and returns its
    result (the output tensor; a list for the grouped forms; for alltoall
    (output, received_splits)). Raises HorovodInternalError with hk's
    message when the operation failed."""
    if callable(handle) and not isinstance(handle, Handle):
        return handle()  # sparse_allreduce_async's
    if not isinstance(handle, Handle):
        raise ValueError("synchronize: expected a handle from an *_async "
                         "call, got %r" % (handle,))
    return handle.synchronize()


def poll(handle):
    """True when the operation has completed (synchronize() will not
    block)."""
    if not isinstance(handle, Handle):
        raise ValueError("poll: expected a handle from an *_async call, got "
                         "%r" % (handle,))
    return handle.poll()


def join(device=-1):
    """Blocks until every rank has joined; meanwhile this rank takes part
    in the others' collectives (see the module doc). Returns the rank that
    joined last, the same on every rank. ``device`` (where Horovod makes
    its zero tensors) is accepted and not needed."""
    require_init()
    return _hk.join()


def barrier(process_set=global_process_set):
    """Blocks until every rank of the set (of a joined job: every rank
    that has not joined) has called barrier() (hk_submit's HK_BARRIER on
    the set). A rank outside the set: ValueError, as Horovod."""
    synchronize(start("barrier", None, None, _ps(process_set)))
