"""torch.func transforms over the generated ops and the layers: grad, vjp, grad of grad (MAML),
jacrev, vmap (batching rules, no fallback), vmap of grad (per-sample gradients), against eager
autograd and Python loops; forward-mode AD as a clear error; the autograd Nodes' edge cases
(in-place modification after the forward, views, retain_graph, saved-tensor hooks, anomaly
mode, a None incoming gradient).

functorch's slow per-example fallback is switched off for this module: an op without a batching
rule raises instead of warning. Every transform also runs with warnings as errors."""

from __future__ import annotations

import contextlib
import warnings
from typing import Callable, Dict, List, Tuple

import pytest
import torch
from torch import Tensor
from torch.func import functional_call, grad, jacfwd, jacrev, jvp, stack_module_state, vjp, vmap

import gnnfuse.nn as gnn
from gnnfuse.sparse import assignment_csr
from graphs import distinct_edges

ops = torch.ops.gnnfuse
DT = torch.float64


@pytest.fixture(autouse=True)
def no_vmap_fallback(capfd):
    """vmap must find a batching rule for every gnnfuse op: the fallback raises here."""
    was = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        yield
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(was)
    err = capfd.readouterr().err
    assert "Warning" not in err and "performance drop" not in err, err


@contextlib.contextmanager
def strict():
    """Warnings are errors (functorch's fallback warning, deprecations, anything)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ------------------------------------------------------------------ a graph and the raw ops
def _graph(n: int = 12, e: int = 46, seed: int = 0):
    """Distinct edges (spgemm's located patterns need them), a self-loop, an isolated node (the
    last: so col + 1 is a graph too)."""
    ei = distinct_edges(n, e, seed, num_active=n - 1, loops=(3,))
    rowptr, col, _ = ops.edge_index_to_csr(ei, n)
    return n, ei, rowptr, col


N, EDGE_INDEX, ROWPTR, COL = _graph()
E = COL.numel()
H, F, K = 2, 3, 4


def rnd(*shape, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=DT)


def _coarse():
    cluster = torch.arange(N) % 5
    prowptr, pcol, mrowptr, mcol = assignment_csr(cluster, 5, ROWPTR.dtype)
    return prowptr, pcol, mrowptr, mcol


PROWPTR, PCOL, MROWPTR, MCOL = _coarse()
C_SPGEMM = ops.spgemm_symbolic(ROWPTR, COL, ROWPTR, COL, N)
C_COARSEN = ops.coarsen_symbolic(MROWPTR, MCOL, ROWPTR, COL, PROWPTR, PCOL, 5)

# op -> (function of the floating inputs, the inputs, grad_order of the op). Every generated
# user op and the assembling ops.
RAW: Dict[str, Tuple[Callable[..., Tensor], List[Tensor], int]] = {
    "spmm": (lambda w, x: ops.spmm(ROWPTR, COL, w, x), [rnd(E, seed=1), rnd(N, F, seed=2)], 2),
    "spmm_mean": (lambda w, x: ops.spmm_mean(ROWPTR, COL, w, x), [rnd(E, seed=1), rnd(N, F, seed=2)], 2),
    "spmm_max": (lambda w, x: ops.spmm_max(ROWPTR, COL, w, x)[0], [rnd(E, seed=1), rnd(N, F, seed=2)], 2),
    "spmm_min": (lambda w, x: ops.spmm_min(ROWPTR, COL, w, x)[0], [rnd(E, seed=1), rnd(N, F, seed=2)], 2),
    "scaled_spmm": (lambda w, s, x: ops.scaled_spmm(ROWPTR, COL, w, s, x), [rnd(E, seed=1), rnd(E, seed=3), rnd(N, F, seed=2)], 2),
    "spmm_heads": (lambda a, x: ops.spmm_heads(ROWPTR, COL, a, x), [rnd(E, H, seed=4), rnd(N, H, F, seed=5)], 2),
    "sddmm": (lambda w, u, v: ops.sddmm(ROWPTR, COL, w, u, v), [rnd(E, seed=1), rnd(N, K, seed=6), rnd(N, K, seed=7)], 2),
    "sddmm_heads": (lambda u, v: ops.sddmm_heads(ROWPTR, COL, u, v), [rnd(N, H, K, seed=8), rnd(N, H, K, seed=9)], 2),
    "sddmm_add": (lambda u, v: ops.sddmm_add(ROWPTR, COL, u, v), [rnd(N, H, seed=10), rnd(N, H, seed=11)], 2),
    "sddmm_mul": (lambda u, v: ops.sddmm_mul(ROWPTR, COL, u, v), [rnd(N, H, seed=10), rnd(N, H, seed=11)], 2),
    "sddmm_spmm": (lambda w, u, v, x: ops.sddmm_spmm(ROWPTR, COL, w, u, v, x),
                   [rnd(E, seed=1), rnd(N, K, seed=6), rnd(N, K, seed=7), rnd(N, F, seed=2)], 2),
    "edge_softmax": (lambda s: ops.edge_softmax(ROWPTR, COL, s), [rnd(E, seed=12)], 1),
    "edge_softmax_heads": (lambda s: ops.edge_softmax_heads(ROWPTR, COL, s), [rnd(E, H, seed=13)], 1),
    "gat": (lambda a, b, x: ops.gat(ROWPTR, COL, a, b, x, 0.2), [rnd(N, H, seed=14), rnd(N, H, seed=15), rnd(N, H, F, seed=16)], 1),
    "gat_edge": (lambda a, b, e, x: ops.gat_edge(ROWPTR, COL, a, b, e, x, 0.2),
                 [rnd(N, H, seed=14), rnd(N, H, seed=15), rnd(E, H, seed=25), rnd(N, H, F, seed=16)], 1),
    "graph_attention": (lambda q, k, v: ops.graph_attention(ROWPTR, COL, q, k, v),
                        [rnd(N, H, K, seed=17), rnd(N, H, K, seed=18), rnd(N, H, F, seed=19)], 1),
    "graph_attention_edge": (lambda q, k, b, v: ops.graph_attention_edge(ROWPTR, COL, q, k, b, v),
                             [rnd(N, H, K, seed=17), rnd(N, H, K, seed=18), rnd(E, H, seed=26), rnd(N, H, F, seed=19)], 1),
    "graph_attention_edge_values": (lambda q, k, b, ev: ops.graph_attention_edge_values(ROWPTR, COL, q, k, b, ev),
                                    [rnd(N, H, K, seed=17), rnd(N, H, K, seed=18), rnd(E, H, seed=26), rnd(E, F, seed=27)], 1),
    "gcn": (lambda w, x, W: ops.gcn(ROWPTR, COL, w, x, W), [rnd(E, seed=1), rnd(N, K, seed=20), rnd(K, F, seed=21)], 1),
    "spgemm": (lambda a, b: ops.spgemm(ROWPTR, COL, a, ROWPTR, COL, b, C_SPGEMM[0], C_SPGEMM[1], N), [rnd(E, seed=22), rnd(E, seed=23)], 2),
    "spgemm_assemble": (lambda a, b: ops.spgemm_assemble(ROWPTR, COL, a, ROWPTR, COL, b, N)[2], [rnd(E, seed=22), rnd(E, seed=23)], 2),
    "coarsen": (lambda w: ops.coarsen(MROWPTR, MCOL, ROWPTR, COL, w, PROWPTR, PCOL, C_COARSEN[0], C_COARSEN[1], 5), [rnd(E, seed=24)], 2),
    "coarsen_assemble": (lambda w: ops.coarsen_assemble(MROWPTR, MCOL, ROWPTR, COL, w, PROWPTR, PCOL, 5)[2], [rnd(E, seed=24)], 2),
}
RAW_NAMES = sorted(RAW)


def _eager_grads(fn, inputs, cot):
    xs = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*xs)
    return y.detach(), torch.autograd.grad(y, xs, cot)


@pytest.mark.parametrize("op", RAW_NAMES)
def test_raw_op_grad_and_vjp(op):
    fn, inputs, _ = RAW[op]
    cot = rnd(*fn(*inputs).shape, seed=99)
    y, want = _eager_grads(fn, inputs, cot)
    argnums = tuple(range(len(inputs)))
    with strict():
        got = grad(lambda *xs: (fn(*xs) * cot).sum(), argnums=argnums)(*inputs)
        out, vjp_fn = vjp(fn, *inputs)
        got_vjp = vjp_fn(cot)
    close(out, y)
    for a, b, c in zip(got, got_vjp, want):
        close(a, c)
        close(b, c)


@pytest.mark.parametrize("op", RAW_NAMES)
def test_raw_op_second_order(op):
    """grad of a function of the gradient (Hessian-vector products, MAML) equals eager double
    backward; beyond the spec's grad_order it is the op's clear error."""
    fn, inputs, order = RAW[op]
    cot = rnd(*fn(*inputs).shape, seed=99)
    argnums = tuple(range(len(inputs)))

    def loss(*xs):
        return (fn(*xs) * cot).square().sum()

    def grad_norm(*xs):
        return sum(g.square().sum() for g in grad(loss, argnums=argnums)(*xs))

    if order < 2:
        with pytest.raises(RuntimeError, match=r"of the highest order generated \(the grad_order line of "):
            grad(grad_norm, argnums=argnums)(*inputs)
        return
    xs = [t.detach().clone().requires_grad_() for t in inputs]
    g1 = torch.autograd.grad(loss(*xs), xs, create_graph=True)
    want = torch.autograd.grad(sum(g.square().sum() for g in g1), xs)
    with strict():
        got = grad(grad_norm, argnums=argnums)(*inputs)
    for a, b in zip(got, want):
        close(a, b, 1e-9)


@pytest.mark.parametrize("op", RAW_NAMES)
def test_raw_op_vmap_each_argument(op):
    """vmap over each floating input alone, then over all of them: the op's batching rule (one
    folded call or a loop in C++) equals a Python loop."""
    fn, inputs, _ = RAW[op]
    B = 3
    cases = [[k] for k in range(len(inputs))] + ([list(range(len(inputs)))] if len(inputs) > 1 else [])
    for batched in cases:
        args = [torch.stack([rnd(*t.shape, seed=100 + 7 * k + b) for b in range(B)]) if k in batched else t for k, t in enumerate(inputs)]
        in_dims = tuple(0 if k in batched else None for k in range(len(inputs)))
        with strict():
            got = vmap(fn, in_dims=in_dims)(*args)
        want = torch.stack([fn(*[a[b] if k in batched else a for k, a in enumerate(args)]) for b in range(B)])
        close(got, want)


@pytest.mark.parametrize("op", ["spmm", "gat", "spmm_max", "sddmm"])
def test_raw_op_vmap_batch_dims_and_out_dims(op):
    """The batch at another dimension of the input (in_dims=1, -1), and out_dims=1."""
    fn, inputs, _ = RAW[op]
    B = 4
    x = inputs[-1]
    xs = torch.stack([rnd(*x.shape, seed=200 + b) for b in range(B)], 1)  # batch at dim 1
    want = torch.stack([fn(*inputs[:-1], xs[:, b]) for b in range(B)])
    with strict():
        close(vmap(lambda t: fn(*inputs[:-1], t), in_dims=1)(xs), want)
        close(vmap(lambda t: fn(*inputs[:-1], t), in_dims=1, out_dims=1)(xs), want.movedim(0, 1))
        xl = xs.movedim(1, -1).contiguous()
        close(vmap(lambda t: fn(*inputs[:-1], t), in_dims=-1)(xl), want)


# op, which inputs are batched, whether the batch folds into a free index (one call of the op)
FOLDS = [
    ("spmm", [1], True),  # f
    ("spmm", [0], False),  # a batched edge weight: element by element
    ("spmm_max", [1], True),
    ("spmm_heads", [0], True),  # h: x, smaller than the edge weights here, repeated along it
    ("spmm_heads", [0, 1], True),
    ("sddmm", [1], False),  # k is contracted
    ("sddmm_heads", [0, 1], True),  # h
    ("edge_softmax_heads", [0], True),
    ("edge_softmax", [0], False),
    ("gat", [2], True),  # f
    ("gat", [0, 1], False),  # h, but x (larger than the logits) would be repeated: per element
    ("gat_edge", [3], True),  # f
    ("graph_attention", [0, 1, 2], True),
    ("graph_attention_edge", [3], True),  # f
    ("gcn", [2], True),  # o
    ("gcn", [1], False),  # k contracted
]


@pytest.mark.parametrize("op,batched,folds", FOLDS, ids=[f"{o}-{b}" for o, b, _ in FOLDS])
def test_vmap_folds_into_a_free_index(op, batched, folds):
    """Where every batched input carries an index free in the output (and the inputs without a
    batch carrying it are no larger than the batched ones per element), the batching rule calls
    the op once (the batch folded into that index); otherwise once per element."""
    fn, inputs, _ = RAW[op]
    B = 5
    args = [torch.stack([rnd(*t.shape, seed=800 + b) for b in range(B)]) if k in batched else t for k, t in enumerate(inputs)]
    in_dims = tuple(0 if k in batched else None for k in range(len(inputs)))
    with torch.autograd.profiler.profile() as prof:
        got = vmap(fn, in_dims=in_dims)(*args)
    calls = sum(e.name == f"gnnfuse::{op}" for e in prof.function_events)
    assert calls == (2 if folds else B + 1), calls  # the batched call, then the op's own
    close(got, torch.stack([fn(*[a[b] if k in batched else a for k, a in enumerate(args)]) for b in range(B)]))


def test_vmap_spmm_max_positions():
    """Both results of max/min under vmap (folded into the feature index): the positions too."""
    w, x = RAW["spmm_max"][1]
    xs = torch.stack([rnd(N, F, seed=300 + b) for b in range(3)])
    with strict():
        vals, pos = vmap(lambda t: ops.spmm_max(ROWPTR, COL, w, t))(xs)
    for b in range(3):
        v, p = ops.spmm_max(ROWPTR, COL, w, xs[b])
        close(vals[b], v)
        assert torch.equal(pos[b], p)


def test_vmap_nested_and_captured_levels():
    """vmap of vmap (two batch levels, folded twice), and an inner vmap that uses a tensor of the
    outer one only (a captured tensor: the rule runs at the outer level)."""
    w, x = RAW["spmm"][1]
    xs = torch.stack([torch.stack([rnd(N, F, seed=400 + 10 * a + b) for b in range(3)]) for a in range(2)])
    ws = torch.stack([rnd(E, seed=500 + c) for c in range(4)])
    with strict():
        got = vmap(vmap(lambda t: ops.spmm(ROWPTR, COL, w, t)))(xs)
        close(got, torch.stack([torch.stack([ops.spmm(ROWPTR, COL, w, xs[a, b]) for b in range(3)]) for a in range(2)]))
        # outer over x, inner over the weights: both batched, at different levels
        got = vmap(lambda t: vmap(lambda ww: ops.spmm(ROWPTR, COL, ww, t))(ws))(xs[0])
        close(got, torch.stack([torch.stack([ops.spmm(ROWPTR, COL, ws[c], xs[0, a]) for c in range(4)]) for a in range(3)]))
        # inner vmap over something else; the op reads only the outer level's tensor
        got = vmap(lambda t: vmap(lambda ww: ops.spmm(ROWPTR, COL, w, t) * ww.sum())(ws))(xs[0])
        close(got, torch.stack([torch.stack([ops.spmm(ROWPTR, COL, w, xs[0, a]) * ws[c].sum() for c in range(4)]) for a in range(3)]))


def test_vmap_over_graphs_of_one_size():
    """Batched index tensors (a batch of graphs with the same number of edges) run element by
    element; a batch of patterns of different sizes (spgemm's symbolic pass) is a clear error."""
    w, x = RAW["spmm"][1]
    cols = torch.stack([COL, COL + 1])  # columns stay sorted and below N (node N-1 is no source)
    with strict():
        got = vmap(lambda c: ops.spmm(ROWPTR, c, w, x))(cols)
    close(got, torch.stack([ops.spmm(ROWPTR, c, w, x) for c in cols]))
    other = torch.zeros_like(COL)  # every edge into column 0: another product pattern size
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_symbolic: under torch.func.vmap the batch elements give results of different shapes"):
        vmap(lambda c: ops.spgemm_symbolic(ROWPTR, c, ROWPTR, COL, N))(torch.stack([COL, other]))


def test_vmap_assemble_shares_the_pattern():
    """spgemm_assemble over a batch of values: one pattern (unbatched) and the values per element."""
    a, b = RAW["spgemm_assemble"][1]
    avals = torch.stack([rnd(E, seed=600 + k) for k in range(3)])
    with strict():
        rowptr, col, vals = vmap(lambda v: ops.spgemm_assemble(ROWPTR, COL, v, ROWPTR, COL, b, N), out_dims=(None, None, 0))(avals)
    for k in range(3):
        r, c, v = ops.spgemm_assemble(ROWPTR, COL, avals[k], ROWPTR, COL, b, N)
        assert torch.equal(rowptr, r) and torch.equal(col, c)
        close(vals[k], v)


@pytest.mark.parametrize("op", ["spmm", "sddmm", "gat", "edge_softmax_heads", "gcn", "coarsen_assemble", "spmm_max"])
def test_per_sample_gradients_vmap_of_grad(op):
    """vmap(grad(f)) over a batch of the last input (per-sample gradients of every input)."""
    fn, inputs, _ = RAW[op]
    B = 3
    last = torch.stack([rnd(*inputs[-1].shape, seed=700 + b) for b in range(B)])
    cot = rnd(*fn(*inputs).shape, seed=99)
    argnums = tuple(range(len(inputs)))

    def loss(*xs):
        return (fn(*xs) * cot).square().sum()

    with strict():
        got = vmap(grad(loss, argnums=argnums), in_dims=(None,) * (len(inputs) - 1) + (0,))(*inputs[:-1], last)
    for b in range(B):
        xs = [t.detach().clone().requires_grad_() for t in inputs[:-1]] + [last[b].clone().requires_grad_()]
        want = torch.autograd.grad(loss(*xs), xs)
        for k in range(len(inputs)):
            close(got[k][b], want[k])


@pytest.mark.parametrize("op", ["spmm", "sddmm_add", "edge_softmax", "graph_attention", "spgemm"])
def test_jacrev_equals_the_jacobian(op):
    fn, inputs, _ = RAW[op]
    argnums = tuple(range(len(inputs)))
    with strict():
        got = jacrev(fn, argnums=argnums)(*inputs)
    want = torch.autograd.functional.jacobian(fn, tuple(inputs))
    for a, b in zip(got, want):
        close(a, b)


@pytest.mark.parametrize("op", ["spmm", "gat", "spmm_max", "spgemm_assemble"])
def test_forward_mode_is_a_clear_error(op):
    """jvp, jacfwd and torch.autograd.forward_ad: NotImplementedError naming the op (never an
    output silently without its tangent)."""
    fn, inputs, _ = RAW[op]
    name = op.replace("_assemble", "")
    tangents = tuple(torch.ones_like(t) for t in inputs)
    with pytest.raises(NotImplementedError, match=rf"gnnfuse::{name}\w*: forward-mode AD .* is not supported"):
        jvp(fn, tuple(inputs), tangents)
    with pytest.raises(NotImplementedError, match=rf"gnnfuse::{name}\w*: forward-mode AD"):
        jacfwd(fn)(*inputs)
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level(), pytest.raises(NotImplementedError, match=rf"gnnfuse::{name}\w*: forward-mode AD"):
        fn(*[fwAD.make_dual(t, u) for t, u in zip(inputs, tangents)])


# ------------------------------------------------------------------ the autograd Nodes
def test_node_name_and_non_differentiable_positions():
    w, x = (t.clone().requires_grad_() for t in RAW["spmm_max"][1])
    vals, pos = ops.spmm_max(ROWPTR, COL, w, x)
    assert vals.grad_fn.name() == "gnnfuse::spmm_max_backward"
    assert pos.grad_fn is None and not pos.requires_grad and pos.dtype == torch.int64
    assert len(vals.grad_fn.next_functions) == 2  # edge_weight and x


def test_input_modified_in_place_after_forward_is_an_error():
    w, x = (t.clone().requires_grad_() for t in RAW["spmm"][1])
    xx = x * 1.0
    y = ops.spmm(ROWPTR, COL, w, xx)
    xx.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    rp = ROWPTR.clone()
    y = ops.spmm(rp, COL, w, x)
    rp.zero_()  # an index tensor the backward reads
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_views_as_inputs():
    base = rnd(N, 2 * F, seed=30).requires_grad_()
    wbase = rnd(2 * E, seed=31).requires_grad_()
    x, w = base[:, 1::2], wbase[::2]  # non-contiguous views
    y = ops.spmm(ROWPTR, COL, w, x)
    gy = rnd(N, F, seed=32)
    gb, gw = torch.autograd.grad(y, (base, wbase), gy)
    x2, w2 = x.detach().contiguous().requires_grad_(), w.detach().contiguous().requires_grad_()
    g2 = torch.autograd.grad(ops.spmm(ROWPTR, COL, w2, x2), (w2, x2), gy)
    close(gb[:, 1::2], g2[1])
    assert gb[:, ::2].abs().max() == 0
    close(gw[::2], g2[0])


def test_retain_graph_and_backward_twice():
    w, x = (t.clone().requires_grad_() for t in RAW["sddmm_spmm"][1][:1] + RAW["sddmm_spmm"][1][3:])
    u, v = RAW["sddmm_spmm"][1][1:3]
    y = ops.sddmm_spmm(ROWPTR, COL, w, u, v, x).square().sum()
    g1 = torch.autograd.grad(y, (w, x), retain_graph=True)
    g2 = torch.autograd.grad(y, (w, x), retain_graph=True)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_saved_tensors_hooks_see_the_saved_inputs():
    w, x = (t.clone().requires_grad_() for t in RAW["spmm"][1])
    packed: List[Tensor] = []
    unpacked = []

    def pack(t):
        packed.append(t)
        return ("box", t.clone())

    def unpack(box):
        unpacked.append(1)
        return box[1]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = ops.spmm(ROWPTR, COL, w, x)
    assert any(p is x for p in packed) and any(p is w for p in packed) and any(p is ROWPTR for p in packed)
    gy = rnd(N, F, seed=33)
    got = torch.autograd.grad(y, (w, x), gy)
    assert len(unpacked) == len(packed)
    want = torch.autograd.grad(ops.spmm(ROWPTR, COL, w, x), (w, x), gy)
    for a, b in zip(got, want):
        close(a, b)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_anomaly_mode_names_the_forward():
    fn, inputs, _ = RAW["edge_softmax"]
    s = inputs[0].clone().requires_grad_()
    with torch.autograd.detect_anomaly(check_nan=True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = fn(s)
            (g,) = torch.autograd.grad(y.square().sum(), s, create_graph=True)
            with pytest.raises(RuntimeError, match=r"gnnfuse::edge_softmax_grad_score: this op is a derivative"):
                g.sum().backward()
    text = "\n".join(str(c.message) for c in caught)
    assert "gnnfuse::edge_softmax_grad_score_backward" in text  # anomaly mode's traceback of the forward
    # and a plain forward/backward under anomaly mode
    with torch.autograd.detect_anomaly():
        w, x = (t.clone().requires_grad_() for t in RAW["spmm"][1])
        ops.spmm(ROWPTR, COL, w, x).sum().backward()
    assert x.grad is not None


class _DropGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        return None


def test_undefined_incoming_gradient():
    """A None gradient reaching a Node: no gradient flows on (no error, nothing accumulated)."""
    w, x = (t.clone().requires_grad_() for t in RAW["spmm"][1])
    loss = _DropGrad.apply(ops.spmm(ROWPTR, COL, w, x)).sum() + x.sum()
    loss.backward()
    assert w.grad is None
    close(x.grad, torch.ones_like(x))


def test_needs_input_grad_only_the_wanted_adjoint_runs():
    """torch.autograd.grad for one input runs that input's adjoint only (task_should_compute_output)."""
    w, x = (t.clone().requires_grad_() for t in RAW["spmm"][1])
    y = ops.spmm(ROWPTR, COL, w, x)
    gy = rnd(N, F, seed=34)
    with torch.autograd.profiler.profile() as prof:
        (gx,) = torch.autograd.grad(y, x, gy)
    names = {e.name for e in prof.function_events}
    assert "gnnfuse::spmm_grad_x" in names and "gnnfuse::spmm_grad_edge_weight" not in names
    gx2, gw2 = torch.autograd.grad(ops.spmm(ROWPTR, COL, w, x), (x, w), gy)
    close(gx, gx2)


# ------------------------------------------------------------------ the layers
class _WithEdgeFeatures(torch.nn.Module):
    """``layer(x, edge_index, edge_attr)`` with fixed edge features (a buffer, not a parameter)."""

    def __init__(self, layer: torch.nn.Module, edge_dim: int) -> None:
        super().__init__()
        self.layer = layer
        self.register_buffer("edge_attr", rnd(EDGE_INDEX.size(1), edge_dim, seed=44).float())

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.layer(x, edge_index, self.edge_attr)


LAYERS = {
    "GCNConv": lambda: gnn.GCNConv(F, 5, fused=False),
    "GCNConv[fused]": lambda: gnn.GCNConv(F, 5, fused=True),
    "GATConv": lambda: gnn.GATConv(F, 4, heads=2, fused=False),
    "GATConv[fused]": lambda: gnn.GATConv(F, 4, heads=2, fused=True),
    "GATConv[edge,fused]": lambda: _WithEdgeFeatures(gnn.GATConv(F, 4, heads=2, edge_dim=3, fused=True), 3),
    "TransformerConv[edge,fused]": lambda: _WithEdgeFeatures(gnn.TransformerConv(F, 4, heads=2, edge_dim=3, fused=True), 3),
    "TransformerConv": lambda: gnn.TransformerConv(F, 4, heads=2, fused=False),
    "TransformerConv[fused]": lambda: gnn.TransformerConv(F, 4, heads=2, fused=True),
}
LAYER_NAMES = sorted(LAYERS)
# grad_order of the ops each layer runs (GCN without fusion: spmm, twice differentiable)
SECOND_ORDER = {"GCNConv"}


def _layer(name: str, seed: int = 0):
    torch.manual_seed(seed)
    m = LAYERS[name]().double().eval()
    m(rnd(N, F, seed=1), EDGE_INDEX)  # materialises lazy state, if any
    return m


def _loss_fn(m, cot):
    def loss(params, x):
        return (functional_call(m, params, (x, EDGE_INDEX)) * cot).sum()

    return loss


def _params(m):
    return {k: v.detach().clone() for k, v in m.named_parameters()}


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_grad_and_vjp_with_functional_call(name):
    m = _layer(name)
    x = rnd(N, F, seed=40)
    cot = rnd(*m(x, EDGE_INDEX).shape, seed=41)
    params = _params(m)
    xr = x.clone().requires_grad_()
    out = m(xr, EDGE_INDEX)
    want = torch.autograd.grad(out, [xr] + list(m.parameters()), cot)
    with strict():
        gp, gx = grad(_loss_fn(m, cot), argnums=(0, 1))(params, x)
        y, vjp_fn = vjp(lambda p, t: functional_call(m, p, (t, EDGE_INDEX)), params, x)
        vp, vx = vjp_fn(cot)
    close(y, out.detach())
    close(gx, want[0])
    close(vx, want[0])
    for (k, _), w in zip(m.named_parameters(), want[1:]):
        close(gp[k], w)
        close(vp[k], w)


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_maml_second_order(name):
    """MAML's outer gradient: the loss after one inner gradient step, differentiated through the
    step (second order). The layers on twice-differentiable ops match eager double backward;
    the others stop at their ops' grad_order with the clear error."""
    m = _layer(name)
    x = rnd(N, F, seed=42)
    cot = rnd(*m(x, EDGE_INDEX).shape, seed=43)
    loss = _loss_fn(m, cot)

    def inner_step(params, x):
        g = grad(lambda p: loss(p, x).square())(params)
        return {k: params[k] - 0.1 * g[k] for k in params}

    def outer(params, x):
        return loss(inner_step(params, x), x).square()

    params = _params(m)
    if name not in SECOND_ORDER:
        with pytest.raises(RuntimeError, match=r"of the highest order generated \(the grad_order line of "):
            grad(outer)(params, x)
        return
    with strict():
        got = grad(outer)(params, x)
    ps = {k: v.clone().requires_grad_() for k, v in params.items()}
    inner = torch.autograd.grad(loss(ps, x).square(), list(ps.values()), create_graph=True)
    stepped = {k: ps[k] - 0.1 * g for k, g in zip(ps, inner)}
    want = torch.autograd.grad(loss(stepped, x).square(), list(ps.values()))
    for k, w in zip(ps, want):
        close(got[k], w, 1e-9)


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_vmap_over_features(name):
    m = _layer(name)
    xs = torch.stack([rnd(N, F, seed=50 + b) for b in range(3)])
    with strict():
        got = vmap(lambda t: m(t, EDGE_INDEX))(xs)
    close(got, torch.stack([m(t, EDGE_INDEX) for t in xs]))


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_vmap_over_stacked_parameters(name):
    """An ensemble (torch.func.stack_module_state): one vmapped call equals each model's."""
    models = [_layer(name, seed=s) for s in range(3)]
    params, buffers = stack_module_state(models)
    base = models[0]
    x = rnd(N, F, seed=60)
    with strict():
        got = vmap(lambda p, b: functional_call(base, (p, b), (x, EDGE_INDEX)))(params, buffers)
    close(got, torch.stack([mm(x, EDGE_INDEX) for mm in models]))
    # and the ensemble's parameter gradients
    cot = rnd(*got.shape[1:], seed=61)
    with strict():
        gp = vmap(grad(lambda p, b: (functional_call(base, (p, b), (x, EDGE_INDEX)) * cot).sum()))(params, buffers)
    for i, mm in enumerate(models):
        want = torch.autograd.grad((mm(x, EDGE_INDEX) * cot).sum(), list(mm.parameters()))
        for (k, _), w in zip(mm.named_parameters(), want):
            close(gp[k][i], w)


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_per_sample_gradients(name):
    """vmap(grad): the parameter gradients of each sample's loss (a batch of feature matrices)."""
    m = _layer(name)
    xs = torch.stack([rnd(N, F, seed=70 + b) for b in range(3)])
    cot = rnd(*m(xs[0], EDGE_INDEX).shape, seed=71)
    params = _params(m)
    with strict():
        got = vmap(grad(_loss_fn(m, cot)), in_dims=(None, 0))(params, xs)
    for b in range(3):
        want = torch.autograd.grad((m(xs[b], EDGE_INDEX) * cot).sum(), list(m.parameters()))
        for (k, _), w in zip(m.named_parameters(), want):
            close(got[k][b], w)


# ------------------------------------------------------------------ compiled autograd
@pytest.mark.compile
@pytest.mark.parametrize("op", ["spmm_max", "gat", "sddmm_spmm", "spgemm_assemble"])
def test_compiled_autograd(op, dynamo_reset):
    """torch._dynamo.compiled_autograd runs the Nodes through their functional form (the state
    packed as IValues): gradients equal eager's."""
    fn, inputs, _ = RAW[op]
    cot = rnd(*fn(*inputs).shape, seed=99)
    _, want = _eager_grads(fn, inputs, cot)
    xs = [t.detach().clone().requires_grad_() for t in inputs]
    with torch._dynamo.compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
        (fn(*xs) * cot).sum().backward()
    for x, w in zip(xs, want):
        close(x.grad, w)
