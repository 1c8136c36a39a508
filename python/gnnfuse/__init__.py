"""gnnfuse: generated sparse (fused) operators for graph neural networks in PyTorch.

Importing the package loads the compiled operator library once, which registers
``torch.ops.gnnfuse.{spmm, sddmm, sddmm_spmm, edge_index_to_csr, csr_transpose}``.
Set ``GNNFUSE_LIBRARY=/path/to/libgnnfuse.so`` to load a specific build.

>>> import torch, gnnfuse
>>> edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])   # row 0 source, row 1 target
>>> g = gnnfuse.Graph.from_edge_index(edge_index, num_nodes=3)
>>> y = gnnfuse.ops.spmm(g, torch.randn(3, 8))
"""

from ._version import __version__
from ._library import library_path, load_library as _load_library

_load_library()

from . import backends, cluster, ops, sparse  # noqa: E402
from .graph import Graph, to_graph  # noqa: E402
from .ops import edge_softmax, gat, gcn, graph_attention, sddmm, sddmm_spmm, spmm  # noqa: E402
from .sparse import coarsen, spgemm  # noqa: E402

__all__ = ["Graph", "to_graph", "nn", "ops", "backends", "cluster", "sparse", "spgemm", "coarsen", "spmm", "sddmm", "sddmm_spmm", "edge_softmax", "gat", "graph_attention", "gcn", "library_path", "__version__"]


def __getattr__(name: str):
    # gnnfuse.nn is imported on first use: its layers subclass torch_geometric's MessagePassing
    # when PyG is installed, and importing PyG takes seconds that the ops alone do not need.
    if name == "nn":
        import importlib

        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'gnnfuse' has no attribute {name!r}")
