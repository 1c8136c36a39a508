#!/usr/bin/env python
"""Bitwise comparison of two builds of the gnnfuse library: outputs and gradients of every op.

    python scripts/compare_builds.py record --library A/libgnnfuse.so --out a.json
    python scripts/compare_builds.py record --library B/libgnnfuse.so --out b.json
    python scripts/compare_builds.py compare a.json b.json          # exit 1 on any difference
    python scripts/compare_builds.py run A/libgnnfuse.so B/libgnnfuse.so   # both records + compare

``record`` loads one library (``GNNFUSE_LIBRARY``, set before ``gnnfuse`` is imported: one
library per process) and runs, for every user op that has a spec (``ops/*.spec``, and
``tests/codegen/specs/*.spec`` for ops a ``--test-ops-library`` registers), on the edge-case
graphs of ``tests/python/graphs.py`` (empty, single node, duplicate self-loop, uniform, empty
rows and isolated nodes, self-loops and duplicates, power law, two bipartite), feature widths
F in {1, 3, 32, 129}, float32 and float64 (bfloat16 on a subset), int32 and int64 indices:
the forward outputs, the gradient of every floating input for a seeded random cotangent, and
the second-order gradients (inputs and cotangent) where the spec's ``grad_order`` is 2. Ops with
``variants`` run every lowering (``force_variant``) and the automatic choice; ops with
``symbolic`` also run ``<op>_symbolic`` and ``<op>_assemble``; the graph-format ops
(``edge_index_to_csr``, ``csr_transpose``, ``validate_edge_index``) and ``heavy_edge_matching``
run on every graph; and the layers GCNConv, GATConv and TransformerConv (fused, not fused and
the automatic choice) run forward and backward on a few graphs. Every tensor is recorded as the
SHA-256 of its dtype, shape and bytes (plus a few statistics to read a difference by);
``--tensors FILE.pt`` also saves the tensors, so that ``compare`` prints the largest absolute
difference. An error is recorded as its message: a build that starts or stops raising differs.

Inputs are built from each spec, not by hand: the index names are grouped into extents through
the expression (as ``tests/fuzz/fuzz_ops.cpp`` does), the graph gives the main csr operand's
rows and columns, the last other extent in the loop order is F and the others small widths
derived from F; further csr operands are seeded random patterns (``single``: one entry per row),
a ``symbolic`` pattern comes from ``<op>_symbolic``. ``HANDWRITTEN`` holds what a spec does not
say (coarsen's M is the transpose of an assignment and its two cluster extents are one).

Every value comes from a generator seeded by the entry's name, and the thread counts are fixed:
the whole matrix runs with ``--threads`` (default 1), then a second pass (keys ``parallel|``)
over three graphs (power law, uniform, bipartite), F in {3, 129}, with ``--parallel-threads``
(default 2), so that the kernels' parallel paths run (d/dweight of gcn sums per-thread copies:
reproducible for a given thread count only). ``--threads 2`` runs the whole matrix in parallel
(slow on a loaded 2-core machine: every parallel region waits for the scheduler). Two records
of one library are identical; ``compare`` reports records made with other thread counts.

The record also lists the registered ``gnnfuse::`` ops and the ops the run called (a
``TorchDispatchMode`` sees the derived adjoints, statistics and symbolic forms the autograd
nodes call); ``record`` prints the registered ops it never called.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMAT = 1

FEATURES = (1, 3, 32, 129)
# The second pass, with --parallel-threads: every op on these, every lowering, both dtypes and
# index dtypes, all optional arguments given. (With 2 threads on a loaded 2-core machine every
# parallel region waits for the scheduler, so this pass is kept small.)
PARALLEL_GRAPHS = ("power_law", "uniform", "bipartite_more_sources")
PARALLEL_FEATURES = (3, 129)
# The graph whose cases run under the TorchDispatchMode that notes the ops called.
WATCHED_GRAPH = "uniform"
# The extents other than the graph's and F (heads, contraction widths, gcn's other side), per F:
# on both sides of F so that gcn's automatic choice goes both ways.
SECONDARY = {1: 3, 3: 2, 32: 5, 129: 17}


# ================================================================ specs
class Decl:
    """One tensor of a spec: `sparse`, `edge`, `dense`, `count`, `select` or `output`."""

    def __init__(self, role: str, name: str, vars_: List[str], **kw: Any) -> None:
        self.role, self.name, self.vars = role, name, vars_
        self.rowptr = self.col = self.values = self.colptr = self.row = self.perm = None
        self.arg: Optional[str] = None
        self.pattern: Optional[str] = None
        self.single = self.acc = False
        self.__dict__.update(kw)


class Spec:
    def __init__(self, path: str) -> None:
        self.path = path
        self.name = ""
        self.decls: Dict[str, Decl] = {}
        self.extents: Dict[str, str] = {}  # index -> schema int argument
        self.order: List[str] = []
        self.symbolic: Optional[str] = None
        self.variants = False
        self.grad_order = 2
        self.dtypes: List[str] = []
        self.index: List[str] = []
        self.expr = ""
        access = r"(\w+)\(([^)]*)\)"
        for raw in open(path):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            key, _, val = line.partition(" ")
            val = val.strip()
            if key == "op":
                self.name = val
            elif key == "sparse":
                m = re.match(access + r"\s*=\s*csr\(([^)]*)\)(?:\s*csc\(([^)]*)\))?\s*(single)?", val)
                csr = _names(m.group(3))
                csc = _names(m.group(4) or "")
                self._add(Decl("sparse", m.group(1), _names(m.group(2)), rowptr=csr[0], col=csr[1],
                               values=csr[2] if len(csr) > 2 else None, colptr=csc[0] if csc else None,
                               row=csc[1] if csc else None, perm=csc[2] if csc else None, single=bool(m.group(5))))
            elif key in ("edge", "select"):
                m = re.match(access + r"\s+on\s+(\w+)\s*=\s*(\w+)", val)
                self._add(Decl(key, m.group(1), _names(m.group(2)), pattern=m.group(3), arg=m.group(4)))
            elif key == "dense":
                m = re.match(access + r"\s*=\s*(\w+)(\s+acc)?", val)
                self._add(Decl("dense", m.group(1), _names(m.group(2)), arg=m.group(3), acc=bool(m.group(4))))
            elif key == "count":
                m = re.match(access + r"\s+of\s+(\w+)", val)
                self._add(Decl("count", m.group(1), _names(m.group(2)), pattern=m.group(3)))
            elif key == "output":
                m = re.match(access + r"(?:\s+on\s+(\w+))?", val)
                self._add(Decl("output", m.group(1), _names(m.group(2)), pattern=m.group(3)))
            elif key == "extent":
                idx, _, arg = val.partition("=")
                self.extents[idx.strip()] = arg.strip()
            elif key == "order":
                self.order = val.split()
            elif key == "symbolic":
                self.symbolic = val
            elif key == "variants":
                self.variants = True
            elif key == "grad_order":
                self.grad_order = int(val)
            elif key == "dtypes":
                self.dtypes = val.split()
            elif key == "index":
                self.index = val.split()
            elif key == "expr":
                self.expr = val
        # Index classes: the names an operand is read with share its declared indices' extents.
        self.parent: Dict[str, str] = {}
        for d in self.decls.values():
            for v in d.vars:
                self.find(v)
        for v in self.order:
            self.find(v)
        for name, idx in re.findall(access, self.expr):
            if name in self.decls:
                for a, b in zip(_names(idx), self.decls[name].vars):
                    self.unite(a, b)

    def _add(self, d: Decl) -> None:
        self.decls[d.name] = d

    def find(self, v: str) -> str:
        p = self.parent.setdefault(v, v)
        if p != v:
            p = self.parent[v] = self.find(p)
        return p

    def unite(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)

    def sparse(self) -> List[Decl]:
        return [d for d in self.decls.values() if d.role == "sparse"]

    def main_sparse(self) -> Decl:
        """The csr operand the test graph is: the one on `rowptr`, else the first plain one."""
        cands = [d for d in self.sparse() if d.name != self.symbolic and not d.single]
        return next((d for d in cands if d.rowptr == "rowptr"), cands[0])


def _names(s: str) -> List[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def load_specs(dirs: Sequence[str]) -> Dict[str, Spec]:
    specs: Dict[str, Spec] = {}
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".spec"):
                s = Spec(os.path.join(d, f))
                specs[s.name] = s
    return specs


# What a spec does not say. `unite`: index classes of one extent; `transposed_assignment`: csr
# operands that are the transpose of an assignment (one entry per column), as coarsen's M = Pᵀ
# (the same seed as the `single` operand over the same extents, so on a square graph M = Pᵀ).
HANDWRITTEN: Dict[str, Dict[str, Any]] = {
    "coarsen": {"unite": [("c", "d")], "transposed_assignment": ["M"]},
}


# ================================================================ recording
class Recorder:
    def __init__(self, tensors_out: Optional[str]) -> None:
        self.entries: Dict[str, Dict[str, Any]] = {}
        self.prefix = ""  # "full|" or "parallel|": the pass
        self.tensors: Optional[Dict[str, Any]] = {} if tensors_out else None

    def put(self, key: str, value: Any) -> None:
        import numpy as np
        import torch

        key = self.prefix + key
        if key in self.entries:
            raise KeyError(f"compare_builds: entry {key} recorded twice")
        if isinstance(value, torch.Tensor):
            t = value.detach().contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            h = hashlib.sha256(f"{t.dtype}|{list(t.shape)}|".encode() + raw).hexdigest()
            e: Dict[str, Any] = {"sha256": h, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
            if t.numel() and (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
                # To read a difference by, not compared. By numpy: torch's sum depends on the
                # thread count.
                d = t.double().numpy()
                fin = d[np.isfinite(d)]
                e["nonfinite"] = int(d.size - fin.size)
                e["absmax"] = float(np.abs(fin).max()) if fin.size else 0.0
                e["sum"] = float(fin.sum())
            if self.tensors is not None:
                self.tensors[key] = t.clone()
            self.entries[key] = e
        elif value is None:
            self.entries[key] = {"none": True}
        elif isinstance(value, BaseException):
            msg = str(value).strip().splitlines()[0] if str(value).strip() else ""
            self.entries[key] = {"error": f"{type(value).__name__}: {msg}"}
        else:
            self.entries[key] = {"value": value}

    def run(self, key: str, fn: Callable[[], Any]) -> Any:
        """fn() recorded under key (a tuple as key/0, key/1, ...); an exception as an error entry."""
        try:
            out = fn()
        except Exception as err:  # noqa: BLE001 (every error is an observable behaviour)
            self.put(key, err)
            return None
        self.put_many(key, out)
        return out

    def put_many(self, key: str, out: Any) -> None:
        if isinstance(out, (tuple, list)):
            for k, o in enumerate(out):
                self.put(f"{key}/{k}", o)
        else:
            self.put(key, out)


def _seed(key: str) -> int:
    return zlib.crc32(key.encode())


def _randn(shape: Sequence[int], dtype: Any, key: str) -> Any:
    import torch

    g = torch.Generator()
    g.manual_seed(_seed(key))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def torch_sort_stable(key: Any) -> Any:
    import torch

    return torch.sort(key, stable=True).indices


class Pattern:
    def __init__(self, rowptr: List[int], col: List[int], ncols: int) -> None:
        self.rowptr, self.col, self.ncols = rowptr, col, ncols
        self._csc: Optional[Tuple[List[int], List[int], List[int]]] = None

    @property
    def nnz(self) -> int:
        return len(self.col)

    def csc(self) -> Tuple[List[int], List[int], List[int]]:
        """The CSC view as gnnfuse::csr_transpose makes it: positions stably sorted by column."""
        if self._csc is None:
            self._csc = self._make_csc()
        return self._csc

    def _make_csc(self) -> Tuple[List[int], List[int], List[int]]:
        rows = [i for i in range(len(self.rowptr) - 1) for _ in range(self.rowptr[i + 1] - self.rowptr[i])]
        perm = sorted(range(self.nnz), key=lambda p: (self.col[p], rows[p]))
        colptr = [0] * (self.ncols + 1)
        for c in self.col:
            colptr[c + 1] += 1
        for j in range(self.ncols):
            colptr[j + 1] += colptr[j]
        return colptr, [rows[p] for p in perm], perm


@functools.lru_cache(maxsize=None)
def random_pattern(rows: int, cols: int, key: str, single: bool = False, per_row: int = 3) -> Pattern:
    """Sorted distinct columns per row (located operands need them); `single`: one per row."""
    import torch

    g = torch.Generator()
    g.manual_seed(_seed(key))
    rowptr, col = [0], []
    for _ in range(rows):
        if cols == 0:
            c: List[int] = []
        elif single:
            c = [int(torch.randint(0, cols, (1,), generator=g))]
        else:
            n = int(torch.randint(0, 2 * per_row + 1, (1,), generator=g))
            c = sorted(set(torch.randint(0, cols, (n,), generator=g).tolist()))
        col += c
        rowptr.append(len(col))
    return Pattern(rowptr, col, cols)


@functools.lru_cache(maxsize=None)
def transpose(p: Pattern) -> Pattern:
    colptr, row, _ = p.csc()
    return Pattern(colptr, row, len(p.rowptr) - 1)


class Context:
    """The library, the specs and the graphs of one record."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
        import graphs  # the test graphs

        self.torch = torch
        self.graphs = graphs
        self.rec = Recorder(args.tensors)
        self.quick = args.quick
        self.parallel = False  # the second, smaller pass
        self.csr_cache: Dict[str, Pattern] = {}
        self.called: set = set()
        self.mode = _Calls(self.called).mode
        dirs = [os.path.join(ROOT, "ops")] + ([os.path.join(ROOT, "tests", "codegen", "specs")] if args.test_ops_library else [])
        self.specs = load_specs(dirs)
        self.registered = sorted(n[len("gnnfuse::"):] for n in torch._C._dispatch_get_all_op_names() if n.startswith("gnnfuse::"))

    def watching(self, on: bool) -> Any:
        """Note the gnnfuse ops called within (a TorchDispatchMode: slow, so on some cases only)."""
        return self.mode if on else contextlib.nullcontext()

    def graph_pattern(self, name: str) -> Pattern:
        if name not in self.csr_cache:
            # graphs.ref_csr's layout (edges stably sorted by (target, source)), by torch
            case = self.graphs.CASES[name]
            src, dst = case.edge_index
            perm = torch_sort_stable(dst * max(case.num_src_nodes, 1) + src)
            counts = self.torch.bincount(dst, minlength=case.num_nodes).cumsum(0)
            rowptr = [0] + counts.tolist()
            self.csr_cache[name] = Pattern(rowptr, src[perm].tolist(), case.num_src_nodes)
        return self.csr_cache[name]


# ---------------------------------------------------------------- spec ops
def op_cases(ctx: Context, spec: Spec) -> List[Tuple[str, int, str, str, str]]:
    """(graph, F, dtype, index dtype, mode) for one op. Modes: `full` (every optional argument),
    `nocsc` (no CSC caches: the backward builds them), `noweight` (optional values None)."""
    out = []
    schema = _schema_args(spec.name)
    optional_values = any(d.values and _optional(schema[d.values]) for d in spec.sparse())
    for g in ctx.graphs.CASE_NAMES if not ctx.parallel else PARALLEL_GRAPHS:
        for f in FEATURES if not ctx.parallel else PARALLEL_FEATURES:
            for dt in ("float32", "float64", "bfloat16"):
                if dt not in spec.dtypes:
                    continue
                if dt == "bfloat16" and (f not in (3, 32) or g not in ("uniform", "power_law", "self_loops_duplicates")):
                    continue
                for it in spec.index:
                    modes = ["full"]
                    if f == 3 and dt != "bfloat16" and not ctx.parallel:
                        modes.append("nocsc")
                        if optional_values:
                            modes.append("noweight")
                    if ctx.quick and (f not in (3, 32) or it != "int64"):
                        continue
                    for mode in modes:
                        out.append((g, f, dt, it, mode))
    return out


def _schema(name: str) -> Any:
    import torch

    return torch._C._get_schema(f"gnnfuse::{name}", "")


def _optional(arg: Any) -> bool:
    return str(arg.type).startswith("Optional[") or str(arg.type).endswith("?")


def _schema_args(name: str) -> Dict[str, Any]:
    return {a.name: a for a in _schema(name).arguments}


def build_inputs(ctx: Context, spec: Spec, graph: str, f: int, dtype: Any, itype: Any, mode: str, key: str) -> Tuple[Dict[str, Any], List[str]]:
    """Arguments by schema name, and the names of the floating ones (differentiable)."""
    torch = ctx.torch
    hw = HANDWRITTEN.get(spec.name, {})
    for a, b in hw.get("unite", []):
        spec.unite(a, b)
    case = ctx.graphs.CASES[graph]
    main = spec.main_sparse()
    size: Dict[str, int] = {spec.find(main.vars[0]): case.num_nodes}
    mc = spec.find(main.vars[1])
    if mc in size and size[mc] != case.num_src_nodes:
        raise ValueError("square")
    size[mc] = case.num_src_nodes
    order = spec.order or [v for d in spec.decls.values() for v in d.vars]
    rest = []
    for v in order + list(spec.parent):
        c = spec.find(v)
        if c not in size and c not in rest:
            rest.append(c)
    for k, c in enumerate(rest):
        size[c] = f if k == len(rest) - 1 else SECONDARY[f]

    def n(v: str) -> int:
        return size[spec.find(v)]

    acc = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    pats: Dict[str, Pattern] = {}
    for d in spec.sparse():
        if d.name == spec.symbolic:
            continue
        if d is main:
            pats[d.name] = ctx.graph_pattern(graph)
        elif d.name in hw.get("transposed_assignment", []):
            pats[d.name] = transpose(random_pattern(n(d.vars[1]), n(d.vars[0]), f"assign|{graph}|{n(d.vars[1])}|{n(d.vars[0])}", single=True))
        elif d.single:
            pats[d.name] = random_pattern(n(d.vars[0]), n(d.vars[1]), f"assign|{graph}|{n(d.vars[0])}|{n(d.vars[1])}", single=True)
        else:
            pats[d.name] = random_pattern(n(d.vars[0]), n(d.vars[1]), f"pattern|{graph}|{d.name}|{n(d.vars[0])}|{n(d.vars[1])}")

    def idx(v: List[int], dt: Any = None) -> Any:
        return torch.tensor(v, dtype=torch.long).to(dt or itype)

    args: Dict[str, Any] = {}
    floating: List[str] = []
    for d in spec.sparse():
        if d.name == spec.symbolic:
            continue
        p = pats[d.name]
        args[d.rowptr], args[d.col] = idx(p.rowptr), idx(p.col)
        if d.values:
            args[d.values] = _randn([p.nnz], dtype, f"{key}|{d.values}")
            floating.append(d.values)
        if d.colptr:
            colptr, row, perm = p.csc()
            args[d.colptr], args[d.row], args[d.perm] = idx(colptr), idx(row), idx(perm, torch.long)
    for d in spec.decls.values():
        if d.role == "dense":
            args[d.arg] = _randn([n(v) for v in d.vars], acc if d.acc else dtype, f"{key}|{d.arg}")
            floating.append(d.arg)
        elif d.role == "edge":
            args[d.arg] = _randn([pats[d.pattern].nnz] + [n(v) for v in d.vars[2:]], dtype, f"{key}|{d.arg}")
            floating.append(d.arg)
    for v, a in spec.extents.items():
        args[a] = n(v)
    schema = _schema_args(spec.name)
    for name, a in schema.items():
        if name not in args and str(a.type) == "float":
            args[name] = 0.2  # leaky_relu's negative slope
    if spec.symbolic:
        s = spec.decls[spec.symbolic]
        sym = getattr(torch.ops.gnnfuse, f"{spec.name}_symbolic")
        sargs = [args[a.name] for a in _schema(f"{spec.name}_symbolic").arguments]
        ctx.rec.run(f"{key}|symbolic", lambda: sym(*sargs))
        args[s.rowptr], args[s.col] = sym(*sargs)
        asm = getattr(torch.ops.gnnfuse, f"{spec.name}_assemble")
        aargs = [args[a.name] for a in _schema(f"{spec.name}_assemble").arguments]
        ctx.rec.run(f"{key}|assemble", lambda: asm(*aargs))
    for name, a in schema.items():
        optional = _optional(a)
        if optional and mode == "nocsc" and any(name in (d.colptr, d.row, d.perm) for d in spec.sparse()):
            args[name] = None
        if optional and mode == "noweight" and any(name == d.values for d in spec.sparse()):
            args[name] = None
            floating.remove(name)
    missing = [name for name in schema if name not in args]
    if missing:
        raise ValueError(f"no value for {missing}")
    return args, floating


def run_spec_op(ctx: Context, spec: Spec) -> int:
    """Every case of one user op; returns the number of cases."""
    torch = ctx.torch
    dtypes = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
    itypes = {"int32": torch.int32, "int64": torch.int64}
    op = getattr(torch.ops.gnnfuse, spec.name)
    schema = list(_schema_args(spec.name))
    family = [o for o in ctx.registered if o == spec.name or o.startswith(spec.name + "_")]
    variants = {o: c for o in family if (c := _variant_count(o)) > 1} if spec.variants else {}
    nvar = max(variants.values(), default=1)
    cases = 0
    for graph, f, dt, it, mode in op_cases(ctx, spec):
        base = f"{spec.name}|{graph}|F={f}|{dt}|{it}|{mode}"
        try:
            with ctx.watching(graph == WATCHED_GRAPH):
                args, floating = build_inputs(ctx, spec, graph, f, dtypes[dt], itypes[it], mode, base)
        except ValueError as err:
            if str(err) == "square":
                continue
            raise
        cases += 1
        for var in ["auto"] + [str(k) for k in range(nvar)] if nvar > 1 else ["auto"]:
            key = f"{base}|variant={var}"
            with contextlib.ExitStack() as stack:
                stack.enter_context(ctx.watching(graph == WATCHED_GRAPH))
                if var != "auto":
                    for o, c in variants.items():
                        if c > int(var):
                            stack.enter_context(_forced(o, int(var)))
                forward_backward(ctx, key, op, schema, args, floating, spec.grad_order)
                if var == "auto" and nvar > 1:
                    for o, c in variants.items():
                        if c > 1:
                            ctx.rec.put(f"{key}|last_variant:{o}", int(torch.ops.gnnfuse.last_variant(o)))
    if spec.symbolic:  # how often the symbolic and assembling forms found their pattern cached
        for o in (f"{spec.name}_symbolic", f"{spec.name}_assemble"):
            with ctx.watching(True):
                hits = int(torch.ops.gnnfuse.pattern_cache_hits(o))
            ctx.rec.put(f"{spec.name}|pattern_cache_hits:{o}", hits)
    return cases


def _variant_count(op: str) -> int:
    import torch

    try:
        return int(torch.ops.gnnfuse.variant_count(op))
    except RuntimeError:
        return 1


@contextlib.contextmanager
def _forced(op: str, k: int):
    import torch

    torch.ops.gnnfuse.force_variant(op, k)
    try:
        yield
    finally:
        torch.ops.gnnfuse.force_variant(op, -1)


def forward_backward(ctx: Context, key: str, op: Any, schema: List[str], args: Dict[str, Any], floating: List[str], grad_order: int) -> None:
    torch = ctx.torch
    leaves = {k: args[k].detach().clone().requires_grad_() for k in floating}
    call = [leaves.get(k, args[k]) for k in schema]
    out = ctx.rec.run(f"{key}|out", lambda: op(*call))
    if out is None:
        return
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    diff = [o for o in outs if o.is_floating_point() and o.requires_grad]
    names = list(leaves)
    if not diff or not names:
        return
    second = grad_order >= 2
    cots = [_randn(o.shape, o.dtype, f"{key}|cot{k}").requires_grad_(second) for k, o in enumerate(diff)]
    try:
        grads = torch.autograd.grad(diff, [leaves[k] for k in names], cots, create_graph=second, allow_unused=True)
    except Exception as err:  # noqa: BLE001
        ctx.rec.put(f"{key}|grad", err)
        return
    for k, g in zip(names, grads):
        ctx.rec.put(f"{key}|grad:{k}", g)
    if not second:
        return
    gs = [(k, g) for k, g in zip(names, grads) if g is not None and g.requires_grad]
    if not gs:
        return
    inputs2 = [leaves[k] for k in names] + cots
    names2 = names + [f"cot{k}" for k in range(len(cots))]
    vs = [_randn(g.shape, g.dtype, f"{key}|v:{k}") for k, g in gs]
    try:
        grads2 = torch.autograd.grad([g for _, g in gs], inputs2, vs, allow_unused=True)
    except Exception as err:  # noqa: BLE001
        ctx.rec.put(f"{key}|grad2", err)
        return
    for k, g in zip(names2, grads2):
        ctx.rec.put(f"{key}|grad2:{k}", g)


# ---------------------------------------------------------------- ops without a spec
def run_graph_ops(ctx: Context) -> int:
    torch, rec, G = ctx.torch, ctx.rec, ctx.graphs
    cases = 0
    for name, case in G.CASES.items() if not ctx.parallel else [(g, G.CASES[g]) for g in PARALLEL_GRAPHS]:
        for it in (torch.int32, torch.int64):
            key = f"graph_ops|{name}|{str(it)[6:]}"
            cases += 1
            ei = case.edge_index_as(it)
            rec.run(f"{key}|validate_edge_index", lambda: torch.ops.gnnfuse.validate_edge_index(ei, case.num_src_nodes, case.num_nodes) or "ok")
            # edge_index_to_csr bounds both rows by num_nodes (gnnfuse.Graph passes the larger count)
            n = max(case.num_nodes, case.num_src_nodes)
            csr = rec.run(f"{key}|edge_index_to_csr", lambda: torch.ops.gnnfuse.edge_index_to_csr(ei, n))
            if csr is None:
                continue
            rowptr, col, _ = csr
            rec.run(f"{key}|csr_transpose", lambda: torch.ops.gnnfuse.csr_transpose(rowptr, col, case.num_src_nodes))
            if case.num_nodes == case.num_src_nodes:
                w = _randn([col.numel()], torch.float32, f"{key}|w").abs()
                order = torch.randperm(case.num_nodes, generator=torch.Generator().manual_seed(_seed(key)))
                rec.run(f"{key}|heavy_edge_matching", lambda: torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, w, order))
                rec.run(f"{key}|heavy_edge_matching_unweighted", lambda: torch.ops.gnnfuse.heavy_edge_matching(rowptr, col, None, order))
    for op in ctx.registered:
        if _variant_count(op) > 1:
            rec.put(f"control|variant_count:{op}", _variant_count(op))
    return cases


# ---------------------------------------------------------------- layers
LAYER_GRAPHS = ("uniform", "self_loops_duplicates", "power_law", "empty_rows_isolated")


def run_layers(ctx: Context) -> int:
    torch = ctx.torch
    import gnnfuse
    from gnnfuse import nn

    makers = {
        "GCNConv": lambda fi, fo, fused: nn.GCNConv(fi, fo, fused=fused),
        "GATConv": lambda fi, fo, fused: nn.GATConv(fi, fo, heads=2, fused=fused),
        "TransformerConv": lambda fi, fo, fused: nn.TransformerConv(fi, fo, heads=2, fused=fused),
    }
    cases = 0
    for graph in LAYER_GRAPHS if not ctx.parallel else PARALLEL_GRAPHS[:1]:
        case = ctx.graphs.CASES[graph]
        for dt in (torch.float32, torch.float64):
            for fi, fo in ((16, 8), (5, 33)):
                for lname, make in makers.items():
                    for fused in (True, False, None):
                        key = f"layer|{lname}|{graph}|{str(dt)[6:]}|{fi}x{fo}|fused={fused}"
                        cases += 1
                        torch.manual_seed(_seed(key))
                        layer = make(fi, fo, fused).to(dt)
                        x = _randn([case.num_nodes, fi], dt, f"{key}|x").requires_grad_()
                        out = ctx.rec.run(f"{key}|out", lambda: layer(x, case.edge_index))
                        if out is None:
                            continue
                        params = [(n, p) for n, p in layer.named_parameters() if p.requires_grad]
                        cot = _randn(out.shape, out.dtype, f"{key}|cot")
                        try:
                            grads = torch.autograd.grad(out, [x] + [p for _, p in params], cot, allow_unused=True)
                        except Exception as err:  # noqa: BLE001
                            ctx.rec.put(f"{key}|grad", err)
                            continue
                        for n, g in zip(["x"] + [n for n, _ in params], grads):
                            ctx.rec.put(f"{key}|grad:{n}", g)
    # the functional gcn product and its fused-or-split policy
    for graph in LAYER_GRAPHS if not ctx.parallel else PARALLEL_GRAPHS[:1]:
        case = ctx.graphs.CASES[graph]
        g = gnnfuse.Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)
        for fi, fo in ((16, 8), (5, 33), (8, 8)):
            for fused in (True, False, None):
                key = f"functional|gcn|{graph}|{fi}x{fo}|fused={fused}"
                cases += 1
                x = _randn([case.num_nodes, fi], torch.float32, f"{key}|x").requires_grad_()
                w = _randn([fi, fo], torch.float32, f"{key}|w").requires_grad_()
                out = ctx.rec.run(f"{key}|out", lambda: gnnfuse.gcn(g, x, w, fused=fused))
                if out is not None:
                    ctx.rec.put_many(f"{key}|grad", torch.autograd.grad(out, [x, w], _randn(out.shape, out.dtype, f"{key}|cot")))
    return cases


# ---------------------------------------------------------------- record
class _Calls:
    """Names of the gnnfuse ops called (the adjoints the autograd nodes call included)."""

    def __init__(self, seen: set) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace == "gnnfuse":
                    seen.add(func._opname)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


def record(args: argparse.Namespace) -> int:
    os.environ["GNNFUSE_LIBRARY"] = os.path.abspath(args.library)
    sys.path.insert(0, os.path.abspath(args.python or os.path.join(ROOT, "python")))
    import torch

    import gnnfuse

    if args.test_ops_library:
        torch.ops.load_library(os.path.abspath(args.test_ops_library))
    t0 = time.time()
    ctx = Context(args)
    cases: Dict[str, int] = {}
    skipped: Dict[str, str] = {}
    only = set(args.only.split(",")) if args.only else None
    passes = [(args.threads, False)] + ([(args.parallel_threads, True)] if args.parallel_threads else [])
    for threads, parallel in passes:
        torch.set_num_threads(threads)
        ctx.parallel = parallel
        ctx.rec.prefix = "parallel|" if parallel else "full|"
        for name, spec in sorted(ctx.specs.items()):
            if only and name not in only:
                continue
            if name not in ctx.registered:
                skipped[name] = "spec, but no such op registered"
                continue
            cases[ctx.rec.prefix + name] = run_spec_op(ctx, spec)
        if not only or "graph_ops" in only:
            with ctx.watching(True):
                cases[ctx.rec.prefix + "graph_ops"] = run_graph_ops(ctx)
        if not only or "layers" in only:
            cases[ctx.rec.prefix + "layers"] = run_layers(ctx)
    calls = set(ctx.called)
    uncovered = [o for o in ctx.registered if o not in calls]
    elapsed = time.time() - t0
    meta = {
        "format": FORMAT,
        "library": os.path.abspath(args.library),
        "test_ops_library": os.path.abspath(args.test_ops_library) if args.test_ops_library else None,
        "python": gnnfuse.__file__,
        "torch": torch.__version__,
        "threads": args.threads,
        "parallel_threads": args.parallel_threads,
        "quick": bool(args.quick),
        "only": args.only,
        "registered_ops": ctx.registered,
        "called_ops": sorted(calls),
        "not_called": uncovered,
        "specs_not_registered": skipped,
        "cases": cases,
    }
    record = {"meta": meta, "entries": ctx.rec.entries}
    with open(args.out, "w") as fh:
        json.dump(record, fh, indent=0, sort_keys=True)
    if ctx.rec.tensors is not None:
        torch.save(ctx.rec.tensors, args.tensors)
    errors = sum(1 for e in ctx.rec.entries.values() if "error" in e)
    print(f"recorded {len(ctx.rec.entries)} entries ({errors} errors) from {sum(cases.values())} cases of "
          f"{len(cases)} groups in {elapsed:.1f} s ({args.threads} threads; {args.parallel_threads or 'no'} threads "
          f"on a subset): {args.out}")
    print(f"gnnfuse ops registered: {len(ctx.registered)}, called: {len(ctx.registered) - len(uncovered)}; "
          f"not called: {', '.join(uncovered) or 'none'}")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    return 0


# ================================================================ compare
_IGNORED_META = {"library", "test_ops_library", "python", "called_ops", "not_called"}


def compare(args: argparse.Namespace) -> int:
    a, b = (json.load(open(p)) for p in (args.a, args.b))
    ta = _tensors(args.a)
    tb = _tensors(args.b)
    diffs: List[str] = []
    for k in sorted(set(a["meta"]) | set(b["meta"])):
        if k in _IGNORED_META:
            continue
        if a["meta"].get(k) != b["meta"].get(k):
            diffs.append(f"meta {k}: {_short(a['meta'].get(k))} != {_short(b['meta'].get(k))}")
    ea, eb = a["entries"], b["entries"]
    only_a = sorted(set(ea) - set(eb))
    only_b = sorted(set(eb) - set(ea))
    differ = []
    for k in sorted(set(ea) & set(eb)):
        if _identity(ea[k]) != _identity(eb[k]):
            differ.append(k)
            line = f"DIFF {k}: {_describe(ea[k])} != {_describe(eb[k])}"
            if ta is not None and tb is not None and k in ta and k in tb:
                line += _maxdiff(ta[k], tb[k])
            diffs.append(line)
    diffs += [f"ONLY IN {args.a}: {k}" for k in only_a]
    diffs += [f"ONLY IN {args.b}: {k}" for k in only_b]
    shown = diffs if args.limit <= 0 else diffs[: args.limit]
    for line in shown:
        print(line)
    if len(shown) < len(diffs):
        print(f"... {len(diffs) - len(shown)} more lines (--limit 0 prints all)")
    same = len(set(ea) & set(eb)) - len(differ)
    ops = sorted({_op_of(k) for k in differ})
    print(f"compared {len(set(ea) | set(eb))} entries: {same} identical, {len(differ)} differ, "
          f"{len(only_a)} only in A, {len(only_b)} only in B"
          + (f"; ops differing: {', '.join(ops)}" if ops else "")
          + ("" if not diffs else "; FAIL") + ("" if diffs else "; bitwise identical"))
    return 1 if diffs else 0


_STATS = ("nonfinite", "absmax", "sum")


def _identity(e: Dict[str, Any]) -> Dict[str, Any]:
    """What an entry is compared by: hash, dtype and shape, or value, or error (not the statistics)."""
    return {k: v for k, v in e.items() if k not in _STATS}


def _op_of(key: str) -> str:
    parts = key.split("|")
    return parts[1] if parts[0] in ("full", "parallel") and len(parts) > 1 else parts[0]


def _tensors(path: str) -> Optional[Dict[str, Any]]:
    pt = os.path.splitext(path)[0] + ".pt"
    if not os.path.isfile(pt):
        return None
    import torch

    return torch.load(pt)


def _maxdiff(x: Any, y: Any) -> str:
    if x.shape != y.shape or not x.is_floating_point() or not y.is_floating_point():
        return ""
    d = (x.double() - y.double()).abs()
    nan = (x.isnan() != y.isnan()).sum().item()
    d = d[~(x.isnan() | y.isnan())]
    return f" (max abs diff {d.max().item() if d.numel() else 0.0:.3g}, {int((d > 0).sum())} elements differ, {nan} NaN mismatches)"


def _describe(e: Dict[str, Any]) -> str:
    if "sha256" in e:
        extra = "".join(f" {k}={e[k]:.9g}" for k in ("absmax", "sum") if k in e)
        return f"{e['dtype']}{e['shape']} {e['sha256'][:12]}{extra}"
    return json.dumps(e)


def _short(v: Any) -> str:
    s = json.dumps(v)
    return s if len(s) < 200 else s[:200] + "..."


# ================================================================ run: both records and compare
def run_both(args: argparse.Namespace) -> int:
    out = args.dir or tempfile.mkdtemp(prefix="compare_builds.")
    os.makedirs(out, exist_ok=True)
    paths = []
    for tag, lib, py, test_ops in (("a", args.a, args.python_a, args.test_ops_a), ("b", args.b, args.python_b, args.test_ops_b)):
        path = os.path.join(out, f"{tag}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "record", "--library", lib, "--out", path, "--threads", str(args.threads),
               "--parallel-threads", str(args.parallel_threads)]
        cmd += ["--tensors", os.path.join(out, f"{tag}.pt")] if args.tensors else []
        cmd += ["--python", py] if py else []
        cmd += ["--test-ops-library", test_ops] if test_ops else []
        cmd += ["--quick"] if args.quick else []
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        paths.append(path)
    return compare(argparse.Namespace(a=paths[0], b=paths[1], limit=args.limit))


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record the outputs and gradients of one library")
    r.add_argument("--library", required=True, help="the libgnnfuse.so to load")
    r.add_argument("--out", required=True, help="the record (JSON)")
    r.add_argument("--tensors", help="also save the tensors (a .pt named as the record: FOO.json -> FOO.pt)")
    r.add_argument("--threads", type=int, default=1, help="torch.set_num_threads of the full pass (default 1)")
    r.add_argument("--parallel-threads", type=int, default=2,
                   help="threads of a second pass over a subset (default 2, so that the kernels' parallel paths run; 0: none)")
    r.add_argument("--python", help="the gnnfuse package's parent folder (default: python/ of this checkout)")
    r.add_argument("--test-ops-library", help="also load libgnnfuse_test_ops.so and record its spec ops (tests/codegen/specs)")
    r.add_argument("--only", help="comma-separated op names (and/or graph_ops, layers) to record")
    r.add_argument("--quick", action="store_true", help="F in {3, 32} and int64 only")
    c = sub.add_parser("compare", help="compare two records; exit status 1 on any difference")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--limit", type=int, default=200, help="lines of differences printed (0: all)")
    b = sub.add_parser("run", help="record two libraries (a subprocess each) and compare")
    b.add_argument("a")
    b.add_argument("b")
    b.add_argument("--dir", help="where the records go (default: a new temporary folder)")
    b.add_argument("--python-a")
    b.add_argument("--python-b")
    b.add_argument("--test-ops-a")
    b.add_argument("--test-ops-b")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--parallel-threads", type=int, default=2)
    b.add_argument("--tensors", action="store_true")
    b.add_argument("--quick", action="store_true")
    b.add_argument("--limit", type=int, default=200)
    args = p.parse_args(argv)
    if args.cmd == "record":
        if args.tensors and os.path.splitext(args.tensors)[0] != os.path.splitext(args.out)[0]:
            p.error("--tensors must be the record's name with .pt (FOO.json -> FOO.pt), compare looks for it there")
        return record(args)
    if args.cmd == "compare":
        return compare(args)
    return run_both(args)


if __name__ == "__main__":
    sys.exit(main())
