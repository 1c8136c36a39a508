"""Every benchmark of bench/, in one command, then the report (SUMMARY.md and the plots).

Runs each benchmark script in its own process with the settings of the committed results and
writes its JSON to bench/results/<kind>_<machine>.json (the machine tag from the CPU model and
core count), so a rerun on another machine adds files beside the existing ones. Each step's
correctness check runs before its timing; a step that fails stops the run unless --keep-going.

    python bench/run_all.py                       # everything (hours on 2 cores; the peers of
                                                  #   bench/README.md are timed when they import)
    python bench/run_all.py --quick               # smoke run of every step: small R-MAT graphs, short timing, to /tmp
    python bench/run_all.py --only ops gcn_fusion # a subset (names: --list)
    python bench/run_all.py --list

Run it with the interpreter that has gnnfuse and the peers (e.g. PYTHONPATH=python ../peers/bin/python).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_ops import machine_tag  # noqa: E402


def plan(tag: str, quick: bool) -> list[tuple[str, str, list[str], str]]:
    """(name, script, arguments, output file name) per step."""
    if quick:  # generated graphs only: runs wherever the datasets are not
        small = ["rmat-11-8", "rmat-12-8"]
        t = ["--min-reps", "2", "--min-time", "0.05"]
        return [
            ("ops", "bench_ops.py", ["--quick", "--threads", "2", "--graphs", ",".join(small)], f"cpu_ops_{tag}.json"),
            ("ops_bf16", "bench_ops.py", ["--quick", "--threads", "2", "--dtype", "bfloat16", "--ops", "spmm", "--graphs", small[0]],
             f"cpu_ops_bf16_{tag}.json"),
            ("reductions", "bench_reductions.py", ["--graphs", *small, *t], f"cpu_reductions_{tag}.json"),
            ("layers", "bench_layers.py", ["--graphs", small[0], *t], f"cpu_layers_{tag}.json"),  # (one graph: the longest step)
            ("gcn_fusion", "bench_gcn_fusion.py", ["--graphs", small[0], "--dims", "16x128", "128x16", *t], f"cpu_gcn_fusion_{tag}.json"),
            ("spgemm", "bench_spgemm.py", ["--graphs", *small, "--threads", "2", "--repeats", "2", "--no-plot"], f"cpu_spgemm_{tag}.json"),
            ("autograd_memory", "bench_autograd_memory.py", ["--graphs", small[0], "--reps", "1"], f"autograd_memory_{tag}.json"),
        ]
    real = ["cora", "citeseer", "pubmed", "ca-HepPh", "soc-Slashdot0902", "copter2", "luxembourg_osm"]
    sweep = ["pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-18-16"]
    layer_graphs = ["cora", "pubmed", "ca-HepPh", "rmat-16-16"]
    return [
        ("ops", "bench_ops.py", ["--threads", "2", "--graphs", ",".join(real + ["rmat-20-16"])], f"cpu_ops_{tag}.json"),
        ("ops_fsweep", "bench_ops.py", ["--threads", "2", "--graphs", ",".join(sweep), "--features", "16,64,128,256"],
         f"cpu_ops_fsweep_{tag}.json"),
        ("ops_fsweep_1thread", "bench_ops.py", ["--threads", "1", "--graphs", ",".join(sweep[:3]), "--features", "16,64,128,256"],
         f"cpu_ops_fsweep_1thread_{tag}.json"),
        ("ops_rmat21", "bench_ops.py", ["--threads", "2", "--graphs", "rmat-21-14", "--features", "16,64,256", "--ops", "spmm"],
         f"cpu_ops_rmat21_{tag}.json"),
        ("ops_bf16", "bench_ops.py", ["--threads", "2", "--dtype", "bfloat16", "--graphs", ",".join(sweep[:3]), "--features", "64,128"],
         f"cpu_ops_bf16_{tag}.json"),
        ("reductions", "bench_reductions.py", ["--graphs", *layer_graphs], f"cpu_reductions_{tag}.json"),
        ("layers", "bench_layers.py", ["--graphs", *layer_graphs, "--memory"], f"cpu_layers_{tag}.json"),
        ("layers_heads1", "bench_layers.py", ["--graphs", *layer_graphs[1:], "--heads", "1", "--layers", "GATConv", "TransformerConv"],
         f"cpu_layers_heads1_{tag}.json"),
        ("layers_heads8", "bench_layers.py", ["--graphs", *layer_graphs[1:], "--heads", "8", "--layers", "GATConv", "TransformerConv"],
         f"cpu_layers_heads8_{tag}.json"),
        ("gcn_fusion", "bench_gcn_fusion.py", ["--graphs", "pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-16-16", "rmat-18-16"],
         f"cpu_gcn_fusion_{tag}.json"),
        ("spgemm", "bench_spgemm.py", ["--memory"], f"cpu_spgemm_{tag}.json"),
        ("autograd_memory", "bench_autograd_memory.py", [], f"autograd_memory_{tag}.json"),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: small graphs, short timing, results to a temporary folder")
    ap.add_argument("--only", nargs="+", default=None, help="step names (see --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep-going", action="store_true", help="run the remaining steps after a failure")
    ap.add_argument("--out-dir", default=None, help="where the JSON goes (default bench/results; --quick: a temporary folder)")
    ap.add_argument("--root", default=None, help="dataset root (default ../shared/datasets)")
    args = ap.parse_args()

    tag = machine_tag()
    steps = plan(tag, args.quick)
    if args.list:
        for name, script, argv, out in steps:
            print(f"{name:<20} {script} {' '.join(argv)} -> {out}")
        return 0
    if args.only:
        unknown = set(args.only) - {s[0] for s in steps}
        if unknown:
            raise SystemExit(f"unknown step(s) {sorted(unknown)}; --list shows them")
        steps = [s for s in steps if s[0] in args.only]
    out_dir = Path(args.out_dir) if args.out_dir else (Path(tempfile.mkdtemp(prefix="gnnfuse-bench-")) if args.quick else HERE / "results")
    out_dir.mkdir(parents=True, exist_ok=True)

    failed = []
    t_all = time.perf_counter()
    for k, (name, script, argv, out) in enumerate(steps, 1):
        cmd = [sys.executable, str(HERE / script), *argv, "--out", str(out_dir / out)]
        if args.root and script != "bench_autograd_memory.py":  # that one reads the default dataset root only
            cmd += ["--root", args.root]
        print(f"[{k}/{len(steps)}] {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd).returncode
        print(f"[{k}/{len(steps)}] {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {time.perf_counter() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
            if not args.keep_going:
                break
    if not args.quick and not failed:
        subprocess.run([sys.executable, str(HERE / "report.py")], check=True)
    print(f"run_all: {len(steps) - len(failed)} of {len(steps)} steps ok in {time.perf_counter() - t_all:.0f} s; results in {out_dir}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
