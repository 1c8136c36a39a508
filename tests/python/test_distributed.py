"""Scale-out: examples/distributed_gat.py trains a GAT of gnnfuse layers with
DistributedDataParallel (gloo, 2 processes) on sampled mini-batches; its --check asserts that
the all-reduced gradients equal the single-process average over the shards.

It can never hang CI: the example's collectives and teardown give up after --timeout, its
launcher terminates workers past --deadline (naming them), and the test kills the example's
whole process group (workers included) past its own timeout, then shows everything they printed
(a hung worker's thread stacks among it: docs/RELIABILITY.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Seconds: a gloo collective or the teardown (the example's --timeout), the workers in all
# (--deadline), the whole example (the test). A run takes about 6 s on an idle 2-core machine,
# 30 s at a load of 6 and 40 s at 9 (three processes importing torch, gnnfuse and PyG), so the
# limits leave room for a load of 15+: a hang in the teardown (the one seen) ends 60 s after
# the teardown began, any other hang at most 180 s after the start (it once took 600 s).
COLLECTIVE, WORKERS, EXAMPLE = 60, 150, 180


def run_example(*args: str, timeout: float = EXAMPLE) -> subprocess.CompletedProcess:
    """Runs examples/distributed_gat.py in a session of its own; past `timeout` the session (the
    launcher and its spawned workers) is killed and the output so far returned, returncode None."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "distributed_gat.py"), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the workers are in the launcher's session
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, None, out, err + f"\n[test] killed after {timeout} s")


def test_ddp_two_processes_gradients_match_single_process():
    run = run_example("--world-size", "2", "--check", "--steps", "3", "--nodes", "2000",
                      "--timeout", str(COLLECTIVE), "--deadline", str(WORKERS))
    assert run.returncode == 0, f"exit status {run.returncode}\n" + run.stdout[-3000:] + run.stderr[-6000:]
    assert "check: DDP gradients vs single-process average over 2 shards" in run.stdout


def test_workers_past_the_deadline_are_terminated_and_named():
    # A deadline shorter than the workers' start: the launcher stops them itself and fails.
    run = run_example("--world-size", "2", "--steps", "1", "--nodes", "200", "--deadline", "1")
    assert run.returncode == 1, f"exit status {run.returncode}\n" + run.stdout[-3000:] + run.stderr[-3000:]
    assert "error: worker(s) of rank [0, 1] still running after 1 s: terminated" in run.stderr, run.stderr[-3000:]
