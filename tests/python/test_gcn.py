"""The fused GCN product ``gcn`` (ops/gcn.spec: ``Y = (A X) W`` row by row, backward generated,
the weight's gradient summed over rows in private per-thread copies) and ``gnnfuse.gcn`` (the
normalised layer product, fused or on the narrower side): float64 references on the edge-case
graphs, gradcheck, opcheck, TorchScript, torch.compile, PyG's GCNConv and bad inputs."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.autograd import gradcheck

import gnnfuse
from graphs import CASE_NAMES, CASES, assert_frontend_matches_eager, check_gcn_against_dense, csr_of, dense_adjacency, edge_weights, features, gcn_inputs

ops = torch.ops.gnnfuse
INDEX_DTYPES = [torch.int32, torch.int64]
DTYPE_IDS = {torch.int32: "int32", torch.int64: "int64"}
SMALL = {"no_edges", "single_node", "single_node_loop", "self_loops_duplicates"}


@pytest.mark.parametrize("F", [1, 3, 32, 129])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_gcn_fp64_reference(name, index_dtype, weighted, F):
    case = CASES[name]
    rowptr, col, perm = csr_of(name, index_dtype)
    x = features(case.num_src_nodes, F, torch.float64, seed=F)
    W = features(F, 5, torch.float64, seed=F + 1)
    w = edge_weights(case.num_edges, torch.float64, seed=3) if weighted else None
    A = dense_adjacency(case, w)  # [N, M], edge_index order weights
    out = ops.gcn(rowptr, col, w[perm] if weighted else None, x, W)
    torch.testing.assert_close(out, A @ x @ W, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_gcn_gradcheck(name):
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    args = (
        edge_weights(case.num_edges, torch.float64, seed=4).requires_grad_(),
        features(case.num_src_nodes, 3, torch.float64, seed=5).requires_grad_(),
        features(3, 4, torch.float64, seed=6).requires_grad_(),
    )
    assert gradcheck(lambda *t: ops.gcn(rowptr, col, *t), args, fast_mode=name not in SMALL)


def test_gcn_weight_gradient_is_reproducible_and_thread_count_safe(restore_num_threads, deterministic_algorithms):
    # d/dweight sums every row's contribution in per-thread copies, added in chunk order (under
    # deterministic algorithms: the CUDA kernels' atomic variants would round differently per run)
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name)
    x = features(case.num_src_nodes, 16, torch.float32, seed=7)
    W = features(16, 8, torch.float32, seed=8).requires_grad_()
    gy = features(case.num_nodes, 8, torch.float32, seed=9)
    grads = []
    for threads in (1, 2, 2):
        torch.set_num_threads(threads)
        (g,) = torch.autograd.grad(ops.gcn(rowptr, col, None, x, W), W, gy)
        grads.append(g)
    torch.set_num_threads(2)
    assert torch.equal(grads[1], grads[2])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)
    want = (dense_adjacency(case) @ x.double()).T @ gy.double()
    torch.testing.assert_close(grads[1].double(), want, rtol=1e-4, atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=DTYPE_IDS.get)
def test_gcn_opcheck(index_dtype):
    name = "power_law"
    case = CASES[name]
    rowptr, col, _ = csr_of(name, index_dtype)
    args = (
        edge_weights(case.num_edges, torch.float64, seed=10).requires_grad_(),
        features(case.num_src_nodes, 5, torch.float64, seed=11).requires_grad_(),
        features(5, 3, torch.float64, seed=12).requires_grad_(),
    )
    torch.library.opcheck(ops.gcn.default, (rowptr, col, *args))


def test_gcn_bad_inputs():
    rowptr, col, _ = csr_of("uniform")
    case = CASES["uniform"]
    x = features(case.num_src_nodes, 4, torch.float64, seed=1)
    with pytest.raises(RuntimeError, match=r"gnnfuse::gcn: argument 'weight'"):
        ops.gcn(rowptr, col, None, x, torch.ones(5, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"gnnfuse::gcn: argument 'weight'"):
        ops.gcn(rowptr, col, None, x, torch.ones(4, 2, dtype=torch.float32))


class Layer(torch.nn.Module):
    def forward(self, rowptr: Tensor, col: Tensor, w: Tensor, x: Tensor, W: Tensor):
        return torch.ops.gnnfuse.gcn(rowptr, col, w, x, W)


def _layer_grads(fn):
    case = CASES["power_law"]
    rowptr, col, _ = csr_of("power_law")
    args = [
        edge_weights(case.num_edges, torch.float64, seed=13).requires_grad_(),
        features(case.num_src_nodes, 4, torch.float64, seed=14).requires_grad_(),
        features(4, 6, torch.float64, seed=15).requires_grad_(),
    ]
    y = fn(rowptr, col, *args)
    return (y,) + torch.autograd.grad(y.square().sum(), args)


@pytest.mark.filterwarnings("ignore:`torch.jit.\\w+` is deprecated:DeprecationWarning")
def test_python_api_gcn_names_bad_edge_index():
    x, w = torch.randn(3, 2), torch.randn(2, 2)
    with pytest.raises(RuntimeError, match=r"argument 'edge_index' must hold node indices in \[0, 3\)"):
        gnnfuse.gcn(torch.tensor([[0, 1], [1, 5]]), x, w)
    with pytest.raises(RuntimeError, match=r"argument 'edge_index' must be an int32 or int64 tensor"):
        gnnfuse.gcn(torch.tensor([[0.0, 1.0], [1.0, 2.0]]), x, w)


def test_gcn_torchscript():
    assert_frontend_matches_eager(Layer, _layer_grads, "torchscript")


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gcn_torch_compile(backend, dynamo_reset):
    assert_frontend_matches_eager(Layer, _layer_grads, "compile:" + backend)


@pytest.mark.parametrize("fused", [None, True, False])
@pytest.mark.parametrize("channels", [(5, 3), (3, 7)], ids=["narrowing", "widening"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_python_api_gcn_matches_pyg(fused, channels, weighted):
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    case = CASES["self_loops_duplicates"]
    torch.manual_seed(0)
    layer = pyg_nn.GCNConv(*channels, improved=weighted).double()
    x = features(case.num_nodes, channels[0], torch.float64, seed=16)
    w = edge_weights(case.num_edges, torch.float64, seed=17).abs() + 0.1 if weighted else None
    want = layer(x, case.edge_index, w)
    W = layer.lin.weight.detach().T.contiguous()
    for graph in (case.edge_index, gnnfuse.Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)):
        ew = w if w is None or isinstance(graph, Tensor) else w[graph.perm]
        got = gnnfuse.gcn(graph, x, W, ew, bias=layer.bias, improved=weighted, fused=fused)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


# Row blocks: the fused forward and its adjoints aggregate 32 rows, then multiply the block by W
# (runtime::gemm_acc: register tiles of 8 or 4 rows by 2 vectors, a one-vector panel, a scalar
# tail). Widths that reach every part of it in float32 and float64, graphs with partial blocks.
@pytest.mark.parametrize("dims", [(37, 40), (129, 17), (16, 64), (3, 33)], ids=lambda d: f"{d[0]}x{d[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ["power_law", "uniform", "empty_rows_isolated"])
def test_gcn_row_blocks_match_dense(name, threads, dtype, dims):
    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    w, ew, x, W, gy = gcn_inputs(case, perm, *dims, dtype, seed=21)
    torch.set_num_threads(threads)
    try:
        out = ops.gcn(rowptr, col, ew, x, W)
        grads = torch.autograd.grad(out, (ew, x, W), gy)
    finally:
        torch.set_num_threads(2)
    check_gcn_against_dense(case, perm, w, x, W, gy, out, grads)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_gcn_row_blocks_low_precision(dtype):
    # float32 accumulation: the error is that of rounding inputs and result, like PyTorch's own
    # bfloat16 product A @ x @ W measured against float64
    name = "power_law"
    case = CASES[name]
    rowptr, col, perm = csr_of(name)
    w = edge_weights(case.num_edges, torch.float64, seed=25)
    x = features(case.num_src_nodes, 40, torch.float64, seed=26)
    W = features(40, 48, torch.float64, seed=27)
    A = dense_adjacency(case, w)
    want = A @ x @ W
    ours = ops.gcn(rowptr, col, w[perm].to(dtype), x.to(dtype), W.to(dtype)).double()
    torch_err = ((A.to(dtype) @ x.to(dtype) @ W.to(dtype)).double() - want).abs().max()
    assert (ours - want).abs().max() <= 2 * torch_err + 1e-3 * want.abs().max()


def test_gcn_fused_choice_is_input_sensitive():
    choice = gnnfuse.ops.gcn_fused_choice
    assert choice(True, 10, 500, 16, True) and not choice(False, 1 << 20, 16, 64, False)
    assert choice(None, 1 << 18, 16, 128, needs_grad=False)       # inference, large output: fused
    assert not choice(None, 1 << 18, 16, 128, needs_grad=True)    # training: keep A X for d/dW
    assert not choice(None, 1 << 18, 512, 256, needs_grad=False)  # narrower after W: X W first
    assert not choice(None, 20000, 32, 256, needs_grad=False)     # output of 5M elements: split


def test_gcn_never_fused_by_default_where_the_split_takes_tensor_cores(monkeypatch):
    choice = gnnfuse.ops.gcn_fused_choice
    assert choice(None, 1 << 18, 16, 128, needs_grad=False) and not choice(None, 1 << 18, 16, 128, False, tensor_cores=True)
    assert choice(True, 1 << 18, 16, 128, False, tensor_cores=True)  # fused=True: fused all the same
    on = gnnfuse.ops.split_on_tensor_cores
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # (CUDA tensors without a GPU)
        cuda = {dt: torch.empty(4, 8, device="cuda", dtype=dt) for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}
    assert on(cuda[torch.float16]) and on(cuda[torch.bfloat16]) and not on(cuda[torch.float64])
    assert not on(torch.empty(4, 8, dtype=torch.bfloat16))  # (CPU)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert not on(cuda[torch.float32])
        torch.backends.cuda.matmul.allow_tf32 = True
        assert on(cuda[torch.float32])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    # the layer and gnnfuse.gcn ask it of their x: a large inference product, fused on this CPU,
    # is split where the split takes Tensor Cores
    plans, plan = [], gnnfuse.ops.gcn_plan

    def spy(*args):
        plans.append((args[-1], plan(*args)))
        return plans[-1][1]

    monkeypatch.setattr(gnnfuse.nn, "gcn_plan", spy)
    case = CASES["power_law"]
    n = 1 << 17
    ei = torch.cat([case.edge_index, case.edge_index + case.num_nodes], 1)
    x = torch.randn(n, 8)
    layer = gnnfuse.nn.GCNConv(8, 64)
    with torch.no_grad():
        want = layer(x, ei)
        monkeypatch.setattr(gnnfuse.nn, "split_on_tensor_cores", lambda x: True)
        got = layer(x, ei)
    assert plans == [(False, "fused"), (True, "aggregate_first")], plans
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(gnnfuse.ops, "split_on_tensor_cores", lambda x: True)
    monkeypatch.setattr(gnnfuse.ops, "gcn_plan", spy)
    with torch.no_grad():
        torch.testing.assert_close(gnnfuse.gcn(ei, x, layer.lin.weight.t()), want - layer.bias, rtol=1e-5, atol=1e-5)
    assert plans[-1] == (True, "aggregate_first"), plans


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_gcnconv_fused_choice_matches_split(grad):
    case = CASES["power_law"]
    x = features(case.num_nodes, 8, torch.float64, seed=28)
    outs = []
    for fused in (True, False, None):
        torch.manual_seed(0)
        layer = gnnfuse.nn.GCNConv(8, 24, fused=fused).double()
        with torch.set_grad_enabled(grad):
            outs.append(layer(x, case.edge_index))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(outs[2], outs[1], rtol=1e-12, atol=1e-12)
