"""The gradients of hk.torch's collectives, as Horovod defines them
(horovod/torch/mpi_ops.py: HorovodAllreduce, HorovodGroupedAllreduce,
HorovodAllgather, HorovodGroupedAllgather, HorovodBroadcast,
HorovodAlltoall, HorovodReducescatter, HorovodGroupedReducescatter), so
that a model differentiating through them trains as it does on Horovod.

For a rank r of a set of n ranks, g_q the gradient arriving at rank q's
output (autograd's grad_output there):

- allreduce (op, prescale p, postscale s): the same allreduce of the
  g_q, with op, p and s (Average: mean of the g_q; Sum: their sum);
- grouped_allreduce: the grouped allreduce of the g_q, likewise;
- allgather: the mean over q of g_q (an allreduce with Average), rows
  [offset_r, offset_r + rows_r) of it, offset_r the rows of the ranks
  before r (hk knows every rank's rows from the forward: no second
  allgather for them, unlike Horovod; the values are the same);
- grouped_allgather: the same for each tensor of the group;
- broadcast from root: on the root, the mean over q of g_q; zeros on the
  others;
- alltoall: the alltoall of g_r back, with the splits the forward
  received (each row's gradient returns to the rank that sent the row);
- reducescatter (op, p, s): the allgather of g_q * n (Sum) or of g_q
  (Average and the others), times p and s when they are not 1;
- grouped_reducescatter: the same for each tensor of the group.

Horovod's definitions are kept even where they differ from the
derivative of the sum over ranks of a loss (allgather and broadcast
average, reducescatter's Sum multiplies by n): a script must get the same
gradients on hk as on Horovod. The backward's collectives are named after
the forward's name with ".grad" (unnamed: hk's counter).
"""

import torch

import hk as _hk
from . import _submit
from ._submit import Sum, start, suffixed

__all__ = ["HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
           "HorovodGroupedAllgather", "HorovodBroadcast", "HorovodAlltoall",
           "HorovodReducescatter", "HorovodGroupedReducescatter"]


def _ops():
    from . import mpi_ops  # the differentiable forms the backwards call
    return mpi_ops


def _scaled(grads, factors):
    """The gradients times each factor that is not 1."""
    out = list(grads)
    for f in factors:
        if f != 1.0:
            out = [g * f for g in out]
    return out


def _either(group, grouped, single, tensors, **kw):
    """grouped(tensors, **kw) for a group, else [single(tensors[0], **kw)]:
    the backwards' collectives, of the forward's form."""
    if group:
        return list(grouped(list(tensors), **kw))
    return [single(tensors[0], **kw)]


def _forward(ctx, kind, tensors, group, name, process_set, **args):
    """Runs the forward collective; keeps (name, process set, args) and
    the Handle's parts for the backward. A tuple for a group."""
    ctx.name, ctx.process_set, ctx.kw = name, process_set, args
    h = start(kind, list(tensors) if group else tensors[0], name,
              process_set, group=group, **args)
    out = h.synchronize()
    ctx.rows = [p.info for p in h.parts]
    ctx.shapes = [t.shape for t in tensors]
    return tuple(out) if group else out


def _grad_name(ctx):
    return suffixed(ctx.name, ".grad")


def _allreduce_backward(ctx, grads, group):
    ops = _ops()
    return _either(group, ops.grouped_allreduce, ops.allreduce, grads,
                   name=_grad_name(ctx), process_set=ctx.process_set,
                   **ctx.kw)


def _allgather_backward(ctx, grads, group):
    ops = _ops()
    means = _either(group, ops.grouped_allreduce, ops.allreduce, grads,
                    name=_grad_name(ctx), op=_submit.Average,
                    process_set=ctx.process_set)
    r = ctx.process_set.rank()
    return [m.narrow(0, sum(rows[:r]), rows[r]).reshape(shape)
            for m, rows, shape in zip(means, ctx.rows, ctx.shapes)]


def _reducescatter_backward(ctx, grads, group):
    ops = _ops()
    kw = ctx.kw
    n = ctx.process_set.size() if kw["op"] == Sum else 1.0
    gs = _scaled(grads, (float(n), kw["prescale_factor"],
                         kw["postscale_factor"]))
    return _either(group, ops.grouped_allgather, ops.allgather, gs,
                   name=_grad_name(ctx), process_set=ctx.process_set)


class HorovodAllreduce(torch.autograd.Function):
    """allreduce, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor,
                process_set):
        return _forward(ctx, "allreduce", [tensor], False, name, process_set,
                        op=op, prescale_factor=prescale_factor,
                        postscale_factor=postscale_factor)

    @staticmethod
    def backward(ctx, grad):
        return tuple(_allreduce_backward(ctx, [grad], False)) + (None,) * 5


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        return _forward(ctx, "allreduce", tensors, True, name, process_set,
                        op=op, prescale_factor=prescale_factor,
                        postscale_factor=postscale_factor)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 5 + tuple(_allreduce_backward(ctx, grads, True))


class HorovodAllgather(torch.autograd.Function):
    """allgather, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        return _forward(ctx, "allgather", [tensor], False, name, process_set)

    @staticmethod
    def backward(ctx, grad):
        return tuple(_allgather_backward(ctx, [grad], False)) + (None,) * 2


class HorovodGroupedAllgather(torch.autograd.Function):
    """grouped_allgather, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        return _forward(ctx, "allgather", tensors, True, name, process_set)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 2 + tuple(_allgather_backward(ctx, grads, True))


class HorovodBroadcast(torch.autograd.Function):
    """broadcast, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        return _forward(ctx, "broadcast", [tensor], False, name, process_set,
                        root_rank=root_rank)

    @staticmethod
    def backward(ctx, grad):
        mean = _ops().allreduce(grad, name=_grad_name(ctx),
                                op=_submit.Average,
                                process_set=ctx.process_set)
        if _hk.rank() != ctx.kw["root_rank"]:
            mean = mean * 0
        return mean, None, None, None


class HorovodAlltoall(torch.autograd.Function):
    """alltoall, differentiable (module doc); with splits it also returns
    the received splits, which have no gradient."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = _forward(ctx, "alltoall", [tensor], False, name,
                                 process_set, splits=splits)
        ctx.received = received
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *received_grads):
        g, _ = _ops().alltoall(grad, splits=ctx.received,
                               name=_grad_name(ctx),
                               process_set=ctx.process_set)
        return g, None, None, None


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor,
                postscale_factor):
        return _forward(ctx, "reducescatter", [tensor], False, name,
                        process_set, op=op, prescale_factor=prescale_factor,
                        postscale_factor=postscale_factor)

    @staticmethod
    def backward(ctx, grad):
        return tuple(_reducescatter_backward(ctx, [grad], False)) + (None,) * 5


class HorovodGroupedReducescatter(torch.autograd.Function):
    """grouped_reducescatter, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor,
                *tensors):
        return _forward(ctx, "reducescatter", tensors, True, name,
                        process_set, op=op, prescale_factor=prescale_factor,
                        postscale_factor=postscale_factor)

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 5 + tuple(_reducescatter_backward(ctx, grads, True))
