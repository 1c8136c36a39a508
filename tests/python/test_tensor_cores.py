"""The Tensor-Core SpMM (its generated kernels, codegen/cuda_tensor_cores.cpp; csrc/cuda/tc_spmm.h,
csrc/torch/cuda/tensor_cores.h) through the emulated library, whose mma follows the PTX ISA's
fragment layouts (tests/simt: SimtMma).

The mode API on any build; through libgnnfuse_cuda_emu.so: the forced kernel against float64 on
the edge-case graphs (empty rows, isolated nodes, self-loops, duplicate edges, power-law degrees,
unsorted columns, row counts that are not a multiple of 16) at F in {1, 3, 32, 129}, float16,
bfloat16 and float32 (tf32), with edge weights and scaled_spmm's two factors, forward and the
gradient of the features (the transposed view); the per-head form (spmm_heads, the gradients of
sddmm_heads' inputs) at 1 to 4 heads; the choice of auto; the cache of views; capture. The same
battery in the "rows" mode (seed 004's kernel, float16 and bfloat16), with rows at every bucket edge.
The op battery under the forced mode runs in test_cuda_emulated.py (its "tensor-cores" run).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import gnnfuse
from test_cuda_emulated import EMU, _HERE, _env

_ON_EMU = gnnfuse.library_path().endswith("libgnnfuse_cuda_emu.so")
needs_emu = pytest.mark.skipif(EMU is None or _ON_EMU, reason="needs libgnnfuse_cuda_emu.so, run from the ordinary library")


def test_mode_names_are_checked():
    with pytest.raises(ValueError, match="mode must be one of"):
        gnnfuse.backends.set_cuda_tensor_cores("always")
    assert gnnfuse.backends.get_cuda_tensor_cores() in ("auto", "off")


_COMMON = r"""
import torch, gnnfuse
from graphs import CASES, ref_csr
def counts():
    return {l.rsplit(" ", 1)[0]: int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines()}
def tc(op=None):  # Tensor-Core launches of op (of every op: None)
    return sum(v for k, v in counts().items() if (k.startswith(op + " tensor_cores ") if op else " tensor_cores " in k))
def dense_of(rowptr, col, n, m, w):
    rows = torch.repeat_interleave(torch.arange(n), rowptr.diff())
    return torch.zeros(n, m, dtype=torch.float64).index_put_((rows, col.long()), w.double(), accumulate=True)
def csr(rows, cols, n):
    order = torch.argsort(rows * 100000 + cols)
    rows, cols = rows[order], cols[order]
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n), 0)
    return rowptr, cols
def rel(got, want):
    return (got.double() - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
"""

_FORCED = _COMMON + r"""
torch.manual_seed(0)
from gnnfuse import backends
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -11}  # tf32 keeps 10 bits
MODE = "@MODE@"  # "on": the condensed kernels; "rows": seed 004's (float16 and bfloat16 only)
TYPES = (torch.float16, torch.bfloat16, torch.float32) if MODE == "on" else (torch.float16, torch.bfloat16)
assert gnnfuse.backends.set_cuda_tensor_cores(MODE) == "auto"
def kernels(op):  # the Tensor-Core kernels op ran: {"8", "16", ..., "rows"}
    return {k.split(" ")[2] for k in counts() if k.startswith(op + " tensor_cores ")}
# unsorted columns in a row, a duplicate edge and 37 rows (not a multiple of 16)
extra = [("unsorted", torch.tensor([0, 3, 3, 6] + [6] * 34), torch.tensor([5, 1, 3, 5, 0, 5]), 37, 7)]
names = ["empty_rows_isolated", "self_loops_duplicates", "power_law", "uniform"]
for name in names:
    case = CASES[name]
    rowptr, col, perm = ref_csr(case.edge_index, case.num_nodes)
    extra.append((name, rowptr, col, case.num_nodes, case.num_src_nodes))
checked = 0
conflicts = torch.ops.gnnfuse._cuda_emu_ldmatrix_bank_conflicts()
for name, rowptr, col, n, m in extra:
    for index in (torch.int64, torch.int32):
        rp, cl = rowptr.to(index), col.to(index)
        g = gnnfuse.Graph(rp, cl, n, m)
        for dtype in TYPES:
            for F in (1, 3, 32, 129):
                w = (torch.rand(cl.numel(), dtype=torch.float64) + 0.5).to(dtype)
                x = torch.randn(m, F, dtype=torch.float64).to(dtype).requires_grad_()
                gy = torch.randn(n, F, dtype=torch.float64).to(dtype)
                dense = dense_of(rp, cl, n, m, w)
                before = (tc("spmm"), tc("spmm_grad_x"))
                y = gnnfuse.spmm(g, x, w)
                y.backward(gy)
                assert tc("spmm") == before[0] + 1 and tc("spmm_grad_x") == before[1] + 1, (name, dtype, F, counts())
                want, want_gx = dense @ x.detach().double(), dense.t() @ gy.double()
                # each output sums products rounded once (fp32 accumulation): a few ulps of the dtype
                assert y.dtype == dtype and rel(y, want) <= 4 * EPS[dtype], (name, dtype, F, rel(y, want))
                assert rel(x.grad, want_gx) <= 4 * EPS[dtype], (name, dtype, F, rel(x.grad, want_gx))
                checked += 1
# scaled_spmm: two factors multiplied in float
case = CASES["power_law"]
rowptr, col, perm = ref_csr(case.edge_index, case.num_nodes)
n, m = case.num_nodes, case.num_src_nodes
for dtype in (torch.bfloat16, torch.float16):
    a = torch.rand(col.numel(), dtype=torch.float64).to(dtype)
    s = (torch.rand(col.numel(), dtype=torch.float64) + 0.5).to(dtype)
    x = torch.randn(m, 40, dtype=torch.float64).to(dtype)
    before = tc("scaled_spmm")
    y = torch.ops.gnnfuse.scaled_spmm(rowptr, col, a, s, x)
    assert tc("scaled_spmm") == before + 1, counts()
    want = dense_of(rowptr, col, n, m, a.double() * s.double()) @ x.double()
    assert rel(y, want) <= 4 * EPS[dtype], rel(y, want)
# per head (spmm_heads and its feature gradient, sddmm_heads' gradients of u and v): every head an
# SpMM of its own entry values over the same view, x and out [rows, H, F]
def dense_heads(rowptr, col, n, m, w):
    return torch.stack([dense_of(rowptr, col, n, m, w[:, h]) for h in range(w.size(1))])  # [H, n, m]
def check_heads(rp, cl, n, m, dtype, H, F, what):  # spmm_heads and its feature gradient, both on Tensor Cores, against float64
    w = (torch.rand(cl.numel(), H, dtype=torch.float64) + 0.5).to(dtype).requires_grad_()
    x = torch.randn(m, H, F, dtype=torch.float64).to(dtype).requires_grad_()
    gy = torch.randn(n, H, F, dtype=torch.float64).to(dtype)
    before = (tc("spmm_heads"), tc("spmm_heads_grad_x"))
    y = torch.ops.gnnfuse.spmm_heads(rp, cl, w, x)
    y.backward(gy)
    assert tc("spmm_heads") == before[0] + 1 and tc("spmm_heads_grad_x") == before[1] + 1, (what, dtype, H, F, counts())
    a = dense_heads(rp, cl, n, m, w.detach())
    want = torch.einsum("hnm,mhf->nhf", a, x.detach().double())
    want_gx = torch.einsum("hnm,nhf->mhf", a, gy.double())
    assert y.shape == (n, H, F) and y.dtype == dtype
    assert rel(y, want) <= 4 * EPS[dtype], (what, dtype, H, F, rel(y, want))
    assert rel(x.grad, want_gx) <= 4 * EPS[dtype], (what, dtype, H, F, rel(x.grad, want_gx))
    return y
for name in ("self_loops_duplicates", "power_law", "empty_rows_isolated"):
    case = CASES[name]
    rowptr, col, perm = ref_csr(case.edge_index, case.num_nodes)
    n, m = case.num_nodes, case.num_src_nodes
    for index in (torch.int64, torch.int32):
        rp, cl = rowptr.to(index), col.to(index)
        for dtype in TYPES:
            for H, F in ((1, 3), (4, 16), (3, 40)):
                check_heads(rp, cl, n, m, dtype, H, F, name)
                checked += 1
            # sddmm_heads: the gradients of u (op(A) = A) and v (A^T) per head
            H, D = 2, 24
            u = torch.randn(n, H, D, dtype=torch.float64).to(dtype).requires_grad_()
            v = torch.randn(m, H, D, dtype=torch.float64).to(dtype).requires_grad_()
            ge = torch.randn(cl.numel(), H, dtype=torch.float64).to(dtype)
            before = (tc("sddmm_heads_grad_u"), tc("sddmm_heads_grad_v"))
            torch.ops.gnnfuse.sddmm_heads(rp, cl, u, v).backward(ge)
            assert tc("sddmm_heads_grad_u") == before[0] + 1 and tc("sddmm_heads_grad_v") == before[1] + 1, counts()
            g = dense_heads(rp, cl, n, m, ge)
            assert rel(u.grad, torch.einsum("hnm,mhd->nhd", g, v.detach().double())) <= 4 * EPS[dtype], (name, dtype)
            assert rel(v.grad, torch.einsum("hnm,nhd->mhd", g, u.detach().double())) <= 4 * EPS[dtype], (name, dtype)
# float64 never runs on Tensor Cores
before = tc("spmm")
gnnfuse.spmm(gnnfuse.Graph(rowptr, col, n, m), torch.randn(m, 32, dtype=torch.float64))
assert tc("spmm") == before
# the same kernel under TorchScript and torch.compile(fullgraph=True): equal to eager, and run
g = gnnfuse.Graph(rowptr, col, n, m)
x = torch.randn(m, 40, dtype=torch.float64).to(torch.bfloat16)
eager = gnnfuse.spmm(g, x)
scripted = torch.jit.CompilationUnit(
    "def f(rowptr: Tensor, col: Tensor, x: Tensor) -> Tensor:\n    return torch.ops.gnnfuse.spmm(rowptr, col, None, x)\n").f
before = tc("spmm")
torch.testing.assert_close(scripted(rowptr, col, x), eager, rtol=0, atol=0)
compiled = torch.compile(lambda x: gnnfuse.spmm(g, x), fullgraph=True)
torch.testing.assert_close(compiled(x), eager, rtol=0, atol=0)
assert tc("spmm") >= before + 2, counts()
# a capped grid (GNNFUSE_CUDA_TC_GRID, read at every call): each warp strides over several
# (window, head, slab) units, its B tiles staged again for each; and x's rows not 16-byte aligned
# (the B tiles by scalar loads, no cp.async)
import os
case = CASES["power_law"]
rowptr, col, perm = ref_csr(case.edge_index, case.num_nodes)
n, m = case.num_nodes, case.num_src_nodes
assert (n + 15) // 16 * 3 > 4 * 4, n  # more units than the warps of one block
for grid in ("1", None):
    if grid:
        os.environ["GNNFUSE_CUDA_TC_GRID"] = grid
    for dtype in TYPES[1:]:
        for H, F in ((1, 129), (3, 40)):
            w = (torch.rand(col.numel(), H, dtype=torch.float64) + 0.5).to(dtype)
            base = torch.randn(m * H * F + 1, dtype=torch.float64).to(dtype)
            x = base[1:].view(m, H, F) if grid is None else base[:-1].view(m, H, F)  # misaligned: offset by one element
            assert (x.data_ptr() % 16 != 0) == (grid is None)
            xg = x.detach().clone().requires_grad_()  # (aligned: the gradient's x)
            gy = torch.randn(n, H, F, dtype=torch.float64).to(dtype)
            before = (tc("spmm_heads"), tc("spmm_heads_grad_x"))
            y = torch.ops.gnnfuse.spmm_heads(rowptr, col, w, x)
            torch.ops.gnnfuse.spmm_heads(rowptr, col, w, xg).backward(gy)
            assert tc("spmm_heads") == before[0] + 2 and tc("spmm_heads_grad_x") == before[1] + 1, (grid, counts())
            a = dense_heads(rowptr, col, n, m, w)
            want = torch.einsum("hnm,mhf->nhf", a, x.double())
            want_gx = torch.einsum("hnm,nhf->mhf", a, gy.double())
            assert rel(y, want) <= 4 * EPS[dtype], (grid, dtype, H, F, rel(y, want))
            assert rel(xg.grad, want_gx) <= 4 * EPS[dtype], (grid, dtype, H, F, rel(xg.grad, want_gx))
            checked += 1
    os.environ.pop("GNNFUSE_CUDA_TC_GRID", None)
# an inf or NaN in x reaches exactly the rows the CUDA-core kernels give it (the rows with an edge
# from it; a dense tile product alone would spread it over the window), finite rows equal
for dtype in TYPES:
    for H, F in ((1, 40), (2, 16)):
        w = (torch.rand(col.numel(), H, dtype=torch.float64) + 0.5).to(dtype)
        w[::7] = 0  # explicit zero weights: 0 * inf is NaN on both paths
        x = torch.randn(m, H, F, dtype=torch.float64).to(dtype)
        x[3, 0, 1] = float("inf"); x[11, -1, -1] = float("nan"); x[40, 0, 0] = float("-inf")
        before = tc("spmm_heads")
        y = torch.ops.gnnfuse.spmm_heads(rowptr, col, w, x)
        assert tc("spmm_heads") == before + 1
        with backends.cuda_tensor_cores("off"):
            want = torch.ops.gnnfuse.spmm_heads(rowptr, col, w, x)
        assert not torch.isfinite(want).all()
        assert torch.equal(torch.isnan(y), torch.isnan(want)) and torch.equal(torch.isinf(y), torch.isinf(want)), (dtype, H, F)
        assert torch.equal(y[torch.isinf(y)], want[torch.isinf(want)]), (dtype, H, F)
        fin = torch.isfinite(want)
        assert rel(y[fin], want[fin].double()) <= 4 * EPS[dtype], (dtype, H, F)
        checked += 1
# every bucket edge of the rows form (rows of 0, 1, 7, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129 and
# 300 entries, duplicates among them; the transposed view's columns likewise skewed), at F across
# the slab widths (64, 32, 16, 8 columns per warp) and per head
degrees = [0, 1, 7, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 300, 5, 0, 40]
rr = torch.cat([torch.full((d,), i) for i, d in enumerate(degrees)])
cc = torch.cat([torch.randint(0, 9 if i % 3 == 0 else 400, (d,)) for i, d in enumerate(degrees)])  # small ranges: duplicates
rp, cl = csr(rr, cc, len(degrees))
n, m = len(degrees), 400
for dtype in TYPES:
    for H, F in ((1, 1), (1, 7), (1, 70), (2, 33), (3, 129)):
        y = check_heads(rp, cl, n, m, dtype, H, F, "bucket edges")
        assert (y[0] == 0).all() and (y[15] == 0).all()  # the empty rows
        checked += 1
# float16 entry values its mma operand cannot hold as float does (a product of two factors past its
# range, or below its normal range: scaled_spmm's a * s, sddmm's gradients w * gy) take scalar products
# in float as the CUDA-core kernels do (before: inf, or zeros); rows of 5, 12, 50 and 80 entries
rp1 = torch.tensor([0, 5, 17, 67, 147]); cl1 = torch.cat([torch.arange(67) % 60, torch.arange(80) % 60]); n1, m1 = 4, 60
H16 = torch.float16
for scale, xs in ((1e-4, 1e4), (300.0, 1e-3), (1.0, 1.0)):
    a = ((torch.rand(cl1.numel(), dtype=torch.float64) + 0.5) * scale).to(H16)
    s_ = ((torch.rand(cl1.numel(), dtype=torch.float64) + 0.5) * scale).to(H16)
    xx = (torch.randn(m1, 40, dtype=torch.float64) * xs).to(H16)
    before = tc("scaled_spmm")
    y = torch.ops.gnnfuse.scaled_spmm(rp1, cl1, a, s_, xx)
    assert tc("scaled_spmm") == before + 1, counts()
    want = dense_of(rp1, cl1, n1, m1, a.double() * s_.double()) @ xx.double()
    assert torch.isfinite(y).all() and rel(y, want) <= 4 * EPS[H16], (scale, rel(y, want))
    u = (torch.randn(n1, 40, dtype=torch.float64) * xs).to(H16).requires_grad_()
    v = (torch.randn(m1, 40, dtype=torch.float64) * xs).to(H16).requires_grad_()
    before = (tc("sddmm_grad_u"), tc("sddmm_grad_v"))
    torch.ops.gnnfuse.sddmm(rp1, cl1, a, u, v).backward(s_)  # gradients: the entry values a * s_
    assert (tc("sddmm_grad_u"), tc("sddmm_grad_v")) == (before[0] + 1, before[1] + 1), counts()
    assert rel(u.grad, want_u := dense_of(rp1, cl1, n1, m1, a.double() * s_.double()) @ v.detach().double()) <= 4 * EPS[H16], scale
    assert rel(v.grad, dense_of(rp1, cl1, n1, m1, a.double() * s_.double()).t() @ u.detach().double()) <= 4 * EPS[H16], scale
    checked += 1
if MODE == "rows":
    assert kernels("spmm") == {"rows"} and kernels("spmm_heads_grad_x") == {"rows"}, counts()
    # float32 is not the rows form's: the CUDA-core kernels
    before = tc("spmm")
    gnnfuse.spmm(gnnfuse.Graph(rp, cl, n, m), torch.randn(m, 32))
    assert tc("spmm") == before
else:
    assert "rows" not in kernels("spmm") and kernels("spmm"), counts()
# the tiles' padded rows: no ldmatrix of any form (NT 2, 4, 8; A and B tiles) met a bank conflict
assert torch.ops.gnnfuse._cuda_emu_ldmatrix_bank_conflicts() == conflicts, torch.ops.gnnfuse._cuda_emu_ldmatrix_bank_conflicts() - conflicts
print("OK", checked)
"""


@needs_emu
@pytest.mark.parametrize("mode", ["on", "rows"])
def test_forced_tensor_cores_against_float64(mode):
    proc = subprocess.run([sys.executable, "-c", _FORCED.replace("@MODE@", mode)], cwd=_HERE, env=_env({}), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


_ROWS_BANKS = _COMMON + r"""
torch.manual_seed(2)
assert gnnfuse.backends.set_cuda_tensor_cores("rows") == "auto"
n = 48
for degree, bucket, ways in ((5, 1, 1), (12, 2, 1), (24, 4, 2), (40, 8, 1)):  # each graph's rows all in one bucket
    rowptr = torch.arange(0, n * degree + 1, degree)
    col = torch.randint(0, n, (n * degree,))
    g = gnnfuse.Graph(rowptr, col, n, n)
    x = torch.randn(n, 64, dtype=torch.float64).to(torch.bfloat16)
    w = (torch.rand(col.numel(), dtype=torch.float64) + 0.5).to(torch.bfloat16)
    loads, extra = torch.ops.gnnfuse._cuda_emu_staged_load_stats()
    before = tc("spmm")
    y = gnnfuse.spmm(g, x, w)
    assert tc("spmm") == before + 1 and counts().get("spmm tensor_cores rows 0"), counts()
    loads, extra = (a - b for a, b in zip(torch.ops.gnnfuse._cuda_emu_staged_load_stats(), (loads, extra)))
    assert rel(y, dense_of(rowptr, col, n, n, w) @ x.double()) <= 4 * 2.0 ** -8
    # every staged load of the tiles (element loads for B < 8, 16-byte loads for B = 8) in `ways`
    # wavefronts: B = 2 free and B = 4 two-way in the slots r ^ (r / 8 & 1) (plain slots: 2- and 4-way)
    assert loads > 0 and extra == (ways - 1) * loads, (bucket, loads, extra)
print("OK")
"""


@needs_emu
def test_rows_kernel_tiles_bank_conflicts():
    """The rows kernel's staged tiles, counted by the emulator's model of shared-memory banks (its
    staged loads grouped into warp instructions): no bank conflict in buckets 1, 2 and 8, two-way
    in bucket 4 (the least for its reads: 16 rows that start at multiples of 16 bytes)."""
    proc = subprocess.run([sys.executable, "-c", _ROWS_BANKS], cwd=_HERE, env=_env({}), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


_AUTO = _COMMON + r"""
torch.manual_seed(1)
from gnnfuse import backends
assert backends.get_cuda_tensor_cores() == "auto"
# a graph with locality: 64 nodes in 4 cliques of 16 (each window reads 16 rows 16 times each),
# and one without: 64 rows each reading 4 distinct far-apart columns of 4096
r = torch.arange(64).repeat_interleave(16); c = (r // 16) * 16 + torch.arange(16).repeat(64)
local = gnnfuse.Graph(*csr(r, c, 64), 64, 64)
r2 = torch.arange(64).repeat_interleave(4); c2 = torch.randperm(4096)[:256]
scattered = gnnfuse.Graph(*csr(r2, c2, 64), 64, 4096)
x = torch.randn(64, 64, dtype=torch.bfloat16)
views = torch.ops.gnnfuse._cuda_tensor_core_views()
before = tc("spmm")
y_first = gnnfuse.spmm(local, x)  # a pattern's first call builds its view
gnnfuse.spmm(local, x); gnnfuse.spmm(local, x)
assert tc("spmm") == before + 3, counts()
assert torch.ops.gnnfuse._cuda_tensor_core_views() == views + 1  # built at the first call, then cached
torch.testing.assert_close(gnnfuse.spmm(local, x), y_first)
V, P = torch.ops.gnnfuse._cuda_tensor_core_views, torch.ops.gnnfuse._cuda_tensor_core_patterns
backends.clear_cuda_tensor_core_views()
assert P() == 0
# a pattern marked as converted for one call (the layers' per-call CSR) builds no view at its first
# sighting; when its contents recur in new memory (the layer's next call) the pattern is remembered
# by contents with its views, which every later call of equal contents uses, in both directions
r8 = torch.arange(64).repeat_interleave(8); c8 = (r8 // 8) * 8 + torch.arange(8).repeat(64)
p8 = gnnfuse.Graph(*csr(r8, c8, 64), 64, 64)
xr = x.clone().requires_grad_()
with backends.cuda_tensor_cores("off"):
    y8 = gnnfuse.spmm(p8, xr)
    y8.float().sum().backward()
views, n_tc, n_grad = V(), tc("spmm"), tc("spmm_grad_x")
for i in range(4):
    fresh = gnnfuse.Graph(p8.rowptr.clone(), p8.col.clone(), 64, 64)
    torch.ops.gnnfuse._cuda_tensor_cores_transient([fresh.col])
    xg = x.clone().requires_grad_()
    y = gnnfuse.spmm(fresh, xg)
    y.float().sum().backward()
    torch.testing.assert_close(y, y8, atol=0.05, rtol=0.02)
    torch.testing.assert_close(xg.grad, xr.grad, atol=0.05, rtol=0.02)
    assert tc("spmm") == n_tc + i and tc("spmm_grad_x") == n_grad + i, (i, counts())
    assert V() == views + (0 if i == 0 else 2) and P() == (0 if i == 0 else 1), (i, V() - views, P())
# other contents of the same sizes (one column swapped between two rows) are compared element by
# element with the remembered pattern, never given its view: a view of their own at their recurrence
swap = p8.col.clone()
swap[7], swap[64] = p8.col[64], p8.col[7]
order = torch.cat([torch.sort(swap[i * 8:(i + 1) * 8]).values for i in range(64)])
swapped = [gnnfuse.Graph(p8.rowptr.clone(), order.clone(), 64, 64) for _ in range(3)]
with backends.cuda_tensor_cores("off"):
    y_swap = gnnfuse.spmm(swapped[0], x)
assert not torch.equal(y_swap, y8)
for g_ in swapped:
    torch.ops.gnnfuse._cuda_tensor_cores_transient([g_.rowptr])
    torch.testing.assert_close(gnnfuse.spmm(g_, x), y_swap, atol=0.05, rtol=0.02)
assert V() == views + 3 and P() == 2 and tc("spmm") == n_tc + 5, (V() - views, P(), counts())
# forced, a marked pattern at its first sighting is built all the same
with backends.cuda_tensor_cores("on"):
    r4 = torch.arange(64).repeat_interleave(4); c4 = (r4 // 4) * 4 + torch.arange(4).repeat(64)
    p4 = gnnfuse.Graph(*csr(r4, c4, 64), 64, 64)
    torch.ops.gnnfuse._cuda_tensor_cores_transient([p4.col])
    gnnfuse.spmm(p4, x)
assert V() == views + 4 and tc("spmm") == n_tc + 6, counts()
# a compiled model's per-call CSR (not marked: built at the first call by identity) is remembered
# at its second call: two views in all
views = V()
r2_ = torch.arange(64).repeat_interleave(2); c2_ = (r2_ // 2) * 2 + torch.arange(2).repeat(64)
p2 = gnnfuse.Graph(*csr(r2_, c2_, 64), 64, 64)
for _ in range(4):
    gnnfuse.spmm(gnnfuse.Graph(p2.rowptr.clone(), p2.col.clone(), 64, 64), x)
assert V() == views + 2 and P() == 3, (V() - views, P())
# the layers mark their per-call CSR: their first training step runs the CUDA-core kernels, later
# steps Tensor Cores, with views built once
conv = gnnfuse.nn.GATConv(64, 32, heads=2, dropout=0.5).to(torch.bfloat16)  # (dropout: the per-edge path)
tconv = gnnfuse.nn.TransformerConv(64, 32, heads=2, fused=False).to(torch.bfloat16)
gconv = gnnfuse.nn.GCNConv(64, 64).to(torch.bfloat16)
ei = torch.stack([c, r])
for conv_ in (conv, tconv, gconv):
    n_tc, views = tc(), V()
    conv_(x, ei).float().sum().backward()
    assert V() == views and tc() == n_tc, (conv_, counts())
    conv_(x, ei).float().sum().backward()
    n_tc, views = tc(), V()
    for _ in range(2):
        conv_(x, ei).float().sum().backward()
    assert V() == views and tc() >= n_tc + 2, (conv_, counts())
# under torch.func (the kernels see the tensors under functorch's wrappers) and in deep models (a
# mark per layer alive until backward) likewise
from torch.func import functional_call, grad
for conv_ in (gconv, conv, tconv):
    params = {k: v.detach() for k, v in conv_.named_parameters()}
    n_tc, views = tc(), V()
    for _ in range(2):
        grad(lambda p: functional_call(conv_, p, (x, ei)).float().sum())(params)
    assert V() == views and tc() >= n_tc + 2, (conv_, counts())
deep = torch.nn.Sequential(*[gnnfuse.nn.GCNConv(64, 64) for _ in range(48)]).to(torch.bfloat16)
n_tc, views = tc(), V()
h = x
for layer in deep:
    h = layer(h, ei)
h.float().sum().backward()
# GCNConv's pattern of ei, remembered above; one view more: the transposed one (a gradient of the
# features, which the layers above did not need)
assert V() == views + 1 and tc() >= n_tc + 48, (V() - views, counts())
conv.eval()
views, n_tc = V(), tc()
gconv = gnnfuse.nn.GCNConv(64, 64, cached=True).to(torch.bfloat16)  # a cached graph: Tensor Cores from its first call
for _ in range(3):
    gconv(x, ei).float().sum().backward()
assert tc() >= n_tc + 3, counts()
before = tc("spmm") - 2
# narrow features, no reuse, float32 without tf32 allowed, float64: the CUDA-core kernels
gnnfuse.spmm(local, torch.randn(64, 8, dtype=torch.bfloat16))
gnnfuse.spmm(scattered, torch.randn(4096, 64, dtype=torch.bfloat16))
assert not torch.backends.cuda.matmul.allow_tf32
gnnfuse.spmm(local, x.float())
gnnfuse.spmm(local, x.double())
assert tc("spmm") == before + 2, counts()
torch.backends.cuda.matmul.allow_tf32 = True
gnnfuse.spmm(local, x.float())  # K = 8 for tf32: another view
gnnfuse.spmm(local, x.float())
assert tc("spmm") == before + 4, counts()
torch.backends.cuda.matmul.allow_tf32 = False
# off, and the context manager restores the mode
with backends.cuda_tensor_cores("off"):
    gnnfuse.spmm(local, x)
    assert backends.get_cuda_tensor_cores() == "off"
assert backends.get_cuda_tensor_cores() == "auto"
assert tc("spmm") == before + 4, counts()
# an in-place change of the pattern is a new view (the version counter)
rowptr, col = local.rowptr.clone(), local.col.clone()
g = gnnfuse.Graph(rowptr, col, 64, 64)
gnnfuse.spmm(g, x)
y0 = gnnfuse.spmm(g, x)
views = torch.ops.gnnfuse._cuda_tensor_core_views()
col[:16] = col[:16].flip(0)  # the same pattern, another order: a new view, the same result
gnnfuse.spmm(g, x)
y1 = gnnfuse.spmm(g, x)
assert torch.ops.gnnfuse._cuda_tensor_core_views() == views + 1
torch.testing.assert_close(y0, y1)
# another column tensor of equal contents under the same row pointers: the view of the pattern
# remembered by contents (local's contents recurred in g)
views = torch.ops.gnnfuse._cuda_tensor_core_views()
g2 = gnnfuse.Graph(local.rowptr, local.col.clone(), 64, 64)
gnnfuse.spmm(g2, x)
gnnfuse.spmm(g2, x)
assert torch.ops.gnnfuse._cuda_tensor_core_views() == views
# inference tensors (no version counters): auto leaves them to the CUDA-core kernels; forced, the
# view is built for the call and not remembered
with torch.inference_mode():
    inf = gnnfuse.Graph(local.rowptr.clone(), local.col.clone(), 64, 64)
    n_tc, views = tc("spmm"), torch.ops.gnnfuse._cuda_tensor_core_views()
    y_auto = gnnfuse.spmm(inf, x)
    assert tc("spmm") == n_tc and torch.ops.gnnfuse._cuda_tensor_core_views() == views
    with backends.cuda_tensor_cores("on"):
        y_on = [gnnfuse.spmm(inf, x) for _ in range(2)]
    assert tc("spmm") == n_tc + 2 and torch.ops.gnnfuse._cuda_tensor_core_views() == views + 2
    torch.testing.assert_close(y_on[0], y_auto, atol=0.05, rtol=0.02)
# deterministic: no atomics, bitwise equal runs
torch.use_deterministic_algorithms(True)
assert torch.equal(gnnfuse.spmm(local, x), gnnfuse.spmm(local, x))
torch.use_deterministic_algorithms(False)
# under a (simulated) CUDA graph capture only a cached view is used: no new one is built
torch.ops.gnnfuse._cuda_simulate_capture(True)
other = gnnfuse.Graph(local.rowptr.clone(), local.col.clone(), 64, 64)
n_tc, views = tc("spmm"), torch.ops.gnnfuse._cuda_tensor_core_views()
gnnfuse.spmm(other, x)
gnnfuse.spmm(local, x)
torch.ops.gnnfuse._cuda_simulate_capture(False)
assert torch.ops.gnnfuse._cuda_tensor_core_views() == views and tc("spmm") == n_tc + 1, (torch.ops.gnnfuse._cuda_tensor_core_views() - views, tc("spmm") - n_tc)
# captured after one eager warm-up (as documented, and as torch.compile's cudagraphs do), a graph
# keeps Tensor Cores, forward and backward
g3 = gnnfuse.Graph(local.rowptr.clone(), local.col.clone(), 64, 64)
xg = x.clone().requires_grad_()
gnnfuse.spmm(g3, xg).float().sum().backward()  # the warm-up
n_tc, n_grad = tc("spmm"), tc("spmm_grad_x")
torch.ops.gnnfuse._cuda_simulate_capture(True)
gnnfuse.spmm(g3, xg).float().sum().backward()
torch.ops.gnnfuse._cuda_simulate_capture(False)
assert tc("spmm") == n_tc + 1 and tc("spmm_grad_x") == n_grad + 1, counts()
# clearing frees the remembered patterns and the cached views (not those a captured graph reads):
# the next call builds again
assert P() > 0
backends.clear_cuda_tensor_core_views()
views = V()
assert P() == 0
gnnfuse.spmm(g3, x)  # (pinned by the capture)
assert V() == views
gnnfuse.spmm(g2, x)
assert V() == views + 1
print("OK")
"""


_RECURRING = _COMMON + r"""
torch.manual_seed(2)
from gnnfuse import backends
V, P = torch.ops.gnnfuse._cuda_tensor_core_views, torch.ops.gnnfuse._cuda_tensor_core_patterns
def cliques(size, shift):  # 64 nodes in cliques of `size`, nodes shifted by `shift` (another pattern)
    r = torch.arange(64).repeat_interleave(size)
    return csr(r, (((r + shift) // size) * size + torch.arange(size).repeat(64) - shift) % 64, 64)
def fresh(pattern, m=64):  # the layers' per-call CSR: new memory, marked
    g = gnnfuse.Graph(pattern[0].clone(), pattern[1].clone(), 64, m)
    torch.ops.gnnfuse._cuda_tensor_cores_transient([g.col])
    return g
x = torch.randn(64, 64, dtype=torch.bfloat16)
def ref(pattern, x_):
    with backends.cuda_tensor_cores("off"):
        return gnnfuse.spmm(gnnfuse.Graph(pattern[0], pattern[1], 64, x_.size(0)), x_)
# a working set larger than the table (10 patterns, 8 places): the first 8 to recur are
# remembered, the other 2 keep the CUDA-core kernels and build no view in a cycle
backends.clear_cuda_tensor_core_views()
pats = [cliques(8, s) for s in range(8)] + [cliques(16, s) for s in range(2)]
want = [ref(p, x) for p in pats]
views = V()
for rnd in range(3):
    n_tc, built = tc("spmm"), V()
    for p, w in zip(pats, want):
        torch.testing.assert_close(gnnfuse.spmm(fresh(p), x), w, atol=0.05, rtol=0.02)
    assert (V() - built, tc("spmm") - n_tc) == [(0, 0), (8, 8), (0, 8)][rnd], (rnd, V() - built, tc("spmm") - n_tc)
assert P() == 8
# a remembered pattern unused for a while (256 lookups) makes room for a recurring one
for _ in range(130):
    gnnfuse.spmm(fresh(pats[0]), x); gnnfuse.spmm(fresh(pats[1]), x)
built = V()
gnnfuse.spmm(fresh(pats[8]), x)
assert V() == built + 1 and P() == 8
# a pattern whose view Tensor Cores would not take (no reuse: scattered columns) recurring: one
# view built at its recurrence per direction, none later, nothing remembered
r2 = torch.arange(64).repeat_interleave(4); c2 = torch.randperm(4096)[:256]
scattered = csr(r2, c2, 64)
xs = torch.randn(4096, 64, dtype=torch.bfloat16)
views, n_tc, patterns = V(), tc(), P()
for i in range(5):
    xg = xs.clone().requires_grad_()
    gnnfuse.spmm(fresh(scattered, 4096), xg).float().sum().backward()
assert V() <= views + 2 and tc() == n_tc and P() == patterns, (V() - views, counts())
views = V()
gnnfuse.spmm(fresh(scattered, 4096), xs)
assert V() == views
with backends.cuda_tensor_cores("on"):  # forced: a view all the same
    gnnfuse.spmm(fresh(scattered, 4096), xs)
assert V() == views + 1 and tc() == n_tc + 1
# the tensors matched last, changed in place: compared again, never given the stale view
g = fresh(pats[2])
torch.testing.assert_close(gnnfuse.spmm(g, x), want[2], atol=0.05, rtol=0.02)
g.col[:8] = g.col[8:16].clone()  # (row 0 reads row 1's columns)
changed = (g.rowptr.clone(), g.col.clone())
torch.testing.assert_close(gnnfuse.spmm(g, x), ref(changed, x), atol=0.05, rtol=0.02)
# recurring under torch.func from scratch (the layers' tensors under functorch's wrappers)
from torch.func import functional_call, grad
backends.clear_cuda_tensor_core_views()
conv = gnnfuse.nn.GCNConv(64, 64).to(torch.bfloat16)
ei = torch.stack([pats[3][1], torch.arange(64).repeat_interleave(8)])
params = {k: v.detach() for k, v in conv.named_parameters()}
steps = []
for _ in range(4):
    views, n_tc = V(), tc()
    grad(lambda p: functional_call(conv, p, (x, ei)).float().sum())(params)
    steps.append((V() - views, tc() - n_tc))
assert steps[0] == (0, 0) and steps[1][0] >= 1 and all(s[1] > 0 for s in steps[1:]) and steps[2][0] == steps[3][0] == 0, steps
print("OK")
"""


@needs_emu
def test_patterns_recurring_in_new_memory_are_remembered_by_contents():
    proc = subprocess.run([sys.executable, "-c", _RECURRING], cwd=_HERE, env=_env({}), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@needs_emu
def test_auto_mode_choice_cache_and_capture():
    proc = subprocess.run([sys.executable, "-c", _AUTO], cwd=_HERE, env=_env({}), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@needs_emu
def test_bad_environment_value_names_the_variable():
    probe = "import torch, gnnfuse\nprint(torch.ops.gnnfuse._cuda_tensor_cores())"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=_HERE, env=_env({"GNNFUSE_CUDA_TENSOR_CORES": "yes"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "GNNFUSE_CUDA_TENSOR_CORES" in proc.stderr and "auto, on, off or rows" in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", probe], cwd=_HERE, env=_env({"GNNFUSE_CUDA_TENSOR_CORES": "on"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "on", proc.stderr[-2000:]
    # a bad value can be overridden before it is read
    fix = "import torch, gnnfuse\nprint(gnnfuse.backends.set_cuda_tensor_cores('off'), torch.ops.gnnfuse._cuda_tensor_cores())"
    proc = subprocess.run([sys.executable, "-c", fix], cwd=_HERE, env=_env({"GNNFUSE_CUDA_TENSOR_CORES": "yes"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["auto", "off"], proc.stdout + proc.stderr[-2000:]
