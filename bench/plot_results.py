"""PNG plots of the side-by-side benchmark results (bench/results/*.json): one figure per file,
speedup over the peer per graph (forward and forward+backward), and the peak memory of a
training step where it was measured. Needs matplotlib (``pip install matplotlib``).

    python bench/plot_results.py                       # every cpu_layers_* / cpu_reductions_* file
    python bench/plot_results.py bench/results/cpu_ops_amd-epyc-2c.json   # op files: speedup per peer
    python bench/plot_results.py bench/results/cpu_layers_amd-epyc-2c.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _series(rows, key):
    """{label: {graph: row}} with label = layer/op [+ mode]."""
    out = {}
    for r in rows:
        out.setdefault((r[key], r["mode"]), {})[r["graph"]] = r
    return out


def _save(fig, path: Path, what: str) -> Path:
    """Title, layout and <path>.png next to the JSON file."""
    import matplotlib.pyplot as plt

    fig.suptitle(f"{path.stem}: {what}")
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text())
    rows = data["results"]
    key = "layer" if "layer" in rows[0] else "op"
    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    series = _series(rows, key)
    memory = [r for r in rows if "pyg_peak_mb" in r]
    fig, axes = plt.subplots(1, 3 if memory else 2, figsize=(16 if memory else 12, 4.5))
    for ax, mode in zip(axes, ("forward", "fwd+bwd")):
        labels = [k for k in series if k[1] == mode]
        width = 0.8 / max(1, len(labels))
        for n, label in enumerate(labels):
            ys = [series[label].get(g, {}).get("speedup", 0.0) for g in graphs]
            ax.bar([x + n * width for x in range(len(graphs))], ys, width, label=label[0])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(graphs))], graphs)
        ax.set_ylabel("speedup over PyG (x)")
        ax.set_title(f"{mode}")
        ax.legend(fontsize=7)
    if memory:
        ax = axes[2]
        labels = list(dict.fromkeys(r[key] for r in memory))
        width = 0.8 / (len(labels) + 1)
        pyg = {}
        for r in memory:
            pyg[r["graph"]] = max(pyg.get(r["graph"], 0.0), r["pyg_peak_mb"])
        ax.bar([x for x in range(len(graphs))], [pyg.get(g, 0.0) for g in graphs], width, label="PyG (largest)", color="gray")
        for n, label in enumerate(labels, start=1):
            got = {r["graph"]: r["gnnfuse_peak_mb"] for r in memory if r[key] == label}
            ax.bar([x + n * width for x in range(len(graphs))], [got.get(g, 0.0) for g in graphs], width, label=label)
        ax.set_yscale("log")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(graphs))], graphs)
        ax.set_ylabel("peak extra MiB, one training step")
        ax.set_title("memory")
        ax.legend(fontsize=7)
    return _save(fig, path, f"{data.get('cpu', '')}, {data.get('threads', '')} threads, torch {data.get('torch', '')}")


def plot_implementations(path: Path) -> Path:
    """cpu_ops_*.json / gpu_*.json: per op, gnnfuse's speedup over each peer per (graph, F)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text())
    rows = [r for r in data["results"] if r.get("gnnfuse_speedup") is not None and r["impl"] != "gnnfuse"]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.8), squeeze=False)
    for ax, op in zip(axes[0], ops):
        sub = [r for r in rows if r["op"] == op]
        points = list(dict.fromkeys(f"{r['graph']} F={r['F']}" for r in sub))
        peers = list(dict.fromkeys(r["impl"] for r in sub))
        width = 0.8 / max(1, len(peers))
        for n, peer in enumerate(peers):
            got = {f"{r['graph']} F={r['F']}": r["gnnfuse_speedup"] for r in sub if r["impl"] == peer}
            ax.bar([x + n * width for x in range(len(points))], [got.get(p, 0.0) for p in points], width, label=peer)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(points))], points, rotation=70, fontsize=7)
        ax.set_ylabel("gnnfuse speedup over peer (x, log)")
        ax.set_title(op)
        ax.legend(fontsize=7)
    meta = data.get("meta", {})
    return _save(fig, path, f"{meta.get('cpu_model', '')}, {meta.get('threads', '')} threads, torch {meta.get('torch', '')}")


def plot_gcn_fusion(path: Path) -> Path:
    """cpu_gcn_fusion_*.json: fused gcn's speedup over spmm + GEMM per (graph, F_in x F_out),
    forward and forward+backward; filled bars: the automatic choice runs the fused op."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(path.read_text())
    rows = data["results"]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(1, len(modes), figsize=(7 * len(modes), 4.8), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        sub = [r for r in rows if r["mode"] == mode]
        labels = [f"{r['graph']} {r['f_in']}x{r['f_out']}" for r in sub]
        ax.bar(range(len(sub)), [r["speedup"] for r in sub],
               color=["tab:blue" if r["auto"] == "fused" else "white" for r in sub], edgecolor="tab:blue")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(sub)), labels, rotation=70, fontsize=7)
        ax.set_ylabel("split time / fused time (filled: auto picks fused)")
        ax.set_title(mode)
    return _save(fig, path, f"{data.get('cpu', '')}, {data.get('threads', '')} threads, torch {data.get('torch', '')}")


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(RESULTS.glob("cpu_layers_*.json")) + sorted(RESULTS.glob("cpu_reductions_*.json"))
    for p in paths:
        data = json.loads(p.read_text())
        rows = data.get("results") or [{}]
        if p.name.startswith("cpu_gcn_fusion"):
            print(f"wrote {plot_gcn_fusion(p)}")
        else:
            print(f"wrote {plot_implementations(p) if 'impl' in rows[0] else plot(p)}")


if __name__ == "__main__":
    main()
