"""gnnfuse.nn layers through the deployment frontends: TorchScript (script, save, load, with and
without returned attention weights), torch.compile(fullgraph=True) of a two-layer model's loss
(the backward through AOTAutograd), and torch.export. Each is compared with eager execution in
float64 on a graph with self-loops, duplicate edges and isolated nodes."""

import io
from typing import Optional, Tuple

import pytest
import torch

import gnnfuse.nn as gnn
from graphs import CASES, features

GRAPH = CASES["self_loops_duplicates"]

LAYERS = {
    "gcn": lambda: gnn.GCNConv(5, 6),
    "gcn_cached_raw": lambda: gnn.GCNConv(5, 6, cached=True, normalize=False, add_self_loops=False),
    "gat_fused": lambda: gnn.GATConv(5, 3, heads=2, fused=True),
    "gat_edges": lambda: gnn.GATConv(5, 3, heads=2, edge_dim=4, fused=False),
    "gat_fused_edges": lambda: gnn.GATConv(5, 3, heads=2, edge_dim=4, fused=True),
    "gat_bipartite": lambda: gnn.GATConv((5, 5), 3, heads=2, concat=False),
    "transformer_fused": lambda: gnn.TransformerConv(5, 3, heads=2, fused=True),
    "transformer_edges": lambda: gnn.TransformerConv(5, 3, heads=2, edge_dim=4, beta=True),
    "transformer_fused_edges": lambda: gnn.TransformerConv(5, 3, heads=2, edge_dim=4, beta=True, fused=True),
}


def _inputs(name: str):
    torch.manual_seed(1)
    n = GRAPH.num_nodes
    x = features(n, 5, torch.float64, 3)
    args = [(x, x) if name == "gat_bipartite" else x, GRAPH.edge_index]
    if name.endswith("_edges"):
        args.append(torch.randn(GRAPH.edge_index.size(1), 4, dtype=torch.float64))
    return args


class _Wrap(torch.nn.Module):
    """A layer inside a model, the way it is scripted (a scripted layer's forward is overloaded:
    Tensor, or (Tensor, (edge_index, attention)) with return_attention_weights, as PyG's)."""

    def __init__(self, layer, edges: bool):
        super().__init__()
        self.layer = layer
        self.edges = edges

    def forward(self, x: torch.Tensor, edge_index, edge_attr: Optional[torch.Tensor] = None):
        return self.layer(x, edge_index, edge_attr) if self.edges else self.layer(x, edge_index)


class _WrapPair(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x: Tuple[torch.Tensor, torch.Tensor], edge_index):
        return self.layer(x, edge_index)


class _WrapAttention(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, edge_index, edge_attr: Optional[torch.Tensor] = None):
        return self.layer(x, edge_index, edge_attr, return_attention_weights=True)


def _out_and_grads(layer, args):
    out = layer(*args)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    grads = torch.autograd.grad((out * w).sum(), list(layer.parameters()))
    return out, grads


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_script_matches_eager_and_round_trips(name):
    torch.manual_seed(0)
    inner = LAYERS[name]().double().eval()
    layer = _WrapPair(inner) if name == "gat_bipartite" else _Wrap(inner, name.endswith("_edges"))
    scripted = torch.jit.script(layer)
    args = _inputs(name)
    ref, ref_grads = _out_and_grads(layer, args)
    out, grads = _out_and_grads(scripted, args)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert "gnnfuse::" in str(scripted.inlined_graph)
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    torch.testing.assert_close(loaded(*args), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["gat_fused", "gat_edges", "transformer_edges"])
def test_script_returns_attention_weights(name):
    torch.manual_seed(0)
    layer = _WrapAttention(LAYERS[name]().double().eval())
    scripted = torch.jit.script(layer)
    args = _inputs(name)
    ref_out, (ref_ei, ref_alpha) = layer(*args)
    out, (ei2, alpha) = scripted(*args)
    torch.testing.assert_close(out, ref_out)
    assert torch.equal(ei2, ref_ei)
    torch.testing.assert_close(alpha, ref_alpha)
    # coefficients of each target sum to one
    sums = torch.zeros(GRAPH.num_nodes, alpha.size(1), dtype=alpha.dtype).index_add_(0, ei2[1], alpha)
    has_in = torch.zeros(GRAPH.num_nodes, dtype=torch.bool)
    has_in[ei2[1]] = True
    torch.testing.assert_close(sums[has_in], torch.ones_like(sums[has_in]))


class _TwoLayer(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        if kind == "gcn":
            self.c1, self.c2 = gnn.GCNConv(5, 8), gnn.GCNConv(8, 3)
        elif kind == "gat_fused":
            self.c1, self.c2 = gnn.GATConv(5, 4, heads=2, fused=True), gnn.GATConv(8, 3, fused=True)
        elif kind == "gat":
            self.c1, self.c2 = gnn.GATConv(5, 4, heads=2, fused=False), gnn.GATConv(8, 3, fused=False)
        else:
            self.c1, self.c2 = gnn.TransformerConv(5, 4, heads=2, fused=True), gnn.TransformerConv(8, 3)

    def forward(self, x, edge_index):
        return self.c2(torch.relu(self.c1(x, edge_index)), edge_index)


@pytest.mark.parametrize("kind", ["gcn", "gat_fused", "gat", "transformer"])
def test_compiled_training_step_matches_eager(kind):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _TwoLayer(kind).double()
    x = features(GRAPH.num_nodes, 5, torch.float64, 3)
    y = torch.randint(0, 3, (GRAPH.num_nodes,))

    def loss_fn(x, edge_index):
        return torch.nn.functional.cross_entropy(model(x, edge_index), y)

    compiled = torch.compile(loss_fn, fullgraph=True)
    results = []
    for fn in (loss_fn, compiled):
        model.zero_grad()
        loss = fn(x, GRAPH.edge_index)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (l1, g1), (l2, g2) = results
    torch.testing.assert_close(l2, l1, rtol=1e-10, atol=1e-12)
    for a, b in zip(g2, g1):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_export_gat_model():
    torch.manual_seed(0)
    model = _TwoLayer("gat_fused").double().eval()
    x = features(GRAPH.num_nodes, 5, torch.float64, 3)
    ep = torch.export.export(model, (x, GRAPH.edge_index))
    assert any("gnnfuse" in str(n.target) for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(x, GRAPH.edge_index), model(x, GRAPH.edge_index))
