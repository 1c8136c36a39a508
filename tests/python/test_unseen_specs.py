"""Specs never in ops/ become working, differentiable ops by adding only the spec (issue 24):
tests/codegen/specs/weighted_mean.spec and pow_sum.spec, compiled into
libgnnfuse_test_ops_unseen.so beside libgnnfuse.so. Each test runs in a process of its own (the
test ops stay out of this one).

- weighted_mean, Y = (A X) / rowsum(A): its adjoints read row statistics (ops of their own,
  weighted_mean_stat<k>); with the default grad_order 2 they are differentiated too, so the
  double backward runs through the statistics (it used to stop with the order error);
- pow_sum, Y = A pow(X, p) with p a float argument: pow's derivative in x for an argument
  exponent (dpow, d2pow), backward and double backward, against torch.pow's autograd also at
  x = 0 and p in {0, 1, 2};
- the error for a dense operand one row short of the csr operand's columns names both."""

from __future__ import annotations

import textwrap

import pytest

from _test_ops import run_with_test_ops

_PRELUDE = textwrap.dedent(
    """
    import sys
    import torch
    import gnnfuse
    torch.ops.load_library(sys.argv[1])
    ops = torch.ops.gnnfuse

    def graph(n_rows, n_cols, density, seed, dtype=torch.float64):
        # a random csr pattern with positive values, every third row empty
        gen = torch.Generator().manual_seed(seed)
        m = torch.rand(n_rows, n_cols, generator=gen) < density
        m[::3] = False
        v = m * (torch.rand(n_rows, n_cols, generator=gen, dtype=torch.float64) + 0.5)
        s = v.to_sparse_csr()
        return s.crow_indices().clone(), s.col_indices().clone(), s.values().to(dtype), gen

    def dense(rowptr, col, values, n_cols):
        # differentiable twice (index_put), unlike a sparse tensor's to_dense
        rows = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
        return torch.zeros(rowptr.numel() - 1, n_cols, dtype=values.dtype).index_put((rows, col), values, accumulate=True)

    def weighted_mean_ref(rowptr, col, values, x):
        a = dense(rowptr, col, values, x.size(0))
        s = a.sum(1, keepdim=True)
        return (a @ x) / torch.where(s == 0, torch.ones_like(s), s)  # 0 on a row without entries

    def pow_sum_ref(rowptr, col, values, x, p):
        a = dense(rowptr, col, torch.ones(col.numel(), dtype=x.dtype) if values is None else values, x.size(0))
        return a @ torch.pow(x, p)

    def second_order(fn, inputs, seed=7):
        # grad of a function of the gradient (a Hessian-vector product): first and second order
        xs = [t.detach().clone().requires_grad_() for t in inputs]
        out = fn(*xs)
        cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out.dtype)
        g1 = torch.autograd.grad((out * cot).square().sum(), xs, create_graph=True)
        g2 = torch.autograd.grad(sum((g.float() if g.dtype == torch.bfloat16 else g).square().sum() for g in g1), xs)
        return out, g1, g2
    """
)

_BODIES = {
    "weighted_mean": """
        for seed in range(3):
            rowptr, col, values, gen = graph(9, 7, 0.45, seed)
            x = torch.randn(7, 3, generator=gen, dtype=torch.float64)
            y = ops.weighted_mean(rowptr, col, values, x)
            torch.testing.assert_close(y, weighted_mean_ref(rowptr, col, values, x), rtol=1e-12, atol=1e-12)
            assert (y[::3] == 0).all()
            # the CSC view passed as the backward's cache: the same values and gradients
            csc = ops.csr_transpose(rowptr, col, 7)
            fn = lambda v, x_: ops.weighted_mean(rowptr, col, v, x_)
            fn_csc = lambda v, x_: ops.weighted_mean(rowptr, col, v, x_, *csc)
            for f in (fn, fn_csc):
                inputs = [values.clone().requires_grad_(), x.clone().requires_grad_()]
                assert torch.autograd.gradcheck(f, inputs)
                assert torch.autograd.gradgradcheck(f, inputs)  # through the row statistics' adjoints
            # second order against the reference's autograd
            ref = lambda v, x_: weighted_mean_ref(rowptr, col, v, x_)
            _, g1, g2 = second_order(fn, [values, x])
            _, w1, w2 = second_order(ref, [values, x])
            for a, b in zip(g1 + g2, w1 + w2):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        # the statistics are ops of their own, differentiable now (grad_order 1 below the op's 2)
        names = {str(n) for n in torch._C._dispatch_get_all_op_names() if "weighted_mean" in str(n)}
        for op in ("weighted_mean_stat0", "weighted_mean_stat1", "weighted_mean_grad_x_grad_stat0",
                   "weighted_mean_stat1_grad_values", "weighted_mean_grad_x_grad_values"):
            assert "gnnfuse::" + op in names, (op, sorted(names))
        # third order: the clear error of the highest order generated
        rowptr, col, values, gen = graph(6, 5, 0.5, 3)
        x = torch.randn(5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(ops.weighted_mean(rowptr, col, values, x).square().sum(), x, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), x, create_graph=True)
        try:
            gg.sum().backward()
        except RuntimeError as e:
            assert "of the highest order generated (the grad_order line of weighted_mean.spec;" in str(e), e
        else:
            raise AssertionError("a third derivative was computed")
    """,
    "weighted_mean_low_precision": """
        # bfloat16: the row statistics are float32 (acc) tensors, and so are their gradients in
        # the double backward; the results agree with float64 on the same rounded inputs
        rowptr, col, values, gen = graph(12, 10, 0.4, 5)
        x = torch.randn(10, 4, generator=gen, dtype=torch.float64)
        vb, xb = values.bfloat16(), x.bfloat16()
        fn = lambda v, x_: ops.weighted_mean(rowptr, col, v, x_)
        out, g1, g2 = second_order(fn, [vb, xb])
        assert out.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in g1 + g2)
        ref = lambda v, x_: weighted_mean_ref(rowptr, col, v, x_)
        want, w1, w2 = second_order(ref, [vb.double(), xb.double()])
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
        for a, b in zip(g1 + g2, w1 + w2):
            scale = float(b.abs().max()) + 1e-3
            assert float((a.double() - b).abs().max()) <= 5e-2 * scale, (a, b)
        r = ops.weighted_mean_stat0(rowptr, col, vb)
        assert r.dtype == torch.float32, r.dtype
    """,
    "pow_sum": """
        rowptr, col, values, gen = graph(8, 6, 0.5, 11)
        x = torch.rand(6, 3, generator=gen, dtype=torch.float64) + 0.25  # positive: any real p
        for p in (2.5, 3.0, -1.5, 1.0, 0.0, 0.5):
            for v in (values, None):
                y = ops.pow_sum(rowptr, col, v, x, p)
                torch.testing.assert_close(y, pow_sum_ref(rowptr, col, v, x, p), rtol=1e-12, atol=1e-12)
            f = lambda v_, x_: ops.pow_sum(rowptr, col, v_, x_, p)
            inputs = [values.clone().requires_grad_(), x.clone().requires_grad_()]
            assert torch.autograd.gradcheck(f, inputs), p
            assert torch.autograd.gradgradcheck(f, inputs), p
            fx = lambda x_: ops.pow_sum(rowptr, col, None, x_, p)
            assert torch.autograd.gradgradcheck(fx, [x.clone().requires_grad_()]), p
        # at x = 0 (and negative x for integral p) as torch.pow's autograd: no 0 * inf
        x0 = torch.tensor([[0.0, 1.5, -2.0], [0.0, 0.0, 0.75]], dtype=torch.float64)
        r2, c2 = torch.tensor([0, 2, 2, 4]), torch.tensor([0, 1, 1, 0])
        w2 = torch.tensor([0.5, 2.0, 1.25, -1.0], dtype=torch.float64)
        for p in (0.0, 1.0, 2.0, 3.0):
            got = second_order(lambda v_, x_: ops.pow_sum(r2, c2, v_, x_, p), [w2, x0])
            want = second_order(lambda v_, x_: pow_sum_ref(r2, c2, v_, x_, p), [w2, x0])
            for a, b in zip((got[0],) + got[1] + got[2], (want[0],) + want[1] + want[2]):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=lambda m: f"p = {p}: {m}")
        # float32 and TorchScript
        y32 = ops.pow_sum(rowptr, col, values.float(), x.float(), 2.5)
        torch.testing.assert_close(y32.double(), pow_sum_ref(rowptr, col, values, x, 2.5), rtol=1e-5, atol=1e-5)

        @torch.jit.script
        def scripted(rowptr: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor, p: float) -> torch.Tensor:
            return torch.ops.gnnfuse.pow_sum(rowptr, col, values, x, p)

        torch.testing.assert_close(scripted(rowptr, col, values, x, 1.5), ops.pow_sum(rowptr, col, values, x, 1.5), rtol=0, atol=0)
    """,
    "short_dense_operand": """
        # x one row short of A's columns: the error names x's rows and A's largest column
        import re
        rowptr, col = torch.tensor([0, 2, 3, 5]), torch.tensor([0, 9, 4, 2, 9])
        values = torch.rand(5, dtype=torch.float64)
        for op, args in (("weighted_mean", (rowptr, col, values, torch.rand(9, 2, dtype=torch.float64))),
                         ("pow_sum", (rowptr, col, values, torch.rand(9, 2, dtype=torch.float64), 2.0))):
            try:
                getattr(ops, op)(*args)
            except RuntimeError as e:
                want = (rf"gnnfuse::{op}: argument 'col' must hold column indices in \\[0, 9\\), the extent of index j, x\\.size\\(0\\): "
                        r"x has 9 rows but the column indices in col reach 9 \\(10 columns\\) \\(got col\\[1\\] = 9\\)")
                assert re.search(want, str(e)), str(e)
            else:
                raise AssertionError(op + " accepted a column past x's rows")
        # a negative column is the csr operand's fault alone
        try:
            ops.weighted_mean(rowptr, torch.tensor([0, -1, 4, 2, 8]), values, torch.rand(9, 2, dtype=torch.float64))
        except RuntimeError as e:
            assert "(got col[1] = -1)" in str(e) and "rows but" not in str(e), str(e)
        else:
            raise AssertionError("accepted a negative column")
    """,
    "deploy": """
        # the registered ops under torch.library.opcheck (schemas, fake kernels, autograd
        # registration) and torch.compile(fullgraph=True), values and gradients against eager
        rowptr, col, values, gen = graph(9, 7, 0.45, 11)
        x = torch.rand(7, 3, generator=gen, dtype=torch.float64) + 0.25  # pow of a positive base
        for op, args in ((ops.weighted_mean, (rowptr, col, values, x)),
                         (ops.pow_sum, (rowptr, col, values, x, 2.5)),
                         (ops.pow_sum, (rowptr, col, None, x, -1.5))):
            grads = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
            torch.library.opcheck(op, tuple(grads))
            eager = op(*grads)
            (ge,) = torch.autograd.grad(eager.square().sum(), grads[3])
            compiled = torch.compile(lambda *a: op(*a), fullgraph=True, backend="aot_eager")
            out = compiled(*grads)
            (gc,) = torch.autograd.grad(out.square().sum(), grads[3])
            torch.testing.assert_close(out, eager, rtol=0, atol=0)
            torch.testing.assert_close(gc, ge, rtol=1e-12, atol=1e-12)
    """,
}


@pytest.mark.parametrize("part", sorted(_BODIES))
def test_unseen_spec(part):
    run = run_with_test_ops("gnnfuse_test_ops_unseen", _PRELUDE + textwrap.dedent(_BODIES[part]) + "\nprint('ok')\n")
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
