"""hk's exceptions, arranged so that Horovod's ``except`` clauses work.

Horovod raises, for the same situations (horovod/common/exceptions.py and
horovod/torch/mpi_ops.py):

- ``HorovodInternalError`` (a RuntimeError) when a collective fails: ranks
  that disagree on a tensor, a rank that died, a timeout, a shutdown;
  raised by ``synchronize()`` (and so by the blocking forms);
- ``ValueError`` for refused arguments, for a name already in flight on
  this rank, and for a query before ``init()``;
- ``HostsUpdatedInterrupt`` (a RuntimeError) in elastic mode when the
  hosts change. hk admits no new hosts to a running job yet and never
  raises it; ``hk.torch.elastic.run`` handles it as Horovod's does.

In an elastic job (hkrun --min-np) a lost rank fails the others' calls
with HK_ERR_RANKS_CHANGED, an HKInternalError (so a HorovodInternalError,
which ``hk.torch.elastic.run`` catches to restore and re-form).

hk's classes carry hk's message (``hk_last_error()``: it names the tensor,
the ranks and the values that disagree), ``status`` (the hk_status
number) and ``status_name`` (``"HK_ERR_MISMATCH"``, ...), and each is
also the Horovod class for its situation, so ``except
hvd.HorovodInternalError`` and ``except hk.HKError`` both catch a failed
collective:

=========================  ==========================================
status                     class (bases)
=========================  ==========================================
HK_ERR_INVALID_ARG         HKInvalidArgument (HKError, ValueError)
HK_ERR_DUPLICATE_NAME      HKDuplicateName (HKError, ValueError)
HK_ERR_NOT_INITIALIZED     HKNotInitialized (HKError,
                           HorovodInternalError, ValueError): Horovod
                           raises ValueError from queries and
                           HorovodInternalError from collectives
everything else            HKInternalError (HKError,
                           HorovodInternalError)
=========================  ==========================================
"""

__all__ = [
    "HorovodInternalError", "HostsUpdatedInterrupt", "HKError",
    "HKInternalError", "HKInvalidArgument", "HKDuplicateName",
    "HKNotInitialized", "STATUS_NAMES", "error_for", "not_initialized",
]

#: hk_status values (hk.h), by number.
STATUS_NAMES = {
    0: "HK_OK", 1: "HK_ERR_INVALID_ARG", 2: "HK_ERR_NOT_INITIALIZED",
    3: "HK_ERR_ALREADY_INITIALIZED", 4: "HK_ERR_MISMATCH",
    5: "HK_ERR_DUPLICATE_NAME", 6: "HK_ERR_PEER_LOST", 7: "HK_ERR_SHUTDOWN",
    8: "HK_ERR_TIMEOUT", 9: "HK_ERR_AUTH", 10: "HK_ERR_PROTOCOL",
    11: "HK_ERR_SYSTEM", 12: "HK_ERR_NOMEM", 13: "HK_ERR_CONFIG",
    14: "HK_ERR_STALLED", 15: "HK_ERR_DEVICE", 16: "HK_ERR_RANKS_CHANGED",
}
INVALID_ARG = 1
NOT_INITIALIZED = 2
DUPLICATE_NAME = 5
RANKS_CHANGED = 16


class HorovodInternalError(RuntimeError):
    """Horovod's class for a failed collective (a RuntimeError); hk raises
    HKInternalError, a subclass."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic-mode interrupt when the set of hosts changes:
    raised by State.check_host_updates (at commit) when workers wait to
    join the job. ``skip_sync`` as Horovod's."""

    def __init__(self, skip_sync=False):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


class HKError(Exception):
    """An hk call failed. ``str(e)`` is hk's own message; ``e.status`` is
    the hk_status number and ``e.status_name`` its name. Every instance is
    one of the subclasses below, each also the class Horovod raises for
    the same failure."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, "HK_ERR_%d" % status)
        super().__init__(message)


class HKInternalError(HKError, HorovodInternalError):
    """A collective failed: ranks disagree (HK_ERR_MISMATCH), a peer was
    lost, a timeout, a shutdown, ... (a HorovodInternalError)."""


class HKInvalidArgument(HKError, ValueError):
    """hk refused an argument (HK_ERR_INVALID_ARG): a ValueError."""


class HKDuplicateName(HKError, ValueError):
    """The name is already in flight on this rank (HK_ERR_DUPLICATE_NAME):
    a ValueError, as in Horovod."""


class HKNotInitialized(HKError, HorovodInternalError, ValueError):
    """hk has not been initialized (HK_ERR_NOT_INITIALIZED)."""


_BY_STATUS = {INVALID_ARG: HKInvalidArgument, DUPLICATE_NAME: HKDuplicateName,
              NOT_INITIALIZED: HKNotInitialized}


def error_for(status, message):
    """The exception for hk_status ``status`` with ``message``."""
    return _BY_STATUS.get(status, HKInternalError)(status, message)


def not_initialized():
    """What a call before init() raises (Horovod's words)."""
    return HKNotInitialized(NOT_INITIALIZED,
                            "hk has not been initialized; use hvd.init().")
