"""gnnfuse.nn layers against torch_geometric's layers of the same names, side by side on CPU.

For each graph and layer: both layers get the same parameters (PyG's state_dict loaded into
ours, strict), outputs and input gradients are compared first (float32, relative error), then
forward (eval, no grad) and forward+backward (train, dropout 0) are timed, interleaved, as
medians over repeated runs. "[fused]" rows run our attention layers with fused=True (the fused
gat / graph_attention ops, no per-edge tensor); the plain rows take the default (per-edge
[E, H] ops at these sizes). With --memory, the peak extra resident memory of one training step
is measured for each layer in a fresh process. Writes JSON (and prints a table).

    python bench/bench_layers.py --graphs cora pubmed ca-HepPh rmat-16-16 --threads 2 \\
        --out bench/results/cpu_layers_<machine>.json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ops import cpu_model, git_commit, import_gnnfuse, machine_tag  # noqa: E402
from datasets import load  # noqa: E402


def median_time(fn, min_reps: int, min_time: float):
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 200:
            break
    return statistics.median(times), len(times)


def time_side_by_side(pyg_run, our_run, min_reps: int, min_time: float):
    """Median seconds of PyG and of gnnfuse, timed PyG, gnnfuse, PyG (PyG's better block kept,
    so a slow phase of the shared machine does not favour gnnfuse); and gnnfuse's rep count."""
    t_pyg, _ = median_time(pyg_run, min_reps, min_time)
    t_our, reps = median_time(our_run, min_reps, min_time)
    t_pyg2, _ = median_time(pyg_run, min_reps, min_time)
    return min(t_pyg, t_pyg2), t_our, reps


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--graphs", nargs="+", default=["cora", "pubmed"])
    ap.add_argument("--root", default=None, help="dataset root (default ../shared/datasets)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--out", default=None)


def write_results(path, threads: int, note: str, results) -> None:
    import torch_geometric

    Path(path).write_text(json.dumps({
        "machine": machine_tag(), "cpu": cpu_model(), "threads": threads, "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__, "commit": git_commit(), "note": note,
        "results": results}, indent=1) + "\n")
    print(f"wrote {path}")


def layer_pairs(gnn, pyg, f_in: int, f_out: int, heads: int):
    return {
        "GCNConv": (lambda: pyg.GCNConv(f_in, f_out), lambda: gnn.GCNConv(f_in, f_out)),
        "GATConv": (
            lambda: pyg.GATConv(f_in, f_out // heads, heads=heads),
            lambda: gnn.GATConv(f_in, f_out // heads, heads=heads),
        ),
        "GATConv[fused]": (
            lambda: pyg.GATConv(f_in, f_out // heads, heads=heads),
            lambda: gnn.GATConv(f_in, f_out // heads, heads=heads, fused=True),
        ),
        "TransformerConv": (
            lambda: pyg.TransformerConv(f_in, f_out // heads, heads=heads),
            lambda: gnn.TransformerConv(f_in, f_out // heads, heads=heads),
        ),
        "TransformerConv[fused]": (
            lambda: pyg.TransformerConv(f_in, f_out // heads, heads=heads),
            lambda: gnn.TransformerConv(f_in, f_out // heads, heads=heads, fused=True),
        ),
    }


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_extra_mb(run) -> float:
    """Peak resident memory a call adds, in MiB: the high-water mark is reset (Linux
    /proc/self/clear_refs) after a warm-up call, then read after a second call."""
    import gc

    run()
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    base = _status_kb("VmRSS")
    run()
    return (_status_kb("VmHWM") - base) / 1024.0


def memory_child(args) -> None:
    """In a fresh process: the peak extra memory of one training step (forward+backward) of one
    layer, printed as JSON."""
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    import torch_geometric.nn as pyg

    torch.set_num_threads(args.threads)
    edge_index, n = load(args.graph_name, args.root)
    x = torch.randn(n, args.f_in, generator=torch.Generator().manual_seed(0))
    make_pyg, make_ours = layer_pairs(gnnfuse.nn, pyg, args.f_in, args.f_out, args.heads)[args.layer_name]
    m = (make_pyg if args.impl == "pyg" else make_ours)()
    m.train()
    xi = x.clone().requires_grad_()

    def step():
        xi.grad = None
        m.zero_grad(set_to_none=True)
        m(xi, edge_index).sum().backward()

    print(json.dumps({"peak_mb": peak_extra_mb(step)}))


def child_peak_mb(cmd, root=None) -> float:
    """Runs a benchmark's --memory-child command in a fresh process; its peak_mb."""
    import subprocess

    if root:
        cmd = cmd + ["--root", root]
    # A fixed mmap threshold: blocks over 64 KiB are mapped and unmapped on free, so memory freed
    # by the warm-up step leaves the resident set and the measured step's peak is its own.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mb"]


def measure_memory(args, name: str, layer: str, impl: str) -> float:
    cmd = [sys.executable, __file__, "--memory-child", "--graph-name", name, "--layer-name", layer, "--impl", impl,
           "--threads", str(args.threads), "--f-in", str(args.f_in), "--f-out", str(args.f_out), "--heads", str(args.heads)]
    return child_peak_mb(cmd, args.root)


def bench(args):
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    import torch_geometric
    import torch_geometric.nn as pyg

    torch.set_num_threads(args.threads)
    results = []
    print(f"# {cpu_model()}, {args.threads} threads, torch {torch.__version__}, torch_geometric {torch_geometric.__version__}")
    print(f"{'graph':<18}{'layer':<23}{'mode':<10}{'pyg ms':>10}{'gnnfuse ms':>12}{'speedup':>9}{'max rel err':>13}"
          + (f"{'pyg MiB':>10}{'ours MiB':>10}" if args.memory else ""))
    for name in args.graphs:
        edge_index, n = load(name, args.root)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(n, args.f_in, generator=gen)
        for layer, (make_pyg, make_ours) in layer_pairs(gnnfuse.nn, pyg, args.f_in, args.f_out, args.heads).items():
            if args.layers and layer not in args.layers:
                continue
            torch.manual_seed(0)
            theirs, ours = make_pyg(), make_ours()
            ours.load_state_dict(theirs.state_dict(), strict=True)
            # correctness first: outputs and gradients w.r.t. x
            errs = []
            outs = []
            for m in (theirs, ours):
                xi = x.clone().requires_grad_()
                y = m(xi, edge_index)
                (g,) = torch.autograd.grad(y.sum(), xi)
                outs.append((y.detach(), g))
            for a, b in zip(outs[0], outs[1]):
                errs.append(float((a - b).abs().max() / a.abs().max().clamp_min(1e-30)))
            err = max(errs)
            if err > 1e-3:
                raise SystemExit(f"{name}/{layer}: gnnfuse differs from PyG (max rel err {err:.2e})")

            def fwd(m):
                def run():
                    with torch.no_grad():
                        m(x, edge_index)
                return run

            def fwd_bwd(m):
                xi = x.clone().requires_grad_()

                def run():
                    m(xi, edge_index).sum().backward()
                return run

            for mode, make in (("forward", fwd), ("fwd+bwd", fwd_bwd)):
                for m in (theirs, ours):
                    m.train(mode != "forward")
                    make(m)()  # warm-up
                t_pyg, t_our, r_our = time_side_by_side(make(theirs), make(ours), args.min_reps, args.min_time)
                row = {
                    "graph": name, "nodes": n, "edges": int(edge_index.size(1)), "layer": layer, "mode": mode,
                    "f_in": args.f_in, "f_out": args.f_out, "heads": 1 if layer == "GCNConv" else args.heads,
                    "pyg_ms": t_pyg * 1e3, "gnnfuse_ms": t_our * 1e3, "speedup": t_pyg / t_our,
                    "reps": r_our, "max_rel_err": err,
                }
                mem = ""
                if args.memory and mode == "fwd+bwd":
                    row["pyg_peak_mb"] = measure_memory(args, name, layer, "pyg")
                    row["gnnfuse_peak_mb"] = measure_memory(args, name, layer, "gnnfuse")
                    mem = f"{row['pyg_peak_mb']:>10.1f}{row['gnnfuse_peak_mb']:>10.1f}"
                results.append(row)
                print(f"{name:<18}{layer:<23}{mode:<10}{t_pyg*1e3:>10.2f}{t_our*1e3:>12.2f}{t_pyg/t_our:>8.2f}x{err:>13.1e}{mem}")
    if args.out:
        write_results(args.out, args.threads, "medians; PyG time is the better of two blocks around gnnfuse's; float32; "
                      "peak_mb: peak extra resident memory of one training step, each in a fresh process", results)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--f-in", type=int, default=64)
    ap.add_argument("--f-out", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", nargs="+", default=None, help="subset of GCNConv GATConv TransformerConv")
    ap.add_argument("--memory", action="store_true", help="also peak extra memory of a training step, each in a fresh process")
    ap.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--graph-name", help=argparse.SUPPRESS)
    ap.add_argument("--layer-name", help=argparse.SUPPRESS)
    ap.add_argument("--impl", choices=["pyg", "gnnfuse"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
