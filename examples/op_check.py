#!/usr/bin/env python3
"""gnnfuse op check: build a graph, run the three ops, check them, time them.

    python examples/op_check.py                          # random power-law graph, 20k nodes
    python examples/op_check.py --dataset cora           # a real graph from ../shared/datasets
    python examples/op_check.py --nodes 5000 --features 32 --threads 1

Checks gnnfuse.ops.spmm, sddmm and sddmm_spmm against a dense float64 PyTorch
reference (a sparse float64 one for graphs over --dense-limit nodes) and compares
their speed with torch.sparse.mm and the unfused PyTorch path. Exits non-zero if
a check fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
RTOL, ATOL = 2e-4, 1e-6  # float32 vs float64: |out - ref| <= RTOL * op(|inputs|) + ATOL


def import_gnnfuse():
    try:
        import gnnfuse
        return gnnfuse
    except ImportError:
        pass
    sys.path.insert(0, str(REPO_ROOT / "python"))  # running from a source checkout
    for k in [m for m in sys.modules if m == "gnnfuse" or m.startswith("gnnfuse.")]:
        del sys.modules[k]
    try:
        import gnnfuse
        return gnnfuse
    except ImportError as e:
        sys.exit(f"error: cannot import gnnfuse ({e})\n"
                 f"build it first, from {REPO_ROOT}:  pip install --no-build-isolation -e .")


def power_law_graph(n: int, avg_degree: float, exponent: float = 2.2, seed: int = 0):
    """Random directed graph with power-law in- and out-degrees (Chung-Lu style).

    Both endpoints of each edge are drawn independently with probability proportional
    to a node weight (k+1)^(-1/(exponent-1)); node ids are shuffled and duplicate
    edges removed. Returns a PyG-style edge_index [2, E] (row 0 source, row 1 target).
    """
    g = torch.Generator().manual_seed(seed)
    weight = torch.arange(1, n + 1, dtype=torch.float64).pow(-1.0 / (exponent - 1.0))
    e = int(n * avg_degree)
    src = torch.multinomial(weight, e, replacement=True, generator=g)
    dst = torch.multinomial(weight, e, replacement=True, generator=g)
    relabel = torch.randperm(n, generator=g)
    key = torch.unique(relabel[src] * n + relabel[dst])
    return torch.stack([key // n, key % n])


def load_dataset(name: str, root):
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    import datasets  # bench/datasets.py: the one place graph loading lives
    return datasets.load(name, root)


def median_ms(fn, runs: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def dense_reference(edge_index, n, w, x, u, v, block: int = 1024):
    """float64 results from dense row blocks of A (input edge order; duplicates add up).

    Returns (spmm [n, F], sddmm per input edge [E], sddmm_spmm [n, F]).
    """
    src, dst = edge_index[0], edge_index[1]
    x64, u64, v64, w64 = x.double(), u.double(), v.double(), w.double()
    y = torch.empty(n, x.size(1), dtype=torch.float64)
    z = torch.empty_like(y)
    s = torch.empty(src.numel(), dtype=torch.float64)
    order = torch.argsort(dst, stable=True)          # visit the edges block by block
    bounds = torch.searchsorted(dst[order], torch.arange(0, n + block, block))
    a_buf = torch.empty(min(block, n), n, dtype=torch.float64)        # reused: no page faults
    sc_buf = torch.empty_like(a_buf)
    for b, start in enumerate(range(0, n, block)):
        stop = min(n, start + block)
        sel = order[bounds[b]:bounds[b + 1]]
        a, scores = a_buf[: stop - start].zero_(), sc_buf[: stop - start]
        a.index_put_((dst[sel] - start, src[sel]), w64[sel], accumulate=True)   # dense rows of A
        torch.matmul(u64[start:stop], v64.t(), out=scores)                      # dense U V^T rows
        torch.matmul(a, x64, out=y[start:stop])
        s[sel] = w64[sel] * scores[dst[sel] - start, src[sel]]
        torch.matmul(scores.mul_(a), x64, out=z[start:stop])
    return y, s, z


def sparse_reference(edge_index, n, w, x, u, v):
    """float64 results straight from the edge list (for graphs too big for dense blocks)."""
    src, dst = edge_index[0], edge_index[1]
    x64 = x.double()
    s = w.double() * (u.double()[dst] * v.double()[src]).sum(-1)
    y = torch.zeros(n, x.size(1), dtype=torch.float64).index_add_(0, dst, w.double()[:, None] * x64[src])
    z = torch.zeros_like(y).index_add_(0, dst, s[:, None] * x64[src])
    return y, s, z


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="gnnfuse demo", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default=None, help="cora, pubmed, ca-HepPh, soc-Slashdot0902 or rmat-S-EF "
                                                    "(default: a random power-law graph)")
    ap.add_argument("--root", default=None, help="dataset root (default ../shared/datasets next to the repo)")
    ap.add_argument("--nodes", type=int, default=20000, help="random graph: nodes")
    ap.add_argument("--avg-degree", type=float, default=16.0, help="random graph: edges drawn per node")
    ap.add_argument("--features", type=int, default=64, help="feature width F")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per implementation (median reported)")
    ap.add_argument("--dense-limit", type=int, default=30000, help="largest N checked with dense blocks")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gnnfuse = import_gnnfuse()

    # 1. a graph, as a PyG-style edge_index (row 0 = source, row 1 = target)
    if args.dataset:
        edge_index, n = load_dataset(args.dataset, args.root)
        what = args.dataset
    else:
        n = args.nodes
        edge_index = power_law_graph(n, args.avg_degree, seed=args.seed)
        what = "random power-law"
    e = edge_index.size(1)
    max_in = int(torch.bincount(edge_index[1], minlength=n).max()) if e else 0
    f = args.features
    print(f"gnnfuse demo  ·  torch {torch.__version__}  ·  {torch.get_num_threads()} threads")
    print(f"graph: {what}, {n:,} nodes, {e:,} edges (max in-degree {max_in:,}), F = {f}, float32\n")

    # 2. the gnnfuse graph (CSR over targets) and some data
    g = gnnfuse.Graph.from_edge_index(edge_index, num_nodes=n)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(n, f, generator=gen)
    u = torch.randn(n, f, generator=gen)
    v = torch.randn(n, f, generator=gen)
    w = torch.rand(e, generator=gen) + 0.5             # one weight per input edge
    w_csr = w[g.perm]                                   # per-edge tensors go in CSR order

    # 3. the three ops
    y = gnnfuse.ops.spmm(g, x, w_csr)                   # y_i = sum_j w_ij x_j
    s = gnnfuse.ops.sddmm(g, u, v, w_csr)               # s_ij = w_ij (u_i . v_j), CSR order
    z = gnnfuse.ops.sddmm_spmm(g, u, v, x, w_csr)       # z_i = sum_j w_ij (u_i . v_j) x_j, fused

    # 4. check against float64 PyTorch
    dense = n <= args.dense_limit
    t0 = time.perf_counter()
    ref = (dense_reference if dense else sparse_reference)(edge_index, n, w, x, u, v)
    kind = "dense" if dense else "sparse (graph above --dense-limit)"
    print(f"correctness vs a {kind} float64 PyTorch reference ({time.perf_counter() - t0:.1f} s)")
    # error scale per value: the same op on |inputs| (float32 rounding error grows with it)
    scale = sparse_reference(edge_index, n, w.abs(), x.abs(), u.abs(), v.abs())
    ok = True
    got = {"spmm": y, "sddmm": s, "sddmm_spmm": z}
    perm = g.perm  # CSR position p holds input edge perm[p]: reference scores to CSR order
    checks = {"spmm": (ref[0], scale[0]), "sddmm": (ref[1][perm], scale[1][perm]), "sddmm_spmm": (ref[2], scale[2])}
    for op in ("spmm", "sddmm", "sddmm_spmm"):
        r, sc = checks[op]
        out = got[op]
        if out.shape != r.shape or out.dtype != torch.float32:
            print(f"  {op:11s} wrong result: shape {tuple(out.shape)} {out.dtype}, expected {tuple(r.shape)} float32  FAIL")
            ok = False
            continue
        err = (out.double() - r).abs()
        tol = RTOL * sc + ATOL
        worst = float((err / tol).nan_to_num(nan=float("inf")).max()) if r.numel() else 0.0
        good = worst <= 1.0
        ok &= good
        print(f"  {op:11s} max |error| {float(err.max()) if r.numel() else 0.0:8.2e}   "
              f"worst error/tolerance {worst:8.2e}   {'PASS' if good else 'FAIL'}")
    print(f"  (tolerance per value: {RTOL:g} x the same op on |inputs| + {ATOL:g})")

    # 5. speed against PyTorch
    a_w = torch.sparse_csr_tensor(g.rowptr, g.col, w_csr, (n, n), check_invariants=False)
    a_1 = torch.sparse_csr_tensor(g.rowptr, g.col, torch.ones(e), (n, n), check_invariants=False)

    def torch_unfused():  # scores materialised as an E-sized tensor, then a sparse matmul
        scores = torch.sparse.sampled_addmm(a_1, u, v.t(), beta=0.0).values() * w_csr
        return torch.sparse.mm(torch.sparse_csr_tensor(g.rowptr, g.col, scores, (n, n), check_invariants=False), x)

    rows = [
        ("spmm", lambda: gnnfuse.ops.spmm(g, x, w_csr), "torch.sparse.mm", lambda: torch.sparse.mm(a_w, x)),
        ("sddmm", lambda: gnnfuse.ops.sddmm(g, u, v, w_csr), "torch.sparse.sampled_addmm",
         lambda: torch.sparse.sampled_addmm(a_1, u, v.t(), beta=0.0).values() * w_csr),
        ("sddmm_spmm", lambda: gnnfuse.ops.sddmm_spmm(g, u, v, x, w_csr), "torch unfused (sddmm, spmm)", torch_unfused),
    ]
    print(f"\nspeed, median of {args.runs} runs")
    for op, ours, base_name, base in rows:
        t_ours, t_base = median_ms(ours, args.runs), median_ms(base, args.runs)
        ratio = t_base / t_ours
        verdict = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        print(f"  {op:11s} gnnfuse {t_ours:8.3f} ms   {base_name:27s} {t_base:8.3f} ms   -> gnnfuse {verdict}")

    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
