"""Indices that two operands share are checked against the extent that binds them.

``spgemm`` reads B's row pointers at A's columns; ``coarsen`` reads the graph's rows at the
members' columns (``mcol``) and P's entries at the graph's columns. The generated adapters
check each such index against the extent another operand gives it, in the op and in every
derived adjoint, symbolic and assembling form, so one past the end or a negative index is a
``RuntimeError`` naming the op, the schema argument at fault and the value (before, the same
calls returned garbage or crashed). Called as ``torch.ops.gnnfuse.<op>`` directly and from
TorchScript; the C++ API is covered by tests/cpp/test_shared_indices.cpp.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

import gnnfuse  # (loads the library)

OPS = torch.ops.gnnfuse
INDEX_DTYPES = [torch.int32, torch.int64]
IDS = {torch.int32: "int32", torch.int64: "int64"}


def t(values, dtype):
    return torch.tensor(values, dtype=torch.int64).to(dtype)


def replaced(x, at, value):
    y = x.clone()
    y[at] = value
    return y


class Spgemm:
    """A [3 x 4] (rows [0, 3], [1], [2, 3]) times B [4 x 3]; C's pattern from spgemm_symbolic."""

    n_cols = 3

    def __init__(self, itype):
        self.ar, self.ac = t([0, 2, 3, 5], itype), t([0, 3, 1, 2, 3], itype)
        self.av = torch.rand(5, dtype=torch.float64)
        self.br, self.bc = t([0, 1, 2, 4, 5], itype), t([2, 0, 0, 1, 2], itype)
        self.bv = torch.rand(5, dtype=torch.float64)
        self.cr, self.cc = OPS.spgemm_symbolic(self.ar, self.ac, self.br, self.bc, self.n_cols)
        self.g = torch.rand(self.cc.numel(), dtype=torch.float64)
        self.a_csc = OPS.csr_transpose(self.ar, self.ac, 4)

    def args(self, op, acol):
        """The arguments of `op` with A's columns `acol` (every other operand valid)."""
        ar, av, br, bc, bv, cr, cc, n, g = self.ar, self.av, self.br, self.bc, self.bv, self.cr, self.cc, self.n_cols, self.g
        return {
            "spgemm": (ar, acol, av, br, bc, bv, cr, cc, n),
            "spgemm_grad_avals": (ar, acol, br, bc, bv, cr, cc, n, g),
            "spgemm_grad_bvals": (ar, acol, av, *self.a_csc, br, bc, cr, cc, n, g),
            "spgemm_grad_avals_grad_grad": (ar, acol, br, bc, bv, cr, cc, n, av),
            "spgemm_grad_bvals_grad_grad": (ar, acol, av, br, bc, cr, cc, n, bv),
            "spgemm_grad_avals_grad_bvals": (ar, acol, *self.a_csc, br, bc, cr, cc, g, n, av),
            "spgemm_grad_bvals_grad_avals": (ar, acol, br, bc, cr, cc, g, n, bv),
            "spgemm_symbolic": (ar, acol, br, bc, n),
            "spgemm_assemble": (ar, acol, av, br, bc, bv, n),
        }[op]


SPGEMM_OPS = [
    "spgemm",
    "spgemm_grad_avals",
    "spgemm_grad_bvals",
    "spgemm_grad_avals_grad_grad",
    "spgemm_grad_bvals_grad_grad",
    "spgemm_grad_avals_grad_bvals",
    "spgemm_grad_bvals_grad_avals",
    "spgemm_symbolic",
    "spgemm_assemble",
]


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("op", SPGEMM_OPS)
def test_spgemm_family_accepts_valid_operands(op, itype):
    s = Spgemm(itype)
    getattr(OPS, op)(*s.args(op, s.ac))


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("bad", [4, -1], ids=["one_past_the_end", "negative"])
@pytest.mark.parametrize("op", SPGEMM_OPS)
def test_spgemm_family_checks_a_columns_against_b_rows(op, bad, itype):
    s = Spgemm(itype)
    acol = replaced(s.ac, 3, bad)
    # The extent of k: B's row count, or A's CSC view where the op walks A by columns.
    binds = r"colptr" if op in ("spgemm_grad_bvals", "spgemm_grad_avals_grad_bvals") else r"browptr"
    want = rf"gnnfuse::{op}: argument 'acol' must hold column indices in \[0, 4\), the extent of index k, {binds}\.size\(0\) - 1"
    with pytest.raises(RuntimeError, match=want + rf" \(got acol\[3\] = {bad}\)"):
        getattr(OPS, op)(*s.args(op, acol))


@pytest.mark.parametrize("op", ["spgemm", "spgemm_grad_avals", "spgemm_grad_avals_grad_grad", "spgemm_grad_bvals_grad_avals"])
def test_spgemm_a_column_is_checked_against_fewer_b_rows(op):
    """The other side of the shared index: B one row short makes A's column 3 one past its end."""
    s = Spgemm(torch.int64)
    s.br, s.bc, s.bv = s.br[:4], s.bc[:4], s.bv[:4]
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'acol' must hold column indices in \[0, 3\).*\(got acol\[1\] = 3\)"):
        getattr(OPS, op)(*s.args(op, s.ac))


def test_spgemm_b_rows_against_a_csc_view_name_browptr():
    """Where A's CSC view gives B's row count first, a B one row short is B's fault: 'browptr'."""
    s = Spgemm(torch.int64)
    s.br, s.bc, s.bv = s.br[:4], s.bc[:4], s.bv[:4]
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm_grad_bvals: argument 'browptr' has size 4 in dimension 0, expected 5"):
        OPS.spgemm_grad_bvals(*s.args("spgemm_grad_bvals", s.ac))


class Coarsen:
    """A 6-node graph in 3 clusters: M = Pᵀ (mrowptr, mcol), the graph, P (prowptr, pcol), S."""

    k = 3

    def __init__(self, itype):
        cluster = torch.tensor([0, 1, 2, 0, 1, 2])
        self.pr, self.pc = torch.arange(7).to(itype), cluster.to(itype)
        self.mr, self.mc = t([0, 2, 4, 6], itype), t([0, 3, 1, 4, 2, 5], itype)
        self.r, self.c = t([0, 2, 3, 5, 6, 7, 8], itype), t([1, 5, 2, 0, 4, 3, 5, 0], itype)
        self.w = torch.rand(8, dtype=torch.float64)
        self.cr, self.cc = OPS.coarsen_symbolic(self.mr, self.mc, self.r, self.c, self.pr, self.pc, self.k)
        self.g = torch.rand(self.cc.numel(), dtype=torch.float64)
        self.m_csc = OPS.csr_transpose(self.mr, self.mc, 6)
        self.p_csc = OPS.csr_transpose(self.pr, self.pc, self.k)

    def args(self, op, mcol=None, col=None, pcol=None):
        mr, r, w, pr, cr, cc, k, g = self.mr, self.r, self.w, self.pr, self.cr, self.cc, self.k, self.g
        mc = self.mc if mcol is None else mcol
        c = self.c if col is None else col
        pc = self.pc if pcol is None else pcol
        return {
            "coarsen": (mr, mc, r, c, w, pr, pc, cr, cc, k),
            "coarsen_grad_edge_weight": (mr, mc, *self.m_csc, r, c, pr, pc, cr, cc, k, g),
            "coarsen_grad_edge_weight_grad_grad": (mr, mc, r, c, pr, pc, *self.p_csc, cr, cc, k, w),
            "coarsen_symbolic": (mr, mc, r, c, pr, pc, k),
            "coarsen_assemble": (mr, mc, r, c, w, pr, pc, k),
        }[op]


COARSEN_OPS = ["coarsen", "coarsen_grad_edge_weight", "coarsen_grad_edge_weight_grad_grad", "coarsen_symbolic", "coarsen_assemble"]


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("op", COARSEN_OPS)
def test_coarsen_family_accepts_valid_operands(op, itype):
    s = Coarsen(itype)
    getattr(OPS, op)(*s.args(op))


# The indices coarsen's operands share: (argument, position changed, its extent, what binds it).
COARSEN_INDICES = [
    ("mcol", 2, 6, None),  # the members' columns against the graph's rows (rowptr, or M's CSC view)
    ("col", 4, 6, r"prowptr\.size\(0\) - 1"),  # the graph's columns against P's rows
    ("pcol", 2, 3, r"num_clusters"),  # P's columns against num_clusters (the error said 'col')
]


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=IDS.get)
@pytest.mark.parametrize("past", [True, False], ids=["one_past_the_end", "negative"])
@pytest.mark.parametrize("arg,at,extent,binds", COARSEN_INDICES, ids=[c[0] for c in COARSEN_INDICES])
@pytest.mark.parametrize("op", COARSEN_OPS)
def test_coarsen_family_checks_shared_indices(op, arg, at, extent, binds, past, itype):
    s = Coarsen(itype)
    bad = extent if past else -1
    valid = {"mcol": s.mc, "col": s.c, "pcol": s.pc}[arg]
    want = rf"gnnfuse::{op}: argument '{arg}' must hold column indices in \[0, {extent}\)"
    want += (rf", the extent of index \w+, {binds}" if binds else ".*") + rf" \(got {arg}\[{at}\] = {bad}\)"
    with pytest.raises(RuntimeError, match=want):
        getattr(OPS, op)(*s.args(op, **{arg: replaced(valid, at, bad)}))


def test_coarsen_grad_grad_returned_garbage_for_a_member_past_the_end():
    """The case the issue reports: the double adjoint gave values for a member that is no node."""
    s = Coarsen(torch.int64)
    mcol = replaced(s.mc, 5, 6)  # a member one past the last node
    with pytest.raises(RuntimeError, match=r"gnnfuse::coarsen_grad_edge_weight_grad_grad: argument 'mcol'.*\(got mcol\[5\] = 6\)"):
        OPS.coarsen_grad_edge_weight_grad_grad(*s.args("coarsen_grad_edge_weight_grad_grad", mcol=mcol))


@pytest.mark.parametrize("op", ["spgemm", "spgemm_assemble"])
def test_autograd_forward_refuses_by_the_op_name(op):
    """With a gradient to record, the forward (and the assembling op, which then runs other ops)
    refuses with the op's own name."""
    s = Spgemm(torch.int64)
    s.av = s.av.clone().requires_grad_()
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'acol'.*\(got acol\[3\] = 4\)"):
        getattr(OPS, op)(*s.args(op, replaced(s.ac, 3, 4)))
    c = Coarsen(torch.int64)
    c.w = c.w.clone().requires_grad_()
    name = "coarsen" if op == "spgemm" else "coarsen_assemble"
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{name}: argument 'mcol'.*\(got mcol\[0\] = 6\)"):
        getattr(OPS, name)(*c.args(name, mcol=replaced(c.mc, 0, 6)))


@torch.jit.script
def _scripted_spgemm(ar, ac, av, br, bc, bv, cr, cc, n: int):
    return torch.ops.gnnfuse.spgemm(ar, ac, av, br, bc, bv, cr, cc, n)


@torch.jit.script
def _scripted_coarsen(mr, mc, r, c, w, pr, pc, cr, cc, k: int):
    return torch.ops.gnnfuse.coarsen(mr, mc, r, c, w, pr, pc, cr, cc, k)


@pytest.mark.parametrize("bad", [4, -1], ids=["one_past_the_end", "negative"])
def test_torchscript_spgemm(bad):
    s = Spgemm(torch.int64)
    _scripted_spgemm(*s.args("spgemm", s.ac))
    with pytest.raises(RuntimeError, match=rf"gnnfuse::spgemm: argument 'acol'.*\(got acol\[3\] = {bad}\)"):
        _scripted_spgemm(*s.args("spgemm", replaced(s.ac, 3, bad)))


@pytest.mark.parametrize("bad", [6, -1], ids=["one_past_the_end", "negative"])
def test_torchscript_coarsen(bad):
    s = Coarsen(torch.int64)
    _scripted_coarsen(*s.args("coarsen"))
    with pytest.raises(RuntimeError, match=rf"gnnfuse::coarsen: argument 'mcol'.*\(got mcol\[2\] = {bad}\)"):
        _scripted_coarsen(*s.args("coarsen", mcol=replaced(s.mc, 2, bad)))
    with pytest.raises(RuntimeError, match=rf"gnnfuse::coarsen: argument 'col'.*\(got col\[4\] = {bad}\)"):
        _scripted_coarsen(*s.args("coarsen", col=replaced(s.c, 4, bad)))


def test_a_pattern_checked_once_is_checked_under_every_bound():
    """The columns' largest value is remembered per pattern: the same tensors under a narrower bound
    (B with fewer rows) are refused at the first column past it, under a wider one accepted,
    without another scan (the cache counts hits)."""
    s = Spgemm(torch.int64)
    OPS.spgemm(*s.args("spgemm", s.ac))
    hits = OPS.pattern_cache_hits("checks::csr")
    br, bc, bv = s.br[:3], s.bc[:2], s.bv[:2]  # B with 2 rows: acol's 3 and 2 are past them
    with pytest.raises(RuntimeError, match=re.escape("argument 'acol' must hold column indices in [0, 2)") + r".*\(got acol\[1\] = 3\)"):
        OPS.spgemm(s.ar, s.ac, s.av, br, bc, bv, s.cr, s.cc, 3)
    assert OPS.pattern_cache_hits("checks::csr") > hits
    wide = torch.cat([s.br, s.br[-1:]])  # a fifth, empty row of B: acol is valid
    OPS.spgemm(s.ar, s.ac, s.av, wide, s.bc, s.bv, s.cr, s.cc, 3)


# ---------------------------------------------------------------------------- found by fuzz_ops
def test_csc_view_whose_pointers_run_past_its_entries_is_refused():
    """fuzz_ops: a CSC view whose colptr rises past nnz before falling back (0, 1, 0, ...) made the
    view check read perm and row past their end (a crash); the pointers are now checked whole
    before any entry is read."""
    rowptr, col = torch.tensor([0, 0]), torch.tensor([], dtype=torch.int64)
    colptr, row, perm = torch.tensor([0, 1, 0, 0, 0]), torch.tensor([], dtype=torch.int64), torch.tensor([], dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_grad_x: argument 'colptr' must be non-decreasing \(got colptr\[1\] = 1 > colptr\[2\] = 0\)"):
        OPS.spmm_grad_x(rowptr, col, None, colptr, row, perm, torch.zeros(1, 3))


def test_csc_view_pointers_of_no_dimension_are_refused_by_name():
    """fuzz_ops: a 0-dim colptr (one element, so not "empty") had its size(0) read for an extent
    before its shape was checked: an error naming no op. It is checked 1-D first."""
    rowptr, col = torch.tensor([0, 0]), torch.tensor([], dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm_grad_x: argument 'colptr' must be 1-D \(got a 0-D tensor"):
        OPS.spmm_grad_x(rowptr, col, None, torch.tensor(0), col, col, torch.zeros(1, 3))


@pytest.mark.parametrize("op", ["edge_index_to_csr", "csr_transpose"])
def test_huge_node_and_column_counts_are_named(op):
    """fuzz_ops: a count of 2^40 nodes (or columns) made the result's allocation fail inside ATen's
    allocator, and 2^63 - 1 overflowed its + 1; both are errors naming the op and the argument."""
    ei = torch.tensor([[0, 1], [1, 0]])
    rowptr, col, _ = OPS.edge_index_to_csr(ei, 2)
    call = (lambda n: OPS.edge_index_to_csr(ei, n)) if op == "edge_index_to_csr" else (lambda n: OPS.csr_transpose(rowptr, col, n))
    arg = "num_nodes" if op == "edge_index_to_csr" else "num_cols"
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: not enough memory .*argument '{arg}' = 1099511627776"):
        call(1 << 40)
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument '{arg}' must be below 2\^62"):
        call(2**63 - 1)


def test_huge_column_extent_is_a_bound_not_an_allocation():
    """fuzz_ops: spgemm with n_cols = 2^40 (valid: every column is below it) allocated a row map
    of n_cols entries and failed. The numeric kernels keep a row map only up to 2^20 columns and
    search the row past it: the product is computed, equal to the one over the 3 columns; 2^62
    is still refused by name."""
    s = Spgemm(torch.int64)
    small = OPS.spgemm(s.ar, s.ac, s.av, s.br, s.bc, s.bv, s.cr, s.cc, s.n_cols)
    assert torch.equal(OPS.spgemm(s.ar, s.ac, s.av, s.br, s.bc, s.bv, s.cr, s.cc, 1 << 40), small)
    c = Coarsen(torch.int64)
    args = c.args("coarsen_assemble")[:-1]
    rowptr, col, values = OPS.coarsen_assemble(*args, c.k)
    for _ in range(2):  # one pass, then the numeric op on the cached pattern
        huge = OPS.coarsen_assemble(*args, 1 << 40)
        assert torch.equal(huge[0], rowptr) and torch.equal(huge[1], col) and torch.equal(huge[2], values)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spgemm: argument 'n_cols' must be below 2\^62"):
        OPS.spgemm(s.ar, s.ac, s.av, s.br, s.bc, s.bv, s.cr, s.cc, 2**62)


# coarsen_assemble on a complete graph of 2048 nodes, one cluster each (4M entries out, int32
# indices: 16 MiB of columns, float64: 32 MiB of values); the second call runs the numeric op
# on the cached pattern (with a gradient to record: after the cached coarsen_symbolic), both of
# which first clone the cached pattern, under an address-space limit of what is mapped + 24 MiB:
# the clone fits, the values do not, so the numeric op's allocation is the one that fails.
_ASSEMBLE_OOM_PROBE = r"""
import re, resource, sys, torch, gnnfuse
OPS = torch.ops.gnnfuse
k = 2048
ar = torch.arange(0, k * k + 1, k, dtype=torch.int32)
ac = torch.arange(k, dtype=torch.int32).repeat(k)
w = torch.rand(k * k, dtype=torch.float64)
ident = torch.arange(k + 1, dtype=torch.int32), torch.arange(k, dtype=torch.int32)
args = (*ident, ar, ac, w, *ident, k)
first = OPS.coarsen_assemble(*args)
if sys.argv[1] == "grad":
    args = (*ident, ar, ac, w.requires_grad_(), *ident, k)
mapped = int(re.search(r"VmSize:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) << 10
resource.setrlimit(resource.RLIMIT_AS, (mapped + (24 << 20), resource.RLIM_INFINITY))
try:
    OPS.coarsen_assemble(*args)
except RuntimeError as e:
    print(" ".join(str(e).split()))
else:
    print("no error")
"""


@pytest.mark.parametrize("mode", ["cached", "grad"])
def test_assembling_op_running_the_numeric_op_names_itself(mode):
    """fuzz_ops: coarsen_assemble on a cached pattern runs the numeric coarsen, and with a
    gradient to record it runs coarsen_symbolic and coarsen: a failed allocation there was
    reported as coarsen's, an op the caller never called. It names coarsen_assemble."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(gnnfuse.__file__))))
    proc = subprocess.run([sys.executable, "-c", _ASSEMBLE_OOM_PROBE, mode], cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # Its own name around the numeric op's message (the failed allocation is coarsen's).
    assert re.match(r"^gnnfuse::coarsen_assemble: not enough memory .*\(got gnnfuse::coarsen: not enough memory ", proc.stdout.strip()), \
        proc.stdout[-2000:]


def test_csc_view_given_as_a_cache_is_checked_by_the_op_given_it():
    """A CSC view passed to spmm for its backward was not read, nor checked, by spmm: a wrong one
    was refused only in the backward, by spmm_grad_x. The op it is given to checks it."""
    rowptr, col = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1])
    colptr, row, perm = OPS.csr_transpose(rowptr, col, 2)
    x = torch.randn(2, 4)
    OPS.spmm(rowptr, col, None, x, colptr, row, perm)
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'row' must hold row indices in \[0, 2\) \(got row\[1\] = 2\)"):
        OPS.spmm(rowptr, col, None, x, colptr, replaced(row, 1, 2), perm)
