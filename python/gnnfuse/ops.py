"""Functional API: thin wrappers over the registered ``torch.ops.gnnfuse`` ops.

Each function accepts the graph in one of three forms:

* a :class:`gnnfuse.Graph`: ``edge_weight`` (and any per-edge output) is in CSR
  (``g.col``) order; when ``edge_weight`` is None, ``g.values`` is used (None
  for graphs built from ``edge_index``, i.e. unweighted);
* a torch sparse matrix (CSR, or COO which is coalesced first), rows = targets:
  its values are the edge weights unless ``edge_weight`` (in CSR order) is given;
* a PyG-style ``edge_index`` (int32/int64 ``[2, E]``, row 0 source, row 1
  target), with ``num_nodes`` = rows of ``x`` (:func:`spmm`) or of ``u``
  (:func:`sddmm`, :func:`sddmm_spmm`), which must bound sources and targets
  alike (a square graph, as PyG assumes without ``size``): it is converted with
  ``torch.ops.gnnfuse.edge_index_to_csr`` on every call, ``edge_weight`` is in
  ``edge_index`` order, and :func:`sddmm` returns its scores in ``edge_index``
  order too.  Build a :class:`Graph` once to avoid the repeated conversion, or
  for bipartite graphs.

These wrappers are plain Python (they dispatch on the graph's type) and trace
fine under ``torch.compile``; TorchScript code should call the registered ops
directly, e.g. ``torch.ops.gnnfuse.spmm(rowptr, col, edge_weight, x)``.
All input checking happens in C++ and raises ``RuntimeError`` naming the op and
the argument.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .graph import Graph

__all__ = ["spmm", "sddmm", "sddmm_spmm", "edge_softmax"]

_Csc = Optional[Tuple[Tensor, Tensor, Tensor]]


def _csc_for(graph: GraphLike, *inputs: Optional[Tensor]) -> Tuple[_Csc, _Csc, _Csc]:
    """The CSC view to hand to an op (its ``colptr``, ``row``, ``perm`` arguments).

    A :class:`Graph` caches its CSC view: when a gradient will be taken it is built once
    (``Graph.csc()``) and reused by every backward over this graph; otherwise an already
    cached one is passed. For other graph forms the backward builds it when it needs it.
    """
    if isinstance(graph, Graph):
        needs = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
        csc = graph.csc() if needs else graph._csc
        if csc is not None:
            return csc[0], csc[1], csc[2]
    return None, None, None

GraphLike = Union[Graph, Tensor]

_SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def _resolve(
    graph: GraphLike, edge_weight: Optional[Tensor], num_nodes: int, fn: str
) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """-> (rowptr, col, edge_weight in CSR order, perm back to the caller's edge order or None)."""
    if isinstance(graph, Graph):
        if edge_weight is None:
            edge_weight = graph.values
        return graph.rowptr, graph.col, edge_weight, None
    if isinstance(graph, torch.Tensor):
        if graph.layout == torch.sparse_csr:
            if edge_weight is None:
                edge_weight = graph.values()
            return graph.crow_indices(), graph.col_indices(), edge_weight, None
        if graph.layout in _SPARSE_LAYOUTS:
            g = Graph.from_sparse(graph, validate=False)  # the op validates anyway
            if edge_weight is None:
                edge_weight = g.values
            return g.rowptr, g.col, edge_weight, None
        # A strided tensor: a PyG-style edge_index; the op checks its shape and dtype.
        rowptr, col, perm = torch.ops.gnnfuse.edge_index_to_csr(graph, num_nodes)
        if edge_weight is not None and edge_weight.dim() == 1 and edge_weight.size(0) == perm.size(0):
            edge_weight = edge_weight[perm]
        # (otherwise pass it on unchanged: the op rejects it with a message naming 'edge_weight')
        return rowptr, col, edge_weight, perm
    raise TypeError(
        f"gnnfuse.ops.{fn}: expected a gnnfuse.Graph, a torch sparse tensor or an "
        f"edge_index tensor, got {type(graph).__name__}"
    )


_REDUCE_OPS = {"sum": "spmm", "add": "spmm", "mean": "spmm_mean", "max": "spmm_max", "min": "spmm_min"}


def spmm(graph: GraphLike, x: Tensor, edge_weight: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """Sparse-dense product: ``Y[i, f] = reduce_{j -> i} w_ij * x[j, f]``.

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        x: ``[num_src_nodes, F]`` float32/float64 source features.
        edge_weight: optional ``[E]`` weights (1 if None).
        reduce: ``"sum"`` (``"add"``), ``"mean"`` (sum over the in-degree), ``"max"`` or
            ``"min"`` (a row without edges gives 0, as in PyG; the gradient goes to the
            chosen edge, the first one on ties).

    Returns:
        ``[num_nodes, F]``.
    """
    op = _REDUCE_OPS.get(reduce)
    if op is None:
        raise ValueError(f"gnnfuse.spmm: reduce must be one of {sorted(_REDUCE_OPS)}, got {reduce!r}")
    rowptr, col, w, _ = _resolve(graph, edge_weight, x.size(0), "spmm")
    colptr, row, perm = _csc_for(graph, w, x)
    out = getattr(torch.ops.gnnfuse, op)(rowptr, col, w, x, colptr, row, perm)
    return out[0] if reduce in ("max", "min") else out


def edge_softmax(graph: GraphLike, score: Tensor) -> Tensor:
    """Softmax of edge scores over each destination's incoming edges (GAT's normalisation).

    ``P[e] = exp(s[e] - m_i) / sum_{e' -> i} exp(s[e'] - m_i)`` for every edge ``e = j -> i``,
    with ``m_i`` the largest score into ``i`` (numerically stable; rows without edges have
    no entries).

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc; for an
            ``edge_index`` the number of nodes is taken as ``max index + 1``).
        score: ``[E]`` or ``[E, H]`` (one softmax per head) float32/float64 scores, in CSR
            order (``edge_index`` order for an ``edge_index`` graph).

    Returns:
        the shape and order of ``score``.
    """
    num_nodes = 0
    if isinstance(graph, torch.Tensor) and graph.layout == torch.strided:
        num_nodes = int(graph.max()) + 1 if graph.numel() > 0 else 0
    rowptr, col, _, perm = _resolve(graph, None, num_nodes, "edge_softmax")
    if perm is not None:
        score = score[perm] if score.dim() >= 1 and score.size(0) == perm.size(0) else score
    if score.dim() == 2:
        out = torch.ops.gnnfuse.edge_softmax_heads(rowptr, col, score)
    else:
        out = torch.ops.gnnfuse.edge_softmax(rowptr, col, score)
    if perm is not None:
        out = torch.index_copy(torch.empty_like(out), 0, perm, out)
    return out


def sddmm(
    graph: GraphLike, u: Tensor, v: Tensor, edge_weight: Optional[Tensor] = None, op: str = "dot"
) -> Tensor:
    """Sampled dense-dense operation, one value per edge ``e = j -> i``:

    * ``op="dot"``: ``E[e] = w_e * (u[i] . v[j])``, with ``u [num_nodes, K]``,
      ``v [num_src_nodes, K]``, optional ``edge_weight [E]``; returns ``[E]``;
    * ``op="add"`` / ``"mul"``: ``E[e, h] = u[i, h] + v[j, h]`` (or ``*``) per head, with
      ``u [num_nodes, H]``, ``v [num_src_nodes, H]`` (no edge weight); returns ``[E, H]``
      (GAT's attention logits are ``sddmm(g, a_dst, a_src, op="add")``).

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).

    Returns:
        per-edge values in CSR order (``edge_index`` order for an ``edge_index`` graph).
    """
    if op not in ("dot", "add", "mul"):
        raise ValueError(f"gnnfuse.sddmm: op must be 'dot', 'add' or 'mul', got {op!r}")
    if op != "dot" and edge_weight is not None:
        raise ValueError(f"gnnfuse.sddmm: op={op!r} takes no edge_weight")
    rowptr, col, w, perm = _resolve(graph, edge_weight, u.size(0), "sddmm")
    colptr, row, cperm = _csc_for(graph, w, u, v)
    if op == "dot":
        out = torch.ops.gnnfuse.sddmm(rowptr, col, w, u, v, colptr, row, cperm)
    else:
        out = getattr(torch.ops.gnnfuse, "sddmm_" + op)(rowptr, col, u, v, colptr, row, cperm)
    if perm is not None:
        # CSR position p holds input edge perm[p]: scatter back to input order.
        out = torch.index_copy(torch.empty_like(out), 0, perm, out)
    return out


def sddmm_spmm(
    graph: GraphLike,
    u: Tensor,
    v: Tensor,
    x: Tensor,
    edge_weight: Optional[Tensor] = None,
) -> Tensor:
    """Fused SDDMM -> SpMM: ``Y[i, f] = sum_{j -> i} w_ij * (u[i] . v[j]) * x[j, f]``.

    The per-edge scores are never materialised.

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        u: ``[num_nodes, K]``; v: ``[num_src_nodes, K]``; x: ``[num_src_nodes, F]``.
        edge_weight: optional ``[E]`` weights (1 if None).

    Returns:
        ``[num_nodes, F]``.
    """
    rowptr, col, w, _ = _resolve(graph, edge_weight, u.size(0), "sddmm_spmm")
    colptr, row, perm = _csc_for(graph, w, u, v, x)
    return torch.ops.gnnfuse.sddmm_spmm(rowptr, col, w, u, v, x, colptr, row, perm)
