"""Loading libhk and declaring its C API (include/hk/hk.h) for ctypes.

Where libhk is looked for, in this order (the first that loads wins):

1. ``HK_LIBRARY``: a path to the shared library, or a folder holding
   ``libhk.so``. When it is set, nothing else is tried: a wrong value is an
   error, never silently replaced by another copy.
2. Next to this package: ``hk/libhk.so`` (``pip install ./python`` from
   a checkout builds it with CMake and ships it there; python/setup.py).
   Where ``cmake --install`` put the package: the libdir it installed
   libhk.so into (``hk/_installed.py``).
3. The build tree, when this package is ``python/hk`` of an hk checkout:
   ``<checkout>/build/libhk.so`` (what ``scripts/build.sh`` makes).
4. The system: the dynamic loader's search (``LD_LIBRARY_PATH``, the
   ldconfig cache, where ``cmake --install`` put it) for ``libhk.so``.

:func:`load` returns the loaded library; :func:`library_path` and
:func:`library_reason` say which file it was and why it was chosen. When
none loads, :class:`LibraryNotFound` (an ``ImportError``) lists every place
tried and what the loader said about each.
"""

import ctypes
import ctypes.util
import os
import threading

__all__ = ["load", "library_path", "library_reason", "LibraryNotFound",
           "Collective", "ALLREDUCE", "BROADCAST", "BARRIER", "ALLGATHER",
           "REDUCESCATTER", "ALLTOALL", "WORLD", "MAX_DIMS"]


class LibraryNotFound(ImportError):
    """libhk could not be loaded; the message lists each attempt."""


_lock = threading.Lock()
_lib = None
_path = None
_reason = None

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    """(path or loader name, why) in the order they are tried."""
    env = os.environ.get("HK_LIBRARY")
    if env:
        p = env
        if os.path.isdir(p):
            p = os.path.join(p, "libhk.so")
        return [(p, "HK_LIBRARY=%s" % env)], True
    out = [(os.path.join(_here, "libhk.so"), "next to the hk package")]
    try:  # written by cmake --install: the libdir, relative to the package
        from . import _installed
        out.append((os.path.normpath(os.path.join(_here, _installed.LIBDIR,
                                                  "libhk.so")),
                    "where cmake --install put it"))
    except ImportError:
        pass
    root = os.path.normpath(os.path.join(_here, "..", ".."))
    if os.path.exists(os.path.join(root, "include", "hk", "hk.h")):
        out.append((os.path.join(root, "build", "libhk.so"),
                    "the build tree of the checkout holding this package"))
    found = ctypes.util.find_library("hk")
    if found:
        out.append((found, "the system's library path (ctypes.util.find_library)"))
    out.append(("libhk.so", "the dynamic loader's search path"))
    return out, False


# hk_collective_kind (hk.h)
ALLREDUCE, BROADCAST, BARRIER, ALLGATHER, REDUCESCATTER, ALLTOALL = \
    1, 2, 3, 4, 5, 6
#: HK_WORLD: the process set of every rank
WORLD = 0
#: HK_MAX_DIMS: the most dimensions a shape passed to hk may have
MAX_DIMS = 8


class Collective(ctypes.Structure):
    """hk.h's hk_collective: one collective, described whole (the fields
    each kind reads are in hk.h). Zero-initialised by ctypes."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("set", ctypes.c_int32),
        ("dtype", ctypes.c_int),
        ("op", ctypes.c_int),
        ("sendbuf", ctypes.c_void_p),
        ("recvbuf", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("rows", ctypes.c_size_t),
        ("row_elems", ctypes.c_size_t),
        ("root", ctypes.c_int),
        ("prescale", ctypes.c_double),
        ("postscale", ctypes.c_double),
        ("splits", ctypes.POINTER(ctypes.c_size_t)),
        ("recvbuf_out", ctypes.POINTER(ctypes.c_void_p)),
        ("rows_out", ctypes.POINTER(ctypes.c_size_t)),
        ("ndims", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
    ]


def _declare(lib):
    c = ctypes
    st = c.c_int
    vp = c.c_void_p
    h_p = c.POINTER(c.c_void_p)
    coll_p = c.POINTER(Collective)
    decl = {
        "hk_init": (st, []),
        "hk_shutdown": (st, []),
        "hk_elastic_reset": (st, []),
        "hk_elastic_hosts_updated": (st, [c.POINTER(c.c_int)]),
        "hk_rank": (c.c_int, []),
        "hk_size": (c.c_int, []),
        "hk_local_rank": (c.c_int, []),
        "hk_local_size": (c.c_int, []),
        "hk_cross_rank": (c.c_int, []),
        "hk_cross_size": (c.c_int, []),
        "hk_submit": (st, [coll_p, h_p]),
        "hk_submit_group": (st, [coll_p, c.c_size_t, h_p]),
        "hk_join": (st, [c.POINTER(c.c_int)]),
        "hk_process_set_add": (st, [c.POINTER(c.c_int), c.c_int,
                                    c.POINTER(c.c_int32)]),
        "hk_process_set_remove": (st, [c.c_int32]),
        "hk_process_set_rank": (c.c_int, [c.c_int32]),
        "hk_process_set_size": (c.c_int, [c.c_int32]),
        "hk_process_set_ranks": (st, [c.c_int32, c.POINTER(c.c_int), c.c_int]),
        "hk_wait": (st, [vp]),
        "hk_poll": (st, [vp, c.POINTER(c.c_int)]),
        "hk_barrier": (st, []),
        "hk_set_stream": (None, [vp]),
        "hk_get_stream": (vp, []),
        "hk_wait_stream": (st, [vp, vp]),
        "hk_device_stream": (vp, []),
        "hk_free": (None, [vp]),
        "hk_strerror": (c.c_char_p, [c.c_int]),
        "hk_last_error": (c.c_char_p, []),
    }
    missing = []
    for name, (res, args) in decl.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype = res
        f.argtypes = args
    return missing


def load():
    """Loads libhk once (thread-safe) and returns the ctypes.CDLL."""
    global _lib, _path, _reason
    with _lock:
        if _lib is not None:
            return _lib
        cands, explicit = _candidates()
        tried = []
        for path, why in cands:
            is_name = os.sep not in path
            if not is_name and not os.path.exists(path):
                tried.append("  %s (%s): no such file" % (path, why))
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("  %s (%s): %s" % (path, why, e))
                continue
            missing = _declare(lib)
            if missing:
                tried.append(
                    "  %s (%s): loaded, but it lacks %s (not libhk, or an "
                    "older one)" % (path, why, ", ".join(missing)))
                continue
            _lib = lib
            _path = path
            if is_name:
                # the loader found it somewhere: say where, if we can
                try:
                    import re
                    with open("/proc/self/maps") as f:
                        for line in f:
                            m = re.search(r"(/\S*libhk\.so\S*)$", line.strip())
                            if m:
                                _path = m.group(1)
                                break
                except OSError:
                    pass
            _reason = why
            return lib
        hint = ("" if explicit else
                "\nBuild it (scripts/build.sh build) and run from the checkout, "
                "set HK_LIBRARY to its path, or install it where the loader "
                "looks (cmake --install build).")
        raise LibraryNotFound(
            "hk: cannot load libhk; tried:\n" + "\n".join(tried) + hint)


def library_path():
    """The file libhk was loaded from (loads it if needed)."""
    load()
    return _path


def library_reason():
    """Why that file was chosen: 'HK_LIBRARY=...', 'the build tree ...'."""
    load()
    return _reason
