"""Which kernels gnnfuse's CUDA ops run: the generated ones (the default) or cuSPARSE.

With ``"cusparse"``, every op the generator finds to be one cuSPARSE SpMM or SDDMM (``spmm`` with
``reduce="sum"``, ``sddmm`` with ``op="dot"``, ``scaled_spmm`` and the gradients derived from
them, first and second order) calls cuSPARSE's generic API instead of its generated kernel; the
other ops keep their generated kernels. The setting is process-wide (like
``torch.backends.cuda.preferred_blas_library``) and read at every call, forward and backward
alike, so it holds under ``torch.compile`` and ``torch.export`` too (set it before the calls).
``GNNFUSE_CUDA_BACKEND=cusparse`` sets it at start-up. The ``backend=`` argument of
:func:`gnnfuse.spmm` and :func:`gnnfuse.sddmm` chooses for one call's forward, on the calling
thread only.

Where cuSPARSE would not do, a call keeps the generated kernel: a transposed product (the
gradient of ``x``) under ``torch.use_deterministic_algorithms(True)`` (cuSPARSE repeats bitwise
only with ``CUSPARSE_SPMM_CSR_ALG3``, which the non-transposed products then use) or in
float16/bfloat16 (cuSPARSE's mixed precision has no transposed form); 16-bit entry values that
are a product of several factors (edge weights times a scale: rounded before cuSPARSE sees them),
16-bit weighted SDDMM; types cuSPARSE does not support (bfloat16 SDDMM).

>>> import gnnfuse
>>> with gnnfuse.backends.cuda_backend("cusparse"):
...     y = gnnfuse.spmm(g, x)          # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional, TypeVar

import torch

BACKENDS = ("generated", "cusparse")
T = TypeVar("T")


def _has_cuda_ops() -> bool:
    return hasattr(torch.ops.gnnfuse, "_cuda_backend")


def _read() -> str:
    return str(torch.ops.gnnfuse._cuda_backend()) if _has_cuda_ops() else "generated"


# The library's process-wide setting as last read or set here: what compiled code compares a
# backend= argument with (torch.compile does not call into the library to read it). Set it through
# set_cuda_backend, not the private op, so that this stays right.
try:
    _current = _read()
except RuntimeError:  # a bad GNNFUSE_CUDA_BACKEND: raised again by the first CUDA op
    _current = "generated"


def get_cuda_backend() -> str:
    """The process-wide backend of the CUDA ops: ``"generated"`` or ``"cusparse"``."""
    global _current
    if torch.compiler.is_compiling():
        return _current
    _current = _read()
    return _current


def set_cuda_backend(name: str) -> None:
    """Selects the kernels of the CUDA ops for the whole process (see the module doc).

    Raises ``ValueError`` for a name other than ``"generated"`` or ``"cusparse"``, and
    ``RuntimeError`` where cuSPARSE is not available (a build without CUDA kernels or without
    cuSPARSE's header; a machine whose cuSPARSE library cannot be opened).
    """
    global _current
    if name not in BACKENDS:
        raise ValueError(f"gnnfuse.set_cuda_backend: backend must be one of {BACKENDS}, got {name!r}")
    if torch.compiler.is_compiling():
        raise RuntimeError("gnnfuse.set_cuda_backend: call it outside the compiled region (the setting is process-wide)")
    if not _has_cuda_ops():
        if name != "generated":
            raise RuntimeError("gnnfuse.set_cuda_backend: this build of gnnfuse has no CUDA kernels, so no cusparse backend")
        _current = "generated"
        return
    torch.ops.gnnfuse._cuda_set_backend(name)
    _current = name


@contextlib.contextmanager
def cuda_backend(name: str) -> Iterator[None]:
    """``set_cuda_backend(name)`` for the ``with`` block (process-wide, forward and backward
    alike), the previous backend restored after it. A backward called after the block runs under
    the backend current then.
    """
    previous = get_cuda_backend()
    set_cuda_backend(name)
    try:
        yield
    finally:
        set_cuda_backend(previous)


def call_with(fn: str, backend: Optional[str], call: Callable[[], T]) -> T:
    """``call()`` under the functional ops' ``backend=`` argument: this thread's choice for the
    call (the process-wide one for None). Under torch.compile it must be the process-wide one."""
    if backend is None:
        return call()
    if backend not in BACKENDS:
        raise ValueError(f"gnnfuse.{fn}: backend must be one of {BACKENDS} or None, got {backend!r}")
    if torch.compiler.is_compiling():
        if backend != _current:
            raise RuntimeError(
                f"gnnfuse.{fn}: backend={backend!r} differs from the process-wide CUDA backend {_current!r}, "
                f"which a compiled graph cannot change: call gnnfuse.backends.set_cuda_backend({backend!r}) "
                f"before compiling")
        return call()
    if not _has_cuda_ops():
        if backend != "generated":
            raise RuntimeError(f"gnnfuse.{fn}: backend={backend!r}: this build of gnnfuse has no CUDA kernels")
        return call()
    previous = str(torch.ops.gnnfuse._cuda_set_thread_backend(backend))
    try:
        return call()
    finally:
        torch.ops.gnnfuse._cuda_set_thread_backend(previous)


# ---------------------------------------------------------------- Tensor Cores
TENSOR_CORE_MODES = ("auto", "on", "off", "rows")


def get_cuda_tensor_cores() -> str:
    """The Tensor-Core SpMM's mode: ``"auto"`` (the default), ``"on"``, ``"off"`` or ``"rows"``."""
    if not hasattr(torch.ops.gnnfuse, "_cuda_tensor_cores"):
        return "off"
    return str(torch.ops.gnnfuse._cuda_tensor_cores())


def set_cuda_tensor_cores(mode: str) -> str:
    """Selects where the CUDA SpMMs (``spmm`` with ``reduce="sum"``, ``scaled_spmm``, the gradients
    of their features, which walk the transposed graph, and those of ``sddmm``'s inputs) run on
    Tensor Cores (``mma.sync``, fp32 accumulation; csrc/cuda/tc_spmm.h), for the whole process, and
    returns the previous mode:

    - ``"auto"``: float16 and bfloat16 features (float32 as tf32 where
      ``torch.backends.cuda.matmul.allow_tf32`` is set) with at least 32 columns, on graphs whose
      row windows of 16 nodes share neighbours (each row of ``x`` a window gathers used by at least
      1.5 of its edges on average); elsewhere the CUDA-core kernels, which gather per edge;
    - ``"on"``: wherever the Tensor-Core kernel can run (float32 as tf32 even where PyTorch does not
      allow tf32; never float64);
    - ``"off"``: never;
    - ``"rows"``: seed 004's kernel instead (TCA-SpMM: each node's row of the graph as
      ``mma.m16n8k8`` plus a trace, rows in buckets by degree, warps per row in proportion; no
      view of row windows, so no reuse needed) wherever it can run, float16 and bfloat16 only
      (float32 runs the CUDA-core kernels). ``"auto"`` never takes it: at most 1/8 of each mma is
      useful work, and no GPU has yet shown it winning (``bench/gpu``).

    ``GNNFUSE_CUDA_TENSOR_CORES`` sets it at start-up. Read at every call, forward and backward.
    Both paths agree within the dtype's rounding; an inf or NaN in ``x`` lands in the same output
    places on both. Each graph's condensed view (about 9 bytes per edge and direction) is built at
    its first call and cached; a graph converted anew at every call (the layers' ``edge_index``)
    is remembered by contents from its second call (at most 8 such graphs, each with a copy of its
    CSR, about 8 bytes per edge, and its views; ``clear_cuda_tensor_core_views`` frees them).
    """
    if mode not in TENSOR_CORE_MODES:
        raise ValueError(f"gnnfuse.set_cuda_tensor_cores: mode must be one of {TENSOR_CORE_MODES}, got {mode!r}")
    if torch.compiler.is_compiling():
        raise RuntimeError("gnnfuse.set_cuda_tensor_cores: call it outside the compiled region (the setting is process-wide)")
    if not hasattr(torch.ops.gnnfuse, "_cuda_set_tensor_cores"):
        if mode in ("on", "rows"):
            raise RuntimeError("gnnfuse.set_cuda_tensor_cores: this build of gnnfuse has no CUDA kernels")
        return "off"
    return str(torch.ops.gnnfuse._cuda_set_tensor_cores(mode))


def clear_cuda_tensor_core_views() -> None:
    """Frees the Tensor-Core SpMM's cached condensed views and the graphs it remembers by contents
    (not the views a captured CUDA graph reads); later calls build them again."""
    if torch.compiler.is_compiling():
        raise RuntimeError("gnnfuse.clear_cuda_tensor_core_views: call it outside the compiled region")
    if hasattr(torch.ops.gnnfuse, "_cuda_clear_tensor_core_views"):
        torch.ops.gnnfuse._cuda_clear_tensor_core_views()


@contextlib.contextmanager
def cuda_tensor_cores(mode: str) -> Iterator[None]:
    """``set_cuda_tensor_cores(mode)`` for the ``with`` block, the previous mode restored after it."""
    previous = set_cuda_tensor_cores(mode)
    try:
        yield
    finally:
        if previous in TENSOR_CORE_MODES and hasattr(torch.ops.gnnfuse, "_cuda_set_tensor_cores"):
            torch.ops.gnnfuse._cuda_set_tensor_cores(previous)
