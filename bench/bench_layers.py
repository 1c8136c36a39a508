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

On a GPU (``--device cuda``; libgnnfuse built with GNNFUSE_CUDA, see bench/gpu/torch_gpu.sh):
both layers on the device, outputs, input and parameter gradients compared first (a layer that
differs or fails is recorded with its error and the run goes on), each timed run followed by
torch.cuda.synchronize() (medians; PyG's better block of two around ours), and the peak CUDA
memory of one training step of each (torch.cuda.max_memory_allocated after
reset_peak_memory_stats, minus what was allocated before the step: inputs, parameters, graph).
``--compile`` adds rows "<layer>[compiled]": PyG's layer and ours under torch.compile (static
shapes), checked against PyG eager, timed and measured alike; their JSON rows also carry the
eager times. A summary against issue 25's targets (GATConv forward+backward >= 5x PyG eager,
>= 2x PyG compiled, >= 6x less peak memory) ends the output. ``--graphs-npz`` reads graphs from
bench_gpu.py's npz (CSR by target), for machines without the datasets. ``--dry-run`` runs this
device path on CPU tensors (no synchronize; memory from the resident set), e.g. to check the
script where there is no GPU:

    python bench/bench_layers.py --device cuda --graphs-npz .gpu/graphs.npz --graphs pubmed \\
        ca-HepPh rmat-20-16 --compile --out $OUT/gpu_layers.json
    python bench/bench_layers.py --dry-run --graphs rmat-8-4 --compile --compile-backend aot_eager
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


EDGE_DIM = 8  # edge feature width of the "[edge]" rows


class WithEdgeFeatures(torch.nn.Module):
    """A layer called as ``layer(x, edge_index, edge_attr)`` with ``EDGE_DIM`` random edge
    features (seeded, the same for PyG's layer and ours), made once per graph outside the timed
    call; ``forward(x, edge_index)`` as the other rows. State dict: the layer's, prefixed."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self.edge_attr: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        ea = self.edge_attr
        if ea is None or ea.size(0) != edge_index.size(1) or ea.device != x.device or ea.dtype != x.dtype:
            gen = torch.Generator().manual_seed(1)
            ea = torch.randn(edge_index.size(1), EDGE_DIM, generator=gen).to(device=x.device, dtype=x.dtype)
            self.edge_attr = ea
        return self.layer(x, edge_index, ea)


def layer_pairs(gnn, pyg, f_in: int, f_out: int, heads: int):
    def gat_edge(lib, **kw):
        return lambda: WithEdgeFeatures(lib.GATConv(f_in, f_out // heads, heads=heads, edge_dim=EDGE_DIM, **kw))

    def transformer_edge(lib, **kw):
        return lambda: WithEdgeFeatures(lib.TransformerConv(f_in, f_out // heads, heads=heads, edge_dim=EDGE_DIM, **kw))

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
        # GATConv with edge features: PyG builds lin_edge(edge_attr) [E, heads*C]; ours the
        # [E, heads] logits e M, then the per-edge ops, or the fused gat_edge op ("[edge,fused]")
        "GATConv[edge]": (gat_edge(pyg), gat_edge(gnn)),
        "GATConv[edge,fused]": (gat_edge(pyg), gat_edge(gnn, fused=True)),
        "TransformerConv": (
            lambda: pyg.TransformerConv(f_in, f_out // heads, heads=heads),
            lambda: gnn.TransformerConv(f_in, f_out // heads, heads=heads),
        ),
        "TransformerConv[fused]": (
            lambda: pyg.TransformerConv(f_in, f_out // heads, heads=heads),
            lambda: gnn.TransformerConv(f_in, f_out // heads, heads=heads, fused=True),
        ),
        # TransformerConv with edge features: PyG adds lin_edge(edge_attr) [E, heads*C] to keys
        # and values; ours a bias [E, heads] and an [N, heads, edge_dim] sum (per-edge or fused)
        "TransformerConv[edge]": (transformer_edge(pyg), transformer_edge(gnn)),
        "TransformerConv[edge,fused]": (transformer_edge(pyg), transformer_edge(gnn, fused=True)),
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
        edge_index, n = load_graph(name, args.root, args.graphs_npz)
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


# ---------------------------------------------------------------------------- graphs

def load_graph(name: str, root=None, npz: str | None = None):
    """(edge_index int64 [2, E] source/target, num_nodes): from bench_gpu.py's npz (CSR by target
    rows, sources as columns) when it holds `name`, else bench/datasets.py (real graphs from the
    dataset root, R-MAT generated)."""
    if npz:
        import numpy as np

        z = np.load(npz)
        if name in [str(s) for s in z["names"]]:
            n = int(z[f"{name}__shape"][0])
            rowptr = torch.from_numpy(z[f"{name}__rowptr"].astype(np.int64))
            src = torch.from_numpy(z[f"{name}__col"].astype(np.int64))
            dst = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
            return torch.stack([src, dst]), n
    return load(name, root)


# ---------------------------------------------------------------------------- the device path

def has_cuda_kernels() -> bool:
    """Whether the loaded libgnnfuse registers its ops at the CUDA key (built with GNNFUSE_CUDA)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("gnnfuse::spmm", "CUDA")


def device_peak_mb(clear, run, device, api=None) -> float:
    """Peak CUDA memory of one call of `run` in MiB, over what was allocated before it (inputs,
    parameters, graph): a warm-up call first (caching allocator, cuBLAS workspace, compiled code),
    `clear` (gradients to None) before each, then torch.cuda's peak counter reset and read around
    the measured call. `api` stands for torch.cuda (tests pass a stand-in)."""
    import gc

    api = api or torch.cuda
    clear()
    run()
    api.synchronize(device)
    clear()
    gc.collect()
    api.synchronize(device)
    api.reset_peak_memory_stats(device)
    base = api.memory_allocated(device)
    run()
    api.synchronize(device)
    return (api.max_memory_allocated(device) - base) / 2**20


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |a| (b against the reference a); inf where b has NaN or inf."""
    a, b = a.detach().double(), b.detach().double()
    if not torch.isfinite(b).all():
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))


def outputs_and_grads(m, x, edge_index):
    """The output, the gradient w.r.t. x and the parameters' gradients (by name) of y.sum()."""
    xi = x.detach().clone().requires_grad_()
    # (a compiled module's names start with _orig_mod.)
    params = [(k.removeprefix("_orig_mod."), p) for k, p in m.named_parameters() if p.requires_grad]
    y = m(xi, edge_index)
    grads = torch.autograd.grad(y.sum(), [xi] + [p for _, p in params], allow_unused=True)
    return y.detach(), grads[0], {k: g for (k, _), g in zip(params, grads[1:]) if g is not None}


def compare_layers(ref, got) -> float:
    """The largest rel_err over output, x's gradient and the gradients of the parameters both have
    (by name: PyG's state_dict keys)."""
    errs = [rel_err(ref[0], got[0]), rel_err(ref[1], got[1])]
    errs += [rel_err(g, got[2][k]) for k, g in ref[2].items() if k in got[2]]
    return max(errs)


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


def _trace() -> str:
    """The innermost frames of the exception being handled (kept in the JSON row)."""
    import traceback

    return traceback.format_exc(limit=-6)[-3000:]


def issue25_summary(rows):
    """Per graph, our attention layers' forward+backward against issue 25's targets: >= 5x PyG's
    GATConv eager, >= 2x PyG under torch.compile (ours: the better of eager and compiled), >= 6x
    less peak memory of a training step (PyG eager over ours eager)."""
    out = []
    fb = {(r["graph"], r["layer"]): r for r in rows if r.get("mode") == "fwd+bwd" and r.get("ok", True)
          and "gnnfuse_ms" in r}
    for (graph, layer), r in fb.items():
        if layer not in ("GATConv", "GATConv[fused]"):  # (the targets are for GATConv without edge features)
            continue
        s = {"graph": graph, "layer": layer, "vs_pyg_eager": r["speedup"]}
        comp = fb.get((graph, "GATConv[compiled]"))
        if comp is not None:
            ours = min(r["gnnfuse_ms"], comp["gnnfuse_ms"])
            s["vs_pyg_compiled"] = comp["pyg_ms"] / ours
        if r.get("pyg_peak_mb") and r.get("gnnfuse_peak_mb"):
            s["memory_ratio"] = r["pyg_peak_mb"] / max(r["gnnfuse_peak_mb"], 1e-9)
        s["met"] = (s["vs_pyg_eager"] >= 5.0 and s.get("vs_pyg_compiled", 0.0) >= 2.0
                    and s.get("memory_ratio", 0.0) >= 6.0)
        out.append(s)
    return out


def open_device(tool: str, device_name: str, dry_run: bool):
    """(gnnfuse, device, is_cuda) of a device benchmark: the package imported, CPU tensors for a
    dry run, an error naming `tool` where torch sees no GPU."""
    gnnfuse, err = import_gnnfuse()
    if gnnfuse is None:
        raise SystemExit(f"cannot import gnnfuse: {err}")
    device = torch.device("cpu" if dry_run else device_name)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit(f"{tool}: --device {device_name} but torch sees no GPU (use --dry-run to check the script)")
    return gnnfuse, device, cuda


def bench_device(args):
    """The layers on a device (or on CPU tensors with --dry-run): see the module's docstring."""
    gnnfuse, device, cuda = open_device("bench_layers", args.device, args.dry_run)
    import torch_geometric
    import torch_geometric.nn as pyg

    kernels = has_cuda_kernels()
    print(f"# library {gnnfuse.library_path()}: CUDA kernels {'registered' if kernels else 'NOT registered'}")
    if cuda and not kernels:
        raise SystemExit("bench_layers: libgnnfuse has no CUDA kernels (build with -DGNNFUSE_CUDA=ON; "
                         "GNNFUSE_LIBRARY points at the build)")
    torch.set_num_threads(args.threads)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)

    def synced(fn):
        def run():
            fn()
            sync()
        return run

    if cuda:
        dev_name = torch.cuda.get_device_name(device)
        cap = torch.cuda.get_device_capability(device)
        print(f"# {dev_name} (sm_{cap[0]}{cap[1]}), torch {torch.__version__} (CUDA {torch.version.cuda}), "
              f"torch_geometric {torch_geometric.__version__}, tf32 matmul {torch.backends.cuda.matmul.allow_tf32}")
    else:
        dev_name = "cpu (dry run)" if args.dry_run else cpu_model()
        print(f"# {dev_name}, {args.threads} threads, torch {torch.__version__}, torch_geometric {torch_geometric.__version__}")
    if args.compile:
        import torch._dynamo as dynamo  # (binds dynamo only: torch stays the module's)

        dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, 64)
    start = time.perf_counter()
    results, skipped = [], []
    meta = {
        "device": dev_name, "dry_run": args.dry_run, "torch": torch.__version__, "cuda": torch.version.cuda,
        "torch_geometric": torch_geometric.__version__,
        "commit": os.environ.get("GNNFUSE_COMMIT") or git_commit(), "library": gnnfuse.library_path(),
        "cuda_kernels": kernels, "threads": args.threads, "f_in": args.f_in, "f_out": args.f_out, "heads": args.heads,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32), "compile_backend": args.compile_backend if args.compile else None,
        "env": {k: v for k, v in os.environ.items() if k.startswith("GNNFUSE_CUDA")},
        "note": "medians of synchronized runs (ms); PyG time is the better of two blocks around gnnfuse's; float32; "
                "peak_mb: peak CUDA memory of one training step over what was allocated before it (dry run: resident set); "
                "[compiled] rows: both layers under torch.compile (dynamic=False), *_eager_ms the eager times",
    }

    def write():
        if not args.out:
            return
        meta["elapsed_s"] = time.perf_counter() - start
        if cuda and hasattr(torch.ops.gnnfuse, "_cuda_launch_counts"):
            meta["launch_counts"] = torch.ops.gnnfuse._cuda_launch_counts()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**meta, "skipped": skipped, "results": results,
                                              "issue25": issue25_summary(results)}, indent=1) + "\n")

    def left() -> float:
        return args.budget_s - (time.perf_counter() - start)

    def peak(m, xi, edge_index, fn=None):
        fn = m if fn is None else fn

        def clear():
            xi.grad = None
            m.zero_grad(set_to_none=True)

        def run():
            fn(xi, edge_index).sum().backward()

        if cuda:
            return device_peak_mb(clear, run, device)
        return peak_extra_mb(lambda: (clear(), run()))

    def modes_for(fn_pyg, fn_ours, m_pyg, m_ours, x, edge_index, modes):
        """{mode: (pyg s, ours s, reps)}: forward (eval, no grad) and forward+backward (train)."""
        out = {}
        for mode in modes:
            for m in (m_pyg, m_ours):
                m.train(mode != "forward")
            if mode == "forward":
                def make(f):
                    def run():
                        with torch.no_grad():
                            f(x, edge_index)
                    return run
            else:
                def make(f):
                    xi = x.clone().requires_grad_()

                    def run():
                        f(xi, edge_index).sum().backward()
                    return run
            runs = (synced(make(fn_pyg)), synced(make(fn_ours)))
            for r in runs:  # warm-up (compilation, allocator, handles)
                r()
                r()
            out[mode] = time_side_by_side(runs[0], runs[1], args.min_reps, args.min_time)
        return out

    def record(base, label, timed, err, modules, fns, x, edge_index, extra=lambda mode: {}, note=""):
        """A row per timed mode (the training step's peak memory with fwd+bwd), printed."""
        for mode, (t_pyg, t_our, r_our) in timed.items():
            row = {**base, "mode": mode, "ok": True, "pyg_ms": t_pyg * 1e3, "gnnfuse_ms": t_our * 1e3,
                   "speedup": t_pyg / t_our, "reps": r_our, "max_rel_err": err, **extra(mode)}
            mem = ""
            if mode == "fwd+bwd":
                for m in modules:
                    m.train()
                xi = x.clone().requires_grad_()
                row["pyg_peak_mb"] = peak(modules[0], xi, edge_index, fns[0])
                row["gnnfuse_peak_mb"] = peak(modules[1], xi, edge_index, fns[1])
                mem = f"{row['pyg_peak_mb']:>10.1f}{row['gnnfuse_peak_mb']:>10.1f}"
            results.append(row)
            print(f"{base['graph']:<18}{label:<23}{mode:<10}{t_pyg*1e3:>10.3f}{t_our*1e3:>12.3f}{t_pyg/t_our:>8.2f}x"
                  f"{err:>13.1e}{mem}{note}", flush=True)

    print(f"{'graph':<18}{'layer':<23}{'mode':<10}{'pyg ms':>10}{'gnnfuse ms':>12}{'speedup':>9}{'max rel err':>13}"
          f"{'pyg MiB':>10}{'ours MiB':>10}")
    modes = ("forward", "fwd+bwd")
    compile_modes = tuple(m for m in modes if m in args.compile_modes)
    for name in args.graphs:
        if left() < args.reserve_s:
            skipped.append({"graph": name, "why": "budget"})
            print(f"{name:<18}skipped: out of budget ({args.budget_s:.0f} s)")
            continue
        t0 = time.perf_counter()
        try:
            edge_index, n = load_graph(name, args.root, args.graphs_npz)
        except Exception as e:  # noqa: BLE001 (a graph this machine lacks: recorded, the run goes on)
            skipped.append({"graph": name, "why": _short(e)})
            print(f"{name:<18}skipped: {_short(e)}", flush=True)
            continue
        edge_index = edge_index.to(device)
        x = torch.randn(n, args.f_in, generator=torch.Generator().manual_seed(0)).to(device)
        print(f"# {name}: {n} nodes, {edge_index.size(1)} edges ({time.perf_counter() - t0:.1f} s to load)", flush=True)
        if args.compile:
            dynamo.reset()
        compiled_done = set()
        pairs = layer_pairs(gnnfuse.nn, pyg, args.f_in, args.f_out, args.heads)
        for layer in args.layers:  # (in the order given)
            make_pyg, make_ours = pairs[layer]
            if left() < args.reserve_s:
                skipped.append({"graph": name, "layer": layer, "why": "budget"})
                print(f"{name:<18}{layer:<23}skipped: out of budget")
                continue
            base = {"graph": name, "nodes": n, "edges": int(edge_index.size(1)), "layer": layer, "f_in": args.f_in,
                    "f_out": args.f_out, "heads": 1 if layer == "GCNConv" else args.heads, "device": dev_name}
            theirs = ours = None
            try:
                torch.manual_seed(0)
                theirs, ours = make_pyg(), make_ours()
                ours.load_state_dict(theirs.state_dict(), strict=True)
                theirs.to(device)
                ours.to(device)
                for m in (theirs, ours):
                    m.train()
                ref = outputs_and_grads(theirs, x, edge_index)
                err = compare_layers(ref, outputs_and_grads(ours, x, edge_index))
                if not err <= args.tol:
                    results.append({**base, "mode": "check", "ok": False, "max_rel_err": err,
                                    "error": f"gnnfuse differs from PyG (max rel err {err:.2e} > {args.tol:g})"})
                    print(f"{name:<18}{layer:<23}FAIL: gnnfuse differs from PyG (max rel err {err:.2e})", flush=True)
                    write()
                    continue
                timed = modes_for(theirs, ours, theirs, ours, x, edge_index, modes)
                record(base, layer, timed, err, (theirs, ours), (theirs, ours), x, edge_index)
                write()
                # Compiled: ours with fused=None takes the fused op under torch.compile, so
                # GATConv and GATConv[fused] compile to the same program: once per base layer.
                base_layer = layer.split("[")[0]
                if (not args.compile or not compile_modes or base_layer in compiled_done
                        or (args.compile_graphs and name not in args.compile_graphs)):
                    continue
                compiled_done.add(base_layer)
                clayer = f"{base_layer}[compiled]"
                if left() < args.reserve_s:
                    skipped.append({"graph": name, "layer": clayer, "why": "budget"})
                    continue
                try:
                    c0 = time.perf_counter()
                    c_theirs = torch.compile(theirs, backend=args.compile_backend, dynamic=False)
                    c_ours = torch.compile(ours, backend=args.compile_backend, dynamic=False)
                    for m in (theirs, ours):
                        m.train()
                    cerr = max(compare_layers(ref, outputs_and_grads(c_theirs, x, edge_index)),
                               compare_layers(ref, outputs_and_grads(c_ours, x, edge_index)))
                    compile_s = time.perf_counter() - c0
                    if not cerr <= args.tol:
                        results.append({**base, "layer": clayer, "mode": "check", "ok": False, "max_rel_err": cerr,
                                        "error": f"compiled differs from PyG eager (max rel err {cerr:.2e})"})
                        print(f"{name:<18}{clayer:<23}FAIL: compiled differs from PyG eager ({cerr:.2e})", flush=True)
                        write()
                        continue
                    ctimed = modes_for(c_theirs, c_ours, theirs, ours, x, edge_index, compile_modes)
                    eager = {r["mode"]: r for r in results if r["graph"] == name and r["layer"] == layer}
                    record({**base, "layer": clayer}, clayer, ctimed, cerr, (theirs, ours), (c_theirs, c_ours), x, edge_index,
                           extra=lambda mode: {"compiled": True, "compile_s": compile_s, "pyg_eager_ms": eager[mode]["pyg_ms"],
                                               "gnnfuse_eager_ms": eager[mode]["gnnfuse_ms"]},
                           note=f"  (compiled in {compile_s:.0f} s)")
                except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
                    results.append({**base, "layer": clayer, "mode": "compile", "ok": False, "error": _short(e),
                                    "trace": _trace()})
                    print(f"{name:<18}{clayer:<23}FAIL: {_short(e)}", flush=True)
                write()
            except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
                results.append({**base, "mode": "run", "ok": False, "error": _short(e), "trace": _trace()})
                print(f"{name:<18}{layer:<23}FAIL: {_short(e)}", flush=True)
                write()
            finally:
                del theirs, ours
                if cuda:
                    torch.cuda.empty_cache()
        del x, edge_index
    summary = issue25_summary(results)
    if summary:
        print("# issue 25 targets, GATConv forward+backward: >= 5x PyG eager, >= 2x PyG compiled "
              "(ours: better of eager and compiled), >= 6x less peak memory")
        for s in summary:
            vc = f"{s['vs_pyg_compiled']:.2f}x" if "vs_pyg_compiled" in s else "-"
            mr = f"{s['memory_ratio']:.1f}x" if "memory_ratio" in s else "-"
            print(f"  {s['graph']:<18}{s['layer']:<16} vs eager {s['vs_pyg_eager']:.2f}x, vs compiled {vc}, "
                  f"memory {mr}: {'met' if s['met'] else 'not met'}")
    failed = [r for r in results if not r.get("ok", True)]
    print(f"# {len(results)} rows, {len(failed)} failed, {len(skipped)} skipped, {time.perf_counter() - start:.0f} s")
    write()
    if args.out:
        print(f"wrote {args.out}")
    return 1 if failed else 0


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
    ap.add_argument("--graphs-npz", default=None, help="graphs from bench_gpu.py --export-npz's file (others: datasets.py)")
    dev = ap.add_argument_group("device path (--device cuda, --dry-run, --compile)")
    dev.add_argument("--device", default="cpu", help="cpu (default: the CPU benchmark above) or cuda[:N]")
    dev.add_argument("--dry-run", action="store_true", help="the device path on CPU tensors (no GPU needed; numbers meaningless)")
    dev.add_argument("--compile", action="store_true", help="also both layers under torch.compile, rows <layer>[compiled]")
    dev.add_argument("--compile-backend", default="inductor", help="torch.compile backend (dry runs: aot_eager is quick)")
    dev.add_argument("--compile-modes", nargs="+", default=["fwd+bwd"], choices=["forward", "fwd+bwd"],
                     help="modes timed compiled (default fwd+bwd: one compilation per layer and graph)")
    dev.add_argument("--compile-graphs", nargs="+", default=None,
                     help="the graphs with [compiled] rows (default: every graph; each compiles anew)")
    dev.add_argument("--tol", type=float, default=1e-3, help="max rel err against PyG eager, else the layer is a failed row")
    dev.add_argument("--budget-s", type=float, default=float("inf"), help="start no graph or layer when less than --reserve-s is left")
    dev.add_argument("--reserve-s", type=float, default=0.0)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args)
    elif args.device == "cpu" and not args.dry_run and not args.compile:
        bench(args)
    else:
        # the device path's default layers: GCNConv and GATConv (default and fused)
        args.layers = args.layers or ["GCNConv", "GATConv", "GATConv[fused]"]
        known = layer_pairs(None, None, 1, 1, 1)
        if any(layer not in known for layer in args.layers):
            ap.error(f"--layers: choose from {' '.join(known)}")
        return bench_device(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
