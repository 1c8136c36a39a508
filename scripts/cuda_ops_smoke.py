"""Every op of ops/*.spec on a device against the same library's CPU kernels.

    python scripts/cuda_ops_smoke.py [--device cuda] [--ops spmm,gat] [--dtypes float64,float32]

For each op, arguments are built from its spec (a random graph with empty rows and a long row,
dense and edge operands by their index variables, the CSC view given so that the backward needs
no graph op on the device), the op runs on the device and on the CPU, and the results and the
gradients of every floating input (a random upstream gradient) are compared. Then: inputs on mixed
devices refused by name, deterministic algorithms, a call on a side stream. On a GPU with
libgnnfuse built with GNNFUSE_CUDA (GNNFUSE_LIBRARY=build/libgnnfuse.so) this checks the CUDA
adapters end to end; with --device cpu it only checks itself. The ops computing their output
pattern (spgemm, coarsen: `symbolic`) run through their Python API (pattern, assembled values,
gradients) on graphs with power-law rows, empty rows and duplicate entries. Prints one line per
op and a summary; exit status 1 on a failure.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gnnfuse  # noqa: E402
from compare_builds import Spec  # noqa: E402

EXTENT = {"i": 23, "j": 23, "h": 2, "f": 5, "k": 4, "d": 3, "o": 3}


def parse(path):
    """The operands of a spec (compare_builds.Spec's parser): dense and edge operands by their
    indices, the csr operands' optional values."""
    spec = Spec(path)
    out = {"op": spec.name, "symbolic": bool(spec.symbolic), "sparse": [], "dense": {}, "edge": {}}
    for d in spec.decls.values():
        if d.role == "dense":
            out["dense"][d.arg] = d.vars
        elif d.role == "edge":
            out["edge"][d.arg] = d.vars[2:]
        elif d.role == "sparse":
            out["sparse"].append([n for n in (d.rowptr, d.col, d.values) if n])
    return out


def graph(itype):
    g = torch.Generator().manual_seed(0)
    n = EXTENT["i"]
    rows = []
    for i in range(n):
        length = 0 if i % 5 == 2 else (17 if i == 4 else int(torch.randint(0, 5, (1,), generator=g)))
        rows.append(sorted(set(torch.randint(0, n, (length,), generator=g).tolist())))
    rowptr = torch.tensor([0] + [sum(len(r) for r in rows[: i + 1]) for i in range(n)], dtype=itype)
    col = torch.tensor([c for r in rows for c in r], dtype=itype)
    colptr, row, perm = torch.ops.gnnfuse.csr_transpose(rowptr, col, n)
    return rowptr, col, colptr, row, perm


def arguments(spec, dtype, itype):
    rowptr, col, colptr, row, perm = graph(itype)
    nnz = col.numel()
    g = torch.Generator().manual_seed(1)
    args = {"rowptr": rowptr, "col": col, "colptr": colptr, "row": row, "perm": perm}
    for name, dims in spec["dense"].items():
        args[name] = torch.randn([EXTENT[d] for d in dims], generator=g, dtype=torch.float64).to(dtype)
    for name, dims in spec["edge"].items():
        args[name] = torch.randn([nnz] + [EXTENT[d] for d in dims], generator=g, dtype=torch.float64).to(dtype)
    for s in spec["sparse"]:
        if len(s) == 3:
            args[s[2]] = torch.rand(nnz, generator=g, dtype=torch.float64).to(dtype) + 0.5
    return args


def call(spec, args, device):
    op = getattr(torch.ops.gnnfuse, spec["op"])
    schema = op.default._schema
    out = []
    for a in schema.arguments:
        if a.name in args:
            v = args[a.name]
            out.append(v.to(device) if isinstance(v, torch.Tensor) else v)
        elif str(a.type) == "float":
            out.append(0.2)
        else:
            out.append(None)
    return op(*out)


def compare(spec, dtype, itype, device, tol):
    args = arguments(spec, dtype, itype)
    floating = [k for k, v in args.items() if v.is_floating_point()]
    cpu_args = {k: (v.detach().clone().requires_grad_(k in floating)) for k, v in args.items()}
    dev_args = {k: (v.detach().to(device).requires_grad_(k in floating)) for k, v in args.items()}
    want = call(spec, cpu_args, "cpu")
    got = call(spec, dev_args, device)
    if isinstance(want, tuple):
        want, got = want[0], got[0]
    err = (got.detach().cpu().double() - want.detach().double()).abs().max().item() if want.numel() else 0.0
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to(device))
    gerr = 0.0
    for k in floating:
        a, b = cpu_args[k].grad, dev_args[k].grad
        if a is None and b is None:
            continue
        if (a is None) != (b is None):
            return float("inf"), f"gradient of {k} on one side only"
        if a.numel():
            gerr = max(gerr, (b.cpu().double() - a.double()).abs().max().item())
    scale = max(1.0, want.detach().abs().max().item() if want.numel() else 1.0)
    return max(err, gerr) / scale, f"value {err:.2e}, gradients {gerr:.2e}"


def check_op(spec, dt, device, label=""):
    """compare() for both index dtypes, one line each; the number of failures."""
    dtype = getattr(torch, dt)
    tol = {"float64": 1e-10, "float32": 1e-4}.get(dt, 2e-2)
    failed = 0
    for itype in (torch.int32, torch.int64):
        try:
            rel, what = compare(spec, dtype, itype, device, tol)
            ok = rel <= tol
        except Exception as e:  # noqa: BLE001  (reported, counted)
            ok, what = False, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label}{spec['op']} {dt} {str(itype)[6:]}: {what}", flush=True)
    return failed


def random_csr(rows, cols, nnz, seed, itype):
    """Power-law rows, a quarter of them empty, duplicate entries kept (sorted within rows)."""
    g = torch.Generator().manual_seed(seed)
    r = (torch.rand(nnz, generator=g) ** 3 * (rows * 3 // 4)).long()
    c = torch.randint(0, cols, (nnz,), generator=g)
    r[:3], c[:3] = r[3:6].clone(), c[3:6].clone()
    order = torch.argsort(r * cols + c, stable=True)
    rowptr = torch.zeros(rows + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(r, minlength=rows), 0)
    return rowptr.to(itype), c[order].to(itype)


class _Env:
    """Environment variables set for a block (the CUDA adapters read them at every call)."""

    def __init__(self, **values):
        self.values, self.saved = values, {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# The pattern kernels' bins forced (GNNFUSE_CUDA_PATTERN_BINS): every row's set in shared memory,
# as dense flags, in the global table; and the numeric kernels' groups forced (a lane per row, a
# warp per row: GNNFUSE_CUDA_FORCE_GROUP), whose values must agree bit for bit (the lanes add in
# the serial order). On a GPU these are the real compare-and-swap, atomicOr and warp races the
# emulator serialises.
_SYMBOLIC_FORCED = [("bins shared", {"GNNFUSE_CUDA_PATTERN_BINS": "0,4096,0"}), ("bins dense", {"GNNFUSE_CUDA_PATTERN_BINS": "0,0,1000000"}),
                    ("bins global", {"GNNFUSE_CUDA_PATTERN_BINS": "0,0,0"}), ("group 1", {"GNNFUSE_CUDA_FORCE_GROUP": "1"}),
                    ("group 32", {"GNNFUSE_CUDA_FORCE_GROUP": "32"})]


def check_symbolic(dtype: str, device: str) -> int:
    """spgemm (pattern, values, gradients of both operands) and coarsen (pattern, values, gradient
    of the edge weights) on `device` against the CPU, int32 and int64 indices; on the device also
    with each bin forced (patterns equal to the CPU's) and with a lane and a warp per row (values
    equal to each other bit for bit)."""
    dt = getattr(torch, dtype)
    failed = 0
    ops = torch.ops.gnnfuse
    for itype in (torch.int32, torch.int64):
        ar, ac = random_csr(300, 200, 3000, 1, itype)
        br, bc = random_csr(200, 250, 2000, 2, itype)
        g = torch.Generator().manual_seed(3)
        av = torch.rand(ac.numel(), generator=g, dtype=torch.float64).to(dt)
        bv = torch.rand(bc.numel(), generator=g, dtype=torch.float64).to(dt)

        def run(dev):
            a_v, b_v = av.to(dev).requires_grad_(), bv.to(dev).requires_grad_()
            r, c, v = ops.spgemm_assemble(ar.to(dev), ac.to(dev).clone(), a_v, br.to(dev), bc.to(dev), b_v, 250)  # (a copy: no pattern cache hit)
            w = torch.linspace(0.5, 1.5, v.numel(), dtype=dt, device=dev)
            ga, gb = torch.autograd.grad((v * w).sum(), (a_v, b_v))
            cluster = torch.arange(300, device=dev) % 17
            ei = torch.stack([torch.repeat_interleave(torch.arange(300), ar.long().diff()), ac.long() % 300]).to(itype).to(dev)
            ew = torch.linspace(0.1, 2.0, ei.shape[1], dtype=dt, device=dev).requires_grad_()
            cg, cw = gnnfuse.coarsen(ei, cluster, 17, ew)
            (gw,) = torch.autograd.grad((cw * torch.linspace(1, 2, cw.numel(), dtype=dt, device=dev)).sum(), (ew,))
            return [t.detach().cpu() for t in (r, c, v, ga, gb, cg.rowptr, cg.col, cw, gw)]

        tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dt, 2e-2)

        def agree(x, y):
            return all(torch.equal(a, b) if not a.is_floating_point() else torch.allclose(a, b, rtol=tol, atol=tol) for a, b in zip(x, y))

        want = run("cpu")
        ok = agree(want, run(device))
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} spgemm+coarsen {dtype} {str(itype).split('.')[1]}: pattern, values, gradients vs cpu")
        forced = {}
        for name, values in _SYMBOLIC_FORCED:
            with _Env(**values):
                forced[name] = run(device)
            ok = agree(want, forced[name])
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} spgemm+coarsen {dtype} {str(itype).split('.')[1]}: {name}, vs cpu")
        ok = all(torch.equal(a, b) for a, b in zip(forced["group 1"], forced["group 32"]))
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} spgemm+coarsen {dtype} {str(itype).split('.')[1]}: a lane and a warp per row, equal bit for bit")
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ops", default="")
    ap.add_argument("--dtypes", default="float64,float32")
    opts = ap.parse_args()
    print(f"library {gnnfuse.library_path()}, torch {torch.__version__}, device {opts.device}")
    specs = [parse(p) for p in sorted(glob.glob(os.path.join(ROOT, "ops", "*.spec")))]
    specs = [s for s in specs if not s["symbolic"] and (not opts.ops or s["op"] in opts.ops.split(","))]
    failed = 0
    for s in specs:
        for dt in opts.dtypes.split(","):
            failed += check_op(s, dt, opts.device)
    if not opts.ops or any(o in opts.ops.split(",") for o in ("spgemm", "coarsen")):
        for dt in opts.dtypes.split(","):
            failed += check_symbolic(dt, opts.device)
    # Mixed devices, determinism, a side stream (spmm).
    spmm = next((s for s in specs if s["op"] == "spmm"), None)
    if spmm is not None and opts.device != "cpu":
        a = arguments(spmm, torch.float32, torch.int64)
        try:
            torch.ops.gnnfuse.spmm(a["rowptr"].to(opts.device), a["col"].to(opts.device), None, a["x"])
            print("FAIL mixed devices: no error")
            failed += 1
        except RuntimeError as e:
            ok = "gnnfuse::spmm" in str(e) and "'x'" in str(e)
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} mixed devices: {str(e).splitlines()[0][:200]}")
        torch.use_deterministic_algorithms(True)
        d = [torch.ops.gnnfuse.spmm(a["rowptr"].to(opts.device), a["col"].to(opts.device), None, a["x"].to(opts.device)) for _ in range(2)]
        torch.use_deterministic_algorithms(False)
        ok = torch.equal(d[0], d[1])
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} deterministic spmm bitwise equal twice")
        if opts.device.startswith("cuda"):
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                y = torch.ops.gnnfuse.spmm(a["rowptr"].to(opts.device), a["col"].to(opts.device), None, a["x"].to(opts.device))
            s.synchronize()
            ok = torch.allclose(y.cpu(), d[0].cpu())
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} spmm on a side stream")
            # Captured into a CUDA graph on tensors never checked before (the checks assert on the
            # device, the statistics take their bound: no read-back), then replayed.
            try:
                rp, cl, xs = (a[k].to(opts.device).clone() for k in ("rowptr", "col", "x"))
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    yg = torch.ops.gnnfuse.spmm(rp, cl, None, xs)
                xs.copy_(a["x"].to(opts.device))
                graph.replay()
                torch.cuda.synchronize()
                ok = torch.allclose(yg.cpu(), d[0].cpu())
                what = ""
            except Exception as e:  # noqa: BLE001  (reported, counted)
                ok, what = False, f": {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} spmm captured into a CUDA graph and replayed{what}")
    # The cuSPARSE backend (gnnfuse.backends): the ops it takes, forward and backward, against the
    # CPU kernels; the deterministic choice keeps the transposed products on the generated kernels.
    if (opts.device != "cpu" or "cuda_emu" in gnnfuse.library_path()) and hasattr(torch.ops.gnnfuse, "_cuda_set_backend"):
        try:
            gnnfuse.backends.set_cuda_backend("cusparse")
        except RuntimeError as e:
            failed += 1
            print(f"FAIL cusparse backend: {str(e).splitlines()[0][:300]}")
        else:
            for s in specs:
                if s["op"] not in ("spmm", "sddmm", "scaled_spmm"):
                    continue
                for dt in ("float64", "float32", "float16", "bfloat16"):
                    failed += check_op(s, dt, opts.device, "cusparse ")
            # Bitwise repeatable under deterministic algorithms (CUSPARSE_SPMM_CSR_ALG3), and no
            # stale NaN of the caching allocator in an output (freed NaN memory is reused first).
            spmm_spec = next((s for s in specs if s["op"] == "spmm"), None)
            if spmm_spec is not None:
                a = arguments(spmm_spec, torch.float32, torch.int64)
                args = [a["rowptr"].to(opts.device), a["col"].to(opts.device), a["edge_weight"].to(opts.device), a["x"].to(opts.device)]
                torch.use_deterministic_algorithms(True)
                d = [torch.ops.gnnfuse.spmm(*args) for _ in range(2)]
                torch.use_deterministic_algorithms(False)
                ok = torch.equal(d[0], d[1])
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} cusparse deterministic spmm bitwise equal twice")
                del d
                nan = torch.full((1 << 20,), float("nan"), device=opts.device)
                del nan
                y = torch.ops.gnnfuse.spmm(*args)
                ok = bool(torch.isfinite(y).all())
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} cusparse spmm output after freed NaN memory is finite")
            gnnfuse.backends.set_cuda_backend("generated")
            used = [l for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines() if " cusparse " in l]
            tested = {s["op"] for s in specs}
            expect = [k for op, k in (("spmm", "spmm_grad_x cusparse"), ("sddmm", "sddmm cusparse")) if op in tested]
            ok = all(any(l.startswith(k) for l in used) for k in expect)
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} cusparse backend ran: {len(used)} ops")
    # The Tensor-Core SpMM forced (gnnfuse.backends.set_cuda_tensor_cores("on")): the SpMM forms and
    # the per-head ones (spmm_heads, sddmm_heads' input gradients) in float16 and bfloat16, forward and backward, against the CPU kernels (on a GPU: the real mma's
    # fragment layouts and rounding against the PTX ISA the emulator follows); float32 as tf32.
    # (only where spmm is among the ops checked: --ops without it asks for none of this)
    if (opts.device != "cpu" or "cuda_emu" in gnnfuse.library_path()) and hasattr(torch.ops.gnnfuse, "_cuda_set_tensor_cores") \
            and any(s["op"] == "spmm" for s in specs):
        with gnnfuse.backends.cuda_tensor_cores("on"):
            for s in specs:
                if s["op"] not in ("spmm", "scaled_spmm", "spmm_heads", "sddmm_heads"):
                    continue
                for dt in ("float16", "bfloat16"):
                    failed += check_op(s, dt, opts.device, "tensor cores ")
            spmm_spec = next((s for s in specs if s["op"] == "spmm"), None)
            if spmm_spec is not None:
                a = arguments(spmm_spec, torch.float32, torch.int64)
                y = torch.ops.gnnfuse.spmm(a["rowptr"].to(opts.device), a["col"].to(opts.device), a["edge_weight"].to(opts.device),
                                           a["x"].to(opts.device))
                ref = torch.ops.gnnfuse.spmm(a["rowptr"], a["col"], a["edge_weight"].double(), a["x"].double())
                err = ((y.cpu().double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()
                ok = err <= 4 * 2.0 ** -11
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} tensor cores tf32 spmm: relative error {err:.2e}")
        # seed 004's rows kernel forced (set_cuda_tensor_cores("rows"): mma.m16n8k8 with 16-bit
        # fragments, a trace by shuffles, rows bucketed by degree): the same forms, float16 and bfloat16
        def rows_launches():
            return sum(int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines() if " tensor_cores rows " in l)
        with gnnfuse.backends.cuda_tensor_cores("rows"):
            before = rows_launches()
            for s in specs:
                if s["op"] not in ("spmm", "scaled_spmm", "spmm_heads", "sddmm_heads"):
                    continue
                for dt in ("float16", "bfloat16"):
                    failed += check_op(s, dt, opts.device, "tensor cores (rows) ")
            after = rows_launches()
            ok = after > before
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} tensor cores rows kernel ran: {after - before} launches")
        # auto on a pattern converted anew at every call (a layer's edge_index): the CUDA-core
        # kernels at its first sighting, then its view remembered by contents (a read-back
        # compare on the device), the last call on a side stream; all equal within bfloat16's rounding
        def tc_spmm_launches():
            return sum(int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines()
                       if l.startswith("spmm tensor_cores "))
        rows = torch.arange(4096).repeat_interleave(16)
        cols = (rows // 16) * 16 + torch.arange(16).repeat(4096)
        base_ptr = torch.arange(0, 16 * 4096 + 1, 16)
        xb = torch.randn(4096, 64, dtype=torch.bfloat16, device=opts.device)
        outs, launches = [], []
        for i in range(4):
            fresh = gnnfuse.Graph(base_ptr.to(opts.device).clone(), cols.to(opts.device).clone(), 4096, 4096)
            torch.ops.gnnfuse._cuda_tensor_cores_transient([fresh.col])
            n0 = tc_spmm_launches()
            if i == 3 and opts.device.startswith("cuda"):
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    outs.append(gnnfuse.spmm(fresh, xb))
                torch.cuda.current_stream().wait_stream(side)
            else:
                outs.append(gnnfuse.spmm(fresh, xb))
            launches.append(tc_spmm_launches() - n0)
        ok = launches == [0, 1, 1, 1] and all(torch.allclose(o.float(), outs[0].float(), rtol=2e-2, atol=2e-2) for o in outs)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} tensor cores auto on a recurring per-call pattern: launches {launches}")
        used = [l for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines() if " tensor_cores " in l]
        tested = {s["op"] for s in specs}
        expect = ["spmm", "spmm_grad_x"] + (["spmm_heads", "spmm_heads_grad_x"] if "spmm_heads" in tested else [])
        ok = all(any(l.startswith(k + " tensor_cores") for l in used) for k in expect)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} tensor cores ran: {len(used)} ops")
    if hasattr(torch.ops.gnnfuse, "_cuda_launch_counts"):
        print(torch.ops.gnnfuse._cuda_launch_counts().strip())
        print("graph statistics computed:", torch.ops.gnnfuse._cuda_graph_stats_computed())
    print(f"cuda_ops_smoke: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
