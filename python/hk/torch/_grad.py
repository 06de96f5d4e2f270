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


def _rank_rows(rows, r, mine, grad, shape):
    """Rank r's rows of ``grad`` (rows: every rank's rows), in the forward
    input's ``shape``."""
    off = sum(rows[:r])
    return grad.narrow(0, off, mine).reshape(shape)


class HorovodAllreduce(torch.autograd.Function):
    """allreduce, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor,
                process_set):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return start("allreduce", tensor, name, process_set, op=op,
                     prescale_factor=prescale_factor,
                     postscale_factor=postscale_factor).synchronize()

    @staticmethod
    def backward(ctx, grad):
        name, op, pre, post, ps = ctx.args
        return (_ops().allreduce(grad, name=suffixed(name, ".grad"), op=op,
                                 prescale_factor=pre, postscale_factor=post,
                                 process_set=ps),
                None, None, None, None, None)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return tuple(start("allreduce", list(tensors), name, process_set,
                           group=True, op=op, prescale_factor=prescale_factor,
                           postscale_factor=postscale_factor).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        name, op, pre, post, ps = ctx.args
        return (None, None, None, None, None) + tuple(
            _ops().grouped_allreduce(list(grads), name=suffixed(name, ".grad"),
                                     op=op, prescale_factor=pre,
                                     postscale_factor=post, process_set=ps))


class HorovodAllgather(torch.autograd.Function):
    """allgather, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        h = start("allgather", tensor, name, process_set)
        out = h.synchronize()
        ctx.rows, ctx.shape = h.parts[0].info, tensor.shape
        ctx.args = (name, process_set)
        return out

    @staticmethod
    def backward(ctx, grad):
        name, ps = ctx.args
        mean = _ops().allreduce(grad, name=suffixed(name, ".grad"),
                                op=_submit.Average, process_set=ps)
        r = ps.rank()
        return (_rank_rows(ctx.rows, r, ctx.rows[r], mean, ctx.shape),
                None, None)


class HorovodGroupedAllgather(torch.autograd.Function):
    """grouped_allgather, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        h = start("allgather", list(tensors), name, process_set, group=True)
        outs = h.synchronize()
        ctx.rows = [p.info for p in h.parts]
        ctx.shapes = [t.shape for t in tensors]
        ctx.args = (name, process_set)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        name, ps = ctx.args
        means = _ops().grouped_allreduce(list(grads),
                                         name=suffixed(name, ".grad"),
                                         op=_submit.Average, process_set=ps)
        r = ps.rank()
        return (None, None) + tuple(
            _rank_rows(rows, r, rows[r], m, shape)
            for rows, m, shape in zip(ctx.rows, means, ctx.shapes))


class HorovodBroadcast(torch.autograd.Function):
    """broadcast, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.args = (root_rank, name, process_set)
        return start("broadcast", tensor, name, process_set,
                     root_rank=root_rank).synchronize()

    @staticmethod
    def backward(ctx, grad):
        root, name, ps = ctx.args
        mean = _ops().allreduce(grad, name=suffixed(name, ".grad"),
                                op=_submit.Average, process_set=ps)
        if _hk.rank() != root:
            mean = mean * 0
        return mean, None, None, None


class HorovodAlltoall(torch.autograd.Function):
    """alltoall, differentiable (module doc); with splits it also returns
    the received splits, which have no gradient."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = start("alltoall", tensor, name, process_set,
                              splits=splits).synchronize()
        ctx.args = (received, name, process_set)
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *received_grads):
        received, name, ps = ctx.args
        g, _ = _ops().alltoall(grad, splits=received,
                               name=suffixed(name, ".grad"), process_set=ps)
        return g, None, None, None


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor,
                postscale_factor):
        ctx.args = (name, op, process_set, prescale_factor, postscale_factor)
        return start("reducescatter", tensor, name, process_set, op=op,
                     prescale_factor=prescale_factor,
                     postscale_factor=postscale_factor).synchronize()

    @staticmethod
    def backward(ctx, grad):
        name, op, ps, pre, post = ctx.args
        n = ps.size() if op == Sum else 1.0
        g, = _scaled([grad], (float(n), pre, post))
        return (_ops().allgather(g, name=suffixed(name, ".grad"),
                                 process_set=ps),
                None, None, None, None, None)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """grouped_reducescatter, differentiable (module doc)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor,
                *tensors):
        ctx.args = (name, op, process_set, prescale_factor, postscale_factor)
        return tuple(start("reducescatter", list(tensors), name, process_set,
                           group=True, op=op, prescale_factor=prescale_factor,
                           postscale_factor=postscale_factor).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        name, op, ps, pre, post = ctx.args
        n = ps.size() if op == Sum else 1.0
        gs = _scaled(grads, (float(n), pre, post))
        return (None, None, None, None, None) + tuple(
            _ops().grouped_allgather(gs, name=suffixed(name, ".grad"),
                                     process_set=ps))
