"""Issue 26's GPU benchmark scripts where there is no GPU: bench_ops_device.py's cached cuSPARSE
baseline, CUDA-graph rows and target summary (the median speedup at F in {128, 256}, the
reddit-like graph, the break-even of the Tensor-Core preprocessing), the shared reddit-like and
products-like generators (bench/datasets.py), bench_spgemm.py's workspace bound and sampled
checks, and bench/gpu/torch_gpu.sh's issue26 preset in its dry run. The Tensor-Core rows run
through the SIMT emulator's library where it is built. Nothing is timed here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnfuse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_ops_device  # noqa: E402
import bench_spgemm  # noqa: E402
import datasets  # noqa: E402


def _env(**extra):
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # torch_gpu.sh runs `python3`: this interpreter's
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def _emulated_library():
    """As test_cuda_emulated.py finds it: $GNNFUSE_CUDA_EMU_LIBRARY, else beside the library under
    test, build/tests, build."""
    if os.environ.get("GNNFUSE_CUDA_EMU_LIBRARY"):
        return os.environ["GNNFUSE_CUDA_EMU_LIBRARY"]
    for folder in (os.path.dirname(gnnfuse.library_path()), ROOT / "build" / "tests", ROOT / "build"):
        if os.path.isfile(os.path.join(folder, "libgnnfuse_cuda_emu.so")):
            return os.path.join(folder, "libgnnfuse_cuda_emu.so")
    return None


# ---------------------------------------------------------------- the summary


def test_break_even_calls():
    # 3 calls: 10 + 2 * 1 = 12 ms against 3 * 4 = 12 ms
    assert bench_ops_device.break_even_calls(10.0, 1.0, 4.0) == pytest.approx(3.0)
    assert bench_ops_device.break_even_calls(10.0, 4.0, 4.0) == math.inf  # saves nothing per call
    assert bench_ops_device.break_even_calls(10.0, 5.0, 4.0) == math.inf
    assert bench_ops_device.break_even_calls(0.5, 1.0, 4.0) == 0.0  # a first call no slower: paid at once


def _rows(points, graph_speedups=None):
    """bench_ops_device rows: per (graph, F, ms_tc, ms_base, first_ms) the three rows the summary reads."""
    rows = []
    for graph, f, ms_tc, ms_base, first in points:
        base = {"graph": graph, "F": f, "op": "spmm"}
        rows.append({**base, "impl": "cusparse[cached]", "ms": ms_base, "via": "torch.sparse.mm (int32 CSR)", "cuda_graph": True,
                     "capture_errors": []})
        rows.append({**base, "impl": "gnnfuse[tc-bf16,graph]", "ms": ms_tc})
        rows.append({**base, "impl": "gnnfuse[tc-bf16]", "ms": ms_tc * 1.1, "first_ms": first})
    return rows


def test_issue26_summary_median_at_target_widths():
    # speedups at F=128: 1, 3, 2.5 (median 2.5); F=256: 2.2, 4 (3.1); F=32 (not a target width): 0.1
    rows = _rows([("a", 128, 1.0, 1.0, 5.0), ("b", 128, 1.0, 3.0, 5.0), ("reddit-like", 128, 2.0, 5.0, 20.0),
                  ("a", 256, 1.0, 2.2, 5.0), ("reddit-like", 256, 1.0, 4.0, 8.0), ("a", 32, 10.0, 1.0, 50.0)])
    rows.append({"graph": "a", "F": 128, "op": "spmm", "impl": "gnnfuse[tc-bf16,graph]", "error": "RuntimeError: x"})  # ignored
    s = bench_ops_device.issue26_summary(rows, ["spmm", "sddmm"])
    assert set(s) == {"spmm"}  # sddmm has no Tensor-Core rows
    sp = s["spmm"]
    assert sp["target_row"] == "gnnfuse[tc-bf16,graph]" and sp["baseline_run"]["cuda_graph"] is True
    r = sp["rows"]["gnnfuse[tc-bf16,graph]"]
    assert r["median_speedup"]["128"] == pytest.approx(2.5) and r["median_speedup"]["256"] == pytest.approx(3.1)
    # the median over the five target points (1, 2.2, 2.5, 3, 4), not a geomean and not F=32's 0.1
    assert r["median_speedup"]["128+256"] == pytest.approx(2.5)
    assert {(p["graph"], p["F"]): p["full_scale"] for p in r["reddit_like"]} == {("reddit-like", 128): True, ("reddit-like", 256): True}
    # break-even from the plain row's first call: (20 - 2) / (5 - 2) = 6; (8 - 1) / (4 - 1); a with F=128 saves nothing
    be = {(p["graph"], p["F"]): p["break_even_calls"] for p in r["points"]}
    assert be[("reddit-like", 128)] == pytest.approx(6.0) and be[("reddit-like", 256)] == pytest.approx(7 / 3)
    assert be[("a", 128)] == math.inf and r["max_break_even_calls"] == math.inf
    t = sp["targets"]
    assert t == {"median >= 2x at F in {128, 256}": True, "reddit-like >= 1.8x": True, "break-even <= 10 calls": False}
    # the plain Tensor-Core row against the same baseline too
    assert sp["rows"]["gnnfuse[tc-bf16]"]["median_speedup"]["128+256"] == pytest.approx(2.5 / 1.1)


def test_issue26_summary_reduced_reddit_and_missing_rows():
    rows = _rows([("reddit-like-1000-20", 128, 1.0, 1.5, 2.0), ("g", 256, 1.0, 1.9, 2.0)])
    s = bench_ops_device.issue26_summary(rows, ["spmm"])["spmm"]
    t = s["targets"]
    # median 1.7 < 2; a reduced reddit-like is reported but is not the target's graph
    assert t["median >= 2x at F in {128, 256}"] is False and t["reddit-like >= 1.8x"] is None
    assert s["rows"]["gnnfuse[tc-bf16,graph]"]["reddit_like"][0]["full_scale"] is False
    assert t["break-even <= 10 calls"] is True  # (2 - 1) / (1.9 - 1) and (2 - 1) / (1.5 - 1)
    # without the replayed row the plain one carries the targets; without the baseline nothing
    plain = [r for r in rows if r["impl"] != "gnnfuse[tc-bf16,graph]"]
    assert bench_ops_device.issue26_summary(plain, ["spmm"])["spmm"]["target_row"] == "gnnfuse[tc-bf16]"
    assert bench_ops_device.issue26_summary([r for r in rows if r["impl"] != "cusparse[cached]"], ["spmm"]) == {}
    # no point at F in {128, 256}: not measured
    low = bench_ops_device.issue26_summary(_rows([("g", 32, 1.0, 3.0, 2.0)]), ["spmm"])["spmm"]["targets"]
    assert set(low.values()) == {None}


def test_print_issue26(capsys):
    rows = _rows([("reddit-like", 128, 1.0, 2.5, 4.0)])
    bench_ops_device.print_issue26(bench_ops_device.issue26_summary(rows, ["spmm"]))
    out = capsys.readouterr().out
    assert "# issue 26 targets, spmm: gnnfuse[tc-bf16,graph] vs cusparse[cached]" in out and "replayed in a CUDA graph" in out
    assert "median speedup at F in {128, 256}: 2.50x (F=128 2.50x) >= 2x: PASS" in out
    assert "reddit-like F=128 2.50x >= 1.8x: PASS" in out and "at most 2.0 <= 10: PASS" in out


def test_finite_writes_infinity_as_text():
    assert json.loads(json.dumps(bench_ops_device.finite({"a": [math.inf, 1.0], "b": {"c": -math.inf}}))) == \
        {"a": ["inf", 1.0], "b": {"c": "-inf"}}


# ---------------------------------------------------------------- CUDA-graph rows


def test_replayable_falls_back_where_capture_fails(monkeypatch):
    x = torch.arange(6.0).reshape(3, 2)
    calls = []

    def first(t):
        calls.append("first")
        return t * 2

    def second(t):
        return t * 3

    def fail(fn, t, device):
        raise RuntimeError(f"operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(bench_ops_device, "capture", fail)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    run, out, info = bench_ops_device.replayable([("a", first), ("b", second)], x, "cuda", True)
    # both captures failed: the first as a plain call, the reasons recorded
    assert info["cuda_graph"] is False and info["via"] == "a" and len(info["capture_errors"]) == 2
    assert info["capture_errors"][0] == "a: RuntimeError: operation not permitted when stream is capturing"
    assert torch.equal(out, x * 2) and torch.equal(run(), x * 2)

    class FakeGraph:
        replays = 0

        def replay(self):
            FakeGraph.replays += 1

    def capture_second(fn, t, device):
        if fn is first:
            raise RuntimeError("cannot capture")
        return FakeGraph(), fn(t)

    monkeypatch.setattr(bench_ops_device, "capture", capture_second)
    run, out, info = bench_ops_device.replayable([("a", first), ("b", second)], x, "cuda", True)
    assert info["cuda_graph"] is True and info["via"] == "b" and info["capture_errors"] == ["a: RuntimeError: cannot capture"]
    assert torch.equal(out, x * 3) and FakeGraph.replays == 1  # replayed once before the check
    run()
    assert FakeGraph.replays == 2  # the timed callable is the replay
    # on CPU tensors: the first candidate's plain call, no capture tried
    monkeypatch.setattr(bench_ops_device, "capture", fail)
    run, out, info = bench_ops_device.replayable([("a", first), ("b", second)], x, "cpu", False)
    assert info["cuda_graph"] is False and info["capture_errors"] == [] and "dry run" in info["note"] and torch.equal(out, x * 2)


@pytest.mark.skipif(_emulated_library() is None, reason="libgnnfuse_cuda_emu.so not built")
def test_ops_device_dry_run_tensor_core_rows(tmp_path):
    """The issue 26 rows end to end through the emulated CUDA kernels (the Tensor-Core SpMM on
    the CPU): each row checked against float64, the first calls building a condensed view each,
    the summary's numbers those of the rows."""
    out = tmp_path / "ops.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_ops_device.py"), "--dry-run", "--graphs", "rmat-7-4", "reddit-like",
           "--features", "8", "128", "--ops", "spmm", "--impls", "gnnfuse[tc-bf16]", "gnnfuse[tc-bf16,graph]", "cusparse[cached]",
           "gnnfuse[tc-rows-bf16]", "--first-calls", "2", "--min-reps", "1", "--min-time", "0", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env(GNNFUSE_LIBRARY=_emulated_library()))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = {(r["graph"], r["F"], r["impl"]): r for r in data["results"]}
    graphs = {"rmat-7-4", "reddit-like-1000-20"}  # reddit-like at the dry run's scale
    assert set(rows) == {(g, f, i) for g in graphs for f in (8, 128)
                         for i in ("gnnfuse[tc-bf16]", "gnnfuse[tc-bf16,graph]", "cusparse[cached]", "gnnfuse[tc-rows-bf16]")}
    for (g, f, impl), r in rows.items():
        assert "error" not in r and r["ms"] > 0, r
        assert r["rel_err"] <= (1e-2 if "tc" in impl else 1e-4)
        if impl == "gnnfuse[tc-bf16]":  # two first calls, each on a fresh copy: one view built each
            assert len(r["first_ms_all"]) == 2 and r["first_call_views_built"] == [1, 1]
            assert r["first_ms"] == pytest.approx(float(np.median(r["first_ms_all"])))
        elif impl == "gnnfuse[tc-rows-bf16]":  # seed 004's rows kernel (set_cuda_tensor_cores("rows"))
            assert "cuda_graph" not in r
        else:
            assert r["cuda_graph"] is False and r["capture_errors"] == []
    s = data["issue26"]["spmm"]
    graph_row = s["rows"]["gnnfuse[tc-bf16,graph]"]
    for p in graph_row["points"]:
        tc, base = rows[(p["graph"], p["F"], "gnnfuse[tc-bf16,graph]")], rows[(p["graph"], p["F"], "cusparse[cached]")]
        assert p["speedup"] == pytest.approx(base["ms"] / tc["ms"])
        be = bench_ops_device.break_even_calls(rows[(p["graph"], p["F"], "gnnfuse[tc-bf16]")]["first_ms"], tc["ms"], base["ms"])
        assert p["break_even_calls"] == (pytest.approx(be) if math.isfinite(be) else "inf")
    assert set(graph_row["median_speedup"]) == {"128", "128+256"}
    assert [p["graph"] for p in graph_row["reddit_like"]] == ["reddit-like-1000-20"]
    assert s["targets"]["reddit-like >= 1.8x"] is None  # reduced scale: never the target's verdict
    assert "# issue 26 targets, spmm: gnnfuse[tc-bf16,graph] vs cusparse[cached]" in proc.stdout
    assert "spmm gnnfuse[tc-rows-bf16] vs gnnfuse[tc-bf16]" in data["summary"], data["summary"]
    assert "(reduced scale: not the target's graph)" in proc.stdout


# ---------------------------------------------------------------- generated graphs


def test_sized_graphs():
    ei, n = datasets.load("reddit-like-2000-50")
    deg = torch.bincount(ei[1], minlength=n)
    assert n == 2000 and abs(ei.size(1) / n - 50) < 2.5 and int(deg.min()) >= 1 and int(deg.max()) <= 2000
    assert float(deg.float().std()) > 30  # heavy-tailed
    ei, n = datasets.load("products-like-3000-20")
    assert n == 3000 and ei.size(1) == 60000 and int(ei.min()) >= 0 and int(ei.max()) < n
    key = ei[0] * n + ei[1]
    assert torch.equal(torch.sort(key).values, torch.sort(ei[1] * n + ei[0]).values)  # both directions of every edge
    ei, n = datasets.rmat_sized(1000, 5000, symmetric=False)
    assert n == 1000 and ei.shape == (2, 5000) and int(ei.max()) < 1000
    with pytest.raises(ValueError):
        datasets.rmat_sized(10, 7)
    assert datasets.sized_graph("rmat-5-2") is None and datasets.sized_graph("reddit-likes") is None
    # the full-size names: Reddit's and ogbn-products' sizes (not generated here: tens of seconds)
    assert datasets._SIZED_RE.match("reddit-like").groups() == ("reddit", None, None)
    assert (datasets.REDDIT_NODES, datasets.PRODUCTS_NODES, datasets.PRODUCTS_EDGES) == (232965, 2449029, 61859140)
    with pytest.raises(KeyError, match="reddit-like"):
        datasets.load("no-such-graph")


def test_one_reddit_generator():
    import bench_attention_device

    assert bench_attention_device.reddit_like is datasets.reddit_like  # shared, not a copy
    rowptr, col = datasets.reddit_like(500, 20.0, 500, "cpu")
    ei, n = datasets.sized_graph("reddit-like-500-20")
    assert n == 500 and torch.equal(ei[0], col.long())
    assert torch.equal(ei[1], torch.repeat_interleave(torch.arange(n), rowptr.long().diff()))


# ---------------------------------------------------------------- bench_spgemm


class FakeCuda:
    """torch.cuda's allocator counters over a fake allocator."""

    def __init__(self):
        self.allocated = self.peak = 0

    def alloc(self, n):
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def free(self, n):
        self.allocated -= n

    def reset_peak_memory_stats(self):
        self.peak = self.allocated

    def memory_allocated(self):
        return self.allocated

    def max_memory_allocated(self):
        return self.peak


def test_spgemm_workspace_and_its_bound():
    api = FakeCuda()
    api.alloc(100 << 20)  # the inputs: not counted
    kept = []

    def call():  # 30 MiB of temporaries, freed; an 8 MiB output, returned
        api.alloc(30 << 20)
        api.alloc(8 << 20)
        api.free(30 << 20)
        kept.append(8 << 20)
        return object()

    mem = bench_spgemm.device_peak_mb(call, api)
    assert mem["peak_mb"] == pytest.approx(38.0) and mem["workspace_mb"] == pytest.approx(30.0)
    assert mem["kept_mb"] == pytest.approx(8.0)  # (the fake's outputs are never freed)
    assert bench_spgemm.csr_bytes(3, 10, 4) == 4 * 4 + 10 * 8 and bench_spgemm.csr_bytes(3, 10, 8) == 4 * 8 + 10 * 12
    a, c = 5 << 20, 3 << 20  # bound 2 x (5 + 3) = 16 MiB
    assert bench_spgemm.workspace_bound(mem, a, c) == {"workspace_bound_mb": 16.0, "workspace_within_bound": False}
    assert bench_spgemm.workspace_bound(mem, 15 << 20, c)["workspace_within_bound"] is True  # 2 x (15 + 3) = 36


def test_spgemm_check_outcomes_and_sampled_reference():
    import scipy.sparse as sp

    d = bench_spgemm.prepare("rmat-8-4", None)
    ref, rows, ref_ap, ap_rows = bench_spgemm.reference(d, 0)
    assert rows is None and ap_rows is None
    assert bench_spgemm.check(ref.astype(np.float32), ref) == ("ok", pytest.approx(0.0, abs=1e-6))
    wrong = ref.copy()
    wrong.data[0] += 1.0
    assert bench_spgemm.check(wrong, ref)[0] == "wrong"
    assert bench_spgemm.check(sp.csr_matrix(ref.shape), ref)[0] == "zeros"  # cuSPARSE's silent failure
    zeroed = ref.copy()
    zeroed.data[:] = 0
    assert bench_spgemm.check(zeroed, ref)[0] == "zeros"
    # sampled rows: the products of those rows only, equal to the full reference's rows
    sref, srows, sref_ap, sap_rows = bench_spgemm.reference(d, 17)
    assert len(srows) == 17 and len(sap_rows) == 17 and np.all(np.diff(srows) > 0)
    assert abs(sref - ref[srows]).max() < 1e-12 and abs(sref_ap - ref_ap[sap_rows]).max() < 1e-12
    assert bench_spgemm.check(ref, sref, srows) == ("ok", 0.0)
    bad_row = ref.copy()
    r = next(int(r) for r in srows if ref.indptr[r + 1] > ref.indptr[r])
    bad_row.data[bad_row.indptr[r]] += 1.0  # a sampled row off: caught
    assert bench_spgemm.check(bad_row, sref, srows)[0] == "wrong"


def test_spgemm_generated_graphs_end_to_end(tmp_path):
    out = tmp_path / "spgemm.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_spgemm.py"), "--graphs", "reddit-like-1000-20", "products-like-2000-12",
           "--threads", "1", "--repeats", "1", "--no-plot", "--check-rows", "64",
           "--methods", "gnnfuse_cold", "gnnfuse_warm", "torch_sparse", "gnnfuse_spgemm", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["graph"], r["method"]) for r in rows} == {(g, m) for g in ("reddit-like-1000-20", "products-like-2000-12")
                                                         for m in ("gnnfuse_cold", "gnnfuse_warm", "torch_sparse", "gnnfuse_spgemm")}
    for r in rows:
        assert r["outcome"] == "ok" and r["rel_err"] <= 1e-5 and r["ms"] > 0 and r["ap_edges"] > 0, r
    assert {r["edges"] for r in rows if r["graph"].startswith("products")} == {24000}
    assert "checked on 64 sampled rows" in proc.stdout


# ---------------------------------------------------------------- torch_gpu.sh issue26


def test_torch_gpu_issue26_dry_run(tmp_path):
    """The preset in its dry run: its stages (ops, spgemm, attention: build and smoke need a GPU)
    with the preset's restrictions, the generated graphs by name, and at most 8 files under $OUT:
    the JSONs and one tarball of logs."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu" / "torch_gpu.sh"), "issue26", "--dry-run"], capture_output=True,
                          text=True, timeout=600, env=_env(OUT=str(out), GNNFUSE_LIBRARY=gnnfuse.library_path()))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["attention.json", "issue26-logs.tar.gz", "ops.json", "spgemm-regressions.json", "spgemm.json"]
    with tarfile.open(out / "issue26-logs.tar.gz") as tar:
        logs = {os.path.basename(m.name) for m in tar.getmembers() if m.isfile()}
    assert logs == {"device.txt", "ops.log", "spgemm.log", "spgemm-regressions.log", "attention.log"}
    assert "issue26: stages ops spgemm attention" in proc.stdout
    ops = json.loads((out / "ops.json").read_text())
    assert {r["F"] for r in ops["results"]} == {128, 256} and {r["op"] for r in ops["results"]} == {"spmm"}
    assert {r["impl"] for r in ops["results"]} == {"gnnfuse[tc-bf16]", "gnnfuse[tc-bf16,graph]", "cusparse[cached]", "gnnfuse[cusparse]",
                                                 "gnnfuse[tc-rows-bf16]"}
    assert {r["graph"] for r in ops["results"]} == {"rmat-7-4", "reddit-like-1000-20"}
    spg = json.loads((out / "spgemm.json").read_text())
    assert {r["graph"] for r in spg["rows"]} == {"rmat-7-4", "reddit-like-1000-20", "products-like-2000-12"}
    assert {r["method"] for r in spg["rows"]} == {"gnnfuse_cold", "gnnfuse_2pass", "gnnfuse_warm", "torch_sparse", "gnnfuse_spgemm",
                                                  "torch_sparse_spgemm"}
    att = json.loads((out / "attention.json").read_text())
    assert att["dry_run"] and att["results"]
    # a stage named after the preset runs alone, with the preset's settings
    out2 = tmp_path / "out2"
    out2.mkdir()
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu" / "torch_gpu.sh"), "issue26", "attention", "--dry-run"],
                          capture_output=True, text=True, timeout=600, env=_env(OUT=str(out2), GNNFUSE_LIBRARY=gnnfuse.library_path()))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out2.iterdir()) == ["attention.json", "issue26-logs.tar.gz"]


def test_tc_error_script_through_the_emulator(tmp_path):
    """bench/tc_error.py (the documented error table's source) on a small power-law graph: every
    row ran the Tensor-Core kernels when forced and the CUDA-core ones otherwise, and the measured
    errors are those of the precision (bf16: a few 2^-9; tf32 on Tensor Cores: about 2^-11; fp32 on
    CUDA cores: about 2^-24), the Tensor Cores' within 4x the CUDA cores' in bf16."""
    lib = _emulated_library()
    if lib is None:
        pytest.skip("no libgnnfuse_cuda_emu.so (CUDA's headers missing)")
    out = tmp_path / "tc.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "tc_error.py"), "--graphs", "rmat-7-8", "--features", "24",
                           "--dtypes", "bfloat16", "tf32", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=_env(GNNFUSE_LIBRARY=lib))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["dtype"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"bfloat16", "tf32"}
    for r in rows.values():
        assert r["tensor-cores"]["tensor_core_launches"] >= 2 and r["cuda-cores"]["tensor_core_launches"] == 0
    bf, tf = rows["bfloat16"], rows["tf32"]
    assert bf["tensor-cores-rows"]["tensor_core_launches"] >= 2 and "tensor-cores-rows" not in tf  # (seed 004's kernel: 16-bit only)
    for part in ("forward", "grad_x"):
        assert 1e-4 < bf["tensor-cores"][part]["max"] < 4 * max(bf["cuda-cores"][part]["max"], 2.0 ** -9)
        assert 1e-4 < bf["tensor-cores-rows"][part]["max"] < 4 * max(bf["cuda-cores"][part]["max"], 2.0 ** -9)
        assert 1e-5 < tf["tensor-cores"][part]["max"] < 2e-3 and tf["cuda-cores"][part]["max"] < 1e-5
