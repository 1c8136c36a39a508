"""Input-sensitive fusion of the GCN product Y = Â X W, at two levels, forward (no grad) and
forward+backward, for several (F_in, F_out):

- inside the fused op ``gcn``: its two generated lowerings (``variants auto``: variant 0 =
  (A X) W, rows aggregated in blocks of 32 that meet W in a register-tiled product, no N x F_in
  temporary; variant 1 = A (X W), X W through the blocked GEMM into an N x F_out matrix, then
  the aggregation), each forced, and the one the generated cost model picks (``auto``);
- the fused op against the split form (gnnfuse spmm on the narrower side and PyTorch's GEMM),
  and which one ``gnnfuse.ops.gcn_fused_choice`` (what ``gnnfuse.gcn`` and
  ``gnnfuse.nn.GCNConv`` run by default) picks.

Outputs and gradients are compared first; times are medians, float32, on the normalised graph
(gcn_norm run once).

    python bench/bench_gcn_fusion.py --graphs pubmed ca-HepPh rmat-16-16 rmat-18-16 --threads 2 \\
        --out bench/results/cpu_gcn_fusion_<machine>.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import add_common_args, median_time, write_results  # noqa: E402
from bench_ops import cpu_model, import_gnnfuse  # noqa: E402
from datasets import load  # noqa: E402

DIMS = [(16, 128), (32, 256), (64, 64), (128, 128), (128, 512), (256, 256), (500, 16)]
TIE = 1.05  # a choice within 5% of the faster form counts as right


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--dims", nargs="+", default=[f"{a}x{b}" for a, b in DIMS], help="F_in x F_out pairs, e.g. 128x128")
    args = ap.parse_args()
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    from gnnfuse.ops import gcn_aggregates_first, gcn_fused_choice, gcn_norm

    ops = torch.ops.gnnfuse
    torch.set_num_threads(args.threads)
    print(f"# {cpu_model()}, {args.threads} threads, torch {torch.__version__}")
    print(f"{'graph':<14}{'dims':>9} {'mode':<9}{'split ms':>10}{'fused ms':>10}{'fused/split':>12}  auto"
          f"{'v0 ms':>10}{'v1 ms':>10}  picked")
    family = ["gcn", "gcn_grad_x", "gcn_grad_edge_weight"]
    results = []
    for name in args.graphs:
        edge_index, n = load(name, args.root)
        rowptr, col, w = gcn_norm(edge_index, None, n)
        for dims in args.dims:
            f_in, f_out = (int(v) for v in dims.split("x"))
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(n, f_in, generator=gen)
            W = torch.randn(f_in, f_out, generator=gen) / f_in**0.5
            gy = torch.randn(n, f_out, generator=gen)

            def fused(x, W):
                return ops.gcn(rowptr, col, w, x, W)

            def split(x, W):
                return ops.spmm(rowptr, col, w, x) @ W if gcn_aggregates_first(f_in, f_out) else ops.spmm(rowptr, col, w, x @ W)

            res = []
            for fn in (fused, split):
                ins = [x.clone().requires_grad_(), W.clone().requires_grad_()]
                y = fn(*ins)
                res.append([y.detach()] + list(torch.autograd.grad(y, ins, gy)))
            err = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(*res))
            if err > 1e-4:
                raise SystemExit(f"{name}/{dims}: fused gcn differs from spmm + GEMM (max rel err {err:.2e})")
            for mode in ("forward", "fwd+bwd"):
                def make(fn):
                    if mode == "forward":
                        def run():
                            with torch.no_grad():
                                fn(x, W)
                        return run
                    ins = [x.clone().requires_grad_(), W.clone().requires_grad_()]

                    def run():
                        fn(*ins).backward(gy)
                    return run
                # split, fused, split: the better split block is kept (a slow phase of the
                # machine does not favour fusion)
                make(split)()
                make(fused)()
                t_s, _ = median_time(make(split), args.min_reps, args.min_time)
                t_f, _ = median_time(make(fused), args.min_reps, args.min_time)
                t_s = min(t_s, median_time(make(split), args.min_reps, args.min_time)[0])
                # which lowerings the cost model picked for this input (forward; d/dx, d/dedge_weight)
                make(fused)()
                picked = [gnnfuse.ops.last_variant(op) for op in (family[:1] if mode == "forward" else family[:2])]
                t_v = []
                for v in (0, 1):
                    for op in family:
                        ops.force_variant(op, v)
                    try:
                        t_v.append(median_time(make(fused), args.min_reps, args.min_time)[0])
                    finally:
                        for op in family:
                            ops.force_variant(op, -1)
                auto = gcn_fused_choice(None, n, f_in, f_out, needs_grad=mode != "forward")
                t_auto = t_f if auto else t_s
                right = t_auto <= TIE * min(t_f, t_s)
                v_right = t_f <= TIE * min(t_v)
                results.append({"graph": name, "nodes": n, "edges": int(rowptr[-1]), "f_in": f_in, "f_out": f_out,
                                "mode": mode, "split_ms": t_s * 1e3, "fused_ms": t_f * 1e3, "speedup": t_s / t_f,
                                "auto": "fused" if auto else "split", "auto_within_5pct": right, "max_rel_err": err,
                                "fused_v0_ms": t_v[0] * 1e3, "fused_v1_ms": t_v[1] * 1e3, "variants_picked": picked,
                                "variant_within_5pct": v_right})
                print(f"{name:<14}{dims:>9} {mode:<9}{t_s*1e3:>10.2f}{t_f*1e3:>10.2f}{t_s/t_f:>11.2f}x  "
                      f"{'fused' if auto else 'split'}{'' if right else ' (slower)'}"
                      f"{t_v[0]*1e3:>10.2f}{t_v[1]*1e3:>10.2f}  {picked}{'' if v_right else ' (slower)'}")
    if args.out:
        write_results(args.out, args.threads,
                      "medians, float32; speedup = split time / fused time; split = gnnfuse spmm on the narrower side "
                      "+ torch GEMM; auto = gcn_fused_choice; fused = the gcn op with its lowering chosen by the generated "
                      "cost model (variants_picked: gcn[, gcn_grad_x]), fused_v0/v1 = each lowering forced; edges include "
                      "the added self-loops", results)


if __name__ == "__main__":
    main()
