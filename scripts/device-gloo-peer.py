#!/usr/bin/env python3
"""torch.distributed all_reduce with the gloo backend on CUDA tensors (gloo
stages them through host memory): the peer of hk's staged GPU allreduce on
the GPU machine, run by scripts/device-check.sh at the same np and sizes.

Method and columns as the torch.distributed peer benchmark the project was
given with its Open MPI peers (float32 sum, in
place, the tensor re-initialised before every iteration, untimed barrier,
per-iteration max over ranks, median over iterations, busbw = algbw *
2(n-1)/n), except that the tensors live on the GPU (cuda:GPU for every
rank: all ranks share the one GPU) and each timing ends with
torch.cuda.synchronize(), so the copy back to the device is inside it.

Self-launching: python3 device-gloo-peer.py --np 4 [-b 1M] [-e 256M] [-f 4]
[-n 20] [-w 3] [-B 1G] [--gpu 0]
"""
import argparse
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1].lower(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def launch(args):
    with socket.socket() as s:  # a free port for the TCPStore
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.np),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
            env=env))
    return max(p.wait() for p in procs)


def worker(args):
    import torch
    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", args.gpu)
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo", rank=rank, world_size=n,
                            timeout=timedelta(minutes=5))
    maxcount = args.e // 4
    base = torch.arange(1, 14, dtype=torch.float32,
                        device=dev).repeat(maxcount // 13 + 1)[:maxcount]
    mine = base * (rank + 1)  # small integers: exact sums
    buf = torch.zeros(maxcount, dtype=torch.float32, device=dev)
    tri = n * (n + 1) // 2
    if rank == 0:
        print(f"# peer=torch-gloo-cuda torch={torch.__version__} "
              f"device={torch.cuda.get_device_name(dev)} nranks={n} "
              f"op=allreduce type=float redop=sum inplace=1 "
              f"iters<={args.n} warmup<={args.w} budget={args.B}")
        print("#%11s %12s %6s %6s %12s %12s %12s %8s %6s" % (
            "size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)",
            "busbw(GB/s)", "#wrong", "iters"), flush=True)
    nbytes = max(args.b, 4)
    while nbytes <= args.e:
        count = nbytes // 4
        iters = args.n if args.n * nbytes <= args.B else args.B // nbytes
        iters = max(iters, min(args.n, 3))
        warm = min(args.w, iters // 5 + 1)
        view, t = buf[:count], torch.zeros(iters, dtype=torch.float64)
        for it in range(-warm, iters):
            view.copy_(mine[:count])
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(view)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            if it >= 0:
                t[it] = t1 - t0
        wrong = float(view.ne(base[:count] * tri).sum())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong], dtype=torch.float64)
        dist.all_reduce(w)
        if rank == 0:
            med = float(t.median()) if iters % 2 else float(
                t.sort().values[iters // 2 - 1:iters // 2 + 1].mean())
            algbw = nbytes / med / 1e9
            print(" %11d %12d %6s %6s %12.2f %12.3f %12.3f %8d %6d" % (
                nbytes, count, "float", "sum", med * 1e6, algbw,
                algbw * 2 * (n - 1) / n, int(w.item()), iters), flush=True)
        nbytes *= args.f
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", type=int, default=4)
    p.add_argument("-b", type=parse_size, default=1 << 20)
    p.add_argument("-e", type=parse_size, default=256 << 20)
    p.add_argument("-f", type=int, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=3)
    p.add_argument("-B", type=parse_size, default=1 << 30)
    p.add_argument("--gpu", type=int, default=0)
    args = p.parse_args()
    return worker(args) if "RANK" in os.environ else launch(args)


if __name__ == "__main__":
    sys.exit(main())
