"""SpGEMM and graph coarsening (ops/spgemm.spec, ops/coarsen.spec): float64 references from
scipy / dense products, every workspace policy, masked products, gradients (first and
second order), opcheck, TorchScript, torch.compile, the pattern cache, clustering and
pooling, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import gnnfuse
from gnnfuse.cluster import coarsen_levels, heavy_edge_matching
from gnnfuse.sparse import assignment_csr

from graphs import CASES

INDEX_DTYPES = [torch.int32, torch.int64]
IDS = {torch.int32: "int32", torch.int64: "int64", torch.float32: "f32", torch.float64: "f64"}
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# The assembling ops return a data-dependent number of entries (an unbacked size).
ASSEMBLE_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")



def _hits(op: str) -> int:
    """Pattern-cache hits of `op` so far (a hit hands out copies, so data pointers cannot tell)."""
    return torch.ops.gnnfuse.pattern_cache_hits(op)

def random_matrix(rows, cols, nnz, seed, empty_rows=True, duplicates=True, full_row=False):
    """A scipy CSR (float64) with unsorted duplicate entries summed, plus the raw COO for
    duplicates in the CSR given to the op (sorted within rows, duplicates kept)."""
    rng = np.random.default_rng(seed)
    used = max(1, rows * 3 // 4) if empty_rows else rows
    r = rng.integers(0, used, nnz) if rows else np.zeros(0, np.int64)
    c = rng.integers(0, cols, nnz) if cols else np.zeros(0, np.int64)
    if duplicates and nnz > 4:
        r[:2], c[:2] = r[2:4], c[2:4]
    if full_row and rows and cols:
        r = np.concatenate([r, np.zeros(cols, np.int64)])
        c = np.concatenate([c, np.arange(cols)])
    v = rng.random(r.size) + 0.1
    order = np.lexsort((c, r))
    r, c, v = r[order], c[order], v[order]
    rowptr = np.zeros(rows + 1, np.int64)
    np.add.at(rowptr, r + 1, 1)
    rowptr = np.cumsum(rowptr)
    ref = sp.csr_matrix((v, (r, c)), shape=(rows, cols))
    return rowptr, c, v, ref


def as_torch(rowptr, col, val, itype, dtype):
    return torch.tensor(rowptr, dtype=itype), torch.tensor(col, dtype=itype), torch.tensor(val, dtype=dtype)


def check_product(a, b, itype, dtype, tol):
    ar, ac, av, A = a
    br, bc, bv, B = b
    ar, ac, av = as_torch(ar, ac, av, itype, dtype)
    br, bc, bv = as_torch(br, bc, bv, itype, dtype)
    n_cols = B.shape[1]
    cr, cc = torch.ops.gnnfuse.spgemm_symbolic(ar, ac, br, bc, n_cols)
    ref = (A @ B).tocsr()
    ref.sum_duplicates()
    ref.sort_indices()
    assert cr.dtype == itype and cc.dtype == itype
    assert torch.equal(cr.long(), torch.from_numpy(ref.indptr.astype(np.int64)))
    assert torch.equal(cc.long(), torch.from_numpy(ref.indices.astype(np.int64)))
    cv = torch.ops.gnnfuse.spgemm(ar, ac, av, br, bc, bv, cr, cc, n_cols)
    assert cv.dtype == dtype
    torch.testing.assert_close(cv.double(), torch.from_numpy(ref.data), rtol=tol, atol=tol)
    # One pass through the workspace (a copy of the columns misses the pattern cache): the same
    # pattern and, summed in the same order, the same values, bit for bit; then a cache hit.
    r1, c1, v1 = torch.ops.gnnfuse.spgemm_assemble(ar, ac.clone(), av, br, bc, bv, n_cols)
    assert torch.equal(r1, cr) and torch.equal(c1, cc) and torch.equal(v1, cv)
    hits = _hits("spgemm_symbolic")
    r2, c2, v2 = torch.ops.gnnfuse.spgemm_assemble(ar, ac, av, br, bc, bv, n_cols)
    assert _hits("spgemm_symbolic") == hits + 1 and torch.equal(r2, cr) and torch.equal(c2, cc) and torch.equal(v2, cv)
    assert r2.numel() == 0 or r2.data_ptr() != cr.data_ptr()  # a hit hands out copies


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=IDS.get)
@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1, 1, 1), (30, 20, 25, 60, 80), (64, 64, 64, 600, 600), (50, 7, 300, 40, 900), (0, 5, 4, 0, 10), (6, 0, 5, 0, 0), (5, 5, 5, 0, 0)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_spgemm_matches_scipy(shape, itype, dtype):
    n, k, m, nnz_a, nnz_b = shape
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    a = random_matrix(n, k, nnz_a, seed=1)
    b = random_matrix(k, m, nnz_b, seed=2, full_row=True)
    check_product(a, b, itype, dtype, tol)


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
def test_spgemm_workspace_policies(itype):
    """Rows of every policy in one product: few products (sorted list), wide rows over few
    columns (dense flags, scanned back when dense enough) and wide rows over very many columns
    (hash); the policy is per row, so they mix."""
    n, k = 40, 300
    m = 600_000  # past the dense limit: rows of 33..(m/16) products hash
    rng = np.random.default_rng(5)
    rows, cols = [], []
    for i in range(n):
        deg = [1, 3, 40, 200][i % 4]
        rows += [i] * deg
        cols += list(rng.integers(0, k, deg))
    A = sp.csr_matrix((rng.random(len(rows)) + 0.5, (rows, cols)), shape=(n, k))
    A.sort_indices()
    brow = np.repeat(np.arange(k), 5)
    bcol = rng.integers(0, m, brow.size)
    bcol[: 5 * 20] = rng.integers(0, 64, 100)  # collisions: duplicate output coordinates
    B = sp.csr_matrix((rng.random(brow.size) + 0.5, (brow, bcol)), shape=(k, m))
    B.sort_indices()
    a = (A.indptr, A.indices, A.data, A)
    b = (B.indptr, B.indices, B.data, B)
    check_product(a, b, itype, torch.float64, 1e-12)
    # A dense product (columns few: the dense policy, read back by scanning its flags).
    B2 = sp.random(k, 50, density=0.5, format="csr", random_state=3)
    B2.sort_indices()
    check_product(a, (B2.indptr, B2.indices, B2.data, B2), itype, torch.float64, 1e-12)


def test_spgemm_masked():
    """Values on a given pattern: products outside it are dropped (masked SpGEMM); entries of
    the pattern no product reaches are 0."""
    ar, ac, av, A = random_matrix(20, 15, 80, seed=7)
    br, bc, bv, B = random_matrix(15, 25, 90, seed=8)
    mask = sp.random(20, 25, density=0.3, format="csr", random_state=4)
    mask.sort_indices()
    full = (A @ B).toarray()
    ref = full[mask.nonzero()]  # row-major order = CSR order of the sorted mask
    a = as_torch(ar, ac, av, torch.int64, torch.float64)
    b = as_torch(br, bc, bv, torch.int64, torch.float64)
    cv = torch.ops.gnnfuse.spgemm(*a, *b, torch.from_numpy(mask.indptr).long(), torch.from_numpy(mask.indices).long(), 25)
    torch.testing.assert_close(cv, torch.from_numpy(ref))


def _graph_operands(itype, dtype, seed=0):
    ar, ac, av, _ = random_matrix(12, 9, 40, seed=seed)
    br, bc, bv, _ = random_matrix(9, 11, 35, seed=seed + 1, full_row=True)
    a = as_torch(ar, ac, av, itype, dtype)
    b = as_torch(br, bc, bv, itype, dtype)
    cr, cc = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    return a, b, cr, cc


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
def test_spgemm_gradients(itype):
    a, b, cr, cc = _graph_operands(itype, torch.float64)
    av = a[2].clone().requires_grad_()
    bv = b[2].clone().requires_grad_()

    def f(x, y):
        return torch.ops.gnnfuse.spgemm(a[0], a[1], x, b[0], b[1], y, cr, cc, 11)

    assert torch.autograd.gradcheck(f, (av, bv))
    assert torch.autograd.gradgradcheck(f, (av, bv))


def test_spgemm_gradient_matches_dense():
    a, b, cr, cc = _graph_operands(torch.int64, torch.float64, seed=3)
    av = a[2].clone().requires_grad_()
    bv = b[2].clone().requires_grad_()
    out = torch.ops.gnnfuse.spgemm(a[0], a[1], av, b[0], b[1], bv, cr, cc, 11)
    g = torch.randn_like(out)
    out.backward(g)
    # Dense reference: C = A @ B restricted to the pattern, gradients by torch on dense tensors.
    Ad = torch.sparse_csr_tensor(a[0], a[1], av.detach(), (12, 9)).to_dense().requires_grad_()
    Bd = torch.sparse_csr_tensor(b[0], b[1], bv.detach(), (9, 11)).to_dense().requires_grad_()
    G = torch.sparse_csr_tensor(cr, cc, g, (12, 11)).to_dense()
    (Ad @ Bd * G).sum().backward()
    rows_a = torch.repeat_interleave(torch.arange(12), a[0][1:] - a[0][:-1])
    rows_b = torch.repeat_interleave(torch.arange(9), b[0][1:] - b[0][:-1])
    torch.testing.assert_close(av.grad, Ad.grad[rows_a, a[1]])
    torch.testing.assert_close(bv.grad, Bd.grad[rows_b, b[1]])


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
def test_spgemm_opcheck(itype):
    dtype = torch.float64 if itype == torch.int64 else torch.float32
    a, b, cr, cc = _graph_operands(itype, dtype)
    args = (a[0], a[1], a[2].clone().requires_grad_(), b[0], b[1], b[2].clone().requires_grad_(), cr, cc, 11)
    torch.library.opcheck(torch.ops.gnnfuse.spgemm.default, args, test_utils=OPCHECK_UTILS)
    torch.library.opcheck(
        torch.ops.gnnfuse.spgemm_symbolic.default, (a[0], a[1], b[0], b[1], 11), test_utils=("test_schema", "test_faketensor")
    )


def test_spgemm_torchscript():
    @torch.jit.script
    def product(ar: torch.Tensor, ac: torch.Tensor, av: torch.Tensor, br: torch.Tensor, bc: torch.Tensor, bv: torch.Tensor, n: int):
        cr, cc = torch.ops.gnnfuse.spgemm_symbolic(ar, ac, br, bc, n)
        return cr, cc, torch.ops.gnnfuse.spgemm(ar, ac, av, br, bc, bv, cr, cc, n)

    a, b, cr, cc = _graph_operands(torch.int64, torch.float64)
    r, c, v = product(*a, *b, 11)
    assert torch.equal(r, cr) and torch.equal(c, cc)
    torch.testing.assert_close(v, torch.ops.gnnfuse.spgemm(*a, *b, cr, cc, 11))


def test_spgemm_compile_fullgraph():
    """The numeric op on a cached pattern (the training-loop case) and the symbolic pass with
    its data-dependent size, both under torch.compile(fullgraph=True)."""
    a, b, cr, cc = _graph_operands(torch.int64, torch.float64)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def values(av, bv):
        return torch.ops.gnnfuse.spgemm(a[0], a[1], av, b[0], b[1], bv, cr, cc, 11).sum()

    av = a[2].clone().requires_grad_()
    bv = b[2].clone().requires_grad_()
    values(av, bv).backward()
    av2 = a[2].clone().requires_grad_()
    bv2 = b[2].clone().requires_grad_()
    torch.ops.gnnfuse.spgemm(a[0], a[1], av2, b[0], b[1], bv2, cr, cc, 11).sum().backward()
    torch.testing.assert_close(av.grad, av2.grad)
    torch.testing.assert_close(bv.grad, bv2.grad)

    import torch._dynamo as dynamo

    with dynamo.config.patch(capture_dynamic_output_shape_ops=True):

        @torch.compile(fullgraph=True, backend="aot_eager")
        def full(ar, ac, av, br, bc, bv):
            r, c = torch.ops.gnnfuse.spgemm_symbolic(ar, ac, br, bc, 11)
            return r, c, torch.ops.gnnfuse.spgemm(ar, ac, av, br, bc, bv, r, c, 11)

        r, c, v = full(*a, *b)
    assert torch.equal(r, cr) and torch.equal(c, cc)
    torch.testing.assert_close(v, torch.ops.gnnfuse.spgemm(*a, *b, cr, cc, 11))


def test_symbolic_cache():
    a, b, cr, cc = _graph_operands(torch.int64, torch.float64)
    r1, c1 = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    hits = _hits("spgemm_symbolic")
    r2, c2 = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    assert _hits("spgemm_symbolic") == hits + 1 and torch.equal(r1, r2) and torch.equal(c1, c2)  # a hit
    # ... whose results are the caller's own: changing one changes no other call's result.
    r2b, c2b = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    c2.fill_(7)
    assert torch.equal(c2b, c1) and not torch.equal(c2, c1)
    # An operand changed in place is a miss (its version counter moved).
    bc = b[1].clone()
    r3, c3 = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], bc, 11)
    bc.zero_()
    hits = _hits("spgemm_symbolic")
    r4, c4 = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], bc, 11)
    assert _hits("spgemm_symbolic") == hits
    assert int(c4.max()) == 0 if c4.numel() else True
    # A result changed in place by its user is a miss as well.
    expected = c1.clone()
    c1.fill_(0)
    r5, c5 = torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    assert torch.equal(c5, expected)


def test_cache_releases_results_of_freed_operands():
    """A cached pattern lives as long as its operands: once the key tensor is freed the entry and
    the result it holds go at the next cache access, not after 32 more entries (a first-call
    loop over fresh graphs would otherwise keep 32 coarse patterns alive)."""
    import gc
    import weakref

    a, b, _, _ = _graph_operands(torch.int64, torch.float64)
    refs = []
    for _ in range(3):
        col = a[1].clone()
        r, c = torch.ops.gnnfuse.spgemm_symbolic(a[0], col, b[0], b[1], 11)
        refs.append(weakref.ref(c))
        del r, c, col
    gc.collect()
    torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)  # a cache access drops the dead entries
    assert all(ref() is None for ref in refs)
    # a live operand keeps its entry
    torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    hits = _hits("spgemm_symbolic")
    torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 11)
    assert _hits("spgemm_symbolic") == hits + 1


def test_spgemm_python_api():
    A = sp.random(30, 20, density=0.2, format="csr", random_state=1)
    B = sp.random(20, 40, density=0.1, format="csr", random_state=2)
    g, v = gnnfuse.spgemm(A, B)
    ref = (A @ B).tocsr()
    ref.sort_indices()
    assert (g.num_nodes, g.num_src_nodes) == (30, 40)
    torch.testing.assert_close(torch.sparse_csr_tensor(g.rowptr, g.col, v, (30, 40)).to_dense(), torch.from_numpy(ref.toarray()))
    # torch sparse tensors, values differentiable
    At = torch.from_numpy(A.toarray()).to_sparse_csr()
    Bt = torch.from_numpy(B.toarray()).to_sparse()
    av = At.values().clone().requires_grad_()
    g2, v2 = gnnfuse.spgemm(At, Bt, a_values=av)
    v2.sum().backward()
    assert av.grad is not None and av.grad.shape == av.shape
    with pytest.raises(RuntimeError, match="must have 20 rows"):
        gnnfuse.spgemm(A, A)


# ---------------------------------------------------------------------------- errors
def test_spgemm_bad_input():
    a, b, cr, cc = _graph_operands(torch.int64, torch.float64)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_symbolic: argument 'n_cols' must be non-negative"):
        torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], -1)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_symbolic: argument 'acol'.*\[0, 9\)"):
        torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1] + 9, b[0], b[1], 11)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_symbolic: argument 'bcol'.*\[0, 5\)"):
        torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1], 5)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_symbolic: argument 'bcol' must have the dtype of 'browptr'"):
        torch.ops.gnnfuse.spgemm_symbolic(a[0], a[1], b[0], b[1].int(), 11)
    # The pattern must be sorted without duplicates.
    bad = cc.clone()
    r0 = int((cr[1:] - cr[:-1] >= 2).nonzero()[0])
    p = int(cr[r0])
    bad[p], bad[p + 1] = cc[p + 1], cc[p]
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm: argument 'ccol' must hold strictly increasing columns"):
        torch.ops.gnnfuse.spgemm(*a, *b, cr, bad, 11)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm: argument 'avals'"):
        torch.ops.gnnfuse.spgemm(a[0], a[1], a[2][:-1], *b, cr, cc, 11)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm: argument 'bvals' must have the dtype"):
        torch.ops.gnnfuse.spgemm(*a, b[0], b[1], b[2].float(), cr, cc, 11)


# ---------------------------------------------------------------------------- coarsening
def coarsen_reference(case, cluster, m, w):
    n = case.num_nodes
    A = sp.coo_matrix((w.numpy(), (case.dst.numpy(), case.src.numpy())), shape=(n, n)).tocsr()
    P = sp.csr_matrix((np.ones(n), (np.arange(n), cluster.numpy())), shape=(n, m))
    R = (P.T @ A @ P).tocsr()
    R.sum_duplicates()
    R.sort_indices()
    return R


SQUARE = ["empty_rows_isolated", "self_loops_duplicates", "power_law", "uniform", "no_edges"]


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", SQUARE)
def test_coarsen_matches_scipy(name, itype):
    case = CASES[name]
    n = case.num_nodes
    gen = torch.Generator().manual_seed(0)
    m = max(1, n // 3)
    cluster = torch.randint(0, m, (n,), generator=gen)
    w = torch.rand(case.num_edges, dtype=torch.float64, generator=gen) + 0.1
    g, cw = gnnfuse.coarsen(case.edge_index_as(itype), cluster, m, w)
    R = coarsen_reference(case, cluster, m, w)
    assert g.rowptr.dtype == itype
    assert torch.equal(g.rowptr.long(), torch.from_numpy(R.indptr.astype(np.int64)))
    assert torch.equal(g.col.long(), torch.from_numpy(R.indices.astype(np.int64)))
    torch.testing.assert_close(cw, torch.from_numpy(R.data))
    # Unweighted: merged edges count.
    g1, c1 = gnnfuse.coarsen(case.edge_index_as(itype), cluster, m)
    R1 = coarsen_reference(case, cluster, m, torch.ones(case.num_edges, dtype=torch.float64))
    torch.testing.assert_close(c1.double(), torch.from_numpy(R1.data))
    # Without self-loops.
    g2, c2 = gnnfuse.coarsen(case.edge_index_as(itype), cluster, m, w, remove_self_loops=True)
    R2 = R.tolil()
    R2.setdiag(0)
    R2 = R2.tocsr()
    R2.eliminate_zeros()
    R2.sort_indices()
    dense2 = torch.sparse_csr_tensor(g2.rowptr.long(), g2.col.long(), c2, (m, m)).to_dense()
    torch.testing.assert_close(dense2, torch.from_numpy(R2.toarray()))
    assert not bool((g2.col.long() == torch.repeat_interleave(torch.arange(m), g2.rowptr.long().diff())).any())


def test_coarsen_gradients():
    case = CASES["self_loops_duplicates"]
    n = case.num_nodes
    cluster = torch.arange(n) % 5
    w = (torch.rand(case.num_edges, dtype=torch.float64) + 0.1).requires_grad_()
    f = lambda w: gnnfuse.coarsen(case.edge_index, cluster, 5, w)[1]  # noqa: E731
    assert torch.autograd.gradcheck(f, (w,))
    assert torch.autograd.gradgradcheck(f, (w,))
    # dA_ij = dC[cluster(i), cluster(j)]
    g, cw = gnnfuse.coarsen(case.edge_index, cluster, 5, w)
    upstream = torch.randn_like(cw)
    (grad,) = torch.autograd.grad(cw, w, upstream)
    G = torch.sparse_csr_tensor(g.rowptr, g.col, upstream, (5, 5)).to_dense()
    torch.testing.assert_close(grad, G[cluster[case.dst], cluster[case.src]])


def test_coarsen_opcheck():
    case = CASES["power_law"]
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index, case.num_nodes)
    cluster = torch.arange(case.num_nodes) % 17
    prowptr, pcol, mrowptr, mcol = assignment_csr(cluster, 17, torch.int64)
    cr, cc = torch.ops.gnnfuse.coarsen_symbolic(mrowptr, mcol, rowptr, col, prowptr, pcol, 17)
    w = torch.rand(col.numel(), dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(
        torch.ops.gnnfuse.coarsen.default, (mrowptr, mcol, rowptr, col, w, prowptr, pcol, cr, cc, 17), test_utils=OPCHECK_UTILS
    )


def test_coarsen_bad_input():
    case = CASES["uniform"]
    with pytest.raises(RuntimeError, match=r"gnnfuse.coarsen: argument 'cluster' must hold values in \[0, 4\)"):
        gnnfuse.coarsen(case.edge_index, torch.arange(case.num_nodes), 4)
    with pytest.raises(RuntimeError, match="one entry per node"):
        gnnfuse.coarsen(gnnfuse.Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes), torch.zeros(3, dtype=torch.long), 1)
    with pytest.raises(RuntimeError, match="1-D int32 or int64"):
        gnnfuse.coarsen(case.edge_index, torch.zeros(case.num_nodes), 1)
    # The generated op itself checks the assignment CSR against num_clusters (C++, every frontend).
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index, case.num_nodes)
    cluster = torch.arange(case.num_nodes) % 4
    prowptr, pcol, mrowptr, mcol = assignment_csr(cluster, 4, torch.int64)
    with pytest.raises(RuntimeError, match=r"gnnfuse::coarsen_symbolic: argument 'pcol' must hold column indices in \[0, 3\)"):
        torch.ops.gnnfuse.coarsen_symbolic(mrowptr, mcol, rowptr, col, prowptr, pcol, 3)


def test_coarsen_bad_arguments_named():
    case = CASES["uniform"]
    cluster = torch.arange(case.num_nodes) % 4
    with pytest.raises(RuntimeError, match=r"gnnfuse.coarsen: argument 'num_clusters' must be >= 0 \(got -1\)"):
        gnnfuse.coarsen(case.edge_index, cluster, -1)
    with pytest.raises(RuntimeError, match=r"argument 'num_clusters' must be >= 0"):
        gnnfuse.coarsen(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long), -1)
    # Non-square matrices of every form are refused as such (a torch one whose extra column is
    # empty as well).
    with pytest.raises(RuntimeError, match=r"argument 'graph' must be square \(got 3 x 4\)"):
        gnnfuse.coarsen(sp.csr_matrix(np.ones((3, 4))), torch.tensor([0, 0, 1]), 2)
    dense = torch.zeros(3, 4)
    dense[0, 1], dense[2, 0] = 1.0, 2.0
    with pytest.raises(RuntimeError, match=r"argument 'graph' must be square \(got 3 x 4\)"):
        gnnfuse.coarsen(dense.to_sparse(), torch.tensor([0, 0, 1]), 2)
    pool = gnnfuse.nn.CoarsenPool("sum")
    with pytest.raises(RuntimeError, match=rf"CoarsenPool: argument 'x' must have one row per node, {case.num_nodes}"):
        pool(torch.randn(case.num_nodes + 2, 3), case.edge_index, torch.arange(case.num_nodes) % 4, 4)
    with pytest.raises(ValueError, match="num_clusters given without cluster"):
        pool(torch.randn(case.num_nodes, 3), case.edge_index, None, 4)


def test_repeated_coarsening_hits_the_pattern_cache():
    """Coarsening a Graph by the same cluster tensor again (every epoch of a pooling layer) runs
    the numeric pass on the cached pattern; results are independent tensors; a cluster tensor
    changed in place is coarsened anew."""
    case = CASES["power_law"]
    g = gnnfuse.Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)
    cluster = torch.arange(case.num_nodes) % 5
    c1, w1 = gnnfuse.coarsen(g, cluster, 5)
    hits = _hits("coarsen_symbolic")
    c2, w2 = gnnfuse.coarsen(g, cluster, 5)
    assert _hits("coarsen_symbolic") == hits + 1
    assert torch.equal(c1.rowptr, c2.rowptr) and torch.equal(c1.col, c2.col) and torch.equal(w1, w2)
    c2.col.zero_()  # the caller's own tensor
    assert not torch.equal(c1.col, c2.col)
    pool = gnnfuse.nn.CoarsenPool("mean")
    x = torch.randn(case.num_nodes, 4)
    pool(x, g, cluster, 5)
    hits = _hits("coarsen_symbolic")
    xp, cg, cw = pool(x, g, cluster, 5)
    assert _hits("coarsen_symbolic") == hits + 1
    cluster.fill_(0)  # in place: a new assignment, one cluster
    c3, w3 = gnnfuse.coarsen(g, cluster, 5)
    assert c3.rowptr.tolist() == [0, 1, 1, 1, 1, 1] and c3.col.tolist() == [0]
    assert float(w3.sum()) == case.edge_index.size(1)


def test_spgemm_operands_of_mixed_forms():
    """A scipy matrix (int32 indices, float64 values) times an edge_index Graph (int64, no
    values: ones): indices meet as int64, the ones take the other operand's dtype."""
    A = sp.random(7, 5, density=0.4, format="csr", random_state=3)
    perm = [1, 0, 4, 2, 3]
    B = gnnfuse.Graph.from_edge_index(torch.tensor([perm, list(range(5))]), num_nodes=5)  # B[i, perm[i]] = 1
    g, v = gnnfuse.spgemm(A, B)
    ref = A @ torch.eye(5, dtype=torch.float64)[:, perm].t().numpy()
    torch.testing.assert_close(torch.sparse_csr_tensor(g.rowptr, g.col, v, (7, 5)).to_dense(), torch.from_numpy(ref))
    eb = gnnfuse.Graph.from_edge_index(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), num_nodes=5)
    g2, v2 = gnnfuse.spgemm(eb, eb, a_values=torch.full((5,), 2.0, dtype=torch.float64))
    assert v2.dtype == torch.float64 and torch.equal(v2, torch.full((5,), 2.0, dtype=torch.float64))


# ---------------------------------------------------------------------------- clustering, pooling
def test_heavy_edge_matching_properties():
    case = CASES["power_law"]
    ei = torch.cat([case.edge_index, case.edge_index.flip(0)], 1)  # symmetric
    n = case.num_nodes
    cluster, m = heavy_edge_matching(ei, num_nodes=n, generator=torch.Generator().manual_seed(1))
    assert cluster.shape == (n,) and int(cluster.min()) == 0 and int(cluster.max()) == m - 1
    sizes = torch.bincount(cluster, minlength=m)
    assert int(sizes.min()) >= 1 and int(sizes.max()) <= 2
    adj = set(map(tuple, ei.t().tolist()))
    for c in (sizes == 2).nonzero().flatten().tolist():
        u, v = (cluster == c).nonzero().flatten().tolist()
        assert (u, v) in adj and u != v
    assert m < n  # a power-law graph with edges matches something
    # The heaviest edge of a node wins: a star whose centre is heavy to one leaf.
    ei2 = torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]])
    w2 = torch.tensor([1.0, 5.0, 1.0, 1.0, 5.0, 1.0])
    cl2, m2 = heavy_edge_matching(ei2, w2, num_nodes=4, order=torch.tensor([0, 1, 2, 3]))
    assert cl2[0] == cl2[2] and m2 == 3
    with pytest.raises(RuntimeError, match="must be a permutation"):
        heavy_edge_matching(ei2, w2, num_nodes=4, order=torch.tensor([0, 0, 2, 3]))


def test_coarsen_levels_shrink():
    case = CASES["power_law"]
    ei = torch.cat([case.edge_index, case.edge_index.flip(0)], 1)
    levels = coarsen_levels(gnnfuse.Graph.from_edge_index(ei, num_nodes=case.num_nodes), 3, generator=torch.Generator().manual_seed(0))
    sizes = [case.num_nodes] + [g.num_nodes for g, _, _ in levels]
    assert all(b < a for a, b in zip(sizes, sizes[1:]))
    # Total edge weight is preserved by coarsening (self-loops kept).
    total = [float(w.sum()) for _, w, _ in levels]
    assert all(abs(t - ei.size(1)) < 1e-3 for t in total)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_coarsen_pool(reduce):
    case = CASES["uniform"]
    n = case.num_nodes
    cluster = torch.arange(n) % 9
    x = torch.randn(n, 7, dtype=torch.float64, requires_grad=True)
    pool = gnnfuse.nn.CoarsenPool(reduce)
    xp, g, w = pool(x, case.edge_index, cluster, 9)
    ref = torch.stack([getattr(x[cluster == c], {"sum": "sum", "mean": "mean", "max": "amax"}[reduce])(0) for c in range(9)])
    torch.testing.assert_close(xp, ref)
    assert g.num_nodes == 9 and w.shape == g.col.shape
    assert torch.autograd.gradcheck(lambda x: pool(x, case.edge_index, cluster, 9)[0], (x,))
    xp2, g2, _ = gnnfuse.nn.CoarsenPool(reduce)(x, case.edge_index)  # matching when no clusters given
    assert xp2.size(0) == g2.num_nodes < n


def _coarsen_args(itype=torch.int64, dtype=torch.float64):
    case = CASES["power_law"]
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index.to(itype), case.num_nodes)
    cluster = torch.arange(case.num_nodes) % 17
    prowptr, pcol, mrowptr, mcol = assignment_csr(cluster, 17, itype)
    cr, cc = torch.ops.gnnfuse.coarsen_symbolic(mrowptr, mcol, rowptr, col, prowptr, pcol, 17)
    w = torch.rand(col.numel(), dtype=dtype, generator=torch.Generator().manual_seed(3))
    return (mrowptr, mcol, rowptr, col, prowptr, pcol), w, cr, cc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=lambda d: str(d).split(".")[1])
@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", SQUARE)
def test_coarsen_assemble_matches_two_pass(name, itype, dtype):
    """coarsen_assemble (pattern and values in one pass) equals the symbolic pass then the
    numeric pass: the same pattern, the same values bit for bit (same summation order), for
    cluster counts that reach the sorted-list and dense workspaces (and the flag scan)."""
    case = CASES[name]
    n = case.num_nodes
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index.to(itype), n)
    w = (torch.rand(col.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(3)) + 0.1).to(dtype)
    for m in (1, max(1, n // 7), max(1, n // 2), n):
        cluster = torch.randint(0, m, (n,), generator=torch.Generator().manual_seed(m))
        prowptr, pcol, mrowptr, mcol = assignment_csr(cluster, m, itype)
        cr, cc = torch.ops.gnnfuse.coarsen_symbolic(mrowptr, mcol, rowptr, col, prowptr, pcol, m)
        cv = torch.ops.gnnfuse.coarsen(mrowptr, mcol, rowptr, col, w, prowptr, pcol, cr, cc, m)
        r1, c1, v1 = torch.ops.gnnfuse.coarsen_assemble(mrowptr, mcol, rowptr, col.clone(), w, prowptr, pcol, m)
        assert r1.dtype == itype and c1.dtype == itype and v1.dtype == dtype
        assert torch.equal(r1, cr) and torch.equal(c1, cc) and torch.equal(v1, cv)


def test_coarsen_assemble_hash_workspace():
    """Coarse rows past the dense-flag limit (600,000 clusters) with few (sorted list) and many
    (hash) products, against scipy."""
    n, m = 3000, 600_000
    rng = np.random.default_rng(11)
    src = rng.integers(0, n, 40_000)
    dst = np.concatenate([rng.integers(0, 30, 30_000), rng.integers(0, n, 10_000)])  # a few wide rows
    ei = torch.from_numpy(np.stack([src, dst]))
    w = torch.from_numpy(rng.random(src.size) + 0.1)
    cluster = torch.from_numpy(rng.choice(m, n, replace=False))
    g, cw = gnnfuse.coarsen(ei, cluster, m, w)
    A = sp.coo_matrix((w.numpy(), (dst, src)), shape=(n, n)).tocsr()
    P = sp.csr_matrix((np.ones(n), (np.arange(n), cluster.numpy())), shape=(n, m))
    R = (P.T @ A @ P).tocsr()
    R.sum_duplicates()
    R.sort_indices()
    assert torch.equal(g.rowptr.long(), torch.from_numpy(R.indptr.astype(np.int64)))
    assert torch.equal(g.col.long(), torch.from_numpy(R.indices.astype(np.int64)))
    torch.testing.assert_close(cw, torch.from_numpy(R.data))


def test_assemble_cache_and_gradient_path():
    """The assembled pattern is the symbolic pass's cached one; with a gradient wanted the values
    come from the differentiable op (gradients equal the two-pass form's)."""
    pat, w, _, _ = _coarsen_args()
    mr, mc, r, c, pr, pc = pat
    c = c.clone()  # a miss
    r1, c1, v1 = torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, w, pr, pc, 17)
    hits = _hits("coarsen_symbolic")
    r2, c2 = torch.ops.gnnfuse.coarsen_symbolic(mr, mc, r, c, pr, pc, 17)
    assert _hits("coarsen_symbolic") == hits + 1 and torch.equal(r2, r1) and torch.equal(c2, c1)
    assert v1.grad_fn is None
    wg = w.clone().requires_grad_()
    r3, c3, v3 = torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, wg, pr, pc, 17)
    assert v3.grad_fn is not None and torch.equal(v3.detach(), v1)
    up = torch.randn_like(v3)
    (g1,) = torch.autograd.grad(v3, wg, up)
    wg2 = w.clone().requires_grad_()
    (g2,) = torch.autograd.grad(torch.ops.gnnfuse.coarsen(mr, mc, r, c, wg2, pr, pc, r2, c2, 17), wg2, up)
    assert torch.equal(g1, g2)
    with torch.no_grad():
        assert torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, wg, pr, pc, 17)[2].grad_fn is None


def test_assemble_opcheck():
    pat, w, _, _ = _coarsen_args()
    mr, mc, r, c, pr, pc = pat
    wg = w.clone().requires_grad_()
    torch.library.opcheck(torch.ops.gnnfuse.coarsen_assemble.default, (mr, mc, r, c, wg, pr, pc, 17), test_utils=ASSEMBLE_UTILS)
    a, b, _, _ = _graph_operands(torch.int64, torch.float64)
    args = (a[0], a[1], a[2].clone().requires_grad_(), b[0], b[1], b[2].clone().requires_grad_(), 11)
    torch.library.opcheck(torch.ops.gnnfuse.spgemm_assemble.default, args, test_utils=ASSEMBLE_UTILS)


def test_assemble_torchscript_and_compile():
    import torch._dynamo as dynamo

    pat, w, cr, cc = _coarsen_args()
    mr, mc, r, c, pr, pc = pat

    @torch.jit.script
    def coarse(mr: torch.Tensor, mc: torch.Tensor, r: torch.Tensor, c: torch.Tensor, w: torch.Tensor, pr: torch.Tensor, pc: torch.Tensor, k: int):
        return torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, w, pr, pc, k)

    r1, c1, v1 = coarse(mr, mc, r, c.clone(), w, pr, pc, 17)
    assert torch.equal(r1, cr) and torch.equal(c1, cc)
    torch.testing.assert_close(v1, torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, cr, cc, 17))
    with dynamo.config.patch(capture_dynamic_output_shape_ops=True):

        @torch.compile(fullgraph=True, backend="aot_eager")
        def full(w, c):
            r_, c_, v_ = torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, w, pr, pc, 17)
            return r_, c_, v_ * 2

        r2, c2, v2 = full(w, c.clone())
    assert torch.equal(r2, cr) and torch.equal(c2, cc)
    torch.testing.assert_close(v2, 2 * v1)


def test_assemble_bad_input():
    pat, w, _, _ = _coarsen_args()
    mr, mc, r, c, pr, pc = pat
    with pytest.raises(RuntimeError, match=r"gnnfuse::coarsen_assemble: argument 'edge_weight' must have size"):
        torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, w[:-1], pr, pc, 17)
    with pytest.raises(RuntimeError, match=r"gnnfuse::coarsen_assemble: argument 'edge_weight' must be a float32"):
        torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, w.long(), pr, pc, 17)
    with pytest.raises(RuntimeError, match=r"gnnfuse::coarsen_assemble: argument 'pcol' must hold column indices in \[0, 5\)"):
        torch.ops.gnnfuse.coarsen_assemble(mr, mc, r, c, w, pr, pc, 5)
    a, b, _, _ = _graph_operands(torch.int64, torch.float64)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_assemble: argument 'bvals' must have the dtype of 'avals'"):
        torch.ops.gnnfuse.spgemm_assemble(a[0], a[1], a[2], b[0], b[1], b[2].float(), 11)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_assemble: argument 'n_cols' must be non-negative"):
        torch.ops.gnnfuse.spgemm_assemble(*a, *b, -1)


def test_coarsen_symbolic_opcheck():
    pat, _, _, _ = _coarsen_args()
    torch.library.opcheck(torch.ops.gnnfuse.coarsen_symbolic.default, (*pat, 17), test_utils=("test_schema", "test_faketensor"))


def test_coarsen_torchscript():
    @torch.jit.script
    def coarse(mr: torch.Tensor, mc: torch.Tensor, r: torch.Tensor, c: torch.Tensor, w: torch.Tensor, pr: torch.Tensor, pc: torch.Tensor, k: int):
        cr, cc = torch.ops.gnnfuse.coarsen_symbolic(mr, mc, r, c, pr, pc, k)
        return cr, cc, torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, cr, cc, k)

    pat, w, cr, cc = _coarsen_args()
    mr, mc, r, c, pr, pc = pat
    r2, c2, v2 = coarse(mr, mc, r, c, w, pr, pc, 17)
    assert torch.equal(r2, cr) and torch.equal(c2, cc)
    torch.testing.assert_close(v2, torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, cr, cc, 17))


def test_coarsen_compile_fullgraph():
    import torch._dynamo as dynamo

    pat, w, cr, cc = _coarsen_args()
    mr, mc, r, c, pr, pc = pat

    @torch.compile(fullgraph=True, backend="aot_eager")
    def weights(w):
        return torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, cr, cc, 17).pow(2).sum()

    w1 = w.clone().requires_grad_()
    weights(w1).backward()
    w2 = w.clone().requires_grad_()
    torch.ops.gnnfuse.coarsen(mr, mc, r, c, w2, pr, pc, cr, cc, 17).pow(2).sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad)

    with dynamo.config.patch(capture_dynamic_output_shape_ops=True):

        @torch.compile(fullgraph=True, backend="aot_eager")
        def full(w):
            r_, c_ = torch.ops.gnnfuse.coarsen_symbolic(mr, mc, r, c, pr, pc, 17)
            return r_, c_, torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, r_, c_, 17)

        r3, c3, v3 = full(w)
    assert torch.equal(r3, cr) and torch.equal(c3, cc)
    torch.testing.assert_close(v3, torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, cr, cc, 17))


def reference_matching(rowptr, col, w, order):
    """Greedy heavy-edge matching written from its definition (float64, plain Python)."""
    n = len(rowptr) - 1
    deg = [sum(w[rowptr[u]:rowptr[u + 1]]) for u in range(n)]
    cluster = [-1] * n
    nxt = 0
    for u in order:
        if cluster[u] >= 0:
            continue
        best, best_score = -1, -float("inf")
        for p in range(rowptr[u], rowptr[u + 1]):
            v = col[p]
            if v == u or cluster[v] >= 0:
                continue
            score = w[p] * ((1 / deg[u] if deg[u] else 0) + (1 / deg[v] if deg[v] else 0))
            if score > best_score:
                best, best_score = v, score
        cluster[u] = nxt
        if best >= 0:
            cluster[best] = nxt
        nxt += 1
    return cluster, nxt


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", ["power_law", "self_loops_duplicates", "empty_rows_isolated", "no_edges"])
def test_heavy_edge_matching_matches_reference(name, itype):
    case = CASES[name]
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index.to(itype), case.num_nodes)
    gen = torch.Generator().manual_seed(4)
    w = torch.rand(col.numel(), dtype=torch.float64, generator=gen) + 0.01
    order = torch.randperm(case.num_nodes, generator=gen)
    cluster = torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, w, order)
    ref, ref_m = reference_matching(rowptr.tolist(), col.tolist(), w.tolist(), order.tolist())
    assert cluster.tolist() == ref and (int(cluster.max()) + 1 if ref_m else 0) == ref_m
    cluster1 = torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, None, order)
    ref1, _ = reference_matching(rowptr.tolist(), col.tolist(), [1.0] * col.numel(), order.tolist())
    assert cluster1.tolist() == ref1


def test_heavy_edge_matching_deploy():
    """opcheck, TorchScript and torch.compile(fullgraph=True)."""
    case = CASES["power_law"]
    rowptr, col, _ = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index, case.num_nodes)
    order = torch.randperm(case.num_nodes, generator=torch.Generator().manual_seed(0))
    want = torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, None, order)
    torch.library.opcheck(torch.ops.gnnfuse.heavy_edge_matching.default, (rowptr, col, None, order), test_utils=("test_schema", "test_faketensor"))

    @torch.jit.script
    def scripted(rowptr: torch.Tensor, col: torch.Tensor, order: torch.Tensor):
        return torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, None, order)

    assert torch.equal(scripted(rowptr, col, order), want)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def compiled(rowptr, col, order):
        return torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, None, order) * 2

    assert torch.equal(compiled(rowptr, col, order), want * 2)
    with pytest.raises(RuntimeError, match=r"gnnfuse::heavy_edge_matching: argument 'edge_weight'"):
        torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, torch.ones(3), order)


def test_spgemm_over_a_huge_column_extent_stays_small():
    """The numeric pass kept a dense row map over the output's columns per worker: a tiny product
    with n_cols = 2^31 - 1 allocated 16 GiB (int64) per worker and was killed (found by the
    adversarial review). Past runtime::kRowMapColumns columns it locates by binary search: run in
    a subprocess under a 6 GiB address-space limit, every index dtype, values against scipy; and a
    product just past the map's extent (search) against scipy too."""
    import os
    import subprocess
    import sys

    probe = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
import numpy as np, scipy.sparse as sp, torch, gnnfuse
sys.path.insert(0, sys.argv[1])
from test_spgemm import random_matrix
for n_cols in (2**31 - 1, 2**20 + 7):
    for itype in (torch.int32, torch.int64):
        a = random_matrix(20, 15, 60, 1)
        br, bc, bv, B = random_matrix(15, 12, 50, 2)
        bc = bc * (n_cols // 12)  # spread over the extent, still sorted within rows
        ar, ac, av = (torch.tensor(x) for x in a[:3])
        cr, cc = torch.ops.gnnfuse.spgemm_symbolic(ar.to(itype), ac.to(itype), torch.tensor(br).to(itype), torch.tensor(bc).to(itype), n_cols)
        cv = torch.ops.gnnfuse.spgemm(ar.to(itype), ac.to(itype), av, torch.tensor(br).to(itype), torch.tensor(bc).to(itype), torch.tensor(bv),
                                      cr, cc, n_cols)
        # (scipy's product keeps a dense row over the columns too: the reference is the product
        # over the 12 columns, whose columns then spread as B's did)
        ref = (a[3] @ B).tocsr()
        ref.sum_duplicates(); ref.sort_indices()
        assert np.array_equal(cc.long().numpy(), ref.indices.astype(np.int64) * (n_cols // 12))
        assert np.allclose(cv.numpy(), ref.data, rtol=1e-12, atol=0)
print("ok")
"""
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", probe, here], cwd=here, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-3000:]


# Shapes where cuSPARSE's SpGEMM fails or returns zeros (issue 26): regression tests of ours,
# run on the CPU kernels and, in test_cuda_emulated's spgemm-coarsen run, on the CUDA kernels
# (bench_spgemm.py --regressions runs them at full size on a GPU beside torch.sparse).
def _product_against_scipy(A, B, itype, dtype, tol):
    ar, ac, av = as_torch(A.indptr, A.indices, A.data, itype, dtype)
    br, bc, bv = as_torch(B.indptr, B.indices, B.data, itype, dtype)
    cr, cc = torch.ops.gnnfuse.spgemm_symbolic(ar, ac, br, bc, B.shape[1])
    cv = torch.ops.gnnfuse.spgemm(ar, ac, av, br, bc, bv, cr, cc, B.shape[1])
    ref = (A @ B).tocsr()
    ref.sum_duplicates()
    ref.sort_indices()
    assert torch.equal(cr.long(), torch.from_numpy(ref.indptr.astype(np.int64)))
    assert torch.equal(cc.long(), torch.from_numpy(ref.indices.astype(np.int64)))
    torch.testing.assert_close(cv.double(), torch.from_numpy(ref.data), rtol=tol, atol=tol)
    return cr, cc, cv


@pytest.mark.parametrize("itype,dtype", [(torch.int32, torch.float32), (torch.int64, torch.float64)], ids=["int32-f32", "int64-f64"])
def test_gram_product_with_a_dense_result_cupy_10033(itype, dtype):
    """cupy #10033: X.T @ X for X = random(N, 5000, density 0.05) through cuSPARSE's SpGEMM is
    right at N = 10k, fails (INSUFFICIENT_RESOURCES) at 20k and returns all zeros at 50k, though
    the dense result fits. The shape scaled to run everywhere (N = 2000, 500 columns): a 99% dense
    500 x 500 result from 1.25M products, 2500 per output row (on CUDA: rows in shared-memory sets
    here, in dense flags at full size)."""
    X = sp.random(2000, 500, density=0.05, format="csr", dtype=np.float64, random_state=42)
    X.sort_indices()
    _, _, cv = _product_against_scipy(X.T.tocsr(), X, itype, dtype, 1e-4 if dtype == torch.float32 else 1e-12)
    assert cv.numel() > 0.99 * 500 * 500 and bool((cv != 0).all())


def test_poisson_product_past_four_million_rows_ginkgo_1794():
    """ginkgo #1794: cuSPARSE's default SpGEMM estimates an oversized buffer for matrices past
    about 4M rows and fails whatever the GPU's memory (building a Poisson operator by a product).
    Its shape: the 1-D Laplacian of 4,194,305 rows squared (int32 indices), against scipy."""
    n = 4194305
    A = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    A.sort_indices()
    cr, cc, cv = _product_against_scipy(A, A, torch.int32, torch.float64, 0)
    assert cc.numel() == 5 * n - 6 and cv[5 * (n // 2) - 3 : 5 * (n // 2) + 2].tolist() == [1.0, -4.0, 6.0, -4.0, 1.0]


def test_bench_regressions_mode_runs(tmp_path):
    """bench_spgemm.py --regressions (what the GPU script runs at full size), shrunk: every shape
    computed right by gnnfuse, an outcome and a time per method in its JSON."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / "reg.json"
    proc = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_spgemm.py"), "--regressions", "--regression-scale", "0.02",
                           "--repeats", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["case"], r["method"]) for r in rows} == {(c, m) for c in ("cupy-10033 XtX", "ginkgo-1794 poisson") for m in ("gnnfuse", "torch_sparse")}
    for r in rows:
        if r["method"] == "gnnfuse":
            assert r["outcome"] == "ok" and r["ms"] > 0 and r["rel_err"] <= 1e-4, r
