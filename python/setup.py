"""Builds libhk with CMake and ships it inside the package, as Horovod's
own setup.py builds its core: `pip install ./python` from an hk checkout
(offline: add --no-build-isolation, which uses the setuptools already
installed, e.g. Debian's python3-setuptools or a venv's) configures the
checkout's CMake project (libhk and its MPI module only: no tests,
examples or install rules) in setuptools' build folder, builds it, and
copies libhk.so (and libhk_mpi.so where MPI was found) into hk/, where
hk/_lib.py looks first. The metadata is pyproject.toml's.

When this folder is not inside an hk checkout (a copy of python/ alone),
nothing is built: a libhk.so already copied into hk/ is shipped, else the
package finds libhk at run time (HK_LIBRARY, the loader's path; hk/_lib.py).
The CMake used is `cmake` on PATH; CMAKE_BUILD_PARALLEL_LEVEL is honoured
(default: the number of CPUs).
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _checkout():
    """The hk checkout holding this folder, or None."""
    if os.path.exists(os.path.join(ROOT, "CMakeLists.txt")) and \
            os.path.exists(os.path.join(ROOT, "include", "hk", "hk.h")):
        return ROOT
    return None


class BuildWithLibhk(build_py):
    """build_py, then libhk built by CMake and copied into the package."""

    def run(self):
        super().run()
        src = _checkout()
        if src is None:
            return  # a copy of python/ alone: the package as it is
        build = os.path.join(
            os.path.abspath(self.get_finalized_command("build").build_temp),
            "libhk")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL",
                              str(os.cpu_count() or 1))
        subprocess.check_call(
            ["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
             "-DHK_TESTS=OFF", "-DHK_EXAMPLES=OFF", "-DHK_BENCH=OFF",
             "-DHK_INSTALL=OFF", "-DHK_CUDA=OFF"])
        targets = ["hk"]
        listed = os.path.join(build, "CMakeFiles", "TargetDirectories.txt")
        if os.path.exists(listed):  # the MPI module, where MPI was found
            with open(listed) as f:
                if "/hk_mpi.dir" in f.read():
                    targets.append("hk_mpi")
        subprocess.check_call(["cmake", "--build", build, "-j", jobs,
                               "--target"] + targets)
        dest = os.path.join(self.build_lib, "hk")
        for name in ("libhk.so", "libhk_mpi.so"):
            found = glob.glob(os.path.join(build, name))
            if found:  # the file itself, not the soname link
                shutil.copyfile(os.path.realpath(found[0]),
                                os.path.join(dest, name))
        if not os.path.exists(os.path.join(dest, "libhk.so")):
            raise RuntimeError("the CMake build in %s made no libhk.so"
                               % build)


setup(cmdclass={"build_py": BuildWithLibhk})
