"""The demo end to end on a small generated graph: both models train, the GAT is scripted, saved
and reloaded, the GAT is exported and compiled by AOTInductor, and the C++ example (examples/cpp, built with
find_package(gnnfuse) against `cmake --install` of this build) loads both and reproduces the
Python output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_demo_trains_scripts_and_runs_from_cpp(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--nodes", "3000", "--epochs", "30", "--no-pyg",
         "--out", str(tmp_path)],
        env=env, text=True, capture_output=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "C++ LibTorch: scripted GAT" in run.stdout
    assert "C++ AOTInductor: compiled GAT package" in run.stdout
    assert (tmp_path / "gat.pt2").exists()
    assert "gnnfuse::gat" in run.stdout
    assert (tmp_path / "gat_scripted.pt").exists()
