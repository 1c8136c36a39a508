"""Peak memory and time of forward + backward of the fused sddmm_spmm against the unfused
compositions and PyG-style message passing, on real graphs and an R-MAT graph.

    Y[i,:] = sum_{j->i} w_ij * (u_i . v_j) * x_j      loss = sum(Y * G), gradients for w, u, v, x

* gnnfuse fused      ops.sddmm_spmm: the generated backward recomputes the edge scores inside
                     its kernels, so nothing edge-sized is saved or allocated except dw itself;
* gnnfuse unfused    ops.sddmm -> ops.spmm(edge_weight=scores): the [E] scores are saved;
* gather/scatter     PyG-style message passing in plain torch: [E, F] messages materialised.

Gradients of all three are checked against each other before anything is measured. Each
variant runs in a fresh subprocess (peak resident memory above the level before the call,
through /proc/self/clear_refs), medians of repeated runs for the time.

    python bench/bench_autograd_memory.py [--graphs cora rmat-18-16] [--F 32] [--out bench/results/...json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from bench_ops import call_with_peak, cpu_model, git_commit, import_gnnfuse  # noqa: E402
from datasets import load  # noqa: E402

VARIANTS = ["gnnfuse_fused", "gnnfuse_unfused", "gather_scatter"]
GRAPHS = ["cora", "pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-18-16"]


def make_inputs(graph: str, F: int, seed: int = 0):
    edge_index, n = load(graph, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    E = edge_index.size(1)
    w = torch.rand(E, generator=gen)
    u = torch.randn(n, F, generator=gen) / F**0.5
    v = torch.randn(n, F, generator=gen) / F**0.5
    x = torch.randn(n, F, generator=gen)
    g = torch.randn(n, F, generator=gen)
    return edge_index, n, w, u, v, x, g


def run_variant(name, gnnfuse, graph, edge_index, w, u, v, x, g):
    """Forward + backward; returns the four gradients (w in edge_index order)."""
    ops = gnnfuse.ops
    leaves = [t.detach().clone().requires_grad_() for t in (w, u, v, x)]
    lw, lu, lv, lx = leaves
    if name == "gnnfuse_fused":
        wc = graph.permute_edge_values(lw)
        y = ops.sddmm_spmm(graph, lu, lv, lx, wc)
    elif name == "gnnfuse_unfused":
        wc = graph.permute_edge_values(lw)
        s = ops.sddmm(graph, lu, lv, wc)
        y = ops.spmm(graph, lx, s)
    else:
        src, dst = edge_index[0], edge_index[1]
        s = lw * (lu[dst] * lv[src]).sum(1)
        y = torch.zeros_like(lx).index_add_(0, dst, s[:, None] * lx[src])
    (y * g).sum().backward()
    return [t.grad for t in leaves]


def child(args):
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(err)
    torch.set_num_threads(args.threads)
    edge_index, n, w, u, v, x, g = make_inputs(args.graph, args.F)
    graph = gnnfuse.Graph.from_edge_index(edge_index, n)
    graph.csc()  # a Graph caches its CSC view; built before measuring, as a training loop would
    fn = lambda: run_variant(args.variant, gnnfuse, graph, edge_index, w, u, v, x, g)  # noqa: E731
    grads, peak = call_with_peak(fn)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.save(grads, args.grads_out)
    print(json.dumps({"peak_mib": peak, "median_s": statistics.median(times), "times_s": times}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="+", default=GRAPHS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    ap.add_argument("--F", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--out", default=str(HERE / "results" / "autograd_memory_cpu.json"))
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--grads-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        return child(args)

    reports = []
    for graph in args.graphs:
        reports.append(measure(graph, args))
    report = {
        "what": "forward+backward of Y = sddmm_spmm(A, u, v, x), loss = sum(Y*G): peak resident memory "
                "above the level before the call, median time",
        "machine": {"cpu": cpu_model(), "threads": args.threads, "platform": platform.platform()},
        "commit": git_commit(),
        "graphs": reports,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


def measure(graph, args):
    edge_index, n, *_ = make_inputs(graph, args.F)
    E = edge_index.size(1)
    results = {}
    grads = {}
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    for name in VARIANTS:
        gfile = tmp / f"gnnfuse_bench_grads_{name}.pt"
        cmd = [sys.executable, __file__, "--variant", name, "--grads-out", str(gfile), "--graph", graph,
               "--F", str(args.F), "--reps", str(args.reps), "--threads", str(args.threads)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results[name] = json.loads(out)
        grads[name] = torch.load(gfile)
        gfile.unlink()
    # correctness before reporting: every variant's gradients agree with the fused op's
    for name in VARIANTS[1:]:
        for label, a, b in zip("wuvx", grads["gnnfuse_fused"], grads[name]):
            err = (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
            if err > 1e-3:
                raise SystemExit(f"{graph}: gradient d{label} of {name} differs from the fused op's (relative {err:.2e})")
            results[name].setdefault("max_rel_grad_diff_vs_fused", {})[label] = err
    floor_mib = 4 * (E + 4 * n * args.F) / 2**20  # dw [E], du dv dx [N,F] and the output
    print(f"{graph}: N={n}, E={E}, float32, F=K={args.F}, {args.threads} threads; "
          f"gradients + output alone: {floor_mib:.0f} MiB")
    print(f"  {'variant':18s} {'peak MiB':>10s} {'median s':>10s}")
    for name in VARIANTS:
        r = results[name]
        print(f"  {name:18s} {r['peak_mib']:10.0f} {r['median_s']:10.4f}")
    return {"graph": graph, "num_nodes": n, "num_edges": E, "F": args.F,
            "gradients_and_output_mib": floor_mib, "results": results}


if __name__ == "__main__":
    main()
