"""Finding the libraries of test ops (specs never in ops/, tests/codegen/specs), which CMake
builds beside libgnnfuse.so in a build with tests (gnnfuse_add_test_ops in CMakeLists.txt)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Tuple

import pytest

import gnnfuse

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_test_ops_library(name: str) -> Tuple[str, str]:
    """``(libgnnfuse.so, lib<name>.so)`` of one CMake build: the folder of the loaded library
    when it is a CMake build's ``libgnnfuse.so``, else ``build/tests`` (an older
    scripts/run_tests.sh) or ``build`` (scripts/run_tests.sh's) of this checkout. A test-op library links that ``libgnnfuse.so``, so a test
    loads it in a subprocess whose ``GNNFUSE_LIBRARY`` is the first path. Skips without one."""
    path = gnnfuse.library_path() or ""
    folders = [os.path.dirname(path)] if os.path.basename(path) == "libgnnfuse.so" else []
    folders += [os.path.join(_ROOT, "build", "tests"), os.path.join(_ROOT, "build")]
    for folder in folders:
        main, lib = os.path.join(folder, "libgnnfuse.so"), os.path.join(folder, f"lib{name}.so")
        if os.path.isfile(main) and os.path.isfile(lib):
            return main, lib
    pytest.skip(f"needs a CMake build with tests (lib{name}.so beside libgnnfuse.so)")


def run_with_test_ops(name: str, script: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs ``script`` (Python source, written to a file of its own so that TorchScript can read
    the source of what it scripts) in a process of its own, with ``sys.argv[1]`` the path of
    ``lib<name>.so`` and ``GNNFUSE_LIBRARY`` the ``libgnnfuse.so`` it links, so that the test
    ops never load into the test process. Skips without such a build."""
    main_lib, lib = find_test_ops_library(name)
    env = dict(os.environ, GNNFUSE_LIBRARY=main_lib, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(gnnfuse.__file__))))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "script.py")
        with open(path, "w") as f:
            f.write(script)
        return subprocess.run([sys.executable, path, lib], env=env, capture_output=True, text=True, timeout=timeout)
