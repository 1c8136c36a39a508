"""Graph layers on gnnfuse ops, drop-in for torch_geometric's layers of the same names.

Same constructor arguments, same ``forward(x, edge_index, ...)`` (``edge_index`` is a PyG
``[2, E]`` tensor: row 0 sources, row 1 targets), and the same parameter names, so
``layer.load_state_dict(pyg_layer.state_dict())`` works with ``strict=True``. In eval mode the
outputs and gradients match PyG's (see tests/python/test_nn.py).

The aggregations run on the registered ops (``spmm``; the fused ``gat`` and
``graph_attention``; ``sddmm_add``, ``edge_softmax_heads``, ``spmm_heads`` where the attention
coefficients are needed: dropout, edge features, returned weights) over a CSR built once per
call (once per graph with ``cached=True``); their backward is the generated one.
"""

import math
import typing
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from .ops import _to_input_order, gcn_fused_choice, gcn_norm

if typing.TYPE_CHECKING:
    from typing import overload
else:
    # TorchScript compiles one forward per overload: a Tensor without attention weights,
    # a (Tensor, (edge_index, weights)) pair when a bool is passed, as PyG's layers.
    from torch.jit import _overload_method as overload

__all__ = ["GCNConv", "GATConv", "TransformerConv", "CoarsenPool"]

_ops = torch.ops.gnnfuse


def _glorot(t: Optional[Tensor]) -> None:
    if t is not None:
        a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
        with torch.no_grad():
            t.uniform_(-a, a)


def _Linear(in_channels: int, out_channels: int) -> torch.nn.Linear:
    """``y = x W^T`` (PyG's ``Linear(..., bias=False)``: parameter ``weight``), glorot-initialised."""
    lin = torch.nn.Linear(in_channels, out_channels, bias=False)
    _glorot(lin.weight)
    return lin


def _check_edge_index(layer: str, edge_index: Tensor) -> None:
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError("gnnfuse.nn." + layer + ": edge_index must be a [2, E] tensor (sources, targets)")


# The attention layers' choice between the fused ops (gat, graph_attention: no per-edge tensor,
# memory O(N.H.C), each backward kernel recomputing the softmax per edge) and the per-edge ops
# (sddmm, edge_softmax_heads, spmm_heads: [E, H] tensors, fewer passes over the edges; faster on
# this CPU at the sizes measured in bench/results). `fused=None` takes the fused ops once the
# [E, H] tensors (several kept for backward) would pass 2^24 elements (64 MiB each in float32).
def _softmax_aggregate(
    rowptr: Tensor,
    col: Tensor,
    score: Tensor,
    values: Tensor,
    dropout: float,
    training: bool,
    csc: Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]],
) -> Tuple[Tensor, Tensor, Tensor]:
    """The per-edge attention path: softmax of ``score`` [E, H] over each row (all heads in one
    walk), dropout on the coefficients, weighted sum of ``values`` [N_src, H, C].
    Returns (output [N_dst, H, C], coefficients, coefficients after dropout)."""
    alpha = _ops.edge_softmax_heads(rowptr, col, score.contiguous())
    used = F.dropout(alpha, p=dropout, training=training)
    return _ops.spmm_heads(rowptr, col, used, values.contiguous(), csc[0], csc[1], csc[2]), alpha, used


def _csc_for_backward(
    rowptr: Tensor, col: Tensor, num_cols: int, x: Tensor
) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """The CSC view of the layer's graph when a backward will run (the adjoints of the edge ops
    walk by columns), built once per forward and given to every op: each would otherwise build
    its own in backward."""
    if torch.is_grad_enabled() and x.requires_grad:
        colptr, row, perm = _ops.csr_transpose(rowptr, col, num_cols)
        return colptr, row, perm
    return None, None, None


def _use_fused(fused: Optional[bool], edge_heads: int) -> bool:
    if fused is None:
        return edge_heads >= 16777216  # 2^24 (a literal: TorchScript reads no module globals)
    return fused


class GCNConv(torch.nn.Module):
    _cache: Optional[Tuple[Tensor, Tensor, Tensor]]

    """Graph convolution (Kipf & Welling): ``X' = D^-1/2 (A + I) D^-1/2 X W + b``.

    Arguments as ``torch_geometric.nn.GCNConv``: ``improved`` fills self-loops with 2,
    ``cached`` keeps the normalised graph of the first call (transductive use),
    ``add_self_loops`` (default: ``normalize``) adds the missing self-loops, ``normalize``
    applies the symmetric normalisation, ``bias``. The dense product runs before or after the
    aggregation, whichever aggregates the narrower features. ``fused`` (not in PyG): True runs
    the fused op ``gcn`` (no ``N x F_in`` temporary), False spmm and the GEMM, None chooses by
    input (:func:`gnnfuse.ops.gcn_fused_choice`: fused in inference on large inputs).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: Optional[bool] = None,
        normalize: bool = True,
        bias: bool = True,
        fused: Optional[bool] = None,
    ) -> None:
        super().__init__()
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise ValueError("gnnfuse.nn.GCNConv: add_self_loops=True needs normalize=True (as in PyG)")
        self.fused = fused
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached = improved, cached
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self.lin = _Linear(in_channels, out_channels)
        self.bias = Parameter(torch.zeros(out_channels)) if bias else None
        self._cache: Optional[Tuple[Tensor, Tensor, Tensor]] = None

    def reset_parameters(self) -> None:
        _glorot(self.lin.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        self._cache = None

    def _graph(
        self, edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int, dtype: torch.dtype
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """(rowptr, col, normalised weights in CSR order)."""
        cache = self._cache
        if self.cached and cache is not None:
            return cache
        out = gcn_norm(edge_index, edge_weight, num_nodes, self.improved, self.add_self_loops, self.normalize, dtype)
        if self.cached:
            self._cache = out
        return out

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
        _check_edge_index("GCNConv", edge_index)
        _ops.validate_edge_index(edge_index, x.size(0))
        rowptr, col, w = self._graph(edge_index, edge_weight, x.size(0), x.dtype)
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or self.lin.weight.requires_grad)
        if gcn_fused_choice(self.fused, x.size(0), self.in_channels, self.out_channels, needs_grad):
            out = _ops.gcn(rowptr, col, w, x.contiguous(), self.lin.weight.t().contiguous())
        elif self.in_channels < self.out_channels:
            out = self.lin(_ops.spmm(rowptr, col, w, x))
        else:
            out = _ops.spmm(rowptr, col, w, self.lin(x))
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"


class GATConv(torch.nn.Module):
    """Graph attention (Velickovic et al.), multi-head, as ``torch_geometric.nn.GATConv``:

    ``alpha_ij = softmax_j(leaky_relu(a_src . W x_j + a_dst . W x_i [+ a_edge . W_e e_ij]))``,
    ``x'_i = ||_h sum_j alpha_ij^h W^h x_j`` (``concat``) or the mean over heads, ``+ b``.
    Arguments: ``heads``, ``concat``, ``negative_slope``, ``dropout`` (on the attention
    coefficients, training only), ``add_self_loops``, ``edge_dim``, ``fill_value`` (edge
    features of the added self-loops: a number, a tensor, or ``"mean"``, ``"add"``, ``"max"``,
    ``"min"`` of the incoming edges' features), ``bias``, ``residual``; ``in_channels`` may be a
    pair (bipartite: sources, targets). ``fused`` (not in PyG): True runs the fused ``gat`` op
    (no per-edge tensor), False the per-edge ops, None chooses by size (see ``_use_fused``).
    """

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: Optional[int] = None,
        fill_value: Union[float, Tensor, str] = "mean",
        bias: bool = True,
        residual: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        super().__init__()
        self.fused = fused
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops, self.edge_dim, self.fill_value = add_self_loops, edge_dim, fill_value
        self.residual = residual
        hc = heads * out_channels
        self.lin = self.lin_src = self.lin_dst = None
        if isinstance(in_channels, int):
            self.lin = _Linear(in_channels, hc)
        else:
            self.lin_src = _Linear(in_channels[0], hc)
            self.lin_dst = _Linear(in_channels[1], hc)
        self.att_src = Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = Parameter(torch.empty(1, heads, out_channels))
        if edge_dim is not None:
            self.lin_edge = _Linear(edge_dim, hc)
            self.att_edge = Parameter(torch.empty(1, heads, out_channels))
        else:
            self.lin_edge = None
            self.register_parameter("att_edge", None)
        total = out_channels * (heads if concat else 1)
        if residual:
            self.res = _Linear(in_channels if isinstance(in_channels, int) else in_channels[1], total)
        else:
            self.register_parameter("res", None)
        self.bias = Parameter(torch.zeros(total)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                _glorot(lin.weight)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        _glorot(self.att_edge)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def _self_loop_attr(self, edge_attr: Tensor, edge_index: Tensor, n: int, num: int) -> Tensor:
        """Features of the added self-loops of nodes [0, n) (``fill_value``), reduced over the
        incoming edges other than self-loops (these reduce into a spare row ``num``)."""
        fill = self.fill_value
        shape = [n] + list(edge_attr.shape[1:])
        if isinstance(fill, float) or isinstance(fill, int):
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
        dst = torch.where(edge_index[0] == edge_index[1], num, edge_index[1])
        shape[0] = num + 1
        out = edge_attr.new_zeros(shape)
        index = dst.view([-1] + [1] * (edge_attr.dim() - 1)).expand_as(edge_attr)
        return out.scatter_reduce(0, index, edge_attr, reduce=reduce, include_self=False)[:n]

    @overload
    def forward(
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: None = None,
    ) -> Tensor:
        pass

    @overload
    def forward(  # noqa: F811
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: bool = False,
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        pass

    def forward(  # noqa: F811
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: Optional[bool] = None,
    ):
        """Returns the output, or ``(output, (edge_index, attention [E, heads]))`` when
        ``return_attention_weights`` is a bool (as PyG; ``edge_index`` with the self-loops)."""
        _check_edge_index("GATConv", edge_index)
        H, C = self.heads, self.out_channels
        if isinstance(x, Tensor):
            x_dst_in = x
            lin = self.lin
            if lin is None:
                raise ValueError("gnnfuse.nn.GATConv: a bipartite layer takes x = (x_src, x_dst)")
            x_src = lin(x).view(-1, H, C)
            x_dst = x_src
        else:
            x_dst_in = x[1]
            lin = self.lin
            lin_src = self.lin_src
            lin_dst = self.lin_dst
            if lin is not None:
                x_src = lin(x[0]).view(-1, H, C)
                x_dst = lin(x[1]).view(-1, H, C)
            elif lin_src is not None and lin_dst is not None:
                x_src = lin_src(x[0]).view(-1, H, C)
                x_dst = lin_dst(x[1]).view(-1, H, C)
            else:
                raise ValueError("gnnfuse.nn.GATConv: no input projection")
        num_src = x_src.size(0) if size is None else size[0]
        num_dst = x_dst.size(0) if size is None else size[1]
        _ops.validate_edge_index(edge_index, max(num_src, num_dst))
        a_src = (x_src * self.att_src).sum(-1)  # [N_src, H]
        a_dst = (x_dst * self.att_dst).sum(-1)  # [N_dst, H]

        lin_edge = self.lin_edge
        if lin_edge is None:
            edge_attr = None  # as PyG: edge features are ignored without edge_dim
        if self.add_self_loops:
            # PyG drops the self-loops and adds one per node < n. Here, with fixed sizes (no
            # data-dependent shapes under torch.compile): an existing self-loop is redirected to
            # a padding source num_src whose logit is -inf (weight exactly 0), and the loops
            # (v, v) are appended.
            n = min(num_src, num_dst)
            loop = edge_index[0] == edge_index[1]
            nodes = torch.arange(n, dtype=edge_index.dtype, device=edge_index.device)
            if edge_attr is not None:
                edge_attr = torch.cat([edge_attr, self._self_loop_attr(edge_attr, edge_index, n, max(num_src, num_dst))], 0)
            edge_index = torch.cat(
                [torch.stack([torch.where(loop, num_src, edge_index[0]), edge_index[1]]), torch.stack([nodes, nodes])], 1
            )
            a_src = torch.cat([a_src, a_src.new_full((1, H), float("-inf"))])
            x_src = torch.cat([x_src, x_src.new_zeros((1, H, C))])
            num_src = num_src + 1
        # CSR over targets (sources bounded by num_src: the op is given the larger count).
        num = max(num_src, num_dst)
        rowptr, col, perm = _ops.edge_index_to_csr(edge_index, num)
        rowptr = rowptr[: num_dst + 1]
        if (
            # sized by the input edges, loops included
            _use_fused(self.fused, edge_index.size(1) * H)
            and edge_attr is None
            and return_attention_weights is None
            and not (self.dropout > 0.0 and self.training)
        ):
            # The fused op: logits, softmax and weighted sum per destination, no [E, H] tensor.
            out = _ops.gat(rowptr, col, a_dst.contiguous(), a_src.contiguous(), x_src.contiguous(), float(self.negative_slope))
            alpha: Optional[Tensor] = None
        else:
            csc = _csc_for_backward(rowptr, col, num_src, x_src)
            score = _ops.sddmm_add(rowptr, col, a_dst.contiguous(), a_src.contiguous(), csc[0], csc[1], csc[2])  # [E, H], CSR order
            if lin_edge is not None and edge_attr is not None:
                e = lin_edge(edge_attr.view(edge_attr.size(0), -1)).view(-1, H, C)
                score = score + (e * self.att_edge).sum(-1)[perm]
            score = F.leaky_relu(score, self.negative_slope)
            out, alpha, _ = _softmax_aggregate(rowptr, col, score, x_src, self.dropout, self.training, csc)
        out = self._finish(out, x_dst_in)  # from [N_dst, H, C]
        if isinstance(return_attention_weights, bool):
            assert alpha is not None
            # Coefficients in edge_index order (with the appended self-loops); the redirected
            # input self-loops (weight 0) are left out, as in PyG's output.
            alpha = _to_input_order(alpha, perm)
            if self.add_self_loops:
                kept = edge_index[0] != num_src - 1
                return out, (edge_index[:, kept], alpha[kept])
            return out, (edge_index, alpha)
        return out

    def _finish(self, out: Tensor, x_dst_in: Tensor) -> Tensor:
        out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(1)
        if self.res is not None:
            out = out + self.res(x_dst_in)
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class TransformerConv(torch.nn.Module):
    """Graph transformer layer (Shi et al.), as ``torch_geometric.nn.TransformerConv``:

    ``x'_i = W_1 x_i + ||_h sum_j alpha_ij^h (W_3 x_j [+ W_e e_ij])``, with
    ``alpha_ij^h = softmax_j((W_2 x_i)^h . (W_4 x_j [+ W_e e_ij])^h / sqrt(C))``.

    Arguments: ``heads``, ``concat`` (else the mean over heads), ``beta`` (gated root weight),
    ``dropout`` (on the attention coefficients, training only), ``edge_dim``, ``bias``,
    ``root_weight``; ``in_channels`` may be a pair (bipartite: sources, targets). Parameters
    ``lin_key``, ``lin_query``, ``lin_value``, ``lin_edge``, ``lin_skip``, ``lin_beta`` as PyG's.
    Without edge features, dropout or returned attention weights and with ``fused=True`` (not in
    PyG; None chooses by size, see ``_use_fused``) the layer runs the fused op
    ``graph_attention``: no per-edge tensor in forward or backward (memory O(N.H.C)); otherwise
    ``sddmm_heads``, ``edge_softmax_heads`` and ``spmm_heads`` ([E, H] tensors).
    """

    def __init__(
        self,
        in_channels: Union[int, Tuple[int, int]],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        beta: bool = False,
        dropout: float = 0.0,
        edge_dim: Optional[int] = None,
        bias: bool = True,
        root_weight: bool = True,
        fused: Optional[bool] = None,
    ) -> None:
        super().__init__()
        self.fused = fused
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.beta, self.root_weight, self.concat = beta and root_weight, root_weight, concat
        self.dropout, self.edge_dim = dropout, edge_dim
        src, dst = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        hc = heads * out_channels
        self.lin_key = torch.nn.Linear(src, hc, bias=bias)
        self.lin_query = torch.nn.Linear(dst, hc, bias=bias)
        self.lin_value = torch.nn.Linear(src, hc, bias=bias)
        if edge_dim is not None:
            self.lin_edge = torch.nn.Linear(edge_dim, hc, bias=False)
        else:
            self.register_parameter("lin_edge", None)
        width = hc if concat else out_channels
        self.lin_skip = torch.nn.Linear(dst, width, bias=bias)
        if self.beta:
            self.lin_beta = torch.nn.Linear(3 * width, 1, bias=False)
        else:
            self.register_parameter("lin_beta", None)

    def reset_parameters(self) -> None:
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip, self.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    @overload
    def forward(
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        return_attention_weights: None = None,
    ) -> Tensor:
        pass

    @overload
    def forward(  # noqa: F811
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        return_attention_weights: bool = False,
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        pass

    def forward(  # noqa: F811
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        return_attention_weights: Optional[bool] = None,
    ):
        """Returns the output, or ``(output, (edge_index, attention [E, heads]))`` when
        ``return_attention_weights`` is a bool (as PyG)."""
        _check_edge_index("TransformerConv", edge_index)
        H, C = self.heads, self.out_channels
        if isinstance(x, Tensor):
            x_src, x_dst = x, x
        else:
            x_src, x_dst = x[0], x[1]
        query = self.lin_query(x_dst).view(-1, H, C)
        key = self.lin_key(x_src).view(-1, H, C)
        value = self.lin_value(x_src).view(-1, H, C)
        num_src, num_dst = x_src.size(0), x_dst.size(0)
        num = max(num_src, num_dst)
        _ops.validate_edge_index(edge_index, num)
        rowptr, col, perm = _ops.edge_index_to_csr(edge_index, num)
        rowptr = rowptr[: num_dst + 1]
        scale = 1.0 / math.sqrt(C)
        lin_edge = self.lin_edge
        if lin_edge is not None and edge_attr is None:
            raise ValueError("gnnfuse.nn.TransformerConv: a layer with edge_dim needs edge_attr")
        alpha: Optional[Tensor] = None
        if lin_edge is not None and edge_attr is not None:
            # Per-edge scores (CSR order), as PyG computes them.
            rows = torch.repeat_interleave(torch.arange(num_dst, device=col.device), rowptr.diff())
            e = lin_edge(edge_attr.view(edge_attr.size(0), -1)).view(-1, H, C)[perm]
            key_j = key[col.long()] + e
            score = (query[rows] * key_j).sum(-1) * scale
            csc = _csc_for_backward(rowptr, col, num_src, value)
            out, alpha, used = _softmax_aggregate(rowptr, col, score, value, self.dropout, self.training, csc)
            out = out.index_add(0, rows, used[:, :, None] * e)
        elif _use_fused(self.fused, col.numel() * H) and return_attention_weights is None and not (
            self.dropout > 0.0 and self.training
        ):
            out = _ops.graph_attention(rowptr, col, (query * scale).contiguous(), key.contiguous(), value.contiguous())
        else:
            # Scores [E, H] (sddmm_heads), softmax, weighted sum: no [E, H, C] tensor.
            csc = _csc_for_backward(rowptr, col, num_src, value)
            score = _ops.sddmm_heads(rowptr, col, (query * scale).contiguous(), key.contiguous(), csc[0], csc[1], csc[2])
            out, alpha, _ = _softmax_aggregate(rowptr, col, score, value, self.dropout, self.training, csc)
        out = out.reshape(-1, H * C) if self.concat else out.mean(1)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                b = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = b * x_r + (1 - b) * out
            else:
                out = out + x_r
        if isinstance(return_attention_weights, bool):
            assert alpha is not None
            return out, (edge_index, _to_input_order(alpha, perm))
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class CoarsenPool(torch.nn.Module):
    """Graph pooling by a hard clustering: pools node features per cluster and coarsens the
    graph (``Pᵀ·A·P``, :func:`gnnfuse.coarsen`).

    Args:
        reduce: how member features combine: ``"sum"``, ``"mean"`` or ``"max"``.
        remove_self_loops: drop the coarse graph's self-loops (edges inside a cluster).

    ``forward(x, graph, cluster=None, num_clusters=None, edge_weight=None)`` returns
    ``(x_pooled [num_clusters, F], coarse_graph, coarse_edge_weight)``. Without ``cluster``,
    a heavy-edge matching (:func:`gnnfuse.cluster.heavy_edge_matching`) of the graph is used,
    which halves it roughly. Differentiable with respect to ``x`` and ``edge_weight``.
    """

    def __init__(self, reduce: str = "mean", remove_self_loops: bool = False) -> None:
        super().__init__()
        if reduce not in ("sum", "mean", "max"):
            raise ValueError(f"CoarsenPool: reduce must be 'sum', 'mean' or 'max' (got {reduce!r})")
        self.reduce = reduce
        self.remove_self_loops = remove_self_loops

    def forward(self, x: Tensor, graph, cluster: Optional[Tensor] = None, num_clusters: Optional[int] = None,
                edge_weight: Optional[Tensor] = None):
        from .cluster import heavy_edge_matching
        from .graph import Graph, _infer_num_nodes
        from .ops import spmm
        from .sparse import _coarsen_csr, _coarsen_inputs, assignment_csr

        if cluster is None:
            cluster, num_clusters = heavy_edge_matching(graph, edge_weight, num_nodes=x.size(0))
        elif num_clusters is None:
            num_clusters = _infer_num_nodes(cluster)
        rowptr, col, w = _coarsen_inputs(graph, cluster, edge_weight)
        assignment = assignment_csr(cluster, num_clusters, rowptr.dtype)
        coarse, coarse_w = _coarsen_csr(rowptr, col, w, assignment, num_clusters, self.remove_self_loops)
        _, _, mrowptr, mcol = assignment
        members = Graph(mrowptr, mcol, num_clusters, cluster.numel())
        return spmm(members, x, reduce=self.reduce), coarse, coarse_w

    def extra_repr(self) -> str:
        return f"reduce={self.reduce!r}, remove_self_loops={self.remove_self_loops}"
