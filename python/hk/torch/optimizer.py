"""DistributedOptimizer: gradients averaged through hk as backward makes
them.

Differences from Horovod
- The returned optimizer is an instance of a subclass of the wrapped
  optimizer's class that shares its param_groups, state and defaults
  (Horovod builds a new optimizer of the same class from param_groups, so
  state accumulated before wrapping is lost there; here it is kept).
- Gradients go through hk in a world of one too (Horovod skips the hooks
  at size 1), so a one-process run exercises the same path.
- op=Adasum is refused (NotImplementedError); process sets other than the
  global one are refused.
- hk's names for gradients: ``allreduce.<parameter name>`` (from
  named_parameters), else ``allreduce.noname.param.<index>``; a group:
  ``grouped_allreduce.grad_group.<k>.<i>``.
"""

import contextlib
import warnings

import torch

import hk as _hk
from .compression import Compression
from .mpi_ops import (Average, Adasum, _ADASUM, _HK_OP,
                      _check_process_set, global_process_set,
                      allreduce_async_, grouped_allreduce_async_,
                      allgather_async, synchronize)

__all__ = ["DistributedOptimizer"]


class _DistributedMixin:
    """Placed before the wrapped optimizer's class; see DistributedOptimizer."""

    def _hk_setup(self, named_parameters, compression, backward_passes_per_step,
                  op, gradient_predivide_factor, groups, sparse_as_dense):
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("noname.param.%d" % i, p)
                                for i, p in enumerate(all_params)]
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

        # explicit groups: lists of parameters reduced together
        self._group_of = {}
        self._groups = []
        if groups:
            if isinstance(groups, int):
                trainable = [p for p in all_params if p.requires_grad]
                k = max(1, min(groups, len(trainable)))
                per = -(-len(trainable) // k)
                plist = [trainable[i:i + per]
                         for i in range(0, len(trainable), per)]
            else:
                plist = [list(g) for g in groups]
            for gi, g in enumerate(plist):
                for p in g:
                    if p in self._group_of:
                        raise ValueError("groups: a parameter appears in two "
                                         "groups")
                    self._group_of[p] = gi
                self._groups.append(g)
        self._group_ready = [set() for _ in self._groups]

        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._allreduce_delay = {p: backward_passes_per_step
                                 for p in all_params}
        self._register_hooks()

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
            p.grad = torch.zeros_like(p)
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return self._sparse_allreduce_grad_async(p, name)
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scale()
        h = allreduce_async_(compressed, name=name, op=self.op,
                             prescale_factor=pre, postscale_factor=post)
        return h, (ctx, compressed, tensor)

    def _sparse_allreduce_grad_async(self, p, name):
        g = p.grad.coalesce()
        hv = allgather_async(g._values(), name=name + ".values")
        hi = allgather_async(g._indices().t().contiguous(),
                             name=name + ".indices")
        return (hv, hi), ("sparse", g.shape)

    def _group_arrived(self, p):
        gi = self._group_of[p]
        ready = self._group_ready[gi]
        ready.add(p)
        self._handles[p] = (None, None)
        members = [q for q in self._groups[gi] if q.requires_grad]
        if len(ready) == len(members):
            self._submit_group(gi)

    def _submit_group(self, gi):
        members = [q for q in self._groups[gi] if q.requires_grad]
        for q in members:
            if q.grad is None:
                q.grad = torch.zeros_like(q)
        comp = [self._compression.compress(q.grad) for q in members]
        pre, post = self._scale()
        h = grouped_allreduce_async_([c[0] for c in comp],
                                     name="grad_group.%d" % gi, op=self.op,
                                     prescale_factor=pre,
                                     postscale_factor=post)
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
                if isinstance(h, tuple):  # sparse: values and indices
                    values = synchronize(h[0])
                    indices = synchronize(h[1])
                    if self.op == Average:
                        values = values / _hk.size()
                    p.grad = torch.sparse_coo_tensor(
                        indices.t(), values, ctx[1]).coalesce()
                    continue
                out = synchronize(h)
            except Exception as e:
                err = err or e
                continue
            if isinstance(out, list):  # a group: decompress its members
                for q in self._groups[self._group_of[p]]:
                    if q in self._handles:
                        self._finish_grad(q, self._handles[q][1])
            else:
                self._finish_grad(p, ctx)
        self._handles.clear()
        self._synchronized = True
        if err is not None:
            raise err

    def _finish_grad(self, p, ctx):
        cctx, reduced, original = ctx
        out = self._compression.decompress(reduced, cctx)
        with torch.no_grad():
            if original is not p.grad:  # sparse_as_dense
                p.grad = out
            elif out is not p.grad:
                p.grad.copy_(out)

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
    - num_groups / groups: gradients reduced together as hk grouped
      allreduces (an int: that many groups of consecutive parameters; or
      lists of parameters).
    - sparse_as_dense: sparse gradients are densified; otherwise they are
      allgathered (values and indices) and summed.

    See the module docstring for where hk differs from Horovod."""
    _check_process_set(process_set)
    if op == Adasum:
        raise NotImplementedError(_ADASUM)
    if op not in _HK_OP:
        raise ValueError("unknown op %r" % (op,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")
    if not isinstance(backward_passes_per_step, int) or \
            backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be a positive int, "
                         "got %r" % (backward_passes_per_step,))
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` "
                      "and will be removed", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("DistributedOptimizer: expected a "
                         "torch.optim.Optimizer, got %s" %
                         type(optimizer).__name__)
    if not _hk.is_initialized():
        raise ValueError("hk has not been initialized; use hvd.init().")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base),
               {"__module__": base.__module__})
    obj = cls.__new__(cls)
    obj.__dict__.update(optimizer.__dict__)  # shares groups, state, defaults
    obj._hk_setup(named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, groups, sparse_as_dense)
    return obj
