"""Worker: sparse gradients, at any np.

1. sparse_allreduce_async of uncoalesced COO tensors (repeated indices, a
   rank with no entries, 1-d and 2-d values): the result, densified,
   equals the dense serial sum (op=Sum) and mean (op=Average) of every
   rank's densified tensor; calling the handle and synchronize() give it.
2. DistributedOptimizer with nn.Embedding(sparse=True) trains, through
   the default allgather path and with sparse_as_dense=True, to the
   parameters one process reaches by training a copy of the model on
   every rank's batch (the loss averaged over the ranks; SGD: a dense
   embedding, SparseAdam: a sparse one), within a tolerance; every rank's
   parameters are equal bit for bit; the gradient the optimizer steps
   with stays sparse (SparseAdam takes only sparse gradients). One step
   leaves the embedding out on rank 0 (no gradient there: zero_grad()
   left an empty sparse one).
Prints "sparse ok: N checks" per rank.
"""

import torch
import torch.nn as nn

import hk.torch as hvd
from checking import Checks

hvd.init()
R, N = hvd.rank(), hvd.size()
check = Checks(R)
fail, close = check.fail, check.close


def sparse_of(q, size, width):
    """Rank q's COO tensor: q + 2 entries (rank 1: none), some repeated."""
    g = torch.Generator().manual_seed(q + 31)
    nnz = 0 if q == 1 else q + 2
    idx = torch.randint(0, size, (1, nnz), generator=g)
    if nnz > 1:
        idx[0, 1] = idx[0, 0]  # a repeated index: not coalesced
    shape = (nnz,) if width is None else (nnz, width)
    vals = torch.randint(-5, 6, shape, generator=g).double()
    full = (size,) if width is None else (size, width)
    return torch.sparse_coo_tensor(idx, vals, full)


# 1. sparse_allreduce_async
for width in (None, 3):
    for op, name in ((hvd.Sum, "sum"), (hvd.Average, "avg")):
        ts = [sparse_of(q, 7, width) for q in range(N)]
        want = sum(t.to_dense() for t in ts)
        if op == hvd.Average:
            want = want / N
        h = hvd.sparse_allreduce_async(ts[R], name="sp.%s.%s" % (name, width),
                                       op=op)
        got = h()
        if not got.is_sparse:
            fail("sparse_allreduce_async gave a dense tensor")
        close(got.to_dense(), want, "sparse_allreduce_async %s %s" %
              (name, width))
        close(hvd.synchronize(h).to_dense(), want, "synchronize of its handle")

# 2. DistributedOptimizer with a sparse embedding
VOCAB, DIM, PER, STEPS = 20, 4, 5, 4


class Model(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        torch.manual_seed(11)
        self.emb = nn.Embedding(VOCAB, DIM, sparse=sparse)
        self.out = nn.Linear(DIM, 1)

    def forward(self, ids, use_emb=True):
        h = self.emb(ids).mean(1) if use_emb else \
            torch.zeros(ids.shape[0], DIM)
        return self.out(h).squeeze(1)


def batch(step, q):
    g = torch.Generator().manual_seed(1000 * step + q)
    return (torch.randint(0, VOCAB, (PER, 3), generator=g),
            torch.randn(PER, generator=g))


def uses_emb(step, q):
    return not (step == 2 and q == 0)


def params(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def train_serial(make_opt):
    m = Model(sparse=make_opt is sparse_adam)
    opt = make_opt(m)
    for step in range(STEPS):
        opt.zero_grad()
        loss = 0
        for q in range(N):
            ids, y = batch(step, q)
            loss = loss + ((m(ids, uses_emb(step, q)) - y) ** 2).mean()
        (loss / N).backward()
        opt.step()
    return params(m)


def sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.5)


def sparse_adam(m):
    # the embedding through SparseAdam (sparse gradients only), the
    # linear layer through Adam
    return _Both(torch.optim.SparseAdam(m.emb.parameters(), lr=0.1),
                 torch.optim.Adam(m.out.parameters(), lr=0.1))


class _Both:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def zero_grad(self):
        self.a.zero_grad()
        self.b.zero_grad()

    def step(self):
        self.a.step()
        self.b.step()


for make, as_dense, what in ((sgd, False, "SGD, allgather path"),
                             (sgd, True, "SGD, sparse_as_dense"),
                             (sparse_adam, True, "SparseAdam, sparse_as_dense"),
                             (sparse_adam, False, "SparseAdam, allgather")):
    m = Model(sparse=True)
    base = make(m)
    if isinstance(base, _Both):
        opts = [hvd.DistributedOptimizer(
            o, named_parameters=[(("%s.%d.%s" % (what, i, n)), p)
                                 for n, p in mod.named_parameters()],
            sparse_as_dense=as_dense)
            for i, (o, mod) in enumerate(((base.a, m.emb), (base.b, m.out)))]
        opt = _Both(*opts)
    else:
        opt = hvd.DistributedOptimizer(
            base, named_parameters=[("%s.%s" % (what, n), p)
                                    for n, p in m.named_parameters()],
            sparse_as_dense=as_dense)
    for step in range(STEPS):
        opt.zero_grad()
        ids, y = batch(step, R)
        ((m(ids, uses_emb(step, R)) - y) ** 2).mean().backward()
        opt.step()
        g = m.emb.weight.grad
        if g is not None and not g.is_sparse:
            fail("%s: the embedding's gradient became dense" % what)
    mine = params(m)
    everyone = hvd.allgather(mine.unsqueeze(0), name="params." + what)
    for q in range(N):
        if not torch.equal(everyone[q], mine):
            fail("%s: rank %d's parameters differ from this rank's" %
                 (what, q))
    close(mine, train_serial(make), what, tol=1e-5)
print("sparse ok: %d checks (np %d)" % (check.count, N))
hvd.shutdown()
