"""gnnfuse.nn layers against torch_geometric 2.8's layers of the same names: a PyG layer's
state_dict loads with strict=True, and in eval mode the outputs and the gradients (inputs and
every parameter) match, in float64, on graphs with self-loops, duplicate edges, isolated nodes
and power-law degrees."""

from __future__ import annotations

import types

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


def test_gcnconv_cached_first_called_in_inference_mode_trains_afterwards():
    """A graph normalised under torch.inference_mode is not cached (its inference tensors could
    not be saved for backward); the first call outside it caches, and training works."""
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.GCNConv, pyg_nn.GCNConv, 4, 4, cached=True)
    x = features(case.num_nodes, 4, torch.float64, seed=3)
    with torch.inference_mode():
        y_inf = ours(x, case.edge_index)
    assert ours._cache is None
    xg = x.clone().requires_grad_()
    y = ours(xg, case.edge_index)
    y.sum().backward()
    assert ours._cache is not None and not ours._cache[0].is_inference() and xg.grad is not None
    torch.testing.assert_close(y_inf, y.detach())
    torch.testing.assert_close(y, theirs(x, case.edge_index))


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


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per_edge"])
@pytest.mark.parametrize("fill_value", ["mean", "add", "max", 0.5], ids=str)
def test_gatconv_edge_features_match_pyg(fill_value, fused):
    case = CASES["self_loops_duplicates"]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 5, 3, heads=2, edge_dim=4, fill_value=fill_value, ours_kwargs={"fused": fused})
    x = features(case.num_nodes, 5, torch.float64, seed=5)
    e = features(case.num_edges, 4, torch.float64, seed=6)
    _compare(ours, theirs, [x, case.edge_index, e], lambda layer, *t: layer(*t))


@pytest.mark.parametrize("name", ["power_law", "empty_rows_isolated", "bipartite_more_sources", "bipartite_fewer_sources"])
@pytest.mark.parametrize("kwargs", [{"heads": 3}, {"heads": 2, "concat": False, "add_self_loops": False}, {"heads": 1, "edge_dim": -1}],
                         ids=["heads3", "mean_no_loops", "lazy_edge_dim"])
def test_gatconv_edge_features_fused_match_pyg(name, kwargs):
    """The fused gat_edge op from GATConv (edge_dim set): the output and every gradient (edge
    features included) as PyG's, on square and bipartite graphs; the edge logits are [E, heads]
    (``e M``), and no per-edge coefficient is built (gat_edge runs, sddmm_add does not)."""
    case = CASES[name]
    bipartite = case.num_src_nodes != case.num_nodes
    run = _edge_feature_layers("GATConv", case, kwargs | ({"add_self_loops": False} if bipartite else {}), True)
    names = {ev.name for ev in run.prof.events()}
    assert "gnnfuse::gat_edge" in names and "gnnfuse::sddmm_add" not in names, names
    run.compare()


def _edge_feature_layers(layer: str, case, kwargs, fused):
    """Our layer and PyG's with edge_dim 3 (unless given; -1: lazy, materialised by a first call
    of each, then loaded), in_channels 5 or (5, 4) on a bipartite graph, inputs from fixed seeds;
    our forward profiled (``.prof``, shapes recorded); ``.compare()`` compares outputs and every
    gradient with PyG's."""
    from torch.profiler import profile

    kwargs = {"edge_dim": 3} | kwargs
    bipartite = case.num_src_nodes != case.num_nodes
    ours, theirs = _pair(getattr(gnn, layer), getattr(pyg_nn, layer), (5, 4) if bipartite else 5, 4, ours_kwargs={"fused": fused}, **kwargs)
    xs = features(case.num_src_nodes, 5, torch.float64, seed=40)
    xd = features(case.num_nodes, 4, torch.float64, seed=41)
    e = features(case.num_edges, 3, torch.float64, seed=42)
    x_in = (xs, xd) if bipartite else xs
    if kwargs["edge_dim"] == -1:
        theirs(x_in, case.edge_index, e)
        ours(x_in, case.edge_index, e)
        ours.load_state_dict(theirs.state_dict(), strict=True)
    run = types.SimpleNamespace()
    with profile(record_shapes=True) as run.prof:
        ours(x_in, case.edge_index, e)
    if bipartite:
        run.compare = lambda: _compare(ours, theirs, [xs, xd, case.edge_index, e], lambda layer, a, b, ei, ea: layer((a, b), ei, ea))
    else:
        run.compare = lambda: _compare(ours, theirs, [xs, case.edge_index, e], lambda layer, *t: layer(*t))
    return run


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


@pytest.mark.parametrize("name", ["power_law", "empty_rows_isolated", "bipartite_more_sources", "self_loops_duplicates"])
@pytest.mark.parametrize(
    "kwargs",
    [{"heads": 3}, {"heads": 2, "beta": True, "concat": False}, {"heads": 1, "edge_dim": -1, "root_weight": False},
     {"heads": 2, "dropout": 0.5}],
    ids=["heads3", "beta_mean", "lazy_edge_dim", "dropout_eval"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per_edge"])
def test_transformerconv_edge_features_match_pyg(name, kwargs, fused):
    """TransformerConv(edge_dim): outputs and every gradient (edge features included) as PyG's,
    fused (graph_attention_edge and graph_attention_edge_values) or per-edge; no [E, H, C]
    tensor on either path (the edge term is a bias [E, H] and an [N, H, edge_dim] sum)."""
    case = CASES[name]
    run = _edge_feature_layers("TransformerConv", case, kwargs, fused)
    events = run.prof.events()
    names = {ev.name for ev in events}
    assert ("gnnfuse::graph_attention_edge" in names) == fused and ("gnnfuse::graph_attention_edge_values" in names) == fused
    assert ("gnnfuse::edge_softmax_heads" in names) != fused
    E, H, C = case.num_edges, kwargs["heads"], 4
    big = [ev.name for ev in events if any(list(sh) == [E, H, C] for sh in (ev.input_shapes or []) if isinstance(sh, list))]
    assert not big, big
    run.compare()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "per_edge"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_gatconv_existing_self_loop_with_missing_features_matches_pyg(bad, fused):
    # PyG removes an existing self-loop before adding its own: a NaN or inf feature of it (a
    # missing value) reaches no output and no gradient. Here the loop is redirected to a padding
    # source (fixed sizes), its features zeroed.
    ei = torch.tensor([[0, 1, 2, 1, 2], [1, 2, 0, 1, 1]])  # edge 3 is the self-loop 1 -> 1
    x = features(3, 4, torch.float64, seed=55)
    e = features(5, 2, torch.float64, seed=56)
    e[3] = bad
    for fill_value in ("mean", 0.5, "max"):
        ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 4, 3, heads=2, edge_dim=2, fill_value=fill_value, ours_kwargs={"fused": fused})
        _compare(ours, theirs, [x, ei, e], lambda layer, *t: layer(*t))


@pytest.mark.parametrize("layer", ["GATConv", "TransformerConv"])
def test_lazy_edge_dim_checks_the_materialised_width(layer):
    # edge_dim=-1: the first edge_attr sets the width; a later one of another width is a named error
    case = CASES["power_law"]
    m = getattr(gnn, layer)(5, 4, heads=2, edge_dim=-1).double()
    x = features(case.num_nodes, 5, torch.float64, seed=57)
    m(x, case.edge_index, features(case.num_edges, 3, torch.float64, seed=58))
    with pytest.raises(RuntimeError, match=rf"gnnfuse.nn.{layer}: argument 'edge_attr' must have edge_dim=3 columns \(got 2\)"):
        m(x, case.edge_index, features(case.num_edges, 2, torch.float64, seed=59))


def test_transformerconv_edge_features_attention_weights_match_pyg():
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.TransformerConv, pyg_nn.TransformerConv, 6, 4, heads=2, edge_dim=3, ours_kwargs={"fused": True})
    x = features(case.num_nodes, 6, torch.float64, seed=53)
    e = features(case.num_edges, 3, torch.float64, seed=54)
    _compare(ours, theirs, [x, case.edge_index, e], lambda layer, a, ei, ea: layer(a, ei, ea, return_attention_weights=True))


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


# Regressions of an audit against PyG 2.8 (each failed before its fix in gnnfuse/nn.py).


def test_gcnconv_cached_without_normalize_reads_each_graph():
    # PyG caches the normalised graph only: cached=True with normalize=False uses each call's graph.
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.GCNConv, pyg_nn.GCNConv, 4, 3, cached=True, normalize=False)
    x = features(case.num_nodes, 4, torch.float64, seed=20)
    w = edge_weights(case.num_edges // 2, torch.float64, seed=21)
    other = case.edge_index[:, : case.num_edges // 2]
    for args in ((x, case.edge_index), (x, other), (x, other, w)):
        torch.testing.assert_close(ours(*args), theirs(*args), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("layer", ["GATConv", "TransformerConv"])
def test_edge_features_on_an_empty_graph(layer):
    x = features(4, 5, torch.float64, seed=22)
    edge_index = torch.empty(2, 0, dtype=torch.long)
    kwargs = {"heads": 2, "edge_dim": 3} | ({"add_self_loops": False} if layer == "GATConv" else {})
    ours, theirs = _pair(getattr(gnn, layer), getattr(pyg_nn, layer), 5, 4, **kwargs)
    e = torch.empty(0, 3, dtype=torch.float64)
    _compare(ours, theirs, [x], lambda layer, x: layer(x, edge_index, e))


@pytest.mark.parametrize("fill_value", ["mean", "add", "max", "min", "mul"])
def test_gatconv_edge_features_int32_edge_index(fill_value):
    # The self-loop features reduce with scatter_reduce, whose backward is wrong with an int32 index.
    case = CASES["self_loops_duplicates"]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 5, 3, heads=2, edge_dim=4, fill_value=fill_value)
    x = features(case.num_nodes, 5, torch.float64, seed=23)
    e = features(case.num_edges, 4, torch.float64, seed=24)
    ei32 = case.edge_index.int()
    _compare(ours, theirs, [x, e], lambda layer, x, e: layer(x, ei32 if layer is ours else case.edge_index, e))


def test_gatconv_bipartite_layer_takes_one_x_or_a_missing_target():
    case = CASES["self_loops_duplicates"]
    x = features(case.num_nodes, 5, torch.float64, seed=25)
    # in_channels a pair, x a single tensor: PyG projects it with lin_src and lin_dst
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, (5, 5), 4, heads=2, residual=True)
    _compare(ours, theirs, [x, case.edge_index], lambda layer, *t: layer(*t))
    # x = (x_src, None): no target term in the logits and no residual, as PyG
    for in_channels in (5, (5, 5)):
        for kwargs in ({"add_self_loops": False}, {"residual": True}, {"edge_dim": 3}):
            ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, in_channels, 4, heads=2, **kwargs)
            e = features(case.num_edges, 3, torch.float64, seed=26)
            inputs = [x, case.edge_index] + ([e] if "edge_dim" in kwargs else [])
            _compare(ours, theirs, inputs, lambda layer, x, *t: layer((x, None), *t))
    # with a size: targets from size[1]
    case = CASES["bipartite_more_sources"]
    xs = features(case.num_src_nodes, 5, torch.float64, seed=27)
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, (5, 3), 4, heads=2, add_self_loops=False)
    size = (case.num_src_nodes, case.num_nodes)
    _compare(ours, theirs, [xs, case.edge_index], lambda layer, x, ei: layer((x, None), ei, size=size))


def test_gatconv_return_attention_weights_false_returns_the_output():
    # PyG 2.8's GATConv: `if return_attention_weights:` -> the output alone for False.
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.GATConv, pyg_nn.GATConv, 6, 4, heads=2)
    x = features(case.num_nodes, 6, torch.float64, seed=28)
    out, ref = ours(x, case.edge_index, return_attention_weights=False), theirs(x, case.edge_index, return_attention_weights=False)
    assert isinstance(ref, torch.Tensor) and isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


def test_gatconv_returned_attention_is_after_dropout():
    # In training PyG returns the coefficients after dropout, the ones the output aggregates.
    case = CASES["power_law"]
    torch.manual_seed(0)
    layer = gnn.GATConv(6, 4, heads=2, dropout=0.5, bias=False).double().train()
    x = features(case.num_nodes, 6, torch.float64, seed=29)
    out, (ei, alpha) = layer(x, case.edge_index, return_attention_weights=True)
    assert (alpha == 0).any() and alpha.max() > 1.0  # dropped and rescaled by 1 / (1 - p)
    h = layer.lin(x).view(-1, 2, 4)
    expected = torch.zeros(case.num_nodes, 2, 4, dtype=x.dtype).index_add(0, ei[1], alpha[:, :, None] * h[ei[0]])
    torch.testing.assert_close(out, expected.view(-1, 8), rtol=1e-10, atol=1e-10)


# Lazy layers (in_channels=-1): one of each form.
LAZY_LAYERS = pytest.mark.parametrize(
    "layer,args,kwargs",
    [
        ("GCNConv", (-1, 3), {}),
        ("GATConv", (-1, 3), {"heads": 2, "residual": True, "edge_dim": -1}),
        ("GATConv", ((-1, -1), 3), {"heads": 2}),
        ("TransformerConv", (-1, 3), {"heads": 2, "edge_dim": -1, "beta": True}),
        ("TransformerConv", ((-1, -1), 3), {"heads": 2}),
    ],
    ids=["gcn", "gat", "gat_pair", "transformer", "transformer_pair"],
)


@LAZY_LAYERS
def test_lazy_in_channels_match_pyg(layer, args, kwargs):
    case = CASES["self_loops_duplicates"]
    x = features(case.num_nodes, 5, torch.float64, seed=30)
    e = features(case.num_edges, 3, torch.float64, seed=31)
    pair = isinstance(args[0], tuple)
    inputs = [x, case.edge_index] + ([e] if "edge_dim" in kwargs else [])

    def call(layer, x, *t):
        return layer((x, x) if pair else x, *t)

    torch.manual_seed(0)
    theirs = getattr(pyg_nn, layer)(*args, **kwargs).double()
    ours = getattr(gnn, layer)(*args, **kwargs).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    # materialised by the first call: glorot / kaiming as PyG (same shapes, bounded by the same limits)
    call(ours, *inputs)
    call(theirs, *inputs)
    for (k, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert a.shape == b.shape, k
    # an initialised PyG state loads into an uninitialised layer, as into PyG's
    ours = getattr(gnn, layer)(*args, **kwargs).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.eval()
    ours.eval()
    _compare(ours, theirs, inputs, call)


@LAZY_LAYERS
def test_lazy_layer_compiles_from_its_first_call(layer, args, kwargs):
    """torch.compile (graph breaks allowed) of a layer never called before: the lazy projections
    materialise before any width check reads them (a lazy module called mid-trace restarts
    Dynamo's frame; checks reading in_features 0 on the first pass and 5 on the restart made it
    fail with SpeculationLogDivergence). The compiled output equals the eager one."""
    case = CASES["self_loops_duplicates"]
    x = features(case.num_nodes, 5, torch.float64, seed=33)
    e = features(case.num_edges, 3, torch.float64, seed=34)
    pair = isinstance(args[0], tuple)
    extra = [e] if "edge_dim" in kwargs else []
    torch.manual_seed(0)
    module = getattr(gnn, layer)(*args, **kwargs).double().eval()
    torch._dynamo.reset()
    out = torch.compile(module, backend="aot_eager")((x, x) if pair else x, case.edge_index, *extra)
    assert not torch.nn.parameter.is_lazy(module.state_dict()[next(iter(module.state_dict()))])
    torch.testing.assert_close(out, module((x, x) if pair else x, case.edge_index, *extra))


def test_lazy_layer_scripts_once_materialised():
    case = CASES["self_loops_duplicates"]
    x = features(case.num_nodes, 5, torch.float64, seed=32)

    class Wrap(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.layer(x, edge_index)

    for layer in (gnn.GCNConv(-1, 3), gnn.GATConv(-1, 3, heads=2), gnn.TransformerConv((-1, -1), 3)):
        model = Wrap(layer.double().eval())
        ref = model(x, case.edge_index)
        torch.testing.assert_close(torch.jit.script(model)(x, case.edge_index), ref)


def test_gcnconv_edge_weight_of_another_dtype():
    # PyG promotes; gnnfuse casts the weights to x's dtype (the same dtype here, float64 x).
    case = CASES["power_law"]
    ours, theirs = _pair(gnn.GCNConv, pyg_nn.GCNConv, 5, 3)
    x = features(case.num_nodes, 5, torch.float64, seed=33)
    w = edge_weights(case.num_edges, torch.float32, seed=34).abs() + 0.1
    out, ref = ours(x, case.edge_index, w), theirs(x, case.edge_index, w)
    assert out.dtype == ref.dtype == torch.float64
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)  # PyG normalises in float32
    out = ours.float()(x.float(), case.edge_index, w.double())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, theirs.float()(x.float(), case.edge_index, w.double()).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", ["GCNConv", "GATConv", "TransformerConv"])
def test_message_passing_kwargs(layer):
    ours_cls, pyg_cls = getattr(gnn, layer), getattr(pyg_nn, layer)
    defaults = [{"aggr": "add"}, {"aggr": "sum"}, {"flow": "source_to_target"}, {"aggr_kwargs": {}}]
    if layer == "GCNConv":
        defaults += [{"node_dim": 0}, {"decomposed_layers": 2}]  # (PyG's attention layers fail in forward with it)
    else:
        assert gnn.GATConv(5, 4, decomposed_layers=2).decomposed_layers == 2
    case = CASES["self_loops_duplicates"]
    x = features(case.num_nodes, 5, torch.float64, seed=35)
    for kwargs in defaults:
        ours, theirs = _pair(ours_cls, pyg_cls, 5, 4, **kwargs)
        assert (ours.aggr, ours.flow, ours.node_dim) == (theirs.aggr, theirs.flow, theirs.node_dim)
        _compare(ours, theirs, [x, case.edge_index], lambda layer, *t: layer(*t))
    for kwargs in ({"aggr": "mean"}, {"aggr": "max"}, {"aggr": ["sum", "mean"]}, {"flow": "target_to_source"}):
        pyg_cls(5, 4, **kwargs)
        with pytest.raises(NotImplementedError, match=f"gnnfuse.nn.{layer}: {next(iter(kwargs))}="):
            ours_cls(5, 4, **kwargs)
    with pytest.raises(ValueError, match=f"gnnfuse.nn.{layer}: expected flow"):
        ours_cls(5, 4, flow="sideways")
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        ours_cls(5, 4, foo=1)
    if layer != "GCNConv":  # fixed to 0: PyG's TypeError
        with pytest.raises(TypeError, match="node_dim"):
            ours_cls(5, 4, node_dim=0)


def _sparse_adjacencies(edge_index, n, values=None):
    """adj_t of a graph (adj_t[i, j]: edge j -> i): coalesced COO, CSR, and the raw COO (duplicates)."""
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

    flipped = edge_index.flip(0)
    if values is None:  # float64, as the features (PyG's spmm does not promote)
        values = torch.ones(flipped.size(1), dtype=torch.float64)
    raw = torch.sparse_coo_tensor(flipped, values, (n, n) + tuple(values.shape[1:]))
    return {
        "coo": to_torch_coo_tensor(flipped, values, size=(n, n)),
        "csr": to_torch_csr_tensor(flipped, values, size=(n, n)),
        "coo_uncoalesced": raw,
    }


@pytest.mark.parametrize("fmt", ["coo", "csr", "coo_uncoalesced"])
@pytest.mark.parametrize(
    "layer,kwargs",
    [
        # (an uncoalesced COO fails in PyG's attention layers unless GATConv adds self-loops)
        ("GCNConv", {}),
        ("GCNConv", {"improved": True}),
        ("GCNConv", {"normalize": False}),
        ("GCNConv", {"cached": True}),
        ("GATConv", {"heads": 2}),
        ("GATConv", {"heads": 2, "add_self_loops": False}),
        ("TransformerConv", {"heads": 2}),
    ],
    ids=["gcn", "gcn_improved", "gcn_raw", "gcn_cached", "gat", "gat_no_loops", "transformer"],
)
def test_sparse_adjacency_matches_pyg(fmt, layer, kwargs):
    if fmt == "coo_uncoalesced" and (layer == "TransformerConv" or kwargs.get("add_self_loops") is False):
        pytest.skip("PyG fails on an uncoalesced COO here")
    case = CASES["self_loops_duplicates"]  # self-loops and duplicate edges
    n = case.num_nodes
    w = edge_weights(case.num_edges, torch.float64, seed=36).abs() + 0.1
    adj = _sparse_adjacencies(case.edge_index, n, w)[fmt]
    ours, theirs = _pair(getattr(gnn, layer), getattr(pyg_nn, layer), 5, 4, **kwargs)
    x = features(n, 5, torch.float64, seed=37)
    _compare(ours, theirs, [x], lambda layer, x: layer(x, adj))


@pytest.mark.parametrize("fmt", ["coo", "csr", "coo_uncoalesced"])
@pytest.mark.parametrize("layer,kwargs", [("GATConv", {}), ("GATConv", {"add_self_loops": False}), ("TransformerConv", {})])
def test_sparse_adjacency_attention_weights_match_pyg(fmt, layer, kwargs):
    if fmt == "coo_uncoalesced" and (layer == "TransformerConv" or kwargs.get("add_self_loops") is False):
        pytest.skip("PyG fails on an uncoalesced COO here")
    case = CASES["self_loops_duplicates"]
    n = case.num_nodes
    adj = _sparse_adjacencies(case.edge_index, n)[fmt]
    ours, theirs = _pair(getattr(gnn, layer), getattr(pyg_nn, layer), 5, 4, heads=2, **kwargs)
    x = features(n, 5, torch.float64, seed=38)
    out, (adj1, a1) = ours(x, adj, return_attention_weights=True)
    ref, (adj2, a2) = theirs(x, adj, return_attention_weights=True)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert adj1.layout == adj2.layout and adj1.shape == adj2.shape
    torch.testing.assert_close(adj1.to_dense(), adj2.to_dense(), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(a1, a2, rtol=1e-10, atol=1e-10)  # in the same edge order


@pytest.mark.parametrize("layer,kwargs", [("GATConv", {"fill_value": "mean"}), ("GATConv", {"add_self_loops": False}), ("TransformerConv", {})])
def test_sparse_adjacency_multidimensional_values_are_edge_features(layer, kwargs):
    # PyG reads 2-D values of a sparse adj_t as edge_attr (duplicates of a coalesced COO summed).
    case = CASES["self_loops_duplicates"]
    n = case.num_nodes
    e = features(case.num_edges, 3, torch.float64, seed=39)
    adj = _sparse_adjacencies(case.edge_index, n, e)["coo"]
    ours, theirs = _pair(getattr(gnn, layer), getattr(pyg_nn, layer), 5, 4, heads=2, edge_dim=3, **kwargs)
    x = features(n, 5, torch.float64, seed=40)
    _compare(ours, theirs, [x], lambda layer, x: layer(x, adj))


def test_small_sparse_adjacency_and_bad_sizes():
    # a 2 x 2 adjacency used to pass the [2, E] check
    edge_index = torch.tensor([[0, 1], [1, 0]])
    x = features(2, 5, torch.float64, seed=41)
    for fmt, adj in _sparse_adjacencies(edge_index, 2).items():
        for layer in ("GCNConv", "GATConv", "TransformerConv"):
            ours, theirs = _pair(getattr(gnn, layer), getattr(pyg_nn, layer), 5, 4)
            torch.testing.assert_close(ours(x, adj), theirs(x, adj), rtol=1e-10, atol=1e-10)
    adj = _sparse_adjacencies(edge_index, 2)["csr"]
    with pytest.raises(ValueError, match=r"gnnfuse.nn.GATConv: a sparse adjacency adj_t of shape \[2, 2\]"):
        gnn.GATConv(5, 4).double()(features(3, 5, torch.float64, seed=42), adj)


def test_gcnconv_converts_an_unchanged_graph_once(monkeypatch):
    """Uncached GCNConv keeps its normalised CSR for the same, unchanged input tensors (eager):
    converted once per graph, shared by layers of equal settings, converted anew for another
    tensor, an in-place change, another dtype, an edge_weight needing a gradient, inference mode."""
    import gc

    calls = []
    norm = gnn.gcn_norm

    def counting(*args):
        calls.append(1)
        return norm(*args)

    monkeypatch.setattr(gnn, "gcn_norm", counting)
    gnn._CONVERSIONS.clear()
    case = CASES["power_law"]
    n = case.num_nodes
    ei = case.edge_index.clone()
    x = features(n, 8, torch.float64, seed=3)
    torch.manual_seed(0)
    conv, conv2 = gnn.GCNConv(8, 4).double(), gnn.GCNConv(8, 4).double()
    ref = gnn.GCNConv(8, 4).double()
    ref.load_state_dict(conv.state_dict())

    def fresh(layer, *a):  # the same layer on a copy of the graph: converted anew
        before = len(calls)
        out = layer(x, *[t.clone() if t is not None else None for t in a])
        assert len(calls) == before + 1
        return out

    y = conv(x, ei)
    conv(x, ei).sum().backward()
    conv2(x, ei)
    assert len(calls) == 1  # the same graph: once, for both layers
    torch.testing.assert_close(y, fresh(ref, ei), rtol=1e-12, atol=1e-12)
    ei[0, :7] = ei[0, 7:14].clone()  # an in-place change: converted anew
    before = len(calls)
    y = conv(x, ei)
    assert len(calls) == before + 1
    torch.testing.assert_close(y, fresh(ref, ei), rtol=1e-12, atol=1e-12)
    # edge weights: plain ones kept (an in-place change seen); ones needing a gradient never
    w = torch.rand(ei.size(1), dtype=torch.float64)
    before = len(calls)
    conv(x, ei, w)
    conv(x, ei, w)
    assert len(calls) == before + 1
    w.mul_(2.0)
    torch.testing.assert_close(conv(x, ei, w), fresh(ref, ei, w), rtol=1e-12, atol=1e-12)
    wg = w.clone().requires_grad_()
    before = len(calls)
    for _ in range(2):
        wg.grad = None
        conv(x, ei, wg).sum().backward()
        assert wg.grad is not None and wg.grad.abs().sum() > 0
    assert len(calls) == before + 2
    # another dtype: another conversion; inference mode: none kept, training afterwards fine
    before = len(calls)
    conv.float()(x.float(), ei)
    conv.float()(x.float(), ei)
    assert len(calls) == before + 1
    conv.double()
    with torch.inference_mode():
        before = len(calls)
        conv(x, ei)
        conv(x, ei)
        assert len(calls) == before + 2
    conv(x, ei).sum().backward()
    # writes the version counter does not see (.data, NumPy, the storage, a swapped .data):
    # the contents are compared, the result is a fresh conversion's
    writes = [
        lambda t: t.data[0, :5].fill_(3),
        lambda t: t.numpy()[1, 3:9].__setitem__(slice(None), 11),
        lambda t: t.untyped_storage().copy_(torch.flip(t, [1]).contiguous().untyped_storage()),
        lambda t: setattr(t, "data", torch.roll(t, 5, 1).contiguous()),
    ]
    for write in writes:
        conv(x, ei)
        version = ei._version
        write(ei)
        assert ei._version == version  # (unseen by the counter)
        torch.testing.assert_close(conv(x, ei), fresh(ref, ei), rtol=1e-12, atol=1e-12)
    # a buffer refilled in place every step holds one entry, not one per version
    buf = ei.clone()
    for step in range(4):
        buf.copy_(torch.roll(ei, step, 1))
        conv(x, buf)
    assert sum(1 for e in gnn._CONVERSIONS.entries if e[0][0]() is buf) == 1
    # an entry goes with its edge_index, at once (no later call needed)
    assert len(gnn._CONVERSIONS.entries) >= 2
    del ei, buf
    gc.collect()
    assert not gnn._CONVERSIONS.entries  # (every entry was of ei or buf)
    monkeypatch.setenv("GNNFUSE_KEEP_CONVERSIONS", "0")  # the switch
    assert not gnn._Conversions().usable([x, None]) and gnn._Conversions().enabled is False
