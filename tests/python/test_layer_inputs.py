"""Inputs of the gnnfuse.nn layers and of the functional GCN / GAT API that used to be accepted
wrongly, crash without a name, or fail in a capture: per-edge tensors of the wrong length, a
cached GCN graph after a dtype change, TransformerConv's edge features under
torch.compile(fullgraph=True, dynamic=True), torch.export with dynamic sizes (and the
fused-or-not choice, which must not be baked into the exported program), and errors that name
the argument. One test per item of the hardening issue; each failed before its fix."""

from __future__ import annotations

import copy
from typing import Optional

import pytest
import torch
from torch import Tensor
from torch.export import Dim

import gnnfuse
import gnnfuse.nn as gnn
from graphs import CASES, edge_weights, features

GRAPH = CASES["self_loops_duplicates"]  # self-loops, duplicate edges, isolated nodes
E = GRAPH.num_edges
N = GRAPH.num_nodes


class _WithEdges(torch.nn.Module):
    """A layer inside a model, as it is scripted (the layers' forward is overloaded)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Optional[Tensor] = None) -> Tensor:
        return self.layer(x, edge_index, edge_attr)


EDGE_LAYERS = {
    "gat_fill_number": lambda: gnn.GATConv(5, 3, heads=2, edge_dim=4, fill_value=0.5),
    "gat_fill_mean": lambda: gnn.GATConv(5, 3, heads=2, edge_dim=4),
    "gat_no_self_loops": lambda: gnn.GATConv(5, 3, heads=2, edge_dim=4, add_self_loops=False),
    "transformer": lambda: gnn.TransformerConv(5, 3, heads=2, edge_dim=4),
}


# Item 2: edge_attr with more rows than edges was accepted (GATConv with a numeric fill_value
# took the self-loops' features from the extra rows, TransformerConv ignored them), fewer rows
# gave a bare IndexError. PyG raises for both; gnnfuse names the argument and E.
@pytest.mark.parametrize("rows", [E + 3, E - 1, 0], ids=["more", "fewer", "none"])
@pytest.mark.parametrize("name", sorted(EDGE_LAYERS))
def test_edge_attr_rows_must_match_the_edges(name, rows):
    layer = EDGE_LAYERS[name]().double()
    cls = type(layer).__name__
    x = features(N, 5, torch.float64, seed=1)
    e = features(rows, 4, torch.float64, seed=2)
    message = rf"gnnfuse.nn.{cls}: argument 'edge_attr' must have one row per edge, E={E} \(got {rows}\)"
    with pytest.raises(RuntimeError, match=message):
        layer(x, GRAPH.edge_index, e)
    with pytest.raises(RuntimeError, match=message):  # a 1-D edge_attr is one column (edge_dim=1)
        type(layer)(5, 3, heads=2, edge_dim=1).double()(x, GRAPH.edge_index, e[:, 0])
    scripted = torch.jit.script(_WithEdges(layer))
    with pytest.raises(Exception, match=message):  # torch.jit.Error, the same message
        scripted(x, GRAPH.edge_index, e)
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    kwargs = {k: getattr(layer, k) for k in ("heads", "edge_dim")}
    if cls == "GATConv":
        kwargs.update(fill_value=layer.fill_value, add_self_loops=layer.add_self_loops)
    with pytest.raises((RuntimeError, IndexError)):  # PyG raises too (an unnamed error)
        getattr(pyg_nn, cls)(5, 3, **kwargs).double()(x, GRAPH.edge_index, e)
    # the right number of rows still runs, eager and scripted alike
    good = features(E, 4, torch.float64, seed=3)
    torch.testing.assert_close(scripted(x, GRAPH.edge_index, good), layer(x, GRAPH.edge_index, good))


# Item 5: GCNConv(cached=True) then .to(float64) / .bfloat16() / .half(): the cached normalised
# graph kept the first call's dtype and the next forward failed in spmm.
@pytest.mark.parametrize(
    "convert,dtype,tol",
    [
        (lambda m: m.double(), torch.float64, 1e-6),  # the cache holds float32 weights
        (lambda m: m.to(torch.float64), torch.float64, 1e-6),
        (lambda m: m.bfloat16(), torch.bfloat16, 2e-2),
        (lambda m: m.half(), torch.float16, 2e-3),
        (lambda m: m.to(torch.bfloat16).float(), torch.float32, 1e-6),  # no precision lost on the way
    ],
    ids=["double", "to_float64", "bfloat16", "half", "bfloat16_and_back"],
)
def test_gcnconv_cached_graph_follows_the_module_dtype(convert, dtype, tol):
    case = CASES["power_law"]
    x = features(case.num_nodes, 6, torch.float64, seed=4)
    torch.manual_seed(0)
    layer = gnn.GCNConv(6, 4, cached=True)
    uncached = gnn.GCNConv(6, 4)
    uncached.load_state_dict(layer.state_dict())
    layer(x.float(), case.edge_index)  # caches the float32 graph
    other = case.edge_index[:, : case.num_edges // 2]  # ignored by the cache, as in PyG
    out = convert(layer)(x.to(dtype), other)
    assert out.dtype == dtype
    want = convert(uncached)(x.to(dtype), case.edge_index)
    torch.testing.assert_close(out.double(), want.double(), rtol=tol, atol=tol)
    # a scripted layer with its cache, converted after scripting, casts at use as well
    scripted = torch.jit.script(convert(copy.deepcopy(layer)).float())
    torch.testing.assert_close(scripted(x.float(), other), convert(uncached).float()(x.float(), case.edge_index), rtol=tol, atol=tol)


def test_gcnconv_cached_graph_follows_the_module_device():
    # .to(device) moves the cached graph along (the meta device stands in for an accelerator)
    layer = gnn.GCNConv(5, 3, cached=True)
    layer(features(N, 5, torch.float32, seed=5), GRAPH.edge_index)
    layer.to("meta")
    assert layer.lin.weight.is_meta
    assert layer._cache is not None and all(t.is_meta for t in layer._cache)
    out = layer(torch.empty(N, 5, device="meta"), GRAPH.edge_index.to("meta"))
    assert out.is_meta and out.shape == (N, 3)


# Item 9: torch.compile(fullgraph=True, dynamic=True) of TransformerConv(edge_dim=...) failed on a
# one-edge graph (a data-dependent guard Ne(u0, 1) from repeat_interleave) and on an empty graph
# (in Inductor); without fullgraph, repeat_interleave was a graph break.
@pytest.mark.compile
def test_transformerconv_edge_features_compile_with_dynamic_shapes(dynamo_reset):
    torch.manual_seed(0)
    layer = gnn.TransformerConv(5, 3, heads=2, edge_dim=4, beta=True).double()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for i, (n, e) in enumerate([(6, 7), (9, 20), (6, 1), (1, 1), (6, 0), (0, 0)]):
        x = features(n, 5, torch.float64, seed=10 + i).requires_grad_()
        edge_index = torch.randint(0, max(n, 1), (2, e), generator=torch.Generator().manual_seed(i))
        edge_attr = features(e, 4, torch.float64, seed=20 + i)
        results = []
        for fn in (layer, compiled):
            out = fn(x, edge_index, edge_attr)
            grads = torch.autograd.grad(out.square().sum(), [x] + list(layer.parameters()), allow_unused=True) if n else ()
            results.append((out, grads))
        (o1, g1), (o2, g2) = results
        torch.testing.assert_close(o2, o1, rtol=1e-10, atol=1e-12)
        for a, b in zip(g2, g1):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    torch._dynamo.reset()
    x = features(6, 5, torch.float64, seed=30)
    edge_index = torch.randint(0, 6, (2, 7), generator=torch.Generator().manual_seed(30))
    explained = torch._dynamo.explain(layer)(x, edge_index, features(7, 4, torch.float64, seed=31))
    assert explained.graph_break_count == 0, explained.break_reasons


# Item 10: torch.export with dynamic sizes. GATConv failed for every `fused` setting (a guard on
# max(N, N + 1)); with fused=None the fused-or-not choice on E x heads (and GCN's on N x F_out)
# was a guard of the exported program, which then refused the graphs where the fused op
# matters. A symbolic size now takes the fused op, right at every size.
def _export(layer, x, edge_index):
    return torch.export.export(layer, (x, edge_index), dynamic_shapes={"x": {0: Dim("N")}, "edge_index": {1: Dim("E")}})


def _random_graph(n: int, e: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (2, e), generator=gen)


@pytest.mark.parametrize("fused", [True, False, None], ids=["fused", "per_edge", "auto"])
def test_export_gatconv_with_dynamic_sizes(fused):
    torch.manual_seed(0)
    layer = gnn.GATConv(5, 3, heads=2, fused=fused).eval()
    ep = _export(layer, features(20, 5, torch.float32, seed=40), _random_graph(20, 60, 41))
    for n, e in [(3, 2), (20, 60), (500, 4000)]:
        x, edge_index = features(n, 5, torch.float32, seed=n), _random_graph(n, e, e)
        torch.testing.assert_close(ep.module()(x, edge_index), layer(x, edge_index), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make,size",
    [
        # eager takes the fused op from E x heads >= 2^24 (self-loops included for GAT) ...
        (lambda: gnn.GATConv(4, 2, heads=8), (60000, 2100000)),
        (lambda: gnn.TransformerConv(4, 2, heads=8), (60000, 2100000)),
        # ... and the fused gcn in inference from N x F_out >= 2^23
        (lambda: gnn.GCNConv(4, 64), (140000, 600000)),
    ],
    ids=["gat", "transformer", "gcn"],
)
@torch.no_grad()
def test_export_fused_choice_is_not_baked_in(make, size):
    torch.manual_seed(0)
    layer = make().eval()
    ep = _export(layer, features(30, 4, torch.float32, seed=50), _random_graph(30, 90, 51))
    assert {"gnnfuse.gat.default", "gnnfuse.graph_attention.default", "gnnfuse.gcn.default"} & {
        str(node.target) for node in ep.graph.nodes
    }  # the fused op, at every size
    for symbol, bounds in ep.range_constraints.items():
        assert bool(bounds.upper > 2**40), (symbol, bounds)  # no size bound in the program (int_oo)
    # much smaller and much larger than the example, past the eager threshold
    for n, e in [(2, 1), (200, 50), size]:
        x, edge_index = features(n, 4, torch.float32, seed=n), _random_graph(n, e, e)
        torch.testing.assert_close(ep.module()(x, edge_index), layer(x, edge_index), rtol=1e-4, atol=1e-5)


def test_fused_choice_on_symbolic_or_traced_sizes():
    # A concrete size decides by the size rule; a symbolic one (dynamic shapes) or a jit trace
    # (which records the branch without its condition) takes the path right at every size.
    choice = gnnfuse.ops.gcn_fused_choice
    assert not choice(None, 100, 4, 64, needs_grad=False)
    assert choice(None, 1 << 20, 4, 64, needs_grad=False)
    seen = []

    def f(x):
        seen.append(choice(None, x.size(0), 4, 64, needs_grad=False))
        return x

    torch.compile(f, fullgraph=True, dynamic=True, backend="eager")(torch.ones(100))
    torch.jit.trace(lambda x: f(x) * 2, torch.ones(100), check_trace=False)
    assert seen == [True, True]
    torch._dynamo.reset()


# Item 11: errors that named nothing (matmul's message, a bare IndexError, "shape mismatch ...
# index_put") now name the function or layer, the argument and the expected size or dtype.
def _gcn(*args, **kwargs):
    x = features(N, 5, torch.float32, seed=60)
    return lambda: gnnfuse.gcn(GRAPH.edge_index, x, *args, **kwargs)


W = features(5, 3, torch.float32, seed=61)
BAD_INPUTS = {
    # functional gcn: weight of the wrong shape, rank, dtype
    "gcn_weight_rows": (_gcn(features(4, 3, torch.float32, seed=0)), RuntimeError,
                        r"gnnfuse.gcn: argument 'weight' must be \[in_channels, out_channels\] with in_channels=5"),
    "gcn_weight_rank": (_gcn(torch.ones(5)), ValueError, r"gnnfuse.gcn: argument 'weight' must be 2-D"),
    "gcn_weight_3d": (_gcn(torch.ones(5, 3, 1)), ValueError, r"gnnfuse.gcn: argument 'weight' must be 2-D"),
    "gcn_weight_dtype": (_gcn(W.double()), RuntimeError, r"gnnfuse.gcn: argument 'weight' must have the dtype of 'x', float32 \(got float64\)"),
    "gcn_weight_int": (_gcn(W.long()), RuntimeError, r"gnnfuse.gcn: argument 'weight' must have the dtype of 'x'"),
    "gcn_x_rank": (lambda: gnnfuse.gcn(GRAPH.edge_index, torch.ones(N), W), ValueError, r"gnnfuse.gcn: argument 'x' must be 2-D"),
    "gcn_bias": (_gcn(W, bias=torch.ones(4)), RuntimeError, r"gnnfuse.gcn: argument 'bias' must have out_channels=3 values"),
    # edge_weight of the wrong length, rank, dtype
    "gcn_edge_weight_short": (_gcn(W, torch.ones(E - 1)), RuntimeError,
                              rf"gnnfuse.gcn: argument 'edge_weight' must have one value per edge, E={E} \(got {E - 1}\)"),
    "gcn_edge_weight_long": (_gcn(W, torch.ones(E + 1), fused=True), RuntimeError, r"gnnfuse.gcn: argument 'edge_weight' must have one value per edge"),
    "gcn_edge_weight_rank": (_gcn(W, torch.ones(E, 2)), ValueError, r"gnnfuse.gcn: argument 'edge_weight' must be 1-D"),
    "gcn_edge_weight_dtype": (_gcn(W, torch.ones(E, dtype=torch.float64)), RuntimeError,
                              r"gnnfuse.gcn: argument 'edge_weight' must have the dtype of 'x'"),
    "gcnconv_edge_weight": (lambda: gnn.GCNConv(5, 3)(features(N, 5, torch.float32, seed=62), GRAPH.edge_index, torch.ones(E - 2)),
                            RuntimeError, rf"gnnfuse.nn.GCNConv: argument 'edge_weight' must have one value per edge, E={E} \(got {E - 2}\)"),
    "gcnconv_raw_edge_weight": (
        lambda: gnn.GCNConv(5, 3, normalize=False)(features(N, 5, torch.float32, seed=62), GRAPH.edge_index, torch.ones(E + 2)),
        RuntimeError, r"gnnfuse.nn.GCNConv: argument 'edge_weight' must have one value per edge"),
    "gcnconv_x_rank": (lambda: gnn.GCNConv(5, 3)(torch.ones(N), GRAPH.edge_index), ValueError, r"gnnfuse.nn.GCNConv: argument 'x' must be 2-D"),
    "gcn_norm_edge_weight": (lambda: gnnfuse.ops.gcn_norm(GRAPH.edge_index, torch.ones(E - 1), N), RuntimeError,
                             r"gnnfuse.gcn_norm: argument 'edge_weight' must have one value per edge"),
    "gcn_norm_edge_index": (lambda: gnnfuse.ops.gcn_norm(GRAPH.edge_index, None, N - 5), RuntimeError,
                            r"gnnfuse::validate_edge_index: argument 'edge_index' must hold node indices"),
    # edge_attr to the attention layers: short, wrong width, rank, dtype
    "gatconv_edge_attr_short": (lambda: gnn.GATConv(5, 3, edge_dim=4)(features(N, 5, torch.float32, seed=63), GRAPH.edge_index, torch.ones(3, 4)),
                                RuntimeError, rf"gnnfuse.nn.GATConv: argument 'edge_attr' must have one row per edge, E={E} \(got 3\)"),
    "gatconv_edge_attr_width": (lambda: gnn.GATConv(5, 3, edge_dim=4)(features(N, 5, torch.float32, seed=63), GRAPH.edge_index, torch.ones(E, 3)),
                                RuntimeError, r"gnnfuse.nn.GATConv: argument 'edge_attr' must have edge_dim=4 columns \(got 3\)"),
    "gatconv_edge_attr_dtype": (lambda: gnn.GATConv(5, 3, edge_dim=4)(features(N, 5, torch.float32, seed=63), GRAPH.edge_index, torch.ones(E, 4).double()),
                                RuntimeError, r"gnnfuse.nn.GATConv: argument 'edge_attr' must have the dtype of 'x', float32 \(got float64\)"),
    "transformerconv_edge_attr_short": (
        lambda: gnn.TransformerConv(5, 3, edge_dim=4)(features(N, 5, torch.float32, seed=64), GRAPH.edge_index, torch.ones(E - 1, 4)),
        RuntimeError, rf"gnnfuse.nn.TransformerConv: argument 'edge_attr' must have one row per edge, E={E} \(got {E - 1}\)"),
    "transformerconv_edge_attr_rank": (
        lambda: gnn.TransformerConv(5, 3, edge_dim=4)(features(N, 5, torch.float32, seed=64), GRAPH.edge_index, torch.ones(E, 4, 1)),
        ValueError, r"gnnfuse.nn.TransformerConv: argument 'edge_attr' must be \[E, edge_dim\] or \[E\]"),
    "gatconv_x_rank": (lambda: gnn.GATConv(5, 3)(torch.ones(N), GRAPH.edge_index), ValueError, r"gnnfuse.nn.GATConv: argument 'x' must be 2-D"),
    "transformerconv_x_rank": (lambda: gnn.TransformerConv(5, 3)((torch.ones(N, 5), torch.ones(N)), GRAPH.edge_index), ValueError,
                               r"gnnfuse.nn.TransformerConv: argument 'x\[1\]' must be 2-D"),
    # functional gat
    "gat_x_dst": (lambda: gnnfuse.gat(GRAPH.edge_index, torch.ones(N, 2, 4), torch.ones(8), torch.ones(8), x_dst=torch.ones(N, 2, 3)),
                  RuntimeError, r"gnnfuse.gat: argument 'x_dst' must have x's heads and channels"),
    "gat_att_dtype": (lambda: gnnfuse.gat(GRAPH.edge_index, torch.ones(N, 2, 4), torch.ones(8).double(), torch.ones(8)),
                      RuntimeError, r"gnnfuse.gat: argument 'att_src' must have the dtype of 'x'"),
    "gat_x_int": (lambda: gnnfuse.gat(GRAPH.edge_index, torch.ones(N, 2, 4, dtype=torch.long), torch.ones(8), torch.ones(8)),
                  RuntimeError, r"gnnfuse.gat: argument 'x' must be a float32, float64, bfloat16 or float16 tensor"),
    "gat_edge_score_dtype": (lambda: gnnfuse.gat(GRAPH.edge_index, torch.ones(N, 2, 4), torch.ones(8), torch.ones(8), edge_score=torch.ones(E, 2).double()),
                             RuntimeError, r"gnnfuse.gat: argument 'edge_score' must have the dtype of 'x'"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_errors_name_the_argument(name):
    call, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        call()


def test_errors_name_the_argument_when_scripted_or_compiled(dynamo_reset):
    x = features(N, 5, torch.float32, seed=70)
    short = torch.ones(E - 1)
    message = rf"gnnfuse.nn.GCNConv: argument 'edge_weight' must have one value per edge, E={E} \(got {E - 1}\)"
    layer = gnn.GCNConv(5, 3)
    with pytest.raises(Exception, match=message):
        torch.jit.script(_WithEdges(layer))(x, GRAPH.edge_index, short)
    for fullgraph in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(layer, fullgraph=fullgraph, dynamic=True, backend="eager")
        compiled(x, GRAPH.edge_index, torch.ones(E))
        # the message reaches the user: the error itself, or (fullgraph) the one Dynamo reports
        with pytest.raises(Exception, match=message):
            compiled(x, GRAPH.edge_index, short)
    # still accepted: [E, 1] weights (as PyG) and the right shapes
    torch.testing.assert_close(layer(x, GRAPH.edge_index, torch.ones(E, 1)), layer(x, GRAPH.edge_index, torch.ones(E)))
    w = edge_weights(E, torch.float32, seed=71).abs()
    torch.testing.assert_close(gnnfuse.gcn(GRAPH.edge_index, x, layer.lin.weight.T, w[:, None]), gnnfuse.gcn(GRAPH.edge_index, x, layer.lin.weight.T, w))


def test_gcn_takes_a_graph_values_in_the_features_dtype():
    # A scipy matrix holds float64 values whatever the model's dtype: as the other functional ops,
    # gnnfuse.gcn casts a graph's own values to x's dtype (spmm rejected them before).
    sp = pytest.importorskip("scipy.sparse")
    import numpy as np

    adj = sp.random(N, N, density=0.3, format="csr", random_state=0, dtype=np.float64)
    x, weight = features(N, 5, torch.float32, seed=80), features(5, 3, torch.float32, seed=81)
    out = gnnfuse.gcn(adj, x, weight)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, gnnfuse.gcn(adj, x.double(), weight.double()).float(), rtol=1e-5, atol=1e-6)


# A cached GCNConv given x of another node count returned the cached graph's row count. As PyG:
# more rows than the cached graph's nodes get no messages (the bias only), fewer are an error.
def test_gcnconv_cached_graph_with_another_node_count():
    torch.manual_seed(0)
    ei = GRAPH.edge_index
    ours = gnn.GCNConv(5, 3, cached=True).double()
    import torch_geometric.nn as pyg_nn

    ref = pyg_nn.GCNConv(5, 3, cached=True).double()
    ref.load_state_dict(ours.state_dict())
    with torch.no_grad():
        ref.bias.normal_()
        ours.bias.copy_(ref.bias)
    x = torch.randn(N, 5, dtype=torch.float64)
    torch.testing.assert_close(ours(x, ei), ref(x, ei))
    bigger = torch.randn(N + 4, 5, dtype=torch.float64)
    out = ours(bigger, ei)
    assert out.shape == (N + 4, 3)
    torch.testing.assert_close(out, ref(bigger, ei))
    torch.testing.assert_close(out[N:], ours.bias.expand(4, 3))
    with pytest.raises(RuntimeError, match=r"gnnfuse.nn.GCNConv: argument 'x' has 3 rows, fewer than the"):
        ours(x[:3], torch.tensor([[0, 1], [1, 2]]))  # (a graph of 3 nodes: the cached one is used)
