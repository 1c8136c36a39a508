"""Sparse x sparse products: SpGEMM and graph coarsening Pᵀ·A·P.

Both run generated kernels (``ops/spgemm.spec``, ``ops/coarsen.spec``). The first call on
given operand patterns builds the output pattern (sorted columns, allocated exactly) and its
values in one pass through a sparse workspace (``<op>_assemble``) and caches the pattern; later
calls on the same patterns (every epoch of a training loop over a fixed graph) only run the
numeric pass on it. When a gradient is needed the pattern comes from the symbolic pass (also
cached) and the values from the differentiable op. Gradients with respect to both operands' values come from the
generator (sampled products on the operands' patterns); they run from Python, TorchScript
and C++ alike.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .graph import Graph, _infer_num_nodes, to_graph

__all__ = ["spgemm", "coarsen", "assignment_csr"]


def _as_matrix(m, values: Optional[Tensor], name: str) -> Tuple[Graph, Tensor]:
    """-> (pattern as a Graph, values in its CSR order)."""
    if isinstance(m, Tensor) and m.layout == torch.sparse_csr:
        g = Graph(m.crow_indices(), m.col_indices(), m.size(0), m.size(1))
        return g, m.values() if values is None else values
    if not isinstance(m, Graph):
        if isinstance(m, Tensor) and m.layout == torch.strided:
            raise TypeError(f"gnnfuse.spgemm: {name} must be a sparse matrix (gnnfuse.Graph, torch sparse tensor, scipy.sparse), got a dense tensor")
        m = Graph.from_sparse(m) if isinstance(m, Tensor) else to_graph(m)
    if values is None:
        values = m.values
    if values is None:
        values = torch.ones(m.col.numel(), dtype=torch.get_default_dtype(), device=m.col.device)
    return m, values


def spgemm(
    a, b, a_values: Optional[Tensor] = None, b_values: Optional[Tensor] = None
) -> Tuple[Graph, Tensor]:
    """``C = A @ B`` for sparse ``A`` [n x k] and ``B`` [k x m].

    ``a`` and ``b`` are :class:`gnnfuse.Graph` (a matrix with rows = targets), torch sparse
    tensors (COO or CSR) or scipy.sparse matrices. Values come from ``a_values``/``b_values``
    (in the operand's CSR order; differentiable), else from the operand itself, else ones.
    Returns ``(C, values)``: ``C`` a :class:`Graph` [n x m] with sorted columns and no
    duplicates, ``values`` in its CSR order.
    """
    ga, va = _as_matrix(a, a_values, "a")
    gb, vb = _as_matrix(b, b_values, "b")
    if ga.num_src_nodes != gb.num_nodes:
        raise RuntimeError(
            f"gnnfuse.spgemm: argument 'b' must have {ga.num_src_nodes} rows, the columns of 'a' "
            f"(got {gb.num_nodes} x {gb.num_src_nodes})"
        )
    n_cols = gb.num_src_nodes
    crowptr, ccol, values = torch.ops.gnnfuse.spgemm_assemble(ga.rowptr, ga.col, va, gb.rowptr, gb.col, vb, n_cols)
    return Graph(crowptr, ccol, ga.num_nodes, n_cols), values


def assignment_csr(cluster: Tensor, num_clusters: int, index_dtype: torch.dtype) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The hard assignment ``P`` [n x num_clusters] as CSR (one entry per node) and ``Pᵀ``
    (the members of each cluster, increasing): ``(prowptr, pcol, mrowptr, mcol)``."""
    if cluster.dim() != 1 or cluster.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(
            f"gnnfuse.coarsen: argument 'cluster' must be a 1-D int32 or int64 tensor (got {cluster.dtype} of shape {tuple(cluster.shape)})"
        )
    n = cluster.numel()
    prowptr = torch.arange(n + 1, dtype=index_dtype, device=cluster.device)
    pcol = cluster.to(index_dtype)
    if n and (int(cluster.min()) < 0 or int(cluster.max()) >= num_clusters):
        bad = int(((cluster < 0) | (cluster >= num_clusters)).nonzero()[0])
        raise RuntimeError(
            f"gnnfuse.coarsen: argument 'cluster' must hold values in [0, {num_clusters}) (got cluster[{bad}] = {int(cluster[bad])})"
        )
    counts = torch.bincount(cluster.long(), minlength=num_clusters)
    mrowptr = torch.zeros(num_clusters + 1, dtype=torch.int64, device=cluster.device)
    torch.cumsum(counts, 0, out=mrowptr[1:])
    mcol = torch.sort(cluster.long(), stable=True).indices
    return prowptr, pcol, mrowptr.to(index_dtype), mcol.to(index_dtype)


def coarsen(
    graph,
    cluster: Tensor,
    num_clusters: Optional[int] = None,
    edge_weight: Optional[Tensor] = None,
    remove_self_loops: bool = False,
) -> Tuple[Graph, Tensor]:
    """The coarse graph ``Pᵀ·A·P`` of a hard assignment: node ``i`` goes to cluster ``cluster[i]``.

    Edge ``(i -> j)`` of weight ``w`` adds ``w`` to coarse edge ``(cluster[i] -> cluster[j])``;
    merged edges sum, missing weights count as 1, coarse self-loops (edges inside a cluster)
    are kept unless ``remove_self_loops``. One fused kernel: per coarse row, over its member
    nodes' edges, into a workspace over the clusters; ``A·P`` is never built. Differentiable
    with respect to ``edge_weight`` (given in the graph's edge order: ``edge_index`` order for
    an ``edge_index``, CSR order for a Graph or a sparse tensor).

    Returns ``(coarse_graph, coarse_edge_weight)``, the weights in the coarse graph's CSR order.
    A soft or general ``P`` goes through :func:`spgemm` twice (``spgemm(spgemm(Pᵀ, A), P)``).
    """
    if num_clusters is None:
        num_clusters = _infer_num_nodes(cluster)
    rowptr, col, w = _coarsen_inputs(graph, cluster, edge_weight)
    return _coarsen_csr(rowptr, col, w, assignment_csr(cluster, num_clusters, rowptr.dtype), num_clusters, remove_self_loops)


def _coarsen_inputs(graph, cluster: Tensor, edge_weight: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """The graph's CSR and its weights in CSR order (ones when missing), checked against
    ``cluster``."""
    from .ops import _resolve

    n = cluster.numel()
    if isinstance(graph, Graph) and graph.num_src_nodes != graph.num_nodes:
        raise RuntimeError(f"gnnfuse.coarsen: argument 'graph' must be square (got {graph.num_nodes} x {graph.num_src_nodes})")
    rowptr, col, w, _ = _resolve(graph, edge_weight, n, "coarsen")
    if rowptr.numel() - 1 != n:
        raise RuntimeError(
            f"gnnfuse.coarsen: argument 'cluster' must have one entry per node, {rowptr.numel() - 1} (got {n})"
        )
    if w is None:
        w = torch.ones(col.numel(), dtype=torch.get_default_dtype(), device=col.device)
    return rowptr, col, w


def _coarsen_csr(
    rowptr: Tensor, col: Tensor, w: Tensor, assignment: Tuple[Tensor, Tensor, Tensor, Tensor], num_clusters: int, remove_self_loops: bool
) -> Tuple[Graph, Tensor]:
    """Pᵀ·A·P of a CSR (weights in CSR order) and an :func:`assignment_csr`."""
    prowptr, pcol, mrowptr, mcol = assignment
    crowptr, ccol, values = torch.ops.gnnfuse.coarsen_assemble(mrowptr, mcol, rowptr, col, w, prowptr, pcol, num_clusters)
    if remove_self_loops:
        row = torch.repeat_interleave(torch.arange(num_clusters, device=ccol.device), crowptr[1:].long() - crowptr[:-1].long())
        keep = ccol.long() != row
        counts = torch.zeros(num_clusters, dtype=torch.int64, device=ccol.device).index_add_(0, row, keep.long())
        crowptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]).to(ccol.dtype)
        ccol = ccol[keep]
        values = values[keep]
    return Graph(crowptr, ccol, num_clusters, num_clusters), values
