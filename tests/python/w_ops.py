"""Worker: every dtype x op through hk.torch against torch computed
serially, on every rank (each rank rebuilds every rank's input from its
seed). Run under hkrun -np N; `w_ops.py cuda` uses CUDA tensors
(gpu_check.py). Prints "ops ok: N checks" per rank.

Exact checks use integer-valued data, so that every partial sum and
product is representable and the order of the ring's reduction cannot
change a bit; the results must then be bitwise equal to torch's serial
ones (integers wrap modulo 2^bits, Average truncates toward zero, as
hk.h says). Random float data is checked within a tolerance.
"""

import sys

import torch

import hk.torch as hvd

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.int8, torch.uint8, torch.int32, torch.int64, torch.int16]
OPS = [("sum", hvd.Sum), ("average", hvd.Average), ("min", hvd.Min),
       ("max", hvd.Max), ("product", hvd.Product)]
SHAPES = [(0,), (1,), (3, 5), (1003,)]

hvd.init()
R, N = hvd.rank(), hvd.size()
checks = 0


def fail(msg):
    raise AssertionError("rank %d: %s" % (R, msg))


def data(rank, dtype, shape, op, salt=0):
    """Rank `rank`'s integer-valued input (small enough for exactness)."""
    g = torch.Generator().manual_seed(1000 * rank + 37 * DTYPES.index(dtype)
                                      + 7 * salt + len(shape))
    if op == "product":
        lo, hi = (-3, 4) if dtype != torch.uint8 else (0, 4)
    elif dtype == torch.uint8:
        lo, hi = 0, 120        # sums wrap modulo 256
    elif dtype == torch.int8:
        lo, hi = -60, 61       # sums of 3 wrap past 127
    else:
        lo, hi = -60, 61
    v = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    return v.to(dtype)


def wrap(v64, dtype):
    """An int64 result wrapped to dtype as hk's integer arithmetic is."""
    return v64.to(dtype)  # two's complement truncation


def serial(op, xs, dtype):
    """torch's result of op over the ranks' inputs xs, serially."""
    if dtype.is_floating_point:
        acc = xs[0].clone()
        for x in xs[1:]:
            if op in ("sum", "average"):
                acc = acc + x
            elif op == "min":
                acc = torch.minimum(acc, x)
            elif op == "max":
                acc = torch.maximum(acc, x)
            else:
                acc = acc * x
        if op == "average":
            acc = acc / len(xs)
        return acc
    w = [x.to(torch.int64) for x in xs]
    if op in ("sum", "average"):
        acc = wrap(sum(w), dtype)
        if op == "average":
            acc = wrap(torch.div(acc.to(torch.int64), len(xs),
                                 rounding_mode="trunc"), dtype)
        return acc
    if op == "min":
        return wrap(torch.stack(w).min(0).values, dtype)
    if op == "max":
        return wrap(torch.stack(w).max(0).values, dtype)
    acc = w[0]
    for x in w[1:]:
        acc = wrap(acc * x, dtype).to(torch.int64)
    return wrap(acc, dtype)


def same(got, want, what):
    global checks
    checks += 1
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        fail("%s: got %s %s, want %s %s" % (what, got.dtype,
                                          tuple(got.shape), want.dtype,
                                          tuple(want.shape)))
    if got.device.type != DEVICE:
        fail("%s: result on %s, not %s" % (what, got.device, DEVICE))
    g, w = got.cpu(), want.cpu()
    if g.dtype.is_floating_point:
        eq = torch.equal(g.view(torch.int16 if g.element_size() == 2 else
                                {4: torch.int32, 8: torch.int64}[
                                    g.element_size()]),
                         w.view(torch.int16 if w.element_size() == 2 else
                                {4: torch.int32, 8: torch.int64}[
                                    w.element_size()]))
    else:
        eq = torch.equal(g, w)
    if not eq:
        bad = (g != w).nonzero()[:5].tolist()
        fail("%s: differs from torch's serial result at %s: got %s want %s"
             % (what, bad, g.reshape(-1)[:8].tolist(),
                w.reshape(-1)[:8].tolist()))


def close(got, want, atol, rtol, what):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.device.type != DEVICE:
        fail("%s: dtype/device %s %s" % (what, got.dtype, got.device))
    g, w = got.cpu().double(), want.cpu().double()
    if not torch.allclose(g, w, atol=atol, rtol=rtol):
        d = (g - w).abs().max().item()
        fail("%s: max difference %g beyond atol %g rtol %g" % (what, d, atol,
                                                               rtol))


def dev(t):
    return t.to(DEVICE)


# 1. allreduce, every dtype x op x shape, three forms at once: a new
#    tensor (async), in place on a non-contiguous view, and blocking.
pending = []
for dtype in DTYPES:
    for opname, op in OPS:
        for shape in SHAPES:
            xs = [data(r, dtype, shape, opname) for r in range(N)]
            want = serial(opname, xs, dtype)
            tag = "%s.%s.%s" % (dtype, opname, "x".join(map(str, shape)))
            h = hvd.allreduce_async(dev(xs[R]), name="a." + tag, op=op)
            pending.append((h, want, "allreduce_async " + tag))
            if len(shape) == 2:
                # a transposed (non-contiguous) view, reduced in place
                base = dev(xs[R].t().contiguous())
                view = base.t()
                assert not view.is_contiguous()
                h2 = hvd.allreduce_async_(view, name="i." + tag, op=op)
                pending.append((h2, want, "allreduce_async_ (strided) " +
                                tag, view))
for item in pending:
    h, want, what = item[:3]
    hvd.poll(h)
    got = hvd.synchronize(h)
    if len(item) == 4:
        if got is not item[3]:
            fail("%s: in-place form did not return its tensor" % what)
    same(got, dev(want), what)

for dtype in DTYPES:
    for opname, op in OPS:
        xs = [data(r, dtype, (4, 3), opname, 1) for r in range(N)]
        want = serial(opname, xs, dtype)
        t = dev(xs[R].clone())
        out = hvd.allreduce_(t, op=op)
        if out is not t:
            fail("allreduce_ did not return its tensor")
        same(t, dev(want), "allreduce_ %s %s" % (dtype, opname))
        same(hvd.allreduce(dev(xs[R]), op=op), dev(want),
             "allreduce (noname) %s %s" % (dtype, opname))

# 2. prescale / postscale (floats): sum of x*0.5, times 4
for dtype in DTYPES[:4]:
    xs = [data(r, dtype, (33,), "sum", 2) for r in range(N)]
    want = serial("sum", [x * 0.5 for x in xs], dtype) * 4
    same(hvd.allreduce(dev(xs[R]), op=hvd.Sum, prescale_factor=0.5,
                       postscale_factor=4.0), dev(want),
         "allreduce scaled %s" % dtype)
    wantavg = serial("average", xs, dtype) * 2
    same(hvd.allreduce(dev(xs[R]), postscale_factor=2.0), dev(wantavg),
         "allreduce average postscale %s" % dtype)

# 3. random floats within a tolerance (the ring's order differs from a
#    serial left-to-right sum)
for dtype, atol in [(torch.float32, 1e-5), (torch.float64, 1e-12),
                    (torch.float16, 3e-2), (torch.bfloat16, 2e-1)]:
    xs = [torch.randn(2049, generator=torch.Generator().manual_seed(r + 5))
          .to(dtype) for r in range(N)]
    for opname, op in OPS[:2]:
        want = serial(opname, [x.double() for x in xs], torch.float64)
        close(hvd.allreduce(dev(xs[R]), op=op), dev(want.to(dtype)), atol,
              1e-3 if torch.finfo(dtype).bits == 16 else 1e-6,
              "random %s %s" % (dtype, opname))

# 4. grouped allreduce: mixed dtypes and a strided member, one call
for inplace in (False, True):
    group = [data(R, d, (5, 4), "sum", 3) for d in DTYPES]
    wants = [serial("sum", [data(r, d, (5, 4), "sum", 3) for r in range(N)],
                    d) for d in DTYPES]
    ts = [dev(g) for g in group]
    ts[2] = dev(group[2].t().contiguous()).t()  # non-contiguous
    if inplace:
        outs = hvd.grouped_allreduce_(ts, op=hvd.Sum)
        for o, t in zip(outs, ts):
            if o is not t:
                fail("grouped_allreduce_ did not return its tensors")
    else:
        outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="g%d" % inplace)
    for o, w, d in zip(outs, wants, DTYPES):
        same(o, dev(w), "grouped_allreduce%s %s" % ("_" * inplace, d))
fl = [data(R, d, (6,), "sum", 4) for d in DTYPES[:4]]
wants = [serial("sum", [data(r, d, (6,), "sum", 4) * 0.5
                        for r in range(N)], d) * 2 for d in DTYPES[:4]]
for o, w, d in zip(hvd.grouped_allreduce([dev(f) for f in fl], op=hvd.Sum,
                                         prescale_factor=0.5,
                                         postscale_factor=2.0),
                   wants, DTYPES[:4]):
    same(o, dev(w), "grouped_allreduce scaled %s" % d)

# 5. broadcast from every root, every dtype; in place on a strided view
for dtype in DTYPES:
    for root in range(N):
        xs = [data(r, dtype, (3, 4), "sum", 5 + root) for r in range(N)]
        same(hvd.broadcast(dev(xs[R]), root), dev(xs[root]),
             "broadcast %s root %d" % (dtype, root))
        base = dev(xs[R].t().contiguous())
        v = base.t()
        hvd.broadcast_(v, root, name="b_.%s.%d" % (dtype, root))
        same(v, dev(xs[root]), "broadcast_ (strided) %s root %d" %
             (dtype, root))

# 6. allgather (rank r gives r+1 rows), alltoall with splits, and
#    reducescatter over an uneven first dimension, every dtype
for dtype in DTYPES:
    xs = [data(r, dtype, (r + 1, 3), "sum", 6) for r in range(N)]
    same(hvd.allgather(dev(xs[R])), dev(torch.cat(xs)),
         "allgather %s" % dtype)
    h = hvd.allgather_async(dev(xs[R]), name="ag.%s" % dtype)
    same(hvd.synchronize(h), dev(torch.cat(xs)), "allgather_async %s" % dtype)
    # alltoall: rank r sends (r + j) % 3 rows to rank j
    splits = [[(r + j) % 3 for j in range(N)] for r in range(N)]
    ins = [data(r, dtype, (sum(splits[r]), 2), "sum", 7) for r in range(N)]
    pieces = []
    for r in range(N):
        off = sum(splits[r][:R])
        pieces.append(ins[r][off:off + splits[r][R]])
    out, recv = hvd.alltoall(dev(ins[R]), splits=torch.tensor(splits[R],
                                                             dtype=torch.int32))
    same(out, dev(torch.cat(pieces)), "alltoall %s" % dtype)
    if recv.tolist() != [splits[r][R] for r in range(N)]:
        fail("alltoall %s: received splits %s" % (dtype, recv.tolist()))
    eq = [data(r, dtype, (2 * N, 2), "sum", 8) for r in range(N)]
    same(hvd.alltoall(dev(eq[R])),
         dev(torch.cat([eq[r][2 * R:2 * R + 2] for r in range(N)])),
         "alltoall (equal splits) %s" % dtype)
    rows = 2 * N + 1
    q, m = divmod(rows, N)
    lo = R * q + min(R, m)
    hi = lo + q + (1 if R < m else 0)
    for opname, op in OPS:
        xs = [data(r, dtype, (rows, 3), opname, 9) for r in range(N)]
        want = serial(opname, xs, dtype)[lo:hi]
        same(hvd.reducescatter(dev(xs[R]), op=op), dev(want),
             "reducescatter %s %s" % (dtype, opname))

# 7. Compression.fp16: float32 in, float32 out, reduced as float16
xs = [data(r, torch.float32, (40,), "sum", 10) for r in range(N)]
got = hvd.allreduce(dev(xs[R]), op=hvd.Sum, compression=hvd.Compression.fp16)
same(got, dev(serial("sum", xs, torch.float32)), "allreduce fp16 compression")

# 8. autograd through allreduce, allgather and broadcast, with Horovod's
#    gradients (w_grad.py checks every collective's)
x = dev(torch.ones(3)).requires_grad_()
hvd.allreduce(x, op=hvd.Sum, name="grad.x").sum().backward()
same(x.grad, dev(torch.full((3,), float(N))), "allreduce backward")
y = dev(torch.ones(R + 1, 2)).requires_grad_()
(hvd.allgather(y, name="grad.y") * 2).sum().backward()
# Horovod's allgather backward averages the ranks' gradients
same(y.grad, dev(torch.full((R + 1, 2), 2.0)), "allgather backward")
z = dev(torch.full((2,), float(R + 1))).requires_grad_()
zb = hvd.broadcast(z, N - 1, name="grad.z")
same(zb.detach(), dev(torch.full((2,), float(N))), "broadcast with grad")
(zb * 3).sum().backward()  # the root gets the mean, the others nothing
same(z.grad, dev(torch.full((2,), 3.0 if R == N - 1 else 0.0)),
     "broadcast backward")

# 9. objects, barrier, join (the last rank joins first: the others'
#    allreduce then sums N-1 contributions)
objs = hvd.allgather_object({"rank": R, "s": "x" * R})
if objs != [{"rank": r, "s": "x" * r} for r in range(N)]:
    fail("allgather_object: %r" % objs)
b = hvd.broadcast_object({"from": N - 1} if R == N - 1 else None, N - 1)
if b != {"from": N - 1}:
    fail("broadcast_object: %r" % (b,))
hvd.barrier()
if N == 1:
    last = hvd.join()
    if last != 0:
        fail("join in a world of one returned %r" % last)
elif R == N - 1:
    last = hvd.join()
else:
    s = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="while_joined")
    same(s, torch.full((4,), float(N - 1)), "allreduce with a joined rank")
    last = hvd.join()
lasts = hvd.allgather_object(last)
if len(set(lasts)) != 1 or not 0 <= last < max(N - 1, 1):
    fail("join: last joined rank %r on the ranks" % lasts)

# 10. refusals, on this rank only, each a clear exception
def refused(exc, fn, what):
    global checks
    try:
        fn()
    except exc as e:
        checks += 1
        return str(e)
    fail("%s was not refused with %s" % (what, exc.__name__))

refused(ValueError, lambda: hvd.allreduce(torch.zeros(2, dtype=torch.bool)),
        "a bool allreduce")
refused(ValueError, lambda: hvd.allreduce(torch.zeros(2, dtype=torch.complex64)),
        "complex64")
# bool is moved as Horovod moves it: a stop flag broadcast from the root,
# flags allgathered in rank order
flag = dev(torch.tensor([R == 0, R % 2 == 1, True]))
same(hvd.broadcast(flag, 0, name="bool.flag"),
     dev(torch.tensor([True, False, True])), "bool broadcast")
same(hvd.allgather(flag.view(1, 3), name="bool.flags"),
     dev(torch.tensor([[r == 0, r % 2 == 1, True] for r in range(N)])),
     "bool allgather")
refused(NotImplementedError, lambda: hvd.allreduce(torch.ones(2),
                                                   op=hvd.Adasum), "Adasum")
refused(ValueError, lambda: hvd.allreduce(torch.ones(2), average=True,
                                          op=hvd.Sum), "average and op")
refused(ValueError, lambda: hvd.allreduce(
    torch.ones(2), process_set=hvd.ProcessSet([0])),
    "a process set never registered")
# a registered set (every rank but the last) reduces every dtype among
# its members only, an average dividing by its size (w_sets.py: the rest)
if N > 1:
    part = hvd.add_process_set(range(N - 1))
    for dtype in DTYPES:
        for opname, op in OPS[:2]:
            xs = [data(r, dtype, (5,), opname, salt=3) for r in range(N - 1)]
            if part.included():
                same(hvd.allreduce(dev(xs[R]), op=op, process_set=part,
                                   name="set.%s.%s" % (dtype, opname)),
                     dev(serial(opname, xs, dtype)),
                     "%s %s on %s" % (dtype, opname, part))
    if not hvd.remove_process_set(part):
        fail("remove_process_set(%s) did not remove it" % part)
# integers take scale factors as in Horovod (float64, truncated)
same(hvd.allreduce(dev(torch.ones(2, dtype=torch.int32)), op=hvd.Sum,
                   prescale_factor=2.0, name="int32.prescale"),
     dev(torch.full((2,), 2 * N, dtype=torch.int32)), "int32 prescale")
# a name submitted again while in flight: "dup.R" stays in flight until
# every rank has submitted it, and the others submit it only after the
# barrier, which this rank enters after its second submit: so that submit
# meets "dup.R" in flight for sure (without the barrier a slow rank could
# find it already completed and its name free again). With one rank
# nothing holds it in flight (it may complete before the second submit):
# the check needs two ranks or more (python_ops_np2, _np3).
if N > 1:
    h = hvd.allreduce_async(torch.ones(2), name="dup.%d" % R)
    msg = refused(ValueError, lambda: hvd.allreduce_async(torch.ones(2),
                                                          name="dup.%d" % R),
                  "a name in flight")
    if "dup.%d" % R not in msg:
        fail("duplicate-name message does not name the tensor: %s" % msg)
    hvd.barrier()
    others = [hvd.allreduce_async(torch.ones(2), name="dup.%d" % r)
              for r in range(N) if r != R]
    for o in [h] + others:
        hvd.synchronize(o)
else:
    h = hvd.allreduce_async(torch.ones(2), name="dup.0")
    hvd.synchronize(h)
refused(ValueError, lambda: hvd.synchronize(h), "a handle synchronized twice")

# 11. shutdown with handles not yet synchronized: a finished one still
#     gives its result afterwards, a pending one raises HK_ERR_SHUTDOWN
finished = hvd.allreduce_async(dev(torch.ones(3)), op=hvd.Sum, name="fin")
hvd.barrier()
while not hvd.poll(finished):
    pass
pend = hvd.allreduce_async(torch.ones(3), name="only.%d" % R) if N > 1 \
    else None
hvd.barrier()
hvd.shutdown()
same(hvd.synchronize(finished), dev(torch.full((3,), float(N))),
     "a finished handle synchronized after shutdown")
if pend is not None:
    try:
        hvd.synchronize(pend)
        fail("a handle pending at shutdown gave a result")
    except hvd.HorovodInternalError as e:
        if e.status_name != "HK_ERR_SHUTDOWN":
            fail("a handle pending at shutdown: %s %s" % (e.status_name, e))
print("ops ok: %d checks (np %d, %s)" % (checks, N, DEVICE))
