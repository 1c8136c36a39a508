"""The benchmark report: regenerates every plot and bench/results/SUMMARY.md from the JSON
results in bench/results (CPU and GPU), one table per op or layer with the peers side by side.

    python bench/report.py            # plots need matplotlib; without it only SUMMARY.md

Result files and what the tables show:
  cpu_layers_*.json, cpu_reductions_*.json   gnnfuse vs PyG per graph, forward and fwd+bwd:
                                             medians (ms), speedup, peak memory of a training
                                             step (fresh process) where measured
  cpu_ops_*.json, gpu_*.json                 every implementation per (graph, F, op): median
                                             ms, GFLOP/s, GB/s, % of the bandwidth floor, and
                                             its time relative to gnnfuse's
  autograd_memory_*.json                     peak memory of backward passes
  cpu_gcn_fusion_*.json                      fused GCN product vs spmm + GEMM, the automatic choice
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _header(data: dict) -> str:
    keys = ("machine", "cpu", "device", "threads", "torch", "torch_geometric", "commit")
    parts = [f"{k}: {data[k]}" for k in keys if k in data]
    meta = data.get("meta")
    if isinstance(meta, dict):
        parts += [f"{k}: {v}" for k, v in meta.items() if isinstance(v, (str, int, float))]
    return "; ".join(parts)


def side_by_side(path: Path, data: dict) -> list[str]:
    rows = data["results"]
    key = "layer" if "layer" in rows[0] else "op"
    out = [f"## {path.stem}", "", f"_{_header(data)}_", ""]
    if data.get("note"):
        out += [data["note"], ""]
    for name in dict.fromkeys(r[key] for r in rows):
        sub = [r for r in rows if r[key] == name]
        mem = any("pyg_peak_mb" in r for r in sub)
        out += [f"### {name}", ""]
        head = "| graph | nodes | edges | mode | PyG ms | gnnfuse ms | speedup |"
        sep = "|---|---:|---:|---|---:|---:|---:|"
        if mem:
            head += " PyG peak MiB | gnnfuse peak MiB | memory ratio |"
            sep += "---:|---:|---:|"
        out += [head, sep]
        for r in sub:
            line = (f"| {r['graph']} | {r.get('nodes', '')} | {r.get('edges', '')} | {r['mode']} | "
                    f"{r['pyg_ms']:.3f} | {r['gnnfuse_ms']:.3f} | {r['speedup']:.2f}x |")
            if mem:
                if "pyg_peak_mb" in r:
                    ratio = r["pyg_peak_mb"] / max(r["gnnfuse_peak_mb"], 1e-9)
                    line += f" {r['pyg_peak_mb']:.0f} | {r['gnnfuse_peak_mb']:.0f} | {ratio:.1f}x |"
                else:
                    line += " | | |"
            out.append(line)
        for mode in dict.fromkeys(r["mode"] for r in sub):
            g = _geomean([r["speedup"] for r in sub if r["mode"] == mode])
            out.append(f"\n{mode}: geomean speedup {g:.2f}x over {sum(r['mode'] == mode for r in sub)} graphs")
        out.append("")
    return out


def implementations(path: Path, data: dict) -> list[str]:
    rows = data["results"]
    out = [f"## {path.stem}", "", f"_{_header(data)}_", ""]
    for op in dict.fromkeys(r["op"] for r in rows):
        sub = [r for r in rows if r["op"] == op]
        out += [f"### {op}", "", "| graph | N | E | F | implementation | ms | GFLOP/s | GB/s | % floor | time / gnnfuse |",
                "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        ratios = {}
        for r in sub:
            rel = r.get("gnnfuse_speedup")
            if rel is not None and r["impl"] != "gnnfuse":
                ratios.setdefault(r["impl"], []).append(rel)
            out.append(f"| {r['graph']} | {r.get('N', '')} | {r.get('E', '')} | {r.get('F', '')} | {r['impl']} | "
                       f"{r['ms']:.3f} | {r.get('gflops', float('nan')):.2f} | {r.get('gbps', float('nan')):.2f} | "
                       f"{r.get('pct_floor', float('nan')):.1f} | {'' if rel is None else f'{rel:.2f}'} |")
        for impl, rs in ratios.items():
            out.append(f"\ngnnfuse vs {impl}: geomean speedup {_geomean(rs):.2f}x over {len(rs)} (graph, F) points")
        out.append("")
    return out


def gpu_ops(path: Path, data: dict) -> list[str]:
    """bench/gpu/bench_gpu.py's results: per op, graph and F the automatic choice of gnnfuse's
    generated kernels against cached cuSPARSE (best algorithm), torch.sparse and PyG-style peers."""
    rows = [r for r in data["rows"] if r.get("ok", True) and r.get("ms")]
    keys = ("device", "torch", "cuda", "commit", "cusparse_version")
    out = [f"## {path.stem}", "", "_" + "; ".join(f"{k}: {data[k]}" for k in keys if k in data)
           + f"; copy bandwidth {data.get('copy_gbs', float('nan')):.0f} GB/s (read + written)_", ""]
    ours = {"spmm": "ours", "sddmm": "ours", "sddmm_spmm": "ours_fused"}
    peers = {"spmm": ["cusparse_best", "torch.sparse.mm", "pyg_gather_scatter"],
             "sddmm": ["cusparse", "torch.sampled_addmm", "pyg_gather"],
             "sddmm_spmm": ["cusparse_unfused", "torch_unfused", "ours_unfused"]}
    for op, mine in ours.items():
        sub = [r for r in rows if r["op"] == op]
        if not sub:
            continue
        at = {(r["graph"], r["F"], r["impl"]): r for r in sub}
        cases = list(dict.fromkeys((r["graph"], r["F"]) for r in sub))
        out += [f"### {op} (GPU)", "",
                "| graph | nnz | F | gnnfuse ms (variant) | GB/s | " + " | ".join(f"{p} ms" for p in peers[op])
                + f" | speedup vs {peers[op][0]} |",
                "|---|---:|---:|---|---:|" + "---:|" * len(peers[op]) + "---:|"]
        ratios = []
        for g, f in cases:
            m = at.get((g, f, mine))
            if m is None:
                continue
            cells = []
            for p in peers[op]:
                r = at.get((g, f, p))
                cells.append(f"{r['ms']:.3f}" if r else "")
            base = at.get((g, f, peers[op][0]))
            sp = base["ms"] / m["ms"] if base else None
            if sp:
                ratios.append(sp)
            out.append(f"| {g} | {m['nnz']} | {f} | {m['ms']:.3f} ({m.get('variant', '')}) | {m.get('gbs', float('nan')):.0f} | "
                       + " | ".join(cells) + f" | {'' if sp is None else f'{sp:.2f}x'} |")
        if ratios:
            out.append(f"\ngnnfuse vs {peers[op][0]}: geomean speedup {_geomean(ratios):.2f}x, "
                       f"min {min(ratios):.2f}x over {len(ratios)} (graph, F) points")
        out.append("")
    return out


def gpu_variants(path: Path, data: dict) -> list[str]:
    """bench/gpu/fast_time.cu's results: every schedule variant of the generated kernels, forced,
    against the launch decision's choice (no peers in that run)."""
    rows = data["rows"]
    out = [f"## {path.stem}", "", f"_device: {data.get('device')}; code: {data.get('code')}_", "", data.get("note", ""), "",
           "| graph | op | F | decision (variant) ms | best other variant ms | fastest old form (row/pos split, lanes) ms | speedup over the old forms |",
           "|---|---|---:|---|---|---|---:|"]
    new_forms = ("reg_lanes", "pos_lanes", "pos_lanes_atomic")
    for r in rows:
        if r["impl"] != "ours":
            continue
        sub = [x for x in rows if x["graph"] == r["graph"] and x["op"] == r["op"] and x["F"] == r["F"] and x["impl"] != "ours"]
        best = min(sub, key=lambda x: x["ms"]) if sub else None
        old = [x for x in sub if x["variant"] not in new_forms]
        o = min(old, key=lambda x: x["ms"]) if old else None
        cell = lambda x: "" if x is None else f"{x['ms']:.3f} ({x['impl']})"  # noqa: E731
        speedup = "" if o is None else f"{o['ms'] / r['ms']:.2f}x"
        out.append(f"| {r['graph']} | {r['op']} | {r['F']} | {r['ms']:.3f} ({r['variant']}) | {cell(best)} | {cell(o)} | {speedup} |")
    out.append("")
    return out


def memory(path: Path, data: dict) -> list[str]:
    out = [f"## {path.stem}", "", f"_{data.get('what', '')}_", "",
           "| graph | nodes | edges | F | implementation | peak MiB | median ms |", "|---|---:|---:|---:|---|---:|---:|"]
    for g in data.get("graphs", []):
        for impl, r in g.get("results", {}).items():
            if isinstance(r, dict) and "peak_mib" in r:
                out.append(f"| {g.get('graph')} | {g.get('num_nodes', '')} | {g.get('num_edges', '')} | {g.get('F', '')} | "
                           f"{impl} | {r['peak_mib']:.1f} | {1e3 * r.get('median_s', float('nan')):.2f} |")
            elif isinstance(r, dict):
                out.append(f"| {g.get('graph')} | | | {g.get('F', '')} | {impl} | {r.get('error', 'not run')} | |")
    out.append("")
    return out


def coarsening(path: Path, data: dict) -> list[str]:
    """cpu_spgemm_*.json: Pᵀ·A·P and A·P per graph and thread count."""
    rows = data["rows"]
    out = [f"## {path.name}: coarsening Pᵀ·A·P and SpGEMM A·P", "", _header(data), "",
           "gnnfuse_cold: the first call, pattern and values assembled in one pass (gnnfuse_2pass: symbolic then numeric",
           "pass, the first call when a gradient is wanted; files from before the one-pass assembly have only this, under",
           "the name gnnfuse_cold); gnnfuse_warm: numeric pass on the cached pattern (every call after the first on the same graph). Speedups over torch.sparse at the same thread count and over scipy (1 thread);",
           "MiB: peak extra resident memory of one call, result included, in a fresh process.", "",
           "| graph | nodes | edges | coarse edges | threads | method | ms | vs torch.sparse | vs scipy | GB/s | MiB |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f: (f % v) if v is not None else ""  # noqa: E731
    for r in rows:
        # (a method that failed, bench_spgemm.py's outcome other than ok, has no time)
        ms = f"{r['ms']:.2f}" if r.get("ms") is not None else r.get("outcome", "")
        out.append(f"| {r['graph']} | {r['nodes']} | {r['edges']} | {r['coarse_edges']} | {r['threads']} | {r['method']} | {ms} | "
                   f"{fmt(r.get('speedup_vs_torch'), '%.2f')} | {fmt(r.get('speedup_vs_scipy'), '%.2f')} | {fmt(r.get('gbps'), '%.2f')} | "
                   f"{fmt(r.get('peak_mb'), '%.1f')} |")
    for meth in [m for m in ("gnnfuse_cold", "gnnfuse_2pass", "gnnfuse_warm") if any(r["method"] == m for r in rows)]:
        for t in sorted({r["threads"] for r in rows}):
            sel = [r for r in rows if r["method"] == meth and r["threads"] == t]
            gt = _geomean([r["speedup_vs_torch"] for r in sel if r.get("speedup_vs_torch")])
            gs = _geomean([r["speedup_vs_scipy"] for r in sel if r.get("speedup_vs_scipy")])
            out.append(f"\n{meth}, {t} thread(s): geomean {gt:.2f}x torch.sparse, {gs:.2f}x scipy")
    out.append("")
    return out


def gcn_fusion(path: Path, data: dict) -> list[str]:
    """cpu_gcn_fusion_*.json: fused gcn op vs spmm + GEMM, and the input-sensitive choice."""
    rows = data["results"]
    out = [f"## {path.stem}", "", f"_{_header(data)}_", ""]
    if data.get("note"):
        out += [data["note"], ""]
    lowered = all("fused_v0_ms" in r for r in rows)  # files from before the generated lowerings lack them
    head = "| graph | nodes | edges | F_in→F_out | mode | split ms | fused ms | fused speedup | auto picks |"
    if lowered:
        head += " fused (A X) W ms | fused A (X W) ms | lowering picked |"
    out += [head, "|---|---:|---:|---|---|---:|---:|---:|---|" + ("---:|---:|---|" if lowered else "")]
    for r in rows:
        pick = r["auto"] + ("" if r["auto_within_5pct"] else " (slower)")
        line = (f"| {r['graph']} | {r['nodes']} | {r['edges']} | {r['f_in']}→{r['f_out']} | {r['mode']} | "
                f"{r['split_ms']:.2f} | {r['fused_ms']:.2f} | {r['speedup']:.2f}x | {pick} |")
        if lowered:
            line += (f" {r['fused_v0_ms']:.2f} | {r['fused_v1_ms']:.2f} | {r['variants_picked']}"
                     f"{'' if r['variant_within_5pct'] else ' (slower)'} |")
        out.append(line)
    for mode in dict.fromkeys(r["mode"] for r in rows):
        sub = [r for r in rows if r["mode"] == mode]
        best = _geomean([max(r["speedup"], 1.0) for r in sub])
        auto = _geomean([r["speedup"] if r["auto"] == "fused" else 1.0 for r in sub])
        right = sum(r["auto_within_5pct"] for r in sub)
        out.append(f"\n{mode}: the choice is within 5% of the faster form in {right} of {len(sub)} cases; geomean "
                   f"speedup over always-split: auto {auto:.2f}x, best possible {best:.2f}x")
        if lowered:
            v_right = sum(r["variant_within_5pct"] for r in sub)
            gain = _geomean([r["fused_v0_ms"] / r["fused_ms"] for r in sub])
            out.append(f"{mode}: the generated cost model's lowering is within 5% of the faster one in {v_right} of {len(sub)} "
                       f"cases; geomean speedup of the chosen lowering over always (A X) W: {gain:.2f}x")
    out.append("")
    return out


def tc_error(f: Path, data: dict) -> list:
    """bench/tc_error.py: the Tensor-Core SpMM's error beside the CUDA-core kernels' and PyTorch's."""
    meta = data.get("meta", {})
    out = [f"## Tensor-Core SpMM error against float64 ({f.name}; {meta.get('device', '?')})", "",
           f"{meta.get('measures', '')}; forward / gradient of x.", "",
           "| graph | F | inputs | Tensor Cores max | rows kernel max | CUDA cores max | PyTorch max | Tensor Cores median | rows kernel median | CUDA cores median |",
           "|---|---|---|---|---|---|---|---|---|---|"]

    def pair(r, k, m):  # forward / gradient of x; "-" where the row has no such result (the rows kernel in tf32)
        return f"{r[k]['forward'][m]:.1e} / {r[k]['grad_x'][m]:.1e}" if k in r else "-"

    for r in data.get("rows", []):
        out.append(f"| {r['graph']} | {r['F']} | {r['dtype']} | {pair(r, 'tensor-cores', 'max')} | {pair(r, 'tensor-cores-rows', 'max')} "
                   f"| {pair(r, 'cuda-cores', 'max')} | {pair(r, 'pytorch', 'max')} | {pair(r, 'tensor-cores', 'median')} "
                   f"| {pair(r, 'tensor-cores-rows', 'median')} | {pair(r, 'cuda-cores', 'median')} |")
    return out + [""]


def main() -> int:
    files = sorted(RESULTS.glob("*.json"))
    lines = ["# Benchmark summary", "",
             "Generated by `python bench/report.py` from the JSON files in this folder (do not edit by hand).",
             "Speedup = peer time / gnnfuse time (higher is better); medians of repeated runs, outputs checked",
             "before timing. Plots: the PNG files next to each JSON file.", ""]
    gpu = [f for f in files if f.name.startswith("gpu")]
    if not gpu:
        lines += ["No GPU results yet (no GPU was available to the sessions so far).", ""]
    plotted = []
    plotted_ops = []
    plotted_fusion = []
    for f in files:
        data = json.loads(f.read_text())
        rows = data.get("results")
        if f.name.startswith("gpu") and str(data.get("tool", "")).startswith("bench/gpu/fast_time"):
            lines += gpu_variants(f, data)
        elif f.name.startswith("gpu") and data.get("rows"):
            lines += gpu_ops(f, data)
        elif rows and "pyg_ms" in rows[0]:
            lines += side_by_side(f, data)
            plotted.append(f)
        elif rows and "impl" in rows[0]:
            lines += implementations(f, data)
            plotted_ops.append(f)
        elif "graphs" in data:
            lines += memory(f, data)
        elif f.name.startswith("cpu_spgemm"):
            lines += coarsening(f, data)
        elif f.name.startswith("cpu_gcn_fusion"):
            lines += gcn_fusion(f, data)
            plotted_fusion.append(f)
        elif f.name.startswith("tc_error"):
            lines += tc_error(f, data)
    (RESULTS / "SUMMARY.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'SUMMARY.md'}")
    try:
        import plot_results
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import plot_results
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib not installed: plots not regenerated")
        return 0
    for f in plotted:
        print(f"wrote {plot_results.plot(f)}")
    for f in plotted_ops:
        print(f"wrote {plot_results.plot_implementations(f)}")
    for f in plotted_fusion:
        print(f"wrote {plot_results.plot_gcn_fusion(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
