"""Worker (GPU machine): hk.torch next to torch.distributed's gloo backend
on the same CUDA tensors, in the same job (gpu_check.py runs it).

1. allreduce (sum) of float32 CUDA tensors from 4 KiB to 64 MiB: hk's
   result equals gloo's within a tolerance; the median time of each
   (max over ranks) is printed with its busbw.
2. training: the same model from the same start, hk.torch's
   DistributedOptimizer against DistributedDataParallel over gloo, on the
   same batches: time per step, and the parameters agree at the end.
Prints "gpu compare ok" on rank 0.
"""

import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import hk.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
if sys.argv[1:] == ["cpu"]:  # gpu_check.py --dry-run-cpu
    dev = torch.device("cpu")
    torch.cuda.synchronize = lambda *a: None
else:
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())

port = None
if R == 0:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
port = hvd.broadcast_object(port, 0, name="gloo_port")
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                        rank=R, world_size=N)


def fail(msg):
    raise AssertionError("rank %d: %s" % (R, msg))


def timed(fn, reps):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def slowest(t, name):
    return hvd.allreduce(torch.tensor(t, dtype=torch.float64), op=hvd.Max,
                         name=name).item()


if R == 0:
    print("%10s %12s %12s %12s %12s" % ("bytes", "hk ms", "gloo ms",
                                       "hk busbw", "gloo busbw"))
for k in (10, 16, 20, 24):
    n = 1 << k
    g = torch.Generator(device=dev).manual_seed(R)
    x = torch.randn(n, device=dev, generator=g)
    a, b = x.clone(), x.clone()
    hvd.allreduce_(a, op=hvd.Sum, name="cmp.%d" % n)
    dist.all_reduce(b)
    if not torch.allclose(a, b, rtol=1e-5, atol=1e-5 * N):
        fail("%d floats: hk and gloo differ by %g" % (n, (a - b).abs().max()))
    reps = 5 if k >= 24 else 10
    a, b = x.clone(), x.clone()
    th = slowest(timed(lambda: hvd.allreduce_(a, op=hvd.Average,
                                              name="t.%d" % n), reps),
                 "th.%d" % n)
    tg = slowest(timed(lambda: dist.all_reduce(b), reps), "tg.%d" % n)
    if R == 0:
        by = 4 * n
        f = 2.0 * (N - 1) / N if N > 1 else 1.0
        print("%10d %12.3f %12.3f %10.2f GB/s %8.2f GB/s" % (
            by, th * 1e3, tg * 1e3, by / th * f / 1e9, by / tg * f / 1e9),
            flush=True)


def model():
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(),
                         nn.Linear(2048, 2048), nn.ReLU(),
                         nn.Linear(2048, 10)).to(dev)


steps = 12
ma, mb = model(), model()
opt_a = hvd.DistributedOptimizer(torch.optim.SGD(ma.parameters(), lr=0.01),
                                 named_parameters=ma.named_parameters())
ddp = nn.parallel.DistributedDataParallel(
    mb, device_ids=[dev.index] if dev.type == "cuda" else None)
opt_b = torch.optim.SGD(ddp.parameters(), lr=0.01)
gen = torch.Generator(device=dev).manual_seed(100 + R)
data = [(torch.randn(64, 1024, device=dev, generator=gen),
         torch.randint(0, 10, (64,), device=dev, generator=gen))
        for _ in range(steps)]
loss_fn = nn.CrossEntropyLoss()


def train(m, opt, x, y):
    opt.zero_grad()
    loss_fn(m(x), y).backward()
    opt.step()


ta, tb = [], []
for i, (x, y) in enumerate(data):
    ta.append(timed(lambda: train(ma, opt_a, x, y), 1))
    tb.append(timed(lambda: train(ddp, opt_b, x, y), 1))
pa = torch.cat([p.detach().reshape(-1) for p in ma.parameters()])
pb = torch.cat([p.detach().reshape(-1) for p in mb.parameters()])
diff = (pa - pb).abs().max().item()
if diff > 1e-4:
    fail("DistributedOptimizer and DDP(gloo) parameters differ by %g" % diff)
everyone = hvd.allgather(pa.unsqueeze(0).cpu(), name="params")
if not all(torch.equal(everyone[r], everyone[0]) for r in range(N)):
    fail("hk-trained parameters differ between ranks")
sa = slowest(statistics.median(ta[2:]), "sa")
sb = slowest(statistics.median(tb[2:]), "sb")
if R == 0:
    print("train (%.1fM parameters, np %d): DistributedOptimizer %.2f ms/step, "
          "DDP over gloo %.2f ms/step, max |diff| %.2e" % (
              pa.numel() / 1e6, N, sa * 1e3, sb * 1e3, diff), flush=True)
dist.destroy_process_group()
if R == 0:
    print("gpu compare ok")
hvd.shutdown()
sys.exit(0)
