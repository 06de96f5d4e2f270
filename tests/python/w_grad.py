"""Worker: the gradient of every differentiable collective of hk.torch
against a serial computation of Horovod's definition (python/hk/torch/
_grad.py cites them), at any np.

Every rank r builds every rank's input x_q and every rank's upstream
gradient w_q (integer-valued floats, from seeds), runs the collective on
its own x_r, backpropagates loss_r = sum(y_r * w_r), and compares x_r.grad
with what Horovod's backward gives, computed serially here:

  allreduce (op, prescale p, postscale s)  op over q of w_q * p, times s
  grouped_allreduce                        the same per tensor
  allgather                                rows of rank r of mean_q w_q
  grouped_allgather                        the same per tensor
  broadcast(root)                          mean_q w_q on root, 0 elsewhere
  alltoall                                 autograd through a serial
                                           alltoall of all x_q (the exact
                                           derivative)
  reducescatter (Sum / Average, p, s)      cat_q w_q, times n for Sum,
                                           times p and s
  grouped_reducescatter                    the same per tensor

The forward results are checked against the serial ones too. Prints
"grad ok: N checks" per rank.
"""

import torch

import hk.torch as hvd
from checking import Checks

hvd.init()
R, N = hvd.rank(), hvd.size()
check = Checks(R)
fail = check.fail


def ints(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


def same(got, want, what):
    check.close(got, want, what)


def leaf(t):
    return t.clone().requires_grad_()


def rows_of(q):
    """Rank q's rows for the gathers (they differ between ranks)."""
    return q % 3 + 1


for dtype in (torch.float32, torch.float64):
    tag = str(dtype).replace("torch.", "")
    # ------------------------------------------------------ allreduce
    for op, opname in ((hvd.Sum, "sum"), (hvd.Average, "average")):
        for pre, post in ((1.0, 1.0), (0.5, 4.0)):
            xs = [ints(10 + q, (3, 4), dtype) for q in range(N)]
            ws = [ints(50 + q, (3, 4), dtype) for q in range(N)]
            x = leaf(xs[R])
            y = hvd.allreduce(x, op=op, prescale_factor=pre,
                              postscale_factor=post,
                              name="ar.%s.%s.%g" % (tag, opname, pre))
            fwd = sum(v * pre for v in xs)
            bwd = sum(w * pre for w in ws)
            if op == hvd.Average:
                fwd, bwd = fwd / N, bwd / N
            same(y.detach(), fwd * post, "allreduce %s %s forward" %
                 (tag, opname))
            (y * ws[R]).sum().backward()
            same(x.grad, bwd * post, "allreduce %s %s p=%g grad" %
                 (tag, opname, pre))

    # ----------------------------------------------- grouped_allreduce
    shapes = [(2, 3), (5,), (1, 2, 2)]
    xs = [[ints(100 + 7 * q + i, s, dtype) for i, s in enumerate(shapes)]
          for q in range(N)]
    ws = [[ints(200 + 7 * q + i, s, dtype) for i, s in enumerate(shapes)]
          for q in range(N)]
    x = [leaf(t) for t in xs[R]]
    ys = hvd.grouped_allreduce(x, op=hvd.Average, name="gar." + tag)
    sum(((y * w).sum() for y, w in zip(ys, ws[R]))).backward()
    for i in range(len(shapes)):
        same(ys[i].detach(), sum(xs[q][i] for q in range(N)) / N,
             "grouped_allreduce %s forward %d" % (tag, i))
        same(x[i].grad, sum(ws[q][i] for q in range(N)) / N,
             "grouped_allreduce %s grad %d" % (tag, i))

    # ------------------------------------------------------- allgather
    total = sum(rows_of(q) for q in range(N))
    off = sum(rows_of(q) for q in range(R))
    xs = [ints(300 + q, (rows_of(q), 3), dtype) for q in range(N)]
    ws = [ints(400 + q, (total, 3), dtype) for q in range(N)]
    x = leaf(xs[R])
    y = hvd.allgather(x, name="ag." + tag)
    same(y.detach(), torch.cat(xs), "allgather %s forward" % tag)
    (y * ws[R]).sum().backward()
    mean = sum(ws) / N
    same(x.grad, mean[off:off + rows_of(R)], "allgather %s grad" % tag)

    # ----------------------------------------------- grouped_allgather
    xs2 = [ints(500 + q, (rows_of(q) + 1, 2, 2), dtype) for q in range(N)]
    ws2 = [ints(600 + q, (total + N, 2, 2), dtype) for q in range(N)]
    a, b = leaf(xs[R]), leaf(xs2[R])
    ya, yb = hvd.grouped_allgather([a, b], name="gag." + tag)
    ((ya * ws[R]).sum() + (yb * ws2[R]).sum()).backward()
    same(ya.detach(), torch.cat(xs), "grouped_allgather %s forward 0" % tag)
    same(yb.detach(), torch.cat(xs2), "grouped_allgather %s forward 1" % tag)
    same(a.grad, mean[off:off + rows_of(R)], "grouped_allgather %s grad 0"
         % tag)
    off2 = off + R
    same(b.grad, (sum(ws2) / N)[off2:off2 + rows_of(R) + 1],
         "grouped_allgather %s grad 1" % tag)

    # ------------------------------------------------------- broadcast
    for root in range(N):
        xs = [ints(700 + q, (4,), dtype) for q in range(N)]
        ws = [ints(800 + q + root, (4,), dtype) for q in range(N)]
        x = leaf(xs[R])
        y = hvd.broadcast(x, root, name="bc.%s.%d" % (tag, root))
        same(y.detach(), xs[root], "broadcast %s root %d forward" %
             (tag, root))
        (y * ws[R]).sum().backward()
        want = sum(ws) / N if R == root else torch.zeros(4, dtype=dtype)
        same(x.grad, want, "broadcast %s root %d grad" % (tag, root))

    # -------------------------------------------------------- alltoall
    splits = [[(q + j) % 3 for j in range(N)] for q in range(N)]
    xs = [ints(900 + q, (sum(splits[q]), 2), dtype) for q in range(N)]
    recv = [sum(splits[q][j] for q in range(N)) for j in range(N)]
    ws = [ints(1000 + j, (recv[j], 2), dtype) for j in range(N)]
    # the serial alltoall, differentiated by autograd
    sx = [leaf(t) for t in xs]
    ys = []
    for j in range(N):
        ys.append(torch.cat([sx[q][sum(splits[q][:j]):
                                   sum(splits[q][:j + 1])]
                             for q in range(N)]))
    sum((y * w).sum() for y, w in zip(ys, ws)).backward()
    x = leaf(xs[R])
    y, got_splits = hvd.alltoall(x, splits=splits[R], name="a2a." + tag)
    same(y.detach(), ys[R].detach(), "alltoall %s forward" % tag)
    if got_splits.tolist() != [splits[q][R] for q in range(N)]:
        fail("alltoall received splits %s" % got_splits.tolist())
    (y * ws[R]).sum().backward()
    same(x.grad, sx[R].grad, "alltoall %s grad" % tag)
    # without splits (equal shares): only the output, as Horovod
    xe = leaf(ints(1100 + R, (2 * N, 3), dtype))
    ye = hvd.alltoall(xe, name="a2a.eq." + tag)
    if not isinstance(ye, torch.Tensor):
        fail("alltoall without splits returned %r" % (type(ye),))
    ye.sum().backward()
    same(xe.grad, torch.ones(2 * N, 3, dtype=dtype),
         "alltoall (equal splits) %s grad" % tag)

    # --------------------------------------------------- reducescatter
    rows = 2 * N + 1
    q_, m_ = divmod(rows, N)
    share = [q_ + (1 if j < m_ else 0) for j in range(N)]
    lo = sum(share[:R])
    for op, opname in ((hvd.Sum, "sum"), (hvd.Average, "average")):
        for pre, post in ((1.0, 1.0), (0.5, 4.0)):
            xs = [ints(1200 + q, (rows, 3), dtype) for q in range(N)]
            ws = [ints(1300 + j, (share[j], 3), dtype) for j in range(N)]
            x = leaf(xs[R])
            y = hvd.reducescatter(x, op=op, prescale_factor=pre,
                                  postscale_factor=post,
                                  name="rs.%s.%s.%g" % (tag, opname, pre))
            fwd = sum(v * pre for v in xs)
            if op == hvd.Average:
                fwd = fwd / N
            same(y.detach(), (fwd * post)[lo:lo + share[R]],
                 "reducescatter %s %s forward" % (tag, opname))
            (y * ws[R]).sum().backward()
            want = torch.cat(ws) * (N if op == hvd.Sum else 1) * pre * post
            same(x.grad, want, "reducescatter %s %s p=%g grad" %
                 (tag, opname, pre))

    # ------------------------------------------- grouped_reducescatter
    xs = [[ints(1400 + 5 * q + i, (rows, 2 + i), dtype) for i in range(2)]
          for q in range(N)]
    ws = [[ints(1500 + 5 * j + i, (share[j], 2 + i), dtype)
           for i in range(2)] for j in range(N)]
    x = [leaf(t) for t in xs[R]]
    ys = hvd.grouped_reducescatter(x, op=hvd.Sum, name="grs." + tag)
    sum((y * w).sum() for y, w in zip(ys, ws[R])).backward()
    for i in range(2):
        same(ys[i].detach(), sum(xs[q][i] for q in range(N))[lo:lo + share[R]],
             "grouped_reducescatter %s forward %d" % (tag, i))
        same(x[i].grad, torch.cat([ws[j][i] for j in range(N)]) * N,
             "grouped_reducescatter %s grad %d" % (tag, i))

# a tensor that does not require grad gives a result that does not either
y = hvd.allreduce(torch.ones(2), name="nograd")
if y.requires_grad:
    fail("allreduce of a tensor without grad requires grad")
print("grad ok: %d checks (np %d)" % (check.count, N))
hvd.shutdown()
