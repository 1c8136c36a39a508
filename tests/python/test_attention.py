"""Fused attention ops written only as specs: ``gat`` (ops/gat.spec: leaky-ReLU logits
a_dst[i] + a_src[j], edge softmax, weighted sum) and ``graph_attention``
(ops/graph_attention.spec: dot-product scores q_i . k_j). Their backward is generated, with the
softmax's row statistics hoisted into ops of their own (``<op>_stat<k>``) for the adjoints that
walk the graph by columns. Checked against independent float64 references on the edge-case
graphs, gradcheck, opcheck, TorchScript, torch.compile, the Python API and bad inputs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor
from torch.autograd import gradcheck, gradgradcheck

import gnnfuse
from gnnfuse import Graph
from graphs import CASE_NAMES, CASES, assert_frontend_matches_eager, csr_of, features

ops = torch.ops.gnnfuse
INDEX_DTYPES = [torch.int32, torch.int64]
DTYPE_IDS = {torch.int32: "int32", torch.int64: "int64"}
SMALL = {"no_edges", "single_node", "single_node_loop", "self_loops_duplicates"}


def _rows(rowptr: Tensor) -> Tensor:
    return torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff().long())


def ref_softmax_aggregate(rowptr: Tensor, col: Tensor, score: Tensor, x: Tensor) -> Tensor:
    """Row by row in float64: out[i,h] = sum_e softmax over the row of score[e,h] * x[col[e],h]."""
    n, H = rowptr.numel() - 1, score.size(1)
    out = torch.zeros(n, H, x.size(2), dtype=torch.float64)
    s, xd = score.double(), x.double()
    for i in range(n):
        b, e = int(rowptr[i]), int(rowptr[i + 1])
        if e > b:
            p = torch.softmax(s[b:e], 0)  # [deg, H]
            out[i] = (p[:, :, None] * xd[col[b:e].long()]).sum(0)
    return out


def ref_gat(rowptr, col, a_dst, a_src, x, slope):
    rows = _rows(rowptr)
    score = torch.nn.functional.leaky_relu(a_dst.double()[rows] + a_src.double()[col.long()], slope)
    return ref_softmax_aggregate(rowptr, col, score, x)


def ref_gat_edge(rowptr, col, a_dst, a_src, a_edge, x, slope):
    rows = _rows(rowptr)
    score = torch.nn.functional.leaky_relu(a_dst.double()[rows] + a_src.double()[col.long()] + a_edge.double(), slope)
    return ref_softmax_aggregate(rowptr, col, score, x)


def _edge_logits(col, H, dtype=torch.float64, seed=0):
    return torch.randn(col.numel(), H, generator=torch.Generator().manual_seed(100 + seed), dtype=dtype)


def ref_graph_attention(rowptr, col, q, k, v, bias=None):
    rows = _rows(rowptr)
    score = (q.double()[rows] * k.double()[col.long()]).sum(-1) + (0 if bias is None else bias.double())
    return ref_softmax_aggregate(rowptr, col, score, v)


def ref_graph_attention_edge_values(rowptr, col, q, k, bias, ev):
    """The softmax of ref_graph_attention (with bias) applied to per-edge values ev [E, F]: [N, H, F]."""
    rows = _rows(rowptr)
    score = (q.double()[rows] * k.double()[col.long()]).sum(-1) + bias.double()
    n, H = rowptr.numel() - 1, score.size(1)
    out = torch.zeros(n, H, ev.size(1), dtype=torch.float64)
    for i in range(n):
        b, e = int(rowptr[i]), int(rowptr[i + 1])
        if e > b:
            out[i] = (torch.softmax(score[b:e], 0)[:, :, None] * ev.double()[b:e, None, :]).sum(0)
    return out


def _attention_op(op, rowptr, col, q, k, v, seed=0):
    """(output, float64 reference) of graph_attention, graph_attention_edge (a bias [E, H]) or
    graph_attention_edge_values (a bias and per-edge values [E, F] made from v's width)."""
    if op == "graph_attention":
        return ops.graph_attention(rowptr, col, q, k, v), ref_graph_attention(rowptr, col, q, k, v)
    bias = _edge_logits(col, q.size(1), seed=seed)
    if op == "graph_attention_edge":
        return ops.graph_attention_edge(rowptr, col, q, k, bias, v), ref_graph_attention(rowptr, col, q, k, v, bias)
    ev = torch.randn(col.numel(), v.size(2), generator=torch.Generator().manual_seed(200 + seed), dtype=v.dtype)
    return ops.graph_attention_edge_values(rowptr, col, q, k, bias, ev), ref_graph_attention_edge_values(rowptr, col, q, k, bias, ev)


ATTENTION_OPS = ["graph_attention", "graph_attention_edge", "graph_attention_edge_values"]


def _inputs(name, H, F, dtype=torch.float64, seed=0, D=None):
    case = CASES[name]
    n, m = case.num_nodes, case.num_src_nodes
    g = torch.Generator().manual_seed(seed)
    D = F if D is None else D
    a_dst = torch.randn(n, H, generator=g, dtype=dtype)
    a_src = torch.randn(m, H, generator=g, dtype=dtype)
    x = torch.randn(m, H, F, generator=g, dtype=dtype)
    q = torch.randn(n, H, D, generator=g, dtype=dtype) / math.sqrt(max(D, 1))
    k = torch.randn(m, H, D, generator=g, dtype=dtype)
    return a_dst, a_src, x, q, k


# ---------------------------------------------------------------- references
@pytest.mark.parametrize("op", ["gat", "gat_edge"])
@pytest.mark.parametrize("F", [1, 3, 32, 129])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_gat_fp64_reference(name, index_dtype, F, op):
    """gat, and gat_edge with per-edge logits beside the per-node ones."""
    rowptr, col, _ = csr_of(name, index_dtype)
    a_dst, a_src, x, _, _ = _inputs(name, 2, F, seed=F)
    if op == "gat":
        out, want = ops.gat(rowptr, col, a_dst, a_src, x, 0.2), ref_gat(rowptr, col, a_dst, a_src, x, 0.2)
    else:
        a_edge = _edge_logits(col, 2, seed=F)
        out = ops.gat_edge(rowptr, col, a_dst, a_src, a_edge, x, 0.2)
        want = ref_gat_edge(rowptr, col, a_dst, a_src, a_edge, x, 0.2)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_gat_edge_with_zero_edge_logits_is_gat():
    for name in ("power_law", "self_loops_duplicates", "empty_rows_isolated", "bipartite_more_sources"):
        rowptr, col, _ = csr_of(name)
        a_dst, a_src, x, _, _ = _inputs(name, 3, 5, seed=1)
        want = ops.gat(rowptr, col, a_dst, a_src, x, 0.2)
        torch.testing.assert_close(ops.gat_edge(rowptr, col, a_dst, a_src, torch.zeros(col.numel(), 3, dtype=torch.float64), x, 0.2),
                                   want, rtol=1e-14, atol=1e-14)
        # a per-edge logit is a shift of the per-source one where it only depends on the source
        shift = torch.randn(CASES[name].num_src_nodes, 3, dtype=torch.float64)
        torch.testing.assert_close(ops.gat_edge(rowptr, col, a_dst, a_src, shift[col.long()], x, 0.2),
                                   ops.gat(rowptr, col, a_dst, a_src + shift, x, 0.2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ATTENTION_OPS)
@pytest.mark.parametrize("F", [1, 3, 32, 129])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_graph_attention_fp64_reference(name, index_dtype, F, op):
    rowptr, col, _ = csr_of(name, index_dtype)
    _, _, v, q, k = _inputs(name, 2, F, seed=F, D=[5, 3, 16, 7][[1, 3, 32, 129].index(F)])
    out, want = _attention_op(op, rowptr, col, q, k, v, seed=F)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["gat", "gat_edge"] + ATTENTION_OPS)
def test_float32_close_to_float64(op):
    name = "power_law"
    rowptr, col, _ = csr_of(name)
    a_dst, a_src, x, q, k = _inputs(name, 4, 32)
    if op == "gat":
        f = lambda *t: ops.gat(rowptr, col, *t, 0.2)  # noqa: E731
        args = (a_dst, a_src, x)
    elif op == "gat_edge":
        f = lambda *t: ops.gat_edge(rowptr, col, *t, 0.2)  # noqa: E731
        args = (a_dst, a_src, _edge_logits(col, 4), x)
    elif op != "graph_attention":
        f = lambda *t: getattr(ops, op)(rowptr, col, *t)  # noqa: E731
        args = (q, k, _edge_logits(col, 4), x if op == "graph_attention_edge" else _edge_logits(col, 5))
    else:
        f = lambda *t: ops.graph_attention(rowptr, col, *t)  # noqa: E731
        args = (q, k, x)
    want = f(*args)
    got = f(*(t.float() for t in args))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_large_logits_stay_finite():
    rowptr = torch.tensor([0, 3, 5, 5])
    col = torch.tensor([0, 1, 2, 0, 1])
    for dtype in (torch.float32, torch.float64):
        a_dst = torch.tensor([[1e4], [-1e4], [0.0]], dtype=dtype, requires_grad=True)
        a_src = torch.tensor([[1e4], [1e4 - 1], [-1e4]], dtype=dtype, requires_grad=True)
        x = torch.randn(3, 1, 4, dtype=dtype, requires_grad=True)
        out = ops.gat(rowptr, col, a_dst, a_src, x, 0.2)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), ref_gat(rowptr, col, a_dst.detach(), a_src.detach(), x.detach(), 0.2),
                                   rtol=1e-5, atol=1e-5)
        out.square().sum().backward()
        for t in (a_dst, a_src, x):
            assert torch.isfinite(t.grad).all()
        # the same logits carried by the edges
        a_edge = (a_dst.detach()[_rows(rowptr)] + a_src.detach()[col]).requires_grad_()
        zd, zs = torch.zeros_like(a_dst), torch.zeros_like(a_src)
        out = ops.gat_edge(rowptr, col, zd, zs, a_edge, x.detach(), 0.2)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), ref_gat_edge(rowptr, col, zd, zs, a_edge.detach(), x.detach(), 0.2), rtol=1e-5, atol=1e-5)
        out.square().sum().backward()
        assert torch.isfinite(a_edge.grad).all()


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_sddmm_heads_fp64_reference(name, index_dtype):
    rowptr, col, _ = csr_of(name, index_dtype)
    _, _, _, q, k = _inputs(name, 3, 1, seed=2, D=129 if name == "power_law" else 5)
    want = (q[_rows(rowptr)] * k[col.long()]).sum(-1)
    torch.testing.assert_close(ops.sddmm_heads(rowptr, col, q, k), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_sddmm_heads_gradcheck(name):
    rowptr, col, _ = csr_of(name)
    _, _, _, q, k = _inputs(name, 2, 1, seed=3, D=3)
    args = (q.requires_grad_(), k.requires_grad_())
    assert gradcheck(lambda *t: ops.sddmm_heads(rowptr, col, *t), args, fast_mode=name not in SMALL)
    torch.library.opcheck(ops.sddmm_heads.default, (rowptr, col, *args))



# ------------------------------------------------- the edge features' products (TransformerConv)
def _edge_feature_inputs(name, index_dtype=torch.int64, H=3, D=4, seed=6):
    rowptr, col, _ = csr_of(name, index_dtype)
    g = torch.Generator().manual_seed(seed)
    n, e = rowptr.numel() - 1, col.numel()
    p = torch.randn(n, H, D, generator=g, dtype=torch.float64)
    ea = torch.randn(e, D, generator=g, dtype=torch.float64)
    w = torch.randn(e, H, generator=g, dtype=torch.float64)
    return rowptr, col, p, ea, w


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("D", [1, 3, 32, 129])
def test_edge_feature_heads_fp64_reference(name, index_dtype, D):
    """sddmm_edge_heads: E[e, h] = p[row e, h] . ea[e]; spmm_edge_heads: Z[i, h] = sum over row
    i's edges of w[e, h] ea[e] (empty rows: 0), against per-edge float64 sums."""
    rowptr, col, p, ea, w = _edge_feature_inputs(name, index_dtype, D=D)
    rows = _rows(rowptr)
    want_e = (p[rows] * ea[:, None, :]).sum(-1)
    torch.testing.assert_close(ops.sddmm_edge_heads(rowptr, col, p, ea), want_e, rtol=1e-12, atol=1e-12)
    want_z = torch.zeros_like(p).index_add_(0, rows, w[:, :, None] * ea[:, None, :])
    torch.testing.assert_close(ops.spmm_edge_heads(rowptr, col, w, ea), want_z, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_edge_feature_heads_gradcheck(name):
    rowptr, col, p, ea, w = _edge_feature_inputs(name, H=2, D=3, seed=7)
    p, ea, w = p.requires_grad_(), ea.requires_grad_(), w.requires_grad_()
    fast = name not in SMALL
    assert gradcheck(lambda a, b: ops.sddmm_edge_heads(rowptr, col, a, b), (p, ea), fast_mode=fast)
    assert gradcheck(lambda a, b: ops.spmm_edge_heads(rowptr, col, a, b), (w, ea), fast_mode=fast)
    if name in SMALL:
        assert gradgradcheck(lambda a, b: ops.sddmm_edge_heads(rowptr, col, a, b), (p, ea))
    torch.library.opcheck(ops.sddmm_edge_heads.default, (rowptr, col, p, ea))
    torch.library.opcheck(ops.spmm_edge_heads.default, (rowptr, col, w, ea))


def test_edge_feature_heads_bad_operands():
    rowptr, col, p, ea, w = _edge_feature_inputs("self_loops_duplicates")
    with pytest.raises(RuntimeError, match=r"gnnfuse::sddmm_edge_heads: argument 'ea'"):
        ops.sddmm_edge_heads(rowptr, col, p, ea[1:])
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_edge_heads: argument 'weight'"):
        ops.spmm_edge_heads(rowptr, col, w[1:], ea)
    with pytest.raises(RuntimeError, match=r"gnnfuse::sddmm_edge_heads: argument 'ea'"):
        ops.sddmm_edge_heads(rowptr, col, p, ea.float())


def test_python_api_sddmm_heads():
    case = CASES["self_loops_duplicates"]
    _, _, _, q, k = _inputs("self_loops_duplicates", 2, 1, seed=4, D=3)
    want = (q[case.dst] * k[case.src]).sum(-1)  # edge_index order
    torch.testing.assert_close(gnnfuse.sddmm(case.edge_index, q, k), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="takes no edge_weight"):
        gnnfuse.sddmm(case.edge_index, q, k, edge_weight=torch.ones(case.num_edges, dtype=torch.float64))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", CASE_NAMES)
def test_gat_gradcheck(name):
    rowptr, col, _ = csr_of(name)
    a_dst, a_src, x, _, _ = _inputs(name, 2, 3, seed=5)
    args = tuple(t.requires_grad_() for t in (a_dst, a_src, x))
    assert gradcheck(lambda *t: ops.gat(rowptr, col, *t, 0.3), args, fast_mode=name not in SMALL)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_gat_edge_gradcheck(name):
    rowptr, col, _ = csr_of(name)
    a_dst, a_src, x, _, _ = _inputs(name, 2, 3, seed=7)
    args = tuple(t.requires_grad_() for t in (a_dst, a_src, _edge_logits(col, 2, seed=7), x))
    assert gradcheck(lambda *t: ops.gat_edge(rowptr, col, *t, 0.3), args, fast_mode=name not in SMALL)


@pytest.mark.parametrize("op", ATTENTION_OPS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_graph_attention_gradcheck(name, op):
    rowptr, col, _ = csr_of(name)
    _, _, v, q, k = _inputs(name, 2, 3, seed=6, D=4)
    if op == "graph_attention":
        args = tuple(t.requires_grad_() for t in (q, k, v))
    else:  # a bias [E, H]; values per source node [M, H, 3] or per edge [E, 3]
        vals = v if op == "graph_attention_edge" else _edge_logits(col, 3, seed=8)
        args = tuple(t.requires_grad_() for t in (q, k, _edge_logits(col, 2, seed=6), vals))
    fn = getattr(ops, op)
    assert gradcheck(lambda *t: fn(rowptr, col, *t), args, fast_mode=name not in SMALL)


def test_gradients_match_autograd_of_the_reference():
    name = "power_law"
    rowptr, col, _ = csr_of(name)
    a_dst, a_src, x, q, k = _inputs(name, 3, 8, seed=9)
    rows = _rows(rowptr)

    def ref(s, val):  # autograd through plain torch: scatter softmax and sum
        n = rowptr.numel() - 1
        m = torch.full((n, s.size(1)), -math.inf, dtype=s.dtype).scatter_reduce(0, rows[:, None].expand_as(s), s, "amax")
        e = (s - m[rows]).exp()
        z = torch.zeros(n, s.size(1), dtype=s.dtype).index_add(0, rows, e)
        return torch.zeros(n, *val.shape[1:], dtype=s.dtype).index_add(0, rows, (e / z[rows])[:, :, None] * val[col])

    a_edge = _edge_logits(col, 3, seed=9)
    for op in ("gat", "gat_edge", "graph_attention"):
        args = [t.clone().requires_grad_() for t in {"gat": (a_dst, a_src, x), "gat_edge": (a_dst, a_src, a_edge, x)}.get(op, (q, k, x))]
        if op == "gat":
            out = ops.gat(rowptr, col, *args, 0.2)
            want = ref(torch.nn.functional.leaky_relu(args[0][rows] + args[1][col], 0.2), args[2])
        elif op == "gat_edge":
            out = ops.gat_edge(rowptr, col, *args, 0.2)
            want = ref(torch.nn.functional.leaky_relu(args[0][rows] + args[1][col] + args[2], 0.2), args[3])
        else:
            out = ops.graph_attention(rowptr, col, *args)
            want = ref((args[0][rows] * args[1][col]).sum(-1), args[2])
        gy = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(5))
        # Tolerance: in about one run in five of this file the float64 reference itself comes out
        # off by up to 3e-9 relative in the exps of the first half of its edges (our kernels'
        # results are bitwise the same in those runs; see docs/RELIABILITY.md, open findings),
        # which the softmax gradient's cancellation turns into up to 3e-7 relative.
        for i, (a, b) in enumerate(zip(torch.autograd.grad(out, args, gy), torch.autograd.grad(want, args, gy))):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8, msg=lambda m: f"{op}, gradient {i} ({torch.get_num_threads()} threads): {m}")


def test_backward_runs_each_row_statistic_once():
    # The adjoints read the softmax's row statistics (max, 1/sum, ...), each an op of its own
    # (<op>_stat<k>) run once per backward however many adjoints read it.
    from torch.profiler import profile

    rowptr, col, _ = csr_of("power_law")
    a_dst, a_src, x, q, k = (t.requires_grad_() for t in _inputs("power_law", 2, 4, D=3))
    a_edge = _edge_logits(col, 2).requires_grad_()
    bias, ev = _edge_logits(col, 2, seed=1).requires_grad_(), _edge_logits(col, 3, seed=2).requires_grad_()
    for op, args in (("gat", (a_dst, a_src, x, 0.2)), ("gat_edge", (a_dst, a_src, a_edge, x, 0.2)), ("graph_attention", (q, k, x)),
                     ("graph_attention_edge", (q, k, bias, x)), ("graph_attention_edge_values", (q, k, bias, ev))):
        out = getattr(ops, op)(rowptr, col, *args)
        with profile() as prof:
            out.square().sum().backward()
        calls = {}
        for ev in prof.events():
            if ev.name.startswith(f"gnnfuse::{op}_stat"):
                calls[ev.name] = calls.get(ev.name, 0) + 1
        assert len(calls) >= 3, calls
        assert set(calls.values()) == {1}, calls


def test_second_derivative_is_a_clear_error():
    rowptr, col, _ = csr_of("uniform")
    a_dst, a_src, x, _, _ = _inputs("uniform", 2, 3)
    x.requires_grad_()
    out = ops.gat(rowptr, col, a_dst, a_src, x, 0.2)
    (gx,) = torch.autograd.grad(out.square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gat_grad_x: .*highest order generated"):
        gx.sum().backward()
    out = ops.gat_edge(rowptr, col, a_dst, a_src, _edge_logits(col, 2), x, 0.2)
    (gx,) = torch.autograd.grad(out.square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gat_edge_grad_x: .*highest order generated"):
        gx.sum().backward()


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_opcheck(index_dtype):
    name = "power_law"
    rowptr, col, _ = csr_of(name, index_dtype)
    a_dst, a_src, x, q, k = _inputs(name, 2, 5, D=3)
    torch.library.opcheck(ops.gat.default, (rowptr, col, a_dst.requires_grad_(), a_src.requires_grad_(), x.requires_grad_(), 0.2))
    torch.library.opcheck(ops.graph_attention.default, (rowptr, col, q.requires_grad_(), k.requires_grad_(), x))
    a_edge = _edge_logits(col, 2).requires_grad_()
    torch.library.opcheck(ops.gat_edge.default, (rowptr, col, a_dst, a_src, a_edge, x, 0.2))
    torch.library.opcheck(ops.graph_attention_edge.default, (rowptr, col, q, k, a_edge, x))
    torch.library.opcheck(ops.graph_attention_edge_values.default, (rowptr, col, q, k, a_edge, _edge_logits(col, 4).requires_grad_()))
    # with the CSC view passed (the backward's cache)
    colptr, row, perm = gnnfuse.Graph.from_csr(rowptr, col, num_src_nodes=CASES[name].num_src_nodes).csc()
    torch.library.opcheck(ops.gat_edge.default, (rowptr, col, a_dst, a_src, a_edge, x, 0.2, colptr, row, perm))


def test_bad_inputs():
    rowptr, col, _ = csr_of("uniform")
    a_dst, a_src, x, q, k = _inputs("uniform", 2, 3)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gat: argument 'x'"):
        ops.gat(rowptr, col, a_dst, a_src, x[:, :1], 0.2)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gat: argument 'a_src'"):
        ops.gat(rowptr, col, a_dst, a_src.float(), x, 0.2)
    with pytest.raises(RuntimeError, match=r"gnnfuse::graph_attention: argument 'k'"):
        ops.graph_attention(rowptr, col, q, k[:, :, :2], x)
    bad = col.clone()
    bad[0] = 10**6
    with pytest.raises(RuntimeError, match=r"gnnfuse::graph_attention: argument 'col'"):
        ops.graph_attention(rowptr, bad, q, k, x)
    a_edge = _edge_logits(col, 2)
    for wrong in (a_edge[1:], a_edge[:, :1], a_edge.float(), a_edge[:, :, None], torch.cat([a_edge, a_edge])):
        with pytest.raises(RuntimeError, match=r"gnnfuse::gat_edge: argument 'a_edge'"):
            ops.gat_edge(rowptr, col, a_dst, a_src, wrong, x, 0.2)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gat_edge: argument 'col'"):
        ops.gat_edge(rowptr, bad, a_dst, a_src, a_edge, x, 0.2)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gat_edge: argument 'x'"):
        ops.gat_edge(rowptr, col, a_dst, a_src, a_edge, x[:, :1], 0.2)
    for wrong in (a_edge[1:], a_edge[:, :1], a_edge.float()):
        with pytest.raises(RuntimeError, match=r"gnnfuse::graph_attention_edge: argument 'bias'"):
            ops.graph_attention_edge(rowptr, col, q, k, wrong, x)
    ev = _edge_logits(col, 3)
    with pytest.raises(RuntimeError, match=r"gnnfuse::graph_attention_edge_values: argument 'ev'"):
        ops.graph_attention_edge_values(rowptr, col, q, k, a_edge, ev[1:])
    with pytest.raises(RuntimeError, match=r"gnnfuse::graph_attention_edge_values: argument 'ev'"):
        ops.graph_attention_edge_values(rowptr, col, q, k, a_edge, ev[:, :, None])


# ---------------------------------------------------------------- frontends
class Attend(torch.nn.Module):
    def forward(self, rowptr: Tensor, col: Tensor, a_dst: Tensor, a_src: Tensor, x: Tensor, q: Tensor, k: Tensor, a_edge: Tensor):
        return (torch.ops.gnnfuse.gat(rowptr, col, a_dst, a_src, x, 0.2) + torch.ops.gnnfuse.graph_attention(rowptr, col, q, k, x)
                + torch.ops.gnnfuse.gat_edge(rowptr, col, a_dst, a_src, a_edge, x, 0.3)
                + torch.ops.gnnfuse.graph_attention_edge(rowptr, col, q, k, a_edge, x)
                + torch.ops.gnnfuse.graph_attention_edge_values(rowptr, col, q, k, a_edge, x[col.long(), 1]))


def _attend_grads(fn):
    rowptr, col, _ = csr_of("power_law")
    args = [t.requires_grad_() for t in _inputs("power_law", 2, 4, D=3) + (_edge_logits(col, 2),)]
    a_dst, a_src, x, q, k, a_edge = args
    y = fn(rowptr, col, a_dst, a_src, x, q, k, a_edge)
    return (y,) + torch.autograd.grad(y.square().sum(), args)


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
def test_torchscript():
    assert_frontend_matches_eager(Attend, _attend_grads, "torchscript")


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile(backend, dynamo_reset):
    assert_frontend_matches_eager(Attend, _attend_grads, "compile:" + backend)


def test_python_api_gat():
    name = "self_loops_duplicates"
    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(case.num_src_nodes, 2, 4, generator=g, dtype=torch.float64)
    att_src = torch.randn(1, 2, 4, generator=g, dtype=torch.float64)
    att_dst = torch.randn(1, 2, 4, generator=g, dtype=torch.float64)
    a_src, a_dst = (x * att_src).sum(-1), (x * att_dst).sum(-1)
    want = ref_gat(rowptr, col, a_dst, a_src, x, 0.1)
    graph = Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)
    for gr in (graph, case.edge_index):
        torch.testing.assert_close(gnnfuse.gat(gr, x, att_src, att_dst, negative_slope=0.1), want, rtol=1e-12, atol=1e-12)
    # the unfused path (attention returned, in edge_index order) agrees
    out, alpha = gnnfuse.gat(case.edge_index, x, att_src, att_dst, negative_slope=0.1, return_attention=True)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    sums = torch.zeros(case.num_nodes, 2, dtype=torch.float64).index_add_(0, case.dst, alpha)
    has = torch.zeros(case.num_nodes, dtype=torch.bool)
    has[case.dst] = True
    torch.testing.assert_close(sums[has], torch.ones(int(has.sum()), 2, dtype=torch.float64))


@pytest.mark.parametrize("name", ["self_loops_duplicates", "power_law", "bipartite_more_sources"])
def test_python_api_gat_edge_score_runs_fused(name):
    """edge_score (graph's edge order) without dropout runs gat_edge; its values and gradients
    match the per-edge path (return_attention) and the float64 reference."""
    from torch.profiler import profile

    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(case.num_src_nodes, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    x_dst = torch.randn(case.num_nodes, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    att_src = torch.randn(2, 4, generator=g, dtype=torch.float64)
    att_dst = torch.randn(2, 4, generator=g, dtype=torch.float64)
    score = torch.randn(case.num_edges, 2, generator=g, dtype=torch.float64, requires_grad=True)
    xs, xd = x.detach(), x_dst.detach()
    want = ref_gat_edge(rowptr, col, (xd * att_dst).sum(-1), (xs * att_src).sum(-1), score.detach()[perm], xs, 0.1)
    # edge_index: edge_score in its order; a Graph: in the Graph's (CSR) order
    # (an edge_index of a bipartite graph would need the sources' count: a Graph)
    graph = Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes, num_src_nodes=case.num_src_nodes)
    square = case.num_nodes == case.num_src_nodes
    for gr, sc in [(graph, score[perm])] + ([(case.edge_index, score)] if square else []):
        with profile() as prof:
            out = gnnfuse.gat(gr, x, att_src, att_dst, x_dst=x_dst, edge_score=sc, negative_slope=0.1)
        assert any(ev.name == "gnnfuse::gat_edge" for ev in prof.events())
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    sc = score[perm] if gr is graph else score  # (a graph of its own: `out` is differentiated below)
    unfused, _ = gnnfuse.gat(gr, x, att_src, att_dst, x_dst=x_dst, edge_score=sc, negative_slope=0.1, return_attention=True)
    torch.testing.assert_close(out, unfused, rtol=1e-12, atol=1e-12)
    gy = torch.randn(out.shape, generator=g, dtype=torch.float64)
    inputs = (x, x_dst, score)
    for a, b in zip(torch.autograd.grad(out, inputs, gy), torch.autograd.grad(unfused, inputs, gy)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_python_api_graph_attention_edge_bias():
    """edge_bias (graph's edge order, not scaled) runs graph_attention_edge."""
    from torch.profiler import profile

    name = "self_loops_duplicates"
    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    _, _, v, q, k = _inputs(name, 2, 6, D=16)
    bias = torch.randn(case.num_edges, 2, dtype=torch.float64)
    want = ref_graph_attention(rowptr, col, q / 4.0, k, v, bias[perm])
    with profile() as prof:
        out = gnnfuse.graph_attention(case.edge_index, q, k, v, edge_bias=bias)
    assert any(ev.name == "gnnfuse::graph_attention_edge" for ev in prof.events())
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    graph = Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)  # a Graph: its (CSR) order
    torch.testing.assert_close(gnnfuse.graph_attention(graph, q, k, v, edge_bias=bias[perm]), want, rtol=1e-12, atol=1e-12)
    for shape in [(case.num_edges + 1, 2), (case.num_edges, 3), (case.num_edges,)]:
        with pytest.raises(RuntimeError, match=r"gnnfuse.graph_attention: argument 'edge_bias' must have shape \[num_edges, heads\]"):
            gnnfuse.graph_attention(case.edge_index, q, k, v, edge_bias=torch.zeros(shape, dtype=torch.float64))


def test_python_api_gat_dropout_is_seeded():
    name = "power_law"
    case = CASES[name]
    x = torch.randn(case.num_src_nodes, 2, 4, dtype=torch.float64)
    att = torch.randn(2, 4, dtype=torch.float64)
    run = lambda seed: gnnfuse.gat(case.edge_index, x, att, att, dropout=0.5,  # noqa: E731
                                   generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(run(1), run(1), rtol=0, atol=0)
    assert not torch.equal(run(1), run(2))
    # no dropout outside training: the fused op
    torch.testing.assert_close(gnnfuse.gat(case.edge_index, x, att, att, dropout=0.5, training=False),
                               gnnfuse.gat(case.edge_index, x, att, att), rtol=0, atol=0)


def test_python_api_gat_checks_dropout_and_edge_score():
    case = CASES["power_law"]
    x = torch.randn(case.num_src_nodes, 2, 4, dtype=torch.float64)
    att = torch.randn(2, 4, dtype=torch.float64)
    # every coefficient dropped: zeros, as torch.nn.functional.dropout(p=1)
    assert torch.equal(gnnfuse.gat(case.edge_index, x, att, att, dropout=1.0), torch.zeros_like(x))
    for p in (-0.5, 1.5):
        with pytest.raises(ValueError, match=r"gnnfuse.gat: dropout must be a probability in \[0, 1\]"):
            gnnfuse.gat(case.edge_index, x, att, att, dropout=p)
    E = case.edge_index.size(1)
    for shape in [(E + 1, 2), (1, 2), (E,), (E, 3)]:
        with pytest.raises(RuntimeError, match=r"gnnfuse.gat: argument 'edge_score' must have shape \[num_edges, heads\]"):
            gnnfuse.gat(case.edge_index, x, att, att, edge_score=torch.zeros(shape, dtype=torch.float64))


def test_python_api_edge_softmax_num_nodes_compiles(dynamo_reset):
    """With num_nodes given, edge_softmax on an edge_index reads no data to size its graph, so
    it compiles with fullgraph=True."""
    case = CASES["power_law"]
    s = torch.randn(case.edge_index.size(1), 2, dtype=torch.float64)
    want = gnnfuse.edge_softmax(case.edge_index, s)
    torch.testing.assert_close(gnnfuse.edge_softmax(case.edge_index, s, num_nodes=case.num_nodes), want, rtol=0, atol=0)
    fn = torch.compile(lambda ei, s: gnnfuse.edge_softmax(ei, s, num_nodes=case.num_nodes), fullgraph=True)
    torch.testing.assert_close(fn(case.edge_index, s), want)


def test_python_api_graph_attention_scale():
    name = "power_law"
    rowptr, col, _ = csr_of(name)
    _, _, v, q, k = _inputs(name, 2, 6, D=16)
    graph = Graph.from_csr(rowptr, col, num_src_nodes=CASES[name].num_src_nodes)
    want = ref_graph_attention(rowptr, col, q / 4.0, k, v)
    torch.testing.assert_close(gnnfuse.graph_attention(graph, q, k, v), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gnnfuse.graph_attention(graph, q, k, v, scale=0.5), ref_graph_attention(rowptr, col, q * 0.5, k, v),
                               rtol=1e-12, atol=1e-12)
