"""The cuSPARSE backend of the CUDA ops (gnnfuse.backends, csrc/torch/cuda/cusparse_backend.h).

The selection API on any build; the routing (which ops hand their calls to cuSPARSE, forward and
backward, and which keep their generated kernels) through the emulated library, whose cuSPARSE is
a host implementation of the documented semantics (csrc/torch/cuda/cusparse_host.cpp). The op
battery under the backend runs in test_cuda_emulated.py (its "cusparse" runs).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import gnnfuse
from test_cuda_emulated import EMU, _HERE, _env

_ON_EMU = gnnfuse.library_path().endswith("libgnnfuse_cuda_emu.so")


def _graph():
    rowptr = torch.tensor([0, 2, 3, 3, 9])
    col = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 5])
    return rowptr, col


def test_backend_names_are_checked():
    with pytest.raises(ValueError, match="backend must be one of"):
        gnnfuse.backends.set_cuda_backend("cuSPARSE")
    rowptr, col = _graph()
    g = gnnfuse.Graph(rowptr, col, 4, 6)
    with pytest.raises(ValueError, match=r"gnnfuse\.spmm: backend must be one of"):
        gnnfuse.spmm(g, torch.randn(6, 3), backend="fast")
    with pytest.raises(ValueError, match=r"gnnfuse\.sddmm: backend must be one of"):
        gnnfuse.sddmm(g, torch.randn(4, 3), torch.randn(6, 3), backend="fast")


@pytest.mark.skipif(_ON_EMU or hasattr(torch.ops.gnnfuse, "_cuda_backend"), reason="a build with CUDA adapters")
def test_without_cuda_kernels_only_the_generated_backend():
    assert gnnfuse.backends.get_cuda_backend() == "generated"
    gnnfuse.backends.set_cuda_backend("generated")
    with pytest.raises(RuntimeError, match="no CUDA kernels"):
        gnnfuse.backends.set_cuda_backend("cusparse")
    rowptr, col = _graph()
    x = torch.randn(6, 3, dtype=torch.float64)
    g = gnnfuse.Graph(rowptr, col, 4, 6)
    torch.testing.assert_close(gnnfuse.spmm(g, x, backend="generated"), gnnfuse.spmm(g, x))


def test_backend_argument_under_torch_compile():
    """backend= equal to the process-wide choice traces (fullgraph); a different one cannot be
    switched inside a graph and says how to set it."""
    torch._dynamo.reset()
    rowptr, col = _graph()
    g = gnnfuse.Graph(rowptr, col, 4, 6)
    x = torch.randn(6, 3, dtype=torch.float64)
    same = torch.compile(lambda x: gnnfuse.spmm(g, x, backend="generated"), fullgraph=True)
    torch.testing.assert_close(same(x), gnnfuse.spmm(g, x))
    other = torch.compile(lambda x: gnnfuse.spmm(g, x, backend="cusparse"), fullgraph=True)
    with pytest.raises(Exception, match="set_cuda_backend"):
        other(x)
    torch._dynamo.reset()


_PROBE = r"""
import sys, torch, gnnfuse
torch.manual_seed(0)
from gnnfuse import backends
n, m, e = 30, 25, 160
row = torch.randint(0, n, (e,)); col = torch.randint(0, m, (e,))
order = torch.argsort(row * m + col); row, col = row[order], col[order]
rowptr = torch.zeros(n + 1, dtype=torch.int64); rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
g = gnnfuse.Graph(rowptr, col, n, m)
dense = torch.zeros(n, m, dtype=torch.float64)
w = torch.randn(e, dtype=torch.float64)
dense.index_put_((row, col), w, accumulate=True)
x = torch.randn(m, 6, dtype=torch.float64, requires_grad=True)
u = torch.randn(n, 4, dtype=torch.float64); v = torch.randn(m, 4, dtype=torch.float64)
def counts():
    return {l.rsplit(" ", 1)[0]: int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines()}
assert backends.get_cuda_backend() == "generated"
# the argument: this call's forward through cuSPARSE, the setting restored after it
y = gnnfuse.spmm(g, x, w, backend="cusparse")
assert backends.get_cuda_backend() == "generated"
torch.testing.assert_close(y, dense @ x.detach())
s = gnnfuse.sddmm(g, u, v, w, backend="cusparse")
torch.testing.assert_close(s, w * (u[row] * v[col]).sum(1))
c = counts()
assert c.get("spmm cusparse 0 0") == 1 and c.get("sddmm cusparse 0 0") == 1, c
# deterministic algorithms: the forward through CUSPARSE_SPMM_CSR_ALG3 (12), bitwise the same
torch.use_deterministic_algorithms(True)
a, b = (gnnfuse.spmm(g, x.detach(), w, backend="cusparse") for _ in range(2))
torch.use_deterministic_algorithms(False)
assert torch.equal(a, b) and counts().get("spmm cusparse 12 0") == 2, counts()
# its backward ran under the generated kernels (the setting when backward() was called)
y.sum().backward()
assert "spmm_grad_x cusparse 0 0" not in counts(), counts()
# the context: forward and backward through cuSPARSE
x.grad = None
with backends.cuda_backend("cusparse"):
    assert backends.get_cuda_backend() == "cusparse"
    gnnfuse.spmm(g, x, w).pow(2).sum().backward()
assert backends.get_cuda_backend() == "generated"
torch.testing.assert_close(x.grad, dense.t() @ (2 * (dense @ x.detach())))
assert counts().get("spmm_grad_x cusparse 0 0") == 1, counts()
# reduce="max" is not an SpMM: its generated kernels, whatever the backend
with backends.cuda_backend("cusparse"):
    gnnfuse.spmm(g, x.detach(), reduce="max")
assert not any(k.startswith("spmm_max cusparse") for k in counts()), counts()
print("OK")
"""


@pytest.mark.skipif(EMU is None or _ON_EMU, reason="needs libgnnfuse_cuda_emu.so, run from the ordinary library")
def test_backend_routing_through_the_emulated_library():
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=_HERE, env=_env({}), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.skipif(EMU is None or _ON_EMU, reason="needs libgnnfuse_cuda_emu.so, run from the ordinary library")
def test_bad_environment_value_names_the_variable():
    probe = "import torch, gnnfuse\nprint(torch.ops.gnnfuse._cuda_backend())"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=_HERE, env=_env({"GNNFUSE_CUDA_BACKEND": "cuSPARSE"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "GNNFUSE_CUDA_BACKEND='cuSPARSE'" in proc.stderr and "expected 'generated' or 'cusparse'" in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", probe], cwd=_HERE, env=_env({"GNNFUSE_CUDA_BACKEND": "cusparse"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "cusparse", proc.stderr[-2000:]


_THREADS = r"""
import threading, torch, gnnfuse
rowptr = torch.tensor([0, 2, 3, 3, 9]); col = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 5])
g = gnnfuse.Graph(rowptr, col, 4, 6)
x = torch.randn(6, 3, dtype=torch.float64)
want = gnnfuse.spmm(g, x)
def work(name):
    for _ in range(300):
        torch.testing.assert_close(gnnfuse.spmm(g, x, backend=name), want)
ts = [threading.Thread(target=work, args=(n,)) for n in ("cusparse", "generated", "cusparse")]
[t.start() for t in ts]; [t.join() for t in ts]
c = {l.rsplit(" ", 1)[0]: int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines()}
assert c.get("spmm cusparse 0 0") == 600, c
assert sum(v for k, v in c.items() if k.startswith("spmm ") and " cusparse " not in k) == 301, c
assert gnnfuse.backends.get_cuda_backend() == "generated"
print("OK")
"""


@pytest.mark.skipif(EMU is None or _ON_EMU, reason="needs libgnnfuse_cuda_emu.so, run from the ordinary library")
def test_backend_argument_is_per_thread():
    """backend= chooses for its own call on its own thread: concurrent calls asking for different
    backends each get theirs, and the process-wide setting is never touched."""
    proc = subprocess.run([sys.executable, "-c", _THREADS], cwd=_HERE, env=_env({}), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


_COMPILED = r"""
import torch, gnnfuse
rowptr = torch.tensor([0, 2, 3, 3, 9]); col = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 5])
g = gnnfuse.Graph(rowptr, col, 4, 6)
x = torch.randn(6, 3, dtype=torch.float64)
f = torch.compile(lambda x: gnnfuse.spmm(g, x, backend="cusparse"), fullgraph=True, backend="aot_eager")
torch.testing.assert_close(f(x), gnnfuse.spmm(g, x))
assert "spmm cusparse 0 0" in torch.ops.gnnfuse._cuda_launch_counts()
h = torch.compile(lambda x: gnnfuse.spmm(g, x, backend="generated"), fullgraph=True, backend="aot_eager")
try:
    h(x)
except Exception as e:
    assert "set_cuda_backend('generated')" in str(e), e
else:
    raise AssertionError("backend='generated' compiled under the process-wide cusparse")
print("OK")
"""


@pytest.mark.skipif(EMU is None or _ON_EMU, reason="needs libgnnfuse_cuda_emu.so, run from the ordinary library")
def test_compiled_backend_argument_follows_the_environment():
    """GNNFUSE_CUDA_BACKEND=cusparse at start-up: compiled code sees it without an eager read."""
    proc = subprocess.run([sys.executable, "-c", _COMPILED], cwd=_HERE, env=_env({"GNNFUSE_CUDA_BACKEND": "cusparse"}),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


_CAPTURED = r"""
import torch, gnnfuse
rowptr = torch.tensor([0, 2, 3, 3, 9]); col = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 5])
x = torch.randn(6, 3, dtype=torch.float64)
def cusparse_calls():
    return sum(int(l.rsplit(" ", 1)[1]) for l in torch.ops.gnnfuse._cuda_launch_counts().splitlines() if " cusparse " in l)
y0 = torch.ops.gnnfuse.spmm(rowptr, col, None, x)    # captured, no handle on this thread yet
assert cusparse_calls() == 0
torch.ops.gnnfuse._cuda_simulate_capture(False)
y1 = torch.ops.gnnfuse.spmm(rowptr, col, None, x)    # the handle is made
torch.ops.gnnfuse._cuda_simulate_capture(True)
y2 = torch.ops.gnnfuse.spmm(rowptr, col, None, x)    # captured, with a handle
assert cusparse_calls() == 2, torch.ops.gnnfuse._cuda_launch_counts()
torch.testing.assert_close(y0, y1); torch.testing.assert_close(y1, y2)
print("OK")
"""


@pytest.mark.skipif(EMU is None or _ON_EMU, reason="needs libgnnfuse_cuda_emu.so, run from the ordinary library")
def test_no_cusparse_handle_is_made_during_capture():
    """Making a cuSPARSE handle allocates, which a CUDA graph capture forbids: a thread's first
    call under capture keeps the generated kernels; once the handle exists, captured calls use it."""
    proc = subprocess.run([sys.executable, "-c", _CAPTURED], cwd=_HERE,
                          env=_env({"GNNFUSE_CUDA_BACKEND": "cusparse", "GNNFUSE_SIMULATE_CAPTURE": "1"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
