"""Test graphs and float64 dense references for the gnnfuse pytest suite.

Every graph is a :class:`GraphCase`: a PyG-style ``edge_index`` (int64,
``[2, E]``, row 0 source ``j``, row 1 target ``i``) plus the number of target
nodes ``num_nodes`` (rows ``N``) and source nodes ``num_src_nodes`` (columns
``M``).  Edges are deliberately *not* sorted, so the CSR conversion has work
to do.  The references here are written independently of the library: plain
Python sorting for the CSR layout, dense float64 matrices for the ops.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor


@dataclasses.dataclass(frozen=True)
class GraphCase:
    name: str
    edge_index: Tensor  # int64 [2, E]
    num_nodes: int  # N: targets / CSR rows
    num_src_nodes: int  # M: sources / CSR columns

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

    @property
    def src(self) -> Tensor:
        return self.edge_index[0]

    @property
    def dst(self) -> Tensor:
        return self.edge_index[1]

    def edge_index_as(self, dtype: torch.dtype) -> Tensor:
        return self.edge_index.to(dtype).contiguous()

    def __repr__(self) -> str:  # shows up in pytest ids / failure messages
        return f"GraphCase({self.name}: N={self.num_nodes}, M={self.num_src_nodes}, E={self.num_edges})"


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _shuffle(edge_index: Tensor, gen: torch.Generator) -> Tensor:
    order = torch.randperm(edge_index.size(1), generator=gen)
    return edge_index[:, order].contiguous()


def _zipf(n: int, size: int, exponent: float, gen: torch.Generator) -> Tensor:
    """``size`` draws from {0..n-1}, P(rank r) ~ 1 / (r+1)^exponent, ranks scattered over the ids."""
    probs = 1.0 / torch.arange(1, n + 1, dtype=torch.float64) ** exponent
    ranks = torch.multinomial(probs, size, replacement=True, generator=gen)
    ids = torch.randperm(n, generator=gen)
    return ids[ranks]


def empty_graph(num_nodes: int = 6) -> GraphCase:
    return GraphCase("no_edges", torch.empty(2, 0, dtype=torch.long), num_nodes, num_nodes)


def single_node() -> GraphCase:
    return GraphCase("single_node", torch.empty(2, 0, dtype=torch.long), 1, 1)


def single_node_self_loop() -> GraphCase:
    # one node, a self-loop given twice (duplicate edge)
    return GraphCase("single_node_loop", torch.tensor([[0, 0], [0, 0]]), 1, 1)


def uniform(num_nodes: int = 64, num_edges: int = 400, seed: int = 1) -> GraphCase:
    gen = _gen(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    return GraphCase("uniform", ei, num_nodes, num_nodes)


def empty_rows_isolated(num_nodes: int = 50, seed: int = 2) -> GraphCase:
    """Edges only among nodes [0, N/2), targets only even: odd rows are empty,
    nodes [N/2, N) are isolated (no in- or out-edges)."""
    gen = _gen(seed)
    half = num_nodes // 2
    e = 6 * half
    src = torch.randint(0, half, (e,), generator=gen)
    dst = 2 * torch.randint(0, (half + 1) // 2, (e,), generator=gen)
    return GraphCase("empty_rows_isolated", torch.stack([src, dst]), num_nodes, num_nodes)


def self_loops_duplicates(num_nodes: int = 20, seed: int = 3) -> GraphCase:
    """A ring, every self-loop, and a few edges repeated three times, shuffled."""
    gen = _gen(seed)
    n = torch.arange(num_nodes)
    ring = torch.stack([n, (n + 1) % num_nodes])
    loops = torch.stack([n, n])
    rep = torch.randint(0, num_nodes, (2, 5), generator=gen)
    ei = torch.cat([ring, loops, rep, rep, rep, loops[:, :3]], dim=1)
    return GraphCase("self_loops_duplicates", _shuffle(ei, gen), num_nodes, num_nodes)


def power_law(num_nodes: int = 300, num_edges: int = 3000, exponent: float = 1.1, seed: int = 4) -> GraphCase:
    """Zipf-like in- and out-degrees: a few hub rows with hundreds of entries, many empty rows."""
    gen = _gen(seed)
    dst = _zipf(num_nodes, num_edges, exponent, gen)
    src = _zipf(num_nodes, num_edges, exponent, gen)
    return GraphCase("power_law", torch.stack([src, dst]), num_nodes, num_nodes)


def bipartite(num_nodes: int, num_src_nodes: int, num_edges: int, seed: int, name: str) -> GraphCase:
    """Non-square: N targets, M sources (x has M rows, col < M)."""
    gen = _gen(seed)
    src = torch.randint(0, num_src_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    return GraphCase(name, torch.stack([src, dst]), num_nodes, num_src_nodes)


def square_cases() -> List[GraphCase]:
    return [
        empty_graph(),
        single_node(),
        single_node_self_loop(),
        uniform(),
        empty_rows_isolated(),
        self_loops_duplicates(),
        power_law(),
    ]


def bipartite_cases() -> List[GraphCase]:
    return [
        bipartite(40, 70, 300, seed=5, name="bipartite_more_sources"),  # M > N
        bipartite(70, 25, 300, seed=6, name="bipartite_fewer_sources"),  # M < N
    ]


def all_cases() -> List[GraphCase]:
    return square_cases() + bipartite_cases()


CASES: Dict[str, GraphCase] = {c.name: c for c in all_cases()}
CASE_NAMES: List[str] = list(CASES)
SQUARE_CASE_NAMES: List[str] = [c.name for c in square_cases()]


# --------------------------------------------------------------------------- references
def ref_csr(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor, Tensor]:
    """CSR over targets by plain Python: edges sorted by (target, source), stable.

    Returns int64 ``rowptr [N+1]``, ``col [E]`` and ``perm [E]`` with
    ``col[p] = edge_index[0, perm[p]]``.
    """
    src = edge_index[0].tolist()
    dst = edge_index[1].tolist()
    perm = sorted(range(len(src)), key=lambda e: (dst[e], src[e]))  # sorted() is stable
    counts = [0] * (num_nodes + 1)
    for t in dst:
        counts[t + 1] += 1
    for i in range(num_nodes):
        counts[i + 1] += counts[i]
    col = [src[e] for e in perm]
    return (
        torch.tensor(counts, dtype=torch.long),
        torch.tensor(col, dtype=torch.long),
        torch.tensor(perm, dtype=torch.long),
    )


def csr_rows(rowptr: Tensor) -> Tensor:
    """Row index of each CSR position (int64)."""
    rp = rowptr.tolist()
    rows: List[int] = []
    for i in range(len(rp) - 1):
        rows.extend([i] * (rp[i + 1] - rp[i]))
    return torch.tensor(rows, dtype=torch.long)


def ref_csr_transpose(rowptr: Tensor, col: Tensor, num_cols: int) -> Tuple[Tensor, Tensor, Tensor]:
    """CSC of a CSR by plain Python: positions stably sorted by (col, row)."""
    rows = csr_rows(rowptr).tolist()
    cols = col.tolist()
    perm = sorted(range(len(cols)), key=lambda p: (cols[p], rows[p]))
    counts = [0] * (num_cols + 1)
    for c in cols:
        counts[c + 1] += 1
    for j in range(num_cols):
        counts[j + 1] += counts[j]
    return (
        torch.tensor(counts, dtype=torch.long),
        torch.tensor([rows[p] for p in perm], dtype=torch.long),
        torch.tensor(perm, dtype=torch.long),
    )


def dense_adjacency(case: GraphCase, weight: Optional[Tensor] = None) -> Tensor:
    """float64 ``A [N, M]`` with ``A[i, j] = sum of the weights of all edges j -> i``
    (duplicates add up); ``weight`` in edge_index order, 1 if None."""
    a = torch.zeros(case.num_nodes, case.num_src_nodes, dtype=torch.float64)
    w = torch.ones(case.num_edges, dtype=torch.float64) if weight is None else weight.double()
    a.index_put_((case.dst, case.src), w, accumulate=True)
    return a


def gcn_inputs(case: GraphCase, perm: Tensor, f_in: int, f_out: int, dtype: torch.dtype, seed: int):
    """``(w, ew, x, W, gy)`` for a gcn test: weights ``w`` in edge_index order and ``ew`` in CSR
    order (``perm``), features, weight matrix and incoming gradient (seeds ``seed..seed+3``); the
    inputs require grad."""
    w = edge_weights(case.num_edges, dtype, seed=seed)
    x = features(case.num_src_nodes, f_in, dtype, seed=seed + 1).requires_grad_()
    W = features(f_in, f_out, dtype, seed=seed + 2).requires_grad_()
    gy = features(case.num_nodes, f_out, dtype, seed=seed + 3)
    return w, w[perm].clone().requires_grad_(), x, W, gy


def check_gcn_against_dense(case: GraphCase, perm: Tensor, w: Tensor, x: Tensor, W: Tensor, gy: Tensor, out: Tensor, grads) -> None:
    """``out`` = A x W and ``grads`` = its gradients (edge weights in CSR order, x, W) for the
    incoming gradient ``gy``, against dense float64 autograd; ``w`` in edge_index order."""
    xd, Wd, wd = x.detach().double().requires_grad_(), W.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = dense_adjacency(case, wd) @ xd @ Wd
    want_grads = torch.autograd.grad(want, (wd, xd, Wd), gy.double())
    tol = dict(rtol=1e-11, atol=1e-11) if out.dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.double(), want, **tol)
    torch.testing.assert_close(grads[0].double(), want_grads[0][perm], **tol)
    for got, ref in zip(grads[1:], want_grads[1:]):
        torch.testing.assert_close(got.double(), ref, **tol)


def ref_spmm(case: GraphCase, x: Tensor, weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """``(A @ x, |A| @ |x|)`` in float64; the second is the error scale for the tolerance."""
    a = dense_adjacency(case, weight)
    a_abs = dense_adjacency(case, None if weight is None else weight.abs())
    xd = x.double()
    return a @ xd, a_abs @ xd.abs()


def ref_sddmm(case: GraphCase, u: Tensor, v: Tensor, weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Per-edge scores in *edge_index order*: ``w_e * (U V^T)[i, j]``, and the error scale."""
    ud, vd = u.double(), v.double()
    s = ud @ vd.t()
    s_abs = ud.abs() @ vd.abs().t()
    w = torch.ones(case.num_edges, dtype=torch.float64) if weight is None else weight.double()
    return w * s[case.dst, case.src], w.abs() * s_abs[case.dst, case.src]


def ref_sddmm_spmm(
    case: GraphCase, u: Tensor, v: Tensor, x: Tensor, weight: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """``(A ⊙ U V^T) @ x`` in float64 (duplicates add up in A), and the error scale."""
    ud, vd, xd = u.double(), v.double(), x.double()
    a = dense_adjacency(case, weight)
    a_abs = dense_adjacency(case, None if weight is None else weight.abs())
    return (a * (ud @ vd.t())) @ xd, (a_abs * (ud.abs() @ vd.abs().t())) @ xd.abs()


TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10}


def assert_matches_ref(out: Tensor, ref: Tensor, scale: Tensor, dtype: torch.dtype) -> None:
    """``|out - ref| <= tol * scale`` elementwise, where ``scale`` is the same computation on
    absolute values (the natural bound of the rounding error of a sum): relative 1e-4 for
    float32, 1e-10 for float64.  Exact zeros are required where ``scale`` is 0 (empty rows)."""
    assert out.dtype == dtype, f"dtype {out.dtype} != {dtype}"
    assert out.shape == ref.shape, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    tol = TOLERANCE[dtype]
    err = (out.double() - ref).abs()
    bad = err > tol * scale
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{int(bad.sum())} of {out.numel()} elements off; first at {idx}: "
            f"got {out[tuple(idx)].item()!r}, want {ref[tuple(idx)].item()!r} "
            f"(|err|={err[tuple(idx)].item():.3g}, allowed {tol * scale[tuple(idx)].item():.3g})"
        )


def features(rows: int, cols: int, dtype: torch.dtype, seed: int) -> Tensor:
    return torch.randn(rows, cols, generator=_gen(seed), dtype=torch.float64).to(dtype)


def edge_weights(num_edges: int, dtype: torch.dtype, seed: int) -> Tensor:
    """Signed random weights (so that a sign or duplicate-handling bug cannot cancel out)."""
    return torch.randn(num_edges, generator=_gen(seed), dtype=torch.float64).to(dtype)


_CSR_CACHE: Dict[str, Tuple[Tensor, Tensor, Tensor]] = {}


def csr_of(name: str, index_dtype: torch.dtype = torch.int64) -> Tuple[Tensor, Tensor, Tensor]:
    """Reference CSR ``(rowptr, col, perm)`` of ``CASES[name]`` (rowptr/col in ``index_dtype``,
    perm int64), computed once per case."""
    if name not in _CSR_CACHE:
        case = CASES[name]
        _CSR_CACHE[name] = ref_csr(case.edge_index, case.num_nodes)
    rowptr, col, perm = _CSR_CACHE[name]
    return rowptr.to(index_dtype), col.to(index_dtype), perm


def ref_spmm_scatter(case: GraphCase, x: Tensor, weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`ref_spmm` without the dense matrix (for graphs too big for one): float64
    ``index_add`` over the edges in edge_index order."""
    xd = x.double()
    w = torch.ones(case.num_edges, dtype=torch.float64) if weight is None else weight.double()
    out = torch.zeros(case.num_nodes, x.size(1), dtype=torch.float64)
    out.index_add_(0, case.dst, w[:, None] * xd[case.src])
    scale = torch.zeros_like(out).index_add_(0, case.dst, w.abs()[:, None] * xd.abs()[case.src])
    return out, scale


def assert_frontend_matches_eager(module_cls, run, frontend: str) -> None:
    """``run(module)`` -> tensors (outputs and gradients), compared between an eager instance of
    ``module_cls`` and the same module through ``frontend``: ``"torchscript"`` or
    ``"compile:<backend>"`` (``torch.compile(fullgraph=True)``)."""
    if frontend == "torchscript":
        other = torch.jit.script(module_cls())
    else:
        other = torch.compile(module_cls(), backend=frontend.split(":", 1)[1], fullgraph=True)
    for a, b in zip(run(other), run(module_cls())):
        torch.testing.assert_close(a, b)


def distinct_edges(num_nodes: int, num_edges: int, seed: int, num_active: Optional[int] = None, loops: Tuple[int, ...] = ()) -> Tensor:
    """A random ``edge_index`` with distinct edges (the patterns spgemm locates need them) among
    the first ``num_active`` nodes (default: all; the others isolated), plus the self-loops
    ``loops``, sorted by (source, target)."""
    gen = _gen(seed)
    pairs = torch.randint(0, num_active or num_nodes, (2, 3 * num_edges), generator=gen)
    key = torch.unique(pairs[0] * num_nodes + pairs[1])[:num_edges]
    key = torch.unique(torch.cat([key, torch.tensor([v * num_nodes + v for v in loops], dtype=key.dtype)]))
    return torch.stack([key // num_nodes, key % num_nodes])
