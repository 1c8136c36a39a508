"""Generated backward of every spec op: gradcheck / gradgradcheck in float64 on the edge-case
graphs, float32 gradients against a dense autograd reference, the CSC view (cached, passed,
built in backward, malformed), opcheck of the derived ops, the spec-only op, TorchScript and
torch.compile with backward, and the order limit."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import pytest
import torch
from torch import Tensor
from torch.autograd import gradcheck, gradgradcheck

import gnnfuse
from gnnfuse import Graph
from graphs import CASE_NAMES, CASES, csr_of, dense_adjacency, edge_weights, features

ops = torch.ops.gnnfuse
INDEX_DTYPES = [torch.int32, torch.int64]
DTYPE_IDS = {torch.int32: "int32", torch.int64: "int64"}
# Small graphs get the full Jacobian check; the larger ones gradcheck's fast mode (random
# projections of the Jacobian), which checks every input too.
FULL_CHECK = {"no_edges", "single_node", "single_node_loop", "self_loops_duplicates"}

OPS = ["spmm", "sddmm", "sddmm_spmm", "scaled_spmm"]


def _inputs(op: str, name: str, weighted: bool, F: int = 3, K: int = 2, dtype=torch.float64) -> Dict[str, Optional[Tensor]]:
    """The floating inputs of `op` on CASES[name] (CSR-ordered edge tensors), requiring grad."""
    case = CASES[name]
    t: Dict[str, Optional[Tensor]] = {
        "edge_weight": edge_weights(case.num_edges, dtype, seed=11) if weighted else None,
        "x": features(case.num_src_nodes, F, dtype, seed=1),
        "u": features(case.num_nodes, K, dtype, seed=2),
        "v": features(case.num_src_nodes, K, dtype, seed=3),
        "scale": edge_weights(case.num_edges, dtype, seed=12),
    }
    keep = {"spmm": ["edge_weight", "x"], "sddmm": ["edge_weight", "u", "v"],
            "sddmm_spmm": ["edge_weight", "u", "v", "x"], "scaled_spmm": ["edge_weight", "scale", "x"]}[op]
    return {k: (None if t[k] is None else t[k].requires_grad_()) for k in keep}


def _call(op: str, rowptr: Tensor, col: Tensor, csc, t: Dict[str, Optional[Tensor]]) -> Tensor:
    return getattr(ops, op)(rowptr, col, *t.values(), *csc)


def _differentiable(t):
    names = [k for k, v in t.items() if v is not None]
    return names, tuple(t[k] for k in names)


def _fn(op, rowptr, col, csc, t):
    names, _ = _differentiable(t)

    def f(*vals):
        d = dict(t)
        d.update(zip(names, vals))
        return _call(op, rowptr, col, csc, d)

    return f


# ------------------------------------------------------------------ gradcheck, float64
@pytest.mark.parametrize("with_csc", [False, True], ids=["csc_built_in_backward", "csc_passed"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("op", OPS)
def test_gradcheck(op, name, index_dtype, weighted, with_csc):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    csc = ops.csr_transpose(rowptr, col, case.num_src_nodes) if with_csc else (None, None, None)
    t = _inputs(op, name, weighted)
    _, vals = _differentiable(t)
    assert gradcheck(_fn(op, rowptr, col, csc, t), vals, fast_mode=name not in FULL_CHECK)


@pytest.mark.parametrize("F", [1, 32, 129])
@pytest.mark.parametrize("op", OPS)
def test_gradcheck_feature_sizes(op, F):
    name = "self_loops_duplicates"
    rowptr, col, _ = csr_of(name)
    t = _inputs(op, name, True, F=F, K=F)
    _, vals = _differentiable(t)
    assert gradcheck(_fn(op, rowptr, col, (None, None, None), t), vals, fast_mode=True)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("name", ["self_loops_duplicates", "empty_rows_isolated", "bipartite_fewer_sources", "no_edges"])
@pytest.mark.parametrize("op", OPS)
def test_gradgradcheck(op, name, weighted):
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    csc = ops.csr_transpose(rowptr, col, case.num_src_nodes)
    t = _inputs(op, name, weighted)
    _, vals = _differentiable(t)
    assert gradgradcheck(_fn(op, rowptr, col, csc, t), vals, fast_mode=name != "self_loops_duplicates")


# ------------------------------------------------ float32 gradients vs dense reference
def _dense_ref(op, name, t):
    case = CASES[name]
    a = dense_adjacency(case, None).to(t["x" if "x" in t else "u"].dtype)
    _, _, perm = csr_of(name)
    rows, cols = case.dst[perm], case.src[perm]  # CSR order

    def on_edges(e: Tensor) -> Tensor:  # CSR-ordered edge values -> dense, duplicates summed
        return torch.zeros_like(a).index_put((rows, cols), e, accumulate=True)

    w = t.get("edge_weight")
    aw = on_edges(w) if w is not None else a
    if op == "spmm":
        return aw @ t["x"]
    if op == "scaled_spmm":
        we = w if w is not None else torch.ones_like(t["scale"])
        return on_edges(we * t["scale"]) @ t["x"]
    s = (t["u"][rows] * t["v"][cols]).sum(1)
    we = w if w is not None else torch.ones_like(s)
    if op == "sddmm":
        return we * s
    return on_edges(we * s) @ t["x"]


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("name", ["power_law", "bipartite_more_sources", "self_loops_duplicates"])
@pytest.mark.parametrize("op", OPS)
def test_float32_gradients_match_reference(op, name, weighted):
    rowptr, col, _ = csr_of(name)
    t = _inputs(op, name, weighted, F=32, K=16, dtype=torch.float32)
    names, vals = _differentiable(t)
    y = _call(op, rowptr, col, (None, None, None), t)
    gy = torch.randn_like(y)
    got = torch.autograd.grad(y, vals, gy)
    t64 = {k: (None if v is None else v.detach().double().requires_grad_()) for k, v in t.items()}
    ref_y = _dense_ref(op, name, t64)
    want = torch.autograd.grad(ref_y, [t64[k] for k in names], gy.double())
    torch.testing.assert_close(y.double(), ref_y, rtol=1e-4, atol=1e-4)
    for n, g, r in zip(names, got, want):
        scale = r.abs().max().clamp_min(1.0)
        assert (g.double() - r).abs().max() <= 1e-4 * scale, n


# ------------------------------------------------------------------------- CSC view
def test_graph_caches_csc_for_backward():
    case = CASES["power_law"]
    g = Graph.from_edge_index(case.edge_index, case.num_nodes)
    x = features(case.num_nodes, 8, torch.float64, seed=1).requires_grad_()
    assert g._csc is None
    gnnfuse.ops.spmm(g, x).sum().backward()
    assert g._csc is not None
    cached = g._csc
    gx = x.grad.clone()
    x.grad = None
    gnnfuse.ops.spmm(g, x).sum().backward()
    assert g._csc is cached  # reused, not rebuilt
    torch.testing.assert_close(x.grad, gx)
    # same gradient through an edge_index (CSC built inside the backward)
    x2 = x.detach().clone().requires_grad_()
    gnnfuse.ops.spmm(case.edge_index, x2).sum().backward()
    torch.testing.assert_close(x2.grad, gx)
    # all three wrappers differentiate through a Graph
    u = features(case.num_nodes, 4, torch.float64, seed=2).requires_grad_()
    assert gradcheck(lambda u, x: gnnfuse.ops.sddmm_spmm(g, u, u, x), (u, x), fast_mode=True)
    assert gradcheck(lambda u: gnnfuse.ops.sddmm(g, u, u), (u,), fast_mode=True)


def test_malformed_csc_is_rejected_in_backward():
    name = "self_loops_duplicates"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    colptr, row, perm = ops.csr_transpose(rowptr, col, case.num_src_nodes)
    # swap the entries of two different columns (swapping duplicate edges would be harmless)
    nonempty = (colptr[1:] > colptr[:-1]).nonzero().flatten()
    q0, q1 = int(colptr[nonempty[0]]), int(colptr[nonempty[1]])
    bad_perm = perm.clone()
    bad_perm[[q0, q1]] = bad_perm[[q1, q0]]
    x = features(case.num_src_nodes, 3, torch.float64, seed=1).requires_grad_()
    # The forward walks rows only, but a CSC view given to it (a cache for the backward) is
    # checked there, so that the op it was given to refuses it; the adjoint checks it too.
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'perm'"):
        ops.spmm(rowptr, col, None, x, colptr, row, bad_perm)
    g = torch.ones(rowptr.numel() - 1, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_grad_x: argument 'perm'"):
        torch.ops.gnnfuse.spmm_grad_x(rowptr, col, None, colptr, row, bad_perm, g)
    dup = perm.clone()
    dup[1] = dup[0]
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'perm'"):
        ops.spmm(rowptr, col, None, x, colptr, row, dup)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_grad_x: argument 'perm'"):
        torch.ops.gnnfuse.spmm_grad_x(rowptr, col, None, colptr, row, dup, g)


def test_partial_csc_is_rejected():
    name = "uniform"
    rowptr, col, _ = csr_of(name)
    colptr, row, perm = ops.csr_transpose(rowptr, col, CASES[name].num_src_nodes)
    x = features(CASES[name].num_src_nodes, 3, torch.float64, seed=1)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'row' must be given with"):
        ops.spmm(rowptr, col, None, x, colptr, None, perm)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'colptr'"):
        ops.spmm(rowptr, col, None, x, colptr[:-1], row, perm)


# ------------------------------------------------------------------- derived ops
def test_derived_ops_are_registered_and_documented():
    for name in ["spmm_grad_x", "spmm_grad_edge_weight", "sddmm_grad_u", "sddmm_grad_v",
                 "sddmm_spmm_grad_x", "scaled_spmm_grad_scale", "spmm_grad_x_grad_grad"]:
        assert hasattr(ops, name), name
    schema = str(ops.spmm_grad_x.default._schema)
    # it walks A by columns: the CSC view is a required argument
    assert "Tensor colptr, Tensor row, Tensor perm" in schema, schema


@pytest.mark.parametrize("op", ["spmm_grad_x", "sddmm_spmm_grad_v", "sddmm_grad_edge_weight", "scaled_spmm_grad_scale"])
def test_opcheck_derived(op):
    name = "bipartite_more_sources"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    colptr, row, perm = ops.csr_transpose(rowptr, col, case.num_src_nodes)
    E, N, M = case.num_edges, case.num_nodes, case.num_src_nodes

    def r(*shape, seed):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).requires_grad_()

    args = {
        "spmm_grad_x": (rowptr, col, r(E, seed=1), colptr, row, perm, r(N, 5, seed=2)),
        "sddmm_spmm_grad_v": (rowptr, col, r(E, seed=1), colptr, row, perm, r(N, 4, seed=2), r(M, 5, seed=3), r(N, 5, seed=4)),
        "sddmm_grad_edge_weight": (rowptr, col, r(N, 4, seed=2), r(M, 4, seed=3), r(E, seed=4)),
        "scaled_spmm_grad_scale": (rowptr, col, r(E, seed=1), r(M, 5, seed=3), r(N, 5, seed=4)),
    }[op]
    torch.library.opcheck(getattr(ops, op).default, args)


def test_spec_only_op_matches_reference():
    """ops/scaled_spmm.spec is the only source of this op: forward and gradients checked."""
    name = "power_law"
    rowptr, col, _ = csr_of(name)
    t = _inputs("scaled_spmm", name, True, F=5, dtype=torch.float64)
    y = _call("scaled_spmm", rowptr, col, (None, None, None), t)
    ref = ops.spmm(rowptr, col, t["edge_weight"] * t["scale"], t["x"])
    torch.testing.assert_close(y, ref)
    g = torch.autograd.grad(y.square().sum(), list(t.values()))
    h = torch.autograd.grad(ref.square().sum(), list(t.values()))
    for a, b in zip(g, h):
        torch.testing.assert_close(a, b)


def test_third_order_is_a_clear_error():
    name = "self_loops_duplicates"
    rowptr, col, _ = csr_of(name)
    t = _inputs("sddmm", name, True)
    w, u, v = t["edge_weight"], t["u"], t["v"]
    y = ops.sddmm(rowptr, col, w, u, v)
    (g1,) = torch.autograd.grad(y.square().sum(), u, create_graph=True)
    (g2,) = torch.autograd.grad(g1.square().sum(), v, create_graph=True)
    with pytest.raises(RuntimeError, match=r"of the highest order generated \(the grad_order line of sddmm.spec;"):
        torch.autograd.grad(g2.square().sum(), w)


def test_no_grad_needed_no_backward_graph():
    rowptr, col, _ = csr_of("uniform")
    x = features(CASES["uniform"].num_src_nodes, 3, torch.float64, seed=1)
    assert ops.spmm(rowptr, col, None, x).grad_fn is None
    xr = x.clone().requires_grad_()
    assert ops.spmm(rowptr, col, None, xr).grad_fn is not None
    with torch.no_grad():
        assert ops.spmm(rowptr, col, None, xr).grad_fn is None


# ------------------------------------------------------ TorchScript, torch.compile
class TwoLayer(torch.nn.Module):
    def forward(self, rowptr: Tensor, col: Tensor, w: Optional[Tensor], x: Tensor) -> Tensor:
        h = torch.relu(torch.ops.gnnfuse.spmm(rowptr, col, w, x))
        return torch.ops.gnnfuse.sddmm_spmm(rowptr, col, w, h, h, h)


def _two_layer_grads(fn, name="power_law"):
    rowptr, col, _ = csr_of(name)
    case = CASES[name]
    w = edge_weights(case.num_edges, torch.float64, seed=3).requires_grad_()
    x = features(case.num_nodes, 6, torch.float64, seed=4).requires_grad_()
    y = fn(rowptr, col, w, x)
    return (y,) + torch.autograd.grad(y.sum(), (w, x))


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
def test_torchscript_backward():
    want = _two_layer_grads(TwoLayer())
    got = _two_layer_grads(torch.jit.script(TwoLayer()))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_backward(backend, dynamo_reset):
    want = _two_layer_grads(TwoLayer())
    compiled = torch.compile(TwoLayer(), backend=backend, fullgraph=True)
    got = _two_layer_grads(compiled)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


# ------------------------------------------- the spec-only op: every frontend and its errors
@pytest.mark.parametrize("F", [1, 3, 32, 129])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_scaled_spmm_fp64_reference(name, weighted, F):
    rowptr, col, _ = csr_of(name)
    t = _inputs("scaled_spmm", name, weighted, F=F)
    y = _call("scaled_spmm", rowptr, col, (None, None, None), t)
    torch.testing.assert_close(y, _dense_ref("scaled_spmm", name, t), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_scaled_spmm_opcheck(index_dtype, weighted):
    name = "bipartite_more_sources"
    rowptr, col, _ = csr_of(name, index_dtype)
    t = _inputs("scaled_spmm", name, weighted)
    torch.library.opcheck(ops.scaled_spmm.default, (rowptr, col, *t.values()))


class Scaled(torch.nn.Module):
    def forward(self, rowptr: Tensor, col: Tensor, w: Optional[Tensor], s: Tensor, x: Tensor) -> Tensor:
        return torch.ops.gnnfuse.scaled_spmm(rowptr, col, w, s, x)


def _scaled_grads(fn):
    name = "power_law"
    rowptr, col, _ = csr_of(name)
    t = _inputs("scaled_spmm", name, True, F=4)
    y = fn(rowptr, col, *t.values())
    return (y,) + torch.autograd.grad(y.square().sum(), list(t.values()))


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
def test_scaled_spmm_torchscript():
    for a, b in zip(_scaled_grads(torch.jit.script(Scaled())), _scaled_grads(Scaled())):
        torch.testing.assert_close(a, b)


@pytest.mark.compile
def test_scaled_spmm_torch_compile(dynamo_reset):
    compiled = torch.compile(Scaled(), backend="aot_eager", fullgraph=True)
    for a, b in zip(_scaled_grads(compiled), _scaled_grads(Scaled())):
        torch.testing.assert_close(a, b)


def test_scaled_spmm_bad_inputs():
    name = "uniform"
    rowptr, col, _ = csr_of(name)
    t = _inputs("scaled_spmm", name, False)
    s, x = t["scale"].detach(), t["x"].detach()
    with pytest.raises(RuntimeError, match=r"gnnfuse::scaled_spmm: argument 'scale'.*number of stored entries"):
        ops.scaled_spmm(rowptr, col, None, s[:-1], x)
    with pytest.raises(RuntimeError, match=r"gnnfuse::scaled_spmm: argument 'scale'"):
        ops.scaled_spmm(rowptr, col, None, s.float(), x)
    with pytest.raises(RuntimeError, match=r"gnnfuse::scaled_spmm: argument 'scale'"):
        ops.scaled_spmm(rowptr, col, None, s[:, None], x)
    with pytest.raises(RuntimeError, match=r"gnnfuse::scaled_spmm: argument 'col'"):
        ops.scaled_spmm(rowptr, col.clone().fill_(10**6), None, s, x)
