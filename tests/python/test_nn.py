"""gnnfuse.nn layers against torch_geometric 2.8's layers of the same names: a PyG layer's
state_dict loads with strict=True, and in eval mode the outputs and the gradients (inputs and
every parameter) match, in float64, on graphs with self-loops, duplicate edges, isolated nodes
and power-law degrees."""

from __future__ import annotations

import pytest
import torch

import gnnfuse.nn as gnn
from graphs import CASES, edge_weights, features

pyg_nn = pytest.importorskip("torch_geometric.nn")

GRAPHS = ["self_loops_duplicates", "empty_rows_isolated", "power_law", "single_node_loop"]


def _pair(ours_cls, pyg_cls, *args, ours_kwargs=None, **kwargs):
    torch.manual_seed(0)
    theirs = pyg_cls(*args, **kwargs).double()
    ours = ours_cls(*args, **kwargs, **(ours_kwargs or {})).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.eval()
    ours.eval()
    return ours, theirs


def _compare(ours, theirs, inputs, call):
    """Outputs and gradients of sum(out * w) w.r.t. the inputs and all parameters."""
    results = []
    for layer in (ours, theirs):
        ins = [t.detach().clone().requires_grad_() if t.is_floating_point() else t for t in inputs]
        out = call(layer, *ins)
        y = out[0] if isinstance(out, tuple) else out
        w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
        diff = [t for t in ins if t.requires_grad] + list(layer.parameters())
        grads = torch.autograd.grad((y * w).sum(), diff, allow_unused=True)
        results.append((out, grads))
    (o1, g1), (o2, g2) = results
    if isinstance(o1, tuple):
        torch.testing.assert_close(o1[0], o2[0], rtol=1e-10, atol=1e-10)
        (ei1, a1), (ei2, a2) = o1[1], o2[1]
        # the same set of (edge, coefficients), possibly listed in another order
        k1 = ei1[1] * 10**6 + ei1[0]
        k2 = ei2[1] * 10**6 + ei2[0]
        s1, s2 = torch.sort(k1, stable=True), torch.sort(k2, stable=True)
        assert torch.equal(s1.values, s2.values)
        torch.testing.assert_close(a1[s1.indices].sum(0), a2[s2.indices].sum(0), rtol=1e-10, atol=1e-10)
    else:
        torch.testing.assert_close(o1, o2, rtol=1e-10, atol=1e-10)
    for a, b in zip(g1, g2):
        if a is None or b is None:
            assert a is None and b is None or (a if a is not None else b).abs().max() == 0
            continue
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"improved": True}, {"normalize": False}, {"bias": False}, {"add_self_loops": False}],
    ids=["default", "improved", "no_normalize", "no_bias", "no_self_loops"],
)
@pytest.mark.parametrize("channels", [(5, 3), (3, 7)], ids=["narrowing", "widening"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_gcnconv_matches_pyg(name, kwargs, channels, weighted):
    case = CASES[name]
    ours, theirs = _pair(gnn.GCNConv, pyg_nn.GCNConv, *channels, **kwargs)
    x = features(case.num_nodes, channels[0], torch.float64, seed=1)
    w = edge_weights(case.num_edges, torch.float64, seed=2).abs() + 0.1 if weighted else None
    inputs = [x, case.edge_index] + ([w] if weighted else [])
    _compare(ours, theirs, inputs, lambda layer, *t: layer(*t))


def test_gcnconv_cached_reuses_the_normalised_graph():
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.GCNConv, pyg_nn.GCNConv, 4, 4, cached=True)
    x = features(case.num_nodes, 4, torch.float64, seed=3)
    torch.testing.assert_close(ours(x, case.edge_index), theirs(x, case.edge_index))
    # the cache ignores a different graph, as PyG's does
    other = case.edge_index[:, : case.num_edges // 2]
    torch.testing.assert_close(ours(x, other), theirs(x, other))


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"heads": 3},
        {"heads": 3, "concat": False},
        {"heads": 2, "negative_slope": 0.05, "bias": False},
        {"heads": 2, "add_self_loops": False},
        {"heads": 2, "residual": True},
    ],
    ids=["default", "heads3", "heads3_mean", "slope_nobias", "no_self_loops", "residual"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per_edge"])
def test_gatconv_matches_pyg(name, kwargs, fused):
    case = CASES[name]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 6, 4, ours_kwargs={"fused": fused}, **kwargs)
    x = features(case.num_nodes, 6, torch.float64, seed=4)
    _compare(ours, theirs, [x, case.edge_index], lambda layer, *t: layer(*t))


@pytest.mark.parametrize("fill_value", ["mean", "add", "max", 0.5], ids=str)
def test_gatconv_edge_features_match_pyg(fill_value):
    case = CASES["self_loops_duplicates"]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 5, 3, heads=2, edge_dim=4, fill_value=fill_value)
    x = features(case.num_nodes, 5, torch.float64, seed=5)
    e = features(case.num_edges, 4, torch.float64, seed=6)
    _compare(ours, theirs, [x, case.edge_index, e], lambda layer, *t: layer(*t))


def test_gatconv_bipartite_matches_pyg():
    case = CASES["bipartite_more_sources"]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, (5, 3), 4, heads=2, add_self_loops=False)
    xs = features(case.num_src_nodes, 5, torch.float64, seed=7)
    xd = features(case.num_nodes, 3, torch.float64, seed=8)
    _compare(ours, theirs, [xs, xd, case.edge_index], lambda layer, a, b, ei: layer((a, b), ei))


def test_gatconv_attention_weights_match_pyg():
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 6, 4, heads=2)
    x = features(case.num_nodes, 6, torch.float64, seed=9)
    _compare(ours, theirs, [x, case.edge_index], lambda layer, a, ei: layer(a, ei, return_attention_weights=True))


def test_gatconv_dropout_only_in_training():
    case = CASES["power_law"]
    layer = gnn.GATConv(6, 4, heads=2, dropout=0.5).double()
    x = features(case.num_nodes, 6, torch.float64, seed=10)
    layer.eval()
    torch.testing.assert_close(layer(x, case.edge_index), layer(x, case.edge_index))
    layer.train()
    torch.manual_seed(1)
    a = layer(x, case.edge_index)
    torch.manual_seed(2)
    b = layer(x, case.edge_index)
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"heads": 3},
        {"heads": 3, "concat": False},
        {"heads": 2, "beta": True},
        {"heads": 2, "beta": True, "concat": False},
        {"heads": 2, "root_weight": False, "bias": False},
    ],
    ids=["default", "heads3", "heads3_mean", "beta", "beta_mean", "no_root_no_bias"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per_edge"])
def test_transformerconv_matches_pyg(name, kwargs, fused):
    case = CASES[name]
    ours, theirs = _pair(gnn.TransformerConv, pyg_nn.TransformerConv, 6, 4, ours_kwargs={"fused": fused}, **kwargs)
    x = features(case.num_nodes, 6, torch.float64, seed=12)
    _compare(ours, theirs, [x, case.edge_index], lambda layer, *t: layer(*t))


def test_transformerconv_edge_features_bipartite_and_attention_match_pyg():
    case = CASES["self_loops_duplicates"]
    ours, theirs = _pair(gnn.TransformerConv, pyg_nn.TransformerConv, 5, 3, heads=2, edge_dim=4)
    x = features(case.num_nodes, 5, torch.float64, seed=13)
    e = features(case.num_edges, 4, torch.float64, seed=14)
    _compare(ours, theirs, [x, case.edge_index, e], lambda layer, *t: layer(*t))
    case = CASES["bipartite_more_sources"]
    ours, theirs = _pair(gnn.TransformerConv, pyg_nn.TransformerConv, (5, 3), 4, heads=2)
    xs = features(case.num_src_nodes, 5, torch.float64, seed=15)
    xd = features(case.num_nodes, 3, torch.float64, seed=16)
    _compare(ours, theirs, [xs, xd, case.edge_index], lambda layer, a, b, ei: layer((a, b), ei))
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.TransformerConv, pyg_nn.TransformerConv, 6, 4, heads=2)
    x = features(case.num_nodes, 6, torch.float64, seed=17)
    _compare(ours, theirs, [x, case.edge_index], lambda layer, a, ei: layer(a, ei, return_attention_weights=True))


def test_fused_and_unfused_attention_paths_agree():
    # GATConv / TransformerConv in training with fused=True take the fused op; asking for the
    # attention weights takes the per-edge path: same outputs and gradients.
    case = CASES["power_law"]
    x = features(case.num_nodes, 6, torch.float64, seed=18)
    for layer in (gnn.GATConv(6, 4, heads=2, fused=True).double(), gnn.TransformerConv(6, 4, heads=2, fused=True).double()):
        fused = layer(x, case.edge_index)
        unfused = layer(x, case.edge_index, return_attention_weights=True)[0]
        torch.testing.assert_close(fused, unfused, rtol=1e-12, atol=1e-12)
        g1 = torch.autograd.grad(fused.square().sum(), list(layer.parameters()))
        g2 = torch.autograd.grad(unfused.square().sum(), list(layer.parameters()))
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_layers_train_a_step():
    # A two-layer GAT/GCN model trains end to end (loss decreases on a fixed batch).
    case = CASES["power_law"]
    torch.manual_seed(0)
    x = features(case.num_nodes, 8, torch.float32, seed=11)
    y = torch.randint(0, 3, (case.num_nodes,))
    model = torch.nn.ModuleList([gnn.GATConv(8, 4, heads=2), gnn.TransformerConv(8, 4, heads=2), gnn.GCNConv(8, 3)])
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        h = torch.relu(model[0](x, case.edge_index))
        h = torch.relu(model[1](h, case.edge_index))
        loss = torch.nn.functional.cross_entropy(model[2](h, case.edge_index), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.9


def test_bad_edge_index_is_a_clear_error():
    layer = gnn.GCNConv(3, 2)
    with pytest.raises(ValueError, match=r"gnnfuse.nn.GCNConv: edge_index must be a \[2, E\] tensor"):
        layer(torch.randn(4, 3), torch.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match=r"gnnfuse::validate_edge_index: argument 'edge_index' must hold node indices in \[0, 4\)"):
        layer(torch.randn(4, 3), torch.tensor([[0, 7], [1, 2]]))
    with pytest.raises(RuntimeError, match=r"gnnfuse::validate_edge_index: argument 'edge_index'"):
        gnn.GATConv(3, 2)(torch.randn(4, 3), torch.tensor([[0, -1], [1, 2]]))
