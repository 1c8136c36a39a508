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

import contextlib
import math
import warnings
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import backends as _backends
from .graph import SPARSE_LAYOUTS, Graph, GraphLike, implicit_weights, is_convertible, resolve, to_graph
from .utils import gcn_norm_edges

__all__ = ["spmm", "sddmm", "sddmm_spmm", "edge_softmax", "gat", "graph_attention", "gcn", "gcn_norm", "force_variant",
           "variant_count", "last_variant"]

_Csc = Optional[Tuple[Tensor, Tensor, Tensor]]


def _csc_for(graph: GraphLike, *inputs: Optional[Tensor]) -> Tuple[_Csc, _Csc, _Csc]:
    """The CSC view to hand to an op (its ``colptr``, ``row``, ``perm`` arguments).

    A :class:`Graph` caches its CSC view: when a gradient will be taken it is built once
    (``Graph.csc()``) and reused by every backward over this graph; otherwise an already
    cached one is passed. For other graph forms the backward builds it when it needs it.
    """
    if isinstance(graph, Graph):
        needs = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
        csc = graph.csc() if needs else graph.cached_csc()
        if csc is not None:
            return csc[0], csc[1], csc[2]
    return None, None, None

def _node_counts(graph: GraphLike) -> Optional[Tuple[int, int]]:
    """(targets, sources) of a graph form that fixes them: a :class:`Graph`, a 2-D torch sparse
    matrix, a scipy.sparse matrix or a DGL graph; None for an ``edge_index`` (its counts come
    from the tensors, and the op checks the indices against them)."""
    if isinstance(graph, Graph):
        return graph.num_nodes, graph.num_src_nodes
    if isinstance(graph, Tensor):
        if graph.layout != torch.strided and graph.dim() == 2:
            return graph.size(0), graph.size(1)
        return None
    if is_convertible(graph):
        if hasattr(graph, "num_dst_nodes"):  # DGL
            return int(graph.num_dst_nodes()), int(graph.num_src_nodes())
        if len(graph.shape) == 2:
            return int(graph.shape[0]), int(graph.shape[1])
    return None


def _check_rows(fn: str, graph: GraphLike, **tensors: Tuple[Optional[Tensor], bool]) -> None:
    """A graph form that fixes its node counts (:func:`_node_counts`: a Graph, a sparse matrix
    [targets x sources]): each ``name=(tensor, is_source)`` must have as many rows as its
    sources (source) or targets (target), as ``torch.sparse.mm`` demands."""
    counts = _node_counts(graph)
    if counts is None:
        return
    for name, (t, source) in tensors.items():
        n = counts[1] if source else counts[0]
        if t is not None and (t.dim() == 0 or t.size(0) != n):
            raise RuntimeError(
                f"gnnfuse.{fn}: argument '{name}' must have {n} rows, the graph's "
                f"{'source' if source else 'target'} nodes (got shape {tuple(t.shape)})"
            )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_edge_weight(where: str, edge_weight: Tensor, num_edges: int) -> Tensor:
    """``edge_weight``: one value per edge, ``[E]`` (or ``[E, 1]``, as PyG's GCNConv takes it),
    returned as ``[E]``. TorchScript- and torch.compile-friendly: conditions on sizes, messages
    of sizes (the layers cast its dtype)."""
    if edge_weight.dim() == 2 and _concrete(edge_weight.size(1)) == 1:
        edge_weight = edge_weight.view(-1)
    if edge_weight.dim() != 1:
        raise ValueError(f"{where}: argument 'edge_weight' must be 1-D [E] (got a {edge_weight.dim()}-D tensor)")
    return _check_per_edge(where, "edge_weight", "value", edge_weight, num_edges)


def _trace_check_per_edge(where: str, name: str, what: str, t: Tensor, num_edges: Tensor) -> Tensor:
    if t.size(0) != int(num_edges):
        raise RuntimeError(
            where + ": argument '" + name + "' must have one " + what + " per edge, E=" + str(int(num_edges))
            + " (got " + str(t.size(0)) + ")"
        )
    return t


def _check_per_edge(where: str, name: str, what: str, t: Tensor, num_edges: int) -> Tensor:
    """``t`` (argument ``name``) has one ``what`` (value, row) per edge: ``t.size(0) == num_edges``.
    Returns ``t``; traced, the check stays in the trace, on the sizes of each call (use the
    returned tensor)."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing():
            return _scripted(_trace_check_per_edge)(where, name, what, t, _size_tensor(num_edges))
    if t.size(0) != num_edges:
        raise RuntimeError(f"{where}: argument '{name}' must have one {what} per edge, E={num_edges} (got {t.size(0)})")
    return t


def _check_like(fn: str, name: str, t: Tensor, ref_name: str, ref: Tensor) -> None:
    """``t`` has the dtype and device of ``ref`` (the dtype outside autocast only: under
    ``torch.autocast`` the ops cast their floating inputs themselves)."""
    if t.dtype != ref.dtype and not torch.is_autocast_enabled(ref.device.type):
        raise RuntimeError(
            f"gnnfuse.{fn}: argument '{name}' must have the dtype of '{ref_name}', {_dtype_name(ref.dtype)} "
            f"(got {_dtype_name(t.dtype)})"
        )
    if t.device != ref.device:
        raise RuntimeError(f"gnnfuse.{fn}: argument '{name}' must be on the device of '{ref_name}', {ref.device} (got {t.device})")


def _check_floating(fn: str, name: str, t: Tensor) -> None:
    if t.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        raise RuntimeError(
            f"gnnfuse.{fn}: argument '{name}' must be a float32, float64, bfloat16 or float16 tensor (got {_dtype_name(t.dtype)})"
        )


_REDUCE_OPS = {"sum": "spmm", "add": "spmm", "mean": "spmm_mean", "max": "spmm_max", "min": "spmm_min"}


def spmm(
    graph: GraphLike, x: Tensor, edge_weight: Optional[Tensor] = None, reduce: str = "sum", backend: Optional[str] = None
) -> Tensor:
    """Sparse-dense product: ``Y[i, f] = reduce_{j -> i} w_ij * x[j, f]``.

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        x: ``[num_src_nodes, F]`` float32/float64 source features.
        edge_weight: optional ``[E]`` weights (1 if None).
        reduce: ``"sum"`` (``"add"``), ``"mean"`` (sum over the in-degree), ``"max"`` or
            ``"min"`` (a row without edges gives 0, as in PyG; the gradient goes to the
            chosen edge, the first one on ties).
        backend: CUDA tensors only: ``"cusparse"`` runs this call's forward (``reduce="sum"``)
            through cuSPARSE's SpMM, ``"generated"`` through the generated kernels, on the
            calling thread; None (default): the process-wide choice (:mod:`gnnfuse.backends`),
            which the backward follows.

    Returns:
        ``[num_nodes, F]``.
    """
    op = _REDUCE_OPS.get(reduce)
    if op is None:
        raise ValueError(f"gnnfuse.spmm: reduce must be one of {sorted(_REDUCE_OPS)}, got {reduce!r}")
    _check_rows("spmm", graph, x=(x, True))
    rowptr, col, w, _ = resolve(graph, edge_weight, x.size(0), "spmm", x.dtype)
    colptr, row, perm = _csc_for(graph, w, x)
    out = _backends.call_with("spmm", backend, lambda: getattr(torch.ops.gnnfuse, op)(rowptr, col, w, x, colptr, row, perm))
    return out[0] if reduce in ("max", "min") else out


def edge_softmax(graph: GraphLike, score: Tensor, num_nodes: Optional[int] = None) -> Tensor:
    """Softmax of edge scores over each destination's incoming edges (GAT's normalisation).

    ``P[e] = exp(s[e] - m_i) / sum_{e' -> i} exp(s[e'] - m_i)`` for every edge ``e = j -> i``,
    with ``m_i`` the largest score into ``i`` (numerically stable; rows without edges have
    no entries).

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        score: ``[E]`` or ``[E, H]`` (one softmax per head) float32/float64 scores, in CSR
            order (``edge_index`` order for an ``edge_index`` graph).
        num_nodes: for an ``edge_index``, the number of nodes (default ``max index + 1``, which
            reads the data: give it under ``torch.compile(fullgraph=True)``); ignored otherwise.

    Returns:
        the shape and order of ``score``.
    """
    if num_nodes is None:
        num_nodes = 0
        if isinstance(graph, torch.Tensor) and graph.layout == torch.strided:
            num_nodes = int(graph.max()) + 1 if graph.numel() > 0 else 0
    rowptr, col, _, perm = resolve(graph, None, num_nodes, "edge_softmax")
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
    graph: GraphLike, u: Tensor, v: Tensor, edge_weight: Optional[Tensor] = None, op: str = "dot", backend: Optional[str] = None
) -> Tensor:
    """Sampled dense-dense operation, one value per edge ``e = j -> i``:

    * ``op="dot"``: ``E[e] = w_e * (u[i] . v[j])``, with ``u [num_nodes, K]``,
      ``v [num_src_nodes, K]``, optional ``edge_weight [E]``; returns ``[E]``; with 3-D
      ``u [num_nodes, H, K]``, ``v [num_src_nodes, H, K]`` one dot product per head (no edge
      weight), ``[E, H]``;
    * ``op="add"`` / ``"mul"``: ``E[e, h] = u[i, h] + v[j, h]`` (or ``*``) per head, with
      ``u [num_nodes, H]``, ``v [num_src_nodes, H]`` (no edge weight); returns ``[E, H]``
      (GAT's attention logits are ``sddmm(g, a_dst, a_src, op="add")``).

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        backend: CUDA tensors only: ``"cusparse"`` runs this call's forward (2-D ``op="dot"``)
            through cuSPARSE's SDDMM, ``"generated"`` through the generated kernels, on the
            calling thread; None (default): the process-wide choice (:mod:`gnnfuse.backends`),
            which the backward follows.

    Returns:
        per-edge values in CSR order (``edge_index`` order for an ``edge_index`` graph).
    """
    if op not in ("dot", "add", "mul"):
        raise ValueError(f"gnnfuse.sddmm: op must be 'dot', 'add' or 'mul', got {op!r}")
    if op != "dot" and edge_weight is not None:
        raise ValueError(f"gnnfuse.sddmm: op={op!r} takes no edge_weight")
    _check_rows("sddmm", graph, u=(u, False), v=(v, True))
    rowptr, col, w, perm = resolve(graph, edge_weight, u.size(0), "sddmm", u.dtype)
    colptr, row, cperm = _csc_for(graph, w, u, v)
    out = _backends.call_with("sddmm", backend, lambda: _sddmm_call(op, rowptr, col, w, u, v, colptr, row, cperm, edge_weight))
    if perm is not None:
        # CSR position p holds input edge perm[p]: scatter back to input order.
        out = torch.index_copy(torch.empty_like(out), 0, perm, out)
    return out


def _sddmm_call(op: str, rowptr: Tensor, col: Tensor, w: Optional[Tensor], u: Tensor, v: Tensor, colptr: Optional[Tensor],
                row: Optional[Tensor], cperm: Optional[Tensor], edge_weight: Optional[Tensor]) -> Tensor:
    if op == "dot" and u.dim() == 3:
        if edge_weight is not None:
            raise ValueError("gnnfuse.sddmm: multi-head op='dot' (3-D u, v) takes no edge_weight")
        out = torch.ops.gnnfuse.sddmm_heads(rowptr, col, u, v, colptr, row, cperm)
    elif op == "dot":
        out = torch.ops.gnnfuse.sddmm(rowptr, col, w, u, v, colptr, row, cperm)
    else:
        out = getattr(torch.ops.gnnfuse, "sddmm_" + op)(rowptr, col, u, v, colptr, row, cperm)
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
    _check_rows("sddmm_spmm", graph, u=(u, False), v=(v, True), x=(x, True))
    rowptr, col, w, _ = resolve(graph, edge_weight, u.size(0), "sddmm_spmm", x.dtype)
    colptr, row, perm = _csc_for(graph, w, u, v, x)
    return torch.ops.gnnfuse.sddmm_spmm(rowptr, col, w, u, v, x, colptr, row, perm)


def _to_input_order(out: Tensor, perm: Optional[Tensor]) -> Tensor:
    """Per-edge values in CSR order -> the caller's edge order (``perm`` from :func:`gnnfuse.graph.resolve`)."""
    if perm is None:
        return out
    return torch.index_copy(torch.empty_like(out), 0, perm, out)


def _edge_scores_in_csr_order(
    fn: str, name: str, scores: Tensor, col: Tensor, heads: int, perm: Optional[Tensor], ref_name: str, ref: Tensor
) -> Tensor:
    """Per-edge, per-head scores ``[E, heads]`` given in the graph's edge order (checked: shape,
    and dtype and device of ``ref``), in CSR order (``perm`` from :func:`gnnfuse.graph.resolve`)."""
    if scores.dim() != 2 or scores.size(0) != col.size(0) or scores.size(1) != heads:
        raise RuntimeError(
            f"gnnfuse.{fn}: argument '{name}' must have shape [num_edges, heads] = [{col.size(0)}, {heads}] "
            f"(got {tuple(scores.shape)})"
        )
    _check_like(fn, name, scores, ref_name, ref)
    return scores[perm] if perm is not None else scores


def _heads_vector(att: Tensor, heads: int, channels: int, name: str) -> Tensor:
    if att.numel() != heads * channels:
        raise ValueError(f"gnnfuse.gat: {name} must hold heads x channels = {heads} x {channels} values, got shape {tuple(att.shape)}")
    return att.reshape(1, heads, channels)


def attention_dropout(alpha: Tensor, p: float, training: bool, generator: Optional[torch.Generator] = None) -> Tensor:
    """The dropout of attention coefficients, one semantics for :func:`gat` and the attention
    layers (:class:`gnnfuse.nn.GATConv`, :class:`gnnfuse.nn.TransformerConv`), PyG's: applied to
    the coefficients ``alpha`` after the softmax (so the kept ones of a row no longer sum to 1),
    in training only, each kept with probability ``1 - p`` and scaled by ``1 / (1 - p)``
    (``p = 1``: all zero), exactly :func:`torch.nn.functional.dropout`.

    The mask comes from PyTorch's default generator, or from ``generator``, drawn as
    ``torch.nn.functional.dropout`` draws it on the CPU (a Bernoulli(1 - p) mask, scaled by
    ``1 / (1 - p)``): the same bits for a generator in the same state. ``p`` must be in [0, 1]
    (``torch.nn.functional.dropout``'s ValueError otherwise).
    """
    if generator is None or not training or p == 0.0 or p == 1.0:
        return F.dropout(alpha, p=p, training=training)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    noise = torch.empty_like(alpha).bernoulli_(1.0 - p, generator=generator)
    noise.div_(1.0 - p)
    return alpha * noise


def _softmax_aggregate(
    rowptr: Tensor,
    col: Tensor,
    score: Tensor,
    values: Tensor,
    dropout: float,
    training: bool,
    csc: Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """The per-edge attention aggregation of :func:`gat` and the attention layers: softmax of
    ``score`` [E, H] (CSR order) over each row (all heads in one walk), dropout on the
    coefficients (:func:`attention_dropout`), weighted sum of ``values`` [N_src, H, C].
    ``csc``: the graph's CSC view for the backward, or Nones. Returns (output [N_dst, H, C],
    coefficients, coefficients after dropout)."""
    alpha = torch.ops.gnnfuse.edge_softmax_heads(rowptr, col, score.contiguous())
    used = attention_dropout(alpha, dropout, training, generator)
    out = torch.ops.gnnfuse.spmm_heads(rowptr, col, used, values.contiguous(), csc[0], csc[1], csc[2])
    return out, alpha, used


def gat(
    graph: GraphLike,
    x: Tensor,
    att_src: Tensor,
    att_dst: Tensor,
    negative_slope: float = 0.2,
    x_dst: Optional[Tensor] = None,
    edge_score: Optional[Tensor] = None,
    dropout: float = 0.0,
    training: bool = True,
    generator: Optional[torch.Generator] = None,
    return_attention: bool = False,
):
    """GAT aggregation: ``out[i, h] = sum_{j -> i} alpha_ijh x[j, h]`` with
    ``alpha_ijh = softmax_j(leaky_relu(a_dst[i, h] + a_src[j, h] [+ edge_score[e, h]]))``,
    ``a_src = (x * att_src).sum(-1)``, ``a_dst = (x_dst * att_dst).sum(-1)``.

    Without dropout it runs the fused op ``gat`` (``ops/gat.spec``), or ``gat_edge``
    (``ops/gat_edge.spec``) given ``edge_score``: the logits, the softmax and the weighted sum
    in one walk per destination, forward and backward with no per-edge tensor but
    ``edge_score`` and its gradient (memory O(N.H.F + E.H)). With ``dropout > 0`` (and
    ``training``) or ``return_attention``, the coefficients are materialised ``[E, H]``
    (``sddmm_add``, ``edge_softmax_heads``, ``spmm_heads``). Dropout is the layers' and PyG's
    (:func:`attention_dropout`): on the coefficients after the softmax, in ``training`` only,
    its mask from ``generator`` (seed it for reproducible masks) or, without one, from PyTorch's
    default generator exactly as ``GATConv`` draws it.

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        x: ``[num_src_nodes, H, F]`` projected source features.
        att_src, att_dst: ``H x F`` attention vectors (any shape with ``H * F`` values).
        negative_slope: of the leaky ReLU.
        x_dst: ``[num_nodes, H, F]`` projected target features (default ``x``).
        edge_score: optional ``[E, H]`` additive logits per edge, in the graph's edge order
            (``edge_index``'s, a :class:`Graph`'s own (CSR) order).
        dropout: probability of dropping an attention coefficient (in training).
        return_attention: also return ``alpha`` ``[E, H]`` in the graph's edge order (before
            dropout).

    Returns:
        ``[num_nodes, H, F]``, or ``(out, alpha)``.
    """
    if x.dim() != 3:
        raise ValueError(f"gnnfuse.gat: x must be [num_src_nodes, heads, channels], got shape {tuple(x.shape)}")
    H, C = x.size(1), x.size(2)
    _check_floating("gat", "x", x)
    xd = x if x_dst is None else x_dst
    if x_dst is not None:
        if x_dst.dim() != 3:
            raise ValueError(f"gnnfuse.gat: x_dst must be [num_nodes, heads, channels], got shape {tuple(x_dst.shape)}")
        if x_dst.size(1) != H or x_dst.size(2) != C:
            raise RuntimeError(
                f"gnnfuse.gat: argument 'x_dst' must have x's heads and channels, [num_nodes, {H}, {C}] "
                f"(got {tuple(x_dst.shape)})"
            )
        _check_like("gat", "x_dst", x_dst, "x", x)
    _check_like("gat", "att_src", att_src, "x", x)
    _check_like("gat", "att_dst", att_dst, "x", x)
    _check_rows("gat", graph, x=(x, True), x_dst=(xd, False))
    a_src = (x * _heads_vector(att_src, H, C, "att_src")).sum(-1)
    a_dst = (xd * _heads_vector(att_dst, H, C, "att_dst")).sum(-1)
    rowptr, col, _, perm = resolve(graph, None, xd.size(0), "gat")
    colptr, row, cperm = _csc_for(graph, x, a_src, a_dst)
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"gnnfuse.gat: dropout must be a probability in [0, 1] (got {dropout})")
    use_dropout = dropout > 0.0 and training
    a_edge = None if edge_score is None else _edge_scores_in_csr_order("gat", "edge_score", edge_score, col, H, perm, "x", x)
    if not (use_dropout or return_attention):
        if a_edge is not None:
            return torch.ops.gnnfuse.gat_edge(rowptr, col, a_dst.contiguous(), a_src.contiguous(), a_edge.contiguous(), x.contiguous(),
                                              float(negative_slope), colptr, row, cperm)
        return torch.ops.gnnfuse.gat(rowptr, col, a_dst.contiguous(), a_src.contiguous(), x.contiguous(), float(negative_slope), colptr, row, cperm)
    score = torch.ops.gnnfuse.sddmm_add(rowptr, col, a_dst.contiguous(), a_src.contiguous(), colptr, row, cperm)
    if a_edge is not None:
        score = score + a_edge
    score = F.leaky_relu(score, negative_slope)
    out, alpha, _ = _softmax_aggregate(rowptr, col, score, x, dropout, training, (colptr, row, cperm), generator)
    if return_attention:
        return out, _to_input_order(alpha, perm)
    return out


def graph_attention(
    graph: GraphLike, q: Tensor, k: Tensor, v: Tensor, scale: Optional[float] = None, edge_bias: Optional[Tensor] = None
) -> Tensor:
    """Dot-product graph attention (graph transformer):
    ``out[i, h] = sum_{j -> i} softmax_j(scale * q[i, h] . k[j, h] [+ edge_bias[e, h]]) v[j, h]``.

    The fused op ``graph_attention`` (``ops/graph_attention.spec``), or ``graph_attention_edge``
    (``ops/graph_attention_edge.spec``) given ``edge_bias``, computes the scores, their row max
    and sum and the weighted sum of values per destination without a per-edge tensor (but the
    bias and its gradient), in forward and backward (memory O(N.H.D + E.H)).

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc).
        q: ``[num_nodes, H, D]``; k: ``[num_src_nodes, H, D]``; v: ``[num_src_nodes, H, F]``.
        scale: default ``1 / sqrt(D)``.
        edge_bias: optional ``[E, H]`` additive scores per edge (not scaled), e.g. Graphormer's
            spatial or edge-feature biases; in the graph's edge order: ``edge_index``'s, a
            :class:`Graph`'s own (CSR) order. A row whose biases are all ``-inf`` gives NaN, as
            ``torch.softmax``.

    Returns:
        ``[num_nodes, H, F]``.
    """
    if q.dim() != 3:
        raise ValueError(f"gnnfuse.graph_attention: q must be [num_nodes, heads, channels], got shape {tuple(q.shape)}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1)) if q.size(-1) > 0 else 1.0
    _check_rows("graph_attention", graph, q=(q, False), k=(k, True), v=(v, True))
    rowptr, col, _, eperm = resolve(graph, None, q.size(0), "graph_attention")
    colptr, row, perm = _csc_for(graph, q, k, v)
    if edge_bias is not None:
        bias = _edge_scores_in_csr_order("graph_attention", "edge_bias", edge_bias, col, q.size(1), eperm, "q", q)
        return torch.ops.gnnfuse.graph_attention_edge(rowptr, col, (q * scale).contiguous(), k.contiguous(), bias.contiguous(),
                                                      v.contiguous(), colptr, row, perm)
    return torch.ops.gnnfuse.graph_attention(rowptr, col, (q * scale).contiguous(), k.contiguous(), v.contiguous(), colptr, row, perm)


# ---------------------------------------------------------------------------------------------
# torch.jit.trace. A traced function sees every size as a 0-dim tensor and records the ops that
# use it, so that the trace takes its sizes from its inputs; but a size handed to a registered
# op's int argument, or turned into a Python int or bool, is recorded as the constant it was
# for the example input. The helpers below keep the layers' traces general: the int arguments of
# the graph ops go through small TorchScript functions (recorded as calls that read the size at
# run time), and the choices made once per trace (fused or not) read their size without the
# tracer's warning. Outside tracing each is the plain call (no cost); TorchScript compiles the
# plain call only (the tracing branch sits under `not torch.jit.is_scripting()`).


def _tracing() -> bool:
    if not torch.jit.is_scripting():
        return torch.jit.is_tracing()
    return False


def _concrete(n: int) -> int:
    """``n`` as a Python int for a choice made once (a trace records the choice made for the
    example input; it must not change the result, only the path)."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing() and isinstance(n, Tensor):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                return int(n)
    return n


def _trace_edge_index_to_csr(edge_index: Tensor, num_nodes: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    return torch.ops.gnnfuse.edge_index_to_csr(edge_index, int(num_nodes))


def _trace_validate_edge_index(edge_index: Tensor, num_nodes: Tensor, num_dst_nodes: Tensor) -> Tensor:
    torch.ops.gnnfuse.validate_edge_index(edge_index, int(num_nodes), int(num_dst_nodes))
    return edge_index  # used downstream, so that the trace keeps the check


def _size_tensor(n: Any) -> Tensor:
    """A size as the traced 0-dim tensor it is in a trace (a Python int: a constant)."""
    return n if isinstance(n, Tensor) else torch.full((), n, dtype=torch.long)


_SCRIPTED: Dict[str, Any] = {}


def _scripted(fn: Any) -> Any:
    """``torch.jit.script(fn)``, compiled on first use (only traces need it)."""
    out = _SCRIPTED.get(fn.__name__)
    if out is None:
        out = _SCRIPTED[fn.__name__] = torch.jit.script(fn)
    return out


def _edge_index_to_csr(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``torch.ops.gnnfuse.edge_index_to_csr``; traced, with ``num_nodes`` read at run time."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing():
            return _scripted(_trace_edge_index_to_csr)(edge_index, _size_tensor(num_nodes))
    return torch.ops.gnnfuse.edge_index_to_csr(edge_index, num_nodes)


def _validate_edge_index(edge_index: Tensor, num_nodes: int, num_dst_nodes: Optional[int] = None) -> Tensor:
    """``torch.ops.gnnfuse.validate_edge_index``, returning ``edge_index``: node indices in
    ``[0, num_nodes)``, or with ``num_dst_nodes`` (bipartite) sources in ``[0, num_nodes)`` and
    targets in ``[0, num_dst_nodes)``. Traced, the check stays in the trace with the sizes read
    at run time."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing():
            dst = num_nodes if num_dst_nodes is None else num_dst_nodes
            return _scripted(_trace_validate_edge_index)(edge_index, _size_tensor(num_nodes), _size_tensor(dst))
    torch.ops.gnnfuse.validate_edge_index(edge_index, num_nodes, num_dst_nodes)
    return edge_index


def _trace_cached_rows(rowptr: Tensor, num_nodes: Tensor) -> Tensor:
    if rowptr.size(0) - 1 != int(num_nodes):
        raise RuntimeError(
            "gnnfuse.nn.GCNConv: this trace recorded the layer's cached graph (cached=True), of "
            + str(rowptr.size(0) - 1) + " nodes; x has " + str(int(num_nodes)) + " rows"
        )
    return rowptr


def _cached_rows(rowptr: Tensor, num_nodes: int) -> Tensor:
    """``rowptr`` of a cached graph; traced, with a check that ``num_nodes`` is its node count
    (the trace holds the cached graph as a constant)."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing():
            return _scripted(_trace_cached_rows)(rowptr, _size_tensor(num_nodes))
    return rowptr


def _maximum(a: int, b: int) -> int:
    """``max(a, b)`` of two sizes, recorded by a trace (a Python ``max`` of traced sizes is not)."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing():
            return torch.maximum(_size_tensor(a), _size_tensor(b))
    return max(a, b)


def _minimum(a: int, b: int) -> int:
    """``min(a, b)`` of two sizes, recorded by a trace."""
    if not torch.jit.is_scripting():
        if torch.jit.is_tracing():
            return torch.minimum(_size_tensor(a), _size_tensor(b))
    return min(a, b)


def gcn_norm(
    edge_index: Tensor,
    edge_weight: Optional[Tensor],
    num_nodes: int,
    improved: bool = False,
    add_self_loops: bool = True,
    normalize: bool = True,
    dtype: torch.dtype = torch.float32,
    validate: bool = True,
) -> Tuple[Tensor, Tensor, Tensor]:
    """GCN's graph as torch_geometric 2.8's ``gcn_norm``: the missing self-loops added (existing
    ones keep their weights; new ones weigh 1, or 2 with ``improved`` on a weighted graph) and
    ``D^-1/2 A D^-1/2`` (in-degrees of the targets). Returns ``(rowptr, col, weight)``, weights
    in CSR order. ``edge_weight``: ``[E]`` floating weights; ``validate=False`` skips the check of
    ``edge_index``'s values (for callers that checked them)."""
    if edge_index.dim() != 2 or _concrete(edge_index.size(0)) != 2:
        raise ValueError("gnnfuse.gcn_norm: edge_index must be a [2, E] tensor (sources, targets)")
    if validate:
        edge_index = _validate_edge_index(edge_index, num_nodes)
    if edge_weight is not None:
        edge_weight = _check_edge_weight("gnnfuse.gcn_norm", edge_weight, edge_index.size(1))
        if not edge_weight.is_floating_point():
            raise RuntimeError(
                "gnnfuse.gcn_norm: argument 'edge_weight' must be a floating-point tensor (got " + str(edge_weight.dtype) + ")"
            )
    edge_index, edge_weight = gcn_norm_edges(edge_index, edge_weight, num_nodes, improved, add_self_loops, normalize, dtype)
    rowptr, col, perm = _edge_index_to_csr(edge_index, num_nodes)
    return rowptr, col, edge_weight[perm]


def _edge_list(graph: GraphLike, edge_weight: Optional[Tensor], dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """(edge_index, weights in its order) of any graph form (square graphs); a graph's own
    values take ``dtype`` (see :func:`gnnfuse.graph.implicit_weights`)."""
    if is_convertible(graph):
        graph = to_graph(graph)  # scipy.sparse, DGL
    if isinstance(graph, Graph) or (isinstance(graph, torch.Tensor) and graph.layout in SPARSE_LAYOUTS):
        g = graph if isinstance(graph, Graph) else Graph.from_sparse(graph, validate=False)
        if g.num_src_nodes != g.num_nodes:
            raise RuntimeError(
                f"gnnfuse.gcn: argument 'graph' must be square, one node set (GCN adds self-loops and normalises by "
                f"degree; got a bipartite graph of {g.num_nodes} targets and {g.num_src_nodes} sources)"
            )
        return g.to_edge_index().long(), edge_weight if edge_weight is not None else implicit_weights(g.values, dtype)
    if isinstance(graph, torch.Tensor):
        return graph, edge_weight
    raise TypeError(f"gnnfuse.gcn: expected a gnnfuse.Graph, a torch sparse tensor or an edge_index tensor, got {type(graph).__name__}")


def _size_rule_applies(size: int) -> bool:
    """Whether a rule over ``size`` may choose between two correct paths here: in eager and in
    TorchScript (the branch stays in the script, decided per call), not in a captured program
    (torch.compile, torch.export, torch.jit.trace), which would keep one side of the rule for
    every size (an exported program refusing, or running out of memory on, the sizes past the
    threshold; torch.jit.trace records the branch taken without its condition). Dynamo shows
    a symbolic size as an int, so a capture is recognised as such, not its sizes."""
    if torch.jit.is_scripting():
        return True
    else:
        return not (torch.compiler.is_compiling() or torch.jit.is_tracing() or isinstance(size, torch.SymInt))


def gcn_aggregates_first(in_channels: int, out_channels: int) -> bool:
    """The narrower-side rule of a GCN product ``A X W``: aggregate on the narrower features,
    ``(A X) W`` when ``F_in <= F_out``, else ``A (X W)``. The one rule of :func:`gcn`,
    :class:`gnnfuse.nn.GCNConv` and :func:`gcn_fused_choice`. A tie (``F_in == F_out``: the
    same work either way) aggregates first, on the side the fused op is chosen on (the
    thresholds of :func:`gcn_fused_choice` were measured with ties fused, e.g. 128 -> 128 on
    soc-Slashdot0902 in ``bench/results/cpu_gcn_fusion_*``)."""
    return _concrete(in_channels) <= out_channels


def split_on_tensor_cores(x: Tensor) -> bool:
    """Whether both products of a GCN's split form can run on Tensor Cores for ``x``: on CUDA in
    float16 or bfloat16, or float32 where PyTorch allows tf32 for matrix products
    (``torch.backends.cuda.matmul.allow_tf32``; TorchScript: float32 counts as not). Its SpMM
    then takes the Tensor-Core SpMM where that wins (``gnnfuse.backends.set_cuda_tensor_cores``)
    and its GEMM cuBLAS's, where the fused op ``gcn`` multiplies by ``W`` on CUDA cores."""
    if not x.is_cuda:
        return False
    if x.dtype == torch.float16 or x.dtype == torch.bfloat16:
        return True
    tf32 = False
    if not torch.jit.is_scripting():  # (nested: TorchScript then compiles no part of it)
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    return x.dtype == torch.float32 and tf32


def gcn_fused_choice(
    fused: Optional[bool], num_nodes: int, in_channels: int, out_channels: int, needs_grad: bool, tensor_cores: bool = False
) -> bool:
    """Input-sensitive fusion of a GCN product: whether the fused op ``gcn`` (aggregation and
    ``W`` in one pass over row blocks) runs instead of ``spmm`` and PyTorch's GEMM. ``fused``
    given: that. Otherwise fused exactly when nothing needs a gradient (its backward aggregates
    ``A X`` a second time instead of keeping it, slower in most measured cases), the
    aggregation is on the narrower side (:func:`gcn_aggregates_first`: ``F_in <= F_out``), and
    the output is large (``N * F_out >= 2^23``, 32 MiB in float32): there the split form's
    temporary and GEMM stream from memory while the fused op keeps each 32-row block in cache.
    The thresholds come from ``bench/bench_gcn_fusion.py`` (``bench/results/cpu_gcn_fusion_*``).
    In a captured program (:func:`_size_rule_applies`: ``torch.compile``, ``torch.export``,
    ``torch.jit.trace``) the size term is left out: fused in inference whenever the aggregation
    is on the narrower side, at every size. ``tensor_cores`` (:func:`split_on_tensor_cores`: the
    split form's products both on Tensor Cores, a CUDA ``x`` in 16 bits or tf32): never fused, the
    fused op's product by ``W`` running on CUDA cores."""
    if fused is not None:
        return fused
    if tensor_cores:
        return False
    if not _size_rule_applies(num_nodes * out_channels):
        return (not needs_grad) and gcn_aggregates_first(in_channels, out_channels)
    return (not needs_grad) and gcn_aggregates_first(in_channels, out_channels) and _concrete(num_nodes) * out_channels >= 8388608


def gcn_plan(
    fused: Optional[bool], num_nodes: int, in_channels: int, out_channels: int, needs_grad: bool, tensor_cores: bool = False
) -> str:
    """How a GCN product ``A X W`` runs, the one policy of :func:`gcn` and
    :class:`gnnfuse.nn.GCNConv`: ``"fused"`` (the op ``gcn``, :func:`gcn_fused_choice`), else
    split on PyTorch's GEMM by :func:`gcn_aggregates_first`: ``"aggregate_first"``
    (``spmm(A, X) @ W``) or ``"project_first"`` (``spmm(A, X @ W)``)."""
    if gcn_fused_choice(fused, num_nodes, in_channels, out_channels, needs_grad, tensor_cores):
        return "fused"
    if gcn_aggregates_first(in_channels, out_channels):
        return "aggregate_first"
    return "project_first"


def gcn(
    graph: GraphLike,
    x: Tensor,
    weight: Tensor,
    edge_weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    normalize: bool = True,
    add_self_loops: bool = True,
    improved: bool = False,
    fused: Optional[bool] = None,
) -> Tensor:
    """A GCN layer's product ``Y = Â X W (+ bias)``, ``Â = D^-1/2 (A + I) D^-1/2`` as PyG's
    ``GCNConv`` (``normalize``, ``add_self_loops``, ``improved``; see :func:`gcn_norm`).

    ``weight`` is ``[F_in, F_out]`` (``x @ weight``; a ``torch.nn.Linear``'s is its transpose).
    ``fused=True`` runs the generated op ``gcn`` (``ops/gcn.spec``): rows aggregated in blocks
    of 32 that meet ``W`` in a register-tiled product, no ``N x F_in`` temporary, backward fused
    likewise (it aggregates once more for ``d/dweight`` instead of keeping ``A X``).
    ``fused=False`` aggregates the narrower side: ``spmm(A, X) @ W`` when ``F_in <= F_out``
    (ties included), else ``spmm(A, X @ W)``, the dense product on PyTorch's GEMM. ``None``
    (default) chooses by input (see :func:`gcn_plan`, :func:`gcn_fused_choice`).

    Args:
        graph: :class:`Graph`, torch sparse matrix or ``edge_index`` (see module doc; square).
        x: ``[N, F_in]`` features; ``weight``: ``[F_in, F_out]``, ``bias``: ``[F_out]``,
            ``edge_weight``: optional ``[E]`` weights in the graph's edge order, all of ``x``'s
            dtype and device (a RuntimeError names the argument that is not).
    """
    if x.dim() != 2:
        raise ValueError(f"gnnfuse.gcn: argument 'x' must be 2-D [num_nodes, in_channels] (got a {x.dim()}-D tensor)")
    if weight.dim() != 2:
        raise ValueError(
            f"gnnfuse.gcn: argument 'weight' must be 2-D [in_channels, out_channels] (got a {weight.dim()}-D tensor)"
        )
    _check_floating("gcn", "x", x)
    if weight.size(0) != x.size(1):
        raise RuntimeError(
            f"gnnfuse.gcn: argument 'weight' must be [in_channels, out_channels] with in_channels={x.size(1)}, "
            f"x's width (got [{weight.size(0)}, {weight.size(1)}]; x @ weight: a torch.nn.Linear's weight transposed)"
        )
    _check_like("gcn", "weight", weight, "x", x)
    if bias is not None:
        if bias.size(-1) != weight.size(1) or bias.numel() != weight.size(1):
            raise RuntimeError(f"gnnfuse.gcn: argument 'bias' must have out_channels={weight.size(1)} values (got {tuple(bias.shape)})")
        _check_like("gcn", "bias", bias, "x", x)
    _check_rows("gcn", graph, x=(x, True))
    edge_index, w = _edge_list(graph, edge_weight, x.dtype)
    torch.ops.gnnfuse.validate_edge_index(edge_index, x.size(0))  # gcn_norm indexes with it
    if edge_weight is not None:
        w = edge_weight = _check_edge_weight("gnnfuse.gcn", edge_weight, edge_index.size(1))
        _check_like("gcn", "edge_weight", edge_weight, "x", x)
    rowptr, col, w = gcn_norm(edge_index, w, x.size(0), improved, add_self_loops, normalize, x.dtype, False)
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (edge_weight is not None and edge_weight.requires_grad)
    )
    plan = gcn_plan(fused, x.size(0), x.size(1), weight.size(1), needs_grad, split_on_tensor_cores(x))
    if plan == "fused":
        out = torch.ops.gnnfuse.gcn(rowptr, col, w, x.contiguous(), weight.contiguous())
    elif plan == "aggregate_first":
        out = torch.ops.gnnfuse.spmm(rowptr, col, w, x) @ weight
    else:
        out = torch.ops.gnnfuse.spmm(rowptr, col, w, x @ weight)
    return out if bias is None else out + bias


# ---------------------------------------------------------------------------------------------
# Lowerings chosen at run time. An op whose spec says `variants auto` (ops/README.md) has one
# kernel per association of its product chain that the generator's smallest-temporary rule
# ties on (gcn: (A X) W row-blocked, or X W first and then the aggregation), each with a cost
# model over the call's extents and the graph's mean row length; every call runs the cheapest.


def variant_count(op: str) -> int:
    """How many lowerings the generator emitted for ``op`` (an op generated with variants)."""
    return int(torch.ops.gnnfuse.variant_count(op))


def last_variant(op: str) -> int:
    """The lowering the calling thread's latest call of ``op`` ran (-1 before any call)."""
    return int(torch.ops.gnnfuse.last_variant(op))


@contextlib.contextmanager
def force_variant(op: str, variant: int) -> Iterator[None]:
    """Within the block every call of ``op`` (from any thread) runs lowering ``variant``
    instead of the cheapest by the cost model; for tests and benchmarks."""
    torch.ops.gnnfuse.force_variant(op, variant)
    try:
        yield
    finally:
        torch.ops.gnnfuse.force_variant(op, -1)
