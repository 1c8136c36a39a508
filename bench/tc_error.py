"""The error of the Tensor-Core SpMM against the CUDA-core kernels and PyTorch, all against float64.

For each graph, F and input precision (float16, bfloat16: fp32 accumulation on mma.m16n8k16;
float32 as tf32 on mma.m16n8k8), the GCN-normalised SpMM ``Y = A_hat X`` and the gradient of X
(``A_hatᵀ dY``, the transposed view) are computed
  tensor-cores  gnnfuse.spmm with set_cuda_tensor_cores("on") (every row window on Tensor Cores)
  tensor-cores-rows  the same with set_cuda_tensor_cores("rows") (seed 004's rows kernel on
                mma.m16n8k8; float16 and bfloat16 only)
  cuda-cores    the same call with Tensor Cores off (fp32 accumulation in CUDA cores)
  pytorch       PyG's gather / scatter-add in the inputs' precision (what a low-precision PyG
                model computes: products and sums rounded to the precision)
and compared with float64 products of the same rounded inputs. Two measures per result: ``max``,
the largest absolute error over the largest |reference| (as the tests' bound), and ``median``,
the median over entries of |error| / |reference| where |reference| >= 1e-3 of the largest.

Where: on a GPU (``--device cuda``: the real mma) or through the emulated library
(``GNNFUSE_LIBRARY=build/libgnnfuse_cuda_emu.so``, CPU tensors: the emulator's mma, which rounds
the inputs as the PTX ISA specifies and accumulates in fp32; a GPU's accumulation order within an
mma may differ, so its numbers are the ones to document once measured).

    GNNFUSE_LIBRARY=build/libgnnfuse_cuda_emu.so PYTHONPATH=python \\
        python bench/tc_error.py --graphs cora rmat-12-8 --features 32 128 --out bench/results/tc_error_emulated.json
    python bench/tc_error.py --device cuda --graphs pubmed rmat-18-16 --features 128 256 --out $OUT/tc_error.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets  # noqa: E402

import gnnfuse  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "tf32": torch.float32}


def errors(got: torch.Tensor, want: torch.Tensor) -> dict:
    err = (got.double() - want).abs()
    top = max(want.abs().max().item(), 1e-300)
    big = want.abs() >= 1e-3 * top
    return {"max": err.max().item() / top, "median": (err[big] / want.abs()[big]).median().item() if bool(big.any()) else 0.0}


def tc_launches() -> int:
    """Tensor-Core launches so far (the CUDA adapters' counters; -1 where the build has none)."""
    if not hasattr(torch.ops.gnnfuse, "_cuda_launch_counts"):
        return -1
    return sum(int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines() if " tensor_cores " in l)


def normalised(edge_index: torch.Tensor, n: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source, target and D^-1/2 (A + I) D^-1/2 weights, in float64."""
    loops = torch.arange(n)
    src = torch.cat([edge_index[0], loops]).to(device)
    dst = torch.cat([edge_index[1], loops]).to(device)
    deg = torch.zeros(n, dtype=torch.float64, device=device).index_add_(0, dst, torch.ones(src.numel(), dtype=torch.float64, device=device))
    return src, dst, deg[src].rsqrt() * deg[dst].rsqrt()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", nargs="+", default=["cora", "rmat-12-8"])
    ap.add_argument("--features", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--device", default="cpu", help="cuda: a GPU; cpu: CPU tensors (the emulated library runs its CUDA kernels on them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    emulated = gnnfuse.library_path().endswith("libgnnfuse_cuda_emu.so")
    if device.type == "cpu" and not emulated:
        ap.error("CPU tensors need the emulated library (GNNFUSE_LIBRARY=build/libgnnfuse_cuda_emu.so): the CPU library has no Tensor-Core path")
    rows, skipped = [], {}
    for name in args.graphs:
        try:
            edge_index, n = datasets.load(name)[:2]
        except Exception as e:  # a real graph without its dataset folder
            skipped[name] = f"{type(e).__name__}: {e}"
            print(f"# {name}: skipped ({skipped[name]})")
            continue
        src, dst, w64 = normalised(edge_index, n, device)
        for f in args.features:
            g = torch.Generator().manual_seed(args.seed)
            x0 = torch.randn(n, f, generator=g, dtype=torch.float64).to(device)
            dy0 = torch.randn(n, f, generator=g, dtype=torch.float64).to(device)
            for dname in args.dtypes:
                dt = DTYPES[dname]
                x, dy, w = x0.to(dt), dy0.to(dt), w64.to(dt)
                # float64 products of the same rounded inputs: forward and the gradient of x
                ei = torch.stack([src, dst])
                want_y = torch.zeros(n, f, dtype=torch.float64, device=device).index_add_(0, dst, x.double()[src] * w.double()[:, None])
                want_dx = torch.zeros(n, f, dtype=torch.float64, device=device).index_add_(0, src, dy.double()[dst] * w.double()[:, None])
                row = {"graph": name, "nodes": n, "edges": int(src.numel()), "F": f, "dtype": dname}
                modes = [("tensor-cores", "on"), ("cuda-cores", "off")] + ([("tensor-cores-rows", "rows")] if dname != "tf32" else [])
                for impl, mode in modes:
                    t, before = time.perf_counter(), tc_launches()
                    with gnnfuse.backends.cuda_tensor_cores(mode):
                        prev = torch.backends.cuda.matmul.allow_tf32
                        torch.backends.cuda.matmul.allow_tf32 = dname == "tf32" and mode == "on"
                        try:
                            xr = x.clone().requires_grad_()
                            y = gnnfuse.spmm(ei, xr, w)  # (weights in edge_index order)
                            (dx,) = torch.autograd.grad(y, xr, dy)
                        finally:
                            torch.backends.cuda.matmul.allow_tf32 = prev
                    row[impl] = {"forward": errors(y, want_y), "grad_x": errors(dx, want_dx), "s": round(time.perf_counter() - t, 2),
                                 "tensor_core_launches": tc_launches() - before if before >= 0 else None}
                    if mode != "off" and before >= 0 and row[impl]["tensor_core_launches"] < 2:
                        raise RuntimeError(f"{name} F={f} {dname}: the forced mode ran {row[impl]['tensor_core_launches']} Tensor-Core launches (want 2)")
                y = torch.zeros(n, f, dtype=dt, device=device).index_add_(0, dst, x[src] * w[:, None])
                dx = torch.zeros(n, f, dtype=dt, device=device).index_add_(0, src, dy[dst] * w[:, None])
                row["pytorch"] = {"forward": errors(y, want_y), "grad_x": errors(dx, want_dx)}
                rows.append(row)
                print(f"{name} F={f} {dname}: " + "  ".join(
                    f"{k} fwd {row[k]['forward']['max']:.1e}/{row[k]['forward']['median']:.1e} grad {row[k]['grad_x']['max']:.1e}/{row[k]['grad_x']['median']:.1e}"
                    for k in ("tensor-cores", "tensor-cores-rows", "cuda-cores", "pytorch") if k in row), flush=True)
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"SIMT emulator on {platform.processor() or platform.machine()}",
            "emulated": emulated, "torch": torch.__version__, "measures": "max: max|err| / max|ref|; median: median |err|/|ref| over |ref| >= 1e-3 max|ref|"}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"meta": meta, "rows": rows, "skipped": skipped}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
