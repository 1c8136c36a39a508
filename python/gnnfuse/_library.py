"""Finding and loading the compiled gnnfuse operator library.

The build (CMake, driven by ``setup.py``) produces a plain shared library that
registers every op under ``torch.ops.gnnfuse`` when it is loaded; it is copied
next to this file as ``_gnnfuse*.so``.  It is *not* a Python extension module:
it is loaded with :func:`torch.ops.load_library`.

Search order:

1. the environment variable ``GNNFUSE_LIBRARY`` (a path to the ``.so``), handy
   for running against a CMake build folder, e.g.
   ``GNNFUSE_LIBRARY=build/libgnnfuse.so``;
2. ``_gnnfuse*.so`` in this package's directory.

The library is loaded at most once per process.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Callable, Dict, List, Optional, Set

import torch

__all__ = ["ENV_VAR", "library_path", "load_library", "find_library", "register_generated_fakes"]

ENV_VAR = "GNNFUSE_LIBRARY"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LOADED_PATH: Optional[str] = None


def _candidates() -> List[str]:
    pattern = os.path.join(_PACKAGE_DIR, "_gnnfuse*.so")
    return sorted(glob.glob(pattern))


def find_library() -> str:
    """Return the path of the library to load; raise ImportError if there is none."""
    env = os.environ.get(ENV_VAR)
    if env:
        path = os.path.abspath(os.path.expanduser(env))
        if not os.path.isfile(path):
            raise ImportError(
                f"gnnfuse: {ENV_VAR} is set to {env!r}, but no such file exists"
            )
        return path

    found = _candidates()
    if not found:
        raise ImportError(
            "gnnfuse: the compiled operator library was not found "
            f"(looked for {os.path.join(_PACKAGE_DIR, '_gnnfuse*.so')}). "
            "Build it with `pip install --no-build-isolation -e .` from the repository "
            f"root, or point {ENV_VAR} at a built libgnnfuse.so "
            "(e.g. build/libgnnfuse.so)."
        )
    if len(found) > 1:
        # Two copies would both try to define TORCH_LIBRARY(gnnfuse): refuse rather
        # than load an arbitrary one.
        raise ImportError(
            "gnnfuse: several compiled libraries found next to the package, remove "
            f"the stale ones or set {ENV_VAR}: {found}"
        )
    return found[0]


def load_library() -> str:
    """Load the operator library once and return its path."""
    global _LOADED_PATH
    if _LOADED_PATH is not None:
        return _LOADED_PATH
    path = find_library()
    if path in torch.ops.loaded_libraries:  # loaded by hand before importing gnnfuse
        _LOADED_PATH = path
        return path
    try:
        torch.ops.load_library(path)
    except OSError as err:  # dlopen failure: missing symbols, wrong torch, ...
        cause = err.__cause__ if err.__cause__ is not None else err  # torch wraps dlopen's error
        raise ImportError(
            f"gnnfuse: failed to load the operator library {path}: {cause}\n"
            f"(it must be built against the installed torch {torch.__version__})"
        ) from err
    if not hasattr(torch.ops.gnnfuse, "spmm"):
        raise ImportError(
            f"gnnfuse: loaded {path}, but it registered no torch.ops.gnnfuse.spmm"
        )
    _register_fakes()
    _register_checks_as_effects()
    _LOADED_PATH = path
    return path


# The ops whose fake kernel this module registered (a library loaded later adds its own).
_FAKES_REGISTERED: Set[str] = set()


def _register_fakes() -> None:
    """Fake (Meta) kernels: the symbolic and assembling passes of the ops with a computed output
    pattern (``symbolic S`` in the spec: ``<op>_symbolic``, ``<op>_assemble``) return as many
    columns (and values) as the product has entries, known only once the kernel has run (an
    unbacked size); the clustering op one id per node. Every other op has its Meta kernel in C++."""
    register_generated_fakes()

    if "gnnfuse::heavy_edge_matching" not in _FAKES_REGISTERED:
        _FAKES_REGISTERED.add("gnnfuse::heavy_edge_matching")

        @torch.library.register_fake("gnnfuse::heavy_edge_matching")
        def _(rowptr, col, edge_weight, order):
            return rowptr.new_empty(rowptr.size(0) - 1, dtype=torch.long)


def register_generated_fakes() -> List[str]:
    """Register the fake kernels of the pattern-building ops from the generator's description
    of them (``gnnfuse::_generated_fake_info.<op>() -> str``, one overload per spec with
    ``symbolic``, see ``csrc/codegen/emit_fake_info.cpp``), for the ops that have none yet.
    Runs when gnnfuse loads its library; call it again after ``torch.ops.load_library`` of
    another library of generated ops. Returns the ops registered."""
    prefix = "gnnfuse::_generated_fake_info."
    # (from the dispatcher: an op packet lists the overloads of when it was first looked up)
    overloads = sorted(n[len(prefix):] for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix))
    done = []
    for overload in overloads:
        for entry in json.loads(getattr(torch.ops.gnnfuse._generated_fake_info, overload)()):
            name = "gnnfuse::" + entry["op"]
            if name in _FAKES_REGISTERED:
                continue
            schema = getattr(torch.ops.gnnfuse, entry["op"]).default._schema
            torch.library.register_fake(name)(_pattern_fake(entry, schema))
            _FAKES_REGISTERED.add(name)
            done.append(name)
    return done


def _pattern_fake(entry: Dict[str, Any], schema: Any) -> Callable[..., Any]:
    """The fake kernel of one described op: row pointers of the rows' count plus one, columns
    (and values) of one unknown count, in the dtypes and devices of the arguments named."""
    names = [a.name for a in schema.arguments]
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    rows, index, values = entry["rows"], entry["index"], entry["values"]

    def fake(*args: Any, **kwargs: Any) -> Any:
        bound = dict(defaults)
        bound.update(zip(names, args))
        bound.update(kwargs)
        if rows is None:
            raise NotImplementedError(f"gnnfuse::{entry['op']}: the generator found no argument giving its row count")
        n = bound[rows["arg"]] + 1 if rows["from"] == "extent" else bound[rows["arg"]].size(0)
        nnz = torch.library.get_ctx().new_dynamic_size()
        ref = bound[index]
        out = (ref.new_empty(n), ref.new_empty(nnz))
        return out if values is None else out + (bound[values].new_empty(nnz),)

    fake.__name__ = fake.__qualname__ = entry["op"] + "_fake"
    return fake


def _register_checks_as_effects() -> None:
    """The ops that return nothing (``validate_edge_index``: they only raise on bad input) are
    effects to torch.compile and torch.export, as PyTorch's own ``aten::_linalg_check_errors``:
    without this AOTAutograd removes them as dead code and a compiled layer loses the check
    (a bipartite GATConv with a source index past the sources then returned NaN rows)."""
    try:
        from torch._higher_order_ops.effects import _EffectType, _register_effectful_op
    except ImportError:  # pragma: no cover (an older torch: no effect tokens)
        return
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("gnnfuse::"):
            continue
        op, _, overload = name[len("gnnfuse::"):].partition(".")
        if not torch._C._get_schema(name.split(".")[0], overload).returns:
            _register_effectful_op(getattr(torch.ops.gnnfuse, op).default if not overload else
                                   getattr(getattr(torch.ops.gnnfuse, op), overload), _EffectType.ORDERED)


def library_path() -> Optional[str]:
    """Path of the loaded library, or None before :func:`load_library`."""
    return _LOADED_PATH
