"""Graph clustering for coarsening and pooling: Graclus-style heavy-edge matching and a
multilevel helper. See :func:`gnnfuse.coarsen` and :class:`gnnfuse.nn.CoarsenPool`."""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .graph import Graph, infer_num_nodes, resolve

__all__ = ["heavy_edge_matching", "coarsen_levels"]


def heavy_edge_matching(
    graph,
    edge_weight: Optional[Tensor] = None,
    num_nodes: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    order: Optional[Tensor] = None,
) -> Tuple[Tensor, int]:
    """Greedy heavy-edge matching (Graclus): returns ``(cluster, num_clusters)``.

    Nodes are visited in a random order (``generator``; or the permutation ``order``); an
    unmatched node joins the unmatched neighbour of largest normalized weight
    ``w(u, v) * (1/d(u) + 1/d(v))`` (``d``: weighted degree), or stays alone. Every cluster has
    one or two nodes, so a level roughly halves the graph. Neighbours are a node's row in the
    CSR (its in-neighbours for an ``edge_index``): pass a symmetric graph for an undirected
    matching. ``edge_weight`` follows the graph's edge order; missing weights count as 1.
    """
    if isinstance(graph, Graph):
        n = graph.num_nodes
    elif num_nodes is not None:
        n = num_nodes
    elif isinstance(graph, Tensor) and graph.layout == torch.strided:
        n = infer_num_nodes(graph)
    else:
        n = graph.shape[0]
    rowptr, col, w, _ = resolve(graph, edge_weight, n, "heavy_edge_matching")
    n = rowptr.numel() - 1
    if order is None:
        order = torch.randperm(n, generator=generator, device=rowptr.device)
    cluster = torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, w, order)
    return cluster, infer_num_nodes(cluster)  # ids are consecutive


def coarsen_levels(
    graph,
    levels: int,
    edge_weight: Optional[Tensor] = None,
    generator: Optional[torch.Generator] = None,
    remove_self_loops: bool = False,
) -> List[Tuple[Graph, Tensor, Tensor]]:
    """``levels`` rounds of matching and coarsening: a list of ``(graph, edge_weight, cluster)``
    per level, where ``cluster`` maps the previous level's nodes to this level's."""
    from .sparse import coarsen

    out: List[Tuple[Graph, Tensor, Tensor]] = []
    g, w = graph, edge_weight
    for _ in range(levels):
        cluster, m = heavy_edge_matching(g, w, generator=generator)
        g, w = coarsen(g, cluster, m, w, remove_self_loops=remove_self_loops)
        out.append((g, w, cluster))
    return out
