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
    python bench/bench_ops_device.py --device cuda --graphs reddit-like rmat-20-16 --features 128 256 --ops spmm \
        --impls "gnnfuse[tc-bf16]" "gnnfuse[tc-bf16,graph]" "cusparse[cached]" --out $OUT/ops.json   # issue 26's rows

Graphs: bench/datasets.py names (real graphs, rmat-S-EF) or bench_gpu.py's npz; "reddit-like" (Reddit's
size and degree distribution, 233k nodes / 115M edges, generated on the device) and "products-like"
(ogbn-products' size as an R-MAT), each also "-<nodes>-<mean degree>" scaled down; --dry-run runs them
at a small scale (DRY_RUN_SCALE). A graph that cannot be loaded (no dataset folder) is recorded under
"skipped" and the run goes on.

Implementations (SpMM: sum with edge weights; SDDMM: weighted dot products in CSR order):
  gnnfuse            gnnfuse.spmm / gnnfuse.sddmm, the generated kernels (the run-time decision)
  gnnfuse[cusparse]  the same calls with backend="cusparse" (gnnfuse.backends)
  gnnfuse[bf16]      SpMM in bfloat16 (x and weights; fp32 accumulation) on the CUDA-core kernels
                     (Tensor Cores off)
  gnnfuse[tc-bf16]   the same on the Tensor-Core SpMM (set_cuda_tensor_cores("on")); its row also has
                     first_ms, a first call on a fresh copy of the graph (the condensed view built)
  gnnfuse[tc-tf32]   float32 on the Tensor-Core SpMM as tf32
  gnnfuse[tc-rows-bf16]  bfloat16 on seed 004's rows kernel (set_cuda_tensor_cores("rows"): mma.m16n8k8
                     plus a trace per node row, rows bucketed by degree; auto never takes it: these rows
                     decide whether it ever should)
  gnnfuse[tc-bf16,graph]  gnnfuse[tc-bf16] captured in a CUDA graph after a warm-up (the condensed view
                     built then), the replay timed: the kernels without launch and host overhead
  cusparse[cached]   float32 cuSPARSE SpMM with nothing rebuilt per call, issue 26's baseline:
                     torch.sparse.mm of an int32 CSR tensor captured in a CUDA graph (descriptors and
                     buffer made once at capture), the replay timed; where that capture fails, the
                     gnnfuse[cusparse] call captured; where both fail, the plain torch.sparse call.
                     The row records what ran (via, cuda_graph, capture_errors). --dry-run: the plain
                     call on CPU tensors (no CUDA graphs there), the same code path otherwise
  torch.sparse       torch.sparse.mm of a sparse CSR tensor (a fresh cuSPARSE call per product)
  pyg                PyG's message passing: gather x[src] * w, scatter-add to dst
                     (torch_geometric.utils.scatter); SDDMM: (u[dst] * v[src]).sum(-1) * w

Summary: geomeans of one implementation over another per op, and issue 26's targets for the
Tensor-Core SpMM (bf16 inputs, fp32 accumulation) against cusparse[cached]: the MEDIAN speedup over
the points (graph, F) at F in {128, 256} (>= 2x), the speedup on the full-scale reddit-like graph
(>= 1.8x at each of those F), and the calls after which the Tensor-Core preprocessing has paid for
itself, break_even = (first_ms - ms_tc) / (ms_base - ms_tc) ("inf" where ms_tc >= ms_base; <= 10):
n calls cost first_ms + (n - 1) ms_tc against n ms_base. first_ms is the median of --first-calls
first calls, each on a fresh copy of the graph after the cached condensed views were cleared (its
view built, then the product), measured in the gnnfuse[tc-bf16] row (run it for the break-even). A "# issue 26 targets" block prints each with PASS / FAIL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layers import load_graph, median_time, open_device, rel_err  # noqa: E402
from bench_ops import git_commit  # noqa: E402
from datasets import sized_graph  # noqa: E402


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


def implementations(gnnfuse, g, src, dst, n, w, csr, csr32, op: str):
    """name -> callable(x or (u, v)) for the op."""
    from torch_geometric.utils import scatter

    impls = {}
    if op == "spmm":
        impls["gnnfuse"] = lambda x: gnnfuse.spmm(g, x, w, backend="generated")
        wb = w.to(torch.bfloat16)
        impls["gnnfuse[bf16]"] = lambda x: gnnfuse.spmm(g, x, wb, backend="generated")
        impls["gnnfuse[tc-bf16]"] = lambda x: gnnfuse.spmm(g, x, wb, backend="generated")
        impls["gnnfuse[tc-bf16,graph]"] = impls["gnnfuse[tc-bf16]"]
        impls["gnnfuse[tc-tf32]"] = lambda x: gnnfuse.spmm(g, x, w, backend="generated")
        impls["gnnfuse[tc-rows-bf16]"] = impls["gnnfuse[tc-bf16]"]
        impls["gnnfuse[cusparse]"] = lambda x: gnnfuse.spmm(g, x, w, backend="cusparse")
        impls["cusparse[cached]"] = lambda x: torch.sparse.mm(csr32, x)
        impls["torch.sparse"] = lambda x: torch.sparse.mm(csr, x)
        impls["pyg"] = lambda x: scatter(x[src] * w.unsqueeze(1), dst, dim=0, dim_size=n, reduce="sum")
    else:
        impls["gnnfuse"] = lambda uv: gnnfuse.sddmm(g, uv[0], uv[1], w, backend="generated")
        impls["gnnfuse[cusparse]"] = lambda uv: gnnfuse.sddmm(g, uv[0], uv[1], w, backend="cusparse")
        impls["pyg"] = lambda uv: (uv[0][dst] * uv[1][src]).sum(-1) * w
    return impls


IMPLS = ["gnnfuse", "gnnfuse[bf16]", "gnnfuse[tc-bf16]", "gnnfuse[tc-bf16,graph]", "gnnfuse[tc-tf32]", "gnnfuse[tc-rows-bf16]", "gnnfuse[cusparse]",
         "cusparse[cached]", "torch.sparse", "pyg"]

# Per implementation: the dtype of its inputs, the Tensor-Core mode it runs under, the relative
# error it must stay within against float64 (bf16 inputs carry 8 bits; tf32 10).
SETTINGS = {"gnnfuse[bf16]": (torch.bfloat16, "off", 1e-2), "gnnfuse[tc-bf16]": (torch.bfloat16, "on", 1e-2),
            "gnnfuse[tc-bf16,graph]": (torch.bfloat16, "on", 1e-2), "gnnfuse[tc-tf32]": (torch.float32, "on", 2e-3),
            "gnnfuse[tc-rows-bf16]": (torch.bfloat16, "rows", 1e-2)}

# The rows timed as CUDA-graph replays. Each names its fallbacks (after the row's own call):
# cusparse[cached] falls back to gnnfuse's cuSPARSE backend captured (cuSPARSE as well, with the
# descriptors gnnfuse makes per call made once at capture), where torch's sparse mm cannot be captured.
REPLAYED = {"gnnfuse[tc-bf16,graph]": [], "cusparse[cached]": ["gnnfuse[cusparse]"]}
# what a replayed row's own call is, in its `via`
VIA = {"cusparse[cached]": "torch.sparse.mm (int32 CSR)", "gnnfuse[tc-bf16,graph]": "gnnfuse.spmm (Tensor Cores, bf16)"}

# What --dry-run runs in place of the full-size generated graphs (CPU tensors, seconds).
DRY_RUN_SCALE = {"reddit-like": "reddit-like-1000-20", "products-like": "products-like-2000-12"}

# Issue 26's targets for the Tensor-Core SpMM against cached cuSPARSE fp32.
TARGET_FEATURES = (128, 256)
TARGET_MEDIAN_SPEEDUP, TARGET_REDDIT_SPEEDUP, TARGET_BREAK_EVEN_CALLS = 2.0, 1.8, 10.0
TC_BASELINE = "cusparse[cached]"
TC_ROWS = ("gnnfuse[tc-bf16,graph]", "gnnfuse[tc-bf16]")  # the target's row first: both sides replayed
ALL_TARGET_F = "+".join(str(f) for f in TARGET_FEATURES)  # the median over every target F's points


def capture(fn, x, device):
    """(torch.cuda.CUDAGraph, its static output) of fn(x): two warm-up calls on a side stream
    first (as torch's docs ask: workspaces, cuSPARSE descriptors and buffers, the Tensor-Core
    condensed view, which a capture cannot build, are made there), then the capture."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(x)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x)
    return graph, out


def replayable(candidates, x, device, cuda: bool):
    """(run, out, info) for a replayed row: `candidates` [(via, fn)] tried in order, the first
    whose capture succeeds is replayed (run = its replay, out = the static output after one
    replay); where none can be captured, the first as a plain call, and info says why
    (capture_errors). On CPU tensors (--dry-run) the first as a plain call: no CUDA graphs there."""
    info = {"capture_errors": []}
    if cuda:
        for via, fn in candidates:
            try:
                graph, out = capture(fn, x, device)
                graph.replay()
                torch.cuda.synchronize(device)
                info.update(via=via, cuda_graph=True)
                return graph.replay, out, info
            except Exception as ex:  # noqa: BLE001  (recorded; the next candidate, else the plain call)
                info["capture_errors"].append(f"{via}: {type(ex).__name__}: {str(ex).splitlines()[0][:200] if str(ex) else ''}")
                try:
                    torch.cuda.synchronize(device)
                except Exception:  # noqa: BLE001  (a failed capture's error, reported at the next sync)
                    pass
    via, fn = candidates[0]
    info.update(via=via, cuda_graph=False)
    if not cuda:
        info["note"] = "dry run: the plain call (no CUDA graphs on CPU tensors)"
    return (lambda: fn(x)), fn(x), info


def first_call_ms(gnnfuse, rowptr, col, n, x, w, sync, calls: int):
    """(median ms, every ms, condensed views built per call) of the Tensor-Core SpMM's first
    call on a graph: each on a fresh copy of the CSR, the cached views (and the patterns
    remembered by contents, which a copy would find) cleared before it, so that it builds its
    view and then multiplies."""
    views = getattr(torch.ops.gnnfuse, "_cuda_tensor_core_views", None)
    times, built = [], []
    for _ in range(calls):
        gnnfuse.backends.clear_cuda_tensor_core_views()
        fresh = gnnfuse.Graph(rowptr.clone(), col.clone(), n, n)
        before = int(views()) if views else None
        sync()
        t0 = time.perf_counter()
        gnnfuse.spmm(fresh, x, w, backend="generated")
        sync()
        times.append(1e3 * (time.perf_counter() - t0))
        if views:
            built.append(int(views()) - before)
        del fresh
    return statistics.median(times), times, built


def break_even_calls(first_ms: float, ms_tc: float, ms_base: float) -> float:
    """Calls after which the first call's preprocessing has paid for itself: n calls cost
    first_ms + (n - 1) ms_tc against n ms_base; inf where each call saves nothing."""
    if ms_tc >= ms_base:
        return math.inf
    return max(0.0, (first_ms - ms_tc) / (ms_base - ms_tc))  # (0: a first call no slower than the others)


def issue26_summary(rows, ops):
    """Issue 26's Tensor-Core SpMM targets against cusparse[cached], per op that has both rows:
    per (Tensor-Core row): every point's speedup and break-even, the median speedup at F in
    TARGET_FEATURES (all of them and per F), the speedups on reddit-like graphs (full_scale: the
    target's graph, not a reduced one), and the targets met (None: not measured) for the first
    of TC_ROWS measured."""
    out = {}
    for op in ops:
        base_rows = {(r["graph"], r["F"]): r for r in rows if r["op"] == op and r["impl"] == TC_BASELINE and "ms" in r}
        if not base_rows:
            continue
        base_info = next(({k: r.get(k) for k in ("via", "cuda_graph", "capture_errors")} for r in base_rows.values()), {})
        first = {(r["graph"], r["F"]): r["first_ms"] for r in rows if r["op"] == op and r["impl"] == "gnnfuse[tc-bf16]" and "first_ms" in r}
        per_row = {}
        for tc in TC_ROWS:
            points = []
            for r in rows:
                if r["op"] != op or r["impl"] != tc or "ms" not in r or (r["graph"], r["F"]) not in base_rows:
                    continue
                b = base_rows[(r["graph"], r["F"])]
                pt = {"graph": r["graph"], "F": r["F"], "ms_tc": r["ms"], "ms_base": b["ms"], "speedup": b["ms"] / r["ms"]}
                if (r["graph"], r["F"]) in first:
                    pt["first_ms"] = first[(r["graph"], r["F"])]
                    pt["break_even_calls"] = break_even_calls(pt["first_ms"], r["ms"], b["ms"])
                    pt["break_even_ok"] = pt["break_even_calls"] <= TARGET_BREAK_EVEN_CALLS
                points.append(pt)
            if not points:
                continue
            at = [p for p in points if p["F"] in TARGET_FEATURES]
            med = {str(f): statistics.median(p["speedup"] for p in at if p["F"] == f) for f in TARGET_FEATURES if any(p["F"] == f for p in at)}
            if at:  # over every point at those F (graphs x F): the target's number
                med[ALL_TARGET_F] = statistics.median(p["speedup"] for p in at)
            reddit = [p for p in at if p["graph"].startswith("reddit-like")]
            be = [p["break_even_calls"] for p in at if "break_even_calls" in p]
            s = {"points": points, "median_speedup": med,
                 "reddit_like": [{"graph": p["graph"], "F": p["F"], "speedup": p["speedup"], "full_scale": p["graph"] == "reddit-like"} for p in reddit],
                 "max_break_even_calls": max(be) if be else None}
            full = [p for p in reddit if p["graph"] == "reddit-like"]
            s["targets"] = {
                f"median >= {TARGET_MEDIAN_SPEEDUP:g}x at F in {{128, 256}}": (med[ALL_TARGET_F] >= TARGET_MEDIAN_SPEEDUP) if at else None,
                f"reddit-like >= {TARGET_REDDIT_SPEEDUP:g}x": all(p["speedup"] >= TARGET_REDDIT_SPEEDUP for p in full) if full else None,
                f"break-even <= {TARGET_BREAK_EVEN_CALLS:g} calls": (max(be) <= TARGET_BREAK_EVEN_CALLS) if be else None,
            }
            per_row[tc] = s
        if per_row:
            target_row = next(tc for tc in TC_ROWS if tc in per_row)
            out[op] = {"baseline": TC_BASELINE, "baseline_run": base_info, "target_row": target_row, "rows": per_row,
                       "targets": per_row[target_row]["targets"]}
    return out


def print_issue26(summary):
    def verdict(ok):
        return "not measured" if ok is None else ("PASS" if ok else "FAIL")

    for op, s in summary.items():
        tc = s["target_row"]
        r = s["rows"][tc]
        b = s["baseline_run"]
        how = f"{b.get('via')} {'replayed in a CUDA graph' if b.get('cuda_graph') else 'as a plain call (NOT cached: ' + '; '.join(b.get('capture_errors') or ['no GPU']) + ')'}"
        print(f"# issue 26 targets, {op}: {tc} vs {s['baseline']} ({how})")
        med = r["median_speedup"]
        t = r["targets"]
        names = list(t)
        if med:
            per_f = ", ".join(f"F={k} {v:.2f}x" for k, v in med.items() if k != ALL_TARGET_F)
            print(f"#   median speedup at F in {{128, 256}}: {med[ALL_TARGET_F]:.2f}x ({per_f}) >= {TARGET_MEDIAN_SPEEDUP:g}x: {verdict(t[names[0]])}")
        else:
            print(f"#   median speedup at F in {{128, 256}}: no point at those F: {verdict(None)}")
        if r["reddit_like"]:
            pts = ", ".join(f"{p['graph']} F={p['F']} {p['speedup']:.2f}x" for p in r["reddit_like"])
            scale = "" if any(p["full_scale"] for p in r["reddit_like"]) else " (reduced scale: not the target's graph)"
            print(f"#   reddit-like: {pts} >= {TARGET_REDDIT_SPEEDUP:g}x{scale}: {verdict(t[names[1]])}")
        else:
            print(f"#   reddit-like: not run at F in {{128, 256}}: {verdict(None)}")
        be = [p for p in r["points"] if p["F"] in TARGET_FEATURES and "break_even_calls" in p]
        if be:
            pts = ", ".join(f"{p['graph']} F={p['F']} {p['break_even_calls']:.1f}" for p in be)
            print(f"#   break-even of the preprocessing (calls): {pts}; at most {r['max_break_even_calls']:.1f} <= "
                  f"{TARGET_BREAK_EVEN_CALLS:g}: {verdict(t[names[2]])}")
        else:
            print(f"#   break-even of the preprocessing: no first call measured at F in {{128, 256}}: {verdict(None)}")


def finite(obj):
    """obj with every non-finite float as a string ("inf"): JSON has no infinity."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def load_device_graph(gnnfuse, name: str, npz, device):
    """(Graph on the device, n): reddit-like / products-like generated on the device itself (115M
    edges: seconds there, half a minute and more on the CPU), every other name through load_graph."""
    sized = sized_graph(name, device)
    if sized is not None:
        edge_index, n = sized
    else:
        edge_index, n = load_graph(name, npz=npz)
        edge_index = edge_index.to(device)
    return gnnfuse.Graph.from_edge_index(edge_index, num_nodes=n), n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU tensors, no GPU (checks the script); reddit-like / products-like at DRY_RUN_SCALE")
    ap.add_argument("--graphs", nargs="+", default=["pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-20-16"],
                    help="bench/datasets.py names (rmat-S-EF, real graphs), reddit-like, products-like")
    ap.add_argument("--graphs-npz", default=None, help="bench_gpu.py --export-npz's graphs (CSR by target)")
    ap.add_argument("--features", nargs="+", type=int, default=[32, 64, 128, 256])
    ap.add_argument("--ops", nargs="+", default=["spmm", "sddmm"], choices=["spmm", "sddmm"])
    ap.add_argument("--impls", nargs="+", default=IMPLS, choices=IMPLS, metavar="IMPL",
                    help="a subset of the implementations (default all; an op runs those it has): " + ", ".join(IMPLS))
    ap.add_argument("--first-calls", type=int, default=3,
                    help="first calls of the Tensor-Core rows on fresh copies of the graph, their median is first_ms")
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
    rows, skipped = [], []
    for asked in args.graphs:
        if time.perf_counter() - start > args.budget_s:
            print(f"# budget spent: {asked} and later graphs skipped")
            break
        name = DRY_RUN_SCALE.get(asked, asked) if args.dry_run else asked
        if name != asked:
            print(f"# dry run: {asked} as {name}")
        try:
            t0 = time.perf_counter()
            g, n = load_device_graph(gnnfuse, name, args.graphs_npz, device)
            sync()
            load_s = time.perf_counter() - t0
        except (FileNotFoundError, KeyError, ValueError) as ex:  # a missing dataset: recorded, the others run
            skipped.append({"graph": name, "reason": f"{type(ex).__name__}: {str(ex).splitlines()[0][:300]}"})
            print(f"# {name} skipped: {skipped[-1]['reason']}")
            continue
        # Everything in CSR order (a Graph takes its edge weights and gives its SDDMM in it).
        rowptr, col = g.rowptr, g.col
        src, dst = col.long(), torch.repeat_interleave(torch.arange(n, device=device), rowptr.long().diff())
        e = src.numel()
        print(f"# graph {name}: {n} nodes, {e} edges, largest in-degree {int(rowptr.long().diff().max())}, built in {load_s:.1f} s")
        gen = torch.Generator().manual_seed(0)
        w = (torch.rand(e, generator=gen) + 0.5).to(device)
        with torch.sparse.check_sparse_tensor_invariants(False):
            csr = torch.sparse_csr_tensor(rowptr.long(), col.long(), w, (n, n))
            # the cached baseline in int32 indices where they fit, cuSPARSE's usual and leaner form
            itype = torch.int32 if e < 2**31 else torch.int64
            csr32 = torch.sparse_csr_tensor(rowptr.to(itype), col.to(itype), w, (n, n))
            a64 = torch.sparse_csr_tensor(rowptr.long(), col.long(), w.double(), (n, n))
        for op in args.ops:
            impls = {k: fn for k, fn in implementations(gnnfuse, g, src, dst, n, w, csr, csr32, op).items() if k in args.impls}
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
                    run = out = None
                    try:
                        if impl == "gnnfuse[cusparse]" and cusparse_error:
                            raise RuntimeError(cusparse_error)
                        if mode in ("on", "rows") and tc_error:
                            raise RuntimeError(tc_error)
                        with gnnfuse.backends.cuda_tensor_cores(mode):
                            if impl in REPLAYED:  # a CUDA graph's replay: checked on its static output
                                candidates = [(VIA.get(impl, impl), fn)] + [(alt, impls.get(alt) or implementations(
                                    gnnfuse, g, src, dst, n, w, csr, csr32, op)[alt]) for alt in REPLAYED[impl]
                                    if not (alt == "gnnfuse[cusparse]" and cusparse_error)]
                                run, out, info = replayable(candidates, x_in, device, cuda)
                                row.update(info)
                            else:
                                run, out = (lambda: fn(x_in)), fn(x_in)
                            row["rel_err"] = rel_err(ref, out.float())
                            if not row["rel_err"] <= tol:
                                raise RuntimeError(f"differs from the float64 reference: relative error {row['rel_err']:.2e}")
                            ms, reps = median_ms(run, sync, args.min_reps, args.min_time)
                            if mode == "on" and impl not in REPLAYED:  # first calls on fresh graphs: the condensed view built, then the product
                                row["first_ms"], row["first_ms_all"], built = first_call_ms(
                                    gnnfuse, rowptr, col, n, x_in, w.to(dtype), sync, args.first_calls)
                                if built:
                                    row["first_call_views_built"] = built
                        scale = x_in.element_size() / 4 if op == "spmm" else 1.0
                        row.update(ms=ms, reps=reps, gflops=2 * e * f / (ms * 1e-3) / 1e9, gbs=nbytes * scale / (ms * 1e-3) / 1e9,
                                   floor_ms=1e3 * nbytes * scale / (bw * 1e9))
                    except Exception as ex:  # noqa: BLE001  (recorded, the run goes on)
                        row["error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:300]}"
                    del run, out  # (a CUDA graph's memory pool with it)
                    if cuda:
                        torch.cuda.empty_cache()
                    rows.append(row)
                    extra = (f"  first {row['first_ms']:.3f} ms" if "first_ms" in row else "") + (
                        f"  [{row['via']}{', CUDA graph' if row['cuda_graph'] else ', plain call'}]" if "via" in row else "")
                    print(f"{name:>18} {op:5} F={f:<4} {impl:22} "
                          + (f"{row['ms']:9.3f} ms {row['gflops']:8.1f} GFLOP/s {row['gbs']:7.1f} GB/s (floor {row['floor_ms']:.3f} ms)"
                             + extra if "ms" in row else f"FAIL {row['error']}"), flush=True)
        impls = inp = ref = None  # (the closures hold the graph: freed before the next one is built)
        del g, csr, csr32, a64, src, dst, w
        if cuda:
            torch.cuda.empty_cache()
    # geomeans of one implementation against another, per op
    summary = {}
    pairs = [("gnnfuse", other) for other in ("gnnfuse[cusparse]", "cusparse[cached]", "torch.sparse", "pyg")]
    pairs += [("gnnfuse[tc-bf16,graph]", "cusparse[cached]"), ("gnnfuse[tc-bf16]", "cusparse[cached]"),
              ("gnnfuse[tc-bf16]", "gnnfuse[cusparse]"), ("gnnfuse[tc-bf16]", "gnnfuse[bf16]"), ("gnnfuse[tc-tf32]", "gnnfuse[cusparse]"),
              ("gnnfuse[tc-rows-bf16]", "gnnfuse[tc-bf16]"), ("gnnfuse[tc-rows-bf16]", "gnnfuse[bf16]"),
              ("gnnfuse[cusparse]", "cusparse[cached]")]
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
    issue26 = issue26_summary(rows, args.ops)
    print_issue26(issue26)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(finite({
            "device": dev_name, "dry_run": args.dry_run, "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": os.environ.get("GNNFUSE_COMMIT") or git_commit(), "library": gnnfuse.library_path(),
            "copy_gbs": bw, "note": "medians of synchronized runs (ms), float32 (bfloat16 for the [bf16] rows), int64 indices "
            "(int32 for cusparse[cached]); checked against float64 first; floor_ms = minimal bytes / copy bandwidth; "
            "issue26: Tensor-Core SpMM against cusparse[cached], break_even_calls \"inf\" where it saves nothing per call",
            "summary": summary, "issue26": issue26, "skipped": skipped, "results": rows}), indent=1) + "\n")
    unavailable = tuple("RuntimeError: " + e for e in (cusparse_error, tc_error) if e)
    return 1 if any("error" in r and not (unavailable and r["error"].startswith(unavailable)) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
