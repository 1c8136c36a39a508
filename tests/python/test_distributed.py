"""Scale-out: examples/distributed_gat.py trains a GAT of gnnfuse layers with
DistributedDataParallel (gloo, 2 processes) on sampled mini-batches; its --check asserts that
the all-reduced gradients equal the single-process average over the shards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ddp_two_processes_gradients_match_single_process():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "distributed_gat.py"), "--world-size", "2", "--check", "--steps", "3",
         "--nodes", "2000"],
        env=env, text=True, capture_output=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "check: DDP gradients vs single-process average over 2 shards" in run.stdout
