"""SpMM and SDDMM through PyTorch on a GPU: gnnfuse's generated kernels, gnnfuse's cuSPARSE
backend, torch.sparse.mm (cuSPARSE behind ATen) and PyG's message passing, side by side.

For each graph and feature width F, every implementation's result is checked first against a
float64 reference computed on the device (a row that differs or fails is recorded with its error
and the run goes on), then each is timed as the median of synchronized runs. The rows carry
GFLOP/s (2 nnz F) and GB/s of the minimal traffic (row pointers, columns and values once, the
dense input and the output once), beside the device-to-device copy bandwidth measured in the same
run: the memory-bandwidth floor of each op is bytes / copy bandwidth.

    python bench/bench_ops_device.py --device cuda --graphs-npz .gpu/graphs.npz \\
        --graphs pubmed rmat-20-16 --features 32 64 128 256 --out $OUT/gpu_ops.json
    python bench/bench_ops_device.py --dry-run --graphs rmat-8-4 --features 8   # no GPU: the script on CPU tensors

Implementations (SpMM: sum with edge weights; SDDMM: weighted dot products in CSR order):
  gnnfuse            gnnfuse.spmm / gnnfuse.sddmm, the generated kernels (the run-time decision)
  gnnfuse[cusparse]  the same calls with backend="cusparse" (gnnfuse.backends)
  gnnfuse[bf16]      SpMM in bfloat16 (x and weights; fp32 accumulation) on the CUDA-core kernels
                     (Tensor Cores off)
  gnnfuse[tc-bf16]   the same on the Tensor-Core SpMM (set_cuda_tensor_cores("on")); its row also has
                     first_ms, a first call on a fresh copy of the graph (the condensed view built)
  gnnfuse[tc-tf32]   float32 on the Tensor-Core SpMM as tf32
  torch.sparse       torch.sparse.mm of a sparse CSR tensor (a fresh cuSPARSE call per product)
  pyg                PyG's message passing: gather x[src] * w, scatter-add to dst
                     (torch_geometric.utils.scatter); SDDMM: (u[dst] * v[src]).sum(-1) * w
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layers import load_graph, median_time, open_device, rel_err  # noqa: E402
from bench_ops import git_commit  # noqa: E402


def median_ms(fn, sync, min_reps: int, min_time: float) -> tuple[float, int]:
    """bench_layers.median_time of synchronized runs after one warm-up run (workspaces,
    descriptors, the caching allocator), in milliseconds; and the rep count."""
    def run():
        fn()
        sync()

    run()
    seconds, reps = median_time(run, min_reps, min_time)
    return 1e3 * seconds, reps


def copy_gbs(device, sync, nbytes: int = 1 << 28) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), GB/s."""
    a = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    ms, _ = median_ms(lambda: b.copy_(a), sync, 5, 0.2)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def implementations(gnnfuse, g, src, dst, n, w, csr, op: str):
    """name -> callable(x or (u, v)) for the op."""
    from torch_geometric.utils import scatter

    impls = {}
    if op == "spmm":
        impls["gnnfuse"] = lambda x: gnnfuse.spmm(g, x, w, backend="generated")
        wb = w.to(torch.bfloat16)
        impls["gnnfuse[bf16]"] = lambda x: gnnfuse.spmm(g, x, wb, backend="generated")
        impls["gnnfuse[tc-bf16]"] = lambda x: gnnfuse.spmm(g, x, wb, backend="generated")
        impls["gnnfuse[tc-tf32]"] = lambda x: gnnfuse.spmm(g, x, w, backend="generated")
        impls["gnnfuse[cusparse]"] = lambda x: gnnfuse.spmm(g, x, w, backend="cusparse")
        impls["torch.sparse"] = lambda x: torch.sparse.mm(csr, x)
        impls["pyg"] = lambda x: scatter(x[src] * w.unsqueeze(1), dst, dim=0, dim_size=n, reduce="sum")
    else:
        impls["gnnfuse"] = lambda uv: gnnfuse.sddmm(g, uv[0], uv[1], w, backend="generated")
        impls["gnnfuse[cusparse]"] = lambda uv: gnnfuse.sddmm(g, uv[0], uv[1], w, backend="cusparse")
        impls["pyg"] = lambda uv: (uv[0][dst] * uv[1][src]).sum(-1) * w
    return impls


# Per implementation: the dtype of its inputs, the Tensor-Core mode it runs under, the relative
# error it must stay within against float64 (bf16 inputs carry 8 bits; tf32 10).
SETTINGS = {"gnnfuse[bf16]": (torch.bfloat16, "off", 1e-2), "gnnfuse[tc-bf16]": (torch.bfloat16, "on", 1e-2),
            "gnnfuse[tc-tf32]": (torch.float32, "on", 2e-3)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="CPU tensors, no GPU (checks the script)")
    ap.add_argument("--graphs", nargs="+", default=["pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-20-16"])
    ap.add_argument("--graphs-npz", default=None, help="bench_gpu.py --export-npz's graphs (CSR by target)")
    ap.add_argument("--features", nargs="+", type=int, default=[32, 64, 128, 256])
    ap.add_argument("--ops", nargs="+", default=["spmm", "sddmm"], choices=["spmm", "sddmm"])
    ap.add_argument("--min-reps", type=int, default=10)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new graphs after this many seconds")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    gnnfuse, device, cuda = open_device("bench_ops_device", args.device, args.dry_run)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    dev_name = torch.cuda.get_device_name(device) if cuda else "cpu (dry run)"
    try:  # where the library has no cuSPARSE backend (a CPU build), its rows record the error
        cusparse_error = None
        with gnnfuse.backends.cuda_backend("cusparse"):
            pass
    except RuntimeError as e:
        cusparse_error = str(e).splitlines()[0]
    try:  # likewise the Tensor-Core rows
        tc_error = None
        with gnnfuse.backends.cuda_tensor_cores("on"):
            pass
    except RuntimeError as e:
        tc_error = str(e).splitlines()[0]
    bw = copy_gbs(device, sync, 1 << (28 if cuda else 22))
    print(f"# {dev_name}, torch {torch.__version__}, library {gnnfuse.library_path()}; copy bandwidth {bw:.0f} GB/s"
          + (f"; cusparse backend: {cusparse_error}" if cusparse_error else ""))
    start = time.perf_counter()
    rows = []
    for name in args.graphs:
        if time.perf_counter() - start > args.budget_s:
            print(f"# budget spent: {name} and later graphs skipped")
            break
        edge_index, n = load_graph(name, npz=args.graphs_npz)
        g = gnnfuse.Graph.from_edge_index(edge_index.to(device), num_nodes=n)
        # Everything in CSR order (a Graph takes its edge weights and gives its SDDMM in it).
        rowptr, col = g.rowptr, g.col
        src, dst = col.long(), torch.repeat_interleave(torch.arange(n, device=device), rowptr.long().diff())
        e = src.numel()
        gen = torch.Generator().manual_seed(0)
        w = (torch.rand(e, generator=gen) + 0.5).to(device)
        with torch.sparse.check_sparse_tensor_invariants(False):
            csr = torch.sparse_csr_tensor(rowptr.long(), col.long(), w, (n, n))
            a64 = torch.sparse_csr_tensor(rowptr.long(), col.long(), w.double(), (n, n))
        for op in args.ops:
            impls = implementations(gnnfuse, g, src, dst, n, w, csr, op)
            for f in args.features:
                if op == "spmm":
                    inp = torch.randn(n, f, generator=gen).to(device)
                    ref = torch.sparse.mm(a64, inp.double())
                    nbytes = (n + 1 + 2 * e) * rowptr.element_size() + 4 * e + 2 * 4 * n * f
                else:
                    inp = (torch.randn(n, f, generator=gen).to(device), torch.randn(n, f, generator=gen).to(device))
                    ref = (inp[0].double()[dst] * inp[1].double()[src]).sum(-1) * w.double()
                    nbytes = (n + 1 + 2 * e) * rowptr.element_size() + 2 * 4 * e + 2 * 4 * n * f
                for impl, fn in impls.items():
                    row = {"graph": name, "nodes": n, "edges": e, "op": op, "F": f, "impl": impl}
                    dtype, mode, tol = SETTINGS.get(impl, (torch.float32, "auto", 1e-4))
                    x_in = inp.to(dtype) if op == "spmm" else inp
                    try:
                        if impl == "gnnfuse[cusparse]" and cusparse_error:
                            raise RuntimeError(cusparse_error)
                        if mode == "on" and tc_error:
                            raise RuntimeError(tc_error)
                        with gnnfuse.backends.cuda_tensor_cores(mode):
                            out = fn(x_in)
                            row["rel_err"] = rel_err(ref, out.float())
                            if not row["rel_err"] <= tol:
                                raise RuntimeError(f"differs from the float64 reference: relative error {row['rel_err']:.2e}")
                            ms, reps = median_ms(lambda: fn(x_in), sync, args.min_reps, args.min_time)
                            if mode == "on":  # a first call on a fresh graph: the condensed view built, then the product
                                fresh = gnnfuse.Graph(rowptr.clone(), col.clone(), n, n)
                                wf = w.to(dtype)
                                sync()
                                t0 = time.perf_counter()
                                gnnfuse.spmm(fresh, x_in, wf)
                                sync()
                                row["first_ms"] = 1e3 * (time.perf_counter() - t0)
                        scale = x_in.element_size() / 4 if op == "spmm" else 1.0
                        row.update(ms=ms, reps=reps, gflops=2 * e * f / (ms * 1e-3) / 1e9, gbs=nbytes * scale / (ms * 1e-3) / 1e9,
                                   floor_ms=1e3 * nbytes * scale / (bw * 1e9))
                    except Exception as ex:  # noqa: BLE001  (recorded, the run goes on)
                        row["error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:300]}"
                    rows.append(row)
                    print(f"{name:>18} {op:5} F={f:<4} {impl:18} "
                          + (f"{row['ms']:9.3f} ms {row['gflops']:8.1f} GFLOP/s {row['gbs']:7.1f} GB/s (floor {row['floor_ms']:.3f} ms)"
                             if "ms" in row else f"FAIL {row['error']}"), flush=True)
    # geomeans of gnnfuse against each other implementation, per op
    summary = {}
    pairs = [("gnnfuse", other) for other in ("gnnfuse[cusparse]", "torch.sparse", "pyg")]
    pairs += [("gnnfuse[tc-bf16]", "gnnfuse[cusparse]"), ("gnnfuse[tc-bf16]", "gnnfuse[bf16]"), ("gnnfuse[tc-tf32]", "gnnfuse[cusparse]")]
    for op in args.ops:
        for ours, other in pairs:
            ratios = []
            for r in rows:
                if r["op"] == op and r["impl"] == ours and "ms" in r:
                    o = next((q for q in rows if q["op"] == op and q["impl"] == other and q["graph"] == r["graph"]
                              and q["F"] == r["F"] and "ms" in q), None)
                    if o:
                        ratios.append(o["ms"] / r["ms"])
            if ratios:
                geo = statistics.geometric_mean(ratios)
                summary[f"{op} {ours} vs {other}"] = {"geomean_speedup": geo, "min": min(ratios), "points": len(ratios)}
                print(f"# {op}: {ours} {geo:.2f}x {other} (geomean of {len(ratios)}, min {min(ratios):.2f}x)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "device": dev_name, "dry_run": args.dry_run, "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": os.environ.get("GNNFUSE_COMMIT") or git_commit(), "library": gnnfuse.library_path(),
            "copy_gbs": bw, "note": "medians of synchronized runs (ms), float32 (bfloat16 for the [bf16] rows), int64 indices; checked against float64 first; "
            "floor_ms = minimal bytes / copy bandwidth", "summary": summary, "results": rows}, indent=1) + "\n")
    unavailable = tuple("RuntimeError: " + e for e in (cusparse_error, tc_error) if e)
    return 1 if any("error" in r and not (unavailable and r["error"].startswith(unavailable)) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
