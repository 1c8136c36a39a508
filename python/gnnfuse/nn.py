"""Graph layers on gnnfuse ops, drop-in for torch_geometric's layers of the same names.

Same constructor arguments, same ``forward(x, edge_index, ...)`` (``edge_index`` is a PyG
``[2, E]`` tensor: row 0 sources, row 1 targets), and the same parameter names, so
``layer.load_state_dict(pyg_layer.state_dict())`` works with ``strict=True``. In eval mode the
outputs and gradients match PyG's (see tests/python/test_nn.py). As in PyG, ``edge_index`` may
also be a torch sparse adjacency ``adj_t`` (COO, CSR or CSC; ``adj_t[i, j]`` an edge j -> i),
``in_channels=-1`` (or ``(-1, -1)``) initialises the input projections lazily at the first call,
and the ``MessagePassing`` keyword arguments are accepted where they mean what the layer computes.

The aggregations run on the registered ops (``spmm``; the fused ``gat`` and
``graph_attention``; ``sddmm_add``, ``edge_softmax_heads``, ``spmm_heads`` where the attention
coefficients are needed: dropout, edge features, returned weights) over a CSR built once per
call (GCNConv: once per unchanged graph tensor in eager mode; once per graph with
``cached=True``); their backward is the generated one.
"""

import math
import typing
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from .ops import (
    _cached_rows,
    _check_edge_weight,
    _check_per_edge,
    _concrete,
    _edge_index_to_csr,
    _maximum,
    _minimum,
    _size_rule_applies,
    attention_dropout,
    _softmax_aggregate,
    _to_input_order,
    _tracing,
    _validate_edge_index,
    gcn_plan,
    split_on_tensor_cores,
    gcn_norm,
)
from .graph import Graph as _Graph
from .utils import (
    add_self_loops as _add_self_loops,
    pyg_gcn_norm,
    redirect_self_loops,
    remove_and_add_self_loops,
    sparse_like,
    sparse_self_loops,
    to_edge_index,
)

if typing.TYPE_CHECKING:
    from typing import overload
else:
    # TorchScript compiles one forward per overload: a Tensor without attention weights,
    # a (Tensor, (edge_index, weights)) pair when a bool is passed, as PyG's layers.
    from torch.jit import _overload_method as overload

__all__ = ["GCNConv", "GATConv", "TransformerConv", "CoarsenPool"]

_ops = torch.ops.gnnfuse

# PyG's tools (the explainers, to_hetero, to_hetero_with_bases, AttentionExplainer) find message
# passing layers by isinstance(module, MessagePassing) and drive them through MessagePassing's
# state: the explain mode (an edge mask on every message) and the propagate / message /
# aggregate / edge_update hooks. With torch_geometric installed the layers subclass it (its
# __init__ adds no parameter or buffer: the state_dict is PyG's); their forward stays gnnfuse's
# fused one, and switches to PyG's per-edge message passing (MessagePassing.propagate over
# PyG's edge order, with the layer's message / edge_update) only while the explain mode is on or
# a hook is registered (`_pyg_path`). Without torch_geometric the base is torch.nn.Module.
try:
    from torch_geometric.nn.conv import MessagePassing as _MessagePassing
    from torch_geometric.utils import softmax as _pyg_softmax
except ImportError:
    _MessagePassing = None
_Base = torch.nn.Module if _MessagePassing is None else _MessagePassing

# The MessagePassing hooks that PyG's propagate (and, for GATConv, edge_updater) runs.
_PYG_HOOKS = (
    "_propagate_forward_pre_hooks",
    "_propagate_forward_hooks",
    "_message_forward_pre_hooks",
    "_message_forward_hooks",
    "_aggregate_forward_pre_hooks",
    "_aggregate_forward_hooks",
)
_PYG_EDGE_UPDATE_HOOKS = ("_edge_update_forward_pre_hooks", "_edge_update_forward_hooks")
_PYG_FUSED_HOOKS = ("_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks")


def _init_base(module: torch.nn.Module, node_dim: int) -> None:
    if _MessagePassing is None:
        torch.nn.Module.__init__(module)
    else:
        _MessagePassing.__init__(module, aggr="add", node_dim=node_dim)


def _pyg_hooked(module: torch.nn.Module, names: Tuple[str, ...]) -> bool:
    for name in names:
        if getattr(module, name):
            return True
    return False


def _pyg_path(module: torch.nn.Module, layer: str, hooks: Tuple[str, ...]) -> bool:
    """Whether PyG's explain mode is on or one of ``hooks`` is registered (Python only): the layer
    then runs PyG's message passing. A trace cannot record it (Python hooks, masks applied by
    data-dependent branches): refused."""
    if _MessagePassing is None or not (module._explain is True or _pyg_hooked(module, hooks)):
        return False
    if torch.jit.is_tracing():
        raise RuntimeError(
            f"gnnfuse.nn.{layer}: torch.jit.trace cannot record PyG's explain mode or message passing hooks "
            "(Python hooks and data-dependent branches); trace the layer without them, or use torch.jit.script, "
            "torch.compile or torch.export"
        )
    return True


def _pyg_propagates(module: torch.nn.Module, hooks: Tuple[str, ...]) -> bool:
    """Whether the messages must go through ``MessagePassing.propagate``: a hook is registered or
    ``explain_message`` is replaced on the instance (as PyG's GraphMaskExplainer does); the explain
    mode alone applies its mask without materialising the messages where the layer can."""
    return _pyg_hooked(module, hooks) or "explain_message" in module.__dict__


def _check_no_relation_weights(module: torch.nn.Module, layer: str) -> None:
    """to_hetero_with_bases (its HeteroBasisConv sets ``_edge_type`` during the call) weights each
    message ``[E, F]`` by its relation; an attention layer's messages are ``[E, heads, F]``: PyG's
    layer fails there with a count mismatch, this says why."""
    if "_edge_type" in module.__dict__:
        raise NotImplementedError(
            f"gnnfuse.nn.{layer}: to_hetero_with_bases weights messages of shape [E, F] by relation, and "
            f"{layer}'s messages are [E, heads, F] (PyG's {layer} fails there too); use to_hetero"
        )


def _explain_mask(module: torch.nn.Module, num_messages: int, dim_size: int) -> Tensor:
    """The factor of each message in PyG's ``MessagePassing.explain_message``: the edge mask
    (after a sigmoid if ``_apply_sigmoid``), and, when the layer added self-loops, the mask of
    the input's other edges (``_loop_mask``) followed by a 1 for each of ``dim_size`` loops."""
    edge_mask = module._edge_mask
    if edge_mask is None:
        raise ValueError("Could not find a pre-defined 'edge_mask' to explain. Did you forget to initialize it?")
    if module._apply_sigmoid:
        edge_mask = edge_mask.sigmoid()
    if num_messages != edge_mask.size(0):
        edge_mask = torch.cat([edge_mask[module._loop_mask], edge_mask.new_ones(dim_size)], 0)
    if num_messages != edge_mask.size(0):
        raise ValueError(
            f"{type(module).__name__}: the edge mask has {edge_mask.size(0)} entries for {num_messages} messages"
        )
    return edge_mask


def _glorot(t: Optional[Tensor]) -> None:
    if t is not None and not torch.nn.parameter.is_lazy(t):  # a lazy one is initialised when materialised
        a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
        with torch.no_grad():
            t.uniform_(-a, a)


class _LazyGlorotLinear(torch.nn.LazyLinear):
    """``torch.nn.LazyLinear`` without bias, glorot-initialised when the first input materialises
    it (PyG's ``Linear(-1, ..., weight_initializer="glorot")``); a plain ``torch.nn.Linear`` from
    then on. A materialised state loads into it before the first call (``LazyModuleMixin``)."""

    def __init__(self, out_channels: int) -> None:
        super().__init__(out_channels, bias=False)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            _glorot(self.weight)


def _Linear(in_channels: int, out_channels: int) -> torch.nn.Linear:
    """``y = x W^T`` (PyG's ``Linear(..., bias=False)``: parameter ``weight``), glorot-initialised;
    lazy (input width from the first call) when ``in_channels <= 0``, as PyG's."""
    if in_channels <= 0:
        return _LazyGlorotLinear(out_channels)
    lin = torch.nn.Linear(in_channels, out_channels, bias=False)
    _glorot(lin.weight)
    return lin


def _DefaultLinear(in_channels: int, out_channels: int, bias: bool = True) -> torch.nn.Linear:
    """PyG's ``Linear`` with its default initialisation (kaiming-uniform weight, uniform bias, as
    ``torch.nn.Linear``); lazy when ``in_channels <= 0``."""
    if in_channels <= 0:
        return torch.nn.LazyLinear(out_channels, bias=bias)
    return torch.nn.Linear(in_channels, out_channels, bias=bias)


def _message_passing_args(module: torch.nn.Module, layer: str, kwargs: Dict[str, Any], node_dim: Optional[int]) -> None:
    """The keyword arguments of PyG's ``MessagePassing`` that the PyG layer forwards to it, set on
    ``module`` as PyG's attributes (``aggr``, ``flow``, ``node_dim``, ``decomposed_layers``);
    ``node_dim`` None: fixed to 0 by the layer.
    Accepted where they describe what gnnfuse computes: the sum aggregation (``"add"``, PyG's
    default for these layers, or ``"sum"``), ``flow="source_to_target"``, ``decomposed_layers``
    (PyG's chunking of the per-edge messages to save memory: same result, and gnnfuse builds no
    per-edge messages) and, for GCNConv, ``node_dim`` -2 or 0 (the same axis of 2-D features; the
    attention layers fix it to 0, so that PyG rejects it). Other values raise."""
    where = "gnnfuse.nn." + layer
    for key in kwargs:
        if key not in ("aggr", "aggr_kwargs", "flow", "node_dim", "decomposed_layers"):
            raise TypeError(f"{where}: unexpected keyword argument {key!r}")
    if node_dim is None and "node_dim" in kwargs:
        raise TypeError(f"{where}: got multiple values for keyword argument 'node_dim' (fixed to 0, as in PyG)")
    aggr = kwargs.get("aggr", "add")
    if not (isinstance(aggr, str) and aggr in ("add", "sum")) and type(aggr).__name__ != "SumAggregation":
        raise NotImplementedError(f"{where}: aggr={aggr!r} is not supported (only the sum aggregation, 'add')")
    if kwargs.get("aggr_kwargs"):
        raise NotImplementedError(f"{where}: aggr_kwargs={kwargs['aggr_kwargs']!r} is not supported (the sum aggregation takes none)")
    flow = kwargs.get("flow", "source_to_target")
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"{where}: expected flow to be 'source_to_target' or 'target_to_source' (got {flow!r})")
    if flow != "source_to_target":
        raise NotImplementedError(f"{where}: flow={flow!r} is not supported (pass edge_index.flip(0) instead)")
    dim = 0 if node_dim is None else kwargs.get("node_dim", node_dim)
    if dim not in (-2, 0):
        raise NotImplementedError(f"{where}: node_dim={dim!r} is not supported (nodes along axis 0 of 2-D features)")
    layers = kwargs.get("decomposed_layers", 1)
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"{where}: decomposed_layers must be a positive int (got {layers!r})")
    module.aggr = str(aggr)
    module.flow = flow
    module.node_dim = dim
    module.decomposed_layers = layers


def _is_sparse(edge_index: Tensor) -> bool:
    return edge_index.layout != torch.strided


def _check_edge_index(layer: str, edge_index: Tensor) -> None:
    if edge_index.dim() != 2 or _concrete(edge_index.size(0)) != 2:
        raise ValueError("gnnfuse.nn." + layer + ": edge_index must be a [2, E] tensor (sources, targets)")


# Input checks of the layers. They run in eager, TorchScript, torch.compile(fullgraph=True,
# dynamic=True) and torch.export: a condition on sizes is a guard there (an exported program with
# dynamic sizes asserts it at run time), and the messages are f-strings of sizes only, which
# TorchScript formats and Dynamo traces. A wrong rank is a ValueError (as `edge_index`'s), a wrong
# size a RuntimeError (as the ops' own checks): "gnnfuse.nn.<Layer>: argument '<name>' ... (got ...)".
def _cached_rows_eager(rowptr: Tensor, num_nodes: int) -> Tensor:
    """``rowptr`` of GCNConv's cached graph for ``x`` of ``num_nodes`` rows: as PyG, rows past the
    cached graph's nodes receive no messages (empty rows appended); fewer rows than the cached
    graph's nodes is an error (its edges would read past ``x``)."""
    cached = rowptr.size(0) - 1
    if num_nodes < cached:
        raise RuntimeError(
            f"gnnfuse.nn.GCNConv: argument 'x' has {num_nodes} rows, fewer than the {cached} nodes of the graph "
            "cached by the first call (cached=True); call reset_parameters() or use cached=False for another graph"
        )
    if num_nodes > cached:
        rowptr = torch.cat([rowptr, rowptr[-1:].expand(num_nodes - cached)])
    return rowptr


def _materialize(x: Any, of_sources: Tuple[Optional[torch.nn.Module], ...], of_targets: Tuple[Optional[torch.nn.Module], ...]) -> None:
    """Materialises the lazy projections (``in_channels=-1``) from the widths of ``x`` (a tensor,
    or a pair: sources, targets), before any check reads their ``in_features``: under
    torch.compile a lazy module called mid-trace makes Dynamo restart the frame, and the restart
    must meet the same checks as the first pass (else SpeculationLogDivergence). Eager and
    compiled only: a scripted layer is materialised."""
    for lins, t in ((of_sources, x if isinstance(x, Tensor) else x[0]), (of_targets, x if isinstance(x, Tensor) else x[1])):
        for lin in lins:
            if lin is not None and t is not None and isinstance(lin, torch.nn.LazyLinear):
                lin(t[:0])


def _graph_input(edge_index: Any) -> Any:
    """A :class:`gnnfuse.Graph` given for ``edge_index``: its edges as ``[2, E]`` (sources,
    targets) in CSR order; edge tensors (``edge_weight``, ``edge_attr``) then follow that order
    (GCNConv takes a weighted Graph's values as edge weights, ``_graph_weights``). Eager and
    compiled only (a scripted layer types ``edge_index`` as a tensor)."""
    return edge_index.to_edge_index() if isinstance(edge_index, _Graph) else edge_index


def _graph_weights(edge_index: Any, edge_weight: Optional[Tensor]) -> Optional[Tensor]:
    """``edge_weight``, else a weighted :class:`gnnfuse.Graph`'s values."""
    if edge_weight is None and isinstance(edge_index, _Graph):
        return edge_index.values
    return edge_weight


def _check_width(layer: str, name: str, x: Tensor, in_features: int, weight: Tensor) -> None:
    """``x`` has the projection's input width and (outside autocast) its dtype: a named error
    instead of matmul's (a lazy projection not yet materialised, ``in_features`` 0, checks
    nothing)."""
    if in_features > 0 and _concrete(x.size(-1)) != in_features:
        raise RuntimeError(
            f"gnnfuse.nn.{layer}: argument '{name}' must have in_channels={in_features} columns (got {x.size(-1)})"
        )
    if not torch.jit.is_scripting():
        if in_features > 0 and x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise RuntimeError(
                f"gnnfuse.nn.{layer}: argument '{name}' must have the layer's dtype, {str(weight.dtype)[6:]} "
                f"(got {str(x.dtype)[6:]}; convert the layer with .to(dtype) or the features)"
            )


def _check_features(layer: str, name: str, x: Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(
            f"gnnfuse.nn.{layer}: argument '{name}' must be 2-D [num_nodes, in_channels] (got a {x.dim()}-D tensor)"
        )


def _check_edge_attr(layer: str, edge_attr: Tensor, num_edges: int, edge_dim: Optional[int], x: Tensor) -> Tensor:
    """One row per edge of the input graph (before any self-loop is added), ``edge_dim`` columns
    (a 1-D ``edge_attr`` is one column, as PyG), the dtype of ``x`` (the layer's). Returns
    ``edge_attr`` (traced, the row check stays in the trace: use the returned tensor)."""
    if edge_attr.dim() != 1 and edge_attr.dim() != 2:
        raise ValueError(
            f"gnnfuse.nn.{layer}: argument 'edge_attr' must be [E, edge_dim] or [E] (got a {edge_attr.dim()}-D tensor)"
        )
    edge_attr = _check_per_edge("gnnfuse.nn." + layer, "edge_attr", "row", edge_attr, num_edges)
    width = 1 if edge_attr.dim() == 1 else _concrete(edge_attr.size(1))
    if edge_dim is not None and edge_dim > 0 and width != edge_dim:
        raise RuntimeError(
            f"gnnfuse.nn.{layer}: argument 'edge_attr' must have edge_dim={edge_dim} columns (got {width})"
        )
    if edge_attr.dtype != x.dtype:
        if torch.jit.is_scripting():  # (a dtype is an int in TorchScript)
            raise RuntimeError("gnnfuse.nn." + layer + ": argument 'edge_attr' must have the dtype of 'x'")
        else:
            raise RuntimeError(
                f"gnnfuse.nn.{layer}: argument 'edge_attr' must have the dtype of 'x', "
                f"{str(x.dtype)[6:]} (got {str(edge_attr.dtype)[6:]})"
            )
    return edge_attr


def _check_sparse_sizes(layer: str, adj_t: Tensor, num_src: int, num_dst: Optional[int]) -> None:
    """PyG takes the graph's sizes from a sparse adjacency ``[N_dst, N_src]``: the features must match."""
    if _tracing():
        raise RuntimeError(
            "gnnfuse.nn." + layer + ": torch.jit.trace of a layer given a sparse adjacency is not supported (its "
            "conversion branches on the layout and on coalescing); trace with an edge_index, or use "
            "torch.jit.script, torch.compile or torch.export"
        )
    if adj_t.size(1) != num_src or (num_dst is not None and adj_t.size(0) != num_dst):
        raise ValueError(
            "gnnfuse.nn." + layer + ": a sparse adjacency adj_t of shape [" + str(adj_t.size(0)) + ", "
            + str(adj_t.size(1)) + "] (targets, sources) does not match the node features"
        )


# The attention layers' choice between the fused ops (gat, graph_attention: no per-edge tensor,
# memory O(N.H.C), each backward kernel recomputing the softmax per edge) and the per-edge ops
# (sddmm, edge_softmax_heads, spmm_heads: [E, H] tensors, fewer passes over the edges; faster on
# this CPU at the sizes measured in bench/results). `fused=None` takes the fused ops once the
# [E, H] tensors (several kept for backward) would pass 2^24 elements (64 MiB each in float32),
# in eager and TorchScript (decided per call). A captured program (torch.compile, torch.export,
# torch.jit.trace) would keep one side of that rule for every size (an exported program with a
# dynamic E refused the graphs past it), so there `fused=None` takes the fused ops, right and
# O(N.H.C) in memory at any size (see `_size_rule_applies`).
def _transient_pattern(rowptr: Tensor, col: Tensor, transient: bool = True) -> None:
    """Marks a CSR the layer converted for this call alone: the CUDA Tensor-Core SpMM (auto
    mode) then builds no condensed view of it at its first sighting, which would be lost with the
    tensor; at the next call (the same graph converted again, in new memory) the pattern is
    remembered by contents with its views, and later calls use them (a ``Graph`` and a cached
    graph build theirs at the first call and keep them). Eager only: in a compiled, traced or
    scripted layer the first call builds a view too, and the pattern is remembered at the second."""
    if not torch.jit.is_scripting():  # (TorchScript compiles no part of it)
        if not torch.jit.is_tracing() and not torch.compiler.is_compiling():
            _mark_transient(rowptr, col, transient)


def _mark_transient(rowptr: Tensor, col: Tensor, transient: bool = True) -> None:
    global _TC_TRANSIENT
    if _TC_TRANSIENT is None:  # (the op exists where the CUDA adapters are built)
        _TC_TRANSIENT = hasattr(torch.ops.gnnfuse, "_cuda_tensor_cores_transient")
    if _TC_TRANSIENT:
        from torch._C import _functorch

        tensors = [rowptr, col]
        for i, t in enumerate(tensors):  # torch.func's wrappers: the tensors the kernels will see
            while _functorch.is_functorch_wrapped_tensor(t) and not _functorch.is_batchedtensor(t):
                t = _functorch.get_unwrapped(t)
            tensors[i] = t
        # (past functorch's front layer, which would wrap them again for the op)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchDynamicLayerFrontMode)):
            torch.ops.gnnfuse._cuda_tensor_cores_transient(tensors, transient)


_TC_TRANSIENT: Optional[bool] = None


class _Conversions:
    """The layers' conversions of a graph (GCNConv's normalised CSR), kept for later calls with
    the same inputs, in eager mode. An entry belongs to its input tensors (held weakly: it goes
    when one of them is freed) and is found for those very tensors, with the conversion's
    arguments, where their contents still equal a copy taken when it was stored (one compare,
    O(E); edge_index copied in int32), whatever wrote to them (version counters miss writes
    through ``.data``, NumPy, DLPack or the storage). So a graph passed call after call
    (full-batch training, every layer of a model) is converted once, as with ``cached=True``,
    and a changed graph is converted anew: the result is always a fresh conversion's. Memory per
    kept graph: the CSR and the copy (about 28 bytes per edge, 36 with weights), released with the
    input tensors. Nothing is kept for inputs that need a gradient, inference tensors or inference
    mode, sparse or subclassed tensors (torch.func's wrappers, fake tensors), under a Python
    dispatch mode, or in a compiled, traced or scripted program. At most ``capacity`` entries,
    the least recently used dropped first; storing for the same tensors replaces their entry. A
    new conversion is marked transient for the Tensor-Core SpMM (one call's graph) until it is
    used again. ``GNNFUSE_KEEP_CONVERSIONS=0`` turns it off."""

    def __init__(self, capacity: int = 8) -> None:
        import os

        self.capacity = capacity
        self.enabled = os.environ.get("GNNFUSE_KEEP_CONVERSIONS", "1") != "0"
        self.entries: typing.List[typing.Any] = []  # [refs, args, copies, value, reused], oldest first

    @staticmethod
    def _keyable(t: Optional[Tensor]) -> bool:
        if t is None:
            return True
        return (
            type(t) is torch.Tensor and t.layout == torch.strided and t.device.type != "meta" and not t.requires_grad and not t.is_inference()
            and not torch._C._functorch.is_functorch_wrapped_tensor(t)
        )

    @staticmethod
    def _copy(t: Optional[Tensor]) -> Optional[Tensor]:
        if t is None:
            return None
        if t.dtype == torch.int64:  # (node indices, validated below 2^31 by the layers' checks)
            return t.to(torch.int32)
        return t.detach().clone()

    @staticmethod
    def _equal(copy: Optional[Tensor], t: Optional[Tensor]) -> bool:
        if copy is None or t is None:
            return copy is None and t is None
        if copy.shape != t.shape or copy.device != t.device:
            return False
        if copy.dtype != t.dtype:
            return bool((copy == t).all())
        return torch.equal(copy, t)  # (a NaN weight never equals: converted anew)

    def usable(self, tensors: typing.Sequence[Optional[Tensor]]) -> bool:
        """Whether a conversion of ``tensors`` may be kept and looked up (eager, see above)."""
        if not self.enabled or torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
            return False
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        return _get_current_dispatch_mode() is None and all(self._keyable(t) for t in tensors)

    @staticmethod
    def _same(refs: typing.Sequence[Any], tensors: typing.Sequence[Optional[Tensor]]) -> bool:
        return len(refs) == len(tensors) and all(
            (r is None and t is None) or (r is not None and t is not None and r() is t) for r, t in zip(refs, tensors)
        )

    def lookup(self, tensors: typing.Sequence[Optional[Tensor]], args: Tuple[Any, ...]) -> Optional[Tuple[Tensor, ...]]:
        # (the list is replaced, never changed in place: a weakref callback may run meanwhile)
        entry = next((e for e in self.entries if e[1] == args and self._same(e[0], tensors)), None)
        if entry is None:
            return None
        self.entries = [e for e in self.entries if e is not entry]
        refs, entry_args, copies, value, reused = entry
        if not all(self._equal(c, t) for c, t in zip(copies, tensors)):
            return None  # (changed: dropped, converted anew)
        self.entries = self.entries + [entry]  # (most recently used last)
        if not reused:  # (used again: no longer one call's graph)
            _transient_pattern(value[0], value[1], False)
            entry[4] = True
        return value

    def _drop(self, ref: Any) -> None:
        self.entries = [e for e in self.entries if not any(r is ref for r in e[0])]

    def store(self, tensors: typing.Sequence[Optional[Tensor]], args: Tuple[Any, ...], value: Tuple[Tensor, ...]) -> None:
        import weakref

        refs = [None if t is None else weakref.ref(t, self._drop) for t in tensors]
        entry = [refs, args, [self._copy(t) for t in tensors], value, False]
        kept = [e for e in self.entries if not (e[1] == args and self._same(e[0], tensors))]
        self.entries = (kept + [entry])[-self.capacity :]

    def clear(self) -> None:
        self.entries = []


_CONVERSIONS = _Conversions()


def _csc_for_backward(
    rowptr: Tensor, col: Tensor, num_cols: int, x: Tensor
) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """The CSC view of the layer's graph when a backward will run (the adjoints of the edge ops
    walk by columns), built once per forward and given to every op: each would otherwise build
    its own in backward. Not in a trace (it would record the grad mode of the example call)."""
    if torch.is_grad_enabled() and x.requires_grad and not _tracing():
        colptr, row, perm = _ops.csr_transpose(rowptr, col, num_cols)
        return colptr, row, perm
    return None, None, None


def _fused_asked(fused: Optional[bool]) -> bool:
    """``fused=True`` given (a function: TorchScript types a None attribute as NoneType)."""
    return fused is not None and fused


def _use_fused(fused: Optional[bool], edge_heads: int) -> bool:
    if fused is None:
        if not _size_rule_applies(edge_heads):
            return True
        return _concrete(edge_heads) >= 16777216  # 2^24 (a literal: TorchScript reads no module globals)
    return fused


class GCNConv(_Base):
    """Graph convolution (Kipf & Welling): ``X' = D^-1/2 (A + I) D^-1/2 X W + b``.

    Arguments as ``torch_geometric.nn.GCNConv``: ``in_channels`` (-1: lazy), ``improved`` fills
    self-loops with 2, ``cached`` keeps the normalised graph of the first call (transductive use;
    with ``normalize`` only, as PyG; without it, in eager mode, the graph normalised for the same
    ``edge_index`` and ``edge_weight`` tensors is kept while they live and their contents are
    unchanged, shared by the layers of equal settings, see ``_Conversions``: another graph or a
    changed one is normalised anew), ``add_self_loops`` (default: ``normalize``) adds the
    missing self-loops, ``normalize`` applies the symmetric normalisation, ``bias``, and the
    ``MessagePassing`` keyword arguments (see ``_message_passing_args``). ``edge_weight`` is cast
    to ``x``'s dtype (the output has ``x``'s dtype). A sparse ``adj_t`` as ``edge_index`` is
    handled as PyG: its values are the edge weights (``edge_weight`` is ignored) and, with
    ``add_self_loops``, a loop (weight 1, or 2 with ``improved``) is added to every node, existing
    loops included. The dense product runs before or after the aggregation, whichever aggregates
    the narrower features (ties: aggregation first; :func:`gnnfuse.ops.gcn_plan`, the policy of
    :func:`gnnfuse.ops.gcn` too). ``fused`` (not in PyG): True runs the fused op ``gcn`` (no
    ``N x F_in`` temporary), False spmm and the GEMM, None chooses by input
    (:func:`gnnfuse.ops.gcn_fused_choice`: fused in inference on large inputs in eager and
    TorchScript; in a program captured by ``torch.compile``, ``torch.export`` or
    ``torch.jit.trace``, fused in inference whatever the size, since the program must not keep
    a choice made on the example's sizes; never on CUDA where both split products take Tensor
    Cores, :func:`gnnfuse.ops.split_on_tensor_cores`). With ``cached``, the cached graph follows the
    layer's dtype and device (``.double()``, ``.to(device)`` after the first call); given ``x``
    with more rows than the cached graph's nodes, the extra rows receive no messages (as PyG),
    with fewer it is a RuntimeError.

    A ``torch_geometric.nn.MessagePassing`` when PyG is installed: in PyG's explain mode the
    edge mask multiplies the normalised edge weights of the aggregation (PyG's message order:
    the input's edges other than self-loops, then one loop per node), and with a message passing
    hook registered the messages ``w_ij x_j W`` go through ``MessagePassing.propagate`` (not for a
    sparse ``adj_t``, which PyG runs through ``message_and_aggregate``: a clear error).
    Traced (``torch.jit.trace``), the layer reads the graph's sizes at run time; a cached layer
    traced after its first call records its cached graph and rejects ``x`` of another node count.
    """

    _cache: Optional[Tuple[Tensor, Tensor, Tensor]]
    _cached_edge_index: Optional[Tuple[Tensor, Tensor]]

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
        **kwargs: Any,
    ) -> None:
        _init_base(self, -2)
        _message_passing_args(self, "GCNConv", kwargs, -2)
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
        # PyG's form of the cached graph (see _forward_pyg), normalised: (edge_index, weights)
        self._cached_edge_index: Optional[Tuple[Tensor, Tensor]] = None

    def reset_parameters(self) -> None:
        _glorot(self.lin.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        self._cache = None
        self._cached_edge_index = None

    def _apply(self, fn, recurse: bool = True):
        # .to(device), .cuda(), ...: the cached graph moves with the parameters (its weights are
        # cast to the features' dtype where they are used, see _graph).
        super()._apply(fn, recurse)
        device = self.lin.weight.device
        cache, pyg = self._cache, self._cached_edge_index
        if (cache is not None and cache[0].is_meta) or (pyg is not None and pyg[0].is_meta):
            # A cache on the meta device has no values to move (e.g. .to("meta") then
            # .to_empty(device=...)): dropped, the next call normalises its graph again.
            self._cache = self._cached_edge_index = None
            return self
        if cache is not None:
            self._cache = (cache[0].to(device), cache[1].to(device), cache[2].to(device))
        if pyg is not None:
            self._cached_edge_index = (pyg[0].to(device), pyg[1].to(device))
        return self

    def _graph(
        self, edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int, dtype: torch.dtype, device: torch.device
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """(rowptr, col, normalised weights in CSR order). PyG caches the normalised graph only
        (``cached`` without ``normalize`` reads each call's graph). The cached graph follows the
        module: its weights, normalised in the first call's dtype, are cast to the features'
        dtype and device at every use (``.double()``, ``.bfloat16()``, ``.to(device)`` after the
        first call; a bfloat16 cache used in float32 keeps bfloat16's precision)."""
        cache = self._cache
        if self.cached and self.normalize and cache is not None:
            rowptr = cache[0]
            if _tracing():  # the trace records the cached graph: x must have its node count
                rowptr = _cached_rows(rowptr, num_nodes)
            else:
                rowptr = _cached_rows_eager(rowptr, num_nodes)
            return rowptr.to(device), cache[1].to(device), cache[2].to(device=device, dtype=dtype)
        pyg = self._cached_edge_index
        if self.cached and self.normalize and pyg is not None:
            # The graph cached by PyG's path (explain mode or a hook in the first call): one cached
            # graph for both paths, as PyG has one.
            rowptr, col, perm = _edge_index_to_csr(pyg[0], num_nodes)
            out = (rowptr, col, pyg[1].to(dtype)[perm])
            if not _tracing():
                self._cache = out
            return out
        keep_conversion = False
        if not torch.jit.is_scripting():  # (nested: TorchScript then compiles no part of it)
            if not (self.cached and self.normalize) and _CONVERSIONS.usable([edge_index, edge_weight]):
                keep_conversion = True
                args = ("gcn_norm", _concrete(num_nodes), dtype, device, self.improved, self.add_self_loops, self.normalize)
                kept = _CONVERSIONS.lookup([edge_index, edge_weight], args)
                if kept is not None:
                    return kept[0], kept[1], kept[2]
        inputs = (edge_index, edge_weight)
        edge_index, edge_weight, add_self_loops = self._edges(edge_index, edge_weight, num_nodes, dtype)
        # (forward validated edge_index; a sparse adj_t's edges are valid)
        out = gcn_norm(edge_index, edge_weight, num_nodes, self.improved, add_self_loops, self.normalize, dtype, False)
        if not (self.cached and self.normalize):
            _transient_pattern(out[0], out[1])
        if not torch.jit.is_scripting():
            if keep_conversion:
                _CONVERSIONS.store(inputs, args, out)
        keep = self.cached and self.normalize and not _tracing()  # (a trace reads each call's graph)
        if not torch.jit.is_scripting():
            # (a graph normalised under inference mode holds inference tensors, which a later
            # training call could not save for backward: the first call outside it caches)
            keep = keep and not torch.is_inference_mode_enabled()
        if keep:
            self._cache = out
            if not torch.jit.is_scripting():
                if not torch.compiler.is_compiling() and not _is_sparse(edge_index):
                    # PyG's form of the same graph, for the PyG path of a later call (explain
                    # mode, hooks): its message order, which a compiled program does not need.
                    self._cached_edge_index = self._pyg_norm(edge_index.long(), edge_weight, num_nodes, dtype)
        return out

    def _edges(
        self, edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int, dtype: torch.dtype
    ) -> Tuple[Tensor, Optional[Tensor], bool]:
        """(edge_index, edge_weight in x's dtype, whether gcn_norm still adds the self-loops)."""
        add_self_loops = self.add_self_loops
        if _is_sparse(edge_index):
            edge_index, edge_weight = to_edge_index("GCNConv", edge_index)
            if add_self_loops:
                # PyG's gcn_norm of a sparse adj_t adds a loop to every node, existing loops kept.
                edge_index, edge_weight = _add_self_loops(edge_index, edge_weight, num_nodes, 2.0 if self.improved else 1.0)
                add_self_loops = False
        if edge_weight is not None:
            edge_weight = edge_weight.to(dtype)
        return edge_index, edge_weight, add_self_loops

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
        """``edge_index``: ``[2, E]`` (sources, targets), a torch sparse ``adj_t`` ``[N, N]``, or a
        :class:`gnnfuse.Graph` (its edges in CSR order; a weighted Graph's values are the edge
        weights unless ``edge_weight`` is given, in that order)."""
        if not torch.jit.is_scripting():  # (a scripted layer is materialised)
            if isinstance(x, (tuple, list)):
                raise ValueError(
                    "gnnfuse.nn.GCNConv: received a tuple of node features (bipartite message passing), which "
                    "GCNConv does not support (as PyG's); use GATConv or TransformerConv"
                )
            if isinstance(self.lin, torch.nn.LazyLinear):  # a torch.nn.Linear once materialised
                self.lin(x[:0])  # materialises the lazy weight (in_channels=-1) from x's width
            edge_weight = _graph_weights(edge_index, edge_weight)
            edge_index = _graph_input(edge_index)
            # (PyG runs message_and_aggregate, and its hooks, for a sparse adj_t only)
            if _pyg_path(self, "GCNConv", _PYG_HOOKS + (_PYG_FUSED_HOOKS if _is_sparse(edge_index) else ())):
                return self._forward_pyg(x, edge_index, edge_weight)
        _check_features("GCNConv", "x", x)
        _check_width("GCNConv", "x", x, self.lin.in_features, self.lin.weight)
        edge_index = self._check_graph(x, edge_index)
        if not _is_sparse(edge_index) and edge_weight is not None:
            edge_weight = _check_edge_weight("gnnfuse.nn.GCNConv", edge_weight, edge_index.size(1))
            if edge_weight.device != x.device:
                raise RuntimeError(
                    f"gnnfuse.nn.GCNConv: argument 'edge_weight' must be on x's device, {x.device} (got {edge_weight.device})"
                )
        rowptr, col, w = self._graph(edge_index, edge_weight, x.size(0), x.dtype, x.device)
        in_channels = _concrete(x.size(-1))
        # (a trace records one path: by the tensors, whatever the grad mode of the example call)
        needs_grad = (torch.is_grad_enabled() or _tracing()) and (x.requires_grad or self.lin.weight.requires_grad)
        plan = gcn_plan(self.fused, x.size(0), in_channels, self.out_channels, needs_grad, split_on_tensor_cores(x))
        if plan == "fused":
            out = _ops.gcn(rowptr, col, w, x.contiguous(), self.lin.weight.t().contiguous())
        elif plan == "aggregate_first":
            out = self.lin(_ops.spmm(rowptr, col, w, x))
        else:
            out = _ops.spmm(rowptr, col, w, self.lin(x))
        if self.bias is not None:
            out = out + self.bias
        return out

    def _check_graph(self, x: Tensor, edge_index: Tensor) -> Tensor:
        if _is_sparse(edge_index):
            _check_sparse_sizes("GCNConv", edge_index, x.size(0), x.size(0))
            return edge_index
        _check_edge_index("GCNConv", edge_index)
        return _validate_edge_index(edge_index, x.size(0))

    def _forward_pyg(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> Tensor:
        """PyG's GCNConv on PyG's normalised edges (the input's edges other than self-loops, then a
        loop per node), for its explain mode and hooks (see ``_pyg_path``)."""
        if _is_sparse(edge_index):
            raise NotImplementedError(
                "gnnfuse.nn.GCNConv: PyG's explain mode and message passing hooks need an edge_index here (PyG runs "
                "a sparse adj_t through message_and_aggregate instead of messages); pass the adjacency's edge_index "
                "and edge_weight"
            )
        self._check_graph(x, edge_index)
        edge_index = edge_index.long()  # (PyG's aggregation scatters with int64 indices only)
        num_nodes = x.size(0)
        cache, fused_cache = self._cached_edge_index, self._cache
        if self.cached and self.normalize and cache is not None:
            edge_index, edge_weight = cache[0], cache[1]
        elif self.cached and self.normalize and fused_cache is not None:
            # The graph cached by the fused path (a compiled first call: no PyG form kept), its
            # edges in CSR order.
            rowptr, col, w = fused_cache
            rows = torch.arange(rowptr.size(0) - 1, device=rowptr.device)
            target = torch.repeat_interleave(rows, rowptr.diff())
            edge_index, edge_weight = torch.stack([col.long(), target]), w
            self._cached_edge_index = (edge_index, edge_weight)
        else:
            edge_index, edge_weight, add_self_loops = self._edges(edge_index, edge_weight, num_nodes, x.dtype)
            if self.normalize:
                edge_index, edge_weight = self._pyg_norm(edge_index, edge_weight, num_nodes, x.dtype, add_self_loops)
                if self.cached:
                    self._cached_edge_index = (edge_index, edge_weight)
        x = self.lin(x)
        if _pyg_propagates(self, _PYG_HOOKS):
            # propagate_type: (x: Tensor, edge_weight: Optional[Tensor])
            out = self.propagate(edge_index, x=x, edge_weight=edge_weight)
        else:  # the explain mode alone: the mask scales each message, i.e. its edge weight
            mask = _explain_mask(self, edge_index.size(1), num_nodes)
            weight = (mask if edge_weight is None else edge_weight * mask).to(x.dtype)
            rowptr, col, perm = _ops.edge_index_to_csr(edge_index, num_nodes)
            _transient_pattern(rowptr, col)
            out = _ops.spmm(rowptr, col, weight[perm], x)
        if self.bias is not None:
            out = out + self.bias
        return out

    def _pyg_norm(
        self,
        edge_index: Tensor,
        edge_weight: Optional[Tensor],
        num_nodes: int,
        dtype: torch.dtype,
        add_self_loops: Optional[bool] = None,
    ) -> Tuple[Tensor, Tensor]:
        """PyG's normalised edges, in its message order: the input's edges other than self-loops
        (with ``add_self_loops``), then one loop per node."""
        if add_self_loops is None:
            add_self_loops = self.add_self_loops
        return pyg_gcn_norm(edge_index, edge_weight, num_nodes, self.improved, add_self_loops, dtype)

    def message(self, x_j: Tensor, edge_weight: Optional[Tensor]) -> Tensor:
        """PyG's message (``MessagePassing.propagate``, see ``_forward_pyg``)."""
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"


class GATConv(_Base):
    """Graph attention (Velickovic et al.), multi-head, as ``torch_geometric.nn.GATConv``:

    ``alpha_ij = softmax_j(leaky_relu(a_src . W x_j + a_dst . W x_i [+ a_edge . W_e e_ij]))``,
    ``x'_i = ||_h sum_j alpha_ij^h W^h x_j`` (``concat``) or the mean over heads, ``+ b``.
    Arguments: ``heads``, ``concat``, ``negative_slope``, ``dropout`` (on the attention
    coefficients, training only), ``add_self_loops``, ``edge_dim``, ``fill_value`` (edge
    features of the added self-loops: a number, a tensor, or ``"mean"``, ``"add"``, ``"max"``,
    ``"min"``, ``"mul"`` of the incoming edges' features), ``bias``, ``residual``, and the
    ``MessagePassing`` keyword arguments (see ``_message_passing_args``); ``in_channels`` may be
    -1 (lazy) or a pair (bipartite: sources, targets; -1 lazy) and ``x`` a tensor or a pair
    ``(x_src, x_dst)``, ``x_dst`` possibly None (then no target term in the logits and no
    residual), as PyG. ``edge_index`` may be a torch sparse ``adj_t`` (PyG: its values, unless
    2-D or more, are ignored; with ``add_self_loops`` the loops are replaced and duplicates
    merged, and the returned attention weights are ``(adj_t with the weights as values,
    weights)``). The edge features' logits are computed as ``e_ij M`` with
    ``M[h] = sum_c att_edge[h, c] W_e[h*C + c]`` (``[E, heads]``, never ``[E, heads, C]``).
    ``fused`` (not in PyG): True runs the fused ``gat`` op, or ``gat_edge`` with edge features
    (no per-edge tensor but those logits), False the per-edge ops, None chooses by size in eager and TorchScript (see ``_use_fused``:
    the per-edge ops below 2^24 edge-heads, self-loops included) and takes the fused op at every
    size in a program captured by ``torch.compile``, ``torch.export`` or ``torch.jit.trace``.
    ``edge_attr`` must have one row per edge of ``edge_index`` (a RuntimeError names it).
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
        **kwargs: Any,
    ) -> None:
        _init_base(self, 0)
        _message_passing_args(self, "GATConv", kwargs, None)
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

    @overload
    def forward(
        self,
        x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: None = None,
    ) -> Tensor:
        pass

    @overload
    def forward(  # noqa: F811
        self,
        x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: bool = False,
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        pass

    def forward(  # noqa: F811
        self,
        x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]],
        edge_index: Tensor,
        edge_attr: Optional[Tensor] = None,
        size: Optional[Tuple[int, int]] = None,
        return_attention_weights: Optional[bool] = None,
    ):
        """Returns the output, or ``(output, (edge_index, attention [E, heads]))`` when
        ``return_attention_weights`` is True (as PyG 2.8; ``edge_index`` with the self-loops, the
        coefficients after dropout, the ones aggregated). ``edge_index`` may also be a
        :class:`gnnfuse.Graph` (its edges in CSR order; ``edge_attr`` then in that order). With False PyG returns the output
        alone; a scripted layer returns the pair for any bool (TorchScript types the result by
        the argument's type)."""
        H, C = self.heads, self.out_channels
        if not torch.jit.is_scripting():  # lazy projections first (_materialize)
            _materialize(x, (self.lin, self.lin_src), (self.lin_dst, self.res))
            edge_index = _graph_input(edge_index)
        single = False  # one x for sources and targets
        if isinstance(x, Tensor):
            single = True
            x_src_in = x
            x_dst_in: Optional[Tensor] = x
            _check_features("GATConv", "x", x_src_in)
        else:
            x_src_in = x[0]
            x_dst_in = x[1]
            _check_features("GATConv", "x[0]", x_src_in)
            if x_dst_in is not None:
                _check_features("GATConv", "x[1]", x_dst_in)
        # The projections, as PyG: one shared by sources and targets (int in_channels; a single
        # x projected once), or lin_src / lin_dst (pair in_channels, even for a single x).
        lin = self.lin
        lin_src = self.lin_src
        lin_dst = self.lin_dst
        x_dst: Optional[Tensor] = None
        if lin is not None:
            _check_width("GATConv", "x" if single else "x[0]", x_src_in, lin.in_features, lin.weight)
            x_src = lin(x_src_in).view(-1, H, C)
            if single:
                x_dst = x_src
            elif x_dst_in is not None:
                _check_width("GATConv", "x[1]", x_dst_in, lin.in_features, lin.weight)
                x_dst = lin(x_dst_in).view(-1, H, C)
        elif lin_src is not None and lin_dst is not None:
            _check_width("GATConv", "x" if single else "x[0]", x_src_in, lin_src.in_features, lin_src.weight)
            x_src = lin_src(x_src_in).view(-1, H, C)
            if x_dst_in is not None:
                _check_width("GATConv", "x" if single else "x[1]", x_dst_in, lin_dst.in_features, lin_dst.weight)
                x_dst = lin_dst(x_dst_in).view(-1, H, C)
        else:
            raise ValueError("gnnfuse.nn.GATConv: no input projection")

        adj_t: Optional[Tensor] = None
        if _is_sparse(edge_index):
            # PyG takes the sizes from adj_t [N_dst, N_src] and ignores `size`.
            adj_t = edge_index
            _check_sparse_sizes("GATConv", edge_index, x_src.size(0), None if x_dst is None else x_dst.size(0))
            num_src, num_dst = edge_index.size(1), edge_index.size(0)
            edge_index, values = to_edge_index("GATConv", edge_index)
            if edge_attr is None and values.dim() > 1:
                edge_attr = values  # as PyG: multi-dimensional values are edge features
        else:
            _check_edge_index("GATConv", edge_index)
            num_src = x_src.size(0) if size is None else size[0]
            if size is not None:
                num_dst = size[1]
            elif x_dst is not None:
                num_dst = x_dst.size(0)
            else:
                num_dst = num_src
            edge_index = _validate_edge_index(edge_index, num_src, num_dst)
        if not torch.jit.is_scripting():  # (nested: TorchScript then compiles no part of it)
            if _pyg_path(self, "GATConv", _PYG_HOOKS + _PYG_EDGE_UPDATE_HOOKS):
                return self._forward_pyg(
                    x_src, x_dst, x_dst_in, edge_index, edge_attr, size, num_src, num_dst, adj_t, return_attention_weights
                )
        a_src = (x_src * self.att_src).sum(-1)  # [N_src, H]
        if x_dst is not None:
            a_dst = (x_dst * self.att_dst).sum(-1)  # [N_dst, H]
        else:
            a_dst = a_src.new_zeros((num_dst, H))  # PyG: no target term

        lin_edge = self.lin_edge
        # as PyG: edge features are ignored without edge_dim
        edge_feat: Optional[Tensor] = edge_attr if lin_edge is not None else None
        if edge_feat is not None and lin_edge is not None:
            # (the projection's width: edge_dim, or a lazy one's once materialised; 0 before)
            edge_feat = _check_edge_attr("GATConv", edge_feat, edge_index.size(1), lin_edge.in_features, x_src_in)
        add_self_loops = self.add_self_loops
        if add_self_loops and adj_t is not None:
            edge_index, edge_feat = sparse_self_loops(edge_index, edge_feat, num_src, num_dst, self.fill_value)
            add_self_loops = False
        if add_self_loops:
            # PyG drops the self-loops and adds one per node < n. Here, with fixed sizes (no
            # data-dependent shapes under torch.compile): an existing self-loop is redirected to
            # a padding source num_src whose logit is -inf (weight exactly 0), and the loops
            # (v, v) are appended.
            edge_index, edge_feat = redirect_self_loops(
                edge_index, edge_feat, _minimum(num_src, num_dst), _maximum(num_src, num_dst), num_src, self.fill_value
            )
            a_src = torch.cat([a_src, a_src.new_full((1, H), float("-inf"))])
            x_src = torch.cat([x_src, x_src.new_zeros((1, H, C))])
            num_src = num_src + 1
        need_alpha = False
        if isinstance(return_attention_weights, bool):
            need_alpha = return_attention_weights or torch.jit.is_scripting()
        # CSR over targets (sources bounded by num_src: the op is given the larger count). One x
        # and no size: num_src (the padding source included) is that count, with no max, whose
        # symbolic form (max(N, N + 1)) torch.export cannot compare with num_dst + 1.
        num = num_src if single and size is None and adj_t is None else _maximum(num_src, num_dst)
        rowptr, col, perm = _edge_index_to_csr(edge_index, num)
        rowptr = rowptr[: num_dst + 1]
        _transient_pattern(rowptr, col)  # (and every pattern over these row pointers)
        # The edge features' logits (att_edge . lin_edge(e_ij)), [E, H] in CSR order: e_ij
        # times M = sum_c W_edge[h*C+c, :] att_edge[h, c] ([H, edge_dim]), never [E, H, C].
        a_edge: Optional[Tensor] = None
        att_edge = self.att_edge
        if lin_edge is not None and edge_feat is not None and att_edge is not None:
            if edge_feat.dim() == 1:
                edge_feat = edge_feat.view(-1, 1)
            if not torch.jit.is_scripting():  # (a scripted layer is materialised)
                if isinstance(lin_edge, torch.nn.LazyLinear):  # a torch.nn.Linear once materialised
                    lin_edge(edge_feat[:0])  # materialises the lazy weight (edge_dim=-1) from edge_attr's width
            m = (lin_edge.weight.view(H, C, -1) * att_edge.view(H, C, 1)).sum(1)
            a_edge = F.linear(edge_feat, m)[perm]
        if (
            # sized by the input edges, loops included
            _use_fused(self.fused, edge_index.size(1) * H)
            and not need_alpha
            and not (self.dropout > 0.0 and self.training)
        ):
            # The fused op: logits, softmax and weighted sum per destination, no [E, H] tensor
            # but the edge features' logits.
            if a_edge is not None:
                out = _ops.gat_edge(
                    rowptr, col, a_dst.contiguous(), a_src.contiguous(), a_edge.contiguous(), x_src.contiguous(),
                    float(self.negative_slope),
                )
            else:
                out = _ops.gat(rowptr, col, a_dst.contiguous(), a_src.contiguous(), x_src.contiguous(), float(self.negative_slope))
            alpha: Optional[Tensor] = None
        else:
            csc = _csc_for_backward(rowptr, col, num_src, x_src)
            score = _ops.sddmm_add(rowptr, col, a_dst.contiguous(), a_src.contiguous(), csc[0], csc[1], csc[2])  # [E, H], CSR order
            if a_edge is not None:
                score = score + a_edge
            score = F.leaky_relu(score, self.negative_slope)
            # PyG returns the coefficients after dropout (the ones aggregated)
            out, _, alpha = _softmax_aggregate(rowptr, col, score, x_src, self.dropout, self.training, csc)
        out = self._finish(out, x_dst_in)  # from [N_dst, H, C]
        if isinstance(return_attention_weights, bool):
            if not torch.jit.is_scripting() and not return_attention_weights:
                return out  # PyG 2.8: `if return_attention_weights:`
            assert alpha is not None
            # Coefficients in edge_index order (with the appended self-loops); the redirected
            # input self-loops (weight 0) are left out, as in PyG's output.
            alpha = _to_input_order(alpha, perm)
            if add_self_loops:
                kept = edge_index[0] != num_src - 1
                edge_index = edge_index[:, kept].long()  # (PyG's self-loops make it int64)
                alpha = alpha[kept]
            if adj_t is not None:
                # as PyG: adj_t (self-loops replaced, if added) with the coefficients as values
                return out, (sparse_like(adj_t, edge_index, alpha, num_dst, num_src), alpha)
            return out, (edge_index, alpha)
        return out

    def _finish(self, out: Tensor, x_dst_in: Optional[Tensor]) -> Tensor:
        out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(1)
        res = self.res
        if res is not None and x_dst_in is not None:
            out = out + res(x_dst_in)
        if self.bias is not None:
            out = out + self.bias
        return out

    def _forward_pyg(
        self,
        x_src: Tensor,
        x_dst: Optional[Tensor],
        x_dst_in: Optional[Tensor],
        edge_index: Tensor,
        edge_attr: Optional[Tensor],
        size: Optional[Tuple[int, int]],
        num_src: int,
        num_dst: int,
        adj_t: Optional[Tensor],
        return_attention_weights: Optional[bool],
    ):
        """PyG's GATConv message passing from the projections on (PyG's edge order: the input's
        edges other than self-loops, then a loop per node < min(N_src, N_dst)): the coefficients
        by ``edge_updater``, the messages ``alpha x_j`` by ``propagate``, where PyG's explain mode
        masks them and its hooks run (see ``_pyg_path``)."""
        _check_no_relation_weights(self, "GATConv")
        index_dtype = edge_index.dtype
        edge_index = edge_index.long()  # (PyG's softmax and aggregation scatter with int64 indices only)
        edge_feat = edge_attr if self.lin_edge is not None else None
        if self.add_self_loops and adj_t is not None:
            edge_index, edge_feat = sparse_self_loops(edge_index, edge_feat, num_src, num_dst, self.fill_value)
        elif self.add_self_loops:
            edge_index, edge_feat = remove_and_add_self_loops(edge_index, edge_feat, num_src, num_dst, self.fill_value)
        if adj_t is not None:
            size = (num_src, num_dst)  # PyG reads them from adj_t
        alpha_src = (x_src * self.att_src).sum(-1)
        alpha_dst = None if x_dst is None else (x_dst * self.att_dst).sum(-1)
        # (PyG generates propagate / edge_updater from these comments; `typing.`: gnnfuse.nn's
        # __all__ leaves Tuple out of the generated module's star import)
        # edge_updater_type: (alpha: typing.Tuple[Tensor, typing.Optional[Tensor]], edge_attr: Optional[Tensor])
        alpha = self.edge_updater(edge_index, alpha=(alpha_src, alpha_dst), edge_attr=edge_feat, size=size)
        # propagate_type: (x: typing.Tuple[Tensor, typing.Optional[Tensor]], alpha: Tensor)
        out = self.propagate(edge_index, x=(x_src, x_dst), alpha=alpha, size=size)
        out = self._finish(out, x_dst_in)
        if not return_attention_weights:
            return out
        if adj_t is not None:
            return out, (sparse_like(adj_t, edge_index, alpha, num_dst, num_src), alpha)
        return out, (edge_index.to(index_dtype), alpha)

    def edge_update(
        self,
        alpha_j: Tensor,
        alpha_i: Optional[Tensor],
        edge_attr: Optional[Tensor],
        index: Tensor,
        ptr: Optional[Tensor],
        dim_size: Optional[int],
    ) -> Tensor:
        """PyG's attention coefficients of each edge (``MessagePassing.edge_updater``, see
        ``_forward_pyg``): softmax over the target's edges, then dropout."""
        alpha = alpha_j if alpha_i is None else alpha_j + alpha_i
        if index.numel() == 0:
            return alpha
        if edge_attr is not None and self.lin_edge is not None:
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            e = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            alpha = alpha + (e * self.att_edge).sum(-1)
        alpha = F.leaky_relu(alpha, self.negative_slope)
        alpha = _pyg_softmax(alpha, index, ptr, dim_size)
        return attention_dropout(alpha, self.dropout, self.training)

    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:
        """PyG's message (``MessagePassing.propagate``, see ``_forward_pyg``)."""
        return alpha.unsqueeze(-1) * x_j

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class TransformerConv(_Base):
    """Graph transformer layer (Shi et al.), as ``torch_geometric.nn.TransformerConv``:

    ``x'_i = W_1 x_i + ||_h sum_j alpha_ij^h (W_3 x_j [+ W_e e_ij])``, with
    ``alpha_ij^h = softmax_j((W_2 x_i)^h . (W_4 x_j [+ W_e e_ij])^h / sqrt(C))``.

    Arguments: ``heads``, ``concat`` (else the mean over heads), ``beta`` (gated root weight),
    ``dropout`` (on the attention coefficients, training only), ``edge_dim``, ``bias``,
    ``root_weight``, and the ``MessagePassing`` keyword arguments (see ``_message_passing_args``);
    ``in_channels`` may be -1 (lazy) or a pair (bipartite: sources, targets; -1 lazy). Parameters
    ``lin_key``, ``lin_query``, ``lin_value``, ``lin_edge``, ``lin_skip``, ``lin_beta`` as PyG's.
    ``edge_index`` may be a torch sparse ``adj_t`` (as PyG: multi-dimensional values are the edge
    features; the returned attention weights are ``(adj_t, weights in its stored order)``).
    Without dropout or returned attention weights and with ``fused=True`` (not in PyG; None
    chooses by size in eager and TorchScript, see ``_use_fused``, and takes the fused op at
    every size in a program captured by ``torch.compile``, ``torch.export`` or
    ``torch.jit.trace``) the layer runs the fused op ``graph_attention``: no per-edge tensor in
    forward or backward (memory O(N.H.C)); otherwise ``sddmm_heads``, ``edge_softmax_heads``
    and ``spmm_heads`` ([E, H] tensors). With edge features, where PyG adds ``W_e e_ij`` to
    every key and value (``[E, H, C]`` tensors), the edge term of the scores is a bias
    ``(W_e^T q_i) . e_ij`` ``[E, H]`` and that of the output ``W_e sum_j alpha_ij e_ij`` (an
    ``[N, H, edge_dim]`` sum), memory O(N.H.C + E.(H + edge_dim)): by the per-edge ops, or
    with ``fused=True`` only (None takes the per-edge path at every size and in every
    frontend: faster, at about the same memory) the fused ops ``graph_attention_edge`` and
    ``graph_attention_edge_values``. ``edge_attr`` must have one row per edge (a RuntimeError
    names it) and ``edge_dim`` columns (a 1-D one is one column); without ``edge_dim`` it is
    ignored (PyG's layer adds it to the values as given).
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
        **kwargs: Any,
    ) -> None:
        _init_base(self, 0)
        _message_passing_args(self, "TransformerConv", kwargs, None)
        self.fused = fused
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.beta, self.root_weight, self.concat = beta and root_weight, root_weight, concat
        self.dropout, self.edge_dim = dropout, edge_dim
        self._alpha: Optional[Tensor] = None  # PyG's: the coefficients while _forward_pyg runs
        src, dst = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        hc = heads * out_channels
        self.lin_key = _DefaultLinear(src, hc, bias=bias)
        self.lin_query = _DefaultLinear(dst, hc, bias=bias)
        self.lin_value = _DefaultLinear(src, hc, bias=bias)
        if edge_dim is not None:
            self.lin_edge = _DefaultLinear(edge_dim, hc, bias=False)
        else:
            self.register_parameter("lin_edge", None)
        width = hc if concat else out_channels
        self.lin_skip = _DefaultLinear(dst, width, bias=bias)
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
        ``return_attention_weights`` is a bool (as PyG; the coefficients before dropout).
        ``edge_index`` may also be a :class:`gnnfuse.Graph` (its edges in CSR order; ``edge_attr``
        then in that order)."""
        H, C = self.heads, self.out_channels
        if not torch.jit.is_scripting():  # lazy projections first (_materialize)
            _materialize(x, (self.lin_key, self.lin_value), (self.lin_query, self.lin_skip))
            edge_index = _graph_input(edge_index)
        single = False
        if isinstance(x, Tensor):
            single = True
            x_src, x_dst = x, x
            _check_features("TransformerConv", "x", x)
        else:
            x_src, x_dst = x[0], x[1]
            _check_features("TransformerConv", "x[0]", x_src)
            _check_features("TransformerConv", "x[1]", x_dst)
        _check_width("TransformerConv", "x" if single else "x[1]", x_dst, self.lin_query.in_features, self.lin_query.weight)
        _check_width("TransformerConv", "x" if single else "x[0]", x_src, self.lin_key.in_features, self.lin_key.weight)
        query = self.lin_query(x_dst).view(-1, H, C)
        key = self.lin_key(x_src).view(-1, H, C)
        value = self.lin_value(x_src).view(-1, H, C)
        num_src, num_dst = x_src.size(0), x_dst.size(0)
        num = _maximum(num_src, num_dst)
        adj_t = edge_index
        if _is_sparse(edge_index):
            _check_sparse_sizes("TransformerConv", edge_index, num_src, num_dst)
            edge_index, values = to_edge_index("TransformerConv", edge_index)
            if edge_attr is None and values.dim() > 1:
                edge_attr = values  # as PyG: multi-dimensional values are edge features
        else:
            _check_edge_index("TransformerConv", edge_index)
            edge_index = _validate_edge_index(edge_index, num_src, num_dst)
        if not torch.jit.is_scripting():  # (nested: TorchScript then compiles no part of it)
            if _pyg_path(self, "TransformerConv", _PYG_HOOKS):
                return self._forward_pyg(query, key, value, edge_index, edge_attr, x_dst, adj_t, return_attention_weights)
        rowptr, col, perm = _edge_index_to_csr(edge_index, num)
        rowptr = rowptr[: num_dst + 1]
        _transient_pattern(rowptr, col)  # (and every pattern over these row pointers)
        scale = 1.0 / math.sqrt(C)
        lin_edge = self.lin_edge
        if lin_edge is not None and edge_attr is None:
            raise ValueError("gnnfuse.nn.TransformerConv: a layer with edge_dim needs edge_attr")
        alpha: Optional[Tensor] = None
        use_fused = _use_fused(self.fused, col.numel() * H) and return_attention_weights is None and not (
            self.dropout > 0.0 and self.training
        )
        if lin_edge is not None and edge_attr is not None:
            edge_attr = _check_edge_attr("TransformerConv", edge_attr, edge_index.size(1), lin_edge.in_features, x_src)
            if edge_attr.dim() == 1:
                edge_attr = edge_attr.view(-1, 1)
            if not torch.jit.is_scripting():  # (a scripted layer is materialised)
                if isinstance(lin_edge, torch.nn.LazyLinear):  # a torch.nn.Linear once materialised
                    lin_edge(edge_attr[:0])  # materialises the lazy weight (edge_dim=-1) from edge_attr's width
            # PyG adds e_ij = W_e ea_ij to every key and value ([E, H, C] tensors). Here, per head,
            # q_i . W_e ea_ij = (W_e^T q_i) . ea_ij: a bias [E, H] from p = W_e^T q [N, H, D]; and
            # sum_j alpha_ij W_e ea_ij = W_e (sum_j alpha_ij ea_ij), an [N, H, D] sum.
            w_e = lin_edge.weight.view(H, C, -1)  # [H, C, D]
            qs = query * scale
            p = torch.einsum("nhc,hcd->nhd", [qs, w_e.to(qs.dtype)])
            ea = edge_attr[perm].contiguous()  # CSR order
            csc = _csc_for_backward(rowptr, col, num_src, value)
            # every head in one pass over the edges (sddmm_edge_heads: bias[e, h] = p[i, h] . ea[e])
            bias = _ops.sddmm_edge_heads(rowptr, col, p.contiguous(), ea, csc[0], csc[1], csc[2])
            # Fused only when asked for (fused=True): with the bias [E, H] there anyway, the
            # per-edge path's [E, H] tensors cost little more memory, and its backward reads them
            # where the two fused ops' adjoints recompute every score (bench/README.md: per-edge
            # 2-5x PyG's fwd+bwd, fused 0.7-1.9x, at about the same memory).
            if use_fused and _fused_asked(self.fused):
                # Fused: the scores, softmax and both weighted sums per destination, no [E, H] tensor but the bias.
                out = _ops.graph_attention_edge(rowptr, col, qs.contiguous(), key.contiguous(), bias, value.contiguous(), csc[0], csc[1], csc[2])
                z = _ops.graph_attention_edge_values(rowptr, col, qs.contiguous(), key.contiguous(), bias, ea, csc[0], csc[1], csc[2])
            else:
                score = _ops.sddmm_heads(rowptr, col, qs.contiguous(), key.contiguous(), csc[0], csc[1], csc[2]) + bias
                out, alpha, used = _softmax_aggregate(rowptr, col, score, value, self.dropout, self.training, csc)
                # sum_j used_ij ea_ij, every head in one pass over the edges (spmm_edge_heads)
                z = _ops.spmm_edge_heads(rowptr, col, used.contiguous(), ea, csc[0], csc[1], csc[2])
            out = out + torch.einsum("nhd,hcd->nhc", [z, w_e.to(z.dtype)]).to(out.dtype)  # (one dtype under autocast)
        elif use_fused:
            out = _ops.graph_attention(rowptr, col, (query * scale).contiguous(), key.contiguous(), value.contiguous())
        else:
            # Scores [E, H] (sddmm_heads), softmax, weighted sum: no [E, H, C] tensor.
            csc = _csc_for_backward(rowptr, col, num_src, value)
            score = _ops.sddmm_heads(rowptr, col, (query * scale).contiguous(), key.contiguous(), csc[0], csc[1], csc[2])
            out, alpha, _ = _softmax_aggregate(rowptr, col, score, value, self.dropout, self.training, csc)
        out = self._finish(out, x_dst)
        if isinstance(return_attention_weights, bool):
            assert alpha is not None
            return out, (adj_t, _to_input_order(alpha, perm))  # adj_t: edge_index or the sparse input
        return out

    def _finish(self, out: Tensor, x_dst: Tensor) -> Tensor:
        out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(1)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                b = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = b * x_r + (1 - b) * out
            else:
                out = out + x_r
        return out

    def _forward_pyg(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        edge_index: Tensor,
        edge_attr: Optional[Tensor],
        x_dst: Tensor,
        adj_t: Tensor,
        return_attention_weights: Optional[bool],
    ):
        """PyG's TransformerConv message passing from the projections on: the messages
        ``alpha_ij (v_j [+ e_ij])`` by ``propagate``, where PyG's explain mode masks them and its
        hooks run (see ``_pyg_path``); the coefficients are ``self._alpha`` meanwhile, as PyG's."""
        _check_no_relation_weights(self, "TransformerConv")
        edge_index = edge_index.long()  # (PyG's softmax and aggregation scatter with int64 indices only)
        if self.lin_edge is None:
            edge_attr = None  # as the fused path: edge features are ignored without edge_dim
        elif edge_attr is None:
            raise ValueError("gnnfuse.nn.TransformerConv: a layer with edge_dim needs edge_attr")
        elif edge_attr.dim() == 1:
            edge_attr = edge_attr.view(-1, 1)
        # propagate_type: (query: Tensor, key: Tensor, value: Tensor, edge_attr: Optional[Tensor])
        out = self.propagate(edge_index, query=query, key=key, value=value, edge_attr=edge_attr)
        alpha = self._alpha
        self._alpha = None
        out = self._finish(out, x_dst)
        if isinstance(return_attention_weights, bool):
            return out, (adj_t, alpha)
        return out

    def message(
        self,
        query_i: Tensor,
        key_j: Tensor,
        value_j: Tensor,
        edge_attr: Optional[Tensor],
        index: Tensor,
        ptr: Optional[Tensor],
        size_i: Optional[int],
    ) -> Tensor:
        """PyG's message (``MessagePassing.propagate``, see ``_forward_pyg``)."""
        if self.lin_edge is not None:
            assert edge_attr is not None
            edge_attr = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            key_j = key_j + edge_attr
        alpha = (query_i * key_j).sum(dim=-1) / math.sqrt(self.out_channels)
        alpha = _pyg_softmax(alpha, index, ptr, size_i)
        self._alpha = alpha
        alpha = attention_dropout(alpha, self.dropout, self.training)
        out = value_j if edge_attr is None else value_j + edge_attr
        return out * alpha.view(-1, self.heads, 1)

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
    Runs eager, under ``torch.compile`` and ``torch.export``; not under TorchScript (``graph``
    takes any graph form, a Python union): script a module that calls
    ``torch.ops.gnnfuse.coarsen_assemble`` and ``spmm`` on CSR tensors instead.
    """

    def __init__(self, reduce: str = "mean", remove_self_loops: bool = False) -> None:
        super().__init__()
        if reduce not in ("sum", "mean", "max"):
            raise ValueError(f"CoarsenPool: reduce must be 'sum', 'mean' or 'max' (got {reduce!r})")
        self.reduce = reduce
        self.remove_self_loops = remove_self_loops

    def forward(self, x: Tensor, graph, cluster: Optional[Tensor] = None, num_clusters: Optional[int] = None,
                edge_weight: Optional[Tensor] = None):
        """Pools ``x`` by ``cluster`` (default: a heavy-edge matching of ``graph``) and coarsens
        ``graph``: returns ``(x_pooled [num_clusters, F], coarse_graph, coarse_edge_weight)``."""
        from .cluster import heavy_edge_matching
        from .graph import Graph, infer_num_nodes
        from .ops import spmm
        from .sparse import _assignment, _coarsen_csr, _coarsen_inputs

        if cluster is None:
            if num_clusters is not None:
                raise ValueError("CoarsenPool: num_clusters given without cluster (the matching chooses its own count)")
            cluster, num_clusters = heavy_edge_matching(graph, edge_weight, num_nodes=x.size(0))
        elif num_clusters is None:
            num_clusters = infer_num_nodes(cluster)
        if x.dim() == 0 or x.size(0) != cluster.numel():
            raise RuntimeError(
                f"CoarsenPool: argument 'x' must have one row per node, {cluster.numel()} (the length of 'cluster') "
                f"(got shape {tuple(x.shape)})"
            )
        rowptr, col, w = _coarsen_inputs(graph, cluster, edge_weight)
        assignment = _assignment(cluster, num_clusters, rowptr.dtype)
        coarse, coarse_w = _coarsen_csr(rowptr, col, w, assignment, num_clusters, self.remove_self_loops)
        _, _, mrowptr, mcol = assignment
        members = Graph(mrowptr, mcol, num_clusters, cluster.numel())
        return spmm(members, x, reduce=self.reduce), coarse, coarse_w

    def extra_repr(self) -> str:
        return f"reduce={self.reduce!r}, remove_self_loops={self.remove_self_loops}"
