"""Worker: a training loop of allreduces that Ctrl-C interrupts.

  w_sigint.py    every rank runs small allreduces (async, then
                 synchronize) until interrupted, printing "running" once
                 its first result is checked; the driver sends SIGINT to
                 hkrun (which forwards it to every worker) and checks that
                 each worker ends by its KeyboardInterrupt: no double free
                 of an hk handle in the exit hook (hk.shutdown collects
                 the handles still pending), nothing left behind.
"""

import sys

import torch

import hk.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
x = torch.ones(64)
step = 0
while True:
    hs = [hvd.allreduce_async(x * (R + 1), name="t%d" % i, op=hvd.Sum)
          for i in range(4)]
    for h in hs:
        y = hvd.synchronize(h)
        if step == 0 and not torch.equal(y, x * (N * (N + 1) // 2)):
            sys.exit("rank %d: wrong sum %s" % (R, y[:4]))
    if step == 0:
        print("running", flush=True)
    step += 1
