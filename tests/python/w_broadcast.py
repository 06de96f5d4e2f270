"""Worker: broadcast_parameters and broadcast_optimizer_state from a
non-zero root (the last rank). Every rank starts from its own model
(BatchNorm included: float running statistics and an int64 counter) and
its own optimizer state (rank 0 never stepped, so it has none; the others
stepped a different number of times with a different learning rate).
After the broadcasts every rank's model and optimizer state_dict equal the
root's bit for bit, and a further identical step keeps them equal.
Prints "broadcast ok" per rank.
"""

import sys

import torch
import torch.nn as nn

import hk.torch as hvd

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
hvd.init()
R, N = hvd.rank(), hvd.size()
ROOT = N - 1
assert ROOT != 0, "run with np >= 2"


def fail(msg):
    raise AssertionError("rank %d: %s" % (R, msg))


def model_for(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(),
                         nn.Linear(8, 2)).to(DEVICE)


def train(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 6, generator=g).to(DEVICE)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def same_tree(a, b, where):
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or \
                a.shape != b.shape or not torch.equal(a.cpu(), b.cpu()):
            fail("%s differs from the root's" % where)
    elif isinstance(a, dict):
        if set(a) != set(b):
            fail("%s: keys %s vs the root's %s" % (where, sorted(a),
                                                   sorted(b)))
        for k in a:
            same_tree(a[k], b[k], "%s[%r]" % (where, k))
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            fail("%s: length differs" % where)
        for i, (x, y) in enumerate(zip(a, b)):
            same_tree(x, y, "%s[%d]" % (where, i))
    elif a != b:
        fail("%s: %r vs the root's %r" % (where, a, b))


for wrapped in (False, True):
    model = model_for(10 + R)
    opt = torch.optim.Adam(model.parameters(), lr=0.001 * (R + 1),
                           betas=(0.8 + 0.01 * R, 0.99))
    train(model, opt, 0 if R == 0 else R + 1, seed=R)
    if R == 0 and opt.state_dict()["state"]:
        fail("rank 0 was meant to have no optimizer state")
    if wrapped:
        opt = hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=ROOT)
    hvd.broadcast_optimizer_state(opt, root_rank=ROOT)
    theirs = hvd.broadcast_object(
        {"model": {k: v.cpu() for k, v in model.state_dict().items()},
         "opt": opt.state_dict()} if R == ROOT else None, ROOT)
    same_tree(model.state_dict(), theirs["model"], "model.state_dict()")
    same_tree(opt.state_dict(), theirs["opt"], "optimizer.state_dict()")
    # one more step on the same data everywhere: still equal
    if wrapped:
        train(model, opt, 1, seed=77)
    else:
        train(model, opt, 1, seed=77)
    again = hvd.allgather_object({k: v.cpu() for k, v in
                                  model.state_dict().items()})
    for r in range(N):
        same_tree(again[r], again[ROOT], "after a step, rank %d's model" % r)
    print("broadcast ok: %s optimizer" % ("a Distributed" if wrapped
                                           else "a plain"))

# the other forms of params: named_parameters() and a list of tensors
model = model_for(50 + R)
hvd.broadcast_parameters(model.named_parameters(), root_rank=ROOT)
lin = nn.Linear(3, 3).to(DEVICE)
hvd.broadcast_parameters([lin.weight, lin.bias], root_rank=ROOT)
got = hvd.allgather_object([p.detach().cpu() for p in
                            list(model.parameters()) + [lin.weight,
                                                        lin.bias]])
for r in range(N):
    same_tree(got[r], got[ROOT], "rank %d's parameters" % r)
try:
    hvd.broadcast_parameters(42, root_rank=ROOT)
    fail("broadcast_parameters(42) was not refused")
except ValueError:
    pass


# Parameters without a gradient: a layer no forward uses, a frozen one,
# and one whose gradient backward leaves undefined (a Function returning
# None for it; DistributedOptimizer's hook then sees p.grad None). The
# root never stepped; the others stepped. Afterwards every rank's state
# is the root's (none for the parameters that got no gradient), with
# Horovod's argument order (optimizer, root_rank, model).
class NoGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x * 1

    @staticmethod
    def backward(ctx, g):
        return g, None


class Partly(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.undefined = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return NoGrad.apply(self.used(self.frozen(x)), self.undefined)


for wrapped in (False, True):
    torch.manual_seed(20 + R)
    model = Partly().to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (R + 1))
    for step in range(0 if R == ROOT else 2):  # the others step alone
        opt.zero_grad()
        model(torch.ones(3, 4, device=DEVICE)).sum().backward()
        opt.step()
    if wrapped:
        opt = hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, ROOT, model)
    hvd.broadcast_parameters(model.state_dict(), root_rank=ROOT)
    if opt.state_dict()["state"]:
        fail("the root's optimizer had no state; rank %d has %s" %
             (R, sorted(opt.state_dict()["state"])))
    # a step everywhere (DistributedOptimizer: through hk), then again
    opt.zero_grad()
    model(torch.ones(3, 4, device=DEVICE)).sum().backward()
    opt.step()
    st = opt.state_dict()
    theirs = hvd.broadcast_object(st if R == ROOT else None, ROOT,
                                  name="partly.%d" % wrapped)
    same_tree(st, theirs, "optimizer.state_dict() after a step")
    # state for what got a gradient: under DistributedOptimizer every
    # trainable parameter (synchronize() gives the missing ones zeros, as
    # Horovod's), else only the used layer
    names = [n for n, _ in model.named_parameters()]
    with_state = sorted(names[i] for i in st["state"])
    want = ["undefined", "unused.bias", "unused.weight"] if wrapped else []
    if with_state != sorted(want + ["used.bias", "used.weight"]):
        fail("state for %s" % with_state)
    print("broadcast ok: parameters without gradients, %s" %
          ("a Distributed optimizer" if wrapped else "a plain one"))
print("broadcast ok")
hvd.shutdown()
