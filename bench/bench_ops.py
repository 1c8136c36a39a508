#!/usr/bin/env python3
"""CPU benchmark of the gnnfuse operators against plain PyTorch baselines.

For every graph and feature width F (float32, or --dtype bfloat16/float16) it times

  spmm        Y = A X, edge weights w           gnnfuse | torch.sparse.mm | index_add_
  spmm_unw    Y = A X, no weights (w = 1)       gnnfuse | torch.sparse.mm (values 1) | index_add_
  sddmm       s_e = u_i . v_j on A's pattern    gnnfuse | gather (u[dst]*v[src]).sum(-1) | torch.sparse.sampled_addmm
  sddmm_spmm  Y_i = sum_j (u_i . v_j) x_j       gnnfuse (fused) | gather sddmm + sparse.mm | sampled_addmm + sparse.mm

and, where installed (built from their PyPI sources, e.g. in a separate venv with gnnfuse on
PYTHONPATH), torch_sparse's SparseTensor matmul and torch_scatter's segment_csr for spmm/spmm_unw,
after checking every implementation against a float64 reference. See bench/README.md
for the traffic model behind the GB/s and floor columns.

  python bench/bench_ops.py                       # full run (all graphs, F = 32, 128)
  python bench/bench_ops.py --quick               # small smoke run
  python bench/bench_ops.py --graphs cora,pubmed --features 64 --threads 1
  python bench/bench_ops.py --dtype bfloat16      # PyTorch peers without a bf16 kernel skipped,
                                                  # their float32 versions timed instead
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import datasets  # noqa: E402  (bench/datasets.py)

# torch warns that sparse CSR support is "beta" on every construction
warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")

OPS = ["spmm", "spmm_unw", "sddmm", "sddmm_spmm"]
FLOPS_PER_EDGE_FEATURE = {"spmm": 2, "spmm_unw": 2, "sddmm": 2, "sddmm_spmm": 4}
# The PyTorch baselines gather E x F temporaries; they run over edge chunks so that
# R-MAT at F=128 fits in memory. index_add_ has a per-call cost proportional to the
# output, so it gets big chunks (512 MiB); the gather SDDMM gets 16 MiB chunks, which
# glibc recycles instead of page-faulting fresh memory on every chunk (3-10x faster).
CHUNK_ELEMS_INDEX_ADD = 1 << 27
CHUNK_ELEMS_GATHER = 1 << 22
RTOL, ATOL = 2e-4, 1e-6      # |out - ref| <= RTOL * (same op on |inputs|) + ATOL, see check()
# --dtype: the inputs are generated in float32 and rounded once to the dtype, so every
# implementation (and the float64 reference) sees the same values. Reduced precisions get a
# bound loose enough for peers that also accumulate in the dtype (torch_sparse's bfloat16 SpMM
# misses 2^-6 on PubMed); gnnfuse accumulates in float32, its own error ratio is in the JSON
# (check_max_err_over_scale) next to theirs.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOLERANCES = {torch.float32: (RTOL, ATOL), torch.bfloat16: (6e-2, 1e-3), torch.float16: (1e-2, 1e-3)}
CHECK_ROWS = 20000           # graphs with more rows are checked on a random row sample


class CheckFailed(RuntimeError):
    pass


# ----------------------------------------------------------------------------
# gnnfuse import


def import_gnnfuse():
    """Return (module, None) or (None, reason). Tries the installed package, then <repo>/python."""
    try:
        import gnnfuse  # noqa: F401
        return gnnfuse, None
    except Exception as first:  # ImportError, or OSError from a bad .so
        pkg = REPO_ROOT / "python"
        if str(pkg) in sys.path:
            return None, f"{type(first).__name__}: {first}"
        sys.path.insert(0, str(pkg))
        for k in [m for m in sys.modules if m == "gnnfuse" or m.startswith("gnnfuse.")]:
            del sys.modules[k]
        try:
            import gnnfuse  # noqa: F401,F811
            return gnnfuse, None
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"


# ----------------------------------------------------------------------------
# machine information


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit():
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def machine_tag() -> str:
    """Vendor and family of the CPU and its core count, e.g. intel-xeon-2c, amd-epyc-2c (the names
    of the committed result files)."""
    words = re.sub(r"\((r|tm)\)", " ", cpu_model().lower()).split()
    m = re.sub(r"[^a-z0-9]+", "-", " ".join(words[:2])).strip("-") or "cpu"
    return f"{m}-{os.cpu_count()}c"


def cpu_busy_fraction(seconds: float = 1.0):
    """Fraction of all CPU time used (by anyone) over `seconds`, from /proc/stat; None if unavailable.

    Called while this process sleeps, it measures what other processes take.
    """
    def snap():
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return idle, sum(vals[:8])
    try:
        i0, t0 = snap()
        time.sleep(seconds)
        i1, t1 = snap()
        return 1.0 - (i1 - i0) / max(1, t1 - t0)
    except (OSError, ValueError, IndexError):
        return None


def stream_copy_bandwidth(mib: int = 512, reps: int = 10):
    """STREAM-like copy y.copy_(x) of two `mib`-MiB float32 tensors: bytes = read + write.

    Returns (median GB/s, best GB/s). Uses the current torch thread count.
    """
    n = mib * (1 << 20) // 4
    x = torch.rand(n)
    y = torch.empty_like(x)
    y.copy_(x)  # first touch
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        y.copy_(x)
        ts.append(time.perf_counter() - t0)
    nbytes = 2 * n * 4
    return nbytes / statistics.median(ts) / 1e9, nbytes / min(ts) / 1e9


# ----------------------------------------------------------------------------
# peak memory of one call (Linux: reset VmHWM through /proc/self/clear_refs)


def _vm_kib(field: str):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def _glibc(name):
    """A glibc malloc tuning function, or None (other libc / not Linux)."""
    try:
        import ctypes
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _glibc("malloc_trim")


def call_with_peak(fn):
    """Call fn once; return (its output, peak resident memory above the level before the
    call in MiB, or None where /proc/self/clear_refs is unsupported).

    Counts the output and every temporary that touched fresh pages; memory the
    allocator recycles from earlier frees is invisible, so small values are noise.
    """
    # Make the call's memory visible in VmHWM: hand free heap memory back to the OS
    # first (otherwise glibc recycles resident pages unseen). Blocks above glibc's
    # mmap threshold are fresh pages anyway. No mallopt: that would freeze glibc's
    # dynamic thresholds and change the timings that follow.
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _vm_kib("VmRSS")
    except OSError:
        return fn(), None
    out = fn()
    peak = _vm_kib("VmHWM")
    return out, max(0.0, (peak - before) / 1024.0)


# ----------------------------------------------------------------------------
# timing


class Timed:
    """Timing state of one implementation (see time_interleaved)."""

    def __init__(self, fn, min_time, min_reps, max_reps, first_call_s=None, budget_s=float("inf"),
                 block_time=0.005, floor_reps=3):
        if first_call_s is None or first_call_s < 1.0:  # warm-up (cheap unless the op is slow)
            t0 = time.perf_counter()
            fn()
            first_call_s = time.perf_counter() - t0
        single = first_call_s
        # tiny ops: loop `inner` calls per block so that a block lasts >= block_time
        self.inner = 1 if single >= block_time else max(1, min(10000, int(block_time / max(single, 1e-7))))
        if single * min_reps > budget_s:  # very slow: fewer blocks, but at least floor_reps
            min_reps = max(floor_reps, int(budget_s / single))
            max_reps = min(max_reps, min_reps)
        self.fn, self.min_time, self.min_reps, self.max_reps = fn, min_time, min_reps, max_reps
        self.samples, self.spent = [], 0.0

    def done(self):
        n = len(self.samples)
        return n >= self.max_reps or (n >= self.min_reps and self.spent >= self.min_time)

    def block(self):
        fn = self.fn
        t0 = time.perf_counter()
        for _ in range(self.inner):
            fn()
        dt = time.perf_counter() - t0
        self.spent += dt
        self.samples.append(dt / self.inner)

    @property
    def median(self):
        return statistics.median(self.samples)


def time_interleaved(timers):
    """Run timing blocks round-robin over the implementations of one op until each is done.

    Each implementation repeats blocks until both its `min_reps` blocks and `min_time`
    seconds are reached (at most `max_reps`); interleaving makes slow phases of a shared
    machine hit every implementation alike instead of whichever ran at the time.
    """
    while True:
        active = [t for t in timers if not t.done()]
        if not active:
            return
        for t in active:
            t.block()


def iqr(xs):
    if len(xs) < 4:
        return max(xs) - min(xs)
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


# ----------------------------------------------------------------------------
# graph preparation


class Prepared:
    """CSR (rows = targets, sorted sources) built here, independently of gnnfuse."""

    def __init__(self, edge_index: torch.Tensor, n: int, index_dtype: torch.dtype):
        src, dst = edge_index[0], edge_index[1]
        self.n = n
        self.e = int(src.numel())
        perm = torch.sort(dst * n + src, stable=True).indices
        col64 = src[perm]
        deg = torch.bincount(dst, minlength=n)
        rowptr64 = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(deg, 0, out=rowptr64[1:])
        self.deg = deg
        self.rowptr64, self.col64 = rowptr64, col64
        self.row64 = torch.repeat_interleave(torch.arange(n), deg)  # target of each CSR position
        self.rowptr = rowptr64.to(index_dtype)
        self.col = col64.to(index_dtype)
        self.index_dtype = index_dtype
        self.edge_index_csr_input = edge_index.to(index_dtype)
        self.n_src_used = int((torch.bincount(col64, minlength=n) > 0).sum())  # distinct sources
        self.n_dst_used = int((deg > 0).sum())                                 # non-empty rows
        del perm

    def csr_tensor(self, values: torch.Tensor) -> torch.Tensor:
        return torch.sparse_csr_tensor(self.rowptr, self.col, values, (self.n, self.n),
                                       check_invariants=False)


def check_rows(p: Prepared, seed: int) -> torch.Tensor:
    """All rows of small graphs; else a random sample plus the 16 highest-degree rows."""
    if p.n <= CHECK_ROWS:
        return torch.arange(p.n)
    g = torch.Generator().manual_seed(seed + 17)
    rows = torch.randperm(p.n, generator=g)[:CHECK_ROWS]
    top = torch.topk(p.deg, min(16, p.n)).indices
    return torch.unique(torch.cat([rows, top]))


class Reference:
    """float64 reference of every op on a subset of rows, straight from the definitions."""

    def __init__(self, p: Prepared, rows: torch.Tensor):
        cnt = p.deg[rows]
        starts = p.rowptr64[rows]
        ends_excl = torch.cumsum(cnt, 0)
        total = int(ends_excl[-1]) if rows.numel() else 0
        self.local = torch.repeat_interleave(torch.arange(rows.numel()), cnt)   # row slot of each edge
        offs = torch.arange(total) - torch.repeat_interleave(ends_excl - cnt, cnt)
        self.pos = torch.repeat_interleave(starts, cnt) + offs                  # CSR positions checked
        self.rows = rows
        self.i = rows[self.local]
        self.j = p.col64[self.pos]

    def _rowsum(self, per_edge):  # per_edge: [P, F] -> [rows, F]
        out = torch.zeros((self.rows.numel(),) + per_edge.shape[1:], dtype=per_edge.dtype)
        return out.index_add_(0, self.local, per_edge)

    def spmm(self, x, w):
        msg = x[self.j].double()
        if w is not None:
            msg = msg * w[self.pos].double()[:, None]
        return self._rowsum(msg)

    def sddmm(self, u, v, w):
        s = (u[self.i].double() * v[self.j].double()).sum(-1)
        return s if w is None else s * w[self.pos].double()

    def sddmm_spmm(self, u, v, x, w):
        s = self.sddmm(u, v, w)
        return self._rowsum(s[:, None] * x[self.j].double())


def check(name, out, ref_fn, args, pick, expect_shape, cache, expect_dtype=torch.float32):
    """Compare out (float32) with the float64 reference, with the reference on |inputs| as error scale.

    The bound |out - ref| <= RTOL * ref(|inputs|) + ATOL is relative to the sum of the
    absolute values of the terms, which is what float32 rounding error scales with.
    Returns the largest error / scale ratio seen.
    """
    if tuple(out.shape) != tuple(expect_shape):
        raise CheckFailed(f"{name}: shape {tuple(out.shape)}, expected {tuple(expect_shape)}")
    if out.dtype != expect_dtype:
        raise CheckFailed(f"{name}: dtype {out.dtype}, expected {expect_dtype}")
    rtol, atol = TOLERANCES[expect_dtype]
    if not cache:  # computed once per op and F, shared by its implementations
        cache.append(ref_fn(*args))
        cache.append(ref_fn(*[None if a is None else a.abs() for a in args]))
    ref, scale = cache
    got = pick(out).double()
    err = (got - ref).abs()
    bad = ~(err <= rtol * scale + atol)  # also catches NaN
    rel = (err / (scale + atol)).nan_to_num(nan=float("inf"))
    ratio = float(rel.max()) if err.numel() else 0.0
    if bool(bad.any()):
        k = int(rel.flatten().argmax())
        raise CheckFailed(f"{name}: {int(bad.sum())} of {bad.numel()} checked values wrong; worst at flat index "
                          f"{k}: got {float(got.flatten()[k]):.9g}, reference {float(ref.flatten()[k]):.9g} "
                          f"(error scale {float(scale.flatten()[k]):.3g}, err/scale {ratio:.3g} > rtol {rtol})")
    return ratio


# ----------------------------------------------------------------------------
# PyTorch baselines


def optional_spmm_peers(p, x, w):
    """PyG's compiled backends where installed (built from their PyPI sources): torch_sparse's
    SparseTensor matmul (CSR SpMM, what PyG's layers run on a SparseTensor adjacency) and
    torch_scatter's segment_csr over gathered messages (PyG's message passing with
    torch_scatter). Keys end in [w] (weighted) or [1] (unweighted)."""
    peers = {}
    try:
        import torch_sparse
    except ImportError:
        torch_sparse = None
    try:
        import torch_scatter
    except ImportError:
        torch_scatter = None
    rowptr, col = p.rowptr64, p.col64
    if torch_sparse is not None:
        a_w = torch_sparse.SparseTensor(rowptr=rowptr, col=col, value=w, sparse_sizes=(p.n, p.n), is_sorted=True, trust_data=True)
        a_1 = torch_sparse.SparseTensor(rowptr=rowptr, col=col, sparse_sizes=(p.n, p.n), is_sorted=True, trust_data=True)
        peers["torch_sparse matmul[w]"] = lambda: torch_sparse.matmul(a_w, x, reduce="sum")
        peers["torch_sparse matmul[1]"] = lambda: torch_sparse.matmul(a_1, x, reduce="sum")
    if torch_scatter is not None:
        peers["torch_scatter segment_csr[w]"] = lambda: torch_scatter.segment_csr(x[col] * w[:, None], rowptr, reduce="sum")
        peers["torch_scatter segment_csr[1]"] = lambda: torch_scatter.segment_csr(x[col], rowptr, reduce="sum")
    return peers


def make_baselines(p: Prepared):
    src, dst, n, e = p.col64, p.row64, p.n, p.e

    def chunks(width, elems):
        step = max(1, elems // max(1, width))
        return [(s, min(e, s + step)) for s in range(0, e, step)]

    def index_add_spmm(x, w):
        out = x.new_zeros(n, x.size(1))
        for s, t in chunks(x.size(1), CHUNK_ELEMS_INDEX_ADD):
            msg = x[src[s:t]] if w is None else x[src[s:t]] * w[s:t, None]
            out.index_add_(0, dst[s:t], msg)
        return out

    def gather_sddmm(u, v):
        out = u.new_empty(e)
        for s, t in chunks(u.size(1), CHUNK_ELEMS_GATHER):
            torch.sum(u[dst[s:t]] * v[src[s:t]], -1, out=out[s:t])
        return out

    return index_add_spmm, gather_sddmm


# ----------------------------------------------------------------------------
# traffic model


def compulsory_bytes(op, p: Prepared, f: int, fb: int = 4) -> int:
    """Bytes every implementation must move at least once (see README): CSR, inputs, output;
    `fb` bytes per value."""
    idx = torch.empty((), dtype=p.index_dtype).element_size()
    csr = (p.n + 1) * idx + p.e * idx
    if op == "spmm":
        return csr + p.e * fb + p.n_src_used * f * fb + p.n * f * fb
    if op == "spmm_unw":
        return csr + p.n_src_used * f * fb + p.n * f * fb
    if op == "sddmm":
        return csr + p.n_dst_used * f * fb + p.n_src_used * f * fb + p.e * fb
    if op == "sddmm_spmm":
        return csr + p.n_dst_used * f * fb + 2 * p.n_src_used * f * fb + p.n * f * fb
    raise ValueError(op)


def gather_bytes(op, p: Prepared, f: int, fb: int = 4) -> int:
    """No-reuse model: every edge fetches its source row(s) from memory; target rows once."""
    idx = torch.empty((), dtype=p.index_dtype).element_size()
    csr = (p.n + 1) * idx + p.e * idx
    if op == "spmm":
        return csr + p.e * fb + p.e * f * fb + p.n * f * fb
    if op == "spmm_unw":
        return csr + p.e * f * fb + p.n * f * fb
    if op == "sddmm":
        return csr + p.n_dst_used * f * fb + p.e * f * fb + p.e * fb
    if op == "sddmm_spmm":
        return csr + p.n_dst_used * f * fb + 2 * p.e * f * fb + p.n * f * fb
    raise ValueError(op)


# ----------------------------------------------------------------------------
# table


COLUMNS = [  # key, header, width, format
    ("graph", "graph", 16, "s"), ("N", "N", 9, ","), ("E", "E", 10, ","), ("F", "F", 4, "d"),
    ("op", "op", 10, "s"), ("impl", "impl", 22, "s"), ("ms", "median ms", 10, ".3f"),
    ("gflops", "GFLOP/s", 8, ".2f"), ("gbps", "GB/s", 7, ".2f"), ("floor_ms", "floor ms", 9, ".3f"),
    ("pct_floor", "%floor", 7, ".1f"), ("reps", "reps", 4, "d"), ("peak_mib", "peak MiB", 9, ".0f"), ("gnnfuse_speedup", "gnnfuse x", 9, ".2f"),
]


def fmt_cell(v, width, spec):
    if v is None:
        s = "-"
    elif spec == "s":
        s = str(v)
    else:
        s = format(v, spec)
    return s.ljust(width) if spec == "s" else s.rjust(width)


def table_header():
    h = "  ".join(fmt_cell(hd, w, "s") if sp == "s" else hd.rjust(w) for _, hd, w, sp in COLUMNS)
    return h + "\n" + "-" * len(h)


def table_row(r):
    return "  ".join(fmt_cell(r.get(k), w, sp) for k, _, w, sp in COLUMNS)


# ----------------------------------------------------------------------------
# main loop


def bench_graph(name, args, gnnfuse, bw_gbps, results, log):
    t0 = time.perf_counter()
    edge_index, n = datasets.load(name, args.root, seed=args.seed)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    p = Prepared(edge_index, n, args.index_dtype)
    t_csr = time.perf_counter() - t0
    del edge_index
    info = {"graph": name, "N": n, "E": p.e, "load_s": round(t_load, 3), "csr_s": round(t_csr, 3),
            "max_in_degree": int(p.deg.max()) if n else 0}

    g = None
    if gnnfuse is not None:
        t0 = time.perf_counter()
        g = gnnfuse.Graph.from_edge_index(p.edge_index_csr_input, num_nodes=n)
        info["gnnfuse_graph_s"] = round(time.perf_counter() - t0, 3)
        if not (torch.equal(g.rowptr, p.rowptr) and torch.equal(g.col, p.col)):
            raise CheckFailed(f"{name}: gnnfuse.Graph CSR differs from the reference CSR "
                              f"(dtypes {g.rowptr.dtype}/{g.col.dtype})")
    p.edge_index_csr_input = None
    log(f"# {name}: N={n:,} E={p.e:,} max in-degree {info['max_in_degree']:,}; load {t_load:.2f} s, "
        f"CSR {t_csr:.2f} s" + (f", gnnfuse.Graph {info['gnnfuse_graph_s']:.2f} s" if g is not None else ""))

    big = p.e >= args.big_edges
    min_reps = args.min_reps_big if big else args.min_reps
    rows = check_rows(p, args.seed)
    ref = Reference(p, rows)
    pick_rows = (lambda out: out[rows])
    pick_edges = (lambda out: out[ref.pos])
    index_add_spmm, gather_sddmm = make_baselines(p)

    dt = args.dtype
    fb = torch.empty((), dtype=dt).element_size()
    for f in args.features:
        gen = torch.Generator().manual_seed(args.seed * 1000 + f)
        x = torch.randn(n, f, generator=gen).to(dt)
        u = torch.randn(n, f, generator=gen).to(dt)
        v = torch.randn(n, f, generator=gen).to(dt)
        w = (torch.rand(p.e, generator=gen) + 0.5).to(dt)  # CSR order
        ones = torch.ones(p.e, dtype=dt)
        a_w = p.csr_tensor(w)
        a_1 = p.csr_tensor(ones)

        impls = {op: [] for op in OPS}
        if g is not None:
            impls["spmm"].append(("gnnfuse", lambda: gnnfuse.ops.spmm(g, x, w)))
            impls["spmm_unw"].append(("gnnfuse", lambda: gnnfuse.ops.spmm(g, x)))
            impls["sddmm"].append(("gnnfuse", lambda: gnnfuse.ops.sddmm(g, u, v)))
            impls["sddmm_spmm"].append(("gnnfuse", lambda: gnnfuse.ops.sddmm_spmm(g, u, v, x)))
        impls["spmm"] += [("torch.sparse.mm", lambda: torch.sparse.mm(a_w, x)),
                          ("torch index_add_", lambda: index_add_spmm(x, w))]
        impls["spmm_unw"] += [("torch.sparse.mm", lambda: torch.sparse.mm(a_1, x)),
                              ("torch index_add_", lambda: index_add_spmm(x, None))]
        for peer, run in optional_spmm_peers(p, x, w).items():
            impls["spmm" if peer.endswith("[w]") else "spmm_unw"].append((peer[:-3], run))
        impls["sddmm"] += [("torch gather", lambda: gather_sddmm(u, v)),
                           ("torch sampled_addmm", lambda: torch.sparse.sampled_addmm(a_1, u, v.t(), beta=0.0).values())]
        impls["sddmm_spmm"] += [
            ("torch gather+sparse.mm", lambda: torch.sparse.mm(p.csr_tensor(gather_sddmm(u, v)), x)),
            ("torch sampled+sparse.mm", lambda: torch.sparse.mm(torch.sparse.sampled_addmm(a_1, u, v.t(), beta=0.0), x)),
        ]
        if dt != torch.float32:
            # what a reduced-precision user can run in PyTorch where its sparse kernels lack the
            # dtype: the same product in float32 (inputs converted beforehand, not timed)
            x32, u32, v32 = x.float(), u.float(), v.float()
            a_w32, a_132 = p.csr_tensor(w.float()), p.csr_tensor(ones.float())
            impls["spmm"].append(("torch.sparse.mm (float32)", lambda: torch.sparse.mm(a_w32, x32)))
            impls["spmm_unw"].append(("torch.sparse.mm (float32)", lambda: torch.sparse.mm(a_132, x32)))
            impls["sddmm"].append(("torch sampled_addmm (float32)",
                                   lambda: torch.sparse.sampled_addmm(a_132, u32, v32.t(), beta=0.0).values()))
            impls["sddmm_spmm"].append(("torch sampled+sparse.mm (float32)", lambda: torch.sparse.mm(
                torch.sparse.sampled_addmm(a_132, u32, v32.t(), beta=0.0), x32)))
        checks = {
            "spmm": (ref.spmm, (x, w), pick_rows, (n, f)),
            "spmm_unw": (ref.spmm, (x, None), pick_rows, (n, f)),
            "sddmm": (ref.sddmm, (u, v, None), pick_edges, (p.e,)),
            "sddmm_spmm": (ref.sddmm_spmm, (u, v, x, None), pick_rows, (n, f)),
        }

        for op in args.ops:
            flops = FLOPS_PER_EDGE_FEATURE[op] * p.e * f
            cbytes = compulsory_bytes(op, p, f, fb)
            floor_s = cbytes / (bw_gbps * 1e9)
            op_rows, ref_cache, timers = [], [], []
            for impl, fn in impls[op]:
                label = f"{name} F={f} {op} [{impl}]"
                ref_fn, ref_args, pick, shape = checks[op]
                t0 = time.perf_counter()                     # first call: memory probe, correctness
                try:
                    out, peak = call_with_peak(fn) if args.memory else (fn(), None)
                except (RuntimeError, NotImplementedError) as e:
                    if impl == "gnnfuse":
                        raise
                    # a peer without a kernel for this dtype: named in the log, left out of the table
                    log(f"# {label}: not run ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
                    continue
                first = time.perf_counter() - t0
                err = check(label, out, ref_fn, ref_args, pick, shape, ref_cache,
                            torch.float32 if impl.endswith("(float32)") else dt)
                del out
                budget = float("inf") if impl == "gnnfuse" else args.impl_budget  # gnnfuse: never fewer reps
                timers.append(Timed(fn, args.min_time, min_reps, args.max_reps, first_call_s=first, budget_s=budget))
                op_rows.append({"graph": name, "N": n, "E": p.e, "F": f, "op": op, "impl": impl,
                                "peak_mib": peak, "first_call_ms": first * 1e3, "check_max_err_over_scale": err})
            time_interleaved(timers)
            for r, t in zip(op_rows, timers):
                med, samples = t.median, t.samples
                r.update({"ms": med * 1e3, "gflops": flops / med / 1e9, "gbps": cbytes / med / 1e9,
                          "floor_ms": floor_s * 1e3, "pct_floor": 100.0 * floor_s / med, "gnnfuse_speedup": None,
                          "reps": len(samples), "inner": t.inner, "min_ms": min(samples) * 1e3,
                          "max_ms": max(samples) * 1e3, "iqr_ms": iqr(samples) * 1e3,
                          "compulsory_bytes": cbytes, "gather_bytes": gather_bytes(op, p, f, fb), "flops": flops})
            base = next((r for r in op_rows if r["impl"] == "gnnfuse"), None)
            for r in op_rows:
                if base is not None:
                    r["gnnfuse_speedup"] = r["ms"] / base["ms"]
                results.append(r)
                log(table_row(r))
        del x, u, v, w, ones, a_w, a_1, impls, checks
    return info


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="gnnfuse CPU operator benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--graphs", default=None,
                    help=f"comma list of graphs (default {','.join(datasets.BENCH_GRAPHS)}; "
                         "rmat-<scale>-<edge_factor> for any R-MAT size)")
    ap.add_argument("--features", default=None, help="comma list of feature widths F (default 32,128)")
    ap.add_argument("--ops", default=",".join(OPS), help="comma list of ops")
    ap.add_argument("--quick", action="store_true",
                    help="small run: cora,pubmed,ca-HepPh,rmat-16-8 at F=32, short timing")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--root", default=None, help=f"dataset root (default {datasets.default_root()})")
    ap.add_argument("--index-dtype", choices=["int32", "int64"], default="int64")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="value dtype (reduced precisions: PyTorch peers without a kernel for it are skipped, "
                         "and their float32 versions are timed too)")
    ap.add_argument("--min-time", type=float, default=None, help="seconds of timed runs per implementation (default 0.5, quick 0.1)")
    ap.add_argument("--min-reps", type=int, default=None, help="minimum timed blocks, small graphs (default 10, quick 3)")
    ap.add_argument("--min-reps-big", type=int, default=5, help="minimum timed blocks for graphs with >= --big-edges edges")
    ap.add_argument("--big-edges", type=int, default=4_000_000)
    ap.add_argument("--max-reps", type=int, default=200)
    ap.add_argument("--impl-budget", type=float, default=30.0,
                    help="seconds of timed runs per baseline implementation; slower ones get fewer (>= 3) reps")
    ap.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory probe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/cpu_ops_<machine>.json)")
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--require-gnnfuse", action="store_true", help="fail if gnnfuse cannot be imported")
    args = ap.parse_args(argv)
    graphs = args.graphs or ("cora,pubmed,ca-HepPh,rmat-16-8" if args.quick else ",".join(datasets.BENCH_GRAPHS))
    args.graphs = [s.strip() for s in graphs.split(",") if s.strip()]
    feats = args.features or ("32" if args.quick else "32,128")
    args.features = [int(s) for s in feats.split(",") if s.strip()]
    args.ops = [s.strip() for s in args.ops.split(",") if s.strip()]
    for op in args.ops:
        if op not in OPS:
            ap.error(f"unknown op {op!r} (known: {', '.join(OPS)})")
    if args.min_time is None:
        args.min_time = 0.1 if args.quick else 0.5
    if args.min_reps is None:
        args.min_reps = 3 if args.quick else 10
    if args.quick:
        args.min_reps_big = min(args.min_reps_big, 3)
    args.index_dtype = {"int32": torch.int32, "int64": torch.int64}[args.index_dtype]
    args.dtype = DTYPES[args.dtype]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    def log(s=""):
        print(s, flush=True)

    gnnfuse, why = import_gnnfuse()
    if gnnfuse is None:
        if args.require_gnnfuse:
            log(f"error: gnnfuse not importable: {why}")
            return 2
        log(f"WARNING: gnnfuse not importable, timing the PyTorch baselines only ({why})")

    t_start = time.perf_counter()
    busy_start = cpu_busy_fraction()
    bw_med, bw_best = stream_copy_bandwidth()
    bw_floor = bw_best  # the floor is a lower bound on time: use the best copy rate seen
    meta = {
        "benchmark": "gnnfuse cpu ops",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "machine": machine_tag(), "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(), "threads": threads,
        "torch": torch.__version__, "python": platform.python_version(),
        "gnnfuse": getattr(gnnfuse, "__version__", None) if gnnfuse else None,
        "gnnfuse_library": (gnnfuse.library_path() if gnnfuse and hasattr(gnnfuse, "library_path") else None),
        "git_commit": git_commit(), "dtype": str(args.dtype).replace("torch.", ""), "index_dtype": str(args.index_dtype).replace("torch.", ""),
        "stream_copy_gbps_median": bw_med, "stream_copy_gbps_best": bw_best,
        "bandwidth_for_floor_gbps": bw_floor,
        "timing": {"impl_budget_s": args.impl_budget, "min_time_s": args.min_time, "min_reps": args.min_reps, "min_reps_big": args.min_reps_big,
                   "big_edges": args.big_edges, "max_reps": args.max_reps, "statistic": "median of per-block means"},
        "check": {"rtol": TOLERANCES[args.dtype][0], "atol": TOLERANCES[args.dtype][1], "reference": "float64, from the op definitions",
                  "rows": f"all rows, or {CHECK_ROWS} random + 16 highest-degree rows"},
        "argv": sys.argv[1:],
    }
    log(f"gnnfuse CPU benchmark  torch {torch.__version__}  threads {threads}  cpu '{meta['cpu_model']}' "
        f"x{os.cpu_count()}  index {meta['index_dtype']}  {meta['dtype']}")
    log(f"STREAM-like copy bandwidth: {bw_med:.1f} GB/s median ({bw_best:.1f} best) -> floor ms = compulsory bytes / {bw_floor:.1f} GB/s")
    if busy_start is not None and busy_start > 0.1:
        log(f"note: other processes used {100 * busy_start:.0f}% of the CPUs just before the run: timings may be noisy")
    log()
    log(table_header())

    results, graphs_info = [], []
    status = 0
    try:
        for name in args.graphs:
            graphs_info.append(bench_graph(name, args, gnnfuse, bw_floor, results, log))
    except CheckFailed as e:
        log(f"\nCORRECTNESS CHECK FAILED: {e}")
        status = 1
    meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    meta["other_cpu_busy_start"] = None if busy_start is None else round(busy_start, 3)
    meta["other_cpu_busy_end"] = (lambda b: None if b is None else round(b, 3))(cpu_busy_fraction())
    meta["status"] = "ok" if status == 0 else "check failed"
    log(f"\ntotal {meta['elapsed_s']:.0f} s")

    if status != 0:
        log("no JSON written (results incomplete)")
    elif not args.no_json:
        out = Path(args.out) if args.out else HERE / "results" / f"cpu_ops_{meta['machine']}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w") as fh:
            json.dump({"meta": meta, "graphs": graphs_info, "results": results}, fh, indent=1)
            fh.write("\n")
        log(f"wrote {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
