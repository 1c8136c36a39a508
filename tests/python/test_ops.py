"""spmm, sddmm and sddmm_spmm against float64 dense references; opcheck; TorchScript;
torch.compile; thread-count determinism; the Python wrappers in gnnfuse.ops."""

from __future__ import annotations

import io
from typing import Optional, Tuple

import pytest
import torch
from torch import Tensor

import gnnfuse
from gnnfuse import Graph
from graphs import (
    CASE_NAMES,
    CASES,
    assert_matches_ref,
    csr_of,
    dense_adjacency,
    edge_weights,
    features,
    power_law,
    ref_sddmm,
    ref_sddmm_spmm,
    ref_spmm,
    ref_spmm_scatter,
)

INDEX_DTYPES = [torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float32, torch.float64]
DTYPE_IDS = {torch.int32: "int32", torch.int64: "int64", torch.float32: "f32", torch.float64: "f64"}
FEATURES = [1, 3, 32, 129]
# (K, F) pairs for the fused op: every size appears as K and as F at least once
KF_PAIRS = [(1, 1), (3, 32), (32, 3), (129, 1), (1, 129), (32, 129)]

# opcheck's default test_utils: test_schema, test_autograd_registration (needs inputs with
# requires_grad=True: see _op_args), test_faketensor and test_aot_dispatch_dynamic (which
# then also runs the backward through AOTAutograd and compares it with eager).
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# The graph-format ops have integer outputs: nothing to differentiate.
OPCHECK_UTILS_INDEX = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def _weights(case, weighted, dtype):
    """Weights in edge_index order (for the reference) and in CSR order (for the op)."""
    if not weighted:
        return None, None
    _, _, perm = csr_of(case.name)
    w = edge_weights(case.num_edges, dtype, seed=11)
    return w, w[perm]


# ------------------------------------------------------------------------- references
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("F", FEATURES)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_spmm(name, F, weighted, index_dtype, dtype):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    x = features(case.num_src_nodes, F, dtype, seed=1)
    w, w_csr = _weights(case, weighted, dtype)
    y = torch.ops.gnnfuse.spmm(rowptr, col, w_csr, x)
    assert y.shape == (case.num_nodes, F)
    ref, scale = ref_spmm(case, x, w)
    assert_matches_ref(y, ref, scale, dtype)


# Widths that take every pass of the register-tiled walks (tiles of 4, 2 and 1 vectors of 8
# floats / 4 doubles, then the plain loop over the rest), alone and combined.
TILE_WIDTHS = [4, 8, 12, 16, 24, 40, 56, 64, 71]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("F", TILE_WIDTHS)
@pytest.mark.parametrize("name", ["power_law", "self_loops_duplicates", "empty_rows_isolated"])
def test_spmm_tile_widths_forward_and_backward(name, F, weighted, dtype):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, torch.int64)
    x = features(case.num_src_nodes, F, dtype, seed=2).requires_grad_()
    w, w_csr = _weights(case, weighted, dtype)
    if w_csr is not None:
        w_csr = w_csr.clone().requires_grad_()
    y = torch.ops.gnnfuse.spmm(rowptr, col, w_csr, x)
    ref, scale = ref_spmm(case, x.detach(), w)
    assert_matches_ref(y, ref, scale, dtype)
    # Gradients against dense float64 autograd: dX walks the CSC view (also tiled).
    gy = features(case.num_nodes, F, dtype, seed=3)
    y.backward(gy)
    xd = x.detach().double().requires_grad_()
    wd = None if w is None else w.double().requires_grad_()
    (dense_adjacency(case, wd) @ xd).backward(gy.double())
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    assert torch.allclose(x.grad.double(), xd.grad, rtol=tol, atol=tol * (1 + xd.grad.abs().max().item()))
    mean = torch.ops.gnnfuse.spmm_mean(rowptr, col, w_csr, x.detach())
    deg = (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(dtype).unsqueeze(1)
    assert_matches_ref(mean, ref / deg.double(), scale / deg.double(), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("K", FEATURES)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_sddmm(name, K, weighted, index_dtype, dtype):
    case = CASES[name]
    rowptr, col, perm = csr_of(name, index_dtype)
    u = features(case.num_nodes, K, dtype, seed=2)
    v = features(case.num_src_nodes, K, dtype, seed=3)
    w, w_csr = _weights(case, weighted, dtype)
    e = torch.ops.gnnfuse.sddmm(rowptr, col, w_csr, u, v)
    assert e.shape == (case.num_edges,)
    ref, scale = ref_sddmm(case, u, v, w)  # edge_index order
    assert_matches_ref(e, ref[perm], scale[perm], dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("K, F", KF_PAIRS, ids=[f"K{k}-F{f}" for k, f in KF_PAIRS])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_sddmm_spmm(name, K, F, weighted, index_dtype, dtype):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    u = features(case.num_nodes, K, dtype, seed=4)
    v = features(case.num_src_nodes, K, dtype, seed=5)
    x = features(case.num_src_nodes, F, dtype, seed=6)
    w, w_csr = _weights(case, weighted, dtype)
    y = torch.ops.gnnfuse.sddmm_spmm(rowptr, col, w_csr, u, v, x)
    assert y.shape == (case.num_nodes, F)
    ref, scale = ref_sddmm_spmm(case, u, v, x, w)
    assert_matches_ref(y, ref, scale, dtype)


@pytest.mark.parametrize("name", ["power_law", "self_loops_duplicates", "bipartite_fewer_sources"])
def test_sddmm_spmm_equals_spmm_of_sddmm(name):
    """The fused op computes what the unfused pair computes (float64, tight)."""
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    u = features(case.num_nodes, 16, torch.float64, seed=7)
    v = features(case.num_src_nodes, 16, torch.float64, seed=8)
    x = features(case.num_src_nodes, 24, torch.float64, seed=9)
    _, w_csr = _weights(case, True, torch.float64)
    fused = torch.ops.gnnfuse.sddmm_spmm(rowptr, col, w_csr, u, v, x)
    scores = torch.ops.gnnfuse.sddmm(rowptr, col, w_csr, u, v)
    unfused = torch.ops.gnnfuse.spmm(rowptr, col, scores, x)
    torch.testing.assert_close(fused, unfused, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["spmm", "sddmm", "sddmm_spmm"])
def test_inputs_not_modified_and_fresh_output(op):
    case = CASES["uniform"]
    rowptr, col, _ = csr_of(case.name)
    x = features(case.num_nodes, 8, torch.float32, seed=1)
    _, w = _weights(case, True, torch.float32)
    args = {
        "spmm": (rowptr, col, w, x),
        "sddmm": (rowptr, col, w, x, x),
        "sddmm_spmm": (rowptr, col, w, x, x, x),
    }[op]
    before = [a.clone() for a in args]
    out = getattr(torch.ops.gnnfuse, op)(*args)
    for a, b in zip(args, before):
        assert torch.equal(a, b)
    assert out.is_contiguous()
    assert all(out.data_ptr() != a.data_ptr() for a in args)


def test_strided_features():
    """Non-contiguous feature matrices: either computed correctly or rejected clearly."""
    case = CASES["power_law"]
    rowptr, col, _ = csr_of(case.name)
    base = features(case.num_nodes, 64, torch.float64, seed=1)
    x = base[:, ::2]  # stride 2 along the feature dimension
    xt = features(32, case.num_nodes, torch.float64, seed=2).t()  # column-major
    for feat in (x, xt):
        assert not feat.is_contiguous()
        try:
            y = torch.ops.gnnfuse.spmm(rowptr, col, None, feat)
        except RuntimeError as err:
            assert "gnnfuse::spmm: argument 'x'" in str(err), str(err)
            continue
        ref, scale = ref_spmm(case, feat)
        assert_matches_ref(y, ref, scale, torch.float64)


# ------------------------------------------------------------------------ the wrappers
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", ["self_loops_duplicates", "power_law", "no_edges"])
def test_wrappers_accept_graph_sparse_and_edge_index(name, index_dtype):
    case = CASES[name]
    dt = torch.float64
    ei = case.edge_index_as(index_dtype)
    n = case.num_nodes
    x = features(n, 5, dt, seed=1)
    u = features(n, 4, dt, seed=2)
    v = features(n, 4, dt, seed=3)
    w = edge_weights(case.num_edges, dt, seed=4)  # edge_index order

    g = Graph.from_edge_index(ei, n)
    w_csr = g.permute_edge_values(w)
    ref_y, sc_y = ref_spmm(case, x, w)
    ref_e, sc_e = ref_sddmm(case, u, v, w)
    ref_z, sc_z = ref_sddmm_spmm(case, u, v, x, w)

    # a Graph: weights in CSR order
    assert_matches_ref(gnnfuse.ops.spmm(g, x, w_csr), ref_y, sc_y, dt)
    assert_matches_ref(gnnfuse.ops.sddmm(g, u, v, w_csr), ref_e[g.perm], sc_e[g.perm], dt)
    assert_matches_ref(gnnfuse.ops.sddmm_spmm(g, u, v, x, w_csr), ref_z, sc_z, dt)
    # the top-level re-exports
    assert gnnfuse.spmm is gnnfuse.ops.spmm

    # an edge_index: weights in and scores out in edge_index order
    assert_matches_ref(gnnfuse.ops.spmm(ei, x, w), ref_y, sc_y, dt)
    assert_matches_ref(gnnfuse.ops.sddmm(ei, u, v, w), ref_e, sc_e, dt)
    assert_matches_ref(gnnfuse.ops.sddmm_spmm(ei, u, v, x, w), ref_z, sc_z, dt)
    ref_y1, sc_y1 = ref_spmm(case, x)
    assert_matches_ref(gnnfuse.ops.spmm(ei, x), ref_y1, sc_y1, dt)

    # a sparse CSR matrix (rows = targets): its values are the weights
    a = torch.sparse_csr_tensor(g.rowptr, g.col, w_csr, size=(n, n))
    assert_matches_ref(gnnfuse.ops.spmm(a, x), ref_y, sc_y, dt)
    assert_matches_ref(gnnfuse.ops.sddmm(a, u, v), ref_e[g.perm], sc_e[g.perm], dt)
    assert_matches_ref(gnnfuse.ops.sddmm_spmm(a, u, v, x), ref_z, sc_z, dt)
    # ... unless edge_weight is given
    assert_matches_ref(gnnfuse.ops.spmm(a, x, torch.ones_like(w_csr)), ref_y1, sc_y1, dt)
    # a Graph built from it carries the values too
    ga = Graph.from_sparse(a)
    assert_matches_ref(gnnfuse.ops.spmm(ga, x), ref_y, sc_y, dt)

    # a sparse COO matrix (duplicates are summed, which does not change spmm / sddmm_spmm)
    coo = torch.sparse_coo_tensor(torch.stack([case.dst, case.src]), w, (n, n))
    assert_matches_ref(gnnfuse.ops.spmm(coo, x), ref_y, sc_y, dt)
    assert_matches_ref(gnnfuse.ops.sddmm_spmm(coo, u, v, x), ref_z, sc_z, dt)


def test_wrappers_bipartite_graph():
    case = CASES["bipartite_more_sources"]
    dt = torch.float32
    g = Graph.from_edge_index(case.edge_index, case.num_nodes, case.num_src_nodes)
    x = features(case.num_src_nodes, 7, dt, seed=1)
    u = features(case.num_nodes, 3, dt, seed=2)
    v = features(case.num_src_nodes, 3, dt, seed=3)
    ref, sc = ref_spmm(case, x)
    assert_matches_ref(gnnfuse.ops.spmm(g, x), ref, sc, dt)
    ref, sc = ref_sddmm_spmm(case, u, v, x)
    assert_matches_ref(gnnfuse.ops.sddmm_spmm(g, u, v, x), ref, sc, dt)
    ref, sc = ref_sddmm(case, u, v)
    assert_matches_ref(gnnfuse.ops.sddmm(g, u, v), ref[g.perm], sc[g.perm], dt)
    # an edge_index is converted with num_nodes = u.size(0), which must bound the sources
    # too: fine when there are fewer sources than targets
    case = CASES["bipartite_fewer_sources"]
    u = features(case.num_nodes, 3, dt, seed=2)
    v = features(case.num_src_nodes, 3, dt, seed=3)
    ref, sc = ref_sddmm(case, u, v)
    assert_matches_ref(gnnfuse.ops.sddmm(case.edge_index, u, v), ref, sc, dt)


def test_wrappers_reject_other_types():
    with pytest.raises(TypeError, match="gnnfuse.ops.spmm"):
        gnnfuse.ops.spmm([[0, 1], [1, 0]], torch.ones(2, 2))


def test_wrapper_edge_weight_length_checked_by_the_op():
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'edge_weight'"):
        gnnfuse.ops.spmm(ei, torch.ones(3, 2), torch.ones(4))
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'edge_weight'"):
        gnnfuse.ops.spmm(ei, torch.ones(3, 2), torch.ones(2))


# ---------------------------------------------------------------------------- opcheck
def _op_args(op, name, index_dtype, dtype, weighted):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    _, w = _weights(case, weighted, dtype)
    x = features(case.num_src_nodes, 6, dtype, seed=1).requires_grad_()
    u = features(case.num_nodes, 4, dtype, seed=2).requires_grad_()
    v = features(case.num_src_nodes, 4, dtype, seed=3).requires_grad_()
    if w is not None:
        w.requires_grad_()
    return {
        "spmm": (rowptr, col, w, x),
        "sddmm": (rowptr, col, w, u, v),
        "sddmm_spmm": (rowptr, col, w, u, v, x),
    }[op]


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("op", ["spmm", "sddmm", "sddmm_spmm"])
def test_opcheck(op, index_dtype, weighted):
    dtype = torch.float64 if index_dtype == torch.int64 else torch.float32
    args = _op_args(op, "bipartite_more_sources", index_dtype, dtype, weighted)
    torch.library.opcheck(getattr(torch.ops.gnnfuse, op).default, args, test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("op", ["spmm", "sddmm", "sddmm_spmm"])
def test_opcheck_no_edges(op):
    args = _op_args(op, "no_edges", torch.int64, torch.float32, True)
    torch.library.opcheck(getattr(torch.ops.gnnfuse, op).default, args, test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_opcheck_csr_construction(index_dtype):
    case = CASES["self_loops_duplicates"]
    torch.library.opcheck(
        torch.ops.gnnfuse.edge_index_to_csr.default,
        (case.edge_index_as(index_dtype), case.num_nodes),
        test_utils=OPCHECK_UTILS_INDEX,
    )
    rowptr, col, _ = csr_of(case.name, index_dtype)
    torch.library.opcheck(
        torch.ops.gnnfuse.csr_transpose.default, (rowptr, col, case.num_src_nodes), test_utils=OPCHECK_UTILS_INDEX
    )


# ------------------------------------------------------- TorchScript and torch.compile
class GnnBlock(torch.nn.Module):
    """Calls the registered ops directly, taking a PyG-style edge_index."""

    def forward(
        self, edge_index: Tensor, x: Tensor, u: Tensor, v: Tensor, edge_weight: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor, Tensor]:
        rowptr, col, perm = torch.ops.gnnfuse.edge_index_to_csr(edge_index, x.size(0))
        w: Optional[Tensor] = None
        if edge_weight is not None:
            w = edge_weight[perm]
        y = torch.ops.gnnfuse.spmm(rowptr, col, w, x)
        scores = torch.ops.gnnfuse.sddmm(rowptr, col, w, u, v)
        z = torch.ops.gnnfuse.sddmm_spmm(rowptr, col, w, u, v, x)
        return torch.relu(y) + 0.5 * z, scores, col


def _block_inputs(case, dtype=torch.float32, index_dtype=torch.int64, weighted=True):
    n = case.num_nodes
    x = features(n, 16, dtype, seed=1)
    u = features(n, 8, dtype, seed=2)
    v = features(n, 8, dtype, seed=3)
    w = edge_weights(case.num_edges, dtype, seed=4) if weighted else None
    return case.edge_index_as(index_dtype), x, u, v, w


def _block_reference(case, edge_index, x, u, v, w):
    ref_y, _ = ref_spmm(case, x, w)
    ref_e, _ = ref_sddmm(case, u, v, w)
    ref_z, _ = ref_sddmm_spmm(case, u, v, x, w)
    _, want_col, perm = csr_of(case.name)
    return torch.relu(ref_y) + 0.5 * ref_z, ref_e[perm], want_col


def _check_block(out, case, inputs):
    y, scores, col = out
    ref_y, ref_e, want_col = _block_reference(case, *inputs)
    torch.testing.assert_close(y.double(), ref_y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scores.double(), ref_e, rtol=1e-4, atol=1e-4)
    assert torch.equal(col.long(), want_col)


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_torchscript(index_dtype):
    scripted = torch.jit.script(GnnBlock())
    case = CASES["self_loops_duplicates"]
    for weighted in (True, False):
        inputs = _block_inputs(case, index_dtype=index_dtype, weighted=weighted)
        _check_block(scripted(*inputs), case, inputs)
    # the scripted module survives a save / load round trip (the ops resolve by name)
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    inputs = _block_inputs(CASES["power_law"], index_dtype=index_dtype)
    _check_block(loaded(*inputs), CASES["power_law"], inputs)
    assert "gnnfuse::spmm" in loaded.code or "gnnfuse.spmm" in loaded.code


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend, dynamo_reset):
    """fullgraph=True: the edge_index -> CSR conversion and all three ops are traced (no
    graph break), through their Meta kernels.  Two graphs of different sizes are run; with
    aot_eager the shapes are dynamic."""
    compiled = torch.compile(GnnBlock(), backend=backend, fullgraph=True, dynamic=(backend == "aot_eager"))
    for name in ("self_loops_duplicates", "power_law"):
        case = CASES[name]
        inputs = _block_inputs(case)
        _check_block(compiled(*inputs), case, inputs)


@pytest.mark.compile
def test_torch_compile_python_api(dynamo_reset):
    """The Python API (Graph + gnnfuse.ops wrappers) traces without graph breaks too."""

    def f(edge_index: Tensor, x: Tensor, w: Tensor) -> Tuple[Tensor, Tensor]:
        g = Graph.from_edge_index(edge_index, x.size(0))
        wc = g.permute_edge_values(w)
        y = gnnfuse.ops.spmm(g, x, wc) + gnnfuse.ops.sddmm_spmm(g, x, x, x, wc)
        return y, gnnfuse.ops.sddmm(edge_index, x, x, w)  # edge_index straight to the wrapper

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    case = CASES["power_law"]
    x = features(case.num_nodes, 8, torch.float64, seed=1)
    w = edge_weights(case.num_edges, torch.float64, seed=2)
    y, e = compiled(case.edge_index, x, w)
    ref_y, _ = ref_spmm(case, x, w)
    ref_z, _ = ref_sddmm_spmm(case, x, x, x, w)
    ref_e, _ = ref_sddmm(case, x, x, w)
    torch.testing.assert_close(y, ref_y + ref_z, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(e, ref_e, rtol=1e-10, atol=1e-10)


@pytest.mark.compile
def test_torch_export(dynamo_reset):
    """The issue asks that a model taking edge_index exports too; node and edge counts
    are dynamic, so the exported program runs on another graph."""
    case = CASES["self_loops_duplicates"]
    inputs = _block_inputs(case)
    num_edges = torch.export.Dim("num_edges", min=2)
    num_nodes = torch.export.Dim("num_nodes", min=2)
    shapes = ({1: num_edges}, {0: num_nodes}, {0: num_nodes}, {0: num_nodes}, {0: num_edges})
    ep = torch.export.export(GnnBlock(), inputs, dynamic_shapes=shapes)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"gnnfuse.edge_index_to_csr.default", "gnnfuse.spmm.default"} <= targets, targets
    for name in ("self_loops_duplicates", "power_law"):
        case = CASES[name]
        inputs = _block_inputs(case)
        _check_block(ep.module()(*inputs), case, inputs)


# --------------------------------------------------------------------- thread count
def test_results_independent_of_thread_count(restore_num_threads, deterministic_algorithms):
    """Row-parallel kernels: every output row is reduced by one thread, in CSR order, so
    1 and 2 threads give bit-identical results.  The graph is big enough to be split.  Under
    deterministic algorithms, as the CUDA kernels' atomic variants are not bitwise reproducible."""
    case = power_law(num_nodes=20000, num_edges=200000, exponent=1.05, seed=21)
    dt = torch.float32
    x = features(case.num_nodes, 32, dt, seed=1)
    u = features(case.num_nodes, 16, dt, seed=2)
    v = features(case.num_nodes, 16, dt, seed=3)
    w = edge_weights(case.num_edges, dt, seed=4)

    def run():
        rowptr, col, perm = torch.ops.gnnfuse.edge_index_to_csr(case.edge_index, case.num_nodes)
        wc = w[perm]
        return (
            rowptr,
            col,
            perm,
            torch.ops.gnnfuse.spmm(rowptr, col, wc, x),
            torch.ops.gnnfuse.sddmm(rowptr, col, wc, u, v),
            torch.ops.gnnfuse.sddmm_spmm(rowptr, col, wc, u, v, x),
            torch.ops.gnnfuse.csr_transpose(rowptr, col, case.num_nodes),
        )

    torch.set_num_threads(1)
    one = run()
    torch.set_num_threads(2)
    two = run()
    for a, b, what in zip(one, two, ["rowptr", "col", "perm", "spmm", "sddmm", "sddmm_spmm", "csr_transpose"]):
        if isinstance(a, tuple):
            assert all(torch.equal(p, q) for p, q in zip(a, b)), what
        else:
            assert torch.equal(a, b), f"{what} differs between 1 and 2 threads"
    # and it is right
    ref, scale = ref_spmm_scatter(case, x, w)
    assert_matches_ref(two[3], ref, scale, dt)
