"""Handing torch tensors to libhk, the one way: each tensor becomes one
description (hk.h's hk_collective: its kind, dtype, buffers, process set
and shape), submitted alone (hk_submit) or as a group that hk negotiates
as one unit (hk_submit_group); a Handle waits for it and makes the
result.

The kinds are a table (KINDS): each entry turns a tensor and the call's
arguments into a Part (the description, what must stay alive until hk is
done with it, how to make the result and what to free), so the single
and the grouped forms of every collective share it.

Tensors
- CPU tensors of hk's dtypes (DTYPES); others are refused with
  ValueError naming the type (Horovod's words: "Tensor type ... is not
  supported"). CUDA tensors go to hk as device pointers with PyTorch's
  current stream as the producer stream (hk_set_stream); allgather and
  alltoall of CUDA tensors are staged through host memory here and the
  result is copied back to the tensor's device. When an operation
  completes, its CUDA tensors are marked as used on hk's own stream
  (record_on_hk_stream): PyTorch's caching allocator then reuses their
  memory only after hk's reads and writes of it.
- A non-contiguous tensor is copied into a contiguous one, reduced there
  and (in place) copied back.
- Every description carries the tensor's shape (a 0-d tensor: none), so
  ranks that pass different shapes fail on every rank with hk's message
  naming both (for allgather and alltoall the first extent may differ).
- Integer tensors with scale factors other than 1: Horovod scales
  integers in float64 and truncates; hk's C API takes factors for
  floating tensors, so the scaling is done here, in float64, around an
  unscaled reduction (an Average then sums, and the division by the set's
  size joins the postscale, as Horovod's).
"""

import ctypes
import threading

import torch

import hk as _hk
from hk import _lib as hklib
from hk import error_from, check
from hk.errors import HKInternalError, INVALID_ARG, not_initialized

from .process_sets import set_id, set_root, set_size

# hk.h's hk_dtype by torch dtype (Horovod's ten: bool is moved by
# broadcast, allgather and alltoall; libhk refuses to reduce it, naming the
# tensor).
DTYPES = {
    torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float64: 3,
    torch.int8: 4, torch.uint8: 5, torch.int32: 6, torch.int64: 7,
    torch.int16: 8, torch.bool: 9,
}

# Horovod's op constants (horovod.common's values), mapped to hk_op.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
HK_OP = {Average: 1, Sum: 0, Min: 2, Max: 3, Product: 4}
ADASUM = ("hk does not implement Adasum (op=hvd.Adasum); use hvd.Average "
          "or hvd.Sum")


def lib():
    return _hk.lib()


def require_init():
    if not _hk.is_initialized():
        raise not_initialized()


def hk_dtype(t):
    try:
        return DTYPES[t.dtype]
    except KeyError:
        raise ValueError(
            "Tensor type %s is not supported: hk takes %s" %
            (t.type(), ", ".join(str(d).replace("torch.", "")
                                 for d in DTYPES))) from None


def check_tensor(t, what):
    """hk's dtype of ``t``; ValueError for what hk cannot take."""
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s: expected a torch.Tensor, got %s" %
                         (what, type(t).__name__))
    if t.is_sparse:
        raise ValueError("%s: sparse tensors are not supported (pass "
                         "tensor.to_dense(), or use sparse_allreduce_async)"
                         % what)
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: tensors on %s are not supported (CPU and CUDA "
                         "only)" % (what, t.device))
    return hk_dtype(t)


def resolve_op(op, average, default=Average):
    """Horovod's op from ``op`` and the deprecated ``average``."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please "
                         "provide only one of them.")
    if average is not None:
        import warnings
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed", DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = default
    if op == Adasum:
        raise NotImplementedError(ADASUM)
    if op not in HK_OP:
        raise ValueError("unknown op %r: use hvd.Average, hvd.Sum, hvd.Min, "
                         "hvd.Max or hvd.Product" % (op,))
    return op


_name_lock = threading.Lock()
_name_counters = {}


def op_name(kind, name):
    """hk's name of one operation: '<kind>.<name>', or '<kind>.noname.<n>'
    with a per-kind counter (the same on every rank that makes the same
    calls in the same order)."""
    if name is None:
        with _name_lock:
            n = _name_counters.get(kind, 0)
            _name_counters[kind] = n + 1
        return "%s.noname.%d" % (kind, n)
    if not isinstance(name, str):
        raise TypeError("name must be a str, got %s" % type(name).__name__)
    return "%s.%s" % (kind, name)


def suffixed(name, suffix):
    """A name derived from the user's ``name`` (None stays None)."""
    return None if name is None else name + suffix


def _ptr(t):
    return t.data_ptr() if t.numel() else None


def _contig(t):
    return t if t.is_contiguous() else t.contiguous()


def _host(tensor):
    """``tensor`` detached, in host memory (a CUDA tensor is staged) and
    contiguous."""
    src = tensor.detach()
    if src.is_cuda:
        src = src.cpu()
    return _contig(src)


def _rows(shape):
    """(rows, elements per row) of a shape; a 0-d tensor is one row."""
    if not shape:
        return 1, 1
    row = 1
    for d in shape[1:]:
        row *= d
    return shape[0], row


class Part:
    """One tensor of one submission: ``desc`` (the hk_collective), ``keep``
    (what hk reads or writes until it is done), ``finish()`` (the result,
    once hk is done), ``cleanup()`` (frees what hk allocated; may run
    more than once), ``device`` (where the result lives), ``info`` (the
    kind's extra outputs, e.g. an allgather's rows per rank) and
    ``stream_of`` (the CUDA tensor whose stream produced the input)."""

    __slots__ = ("desc", "keep", "finish", "cleanup", "device", "info",
                 "stream_of")

    def __init__(self, desc, keep, finish, device, cleanup=None,
                 stream_of=None):
        self.desc, self.keep, self.finish = desc, keep, finish
        self.device, self.cleanup, self.stream_of = device, cleanup, stream_of
        self.info = None


def _describe(kind, hk_name, dtype, process_set, shape, **fields):
    """An hk_collective and the ctypes objects it points to."""
    c = hklib.Collective()
    keep = [hk_name.encode()]
    c.kind, c.name, c.dtype = kind, keep[0], dtype
    c.set = set_id(process_set)
    shape = tuple(int(d) for d in shape)
    if shape:
        if len(shape) > hklib.MAX_DIMS:
            raise ValueError("tensor '%s': %d dimensions, hk takes at most "
                             "%d" % (hk_name, len(shape), hklib.MAX_DIMS))
        arr = (ctypes.c_int64 * len(shape))(*shape)
        keep.append(arr)
        c.ndims, c.shape = len(shape), arr
    for k, v in fields.items():
        setattr(c, k, v)
    return c, keep


def _int_scaling(tensor, op, prescale, postscale, process_set):
    """Horovod's scaling of an integer tensor, done here (module doc):
    (op for hk, input to send, factor to apply to the result or None)."""
    pre, post = float(prescale), float(postscale)
    if tensor.dtype.is_floating_point or (pre == 1.0 and post == 1.0):
        return op, None, None
    src = (tensor.double() * pre).to(tensor.dtype) if pre != 1.0 else None
    if op == Average:
        op, post = Sum, post / set_size(process_set)
    return op, src, post


def _scaled_back(out, post):
    """out *= post in float64, truncated to out's type (in place)."""
    if post is not None and post != 1.0:
        out.copy_((out.double() * post).to(out.dtype))
    return out


def _finisher(tensor, t, out, inplace, post=None):
    """The finish() of a result hk writes into ``out``: out of place,
    ``out``; in place, ``tensor``, with ``out`` copied into it when it is
    a contiguous copy rather than ``t`` (``tensor.detach()``) itself."""
    def finish():
        with torch.no_grad():
            _scaled_back(out, post)
            if not inplace:
                return out
            if out is not t:
                tensor.copy_(out)
        return tensor
    return finish


def allreduce_part(tensor, hk_name, process_set, inplace=False, op=Average,
                   prescale_factor=1.0, postscale_factor=1.0):
    dt = check_tensor(tensor, "allreduce")
    t = tensor.detach()
    out = _contig(t) if inplace else torch.empty(
        t.shape, dtype=t.dtype, device=t.device)
    op, scaled, post = _int_scaling(t, op, prescale_factor, postscale_factor,
                                    process_set)
    src = scaled if scaled is not None else (out if inplace else _contig(t))
    factors = (1.0, 1.0) if post is not None or scaled is not None else (
        float(prescale_factor), float(postscale_factor))
    desc, keep = _describe(hklib.ALLREDUCE, hk_name, dt, process_set, t.shape,
                           op=HK_OP[op], sendbuf=_ptr(src), recvbuf=_ptr(out),
                           count=t.numel(), prescale=factors[0],
                           postscale=factors[1])
    return Part(desc, keep + [tensor, src, out],
                _finisher(tensor, t, out, inplace, post), out.device,
                stream_of=src)


def broadcast_part(tensor, hk_name, process_set, inplace=False, root_rank=0):
    dt = check_tensor(tensor, "broadcast")
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError("broadcast: root_rank must be an int, got %r" %
                        (root_rank,))
    root = set_root(process_set, root_rank)
    t = tensor.detach()
    buf = _contig(t) if inplace else t.clone(
        memory_format=torch.contiguous_format)
    desc, keep = _describe(hklib.BROADCAST, hk_name, dt, process_set, t.shape,
                           recvbuf=_ptr(buf), count=t.numel(), root=root)
    return Part(desc, keep + [tensor, buf], _finisher(tensor, t, buf, inplace),
                buf.device, stream_of=buf)


def _from_hk_buffer(out_ptr, rows, shape, dtype, device):
    """A new tensor on ``device`` of sum(rows) rows shaped like ``shape``'s,
    copied out of the host buffer hk allocated at ``out_ptr``."""
    out = torch.empty((sum(rows),) + tuple(shape[1:]), dtype=dtype)
    nbytes = out.numel() * out.element_size()
    if nbytes:
        ctypes.memmove(out.data_ptr(), out_ptr.value, nbytes)
    return out.to(device) if device.type != "cpu" else out


def _freer(out_ptr):
    """Frees the buffer hk allocated at ``out_ptr`` (once)."""
    def cleanup():
        if out_ptr.value:
            lib().hk_free(out_ptr)
            out_ptr.value = None
    return cleanup


def allgather_part(tensor, hk_name, process_set):
    dt = check_tensor(tensor, "allgather")
    src = _host(tensor)
    shape = tuple(src.shape) or (1,)
    rows, row = _rows(tuple(src.shape))
    out_ptr = ctypes.c_void_p()
    per_rank = (ctypes.c_size_t * set_size(process_set))()
    desc, keep = _describe(hklib.ALLGATHER, hk_name, dt, process_set,
                           src.shape, sendbuf=_ptr(src), rows=rows,
                           row_elems=row, recvbuf_out=ctypes.pointer(out_ptr),
                           rows_out=per_rank)

    def finish():
        part.info = [int(x) for x in per_rank]
        return _from_hk_buffer(out_ptr, part.info, shape, src.dtype,
                               tensor.device)
    part = Part(desc, keep + [src, out_ptr, per_rank], finish, tensor.device,
                _freer(out_ptr))
    return part


def reducescatter_part(tensor, hk_name, process_set, op=Average,
                       prescale_factor=1.0, postscale_factor=1.0):
    dt = check_tensor(tensor, "reducescatter")
    if tensor.dim() == 0:
        # Horovod refuses it in its negotiation, on every rank, with a
        # HorovodInternalError; a 0-d tensor has no rows to scatter
        raise HKInternalError(
            INVALID_ARG, "tensor '%s': tried to reducescatter a rank-zero "
            "tensor (0 dimensions: no first dimension to scatter)" % hk_name)
    t = tensor.detach()
    op, scaled, post = _int_scaling(t, op, prescale_factor, postscale_factor,
                                    process_set)
    src = scaled if scaled is not None else _contig(t)
    factors = (1.0, 1.0) if post is not None or scaled is not None else (
        float(prescale_factor), float(postscale_factor))
    rows, row = _rows(tuple(src.shape))
    n = set_size(process_set)
    cap = -(-rows // n)
    out = torch.empty((cap,) + tuple(src.shape[1:]), dtype=src.dtype,
                      device=src.device)
    rows_out = ctypes.c_size_t(0)
    desc, keep = _describe(hklib.REDUCESCATTER, hk_name, dt, process_set,
                           src.shape, op=HK_OP[op], sendbuf=_ptr(src),
                           recvbuf=_ptr(out), rows=rows, row_elems=row,
                           prescale=factors[0], postscale=factors[1],
                           rows_out=ctypes.pointer(rows_out))

    def finish():
        res = out.narrow(0, 0, rows_out.value)
        with torch.no_grad():
            return _scaled_back(res, post)
    return Part(desc, keep + [src, out, rows_out], finish, src.device,
                stream_of=src)


def _splits_list(splits, rows, n):
    """The alltoall's rows to each rank, checked as Horovod checks them
    (ValueError)."""
    if splits is None:
        if rows % n:
            raise ValueError(
                "alltoall: splits not provided, but first dimension of "
                "tensor (%d) is not an even multiple of the number of "
                "ranks (%d)" % (rows, n))
        return [rows // n] * n
    if isinstance(splits, torch.Tensor):
        if splits.dim() > 1:
            raise ValueError("alltoall expects a 1D splits tensor")
        sp = [int(x) for x in splits.detach().cpu().reshape(-1).tolist()]
    else:
        sp = [int(x) for x in splits]
    if len(sp) != n:
        raise ValueError("alltoall: number of entries in splits (%d) does not "
                         "equal the number of ranks (%d)" % (len(sp), n))
    if any(x < 0 for x in sp) or sum(sp) != rows:
        raise ValueError("alltoall: splits %r must be non-negative and sum to "
                         "the first dimension of the tensor (%d)" % (sp, rows))
    return sp


def alltoall_part(tensor, hk_name, process_set, splits=None):
    dt = check_tensor(tensor, "alltoall")
    src = _host(tensor)
    shape = tuple(src.shape) or (1,)
    rows, row = _rows(tuple(src.shape))
    n = set_size(process_set)
    c_splits = (ctypes.c_size_t * n)(*_splits_list(splits, rows, n))
    recv = (ctypes.c_size_t * n)()
    out_ptr = ctypes.c_void_p()
    desc, keep = _describe(hklib.ALLTOALL, hk_name, dt, process_set,
                           src.shape, sendbuf=_ptr(src), row_elems=row,
                           splits=c_splits, recvbuf_out=ctypes.pointer(out_ptr),
                           rows_out=recv)

    def finish():
        got = [int(x) for x in recv]
        out = _from_hk_buffer(out_ptr, got, shape, src.dtype, tensor.device)
        return out, torch.tensor(got, dtype=torch.int32)
    return Part(desc, keep + [src, c_splits, recv, out_ptr], finish,
                tensor.device, _freer(out_ptr))


def barrier_part(tensor, hk_name, process_set):
    """A barrier of the set's members (hk.h's HK_BARRIER: named by its
    order on the set, so hk ignores the name); ``tensor`` is None and the
    result None."""
    desc, keep = _describe(hklib.BARRIER, hk_name, 0, process_set, ())
    return Part(desc, keep, lambda: None, None)


#: The kinds: name -> the function making a Part of one tensor
#: (tensor, hk name, process set, **the kind's arguments).
KINDS = {
    "barrier": barrier_part,
    "allreduce": allreduce_part,
    "broadcast": broadcast_part,
    "allgather": allgather_part,
    "reducescatter": reducescatter_part,
    "alltoall": alltoall_part,
}


def _set_stream(parts):
    """Tells hk (per thread) which stream produced the CUDA inputs."""
    for p in parts:
        t = p.stream_of
        if t is not None and t.is_cuda:
            s = torch.cuda.current_stream(t.device).cuda_stream
            lib().hk_set_stream(ctypes.c_void_p(s))
            return


def _external_stream(ptr, device):
    """hk's stream as a torch stream (a CUDA build of torch only)."""
    return torch.cuda.ExternalStream(ptr, device=device)


def record_on_hk_stream(parts, stream_ptr, make_stream=None):
    """Marks every CUDA tensor that ``parts`` hold for hk (their ``keep``)
    as used on hk's own stream, ``stream_ptr`` (hk_device_stream()), with
    tensor.record_stream: PyTorch's caching allocator then hands the
    tensor's memory to other work only after what hk has queued on that
    stream so far, its reads and writes of the tensor, has run.
    hk_wait_stream returns once hk has queued that work, not done it, and
    the handle drops its references right after; without the mark, a
    block freed to another stream could be reused and written before hk's
    pack read it. Call it after hk_wait_stream / hk_wait returned.
    Nothing to mark when ``stream_ptr`` is NULL (no device backend).
    ``make_stream(ptr, device)`` makes the torch stream (default:
    torch.cuda.ExternalStream, made once per call). Returns how many
    tensors were marked (each once)."""
    if not stream_ptr:
        return 0
    make = make_stream or _external_stream
    seen, stream, marked = set(), None, 0
    for p in parts:
        for t in p.keep or ():
            if getattr(t, "is_cuda", False) is not True or id(t) in seen:
                continue
            seen.add(id(t))
            if stream is None:
                stream = make(stream_ptr, t.device)
            t.record_stream(stream)
            marked += 1
    return marked


def start(kind, tensors, name, process_set, group=False, **args):
    """Submits ``kind`` of each tensor (``group``: as one hk group named
    '<kind>.<name>', members '<...>.<i>'; else one tensor, named
    '<kind>.<name>') and returns its Handle, whose result is the kind's
    result (a list of them for a group)."""
    require_init()
    make = KINDS[kind]
    base = op_name(("grouped_" if group else "") + kind, name)
    if group:
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise ValueError("grouped_%s: expected a non-empty list of "
                             "tensors" % kind)
        parts = [make(t, "%s.%d" % (base, i), process_set, **args)
                 for i, t in enumerate(tensors)]
    else:
        parts = [make(tensors, base, process_set, **args)]
    _set_stream(parts)
    h = ctypes.c_void_p()
    L = lib()
    if group:
        descs = (hklib.Collective * len(parts))(*[p.desc for p in parts])
        st = L.hk_submit_group(descs, len(parts), ctypes.byref(h))
    else:
        st = L.hk_submit(ctypes.byref(parts[0].desc), ctypes.byref(h))
    if st != 0:
        raise error_from(st)

    def finish():
        res = [p.finish() for p in parts]
        return res if group else res[0]

    def cleanup():
        for p in parts:
            if p.cleanup is not None:
                p.cleanup()
    return Handle(("grouped_" if group else "") + kind, base, [h], finish,
                  parts, parts[0].device, cleanup)


_NO_RESULT = object()


class Handle:
    """An operation in flight: pass it to synchronize() (exactly once) for
    its result, or to poll(). Holds the buffers hk reads and writes until
    then; at hk's shutdown a pending one completes with HK_ERR_SHUTDOWN.
    ``parts`` are its tensors' Parts (their ``info`` after the result)."""

    def __init__(self, kind, name, c_handles, finish, parts, device=None,
                 cleanup=None):
        self.kind = kind
        self.name = name
        self.parts = parts
        self._c = list(c_handles)
        self._finish = finish
        self._device = device
        self._cleanup = cleanup
        self._lock = threading.Lock()
        self._done = False
        self._interrupted = False  # _wait_all was left by an exception
        self._error = None
        self._result = _NO_RESULT
        with _hk._state_lock:
            _hk._pending[id(self)] = self

    def __repr__(self):
        return "<hk.torch.Handle %s %s%s>" % (
            self.kind, self.name, " done" if self._done else "")

    def _wait_all(self, host=False):
        """Waits every hk handle once; returns the first error or None.
        hk_wait frees a handle, so each is taken off self._c before it is
        waited: an exception between two (a KeyboardInterrupt, raised at
        any bytecode) leaves in self._c only handles not yet waited, which
        the exit path (_collect_after_shutdown) waits; one interrupted
        between being taken and waited is leaked, never waited twice, and
        self._interrupted says the result is lost."""
        L = lib()
        first = None
        stream = None
        if not host and self._device is not None and \
                self._device.type == "cuda":
            stream = ctypes.c_void_p(
                torch.cuda.current_stream(self._device).cuda_stream)
        self._interrupted = True  # until every handle is waited
        while self._c:
            h = self._c.pop(0)  # forgotten before it is freed
            st = L.hk_wait_stream(h, stream) if stream is not None \
                else L.hk_wait(h)
            if st != 0 and first is None:
                first = error_from(st)
        self._interrupted = False
        if stream is not None:  # before _release drops the references
            record_on_hk_stream(self.parts, L.hk_device_stream())
        return first

    def _release(self):
        with _hk._state_lock:
            _hk._pending.pop(id(self), None)
        for p in self.parts:  # hk is done with the buffers
            p.keep = p.desc = None
        if self._cleanup is not None:
            try:
                self._cleanup()
            finally:
                self._cleanup = None

    def _collect_after_shutdown(self):
        """hk_shutdown completed every handle (HK_ERR_SHUTDOWN if it was
        still pending): wait it, and keep its result (if it had finished)
        or its error for a later synchronize()."""
        with self._lock:
            if self._done:
                return
            lost = self._interrupted  # an earlier wait was interrupted
            err = self._wait_all(host=True)
            if err is None and lost:
                err = HKInternalError(
                    7, "%s '%s': its wait was interrupted (KeyboardInterrupt); "
                    "the result is lost" % (self.kind, self.name))
            self._done = True
            try:
                if err is None:
                    self._result = self._finish()
            except Exception as e:  # pragma: no cover
                err = e
            self._error = err
            self._release()
            self._finish = None

    def synchronize(self):
        with self._lock:
            if self._done:
                if self._error is not None:
                    raise self._error
                if self._result is not _NO_RESULT:  # collected at shutdown
                    r, self._result = self._result, _NO_RESULT
                    return r
                raise ValueError("handle of %s '%s' was already synchronized"
                                 % (self.kind, self.name))
            err = self._wait_all()
            self._done = True
            try:
                if err is not None:
                    self._error = err
                    raise err
                return self._finish()
            finally:
                self._release()
                self._finish = None

    def poll(self):
        with self._lock:
            if self._done:
                return True
            L = lib()
            d = ctypes.c_int(0)
            for h in self._c:
                check(L.hk_poll(h, ctypes.byref(d)))
                if not d.value:
                    return False
            return True
