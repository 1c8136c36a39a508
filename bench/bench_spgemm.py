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
    python bench/bench_spgemm.py --device cuda --graphs reddit-like products-like --threads 1 --repeats 3 --memory \
        --methods gnnfuse_cold gnnfuse_2pass gnnfuse_warm torch_sparse gnnfuse_spgemm torch_sparse_spgemm
                                                        # issue 26's scales: Reddit's (233k nodes, 115M edges,
                                                        # generated) and ogbn-products' (2.4M / 61.9M, R-MAT)

Graphs: bench/datasets.py names (real graphs, rmat-S-EF, reddit-like and products-like, each of the two
also -<nodes>-<mean degree> scaled down); the generated ones are made on the device when there is one.

On a GPU the operands live on the device, every timed call ends with a synchronisation, scipy
stays the float64 reference (not timed), and --memory reports the peak device memory one call
allocates beyond its inputs (torch.cuda.max_memory_allocated, in this process; peak_mb, the output
included), its workspace (workspace_mb: the peak above what the call leaves allocated, i.e. above
its output) and whether that workspace stays within issue 26's bound, 2 x (bytes of A's CSR + bytes
of the output's CSR) (workspace_bound_mb, workspace_within_bound; the output's CSR counted with the
index size of A's, float32 values). A method that fails, returns zeros or a wrong result is recorded
as such (outcome) and the run goes on (cuSPARSE's SpGEMM fails at some of these sizes); the exit
status is 1 where a gnnfuse method did. Graphs past 2^24 stored edges are checked on 20,000 sampled
output rows (--check-rows; scipy's float64 product of a whole Reddit-scale graph takes minutes).
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
from datasets import load, sized_graph  # noqa: E402

# sparse_dot_mkl finds MKL through $MKL_RT; pip's `mkl` package puts libmkl_rt in <venv>/lib.
for _rt in sorted(Path(sys.prefix, "lib").glob("libmkl_rt.so*")):
    os.environ.setdefault("MKL_RT", str(_rt))

DEFAULT_GRAPHS = ["cora", "pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-18-16", "rmat-20-16", "rmat-21-14"]
METHODS = ["gnnfuse_cold", "gnnfuse_2pass", "gnnfuse_2pass_one_bin", "gnnfuse_warm", "gnnfuse_warm_one_lane", "torch_sparse", "scipy", "mkl"]
SPGEMM_METHODS = ["gnnfuse_spgemm", "torch_sparse_spgemm", "scipy_spgemm"]


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


def device_peak_mb(fn, api=None) -> dict:
    """Device memory of one call (a warm-up call first), in MiB: peak_mb, the peak beyond what is
    live before it (inputs, cached patterns: not counted); kept_mb, what is still allocated after it
    with its result held (the output, and what the call caches); workspace_mb = peak_mb - kept_mb,
    the temporaries. `api` stands for torch.cuda (tests pass a stand-in)."""
    api = api or torch.cuda
    fn()
    sync()
    api.reset_peak_memory_stats()
    base = api.memory_allocated()
    res = fn()
    sync()
    peak, kept = api.max_memory_allocated() - base, api.memory_allocated() - base
    del res
    return {"peak_mb": peak / 2**20, "kept_mb": kept / 2**20, "workspace_mb": (peak - kept) / 2**20}


def csr_bytes(rows: int, nnz: int, index_bytes: int, value_bytes: int = 4) -> int:
    """Bytes of a CSR: row pointers, columns and values."""
    return (rows + 1) * index_bytes + nnz * (index_bytes + value_bytes)


def workspace_bound(mem: dict, a_bytes: int, c_bytes: int) -> dict:
    """Issue 26's bound on a product's temporaries, 2 x (A's CSR + the output's CSR), beside the
    measured workspace: {"workspace_bound_mb", "workspace_within_bound"}."""
    bound = 2 * (a_bytes + c_bytes) / 2**20
    return {"workspace_bound_mb": bound, "workspace_within_bound": mem["workspace_mb"] <= bound}


def prepare(name: str, root):
    """-> dict with the graph CSR (int64, float32 weights 1), the assignment and scipy forms."""
    import scipy.sparse as sp

    gnnfuse, _ = import_gnnfuse()
    # The generated Reddit- and ogbn-products-sized graphs are made and sorted on the device where
    # there is one (seconds there, minutes on the CPU); the matching runs on the CPU (its only kernel).
    sized = sized_graph(name, DEVICE)
    edge_index, n = sized if sized is not None else load(name, root)
    edge_index = edge_index.to(DEVICE)
    g = gnnfuse.Graph.from_edge_index(edge_index, num_nodes=n)
    sym = gnnfuse.Graph.from_edge_index(torch.cat([edge_index, edge_index.flip(0)], 1), num_nodes=n).to("cpu")
    del edge_index
    g = g.to("cpu")
    cluster, m = gnnfuse.cluster.heavy_edge_matching(sym, generator=torch.Generator().manual_seed(0))
    del sym
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
    # the outputs' sizes (the floor's bytes, the workspace bound), from the patterns
    d["coarse_nnz"] = int(ccol.numel())
    if "ap_nnz" not in d:
        d["ap_nnz"] = int(torch.ops.gnnfuse.spgemm_symbolic(g.rowptr, g.col.clone(), prowptr, pcol, m)[1].numel())

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


def check(got, ref, rows=None) -> tuple[str, float]:
    """(outcome, relative error) of a result (scipy CSR) against the float64 reference: zeros (an
    empty or all-zero result: cuSPARSE's silent failure), ok or wrong (max |got - ref| / max(1,
    max |ref|) above 1e-5). `rows`: the output rows `ref` holds (all when None)."""
    if rows is not None:
        got = got[rows]
    if ref.nnz and (got.nnz == 0 or not np.any(got.data)):
        return "zeros", 1.0
    diff = abs(got - ref)
    err = float(diff.max()) / max(1.0, float(abs(ref).max())) if diff.nnz else 0.0
    return ("ok" if err <= 1e-5 else "wrong"), err


def reference(d, check_rows: int, seed: int = 0):
    """float64 scipy references of Pᵀ·A·P and A·P: (ref, rows, ref_ap, ap_rows), of every row
    (rows None) or of `check_rows` sampled output rows (the products of those rows only)."""
    A, P, PT = d["A"].astype(np.float64), d["P"].astype(np.float64), d["PT"].astype(np.float64)
    if not check_rows:
        return (PT @ A @ P).tocsr(), None, (A @ P).tocsr(), None
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(d["m"], min(check_rows, d["m"]), replace=False))
    ap_rows = np.sort(rng.choice(d["n"], min(check_rows, d["n"]), replace=False))
    return (PT[rows] @ A @ P).tocsr(), rows, (A[ap_rows] @ P).tocsr(), ap_rows


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
    print(head + (f"{'MiB':>9}{'work MiB':>10}{'bound':>9}" if args.memory else ""))
    failed = False
    for name in args.graphs:
        t0 = time.perf_counter()
        d = prepare(name, args.root)
        idx_bytes = d["g"].rowptr.element_size()
        edges = int(d["g"].col.numel())
        # every output row checked below 2^24 stored edges, sampled rows above (--check-rows)
        sample = args.check_rows if args.check_rows is not None else (0 if edges < (1 << 24) else 20000)
        ref, ref_rows, ref_ap, ap_rows = reference(d, sample)
        print(f"# {name}: {d['n']} nodes, {edges} edges, {d['m']} clusters; prepared in {time.perf_counter() - t0:.1f} s"
              + (f", checked on {sample} sampled rows" if sample else ""), flush=True)
        a_bytes = csr_bytes(d["n"], edges, idx_bytes)
        for threads in args.threads:
            torch.set_num_threads(threads)
            coarse, spg = runners(d)
            nnz_c = d["coarse_nnz"]
            floor_bytes = (d["g"].rowptr.numel() + edges) * idx_bytes + d["w"].numel() * 4 + 2 * d["n"] * idx_bytes \
                + (d["m"] + 1 + nnz_c) * idx_bytes + nnz_c * 4
            times = {}
            for meth, fn in {**coarse, **spg}.items():
                if args.methods and meth not in args.methods:
                    continue
                if meth in ("scipy", "scipy_spgemm") and threads != args.threads[0]:
                    continue  # single-threaded: timed once
                is_spgemm = meth.endswith("spgemm")
                row = dict(graph=name, nodes=d["n"], edges=edges, distinct_edges=int(d["A"].nnz), clusters=d["m"], coarse_edges=nnz_c,
                           ap_edges=d["ap_nnz"], threads=threads, method=meth, ms=None, rel_err=None, peak_mb=None, gbps=None)
                try:
                    res = fn()
                    sync()
                    got = as_scipy(res, d["m"])
                    del res
                    row["outcome"], row["rel_err"] = check(got, ref_ap if is_spgemm else ref, ap_rows if is_spgemm else ref_rows)
                    del got
                except Exception as e:  # noqa: BLE001 - cuSPARSE failing at scale is a result
                    row["outcome"] = "error"
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                if row["outcome"] == "ok":
                    try:
                        row["ms"] = times[meth] = median_ms(fn, args.repeats)
                        # Peak memory does not depend on the thread count much: measured at the last one.
                        if args.memory and threads == args.threads[-1]:
                            if DEVICE != "cpu":
                                mem = device_peak_mb(fn)
                                row.update(mem)
                                c_bytes = csr_bytes(d["n"], d["ap_nnz"], idx_bytes) if is_spgemm else csr_bytes(d["m"], nnz_c, idx_bytes)
                                row.update(workspace_bound(mem, a_bytes, c_bytes))
                            else:
                                row["peak_mb"] = measure_memory(args, name, meth, threads)
                    except Exception as e:  # noqa: BLE001 - out of memory in the timed calls, recorded
                        row["outcome"] = "error"
                        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                    if not is_spgemm and row["ms"]:
                        row["gbps"] = floor_bytes / (row["ms"] * 1e-3) / 1e9
                if row["outcome"] != "ok" and meth.startswith("gnnfuse"):
                    failed = True
                rows.append(row)
                if DEVICE != "cpu":
                    torch.cuda.empty_cache()
            for r in rows:
                if r["graph"] != name or r["threads"] != threads:
                    continue
                base_t = times.get("torch_sparse_spgemm" if r["method"].endswith("spgemm") else "torch_sparse")
                base_s = times.get("scipy_spgemm" if r["method"].endswith("spgemm") else "scipy")
                if base_s is None:
                    base_s = next((x["ms"] for x in rows if x["graph"] == name and x["method"] == ("scipy_spgemm" if r["method"].endswith("spgemm") else "scipy")), None)
                r["speedup_vs_torch"] = base_t / r["ms"] if base_t and r["ms"] else None
                r["speedup_vs_scipy"] = base_s / r["ms"] if base_s and r["ms"] else None
                if not r["ms"]:
                    print(f"{name:<18}{threads:>4}{r['method']:>22}  {r['outcome'].upper()} {r.get('error', '')}"
                          + (f" (rel err {r['rel_err']:.1e})" if r["rel_err"] is not None else ""), flush=True)
                    continue
                gb = f"{r['gbps']:8.2f}" if r["gbps"] else f"{'':>8}"
                vt = f"{r['speedup_vs_torch']:10.2f}" if r["speedup_vs_torch"] else f"{'':>10}"
                vs = f"{r['speedup_vs_scipy']:10.2f}" if r["speedup_vs_scipy"] else f"{'':>10}"
                mem = f"{r['peak_mb']:>9.1f}" if r.get("peak_mb") is not None else ""
                if r.get("workspace_mb") is not None:
                    mem += f"{r['workspace_mb']:>10.1f}{r['workspace_bound_mb']:>9.1f}" + ("" if r["workspace_within_bound"] else "  OVER BOUND")
                print(f"{name:<18}{threads:>4}{r['method']:>22}{r['ms']:>10.2f}{vt}{vs}{gb}{r['rel_err']:>10.1e}{mem}", flush=True)
        del d
    result = dict(machine=machine, device=DEVICE, torch=torch.__version__, commit=git_commit(), dtype="float32", repeats=args.repeats,
                  floor_note="GB/s over the bytes read or written at least once: A (rowptr, col, w), P and Pᵀ, the coarse CSR",
                  memory_note="device: peak_mb = peak allocated during one call above what was live before it (output included); "
                  "workspace_mb = peak_mb - what the call left allocated (its output); workspace_bound_mb = 2 x (A's CSR + the output's CSR)",
                  mkl_available=any(r["method"] == "mkl" for r in rows), rows=rows)
    tag = machine_tag() if DEVICE == "cpu" else "".join(ch if ch.isalnum() else "-" for ch in machine.lower()).strip("-")
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"{'cpu' if DEVICE == 'cpu' else 'gpu'}_spgemm_{tag}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"# wrote {out}")
    return out, failed


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
                    mem = device_peak_mb(fn)
                    row.update(mem)
                    row.update(workspace_bound(mem, csr_bytes(A.shape[0], int(A.nnz), 4), csr_bytes(A.shape[0], int(ref.nnz), 4)))
            rows.append(row)
            print(f"{name:<22}{meth:>14}  {row['outcome']:<6}" + (f"{row['ms']:10.2f} ms" if "ms" in row else "")
                  + (f"{row['peak_mb']:10.1f} MiB" if row.get("peak_mb") is not None else "")
                  + (f" (workspace {row['workspace_mb']:.1f} MiB, bound {row['workspace_bound_mb']:.1f})" if "workspace_mb" in row else "")
                  + (f"  {row.get('error', '')}"), flush=True)
    result = dict(machine=machine, device=DEVICE, torch=torch.__version__, commit=git_commit(), dtype="float32", repeats=args.repeats,
                  scale=args.regression_scale, rows=rows)
    tag = machine_tag() if dev.type == "cpu" else "".join(ch if ch.isalnum() else "-" for ch in machine.lower()).strip("-")
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"{'cpu' if dev.type == 'cpu' else 'gpu'}_spgemm_regressions_{tag}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"# wrote {out}")
    return 1 if any(r["method"] == "gnnfuse" and r["outcome"] != "ok" for r in rows) else 0


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
                ys.append(base["ms"] / r["ms"] if r and base and r.get("ms") and base.get("ms") else 0)  # (0: failed)
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
    p.add_argument("--graphs", nargs="+", default=DEFAULT_GRAPHS,
                   help="bench/datasets.py names: real graphs, rmat-S-EF, reddit-like, products-like (the last two also -<nodes>-<mean degree>)")
    p.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="a subset of the methods (default all that run on the device): " + ", ".join(METHODS + SPGEMM_METHODS))
    p.add_argument("--check-rows", type=int, default=None,
                   help="output rows sampled for the check against scipy (0: every row; default: every row below 2^24 "
                   "stored edges, 20,000 sampled above)")
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
    out, failed = bench(args)
    if not args.no_plot:
        try:
            plot(out)
        except ImportError:
            print("# matplotlib not installed: no plot")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
