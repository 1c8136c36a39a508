"""Packaging: `pip wheel --no-build-isolation .` builds a wheel (reusing the CMake build folder)
that, installed into an empty directory, imports and runs from another working directory, ahead
of the source checkout (its own copy of the operator library is the one loaded)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import torch, gnnfuse, gnnfuse.nn
assert gnnfuse.__file__.startswith({target!r}), gnnfuse.__file__
assert gnnfuse.library_path().startswith({target!r}), gnnfuse.library_path()
ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
x = torch.randn(3, 4, dtype=torch.float64)
ref = torch.zeros(3, 4, dtype=torch.float64).index_add_(0, ei[1], x[ei[0]])
torch.testing.assert_close(gnnfuse.spmm(ei, x), ref)
print(gnnfuse.nn.GATConv(4, 2, heads=2).double()(x, ei).shape)
"""


def test_wheel_installs_and_runs_elsewhere(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GNNFUSE_LIBRARY")}
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", str(ROOT), "-w", str(wheels)],
                   check=True, env=env, cwd=tmp_path, timeout=1200)
    (wheel,) = wheels.glob("gnnfuse-*.whl")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, env=env, timeout=600)
    run = subprocess.run([sys.executable, "-c", SCRIPT.format(target=str(target))], env=dict(env, PYTHONPATH=str(target)),
                         cwd=tmp_path, text=True, capture_output=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "torch.Size([3, 4])" in run.stdout
