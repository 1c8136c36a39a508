"""bench/bench_layers.py's device path (--device cuda) where there is no GPU: its helpers (the peak
CUDA memory of a step through a stand-in for torch.cuda, graphs from bench_gpu.py's npz, the
issue 25 summary) and the whole path on CPU tensors (--dry-run, with --compile through the quick
aot_eager backend). Nothing is timed here; the GPU run is bench/gpu/torch_gpu.sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_layers  # noqa: E402


class FakeCuda:
    """torch.cuda's memory counters as bench_layers.device_peak_mb uses them, over a fake
    allocator: `alloc`/`free` move the allocated bytes, the peak follows."""

    def __init__(self):
        self.allocated = self.peak = 0
        self.calls = []

    def alloc(self, n):
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def free(self, n):
        self.allocated -= n

    def synchronize(self, device):
        self.calls.append("sync")

    def reset_peak_memory_stats(self, device):
        self.calls.append("reset")
        self.peak = self.allocated

    def memory_allocated(self, device):
        return self.allocated

    def max_memory_allocated(self, device):
        self.calls.append("max")
        return self.peak


def test_device_peak_mb_counts_the_step_over_what_was_there():
    api = FakeCuda()
    api.alloc(100 << 20)  # inputs and parameters: not counted
    grads = []

    def clear():  # gradients of the last step freed
        while grads:
            api.free(grads.pop())

    def run():  # 30 MiB of saved activations for the backward, freed; 5 MiB of gradients kept
        api.alloc(30 << 20)
        api.alloc(5 << 20)
        grads.append(5 << 20)
        api.free(30 << 20)

    assert bench_layers.device_peak_mb(clear, run, "cuda", api) == pytest.approx(35.0)
    assert api.calls[-3:] == ["reset", "sync", "max"]  # the measured step after the reset, then the read


def test_load_graph_from_bench_gpu_npz(tmp_path):
    # bench_gpu.py's layout: CSR by target rows, the sources as columns, int32
    edge_index = torch.tensor([[1, 2, 0, 3, 3], [0, 0, 1, 2, 0]])
    n = 4
    order = torch.argsort(edge_index[1] * n + edge_index[0])
    dst, src = edge_index[1][order], edge_index[0][order]
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    path = tmp_path / "graphs.npz"
    np.savez(path, names=np.array(["tiny"]), tiny__rowptr=rowptr.numpy().astype(np.int32),
             tiny__col=src.numpy().astype(np.int32), tiny__shape=np.array([n, n], dtype=np.int64))
    got, got_n = bench_layers.load_graph("tiny", None, str(path))
    assert got_n == n and got.dtype == torch.int64
    assert sorted(map(tuple, got.t().tolist())) == sorted(map(tuple, edge_index.t().tolist()))
    # names the npz lacks go to datasets.py (R-MAT generated)
    ei, n2 = bench_layers.load_graph("rmat-5-2", None, str(path))
    assert n2 == 32 and ei.shape == (2, 64)


def test_issue25_summary():
    rows = [
        {"graph": "g", "layer": "GATConv", "mode": "fwd+bwd", "ok": True, "pyg_ms": 10.0, "gnnfuse_ms": 1.0,
         "speedup": 10.0, "pyg_peak_mb": 700.0, "gnnfuse_peak_mb": 100.0},
        {"graph": "g", "layer": "GATConv[compiled]", "mode": "fwd+bwd", "ok": True, "pyg_ms": 3.0, "gnnfuse_ms": 2.0,
         "speedup": 1.5, "pyg_peak_mb": 500.0, "gnnfuse_peak_mb": 90.0},
        {"graph": "g", "layer": "GATConv[fused]", "mode": "fwd+bwd", "ok": True, "pyg_ms": 10.0, "gnnfuse_ms": 4.0,
         "speedup": 2.5, "pyg_peak_mb": 700.0, "gnnfuse_peak_mb": 50.0},
        {"graph": "g", "layer": "GCNConv", "mode": "fwd+bwd", "ok": True, "pyg_ms": 1.0, "gnnfuse_ms": 1.0, "speedup": 1.0},
        # edge-feature rows are not issue 25's GATConv
        {"graph": "g", "layer": "GATConv[edge,fused]", "mode": "fwd+bwd", "ok": True, "pyg_ms": 10.0, "gnnfuse_ms": 1.0,
         "speedup": 10.0},
    ]
    got = {s["layer"]: s for s in bench_layers.issue25_summary(rows)}
    assert set(got) == {"GATConv", "GATConv[fused]"}
    assert got["GATConv"]["vs_pyg_compiled"] == pytest.approx(3.0)  # PyG compiled over our better (eager 1 ms)
    assert got["GATConv"]["memory_ratio"] == pytest.approx(7.0) and got["GATConv"]["met"]
    assert got["GATConv[fused]"]["vs_pyg_compiled"] == pytest.approx(1.5) and not got["GATConv[fused]"]["met"]


def test_cpu_library_has_no_cuda_kernels():
    assert bench_layers.has_cuda_kernels() in (False, True)  # the query works with either build
    if not torch.cuda.is_available():
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_layers.py"), "--device", "cuda",
                              "--graphs", "rmat-5-2"], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and "no GPU" in out.stderr + out.stdout


@pytest.mark.compile
def test_dry_run_end_to_end(tmp_path):
    out_json = tmp_path / "dry.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_layers.py"), "--dry-run", "--graphs", "rmat-7-4", "no-such-graph",
           "--threads", "1", "--min-reps", "1", "--min-time", "0", "--compile", "--compile-backend", "aot_eager",
           "--out", str(out_json)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    d = json.loads(out_json.read_text())
    assert d["dry_run"] and d["skipped"][0]["graph"] == "no-such-graph"
    got = {(r["layer"], r["mode"]) for r in d["results"]}
    assert got == {(layer, mode) for layer in ("GCNConv", "GATConv", "GATConv[fused]") for mode in ("forward", "fwd+bwd")} | {
        ("GCNConv[compiled]", "fwd+bwd"), ("GATConv[compiled]", "fwd+bwd")}
    assert all(r["ok"] and r["max_rel_err"] < 1e-3 for r in d["results"])
    assert all("pyg_peak_mb" in r for r in d["results"] if r["mode"] == "fwd+bwd")
    assert {s["layer"] for s in d["issue25"]} == {"GATConv", "GATConv[fused]"}
    assert "issue 25 targets" in out.stdout


def test_ops_device_dry_run(tmp_path):
    """bench/bench_ops_device.py on CPU tensors: every implementation's row, results checked
    against the float64 reference; the cuSPARSE and Tensor-Core rows record why they cannot run
    where the library has no CUDA kernels (and do not fail the run)."""
    import bench_ops_device

    out = tmp_path / "ops.json"
    rc = bench_ops_device.main(["--dry-run", "--graphs", "rmat-7-4", "--features", "3", "--min-reps", "1", "--min-time", "0",
                                "--out", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0, data
    rows = {(r["op"], r["impl"]): r for r in data["results"]}
    assert set(rows) == {("spmm", "gnnfuse"), ("spmm", "gnnfuse[cusparse]"), ("spmm", "torch.sparse"), ("spmm", "pyg"),
                         ("spmm", "gnnfuse[bf16]"), ("spmm", "gnnfuse[tc-bf16]"), ("spmm", "gnnfuse[tc-tf32]"),
                         ("spmm", "gnnfuse[tc-bf16,graph]"), ("spmm", "gnnfuse[tc-rows-bf16]"), ("spmm", "cusparse[cached]"),
                         ("sddmm", "gnnfuse"), ("sddmm", "gnnfuse[cusparse]"), ("sddmm", "pyg")}
    # the cached cuSPARSE baseline: on CPU tensors the plain call of what a GPU run captures
    cached = rows[("spmm", "cusparse[cached]")]
    assert cached["via"] == "torch.sparse.mm (int32 CSR)" and cached["cuda_graph"] is False and cached["capture_errors"] == []
    for key, r in rows.items():
        if key[1] == "gnnfuse[cusparse]" and not hasattr(torch.ops.gnnfuse, "_cuda_backend"):
            assert "no CUDA kernels" in r["error"]
        elif key[1].startswith("gnnfuse[tc-") and not hasattr(torch.ops.gnnfuse, "_cuda_tensor_cores"):
            assert "no CUDA kernels" in r["error"]
        elif key[1] == "gnnfuse[bf16]" or key[1].startswith("gnnfuse[tc-"):  # (tc: run on the emulated library)
            assert "error" not in r and r["rel_err"] <= bench_ops_device.SETTINGS[key[1]][2] and r["ms"] > 0, r
        else:
            assert "error" not in r and r["rel_err"] <= 1e-4 and r["ms"] > 0, r
    assert data["copy_gbs"] > 0 and "spmm gnnfuse vs pyg" in data["summary"]


def test_attention_device_dry_run(tmp_path):
    """bench/bench_attention_device.py on CPU tensors: a small reddit-like graph, every
    implementation checked against float64 (forward on sampled rows, the fused op's gradients on
    a subgraph) and timed forward, backward and deterministic; the generator gives the asked
    mean in-degree with a heavy tail."""
    import bench_attention_device

    out = tmp_path / "attention.json"
    rc = bench_attention_device.main(["--dry-run", "--nodes", "300", "--mean-degree", "8", "--shapes", "1x32", "2x3",
                                      "--min-reps", "1", "--min-time", "0", "--out", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0, data
    rows = {(r["impl"], r["heads"], r["dim"]): r for r in data["results"]}
    assert set(rows) == {(i, h, d) for i in ("gnnfuse[fused]", "gnnfuse[unfused]", "pyg") for h, d in ((1, 32), (2, 3))}
    for r in rows.values():
        assert "error" not in r and r["rel_err"] <= 2e-2 and r["forward_ms"] > 0 and r["deterministic_forward_backward_ms"] > 0, r
    assert rows[("gnnfuse[fused]", 1, 32)]["grad_rel_err"] <= 2e-2
    assert set(data["summary"]) == {"1x32", "2x3"}
    rowptr, col = bench_attention_device.reddit_like(2000, 50.0, 1000, torch.device("cpu"))
    deg = rowptr.long().diff()
    assert abs(col.numel() / 2000 - 50.0) < 2.5 and int(deg.max()) <= 1000 and int(deg.min()) >= 1
    assert float(deg.float().std()) > 30 and int(col.min()) >= 0 and int(col.max()) < 2000  # heavy-tailed, in range

