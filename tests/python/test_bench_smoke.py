"""The one-command benchmark runner (bench/run_all.py) in its smoke mode: every benchmark script
runs end to end on small graphs with short timing (their correctness checks included) and
writes its JSON. Nothing is timed here; this only keeps the scripts from rotting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_all_quick(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--quick", "--out-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    files = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(files) == 7, files
    fusion = json.loads(next(tmp_path.glob("cpu_gcn_fusion_*.json")).read_text())
    assert {tuple(r["variants_picked"][:1]) for r in fusion["results"] if r["mode"] == "forward"} == {(0,), (1,)}
