#!/usr/bin/env python3
"""Plot of a bench_gpu.py result: speedup of ours over cached cuSPARSE (best algorithm) per graph
and feature width F, one panel per op (spmm, sddmm, sddmm_spmm: the fused op against cuSPARSE's
SDDMM + SpMM); bars per F, 1 = parity. torch's time against the same cuSPARSE baseline is drawn
as black markers, the fastest hand-written prototype's (bench_gpu.py's proto:* rows, spmm) as red
ones.

    python bench/gpu/plot_gpu.py RESULT.json OUT.png

Needs matplotlib; without it (as in this project's venv) the same chart is written as a
dependency-free SVG beside OUT (OUT with .svg), and the script says so.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

OPS = [("spmm", "ours", "torch.sparse.mm"), ("sddmm", "ours", "torch.sampled_addmm"),
       ("sddmm_spmm", "ours_fused", "torch_unfused")]


def speedups(rows):
    """{op: {graph: {F: (ours speedup, torch speedup or None, best proto speedup or None)}}} against
    cusparse_best."""
    ms = {}
    for r in rows:
        if "ms" in r and r.get("ms"):
            ms[(r["op"], r["graph"], r["F"], r["impl"])] = r["ms"]
    proto = {}
    for (o, g, F, impl), t in ms.items():
        if impl.startswith("proto:"):
            proto[(o, g, F)] = min(t, proto.get((o, g, F), t))
    out = {}
    for op, ours, torch_impl in OPS:
        for (o, g, F, impl), t in ms.items():
            if o != op or impl != "cusparse_best" or (op, g, F, ours) not in ms:
                continue
            tt = ms.get((op, g, F, torch_impl))
            tp = proto.get((op, g, F))
            out.setdefault(op, {}).setdefault(g, {})[F] = (t / ms[(op, g, F, ours)], t / tt if tt else None,
                                                           t / tp if tp else None)
    return out


def plot_matplotlib(doc, data, png: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op, _, _ in OPS if op in data]
    fig, axes = plt.subplots(len(ops), 1, figsize=(11, 3.4 * len(ops)), squeeze=False)
    for ax, op in zip(axes[:, 0], ops):
        graphs = sorted(data[op])
        Fs = sorted({F for g in graphs for F in data[op][g]})
        width = 0.8 / max(len(Fs), 1)
        for k, F in enumerate(Fs):
            xs = [i + (k - (len(Fs) - 1) / 2) * width for i in range(len(graphs))]
            ys = [data[op][g].get(F, (0, None))[0] for g in graphs]
            ax.bar(xs, ys, width, label=f"ours, F={F}")
            ts = [(x, data[op][g][F][1]) for x, g in zip(xs, graphs) if F in data[op][g] and data[op][g][F][1]]
            if ts:
                ax.scatter([x for x, _ in ts], [y for _, y in ts], marker="_", s=120, color="black",
                           label="torch" if k == 0 else None, zorder=3)
            ps = [(x, data[op][g][F][2]) for x, g in zip(xs, graphs) if F in data[op][g] and data[op][g][F][2]]
            if ps:
                ax.scatter([x for x, _ in ps], [y for _, y in ps], marker="_", s=120, color="red",
                           label="best proto" if k == 0 else None, zorder=3)
        ax.axhline(1.0, color="gray", lw=1, ls="--")
        ax.set_xticks(range(len(graphs)))
        ax.set_xticklabels(graphs, rotation=15)
        ax.set_ylabel("speedup vs cuSPARSE")
        ax.set_title(op + (" (fused, vs cuSPARSE SDDMM + SpMM)" if op == "sddmm_spmm" else ""))
        ax.legend(fontsize=7, ncol=5)
    fig.suptitle(f"{doc.get('device', '?')}  commit {doc.get('commit', '')[:10]}  (cached cuSPARSE, best algorithm = 1)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    return png


def plot_svg(doc, data, path: Path):
    """The same bars as plain SVG (no dependencies)."""
    colors = ["#4477aa", "#66ccee", "#228833", "#ccbb44", "#ee6677", "#aa3377"]
    W, PH, top = 1000, 260, 40
    ops = [op for op, _, _ in OPS if op in data]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{top + PH * len(ops)}" font-family="sans-serif" font-size="11">',
           f'<text x="10" y="20" font-size="14">{doc.get("device", "?")} commit {doc.get("commit", "")[:10]}: speedup of ours vs cached cuSPARSE (best algorithm)</text>']
    for p, op in enumerate(ops):
        y0 = top + p * PH
        graphs = sorted(data[op])
        Fs = sorted({F for g in graphs for F in data[op][g]})
        vals = [x for g in graphs for tup in data[op][g].values() for x in tup if x]
        ymax = max(vals + [1.2]) * 1.1
        x0, pw, ph = 60, W - 80, PH - 70
        sy = lambda v: y0 + 20 + ph - v / ymax * ph  # noqa: E731
        out.append(f'<text x="{x0}" y="{y0 + 12}" font-size="13">{op}</text>')
        out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{sy(1):.1f}" y2="{sy(1):.1f}" stroke="gray" stroke-dasharray="4"/>')
        out.append(f'<text x="{x0 - 30}" y="{sy(1) + 4:.1f}">1.0</text>')
        out.append(f'<text x="{x0 - 40}" y="{sy(ymax / 1.1) + 4:.1f}">{ymax / 1.1:.1f}</text>')
        gw = pw / max(len(graphs), 1)
        bw = gw * 0.8 / max(len(Fs), 1)
        for i, g in enumerate(graphs):
            for k, F in enumerate(Fs):
                if F not in data[op][g]:
                    continue
                v, t, tp = data[op][g][F]
                x = x0 + i * gw + gw * 0.1 + k * bw
                out.append(f'<rect x="{x:.1f}" y="{sy(v):.1f}" width="{bw * 0.9:.1f}" height="{sy(0) - sy(v):.1f}" '
                           f'fill="{colors[k % len(colors)]}"><title>{g} F={F}: {v:.2f}x</title></rect>')
                for val, color in ((t, "black"), (tp, "red")):
                    if val:
                        out.append(f'<line x1="{x:.1f}" x2="{x + bw * 0.9:.1f}" y1="{sy(val):.1f}" y2="{sy(val):.1f}" '
                                   f'stroke="{color}" stroke-width="2"/>')
            out.append(f'<text x="{x0 + i * gw + gw / 2:.1f}" y="{sy(0) + 14:.1f}" text-anchor="middle">{g}</text>')
        for k, F in enumerate(Fs):
            out.append(f'<rect x="{x0 + k * 70}" y="{y0 + PH - 30}" width="10" height="10" fill="{colors[k % len(colors)]}"/>'
                       f'<text x="{x0 + k * 70 + 14}" y="{y0 + PH - 21}">F={F}</text>')
        out.append(f'<text x="{x0 + len(Fs) * 70 + 10}" y="{y0 + PH - 21}">black line: torch, red: best proto</text>')
    out.append("</svg>")
    path.write_text("\n".join(out))
    return path


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    doc = json.loads(Path(argv[1]).read_text())
    data = speedups(doc.get("rows", []))
    if not data:
        print("plot_gpu.py: no pair of ours and cusparse_best rows (an emulated run has no cuSPARSE)", file=sys.stderr)
        return 1
    out = Path(argv[2])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        svg = plot_svg(doc, data, out.with_suffix(".svg"))
        print(f"matplotlib not installed: wrote {svg} instead of {out}")
        return 0
    print(f"wrote {plot_matplotlib(doc, data, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
