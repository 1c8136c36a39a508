"""The Python tidy-ups of issue 24 (item 6): the graph-form helpers in ``gnnfuse.graph``, PyG's
plumbing in ``gnnfuse.utils`` (checked against torch_geometric.utils), one attention
aggregation and one dropout for ``gnnfuse.gat`` and the layers, one fused-or-split policy for
``gcn`` (its tie pinned), the fake kernels of the pattern-building ops generated from the specs
(an unseen spec's, under opcheck and torch.compile), and a docstring on every public name."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gnnfuse
from _test_ops import find_test_ops_library
import gnnfuse.cluster
import gnnfuse.graph
import gnnfuse.nn as gnn
import gnnfuse.ops
import gnnfuse.sparse
import gnnfuse.utils
from graphs import CASES, features

PACKAGE = Path(gnnfuse.__file__).resolve().parent

try:
    import torch_geometric.utils as pyg_utils
    from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm
except ImportError:  # pragma: no cover
    pyg_utils = None

needs_pyg = pytest.mark.skipif(pyg_utils is None, reason="torch_geometric not installed")


# ---------------------------------------------------------------- graph forms in gnnfuse.graph
def test_graph_helpers_live_in_graph_module():
    for module in (gnnfuse.ops, gnnfuse.sparse, gnnfuse.cluster):
        assert module.resolve is gnnfuse.graph.resolve
    assert gnnfuse.sparse.infer_num_nodes is gnnfuse.graph.infer_num_nodes
    assert gnnfuse.graph.infer_num_nodes(torch.tensor([3, 1])) == 4 and gnnfuse.graph.infer_num_nodes(torch.empty(0)) == 0
    # no module defines or imports the old private names
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not {"_resolve", "_infer_num_nodes"} & {a.name for a in node.names}, path.name
            if isinstance(node, ast.FunctionDef):
                assert node.name not in ("_resolve", "_infer_num_nodes"), path.name


def test_resolve_names_the_op():
    with pytest.raises(TypeError, match=r"gnnfuse.ops.spmm: expected a gnnfuse.Graph"):
        gnnfuse.graph.resolve([1, 2], None, 3, "spmm")


# ---------------------------------------------------------------- PyG plumbing in gnnfuse.utils
def test_layers_use_the_utils_module():
    for name in ("_self_loop_attr", "_sparse_self_loops"):
        assert not hasattr(gnn.GATConv, name)
    assert not hasattr(gnnfuse.ops, "_gcn_norm_edges") and gnnfuse.ops.gcn_norm_edges is gnnfuse.utils.gcn_norm_edges


@needs_pyg
@pytest.mark.parametrize("fill_value", ["mean", "add", "max", "min", "mul", 0.5, 2, "tensor"])
def test_self_loops_match_pyg(fill_value):
    case = CASES["self_loops_duplicates"]
    edge_index = case.edge_index.long()
    attr = features(edge_index.size(1), 3, torch.float64, seed=1)
    fill = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64) if fill_value == "tensor" else fill_value
    n = case.num_nodes
    ours = gnnfuse.utils.remove_and_add_self_loops(edge_index, attr, n, n, fill)
    ei, ea = pyg_utils.remove_self_loops(edge_index, attr)
    want = pyg_utils.add_self_loops(ei, ea, fill_value=fill, num_nodes=n)
    assert torch.equal(ours[0], want[0])
    torch.testing.assert_close(ours[1], want[1], rtol=1e-12, atol=1e-12)
    # the fixed-size form: the same loops appended, the input's loops sent to the padding source
    index, feat = gnnfuse.utils.redirect_self_loops(edge_index, attr, n, n, n, fill)
    loops = edge_index[0] == edge_index[1]
    assert torch.equal(index[0, : loops.numel()][loops], torch.full((int(loops.sum()),), n))
    assert torch.equal(index[:, edge_index.size(1):], want[0][:, ei.size(1):])
    torch.testing.assert_close(feat[edge_index.size(1):], want[1][ei.size(1):], rtol=1e-12, atol=1e-12)


@needs_pyg
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc])
def test_sparse_adjacency_matches_pyg(layout):
    case = CASES["uniform"]
    values = features(case.edge_index.size(1), 1, torch.float64, seed=2).view(-1)
    adj = torch.sparse_coo_tensor(case.edge_index.flip(0), values, (case.num_nodes, case.num_nodes)).coalesce()
    adj = adj if layout == torch.sparse_coo else adj.to_sparse(layout=layout)
    ours = gnnfuse.utils.to_edge_index("test", adj)
    want = pyg_utils.to_edge_index(adj)
    # PyG's edge_index is (rows, cols) of adj_t, ours (sources, targets)
    assert torch.equal(ours[0], want[0].flip(0)) and torch.equal(ours[1], want[1])
    back = gnnfuse.utils.sparse_like(adj, ours[0], ours[1] * 2, case.num_nodes, case.num_nodes)
    assert back.layout == layout
    torch.testing.assert_close(back.to_dense(), 2 * adj.to_dense())


@needs_pyg
@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_pyg_gcn_norm_matches_pyg(improved, weighted):
    case = CASES["self_loops_duplicates"]
    edge_index = case.edge_index.long()
    w = features(edge_index.size(1), 1, torch.float64, seed=3).view(-1).abs() if weighted else None
    ours = gnnfuse.utils.pyg_gcn_norm(edge_index, w, case.num_nodes, improved, True, torch.float64)
    want = pyg_gcn_norm(edge_index, w, case.num_nodes, improved, True, dtype=torch.float64)
    assert torch.equal(ours[0], want[0])
    torch.testing.assert_close(ours[1], want[1], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- one attention aggregation
def test_one_attention_aggregation_for_gat_and_layers():
    assert gnn._softmax_aggregate is gnnfuse.ops._softmax_aggregate
    assert gnn.attention_dropout is gnnfuse.ops.attention_dropout
    source = inspect.getsource(gnn)
    for call in ("F.dropout(", "_ops.edge_softmax_heads(", "_ops.spmm_heads("):
        assert call not in source, call


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_attention_dropout_is_functional_dropout(p):
    alpha = torch.rand(500, 3, dtype=torch.float64)
    torch.manual_seed(7)
    want = F.dropout(alpha, p=p, training=True)
    # PyTorch's generator or an explicit one in the same state: the same mask
    torch.manual_seed(7)
    assert torch.equal(gnnfuse.ops.attention_dropout(alpha, p, True), want)
    assert torch.equal(gnnfuse.ops.attention_dropout(alpha, p, True, torch.Generator().manual_seed(7)), want)
    assert gnnfuse.ops.attention_dropout(alpha, p, False, torch.Generator()) is alpha


def test_gat_dropout_is_the_layers():
    """gnnfuse.gat and GATConv drop the same coefficients (after the softmax) for one seed, and
    gat's generator draws the mask PyTorch's generator would."""
    case = CASES["power_law"]
    H, C = 2, 4
    torch.manual_seed(0)
    layer = gnn.GATConv(6, C, heads=H, dropout=0.4, add_self_loops=False, bias=False).double().train()
    x = features(case.num_nodes, 6, torch.float64, seed=4)
    h = layer.lin(x).view(-1, H, C)
    torch.manual_seed(11)
    out_layer = layer(x, case.edge_index)
    torch.manual_seed(11)
    out_gat = gnnfuse.gat(case.edge_index, h, layer.att_src, layer.att_dst, 0.2, dropout=0.4)
    assert torch.equal(out_layer, out_gat.reshape(-1, H * C))
    seeded = gnnfuse.gat(case.edge_index, h, layer.att_src, layer.att_dst, 0.2, dropout=0.4, generator=torch.Generator().manual_seed(11))
    assert torch.equal(seeded, out_gat)
    # the reference: the coefficients (returned before dropout) times F.dropout's mask
    _, alpha = gnnfuse.gat(case.edge_index, h, layer.att_src, layer.att_dst, 0.2, return_attention=True)
    torch.manual_seed(11)
    g = gnnfuse.Graph.from_edge_index(case.edge_index, num_nodes=case.num_nodes)
    used = F.dropout(alpha[g.perm], p=0.4, training=True)
    ref = torch.ops.gnnfuse.spmm_heads(g.rowptr, g.col, used, h.contiguous())
    torch.testing.assert_close(out_gat, ref, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- one gcn policy
def test_gcn_plan_ties_aggregate_first():
    plan = gnnfuse.ops.gcn_plan
    assert plan(None, 100, 64, 64, False) == "aggregate_first"  # tie, small: split, aggregation first
    assert plan(None, 100, 64, 64, True) == "aggregate_first"
    assert plan(False, 1 << 20, 64, 64, False) == "aggregate_first"
    assert plan(None, 1 << 20, 64, 64, False) == "fused"  # tie, large, inference: fused
    assert plan(None, 100, 65, 64, False) == "project_first"
    assert plan(None, 1 << 20, 65, 64, False) == "project_first"
    assert plan(None, 100, 63, 64, False) == "aggregate_first"
    assert plan(True, 10, 65, 64, True) == "fused"
    assert gnnfuse.ops.gcn_aggregates_first(64, 64) and not gnnfuse.ops.gcn_aggregates_first(65, 64)


@pytest.mark.parametrize("channels", [(8, 8), (8, 12), (12, 8)], ids=["tie", "widening", "narrowing"])
def test_gcn_and_gcnconv_split_the_same_way(channels):
    """The layer and the functional op take the same path, tie included: bitwise equal outputs
    (and, at the tie, equal to the aggregation-first product)."""
    f_in, f_out = channels
    case = CASES["power_law"]
    x = features(case.num_nodes, f_in, torch.float32, seed=5)
    torch.manual_seed(0)
    layer = gnn.GCNConv(f_in, f_out, fused=False)
    with torch.no_grad():
        layer.bias.copy_(torch.randn(f_out))
        ours = layer(x, case.edge_index)
        op = gnnfuse.gcn(case.edge_index, x, layer.lin.weight.t(), bias=layer.bias, fused=False)
        assert torch.equal(ours, op)
        rowptr, col, w = gnnfuse.ops.gcn_norm(case.edge_index, None, case.num_nodes)
        first = torch.ops.gnnfuse.spmm(rowptr, col, w, x) @ layer.lin.weight.t() + layer.bias
        if f_in <= f_out:
            assert torch.equal(ours, first)


def test_gcn_rule_written_once():
    sources = {p.name: p.read_text() for p in PACKAGE.glob("*.py")}
    for name, text in sources.items():
        for pattern in ("in_channels < self.out_channels", "x.size(1) <= weight.size(1)", "in_channels) <= out_channels"):
            if pattern in text:
                assert name == "ops.py" and text.count(pattern) == 1 and "def gcn_aggregates_first" in text, (name, pattern)


# ---------------------------------------------------------------- generated fake kernels
def _test_ops_library():
    return find_test_ops_library("gnnfuse_test_ops")


def test_fake_kernels_come_from_the_generator():
    info = torch.ops.gnnfuse._generated_fake_info
    assert sorted(info.overloads()) == ["coarsen", "spgemm"]
    assert {"gnnfuse::spgemm_symbolic", "gnnfuse::spgemm_assemble", "gnnfuse::coarsen_symbolic",
            "gnnfuse::coarsen_assemble"} <= gnnfuse._library._FAKES_REGISTERED
    assert gnnfuse._library.register_generated_fakes() == []  # once only
    assert "spgemm_symbolic" not in inspect.getsource(gnnfuse._library)


_UNSEEN_SPEC = textwrap.dedent(
    """
    import json, sys
    import torch, torch._dynamo as dynamo
    import gnnfuse
    torch.ops.load_library(sys.argv[1])
    new = gnnfuse._library.register_generated_fakes()
    assert sorted(new) == ["gnnfuse::pattern_product_assemble", "gnnfuse::pattern_product_symbolic"], new
    info = json.loads(torch.ops.gnnfuse._generated_fake_info.pattern_product())
    assert info[1] == {"op": "pattern_product_assemble", "rows": {"arg": "arowptr", "from": "rowptr"},
                       "index": "browptr", "values": "avals"}, info
    ops = torch.ops.gnnfuse
    gen = torch.Generator().manual_seed(0)
    n_i, n_k, n_cols = 7, 5, 6
    A = (torch.rand(n_i, n_k, generator=gen) < 0.4) * torch.rand(n_i, n_k, generator=gen, dtype=torch.float64)
    B = (torch.rand(n_k, n_cols, generator=gen) < 0.4).double()
    a, b = A.to_sparse_csr(), B.to_sparse_csr()
    for itype in (torch.int32, torch.int64):
        # (copies: no views of the sparse tensors, which Dynamo cannot wrap)
        ar, ac, av = a.crow_indices().to(itype, copy=True), a.col_indices().to(itype, copy=True), a.values().clone()
        br, bc = b.crow_indices().to(itype, copy=True), b.col_indices().to(itype, copy=True)
        r, c, v = ops.pattern_product_assemble(n_cols, br, bc, ar, ac, av)
        assert r.dtype == c.dtype == itype and v.dtype == torch.float64
        dense = torch.sparse_csr_tensor(r.long(), c.long(), v, (n_i, n_cols)).to_dense()
        torch.testing.assert_close(dense, A @ B)
        torch.library.opcheck(ops.pattern_product_symbolic.default, (br, bc, ar, ac, n_cols),
                              test_utils=("test_schema", "test_faketensor"))
        torch.library.opcheck(ops.pattern_product_assemble.default, (n_cols, br, bc, ar, ac, av.clone().requires_grad_()),
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
        with dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            @torch.compile(fullgraph=True, backend="aot_eager")
            def full(av):
                r_, c_, v_ = ops.pattern_product_assemble(n_cols, br, bc, ar, ac, av)
                s_, t_ = ops.pattern_product_symbolic(br, bc, ar, ac, n_cols)
                return r_, c_, v_ * 2, s_, t_
            r2, c2, v2, s2, t2 = full(av)
            dynamo.reset()
        assert torch.equal(r2, r) and torch.equal(c2, c) and torch.equal(s2, r) and torch.equal(t2, c)
        torch.testing.assert_close(v2, 2 * v)
    print("ok")
    """
)


def test_unseen_symbolic_spec_gets_fake_kernels():
    """tests/codegen/specs/pattern_product.spec (compiled into the test-op library, never in
    ops/): its symbolic and assembling ops get fake kernels from the generator's description
    alone, which opcheck and torch.compile(fullgraph=True) use. A process of its own: the test
    ops stay out of this one."""
    main_lib, lib = _test_ops_library()
    env = dict(os.environ, GNNFUSE_LIBRARY=main_lib, PYTHONPATH=str(PACKAGE.parent))
    run = subprocess.run([sys.executable, "-c", _UNSEEN_SPEC, lib], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


# ---------------------------------------------------------------- docstrings
def _public(module):
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield f"{module.__name__}.{name}", obj


def test_every_public_layer_and_op_has_a_docstring():
    assert gnn.GCNConv.__doc__ and gnn.GCNConv.__doc__.lstrip().startswith("Graph convolution")
    missing = []
    for module in (gnnfuse, gnnfuse.ops, gnnfuse.nn, gnnfuse.sparse, gnnfuse.cluster, gnnfuse.graph):
        for name, obj in _public(module):
            if not (obj.__doc__ or "").strip():
                missing.append(name)
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                    own = inspect.isfunction(fn) and fn.__module__ == obj.__module__  # (not PyG's generated propagate, ...)
                    if not attr.startswith("_") and own and not (fn.__doc__ or "").strip():
                        if attr in ("message", "edge_update", "reset_parameters", "extra_repr"):
                            continue  # PyG's hooks and torch.nn.Module's methods, documented there
                        missing.append(f"{name}.{attr}")
    for name in ("gcn_plan", "gcn_aggregates_first", "gcn_fused_choice", "split_on_tensor_cores", "attention_dropout"):
        if not (getattr(gnnfuse.ops, name).__doc__ or "").strip():
            missing.append("gnnfuse.ops." + name)
    assert not missing, missing
