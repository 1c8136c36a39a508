"""SpMM with mean/max/min reduction and edge softmax: ops written only as specs (ops/spmm_mean,
spmm_max, spmm_min, edge_softmax), their generated backward (through the saved positions of a
max/min, through the detached row max of the softmax), checked against independent float64
references on the edge-case graphs, gradcheck, opcheck, TorchScript, torch.compile and errors."""

from __future__ import annotations

from typing import Optional

import pytest
import torch
from torch import Tensor
from torch.autograd import gradcheck

import gnnfuse
from gnnfuse import Graph
from graphs import CASE_NAMES, CASES, assert_frontend_matches_eager, csr_of, edge_weights, features

ops = torch.ops.gnnfuse
INDEX_DTYPES = [torch.int32, torch.int64]
DTYPE_IDS = {torch.int32: "int32", torch.int64: "int64"}
REDUCE_OPS = {"mean": "spmm_mean", "max": "spmm_max", "min": "spmm_min"}
SMALL = {"no_edges", "single_node", "single_node_loop", "self_loops_duplicates"}


def ref_reduce(rowptr: Tensor, col: Tensor, w: Optional[Tensor], x: Tensor, reduce: str):
    """Row by row over the CSR in float64: (values, chosen CSR position or -1)."""
    n = rowptr.numel() - 1
    out = torch.zeros(n, x.size(1), dtype=torch.float64)
    arg = torch.full((n, x.size(1)), -1, dtype=torch.long)
    xd = x.detach().double()
    for i in range(n):
        b, e = int(rowptr[i]), int(rowptr[i + 1])
        if b == e:
            continue
        vals = xd[col[b:e].long()]
        if w is not None:
            vals = vals * w.detach().double()[b:e, None]
        if reduce == "mean":
            out[i] = vals.sum(0) / (e - b)
        else:
            # first position on ties, as the kernel
            best = vals.argmax(0) if reduce == "max" else vals.argmin(0)
            out[i] = vals.gather(0, best[None]).squeeze(0)
            arg[i] = best + b
    return out, arg


def ref_edge_softmax(rowptr: Tensor, score: Tensor) -> Tensor:
    out = torch.empty_like(score, dtype=torch.float64)
    s = score.detach().double()
    for i in range(rowptr.numel() - 1):
        b, e = int(rowptr[i]), int(rowptr[i + 1])
        if e > b:
            out[b:e] = torch.softmax(s[b:e], 0)
    return out


def _call(reduce, rowptr, col, w, x):
    out = getattr(ops, REDUCE_OPS[reduce])(rowptr, col, w, x)
    return out if reduce == "mean" else out[0]


@pytest.mark.parametrize("F", [1, 3, 32, 129])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("reduce", list(REDUCE_OPS))
def test_reduce_fp64_reference(reduce, name, index_dtype, weighted, F):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    x = features(case.num_src_nodes, F, torch.float64, seed=F)
    w = edge_weights(case.num_edges, torch.float64, seed=7) if weighted else None
    ref, ref_arg = ref_reduce(rowptr, col, w, x, reduce)
    out = getattr(ops, REDUCE_OPS[reduce])(rowptr, col, w, x)
    if reduce == "mean":
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        return
    y, arg = out
    torch.testing.assert_close(y, ref, rtol=0, atol=0)
    # Unweighted duplicate edges tie exactly; the first CSR position wins, as in the reference.
    assert torch.equal(arg, ref_arg)


@pytest.mark.parametrize("reduce", list(REDUCE_OPS))
def test_reduce_float32_matches_float64(reduce):
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    x = features(case.num_src_nodes, 16, torch.float64, seed=1)
    w = edge_weights(case.num_edges, torch.float64, seed=2)
    ref, _ = ref_reduce(rowptr, col, w, x, reduce)
    y = _call(reduce, rowptr, col, w.float(), x.float())
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("reduce", list(REDUCE_OPS))
def test_reduce_gradcheck(reduce, name, weighted):
    if reduce != "mean" and not weighted and name == "self_loops_duplicates":
        pytest.skip("unweighted duplicate edges tie exactly: max/min is not differentiable there")
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    x = features(case.num_src_nodes, 3, torch.float64, seed=3).requires_grad_()
    w = edge_weights(case.num_edges, torch.float64, seed=4).requires_grad_() if weighted else None
    inputs = (x,) if w is None else (x, w)

    def fn(*t):
        return _call(reduce, rowptr, col, t[1] if len(t) > 1 else None, t[0])

    assert gradcheck(fn, inputs, fast_mode=name not in SMALL)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_gradient_goes_to_the_chosen_edge(reduce):
    # Row 0 has edges from 1 and 2; the gradient of each feature goes to the winning source only.
    rowptr = torch.tensor([0, 2, 2, 2])
    col = torch.tensor([1, 2])
    x = torch.tensor([[0.0, 0.0], [1.0, 5.0], [3.0, -1.0]], dtype=torch.float64, requires_grad=True)
    y, arg = getattr(ops, REDUCE_OPS[reduce])(rowptr, col, None, x)
    y.sum().backward()
    if reduce == "max":
        assert y[0].tolist() == [3.0, 5.0] and arg[0].tolist() == [1, 0]
        assert x.grad.tolist() == [[0, 0], [0, 1], [1, 0]]
    else:
        assert y[0].tolist() == [1.0, -1.0] and arg[0].tolist() == [0, 1]
        assert x.grad.tolist() == [[0, 0], [1, 0], [0, 1]]
    assert arg[1:].eq(-1).all() and y[1:].eq(0).all()  # rows without edges


def test_max_propagates_nan():
    rowptr = torch.tensor([0, 3])
    col = torch.tensor([0, 1, 2])
    x = torch.tensor([[1.0], [float("nan")], [2.0]])
    y, _ = ops.spmm_max(rowptr, col, None, x)
    assert torch.isnan(y).all()


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("reduce", list(REDUCE_OPS))
def test_reduce_opcheck(reduce, index_dtype, weighted):
    name = "bipartite_more_sources"
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    x = features(case.num_src_nodes, 4, torch.float64, seed=5).requires_grad_()
    w = edge_weights(case.num_edges, torch.float64, seed=6).requires_grad_() if weighted else None
    torch.library.opcheck(getattr(ops, REDUCE_OPS[reduce]).default, (rowptr, col, w, x))


def test_max_backward_op_checks_positions():
    name = "uniform"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    x = features(case.num_src_nodes, 3, torch.float64, seed=1)
    y, arg = ops.spmm_max(rowptr, col, None, x)
    g = torch.ones_like(y)
    csc = torch.ops.gnnfuse.csr_transpose(rowptr, col, case.num_src_nodes)
    dx = ops.spmm_max_grad_x(rowptr, col, None, *csc, arg, g)
    # every row's chosen source gets the row's gradient, as scatter-add over the positions
    want = torch.zeros_like(x)
    has = arg >= 0
    src = col[arg.clamp(min=0)]
    want.index_put_((src[has], torch.nonzero(has)[:, 1]), g[has], accumulate=True)
    torch.testing.assert_close(dx, want)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_max_grad_x: argument 'selected'.*outside \[-1, 400\)"):
        bad = arg.clone()
        bad[0, 0] = case.num_edges
        ops.spmm_max_grad_x(rowptr, col, None, *csc, bad, g)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_max_grad_x: argument 'selected'.*int64"):
        ops.spmm_max_grad_x(rowptr, col, None, *csc, arg.int(), g)


# ---------------------------------------------------------------- edge softmax
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_edge_softmax_fp64_reference(name, index_dtype):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    s = edge_weights(case.num_edges, torch.float64, seed=11) * 3
    torch.testing.assert_close(ops.edge_softmax(rowptr, col, s), ref_edge_softmax(rowptr, s), rtol=1e-12, atol=1e-14)


def test_edge_softmax_is_stable_for_large_logits():
    rowptr = torch.tensor([0, 3, 5])
    col = torch.tensor([0, 1, 2, 0, 1])
    for dtype in (torch.float32, torch.float64):
        s = torch.tensor([1e4, 1e4 - 1, -1e4, -1e4, -1e4 + 2], dtype=dtype, requires_grad=True)
        p = ops.edge_softmax(rowptr, col, s)
        assert torch.isfinite(p).all()
        torch.testing.assert_close(p.double(), ref_edge_softmax(rowptr, s), rtol=1e-6, atol=1e-7)
        (p * torch.arange(5, dtype=dtype)).sum().backward()
        assert torch.isfinite(s.grad).all()


@pytest.mark.parametrize("name", CASE_NAMES)
def test_edge_softmax_gradcheck(name):
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    s = edge_weights(case.num_edges, torch.float64, seed=12).requires_grad_()
    assert gradcheck(lambda t: ops.edge_softmax(rowptr, col, t), (s,), fast_mode=name not in SMALL)


def test_edge_softmax_gradient_formula():
    # dS = P * (dP - rowsum(P * dP)), the closed form the generator derives from the definition
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    s = edge_weights(case.num_edges, torch.float64, seed=13).requires_grad_()
    g = edge_weights(case.num_edges, torch.float64, seed=14)
    p = ops.edge_softmax(rowptr, col, s)
    (ds,) = torch.autograd.grad(p, s, g)
    rows = torch.repeat_interleave(torch.arange(case.num_nodes), rowptr.diff())
    rowsum = torch.zeros(case.num_nodes, dtype=torch.float64).index_add_(0, rows, p.detach() * g)
    torch.testing.assert_close(ds, p.detach() * (g - rowsum[rows]), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_edge_softmax_opcheck(index_dtype):
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    s = edge_weights(case.num_edges, torch.float64, seed=15).requires_grad_()
    torch.library.opcheck(ops.edge_softmax.default, (rowptr, col, s))


def test_edge_softmax_second_derivative_is_a_clear_error():
    rowptr, col, _ = csr_of("uniform")
    s = edge_weights(CASES["uniform"].num_edges, torch.float64, seed=1).requires_grad_()
    p = ops.edge_softmax(rowptr, col, s)
    (ds,) = torch.autograd.grad(p.square().sum(), s, create_graph=True)
    with pytest.raises(RuntimeError, match=r"gnnfuse::edge_softmax_grad_score: .*highest order generated"):
        ds.sum().backward()


def test_edge_softmax_bad_inputs():
    rowptr, col, _ = csr_of("uniform")
    s = edge_weights(CASES["uniform"].num_edges, torch.float64, seed=1)
    with pytest.raises(RuntimeError, match=r"gnnfuse::edge_softmax: argument 'score'.*number of stored entries"):
        ops.edge_softmax(rowptr, col, s[:-1])
    with pytest.raises(RuntimeError, match=r"gnnfuse::edge_softmax: argument 'score'"):
        ops.edge_softmax(rowptr, col, s.to(torch.int64))
    bad = rowptr.clone()
    bad[3] = bad[4] + 1
    with pytest.raises(RuntimeError, match=r"gnnfuse::edge_softmax: argument 'rowptr'"):
        ops.edge_softmax(bad, col, s)


# ---------------------------------------------------------------- frontends
class Aggregate(torch.nn.Module):
    def forward(self, rowptr: Tensor, col: Tensor, w: Tensor, x: Tensor):
        mean = torch.ops.gnnfuse.spmm_mean(rowptr, col, w, x)
        mx = torch.ops.gnnfuse.spmm_max(rowptr, col, w, x)[0]
        mn = torch.ops.gnnfuse.spmm_min(rowptr, col, w, x)[0]
        p = torch.ops.gnnfuse.edge_softmax(rowptr, col, w)
        return mean + mx - mn, p


def _aggregate_grads(fn):
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    x = features(case.num_src_nodes, 5, torch.float64, seed=1).requires_grad_()
    w = edge_weights(case.num_edges, torch.float64, seed=2).requires_grad_()
    y, p = fn(rowptr, col, w, x)
    loss = y.square().sum() + (p * torch.linspace(-1, 1, p.numel(), dtype=p.dtype)).sum()
    return (y, p) + torch.autograd.grad(loss, [x, w])


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
def test_reductions_torchscript():
    assert_frontend_matches_eager(Aggregate, _aggregate_grads, "torchscript")


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_reductions_torch_compile(backend, dynamo_reset):
    assert_frontend_matches_eager(Aggregate, _aggregate_grads, "compile:" + backend)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_python_api_graph_forms(reduce):
    name = "self_loops_duplicates"
    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    x = features(case.num_src_nodes, 4, torch.float64, seed=1)
    w = edge_weights(case.num_edges, torch.float64, seed=2)  # edge_index order
    want = ref_reduce(rowptr, col, w[perm], x, reduce)[0] if reduce != "sum" else None
    if want is None:
        want = torch.zeros(case.num_nodes, 4, dtype=torch.float64).index_add_(0, case.dst, w[:, None] * x[case.src])
    g = Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)
    for got in (
        gnnfuse.spmm(case.edge_index, x, w, reduce=reduce),
        gnnfuse.spmm(g, x, w[perm], reduce=reduce),
    ):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="reduce must be one of"):
        gnnfuse.spmm(g, x, reduce="median")


def test_python_api_edge_softmax_edge_index_order():
    name = "power_law"
    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    s = edge_weights(case.num_edges, torch.float64, seed=3)
    p = gnnfuse.edge_softmax(case.edge_index, s)
    want = torch.empty_like(s)
    want[perm] = ref_edge_softmax(rowptr, s[perm])
    torch.testing.assert_close(p, want, rtol=1e-12, atol=1e-14)
    # sums to one over every destination with edges
    sums = torch.zeros(case.num_nodes, dtype=torch.float64).index_add_(0, case.dst, p)
    has = torch.zeros(case.num_nodes, dtype=torch.bool)
    has[case.dst] = True
    torch.testing.assert_close(sums[has], torch.ones(int(has.sum()), dtype=torch.float64))


# ---------------------------------------------------------------- multi-head
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_heads_match_per_head_reference(name, index_dtype, H):
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    s = edge_weights(case.num_edges * H, torch.float64, seed=21).view(-1, H) * 2
    p = ops.edge_softmax_heads(rowptr, col, s)
    assert p.shape == (case.num_edges, H)
    x = features(case.num_src_nodes, H * 5, torch.float64, seed=22).view(-1, H, 5)
    y = ops.spmm_heads(rowptr, col, s, x)
    assert y.shape == (case.num_nodes, H, 5)
    a = dense_heads(rowptr, col, s, case.num_nodes, case.num_src_nodes)
    for h in range(H):
        torch.testing.assert_close(p[:, h], ref_edge_softmax(rowptr, s[:, h]), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(y[:, h], a[h] @ x[:, h], rtol=1e-12, atol=1e-12)


def dense_heads(rowptr, col, w, n, m):
    rows = torch.repeat_interleave(torch.arange(n), rowptr.long().diff())
    a = torch.zeros(w.size(1), n, m, dtype=torch.float64)
    for h in range(w.size(1)):
        a[h].index_put_((rows, col.long()), w[:, h], accumulate=True)
    return a


@pytest.mark.parametrize("name", ["self_loops_duplicates", "empty_rows_isolated", "bipartite_fewer_sources", "power_law"])
def test_heads_gradcheck(name):
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    s = edge_weights(case.num_edges * 2, torch.float64, seed=23).view(-1, 2).requires_grad_()
    x = features(case.num_src_nodes, 6, torch.float64, seed=24).view(-1, 2, 3).requires_grad_()
    fast = name not in SMALL
    assert gradcheck(lambda t: ops.edge_softmax_heads(rowptr, col, t), (s,), fast_mode=fast)
    assert gradcheck(lambda w, v: ops.spmm_heads(rowptr, col, w, v), (s, x), fast_mode=fast)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_heads_opcheck(index_dtype):
    name = "bipartite_more_sources"
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    s = edge_weights(case.num_edges * 2, torch.float64, seed=25).view(-1, 2).requires_grad_()
    x = features(case.num_src_nodes, 6, torch.float64, seed=26).view(-1, 2, 3).requires_grad_()
    torch.library.opcheck(ops.edge_softmax_heads.default, (rowptr, col, s))
    torch.library.opcheck(ops.spmm_heads.default, (rowptr, col, s, x))


def test_heads_bad_shapes():
    name = "uniform"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    s = edge_weights(case.num_edges * 2, torch.float64, seed=1).view(-1, 2)
    x = features(case.num_src_nodes, 6, torch.float64, seed=2).view(-1, 2, 3)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_heads: argument 'x'.*extent of index h"):
        ops.spmm_heads(rowptr, col, s, x.reshape(-1, 3, 2))
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_heads: argument 'weight'.*number of stored entries"):
        ops.spmm_heads(rowptr, col, s[1:], x)
    with pytest.raises(RuntimeError, match=r"gnnfuse::edge_softmax_heads: argument 'score'"):
        ops.edge_softmax_heads(rowptr, col, s.flatten())


# ---------------------------------------------------------------- sddmm add / mul
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_sddmm_add_mul_reference(op, name, index_dtype):
    case = CASES[name]
    rowptr, col, perm = csr_of(name, index_dtype)
    u = features(case.num_nodes, 3, torch.float64, seed=31)
    v = features(case.num_src_nodes, 3, torch.float64, seed=32)
    out = getattr(ops, "sddmm_" + op)(rowptr, col, u, v)
    rows = torch.repeat_interleave(torch.arange(case.num_nodes), rowptr.long().diff())
    a, b = u[rows], v[col.long()]
    torch.testing.assert_close(out, a + b if op == "add" else a * b, rtol=0, atol=0)
    # through the Python API, in edge_index order (square graphs: edge_index has one node count)
    if case.num_nodes == case.num_src_nodes:
        got = gnnfuse.sddmm(case.edge_index, u, v, op=op)
        want = u[case.dst] + v[case.src] if op == "add" else u[case.dst] * v[case.src]
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["add", "mul"])
def test_sddmm_add_mul_gradcheck_opcheck(op):
    for name in ["self_loops_duplicates", "bipartite_fewer_sources", "power_law"]:
        case = CASES[name]
        rowptr, col, _ = csr_of(name)
        u = features(case.num_nodes, 2, torch.float64, seed=33).requires_grad_()
        v = features(case.num_src_nodes, 2, torch.float64, seed=34).requires_grad_()
        fn = getattr(ops, "sddmm_" + op)
        assert gradcheck(lambda a, b: fn(rowptr, col, a, b), (u, v), fast_mode=name not in SMALL)
        torch.library.opcheck(fn.default, (rowptr, col, u, v))
    with pytest.raises(ValueError, match="op must be"):
        gnnfuse.sddmm(Graph.from_edge_index(CASES["uniform"].edge_index), u, u, op="sub")


class Attention(torch.nn.Module):
    """GAT-style pipeline of the multi-head ops: logits, softmax, weighted aggregation."""

    def forward(self, rowptr: Tensor, col: Tensor, a_dst: Tensor, a_src: Tensor, x: Tensor):
        logits = torch.ops.gnnfuse.sddmm_add(rowptr, col, a_dst, a_src)
        logits = logits + torch.ops.gnnfuse.sddmm_mul(rowptr, col, a_dst, a_src)
        p = torch.ops.gnnfuse.edge_softmax_heads(rowptr, col, logits)
        return torch.ops.gnnfuse.spmm_heads(rowptr, col, p, x)


def _attention_grads(fn):
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    a_dst = features(case.num_nodes, 2, torch.float64, seed=41).requires_grad_()
    a_src = features(case.num_src_nodes, 2, torch.float64, seed=42).requires_grad_()
    x = features(case.num_src_nodes, 6, torch.float64, seed=43).view(-1, 2, 3).requires_grad_()
    y = fn(rowptr, col, a_dst, a_src, x)
    return (y,) + torch.autograd.grad(y.square().sum(), [a_dst, a_src, x])


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
def test_multihead_ops_torchscript():
    assert_frontend_matches_eager(Attention, _attention_grads, "torchscript")


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_multihead_ops_torch_compile(backend, dynamo_reset):
    assert_frontend_matches_eager(Attention, _attention_grads, "compile:" + backend)


@pytest.mark.parametrize("op", ["sddmm_add", "sddmm_mul"])
def test_sddmm_add_mul_bad_inputs(op):
    case = CASES["uniform"]
    rowptr, col, _ = csr_of("uniform")
    u = features(case.num_nodes, 2, torch.float64, seed=1)
    fn = getattr(ops, op)
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'v'.*extent of index h"):
        fn(rowptr, col, u, u[:, :1])
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'v'"):
        fn(rowptr, col, u, u.float())
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'col'"):
        fn(rowptr, col.clone().fill_(10**6), u, u)


@pytest.mark.parametrize("reduce", list(REDUCE_OPS))
def test_reduce_bad_inputs(reduce):
    case = CASES["uniform"]
    rowptr, col, _ = csr_of("uniform")
    x = features(case.num_src_nodes, 3, torch.float64, seed=1)
    op = REDUCE_OPS[reduce]
    fn = getattr(ops, op)
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'edge_weight'.*number of stored entries"):
        fn(rowptr, col, torch.ones(3, dtype=torch.float64), x)
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'x'"):
        fn(rowptr, col, None, x.int())
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'col'"):
        fn(rowptr, col.clone().fill_(10**6), None, x)
    bad = rowptr.clone()
    bad[0] = 1
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'rowptr'"):
        fn(bad, col, None, x)


def test_validate_edge_index_opcheck():
    ei = CASES["uniform"].edge_index
    torch.library.opcheck(torch.ops.gnnfuse.validate_edge_index.default, (ei, CASES["uniform"].num_nodes))
