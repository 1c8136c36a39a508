"""gnnfuse.nn layers in PyG's tools, against the same models built from torch_geometric 2.8's
layers with the same weights: the explainers (GNNExplainer, CaptumExplainer, AttentionExplainer,
through PyG's explain mode and message hooks), PyG's message passing hooks, to_hetero (one and
two layers, sum and mean across relations) and to_hetero_with_bases. The layers are PyG
MessagePassing modules (same state_dict), and without a hook they run gnnfuse's fused ops.
Float64."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

import gnnfuse.nn as gnn
from graphs import CASES, features

pyg_nn = pytest.importorskip("torch_geometric.nn")
from torch_geometric.data import HeteroData  # noqa: E402
from torch_geometric.explain import Explainer  # noqa: E402
from torch_geometric.explain.algorithm import AttentionExplainer, GNNExplainer  # noqa: E402
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks  # noqa: E402
from torch_geometric.nn import MessagePassing, to_hetero, to_hetero_with_bases  # noqa: E402

GRAPH = CASES["self_loops_duplicates"]  # every node a self-loop, some twice, duplicate edges
OTHER = CASES["uniform"]  # a few self-loops

# name -> (first layer, second layer, edge features): each a function of the layer module
MODELS = {
    "gcn": (lambda nn: nn.GCNConv(5, 8), lambda nn: nn.GCNConv(8, 3), False),
    "gcn_improved_no_loops": (
        lambda nn: nn.GCNConv(5, 8, improved=True, add_self_loops=False),
        lambda nn: nn.GCNConv(8, 3, normalize=False),
        False,
    ),
    "gat": (lambda nn: nn.GATConv(5, 4, heads=2), lambda nn: nn.GATConv(8, 3), False),
    "gat_edges_no_loops": (
        lambda nn: nn.GATConv(5, 4, heads=2, edge_dim=2, fill_value="add"),
        lambda nn: nn.GATConv(8, 3, add_self_loops=False, edge_dim=2),
        True,
    ),
    "transformer": (lambda nn: nn.TransformerConv(5, 4, heads=2), lambda nn: nn.TransformerConv(8, 3, beta=True), False),
    "transformer_edges": (
        lambda nn: nn.TransformerConv(5, 4, heads=2, edge_dim=2),
        lambda nn: nn.TransformerConv(8, 3, concat=False, edge_dim=2),
        True,
    ),
}


class _TwoLayers(torch.nn.Module):
    def __init__(self, nn, name: str):
        super().__init__()
        first, second, self.edges = MODELS[name]
        self.conv1, self.conv2 = first(nn), second(nn)

    def forward(self, x, edge_index, edge_attr=None):
        extra = (edge_attr,) if self.edges else ()
        return self.conv2(torch.relu(self.conv1(x, edge_index, *extra)), edge_index, *extra)


def _models(name: str):
    """(gnnfuse model, PyG model) with PyG's initial weights."""
    torch.manual_seed(0)
    theirs = _TwoLayers(pyg_nn, name).double().eval()
    ours = _TwoLayers(gnn, name).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return ours, theirs


def _inputs(case=GRAPH):
    x = features(case.num_nodes, 5, torch.float64, seed=1)
    edge_attr = features(case.num_edges, 2, torch.float64, seed=2)
    return x, case.edge_index, edge_attr


def _explain(model, algorithm, name, case=GRAPH, **config):
    x, edge_index, edge_attr = _inputs(case)
    kwargs = {"edge_attr": edge_attr} if MODELS[name][2] else {}
    torch.manual_seed(5)  # the masks' random initialisation
    explainer = Explainer(
        model,
        algorithm=algorithm,
        explanation_type="model",
        edge_mask_type="object",
        model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"),
        **config,
    )
    return explainer(x, edge_index, index=torch.tensor([0, 3, 7, 11]), **kwargs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_layers_are_message_passing_with_pygs_state(name):
    ours, theirs = _models(name)
    for layer, ref in ((ours.conv1, theirs.conv1), (ours.conv2, theirs.conv2)):
        assert isinstance(layer, MessagePassing)
        assert list(layer.state_dict()) == list(ref.state_dict())
        assert (layer.aggr, layer.flow, layer.node_dim, layer.explain) == (ref.aggr, ref.flow, ref.node_dim, ref.explain)
        # PyG generated the class's propagate (and GATConv's edge_updater) once; a failed
        # generation would be retried, writing a module, at every construction
        assert type(layer).propagate.__module__ == f"gnnfuse.nn_{type(layer).__name__}_propagate"
        if isinstance(layer, gnn.GATConv):
            assert type(layer).edge_updater.__module__ == "gnnfuse.nn_GATConv_edge_updater"
    # deepcopy and pickle (MessagePassing's __setstate__) keep a working layer
    x, edge_index, edge_attr = _inputs()
    ref = ours(x, edge_index, edge_attr)
    for copied in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        torch.testing.assert_close(copied(x, edge_index, edge_attr), ref, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["self_loops_duplicates", "uniform"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_gnn_explainer_matches_pyg(name, case):
    # Before: "Could not compute gradients for edges" (the layers were not MessagePassing).
    ours, theirs = _models(name)
    algorithm = lambda: GNNExplainer(epochs=20)  # noqa: E731
    mine = _explain(ours, algorithm(), name, CASES[case], node_mask_type="attributes")
    ref = _explain(theirs, algorithm(), name, CASES[case], node_mask_type="attributes")
    torch.testing.assert_close(mine.edge_mask, ref.edge_mask, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(mine.node_mask, ref.node_mask, rtol=1e-6, atol=1e-9)
    assert torch.equal(mine.edge_mask == 0, ref.edge_mask == 0)  # the same hard mask (gradients exactly 0)
    assert ref.edge_mask.abs().sum() > 0
    for layer in (ours.conv1, ours.conv2):  # the explainer's masks are cleared
        assert layer.explain is None and layer._edge_mask is None


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("apply_sigmoid", [True, False])
def test_explain_mode_output_and_mask_gradient_match_pyg(name, apply_sigmoid):
    # One forward and backward in explain mode (the edge mask on every message, PyG's handling
    # of the self-loops a layer adds), also with a hook forcing the propagate path.
    ours, theirs = _models(name)
    x, edge_index, edge_attr = _inputs()
    g = torch.Generator().manual_seed(6)
    mask = torch.randn(edge_index.size(1), generator=g, dtype=torch.float64)
    if not apply_sigmoid:
        mask = mask.sigmoid()
    results = []
    for model, hook in ((theirs, False), (ours, False), (ours, True)):
        m = torch.nn.Parameter(mask.clone())
        set_masks(model, m, edge_index, apply_sigmoid=apply_sigmoid)
        handles = [layer.register_message_forward_hook(lambda mod, inp, out: None) for layer in (model.conv1, model.conv2)] if hook else []
        out = model(x, edge_index, edge_attr)
        w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        grads = torch.autograd.grad((out * w).sum(), [m] + list(model.parameters()))
        results.append((out, grads))
        for handle in handles:
            handle.remove()
        clear_masks(model)
    (ref, ref_grads), *mine = results
    for out, grads in mine:
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
        assert torch.equal(grads[0] == 0, ref_grads[0] == 0)


@pytest.mark.parametrize("name", ["gcn", "gat", "transformer_edges"])
def test_captum_explainer_matches_pyg(name):
    pytest.importorskip("captum")
    from torch_geometric.explain.algorithm import CaptumExplainer

    ours, theirs = _models(name)
    mine = _explain(ours, CaptumExplainer("IntegratedGradients"), name, node_mask_type="attributes")
    ref = _explain(theirs, CaptumExplainer("IntegratedGradients"), name, node_mask_type="attributes")
    torch.testing.assert_close(mine.edge_mask, ref.edge_mask, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(mine.node_mask, ref.node_mask, rtol=1e-7, atol=1e-10)
    assert ref.edge_mask.abs().sum() > 0


@pytest.mark.parametrize("name", ["gat", "gat_edges_no_loops", "transformer", "transformer_edges"])
def test_attention_explainer_matches_pyg(name):
    # AttentionExplainer reads the coefficients through a message forward hook (GATConv's
    # `alpha` argument, TransformerConv's `_alpha`). (On GRAPH, where every node has a self-loop,
    # PyG's GATConv yields fewer coefficients than edges and the explainer fails: a graph with
    # a few self-loops.)
    ours, theirs = _models(name)
    mine = _explain(ours, AttentionExplainer(), name, OTHER, node_mask_type=None)
    ref = _explain(theirs, AttentionExplainer(), name, OTHER, node_mask_type=None)
    torch.testing.assert_close(mine.edge_mask, ref.edge_mask, rtol=1e-10, atol=1e-12)
    assert ref.edge_mask.abs().sum() > 0
    for layer in (ours.conv1, ours.conv2):  # its hooks are removed: the fused path again
        assert not layer._message_forward_hooks


def _hooks(model, calls):
    """PyG hooks of every kind the layers run, each recording what it saw and changing it."""

    def propagate_pre(module, inputs):
        edge_index, size, kwargs = inputs
        calls.append(("propagate_pre", tuple(edge_index.shape), tuple(sorted(kwargs))))

    def message_pre(module, inputs):
        calls.append(("message_pre", tuple(sorted(inputs[0]))))

    def message(module, inputs, out):
        calls.append(("message", tuple(out.shape)))
        return out * 0.5

    def aggregate_pre(module, inputs):
        calls.append(("aggregate_pre", tuple(inputs[0]["index"].shape)))

    def aggregate(module, inputs, out):
        return out + 1.0

    def propagate(module, inputs, out):
        calls.append(("propagate", tuple(out.shape)))
        return out * 2.0

    def edge_update(module, inputs, out):
        calls.append(("edge_update", tuple(out.shape)))
        return out * 0.75

    handles = []
    for layer in (model.conv1, model.conv2):
        handles += [
            layer.register_propagate_forward_pre_hook(propagate_pre),
            layer.register_message_forward_pre_hook(message_pre),
            layer.register_message_forward_hook(message),
            layer.register_aggregate_forward_pre_hook(aggregate_pre),
            layer.register_aggregate_forward_hook(aggregate),
            layer.register_propagate_forward_hook(propagate),
            layer.register_edge_update_forward_hook(edge_update),
        ]
    return handles


@pytest.mark.parametrize("name", sorted(MODELS))
def test_message_passing_hooks_run_as_in_pyg(name):
    ours, theirs = _models(name)
    x, edge_index, edge_attr = _inputs()
    results = []
    for model in (ours, theirs):
        calls = []
        handles = _hooks(model, calls)
        out = model(x, edge_index, edge_attr)
        w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        grads = torch.autograd.grad((out * w).sum(), list(model.parameters()))
        results.append((out, grads, calls))
        for handle in handles:
            handle.remove()
    (out, grads, calls), (ref, ref_grads, ref_calls) = results
    assert calls == ref_calls and calls  # the same hooks, on the same tensors' shapes
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    # hooks removed: the fused output again
    torch.testing.assert_close(ours(x, edge_index, edge_attr), theirs(x, edge_index, edge_attr), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["gcn", "gat_edges_no_loops", "transformer_edges"])
def test_explain_mode_and_hooks_take_an_int32_edge_index(name):
    # (PyG's own layers need int64 there: its scatters take int64 indices only)
    ours, _ = _models(name)
    x, edge_index, edge_attr = _inputs()
    ref = ours(x, edge_index, edge_attr)
    mask = torch.nn.Parameter(torch.full((edge_index.size(1),), 50.0, dtype=torch.float64))  # sigmoid: 1
    set_masks(ours, mask, edge_index.int())
    torch.testing.assert_close(ours(x, edge_index.int(), edge_attr), ref, rtol=1e-12, atol=1e-12)
    clear_masks(ours)
    handle = ours.conv1.register_message_forward_hook(lambda module, inputs, out: None)
    torch.testing.assert_close(ours(x, edge_index.int(), edge_attr), ref, rtol=1e-12, atol=1e-12)
    handle.remove()


def test_custom_explain_message_runs_as_in_pyg():
    # An explain_message replaced on the instance (as GraphMaskExplainer does) runs on the messages.
    def explain_message(self, inputs, dim_size):
        return inputs * self._edge_mask[self._loop_mask].sigmoid().mean()

    for name in ("gcn", "gat", "transformer"):
        ours, theirs = _models(name)
        x, edge_index, edge_attr = _inputs()
        mask = torch.nn.Parameter(torch.randn(edge_index.size(1), dtype=torch.float64))
        outs = []
        for model in (ours, theirs):
            set_masks(model, mask, edge_index)
            for layer in (model.conv1, model.conv2):
                layer.explain_message = explain_message.__get__(layer, MessagePassing)
            outs.append(model(x, edge_index, edge_attr))
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-12)


def test_gcn_hooks_on_a_sparse_adjacency_are_a_clear_error():
    # PyG's GCNConv runs a sparse adj_t through message_and_aggregate (its hooks, not the message
    # hooks): gnnfuse refuses hooks there rather than run other ones. With an edge_index PyG never
    # runs message_and_aggregate hooks, nor does gnnfuse.
    ours, theirs = _models("gcn")
    layer, ref = ours.conv1, theirs.conv1
    x, edge_index, _ = _inputs()
    n = GRAPH.num_nodes
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1), dtype=torch.float64), (n, n))
    for register in ("register_message_and_aggregate_forward_hook", "register_message_forward_hook"):
        handles = [getattr(module, register)(lambda module, inputs, out: out * 2.0) for module in (layer, ref)]
        with pytest.raises(NotImplementedError, match="gnnfuse.nn.GCNConv: PyG's explain mode and message passing hooks need an edge_index"):
            layer(x, adj_t)
        torch.testing.assert_close(layer(x, edge_index), ref(x, edge_index), rtol=1e-10, atol=1e-12)
        for handle in handles:
            handle.remove()
    torch.testing.assert_close(layer(x, adj_t), ref(x, adj_t), rtol=1e-10, atol=1e-12)


def _profiled_ops(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events()}


def test_without_hooks_the_fused_ops_run():
    x, edge_index, _ = _inputs(OTHER)
    cases = [
        (gnn.GATConv(5, 4, heads=2, fused=True), "gnnfuse::gat"),
        (gnn.TransformerConv(5, 4, heads=2, fused=True), "gnnfuse::graph_attention"),
        (gnn.GCNConv(5, 8, fused=True), "gnnfuse::gcn"),
    ]
    for layer, op in cases:
        layer = layer.double()
        ops = _profiled_ops(lambda: layer(x, edge_index))
        assert op in ops
        handle = layer.register_message_forward_hook(lambda module, inputs, out: None)
        assert op not in _profiled_ops(lambda: layer(x, edge_index))  # PyG's per-edge messages
        handle.remove()
        assert op in _profiled_ops(lambda: layer(x, edge_index))


# ---------------------------------------------------------------------------------------------
# to_hetero


def _hetero(bipartite: bool) -> HeteroData:
    """Node types of different counts; every destination type reached by two relations."""
    g = torch.Generator().manual_seed(11)
    data = HeteroData()
    counts = {"paper": 12, "author": 7, "inst": 9}
    for i, (name, n) in enumerate(counts.items()):
        data[name].x = torch.randn(n, 4 + i, generator=g, dtype=torch.float64)

    def edges(src, dst, e):
        ei = torch.stack([torch.randint(0, counts[src], (e,), generator=g), torch.randint(0, counts[dst], (e,), generator=g)])
        if src == dst:  # a few self-loops
            ei = torch.cat([ei, torch.arange(3).repeat(2, 1)], 1)
        return ei

    if bipartite:
        relations = [("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "written_by", "author"),
                     ("inst", "employs", "author"), ("author", "works_at", "inst"), ("inst", "partners", "inst")]
    else:
        relations = [("paper", "cites", "paper"), ("paper", "similar", "paper"), ("author", "knows", "author"),
                     ("author", "coauthors", "author"), ("inst", "partners", "inst")]
    for i, (src, rel, dst) in enumerate(relations):
        data[src, rel, dst].edge_index = edges(src, dst, 20 + 5 * i)
    return data


HETERO = {
    # GCNConv takes no (x_src, x_dst): relations within a node type
    "gcn": (False, lambda nn, c: nn.GCNConv(-1, c)),
    "gcn_no_loops": (False, lambda nn, c: nn.GCNConv(-1, c, add_self_loops=False)),
    "gat": (True, lambda nn, c: nn.GATConv((-1, -1), c, heads=2, add_self_loops=False)),
    "gat_edges_free": (True, lambda nn, c: nn.GATConv((-1, -1), c, heads=2, concat=False, add_self_loops=False, residual=True)),
    "transformer": (True, lambda nn, c: nn.TransformerConv((-1, -1), c, heads=2)),
}


class _Hetero(torch.nn.Module):
    def __init__(self, nn, name: str, layers: int):
        super().__init__()
        make = HETERO[name][1]
        self.layers = layers
        self.conv1 = make(nn, 4)
        if layers == 2:
            self.conv2 = make(nn, 3)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index)
        if self.layers == 2:
            x = self.conv2(torch.relu(x), edge_index)
        return x


def _hetero_models(name: str, layers: int, data: HeteroData, transform=to_hetero, **kwargs):
    """(gnnfuse's, PyG's) ``transform`` of the model, with PyG's weights."""
    models = []
    for nn in (pyg_nn, gnn):
        torch.manual_seed(0)
        model = transform(_Hetero(nn, name, layers), data.metadata(), **kwargs).double()
        model(data.x_dict, data.edge_index_dict)  # materialises the lazy in_channels
        models.append(model)
    theirs, ours = models
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return ours, theirs


def _compare_hetero(ours, theirs, data):
    results = []
    for model in (ours, theirs):
        out = model(data.x_dict, data.edge_index_dict)
        loss = sum((v * torch.linspace(-1, 1, v.numel(), dtype=v.dtype).view_as(v)).sum() for v in out.values())
        results.append((out, torch.autograd.grad(loss, list(model.parameters()))))
    (out, grads), (ref, ref_grads) = results
    assert sorted(out) == sorted(ref) == sorted(data.node_types)  # node types, aggregated across relations
    for key in ref:
        torch.testing.assert_close(out[key], ref[key], rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("aggr", ["sum", "mean"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("name", sorted(HETERO))
def test_to_hetero_matches_pyg(name, layers, aggr):
    # Before: a one-layer model returned a dict keyed by edge types, a two-layer one failed in
    # validate_edge_index (the layers were not seen as message passing).
    data = _hetero(HETERO[name][0])
    ours, theirs = _hetero_models(name, layers, data, aggr=aggr)
    _compare_hetero(ours, theirs, data)


def test_to_hetero_gcn_on_relations_between_node_types_fails_as_pyg():
    data = _hetero(True)
    for nn in (pyg_nn, gnn):
        model = to_hetero(_Hetero(nn, "gcn_no_loops", 1), data.metadata()).double()
        with pytest.raises(ValueError, match="GCNConv'? ?.*received a tuple of node features"):
            model(data.x_dict, data.edge_index_dict)


@pytest.mark.parametrize("layers", [1, 2])
def test_to_hetero_with_bases_gcn_matches_pyg(layers):
    data = _same_width(_hetero(False))
    ours, theirs = _hetero_models("gcn_no_loops", layers, data, to_hetero_with_bases, num_bases=2, in_channels={"x": 4})
    _compare_hetero(ours, theirs, data)


def _same_width(data: HeteroData) -> HeteroData:
    out = copy.copy(data)
    for node_type in out.node_types:
        out[node_type].x = data[node_type].x[:, :4]
    return out


@pytest.mark.parametrize("name", ["gat", "transformer"])
def test_to_hetero_with_bases_attention_fails_as_pyg(name):
    # to_hetero_with_bases weights each message [E, F] by its relation; the attention layers'
    # messages are [E, heads, F]: PyG's layers fail on a count mismatch, gnnfuse's say why.
    data = _same_width(_hetero(True))
    layer = {"gat": "GATConv", "transformer": "TransformerConv"}[name]
    for nn, error, match in (
        (pyg_nn, ValueError, "Number of messages"),
        (gnn, NotImplementedError, f"gnnfuse.nn.{layer}: to_hetero_with_bases weights messages of shape .*use to_hetero"),
    ):
        torch.manual_seed(0)
        model = to_hetero_with_bases(_Hetero(nn, name, 1), data.metadata(), num_bases=2, in_channels={"x": 4}).double()
        with pytest.raises(error, match=match):
            model(data.x_dict, data.edge_index_dict)


def test_without_torch_geometric_the_layers_are_plain_modules(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch_geometric"] = None  # import torch_geometric -> ImportError
        import torch, gnnfuse.nn as gnn
        assert gnn._MessagePassing is None
        x, ei = torch.randn(6, 5), torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
        for layer in (gnn.GCNConv(5, 3), gnn.GATConv(5, 3, heads=2), gnn.TransformerConv(5, 3, heads=2)):
            assert type(layer).__mro__[1] is torch.nn.Module
            out = layer(x, ei)
            class Wrap(torch.nn.Module):
                def __init__(self, layer):
                    super().__init__()
                    self.layer = layer
                def forward(self, x: torch.Tensor, ei: torch.Tensor) -> torch.Tensor:
                    return self.layer(x, ei)
            torch.testing.assert_close(torch.jit.script(Wrap(layer))(x, ei), out)
            torch.testing.assert_close(torch.jit.trace(layer, (x, ei))(x[:4], ei[:, :3]), layer(x[:4], ei[:, :3]))
        print("ok")
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(gnn.__file__))] + sys.path)
    script = tmp_path / "no_pyg.py"  # (a file: TorchScript reads the Wrap class's source)
    script.write_text(code)
    res = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]
