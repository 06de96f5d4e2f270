"""Worker: an elastic job under hk.torch.elastic (hkrun --min-np).

  w_elastic.py STEPS COMMIT_EVERY KILL_SLOT KILL_STEP

A linear model (4 weights, no bias, same start everywhere) trained with
SGD (lr 0.125) under DistributedOptimizer on data that depend on the rank
the worker was started as (its slot) and the step; state.commit() at the
start of every COMMIT_EVERY-th step. The worker started as KILL_SLOT
kills itself (SIGKILL) at the start of step KILL_STEP, after printing
"dying at step S t=T". The survivors' hvd.elastic.run restores, re-forms
and goes on; the reset callback prints "reset: rank R of N (slot S)", the
first step after it "resumed step S t=T". At the end each prints
"final slot=S rank=R size=N resets=K w=a,b,c,d" (%.9g each). When the
job cannot re-form (below --min-np) the HorovodInternalError that run
raises is printed as "CAUGHT <status name>: <message>", exit 3.
"""

import os
import signal
import sys
import time

import torch

import hk.torch as hvd

steps, every, kill_slot, kill_step = (int(a) for a in sys.argv[1:5])
hvd.init()
slot = hvd.rank()  # the rank it was started as: its data


def data(step):
    x = torch.tensor([[float(((slot + 1) * (i + 1) + step) % 5 - 2)
                       for i in range(4)]])
    return x, torch.tensor([[float(step % 3)]])


model = torch.nn.Linear(4, 1, bias=False)
with torch.no_grad():
    model.weight.copy_(torch.tensor([[0.5, -0.25, 0.125, 1.0]]))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.125),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
resets = []


def on_reset():
    resets.append(time.time())
    print("reset: rank %d of %d (slot %d) from step %d" %
          (hvd.rank(), hvd.size(), slot, state.step), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    resumed = not resets
    while state.step < steps:
        if state.step % every == 0:
            state.commit()
        if slot == kill_slot and state.step == kill_step:
            print("dying at step %d t=%.6f" % (state.step, time.time()),
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = data(state.step)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        opt.step()
        if not resumed:
            print("resumed step %d t=%.6f" % (state.step, time.time()),
                  flush=True)
            resumed = True
        state.step += 1


try:
    train(state)
except hvd.HorovodInternalError as e:  # the job could not re-form
    print("CAUGHT %s: %s" % (e.status_name, e), flush=True)
    sys.exit(3)
print("final slot=%d rank=%d size=%d resets=%d w=%s" %
      (slot, hvd.rank(), hvd.size(), len(resets),
       ",".join("%.9g" % v for v in model.weight.view(-1).tolist())),
      flush=True)
hvd.shutdown()
