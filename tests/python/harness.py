"""What the Python tests share: skipping without torch, running a worker
script under hkrun with a deadline, and checking its output.

The driver (test_hk_torch.py) is started by ctest with the paths it needs
(--hkrun, --lib); workers (w_*.py) run under hkrun and import hk.torch
from python/ of this checkout.
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PYDIR = os.path.join(ROOT, "python")
SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


def require_torch():
    """Exits with SKIP (and says why) when this python has no torch."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("SKIP: %s has no torch (%s); scripts/setup.sh installs "
              "Debian's python3-torch for /usr/bin/python3" %
              (sys.executable, e))
        sys.exit(SKIP)


def worker_env(lib, extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"]
                                 if env.get("PYTHONPATH") else "")
    if lib:
        env["HK_LIBRARY"] = lib
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HK_TIMEOUT_S", "30")
    env.setdefault("HK_START_TIMEOUT_S", "120")
    if extra:
        env.update(extra)
    return env


class Result:
    def __init__(self, rc, out, err, secs, timed_out):
        self.rc, self.out, self.err = rc, out, err
        self.secs, self.timed_out = secs, timed_out

    def lines(self, rank=None):
        ls = self.out.splitlines()
        if rank is None:
            return ls
        p = "[%d] " % rank
        return [line[len(p):] for line in ls if line.startswith(p)]

    def dump(self):
        return ("exit %s after %.1f s%s\n--- stdout ---\n%s\n--- stderr ---\n%s"
                % (self.rc, self.secs, " (TIMED OUT)" if self.timed_out else "",
                   self.out[-6000:], self.err[-4000:]))


def run(argv, env, timeout):
    """Runs argv in its own session; kills the whole group at the deadline."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, 9)
        out, err = p.communicate()
    return Result(p.returncode, out, err, time.monotonic() - t0, timed_out)


def hkrun(hkrun_path, np, script, args=(), lib=None, extra_env=None,
          timeout=240, python=None):
    argv = [hkrun_path, "-np", str(np), python or sys.executable,
            os.path.join(HERE, script)] + list(args)
    return run(argv, worker_env(lib, extra_env), timeout)


def expect(cond, what, res=None):
    if not cond:
        print("FAIL: %s" % what)
        if res is not None:
            print(res.dump())
        sys.exit(1)
