"""CPU autocast (torch.autocast("cpu", dtype=bfloat16 or float16)) over the generated ops and the
layers, PyTorch's conventions: contractions run in the autocast dtype (like torch.mm), the
edge softmax in float32 (like softmax on CUDA's list), element-wise per-edge ops and max/min in
the widest input dtype (like torch.cat); index tensors, float64 and the float32 row statistics
are never cast; gradients come back in the inputs' dtypes; nothing changes outside the context."""

from __future__ import annotations

import warnings
from typing import Callable, Dict, List, Tuple

import pytest
import torch
from torch import Tensor

import gnnfuse.nn as gnn
from gnnfuse.sparse import assignment_csr
from graphs import distinct_edges

ops = torch.ops.gnnfuse
LOW = [torch.bfloat16, torch.float16]
LOW_IDS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# norm-wise relative error of a result from inputs rounded to the dtype, rounded once itself
TOL = {torch.bfloat16: 3e-2, torch.float16: 4e-3}

pytestmark = pytest.mark.filterwarnings("error")


def _graph(n: int = 40, e: int = 240, seed: int = 0):
    ei = distinct_edges(n, e, seed)
    rowptr, col, _ = ops.edge_index_to_csr(ei, n)
    return n, ei, rowptr, col


N, EDGE_INDEX, ROWPTR, COL = _graph()
E = COL.numel()
H, F, K = 2, 6, 5
PROWPTR, PCOL, MROWPTR, MCOL = assignment_csr(torch.arange(N) % 7, 7, ROWPTR.dtype)


def rnd(*shape, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


# op -> (function of the floating inputs, float32 inputs, policy)
RAW: Dict[str, Tuple[Callable[..., Tensor], List[Tensor], str]] = {
    "spmm": (lambda w, x: ops.spmm(ROWPTR, COL, w, x), [rnd(E, seed=1), rnd(N, F, seed=2)], "lower"),
    "spmm_mean": (lambda w, x: ops.spmm_mean(ROWPTR, COL, w, x), [rnd(E, seed=1), rnd(N, F, seed=2)], "lower"),
    "spmm_max": (lambda w, x: ops.spmm_max(ROWPTR, COL, w, x)[0], [rnd(E, seed=1), rnd(N, F, seed=2)], "promote"),
    "spmm_min": (lambda w, x: ops.spmm_min(ROWPTR, COL, w, x)[0], [rnd(E, seed=1), rnd(N, F, seed=2)], "promote"),
    "scaled_spmm": (lambda w, s, x: ops.scaled_spmm(ROWPTR, COL, w, s, x), [rnd(E, seed=1), rnd(E, seed=3), rnd(N, F, seed=2)], "lower"),
    "spmm_heads": (lambda a, x: ops.spmm_heads(ROWPTR, COL, a, x), [rnd(E, H, seed=4), rnd(N, H, F, seed=5)], "lower"),
    "sddmm": (lambda w, u, v: ops.sddmm(ROWPTR, COL, w, u, v), [rnd(E, seed=1), rnd(N, K, seed=6), rnd(N, K, seed=7)], "lower"),
    "sddmm_heads": (lambda u, v: ops.sddmm_heads(ROWPTR, COL, u, v), [rnd(N, H, K, seed=8), rnd(N, H, K, seed=9)], "lower"),
    "sddmm_add": (lambda u, v: ops.sddmm_add(ROWPTR, COL, u, v), [rnd(N, H, seed=10), rnd(N, H, seed=11)], "promote"),
    "sddmm_mul": (lambda u, v: ops.sddmm_mul(ROWPTR, COL, u, v), [rnd(N, H, seed=10), rnd(N, H, seed=11)], "promote"),
    "sddmm_spmm": (lambda w, u, v, x: ops.sddmm_spmm(ROWPTR, COL, w, u, v, x),
                   [rnd(E, seed=1), rnd(N, K, seed=6), rnd(N, K, seed=7), rnd(N, F, seed=2)], "lower"),
    "edge_softmax": (lambda s: ops.edge_softmax(ROWPTR, COL, s), [rnd(E, seed=12)], "fp32"),
    "edge_softmax_heads": (lambda s: ops.edge_softmax_heads(ROWPTR, COL, s), [rnd(E, H, seed=13)], "fp32"),
    "gat": (lambda a, b, x: ops.gat(ROWPTR, COL, a, b, x, 0.2), [rnd(N, H, seed=14), rnd(N, H, seed=15), rnd(N, H, F, seed=16)], "lower"),
    "gat_edge": (lambda a, b, e, x: ops.gat_edge(ROWPTR, COL, a, b, e, x, 0.2),
                 [rnd(N, H, seed=14), rnd(N, H, seed=15), rnd(E, H, seed=25), rnd(N, H, F, seed=16)], "lower"),
    "graph_attention": (lambda q, k, v: ops.graph_attention(ROWPTR, COL, q, k, v),
                        [rnd(N, H, K, seed=17), rnd(N, H, K, seed=18), rnd(N, H, F, seed=19)], "lower"),
    "graph_attention_edge": (lambda q, k, b, v: ops.graph_attention_edge(ROWPTR, COL, q, k, b, v),
                             [rnd(N, H, K, seed=17), rnd(N, H, K, seed=18), rnd(E, H, seed=26), rnd(N, H, F, seed=19)], "lower"),
    "graph_attention_edge_values": (lambda q, k, b, ev: ops.graph_attention_edge_values(ROWPTR, COL, q, k, b, ev),
                                    [rnd(N, H, K, seed=17), rnd(N, H, K, seed=18), rnd(E, H, seed=26), rnd(E, F, seed=27)], "lower"),
    "gcn": (lambda w, x, W: ops.gcn(ROWPTR, COL, w, x, W), [rnd(E, seed=1), rnd(N, K, seed=20), rnd(K, F, seed=21)], "lower"),
    "spgemm_assemble": (lambda a, b: ops.spgemm_assemble(ROWPTR, COL, a, ROWPTR, COL, b, N)[2], [rnd(E, seed=22), rnd(E, seed=23)], "lower"),
    "coarsen_assemble": (lambda w: ops.coarsen_assemble(MROWPTR, MCOL, ROWPTR, COL, w, PROWPTR, PCOL, 7)[2], [rnd(E, seed=24)], "lower"),
}
RAW_NAMES = sorted(RAW)


def _rel_err(a: Tensor, b: Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _expected_dtype(policy: str, low: torch.dtype, inputs: List[Tensor]) -> torch.dtype:
    if policy == "lower":
        return low
    if policy == "fp32":
        return torch.float32
    return torch.float32 if any(t.dtype == torch.float32 for t in inputs) else low


@pytest.mark.parametrize("low", LOW, ids=LOW_IDS.get)
@pytest.mark.parametrize("op", RAW_NAMES)
def test_op_mixed_inputs_under_autocast(op, low):
    """float32 inputs with the first one in the low dtype (before autocast: a dtype error):
    the op runs, in the dtype its policy says, within the dtype's rounding of float32."""
    fn, inputs, policy = RAW[op]
    mixed = [inputs[0].to(low)] + inputs[1:]
    if len(inputs) > 1:
        with pytest.raises(RuntimeError, match=rf"gnnfuse::{op.replace('_assemble', '')}\w*: argument .* must have the dtype"):
            fn(*mixed)
    with torch.autocast("cpu", dtype=low):
        out = fn(*mixed)
    assert out.dtype == _expected_dtype(policy, low, mixed)
    want = fn(*[t.float() for t in mixed])
    if out.dtype == torch.float32:  # nothing rounded but the low input, which want also reads
        torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    else:
        assert _rel_err(out, want) < TOL[low]
    if policy == "promote":  # all inputs in the low dtype: the op runs in it
        with torch.autocast("cpu", dtype=low):
            assert fn(*[t.to(low) for t in inputs]).dtype == low


@pytest.mark.parametrize("low", LOW, ids=LOW_IDS.get)
@pytest.mark.parametrize("op", RAW_NAMES)
def test_backward_through_autocast_gives_the_inputs_dtypes(op, low):
    fn, inputs, _ = RAW[op]
    leaves = [t.clone().requires_grad_() for t in inputs]
    leaves[0] = inputs[0].to(low).requires_grad_()  # one input in the low dtype
    with torch.autocast("cpu", dtype=low):
        out = fn(*leaves)
    cot = rnd(*out.shape, seed=99)
    (out.float() * cot).sum().backward()
    ref = [t.detach().float().requires_grad_() for t in leaves]
    (fn(*ref) * cot).sum().backward()
    for t, r in zip(leaves, ref):
        assert t.grad is not None and t.grad.dtype == t.dtype
        assert _rel_err(t.grad, r.grad) < 3 * TOL[low]


@pytest.mark.parametrize("op", ["spmm", "edge_softmax_heads", "sddmm_add", "gat"])
def test_float64_is_never_cast(op):
    fn, inputs, _ = RAW[op]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn(*[t.double() for t in inputs])
    assert out.dtype == torch.float64


def test_backward_inside_autocast_keeps_row_statistics_float32():
    """The backward of the fused attention run inside the context: its row statistics (acc
    tensors, float32) are not cast; gradients in the inputs' dtypes."""
    fn, inputs, _ = RAW["gat"]
    leaves = [t.clone().requires_grad_() for t in inputs]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn(*leaves)
        assert out.dtype == torch.bfloat16
        grads = torch.autograd.grad(out.float().square().sum(), leaves)
    ref = [t.detach().clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(fn(*ref).square().sum(), ref)
    for g, w in zip(grads, want):
        assert g.dtype == torch.float32
        assert _rel_err(g, w) < 3 * TOL[torch.bfloat16]


def test_nothing_autocast_outside_the_context():
    fn, inputs, _ = RAW["spmm"]
    w, x = inputs
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fn(w, x).dtype == torch.bfloat16
    assert fn(w, x).dtype == torch.float32
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'edge_weight' must have the dtype of 'x'"):
        fn(w, x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert fn(w, x).dtype == torch.float32
    with torch.autocast("cuda", dtype=torch.float16, enabled=torch.cuda.is_available()):  # another device's context
        assert fn(w, x).dtype == torch.float32


# ------------------------------------------------------------------ the layers
LAYERS = {
    "GCNConv": lambda m: m.GCNConv(F, 8),
    "GATConv": lambda m: m.GATConv(F, 4, heads=2, edge_dim=3),
    "GATConv[no edge_dim]": lambda m: m.GATConv(F, 4, heads=2),
    "TransformerConv": lambda m: m.TransformerConv(F, 4, heads=2),
    "TransformerConv[edge_dim]": lambda m: m.TransformerConv(F, 4, heads=2, edge_dim=3),
}
FUSED = {"GCNConv": [False, True], "GATConv": [False, True], "GATConv[no edge_dim]": [False, True], "TransformerConv": [False, True],
         "TransformerConv[edge_dim]": [False, True]}
CASES = [(name, fused) for name in sorted(LAYERS) for fused in FUSED[name]]
EDGE_ATTR = rnd(E, 3, seed=30)


def _run(layer, name, x, low):
    edge = "edge_dim" in name or name == "GATConv"
    with torch.autocast("cpu", dtype=low, enabled=low is not None):
        return layer(x, EDGE_INDEX, EDGE_ATTR) if edge else layer(x, EDGE_INDEX)


@pytest.mark.parametrize("low", LOW, ids=LOW_IDS.get)
@pytest.mark.parametrize("name,fused", CASES, ids=[f"{n}-fused={f}" for n, f in CASES])
def test_layer_forward_backward_under_autocast(name, fused, low):
    """Forward and backward under autocast run; output and gradients (input and parameters)
    within the dtype's tolerance of the float32 run, and no further from it than 4x PyG's layer
    under the same autocast."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    theirs = LAYERS[name](pyg_nn)
    ours = LAYERS[name](gnn)
    ours.fused = fused
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = rnd(N, F, seed=31)
    results = {}
    for who, layer in (("pyg", theirs), ("ours", ours)):
        for dt in (None, low):
            xs = x.clone().requires_grad_()
            out = _run(layer.eval(), name, xs, dt)
            cot = rnd(*out.shape, seed=32)
            grads = torch.autograd.grad((out.float() * cot).sum(), [xs] + list(layer.parameters()))
            results[who, dt] = (out.detach(), grads)
    out, grads = results["ours", low]
    assert grads[0].dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
    assert out.dtype in (low, torch.float32)
    want_out, want_grads = results["ours", None]
    pyg_out, pyg_grads = results["pyg", low]
    assert _rel_err(results["pyg", None][0], want_out) < 1e-5  # the same layer
    for got, want, theirs_ in [(out, want_out, pyg_out)] + list(zip(grads, want_grads, pyg_grads)):
        err, pyg_err = _rel_err(got, want), _rel_err(theirs_, want)
        assert err < 4 * max(pyg_err, TOL[low]), (err, pyg_err)


class _Model(torch.nn.Module):
    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv(x, edge_index).relu()


class _MixedOps(torch.nn.Module):
    """The ops called from a scripted model with float32 weights and bfloat16 features."""

    def forward(self, rowptr: Tensor, col: Tensor, w: Tensor, x: Tensor) -> Tensor:
        s = torch.ops.gnnfuse.edge_softmax(rowptr, col, w)
        return torch.ops.gnnfuse.spmm(rowptr, col, s, x)


def _script(model):
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript, tested here on purpose
        warnings.filterwarnings("ignore", message="`torch.jit", category=DeprecationWarning)
        return torch.jit.script(model)


def test_torchscript_ops_under_autocast():
    """Ops called from TorchScript go through the same autocast kernels: a dtype error without
    the context, the policies' dtypes inside."""
    scripted = _script(_MixedOps())
    w, x = RAW["spmm"][1]
    with pytest.raises(RuntimeError, match=r"gnnfuse::spmm: argument 'edge_weight' must have the dtype of 'x'"):
        scripted(ROWPTR, COL, w, x.bfloat16())
    for low in LOW:
        with torch.autocast("cpu", dtype=low):
            got = scripted(ROWPTR, COL, w, x.to(low))
            got = scripted(ROWPTR, COL, w, x.to(low))  # (the profiling executor's optimised run)
            want = _MixedOps()(ROWPTR, COL, w, x.to(low))
        assert got.dtype == want.dtype == low
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["GCNConv", "GATConv[no edge_dim]", "TransformerConv"])
def test_torchscript_layer_under_autocast(name):
    """A scripted model of a layer runs under autocast, within the dtype's tolerance of float32
    and of the eager model under autocast. (Its result dtype may differ from eager's: TorchScript
    runs aten::linear of its differentiable subgraphs in float32 under CPU autocast, a scripted
    torch.nn.Linear plus an add alone gives float32 where eager gives bfloat16: torch 2.13.)"""
    torch.manual_seed(0)
    model = _Model(LAYERS[name](gnn)).eval()
    scripted = _script(model)
    x = rnd(N, F, seed=33)
    full = model(x, EDGE_INDEX)
    for low in LOW:
        with torch.autocast("cpu", dtype=low):
            want = model(x, EDGE_INDEX)
            got = scripted(x, EDGE_INDEX)
            got = scripted(x, EDGE_INDEX)  # (the profiling executor's optimised run)
        assert got.dtype in (low, torch.float32)
        assert _rel_err(got, full) < TOL[low]
        assert _rel_err(got, want) < 2 * TOL[low]
    assert scripted(x, EDGE_INDEX).dtype == torch.float32
