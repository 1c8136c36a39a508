"""CSR construction: edge_index_to_csr, csr_transpose and gnnfuse.Graph."""

from __future__ import annotations

import pytest
import torch

import gnnfuse
import gnnfuse.nn

from gnnfuse import Graph
from graphs import (
    CASE_NAMES,
    CASES,
    csr_rows,
    edge_weights,
    ref_csr,
    ref_csr_transpose,
)

INDEX_DTYPES = [torch.int32, torch.int64]
IDS = {torch.int32: "int32", torch.int64: "int64"}


def _eq(got, want, name):
    assert torch.equal(got.long(), want.long()), f"{name}: got {got.tolist()}, want {want.tolist()}"


# ----------------------------------------------------------------------- the generators
def test_cases_cover_the_edge_cases():
    """The test graphs really contain what the suite claims to cover."""

    def has_dups(c):
        return c.num_edges > 0 and torch.unique(c.edge_index, dim=1).size(1) < c.num_edges

    def has_loops(c):
        return bool((c.src == c.dst).any())

    def empty_rows(c):
        return int((torch.bincount(c.dst, minlength=c.num_nodes) == 0).sum())

    def isolated(c):
        deg = torch.bincount(c.dst, minlength=c.num_nodes) + torch.bincount(c.src, minlength=c.num_nodes)
        return int((deg == 0).sum())

    assert CASES["no_edges"].num_edges == 0
    assert CASES["single_node"].num_nodes == 1
    assert has_loops(CASES["single_node_loop"]) and has_dups(CASES["single_node_loop"])
    assert has_loops(CASES["self_loops_duplicates"]) and has_dups(CASES["self_loops_duplicates"])
    assert empty_rows(CASES["empty_rows_isolated"]) >= 25 and isolated(CASES["empty_rows_isolated"]) >= 25
    pl = CASES["power_law"]
    indeg = torch.bincount(pl.dst, minlength=pl.num_nodes)
    assert indeg.max() >= 200 and empty_rows(pl) >= 20  # hubs and many empty rows
    assert CASES["bipartite_more_sources"].num_src_nodes > CASES["bipartite_more_sources"].num_nodes
    assert CASES["bipartite_fewer_sources"].num_src_nodes < CASES["bipartite_fewer_sources"].num_nodes
    for c in CASES.values():
        if c.num_edges:
            assert int(c.src.max()) < c.num_src_nodes and int(c.dst.max()) < c.num_nodes


# ------------------------------------------------------------------- edge_index_to_csr
# The CPU kernels, and the device implementation (ATen's sorts and searches: what CUDA tensors
# run) called on CPU tensors through its private op.
TO_CSR = {"cpu": torch.ops.gnnfuse.edge_index_to_csr, "device": torch.ops.gnnfuse._edge_index_to_csr_device}
TRANSPOSE = {"cpu": torch.ops.gnnfuse.csr_transpose, "device": torch.ops.gnnfuse._csr_transpose_device}


@pytest.mark.parametrize("impl", list(TO_CSR))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_edge_index_to_csr_matches_reference(name, index_dtype, impl):
    case = CASES[name]
    ei = case.edge_index_as(index_dtype)
    # the op bounds sources and targets alike by num_nodes: a square view of bipartite cases
    n = max(case.num_nodes, case.num_src_nodes)
    rowptr, col, perm = TO_CSR[impl](ei, n)
    assert rowptr.dtype == index_dtype and col.dtype == index_dtype
    assert perm.dtype == torch.int64
    assert rowptr.shape == (n + 1,)
    assert col.shape == perm.shape == (case.num_edges,)
    want_rowptr, want_col, want_perm = ref_csr(case.edge_index, n)
    _eq(rowptr, want_rowptr, "rowptr")
    _eq(col, want_col, "col")
    _eq(perm, want_perm, "perm (sorted by (target, source), stable for duplicates)")
    # the documented meaning of perm
    _eq(col, ei[0][perm], "col == edge_index[0][perm]")
    # the input is not modified
    _eq(ei, case.edge_index, "edge_index unchanged")


@pytest.mark.parametrize("impl", list(TO_CSR))
def test_edge_index_to_csr_noncontiguous_input(impl):
    case = CASES["uniform"]
    ei_t = case.edge_index.t().contiguous()  # [E, 2]
    ei = ei_t.t()  # a non-contiguous [2, E] view
    assert not ei.is_contiguous()
    rowptr, col, perm = TO_CSR[impl](ei, case.num_nodes)
    want_rowptr, want_col, want_perm = ref_csr(case.edge_index, case.num_nodes)
    _eq(rowptr, want_rowptr, "rowptr")
    _eq(col, want_col, "col")
    _eq(perm, want_perm, "perm")


@pytest.mark.parametrize("impl", list(TO_CSR))
def test_edge_index_to_csr_extra_nodes(impl):
    """num_nodes larger than the largest index: trailing empty rows."""
    ei = torch.tensor([[1, 0], [0, 1]])
    rowptr, col, perm = TO_CSR[impl](ei, 5)
    assert rowptr.tolist() == [0, 1, 2, 2, 2, 2]
    assert col.tolist() == [1, 0]
    assert perm.tolist() == [0, 1]


# ----------------------------------------------------------------------- csr_transpose
@pytest.mark.parametrize("impl", list(TRANSPOSE))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_csr_transpose_matches_reference(name, index_dtype, impl):
    case = CASES[name]
    rowptr, col, _ = ref_csr(case.edge_index, case.num_nodes)
    rowptr, col = rowptr.to(index_dtype), col.to(index_dtype)
    colptr, row, perm = TRANSPOSE[impl](rowptr, col, case.num_src_nodes)
    assert colptr.dtype == index_dtype and row.dtype == index_dtype and perm.dtype == torch.int64
    want_colptr, want_row, want_perm = ref_csr_transpose(rowptr, col, case.num_src_nodes)
    _eq(colptr, want_colptr, "colptr")
    _eq(row, want_row, "row")
    _eq(perm, want_perm, "perm")
    _eq(row, csr_rows(rowptr)[perm], "row == csr_rows[perm]")
    # transposing twice gives the CSR back
    rowptr2, col2, perm2 = TRANSPOSE[impl](colptr, row, case.num_nodes)
    _eq(rowptr2, rowptr, "rowptr after two transposes")
    _eq(col2, col, "col after two transposes")
    _eq(perm[perm2], torch.arange(case.num_edges), "perm composed with its transpose")


def _message(f, *args):
    with pytest.raises(RuntimeError) as e:
        f(*args)
    return str(e.value).split("\n")[0]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
def test_device_implementation_raises_the_cpu_errors(index_dtype):
    """The device implementation checks the values on the device and raises the CPU kernels'
    errors (op, argument, first bad value) for out-of-range indices and malformed CSR."""
    t = lambda v: torch.tensor(v, dtype=index_dtype)
    for ei, n in (([[0, 5], [1, 0]], 3), ([[0, 1], [-1, 0]], 3), ([[0, 1, 2], [1, 0, 3]], 3)):
        cpu = _message(TO_CSR["cpu"], t(ei), n)
        assert "edge_index_to_csr" in cpu and "edge_index" in cpu
        assert _message(TO_CSR["device"], t(ei), n) == cpu
    for rowptr, col, m in (([0, 2, 1], [0, 1], 2), ([1, 1, 2], [0, 1], 2), ([0, 1, 3], [0, 1], 2),
                           ([0, 1, 2], [0, 2], 2), ([0, 1, 2], [-1, 0], 2)):
        cpu = _message(TRANSPOSE["cpu"], t(rowptr), t(col), m)
        assert "csr_transpose" in cpu
        assert _message(TRANSPOSE["device"], t(rowptr), t(col), m) == cpu
    with pytest.raises(RuntimeError, match="csr_transpose.*num_cols"):
        TRANSPOSE["device"](t([0, 0]), t([]), -1)


# ------------------------------------------------------------------------------ Graph
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_graph_from_edge_index(name, index_dtype):
    case = CASES[name]
    ei = case.edge_index_as(index_dtype)
    bip = case.num_src_nodes != case.num_nodes
    g = Graph.from_edge_index(ei, case.num_nodes, case.num_src_nodes if bip else None)
    want_rowptr, want_col, want_perm = ref_csr(case.edge_index, case.num_nodes)
    assert g.rowptr.dtype == index_dtype and g.col.dtype == index_dtype
    _eq(g.rowptr, want_rowptr, "rowptr")
    _eq(g.col, want_col, "col")
    _eq(g.perm, want_perm, "perm")
    assert g.num_nodes == case.num_nodes
    assert g.num_src_nodes == case.num_src_nodes
    assert g.num_edges == case.num_edges
    assert g.values is None
    assert g.index_dtype == index_dtype and g.device == torch.device("cpu")

    w = edge_weights(case.num_edges, torch.float64, seed=7)
    assert torch.equal(g.permute_edge_values(w), w[want_perm])

    colptr, row, perm = g.csc()
    assert g.csc()[0] is colptr  # cached
    want = ref_csr_transpose(want_rowptr, want_col, case.num_src_nodes)
    _eq(colptr, want[0], "colptr")
    _eq(row, want[1], "row")
    _eq(perm, want[2], "csc perm")

    r = repr(g)
    assert r.startswith("Graph(") and f"num_nodes={case.num_nodes}" in r and f"num_edges={case.num_edges}" in r


def test_graph_default_num_nodes():
    g = Graph.from_edge_index(torch.tensor([[0, 4], [2, 1]]))
    assert g.num_nodes == g.num_src_nodes == 5
    assert g.rowptr.tolist() == [0, 0, 1, 2, 2, 2]
    g0 = Graph.from_edge_index(torch.empty(2, 0, dtype=torch.int32))
    assert g0.num_nodes == 0 and g0.num_edges == 0
    assert g0.rowptr.tolist() == [0] and g0.rowptr.dtype == torch.int32
    # bipartite: num_nodes inferred from the targets when num_src_nodes is given
    gb = Graph.from_edge_index(torch.tensor([[9, 3], [1, 0]]), num_src_nodes=10)
    assert gb.num_nodes == 2 and gb.num_src_nodes == 10
    assert gb.rowptr.tolist() == [0, 1, 2] and gb.col.tolist() == [3, 9] and gb.perm.tolist() == [1, 0]
    with pytest.raises(RuntimeError, match=r"from_edge_index: argument 'edge_index'.*\(got 5\)"):
        Graph.from_edge_index(torch.tensor([[9, 3], [1, 5]]), num_nodes=2, num_src_nodes=10)


def test_graph_node_counts_must_be_integers():
    """A count may be an int, a NumPy integer or a 0-d integer tensor; an edge weight passed
    positionally (``from_edge_index(ei, n, ew)``) is a TypeError naming the argument."""
    np = pytest.importorskip("numpy")
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    for n in (3, np.int64(3), torch.tensor(3)):
        g = Graph.from_edge_index(ei, n, n)
        assert type(g.num_nodes) is int and type(g.num_src_nodes) is int and g.num_nodes == 3
    ew = torch.rand(3)
    for args, arg in (((3, ew), "num_src_nodes"), ((ew,), "num_nodes"), ((3.0,), "num_nodes"), ((True,), "num_nodes")):
        with pytest.raises(TypeError, match=f"from_edge_index: argument '{arg}' must be an int"):
            Graph.from_edge_index(ei, *args)
    with pytest.raises(TypeError, match="from_csr: argument 'num_src_nodes' must be an int"):
        Graph.from_csr(torch.tensor([0, 1]), torch.tensor([0]), 1, ew)


def test_graph_permute_edge_values_checks():
    g = Graph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), 2)
    with pytest.raises(ValueError, match="permute_edge_values"):
        g.permute_edge_values(torch.ones(3))
    gc = Graph.from_csr(g.rowptr, g.col)
    with pytest.raises(ValueError, match="perm is None"):
        gc.permute_edge_values(torch.ones(2))
    # multi-dimensional per-edge values (e.g. multi-head weights) are permuted along dim 0
    w = torch.arange(4.0).view(2, 2)
    assert torch.equal(g.permute_edge_values(w), w[g.perm])


def test_graph_to_device_keeps_everything():
    case = CASES["power_law"]
    g = Graph.from_edge_index(case.edge_index, case.num_nodes)
    g.csc()
    h = g.to("cpu")
    assert h is not g
    for a, b in [(g.rowptr, h.rowptr), (g.col, h.col), (g.perm, h.perm)]:
        assert torch.equal(a, b)
    assert h._csc is not None and all(torch.equal(a, b) for a, b in zip(g.csc(), h.csc()))
    h2 = g.to(torch.device("meta"))
    assert h2.rowptr.device.type == "meta" and h2.num_nodes == g.num_nodes


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", ["uniform", "no_edges", "bipartite_more_sources"])
def test_graph_from_csr(name, index_dtype):
    case = CASES[name]
    rowptr, col, _ = ref_csr(case.edge_index, case.num_nodes)
    rowptr, col = rowptr.to(index_dtype), col.to(index_dtype)
    g = Graph.from_csr(rowptr, col, num_src_nodes=case.num_src_nodes)
    assert g.rowptr is rowptr and g.col is col and g.perm is None and g.values is None
    assert g.num_nodes == case.num_nodes and g.num_src_nodes == case.num_src_nodes
    assert g.num_edges == case.num_edges
    with pytest.raises(ValueError, match="num_nodes"):
        Graph.from_csr(rowptr, col, num_nodes=case.num_nodes + 1)


def test_graph_from_csr_validates():
    rowptr = torch.tensor([0, 2, 1, 3])  # not monotone
    col = torch.tensor([0, 1, 2])
    with pytest.raises(RuntimeError, match=r"gnnfuse::\w+: argument 'rowptr'"):
        Graph.from_csr(rowptr, col)
    with pytest.raises(RuntimeError, match=r"gnnfuse::\w+: argument 'col'"):
        Graph.from_csr(torch.tensor([0, 1, 3]), torch.tensor([0, 1, 2]))  # col 2 >= 2 columns
    # columns are checked against num_src_nodes
    g = Graph.from_csr(torch.tensor([0, 1, 3]), torch.tensor([0, 1, 2]), num_src_nodes=3)
    assert g.num_src_nodes == 3
    # validation can be skipped
    Graph.from_csr(rowptr, col, validate=False)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
def test_graph_from_sparse_csr(index_dtype):
    case = CASES["bipartite_more_sources"]
    rowptr, col, perm = ref_csr(case.edge_index, case.num_nodes)
    vals = edge_weights(case.num_edges, torch.float32, seed=3)[perm]
    t = torch.sparse_csr_tensor(
        rowptr.to(index_dtype), col.to(index_dtype), vals, size=(case.num_nodes, case.num_src_nodes)
    )
    g = Graph.from_sparse(t)
    assert g.rowptr.dtype == index_dtype and g.col.dtype == index_dtype
    _eq(g.rowptr, rowptr, "rowptr")
    _eq(g.col, col, "col")
    assert torch.equal(g.values, vals)
    assert g.perm is None
    assert (g.num_nodes, g.num_src_nodes) == (case.num_nodes, case.num_src_nodes)


def test_graph_from_sparse_coo_coalesces():
    # rows are targets: A[i, j] is the edge j -> i; (1, 2) appears twice
    idx = torch.tensor([[1, 0, 1, 2], [2, 1, 2, 0]])
    vals = torch.tensor([1.0, 2.0, 3.0, 4.0])
    t = torch.sparse_coo_tensor(idx, vals, (3, 4))
    g = Graph.from_sparse(t)
    assert g.rowptr.tolist() == [0, 1, 2, 3]
    assert g.col.tolist() == [1, 2, 0]
    assert g.values.tolist() == [2.0, 4.0, 4.0]
    assert (g.num_nodes, g.num_src_nodes) == (3, 4)
    # a dense round trip through the CSR
    dense = torch.zeros(3, 4)
    dense[torch.repeat_interleave(torch.arange(3), g.rowptr.diff()), g.col] = g.values
    assert torch.equal(dense, t.to_dense())


def test_graph_from_sparse_rejects():
    with pytest.raises(TypeError, match="from_sparse"):
        Graph.from_sparse(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="from_sparse"):
        Graph.from_sparse(torch.zeros(2, 3, 3).to_sparse())


# ----------------------------------------------------------------------------- errors
def _raises(op, arg, fn, *args):
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument '{arg}'"):
        fn(*args)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize(
    "edge_index, num_nodes",
    [
        ([[0, 1], [1, 3]], 3),  # target >= num_nodes
        ([[0, 1], [1, -1]], 3),  # negative target
        ([[0, -2], [1, 2]], 3),  # negative source
    ],
    ids=["target_too_large", "negative_target", "negative_source"],
)
def test_edge_index_to_csr_out_of_range(edge_index, num_nodes, index_dtype):
    ei = torch.tensor(edge_index, dtype=index_dtype)
    with pytest.raises(RuntimeError, match=r"gnnfuse::edge_index_to_csr: argument 'edge_index'") as exc:
        torch.ops.gnnfuse.edge_index_to_csr(ei, num_nodes)
    bad = [v for v in sum(edge_index, []) if v < 0 or v >= num_nodes][0]
    assert str(bad) in str(exc.value), f"the message should show the bad value {bad}: {exc.value}"


@pytest.mark.parametrize(
    "edge_index",
    [
        torch.zeros(3, 4, dtype=torch.long),  # not 2 rows
        torch.zeros(4, dtype=torch.long),  # 1-D
        torch.zeros(2, 4, 1, dtype=torch.long),  # 3-D
        torch.zeros(2, 4, dtype=torch.float32),  # not an integer tensor
        torch.zeros(2, 4, dtype=torch.int16),  # unsupported integer dtype
    ],
    ids=["3xE", "1d", "3d", "float", "int16"],
)
def test_edge_index_to_csr_bad_shape_or_dtype(edge_index):
    _raises("edge_index_to_csr", "edge_index", torch.ops.gnnfuse.edge_index_to_csr, edge_index, 4)


def test_edge_index_to_csr_negative_num_nodes():
    _raises("edge_index_to_csr", "num_nodes", torch.ops.gnnfuse.edge_index_to_csr, torch.zeros(2, 0, dtype=torch.long), -1)


def test_csr_transpose_errors():
    rowptr, col = torch.tensor([0, 1, 3]), torch.tensor([0, 1, 2])
    _raises("csr_transpose", "col", torch.ops.gnnfuse.csr_transpose, rowptr, col, 2)  # col 2 >= 2
    _raises("csr_transpose", "col", torch.ops.gnnfuse.csr_transpose, rowptr, torch.tensor([0, -1, 1]), 2)
    _raises("csr_transpose", "rowptr", torch.ops.gnnfuse.csr_transpose, torch.tensor([0, 2, 1, 3]), col, 3)
    _raises("csr_transpose", "num_cols", torch.ops.gnnfuse.csr_transpose, rowptr, col, -1)


# ---------------------------------------------------------------- interoperability
def _reference_spmm(edge_index, n, x, w=None):
    w = torch.ones(edge_index.size(1), dtype=x.dtype) if w is None else w
    return torch.zeros(n, x.size(1), dtype=x.dtype).index_add_(0, edge_index[1], w[:, None] * x[edge_index[0]])


def test_scipy_round_trip_and_ops():
    sp = pytest.importorskip("scipy.sparse")
    import numpy as np

    gen = np.random.default_rng(0)
    n = 40
    rows, cols = gen.integers(0, n, 300), gen.integers(0, n, 300)  # duplicates summed by scipy
    vals = gen.random(300)
    for fmt in ("coo", "csr", "csc"):
        m = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).asformat(fmt)
        g = gnnfuse.Graph.from_scipy(m)
        assert g.num_nodes == n and g.values.dtype == torch.float64
        assert (g.to_scipy() != m.tocsr()).nnz == 0
        x = torch.randn(n, 5, dtype=torch.float64)
        ref = torch.from_numpy(m @ x.numpy())
        torch.testing.assert_close(gnnfuse.spmm(g, x), ref)
        torch.testing.assert_close(gnnfuse.spmm(m, x), ref)  # the ops accept scipy directly
        torch.testing.assert_close(gnnfuse.to_graph(m).rowptr, g.rowptr)


def test_scipy_rectangular_int32():
    sp = pytest.importorskip("scipy.sparse")
    import numpy as np

    m = sp.csr_matrix((np.ones(3, dtype=np.float32), np.array([0, 4, 2], dtype=np.int32), np.array([0, 2, 2, 3], dtype=np.int32)), shape=(3, 5))
    g = gnnfuse.Graph.from_scipy(m)
    assert g.rowptr.dtype == torch.int32 and g.num_src_nodes == 5
    x = torch.randn(5, 2)
    torch.testing.assert_close(gnnfuse.spmm(g, x), torch.from_numpy(m @ x.numpy()))


def test_scipy_integer_and_boolean_values_are_weights():
    """Integer (or boolean) entries are edge weights, not a pattern: they come in as the default
    float dtype; a graph's own values follow the features' dtype (scipy stores float64)."""
    sp = pytest.importorskip("scipy.sparse")
    import numpy as np

    m = sp.coo_matrix((np.array([2, 3, 1]), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 2))  # (0, 1) twice: 5
    g = gnnfuse.Graph.from_scipy(m)
    assert g.values.dtype == torch.get_default_dtype() and g.values.tolist() == [5.0, 1.0]
    x = torch.tensor([[1.0], [10.0]])
    assert gnnfuse.spmm(m, x).tolist() == [[50.0], [1.0]]
    assert gnnfuse.spmm(m, x.double()).dtype == torch.float64
    assert gnnfuse.spmm(sp.csr_matrix(np.array([[0.0, 0.5], [0.0, 0.0]])), x).tolist() == [[5.0], [0.0]]  # float64 values, float32 x
    assert gnnfuse.Graph.from_scipy(sp.csr_matrix(np.array([[False, True], [True, False]]))).values.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="must be real numbers"):
        gnnfuse.Graph.from_scipy(sp.csr_matrix(np.array([[0, 1j], [0, 0]])))


def test_graph_csc_follows_in_place_changes():
    """The CSC view a Graph caches belongs to its rowptr/col as they are: after an in-place
    change of col (still a valid CSR) the next backward uses the new pattern."""
    ei = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]])
    g = Graph.from_edge_index(ei, num_nodes=4)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    gnnfuse.spmm(g, x).sum().backward()
    with torch.no_grad():
        g.col[0] = 2 if int(g.col[0]) != 2 else 3
    x.grad = None
    y = gnnfuse.spmm(g, x)
    y.backward(torch.ones_like(y))
    fresh = Graph(g.rowptr.clone(), g.col.clone(), 4)
    x2 = x.detach().clone().requires_grad_()
    torch.testing.assert_close(y, gnnfuse.spmm(fresh, x2))
    gnnfuse.spmm(fresh, x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_graph_node_counts_are_checked_against_features():
    """A Graph fixes its node counts; features with another number of rows are refused by name
    (not accepted forward and then refused by the backward)."""
    g = Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]))  # 3 nodes inferred
    x = torch.randn(5, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"gnnfuse.spmm: argument 'x' must have 3 rows, the graph's source nodes"):
        gnnfuse.spmm(g, x)
    with pytest.raises(RuntimeError, match=r"gnnfuse.sddmm: argument 'u' must have 3 rows, the graph's target nodes"):
        gnnfuse.sddmm(g, torch.randn(5, 2), torch.randn(3, 2))
    with pytest.raises(RuntimeError, match=r"gnnfuse.graph_attention: argument 'k' must have 3 rows"):
        gnnfuse.graph_attention(g, torch.randn(3, 1, 2), torch.randn(4, 1, 2), torch.randn(3, 1, 2))
    with pytest.raises(RuntimeError, match=r"gnnfuse.gat: argument 'x' must have 3 rows"):
        gnnfuse.gat(g, torch.randn(5, 1, 2), torch.randn(2), torch.randn(2))


def test_pyg_edge_index_is_accepted():
    pyg = pytest.importorskip("torch_geometric")
    ei = torch.tensor([[0, 1, 2, 2, 4], [1, 2, 0, 1, 3]])
    e = pyg.EdgeIndex(ei, sparse_size=(5, 5))
    g = gnnfuse.to_graph(e)
    assert g.num_nodes == 5 and type(g.rowptr) is torch.Tensor
    x = torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(gnnfuse.spmm(g, x), _reference_spmm(ei, 5, x))
    torch.testing.assert_close(gnnfuse.spmm(e, x), _reference_spmm(ei, 5, x))
    conv = gnnfuse.nn.GCNConv(3, 2).double()
    torch.testing.assert_close(conv(x, e), conv(x, ei))


def test_to_edge_index_and_errors():
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    g = gnnfuse.Graph.from_edge_index(ei, num_nodes=3)
    back = g.to_edge_index()
    assert sorted(map(tuple, back.t().tolist())) == sorted(map(tuple, ei.t().tolist()))
    with pytest.raises(TypeError, match="to_graph"):
        gnnfuse.to_graph([1, 2, 3])


def test_dgl_like_graph_is_converted():
    # dgl does not install here: a stand-in with DGL's graph interface (edges, node counts)
    class FakeDGLGraph:
        def __init__(self, src, dst, n_src, n_dst):
            self.src, self.dst, self.n_src, self.n_dst = src, dst, n_src, n_dst

        def edges(self):
            return self.src, self.dst

        def num_src_nodes(self):
            return self.n_src

        def num_dst_nodes(self):
            return self.n_dst

    src, dst = torch.tensor([0, 3, 4, 1]), torch.tensor([1, 0, 2, 1])
    g = gnnfuse.to_graph(FakeDGLGraph(src, dst, 5, 3))
    assert (g.num_nodes, g.num_src_nodes) == (3, 5)
    x = torch.randn(5, 2, dtype=torch.float64)
    torch.testing.assert_close(gnnfuse.spmm(g, x), _reference_spmm(torch.stack([src, dst]), 3, x))
