"""The :class:`Graph`: a CSR over target nodes, as every gnnfuse op expects.

Convention (PyG): ``edge_index[0]`` holds the source ``j``, ``edge_index[1]`` the
target ``i``; messages flow ``j -> i``.  Row ``i`` of the CSR lists the sources
of target ``i``, ``col[rowptr[i]:rowptr[i+1]]``, sorted ascending.  Per-edge
tensors (weights, scores) handed to the ops are in that (``col``) order; for a
graph built from ``edge_index``, ``g.perm`` maps the input edge order to it:
``w_csr = w[g.perm]`` (see :meth:`Graph.permute_edge_values`).

A ``Graph`` only holds plain tensors (``rowptr``, ``col``, ``perm``, optional
``values``) and integers; the ops themselves take tensors, so TorchScript,
``torch.compile`` and C++ callers never see this class.

Index tensors are int32 or int64; the dtype given is kept.  All checking of
index data is done by the C++ ops (``csrc/torch/checks.h``), which raise
``RuntimeError("gnnfuse::<op>: argument '<name>' ... (got <value>)")``.
"""

from __future__ import annotations

import operator
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

# Public: Graph and to_graph. The other names without an underscore (infer_num_nodes, GraphLike,
# resolve, ...) are the package's helpers, shared by its modules (ops, sparse, cluster, nn).
__all__ = ["Graph", "to_graph"]


def infer_num_nodes(index: Tensor) -> int:
    """``max index + 1``, or 0 for an empty index tensor (eager only: it syncs)."""
    if index.numel() == 0:
        return 0
    return int(index.max()) + 1


class Graph:
    """A graph stored as a CSR over target nodes (rows = targets, columns = sources).

    Build one with :meth:`from_edge_index`, :meth:`from_csr` or :meth:`from_sparse`;
    the constructor itself trusts its arguments and checks nothing.

    Attributes:
        rowptr: ``[num_nodes + 1]`` row pointers (int32 or int64).
        col: ``[num_edges]`` source of each edge, sorted within each row
            (same dtype as ``rowptr``).
        num_nodes: number of target nodes (CSR rows).
        num_src_nodes: number of source nodes (CSR columns); equals
            ``num_nodes`` unless the graph is bipartite.  ``x`` passed to
            :func:`gnnfuse.ops.spmm` has this many rows.
        perm: int64 ``[num_edges]`` or None; for a graph built from
            ``edge_index``, CSR position ``p`` holds input edge ``perm[p]``.
        values: per-edge values in CSR order (the values of the sparse tensor a
            graph was built from with :meth:`from_sparse`), or None.  The ops in
            :mod:`gnnfuse.ops` use them as edge weights when no ``edge_weight``
            is given.
    """

    def __init__(
        self,
        rowptr: Tensor,
        col: Tensor,
        num_nodes: Optional[int] = None,
        num_src_nodes: Optional[int] = None,
        perm: Optional[Tensor] = None,
        values: Optional[Tensor] = None,
    ) -> None:
        self.rowptr = rowptr
        self.col = col
        self.num_nodes = rowptr.numel() - 1 if num_nodes is None else num_nodes
        self.num_src_nodes = self.num_nodes if num_src_nodes is None else num_src_nodes
        self.perm = perm
        self.values = values
        self._csc: Optional[Tuple[Tensor, Tensor, Tensor]] = None
        self._csc_key: Tuple[int, ...] = ()

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_edge_index(
        cls,
        edge_index: Tensor,
        num_nodes: Optional[int] = None,
        num_src_nodes: Optional[int] = None,
    ) -> "Graph":
        """Build the CSR of a PyG-style ``edge_index`` (``[2, E]``, row 0 source, row 1 target).

        Runs the registered op ``torch.ops.gnnfuse.edge_index_to_csr`` (which
        validates the indices), so this works under ``torch.compile`` and the
        result keeps ``edge_index``'s dtype.  Duplicate edges are kept, in input
        order (the sort is stable).

        The op checks every index against its ``num_nodes`` argument.  With
        ``num_src_nodes <= num_nodes`` that is ``num_nodes`` (sources in
        ``[num_src_nodes, num_nodes)`` are caught by each op call instead, which
        checks ``col < x.size(0)``); with ``num_src_nodes > num_nodes`` the op
        runs with ``num_src_nodes`` rows and the extra (empty) rows are cut off,
        which reads one value (a graph break under ``torch.compile``).

        Args:
            edge_index: int32 or int64 ``[2, E]``.
            num_nodes: number of targets; default ``edge_index.max() + 1`` (0 for
                no edges), or ``edge_index[1].max() + 1`` when ``num_src_nodes``
                is given.  Pass it explicitly inside compiled code: inferring it
                reads a value from the tensor.
            num_src_nodes: number of sources, if not ``num_nodes`` (bipartite).
        """
        num_nodes = _count("from_edge_index", "num_nodes", num_nodes)
        num_src_nodes = _count("from_edge_index", "num_src_nodes", num_src_nodes)
        if num_nodes is None:
            if num_src_nodes is None:
                num_nodes = infer_num_nodes(edge_index)
            else:
                num_nodes = infer_num_nodes(edge_index[1])
        if num_src_nodes is None or num_src_nodes <= num_nodes:
            rowptr, col, perm = torch.ops.gnnfuse.edge_index_to_csr(edge_index, num_nodes)
            return cls(rowptr, col, num_nodes, num_src_nodes, perm=perm)
        # More sources than targets: edge_index_to_csr bounds every index by its num_nodes,
        # so convert with num_src_nodes rows and keep the first num_nodes, which hold every
        # edge exactly when no target is >= num_nodes (one scalar read).
        rowptr, col, perm = torch.ops.gnnfuse.edge_index_to_csr(edge_index, num_src_nodes)
        if int(rowptr[num_nodes]) != col.numel():
            dst = edge_index[1]
            bad = int(dst[dst >= num_nodes][0])
            raise RuntimeError(
                "gnnfuse.Graph.from_edge_index: argument 'edge_index' must hold target "
                f"indices in [0, {num_nodes}) (got {bad})"
            )
        return cls(rowptr[: num_nodes + 1], col, num_nodes, num_src_nodes, perm=perm)

    @classmethod
    def from_csr(
        cls,
        rowptr: Tensor,
        col: Tensor,
        num_nodes: Optional[int] = None,
        num_src_nodes: Optional[int] = None,
        *,
        values: Optional[Tensor] = None,
        validate: bool = True,
    ) -> "Graph":
        """Wrap an existing CSR (rows = targets, sources sorted within each row).

        With ``validate=True`` the CSR is checked once, here, by the same C++
        validation every op runs (dtypes, 1-D, ``rowptr[0] == 0``, monotone,
        ``rowptr[-1] == col.numel()``, ``0 <= col < num_src_nodes``): the graph
        is passed through ``torch.ops.gnnfuse.spmm`` with a zero-width feature
        matrix, one pass over ``rowptr`` and ``col`` that allocates nothing of
        size ``nnz``.  Errors are the op's ``RuntimeError`` (they name
        ``gnnfuse::spmm`` and the offending argument).  Sortedness of the columns
        within a row is not checked.

        Args:
            rowptr, col: int32 or int64, the same dtype.
            num_nodes: number of rows; must equal ``rowptr.numel() - 1`` if given.
            num_src_nodes: number of columns; default ``num_nodes``.
            values: optional per-edge values in CSR order (kept as ``g.values``).
            validate: run the check described above.
        """
        num_nodes = _count("from_csr", "num_nodes", num_nodes)
        num_src_nodes = _count("from_csr", "num_src_nodes", num_src_nodes)
        rows = rowptr.numel() - 1
        if num_nodes is None:
            num_nodes = rows
        elif num_nodes != rows:
            raise ValueError(
                f"gnnfuse.Graph.from_csr: num_nodes={num_nodes} does not match "
                f"rowptr.numel() - 1 = {rows}"
            )
        if num_src_nodes is None:
            num_src_nodes = num_nodes
        if validate:
            _validate_csr(rowptr, col, num_src_nodes)
        return cls(rowptr, col, num_nodes, num_src_nodes, perm=None, values=values)

    @classmethod
    def from_sparse(cls, t: Tensor, *, validate: bool = True) -> "Graph":
        """Build a graph from a 2-D torch sparse matrix ``A`` (``[num_nodes, num_src_nodes]``).

        Rows are targets: ``A[i, j] != 0`` is an edge ``j -> i``.  A sparse CSR
        tensor is used as is (its ``crow_indices``/``col_indices`` dtype is
        kept); a COO tensor is coalesced first (duplicates summed) and converted
        to CSR with int64 indices; other sparse layouts go through COO.  The
        tensor's values become ``g.values`` (CSR order), which the ops use as
        edge weights by default.  ``g.perm`` is None.
        """
        if not isinstance(t, torch.Tensor) or t.layout == torch.strided:
            raise TypeError(
                "gnnfuse.Graph.from_sparse: expected a torch sparse tensor (CSR or COO), "
                f"got {type(t).__name__}"
                + (f" with layout {t.layout}" if isinstance(t, torch.Tensor) else "")
            )
        if t.dim() != 2 or t.dense_dim() != 0:
            raise ValueError(
                "gnnfuse.Graph.from_sparse: expected a 2-D sparse matrix with scalar "
                f"values, got shape {tuple(t.shape)} with dense_dim={t.dense_dim()}"
            )
        if t.layout != torch.sparse_csr:
            if t.layout != torch.sparse_coo:
                t = t.to_sparse_coo()
            t = t.coalesce().to_sparse_csr()
        return cls.from_csr(
            t.crow_indices(),
            t.col_indices(),
            t.size(0),
            t.size(1),
            values=t.values(),
            validate=validate,
        )

    @classmethod
    def from_scipy(cls, m, *, validate: bool = True) -> "Graph":
        """Build a graph from a scipy.sparse matrix or array ``A`` (any format; rows = targets,
        ``A[i, j] != 0`` is an edge ``j -> i``). Converted to CSR with sorted columns and
        summed duplicates (on a copy); the values become ``g.values`` (integer and boolean
        values as the default float dtype); int32 indices are kept when scipy stored them so."""
        csr = m.tocsr(copy=True)
        csr.sum_duplicates()
        csr.sort_indices()
        rowptr = torch.from_numpy(csr.indptr.copy())
        col = torch.from_numpy(csr.indices.copy())
        if rowptr.dtype != col.dtype:
            rowptr, col = rowptr.long(), col.long()
        kind = csr.data.dtype.kind
        if kind == "f":
            values = torch.from_numpy(csr.data.copy())
        elif kind in "biu":  # integer or boolean entries are weights too: as the default float dtype
            values = torch.from_numpy(csr.data.astype("float64")).to(torch.get_default_dtype())
        else:
            raise TypeError(
                f"gnnfuse.Graph.from_scipy: the matrix's values must be real numbers (got dtype {csr.data.dtype})"
            )
        return cls.from_csr(rowptr, col, csr.shape[0], csr.shape[1], values=values, validate=validate)

    @classmethod
    def from_dgl(cls, g) -> "Graph":
        """Build a graph from a DGL graph (homogeneous or one relation of a bipartite block):
        its edges ``(src, dst)`` become an ``edge_index`` (``g.perm`` maps CSR positions back
        to DGL's edge ids)."""
        src, dst = g.edges()
        return cls.from_edge_index(torch.stack([src, dst]), g.num_dst_nodes(), g.num_src_nodes())

    def to_scipy(self):
        """The CSR as a ``scipy.sparse.csr_matrix`` ``[num_nodes, num_src_nodes]`` (values, or
        ones for an unweighted graph)."""
        import numpy as np
        import scipy.sparse as sp

        data = self.values.detach().cpu().numpy() if self.values is not None else np.ones(self.num_edges, dtype=np.float32)
        return sp.csr_matrix(
            (data, self.col.cpu().numpy(), self.rowptr.cpu().numpy()), shape=(self.num_nodes, self.num_src_nodes)
        )

    def to_edge_index(self) -> Tensor:
        """``[2, E]`` (sources, targets) in CSR order."""
        rows = torch.repeat_interleave(
            torch.arange(self.num_nodes, device=self.col.device, dtype=self.col.dtype),
            self.rowptr.diff(), output_size=self.col.numel(),
        )
        return torch.stack([self.col, rows])

    # ---------------------------------------------------------------- properties
    @property
    def num_edges(self) -> int:
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        return self.rowptr.device

    @property
    def index_dtype(self) -> torch.dtype:
        return self.rowptr.dtype

    # ------------------------------------------------------------------- helpers
    def csc(self) -> Tuple[Tensor, Tensor, Tensor]:
        """The transposed (CSC) view ``(colptr, row, perm)``, computed once and cached.

        ``colptr`` has ``num_src_nodes + 1`` entries, ``row`` lists the targets of
        each source sorted ascending, and CSC position ``q`` holds CSR position
        ``perm[q]`` (so a CSR-ordered edge tensor ``w`` in CSC order is ``w[perm]``).
        Computed by ``torch.ops.gnnfuse.csr_transpose``.
        """
        csc = self.cached_csc()
        if csc is None:
            csc = torch.ops.gnnfuse.csr_transpose(self.rowptr, self.col, self.num_src_nodes)
            # Traced (torch.compile, export), the view is part of the program: not cached (the
            # key reads data pointers and version counters, which fake tensors do not have).
            if not torch.compiler.is_compiling():
                self._csc = csc
                self._csc_key = self._pattern_key()
        return csc

    def _pattern_key(self) -> Tuple[int, ...]:
        """What the cached CSC view was built from: the index tensors' storage, version
        counters (an in-place change of ``rowptr`` or ``col`` bumps them) and the column count."""

        def version(t: Tensor) -> int:
            return -1 if t.is_inference() else t._version

        return (self.rowptr.data_ptr(), self.col.data_ptr(), version(self.rowptr), version(self.col),
                self.rowptr.numel(), self.col.numel(), self.num_src_nodes)

    def cached_csc(self) -> Optional[Tuple[Tensor, Tensor, Tensor]]:
        """The cached CSC view if it is still that of ``rowptr``/``col`` (else it is dropped),
        or None. Under ``torch.compile`` the cache is trusted as it is (the graph is a
        constant of the traced program)."""
        if self._csc is not None and not torch.compiler.is_compiling() and self._csc_key != self._pattern_key():
            self._csc = None
        return self._csc

    def permute_edge_values(self, values: Tensor) -> Tensor:
        """Reorder a per-edge tensor given in input ``edge_index`` order into CSR order.

        Returns ``values[self.perm]``; the first dimension of ``values`` must be
        ``num_edges``.  Only for graphs built with :meth:`from_edge_index`.
        """
        if self.perm is None:
            raise ValueError(
                "gnnfuse.Graph.permute_edge_values: this graph was not built from an "
                "edge_index (perm is None); its per-edge tensors are already in CSR order"
            )
        if values.dim() == 0 or values.size(0) != self.num_edges:
            raise ValueError(
                "gnnfuse.Graph.permute_edge_values: expected a tensor with "
                f"{self.num_edges} rows (one per edge), got shape {tuple(values.shape)}"
            )
        return values[self.perm]

    def to(self, device, non_blocking: bool = False) -> "Graph":
        """A copy of the graph on ``device`` (the cached CSC view moves along). The index dtype
        is the graph's own (``Graph.from_csr(g.rowptr.int(), ...)`` makes an int32 copy)."""
        if not isinstance(device, (str, int, torch.device)):
            raise TypeError(f"gnnfuse.Graph.to: argument 'device' must be a device (got {device!r})")
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Graph":
        """A copy of the graph in pinned (page-locked) host memory, for asynchronous copies to a
        GPU (``g.pin_memory().to("cuda", non_blocking=True)``); the cached CSC view moves along."""
        return self._map(lambda t: t.pin_memory())

    def to_sparse_csr(self) -> Tensor:
        """The graph as a torch sparse CSR tensor ``[num_nodes, num_src_nodes]`` (rows are targets:
        PyG's ``adj_t``), its values or ones (default dtype) for an unweighted graph."""
        values = self.values if self.values is not None else torch.ones(self.num_edges, device=self.device)
        return torch.sparse_csr_tensor(self.rowptr, self.col, values, (self.num_nodes, self.num_src_nodes))

    def _map(self, fn) -> "Graph":
        """A copy with ``fn`` applied to every tensor (the cached CSC view included)."""

        def mv(t: Optional[Tensor]) -> Optional[Tensor]:
            return None if t is None else fn(t)

        g = Graph(
            mv(self.rowptr),
            mv(self.col),
            self.num_nodes,
            self.num_src_nodes,
            perm=mv(self.perm),
            values=mv(self.values),
        )
        if self._csc is not None:
            colptr, row, perm = self._csc
            g._csc = (mv(colptr), mv(row), mv(perm))
            g._csc_key = g._pattern_key()
        return g

    def __repr__(self) -> str:
        extra = ""
        if self.num_src_nodes != self.num_nodes:
            extra = f", num_src_nodes={self.num_src_nodes}"
        return (
            f"Graph(num_nodes={self.num_nodes}{extra}, num_edges={self.num_edges}, "
            f"index_dtype={self.index_dtype}, device={self.device}"
            + (", values" if self.values is not None else "")
            + ")"
        )


def to_graph(obj, num_nodes: Optional[int] = None, num_src_nodes: Optional[int] = None) -> Graph:
    """Any supported graph form as a :class:`Graph`: a ``Graph`` (returned as is), a torch
    sparse tensor (COO, CSR, CSC, BSR, BSC), a PyG ``edge_index`` or ``EdgeIndex`` (its
    ``sparse_size`` gives the node counts when known), a scipy.sparse matrix, or a DGL graph."""
    if isinstance(obj, Graph):
        return obj
    if isinstance(obj, torch.Tensor):
        if obj.layout != torch.strided:
            return Graph.from_sparse(obj)
        sparse_size = getattr(obj, "sparse_size", None)  # torch_geometric.EdgeIndex
        if callable(sparse_size):
            src_size, dst_size = sparse_size()
            if num_nodes is None and dst_size is not None:
                num_nodes = int(dst_size)
                if num_src_nodes is None and src_size is not None and src_size != dst_size:
                    num_src_nodes = int(src_size)
            obj = obj.as_subclass(torch.Tensor)
        return Graph.from_edge_index(obj, num_nodes, num_src_nodes)
    if hasattr(obj, "tocsr") and hasattr(obj, "shape"):
        return Graph.from_scipy(obj)
    if hasattr(obj, "edges") and hasattr(obj, "num_dst_nodes"):
        return Graph.from_dgl(obj)
    raise TypeError(
        "gnnfuse.to_graph: expected a gnnfuse.Graph, a torch sparse tensor, an edge_index, a "
        f"scipy.sparse matrix or a DGL graph, got {type(obj).__name__}"
    )


# ---------------------------------------------------------------------------------------------
# The graph forms the functional API accepts (gnnfuse.ops, gnnfuse.sparse, gnnfuse.cluster),
# resolved to the CSR the registered ops take.

GraphLike = Union[Graph, Tensor]

SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def is_convertible(graph) -> bool:
    """A scipy.sparse matrix or a DGL graph (converted by :func:`gnnfuse.to_graph`)."""
    return not isinstance(graph, (Graph, torch.Tensor)) and (
        (hasattr(graph, "tocsr") and hasattr(graph, "shape")) or (hasattr(graph, "edges") and hasattr(graph, "num_dst_nodes"))
    )


def implicit_weights(values: Optional[Tensor], dtype: Optional[torch.dtype]) -> Optional[Tensor]:
    """A graph's own values used as edge weights take the features' floating dtype (a scipy
    matrix holds float64 or integers whatever the model's dtype); an explicit ``edge_weight``
    is passed as given (the op checks it)."""
    if values is None or dtype is None or values.dtype == dtype:
        return values
    return values.to(dtype)


def resolve(
    graph: GraphLike, edge_weight: Optional[Tensor], num_nodes: int, fn: str, dtype: Optional[torch.dtype] = None
) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """Any graph form an op takes (see :mod:`gnnfuse.ops`), for the op named ``fn`` (in its
    error) -> (rowptr, col, edge_weight in CSR order, perm back to the caller's edge order or None).
    Without ``edge_weight``, the values of a weighted graph are the weights (in ``dtype`` when
    given)."""
    if is_convertible(graph):
        graph = to_graph(graph)  # scipy.sparse, DGL
    if isinstance(graph, Graph):
        if edge_weight is None:
            edge_weight = implicit_weights(graph.values, dtype)
        return graph.rowptr, graph.col, edge_weight, None
    if isinstance(graph, torch.Tensor):
        if graph.layout == torch.sparse_csr and graph.dim() == 2:  # (batched: from_sparse's error)
            if edge_weight is None:
                edge_weight = implicit_weights(graph.values(), dtype)
            return graph.crow_indices(), graph.col_indices(), edge_weight, None
        if graph.layout in SPARSE_LAYOUTS:
            g = Graph.from_sparse(graph, validate=False)  # the op validates anyway
            if edge_weight is None:
                edge_weight = implicit_weights(g.values, dtype)
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


def _count(fn: str, arg: str, value: object) -> Optional[int]:
    """A node count: None, an int, anything with ``__index__`` (a NumPy integer) or a 0-d integer
    tensor (read once) becomes an int; a SymInt (traced) stays. Anything else, say an edge weight
    given positionally, is a TypeError naming the argument instead of a failure further on."""
    if value is None or isinstance(value, torch.SymInt):
        return value  # type: ignore[return-value]
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 and not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool:
            return int(value)
    elif not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(
        f"gnnfuse.Graph.{fn}: argument '{arg}' must be an int (got {type(value).__name__}"
        + (f" of shape {tuple(value.shape)} and dtype {value.dtype}" if isinstance(value, torch.Tensor) else "")
        + "); edge weights go to the ops' 'edge_weight' or Graph(..., values=...)"
    )


def _validate_csr(rowptr: Tensor, col: Tensor, num_cols: int) -> None:
    """Run the C++ CSR checks once (see :meth:`Graph.from_csr`)."""
    if not isinstance(rowptr, torch.Tensor) or not isinstance(col, torch.Tensor):
        raise TypeError("gnnfuse.Graph.from_csr: rowptr and col must be tensors")
    x = torch.empty((num_cols, 0), dtype=torch.float32, device=rowptr.device)
    torch.ops.gnnfuse.spmm(rowptr, col, None, x)
