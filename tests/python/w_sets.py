"""Worker: Horovod's process sets through hk.torch, at np 2, 3 or 4.

The sets: ``lo`` (ranks [0, N/2)) and ``hi`` (the rest) given to
hvd.init(process_sets=...), two disjoint sets that run at the same time
(with HK_PROCESS_SETS="2,3;0,1", as the driver runs np 4, hk_init made
them first and init finds them by their ranks: hi is set 1, lo set 2);
at np >= 3 also ``cross`` ({0, N-1}, added later: it overlaps both).
1. The ProcessSet objects: ids, ranks, size(), rank() (ValueError
   outside), included(), str().
2. Every collective on this rank's half, concurrently with the other
   half, against serial computations over the members' inputs (each rank
   rebuilds every rank's input from its seed): allreduce (Sum, Average,
   scaled, in place, async), grouped_allreduce (and in place), allgather
   (rows per member), grouped_allgather, broadcast from the half's last
   member (root_rank a rank of the job), broadcast_, alltoall with splits,
   reducescatter and grouped_reducescatter (Sum, Average), every async
   form (all in flight at once), sparse allreduce, barrier, broadcast_object, allgather_object, and the
   gradients of allgather and broadcast on a set; then the same on
   ``cross`` (np >= 3) while the halves run theirs.
3. DistributedOptimizer on each half, model-parallel style (each half
   trains its own model from its own start, broadcast_parameters and
   broadcast_optimizer_state from the half's last member): the members'
   parameters are bitwise equal and match one process training that
   half's model serially on the half's whole batch; the halves' models
   differ. On the other half's set it reduces nothing here.
4. Errors: a rank outside a set (every collective: ValueError naming it,
   at once), a root_rank outside the set, a set never registered, a
   removed set, an id hk does not have, a duplicate (of a set, of the
   world), init(process_sets=...) with a bad list (a rank outside the
   job, a duplicate entry, lists that differ between ranks, not
   ProcessSets) registering none of it, add_process_set with different
   ranks on different ranks (np >= 3: HorovodInternalError everywhere),
   and an operation pending when its set is removed (np >= 3:
   HorovodInternalError naming the set).
5. remove_process_set / add_process_set: ids are not given twice.
Prints "sets ok: N checks" per rank.
"""

import os

import torch
import torch.nn as nn

import hk.torch as hvd
from checking import Checks

N = int(os.environ["HK_SIZE"])  # hkrun's: the sets are made before init
H = N // 2
lo = hvd.ProcessSet(range(H))
hi = hvd.ProcessSet(list(range(N - 1, H - 1, -1)))  # any order: sorted
hvd.init(process_sets=[lo, hi])
R = hvd.rank()
check = Checks(R)
fail, ok, raises, equal, close = (check.fail, check.ok, check.raises,
                                  check.equal, check.close)
mine = lo if R < H else hi
other = hi if R < H else lo


def data(q, shape, salt, dtype=torch.float32):
    """Rank q's input: small integers, so sums are exact in any order."""
    g = torch.Generator().manual_seed(97 * q + salt)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


# 1. the objects ---------------------------------------------------------
# the driver's np 4 run has hk_init make the sets first, from
# HK_PROCESS_SETS="2,3;0,1": init's list then finds them by their ranks
ids = (2, 1) if os.environ.get("HK_PROCESS_SETS") else (1, 2)
ok((lo.process_set_id, hi.process_set_id) == ids and
   lo.ranks == list(range(H)) and hi.ranks == list(range(H, N)),
   "init's sets: %s %s" % (lo, hi))
ok(str(hi) == "ProcessSet(process_set_id=%d, ranks=%s, mpi_comm=None)" %
   (ids[1], list(range(H, N))), "str: %s" % hi)
ok(mine.size() == len(mine.ranks) and other.size() == len(other.ranks),
   "size() %s %s" % (mine.size(), other.size()))
ok(mine.rank() == mine.ranks.index(R) and mine.included() and
   not other.included(), "rank() %s included()" % mine.rank())
raises(ValueError, other.rank, "rank() outside the set",
       "not part of provided process set")
g = hvd.global_process_set
ok(g.size() == N and g.rank() == R and g.included(), "global set")


# 2. every collective on a set ------------------------------------------
def collectives(ps, tag):
    """Every collective on ps (this rank a member) against the serial
    result over ps's members."""
    M = ps.ranks
    n, i = len(M), M.index(R)
    ok(ps.rank() == i and ps.size() == n, "%s: rank/size" % tag)
    xs = {q: data(q, (5, 3), 1) for q in M}
    equal(hvd.allreduce(xs[R], op=hvd.Sum, name=tag + ".sum",
                        process_set=ps), sum(xs[q] for q in M),
          tag + ": allreduce Sum")
    close(hvd.allreduce(xs[R], name=tag + ".avg", process_set=ps),
          sum(xs[q] for q in M) / n, tag + ": allreduce Average")
    close(hvd.allreduce(xs[R], op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=3.0, name=tag + ".scaled",
                        process_set=ps),
          sum(xs[q] * 0.5 for q in M) * 3.0, tag + ": allreduce scaled")
    ints = {q: data(q, (7,), 2, torch.int32) for q in M}
    equal(hvd.allreduce(ints[R], op=hvd.Average, name=tag + ".int",
                        process_set=ps),
          torch.div(sum(ints[q] for q in M), n, rounding_mode="trunc"),
          tag + ": int32 Average divides by the set's size")
    equal(hvd.allreduce(ints[R], op=hvd.Average, postscale_factor=2.0,
                        name=tag + ".int.scaled", process_set=ps),
          (sum(ints[q] for q in M).double() * (2.0 / n)).to(torch.int32),
          tag + ": int32 Average scaled (Horovod's float64 scaling)")
    t = xs[R].clone()
    hvd.allreduce_(t, op=hvd.Max, name=tag + ".max_", process_set=ps)
    equal(t, torch.stack([xs[q] for q in M]).max(0).values,
          tag + ": allreduce_ Max")
    h = hvd.allreduce_async(xs[R], op=hvd.Min, name=tag + ".min",
                            process_set=ps)
    equal(hvd.synchronize(h), torch.stack([xs[q] for q in M]).min(0).values,
          tag + ": allreduce_async Min")
    ys = {q: [data(q, (4,), 3), data(q, (2, 2), 4, torch.float64)]
          for q in M}
    got = hvd.grouped_allreduce(ys[R], op=hvd.Sum, name=tag + ".grp",
                                process_set=ps)
    mine_ = [y.clone() for y in ys[R]]
    hvd.grouped_allreduce_(mine_, op=hvd.Sum, name=tag + ".grp_",
                           process_set=ps)
    for k in range(2):
        want = sum(ys[q][k] for q in M)
        equal(got[k], want, "%s: grouped_allreduce %d" % (tag, k))
        equal(mine_[k], want, "%s: grouped_allreduce_ %d" % (tag, k))
    # allgather: member q gives (its set rank + 1) rows
    gs = {q: data(q, (M.index(q) + 1, 2), 5) for q in M}
    equal(hvd.allgather(gs[R], name=tag + ".ag", process_set=ps),
          torch.cat([gs[q] for q in M]), tag + ": allgather")
    got = hvd.grouped_allgather([gs[R], ints[R]], name=tag + ".gag",
                                process_set=ps)
    equal(got[0], torch.cat([gs[q] for q in M]), tag + ": grouped_allgather")
    equal(got[1], torch.cat([ints[q] for q in M]),
          tag + ": grouped_allgather int")
    # broadcast from the set's last member, named by its rank in the job
    root = M[-1]
    equal(hvd.broadcast(xs[R], root, name=tag + ".bc", process_set=ps),
          xs[root], tag + ": broadcast from rank %d" % root)
    t = ints[R].clone()
    hvd.broadcast_(t, root_rank=M[0], name=tag + ".bc_", process_set=ps)
    equal(t, ints[M[0]], tag + ": broadcast_ from rank %d" % M[0])
    # alltoall: set rank k sends k + j + 1 rows to set rank j
    sp = {q: [M.index(q) + j + 1 for j in range(n)] for q in M}
    az = {q: data(q, (sum(sp[q]), 3), 6) for q in M}
    out, rsp = hvd.alltoall(az[R], splits=sp[R], name=tag + ".a2a",
                            process_set=ps)
    want = torch.cat([az[q][sum(sp[q][:i]):sum(sp[q][:i + 1])] for q in M])
    equal(out, want, tag + ": alltoall")
    equal(rsp, torch.tensor([sp[q][i] for q in M], dtype=torch.int32),
          tag + ": alltoall received splits")
    # reducescatter: 2n+1 rows, the first (rows % n) members one more
    rows = 2 * n + 1
    qq, m = divmod(rows, n)
    a, b = i * qq + min(i, m), (i + 1) * qq + min(i + 1, m)
    rs = {q: data(q, (rows, 2), 7) for q in M}
    equal(hvd.reducescatter(rs[R], op=hvd.Sum, name=tag + ".rs",
                            process_set=ps), sum(rs[q] for q in M)[a:b],
          tag + ": reducescatter Sum")
    got = hvd.grouped_reducescatter([rs[R], rs[R] * 2], name=tag + ".grs",
                                    process_set=ps)
    close(got[0], (sum(rs[q] for q in M) / n)[a:b],
          tag + ": grouped_reducescatter Average")
    close(got[1], (sum(rs[q] * 2 for q in M) / n)[a:b],
          tag + ": grouped_reducescatter Average 2")
    # the async forms, all in flight at once on the set
    t, ts = xs[R].clone(), [y.clone() for y in ys[R]]
    e2 = {q: data(q, (2 * n, 2), 11) for q in M}
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name=tag + ".as_",
                               process_set=ps),
          hvd.grouped_allreduce_async(ys[R], op=hvd.Sum, name=tag + ".gas",
                                      process_set=ps),
          hvd.grouped_allreduce_async_(ts, op=hvd.Sum, name=tag + ".gas_",
                                       process_set=ps),
          hvd.allgather_async(gs[R], name=tag + ".aga", process_set=ps),
          hvd.grouped_allgather_async([gs[R]], name=tag + ".gaga",
                                      process_set=ps),
          hvd.broadcast_async(xs[R], root, name=tag + ".bca",
                              process_set=ps),
          hvd.broadcast_async_(ints[R].clone(), root, name=tag + ".bca_",
                               process_set=ps),
          hvd.alltoall_async(e2[R], name=tag + ".a2aa", process_set=ps),
          hvd.reducescatter_async(rs[R], op=hvd.Sum, name=tag + ".rsa",
                                  process_set=ps),
          hvd.grouped_reducescatter_async([rs[R]], op=hvd.Sum,
                                          name=tag + ".grsa",
                                          process_set=ps)]
    got = [hvd.synchronize(h) for h in hs]
    equal(got[0], sum(xs[q] for q in M), tag + ": allreduce_async_")
    for k in range(2):
        want = sum(ys[q][k] for q in M)
        equal(got[1][k], want, "%s: grouped_allreduce_async %d" % (tag, k))
        equal(got[2][k], want, "%s: grouped_allreduce_async_ %d" % (tag, k))
    equal(got[3], torch.cat([gs[q] for q in M]), tag + ": allgather_async")
    equal(got[4][0], torch.cat([gs[q] for q in M]),
          tag + ": grouped_allgather_async")
    equal(got[5], xs[root], tag + ": broadcast_async")
    equal(got[6], ints[root], tag + ": broadcast_async_")
    equal(got[7][0], torch.cat([e2[q][2 * i:2 * i + 2] for q in M]),
          tag + ": alltoall_async without splits")
    equal(got[8], sum(rs[q] for q in M)[a:b], tag + ": reducescatter_async")
    equal(got[9][0], sum(rs[q] for q in M)[a:b],
          tag + ": grouped_reducescatter_async")
    # sparse allreduce: every member's entries, values / n for Average
    idx = {q: torch.tensor([[M.index(q), 4]]) for q in M}
    sv = {q: data(q, (2,), 8) for q in M}
    sp_ = {q: torch.sparse_coo_tensor(idx[q], sv[q], (6,)) for q in M}
    res = hvd.synchronize(hvd.sparse_allreduce_async(
        sp_[R], name=tag + ".sparse", op=hvd.Average, process_set=ps))
    close(res.to_dense(), sum(s.to_dense() for s in sp_.values()) / n,
          tag + ": sparse_allreduce_async Average")
    hvd.barrier(process_set=ps)
    ok(hvd.broadcast_object({"from": R}, root_rank=root, name=tag + ".obj",
                            process_set=ps) == {"from": root},
       tag + ": broadcast_object")
    ok(hvd.allgather_object(R * 10, name=tag + ".objs", process_set=ps) ==
       [q * 10 for q in M], tag + ": allgather_object")
    # gradients (Horovod's): allgather's is the mean over the members of
    # their output gradients, this member's rows; broadcast's the mean on
    # the root, zero elsewhere
    w = {q: data(q, (sum(M.index(p) + 1 for p in M), 2), 9) for q in M}
    x = gs[R].clone().requires_grad_()
    (hvd.allgather(x, name=tag + ".agg", process_set=ps) * w[R]).sum() \
        .backward()
    off = sum(range(1, i + 1))
    close(x.grad, (sum(w[q] for q in M) / n)[off:off + i + 1],
          tag + ": allgather's gradient")
    x = xs[R].clone().requires_grad_()
    wb = {q: data(q, (5, 3), 10) for q in M}
    (hvd.broadcast(x, root, name=tag + ".bcg", process_set=ps) * wb[R]) \
        .sum().backward()
    close(x.grad, sum(wb[q] for q in M) / n if R == root
          else torch.zeros(5, 3), tag + ": broadcast's gradient")


collectives(mine, "half%d" % mine.process_set_id)
cross = None
if N >= 3:
    cross = hvd.add_process_set([N - 1, 0])
    ok(cross.process_set_id == 3 and cross.ranks == [0, N - 1],
       "add_process_set: %s" % cross)
    if cross.included():
        collectives(cross, "cross")
equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="world"),
      torch.full((3,), float(N)), "the world's allreduce after the sets'")


# 3. DistributedOptimizer on each half ----------------------------------
STEPS, PER = 5, 4


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))


def batches(seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        yield (torch.randn(PER * len(mine.ranks), 6, generator=gen),
               torch.randn(PER * len(mine.ranks), 2, generator=gen))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


root = mine.ranks[-1]
seed = 1000 * mine.process_set_id
model = make_model(seed + R)  # the half's root's start wins
# the root's lr wins too (broadcast_optimizer_state)
opt = torch.optim.SGD(model.parameters(), lr=0.1 if R == root else 0.5,
                      momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=root,
                         process_set=mine)
hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=mine)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                               process_set=mine)
ref = make_model(seed + root)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
i = mine.rank()
for x, y in batches(seed):
    opt.zero_grad()
    shard = slice(i * PER, (i + 1) * PER)
    nn.MSELoss()(model(x[shard]), y[shard]).backward()
    opt.step()
    ref_opt.zero_grad()
    nn.MSELoss()(ref(x), y).backward()
    ref_opt.step()
got = hvd.allgather(flat(model).unsqueeze(0), name="opt.params",
                    process_set=mine)
ok(all(torch.equal(got[k], got[0]) for k in range(len(mine.ranks))),
   "optimizer: the half's members' parameters are bitwise equal")
close(flat(model), flat(ref), "optimizer on %s against serial training"
      % mine, tol=1e-5)
# a DistributedOptimizer on a set this rank is not in reduces nothing
# here (as Horovod's): its gradients stay this rank's own
m = make_model(5)
o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                             named_parameters=m.named_parameters(),
                             process_set=other)
nn.MSELoss()(m(data(R, (3, 6), 12)), data(R, (3, 2), 13)).backward()
local = [p.grad.clone() for p in m.parameters()]
o.step()
ok(all(torch.equal(p.grad, g_) for p, g_ in zip(m.parameters(), local)),
   "optimizer on a set without this rank: local gradients")
both = hvd.allgather(flat(model).unsqueeze(0), name="opt.halves")
ok(not torch.equal(both[0], both[N - 1]), "the halves trained different "
   "models")


# 4. errors --------------------------------------------------------------
x = torch.ones(4)
outside = [
    ("allreduce", lambda: hvd.allreduce(x, name="out", process_set=other)),
    ("allreduce_async_", lambda: hvd.allreduce_async_(x, process_set=other)),
    ("grouped_allreduce", lambda: hvd.grouped_allreduce(
        [x], process_set=other)),
    ("allgather", lambda: hvd.allgather(x, process_set=other)),
    ("grouped_allgather", lambda: hvd.grouped_allgather(
        [x], process_set=other)),
    ("broadcast", lambda: hvd.broadcast(x, other.ranks[0],
                                        process_set=other)),
    ("alltoall", lambda: hvd.alltoall(torch.ones(len(other.ranks)),
                                      process_set=other)),
    ("reducescatter", lambda: hvd.reducescatter(torch.ones(4, 1),
                                                process_set=other)),
    ("grouped_reducescatter", lambda: hvd.grouped_reducescatter(
        [torch.ones(4, 1)], process_set=other)),
    ("sparse_allreduce_async", lambda: hvd.sparse_allreduce_async(
        torch.ones(2).to_sparse(), name="out.sp", op=hvd.Sum,
        process_set=other)),
    ("barrier", lambda: hvd.barrier(process_set=other)),
    ("broadcast_object", lambda: hvd.broadcast_object(
        1, root_rank=other.ranks[0], process_set=other)),
]
for what, fn in outside:
    e = raises(ValueError, fn, what + " by a rank outside the set",
               "rank %d is not a member of process set %d" %
               (R, other.process_set_id))
    ok(isinstance(e, hvd.HKInvalidArgument), what + ": " + type(e).__name__)
raises(ValueError, lambda: hvd.broadcast(x, other.ranks[0],
                                         process_set=mine),
       "a root_rank outside the set", "invalid root rank %d" %
       other.ranks[0])
raises(ValueError, lambda: hvd.allreduce(x, process_set=hvd.ProcessSet([0])),
       "a set never registered", "has not been registered")
ghost = hvd.ProcessSet([0])
ghost.process_set_id = 99
raises(ValueError, lambda: hvd.allreduce(x, process_set=ghost),
       "an id hk does not have", "process set 99 does not exist")
raises(ValueError, lambda: hvd.add_process_set(list(reversed(mine.ranks))),
       "a duplicate", "Attempted to add a duplicate process set",
       "process set %d has these ranks" % mine.process_set_id)
raises(ValueError, lambda: hvd.add_process_set(range(N)),
       "a duplicate of the world", "process set 0 has these ranks")
first, bad = hvd.ProcessSet([N - 1]), hvd.ProcessSet([0, N])
raises(ValueError, lambda: hvd.init(process_sets=[first, bad]),
       "init with a rank outside the job",
       "rank 0 passed rank %d, which is not a rank of this job" % N)
ok(first.process_set_id is None and bad.process_set_id is None,
   "init's failed list: no set has an id")
raises(ValueError, lambda: hvd.init(process_sets=[hvd.ProcessSet([0]),
                                                  hvd.ProcessSet([0])]),
       "init with a duplicate entry", "entry number 1 is a duplicate of "
       "entry number 0")
raises(ValueError, lambda: hvd.init(process_sets=[hvd.ProcessSet(range(N))]),
       "init with the world", "duplicate of the global process set")
raises(ValueError, lambda: hvd.init(
    process_sets=[hvd.ProcessSet([0] if R == 0 else [N - 1])]),
    "init with lists that differ", "ranks disagree on the process sets",
    "rank 0 gives [[0]]", "give%s [[%d]]" % ("" if N > 2 else "s", N - 1))
raises(ValueError, lambda: hvd.init(process_sets=[[0]]),
       "init with a list of lists", "hold hvd.ProcessSet")
raises(ValueError, lambda: hvd.init(process_sets="static"),
       "init with a word other than dynamic", "'dynamic'")
hvd.init(process_sets="dynamic")  # accepted: hk always allows adding
last_id = 2  # the last id given so far
if N >= 3:
    # the failed init left no set of [N-1]: adding it is no duplicate
    probe = hvd.add_process_set([N - 1])
    last_id = probe.process_set_id
    ok(probe.ranks == [N - 1] and hvd.remove_process_set(probe),
       "init's failed list was rolled back: %s" % probe)
    # different ranks on different ranks: hk's mismatch, everywhere
    raises(hvd.HorovodInternalError, lambda: hvd.add_process_set(
        [1] if R == 0 else [N - 1]), "add_process_set of different sets",
        "ranks disagree on the members")
    # an operation pending when its set goes: rank 0 submits, N-1 not
    h = hvd.allreduce_async(x, name="pending", process_set=cross) \
        if R == 0 else None
    ok(hvd.remove_process_set(cross) is True and
       cross.process_set_id is None, "remove_process_set(cross)")
    if h is not None:
        raises(hvd.HorovodInternalError, lambda: hvd.synchronize(h),
               "an operation pending when its set was removed",
               "process set 3 was removed")

# 5. remove and add again -------------------------------------------------
lo_id = lo.process_set_id
ok(hvd.remove_process_set(lo) is True and lo.process_set_id is None and
   lo.size() is None, "remove_process_set(lo)")
ok(hvd.remove_process_set(lo) is False and
   hvd.remove_process_set(g) is False and
   hvd.remove_process_set(hvd.ProcessSet([0])) is False,
   "remove_process_set of a removed, the global, an unregistered set")
raises(ValueError, lambda: hvd.allreduce(x, process_set=lo),
       "a removed set", "has not been registered")
again = hvd.add_process_set(range(H))
ok(again.process_set_id == last_id + 1 and
   again.ranks == list(range(H)), "ids are not given twice: %s" % again)
if again.included():
    equal(hvd.allreduce(torch.ones(2) * R, op=hvd.Sum, name="again",
                        process_set=again),
          torch.full((2,), float(sum(range(H)))), "allreduce on %s" % again)
ok(hvd.remove_process_set(again) and hvd.remove_process_set(hi),
   "every set removed")
equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="world.end"),
      torch.full((3,), float(N)), "the world's allreduce at the end")
print("sets ok: %d checks (np %d)" % (check.count, N))
hvd.shutdown()
