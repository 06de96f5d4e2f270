"""Horovod's process sets (horovod/common/process_sets.py) over hk's.

A ProcessSet holds the ranks it was made from and, once registered, hk's
id for it (``process_set_id``); every collective passes that id to libhk
(hk_collective.set), so the set's negotiation, fusion and rings are hk's.
``global_process_set`` is every rank, hk's HK_WORLD (id 0).

hk's libhk does not create other sets yet: ``add_process_set`` and
``init(process_sets=...)`` raise NotImplementedError saying so, and a
ProcessSet that was never registered (its id None) is refused by every
collective with ValueError. When libhk gains its process-set calls
(hk_process_set_add, ...), ``_register``/``_unregister`` below are the
only places that change.
"""

import hk as _hk
from hk._lib import WORLD
from hk.errors import not_initialized

__all__ = ["ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set"]

_NO_SETS = ("hk's libhk has no process sets other than the global one yet "
            "(every collective spans the job)")


class ProcessSet:
    """A set of ranks that run collectives together: ``ProcessSet(ranks)``
    (an iterable of global ranks, sorted here), registered by
    ``hvd.init(process_sets=[...])`` or ``hvd.add_process_set``. An MPI
    communicator is refused (ValueError): hk's jobs do not come from MPI
    communicators. ``process_set_id`` is hk's id once registered, else
    None."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of "
                             "process ranks (hk takes no MPI communicator)"
                             ) from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of "
                             "process ranks, got %r" % (ranks,))
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None if not registered."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == WORLD:
            return _hk.size()
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None if not registered
        (or not a member). Collectives still take global ranks (a
        broadcast's root_rank), as in Horovod."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == WORLD:
            return _hk.rank()
        r = _hk.rank()
        return self.ranks.index(r) if r in self.ranks else None

    def included(self):
        """Whether this process belongs to the set (None if the set has no
        ranks yet)."""
        if self.process_set_id == WORLD:
            return True
        if self.ranks is None:
            return None
        return _hk.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=None)" % (
            self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = WORLD


def set_id(process_set):
    """hk's id of ``process_set`` for hk_collective.set. ValueError for
    something that is not a registered ProcessSet."""
    if process_set is None or process_set is global_process_set:
        return WORLD
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a hvd.ProcessSet, got %r" %
                         (process_set,))
    if process_set.process_set_id is None:
        raise ValueError("%s has not been registered (hvd.init(process_sets="
                         "...) or hvd.add_process_set)" % process_set)
    return process_set.process_set_id


def set_size(process_set):
    """The number of ranks of ``process_set`` (registered)."""
    set_id(process_set)
    return (process_set or global_process_set).size()


def _register(process_set):
    """Asks libhk for a set of process_set.ranks and records its id."""
    raise NotImplementedError(_NO_SETS)


def _unregister(process_set):
    """Asks libhk to remove the set; True when it did."""
    raise NotImplementedError(_NO_SETS)


def init_process_sets(process_sets):
    """hvd.init(process_sets=...): registers each (the global set is
    always there). Called after hk has joined the job."""
    if process_sets is None:
        return
    if process_sets == "dynamic":
        raise NotImplementedError(_NO_SETS)
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError("process_sets must hold hvd.ProcessSet "
                             "objects, got %r" % (ps,))
        _register(ps)


def add_process_set(process_set):
    """Registers a new set (a ProcessSet or a list of ranks) and returns
    it. See the module doc: refused until libhk has process sets."""
    if not _hk.is_initialized():
        raise not_initialized()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    _register(process_set)
    return process_set


def remove_process_set(process_set):
    """Removes a registered set; returns whether it did. The global set is
    never removed (False), nor a set never registered (False), as in
    Horovod."""
    if process_set.process_set_id is None or \
            process_set.process_set_id == WORLD:
        return False
    return _unregister(process_set)
