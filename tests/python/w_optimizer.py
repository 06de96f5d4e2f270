"""Worker: DistributedOptimizer training a small model, at np 2 (or more).

For each configuration, every rank trains on its shard of each global
batch through hk.torch.DistributedOptimizer; then
- the parameters are bitwise identical on every rank (allgathered, compared
  as bits), and
- they equal, within a tolerance, one process training the same model on
  the whole global batch with the plain optimizer (the loss scaled so that
  its gradient is what the configuration computes: the average of the
  shards' gradients, their sum for op=Sum, summed over micro-batches for
  backward_passes_per_step).
Prints "optimizer ok: <config>" per configuration and "optimizer all ok".
"""

import sys
import warnings

import torch
import torch.nn as nn

import hk.torch as hvd

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
hvd.init()
R, N = hvd.rank(), hvd.size()
torch.manual_seed(1234)
STEPS = 8
PER_RANK = 6
GLOBAL = PER_RANK * N


def fail(msg):
    raise AssertionError("rank %d: %s" % (R, msg))


def make_model(seed):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3))
    return m.to(DEVICE)


def batches():
    g = torch.Generator().manual_seed(99)
    for _ in range(STEPS):
        x = torch.randn(GLOBAL, 10, generator=g)
        y = torch.randn(GLOBAL, 3, generator=g)
        yield x.to(DEVICE), y.to(DEVICE)


def flat(model):
    return torch.cat([p.detach().reshape(-1).cpu() for p in
                      model.parameters()])


def bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else \
        t.view(torch.int64)


def run(name, make_opt, wrap_kw, bpps=1, loss_scale=1.0, tol=1e-5):
    # every rank starts from a different model: broadcast_parameters makes
    # them rank 0's
    model = make_model(100 + R)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = make_model(100)          # rank 0's start, trained serially
    opt = hvd.DistributedOptimizer(make_opt(model),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=bpps, **wrap_kw)
    ref_opt = make_opt(ref)
    mse = nn.MSELoss()
    for x, y in batches():
        shard = slice(R * PER_RANK, (R + 1) * PER_RANK)
        xs, ys = x[shard], y[shard]
        opt.zero_grad()
        mb = PER_RANK // bpps
        for k in range(bpps):
            part = slice(k * mb, (k + 1) * mb)
            mse(model(xs[part]), ys[part]).backward()
        # the hooks started every gradient's allreduce during backward
        started = [h for h, _ in opt._handles.values() if h is not None]
        if len(started) != len(list(model.parameters())):
            fail("%s: %d of %d allreduces started by backward's hooks"
                 % (name, len(started), len(list(model.parameters()))))
        opt.step()
        ref_opt.zero_grad()
        (loss_scale * mse(ref(x), y)).backward()
        ref_opt.step()
    mine = flat(model)
    everyone = hvd.allgather(mine.unsqueeze(0), name="params." + name)
    for r in range(N):
        if not torch.equal(bits(everyone[r]), bits(mine)):
            fail("%s: parameters of rank %d differ from rank %d's in the bits"
                 % (name, r, R))
    want = flat(ref)
    if not torch.allclose(mine, want, atol=tol, rtol=tol):
        fail("%s: parameters differ from single-process training by %g "
             "(tolerance %g)" % (name, (mine - want).abs().max().item(), tol))
    print("optimizer ok: %s (max |diff| vs serial %.2e)" %
          (name, (mine - want).abs().max().item()))


def sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)


def adam(m):
    return torch.optim.Adam(m.parameters(), lr=0.01)


run("sgd momentum, Average", sgd, {})
run("adam, Average", adam, {})
run("sgd, op=Sum", sgd, {"op": hvd.Sum}, loss_scale=float(N))
run("sgd, gradient_predivide_factor=2", sgd,
    {"gradient_predivide_factor": 2.0})
run("adam, backward_passes_per_step=2", adam, {}, bpps=2, loss_scale=2.0)
run("sgd, groups=2", sgd, {"groups": 2})
run("sgd, Compression.fp16", sgd, {"compression": hvd.Compression.fp16},
    tol=2e-3)

# A parameter whose gradient only rank 0 computes: the others contribute
# zeros (in synchronize), nothing hangs, and the ranks stay identical.
model = make_model(7)
extra = nn.Parameter(torch.ones(4, device=DEVICE))
params = list(model.named_parameters()) + [("extra", extra)]
opt = hvd.DistributedOptimizer(
    torch.optim.SGD([p for _, p in params], lr=0.1), named_parameters=params)
for x, y in batches():
    opt.zero_grad()
    loss = nn.MSELoss()(model(x), y)
    if R == 0:
        loss = loss + (extra ** 2).sum()
    loss.backward()
    opt.step()
got = hvd.allgather(extra.detach().unsqueeze(0).cpu(), name="extra")
want = torch.ones(4)
for _ in range(STEPS):
    want = want - 0.1 * (2 * want) / N
if not all(torch.equal(got[r], got[0]) for r in range(N)) or \
        not torch.allclose(got[0], want, atol=1e-6):
    fail("a gradient only rank 0 computed: %s, want %s" % (got.tolist(),
                                                           want.tolist()))
print("optimizer ok: a gradient computed on one rank only")

# synchronize() + skip_synchronize() (e.g. to clip), and zero_grad()
# between backward and step refused
model = make_model(8)
opt = hvd.DistributedOptimizer(sgd(model),
                               named_parameters=model.named_parameters())
x, y = next(batches())
nn.MSELoss()(model(x), y).backward()
try:
    opt.zero_grad()
    fail("zero_grad() between backward() and step() was not refused")
except AssertionError as e:
    if "zero_grad" not in str(e):
        raise
opt.synchronize()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
with opt.skip_synchronize():
    opt.step()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    nn.MSELoss()(model(x), y).backward()
    opt.synchronize()
    opt.step()
    if not any("skip_synchronize" in str(i.message) for i in w):
        fail("step() after synchronize() without skip_synchronize() did not "
             "warn")
print("optimizer ok: synchronize, skip_synchronize, zero_grad refused")

# refusals
for kw, exc in [({"op": hvd.Adasum}, NotImplementedError),
                ({"op": hvd.Sum, "gradient_predivide_factor": 2.0},
                 ValueError),
                ({"named_parameters": [("a", p) for p in
                                       model.parameters()]}, ValueError),
                ({"named_parameters": list(model.named_parameters())[:1]},
                 ValueError)]:
    try:
        hvd.DistributedOptimizer(sgd(model), **kw)
        fail("DistributedOptimizer(%s) was not refused" % kw)
    except exc:
        pass
print("optimizer all ok")
hvd.shutdown()
