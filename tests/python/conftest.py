"""pytest configuration for the gnnfuse Python tests.

Runs against the installed package (``pip install --no-build-isolation -e .``) or,
when it is not installed, against ``python/`` in this checkout.  The compiled
library is found by :mod:`gnnfuse._library` (``$GNNFUSE_LIBRARY``, else
``python/gnnfuse/_gnnfuse*.so``); as a convenience for a plain CMake build,
``build/libgnnfuse.so`` is used when neither exists.  The header of the pytest
output says which library was loaded.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

import pytest
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))

if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # for `import graphs`

if importlib.util.find_spec("gnnfuse") is None:
    sys.path.insert(0, os.path.join(_ROOT, "python"))

_spec = importlib.util.find_spec("gnnfuse")
if _spec is not None and _spec.origin and not os.environ.get("GNNFUSE_LIBRARY"):
    _pkg_dir = os.path.dirname(_spec.origin)
    _cmake_lib = os.path.join(_ROOT, "build", "libgnnfuse.so")
    if not glob.glob(os.path.join(_pkg_dir, "_gnnfuse*.so")) and os.path.isfile(_cmake_lib):
        os.environ["GNNFUSE_LIBRARY"] = _cmake_lib

import gnnfuse  # noqa: E402  (loads the library; a missing build fails here, clearly)


def pytest_report_header(config):
    return [
        f"gnnfuse {gnnfuse.__version__} from {os.path.dirname(gnnfuse.__file__)}",
        f"gnnfuse library: {gnnfuse.library_path()}",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
    ]


def pytest_configure(config):
    config.addinivalue_line("markers", "compile: torch.compile tests (slow: tens of seconds each)")
    # torch's own notices about sparse tensors, not about gnnfuse
    config.addinivalue_line("filterwarnings", "ignore:Sparse invariant checks are implicitly disabled")
    config.addinivalue_line("filterwarnings", "ignore:Sparse CSR tensor support is in beta")
    # torch 2.13 deprecates torch.jit.{script,save,load,script_method} (its own modules emit the
    # last when torch.compile imports them); TorchScript is a deployment path tested on purpose
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")


@pytest.fixture
def restore_num_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) for one test: where it compares results bitwise
    (between runs, thread counts or a compiled graph), which the atomic schedule variants of the
    CUDA kernels (pos_split_atomic, pos_lanes_atomic) do not promise otherwise."""
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(prev)


@pytest.fixture
def dynamo_reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
