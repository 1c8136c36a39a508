"""PyG's graph plumbing, as the layers (:mod:`gnnfuse.nn`) and the functional API
(:mod:`gnnfuse.ops`) need it: what ``torch_geometric.utils`` (``add_self_loops``,
``add_remaining_self_loops``, ``remove_self_loops``, ``to_edge_index``, ``set_sparse_value``)
and PyG's ``gcn_norm`` do, with PyG's edge orders and ``fill_value`` rules, without importing
torch_geometric.

Internal: the names here are the package's helpers, not its API. Every function is plain
tensor code that TorchScript compiles and ``torch.compile`` traces; those used on the layers'
fused paths keep fixed sizes (no boolean masks: no data-dependent shape under ``torch.compile``).
"""

from typing import Optional, Tuple, Union

import torch
from torch import Tensor


# ---------------------------------------------------------------------------------------------
# Sparse adjacencies (adj_t[i, j] stored: an edge j -> i)


def to_edge_index(layer: str, adj_t: Tensor) -> Tuple[Tensor, Tensor]:
    """``(edge_index [2, E] int64: sources, targets; values)`` of a torch sparse adjacency
    ``adj_t`` (``adj_t[i, j]`` stored: an edge j -> i), in the order of PyG's ``to_edge_index``
    (stored order; duplicates of an uncoalesced COO kept)."""
    if adj_t.sparse_dim() != 2:
        raise ValueError("gnnfuse.nn." + layer + ": a sparse edge_index must be an adjacency adj_t (2 sparse dimensions)")
    if adj_t.layout == torch.sparse_coo:
        if adj_t.is_coalesced():
            idx, values = adj_t.indices(), adj_t.values()
        else:
            idx, values = adj_t._indices(), adj_t._values()
        return torch.stack([idx[1], idx[0]]).long(), values
    if adj_t.layout == torch.sparse_csr:
        crow = adj_t.crow_indices()
        rows = torch.repeat_interleave(torch.arange(adj_t.size(0), device=crow.device), crow.diff())
        return torch.stack([adj_t.col_indices().long(), rows]), adj_t.values()
    if adj_t.layout == torch.sparse_csc:
        ccol = adj_t.ccol_indices()
        cols = torch.repeat_interleave(torch.arange(adj_t.size(1), device=ccol.device), ccol.diff())
        return torch.stack([cols, adj_t.row_indices().long()]), adj_t.values()
    raise ValueError("gnnfuse.nn." + layer + ": edge_index must be a [2, E] tensor or a sparse COO, CSR or CSC adjacency")


def sparse_like(adj_t: Tensor, edge_index: Tensor, values: Tensor, num_dst: int, num_src: int) -> Tensor:
    """``adj_t [N_dst, N_src]``'s layout over ``edge_index`` (a sparse input's edges: in
    ``to_edge_index``'s order, or sorted by target) with ``values`` (PyG's ``set_sparse_value``:
    COO coalesced, CSR / CSC in the edges' order within each row / column)."""
    size = [num_dst, num_src] + list(values.shape[1:])
    if adj_t.layout == torch.sparse_coo:
        index = torch.stack([edge_index[1], edge_index[0]])
        return torch.sparse_coo_tensor(index, values, size).coalesce()
    if adj_t.layout == torch.sparse_csc:
        order = torch.sort(edge_index[0], stable=True)[1]
        counts = torch.bincount(edge_index[0], minlength=num_src)
        ccol = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        return torch.sparse_csc_tensor(ccol, edge_index[1][order], values[order], size)
    order = torch.sort(edge_index[1], stable=True)[1]
    counts = torch.bincount(edge_index[1], minlength=num_dst)
    crow = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return torch.sparse_csr_tensor(crow, edge_index[0][order], values[order], size)


# ---------------------------------------------------------------------------------------------
# Self-loops


def add_self_loops(edge_index: Tensor, edge_weight: Tensor, num_nodes: int, fill: float) -> Tuple[Tensor, Tensor]:
    """PyG's ``add_self_loops``: one loop per node appended, weighing ``fill``; existing loops
    are kept (what PyG's ``gcn_norm`` does to a sparse ``adj_t``)."""
    nodes = torch.arange(num_nodes, dtype=edge_index.dtype, device=edge_index.device)
    edge_index = torch.cat([edge_index, torch.stack([nodes, nodes])], 1)
    edge_weight = torch.cat([edge_weight, edge_weight.new_full((num_nodes,), fill)])
    return edge_index, edge_weight


def self_loop_attr(edge_attr: Tensor, edge_index: Tensor, n: int, num: int, fill_value: Union[float, int, Tensor, str]) -> Tensor:
    """Features of the added self-loops of nodes [0, n), as the ``fill_value`` of PyG's
    ``add_self_loops`` / ``add_remaining_self_loops``: a number, a tensor, or ``"mean"``,
    ``"add"`` (``"sum"``), ``"max"``, ``"min"``, ``"mul"`` of the incoming edges' features other
    than self-loops (these reduce into a spare row ``num``)."""
    fill = fill_value
    shape = [n] + list(edge_attr.shape[1:])
    if isinstance(fill, float):  # (two tests: TorchScript refines a Union by one isinstance only)
        return edge_attr.new_full(shape, fill)
    if isinstance(fill, int):
        return edge_attr.new_full(shape, float(fill))
    if isinstance(fill, Tensor):
        return fill.to(edge_attr).expand(shape).clone()
    reduce = ""
    if fill == "add" or fill == "sum":
        reduce = "sum"
    elif fill == "mean":
        reduce = "mean"
    elif fill == "max":
        reduce = "amax"
    elif fill == "min":
        reduce = "amin"
    elif fill == "mul":
        reduce = "prod"
    else:
        raise ValueError("gnnfuse.nn.GATConv: unknown fill_value " + fill)
    # int64 index: scatter_reduce's backward is wrong with an int32 one
    dst = torch.where(edge_index[0] == edge_index[1], num, edge_index[1].long())
    shape[0] = num + 1
    out = edge_attr.new_zeros(shape)
    index = dst.view([-1] + [1] * (edge_attr.dim() - 1)).expand_as(edge_attr)
    return out.scatter_reduce(0, index, edge_attr, reduce=reduce, include_self=False)[:n]


def remove_and_add_self_loops(
    edge_index: Tensor, edge_attr: Optional[Tensor], num_src: int, num_dst: int, fill_value: Union[float, int, Tensor, str]
) -> Tuple[Tensor, Optional[Tensor]]:
    """PyG's ``remove_self_loops`` then ``add_self_loops`` (GATConv's message passing): the
    input's edges other than self-loops, then one loop per node ``< min(N_src, N_dst)`` with
    features from ``fill_value`` (data-dependent size: PyG's path only)."""
    n = min(num_src, num_dst)
    keep = edge_index[0] != edge_index[1]
    if edge_attr is not None:
        loop_attr = self_loop_attr(edge_attr, edge_index, n, max(num_src, num_dst), fill_value)
        edge_attr = torch.cat([edge_attr[keep], loop_attr], 0)
    nodes = torch.arange(n, dtype=edge_index.dtype, device=edge_index.device)
    edge_index = torch.cat([edge_index[:, keep], torch.stack([nodes, nodes])], 1)
    return edge_index, edge_attr


def redirect_self_loops(
    edge_index: Tensor, edge_attr: Optional[Tensor], n: int, num: int, pad: int, fill_value: Union[float, int, Tensor, str]
) -> Tuple[Tensor, Optional[Tensor]]:
    """:func:`remove_and_add_self_loops` in fixed sizes (no data-dependent shape under
    ``torch.compile``): an existing self-loop is redirected to the padding source ``pad`` (the
    caller gives it a weight of exactly 0) and the loops ``(v, v)`` of the nodes ``v < n`` are
    appended, their features from ``fill_value`` over the other incoming edges (``num``: the
    larger node count)."""
    loop = edge_index[0] == edge_index[1]
    nodes = torch.arange(n, dtype=edge_index.dtype, device=edge_index.device)
    if edge_attr is not None:
        # The redirected loops' features zeroed: PyG removes those edges, so that a NaN or inf
        # feature of theirs (a missing value) reaches neither the output nor a gradient (also
        # not through the fill's reduction, where they land in a spare row).
        edge_attr = edge_attr.masked_fill(loop.view([-1] + [1] * (edge_attr.dim() - 1)), 0.0)
        edge_attr = torch.cat([edge_attr, self_loop_attr(edge_attr, edge_index, n, num, fill_value)], 0)
    edge_index = torch.cat(
        [torch.stack([torch.where(loop, pad, edge_index[0]), edge_index[1]]), torch.stack([nodes, nodes])], 1
    )
    return edge_index, edge_attr


def sparse_self_loops(
    edge_index: Tensor, edge_attr: Optional[Tensor], num_src: int, num_dst: int, fill_value: Union[float, int, Tensor, str]
) -> Tuple[Tensor, Optional[Tensor]]:
    """PyG's self-loops on a sparse ``adj_t``: the existing loops removed, one per node
    ``< min(N_src, N_dst)`` added (features from ``fill_value``, over the other incoming edges)
    and the edges coalesced (duplicates merged, their features summed), sorted by (target,
    source)."""
    keep = edge_index[0] != edge_index[1]
    edge_index = edge_index[:, keep]
    n = min(num_src, num_dst)
    nodes = torch.arange(n, dtype=edge_index.dtype, device=edge_index.device)
    if edge_attr is not None:
        edge_attr = edge_attr[keep]
        edge_attr = torch.cat([edge_attr, self_loop_attr(edge_attr, edge_index, n, max(num_src, num_dst), fill_value)], 0)
    edge_index = torch.cat([edge_index, torch.stack([nodes, nodes])], 1)
    key, order = torch.sort(edge_index[1] * num_src + edge_index[0])
    first = torch.ones_like(key, dtype=torch.bool)
    first[1:] = key[1:] != key[:-1]
    edge_index = edge_index[:, order][:, first]
    if edge_attr is not None:
        group = torch.cumsum(first.long(), 0) - 1
        merged = edge_attr.new_zeros([edge_index.size(1)] + list(edge_attr.shape[1:]))
        edge_attr = merged.index_add(0, group, edge_attr[order])
    return edge_index, edge_attr


# ---------------------------------------------------------------------------------------------
# GCN's normalisation (PyG's gcn_norm)


def gcn_norm_edges(
    edge_index: Tensor,
    edge_weight: Optional[Tensor],
    num_nodes: int,
    improved: bool,
    add_self_loops: bool,
    normalize: bool,
    dtype: torch.dtype,
) -> Tuple[Tensor, Tensor]:
    """:func:`gnnfuse.ops.gcn_norm`'s edges and weights before the CSR: the input edges (with
    ``add_self_loops``, its self-loops weighing 0), then one self-loop per node."""
    fill = 2.0 if improved and edge_weight is not None else 1.0
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    if add_self_loops:
        # Fixed sizes (no boolean masks, so torch.compile sees no data-dependent shape): existing
        # self-loops stay with weight 0 and one loop per node is appended, weighing what the
        # node's existing loop weighed (the last one, as PyG), else `fill`.
        loop = edge_index[0] == edge_index[1]
        slot = torch.where(loop, edge_index[0], num_nodes)  # other edges write a spare slot
        loop_w = torch.full((num_nodes + 1,), fill, dtype=edge_weight.dtype, device=edge_weight.device)
        loop_w = loop_w.index_put((slot,), edge_weight)
        nodes = torch.arange(num_nodes, dtype=edge_index.dtype, device=edge_index.device)
        edge_index = torch.cat([edge_index, torch.stack([nodes, nodes])], 1)
        edge_weight = torch.cat([edge_weight.masked_fill(loop, 0.0), loop_w[:num_nodes]])
    if normalize:
        # Degrees and scales in float32 for bfloat16/float16 weights (a degree summed in
        # bfloat16 loses its low bits past 256 edges), rounded once to the weights' dtype.
        low = edge_weight.dtype in (torch.bfloat16, torch.float16)
        w = edge_weight.float() if low else edge_weight
        deg = torch.zeros(num_nodes, dtype=w.dtype, device=w.device).index_add(0, edge_index[1], w)
        dis = deg.pow(-0.5)
        dis = dis.masked_fill(torch.isinf(dis), 0.0)
        edge_weight = (dis[edge_index[0]] * w * dis[edge_index[1]]).to(edge_weight.dtype)
    return edge_index, edge_weight


def pyg_gcn_norm(
    edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int, improved: bool, add_self_loops: bool, dtype: torch.dtype
) -> Tuple[Tensor, Tensor]:
    """PyG's ``gcn_norm`` edges in its message order: the input's edges other than self-loops
    (with ``add_self_loops``), then one loop per node, normalised (data-dependent size)."""
    num_input = edge_index.size(1)
    edge_index, edge_weight = gcn_norm_edges(edge_index, edge_weight, num_nodes, improved, add_self_loops, True, dtype)
    if add_self_loops:  # PyG drops the input's self-loops (here weighing 0): its message order
        keep = torch.ones(edge_index.size(1), dtype=torch.bool, device=edge_index.device)
        keep[:num_input] = edge_index[0, :num_input] != edge_index[1, :num_input]
        edge_index, edge_weight = edge_index[:, keep], edge_weight[keep]
    return edge_index, edge_weight
