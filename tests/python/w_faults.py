"""Worker: failures surface as Python exceptions carrying hk's message.

  w_faults.py mismatch   ranks disagree on a tensor (its count, its
                         dtype, a model's shape under DistributedOptimizer):
                         every rank gets HorovodInternalError with status
                         HK_ERR_MISMATCH and hk's message, and the job goes
                         on. Prints "mismatch ok".
  w_faults.py dead       rank 1 kills itself (SIGKILL) in the middle of
                         training; the others' next hk.torch call raises
                         HorovodInternalError (HK_ERR_PEER_LOST) naming it.
                         They print "CAUGHT <status>: <message>" and exit 3.
"""

import os
import signal
import sys
import time

import torch
import torch.nn as nn

import hk.torch as hvd

mode = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()


def fail(msg):
    raise AssertionError("rank %d: %s" % (R, msg))


def expect_mismatch(fn, what, *words):
    try:
        fn()
    except hvd.HorovodInternalError as e:
        if e.status_name != "HK_ERR_MISMATCH":
            fail("%s: status %s, not HK_ERR_MISMATCH: %s" % (what,
                                                            e.status_name, e))
        for w in words:
            if w not in str(e):
                fail("%s: message lacks %r: %s" % (what, w, e))
        print("CAUGHT %s: %s" % (e.status_name, e))
        return
    fail("%s: no exception" % what)


if mode == "mismatch":
    expect_mismatch(lambda: hvd.allreduce(torch.zeros(4 + R), name="count"),
                    "count", "allreduce.count", "count differs", "rank 0",
                    "rank 1")
    expect_mismatch(lambda: hvd.allreduce(
        torch.zeros(4, dtype=torch.float32 if R == 0 else torch.float64),
        name="dtype"), "dtype", "allreduce.dtype", "dtype")
    expect_mismatch(lambda: hvd.broadcast(torch.zeros(3), root_rank=R,
                                          name="root"), "root", "root")
    # a model whose shape differs between ranks, under DistributedOptimizer:
    # step() raises it
    model = nn.Linear(4, 2 + (R == 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(),
                                                   lr=0.1),
                                   named_parameters=model.named_parameters())
    model(torch.ones(3, 4)).sum().backward()
    expect_mismatch(opt.step, "DistributedOptimizer.step",
                    "ranks disagree", "on rank 1")
    # the job goes on
    s = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after")
    if s.tolist() != [float(N)] * 3:
        fail("allreduce after the mismatches: %s" % s.tolist())
    print("mismatch ok")
    hvd.shutdown()
elif mode == "dead":
    model = nn.Linear(8, 8)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(),
                                                   lr=0.01),
                                   named_parameters=model.named_parameters())
    t0 = time.monotonic()
    try:
        for step in range(1000):
            if R == 1 and step == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            hvd.allreduce(torch.tensor(float(step)), name="loss")
    except hvd.HorovodInternalError as e:
        print("CAUGHT %s after %.1f s: %s" % (e.status_name,
                                              time.monotonic() - t0, e))
        sys.stdout.flush()
        os._exit(3)
    fail("training went on after rank 1 died")
else:
    fail("unknown mode %s" % mode)
