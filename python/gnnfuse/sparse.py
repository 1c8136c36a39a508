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

import weakref
from collections import OrderedDict
from typing import Optional, Tuple

import torch
from torch import Tensor

from .graph import Graph, infer_num_nodes, resolve, to_graph

__all__ = ["spgemm", "coarsen", "assignment_csr"]


def _as_matrix(m, values: Optional[Tensor], name: str) -> Tuple[Graph, Optional[Tensor]]:
    """-> (pattern as a Graph, values in its CSR order or None for an unweighted matrix)."""
    if isinstance(m, Tensor) and m.layout == torch.sparse_csr:
        g = Graph(m.crow_indices(), m.col_indices(), m.size(0), m.size(1))
        return g, m.values() if values is None else values
    if not isinstance(m, Graph):
        if isinstance(m, Tensor) and m.layout == torch.strided:
            raise TypeError(f"gnnfuse.spgemm: {name} must be a sparse matrix (gnnfuse.Graph, torch sparse tensor, scipy.sparse), got a dense tensor")
        m = Graph.from_sparse(m) if isinstance(m, Tensor) else to_graph(m)
    return m, m.values if values is None else values


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
    # Operands of different forms: a missing operand's ones take the other's dtype, and int32
    # indices meet int64 ones as int64 (explicit values of two dtypes are the op's error).
    dtype = va.dtype if va is not None else vb.dtype if vb is not None else torch.get_default_dtype()
    va = torch.ones(ga.num_edges, dtype=dtype, device=ga.device) if va is None else va
    vb = torch.ones(gb.num_edges, dtype=dtype, device=gb.device) if vb is None else vb
    arowptr, acol, browptr, bcol = ga.rowptr, ga.col, gb.rowptr, gb.col
    if not (arowptr.dtype == acol.dtype == browptr.dtype == bcol.dtype):
        arowptr, acol, browptr, bcol = arowptr.long(), acol.long(), browptr.long(), bcol.long()
    n_cols = gb.num_src_nodes
    crowptr, ccol, values = torch.ops.gnnfuse.spgemm_assemble(arowptr, acol, va, browptr, bcol, vb, n_cols)
    return Graph(crowptr, ccol, ga.num_nodes, n_cols), values


def assignment_csr(cluster: Tensor, num_clusters: int, index_dtype: torch.dtype) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The hard assignment ``P`` [n x num_clusters] as CSR (one entry per node) and ``Pᵀ``
    (the members of each cluster, increasing): ``(prowptr, pcol, mrowptr, mcol)``."""
    if cluster.dim() != 1 or cluster.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(
            f"gnnfuse.coarsen: argument 'cluster' must be a 1-D int32 or int64 tensor (got {cluster.dtype} of shape {tuple(cluster.shape)})"
        )
    if num_clusters < 0:
        raise RuntimeError(f"gnnfuse.coarsen: argument 'num_clusters' must be >= 0 (got {num_clusters})")
    n = cluster.numel()
    prowptr = torch.arange(n + 1, dtype=index_dtype, device=cluster.device)
    pcol = cluster.to(index_dtype, copy=True)  # not `cluster` itself: the cache below must not keep it alive
    # Compiled, the range check is csr_transpose's below (a Python one would guard on values).
    if n and not torch.compiler.is_compiling() and (int(cluster.min()) < 0 or int(cluster.max()) >= num_clusters):
        bad = int(((cluster < 0) | (cluster >= num_clusters)).nonzero()[0])
        raise RuntimeError(
            f"gnnfuse.coarsen: argument 'cluster' must hold values in [0, {num_clusters}) (got cluster[{bad}] = {int(cluster[bad])})"
        )
    # Pᵀ is P's CSC view: the members of each cluster, in increasing order.
    mrowptr, mcol, _ = torch.ops.gnnfuse.csr_transpose(prowptr, pcol, num_clusters)
    return prowptr, pcol, mrowptr, mcol


# The assignment CSRs of the clusterings used last: coarsening the same graph by the same
# `cluster` tensor (every epoch of a pooling layer) passes the same index tensors again, so the
# op's pattern cache (keyed on them) hits. An entry goes when its `cluster` tensor is freed, or
# when the tensor has been changed in place (its version counter), and a hit also compares the
# contents with a copy (one pass over n entries): a buffer refilled behind PyTorch's back (a
# numpy array shared by torch.from_numpy, a write through .data) is not reused stale.
_ASSIGNMENTS: "OrderedDict[int, Tuple[weakref.ref, int, int, int, torch.dtype, Tensor, Tuple[Tensor, Tensor, Tensor, Tensor]]]" = OrderedDict()
_ASSIGNMENTS_KEPT = 8


def _assignment(cluster: Tensor, num_clusters: int, index_dtype: torch.dtype) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`assignment_csr`, cached per ``cluster`` tensor (eager, non-inference tensors)."""
    if torch.compiler.is_compiling() or cluster.is_inference():
        return assignment_csr(cluster, num_clusters, index_dtype)
    key = id(cluster)
    hit = _ASSIGNMENTS.get(key)
    if hit is not None:
        ref, version, ptr, n, dt, seen, result = hit
        if (ref() is cluster and version == cluster._version and ptr == cluster.data_ptr() and n == num_clusters and dt == index_dtype
                and torch.equal(seen, cluster)):
            _ASSIGNMENTS.move_to_end(key)
            return result
    result = assignment_csr(cluster, num_clusters, index_dtype)

    def forget(dead: "weakref.ref", key: int = key) -> None:
        entry = _ASSIGNMENTS.get(key)
        if entry is not None and entry[0] is dead:
            del _ASSIGNMENTS[key]

    _ASSIGNMENTS[key] = (weakref.ref(cluster, forget), cluster._version, cluster.data_ptr(), num_clusters, index_dtype,
                         cluster.detach().clone(), result)
    _ASSIGNMENTS.move_to_end(key)
    while len(_ASSIGNMENTS) > _ASSIGNMENTS_KEPT:
        _ASSIGNMENTS.popitem(last=False)
    return result


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
    Called again with the same :class:`Graph` and the same ``cluster`` tensor (unchanged), only
    the numeric pass runs, on the cached coarse pattern; an ``edge_index`` is converted to a
    new CSR on every call, so pass a Graph where that matters.
    A soft or general ``P`` goes through :func:`spgemm` twice (``spgemm(spgemm(Pᵀ, A), P)``).
    """
    if num_clusters is None:
        num_clusters = infer_num_nodes(cluster)
    rowptr, col, w = _coarsen_inputs(graph, cluster, edge_weight)
    return _coarsen_csr(rowptr, col, w, _assignment(cluster, num_clusters, rowptr.dtype), num_clusters, remove_self_loops)


def _coarsen_inputs(graph, cluster: Tensor, edge_weight: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """The graph's CSR and its weights in CSR order (ones when missing), checked against
    ``cluster``."""
    n = cluster.numel()
    if isinstance(graph, Tensor) and graph.layout != torch.strided:
        graph = Graph.from_sparse(graph, validate=False)  # the op validates it
    elif not isinstance(graph, (Graph, Tensor)):
        graph = to_graph(graph)  # scipy.sparse, DGL
    if isinstance(graph, Graph) and graph.num_src_nodes != graph.num_nodes:
        raise RuntimeError(f"gnnfuse.coarsen: argument 'graph' must be square (got {graph.num_nodes} x {graph.num_src_nodes})")
    rowptr, col, w, _ = resolve(graph, edge_weight, n, "coarsen")
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
