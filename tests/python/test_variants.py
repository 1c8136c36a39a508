"""Lowerings chosen at run time (`variants auto`, ops/README.md): the generator emits one kernel
per association of a product chain that its smallest-temporary rule ties on, each with a cost
model, and every call runs the cheapest. For gcn and its adjoints: ``(A X) W`` (aggregate, then
the row block meets W) or ``A (X W)`` (X W first through the blocked GEMM into an N x F_out
matrix, then the aggregation). Every lowering against float64 references; the choice follows
the feature widths; the control ops refuse bad arguments."""

from __future__ import annotations

import contextlib

import pytest
import torch

import gnnfuse
from graphs import CASES, check_gcn_against_dense, csr_of, dense_adjacency, edge_weights, features, gcn_inputs

ops = torch.ops.gnnfuse
FAMILY = ["gcn", "gcn_grad_x", "gcn_grad_edge_weight"]  # the gcn ops the generator gave two lowerings


@contextlib.contextmanager
def forced(variant):
    """Every op of FAMILY forced to `variant` (None: the cost model's choice)."""
    with contextlib.ExitStack() as stack:
        if variant is not None:
            for op in FAMILY:
                stack.enter_context(gnnfuse.ops.force_variant(op, variant))
        yield


def test_variant_counts():
    for op in FAMILY:
        assert gnnfuse.ops.variant_count(op) == 2
    # d/dweight's other association would scatter A^T dY into a per-thread N x F_out copy with
    # the forward's loop order: not offered, so one lowering and no control
    with pytest.raises(RuntimeError, match=r"gnnfuse::variant_count: argument 'op' must name an op generated with variants \(gcn"):
        gnnfuse.ops.variant_count("gcn_grad_weight")


@pytest.mark.parametrize("variant", [None, 0, 1], ids=["auto", "v0", "v1"])
@pytest.mark.parametrize("dims", [(37, 40), (129, 17), (3, 33), (1, 1)], ids=lambda d: f"{d[0]}x{d[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("name", ["power_law", "empty_rows_isolated", "self_loops_duplicates", "no_edges"])
def test_every_lowering_matches_dense(name, index_dtype, dtype, dims, variant):
    case = CASES[name]
    rowptr, col, perm = csr_of(name, index_dtype)
    w, ew, x, W, gy = gcn_inputs(case, perm, *dims, dtype, seed=31)
    with forced(variant):
        out = ops.gcn(rowptr, col, ew, x, W)
        grads = torch.autograd.grad(out, (ew, x, W), gy)
        if variant is not None:
            for op in FAMILY:
                assert gnnfuse.ops.last_variant(op) == variant
    check_gcn_against_dense(case, perm, w, x, W, gy, out, grads)


@pytest.mark.parametrize("variant", [0, 1])
def test_every_lowering_gradcheck(variant):
    case = CASES["power_law"]
    rowptr, col, _ = csr_of("power_law")
    args = (
        edge_weights(case.num_edges, torch.float64, seed=35).requires_grad_(),
        features(case.num_src_nodes, 3, torch.float64, seed=36).requires_grad_(),
        features(3, 4, torch.float64, seed=37).requires_grad_(),
    )
    with forced(variant):
        assert torch.autograd.gradcheck(lambda *t: ops.gcn(rowptr, col, *t), args, fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("variant", [0, 1])
def test_every_lowering_low_precision(variant, dtype):
    # float32 accumulation in both: the X W matrix of the chain order is held in float32
    case = CASES["power_law"]
    rowptr, col, perm = csr_of("power_law")
    w = edge_weights(case.num_edges, torch.float64, seed=38)
    x = features(case.num_src_nodes, 40, torch.float64, seed=39)
    W = features(40, 24, torch.float64, seed=40)
    A = dense_adjacency(case, w)
    want = A @ x @ W
    with forced(variant):
        ours = ops.gcn(rowptr, col, w[perm].to(dtype), x.to(dtype), W.to(dtype)).double()
    torch_err = ((A.to(dtype) @ x.to(dtype) @ W.to(dtype)).double() - want).abs().max()
    assert (ours - want).abs().max() <= 2 * torch_err + 1e-3 * want.abs().max()


def test_choice_follows_the_feature_widths():
    """The cost model: aggregate the narrower side. Widening (16 -> 128): (A X) W; narrowing
    (128 -> 16): X W first, for the forward and for d/dx (whose aggregation runs over dY)."""
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    for (f_in, f_out), fwd, dx in (((16, 128), 0, 1), ((128, 16), 1, 0)):
        x = features(case.num_src_nodes, f_in, torch.float32, seed=41).requires_grad_()
        W = features(f_in, f_out, torch.float32, seed=42)
        out = ops.gcn(rowptr, col, None, x, W)
        assert gnnfuse.ops.last_variant("gcn") == fwd
        out.sum().backward()
        assert gnnfuse.ops.last_variant("gcn_grad_x") == dx


def test_choice_uses_row_lengths():
    """Equal widths: the chain order pays for its N x F matrix, so (A X) W wins; the choice does
    not depend on which lowering ran before."""
    case = CASES["power_law"]
    rowptr, col, _ = csr_of("power_law")
    x = features(case.num_src_nodes, 32, torch.float32, seed=43)
    W = features(32, 32, torch.float32, seed=44)
    with gnnfuse.ops.force_variant("gcn", 1):
        ops.gcn(rowptr, col, None, x, W)
    ops.gcn(rowptr, col, None, x, W)
    assert gnnfuse.ops.last_variant("gcn") == 0


def test_control_op_errors():
    with pytest.raises(RuntimeError, match=r"gnnfuse::force_variant: argument 'variant' must be in \[-1, 2\).* \(got 2\)"):
        torch.ops.gnnfuse.force_variant("gcn", 2)
    with pytest.raises(RuntimeError, match=r"gnnfuse::force_variant: argument 'op' must name an op generated with variants .*\(got 'spmm'\)"):
        torch.ops.gnnfuse.force_variant("spmm", 0)
    with pytest.raises(RuntimeError, match=r"gnnfuse::last_variant: argument 'op'"):
        torch.ops.gnnfuse.last_variant("nope")
    torch.ops.gnnfuse.force_variant("gcn", -1)  # automatic again: always accepted


def test_layer_and_functional_api_run_every_lowering():
    """gnnfuse.gcn(fused=True) and GCNConv(fused=True) give the same result whichever lowering
    the op runs (float64: to rounding)."""
    case = CASES["power_law"]
    x = features(case.num_nodes, 12, torch.float64, seed=45)
    torch.manual_seed(0)
    layer = gnnfuse.nn.GCNConv(12, 5, fused=True).double()
    outs = []
    for variant in (0, 1):
        with forced(variant):
            outs.append(layer(x, case.edge_index))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
