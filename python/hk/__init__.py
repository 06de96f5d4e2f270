"""hk from Python: the job (init, rank, size, ...) and hk's errors.

A pure-Python layer over libhk's public C API (include/hk/hk.h) through
ctypes: nothing is compiled against a particular Python or PyTorch. The
framework bindings live in subpackages: ``import hk.torch as hvd`` gives
Horovod's ``horovod.torch`` surface.

Which libhk is used and why: :func:`library_path`, :func:`library_reason`
(the search order is in :mod:`hk._lib`).

Run under ``hkrun -np N python3 train.py``; started without hkrun a
process is a world of one.
"""

import atexit
import ctypes
import threading

from . import _lib
from ._lib import LibraryNotFound
from .errors import (HKError, HKInternalError, HKInvalidArgument,
                     HKDuplicateName, HKNotInitialized, HorovodInternalError,
                     HostsUpdatedInterrupt, STATUS_NAMES, not_initialized)
from . import errors as _errors

__version__ = "0.1.0"

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
    "local_size", "cross_rank", "cross_size", "barrier", "join",
    "library_path", "library_reason", "HKError", "HKInternalError",
    "HKInvalidArgument", "HKDuplicateName", "HKNotInitialized",
    "HorovodInternalError", "HostsUpdatedInterrupt", "LibraryNotFound",
    "STATUS_NAMES",
]


def lib():
    """The loaded libhk (a ctypes.CDLL with hk.h's functions declared)."""
    return _lib.load()


def library_path():
    """The libhk file this process loaded."""
    return _lib.library_path()


def library_reason():
    """Why that file: 'HK_LIBRARY=...', 'next to the hk package', ..."""
    return _lib.library_reason()


def error_from(status):
    """The exception for a failed hk call (hk.errors says which class),
    with hk_last_error() of this thread (call it right after the failing
    call, on the same thread)."""
    L = lib()
    msg = L.hk_last_error()
    msg = msg.decode("utf-8", "replace") if msg else ""
    if not msg:
        s = L.hk_strerror(status)
        msg = s.decode() if s else "hk status %d" % status
    return _errors.error_for(status, msg)


def check(status):
    """Raises error_from(status) unless status is HK_OK."""
    if status != 0:
        raise error_from(status)


_state_lock = threading.RLock()
_initialized = False
_atexit_registered = False
# Handles submitted and not yet waited: they hold the buffers hk writes
# into, and hk needs each waited exactly once. shutdown() collects them.
_pending = {}


def init():
    """Joins the job (hk_init): reads what hkrun set; without hkrun the
    process is a world of one. Calling it again while initialized does
    nothing (as in Horovod). Registers hk_shutdown to run at exit: under
    hkrun a process whose hk_init succeeded must shut down before exiting.
    Raises HKInternalError (a HorovodInternalError) with hk's message when
    hk_init fails (HK_ERR_TIMEOUT, HK_ERR_CONFIG naming the variable, ...)
    and LibraryNotFound when libhk cannot be loaded."""
    global _initialized, _atexit_registered
    with _state_lock:
        if _initialized:
            return
        L = lib()
        check(L.hk_init())
        _initialized = True
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True


def _at_exit():
    try:
        shutdown()
    except Exception:  # pragma: no cover - never fail the interpreter's exit
        pass


def shutdown():
    """Leaves the job (hk_shutdown). Operations still pending complete with
    HK_ERR_SHUTDOWN; their buffers are released here. Does nothing when
    not initialized, and never raises (a failure the job already had was
    raised by the operation that met it)."""
    global _initialized
    with _state_lock:
        if _initialized:
            lib().hk_shutdown()
            _initialized = False
        # each leaves _pending when collected (Handle._release), so a
        # shutdown interrupted here (Ctrl-C) leaves the rest to the next
        # call (the exit hook): it is idempotent
        pending = list(_pending.values())
    for h in pending:
        h._collect_after_shutdown()


def elastic_reset():
    """Re-forms an elastic job (hkrun --min-np) after a call failed with
    HK_ERR_RANKS_CHANGED (hk_elastic_reset): the survivors get new ranks
    0..size()-1. Handles of the old job are collected first (they completed
    with that error, which a later synchronize() raises). Raises as the
    collectives do: HKInternalError with HK_ERR_RANKS_CHANGED when another
    rank was lost meanwhile (call it again), HK_ERR_PEER_LOST with hkrun's
    message when the job ended (e.g. below --min-np); HKInvalidArgument
    when nothing changed or the job is not elastic."""
    with _state_lock:
        if not _initialized:
            raise not_initialized()
        pending = list(_pending.values())
    for h in pending:
        h._collect_after_shutdown()
    check(lib().hk_elastic_reset())


def elastic_hosts_updated():
    """True when workers wait to join the elastic job
    (hk_elastic_hosts_updated: a flag every rank reads the same at the same
    commit, no collective); then elastic_reset() admits them. Raises as
    the collectives do when the job has failed."""
    updated = ctypes.c_int(0)
    check(lib().hk_elastic_hosts_updated(ctypes.byref(updated)))
    return bool(updated.value)


def is_initialized():
    """True between init() and shutdown()."""
    return _initialized


def _query(fn):
    if not _initialized:
        raise not_initialized()
    return getattr(lib(), fn)()


def rank():
    """This process's rank in [0, size())."""
    return _query("hk_rank")


def size():
    """The number of ranks in the job."""
    return _query("hk_size")


def local_rank():
    """The rank among the processes on this host."""
    return _query("hk_local_rank")


def local_size():
    """The number of ranks on this host."""
    return _query("hk_local_size")


def cross_rank():
    """The index of this rank's host among the job's hosts."""
    return _query("hk_cross_rank")


def cross_size():
    """The number of hosts in the job."""
    return _query("hk_cross_size")


def barrier():
    """Blocks until every rank has called barrier() (hk_barrier)."""
    if not _initialized:
        raise not_initialized()
    check(lib().hk_barrier())


def join():
    """Horovod's join (hk_join): blocks until every rank has joined; until
    then this rank takes part in the others' collectives with the op's
    identity. Returns the rank that joined last."""
    if not _initialized:
        raise not_initialized()
    last = ctypes.c_int(-1)
    check(lib().hk_join(ctypes.byref(last)))
    return last.value
