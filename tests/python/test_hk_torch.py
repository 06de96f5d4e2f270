"""The Python tests' driver, one ctest entry per subcommand:

  test_hk_torch.py --hkrun PATH --lib LIBHK SUBCOMMAND [ARGS]

  package          libhk found through HK_LIBRARY, next to the package, on
                   the loader's path; the errors when it is not; a world of
                   one without hkrun; `pip install` of python/ works
  ops NP           every dtype x op through hk.torch at np NP (w_ops.py)
  optimizer        DistributedOptimizer at np 2 (w_optimizer.py)
  broadcast [NP]   broadcast_parameters / broadcast_optimizer_state from a
                   non-zero root (parameters without gradients too) at np
                   NP, 2 by default (w_broadcast.py)
  faults           a mismatch and a dead rank as Python exceptions with
                   hk's message, within a deadline (w_faults.py)
  horovod_script   the Horovod-structured Fashion-MNIST script runs with
                   only its import changed (examples/pytorch/mnist.py is
                   exactly that), under hkrun at np 2 and as a world of one
  benchmark        Horovod's pytorch_synthetic_benchmark.py (a torchvision
                   ResNet-18) with only its import changed, at np 2
  grad NP          the gradient of every collective against Horovod's
                   definition computed serially (w_grad.py)
  join NP          every collective while a rank has joined (w_join.py)
  sparse NP        sparse_allreduce_async and sparse gradients in
                   DistributedOptimizer against dense serial training
                   (w_sparse.py)
  sigint [TRIES]   Ctrl-C (SIGINT to hkrun, forwarded) of a job of
                   allreduces at np 2, TRIES times (3 by default): every
                   worker ends by its KeyboardInterrupt (hkrun exits 130),
                   no double free in the exit hook, nothing left in
                   /dev/shm, no process left (w_sigint.py)
  api NP           Horovod's errors, shapes, grouped allgather and
                   reducescatter, integer scaling, build queries and
                   process sets (w_api.py); at np 2 also the MPI queries
                   under hkrun --mpi
  sets NP          process sets: every collective on two disjoint sets at
                   once and on an overlapping one, DistributedOptimizer on
                   each half against serial training, add/remove, and the
                   errors (w_sets.py)
  streams          a completed operation marks its CUDA tensors as used on
                   hk's own stream (stand-in tensors; hk_device_stream()
                   of the emulated device, and NULL without a device), at
                   np 2 under HK_DEVICE=emu and HK_DEVICE=none (w_streams.py)

Exits 77 (ctest's skip) when this python has no torch.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import expect

ap = argparse.ArgumentParser()
ap.add_argument("--hkrun", required=True)
ap.add_argument("--lib", required=True, help="libhk.so to test")
ap.add_argument("what")
ap.add_argument("args", nargs="*")
opt = ap.parse_args()
harness.require_torch()


def count(res, text):
    return sum(1 for line in res.lines() if text in line)


def py(code, env_extra=None, drop=(), pythonpath=harness.PYDIR, timeout=120):
    env = dict(os.environ)
    env.pop("HK_LIBRARY", None)
    for k in drop:
        env.pop(k, None)
    env["PYTHONPATH"] = pythonpath
    env.setdefault("OMP_NUM_THREADS", "1")
    for k in ("HK_RANK", "HK_SIZE"):
        env.pop(k, None)
    if env_extra:
        env.update(env_extra)
    return harness.run([sys.executable, "-c", code], env, timeout)


def test_package():
    lib = os.path.abspath(opt.lib)
    # 1. HK_LIBRARY names the file; a world of one without hkrun
    r = py("import hk.torch as hvd, torch\n"
           "try:\n    hvd.rank()\nexcept ValueError as e:\n"
           "    print('before init:', e)\n"
           "try:\n    hvd.allreduce(torch.ones(1))\n"
           "except hvd.HorovodInternalError as e:\n"
           "    print('collective before init:', isinstance(e, ValueError),"
           " e)\n"
           "hvd.init()\n"
           "print('loaded', hvd.library_path(), '|', hvd.library_reason())\n"
           "print('world', hvd.rank(), hvd.size(), hvd.local_rank(),\n"
           "      hvd.local_size(), hvd.cross_rank(), hvd.cross_size())\n"
           "x = torch.arange(5.)\n"
           "assert torch.equal(hvd.allreduce(x), x)\n"
           "assert torch.equal(hvd.allgather(x), x)\n"
           "print('one ok')\n", {"HK_LIBRARY": lib})
    expect(r.rc == 0 and "one ok" in r.out, "a world of one", r)
    expect("before init: hk has not been initialized; use hvd.init()." in
           r.out, "rank() before init() raises ValueError", r)
    expect("collective before init: True hk has not been initialized; use "
           "hvd.init()." in r.out, "a collective before init() raises "
           "HorovodInternalError (as Horovod) that is a ValueError too", r)
    expect("loaded %s | HK_LIBRARY=%s" % (lib, lib) in r.out,
           "HK_LIBRARY chose the library and says so", r)
    expect("world 0 1 0 1 0 1" in r.out, "rank/size of a world of one", r)
    # 2. HK_LIBRARY as a folder
    r = py("import hk; print('loaded', hk.library_path())",
           {"HK_LIBRARY": os.path.dirname(lib)})
    # (the folder's libhk.so: the link to what --lib names, libhk.so.0.x)
    expect(r.rc == 0 and "loaded %s" % os.path.join(os.path.dirname(lib),
                                                    "libhk.so") in r.out,
           "HK_LIBRARY naming the folder", r)
    # 3. HK_LIBRARY wrong: a clear ImportError, nothing else tried
    r = py("import hk.torch", {"HK_LIBRARY": "/nonexistent/libhk.so"})
    expect(r.rc != 0 and "LibraryNotFound" in r.err and
           "/nonexistent/libhk.so (HK_LIBRARY=/nonexistent/libhk.so): no such "
           "file" in r.err, "a missing HK_LIBRARY is named", r)
    libz = None
    for cand in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/libz.so.1"):
        if os.path.exists(cand):
            libz = cand
    if libz:
        r = py("import hk; hk.lib()", {"HK_LIBRARY": libz})
        expect(r.rc != 0 and "lacks hk_init" in r.err,
               "a library that is not libhk is refused", r)
    with tempfile.TemporaryDirectory() as tmp:
        # 4. next to the package (a copy outside any checkout)
        pkg = os.path.join(tmp, "site")
        shutil.copytree(os.path.join(harness.PYDIR, "hk"),
                        os.path.join(pkg, "hk"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        shutil.copy(lib, os.path.join(pkg, "hk", "libhk.so"))
        r = py("import hk; print('loaded', hk.library_path(), '|',"
               " hk.library_reason())", pythonpath=pkg)
        expect(r.rc == 0 and "| next to the hk package" in r.out and
               os.path.join(pkg, "hk", "libhk.so") in r.out,
               "libhk next to the package", r)
        # 5. the loader's path, and the message when it is nowhere
        os.remove(os.path.join(pkg, "hk", "libhk.so"))
        r = py("import hk; print('loaded', hk.library_path(), '|',"
               " hk.library_reason())", pythonpath=pkg,
               env_extra={"LD_LIBRARY_PATH": os.path.dirname(lib)})
        expect(r.rc == 0 and "loaded %s" % lib in r.out,
               "libhk on the loader's path (LD_LIBRARY_PATH)", r)
        r = py("import hk.torch", pythonpath=pkg, drop=("LD_LIBRARY_PATH",))
        if "loaded" not in r.out and r.rc != 0:
            expect("cannot load libhk; tried:" in r.err and
                   "next to the hk package" in r.err and
                   "set HK_LIBRARY" in r.err,
                   "no libhk anywhere: every place tried is listed", r)
        # 6. pip install of python/ (from a copy: pip builds in the tree)
        src = os.path.join(tmp, "src")
        shutil.copytree(harness.PYDIR, src,
                        ignore=shutil.ignore_patterns("__pycache__",
                                                      "*.egg-info", "build"))
        target = os.path.join(tmp, "installed")
        p = harness.run([sys.executable, "-m", "pip", "install", "--quiet",
                         "--no-build-isolation", "--no-deps",
                         "--disable-pip-version-check", "--no-index",
                         "--target", target, src], dict(os.environ), 240)
        expect(p.rc == 0, "pip install --target of python/", p)
        r = py("import hk.torch as hvd, torch; print('from', hvd.__file__);"
               " hvd.init(); print('sum', hvd.allreduce(torch.ones(2),"
               " op=hvd.Sum).tolist())", {"HK_LIBRARY": lib},
               pythonpath=target)
        expect(r.rc == 0 and target in r.out and "sum [1.0, 1.0]" in r.out,
               "the pip-installed package works", r)
    print("package ok")


def test_ops():
    np = int(opt.args[0]) if opt.args else 2
    r = harness.hkrun(opt.hkrun, np, "w_ops.py", lib=opt.lib, timeout=280)
    expect(r.rc == 0 and count(r, "ops ok") == np,
           "dtype x op at np %d" % np, r)
    print("\n".join(r.lines(0)))


def test_optimizer():
    r = harness.hkrun(opt.hkrun, 2, "w_optimizer.py", lib=opt.lib,
                      timeout=280)
    expect(r.rc == 0 and count(r, "optimizer all ok") == 2,
           "DistributedOptimizer at np 2", r)
    print("\n".join(r.lines(0)))


def test_broadcast():
    n = np_arg()
    r = harness.hkrun(opt.hkrun, n, "w_broadcast.py", lib=opt.lib,
                      timeout=280)
    expect(r.rc == 0 and count(r, "broadcast ok") == 5 * n,
           "broadcast_parameters / broadcast_optimizer_state from rank %d "
           "at np %d" % (n - 1, n), r)
    print("\n".join(r.lines(0)))


def test_faults():
    r = harness.hkrun(opt.hkrun, 2, "w_faults.py", ["mismatch"], lib=opt.lib,
                      timeout=240)
    expect(r.rc == 0 and count(r, "mismatch ok") == 2 and
           count(r, "CAUGHT HK_ERR_MISMATCH: tensor 'allreduce.count': ranks "
                 "disagree: count differs: count 4 on rank 0; count 5 on "
                 "rank 1.") == 2,
           "mismatches as HorovodInternalError with hk's message", r)
    print("\n".join(r.lines(0)))
    # a dead rank: the others raise at once (hkrun tells them); the whole
    # job ends well within the deadline. hkrun's grace period is raised so
    # that the survivors print before hkrun's SIGTERM.
    argv = [opt.hkrun, "--grace-period", "20", "-np", "3", sys.executable,
            os.path.join(harness.HERE, "w_faults.py"), "dead"]
    r = harness.run(argv, harness.worker_env(opt.lib), 90)
    expect(not r.timed_out, "a dead rank must not hang the others", r)
    expect(r.rc == 128 + 9, "hkrun exits with the killed rank's status", r)
    for rank in (0, 2):
        got = [line for line in r.lines(rank) if "CAUGHT" in line]
        expect(len(got) == 1 and "HK_ERR_PEER_LOST" in got[0] and
               "rank 1 (pid" in got[0] and "killed by signal 9" in got[0],
               "rank %d raised HorovodInternalError naming rank 1" % rank, r)
        print("[%d] %s" % (rank, got[0]))
    expect(r.secs < 60, "the job ended %.1f s after the start" % r.secs, r)
    print("faults ok (the dead-rank job ended in %.1f s)" % r.secs)


def np_arg():
    return int(opt.args[0]) if opt.args else 2


def run_worker(script, args=(), ok_line=None, timeout=280):
    """script at np NP under hkrun: every rank prints ok_line."""
    n = np_arg()
    r = harness.hkrun(opt.hkrun, n, script, list(args), lib=opt.lib,
                      timeout=timeout)
    expect(r.rc == 0 and count(r, ok_line) == n,
           "%s at np %d" % (script, n), r)
    print("\n".join(r.lines(0)[-1:]))


def test_grad():
    run_worker("w_grad.py", ok_line="grad ok")


def test_join():
    run_worker("w_join.py", ok_line="join ok")


def test_sparse():
    run_worker("w_sparse.py", ok_line="sparse ok")


def test_sets():
    # at np 4, hk_init makes the sets from HK_PROCESS_SETS first (w_sets.py)
    n = np_arg()
    env = {"HK_PROCESS_SETS": "2,3;0,1"} if n == 4 else None
    r = harness.hkrun(opt.hkrun, n, "w_sets.py", lib=opt.lib,
                      extra_env=env, timeout=280)
    expect(r.rc == 0 and count(r, "sets ok") == n, "w_sets.py at np %d%s" %
           (n, " with HK_PROCESS_SETS" if env else ""), r)
    print("\n".join(r.lines(0)[-1:]))


def nccl_code(version_text):
    """NCCL_VERSION_CODE of the NCCL that hkrun --version finds behind
    libhk_cuda.so ('NCCL: ... here: NCCL X.Y.Z', with a GPU or without:
    nccl_built() is what the build holds) (X*1000+Y*100+Z before 2.9,
    X*10000+Y*100+Z since), else 0."""
    m = re.search(r"^NCCL: .*here: NCCL (\d+)\.(\d+)\.(\d+)", version_text,
                  re.M)
    if not m:
        return 0
    x, y, z = (int(g) for g in m.groups())
    return x * (10000 if (x, y) >= (2, 9) else 1000) + y * 100 + z


def test_api():
    libdir = os.path.dirname(os.path.realpath(opt.lib))
    version = harness.run([opt.hkrun, "--version"], dict(os.environ), 30)
    mpi = os.path.exists(os.path.join(libdir, "libhk_mpi.so"))
    cuda = os.path.exists(os.path.join(libdir, "libhk_cuda.so"))
    run_worker("w_api.py", [str(nccl_code(version.out)), str(int(cuda)),
                            str(int(mpi))], ok_line="api ok")
    if np_arg() != 2 or not mpi or not shutil.which("mpirun"):
        return
    # started by mpirun, the job uses MPI: mpi_enabled() and
    # mpi_threads_supported() say so (hk asks for MPI_THREAD_MULTIPLE)
    # (one write per line: mpirun tags each chunk it forwards; with print
    # the two ranks' lines were once seen interleaved, a line's text and
    # its newline forwarded apart: os.write, one call)
    code = ("import hk.torch as hvd, torch, os; hvd.init(); "
            "os.write(1, ('mpi %s %s %s\\n' % (hvd.mpi_enabled(), "
            "hvd.mpi_threads_supported(), "
            "hvd.allreduce(torch.ones(1), op=hvd.Sum).item())).encode())")
    r = harness.run([opt.hkrun, "--mpi", "-np", "2", sys.executable, "-c",
                     code], harness.worker_env(opt.lib), 120)
    expect(r.rc == 0 and count(r, "mpi True True 2.0") == 2,
           "mpi_enabled() and mpi_threads_supported() under hkrun --mpi", r)
    print("under hkrun --mpi: mpi_enabled() True, mpi_threads_supported() "
          "True")


def test_benchmark():
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        print("SKIP: no torchvision for %s (%s); scripts/setup.sh installs "
              "Debian's python3-torchvision" % (sys.executable, e))
        sys.exit(harness.SKIP)
    script = os.path.join(harness.HERE,
                          "horovod_pytorch_synthetic_benchmark.py")
    with open(script) as f:
        lines = f.read().split("\n")
    new = ["import hk.torch as hvd" if line == "import horovod.torch as hvd"
           else line for line in lines]
    expect(sum(a != b for a, b in zip(lines, new)) == 1,
           "exactly one import line changed")
    with tempfile.TemporaryDirectory() as tmp:
        changed = os.path.join(tmp, "pytorch_synthetic_benchmark.py")
        with open(changed, "w") as f:
            f.write("\n".join(new))
        args = ["--no-cuda", "--model", "resnet18", "--batch-size", "4",
                "--num-warmup-batches", "1", "--num-batches-per-iter", "1",
                "--num-iters", "2"]
        r = harness.hkrun(opt.hkrun, 2, changed, args, lib=opt.lib,
                          timeout=400)
    expect(r.rc == 0 and any(line.startswith("Total img/sec on 2 CPU(s)")
                             for line in r.lines(0)),
           "Horovod's synthetic benchmark under hkrun -np 2", r)
    print("\n".join(r.lines(0)[-2:]))


def test_horovod_script():
    script = os.path.join(harness.HERE, "horovod_pytorch_mnist.py")
    example = os.path.join(harness.ROOT, "examples", "pytorch", "mnist.py")
    with open(script) as f:
        text = f.read()
    imports = [line for line in text.splitlines()
               if line.strip().startswith(("import ", "from "))]
    expect("import horovod.torch as hvd" in imports and
           not any("hk" in line.split() or line.startswith("import hk") or
                   line.startswith("from hk") for line in imports),
           "the script is written for horovod.torch")
    lines = text.split("\n")
    new = ["import hk.torch as hvd" if line == "import horovod.torch as hvd"
           else line for line in lines]
    expect(sum(a != b for a, b in zip(lines, new)) == 1,
           "exactly one import line changed")
    changed = "\n".join(new)
    with open(example) as f:
        expect(f.read() == changed,
               "examples/pytorch/mnist.py is the Horovod script with only "
               "its import changed (regenerate it: sed 's/^import "
               "horovod.torch as hvd$/import hk.torch as hvd/')")
    args = ["--epochs", "1", "--train-limit", "2400", "--test-limit", "800",
            "--log-interval", "10"]
    r = harness.hkrun(opt.hkrun, 2, example, args, lib=opt.lib, timeout=280)
    expect(r.rc == 0 and any(line.startswith("final test accuracy") for line
                             in r.lines(0)), "the script under hkrun -np 2",
           r)
    print("\n".join(r.lines(0)[-3:]))
    # a world of one, without hkrun, with fp16 compression
    env = harness.worker_env(opt.lib)
    for k in ("HK_RANK", "HK_SIZE"):
        env.pop(k, None)
    r = harness.run([sys.executable, example] + args + ["--fp16-allreduce"],
                    env, 240)
    expect(r.rc == 0 and "final test accuracy" in r.out,
           "the script as a world of one", r)
    print(r.out.strip().splitlines()[-1] + " (world of one, fp16)")


def session_procs(sid):
    """The pids of processes still in session sid (hkrun's, which its
    workers stay in)."""
    left = []
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:  # after pid (comm): state ppid pgrp sid
            left.append(int(d))
    return left


def hk_segments():
    return {f for f in os.listdir("/dev/shm") if f.startswith("hk-")}


def sigint_once(k):
    """One job interrupted once both ranks run; returns its seconds."""
    before = hk_segments()
    argv = [opt.hkrun, "-np", "2", sys.executable,
            os.path.join(harness.HERE, "w_sigint.py")]
    t0 = time.monotonic()
    cwd = tempfile.mkdtemp(prefix="hk-sigint.")  # its flight records go here
    p = subprocess.Popen(argv, env=harness.worker_env(opt.lib), cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    out, err = [], []
    running = threading.Semaphore(0)

    def read(stream, into, watch):
        for line in stream:
            into.append(line)
            if watch and line.rstrip().endswith("] running"):
                running.release()
    ts = [threading.Thread(target=read, args=(p.stdout, out, True)),
          threading.Thread(target=read, args=(p.stderr, err, False))]
    for t in ts:
        t.start()
    started = running.acquire(timeout=150) and running.acquire(timeout=60)
    if started:
        os.kill(p.pid, signal.SIGINT)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = None
    left = session_procs(p.pid)
    if rc is None or left:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    for t in ts:
        t.join()
    res = harness.Result(rc, "".join(out), "".join(err),
                         time.monotonic() - t0, rc is None)
    expect(started, "try %d: both ranks ran" % k, res)
    expect(rc == 128 + signal.SIGINT,
           "try %d: hkrun exits 130 (its SIGINT, forwarded)" % k, res)
    for bad in ("double free", "corruption", "signal 6", "signal 11",
                "Segmentation", "Aborted"):
        expect(bad not in res.out + res.err, "try %d: no %r" % (k, bad), res)
    expect(res.err.count("KeyboardInterrupt") == 2,
           "try %d: both workers ended by KeyboardInterrupt" % k, res)
    expect(not left, "try %d: no process left (%s)" % (k, left), res)
    new = hk_segments() - before
    expect(not new, "try %d: nothing left in /dev/shm (%s)" % (k, new), res)
    shutil.rmtree(cwd)  # the flight records of the interrupted job
    return res.secs


def test_sigint():
    tries = int(opt.args[0]) if opt.args else 3
    secs = [sigint_once(k) for k in range(tries)]
    print("sigint ok: %d tries, each ended by KeyboardInterrupt (%.1f s at "
          "most)" % (tries, max(secs)))


def test_streams():
    for device in ("emu", "none"):
        r = harness.hkrun(opt.hkrun, 2, "w_streams.py", lib=opt.lib,
                          extra_env={"HK_DEVICE": device}, timeout=120)
        expect(r.rc == 0 and count(r, "streams ok") == 2,
               "w_streams.py at np 2, HK_DEVICE=%s" % device, r)
        print("\n".join(r.lines(0)[-1:]))


def elastic_replay(worlds, steps):
    """w_elastic.py's weights after steps, computed serially in float64:
    worlds(step) is the list of slots that made that step."""
    w = [0.5, -0.25, 0.125, 1.0]
    for step in range(steps):
        slots = worlds(step)
        g = [0.0] * 4
        for slot in slots:
            x = [float(((slot + 1) * (i + 1) + step) % 5 - 2)
                 for i in range(4)]
            err = sum(a * b for a, b in zip(w, x)) - float(step % 3)
            for i in range(4):
                g[i] += 2 * err * x[i] / len(slots)
        w = [a - 0.125 * b for a, b in zip(w, g)]
    return w


def test_elastic():
    # hvd.elastic.run: a rank lost while the job re-forms (elastic_reset
    # raises RANKS_CHANGED once) makes it call elastic_reset again, not
    # give up (hk's calls stood in for: no job)
    r = py("import hk, hk.torch.elastic as el\n"
           "from hk.errors import HKInternalError, RANKS_CHANGED\n"
           "calls = []\n"
           "def reset():\n"
           "    calls.append('reset')\n"
           "    if calls.count('reset') == 1:\n"
           "        raise HKInternalError(RANKS_CHANGED, 'lost again')\n"
           "hk.elastic_reset = reset\n"
           "hk.size = lambda: 2\n"
           "class S:\n"
           "    def sync(self): calls.append('sync')\n"
           "    def restore(self): calls.append('restore')\n"
           "    def on_reset(self): calls.append('on_reset')\n"
           "@el.run\n"
           "def train(state):\n"
           "    if 'restore' not in calls:\n"
           "        raise HKInternalError(RANKS_CHANGED, 'lost')\n"
           "    return 'done'\n"
           "print(train(S()), ' '.join(calls))\n",
           env_extra={"HK_LIBRARY": os.path.abspath(opt.lib)})
    expect(r.rc == 0 and r.out == "done sync restore reset reset on_reset "
           "sync\n", "hvd.elastic.run resets again after a second loss", r)
    # workers waiting to join (hk_elastic_hosts_updated says so at a
    # commit): commit raises HostsUpdatedInterrupt, and run admits them
    # (elastic_reset, nothing restored), calls the reset callbacks and
    # syncs the state before func again; with nobody waiting, commit
    # raises nothing
    r = py("import hk, hk.torch.elastic as el\n"
           "calls = []\n"
           "waiting = [False]\n"
           "def reset():\n"
           "    calls.append('reset')\n"
           "    waiting[0] = False\n"
           "hk.elastic_reset = reset\n"
           "hk.elastic_hosts_updated = lambda: waiting[0]\n"
           "hk.size = lambda: 3\n"
           "class S(el.State):\n"
           "    def __init__(self): super().__init__(None, hk.rank)\n"
           "    def save(self): calls.append('save')\n"
           "    def sync(self): calls.append('sync')\n"
           "    def restore(self): calls.append('restore')\n"
           "s = S()\n"
           "s.register_reset_callbacks([lambda: calls.append('callback')])\n"
           "@el.run\n"
           "def train(state):\n"
           "    state.commit()\n"
           "    if calls.count('save') == 1:\n"
           "        waiting[0] = True\n"
           "        state.commit()\n"
           "    return 'done'\n"
           "print(train(s), ' '.join(calls))\n",
           env_extra={"HK_LIBRARY": os.path.abspath(opt.lib)})
    expect(r.rc == 0 and r.out == "done sync save save reset callback sync "
           "save\n", "hvd.elastic.run admits workers waiting to join", r)
    # np 3, --min-np 2: the worker started as rank 1 dies at the start of
    # step 6; hvd.elastic.run on the others restores the commit of step 4,
    # re-forms as ranks 0..1 of 2 and trains to 12: steps 0-3 by slots
    # 0, 1, 2, steps 4-11 by slots 0, 2
    argv = [opt.hkrun, "-np", "3", "--min-np", "2", sys.executable,
            os.path.join(harness.HERE, "w_elastic.py"), "12", "4", "1", "6"]
    r = harness.run(argv, harness.worker_env(opt.lib), 120)
    expect(not r.timed_out and r.rc == 0, "the elastic job finishes", r)
    expect("rank 1 (pid" in r.err and "was killed by signal 9; the elastic "
           "job goes on with 2 workers (--min-np 2)" in r.err,
           "hkrun goes on without the killed worker", r)
    want = elastic_replay(lambda s: [0, 1, 2] if s < 4 else [0, 2], 12)
    whole = elastic_replay(lambda s: [0, 1, 2], 12)
    expect(max(abs(a - b) for a, b in zip(want, whole)) > 1e-2,
           "the loss changes the weights (the test can tell)")
    for new_rank, slot in ((0, 0), (1, 2)):
        got = [line for line in r.lines(slot) if line.startswith("final")]
        expect(len(got) == 1 and got[0].startswith(
            "final slot=%d rank=%d size=2 resets=1 w=" % (slot, new_rank)),
               "slot %d ends as rank %d of 2 after one reset" % (slot,
                                                                new_rank), r)
        w = [float(v) for v in got[0].split("w=")[1].split(",")]
        expect(max(abs(a - b) for a, b in zip(w, want)) < 1e-5,
               "slot %d's weights %s equal the serial replay %s" %
               (slot, w, want), r)
        expect(count(r, "reset: rank %d of 2 (slot %d) from step 4" %
                     (new_rank, slot)) == 1, "slot %d restored step 4" % slot,
               r)
    died = float(re.search(r"dying at step 6 t=([0-9.]+)", r.out).group(1))
    back = min(float(t) for t in re.findall(r"resumed step 4 t=([0-9.]+)",
                                             r.out))
    print("elastic ok: %.1f ms from the loss to the first step after it"
          % ((back - died) * 1e3))
    # below --min-np without a discovery script nothing can join: hkrun
    # fails the job at once, and hvd.elastic.run raises
    # HorovodInternalError with hkrun's words
    argv = [opt.hkrun, "-np", "2", "--min-np", "2", "--elastic-timeout", "2",
            sys.executable, os.path.join(harness.HERE, "w_elastic.py"), "12",
            "4", "1", "6"]
    r = harness.run(argv, harness.worker_env(opt.lib), 120)
    expect(not r.timed_out and r.rc == 128 + 9,
           "below --min-np the job fails with the lost worker's status", r)
    got = [line for line in r.lines(0) if line.startswith("CAUGHT")]
    expect(len(got) == 1 and got[0].startswith(
        "CAUGHT HK_ERR_PEER_LOST: hk_elastic_reset: elastic job below "
        "--min-np 2: 1 worker left, 1 more needed (lost: rank 1 (pid ") and
        got[0].endswith("none can join (no --host-discovery-script; hkrun "
                        "starts no new workers yet)"),
        "rank 0 raised HorovodInternalError saying what is missing", r)
    print("[0] " + got[0])
    # the elastic example: a worker lost in the first epoch, the job ends
    # at np 2 with a test accuracy
    example = os.path.join(harness.ROOT, "examples", "pytorch",
                           "mnist_elastic.py")
    argv = [opt.hkrun, "-np", "3", "--min-np", "2", sys.executable, example,
            "--epochs", "1", "--train-limit", "3000", "--test-limit", "500",
            "--kill-rank", "1", "--kill-batch", "6", "--batches-per-commit",
            "4"]
    r = harness.run(argv, harness.worker_env(opt.lib), 300)
    expect(not r.timed_out and r.rc == 0, "mnist_elastic.py finishes", r)
    expect(count(r, "re-formed: rank 0 of 2 (started as rank 0)") == 1 and
           count(r, "re-formed: rank 1 of 2 (started as rank 2)") == 1,
           "mnist_elastic.py re-forms without rank 1", r)
    expect(re.search(r"final test accuracy 0\.\d+ after 1 epochs, .* np 2",
                     r.out), "mnist_elastic.py ends at np 2", r)
    print("\n".join(r.lines(0)[-1:]))


{"package": test_package, "ops": test_ops, "optimizer": test_optimizer,
 "broadcast": test_broadcast, "faults": test_faults,
 "horovod_script": test_horovod_script, "benchmark": test_benchmark,
 "grad": test_grad, "join": test_join, "sparse": test_sparse,
 "api": test_api, "sets": test_sets, "sigint": test_sigint,
 "streams": test_streams, "elastic": test_elastic}[opt.what]()
