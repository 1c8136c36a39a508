"""Fused dot-product graph attention on a GPU at Reddit scale: gnnfuse's fused op against the
unfused pipelines, forward, backward and deterministic, with peak memory (issue 26's targets).

The graph: "reddit-like" (the default) has Reddit's size, 232,965 nodes and about 114.6M edges
(mean in-degree 492), with a heavy-tailed in-degree (log-normal, sigma 1.2, capped at Reddit's
largest, 21,657) and sources drawn in proportion to their degree (hubs send as they receive);
generated on the device by bench/datasets.py's reddit_like (the graph bench_ops_device.py and
bench_spgemm.py name "reddit-like"), int32 indices. Any bench/datasets.py name works too (R-MAT rmat-S-EF,
real graphs). `--nodes` / `--mean-degree` scale the reddit-like graph down (dry runs).

Implementations (q, k, v [N, H, D] in bfloat16 unless --dtype, scale 1/sqrt(D)):
  gnnfuse[fused]     torch.ops.gnnfuse.graph_attention: logits, softmax and the weighted sum per
                     destination in one walk, no edge-sized tensor (the CSC view for backward built
                     once, as the layers do)
  gnnfuse[unfused]   sddmm_heads -> edge_softmax_heads -> spmm_heads: [E, H] tensors
  pyg                PyG's message passing: (q[dst] * k[src]).sum(-1), torch_geometric.utils.softmax,
                     scatter of alpha * v[src]: [E, H, D] tensors (out of memory at Reddit scale is
                     recorded as such)
Rows: forward (no grad), forward + backward (gradients of q, k, v; backward = the difference), the
same under torch.use_deterministic_algorithms(True), peak memory of forward + backward above the
inputs. Checked first: the forward against float64 on 256 sampled destinations, the gradients
against float64 autograd of the unfused formula on a 2,000-node subgraph. Targets (H100, bf16,
D = 128): forward <= 11 ms (Fused3S on GH200 scaled by bandwidth), backward <= 3x forward,
deterministic <= 1.3x the default.

    python bench/bench_attention_device.py --device cuda --out $OUT/attention.json
    python bench/bench_attention_device.py --dry-run --nodes 300 --mean-degree 8 --shapes 1x32   # no GPU
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
from bench_layers import load_graph, open_device, rel_err  # noqa: E402
from bench_ops import git_commit  # noqa: E402
from bench_ops_device import copy_gbs, median_ms  # noqa: E402
# the generator is shared with bench_ops_device.py and bench_spgemm.py (graph name "reddit-like")
from datasets import REDDIT_EDGES, REDDIT_MAX_DEGREE, REDDIT_NODES, reddit_like  # noqa: E402,F401

TARGET_FORWARD_MS = 11.0


def graph(args, device):
    if args.graph == "reddit-like":
        n = args.nodes
        mean = args.mean_degree if args.mean_degree else REDDIT_EDGES / REDDIT_NODES
        rowptr, col = reddit_like(n, mean, min(REDDIT_MAX_DEGREE, n), device)
        return rowptr, col, n
    edge_index, n = load_graph(args.graph, npz=args.graphs_npz)
    edge_index = edge_index.to(device)
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(edge_index, n)
    return rowptr.to(torch.int32), col.to(torch.int32), n


def pyg_attention(q, k, v, src, dst, n, scale):
    from torch_geometric.utils import scatter, softmax

    score = (q.index_select(0, dst) * k.index_select(0, src)).sum(-1) * scale  # [E, H]
    alpha = softmax(score.float(), dst, num_nodes=n).to(v.dtype)
    return scatter(v.index_select(0, src) * alpha.unsqueeze(-1), dst, dim=0, dim_size=n, reduce="sum")


def unfused(ops, rowptr, col, csc, q, k, v, scale):
    s = ops.sddmm_heads(rowptr, col, (q * scale).contiguous(), k, csc[0], csc[1], csc[2])
    a = ops.edge_softmax_heads(rowptr, col, s)
    return ops.spmm_heads(rowptr, col, a, v, csc[0], csc[1], csc[2])


def reference_rows(rowptr, col, q, k, v, rows, scale):
    """float64 attention output of the destinations `rows`."""
    out = torch.zeros(rows.numel(), q.size(1), v.size(2), dtype=torch.float64, device=q.device)
    rp = rowptr.long()
    for t, i in enumerate(rows.tolist()):
        j = col[rp[i]:rp[i + 1]].long()
        if j.numel() == 0:
            continue
        s = (q[i].double().unsqueeze(0) * k[j].double()).sum(-1) * scale  # [deg, H]
        a = torch.softmax(s, 0)
        out[t] = (a.unsqueeze(-1) * v[j].double()).sum(0)
    return out


def check_gradients(ops, rowptr, col, n, heads, dim, dtype, device, tol):
    """Gradients of the fused op on the subgraph of the first 2,000 destinations (sources kept
    below 2,000) against float64 autograd of the formula; the largest relative error."""
    m = min(n, 2000)
    rp, c = rowptr.long(), col.long()
    keep_rows = torch.repeat_interleave(torch.arange(n, device=device), rp.diff())
    mask = (keep_rows < m) & (c < m)
    dst, src = keep_rows[mask], c[mask]
    sub_ptr = torch.zeros(m + 1, dtype=torch.int64, device=device)
    sub_ptr[1:] = torch.cumsum(torch.bincount(dst, minlength=m), 0)
    gen = torch.Generator(device=device).manual_seed(3)
    q, k, v = (torch.randn(m, heads, dim, generator=gen, device=device) for _ in range(3))
    gy = torch.randn(m, heads, dim, generator=gen, device=device)
    scale = 1.0 / math.sqrt(dim)
    ins = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    ops.graph_attention(sub_ptr, src, (ins[0] * scale), ins[1], ins[2]).backward(gy.to(dtype))
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    s = (ref[0].index_select(0, dst) * ref[1].index_select(0, src)).sum(-1) * scale
    mx = torch.full((m, heads), -math.inf, dtype=torch.float64, device=device).scatter_reduce(0, dst[:, None].expand(-1, heads), s, "amax")
    ex = torch.exp(s - mx.index_select(0, dst).detach())
    den = torch.zeros(m, heads, dtype=torch.float64, device=device).index_add_(0, dst, ex)
    a = ex / den.index_select(0, dst)
    out = torch.zeros(m, heads, dim, dtype=torch.float64, device=device).index_add_(0, dst, a.unsqueeze(-1) * ref[2].index_select(0, src))
    out.backward(gy.double())
    return max(rel_err(r.grad, i.grad) for r, i in zip(ref, ins))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="CPU tensors, no GPU (checks the script)")
    ap.add_argument("--graph", default="reddit-like", help="reddit-like, or a bench/datasets.py name")
    ap.add_argument("--graphs-npz", default=None)
    ap.add_argument("--nodes", type=int, default=REDDIT_NODES, help="reddit-like: destinations")
    ap.add_argument("--mean-degree", type=float, default=None, help="reddit-like: mean in-degree (Reddit's by default)")
    ap.add_argument("--shapes", nargs="+", default=["1x128", "8x16"], help="HxD: heads x dimension per head")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--impls", nargs="+", default=["gnnfuse[fused]", "gnnfuse[unfused]", "pyg"])
    ap.add_argument("--min-reps", type=int, default=10)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    gnnfuse, device, cuda = open_device("bench_attention_device", args.device, args.dry_run)
    ops = torch.ops.gnnfuse
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    dev_name = torch.cuda.get_device_name(device) if cuda else "cpu (dry run)"
    dtype = getattr(torch, args.dtype)
    tol = {torch.bfloat16: 2e-2, torch.float16: 4e-3, torch.float32: 1e-4}[dtype]
    bw = copy_gbs(device, sync, 1 << (28 if cuda else 22))
    t0 = time.perf_counter()
    rowptr, col, n = graph(args, device)
    e = int(col.numel())
    sync()
    deg = rowptr.long().diff()
    print(f"# {dev_name}, torch {torch.__version__}, library {gnnfuse.library_path()}; copy bandwidth {bw:.0f} GB/s")
    print(f"# graph {args.graph}: {n} nodes, {e} edges, in-degree mean {e / max(n, 1):.1f} max {int(deg.max())}, "
          f"generated in {time.perf_counter() - t0:.1f} s")
    colptr, row, perm = ops.csr_transpose(rowptr, col, n)
    csc = (colptr, row, perm)
    dst = torch.repeat_interleave(torch.arange(n, device=device, dtype=torch.int32), deg).long()
    src = col.long()
    rows = []
    for shape in args.shapes:
        heads, dim = (int(s) for s in shape.split("x"))
        scale = 1.0 / math.sqrt(dim)
        gen = torch.Generator(device=device).manual_seed(1)
        q, k, v = (torch.randn(n, heads, dim, generator=gen, device=device).to(dtype) for _ in range(3))
        gy = torch.randn(n, heads, dim, generator=gen, device=device).to(dtype)
        sample = torch.randperm(n, generator=gen, device=device)[:256]
        ref = reference_rows(rowptr, col, q, k, v, sample, scale)
        grad_err = check_gradients(ops, rowptr, col, n, heads, dim, dtype, device, tol)
        impls = {
            "gnnfuse[fused]": lambda q, k, v: ops.graph_attention(rowptr, col, q * scale, k, v, *csc),
            "gnnfuse[unfused]": lambda q, k, v: unfused(ops, rowptr, col, csc, q, k, v, scale),
            "pyg": lambda q, k, v: pyg_attention(q, k, v, src, dst, n, scale),
        }
        # minimal traffic of the forward: the CSR once, q, k, v and the output once
        nbytes = (n + 1 + e) * 4 + 4 * n * heads * dim * q.element_size()
        flops = 4 * e * heads * dim
        for impl in args.impls:
            fn = impls[impl]
            r = {"graph": args.graph, "nodes": n, "edges": e, "heads": heads, "dim": dim, "dtype": args.dtype, "impl": impl}
            try:
                with torch.no_grad():
                    out = fn(q, k, v)
                    r["rel_err"] = rel_err(ref, out[sample].float())
                    del out
                if not r["rel_err"] <= tol:
                    raise RuntimeError(f"differs from float64: relative error {r['rel_err']:.2e}")
                if impl == "gnnfuse[fused]":
                    r["grad_rel_err"] = grad_err
                    if not grad_err <= tol:
                        raise RuntimeError(f"gradients differ from float64: relative error {grad_err:.2e}")

                def forward():
                    with torch.no_grad():
                        fn(q, k, v)

                ins = [t.detach().requires_grad_() for t in (q, k, v)]

                def both():
                    for t in ins:
                        t.grad = None
                    fn(*ins).backward(gy)

                r["forward_ms"], r["reps"] = median_ms(forward, sync, args.min_reps, args.min_time)
                if cuda:
                    torch.cuda.reset_peak_memory_stats(device)
                    base = torch.cuda.memory_allocated(device)
                r["forward_backward_ms"], _ = median_ms(both, sync, args.min_reps, args.min_time)
                if cuda:
                    r["peak_mib"] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
                r["backward_ms"] = r["forward_backward_ms"] - r["forward_ms"]
                torch.use_deterministic_algorithms(True)
                try:
                    r["deterministic_forward_backward_ms"], _ = median_ms(both, sync, args.min_reps, args.min_time)
                finally:
                    torch.use_deterministic_algorithms(False)
                r["gflops"] = flops / (r["forward_ms"] * 1e-3) / 1e9
                r["gbs"] = nbytes / (r["forward_ms"] * 1e-3) / 1e9
                r["floor_ms"] = 1e3 * nbytes / (bw * 1e9)
            except torch.OutOfMemoryError as ex:
                r["error"] = "out of memory: " + str(ex).splitlines()[0][:200]
            except Exception as ex:  # noqa: BLE001  (recorded, the run goes on)
                r["error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:300]}"
            if cuda:
                torch.cuda.empty_cache()
            rows.append(r)
            print(f"{shape:>6} {impl:18} " + (
                f"fwd {r['forward_ms']:8.2f} ms  bwd {r['backward_ms']:8.2f} ms  det fwd+bwd {r['deterministic_forward_backward_ms']:8.2f} ms"
                f"  {r['gflops']:7.1f} GFLOP/s {r['gbs']:7.1f} GB/s (floor {r['floor_ms']:.2f} ms)"
                + (f"  peak {r['peak_mib']:.0f} MiB" if "peak_mib" in r else "") if "forward_ms" in r else f"FAIL {r['error']}"),
                flush=True)
    summary = {}
    for r in rows:
        if r["impl"] == "gnnfuse[fused]" and "forward_ms" in r:
            key = f"{r['heads']}x{r['dim']}"
            s = {"forward_ms": r["forward_ms"], "backward_over_forward": r["backward_ms"] / r["forward_ms"],
                 "deterministic_over_default": r["deterministic_forward_backward_ms"] / r["forward_backward_ms"]}
            if r["dim"] * r["heads"] == 128 and args.graph == "reddit-like" and args.nodes == REDDIT_NODES:
                s["targets_met"] = {"forward <= 11 ms": r["forward_ms"] <= TARGET_FORWARD_MS,
                                    "backward <= 3x forward": s["backward_over_forward"] <= 3.0,
                                    "deterministic <= 1.3x": s["deterministic_over_default"] <= 1.3}
            for other in ("gnnfuse[unfused]", "pyg"):
                o = next((x for x in rows if x["impl"] == other and x["heads"] == r["heads"] and x["dim"] == r["dim"] and "forward_ms" in x), None)
                if o:
                    s[f"speedup_vs_{other}"] = {"forward": o["forward_ms"] / r["forward_ms"],
                                                "forward_backward": o["forward_backward_ms"] / r["forward_backward_ms"]}
            summary[key] = s
            print(f"# {key}: " + json.dumps(s))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "device": dev_name, "dry_run": args.dry_run, "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": os.environ.get("GNNFUSE_COMMIT") or git_commit(), "library": gnnfuse.library_path(), "copy_gbs": bw,
            "note": "medians of synchronized runs (ms); forward checked against float64 on 256 sampled rows, gradients on a "
            "2,000-node subgraph; peak_mib: peak allocated during forward + backward above what was allocated before",
            "summary": summary, "results": rows}, indent=1) + "\n")
    # an implementation out of memory is a result (PyG at Reddit scale); any other failure is not
    return 1 if any("error" in r and not r["error"].startswith("out of memory") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
