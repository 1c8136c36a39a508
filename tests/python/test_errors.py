"""Bad input raises RuntimeError from C++ naming the op, the argument and (where there is
one) the bad value: ``gnnfuse::<op>: argument '<name>' <what is wrong> (got <value>)``
(docs/CONTRACTS.md).  The assertions match the op and argument only, not the wording;
where the offending value is a single number, the message must contain it."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Optional

import pytest
import torch
from torch import Tensor

OPS = ["spmm", "sddmm", "sddmm_spmm"]

# A valid 4 x 4 CSR: rows 0..3 hold {0, 2}, {1}, {}, {0, 3}.
ROWPTR = [0, 2, 3, 3, 5]
COL = [0, 2, 1, 0, 3]
N = M = 4
K, F = 3, 2


def _inputs(**override) -> Dict[str, Optional[Tensor]]:
    """Valid float32 / int64 inputs for every op; keyword arguments replace some."""
    a = {
        "rowptr": torch.tensor(ROWPTR),
        "col": torch.tensor(COL),
        "edge_weight": torch.rand(len(COL)),
        "x": torch.rand(M, F),
        "u": torch.rand(N, K),
        "v": torch.rand(M, K),
    }
    a.update(override)
    return a


def _call(op: str, a: Dict[str, Optional[Tensor]]):
    fn = getattr(torch.ops.gnnfuse, op)
    if op == "spmm":
        return fn(a["rowptr"], a["col"], a["edge_weight"], a["x"])
    if op == "sddmm":
        return fn(a["rowptr"], a["col"], a["edge_weight"], a["u"], a["v"])
    return fn(a["rowptr"], a["col"], a["edge_weight"], a["u"], a["v"], a["x"])


def _expect(op: str, arg: str, a, value: Optional[str] = None):
    """``arg`` is a regex alternative of argument names, e.g. ``"u|v"``."""
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument '({arg})'") as exc:
        _call(op, a)
    if value is not None:
        assert value in str(exc.value), f"the message should show the bad value {value}: {exc.value}"


@pytest.mark.parametrize("op", OPS)
def test_valid_inputs_pass(op):
    out = _call(op, _inputs())
    assert out.shape == ((len(COL),) if op == "sddmm" else (N, F))
    _call(op, _inputs(edge_weight=None))


# ------------------------------------------------------------------------ the CSR
@pytest.mark.parametrize("op", OPS)
def test_rowptr_not_monotone(op):
    _expect(op, "rowptr", _inputs(rowptr=torch.tensor([0, 3, 2, 3, 5])))


@pytest.mark.parametrize("op", OPS)
def test_rowptr_first_not_zero(op):
    _expect(op, "rowptr", _inputs(rowptr=torch.tensor([1, 2, 3, 3, 5])), value="1")


@pytest.mark.parametrize("op", OPS)
def test_rowptr_last_not_nnz(op):
    # rowptr[-1] = 4 but col has 5 entries
    _expect(op, "rowptr", _inputs(rowptr=torch.tensor([0, 2, 3, 3, 4])), value="4")
    # rowptr[-1] = 6 > nnz: would read past the end of col
    _expect(op, "rowptr", _inputs(rowptr=torch.tensor([0, 2, 3, 3, 6])), value="6")


@pytest.mark.parametrize("op", OPS)
def test_rowptr_empty(op):
    _expect(op, "rowptr", _inputs(rowptr=torch.tensor([], dtype=torch.long), col=torch.tensor([], dtype=torch.long)))


@pytest.mark.parametrize("op", OPS)
def test_column_too_large(op):
    # for spmm the bound is x.size(0), for the others v.size(0) (and x.size(0))
    _expect(op, "col", _inputs(col=torch.tensor([0, 2, 1, 0, 7])), value="7")
    _expect(op, "col", _inputs(col=torch.tensor([0, 2, 1, 0, M])), value=str(M))


@pytest.mark.parametrize("op", OPS)
def test_column_negative(op):
    _expect(op, "col", _inputs(col=torch.tensor([0, -3, 1, 0, 3])), value="-3")


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("op", OPS)
def test_index_errors_with_both_index_dtypes(op, index_dtype):
    def t(v):
        return torch.tensor(v, dtype=index_dtype)

    _expect(op, "rowptr", _inputs(rowptr=t([0, 3, 2, 3, 5]), col=t(COL)))
    _expect(op, "col", _inputs(rowptr=t(ROWPTR), col=t([0, 2, 1, 0, 9])), value="9")
    _call(op, _inputs(rowptr=t(ROWPTR), col=t(COL)))  # and valid input passes


@pytest.mark.parametrize("op", OPS)
def test_rowptr_col_dtype_mismatch(op):
    a = _inputs(rowptr=torch.tensor(ROWPTR, dtype=torch.int32), col=torch.tensor(COL, dtype=torch.int64))
    _expect(op, "col|rowptr", a)


@pytest.mark.parametrize("bad", [torch.float32, torch.int16, torch.uint8], ids=["float32", "int16", "uint8"])
@pytest.mark.parametrize("op", OPS)
def test_index_dtype_unsupported(op, bad):
    a = _inputs(rowptr=torch.tensor(ROWPTR).to(bad), col=torch.tensor(COL).to(bad))
    _expect(op, "rowptr|col", a)


@pytest.mark.parametrize("op", OPS)
def test_index_not_1d(op):
    _expect(op, "rowptr", _inputs(rowptr=torch.tensor(ROWPTR).view(1, -1)))
    _expect(op, "col", _inputs(col=torch.tensor(COL).view(1, -1)))


# ------------------------------------------------------------------- edge weights
@pytest.mark.parametrize("op", OPS)
def test_edge_weight_length(op):
    _expect(op, "edge_weight", _inputs(edge_weight=torch.rand(4)), value="4")
    _expect(op, "edge_weight", _inputs(edge_weight=torch.rand(6)), value="6")


@pytest.mark.parametrize("op", OPS)
def test_edge_weight_not_1d(op):
    _expect(op, "edge_weight", _inputs(edge_weight=torch.rand(len(COL), 1)))


@pytest.mark.parametrize("op", OPS)
def test_edge_weight_dtype(op):
    _expect(op, "edge_weight", _inputs(edge_weight=torch.ones(len(COL), dtype=torch.int64)))
    # float64 weights with float32 features: whichever of the two the op names
    _expect(op, "edge_weight|x|u|v", _inputs(edge_weight=torch.rand(len(COL), dtype=torch.float64)))


# ----------------------------------------------------------------------- features
FEATURE_ARGS = {"spmm": ["x"], "sddmm": ["u", "v"], "sddmm_spmm": ["u", "v", "x"]}
ALL_FEATURE_ARGS = [(op, arg) for op in OPS for arg in FEATURE_ARGS[op]]


@pytest.mark.parametrize("op, arg", ALL_FEATURE_ARGS, ids=[f"{o}-{a}" for o, a in ALL_FEATURE_ARGS])
def test_feature_integer_dtype(op, arg):
    a = _inputs()
    a[arg] = (a[arg] * 10).to(torch.int64)
    _expect(op, arg, a)


@pytest.mark.parametrize("op, arg", ALL_FEATURE_ARGS, ids=[f"{o}-{a}" for o, a in ALL_FEATURE_ARGS])
def test_feature_float16_among_float32_and_unsupported_dtypes(op, arg):
    """float16 is supported, but not mixed: a half tensor among float32 ones is rejected, and
    all-half inputs pass (test_low_precision.py checks their values). A floating dtype no spec
    lists (complex64) is rejected with the supported ones named."""
    a = _inputs()
    a[arg] = a[arg].half()
    others = [k for k in FEATURE_ARGS[op] if k != arg]
    _expect(op, "|".join([arg, "edge_weight"] + others), a)
    allhalf = {k: (t.half() if t is not None and t.is_floating_point() else t) for k, t in _inputs().items()}
    assert _call(op, allhalf).dtype == torch.float16
    a = _inputs(edge_weight=None)
    a[arg] = a[arg].to(torch.complex64)
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument '{arg}' must be a float32, float64, bfloat16, or float16 tensor \(got complex64\)"):
        _call(op, a)


@pytest.mark.parametrize("op, arg", ALL_FEATURE_ARGS, ids=[f"{o}-{a}" for o, a in ALL_FEATURE_ARGS])
def test_feature_mixed_float32_float64(op, arg):
    a = _inputs(edge_weight=None)
    a[arg] = a[arg].double()
    if len(FEATURE_ARGS[op]) == 1:  # spmm: mix x with the edge weights instead
        a["edge_weight"] = torch.rand(len(COL))
        _expect(op, "x|edge_weight", a)
    else:
        _expect(op, "|".join(FEATURE_ARGS[op]), a)


@pytest.mark.parametrize("op, arg", ALL_FEATURE_ARGS, ids=[f"{o}-{a}" for o, a in ALL_FEATURE_ARGS])
def test_feature_not_2d(op, arg):
    a = _inputs()
    a[arg] = a[arg][:, 0].contiguous()  # 1-D
    _expect(op, arg, a)
    a[arg] = _inputs()[arg].unsqueeze(0)  # 3-D
    _expect(op, arg, a)


@pytest.mark.parametrize("op", ["sddmm", "sddmm_spmm"])
def test_u_v_feature_dim_mismatch(op):
    _expect(op, "u|v", _inputs(v=torch.rand(M, K + 1)), value=str(K + 1))


@pytest.mark.parametrize("op", ["sddmm", "sddmm_spmm"])
def test_u_rows_mismatch(op):
    # u must have one row per target node (rowptr.numel() - 1 = 4)
    _expect(op, "u", _inputs(u=torch.rand(N + 2, K)), value=str(N + 2))


def test_sddmm_spmm_x_v_rows_mismatch():
    # x and v are both indexed by the source (col); with col < 4 a 5-row v is fine only if x
    # has 5 rows too: the op must insist on one source count
    _expect("sddmm_spmm", "x|v", _inputs(v=torch.rand(M + 1, K)))


def test_sddmm_column_checked_against_v():
    # spmm bounds col by x.size(0); sddmm has no x, so v.size(0) is the bound
    _expect("sddmm", "col", _inputs(v=torch.rand(M - 1, K)), value="3")


@pytest.mark.parametrize("op,short", [("spmm", "x"), ("sddmm", "v")])
def test_dense_operand_one_row_short_of_the_columns_names_both(op, short):
    # The extent of the column index comes from the dense operand, so a column past it may as well
    # mean that operand is short: the error names its rows and the largest column.
    with pytest.raises(RuntimeError, match=rf"gnnfuse::{op}: argument 'col' must hold column indices in \[0, 3\), the extent of index j, "
                       rf"{short}\.size\(0\): {short} has 3 rows but the column indices in col reach 3 \(4 columns\) \(got col\[4\] = 3\)"):
        _call(op, _inputs(**{short: torch.rand(M - 1, K if short == "v" else F)}))


@pytest.mark.parametrize("op", OPS)
def test_mixed_devices(op):
    """No GPU here, so a CPU/meta mix stands in for a device mismatch."""
    a = _inputs()
    a["edge_weight"] = a["edge_weight"].to("meta")
    _expect(op, "edge_weight|rowptr|col|x|u|v", a)


# ---------------------------------------------------------------- checked once, re-checked on change
def test_a_checked_csr_is_rechecked_after_an_in_place_change():
    rowptr = torch.tensor([0, 2, 3, 3])
    col = torch.tensor([0, 2, 1])
    x = torch.randn(3, 4)
    torch.ops.gnnfuse.spmm(rowptr, col, None, x)  # checked and remembered
    torch.ops.gnnfuse.spmm(rowptr, col, None, x)  # remembered: not scanned again
    col[1] = 7  # in place: the version counter moves
    with pytest.raises(RuntimeError, match=r"spmm.*col.*\[0, 3\).*7"):
        torch.ops.gnnfuse.spmm(rowptr, col, None, x)
    col[1] = 2
    torch.ops.gnnfuse.spmm(rowptr, col, None, x)
    rowptr[2] = 1  # not monotone
    with pytest.raises(RuntimeError, match="rowptr"):
        torch.ops.gnnfuse.spmm(rowptr, col, None, x)


def test_a_checked_csr_is_rechecked_for_fewer_columns():
    rowptr, col = torch.tensor([0, 1, 2]), torch.tensor([0, 3])
    torch.ops.gnnfuse.spmm(rowptr, col, None, torch.randn(4, 2))
    with pytest.raises(RuntimeError, match=r"col.*\[0, 2\).*3"):
        torch.ops.gnnfuse.spmm(rowptr, col, None, torch.randn(2, 2))


def test_inference_mode_tensors_are_always_checked():
    with torch.inference_mode():
        rowptr, col = torch.tensor([0, 1, 2]), torch.tensor([0, 1])
        x = torch.randn(2, 2)
        torch.ops.gnnfuse.spmm(rowptr, col, None, x)
        col2 = torch.tensor([0, 5])
        with pytest.raises(RuntimeError, match="col"):
            torch.ops.gnnfuse.spmm(rowptr, col2, None, x)


def test_many_graphs_in_turn_are_all_checked():
    # more graphs than remembered entries, valid and invalid interleaved
    x = torch.randn(5, 2)
    for k in range(40):
        rowptr = torch.tensor([0, 1, 2])
        col = torch.tensor([k % 5, (k * 3) % 5])
        torch.ops.gnnfuse.spmm(rowptr, col, None, x)
        bad = torch.tensor([0, 5 + k])
        with pytest.raises(RuntimeError, match="col"):
            torch.ops.gnnfuse.spmm(rowptr, bad, None, x)


def test_int32_edge_index_too_long_for_int32_row_pointers():
    # a stride-0 view: 2^31 edges without the memory
    ei = torch.zeros(2, 1, dtype=torch.int32).expand(2, 2**31)
    with pytest.raises(RuntimeError, match=r"edge_index_to_csr.*at most 2147483647 edges when int32"):
        torch.ops.gnnfuse.edge_index_to_csr(ei, 4)


@pytest.mark.skipif(os.environ.get("GNNFUSE_CHECKS_ON_DEVICE") == "1", reason="already on the device path")
def test_error_messages_from_the_device_checks():
    """GNNFUSE_CHECKS_ON_DEVICE=1 sends CPU tensors down the value checks' path for CUDA tensors
    (device reductions and one read back; an invalid input copied to the host for the CPU check's
    message): the error tests of these files pass unchanged, messages included."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, GNNFUSE_CHECKS_ON_DEVICE="1")
    files = ["test_errors.py", "test_graph.py", "test_shared_indices.py", "test_spgemm.py", "test_review_findings.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files],
                          cwd=here, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_rowptr_out_of_order_by_a_wrapping_step(dtype):
    """rowptr = [0, max, -2, 1]: starts at 0, ends at nnz, and its neighbour differences wrap
    around to positive values; the check compares neighbours, so it is refused (CPU and device
    path), every time it is passed (a second call must not pass on a remembered verdict)."""
    big = torch.iinfo(dtype).max
    rowptr = torch.tensor([0, big, -2, 1], dtype=dtype)
    col = torch.tensor([0], dtype=dtype)
    x = torch.randn(3, 2, dtype=torch.float64)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"csr_transpose: argument 'rowptr'"):
            torch.ops.gnnfuse.csr_transpose(rowptr, col, 3)
        with pytest.raises(RuntimeError, match=r"spmm: argument 'rowptr'"):
            torch.ops.gnnfuse.spmm(rowptr, col, None, x)


def test_negative_column_refused_on_every_call():
    rowptr = torch.tensor([0, 1, 2])
    col = torch.tensor([-1, 0])
    x = torch.randn(2, 3, dtype=torch.float64)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"spmm: argument 'col' must hold column indices in \[0, 2\)"):
            torch.ops.gnnfuse.spmm(rowptr, col, None, x)


def test_unbound_columns_are_not_checked():
    """edge_softmax never reads its columns (no operand is indexed by them): a negative one is
    not an error, on the CPU path and on the device path alike."""
    rowptr = torch.tensor([0, 2, 3])
    col = torch.tensor([-1, 0, 5])
    out = torch.ops.gnnfuse.edge_softmax(rowptr, col, torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5, 1.0], dtype=torch.float64))
