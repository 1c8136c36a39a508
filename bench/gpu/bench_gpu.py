#!/usr/bin/env python3
"""GPU benchmark of gnnfuse's generated CUDA kernels (spmm, sddmm, the fused sddmm_spmm) against
cached cuSPARSE, torch.sparse and PyG-style gather/scatter, through libgf_bench.so (gf_bench.cu,
built by build_bench.sh) and ctypes.

On the GPU machine (plain python3 with torch + CUDA):
    python3 bench/gpu/bench_gpu.py --lib .gpu/libgf_bench.so --graphs-npz .gpu/graphs.npz \
        --out .gpu/result.json --commit <sha> --budget-s 240
Dry run here (the SIMT emulator on CPU tensors, tiny graphs, no cuSPARSE):
    python bench/gpu/bench_gpu.py --emulate --lib <dir>/libgf_bench_emu.so --out /tmp/dry.json
The real graphs' npz (written here, where the datasets are):
    python bench/gpu/bench_gpu.py --export-npz .gpu/graphs.npz

Per graph and feature width F (fp32, int32 indices): each implementation's output is checked
first (outputs poisoned with NaN before the run; ours and the peers against an fp64 reference on
a sample of rows or edges: rel_err = max|got - ref| / max|ref|), then timed with CUDA events:
`ms` is the median over >= 20 repetitions of device time (the stream held back by a sleep kernel
while the repetitions are queued, so host launch costs are hidden), `ms_e2e` the mean of a
synchronous loop including host costs (ctypes, torch dispatch, descriptor creation).
Minimal bytes of SpMM: 4(n+1) rowptr + 4 nnz col + 4 nnz val + 4 m F (X read once) + 4 n F
(Y written); of SDDMM: 4(n+1) + 4 nnz col + 4 n K (U) + 4 m K (V) + 4 nnz (E written); of
the fused op: 4(n+1) + 4 nnz col + 4 n K + 4 m K + 4 m F + 4 n F. GFLOP/s: 2 nnz F (SpMM),
2 nnz K (SDDMM), 2 nnz (K + F) (fused). Where the minimal bytes fit the L2 cache the repetitions
run from L2 (row field l2_resident): the GB/s then exceeds what HBM could give.
"""
from __future__ import annotations

import argparse
import ctypes
import fnmatch
import glob
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# runtime::cuda::Variant codes (csrc/runtime/cuda_launch.h)
ROW_SPLIT, WARP_PER_ROW, POS_SPLIT, POS_SPLIT_ATOMIC, LANES, REG_LANES, POS_LANES, POS_LANES_ATOMIC = range(8)
VARIANT_NAMES = {ROW_SPLIT: "row_split", WARP_PER_ROW: "warp_per_row", POS_SPLIT: "pos_split",
                 POS_SPLIT_ATOMIC: "pos_split_atomic", LANES: "lanes", REG_LANES: "reg_lanes",
                 POS_LANES: "pos_lanes", POS_LANES_ATOMIC: "pos_lanes_atomic"}
# the variants forced one by one besides the row split's group sizes (where the op offers them)
FORCED = (POS_SPLIT, POS_SPLIT_ATOMIC, LANES, REG_LANES, POS_LANES, POS_LANES_ATOMIC)
CUSPARSE_SPMM_ALGS = {0: "ALG_DEFAULT", 1: "CSR_ALG1", 2: "CSR_ALG2", 3: "CSR_ALG3"}
REAL_GRAPHS = ["pubmed", "ca-HepPh", "soc-Slashdot0902", "copter2", "luxembourg_osm"]


# ---------------------------------------------------------------------------- the library

class GfError(RuntimeError):
    pass


class Lib:
    """libgf_bench(.so|_emu.so) through ctypes."""

    def __init__(self, path: str):
        self.path = str(path)
        self.so = ctypes.CDLL(self.path, mode=ctypes.RTLD_GLOBAL)
        c = ctypes
        i64, vp, i32 = c.c_int64, c.c_void_p, c.c_int
        P = c.POINTER
        sig = {
            "gf_last_error": (c.c_char_p, []),
            "gf_is_device": (i32, []),
            "gf_spmm_plan": (i32, [i64, i64, i64, i64, i64, i32, i32, i32, i32, i32, i32, P(i64), P(vp)]),
            "gf_sddmm_plan": (i32, [i64, i64, i64, i64, i64, i32, i32, i32, i32, i32, i32, P(i64), P(vp)]),
            "gf_sddmm_spmm_plan": (i32, [i64, i64, i64, i64, i64, i64, i32, i32, i32, i32, i32, i32, P(i64), P(vp)]),
            "gf_plan_info": (c.c_char_p, [vp]),
            "gf_plan_variant": (c.c_char_p, [vp]),
            "gf_plan_group": (i32, [vp]),
            "gf_plan_vector_width": (i32, [vp]),
            "gf_plan_offered_count": (i32, [vp]),
            "gf_plan_offered": (i32, [vp, i32]),
            "gf_plan_destroy": (None, [vp]),
            "gf_spmm_run": (i32, [vp] * 8),
            "gf_sddmm_run": (i32, [vp] * 9),
            "gf_sddmm_spmm_run": (i32, [vp] * 10),
            "gf_synchronize": (i32, []),
            "gf_cusparse_load": (i32, [c.c_char_p]),
            "gf_cusparse_path": (c.c_char_p, []),
            "gf_cusparse_version": (i32, []),
            "gf_cusparse_spmm_create": (i32, [i64, i64, i64, i64, vp, vp, vp, vp, vp, i32, i32, i32, vp, P(vp)]),
            "gf_cusparse_spmm_run": (i32, [vp, vp]),
            "gf_cusparse_spmm_buffer_bytes": (i64, [vp]),
            "gf_cusparse_spmm_preprocessed": (i32, [vp]),
            "gf_cusparse_spmm_destroy": (None, [vp]),
            "gf_cusparse_sddmm_create": (i32, [i64, i64, i64, i64, vp, vp, vp, vp, vp, i32, i32, vp, P(vp)]),
            "gf_cusparse_sddmm_run": (i32, [vp, vp]),
            "gf_cusparse_sddmm_destroy": (None, [vp]),
        }
        # the hand-written prototypes (gf_bench.cu; absent from older libraries)
        optional = {
            "gf_proto_shape": (i32, [i64, P(i32), P(i32)]),
            "gf_proto_spmm": (i32, [i32, i64, i64, i64, i64, vp, vp, vp, vp, vp, i32, i32, vp]),
        }
        self.has_proto = all(hasattr(self.so, name) for name in optional)
        for name, (res, args) in list(sig.items()) + (list(optional.items()) if self.has_proto else []):
            fn = getattr(self.so, name)
            fn.restype = res
            fn.argtypes = args
            setattr(self, name, fn)

    def check(self, rc: int, what: str):
        if rc != 0:
            raise GfError(f"{what}: {self.gf_last_error().decode(errors='replace')}")


def ptr(t):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


DTYPE_CODE = {torch.float32: 0, torch.float64: 1}
ITYPE_CODE = {torch.int32: 0, torch.int64: 1}


class Workspace:
    """A byte buffer of at least `nbytes`, its start aligned to 256 bytes."""

    def __init__(self, nbytes: int, device):
        self.buf = torch.empty(max(nbytes, 0) + 256, dtype=torch.uint8, device=device)
        self.ptr = ctypes.c_void_p((self.buf.data_ptr() + 255) // 256 * 256)


class Plan:
    """One op's launch decision for one shape (gf_<op>_plan) and its workspace."""

    def __init__(self, lib: Lib, op: str, g: dict, width: int, dtype, itype, force_variant=-1, force_group=0,
                 deterministic=False, weighted=True):
        self.lib, self.op = lib, op
        ws = ctypes.c_int64(0)
        h = ctypes.c_void_p(None)
        common = (g["n"], g["m"])
        tail = (g["nnz"], g["max_row"], DTYPE_CODE[dtype], ITYPE_CODE[itype], int(weighted), force_variant, force_group,
                int(deterministic), ctypes.byref(ws), ctypes.byref(h))
        if op == "spmm":
            rc = lib.gf_spmm_plan(*common, width, *tail)
        elif op == "sddmm":
            rc = lib.gf_sddmm_plan(*common, width, *tail)
        else:
            rc = lib.gf_sddmm_spmm_plan(*common, width, width, *tail)
        lib.check(rc, f"gf_{op}_plan")
        self.h = h
        self.ws_bytes = ws.value
        self.variant = lib.gf_plan_variant(h).decode()
        self.group = lib.gf_plan_group(h)
        self.vw = lib.gf_plan_vector_width(h)
        self.info = lib.gf_plan_info(h).decode()
        self.offered = [lib.gf_plan_offered(h, i) for i in range(lib.gf_plan_offered_count(h))]
        self.ws = Workspace(self.ws_bytes, g["device"])

    def __del__(self):
        try:
            if self.h:
                self.lib.gf_plan_destroy(self.h)
        except Exception:
            pass


def locate_cusparse(lib: Lib, explicit: str | None) -> str:
    """Opens cuSPARSE for the baselines: --cusparse, then the soname (torch has loaded it), then
    libcusparse.so* under the nvidia wheels' folders. Returns the path used."""
    cands = [explicit] if explicit else []
    cands.append(None)  # the sonames, found already loaded
    try:
        import nvidia  # noqa: F401 (the pip CUDA wheels)
        for root in list(getattr(nvidia, "__path__", [])):
            cands += sorted(glob.glob(os.path.join(root, "**", "libcusparse.so*"), recursive=True))
    except ImportError:
        pass
    for p in glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcusparse.so*")):
        cands.append(p)
    errors = []
    for c in cands:
        rc = lib.gf_cusparse_load(c.encode() if c else None)
        if rc == 0:
            return lib.gf_cusparse_path().decode()
        errors.append(lib.gf_last_error().decode(errors="replace"))
    raise GfError("cuSPARSE not found: " + " / ".join(errors))


def loaded_libraries(pattern: str) -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if pattern in line and "/" in line})
    except OSError:
        return []


# ---------------------------------------------------------------------------- graphs

def csr_from_edges(dst: torch.Tensor, src: torch.Tensor, n: int, dedup: bool):
    """CSR of the graph by target rows (row i = target, col j = source), columns sorted."""
    key = dst.to(torch.int64) * n + src.to(torch.int64)
    key = torch.unique(key) if dedup else torch.sort(key).values
    rows = key // n
    col = (key % n).to(torch.int32)
    counts = torch.bincount(rows, minlength=n)
    rowptr = torch.zeros(n + 1, dtype=torch.int64, device=key.device)
    rowptr[1:] = torch.cumsum(counts, 0)
    return rowptr.to(torch.int32), col


def rmat_edges(scale: int, edge_factor: int, device, seed: int = 0, a=0.57, b=0.19, c=0.19):
    """R-MAT (Graph500 parameters by default), generated on `device`; labels permuted."""
    d = 1.0 - a - b - c
    n = 1 << scale
    e = edge_factor * n
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    src = torch.zeros(e, dtype=torch.int64, device=device)
    dst = torch.zeros(e, dtype=torch.int64, device=device)
    p_row1, p_c0, p_c1 = c + d, b / (a + b), d / (c + d)
    for level in range(scale):
        r1 = torch.rand(e, generator=gen, device=device) < p_row1
        u = torch.rand(e, generator=gen, device=device)
        c1 = u < torch.where(r1, torch.tensor(p_c1, device=device), torch.tensor(p_c0, device=device))
        src |= r1.to(torch.int64) << level
        dst |= c1.to(torch.int64) << level
        del r1, u, c1
    perm = torch.randperm(n, generator=gen, device=device)
    return perm[dst], perm[src], n


def finish_graph(name: str, rowptr: torch.Tensor, col: torch.Tensor, n: int, m: int, device, seed: int = 1):
    rowptr = rowptr.to(device=device, dtype=torch.int32).contiguous()
    col = col.to(device=device, dtype=torch.int32).contiguous()
    deg = (rowptr[1:] - rowptr[:-1]).to(torch.int64)
    nnz = int(col.numel())
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    w = (torch.rand(nnz, generator=gen, device=device) + 0.5).to(torch.float32)
    row = torch.repeat_interleave(torch.arange(n, device=device), deg)
    return {"name": name, "n": n, "m": m, "nnz": nnz, "max_row": int(deg.max()) if n else 0,
            "rowptr": rowptr, "col": col, "w": w, "row": row, "deg": deg, "device": device}


def load_npz_graphs(path: str, device, names=None):
    z = np.load(path)
    avail = [str(s) for s in z["names"]]
    for name in names or avail:
        if name not in avail:
            print(f"  {name}: not in {path}", flush=True)
            continue
        n, m = (int(v) for v in z[f"{name}__shape"])
        yield lambda name=name, n=n, m=m: finish_graph(
            name, torch.from_numpy(z[f"{name}__rowptr"]), torch.from_numpy(z[f"{name}__col"]), n, m, device), name


def rmat_graph(scale: int, ef: int, device):
    dst, src, n = rmat_edges(scale, ef, device)
    rowptr, col = csr_from_edges(dst, src, n, dedup=True)
    del dst, src
    return finish_graph(f"rmat-{scale}-{ef}", rowptr, col, n, n, device)


def export_npz(path: str, names: list[str], root: str | None, max_mb: float):
    """Compact CSR arrays of the real graphs (bench/datasets.py's loaders), int32."""
    sys.path.insert(0, str(REPO / "bench"))
    import datasets  # noqa: E402 (bench/datasets.py)

    arrays, kept = {}, []
    for name in names:
        t0 = time.perf_counter()
        ei, n = datasets.load(name, root)
        src, dst = ei[0], ei[1]
        rowptr, col = csr_from_edges(dst, src, n, dedup=False)
        arrays[f"{name}__rowptr"] = rowptr.numpy().astype(np.int32)
        arrays[f"{name}__col"] = col.numpy().astype(np.int32)
        arrays[f"{name}__shape"] = np.array([n, n], dtype=np.int64)
        kept.append(name)
        print(f"  {name:18s} n={n:>9,d} nnz={col.numel():>11,d} max_row={int((rowptr[1:] - rowptr[:-1]).max()):>7,d}"
              f" ({time.perf_counter() - t0:.1f} s)", flush=True)
    arrays["names"] = np.array(kept)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    mb = os.path.getsize(path) / 2**20
    print(f"wrote {path} ({mb:.1f} MiB, {len(kept)} graphs)")
    if mb > max_mb:
        print(f"warning: {path} is over {max_mb} MiB", file=sys.stderr)


# ---------------------------------------------------------------------------- timing

class Timer:
    def __init__(self, device, reps: int, warmup: int):
        self.cuda = device.type == "cuda"
        self.reps, self.warmup = reps, warmup
        self.cycles_per_ms = None
        if self.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)
            torch.cuda.synchronize()
            s.record()
            torch.cuda._sleep(10_000_000)
            e.record()
            torch.cuda.synchronize()
            self.cycles_per_ms = 10_000_000 / max(s.elapsed_time(e), 1e-3)

    def __call__(self, fn):
        """(median device ms, min ms, e2e ms)."""
        if not self.cuda:
            fn()
            t0 = time.perf_counter()
            for _ in range(self.reps):
                fn()
            ms = (time.perf_counter() - t0) * 1e3 / self.reps
            return ms, ms, ms
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        # end to end: a synchronous loop, host costs included; also how long queueing takes
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        h0 = time.perf_counter()
        for _ in range(self.reps):
            fn()
        host_ms = (time.perf_counter() - h0) * 1e3
        e.record()
        torch.cuda.synchronize()
        e2e = s.elapsed_time(e) / self.reps
        # device time: a sleep kernel holds the stream while the repetitions are queued
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        hold_ms = min(2000.0, 1.5 * host_ms + 1.0)
        torch.cuda._sleep(int(hold_ms * self.cycles_per_ms))
        for i in range(self.reps):
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) for a, b in zip(starts, ends)]
        return statistics.median(times), min(times), e2e


# ---------------------------------------------------------------------------- references

def sample_rows(g, k: int, gen):
    n = g["n"]
    if n <= k:
        return torch.arange(n, device=g["device"])
    s = torch.randperm(n, generator=gen, device=g["device"])[:k]
    return torch.unique(torch.cat([s, torch.argmax(g["deg"]).reshape(1)]))


def rows_edges(g, rows):
    """Edge ids of `rows` and the position of each edge's row in `rows`."""
    start = g["rowptr"][rows].to(torch.int64)
    cnt = g["deg"][rows]
    local = torch.repeat_interleave(torch.arange(rows.numel(), device=rows.device), cnt)
    offs = torch.arange(local.numel(), device=rows.device) - torch.repeat_interleave(torch.cumsum(cnt, 0) - cnt, cnt)
    return start[local] + offs, local


def rel_err(got, ref):
    got = got.to(torch.float64)
    if torch.isnan(got).any():
        return float("inf")
    den = ref.abs().max().item()
    return (got - ref).abs().max().item() / (den if den > 0 else 1.0)


def ref_spmm_rows(g, rows, X, val):
    e, local = rows_edges(g, rows)
    msg = X.index_select(0, g["col"][e].to(torch.int64)).to(torch.float64)
    if val is not None:
        msg = msg * val[e].to(torch.float64)[:, None]
    return torch.zeros(rows.numel(), X.shape[1], dtype=torch.float64, device=X.device).index_add_(0, local, msg)


def ref_sddmm_edges(g, e, U, V, val):
    r = U.index_select(0, g["row"][e]).to(torch.float64)
    c = V.index_select(0, g["col"][e].to(torch.int64)).to(torch.float64)
    s = (r * c).sum(1)
    return s * val[e].to(torch.float64) if val is not None else s


def ref_fused_rows(g, rows, U, V, X, val):
    e, local = rows_edges(g, rows)
    s = ref_sddmm_edges(g, e, U, V, val)
    msg = X.index_select(0, g["col"][e].to(torch.int64)).to(torch.float64) * s[:, None]
    return torch.zeros(rows.numel(), X.shape[1], dtype=torch.float64, device=X.device).index_add_(0, local, msg)


# ---------------------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args, lib: Lib, device):
        self.args, self.lib, self.device = args, lib, device
        self.timer = Timer(device, args.reps, args.warmup)
        self.rows: list[dict] = []
        self.meta: dict = {}
        self.t_start = time.monotonic()
        self.stream = (lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)) if device.type == "cuda" \
            else (lambda: ctypes.c_void_p(None))
        self.has_cusparse = False
        self.l2 = 0
        if device.type == "cuda":
            self.l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20))

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t_start)

    def write(self):
        doc = dict(self.meta)
        doc["elapsed_s"] = round(time.monotonic() - self.t_start, 2)
        doc["rows"] = self.rows
        tmp = self.args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, self.args.out)

    def record(self, g, op, impl, width, fn, out_get, ref, poison, flops, nbytes, variant="", group=0, vw=0, note=""):
        """Checks fn's output (poisoned first) against ref, then times it; appends a row. An impl
        that --only-impl leaves out is not run (an empty dict back). With --ncu, a second run
        between cudaProfilerStart / cudaProfilerStop (in an NVTX range named after the impl)
        replaces the timing."""
        if not self.selected(impl):
            return {}
        row = {"graph": g["name"], "n": g["n"], "nnz": g["nnz"], "max_row": g["max_row"], "F": width, "op": op,
               "impl": impl, "variant": variant, "group": group, "vw": vw, "note": note,
               "bytes_min": nbytes, "l2_resident": bool(self.l2 and nbytes < self.l2)}
        if self.left() < 0:  # past the budget: the rest is skipped, the run ends cleanly
            row.update(ok=None, skipped="budget")
            self.rows.append(row)
            return row
        try:
            for t in poison:
                t.fill_(float("nan"))
            fn()
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            row["rel_err"] = rel_err(*ref(out_get()))
            row["ok"] = row["rel_err"] <= self.args.tol
            if self.args.ncu:
                self.profiled_run(g, op, impl, width, fn)
            else:
                ms, ms_min, e2e = self.timer(fn)
                row.update(ms=ms, ms_min=ms_min, ms_e2e=e2e, gflops=flops / ms / 1e6, gbs=nbytes / ms / 1e6)
        except Exception as ex:  # a failing implementation is a row, not the end of the run
            row.update(ok=False, error=f"{type(ex).__name__}: {ex}"[:400])
            if self.device.type == "cuda":
                try:
                    torch.cuda.synchronize()
                except Exception:  # a sticky error (a kernel fault): the context is lost, keep what was measured
                    self.rows.append(row)
                    self.meta["aborted"] = row["error"]
                    self.write()
                    raise
        self.rows.append(row)
        err = row.get("rel_err")
        if "ms" in row:
            msg = f"{row['ms']:9.4f} ms {row['gbs']:8.1f} GB/s"
        elif "error" in row:
            msg = "   FAILED: " + row["error"]
        else:
            msg = "   checked (--ncu: profiled, not timed)"
        print(f"    {op:10s} F={width:<4d} {impl:26s} {variant:17s} err={err if err is None else f'{err:.1e}':8s} {msg}",
              flush=True)
        return row

    def selected(self, impl: str) -> bool:
        pats = self.args.only_impl
        return not pats or any(fnmatch.fnmatchcase(impl, p) for p in pats)

    def profiled_run(self, g, op, impl, width, fn):
        """One run of fn for ncu --profile-from-start off: the device idle before and after."""
        torch.cuda.synchronize()
        label = f"{impl} {g['name']} {op} F={width}"
        try:
            torch.cuda.nvtx.range_push(label)
        except Exception:  # noqa: BLE001 (no NVTX: the order of the kernels tells)
            pass
        torch.cuda.profiler.start()
        fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        try:
            torch.cuda.nvtx.range_pop()
        except Exception:  # noqa: BLE001
            pass
        print(f"    ncu: profiled {label}", flush=True)

    # -------------------------------------------------------------- spmm
    def protos(self, g, F, X, Y, chk, flops, nbytes):
        """The hand-written prototypes (gf_proto_spmm): rowlanes, poslanes/<chunk>, hybrid."""
        a, lib = self.args, self.lib
        if not lib.has_proto or not any(self.selected(x) for x in ("proto:rowlanes", "proto:poslanes/1", "proto:hybrid")):
            return
        grp, reg = ctypes.c_int(0), ctypes.c_int(0)
        if lib.gf_proto_shape(F, ctypes.byref(grp), ctypes.byref(reg)) != 0:
            self.rows.append({"graph": g["name"], "F": F, "op": "spmm", "impl": "proto", "ok": None,
                              "skipped": lib.gf_last_error().decode(errors="replace")})
            print(f"    spmm       F={F:<4d} proto: {self.rows[-1]['skipped']}", flush=True)
            return
        w = g["w"]
        shape = f"G={grp.value} R={reg.value} VW=4"

        def run(kind, chunk, thr, label):
            return lambda: lib.check(lib.gf_proto_spmm(kind, g["n"], g["m"], F, g["nnz"], ptr(g["rowptr"]), ptr(g["col"]), ptr(w),
                                                       ptr(X), ptr(Y), chunk, thr, self.stream()), label)

        self.record(g, "spmm", "proto:rowlanes", F, run(0, 0, 0, "proto:rowlanes"), lambda: Y, chk, [Y], flops, nbytes,
                    "rowlanes", grp.value, 4, shape)
        for c in a.proto_chunks:
            label = f"proto:poslanes/{c}"
            self.record(g, "spmm", label, F, run(1, c, 0, label), lambda: Y, chk, [Y], flops, nbytes, "poslanes", grp.value, 4,
                        f"{shape} chunk={c}")
        t, c = a.proto_hybrid
        self.record(g, "spmm", "proto:hybrid", F, run(2, c, t, "proto:hybrid"), lambda: Y, chk, [Y], flops, nbytes, "hybrid",
                    grp.value, 4, f"{shape} rows <= {t} rowlanes, longer poslanes chunk={c}")

    def spmm(self, g, F, X, gen):
        a, lib, dev = self.args, self.lib, self.device
        n, m, nnz = g["n"], g["m"], g["nnz"]
        w = g["w"]
        rows = sample_rows(g, a.sample_rows, gen)
        ref_val = ref_spmm_rows(g, rows, X, w)
        flops = 2.0 * nnz * F
        nbytes = 4 * (n + 1) + 8 * nnz + 4 * m * F + 4 * n * F
        Y = torch.empty(n, F, dtype=torch.float32, device=dev)
        chk = lambda o: (o[rows], ref_val)  # noqa: E731
        ours_ms = {}

        def ours(label, fv=-1, fg=0, det=False):
            if label != "ours" and not self.selected(label):  # "ours" also gives the offered variants
                return None
            try:
                p = Plan(lib, "spmm", g, F, torch.float32, torch.int32, fv, fg, det)
            except GfError as ex:
                self.rows.append({"graph": g["name"], "F": F, "op": "spmm", "impl": label, "ok": False, "error": str(ex)})
                return None
            run = lambda: lib.check(lib.gf_spmm_run(p.h, ptr(g["rowptr"]), ptr(g["col"]), ptr(w), ptr(X), ptr(Y),  # noqa: E731
                                                    p.ws.ptr, self.stream()), label)
            r = self.record(g, "spmm", label, F, run, lambda: Y, chk, [Y], flops,
                            nbytes, p.variant, p.group, p.vw, p.info)
            if "ms" in r:
                ours_ms[label] = r["ms"]
            return p

        auto = ours("ours")
        ours("ours_det", det=True)
        offered = auto.offered if auto else [ROW_SPLIT]
        if a.variants:
            for grp in (4, 8, 32):
                ours(f"ours:row_split/g{grp}", ROW_SPLIT, grp)
            for v in FORCED:
                if v in offered:
                    ours(f"ours:{VARIANT_NAMES[v]}", v)
        self.protos(g, F, X, Y, chk, flops, nbytes)

        best = None
        if self.has_cusparse:
            Yc = torch.empty(n, F, dtype=torch.float32, device=dev)
            for alg, name in CUSPARSE_SPMM_ALGS.items():
                if not self.selected(f"cusparse:{name}"):
                    continue
                h = ctypes.c_void_p(None)
                rc = lib.gf_cusparse_spmm_create(n, m, F, nnz, ptr(g["rowptr"]), ptr(g["col"]), ptr(w), ptr(X), ptr(Yc), 0, 0,
                                                 alg, self.stream(), ctypes.byref(h))
                if rc != 0:
                    self.rows.append({"graph": g["name"], "F": F, "op": "spmm", "impl": f"cusparse:{name}", "ok": False,
                                      "error": lib.gf_last_error().decode(errors="replace")})
                    print(f"    spmm       F={F:<4d} cusparse:{name} unavailable: {self.rows[-1]['error']}", flush=True)
                    continue
                try:
                    run = lambda h=h, name=name: lib.check(lib.gf_cusparse_spmm_run(h, self.stream()), name)  # noqa: E731
                    note = f"buffer={lib.gf_cusparse_spmm_buffer_bytes(h)} preprocessed={lib.gf_cusparse_spmm_preprocessed(h)}"
                    r = self.record(g, "spmm", f"cusparse:{name}", F, run, lambda: Yc, chk, [Yc],
                                    flops, nbytes, note=note)
                    if r.get("ok") and (best is None or r["ms"] < best["ms"]):
                        best = dict(r, alg=alg)
                finally:
                    lib.gf_cusparse_spmm_destroy(h)
            if best:
                b = dict(best, impl="cusparse_best", note=f"best of the algorithms: {CUSPARSE_SPMM_ALGS[best['alg']]}")
                self.rows.append(b)
            del Yc

        # torch peers: a CSR tensor built once; torch.sparse.mm makes its descriptors per call
        csr = torch.sparse_csr_tensor(g["rowptr"], g["col"], w, size=(n, m))
        self.record(g, "spmm", "torch.sparse.mm", F, lambda: Y.copy_(torch.sparse.mm(csr, X)), lambda: Y,
                    chk, [Y], flops, nbytes)
        if nnz * F * 4 <= a.gather_limit_gb * 2**30:
            row64 = g["row"]
            col64 = g["col"].to(torch.int64)

            def gather_scatter():
                out = torch.zeros(n, F, dtype=X.dtype, device=dev)
                out.index_add_(0, row64, X.index_select(0, col64) * w[:, None])
                Y.copy_(out)

            self.record(g, "spmm", "pyg_gather_scatter", F, gather_scatter, lambda: Y, chk, [Y],
                        flops, nbytes, note="index_select * w, index_add_ (+ a copy into Y)")
        try:
            from torch_geometric.utils import spmm as pyg_spmm
        except Exception:  # noqa: BLE001 (not importable: no row)
            pyg_spmm = None
        if pyg_spmm is not None:
            self.record(g, "spmm", "pyg.utils.spmm", F, lambda: Y.copy_(pyg_spmm(csr, X, reduce="sum")), lambda: Y,
                        chk, [Y], flops, nbytes, note="torch CSR tensor")
        del Y
        return ours_ms, best

    # -------------------------------------------------------------- sddmm
    def sddmm(self, g, K, U, V, gen):
        a, lib, dev = self.args, self.lib, self.device
        n, m, nnz = g["n"], g["m"], g["nnz"]
        k = min(nnz, a.sample_edges)
        e = torch.randperm(nnz, generator=gen, device=dev)[:k] if nnz > k else torch.arange(nnz, device=dev)
        ref_val = ref_sddmm_edges(g, e, U, V, None)
        flops = 2.0 * nnz * K
        nbytes = 4 * (n + 1) + 4 * nnz + 4 * n * K + 4 * m * K + 4 * nnz
        E = torch.empty(nnz, dtype=torch.float32, device=dev)
        chk = lambda o: (o[e], ref_val)  # noqa: E731
        ours_ms = {}

        def ours(label, fv=-1, fg=0):
            try:
                p = Plan(lib, "sddmm", g, K, torch.float32, torch.int32, fv, fg, weighted=False)
            except GfError as ex:
                self.rows.append({"graph": g["name"], "F": K, "op": "sddmm", "impl": label, "ok": False, "error": str(ex)})
                return None
            run = lambda: lib.check(lib.gf_sddmm_run(p.h, ptr(g["rowptr"]), ptr(g["col"]), None, ptr(U), ptr(V), ptr(E),  # noqa: E731
                                                     p.ws.ptr, self.stream()), label)
            r = self.record(g, "sddmm", label, K, run, lambda: E, chk, [E], flops, nbytes, p.variant, p.group, p.vw, p.info)
            if "ms" in r:
                ours_ms[label] = r["ms"]
            return p

        auto = ours("ours")
        if a.variants:
            for grp in (4, 8, 32):
                ours(f"ours:row_split/g{grp}", ROW_SPLIT, grp)
            for v in FORCED:
                if auto and v in auto.offered:
                    ours(f"ours:{VARIANT_NAMES[v]}", v)
        best = None
        if self.has_cusparse:
            Ec = torch.empty(nnz, dtype=torch.float32, device=dev)
            h = ctypes.c_void_p(None)
            rc = lib.gf_cusparse_sddmm_create(n, m, K, nnz, ptr(g["rowptr"]), ptr(g["col"]), ptr(Ec), ptr(U), ptr(V), 0, 0,
                                              self.stream(), ctypes.byref(h))
            if rc != 0:
                err = lib.gf_last_error().decode(errors="replace")
                self.rows.append({"graph": g["name"], "F": K, "op": "sddmm", "impl": "cusparse", "ok": False, "error": err})
                print(f"    sddmm      F={K:<4d} cusparse unavailable: {err}", flush=True)
            else:
                try:
                    run = lambda: lib.check(lib.gf_cusparse_sddmm_run(h, self.stream()), "cusparse sddmm")  # noqa: E731
                    r = self.record(g, "sddmm", "cusparse", K, run, lambda: Ec, chk, [Ec], flops, nbytes)
                    if r.get("ok"):
                        best = dict(r)
                        self.rows.append(dict(r, impl="cusparse_best"))
                finally:
                    lib.gf_cusparse_sddmm_destroy(h)
            del Ec
        pattern = torch.sparse_csr_tensor(g["rowptr"], g["col"], torch.ones(nnz, device=dev), size=(n, m))
        self.record(g, "sddmm", "torch.sampled_addmm", K,
                    lambda: E.copy_(torch.sparse.sampled_addmm(pattern, U, V.t(), beta=0.0).values()), lambda: E, chk, [E],
                    flops, nbytes, note="fresh CSR output per call")
        if nnz * K * 4 * 2 <= a.gather_limit_gb * 2**30:
            row64, col64 = g["row"], g["col"].to(torch.int64)
            self.record(g, "sddmm", "pyg_gather", K,
                        lambda: E.copy_((U.index_select(0, row64) * V.index_select(0, col64)).sum(1)), lambda: E, chk, [E],
                        flops, nbytes, note="(U[row] * V[col]).sum(1)")
        del E
        return ours_ms, best

    # -------------------------------------------------------------- sddmm_spmm (fused attention)
    def fused(self, g, F, U, V, X, gen, spmm_alg):
        a, lib, dev = self.args, self.lib, self.device
        n, m, nnz = g["n"], g["m"], g["nnz"]
        rows = sample_rows(g, a.sample_rows, gen)
        ref_val = ref_fused_rows(g, rows, U, V, X, None)
        K = F
        flops = 2.0 * nnz * (K + F)
        nbytes = 4 * (n + 1) + 4 * nnz + 4 * n * K + 4 * m * K + 4 * m * F + 4 * n * F
        Y = torch.empty(n, F, dtype=torch.float32, device=dev)
        chk = lambda o: (o[rows], ref_val)  # noqa: E731
        rp, cl = ptr(g["rowptr"]), ptr(g["col"])

        def ours(label, fv=-1, fg=0):
            try:
                p = Plan(lib, "sddmm_spmm", g, F, torch.float32, torch.int32, fv, fg, weighted=False)
            except GfError as ex:
                self.rows.append({"graph": g["name"], "F": F, "op": "sddmm_spmm", "impl": label, "ok": False, "error": str(ex)})
                return None
            run = lambda: lib.check(lib.gf_sddmm_spmm_run(p.h, rp, cl, None, ptr(U), ptr(V), ptr(X), ptr(Y), p.ws.ptr,  # noqa: E731
                                                          self.stream()), label)
            self.record(g, "sddmm_spmm", label, F, run, lambda: Y, chk, [Y], flops, nbytes, p.variant, p.group, p.vw, p.info)
            return p

        auto = ours("ours_fused")
        if a.variants:
            for grp in (8, 32):
                ours(f"ours_fused:row_split/g{grp}", ROW_SPLIT, grp)
            for v in FORCED:
                if auto and v in auto.offered:
                    ours(f"ours_fused:{VARIANT_NAMES[v]}", v)
        # unfused: E = sddmm(U, V), then Y = spmm(E, X)
        E = torch.empty(nnz, dtype=torch.float32, device=dev)
        try:
            ps = Plan(lib, "sddmm", g, K, torch.float32, torch.int32, weighted=False)
            pm = Plan(lib, "spmm", g, F, torch.float32, torch.int32)

            def unfused():
                lib.check(lib.gf_sddmm_run(ps.h, rp, cl, None, ptr(U), ptr(V), ptr(E), ps.ws.ptr, self.stream()), "sddmm")
                lib.check(lib.gf_spmm_run(pm.h, rp, cl, ptr(E), ptr(X), ptr(Y), pm.ws.ptr, self.stream()), "spmm")

            self.record(g, "sddmm_spmm", "ours_unfused", F, unfused, lambda: Y, chk, [Y, E], flops, nbytes,
                        f"{ps.variant}+{pm.variant}")
        except GfError as ex:
            self.rows.append({"graph": g["name"], "F": F, "op": "sddmm_spmm", "impl": "ours_unfused", "ok": False, "error": str(ex)})
        if self.has_cusparse:
            hs, hm = ctypes.c_void_p(None), ctypes.c_void_p(None)
            rc = lib.gf_cusparse_sddmm_create(n, m, K, nnz, rp, cl, ptr(E), ptr(U), ptr(V), 0, 0, self.stream(), ctypes.byref(hs))
            if rc == 0:
                rc = lib.gf_cusparse_spmm_create(n, m, F, nnz, rp, cl, ptr(E), ptr(X), ptr(Y), 0, 0, spmm_alg, self.stream(),
                                                 ctypes.byref(hm))
            if rc != 0:
                err = lib.gf_last_error().decode(errors="replace")
                self.rows.append({"graph": g["name"], "F": F, "op": "sddmm_spmm", "impl": "cusparse_unfused", "ok": False,
                                  "error": err})
            else:
                def cs_unfused():
                    lib.check(lib.gf_cusparse_sddmm_run(hs, self.stream()), "cusparse sddmm")
                    lib.check(lib.gf_cusparse_spmm_run(hm, self.stream()), "cusparse spmm")

                r = self.record(g, "sddmm_spmm", "cusparse_unfused", F, cs_unfused, lambda: Y, chk, [Y, E], flops, nbytes,
                                note=f"SDDMM + SpMM {CUSPARSE_SPMM_ALGS[spmm_alg]}")
                if r.get("ok"):
                    self.rows.append(dict(r, impl="cusparse_best"))
            if hs:
                lib.gf_cusparse_sddmm_destroy(hs)
            if hm:
                lib.gf_cusparse_spmm_destroy(hm)
        pattern = torch.sparse_csr_tensor(g["rowptr"], g["col"], torch.ones(nnz, device=dev), size=(n, m))
        self.record(g, "sddmm_spmm", "torch_unfused", F,
                    lambda: Y.copy_(torch.sparse.mm(torch.sparse.sampled_addmm(pattern, U, V.t(), beta=0.0), X)), lambda: Y,
                    chk, [Y], flops, nbytes, note="sampled_addmm then sparse.mm")
        del E, Y

    # -------------------------------------------------------------- one graph
    def graph(self, g):
        a, dev = self.args, self.device
        gen = torch.Generator(device=dev)
        gen.manual_seed(7)
        print(f"  {g['name']}: n={g['n']:,} nnz={g['nnz']:,} max_row={g['max_row']:,}", flush=True)
        for F in a.F:
            if self.left() < a.reserve_s:
                print(f"  budget: skipping F={F} and after on {g['name']}", flush=True)
                self.meta.setdefault("skipped", []).append(f"{g['name']} F>={F}")
                return False
            X = torch.randn(g["m"], F, generator=gen, device=dev)
            ours_ms, best = self.spmm(g, F, X, gen)
            alg = best["alg"] if best else 0
            self.write()
            if "sddmm" in a.ops and self.left() > a.reserve_s:
                U = torch.randn(g["n"], F, generator=gen, device=dev)
                V = torch.randn(g["m"], F, generator=gen, device=dev)
                s_ms, _ = self.sddmm(g, F, U, V, gen)
                if "ours" in s_ms and "ours" in ours_ms:
                    self.rows.append({"graph": g["name"], "n": g["n"], "nnz": g["nnz"], "F": F, "op": "ratio",
                                      "impl": "sddmm/spmm", "ratio": s_ms["ours"] / ours_ms["ours"]})
                if "sddmm_spmm" in a.ops and self.left() > a.reserve_s:
                    self.fused(g, F, U, V, X, gen, alg)
                del U, V
            del X
            self.write()
        return True

    def copy_bandwidth(self):
        if self.device.type != "cuda":
            return None
        nb = self.args.copy_mb * 2**20
        src = torch.empty(nb // 4, dtype=torch.float32, device=self.device).uniform_()
        dst = torch.empty_like(src)
        ms, _, _ = self.timer(lambda: dst.copy_(src))
        del src, dst
        return 2 * nb / ms / 1e6  # GB/s, bytes read + written


def summary(rows):
    """Geomean and min of ours / cached cuSPARSE best per op (speedup > 1: ours faster)."""
    out = {}
    for op in ("spmm", "sddmm", "sddmm_spmm"):
        ours_impl = "ours_fused" if op == "sddmm_spmm" else "ours"
        ours = {(r["graph"], r["F"]): r["ms"] for r in rows if r.get("op") == op and r.get("impl") == ours_impl and "ms" in r}
        cs = {(r["graph"], r["F"]): r["ms"] for r in rows if r.get("op") == op and r.get("impl") == "cusparse_best" and "ms" in r}
        sp = [cs[k] / ours[k] for k in ours if k in cs]
        if sp:
            worst = min(ours, key=lambda k: cs[k] / ours[k] if k in cs else math.inf)
            out[op] = {"geomean_speedup_vs_cusparse": math.exp(sum(map(math.log, sp)) / len(sp)), "min_speedup": min(sp),
                       "min_at": f"{worst[0]} F={worst[1]}", "cases": len(sp)}
    # the hand-written prototypes: the fastest proto:* per (graph, F) against cuSPARSE's best
    proto = {}
    for r in rows:
        if r.get("op") == "spmm" and r.get("impl", "").startswith("proto:") and "ms" in r and r.get("ok"):
            k = (r["graph"], r["F"])
            if k not in proto or r["ms"] < proto[k][0]:
                proto[k] = (r["ms"], r["impl"])
    cs = {(r["graph"], r["F"]): r["ms"] for r in rows if r.get("op") == "spmm" and r.get("impl") == "cusparse_best" and "ms" in r}
    sp = [cs[k] / proto[k][0] for k in proto if k in cs]
    if sp:
        wins = {}
        for k in proto:
            wins[proto[k][1]] = wins.get(proto[k][1], 0) + 1
        out["spmm_best_proto"] = {"geomean_speedup_vs_cusparse": math.exp(sum(map(math.log, sp)) / len(sp)),
                                  "min_speedup": min(sp), "cases": len(sp), "fastest_counts": wins}
    ratios = [r["ratio"] for r in rows if r.get("op") == "ratio"]
    if ratios:
        out["sddmm_over_spmm_ours"] = {"geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)), "cases": len(ratios)}
    out["failures"] = sum(1 for r in rows if r.get("ok") is False)
    out["wrong"] = sum(1 for r in rows if "rel_err" in r and r.get("ok") is False)
    return out


def print_table(rows, summ):
    print("\n== speedup of ours vs cached cuSPARSE (best algorithm); ms")
    print(f"{'graph':20s} {'F':>4s} {'op':11s} {'ours':>9s} {'cusparse':>9s} {'speedup':>8s} {'torch':>9s} {'ours variant':24s}"
          f" {'best proto':>10s} {'speedup':>8s}")
    by = {}
    for r in rows:
        if "ms" in r:
            by[(r["graph"], r["F"], r["op"], r["impl"])] = r
    keys = sorted({(r["graph"], r["F"], r["op"]) for r in rows
                   if r.get("op") in ("spmm", "sddmm", "sddmm_spmm") and not r.get("impl", "").startswith("typecheck")},
                  key=lambda k: (k[0], k[2], k[1]))
    for gname, F, op in keys:
        o = by.get((gname, F, op, "ours_fused" if op == "sddmm_spmm" else "ours"))
        c = by.get((gname, F, op, "cusparse_best"))
        t = by.get((gname, F, op, {"spmm": "torch.sparse.mm", "sddmm": "torch.sampled_addmm"}.get(op, "torch_unfused")))
        f = lambda x: f"{x['ms']:9.4f}" if x else f"{'-':>9s}"  # noqa: E731
        sp = f"{c['ms'] / o['ms']:8.2f}" if (o and c) else f"{'-':>8s}"
        var = f"{o['variant']}/g{o['group']}/vw{o['vw']}" if o else ""
        protos = [r for (g2, F2, op2, impl), r in by.items()
                  if (g2, F2, op2) == (gname, F, op) and impl.startswith("proto:") and r.get("ok")]
        p = min(protos, key=lambda r: r["ms"]) if protos else None
        psp = f"{c['ms'] / p['ms']:8.2f}" if (p and c) else f"{'-':>8s}"
        ptxt = f" {p['ms']:10.4f} {psp} {p['impl']}" if p else ""
        print(f"{gname:20s} {F:4d} {op:11s} {f(o)} {f(c)} {sp} {f(t)} {var:24s}{ptxt}")
    print("\n== summary")
    print(json.dumps(summ, indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=None, help="libgf_bench.so (default .gpu/libgf_bench.so; --emulate: .gpu/libgf_bench_emu.so)")
    ap.add_argument("--graphs-npz", default=None,
                    help="real graphs as CSR arrays (--export-npz writes it; default .gpu/graphs.npz where it exists)")
    ap.add_argument("--graphs", default=None, help="comma-separated names from the npz (default all)")
    ap.add_argument("--rmat", default=None, help="R-MAT scales generated on the device, e.g. 20,22 (default 20,22; --emulate: 7)")
    ap.add_argument("--rmat-ef", type=int, default=16)
    ap.add_argument("--F", default=None, help="feature widths (default 32,64,128,256; --emulate: 8,32)")
    ap.add_argument("--ops", default="spmm,sddmm,sddmm_spmm")
    ap.add_argument("--no-variants", dest="variants", action="store_false", help="only ours' automatic choice")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-4, help="rel_err above it marks a row not ok")
    ap.add_argument("--sample-rows", type=int, default=4096)
    ap.add_argument("--sample-edges", type=int, default=1 << 16)
    ap.add_argument("--gather-limit-gb", type=float, default=8.0, help="skip gather/scatter peers whose temporary is bigger")
    ap.add_argument("--max-nnz", type=int, default=None, help="skip graphs with more entries (--emulate default 30000)")
    ap.add_argument("--copy-mb", type=int, default=1024)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--reserve-s", type=float, default=None, help="stop starting new work when less is left (default 8%% of the budget)")
    ap.add_argument("--out", default=None, help="result JSON (rewritten after every graph and F)")
    ap.add_argument("--commit", default="", help="the git commit measured (default: git rev-parse HEAD of the repo)")
    ap.add_argument("--cusparse", default=None, help="libcusparse.so path (default: found, see locate_cusparse)")
    ap.add_argument("--emulate", action="store_true", help="the emulated library on CPU tensors (dry run)")
    ap.add_argument("--only-impl", default=None,
                    help="comma-separated impl labels or fnmatch patterns to run (e.g. 'ours:pos_split_atomic,proto:*,"
                         "cusparse:CSR_ALG2'); the others are not run")
    ap.add_argument("--proto-chunks", default="128,512,2048", help="chunk sizes of proto:poslanes (nonzeros per lane group)")
    ap.add_argument("--proto-hybrid", default="256,512", help="proto:hybrid's T,chunk: rows of length <= T by rowlanes")
    ap.add_argument("--ncu", action="store_true",
                    help="for ncu --profile-from-start off: each implementation checked, then run once between "
                         "cudaProfilerStart/Stop; no timing")
    ap.add_argument("--export-npz", default=None, help="write the real graphs' npz and exit")
    ap.add_argument("--export-graphs", default=",".join(REAL_GRAPHS))
    ap.add_argument("--datasets-root", default=None)
    a = ap.parse_args(argv)

    if a.export_npz:
        export_npz(a.export_npz, a.export_graphs.split(","), a.datasets_root, 25.0)
        return 0
    gpu_dir = REPO / ".gpu"
    a.lib = a.lib or str(gpu_dir / ("libgf_bench_emu.so" if a.emulate else "libgf_bench.so"))
    if a.graphs_npz is None and not a.emulate and (gpu_dir / "graphs.npz").exists():
        a.graphs_npz = str(gpu_dir / "graphs.npz")
    if not a.commit:
        try:
            import subprocess
            a.commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                      timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001 (no git there)
            a.commit = ""
    a.out = a.out or str(gpu_dir / ("dry_run.json" if a.emulate else "result.json"))
    a.F = [int(x) for x in (a.F or ("8,32" if a.emulate else "32,64,128,256")).split(",")]
    a.ops = set(a.ops.split(","))
    a.only_impl = [x for x in a.only_impl.split(",") if x] if a.only_impl else None
    a.proto_chunks = [int(x) for x in a.proto_chunks.split(",") if x]
    a.proto_hybrid = tuple(int(x) for x in a.proto_hybrid.split(","))
    if len(a.proto_hybrid) != 2:
        ap.error("--proto-hybrid is T,chunk")
    if a.ncu and a.emulate:
        ap.error("--ncu needs the device")
    rmat = a.rmat if a.rmat is not None else ("7" if a.emulate else "20,22")
    a.rmat = [int(x) for x in rmat.split(",") if x]
    if a.emulate:
        a.max_nnz = a.max_nnz or 30000
        a.reps = min(a.reps, 2)
        a.warmup = 0
    a.reserve_s = a.reserve_s if a.reserve_s is not None else 0.08 * a.budget_s
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)

    if a.emulate:
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("bench_gpu.py: no CUDA device (use --emulate for the dry run)", file=sys.stderr)
            return 2
        device = torch.device("cuda")
        torch.cuda.init()
    torch.manual_seed(0)
    lib = Lib(a.lib)
    if bool(lib.gf_is_device()) == a.emulate:
        print(f"bench_gpu.py: {a.lib} is the {'device' if lib.gf_is_device() else 'emulated'} library", file=sys.stderr)
        return 2
    b = Bench(a, lib, device)
    b.meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"SIMT emulator ({platform.machine()})",
              "torch": torch.__version__, "cuda": torch.version.cuda, "commit": a.commit, "lib": a.lib,
              "python": platform.python_version(), "argv": sys.argv[1:], "reps": a.reps, "warmup": a.warmup,
              "l2_bytes": b.l2, "tol": a.tol,
              "bytes_formula": {"spmm": "4(n+1) + 8 nnz + 4 m F + 4 n F", "sddmm": "4(n+1) + 8 nnz + 4 n K + 4 m K",
                                "sddmm_spmm": "4(n+1) + 4 nnz + 4 n K + 4 m K + 4 m F + 4 n F (K = F)"},
              "flops_formula": {"spmm": "2 nnz F", "sddmm": "2 nnz K", "sddmm_spmm": "2 nnz (K + F)"}}
    if device.type == "cuda":
        try:
            b.meta["cusparse_path"] = locate_cusparse(lib, a.cusparse)
            b.meta["cusparse_version"] = lib.gf_cusparse_version()
            b.meta["cusparse_loaded"] = loaded_libraries("libcusparse")
            b.has_cusparse = True
        except GfError as ex:
            b.meta["cusparse_error"] = str(ex)
            print(f"warning: {ex}; the cuSPARSE baselines are skipped", file=sys.stderr)
        b.meta["copy_gbs"] = b.copy_bandwidth()
        print(f"device {b.meta['device']}, copy bandwidth {b.meta['copy_gbs']:.0f} GB/s (read + written), "
              f"cuSPARSE {b.meta.get('cusparse_version')} from {b.meta.get('cusparse_path')}", flush=True)
    b.write()

    # the graphs: the npz's real graphs, then R-MAT made on the device
    sources = []
    if a.graphs_npz:
        names = a.graphs.split(",") if a.graphs else None
        sources += list(load_npz_graphs(a.graphs_npz, device, names))
    for s in a.rmat:
        sources.append((lambda s=s: rmat_graph(s, a.rmat_ef, device), f"rmat-{s}-{a.rmat_ef}"))
    if a.emulate and not a.graphs_npz:
        sources.append((lambda: skewed_graph(device), "skewed-tiny"))
    for make, name in sources:
        if b.left() < a.reserve_s:
            print(f"budget: skipping {name}", flush=True)
            b.meta.setdefault("skipped", []).append(name)
            continue
        t0 = time.monotonic()
        g = make()
        if a.max_nnz and g["nnz"] > a.max_nnz:
            print(f"  {name}: nnz {g['nnz']:,} over --max-nnz, skipped", flush=True)
            continue
        b.meta.setdefault("graph_prep_s", {})[name] = round(time.monotonic() - t0, 2)
        if a.emulate and name == sources[0][1]:
            type_checks(b, g)
        b.graph(g)
        del g
        if device.type == "cuda":
            torch.cuda.empty_cache()
        b.write()
    summ = summary(b.rows)
    b.meta["summary"] = summ
    b.write()
    print_table(b.rows, summ)
    print(f"wrote {a.out} ({len(b.rows)} rows, {time.monotonic() - b.t_start:.0f} s)")
    return 0


def skewed_graph(device):
    """A tiny graph with empty rows and one long row (the emulated dry run)."""
    gen = torch.Generator().manual_seed(3)
    n = 300
    deg = torch.randint(0, 6, (n,), generator=gen)
    deg[::7] = 0
    deg[5] = 250
    col = torch.cat([torch.sort(torch.randperm(n, generator=gen)[: int(d)]).values for d in deg]).to(torch.int32)
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(deg, 0)
    return finish_graph("skewed-tiny", rowptr, col, n, n, device)


def type_checks(b: Bench, g):
    """spmm through the API's other dtype and index codes (float64, int64), correctness only."""
    lib, dev = b.lib, b.device
    for dt, it in ((torch.float64, torch.int32), (torch.float32, torch.int64), (torch.float64, torch.int64)):
        X = torch.randn(g["m"], 5, dtype=dt, device=dev)
        Y = torch.full((g["n"], 5), float("nan"), dtype=dt, device=dev)
        w = g["w"].to(dt)
        rowptr, col = g["rowptr"].to(it), g["col"].to(it)  # kept alive across the call
        p = Plan(lib, "spmm", g, 5, dt, it)
        lib.check(lib.gf_spmm_run(p.h, ptr(rowptr), ptr(col), ptr(w), ptr(X), ptr(Y), p.ws.ptr, b.stream()), "type check")
        rows = torch.arange(g["n"], device=dev)
        err = rel_err(Y, ref_spmm_rows(g, rows, X, w))
        ok = err <= (1e-12 if dt == torch.float64 else 1e-5)
        b.rows.append({"graph": g["name"], "F": 5, "op": "spmm", "impl": f"typecheck:{dt}/{it}", "variant": p.variant,
                       "rel_err": err, "ok": ok})
        print(f"    type check spmm {dt}/{it}: {p.variant} err={err:.1e} {'ok' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
