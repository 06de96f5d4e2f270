"""Horovod's process sets (horovod/common/process_sets.py) over hk's
(hk.h, "Process sets").

A ProcessSet holds the job ranks it was made from (sorted) and, once
registered, hk's id for it (``process_set_id``); every collective passes
that id to libhk (hk_collective.set), so the set's negotiation, fusion,
rings and device communicator are hk's. ``global_process_set`` is every
rank, hk's HK_WORLD (id 0).

Registering is a collective of the whole job, as in Horovod: every rank
calls ``add_process_set`` / ``remove_process_set`` (members or not) with
the same ranks, in the same order (hk_process_set_add/_remove, which
fail on every rank alike when ranks disagree). This module keeps the
live sets it knows (``_live``: id -> ranks and the ProcessSet objects
holding the id); since every change is a collective, every rank's table
is the same, so the checks made on it (a duplicate, a set never
registered or removed already) answer alike everywhere without asking
the others.

Where hk differs from Horovod:
- Sets can always be added and removed after init: ``init(process_sets=
  "dynamic")`` is accepted and changes nothing (Horovod needs it, or
  HOROVOD_DYNAMIC_PROCESS_SETS=1, for add_process_set).
- ``init(process_sets=[...])`` first checks that every rank passed the
  same list (one allgather of the lists over the world); a list that
  differs, holds a duplicate or a set hk refuses (a rank outside the
  job, a rank twice, no rank) raises on every rank (ValueError, with
  hk's message) and registers none of its sets; hk stays initialized
  (Horovod's init fails and leaves Horovod uninitialized).
- Sets that hk_init made from HK_PROCESS_SETS are found by their ranks
  when init's list names them, as Horovod finds the sets its init made.
- An MPI communicator is refused (ValueError).
Broadcast's ``root_rank`` is a rank of the job, as in Horovod
(``set_root`` maps it to hk's rank in the set).
"""

import ctypes
import threading

import hk as _hk
from hk._lib import WORLD
from hk.errors import not_initialized

__all__ = ["ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set"]

# hk.h: adds and removes one at a time per process (that makes their
# order the same on every rank); guards _live too
_lock = threading.RLock()
# the sets registered now, other than the world: id -> (ranks tuple,
# [ProcessSet objects holding the id])
_live = {}


def _unknown(ps):
    return ("Process set does not exist or has not been registered: %s "
            "(hk has no live set %s)" % (ps, ps.process_set_id))


def _require_init():
    if not _hk.is_initialized():
        raise not_initialized()


class ProcessSet:
    """A set of ranks that run collectives together: ``ProcessSet(ranks)``
    (an iterable of ranks of the job, sorted here), registered by
    ``hvd.init(process_sets=[...])`` or ``hvd.add_process_set``. An MPI
    communicator is refused (ValueError): hk's jobs do not come from MPI
    communicators. ``process_set_id`` is hk's id once registered, else
    None (also after remove_process_set)."""

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
        """The number of ranks in the set (hk_process_set_size), or None
        if not registered. ValueError before init and for a set hk no
        longer has."""
        if self.process_set_id is None:
            return None
        _require_init()
        n = _hk.lib().hk_process_set_size(self.process_set_id)
        if n < 0:
            raise ValueError(_unknown(self))
        return n

    def rank(self):
        """This process's rank within the set (0..size-1, in the order of
        the members' ranks in the job: hk_process_set_rank), or None if not
        registered. ValueError, as Horovod's, for a process outside the set.
        Collectives still take ranks of the job (a broadcast's root_rank),
        as in Horovod."""
        if self.process_set_id is None:
            return None
        _require_init()
        r = _hk.lib().hk_process_set_rank(self.process_set_id)
        if r < 0:
            self.size()  # raises for a set hk does not have
            raise ValueError("Process is not part of provided process set: "
                             "rank %d is not in %s" % (_hk.rank(), self))
        return r

    def included(self):
        """Whether this process belongs to the set (None if the set has no
        ranks)."""
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
    something that is not a registered ProcessSet (a removed one's id is
    None; hk refuses an id it no longer has)."""
    if process_set is None or process_set is global_process_set:
        return WORLD
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a hvd.ProcessSet, got %r" %
                         (process_set,))
    if process_set.process_set_id is None:
        raise ValueError("Process set provided does not exist, or has not "
                         "been registered: %s has not been registered "
                         "(hvd.init(process_sets=...) or hvd.add_process_set)"
                         " or was removed" % process_set)
    return process_set.process_set_id


def set_size(process_set):
    """The number of ranks of ``process_set`` (registered)."""
    set_id(process_set)
    return (process_set or global_process_set).size()


def set_root(process_set, root_rank):
    """A broadcast's root in hk's terms: Horovod names it by its rank in
    the job, hk.h by its rank in the set (the members in ascending order
    of their job ranks). ValueError when root_rank is not a member."""
    if set_id(process_set) == WORLD:
        return root_rank
    if root_rank not in process_set.ranks:
        raise ValueError("broadcast received invalid root rank %d for "
                         "provided process set: %s has no rank %d (root_rank"
                         " is a rank of the job)" %
                         (root_rank, process_set, root_rank))
    return process_set.ranks.index(root_rank)


# --------------------------------------------------- libhk's set table

def _add(ranks):
    """hk_process_set_add of ``ranks``: its id; hk's error raised (the
    same on every rank)."""
    arr = (ctypes.c_int * len(ranks))(*ranks)
    out = ctypes.c_int32(-1)
    _hk.check(_hk.lib().hk_process_set_add(arr, len(ranks),
                                           ctypes.byref(out)))
    _live[out.value] = (tuple(ranks), [])
    return out.value


def _remove(sid):
    """hk_process_set_remove of ``sid``; hk's error raised. The objects
    holding the id are invalidated either way."""
    _, holders = _live.pop(sid, ((), []))
    for ps in holders:
        ps._invalidate()
    _hk.check(_hk.lib().hk_process_set_remove(sid))


def _hold(ps, sid):
    ps.process_set_id = sid
    _live[sid][1].append(ps)


def _find(ranks):
    """The id of a live set of exactly ``ranks`` (WORLD for every rank of
    the job, as Horovod's table holds the global set), else None."""
    key = tuple(ranks)
    if key == tuple(range(_hk.size())):
        return WORLD
    for sid, (r, _) in _live.items():
        if r == key:
            return sid
    return None


def _reset():
    """A new job (hk_init just ran): forget the sets of a previous one
    (their objects are invalidated) and learn those hk_init made from
    HK_PROCESS_SETS (ids 1, 2, ... in order)."""
    for _, holders in _live.values():
        for ps in holders:
            ps._invalidate()
    _live.clear()
    L = _hk.lib()
    sid = 1
    while True:
        n = L.hk_process_set_size(sid)
        if n < 0:
            break
        arr = (ctypes.c_int * n)()
        _hk.check(L.hk_process_set_ranks(sid, arr, n))
        _live[sid] = (tuple(arr), [])
        sid += 1


# ------------------------------------------------------------- the API

def _agree(lists):
    """Checks that every rank of the job passed the same lists (one
    allgather over the world); ValueError on every rank naming which
    ranks gave which."""
    from .functions import allgather_object  # it uses this module
    everyone = allgather_object(lists, name="hk.init.process_sets")
    if all(x == lists for x in everyone):
        return
    groups = []
    for r, x in enumerate(everyone):
        for g in groups:
            if g[0] == x:
                g[1].append(r)
                break
        else:
            groups.append((x, [r]))
    raise ValueError(
        "hvd.init(process_sets=...): ranks disagree on the process sets: %s"
        % "; ".join("rank%s %s give%s %s" % (
            "s" if len(rs) > 1 else "", ", ".join(map(str, rs)),
            "" if len(rs) > 1 else "s", x) for x, rs in groups))


def init_process_sets(process_sets, fresh):
    """hvd.init(process_sets=...), after hk has joined the job (``fresh``:
    hk_init ran just now): registers each set of the list, as the module
    doc says; "dynamic" (any case) changes nothing."""
    with _lock:
        if fresh:
            _reset()
        if process_sets is None:
            return
        if isinstance(process_sets, str):
            if process_sets.lower() == "dynamic":
                return
            raise ValueError("process_sets must be a list of hvd.ProcessSet "
                             "or 'dynamic', got %r" % (process_sets,))
        sets = list(process_sets)
        for ps in sets:
            if not isinstance(ps, ProcessSet):
                raise ValueError("process_sets must hold hvd.ProcessSet "
                                 "objects, got %r" % (ps,))
        _agree([list(ps.ranks) for ps in sets])
        first = {tuple(range(_hk.size())): "the global process set"}
        for i, ps in enumerate(sets):
            j = first.setdefault(tuple(ps.ranks), "entry number %d" % i)
            if j != "entry number %d" % i:
                raise ValueError(
                    "hk could not register the process sets: process_sets "
                    "entry number %d is a duplicate of %s: %s" % (i, j, ps))
        before = [ps.process_set_id for ps in sets]
        added = []
        try:
            for ps in sets:
                sid = _find(ps.ranks)
                if sid is None:
                    sid = _add(ps.ranks)
                    added.append(sid)
                _hold(ps, sid)
        except BaseException:
            for sid in added:  # the same on every rank: hk failed alike
                try:
                    _remove(sid)
                except Exception:  # pragma: no cover - the job failed
                    pass
            for ps, sid in zip(sets, before):
                ps.process_set_id = sid
            raise


def add_process_set(process_set):
    """Registers a new set (a ProcessSet or a list of ranks of the job) and
    returns it, registered: a collective of the whole job (every rank
    calls it with the same ranks, members or not). ValueError for a set
    whose ranks a live set already has (Horovod's duplicate) and for what
    hk refuses (a rank outside the job or twice, no rank: hk's message,
    on every rank); HorovodInternalError when ranks passed different sets
    (hk's HK_ERR_MISMATCH, naming them, on every rank)."""
    _require_init()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    with _lock:
        same = _find(process_set.ranks)
        if same is not None:
            raise ValueError("Attempted to add a duplicate process set: %s "
                             "(process set %d has these ranks)" %
                             (process_set, same))
        _hold(process_set, _add(process_set.ranks))
    return process_set


def remove_process_set(process_set):
    """Removes a registered set and returns True, invalidating it (its
    process_set_id becomes None): a collective of the whole job, as
    add_process_set. Operations of the set still pending complete with
    HorovodInternalError naming it (hk_process_set_remove). Returns False
    for the global set and for a set not registered or removed already,
    as Horovod."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError("remove_process_set: expected a hvd.ProcessSet, got "
                         "%r" % (process_set,))
    sid = process_set.process_set_id
    if sid is None or sid == WORLD:
        return False
    _require_init()
    with _lock:
        process_set._invalidate()
        if sid not in _live:
            return False
        _remove(sid)
    return True
