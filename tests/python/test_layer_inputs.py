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
