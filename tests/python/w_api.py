"""Worker: Horovod's API details that scripts rely on, at any np.

  w_api.py NCCL CUDA MPI    the expected nccl_built() code and whether
                            libhk_cuda.so and libhk_mpi.so are built (the
                            driver reads them from hkrun --version and the
                            build folder)

1. Errors as Horovod raises them: a name already in flight is a
   ValueError (hk.HKDuplicateName); ranks that disagree (dtype, count, or
   the same count in another shape: 17x1311 against 391x57, every
   collective) raise HorovodInternalError (a RuntimeError, also hk.HKError
   HK_ERR_MISMATCH) on every rank with hk's message naming both; refused
   arguments are ValueError (an unsupported dtype, bad splits, average
   with op, an unknown op, an unregistered process set) or TypeError (a
   root_rank or name of the wrong type); Adasum NotImplementedError; a
   0-d reduce-scatter HorovodInternalError (alone and in a group);
   HostsUpdatedInterrupt exists and is a RuntimeError.
2. grouped_allgather(_async) and grouped_reducescatter(_async) (hk
   groups: mixed dtypes, shapes, non-contiguous members) against serial
   results; an allgather's first extent may differ between ranks, its
   others may not.
3. Integer tensors with scale factors: Horovod's float64 scaling,
   truncated (allreduce Sum and Average, reducescatter).
4. The build queries: nccl_built() is the version code, cuda_built(),
   mpi_built() what the build holds, mpi_enabled() False under hkrun's
   own rendezvous, mpi_threads_supported() a ValueError then, gloo,
   rocm, ddl and ccl False.
5. Process sets: global_process_set (id 0, every rank), size/rank/
   included; an unregistered ProcessSet refused (the sets themselves:
   w_sets.py).
Prints "api ok: N checks" per rank.
"""

import sys

import torch

import hk
import hk.torch as hvd
from checking import Checks

hvd.init()
R, N = hvd.rank(), hvd.size()
EXPECT_NCCL, EXPECT_CUDA, EXPECT_MPI = (int(sys.argv[1]), sys.argv[2] == "1",
                                        sys.argv[3] == "1")
check = Checks(R)
fail, ok, raises, equal = check.fail, check.ok, check.raises, check.equal


def data(q, shape, salt, dtype=torch.float32):
    g = torch.Generator().manual_seed(61 * q + salt)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


# 1. errors ------------------------------------------------------------
h = hvd.allreduce_async(torch.ones(2), name="dup.%d" % R)
e = raises(ValueError, lambda: hvd.allreduce_async(torch.ones(2),
                                                   name="dup.%d" % R),
           "a name in flight", "allreduce.dup.%d" % R)
ok(isinstance(e, hk.HKDuplicateName) and isinstance(e, hk.HKError) and
   e.status_name == "HK_ERR_DUPLICATE_NAME" and
   not isinstance(e, hvd.HorovodInternalError),
   "duplicate name: class %s" % (type(e).__mro__,))
hvd.barrier()  # every rank's dup.<r> is in flight until all submit it
for o in [h] + [hvd.allreduce_async(torch.ones(2), name="dup.%d" % r)
                for r in range(N) if r != R]:
    hvd.synchronize(o)

if N > 1:
    def mismatch(fn, what, *words):
        e = raises(hvd.HorovodInternalError, fn, what, *words)
        ok(isinstance(e, RuntimeError) and isinstance(e, hk.HKError) and
           e.status_name == "HK_ERR_MISMATCH",
           "%s: %s %s" % (what, type(e).__mro__, e.status_name))

    big = torch.zeros(17, 1311) if R == 0 else torch.zeros(391, 57)
    others = "ranks 1, 2, 3"[:7 + 3 * (N - 2)] if N > 2 else "rank 1"
    for kind, fn in (
            ("allreduce", lambda: hvd.allreduce(big, name="shape")),
            ("broadcast", lambda: hvd.broadcast(big, 0, name="shape")),
            ("allgather", lambda: hvd.allgather(big.t(), name="shape")),
            ("reducescatter", lambda: hvd.reducescatter(big, name="shape")),
            ("grouped_allreduce", lambda: hvd.grouped_allreduce(
                [torch.ones(3), big], name="shape"))):
        words = ["%s.shape" % kind, "shape differs", "on rank 0", others]
        words += ["17x1311", "391x57"] if kind != "allgather" else \
            ["*x17", "*x391"]
        mismatch(fn, "%s of 17x1311 against 391x57" % kind, *words)
    a2a = torch.zeros(2 * N, 3 + (R == 0))
    mismatch(lambda: hvd.alltoall(a2a, name="shape"), "alltoall shapes",
             "alltoall.shape", "*x4 on rank 0", "*x3 on")
    mismatch(lambda: hvd.allreduce(
        torch.zeros(3, dtype=torch.float32 if R == 0 else torch.float64),
        name="dtype"), "dtypes", "dtype differs")
    # the job goes on, and an allgather's rows may differ
    equal(hvd.allgather(torch.ones(R + 1, 2), name="rows"),
          torch.ones(N * (N + 1) // 2, 2), "allgather of different rows")

raises(ValueError, lambda: hvd.allreduce(torch.zeros(2, dtype=torch.complex64)),
       "complex64", "not supported")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), average=True,
                                         op=hvd.Sum), "average and op")
raises(ValueError, lambda: hvd.allreduce(torch.ones(2), op=17), "op 17")
raises(NotImplementedError, lambda: hvd.allreduce(torch.ones(2),
                                                  op=hvd.Adasum), "Adasum")
raises(TypeError, lambda: hvd.broadcast(torch.ones(2), "0"),
       "root_rank '0'")
raises(TypeError, lambda: hvd.allreduce(torch.ones(2), name=3), "name 3")
raises(ValueError, lambda: hvd.alltoall(torch.ones(N + 1, 2),
                                        splits=[1] * (N + 2)),
       "splits of the wrong length")
if N > 1:
    raises(ValueError, lambda: hvd.alltoall(torch.ones(N + 1, 2)),
           "rows not divisible", "not an even multiple")
e = raises(hvd.HorovodInternalError,
           lambda: hvd.reducescatter(torch.tensor(float(R))),
           "a 0-d reducescatter", "rank-zero tensor")
ok(isinstance(e, RuntimeError), "0-d reducescatter is a RuntimeError")
raises(hvd.HorovodInternalError, lambda: hvd.grouped_reducescatter(
    [torch.zeros(3, 1), torch.tensor(1.0)]), "a 0-d member of a group",
    "rank-zero tensor")
ok(issubclass(hvd.HostsUpdatedInterrupt, RuntimeError) and
   hvd.HostsUpdatedInterrupt(True).skip_sync is True,
   "HostsUpdatedInterrupt")
ok(issubclass(hvd.HorovodInternalError, RuntimeError),
   "HorovodInternalError is a RuntimeError")

# 2. grouped allgather / reducescatter ---------------------------------
xs = {q: [data(q, (q + 1, 3), 1), data(q, (2, q + 2), 2, torch.int32).t(),
          data(q, (q % 2, 2, 2), 3, torch.float64)] for q in range(N)}
got = hvd.grouped_allgather(xs[R], name="gag")
got2 = hvd.synchronize(hvd.grouped_allgather_async(xs[R], name="gag.async"))
for i in range(3):
    want = torch.cat([xs[q][i] for q in range(N)])
    equal(got[i], want, "grouped_allgather %d" % i)
    equal(got2[i], want, "grouped_allgather_async %d" % i)
rows = 2 * N + 1
qq, m = divmod(rows, N)
lo = R * qq + min(R, m)
hi = lo + qq + (1 if R < m else 0)
xs = {q: [data(q, (rows, 2), 4), data(q, (rows,), 5, torch.int64),
          data(q, (3, rows), 6, torch.float64).t()] for q in range(N)}
for op, name in ((hvd.Sum, "sum"), (hvd.Max, "max")):
    fold = (lambda v: sum(v)) if op == hvd.Sum else \
        (lambda v: torch.stack(v).max(0).values)
    got = hvd.grouped_reducescatter(xs[R], op=op, name="grs." + name)
    got2 = hvd.synchronize(hvd.grouped_reducescatter_async(
        xs[R], op=op, name="grs.async." + name))
    for i in range(3):
        want = fold([xs[q][i] for q in range(N)])[lo:hi]
        equal(got[i], want, "grouped_reducescatter %s %d" % (name, i))
        equal(got2[i], want, "grouped_reducescatter_async %s %d" % (name, i))
fl = {q: [data(q, (rows, 2), 7), data(q, (rows,), 8, torch.float64)]
      for q in range(N)}
got = hvd.grouped_reducescatter(fl[R], op=hvd.Sum, prescale_factor=0.5,
                                postscale_factor=4.0, name="grs.scaled")
for i in range(2):
    equal(got[i], (sum(fl[q][i] * 0.5 for q in range(N)) * 4.0)[lo:hi],
          "grouped_reducescatter scaled %d" % i)

# 3. integers with scale factors (Horovod: float64, truncated) ---------
ints = {q: data(q, (9,), 9, torch.int32) for q in range(N)}
s = sum((ints[q].double() * 0.3).to(torch.int32) for q in range(N))
equal(hvd.allreduce(ints[R], op=hvd.Sum, prescale_factor=0.3,
                    postscale_factor=2.5, name="int.scaled"),
      (s.double() * 2.5).to(torch.int32), "int32 allreduce Sum scaled")
s = sum(ints[q] for q in range(N))
equal(hvd.allreduce(ints[R], op=hvd.Average, postscale_factor=3.0,
                    name="int.avg"),
      (s.double() * (3.0 / N)).to(torch.int32), "int32 allreduce Average")
t = ints[R].clone()
hvd.allreduce_(t, op=hvd.Sum, postscale_factor=0.5, name="int.inplace")
equal(t, (s.double() * 0.5).to(torch.int32), "int32 allreduce_ scaled")
li = {q: data(q, (rows, 2), 10, torch.int64) for q in range(N)}
s = sum((li[q].double() * 2.5).to(torch.int64) for q in range(N))
equal(hvd.reducescatter(li[R], op=hvd.Sum, prescale_factor=2.5,
                        name="int.rs"), s[lo:hi], "int64 reducescatter")

# 4. build queries -------------------------------------------------------
ok(hvd.nccl_built() == EXPECT_NCCL and type(hvd.nccl_built()) is int,
   "nccl_built() %r, want %d" % (hvd.nccl_built(), EXPECT_NCCL))
ok(hvd.cuda_built() is EXPECT_CUDA, "cuda_built() %r" % hvd.cuda_built())
ok(hvd.mpi_built() is EXPECT_MPI, "mpi_built() %r" % hvd.mpi_built())
ok(hvd.mpi_enabled() is False, "mpi_enabled() under hkrun's rendezvous")
raises(ValueError, hvd.mpi_threads_supported, "mpi_threads_supported()",
       "not enabled")
for q in ("gloo_built", "gloo_enabled", "rocm_built", "ddl_built",
          "ccl_built"):
    ok(getattr(hvd, q)() is False, "%s() %r" % (q, getattr(hvd, q)()))

# 5. process sets --------------------------------------------------------
g = hvd.global_process_set
ok(g.process_set_id == 0 and g.size() == N and g.rank() == R and
   g.included() and g.ranks == list(range(N)), "global_process_set %s" % g)
ps = hvd.ProcessSet([0])
ok(ps.process_set_id is None and ps.size() is None and ps.ranks == [0],
   "an unregistered ProcessSet: %s" % ps)
raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=ps),
       "an unregistered process set", "not been registered")
ok(hvd.remove_process_set(g) is False and hvd.remove_process_set(ps) is False,
   "remove_process_set of the global or an unregistered set")
equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=g, name="ps"),
      torch.full((2,), float(N)), "allreduce over global_process_set")

print("api ok: %d checks (np %d)" % (check.count, N))
hvd.shutdown()
