"""hk.torch with CUDA tensors, for the GPU machine (scripts/device-check.sh
calls it; it needs PyTorch with CUDA and a build with libhk_cuda.so next
to libhk.so):

    python3 tests/python/gpu_check.py --hkrun build/hkrun --lib build/libhk.so

Phases (each a job under hkrun with HK_DEVICE=cuda, so a missing CUDA
backend fails hk_init naming what is missing):
  1. every dtype x op with CUDA tensors (w_ops.py cuda) at np 1;
  2. the same at np 4: four processes sharing the GPU, each its own
     pseudo-host (HK_LOCAL_RANK=0 HK_LOCAL_SIZE=1), so device tensors take
     hk's staged path across "hosts";
  3. DistributedOptimizer on CUDA (w_optimizer.py cuda) at np 1 and at np 4
     pseudo-hosts; broadcast_parameters/optimizer_state on CUDA at np 4;
  4. hk next to torch.distributed's gloo on the same CUDA tensors in the
     same job (w_gpu_compare.py): allreduce results and times, and
     DistributedOptimizer against DDP over gloo, at np 1 and 4.
Prints one line per phase and "gpu_check: all N phases passed"; exits 0,
1 on a failure (its output shown), 77 when this python sees no CUDA
device (1 with --require). --quick runs phases 1, 3 (np 1) and 4 (np 1).
"""

import argparse
import os
import sys

import harness

ap = argparse.ArgumentParser()
ap.add_argument("--hkrun", required=True)
ap.add_argument("--lib", required=True)
ap.add_argument("--python", default=sys.executable)
ap.add_argument("--require", action="store_true",
                help="fail (not skip) without a CUDA device")
ap.add_argument("--quick", action="store_true")
ap.add_argument("--timeout", type=float, default=300,
                help="seconds per phase")
ap.add_argument("--dry-run-cpu", action="store_true",
                help="the same phases on CPU tensors (checks this script "
                     "and its workers on a machine without a GPU)")
opt = ap.parse_args()
DEV = "cpu" if opt.dry_run_cpu else "cuda"

try:
    if opt.dry_run_cpu:
        raise ImportError("(dry run)")
    import torch
    have = torch.cuda.is_available() and torch.cuda.device_count() > 0
    why = "torch %s, CUDA %s, %d device(s)" % (
        torch.__version__, torch.version.cuda,
        torch.cuda.device_count() if have else 0)
except ImportError as e:
    have, why = False, "no torch (%s)" % e
if opt.dry_run_cpu:
    have, why = True, "dry run on CPU tensors"
if not have:
    print("gpu_check: SKIP: %s sees no CUDA device: %s" % (opt.python, why))
    sys.exit(1 if opt.require else harness.SKIP)
print("gpu_check: %s; libhk %s" % (why, opt.lib))
cuda_mod = os.path.join(os.path.dirname(os.path.abspath(opt.lib)),
                        "libhk_cuda.so")
if not os.path.exists(cuda_mod) and not opt.dry_run_cpu:
    print("gpu_check: note: %s is missing; hk_init will fail with "
          "HK_DEVICE=cuda" % cuda_mod)

ENV = {"HK_DEVICE": "none" if opt.dry_run_cpu else "cuda"}
PSEUDO = "HK_LOCAL_RANK=0 HK_LOCAL_SIZE=1 exec"


def job(np, script, args=(), pseudo=False):
    path = os.path.join(harness.HERE, script)
    if pseudo:
        cmd = "%s %s %s %s" % (PSEUDO, opt.python, path, " ".join(args))
        argv = [opt.hkrun, "-np", str(np), "sh", "-c", cmd]
    else:
        argv = [opt.hkrun, "-np", str(np), opt.python, path] + list(args)
    return harness.run(argv, harness.worker_env(opt.lib, ENV), opt.timeout)


phases = [
    ("dtype x op, CUDA tensors, np 1", 1, "w_ops.py", [DEV], False,
     "ops ok", 1),
    ("dtype x op, CUDA tensors, np 4 pseudo-hosts", 4, "w_ops.py", [DEV],
     True, "ops ok", 4),
    ("DistributedOptimizer on CUDA, np 1", 1, "w_optimizer.py", [DEV],
     False, "optimizer all ok", 1),
    ("DistributedOptimizer on CUDA, np 4 pseudo-hosts", 4, "w_optimizer.py",
     [DEV], True, "optimizer all ok", 4),
    ("broadcast_parameters/optimizer_state on CUDA, np 4 pseudo-hosts", 4,
     "w_broadcast.py", [DEV], True, "broadcast ok", 20),  # 5 lines a rank
    ("next to gloo on CUDA tensors, np 1", 1, "w_gpu_compare.py", [DEV], False,
     "gpu compare ok", 1),
    ("next to gloo on CUDA tensors, np 4 pseudo-hosts", 4,
     "w_gpu_compare.py", [DEV], True, "gpu compare ok", 1),
]
if opt.quick:
    phases = [p for p in phases if p[1] == 1]
failed = 0
for title, np, script, args, pseudo, ok, want in phases:
    r = job(np, script, args, pseudo)
    got = sum(1 for line in r.lines() if ok in line)
    if r.rc == 0 and got == want:
        print("gpu_check: ok   %-62s %6.1f s" % (title, r.secs))
        for line in r.lines(0):
            if "|diff|" in line or "GB/s" in line or "bytes" in line:
                print("    " + line)
    else:
        failed += 1
        print("gpu_check: FAIL %s (%d of %d '%s')\n%s" % (title, got, want,
                                                          ok, r.dump()))
    sys.stdout.flush()
if failed:
    print("gpu_check: %d of %d phases failed" % (failed, len(phases)))
    sys.exit(1)
print("gpu_check: all %d phases passed" % len(phases))
