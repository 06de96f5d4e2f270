"""horovod.torch.elastic on hk: ``hvd.elastic.run``, ``hvd.elastic.State``,
``ObjectState`` and ``TorchState``, as Horovod's
(horovod/common/elastic.py, horovod/torch/elastic/state.py).

An elastic job (``hkrun -np 4 --min-np 2 python3 train.py``, docs/elastic.md)
survives a lost worker: the others' next collective raises
HorovodInternalError (hk's status HK_ERR_RANKS_CHANGED); ``run`` catches
it, restores the state's last commit, re-forms the job with the survivors
(hk_elastic_reset: same processes, new ranks), calls the reset callbacks,
syncs the state from the new rank 0 and calls the function again::

    state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)

Where hk differs from Horovod:

- ``commit()`` is a local copy (no collective); ``check_host_updates()``
  reads a flag (hk_elastic_hosts_updated: every rank the same at the same
  commit) instead of Horovod's broadcast, and raises
  HostsUpdatedInterrupt when workers wait to join (an agent took the
  slots of a lost host); ``run`` then admits them (hk_elastic_reset,
  nothing restored) and syncs the state, which their own ``run`` takes
  on entry. Hosts removed show as HorovodInternalError at the next
  collective instead.
- ``run`` re-forms only for a lost rank (HK_ERR_RANKS_CHANGED); any other
  HorovodInternalError (a mismatch, a timeout, the job ended below
  --min-np) propagates, as hk could not re-form the job after it.
- The reset limit is hkrun's (``--reset-limit``).
- ``ElasticSampler`` is not provided.
"""

import copy
import functools

import hk as _hk
from hk.errors import (HorovodInternalError, HostsUpdatedInterrupt,
                       RANKS_CHANGED)

from .functions import (broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .process_sets import global_process_set

__all__ = ["run", "State", "ObjectState", "TorchState"]


class State(object):
    """Horovod's base class: what ``run`` saves, restores and syncs.
    Subclasses give save(), restore() and sync()."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions (no arguments) called, in order, after each re-forming
        (e.g. to scale the learning rate by the new hvd.size())."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook; hk does not call it (rank 0 learns
        of joining workers from hkrun, every rank at a round)."""

    def commit(self):
        """Saves the state (a local copy: no collective), then
        check_host_updates()."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt (skip_sync False: the newcomers
        need the state) when workers wait to join the job, as Horovod
        does when hosts were added. A lost host shows as
        HorovodInternalError at the next collective instead."""
        if _hk.elastic_hosts_updated():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class ObjectState(State):
    """Keeps picklable attributes (the keyword arguments): save() copies
    them (copy.deepcopy), restore() sets them back, sync() broadcasts rank
    0's with broadcast_object."""

    def __init__(self, bcast_object=broadcast_object, get_rank=_hk.rank,
                 **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k))
                             for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


class _ModelHandler(object):
    def __init__(self, model):
        self.value = model
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_ModelHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class TorchState(ObjectState):
    """A model and an optimizer (either may be None) and any picklable
    attributes: save() copies their state_dict()s, restore() loads them
    back (DistributedOptimizer forgets gradients in flight),
    sync() broadcasts rank 0's parameters and optimizer state."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        handlers = {}
        if model is not None:
            handlers["model"] = _ModelHandler(model)
        if optimizer is not None:
            handlers["optimizer"] = _OptimizerHandler(optimizer)
        object.__setattr__(self, "_handlers", handlers)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "optimizer", optimizer)
        super().__init__(bcast_object=broadcast_object, get_rank=_hk.rank,
                         **kwargs)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].value = value
        super().__setattr__(name, value)


def _reset():
    _hk.elastic_reset()
    global_process_set.ranks = list(range(_hk.size()))


def run(func):
    """Decorates ``func(state, *args, **kwargs)`` as Horovod's
    ``hvd.elastic.run``: syncs the state, calls func, and when a rank is
    lost (HorovodInternalError with HK_ERR_RANKS_CHANGED) restores the
    last commit, re-forms the job (hk_elastic_reset, again while it
    raises HK_ERR_RANKS_CHANGED: a rank lost while re-forming), calls the
    state's reset callbacks and goes round again. HostsUpdatedInterrupt
    (check_host_updates: workers wait to join) admits them
    (hk_elastic_reset, nothing restored: the state was just committed),
    calls the reset callbacks and func again after syncing the state
    (unless its skip_sync; raised by the caller with nobody waiting, the
    job is unchanged and only the callbacks run). Returns func's
    result."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if getattr(e, "status", None) != RANKS_CHANGED:
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
                if _hk.elastic_hosts_updated():  # (else: the caller's own)
                    _reset_until_formed()
                state.on_reset()
                continue
            _reset_until_formed()
            state.on_reset()

    return wrapper


def _reset_until_formed():
    # a rank lost while the job re-forms makes elastic_reset raise
    # RANKS_CHANGED again: call it again (as the C API says)
    while True:
        try:
            _reset()
            return
        except HorovodInternalError as e:
            if getattr(e, "status", None) != RANKS_CHANGED:
                raise
