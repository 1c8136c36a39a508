"""SpMM mean/max aggregation and (multi-head) edge softmax against what PyG users run today,
side by side on CPU: torch_geometric.utils.scatter / softmax (torch's scatter_reduce underneath,
torch_scatter not installed) on gathered edge tensors. Outputs (and gradients for fwd+bwd) are
compared first; times are medians, float32.

    python bench/bench_reductions.py --graphs cora pubmed ca-HepPh rmat-16-16 --F 64 --heads 4 \\
        --out bench/results/cpu_reductions_<machine>.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import add_common_args, time_side_by_side, write_results  # noqa: E402
from bench_ops import cpu_model, import_gnnfuse  # noqa: E402
from datasets import load  # noqa: E402


def cases(n, edge_index, F, H):
    from torch_geometric.utils import scatter, softmax

    ops = torch.ops.gnnfuse
    rowptr, col, perm = ops.edge_index_to_csr(edge_index, n)
    src, dst = edge_index[0][perm], edge_index[1][perm]  # CSR order for both sides
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, F, generator=gen)
    s = torch.randn(src.numel(), H, generator=gen)
    xh = torch.randn(n, H, F // H, generator=gen)
    return {
        "spmm_mean": (
            [x], lambda x: ops.spmm_mean(rowptr, col, None, x),
            lambda x: scatter(x[src], dst, 0, dim_size=n, reduce="mean")),
        "spmm_max": (
            [x], lambda x: ops.spmm_max(rowptr, col, None, x)[0],
            lambda x: scatter(x[src], dst, 0, dim_size=n, reduce="max")),
        "edge_softmax_heads": (
            [s], lambda s: ops.edge_softmax_heads(rowptr, col, s),
            lambda s: softmax(s, dst, num_nodes=n)),
        "softmax+spmm_heads": (
            [s, xh], lambda s, v: ops.spmm_heads(rowptr, col, ops.edge_softmax_heads(rowptr, col, s), v),
            lambda s, v: scatter(softmax(s, dst, num_nodes=n)[..., None] * v[src], dst, 0, dim_size=n, reduce="sum")),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--F", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    args = ap.parse_args()
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    import torch_geometric

    torch.set_num_threads(args.threads)
    print(f"# {cpu_model()}, {args.threads} threads, torch {torch.__version__}, torch_geometric {torch_geometric.__version__}")
    print(f"{'graph':<14}{'op':<20}{'mode':<9}{'pyg ms':>9}{'gnnfuse ms':>12}{'speedup':>9}")
    results = []
    for name in args.graphs:
        edge_index, n = load(name, args.root)
        for op, (inputs, ours, theirs) in cases(n, edge_index, args.F, args.heads).items():
            # correctness: outputs and gradients
            res = []
            for fn in (ours, theirs):
                ins = [t.clone().requires_grad_() for t in inputs]
                y = fn(*ins)
                w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
                res.append([y.detach()] + list(torch.autograd.grad((y * w).sum(), ins)))
            err = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(*res))
            if err > 1e-4:
                raise SystemExit(f"{name}/{op}: gnnfuse differs from the reference (max rel err {err:.2e})")
            for mode in ("forward", "fwd+bwd"):
                def make(fn):
                    if mode == "forward":
                        def run():
                            with torch.no_grad():
                                fn(*inputs)
                        return run
                    ins = [t.clone().requires_grad_() for t in inputs]

                    def run():
                        fn(*ins).sum().backward()
                    return run
                make(ours)()
                make(theirs)()
                t_p, t_o, _ = time_side_by_side(make(theirs), make(ours), args.min_reps, args.min_time)
                results.append({"graph": name, "nodes": n, "edges": int(edge_index.size(1)), "op": op, "mode": mode,
                                "F": args.F, "heads": args.heads, "pyg_ms": t_p * 1e3, "gnnfuse_ms": t_o * 1e3,
                                "speedup": t_p / t_o, "max_rel_err": err})
                print(f"{name:<14}{op:<20}{mode:<9}{t_p*1e3:>9.2f}{t_o*1e3:>12.2f}{t_p/t_o:>8.2f}x")
    if args.out:
        write_results(args.out, args.threads,
                      "medians, float32; PyG = torch_geometric.utils.scatter/softmax on gathered edge tensors", results)


if __name__ == "__main__":
    main()
