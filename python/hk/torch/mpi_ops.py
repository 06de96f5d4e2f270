"""Collectives on torch tensors through libhk, with horovod.torch's names.

Every operation hands hk the tensor's memory (``tensor.data_ptr()``); hk
names each in-flight operation, so a call without ``name`` gets a
Horovod-style one (``allreduce.noname.<n>``, a counter per kind of
operation: ranks that make the same calls in the same order agree on it).
Explicit names become ``allreduce.<name>``, ``broadcast.<name>``, ...

Tensors
- CPU tensors of hk's dtypes: float16, bfloat16, float32, float64, int8,
  uint8, int32, int64. Others (bool, int16, complex, ...) are refused with
  a ValueError naming the type.
- CUDA tensors: the device pointer goes to hk with PyTorch's current
  stream as the producer stream (``hk_set_stream``); allreduce,
  broadcast and reducescatter run on the device (hk's GPU data plane) and
  completion orders the current stream after the result
  (``hk_wait_stream``: no host synchronisation for an allreduce). A CUDA
  tensor must live on the GPU hk uses (``HK_GPU``, else the local rank;
  ``torch.cuda.set_device(hvd.local_rank())`` arranges it). allgather and
  alltoall of CUDA tensors are staged through host memory here (hk would
  stage them through host memory too), and the result is copied back to
  the tensor's device.
- A non-contiguous tensor is copied into a contiguous one, reduced there,
  and (for the in-place forms) copied back: never reduced in its strided
  layout. Results have the input's device, dtype and shape (allgather and
  alltoall: the first dimension changes).

Errors
- Wrong arguments: ValueError (hk's HK_ERR_INVALID_ARG is HKInvalidArgument,
  a ValueError too). Not initialized: ValueError, as in Horovod.
- Anything hk reports when the operation runs (ranks that disagree on a
  tensor, a rank that died, a timeout): HorovodInternalError (= hk.HKError,
  a RuntimeError) carrying hk's message, raised by synchronize() (or by
  the blocking form). hk reports a dead peer to every rank; nothing waits
  forever.

Differences from Horovod
- op=Adasum is refused (NotImplementedError): hk has no Adasum.
- process_set: only the global set (hk has no process sets).
- Average on integer tensors truncates toward zero (C division of the
  wrapped sum, hk.h).
- grouped_allreduce: tensors of different dtypes form one hk group per
  dtype (each negotiated as a unit); prescale/postscale of a group are
  applied here, in the tensor's type, around hk's grouped allreduce
  (which has no scale factors); likewise for reducescatter.
"""

import ctypes
import threading
import warnings

import torch

import hk as _hk
from hk import HKError, check, error_from
from .compression import Compression

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "HorovodInternalError", "Handle",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "synchronize", "poll", "join", "barrier",
]

HorovodInternalError = HKError

# Horovod's op constants (horovod.common's values), mapped to hk_op.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5
_HK_OP = {Average: 1, Sum: 0, Min: 2, Max: 3, Product: 4}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min",
             Max: "Max", Product: "Product"}

_ADASUM = ("hk does not implement Adasum (op=hvd.Adasum); use hvd.Average "
           "or hvd.Sum")

_DTYPES = {
    torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float64: 3,
    torch.int8: 4, torch.uint8: 5, torch.int32: 6, torch.int64: 7,
}


class ProcessSet:
    """Horovod's process sets. hk has one: every rank of the job
    (``global_process_set``); others are refused."""

    def __init__(self, ranks=None):
        self.ranks = ranks
        self.process_set_id = 0 if ranks is None else None

    def size(self):
        return _hk.size()

    def rank(self):
        return _hk.rank()

    def included(self):
        return True

    def __repr__(self):
        return "ProcessSet(global)" if self.ranks is None else \
            "ProcessSet(%r)" % (self.ranks,)


global_process_set = ProcessSet()


def add_process_set(process_set):
    """Refused: hk has no process sets (every collective spans the job)."""
    raise NotImplementedError("hk has no process sets: every collective "
                              "spans the whole job")


def remove_process_set(process_set):
    """Refused: hk has no process sets."""
    raise NotImplementedError("hk has no process sets")


def _check_process_set(ps):
    if ps is not global_process_set and ps is not None:
        raise NotImplementedError(
            "hk has no process sets: only hvd.global_process_set is "
            "accepted (got %r)" % (ps,))


def _lib():
    return _hk.lib()


def _require_init():
    if not _hk.is_initialized():
        raise ValueError("hk has not been initialized; use hvd.init().")


def _hk_dtype(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise ValueError(
            "hk: tensor type %s is not supported; hk reduces float16, "
            "bfloat16, float32, float64, int8, uint8, int32 and int64"
            % (t.dtype,)) from None


def _check_tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s: expected a torch.Tensor, got %s" %
                         (what, type(t).__name__))
    if t.is_sparse:
        raise ValueError("%s: sparse tensors are not supported (pass "
                         "tensor.to_dense())" % what)
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: tensors on %s are not supported (CPU and CUDA "
                         "only)" % (what, t.device))
    return _hk_dtype(t)


def _resolve_op(op, average, default=Average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please "
                         "provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed", DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = default
    if op == Adasum:
        raise NotImplementedError(_ADASUM)
    if op not in _HK_OP:
        raise ValueError("unknown op %r: use hvd.Average, hvd.Sum, hvd.Min, "
                         "hvd.Max or hvd.Product" % (op,))
    return op


_name_lock = threading.Lock()
_name_counters = {}


def _op_name(kind, name):
    """hk's name of one operation: '<kind>.<name>', or '<kind>.noname.<n>'
    with a per-kind counter (the same on every rank that makes the same
    calls in the same order)."""
    if name is None:
        with _name_lock:
            n = _name_counters.get(kind, 0)
            _name_counters[kind] = n + 1
        return "%s.noname.%d" % (kind, n)
    return "%s.%s" % (kind, name)


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr() if t.numel() else 0)


def _set_stream(t):
    """Tells hk (per thread) which stream produced a CUDA tensor."""
    if t.is_cuda:
        s = torch.cuda.current_stream(t.device).cuda_stream
        _lib().hk_set_stream(ctypes.c_void_p(s))


def _contig(t):
    return t if t.is_contiguous() else t.contiguous()


def _finisher(tensor, detached, out, inplace):
    """The finish() of a handle whose result hk writes into ``out``: out of
    place, ``out`` itself; in place, ``tensor``, with ``out`` copied into
    it first when ``out`` is a contiguous copy and not ``detached``
    (``tensor.detach()``) itself."""
    if not inplace:
        return lambda: out
    if out is detached:
        return lambda: tensor

    def finish():
        with torch.no_grad():
            tensor.copy_(out)
        return tensor
    return finish


def _suffixed(name, suffix):
    """The name of a collective derived from the user's ``name`` (None
    stays None: hk then numbers it)."""
    return None if name is None else name + suffix


def _summed_grad(grad, name):
    """The backward of allgather and broadcast: the sum over the ranks of
    ``grad``, as the allreduce named after the forward's ``name``."""
    return _allreduce_submit(grad, False, _op_name(
        "allreduce", _suffixed(name, ".grad")), Sum, 1.0, 1.0).synchronize()


_NO_RESULT = object()


class Handle:
    """An operation in flight: pass it to synchronize() (exactly once) for
    its result, or to poll(). Holds the buffers hk reads and writes until
    then; at hk's shutdown a pending one completes with HK_ERR_SHUTDOWN."""

    def __init__(self, kind, name, c_handles, finish, keep, device=None,
                 cleanup=None):
        self.kind = kind
        self.name = name
        self._c = list(c_handles)
        self._finish = finish
        self._keep = keep
        self._device = device
        self._cleanup = cleanup
        self._lock = threading.Lock()
        self._done = False
        self._error = None
        self._result = _NO_RESULT
        with _hk._state_lock:
            _hk._pending[id(self)] = self

    def __repr__(self):
        return "<hk.torch.Handle %s %s%s>" % (
            self.kind, self.name, " done" if self._done else "")

    def _wait_all(self, host=False):
        """Waits every hk handle once; returns the first error or None."""
        L = _lib()
        first = None
        stream = None
        if not host and self._device is not None and \
                self._device.type == "cuda":
            stream = ctypes.c_void_p(
                torch.cuda.current_stream(self._device).cuda_stream)
        for h in self._c:
            st = L.hk_wait_stream(h, stream) if stream is not None \
                else L.hk_wait(h)
            if st != 0 and first is None:
                first = error_from(st)
        self._c = []
        return first

    def _release(self):
        with _hk._state_lock:
            _hk._pending.pop(id(self), None)
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
            err = self._wait_all(host=True)
            self._done = True
            try:
                if err is None:
                    self._result = self._finish()
            except Exception as e:  # pragma: no cover
                err = e
            self._error = err
            self._release()
            self._keep = None
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
                self._keep = None
                self._finish = None

    def poll(self):
        with self._lock:
            if self._done:
                return True
            L = _lib()
            d = ctypes.c_int(0)
            for h in self._c:
                check(L.hk_poll(h, ctypes.byref(d)))
                if not d.value:
                    return False
            return True


def synchronize(handle):
    """Waits for an operation started by a *_async call and returns its
    result (the output tensor; for alltoall with splits, (output,
    received_splits)). Raises HorovodInternalError with hk's message when
    the operation failed."""
    if not isinstance(handle, Handle):
        raise ValueError("synchronize: expected a handle from an *_async "
                         "call, got %r" % (handle,))
    return handle.synchronize()


def poll(handle):
    """True when the operation has completed (synchronize() will not
    block)."""
    if not isinstance(handle, Handle):
        raise ValueError("poll: expected a handle from an *_async call, got "
                         "%r" % (handle,))
    return handle.poll()


# --------------------------------------------------------------- allreduce

def _allreduce_submit(tensor, inplace, hk_name, op, prescale, postscale):
    dt = _check_tensor(tensor, "allreduce")
    _require_init()
    hop = _HK_OP[op]
    t = tensor.detach()
    src = _contig(t)
    if inplace:
        out = src
    else:
        out = torch.empty(src.shape, dtype=src.dtype, device=src.device)
    h = ctypes.c_void_p()
    _set_stream(src)
    L = _lib()
    pre, post = float(prescale), float(postscale)
    if pre == 1.0 and post == 1.0:
        st = L.hk_allreduce_async(hk_name.encode(), _ptr(src), _ptr(out),
                                  src.numel(), dt, hop, ctypes.byref(h))
    else:
        st = L.hk_allreduce_scaled_async(hk_name.encode(), _ptr(src),
                                         _ptr(out), src.numel(), dt, hop, pre,
                                         post, ctypes.byref(h))
    check(st)
    return Handle("allreduce", hk_name, [h],
                  _finisher(tensor, t, out, inplace), (tensor, src, out),
                  src.device)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of ``tensor`` into a new tensor; returns a
    handle for synchronize(). op defaults to Average."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _allreduce_submit(tensor, False, _op_name("allreduce", name), op,
                             prescale_factor, postscale_factor)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of ``tensor``; synchronize() returns
    the tensor itself."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _allreduce_submit(tensor, True, _op_name("allreduce", name), op,
                             prescale_factor, postscale_factor)


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale):
        ctx.op, ctx.pre, ctx.post = op, prescale, postscale
        ctx.name = name
        return _allreduce_submit(tensor, False, _op_name("allreduce", name),
                                 op, prescale, postscale).synchronize()

    @staticmethod
    def backward(ctx, grad):
        g = _allreduce_submit(grad, False,
                              _op_name("allreduce",
                                       _suffixed(ctx.name, ".grad")),
                              ctx.op, ctx.pre, ctx.post).synchronize()
        return g, None, None, None, None


def allreduce(tensor, average=None, name=None,
              compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Returns op(tensor of every rank) as a new tensor (Average by
    default): multiplied by prescale_factor before the reduction and by
    postscale_factor after it (after Average's division). Differentiable:
    the gradient is allreduced the same way. ``compression``
    (Compression.none by default, or Compression.fp16) is applied around
    the reduction."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    compression = compression or Compression.none
    t, cctx = compression.compress(tensor)
    if t.requires_grad and torch.is_grad_enabled():
        out = _AllreduceFn.apply(t, name, op, prescale_factor,
                                 postscale_factor)
    else:
        out = _allreduce_submit(t, False, _op_name("allreduce", name), op,
                                prescale_factor, postscale_factor
                                ).synchronize()
    return compression.decompress(out, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(allreduce_async_(tensor, average, name, op,
                                        prescale_factor, postscale_factor,
                                        process_set))


# ------------------------------------------------------- grouped allreduce

def _grouped_submit(tensors, inplace, base, op, prescale, postscale):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce: the list of tensors is empty")
    dts = [_check_tensor(t, "grouped_allreduce") for t in tensors]
    _require_init()
    devs = {t.device for t in tensors}
    if len(devs) > 1:
        raise ValueError("grouped_allreduce: the tensors are on different "
                         "devices (%s)" % ", ".join(sorted(map(str, devs))))
    pre, post = float(prescale), float(postscale)
    scaled = pre != 1.0 or post != 1.0
    if scaled and any(not t.dtype.is_floating_point for t in tensors):
        raise ValueError("grouped_allreduce: prescale/postscale factors "
                         "other than 1 need floating tensors")
    srcs, outs, copied = [], [], []
    with torch.no_grad():
        for t in tensors:
            d = t.detach()
            s = _contig(d)
            if inplace:
                if pre != 1.0:
                    s.mul_(pre)  # the tensor itself, or its contiguous copy
                o = s
            elif pre != 1.0:
                s = o = s.mul(pre)  # a new tensor, reduced in place
            else:
                o = torch.empty(s.shape, dtype=s.dtype, device=s.device)
            srcs.append(s)
            outs.append(o)
            copied.append(s is not d)
    L = _lib()
    hop = _HK_OP[op]
    c_handles = []
    keep = [tensors, srcs, outs]
    order = []
    for i, dt in enumerate(dts):
        if dt not in order:
            order.append(dt)
    _set_stream(srcs[0])
    try:
        for dt in order:
            idx = [i for i in range(len(tensors)) if dts[i] == dt]
            n = len(idx)
            names = [("%s.%d" % (base, i)).encode() for i in idx]
            c_names = (ctypes.c_char_p * n)(*names)
            c_send = (ctypes.c_void_p * n)(*[_ptr(srcs[i]).value for i in idx])
            c_recv = (ctypes.c_void_p * n)(*[_ptr(outs[i]).value for i in idx])
            c_counts = (ctypes.c_size_t * n)(*[srcs[i].numel() for i in idx])
            keep += [names, c_names, c_send, c_recv, c_counts]
            h = ctypes.c_void_p()
            check(L.hk_grouped_allreduce_async(c_names, c_send, c_recv,
                                               c_counts, n, dt, hop,
                                               ctypes.byref(h)))
            c_handles.append(h)
    except Exception:
        if c_handles:  # submitted groups run on; shutdown() collects them
            Handle("grouped_allreduce", base, c_handles, lambda: None, keep)
        raise

    def finish():
        res = []
        with torch.no_grad():
            for t, o, c in zip(tensors, outs, copied):
                if post != 1.0:
                    o.mul_(post)
                if inplace:
                    if c:
                        t.copy_(o)
                    res.append(t)
                else:
                    res.append(o)
        return res
    return Handle("grouped_allreduce", base, c_handles, finish, keep,
                  srcs[0].device)


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts an allreduce of a list of tensors negotiated and fused as one
    unit (hk_grouped_allreduce_async); synchronize() returns the list of
    new tensors."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _grouped_submit(tensors, False, _op_name("grouped_allreduce",
                                                    name),
                           op, prescale_factor, postscale_factor)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _grouped_submit(tensors, True, _op_name("grouped_allreduce", name),
                           op, prescale_factor, postscale_factor)


def grouped_allreduce(tensors, average=None, name=None,
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Returns the list of reduced tensors (Average by default). Not
    differentiable in hk."""
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_allreduce_async(
        [p[0] for p in pairs], average, name, op, prescale_factor,
        postscale_factor, process_set))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the tensors."""
    return synchronize(grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor,
        process_set))


# --------------------------------------------------------------- allgather

def _rows_shape(t):
    shape = tuple(t.shape) if t.dim() > 0 else (1,)
    row = 1
    for d in shape[1:]:
        row *= d
    return shape, row


def _host_rows(tensor):
    """``tensor`` detached, in host memory (a CUDA tensor is staged: see
    the module doc) and contiguous, with its shape as rows:
    (src, shape, elements per row)."""
    src = tensor.detach()
    if src.is_cuda:
        src = src.cpu()
    src = _contig(src)
    shape, row = _rows_shape(src)
    return src, shape, row


def _from_hk_buffer(out_ptr, counts, shape, dtype, device):
    """A new tensor on ``device`` of sum(counts) rows shaped like
    ``shape``'s, copied out of the host buffer hk allocated at
    ``out_ptr`` (allgather, alltoall); the buffer stays hk's to free."""
    out = torch.empty((sum(counts),) + shape[1:], dtype=dtype)
    nbytes = out.numel() * out.element_size()
    if nbytes:
        ctypes.memmove(out.data_ptr(), out_ptr.value, nbytes)
    if device.type != "cpu":
        out = out.to(device)
    return out


def _hk_buffer_freer(L, out_ptr):
    """The Handle cleanup that frees the buffer hk allocated at ``out_ptr``
    (once: the pointer is cleared)."""
    def cleanup():
        if out_ptr.value:
            L.hk_free(out_ptr)
            out_ptr.value = None
    return cleanup


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: the concatenation along the first dimension of
    every rank's tensor (the first dimension may differ between ranks, the
    others must not). A 0-d tensor counts as one row of one element."""
    _check_process_set(process_set)
    dt = _check_tensor(tensor, "allgather")
    _require_init()
    hk_name = _op_name("allgather", name)
    device = tensor.device
    src, shape, row = _host_rows(tensor)
    n = _hk.size()
    L = _lib()
    out_ptr = ctypes.c_void_p()
    per_rank = (ctypes.c_size_t * n)()
    h = ctypes.c_void_p()
    check(L.hk_allgather_async(hk_name.encode(), _ptr(src), shape[0], row, dt,
                               ctypes.byref(out_ptr), per_rank,
                               ctypes.byref(h)))

    def finish():
        return _from_hk_buffer(out_ptr, per_rank, shape, src.dtype, device)
    return Handle("allgather", hk_name, [h], finish, (src, per_rank),
                  None, _hk_buffer_freer(L, out_ptr))


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.dim0 = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.name = name
        return allgather_async(tensor, name).synchronize()

    @staticmethod
    def backward(ctx, grad):
        g = _summed_grad(grad, ctx.name)
        dims = allgather(torch.tensor([ctx.dim0], dtype=torch.int64),
                         name=_suffixed(ctx.name, ".dims"))
        off = int(dims[:_hk.rank()].sum())
        return g.narrow(0, off, ctx.dim0), None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns the concatenation of every rank's tensor along the first
    dimension (differentiable)."""
    _check_process_set(process_set)
    if tensor.requires_grad and torch.is_grad_enabled() and tensor.dim() > 0:
        return _AllgatherFn.apply(tensor, name)
    return synchronize(allgather_async(tensor, name))


# --------------------------------------------------------------- broadcast

def _broadcast_submit(tensor, root_rank, inplace, hk_name):
    dt = _check_tensor(tensor, "broadcast")
    _require_init()
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise ValueError("broadcast: root_rank must be an int, got %r" %
                         (root_rank,))
    t = tensor.detach()
    if inplace:
        buf = _contig(t)
    else:
        buf = t.clone(memory_format=torch.contiguous_format)
    h = ctypes.c_void_p()
    _set_stream(buf)
    check(_lib().hk_broadcast_async(hk_name.encode(), _ptr(buf), buf.numel(),
                                    dt, root_rank, ctypes.byref(h)))
    return Handle("broadcast", hk_name, [h], _finisher(tensor, t, buf, inplace),
                  (tensor, buf), buf.device)


def broadcast_async(tensor, root_rank, name=None,
                    process_set=global_process_set):
    """Starts a broadcast of root_rank's tensor into a new tensor."""
    _check_process_set(process_set)
    return _broadcast_submit(tensor, root_rank, False,
                             _op_name("broadcast", name))


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=global_process_set):
    """Starts an in-place broadcast of root_rank's tensor."""
    _check_process_set(process_set)
    return _broadcast_submit(tensor, root_rank, True,
                             _op_name("broadcast", name))


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root, ctx.name = root_rank, name
        return broadcast_async(tensor, root_rank, name).synchronize()

    @staticmethod
    def backward(ctx, grad):
        g = _summed_grad(grad, ctx.name)
        if _hk.rank() != ctx.root:
            g = g * 0
        return g, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every rank, as a new tensor
    (differentiable: the root gets the sum of the gradients)."""
    _check_process_set(process_set)
    if tensor.requires_grad and torch.is_grad_enabled():
        return _BroadcastFn.apply(tensor, root_rank, name)
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---------------------------------------------------------------- alltoall

def alltoall_async(tensor, splits=None, name=None,
                   process_set=global_process_set):
    """Starts an alltoall: splits[j] rows (first dimension) of ``tensor``
    go to rank j, in rank order; without splits the first dimension is
    split equally (it must then be divisible by size())."""
    _check_process_set(process_set)
    dt = _check_tensor(tensor, "alltoall")
    _require_init()
    n = _hk.size()
    hk_name = _op_name("alltoall", name)
    device = tensor.device
    src, shape, row = _host_rows(tensor)
    want_splits = splits is not None
    if splits is None:
        if shape[0] % n:
            raise ValueError(
                "alltoall: without splits the first dimension (%d) must be "
                "divisible by the number of ranks (%d)" % (shape[0], n))
        sp = [shape[0] // n] * n
    else:
        if isinstance(splits, torch.Tensor):
            sp = [int(x) for x in splits.detach().cpu().reshape(-1).tolist()]
        else:
            sp = [int(x) for x in splits]
        if len(sp) != n or any(x < 0 for x in sp) or sum(sp) != shape[0]:
            raise ValueError(
                "alltoall: splits must have size() = %d non-negative entries "
                "summing to the first dimension (%d); got %r"
                % (n, shape[0], sp))
    c_splits = (ctypes.c_size_t * n)(*sp)
    recv = (ctypes.c_size_t * n)()
    out_ptr = ctypes.c_void_p()
    h = ctypes.c_void_p()
    L = _lib()
    check(L.hk_alltoall_async(hk_name.encode(), _ptr(src), c_splits, row, dt,
                              ctypes.byref(out_ptr), recv, ctypes.byref(h)))

    def finish():
        out = _from_hk_buffer(out_ptr, recv, shape, src.dtype, device)
        if want_splits:
            return out, torch.tensor(list(recv), dtype=torch.int32)
        return out
    return Handle("alltoall", hk_name, [h], finish, (src, c_splits, recv),
                  None, _hk_buffer_freer(L, out_ptr))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters ``tensor``'s rows to the ranks and gathers what they sent
    here. Returns the received tensor; with ``splits`` given, also a
    tensor of how many rows came from each rank (int32), as Horovod. Not
    differentiable in hk."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


# ----------------------------------------------------------- reducescatter

def reducescatter_async(tensor, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reduce-scatter: the tensors are reduced across ranks (op,
    Average by default) and split along the first dimension; rank r gets
    rows [r*q + min(r, m), ...), q = rows // size, m = rows % size (the
    first m ranks get one more row)."""
    _check_process_set(process_set)
    op = _resolve_op(op, None)
    dt = _check_tensor(tensor, "reducescatter")
    _require_init()
    pre, post = float(prescale_factor), float(postscale_factor)
    if (pre != 1.0 or post != 1.0) and not tensor.dtype.is_floating_point:
        raise ValueError("reducescatter: prescale/postscale factors other "
                         "than 1 need a floating tensor")
    hk_name = _op_name("reducescatter", name)
    src = _contig(tensor.detach())
    if pre != 1.0:
        src = src.mul(pre)
    shape, row = _rows_shape(src)
    n, r = _hk.size(), _hk.rank()
    q, m = divmod(shape[0], n)
    mine = q + (1 if r < m else 0)
    cap = q + (1 if m else 0)
    out = torch.empty((cap,) + shape[1:], dtype=src.dtype, device=src.device)
    rows_out = ctypes.c_size_t(0)
    h = ctypes.c_void_p()
    _set_stream(src)
    check(_lib().hk_reducescatter_async(hk_name.encode(), _ptr(src), shape[0],
                                        row, dt, _HK_OP[op], _ptr(out),
                                        ctypes.byref(rows_out),
                                        ctypes.byref(h)))

    def finish():
        res = out.narrow(0, 0, mine) if mine != cap else out
        if post != 1.0:
            res.mul_(post)
        return res
    return Handle("reducescatter", hk_name, [h], finish, (src, out, rows_out),
                  src.device)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Returns this rank's share of the reduced tensor (see
    reducescatter_async). Not differentiable in hk."""
    compression = compression or Compression.none
    t, cctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(t, name, op, process_set,
                                          prescale_factor, postscale_factor))
    return compression.decompress(out, cctx)


# ------------------------------------------------------------ join/barrier

def join(device=-1):
    """Blocks until every rank has joined; meanwhile this rank takes part
    in the others' collectives with the op's identity (and averages divide
    by the ranks that contributed). Returns the rank that joined last.
    ``device`` is accepted for Horovod's signature and not used."""
    _require_init()
    return _hk.join()


def barrier(process_set=global_process_set):
    """Blocks until every rank has called barrier()."""
    _check_process_set(process_set)
    _require_init()
    _hk.barrier()
