"""Graph coarsening Pᵀ·A·P and SpGEMM, side by side with torch.sparse, scipy and (if it
installs) MKL through sparse_dot_mkl, in one run.

For each graph: a heavy-edge matching of the symmetrized graph gives the assignment P (about
n/2 clusters, the pooling step of a graph U-Net or Graclus pooling). Timed, medians of
repeated runs after a warm-up, every result checked against scipy in float64 first:

    gnnfuse cold   the first call (pattern not cached): pattern and values in one pass through
                   the sparse workspace (coarsen_assemble), what gnnfuse.coarsen runs then
    gnnfuse 2pass  the symbolic pass then the numeric pass (the first call when a gradient is
                   wanted; before the one-pass assembly, every first call)
    gnnfuse warm   the numeric pass on a cached pattern (every epoch after the first)
    gnnfuse 2pass one bin  (CUDA) 2pass with every row's pattern set in the global table
                   (GNNFUSE_CUDA_PATTERN_BINS=0,0,0: no register lists, shared-memory sets or flags)
    gnnfuse warm one lane  (CUDA) warm with one lane per row (GNNFUSE_CUDA_FORCE_GROUP=1: the
                   numeric kernel before its row's products were split over a group of lanes)
    torch.sparse   Pᵀ @ A @ P with CSR tensors (two sparse@sparse products)
    scipy          (P.T @ A) @ P, csr_matrix (single thread, its SMMP)
    mkl            sparse_dot_mkl.dot_product_mkl twice, when importable

and spgemm A @ P for gnnfuse vs torch.sparse and scipy. Peak extra memory of one call is
measured per method in a fresh process (--memory). Float32 values. Reports GB/s over the
bytes that must move at least once (read A, P; write the coarse CSR).

    python bench/bench_spgemm.py                        # datasets + R-MAT, 1 and 2 threads
    python bench/bench_spgemm.py --graphs cora rmat-16-16 --threads 2 --repeats 5
    python bench/bench_spgemm.py --device cuda          # a GPU: gnnfuse's CUDA kernels vs torch.sparse
                                                        # (cuSPARSE SpGEMM, chained for Pᵀ·A·P)

On a GPU the operands live on the device, every timed call ends with a synchronisation, scipy
stays the float64 reference (not timed), and --memory reports the peak device memory one call
allocates beyond its inputs (torch.cuda.max_memory_allocated, in this process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ops import cpu_model, git_commit, import_gnnfuse, machine_tag  # noqa: E402
from datasets import load  # noqa: E402

# sparse_dot_mkl finds MKL through $MKL_RT; pip's `mkl` package puts libmkl_rt in <venv>/lib.
for _rt in sorted(Path(sys.prefix, "lib").glob("libmkl_rt.so*")):
    os.environ.setdefault("MKL_RT", str(_rt))

DEFAULT_GRAPHS = ["cora", "pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-18-16", "rmat-20-16", "rmat-21-14"]
METHODS = ["gnnfuse_cold", "gnnfuse_2pass", "gnnfuse_2pass_one_bin", "gnnfuse_warm", "gnnfuse_warm_one_lane", "torch_sparse", "scipy", "mkl"]


DEVICE = "cpu"


def sync():
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def median_ms(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def device_peak_mb(fn) -> float:
    """Peak device memory one call allocates beyond what is live before it, in MiB (a warm-up call first)."""
    fn()
    sync()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    res = fn()
    sync()
    del res
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def prepare(name: str, root):
    """-> dict with the graph CSR (int64, float32 weights 1), the assignment and scipy forms."""
    import scipy.sparse as sp

    gnnfuse, _ = import_gnnfuse()
    edge_index, n = load(name, root)
    g = gnnfuse.Graph.from_edge_index(edge_index, num_nodes=n)
    sym = gnnfuse.Graph.from_edge_index(torch.cat([edge_index, edge_index.flip(0)], 1), num_nodes=n)
    cluster, m = gnnfuse.cluster.heavy_edge_matching(sym, generator=torch.Generator().manual_seed(0))
    w = torch.ones(g.col.numel(), dtype=torch.float32)
    # The peers get A with duplicate entries summed (gnnfuse sums them itself): torch's CSR
    # requires distinct columns per row, and MKL behind torch.sparse.mm faults on duplicates
    # (seen on rmat-18-16 on an AVX-512 Xeon). The same matrix, fewer stored entries.
    A = sp.csr_matrix((w.numpy().copy(), g.col.numpy().copy(), g.rowptr.numpy().copy()), shape=(n, n))  # copies: sorted in place below
    A.sum_duplicates()
    A.sort_indices()
    P = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), cluster.numpy())), shape=(n, m))
    if DEVICE != "cpu":
        g, w, cluster = g.to(DEVICE), w.to(DEVICE), cluster.to(DEVICE)
    return dict(gnnfuse=gnnfuse, g=g, w=w, cluster=cluster, m=m, n=n, A=A, P=P, PT=P.T.tocsr())


def runners(d):
    """name -> zero-argument callable computing Pᵀ·A·P, plus the A @ P product runners."""
    gnnfuse = d["gnnfuse"]
    from gnnfuse.sparse import assignment_csr

    g, w, cluster, m, n = d["g"], d["w"], d["cluster"], d["m"], d["n"]
    prowptr, pcol, mrowptr, mcol = assignment_csr(cluster, m, g.rowptr.dtype)
    crowptr, ccol = torch.ops.gnnfuse.coarsen_symbolic(mrowptr, mcol, g.rowptr, g.col, prowptr, pcol, m)

    # A fresh copy of the column indices misses the pattern cache.
    def cold():
        return torch.ops.gnnfuse.coarsen_assemble(mrowptr, mcol, g.rowptr, g.col.clone(), w, prowptr, pcol, m)

    def two_pass():
        col = g.col.clone()
        r, c = torch.ops.gnnfuse.coarsen_symbolic(mrowptr, mcol, g.rowptr, col, prowptr, pcol, m)
        return r, c, torch.ops.gnnfuse.coarsen(mrowptr, mcol, g.rowptr, col, w, prowptr, pcol, r, c, m)

    def warm():
        return crowptr, ccol, torch.ops.gnnfuse.coarsen(mrowptr, mcol, g.rowptr, g.col, w, prowptr, pcol, crowptr, ccol, m)

    A, P, PT = d["A"], d["P"], d["PT"]
    dev = g.col.device
    At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)), torch.from_numpy(A.indices.astype(np.int64)), torch.from_numpy(A.data), (n, n)).to(dev)
    Pt = torch.sparse_csr_tensor(prowptr.long(), pcol.long(), torch.ones(n, device=dev), (n, m))
    PTt = torch.sparse_csr_tensor(mrowptr.long(), mcol.long(), torch.ones(n, device=dev), (m, n))

    def torch_sparse():
        return torch.sparse.mm(torch.sparse.mm(PTt, At), Pt)

    def scipy_():
        return (PT @ A) @ P

    def two_pass_one_bin():  # CUDA: every row's set in the global table (the kernels before the bins)
        os.environ["GNNFUSE_CUDA_PATTERN_BINS"] = "0,0,0"
        try:
            return two_pass()
        finally:
            os.environ.pop("GNNFUSE_CUDA_PATTERN_BINS", None)

    def warm_one_lane():  # CUDA: a lane per row in the numeric kernel
        os.environ["GNNFUSE_CUDA_FORCE_GROUP"] = "1"
        try:
            return warm()
        finally:
            os.environ.pop("GNNFUSE_CUDA_FORCE_GROUP", None)

    out = {"gnnfuse_cold": cold, "gnnfuse_2pass": two_pass, "gnnfuse_warm": warm, "torch_sparse": torch_sparse}
    if dev.type == "cpu":
        out["scipy"] = scipy_
    else:
        out["gnnfuse_2pass_one_bin"] = two_pass_one_bin
        out["gnnfuse_warm_one_lane"] = warm_one_lane
    try:
        if dev.type != "cpu":
            raise ImportError("MKL runs on the CPU")
        import sparse_dot_mkl

        sparse_dot_mkl.mkl_set_num_threads(torch.get_num_threads())
        out["mkl"] = lambda: sparse_dot_mkl.dot_product_mkl(sparse_dot_mkl.dot_product_mkl(PT, A), P)
    except Exception:  # noqa: BLE001 - not installed (pip install sparse_dot_mkl mkl): reported as absent
        pass
    # spgemm A @ P (the first half of a general coarsening)
    spg = {
        "gnnfuse_spgemm": lambda: gnnfuse.spgemm(gnnfuse.Graph(g.rowptr, g.col.clone(), n, n), gnnfuse.Graph(prowptr, pcol, n, m), w,
                                                 torch.ones(n, device=dev)),
        "torch_sparse_spgemm": lambda: torch.sparse.mm(At, Pt),
    }
    if dev.type == "cpu":
        spg["scipy_spgemm"] = lambda: A @ P
    return out, spg


def as_scipy(res, m):
    import scipy.sparse as sp

    if isinstance(res, tuple):
        res = tuple(x.cpu() if isinstance(x, torch.Tensor) else x.to("cpu") if hasattr(x, "to") else x for x in res)
    elif isinstance(res, torch.Tensor):
        res = res.cpu()
    if isinstance(res, tuple) and len(res) == 3:
        r, c, v = res
        return sp.csr_matrix((v.double().numpy(), c.numpy(), r.numpy()), shape=(m, m))
    if isinstance(res, tuple) and len(res) == 2:  # (Graph, values)
        gr, v = res
        return sp.csr_matrix((v.double().numpy(), gr.col.numpy(), gr.rowptr.numpy()), shape=(gr.num_nodes, gr.num_src_nodes))
    if isinstance(res, torch.Tensor):
        res = res.to_sparse_csr()
        return sp.csr_matrix((res.values().double().numpy(), res.col_indices().numpy(), res.crow_indices().numpy()), shape=tuple(res.shape))
    return sp.csr_matrix(res, dtype=np.float64)


def check(res, ref, m) -> float:
    got = as_scipy(res, m)
    diff = abs(got - ref)
    return float(diff.max()) / max(1.0, float(abs(ref).max())) if diff.nnz else 0.0


def memory_child(args):
    torch.set_num_threads(args.threads)
    d = prepare(args.graph_name, args.root)
    coarse, spg = runners(d)
    fn = {**coarse, **spg}[args.method]
    from bench_layers import peak_extra_mb

    # Peak resident memory one call adds (its result included), the high-water mark reset
    # after a warm-up call.
    print(json.dumps({"peak_mb": peak_extra_mb(fn)}))


def measure_memory(args, name, method, threads) -> float:
    from bench_layers import child_peak_mb

    cmd = [sys.executable, __file__, "--memory-child", "--graph-name", name, "--method", method, "--threads", str(threads)]
    return child_peak_mb(cmd, args.root)


def bench(args):
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    rows = []
    machine = torch.cuda.get_device_name(DEVICE) if DEVICE.startswith("cuda") else cpu_model()
    if DEVICE != "cpu":
        args.threads = args.threads[:1]
    print(f"# {machine}, torch {torch.__version__}, float32, device {DEVICE}")
    head = f"{'graph':<18}{'thr':>4}{'method':>22}{'ms':>10}{'vs torch':>10}{'vs scipy':>10}{'GB/s':>8}{'rel err':>10}"
    print(head + (f"{'MiB':>9}" if args.memory else ""))
    for name in args.graphs:
        d = prepare(name, args.root)
        ref = (d["PT"].astype(np.float64) @ d["A"].astype(np.float64) @ d["P"].astype(np.float64)).tocsr()
        ref_ap = (d["A"].astype(np.float64) @ d["P"].astype(np.float64)).tocsr()
        nnz_c = ref.nnz
        idx_bytes = 8
        floor_bytes = (d["g"].rowptr.numel() + d["g"].col.numel()) * idx_bytes + d["w"].numel() * 4 + 2 * d["n"] * idx_bytes \
            + (d["m"] + 1 + nnz_c) * idx_bytes + nnz_c * 4
        for threads in args.threads:
            torch.set_num_threads(threads)
            coarse, spg = runners(d)
            times = {}
            for meth, fn in {**coarse, **spg}.items():
                if meth in ("scipy", "scipy_spgemm") and threads != args.threads[0]:
                    continue  # single-threaded: timed once
                err = check(fn(), ref_ap if meth.endswith("spgemm") else ref, d["m"])
                if err > 1e-5:
                    raise SystemExit(f"{name} {meth}: result differs from scipy float64 (rel err {err:.2e})")
                ms = median_ms(fn, args.repeats)
                times[meth] = ms
                # Peak memory does not depend on the thread count much: measured at the last one.
                mem = None
                if args.memory and threads == args.threads[-1]:
                    mem = device_peak_mb(fn) if DEVICE != "cpu" else measure_memory(args, name, meth, threads)
                row = dict(graph=name, nodes=d["n"], edges=int(d["g"].col.numel()), distinct_edges=int(d["A"].nnz), clusters=d["m"], coarse_edges=nnz_c,
                           threads=threads, method=meth, ms=ms, rel_err=err, peak_mb=mem,
                           gbps=floor_bytes / (ms * 1e-3) / 1e9 if not meth.endswith("spgemm") else None)
                rows.append(row)
            for r in rows:
                if r["graph"] != name or r["threads"] != threads:
                    continue
                base_t = times.get("torch_sparse_spgemm" if r["method"].endswith("spgemm") else "torch_sparse")
                base_s = times.get("scipy_spgemm" if r["method"].endswith("spgemm") else "scipy")
                if base_s is None:
                    base_s = next((x["ms"] for x in rows if x["graph"] == name and x["method"] == ("scipy_spgemm" if r["method"].endswith("spgemm") else "scipy")), None)
                r["speedup_vs_torch"] = base_t / r["ms"] if base_t else None
                r["speedup_vs_scipy"] = base_s / r["ms"] if base_s else None
                gb = f"{r['gbps']:8.2f}" if r["gbps"] else f"{'':>8}"
                vt = f"{r['speedup_vs_torch']:10.2f}" if r["speedup_vs_torch"] else f"{'':>10}"
                vs = f"{r['speedup_vs_scipy']:10.2f}" if r["speedup_vs_scipy"] else f"{'':>10}"
                print(f"{name:<18}{threads:>4}{r['method']:>22}{r['ms']:>10.2f}{vt}{vs}{gb}{r['rel_err']:>10.1e}"
                      + (f"{r['peak_mb']:>9.1f}" if r.get("peak_mb") is not None else ""), flush=True)
    result = dict(machine=machine, device=DEVICE, torch=torch.__version__, commit=git_commit(), dtype="float32", repeats=args.repeats,
                  floor_note="GB/s over the bytes read or written at least once: A (rowptr, col, w), P and Pᵀ, the coarse CSR",
                  mkl_available=any(r["method"] == "mkl" for r in rows), rows=rows)
    tag = machine_tag() if DEVICE == "cpu" else "".join(ch if ch.isalnum() else "-" for ch in machine.lower()).strip("-")
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"{'cpu' if DEVICE == 'cpu' else 'gpu'}_spgemm_{tag}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"# wrote {out}")
    return out


def regression_cases(scale: float):
    """The shapes where cuSPARSE's SpGEMM fails or returns zeros (issue 26): (name, A, B) as
    float32 scipy CSR, sorted. `scale` < 1 shrinks them (1: the reported sizes)."""
    import scipy.sparse as sp

    n_x = max(100, int(50000 * scale))
    cols = max(50, int(5000 * scale))
    # cupy #10033: X.T @ X, X random(N, 5000, density 0.05): right at N = 10k, INSUFFICIENT_RESOURCES
    # at 20k, all zeros at 50k, though the dense result fits
    X = sp.random(n_x, cols, density=0.05, format="csr", dtype=np.float32, random_state=42)
    X.sort_indices()
    # ginkgo #1794: past ~4M rows the default algorithm's buffer estimate fails (a Poisson product)
    n = max(1000, int(4194305 * scale))
    L = sp.diags([-np.ones(n - 1, np.float32), 2 * np.ones(n, np.float32), -np.ones(n - 1, np.float32)], [-1, 0, 1], format="csr")
    L.sort_indices()
    return [("cupy-10033 XtX", X.T.tocsr(), X), ("ginkgo-1794 poisson", L, L)]


def regressions(args):
    """--regressions: each shape through gnnfuse's spgemm (symbolic + numeric, int32 indices) and
    torch.sparse.mm (cuSPARSE SpGEMM on a GPU, MKL on the CPU): an outcome per method (ok, error,
    zeros, wrong), the milliseconds (median) where ok and the peak device memory beyond the inputs."""
    import scipy.sparse as sp

    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    dev = torch.device(DEVICE)
    machine = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_model()
    rows = []
    print(f"# {machine}, torch {torch.__version__}, float32, device {DEVICE}: SpGEMM shapes that fail in cuSPARSE")
    for name, A, B in regression_cases(args.regression_scale):
        ref = (A.astype(np.float64) @ B.astype(np.float64)).tocsr()
        ref.sum_duplicates()
        ref.sort_indices()

        def t(x, dtype=torch.int32):
            return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).to(dev)

        ar, ac, av, br, bc, bv = t(A.indptr), t(A.indices), t(A.data, torch.float32), t(B.indptr), t(B.indices), t(B.data, torch.float32)
        At = torch.sparse_csr_tensor(ar.long(), ac.long(), av, A.shape)
        Bt = torch.sparse_csr_tensor(br.long(), bc.long(), bv, B.shape)

        def ours():
            cr, cc = torch.ops.gnnfuse.spgemm_symbolic(ar, ac.clone(), br, bc, B.shape[1])  # a fresh pattern each call
            return cr, cc, torch.ops.gnnfuse.spgemm(ar, ac, av, br, bc, bv, cr, cc, B.shape[1])

        def theirs():
            c = torch.sparse.mm(At, Bt)
            return c.crow_indices(), c.col_indices(), c.values()

        for meth, fn in (("gnnfuse", ours), ("torch_sparse", theirs)):
            row = dict(case=name, rows=A.shape[0], inner=A.shape[1], cols=B.shape[1], nnz_a=int(A.nnz), nnz_b=int(B.nnz), nnz_c=int(ref.nnz),
                       products=int(np.bincount(A.indices, minlength=A.shape[1]).astype(np.int64) @ np.diff(B.indptr).astype(np.int64)), method=meth)
            try:
                cr, cc, cv = fn()
                sync()
                got = sp.csr_matrix((cv.double().cpu().numpy(), cc.long().cpu().numpy(), cr.long().cpu().numpy()), shape=ref.shape)
                if got.nnz == 0 or not np.any(got.data):
                    row["outcome"] = "zeros"
                else:
                    diff = abs(got - ref)
                    row["rel_err"] = float(diff.max()) / max(1.0, float(abs(ref).max())) if diff.nnz else 0.0
                    row["outcome"] = "ok" if row["rel_err"] <= 1e-4 else "wrong"
                del cr, cc, cv, got
            except Exception as e:  # noqa: BLE001 - the outcome is the measurement
                row["outcome"] = "error"
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            if row["outcome"] == "ok":
                row["ms"] = median_ms(fn, args.repeats)
                if dev.type == "cuda":
                    row["peak_mb"] = device_peak_mb(fn)
            rows.append(row)
            print(f"{name:<22}{meth:>14}  {row['outcome']:<6}" + (f"{row['ms']:10.2f} ms" if "ms" in row else "")
                  + (f"{row['peak_mb']:10.1f} MiB" if row.get("peak_mb") is not None else "") + (f"  {row.get('error', '')}"), flush=True)
    result = dict(machine=machine, device=DEVICE, torch=torch.__version__, commit=git_commit(), dtype="float32", repeats=args.repeats,
                  scale=args.regression_scale, rows=rows)
    tag = machine_tag() if dev.type == "cpu" else "".join(ch if ch.isalnum() else "-" for ch in machine.lower()).strip("-")
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"{'cpu' if dev.type == 'cpu' else 'gpu'}_spgemm_regressions_{tag}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"# wrote {out}")
    return out


def plot(path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text())
    rows = data["rows"]
    threads = sorted({r["threads"] for r in rows})
    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    # scipy (1 thread) on the CPU; on a GPU torch.sparse (cuSPARSE), scipy being the reference only
    base_method = "scipy" if any(r["method"] == "scipy" for r in rows) else "torch_sparse"
    fig, axes = plt.subplots(1, len(threads), figsize=(6 * len(threads), 4), squeeze=False)
    for ax, t in zip(axes[0], threads):
        meths = [x for x in METHODS if any(r["method"] == x for r in rows)]
        width = 0.8 / len(meths)
        for k, meth in enumerate(meths):
            ys = []
            for gname in graphs:
                # the row at this thread count; scipy (single-threaded, timed once) at the first
                r = next((x for x in rows if x["graph"] == gname and x["method"] == meth and x["threads"] == t), None) or \
                    next((x for x in rows if x["graph"] == gname and x["method"] == meth and x["threads"] == threads[0]), None)
                base = next((x for x in rows if x["graph"] == gname and x["method"] == base_method), None)
                ys.append(base["ms"] / r["ms"] if r and base else 0)
            ax.bar([i + k * width for i in range(len(graphs))], ys, width, label=meth)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(graphs))])
        ax.set_xticklabels(graphs, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("speedup over scipy (1 thread)" if base_method == "scipy" else "speedup over torch.sparse (cuSPARSE)")
        ax.set_yscale("log")
        ax.set_title(f"Pᵀ·A·P, {t} thread(s), {data['machine'][:40]}" if base_method == "scipy" else f"Pᵀ·A·P, {data['machine'][:40]}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=110)
    print(f"# wrote {png}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", nargs="+", default=DEFAULT_GRAPHS)
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--root", default=None)
    p.add_argument("--memory", action="store_true", help="peak extra memory per method in a fresh process")
    p.add_argument("--out", default=None)
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N]: the operands and the timed calls on that device")
    p.add_argument("--regressions", action="store_true",
                   help="the shapes where cuSPARSE's SpGEMM fails or returns zeros (cupy #10033, ginkgo #1794): ours vs torch.sparse")
    p.add_argument("--regression-scale", type=float, default=1.0, help="--regressions: shrink the shapes (1: as reported)")
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--graph-name", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if args.memory_child:
        args.threads = args.threads[0]
        return memory_child(args)
    if args.regressions:
        return regressions(args)
    out = bench(args)
    if not args.no_plot:
        try:
            plot(out)
        except ImportError:
            print("# matplotlib not installed: no plot")


if __name__ == "__main__":
    main()
