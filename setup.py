"""Builds gnnfuse by driving CMake (the real build, see CMakeLists.txt).

    pip install --no-build-isolation -e .   # or without -e

--no-build-isolation is required: CMake finds Torch through this very interpreter's
`torch`, which an isolated build environment would not have. torch is deliberately not a
declared dependency, so pip never resolves (and downloads) a torch of its own choosing.

Environment:
    GNNFUSE_BUILD_DIR     CMake build folder (default: build/ in the repository)
    GNNFUSE_BUILD_TESTS   1 to also build the GoogleTest suites and libgnnfuse_cuda_emu.so
    GNNFUSE_CMAKE_ARGS    extra arguments for the CMake configure step
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    """Configures and builds the CMake project, then copies libgnnfuse.so into the package.

    The library is a plain shared object that registers torch.ops.gnnfuse when loaded
    (python/gnnfuse loads it with torch.ops.load_library); the extension below only
    names where it goes: gnnfuse/_gnnfuse<EXT_SUFFIX>.
    """

    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("GNNFUSE_BUILD_DIR", os.path.join(ROOT, "build")))
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake",
            "-S", ROOT,
            "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DBUILD_TESTS=" + ("ON" if os.environ.get("GNNFUSE_BUILD_TESTS") == "1" else "OFF"),
            # libgnnfuse_cuda_emu.so (the CUDA kernels in the SIMT emulator, minutes of g++) is a
            # test library: scripts/run_tests.sh builds it in build/tests.
            "-DGNNFUSE_CUDA_EMULATED=" + ("ON" if os.environ.get("GNNFUSE_BUILD_TESTS") == "1" else "OFF"),
        ]
        # The generator is fixed by the first configure of a build folder.
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("GNNFUSE_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", build_dir, "--parallel", "2"], check=True)

        # Copy, then rename over the old file: a process that has the old library mapped
        # keeps its inode instead of seeing it rewritten under it.
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staged = target + ".tmp"
        shutil.copyfile(os.path.join(build_dir, "libgnnfuse.so"), staged)
        os.replace(staged, target)


setup(
    name="gnnfuse",
    version="0.1.0",
    description="Fused sparse operators for graph neural networks in PyTorch, generated from op specs",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[Extension("gnnfuse._gnnfuse", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
