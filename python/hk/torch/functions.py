"""Broadcasting a model's and an optimizer's state, and Python objects.

Differences from Horovod
- broadcast_optimizer_state sends root_rank's whole ``state_dict()`` (the
  per-parameter state and every param_group's hyperparameters) and loads
  it with ``load_state_dict`` on the other ranks: its structure goes as a
  pickled object, its tensors through hk's broadcast (staged through host
  memory, then placed by load_state_dict on each parameter's device). A
  rank whose optimizer has no state yet needs no dummy step first, and any
  optimizer whose state_dict round-trips works (LBFGS too).
- broadcast_object / allgather_object without ``name`` use a counter
  (``broadcast_object.noname.<n>``), not the object's type name: the type
  usually differs between the root and the others (None there).
- Objects are pickled with cloudpickle when it is installed, else pickle.
- broadcast_parameters and broadcast_optimizer_state take
  ``process_set`` too (Horovod's run on the global set only), and
  allgather_object takes it as broadcast_object does; root_rank is a rank
  of the job, as in every Horovod broadcast.
"""

import collections
import io
import pickle

import torch

import hk as _hk
from ._submit import op_name, require_init
from .mpi_ops import (global_process_set, broadcast_async_, synchronize,
                      allgather, broadcast_, _ps)

__all__ = ["broadcast_parameters", "broadcast_optimizer_state",
           "broadcast_object", "allgather_object"]

try:  # pragma: no cover - depends on what is installed
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover
    _pickler = pickle


def _dumps(obj):
    b = io.BytesIO()
    _pickler.dump(obj, b)
    return b.getvalue()


def broadcast_parameters(params, root_rank, prefix=None,
                         process_set=global_process_set):
    """Broadcasts parameters from root_rank to every rank (of
    ``process_set``, an hk addition: root_rank is then a rank of the job
    in the set), in place.

    ``params``: a dict (``model.state_dict()``, sent in sorted key order),
    or a list of ``(name, tensor)`` pairs (``model.named_parameters()``),
    or a list of tensors. Every rank must pass the same names."""
    process_set = _ps(process_set)
    require_init()
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or isinstance(
            params, collections.abc.Iterator):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    err = None
    for name, p in items:
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            err = ValueError("broadcast_parameters: '%s' is a %s, not a "
                             "tensor" % (name, type(p).__name__))
            break
        full = None if name is None else (prefix or "") + str(name)
        try:
            handles.append(broadcast_async_(p, root_rank, full,
                                            process_set=process_set))
        except Exception as e:
            err = e
            break
    for h in handles:  # every submitted broadcast is waited, once
        try:
            synchronize(h)
        except Exception as e:
            err = err or e
    if err is not None:
        raise err


class _Slot:
    """Where a tensor sat in the root's state_dict: its index, shape and
    dtype (the tensor itself travels through hk)."""

    __slots__ = ("i", "shape", "dtype")

    def __init__(self, i, shape, dtype):
        self.i, self.shape, self.dtype = i, shape, dtype


def _strip(obj, tensors):
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _Slot(len(tensors) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        return {k: _strip(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_strip(v, tensors) for v in obj)
    return obj


def _fill(obj, tensors):
    if isinstance(obj, _Slot):
        return tensors[obj.i]
    if isinstance(obj, dict):
        return {k: _fill(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_fill(v, tensors) for v in obj)
    return obj


def broadcast_optimizer_state(optimizer, root_rank, model=None,
                              prefix="Parameter.",
                              process_set=global_process_set):
    """Makes every rank's optimizer state (per-parameter state such as
    momentum buffers, and the param_groups' hyperparameters such as lr)
    equal to root_rank's. Parameters without state on the root (no
    gradient yet, frozen, unused) have none anywhere afterwards, as after
    Horovod's. See the module docstring for how it differs from Horovod.
    ``model`` (Horovod's: to find sparse parameters for its dummy step) is
    accepted and not needed. ``process_set`` (an hk addition): among its
    ranks only, root_rank a rank of the job in it."""
    process_set = _ps(process_set)
    require_init()
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("broadcast_optimizer_state: expected a "
                         "torch.optim.Optimizer, got %s" %
                         type(optimizer).__name__)
    root = _hk.rank() == root_rank
    tensors = []
    skeleton = None
    if root:
        skeleton = _strip(optimizer.state_dict(), tensors)
    base = "%soptimizer_state" % (prefix or "")
    skeleton = broadcast_object(skeleton, root_rank, name=base + ".layout",
                                process_set=process_set)
    if root:
        bufs = [t.detach().cpu().clone(memory_format=torch.contiguous_format)
                for t in tensors]
    else:
        slots = []
        _strip_slots(skeleton, slots)
        slots.sort(key=lambda s: s.i)
        bufs = [torch.empty(s.shape, dtype=s.dtype) for s in slots]
    handles = [broadcast_async_(b, root_rank, "%s.%d" % (base, i),
                                process_set=process_set)
               for i, b in enumerate(bufs)]
    for h in handles:
        synchronize(h)
    if not root:
        optimizer.load_state_dict(_fill(skeleton, bufs))


def _strip_slots(obj, out):
    if isinstance(obj, _Slot):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strip_slots(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _strip_slots(v, out)


def broadcast_object(obj, root_rank=0, name=None,
                     process_set=global_process_set):
    """Returns root_rank's ``obj`` on every rank (pickled, broadcast as
    bytes, unpickled); the root gets its own object back."""
    process_set = _ps(process_set)
    require_init()
    base = op_name("broadcast_object", name)
    if _hk.rank() == root_rank:
        data = _dumps(obj)
        sz = torch.tensor([len(data)], dtype=torch.int64)
    else:
        sz = torch.zeros(1, dtype=torch.int64)
    broadcast_(sz, root_rank, name=base + ".size", process_set=process_set)
    n = int(sz.item())
    if _hk.rank() == root_rank:
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if n \
            else torch.zeros(0, dtype=torch.uint8)
    else:
        buf = torch.zeros(n, dtype=torch.uint8)
    broadcast_(buf, root_rank, name=base + ".data", process_set=process_set)
    if _hk.rank() == root_rank:
        return obj
    return pickle.loads(buf.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's ``obj``, in rank order (of the
    process set)."""
    process_set = _ps(process_set)
    require_init()
    base = op_name("allgather_object", name)
    data = _dumps(obj)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64),
                      name=base + ".size", process_set=process_set)
    allb = allgather(buf, name=base + ".data",
                     process_set=process_set).numpy().tobytes()
    out, off = [], 0
    for s in sizes.tolist():
        out.append(pickle.loads(allb[off:off + s]))
        off += s
    return out
