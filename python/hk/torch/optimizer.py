"""DistributedOptimizer: gradients averaged through hk as backward makes
them.

Differences from Horovod
- The returned optimizer is an instance of a subclass of the wrapped
  optimizer's class that shares its param_groups, state and defaults
  (Horovod builds a new optimizer of the same class from param_groups, so
  state accumulated before wrapping is lost there; here it is kept).
- Gradients go through hk in a world of one too (Horovod skips the hooks
  at size 1), so a one-process run exercises the same path.
- op=Adasum is refused (NotImplementedError).
- groups: formed as Horovod forms them (an int: Horovod's split_list of
  the trainable parameters in order; lists: each list, and every other
  parameter alone), in param_groups order on every rank (Horovod
  broadcasts rank 0's order first). A group whose members did not all get
  a gradient by synchronize() is reduced as a group anyway, with zeros for
  the missing ones (Horovod reduces those members one by one, which can
  differ between ranks).
- A sparse gradient missing on this rank (its parameter unused this
  step) is sent as an empty sparse tensor when the parameter had a sparse
  gradient before (Horovod sends dense zeros, which cannot meet the other
  ranks' sparse allgathers), and an empty one (what zero_grad() leaves) is
  laid out as the parameter's sparse gradients are, so that its
  allgathers match the other ranks'.
- hk's names for gradients: ``allreduce.<parameter name>`` (from
  named_parameters, else Horovod's ``noname.<group>.<index>``); a group:
  ``grouped_allreduce.<its first parameter's name>.<i>``; a sparse
  gradient: ``allgather.<name>.indices`` and ``allgather.<name>.values``.
"""

import contextlib
import warnings

import torch

from .compression import Compression
from ._submit import ADASUM, HK_OP, require_init
from .mpi_ops import (Average, Adasum, global_process_set, allreduce_async_,
                      grouped_allreduce_async_, sparse_allreduce_async,
                      synchronize, _ps)

__all__ = ["DistributedOptimizer"]


def split_list(items, n):
    """Horovod's split of a list into n nearly equal consecutive chunks."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)]
            for i in range(n)]


class _DistributedMixin:
    """Placed before the wrapped optimizer's class; see DistributedOptimizer."""

    def _hk_setup(self, named_parameters, compression, backward_passes_per_step,
                  op, gradient_predivide_factor, groups, sparse_as_dense,
                  process_set):
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("noname.%d.%d" % (i, j), p)
                                for i, g in enumerate(self.param_groups)
                                for j, p in enumerate(g["params"])]
        if any(not isinstance(p, tuple) or len(p) != 2
               for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of "
                             "tuples (name, parameter), usually produced by "
                             "model.named_parameters().")
        names = [n for n, _ in named_parameters]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be "
                             "unique. Found duplicates: %s" % ", ".join(dups))
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [id(p) for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more "
                             "model parameters were not named. Python object "
                             "ids: %s" % ", ".join(str(i) for i in unnamed))
        self._parameter_names = {p: n for n, p in named_parameters}

        self._group_of = {}
        self._groups = []
        if groups is not None:
            trainable = [p for p in all_params if p.requires_grad]
            if isinstance(groups, list):
                ids = {id(p) for p in trainable}
                plist = [[p for p in g if id(p) in ids] for g in groups]
                grouped = {id(p) for g in plist for p in g}
                plist += [[p] for p in trainable if id(p) not in grouped]
            else:
                plist = split_list(trainable, groups)
            for gi, g in enumerate(p for p in plist if p):
                for p in g:
                    self._group_of[p] = gi
                self._groups.append(g)
        self._group_ready = [set() for _ in self._groups]
        self._sparse_dims = {}  # p: sparse_dim of its sparse gradients

        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._allreduce_delay = {p: backward_passes_per_step
                                 for p in all_params}
        if process_set.included():
            self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step (and restarts its count)."""
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's, forgetting gradients in flight."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self._group_ready = [set() for _ in self._groups]
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        return super().load_state_dict(*args, **kwargs)

    # ------------------------------------------------------------- hooks
    def _register_hooks(self):
        with torch.enable_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if not p.requires_grad:
                        continue
                    self._requires_update.add(p)
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)

    def _make_hook(self, p):
        def hook(*ignore):
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than "
                    "backward_passes_per_step times before call to "
                    "step(). Increase backward_passes_per_step to "
                    "accumulate gradients locally.")
            if p.grad is None:  # backward gave it no gradient (undefined)
                return
            assert not p.grad.requires_grad
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if p in self._group_of:
                    self._group_arrived(p)
                else:
                    self._handles[p] = self._allreduce_grad_async(p)
            else:
                self._handles[p] = (None, None)
        return hook

    def _scale(self):
        if self.op == Average:
            # hk divides by the size for Average; the factor is split
            # around it as Horovod does
            return (1.0 / self.gradient_predivide_factor,
                    self.gradient_predivide_factor)
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # not computed here (an unused branch) but perhaps on another
            # rank: contribute zeros so every rank submits it
            p.grad = self._empty_sparse(p) if p in self._sparse_dims else \
                torch.zeros_like(p)
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if tensor._nnz() == 0:  # zero_grad() left it with every dim sparse
                p.grad = tensor = self._empty_sparse(p)
            self._sparse_dims[p] = tensor.sparse_dim()
            if not self.sparse_as_dense:
                return (sparse_allreduce_async(tensor, name=name, op=self.op,
                                               process_set=self.process_set),
                        None)
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scale()
        h = allreduce_async_(compressed, name=name, op=self.op,
                             prescale_factor=pre, postscale_factor=post,
                             process_set=self.process_set)
        return h, (ctx, compressed, tensor)

    def _empty_sparse(self, p):
        """A sparse gradient of no entries, laid out as p's last sparse
        gradient (sparse dims, then dense ones; at first the rows, as
        nn.Embedding's), so that its allgathers match the other ranks'."""
        k = self._sparse_dims.get(p, 1)
        return torch.sparse_coo_tensor(
            torch.zeros((k, 0), dtype=torch.int64, device=p.device),
            torch.zeros((0,) + tuple(p.shape[k:]), dtype=p.dtype,
                        device=p.device), p.shape)

    def _group_arrived(self, p):
        gi = self._group_of[p]
        ready = self._group_ready[gi]
        ready.add(p)
        self._handles[p] = (None, None)
        if len(ready) == len(self._groups[gi]):
            self._submit_group(gi)

    def _submit_group(self, gi):
        members = self._groups[gi]
        for q in members:
            if q.grad is None:
                q.grad = torch.zeros_like(q)
        comp = [self._compression.compress(q.grad) for q in members]
        pre, post = self._scale()
        h = grouped_allreduce_async_([c[0] for c in comp],
                                     name=self._parameter_names[members[0]],
                                     op=self.op, prescale_factor=pre,
                                     postscale_factor=post,
                                     process_set=self.process_set)
        first = True
        for q, (t, ctx) in zip(members, comp):
            # the group's handle sits on its first member; the others
            # carry only how to decompress
            self._handles[q] = (h if first else "group",
                                (ctx, t, q.grad))
            first = False
        self._group_ready[gi] = set()

    # ----------------------------------------------------------- control
    def synchronize(self):
        """Waits for every gradient's allreduce (starting those backward
        did not reach, with zeros for gradients never computed) and puts
        the results in p.grad."""
        if not self.process_set.included():
            self._synchronized = True
            return
        missing = [p for p in self._requires_update if p not in self._handles]
        for p in missing:
            self._handles[p] = (None, None)
        for p in list(self._handles):
            if self._handles[p][0] is None:  # not started yet (live check:
                if p in self._group_of:      # a group may start meanwhile)
                    self._group_arrived(p)
                else:
                    self._handles[p] = self._allreduce_grad_async(p)
        for gi in range(len(self._groups)):
            if self._group_ready[gi]:
                self._submit_group(gi)

        err = None
        for p, (h, ctx) in list(self._handles.items()):
            self._allreduce_delay[p] = self.backward_passes_per_step
            if isinstance(h, str):  # a group member: done with its group
                continue
            try:
                out = synchronize(h)
            except Exception as e:
                err = err or e
                continue
            if isinstance(out, list):  # a group: decompress its members
                for q in self._groups[self._group_of[p]]:
                    if q in self._handles:
                        self._finish_grad(q, out, self._handles[q][1])
            else:
                self._finish_grad(p, out, ctx)
        self._handles.clear()
        self._synchronized = True
        if err is not None:
            raise err

    def _finish_grad(self, p, out, ctx):
        """Puts the reduced gradient in p.grad, as Horovod: a sparse
        gradient stays sparse (sparse_as_dense reduced it dense)."""
        with torch.no_grad():
            if ctx is None:  # the sparse allgather's result
                p.grad.zero_().add_(out)
                return
            cctx, reduced, original = ctx
            res = self._compression.decompress(reduced, cctx)
            if p.grad.is_sparse:  # sparse_as_dense: sparse again, its layout
                res = res.to_sparse(p.grad.sparse_dim())
                p.grad.zero_().add_(res)
            elif res is not p.grad:
                p.grad.copy_(res)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within this context step() does not synchronize (call
        synchronize() yourself before, e.g. to clip gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without "
                    "optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training "
                    "slowdown. You may want to consider using "
                    "optimizer.skip_synchronize() context if you use "
                    "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but "
                "before optimizer.step() or optimizer.synchronize(). This is "
                "prohibited as it can cause a race condition.")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch.optim.Optimizer so that each gradient is allreduced
    (averaged by default) across the ranks through hk as soon as backward
    has produced it (a hook on each parameter's gradient accumulator), and
    step() (or synchronize()) waits for them before updating.

    - named_parameters: ``model.named_parameters()``; names every gradient
      for hk (and the timeline, stall warnings, mismatch messages).
    - compression: Compression.none or Compression.fp16.
    - backward_passes_per_step: backward passes accumulated locally before
      the allreduce (the gradients are summed, not averaged, over them).
    - op: Average (default) or Sum (Min/Max/Product also work); Adasum is
      refused.
    - gradient_predivide_factor: with Average, gradients are multiplied by
      1/f before the sum and by f/size after it.
    - num_groups (deprecated) / groups: gradients reduced together as hk
      grouped allreduces: an int n splits the trainable parameters into n
      groups of consecutive ones (Horovod's split_list); a list of lists
      of parameters makes each list a group, and every other parameter
      its own.
    - sparse_as_dense: sparse gradients are densified, allreduced, and
      made sparse again; otherwise they go through
      sparse_allreduce_async (indices and values allgathered).
    - process_set: the ranks whose gradients are reduced together; a rank
      outside it does not reduce.

    See the module docstring for where hk differs from Horovod."""
    process_set = _ps(process_set)
    if op == Adasum:
        raise NotImplementedError(ADASUM)
    if op not in HK_OP:
        raise ValueError("unknown op %r" % (op,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")
    if not isinstance(backward_passes_per_step, int) or \
            backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0, got %r" %
                         (backward_passes_per_step,))
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` "
                      "and will be removed", DeprecationWarning)
        if groups is None:
            groups = num_groups
    _check_groups(groups)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("DistributedOptimizer: expected a "
                         "torch.optim.Optimizer, got %s" %
                         type(optimizer).__name__)
    require_init()
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base),
               {"__module__": base.__module__})
    obj = cls.__new__(cls)
    obj.__dict__.update(optimizer.__dict__)  # shares groups, state, defaults
    obj._hk_setup(named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, groups, sparse_as_dense,
                  process_set)
    return obj


def _check_groups(groups):
    """Horovod's checks of ``groups`` (ValueError)."""
    if groups is None:
        return
    if not isinstance(groups, list) and not (
            isinstance(groups, int) and groups > 0):
        raise ValueError("groups should be a non-negative integer or a list "
                         "of list of torch.Tensor.")
    if isinstance(groups, list):
        seen = set()
        for g in groups:
            for p in g:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in "
                                     "groups.")
                seen.add(id(p))
