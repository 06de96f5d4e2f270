"""Worker: every collective of hk.torch while a rank has joined, at any np.

Round j (one per rank): rank j calls hvd.join() first; the others run
every collective, checked against a serial computation over the ranks
that did not join (a joined rank adds the op's identity to reductions,
Average divides by the ranks that contributed, and it gives no rows to
allgather and alltoall), then join too. join() returns the same rank
everywhere, never j (at np > 1). A broadcast from the joined rank fails
on the others with HorovodInternalError. After the rounds every rank
runs a collective again with everyone. Prints "join ok: N checks".
"""

import torch
import torch.nn as nn

import hk.torch as hvd
from checking import Checks

hvd.init()
R, N = hvd.rank(), hvd.size()
check = Checks(R)
fail, same = check.fail, check.equal


def data(q, shape, salt, dtype=torch.float32):
    g = torch.Generator().manual_seed(97 * q + salt)
    return torch.randint(1, 5, shape, generator=g).to(dtype)


def run_collectives(j, live):
    """Every collective on this (live) rank while rank j has joined."""
    n = len(live)
    tag = "j%d" % j
    # allreduce, every op
    for op, name, fold in ((hvd.Sum, "sum", lambda xs: sum(xs)),
                           (hvd.Average, "avg", lambda xs: sum(xs) / n),
                           (hvd.Min, "min",
                            lambda xs: torch.stack(xs).min(0).values),
                           (hvd.Max, "max",
                            lambda xs: torch.stack(xs).max(0).values),
                           (hvd.Product, "prod",
                            lambda xs: torch.stack(xs).prod(0))):
        xs = {q: data(q, (3, 5), 1) for q in live}
        same(hvd.allreduce(xs[R], op=op, name="%s.ar.%s" % (tag, name)),
             fold([xs[q] for q in live]), "allreduce %s" % name)
    xs = {q: data(q, (4,), 2, torch.int64) for q in live}
    same(hvd.allreduce(xs[R], op=hvd.Sum, name=tag + ".ar.int"),
         sum(xs[q] for q in live), "allreduce int64")
    # grouped allreduce of two dtypes
    g = {q: [data(q, (2, 2), 3), data(q, (5,), 4, torch.int32)] for q in live}
    outs = hvd.grouped_allreduce(g[R], op=hvd.Sum, name=tag + ".gar")
    for i in range(2):
        same(outs[i], sum(g[q][i] for q in live), "grouped_allreduce %d" % i)
    # allgather: the joined rank gives no rows
    xs = {q: data(q, (q + 1, 2), 5) for q in live}
    same(hvd.allgather(xs[R], name=tag + ".ag"),
         torch.cat([xs[q] for q in live]), "allgather")
    ys = {q: data(q, (2, q + 2), 6) for q in live}
    got = hvd.grouped_allgather([xs[R], ys[R].t().contiguous()],
                                name=tag + ".gag")
    same(got[0], torch.cat([xs[q] for q in live]), "grouped_allgather 0")
    same(got[1], torch.cat([ys[q].t() for q in live]), "grouped_allgather 1")
    # broadcast from a live root, and from the joined one (refused)
    root = live[-1]
    xs = {q: data(q, (6,), 7) for q in live}
    same(hvd.broadcast(xs[R], root, name=tag + ".bc"), xs[root], "broadcast")
    t = xs[R].clone()
    hvd.broadcast_(t, root, name=tag + ".bc_")
    same(t, xs[root], "broadcast_")
    check.raises(hvd.HorovodInternalError,
                 lambda: hvd.broadcast(torch.zeros(2), j,
                                       name=tag + ".bc.joined"),
                 "a broadcast from the joined rank %d" % j, "has joined")
    # alltoall: rank q sends (q + k) % 2 + 1 rows to rank k (the joined
    # rank's share is dropped); nothing comes from the joined rank
    splits = {q: [(q + k) % 2 + 1 for k in range(N)] for q in live}
    xs = {q: data(q, (sum(splits[q]), 3), 8) for q in live}
    out, recv = hvd.alltoall(xs[R], splits=splits[R], name=tag + ".a2a")
    want = torch.cat([xs[q][sum(splits[q][:R]):sum(splits[q][:R + 1])]
                      for q in live])
    same(out, want, "alltoall")
    if recv.tolist() != [splits[q][R] if q in live else 0
                         for q in range(N)]:
        fail("alltoall received splits %s" % recv.tolist())
    # reducescatter: the rows are split over all N ranks as always
    rows = 2 * N + 1
    qq, m = divmod(rows, N)
    lo = R * qq + min(R, m)
    hi = lo + qq + (1 if R < m else 0)
    for op, name in ((hvd.Sum, "sum"), (hvd.Average, "avg")):
        xs = {q: data(q, (rows, 2), 9) for q in live}
        total = sum(xs[q] for q in live)
        if op == hvd.Average:
            total = total / n
        same(hvd.reducescatter(xs[R], op=op, name="%s.rs.%s" % (tag, name)),
             total[lo:hi], "reducescatter %s" % name)
    xs = {q: [data(q, (rows, 2), 10), data(q, (rows,), 11)] for q in live}
    got = hvd.grouped_reducescatter(xs[R], op=hvd.Sum, name=tag + ".grs")
    for i in range(2):
        same(got[i], sum(xs[q][i] for q in live)[lo:hi],
             "grouped_reducescatter %d" % i)
    # barrier and objects among the live ranks
    hvd.barrier()
    objs = hvd.allgather_object({"r": R}, name=tag + ".obj")
    check.ok(objs == [{"r": q} for q in live], "allgather_object: %r" % objs)
    check.ok(hvd.broadcast_object(root * 10 if R == root else None, root,
                                  name=tag + ".bobj") == root * 10,
             "broadcast_object")
    # a DistributedOptimizer step: the gradient is the live ranks' mean
    torch.manual_seed(3)
    model = nn.Linear(3, 1, bias=False)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=1.0),
        named_parameters=[("%s.w" % tag, model.weight)])
    before = model.weight.detach().clone()
    x = data(R, (1, 3), 12)
    model(x).sum().backward()
    opt.step()
    grad = sum(data(q, (1, 3), 12) for q in live) / n
    same(model.weight.detach(), before - grad, "DistributedOptimizer step")


for j in range(N):
    live = [q for q in range(N) if q != j]
    if R == j:
        last = hvd.join()
    else:
        run_collectives(j, live)
        last = hvd.join()
    lasts = hvd.allgather_object(last, name="lasts.%d" % j)
    check.ok(len(set(lasts)) == 1 and (N == 1 or last != j) and
             0 <= last < N, "round %d: join returned %r on the ranks" %
             (j, lasts))

# everyone again
s = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after")
same(s, torch.full((2,), float(N)), "allreduce after the joins")
hvd.barrier()
print("join ok: %d checks (np %d)" % (check.count, N))
hvd.shutdown()
