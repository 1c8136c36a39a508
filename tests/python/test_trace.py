"""torch.jit.trace of the gnnfuse.nn layers: a layer traced on one graph gives, on graphs of other
sizes (fewer and more nodes and edges, no edges, another number of self-loops), the eager layer's
output and gradients, and PyG's traced layer's output where PyG traces; the tracer raises no
warning about gnnfuse's code. What a trace cannot record generally (a sparse adjacency, PyG's
explain mode and hooks) is refused with an error that names torch.jit.script, torch.compile and
torch.export. Float64, eval mode."""

from __future__ import annotations

import io
import warnings
from typing import Optional

import pytest
import torch

import gnnfuse.nn as gnn

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.trace")  # torch 2.13 deprecates trace


def _graph(num_src: int, num_dst: int, num_edges: int, num_loops: int, seed: int) -> torch.Tensor:
    """Random edges (duplicates likely) plus ``num_loops`` self-loops (repeats possible), shuffled."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, num_src, (num_edges,), generator=g), torch.randint(0, num_dst, (num_edges,), generator=g)])
    loops = torch.randint(0, min(num_src, num_dst), (num_loops,), generator=g)
    ei = torch.cat([ei, torch.stack([loops, loops])], 1)
    return ei[:, torch.randperm(ei.size(1), generator=g)]


# (num_src, num_dst, edge_index): the graph traced on, then the ones the trace runs on
GRAPHS = {
    "traced": (20, 20, _graph(20, 20, 70, 3, 0)),
    "smaller": (9, 9, _graph(9, 9, 25, 1, 1)),
    "larger": (45, 45, _graph(45, 45, 200, 6, 2)),
    "no_edges": (5, 5, torch.empty(2, 0, dtype=torch.long)),
    "every_node_a_loop": (7, 7, torch.cat([_graph(7, 7, 12, 0, 3), torch.arange(7).repeat(2, 1)], 1)),
}
BIPARTITE = {
    "traced": (20, 11, _graph(20, 11, 60, 3, 4)),
    "smaller": (6, 9, _graph(6, 9, 20, 2, 5)),
    "larger": (40, 31, _graph(40, 31, 150, 5, 6)),
    "no_edges": (5, 3, torch.empty(2, 0, dtype=torch.long)),
}
OTHER = ["smaller", "larger", "no_edges"]

# name -> (layer factory, inputs: "x", "pair" (x_src, x_dst), "edge_attr" or "edge_weight")
LAYERS = {
    "gcn": (lambda: gnn.GCNConv(5, 4), "x"),
    "gcn_cached": (lambda: gnn.GCNConv(5, 4, cached=True), "x"),
    "gcn_improved_weighted": (lambda: gnn.GCNConv(5, 4, improved=True), "edge_weight"),
    "gcn_no_normalize": (lambda: gnn.GCNConv(5, 4, normalize=False), "edge_weight"),
    "gcn_fused_op": (lambda: gnn.GCNConv(5, 7, fused=True), "x"),
    "gcn_widening_split": (lambda: gnn.GCNConv(3, 7, fused=False), "x"),
    "gat_heads": (lambda: gnn.GATConv(5, 4, heads=2), "x"),
    "gat_mean_fused": (lambda: gnn.GATConv(5, 4, heads=3, concat=False, fused=True), "x"),
    "gat_no_loops": (lambda: gnn.GATConv(5, 4, heads=2, add_self_loops=False, fused=False), "x"),
    "gat_edges_mean": (lambda: gnn.GATConv(5, 4, heads=2, edge_dim=3), "edge_attr"),
    "gat_edges_add": (lambda: gnn.GATConv(5, 4, heads=2, edge_dim=3, fill_value="add"), "edge_attr"),
    "gat_edges_max": (lambda: gnn.GATConv(5, 4, heads=2, edge_dim=3, fill_value="max"), "edge_attr"),
    "gat_edges_constant": (lambda: gnn.GATConv(5, 4, heads=2, edge_dim=3, fill_value=0.5), "edge_attr"),
    "gat_bipartite": (lambda: gnn.GATConv((5, 3), 4, heads=2, add_self_loops=False), "pair"),
    "gat_bipartite_loops_residual": (lambda: gnn.GATConv((5, 3), 4, heads=2, residual=True), "pair"),
    "transformer": (lambda: gnn.TransformerConv(5, 4, heads=2), "x"),
    "transformer_fused_beta": (lambda: gnn.TransformerConv(5, 4, heads=2, beta=True, fused=True), "x"),
    "transformer_edges": (lambda: gnn.TransformerConv(5, 4, heads=2, edge_dim=3), "edge_attr"),
    "transformer_no_root_mean": (lambda: gnn.TransformerConv(5, 4, heads=2, root_weight=False, concat=False), "x"),
    "transformer_bipartite": (lambda: gnn.TransformerConv((5, 3), 4, heads=2), "pair"),
}


class _Call(torch.nn.Module):
    """The layer called the way its inputs say (a trace takes tensors only)."""

    def __init__(self, layer: torch.nn.Module, kind: str):
        super().__init__()
        self.layer = layer
        self.kind = kind

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, extra: Optional[torch.Tensor] = None):
        if self.kind == "pair":  # extra: the target nodes' features
            return self.layer((x, extra), edge_index)
        if self.kind in ("edge_attr", "edge_weight"):
            return self.layer(x, edge_index, extra)
        return self.layer(x, edge_index)


def _inputs(kind: str, graph: str, seed: int = 7):
    num_src, num_dst, edge_index = (BIPARTITE if kind == "pair" else GRAPHS)[graph]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_src, 5, generator=g, dtype=torch.float64)
    if kind == "pair":
        return (x, edge_index, torch.randn(num_dst, 3, generator=g, dtype=torch.float64))
    if kind == "edge_attr":
        return (x, edge_index, torch.randn(edge_index.size(1), 3, generator=g, dtype=torch.float64))
    if kind == "edge_weight":
        return (x, edge_index, torch.rand(edge_index.size(1), generator=g, dtype=torch.float64) + 0.1)
    return (x, edge_index)


def _layer(name: str) -> torch.nn.Module:
    """A fresh eager model (the same weights every time: a cached layer starts with no cache)."""
    factory, kind = LAYERS[name]
    torch.manual_seed(0)
    return _Call(factory(), kind).double().eval()


def _x_width(name: str) -> int:
    return 3 if name == "gcn_widening_split" else 5


def _args(name: str, graph: str, seed: int = 7):
    kind = LAYERS[name][1]
    args = list(_inputs(kind, graph, seed))
    if _x_width(name) != 5:
        args[0] = args[0][:, : _x_width(name)].contiguous()
    return tuple(args)


def _trace(model: torch.nn.Module, args) -> torch.jit.ScriptModule:
    """torch.jit.trace (with its check: a second trace and an eager run must agree), failing on
    any tracer warning about gnnfuse's code (a size turned into a Python value)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(model, args)
    ours = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    assert not ours, ours
    return traced


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_traced_layer_matches_eager_on_other_graphs(name):
    model = _layer(name)
    traced = _trace(model, _args(name, "traced"))
    graphs = OTHER + (["every_node_a_loop"] if LAYERS[name][1] != "pair" else [])
    for graph in graphs:
        args = _args(name, graph)
        ref = _layer(name)(*args)  # a fresh layer: a cached one normalises this graph
        out = traced(*args)
        assert out.shape == ref.shape, graph
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    # saved and loaded, the trace still reads the sizes of its inputs
    buf = io.BytesIO()
    torch.jit.save(traced, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    args = _args(name, "larger", seed=8)
    torch.testing.assert_close(loaded(*args), _layer(name)(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["gcn", "gcn_fused_op", "gat_heads", "gat_edges_mean", "transformer_edges", "transformer_bipartite"])
def test_traced_layer_gradients_match_eager(name):
    traced = _trace(_layer(name), _args(name, "traced"))
    for graph in ("smaller", "larger"):
        results = []
        for model in (traced, _layer(name)):
            args = [a.detach().clone().requires_grad_() if a.is_floating_point() else a for a in _args(name, graph)]
            out = model(*args)
            w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
            leaves = [a for a in args if a.requires_grad] + list(model.parameters())
            results.append(torch.autograd.grad((out * w).sum(), leaves, allow_unused=True))
        for a, b in zip(*results):
            if a is None or b is None:
                assert a is None and b is None
                continue
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_trace_under_no_grad_and_in_training_generalises():
    # Traced under no_grad (no CSC precomputed), then run with gradients; dropout 0 in training.
    name = "gat_edges_mean"
    with torch.no_grad():
        traced = _trace(_layer(name), _args(name, "traced"))
    args = _args(name, "larger")
    torch.testing.assert_close(traced(*args), _layer(name)(*args), rtol=1e-12, atol=1e-12)
    model = _Call(gnn.TransformerConv(5, 4, heads=2), "x").double().train()
    traced = _trace(model, _args("transformer", "traced"))
    args = _args("transformer", "smaller")
    torch.testing.assert_close(traced(*args), model(*args), rtol=1e-12, atol=1e-12)


class _Attention(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor):
        return self.layer(x, edge_index, return_attention_weights=True)


@pytest.mark.parametrize("layer", ["GATConv", "TransformerConv"])
def test_traced_attention_weights_on_other_graphs(layer):
    torch.manual_seed(0)
    model = _Attention(getattr(gnn, layer)(5, 4, heads=2)).double().eval()
    traced = _trace(model, _args("gcn", "traced"))
    for graph in OTHER + ["every_node_a_loop"]:
        args = _args("gcn", graph)
        out, (ei, alpha) = traced(*args)
        ref, (ref_ei, ref_alpha) = model(*args)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        assert torch.equal(ei, ref_ei)  # GATConv: the input's other edges, then a loop per node
        torch.testing.assert_close(alpha, ref_alpha, rtol=1e-12, atol=1e-12)


def _pyg():
    return pytest.importorskip("torch_geometric.nn")


# PyG traces these (its cached GCNConv fails torch.jit.trace's check, as it writes its cache while
# tracing; its GATConv adding self-loops on a bipartite graph records min(N_src, N_dst) as a constant
# and fails on graphs of other sizes)
PYG_TRACES = [
    "gcn",
    "gcn_improved_weighted",
    "gcn_no_normalize",
    "gat_heads",
    "gat_no_loops",
    "gat_edges_mean",
    "gat_edges_add",
    "gat_bipartite",
    "transformer",
    "transformer_edges",
    "transformer_no_root_mean",
    "transformer_bipartite",
]


@pytest.mark.parametrize("name", PYG_TRACES)
def test_traced_layer_matches_pygs_traced_layer(name):
    pyg_nn = _pyg()
    ours = _layer(name)
    theirs = _Call(_pyg_twin(ours.layer, pyg_nn), LAYERS[name][1]).double().eval()
    theirs.layer.load_state_dict(ours.layer.state_dict(), strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's own tracer warnings
        pyg_traced = torch.jit.trace(theirs, _args(name, "traced"))
    traced = _trace(ours, _args(name, "traced"))
    for graph in OTHER:
        args = _args(name, graph)
        ref = pyg_traced(*args)
        out = traced(*args)
        assert out.shape == ref.shape, graph
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


def _pyg_twin(layer: torch.nn.Module, pyg_nn) -> torch.nn.Module:
    """PyG's layer with the arguments of gnnfuse's ``layer`` (as LAYERS builds it)."""
    if isinstance(layer, gnn.GCNConv):
        return pyg_nn.GCNConv(layer.in_channels, layer.out_channels, improved=layer.improved, cached=layer.cached,
                              add_self_loops=layer.add_self_loops, normalize=layer.normalize)
    if isinstance(layer, gnn.GATConv):
        return pyg_nn.GATConv(layer.in_channels, layer.out_channels, heads=layer.heads, concat=layer.concat,
                              add_self_loops=layer.add_self_loops, edge_dim=layer.edge_dim, fill_value=layer.fill_value,
                              residual=layer.residual)
    return pyg_nn.TransformerConv(layer.in_channels, layer.out_channels, heads=layer.heads, concat=layer.concat,
                                  beta=layer.beta, edge_dim=layer.edge_dim, root_weight=layer.root_weight)


def test_cached_gcn_traced_after_its_first_call_checks_the_node_count():
    # The first call fills the cache; a trace then records the cached graph (as the eager layer
    # uses it), and rejects x of another node count instead of returning the cached graph's rows.
    model = _layer("gcn_cached")
    args = _args("gcn_cached", "traced")
    ref = model(*args)
    traced = _trace(model, args)
    torch.testing.assert_close(traced(*args), ref, rtol=1e-12, atol=1e-12)
    other = _args("gcn_cached", "traced", seed=9)  # same graph size, other features
    torch.testing.assert_close(traced(*other), model(*other), rtol=1e-12, atol=1e-12)
    for graph in ("smaller", "larger"):
        # (raised in TorchScript code: torch.jit.Error, which names the RuntimeError)
        with pytest.raises(torch.jit.Error, match=r"RuntimeError: gnnfuse.nn.GCNConv: this trace recorded the layer's cached graph \(cached=True\), of 20 nodes; x has \d+ rows"):
            traced(*_args("gcn_cached", graph))


@pytest.mark.parametrize("layer", ["GCNConv", "GATConv", "TransformerConv"])
def test_trace_of_a_sparse_adjacency_is_refused(layer):
    num, _, edge_index = GRAPHS["traced"]
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1), dtype=torch.float64), (num, num))
    model = getattr(gnn, layer)(5, 4).double().eval()
    x = torch.randn(num, 5, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=f"gnnfuse.nn.{layer}: torch.jit.trace of a layer given a sparse adjacency.*torch.jit.script, torch.compile or torch.export"):
        torch.jit.trace(model, (x, adj_t))


@pytest.mark.parametrize("layer", ["GCNConv", "GATConv", "TransformerConv"])
def test_trace_with_pyg_explain_or_hooks_is_refused(layer):
    pytest.importorskip("torch_geometric")
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    num, _, edge_index = GRAPHS["traced"]
    model = getattr(gnn, layer)(5, 4).double().eval()
    x = torch.randn(num, 5, dtype=torch.float64)
    match = f"gnnfuse.nn.{layer}: torch.jit.trace cannot record PyG's explain mode or message passing hooks.*torch.jit.script, torch.compile or torch.export"
    set_masks(model, torch.nn.Parameter(torch.zeros(edge_index.size(1), dtype=torch.float64)), edge_index)
    with pytest.raises(RuntimeError, match=match):
        torch.jit.trace(model, (x, edge_index))
    clear_masks(model)
    handle = model.register_message_forward_hook(lambda module, inputs, out: None)
    with pytest.raises(RuntimeError, match=match):
        torch.jit.trace(model, (x, edge_index))
    handle.remove()
    _trace(model, (x, edge_index))  # without them it traces
