"""A computed output pattern with a dense operand: tests/codegen/specs/scaled_product.spec,
C = A diag(d) B on the pattern S that scaled_product_symbolic computes (compiled into
libgnnfuse_test_ops_scaled.so beside libgnnfuse.so, never in ops/). scaled_product_assemble
must pass d to its kernel and check it like the op's adapter does (dtype, device, shape: d gives
the extent of k, which B's rows and A's columns are checked against). Each test runs in a
process of its own: the test op stays out of this one."""

from __future__ import annotations

import textwrap

import pytest

from _test_ops import run_with_test_ops

_PRELUDE = textwrap.dedent(
    """
    import sys
    import torch, torch._dynamo as dynamo
    import gnnfuse
    torch.ops.load_library(sys.argv[1])
    new = gnnfuse._library.register_generated_fakes()
    assert sorted(new) == ["gnnfuse::scaled_product_assemble", "gnnfuse::scaled_product_symbolic"], new
    ops = torch.ops.gnnfuse

    def graph(n_rows, n_cols, density, gen, dtype, itype):
        # a random csr pattern with values, every third row empty
        m = (torch.rand(n_rows, n_cols, generator=gen) < density)
        m[::3] = False
        v = m * (torch.rand(n_rows, n_cols, generator=gen, dtype=torch.float64) + 0.5)
        s = v.to_sparse_csr()
        return (m, v, s.crow_indices().to(itype, copy=True), s.col_indices().to(itype, copy=True),
                s.values().to(dtype, copy=True))

    def case(seed, dtype=torch.float64, itype=torch.int64, n_i=9, n_k=7, n_cols=8):
        gen = torch.Generator().manual_seed(seed)
        ma, a, ar, ac, av = graph(n_i, n_k, 0.4, gen, dtype, itype)
        mb, b, br, bc, bv = graph(n_k, n_cols, 0.4, gen, dtype, itype)
        d = (torch.rand(n_k, generator=gen, dtype=torch.float64) - 0.5).to(dtype)
        ref = a @ torch.diag(d.double()) @ b
        pattern = (ma.double() @ mb.double()) > 0
        return (d, ar, ac, av, br, bc, bv, n_cols), ref, pattern

    def to_dense(r, c, v, shape):
        return torch.sparse_csr_tensor(r.long(), c.long(), v.double(), shape).to_dense()
    """
)

_BODIES = {
    "values": """
        for seed in range(4):
            for dtype in (torch.float32, torch.float64):
                for itype in (torch.int32, torch.int64):
                    args, ref, pattern = case(seed, dtype, itype)
                    d, ar, ac, av, br, bc, bv, n_cols = args
                    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
                    r, c, v = ops.scaled_product_assemble(*args)
                    assert r.dtype == c.dtype == itype and v.dtype == dtype, (r.dtype, c.dtype, v.dtype)
                    assert r.numel() == ar.numel() and (r[1:] - r[:-1] == 0).any()  # empty rows
                    s, t = ops.scaled_product_symbolic(ar, ac, br, bc, n_cols)
                    assert torch.equal(s, r) and torch.equal(c, t)
                    shape = (ar.numel() - 1, n_cols)
                    assert torch.equal(to_dense(r, c, torch.ones_like(v), shape) > 0, pattern)
                    torch.testing.assert_close(to_dense(r, c, v, shape), ref, **tol)
                    # the two-pass op on the symbolic pattern; a second assemble (the cached pattern)
                    v2 = ops.scaled_product(d, ar, ac, av, br, bc, bv, s, t, n_cols)
                    torch.testing.assert_close(to_dense(s, t, v2, shape), ref, **tol)
                    r3, c3, v3 = ops.scaled_product_assemble(d, ar, ac, av, br, bc, bv, n_cols)
                    assert torch.equal(r3, r) and torch.equal(c3, c) and torch.equal(v3, v2)
                    # a non-contiguous d
                    dd = torch.stack([d, -d], 1)[:, 0]
                    assert not dd.is_contiguous()
                    torch.testing.assert_close(ops.scaled_product_assemble(dd, ar, ac, av, br, bc, bv, n_cols)[2], v, **tol)
        # vmap over d (the patterns unbatched)
        args, ref, pattern = case(5)
        d, ar, ac, av, br, bc, bv, n_cols = args
        db = torch.stack([d, 2 * d, -d])
        out = torch.vmap(lambda d_: ops.scaled_product_assemble(d_, ar, ac, av, br, bc, bv, n_cols)[2])(db)
        for b_ in range(3):
            torch.testing.assert_close(out[b_], ops.scaled_product_assemble(db[b_], ar, ac, av, br, bc, bv, n_cols)[2])
    """,
    "grad": """
        for seed in range(3):
            args, ref, pattern = case(seed, n_i=6, n_k=5, n_cols=6)
            d, ar, ac, av, br, bc, bv, n_cols = args
            def assembled(d_, av_, bv_):
                return ops.scaled_product_assemble(d_, ar, ac, av_, br, bc, bv_, n_cols)[2]
            s, t = ops.scaled_product_symbolic(ar, ac, br, bc, n_cols)
            def two_pass(d_, av_, bv_):
                return ops.scaled_product(d_, ar, ac, av_, br, bc, bv_, s, t, n_cols)
            for f in (assembled, two_pass):
                inputs = [x.clone().requires_grad_() for x in (d, av, bv)]
                assert torch.autograd.gradcheck(f, inputs)
                # d alone
                assert torch.autograd.gradcheck(lambda d_: f(d_, av, bv), [d.clone().requires_grad_()])
            # the gradient of d against the dense reference's
            dg = d.clone().requires_grad_()
            assembled(dg, av, bv).sum().backward()
            a = to_dense(ar, ac, av, (ar.numel() - 1, d.numel()))
            b = to_dense(br, bc, bv, (d.numel(), n_cols))
            torch.testing.assert_close(dg.grad, (a.sum(0) * b.sum(1)))
    """,
    "errors": """
        import re
        args, ref, pattern = case(0)
        d, ar, ac, av, br, bc, bv, n_cols = args
        def raises(bad_d, *words, av_=av, bv_=bv):
            for f in (lambda: ops.scaled_product_assemble(bad_d, ar, ac, av_, br, bc, bv_, n_cols),
                      lambda: ops.scaled_product_assemble(bad_d.requires_grad_() if bad_d.is_floating_point() else bad_d,
                                                          ar, ac, av_, br, bc, bv_, n_cols)):
                try:
                    f()
                except RuntimeError as e:
                    msg = str(e)
                    assert "scaled_product_assemble" in msg, msg
                    for w in words:
                        assert w in msg, (w, msg)
                else:
                    raise AssertionError("accepted " + str(words))
        raises(torch.zeros(d.numel() + 1, dtype=d.dtype), "browptr", "d.size(0)")   # B's rows against d
        raises(torch.zeros(d.numel() - 1, dtype=d.dtype), "d.size(0)")               # B's rows / A's columns
        raises(torch.zeros(d.numel(), 2, dtype=d.dtype), "'d'")                      # 2-D
        raises(torch.zeros(d.numel(), dtype=torch.int64), "'d'")                     # not floating
        raises(torch.zeros(d.numel(), dtype=torch.float16), "'d'")                   # not in the spec's dtypes
        raises(d.float(), "avals")                                                   # float32 d, float64 values
        print("errors ok")
    """,
    "compile": """
        args, ref, pattern = case(1)
        d, ar, ac, av, br, bc, bv, n_cols = args
        r, c, v = ops.scaled_product_assemble(*args)
        torch.library.opcheck(ops.scaled_product_assemble.default, (d.clone().requires_grad_(), ar, ac, av.clone().requires_grad_(), br, bc, bv, n_cols),
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
        with dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            @torch.compile(fullgraph=True, backend="aot_eager")
            def full(d_, av_):
                r_, c_, v_ = ops.scaled_product_assemble(d_, ar, ac, av_, br, bc, bv, n_cols)
                s_, t_ = ops.scaled_product_symbolic(ar, ac, br, bc, n_cols)
                return r_, c_, v_ * 2, s_, t_
            r2, c2, v2, s2, t2 = full(d, av)
            dynamo.reset()
        assert torch.equal(r2, r) and torch.equal(c2, c) and torch.equal(s2, r) and torch.equal(t2, c)
        torch.testing.assert_close(v2, 2 * v)
    """,
    "torchscript": """
        import io

        class Product(torch.nn.Module):
            def forward(self, d: torch.Tensor, ar: torch.Tensor, ac: torch.Tensor, av: torch.Tensor, br: torch.Tensor,
                        bc: torch.Tensor, bv: torch.Tensor, n_cols: int):
                r, c, v = torch.ops.gnnfuse.scaled_product_assemble(d, ar, ac, av, br, bc, bv, n_cols)
                s, t = torch.ops.gnnfuse.scaled_product_symbolic(ar, ac, br, bc, n_cols)
                return r, c, v, torch.ops.gnnfuse.scaled_product(d, ar, ac, av, br, bc, bv, s, t, n_cols)

        scripted = torch.jit.script(Product())
        buf = io.BytesIO()
        torch.jit.save(scripted, buf)
        buf.seek(0)
        loaded = torch.jit.load(buf)
        for seed, dtype, itype in ((0, torch.float64, torch.int64), (1, torch.float32, torch.int32)):
            args, ref, pattern = case(seed, dtype, itype)
            r0, c0, v0 = ops.scaled_product_assemble(*args)
            for m in (scripted, loaded):
                r, c, v, v2 = m(*args)
                assert torch.equal(r, r0) and torch.equal(c, c0) and torch.equal(v, v0) and torch.equal(v2, v0)
        # the generated backward through the scripted module
        args, ref, pattern = case(2)
        d, ar, ac, av, br, bc, bv, n_cols = args
        grads = []
        for f in (lambda *a: scripted(*a)[2], lambda *a: scripted(*a)[3], lambda *a: ops.scaled_product_assemble(*a)[2]):
            dg, ag = d.clone().requires_grad_(), av.clone().requires_grad_()
            f(dg, ar, ac, ag, br, bc, bv, n_cols).square().sum().backward()
            grads.append((dg.grad, ag.grad))
        for g in grads[1:]:
            assert torch.equal(g[0], grads[0][0]) and torch.equal(g[1], grads[0][1])
        # errors raised inside the script name the op and the argument
        for bad, words in ((d[:-1], ("gnnfuse::scaled_product_assemble", "d.size(0)")), (d.float(), ("gnnfuse::scaled_product_assemble", "avals"))):
            try:
                scripted(bad, ar, ac, av, br, bc, bv, n_cols)
            except RuntimeError as e:
                assert all(w in str(e) for w in words), (words, str(e))
            else:
                raise AssertionError("accepted " + str(words))
    """,
}


@pytest.mark.parametrize("part", sorted(_BODIES))
def test_scaled_product(part):
    """values: assemble and symbolic + scaled_product against a float64 dense reference (random
    graphs with empty rows, both dtypes and index dtypes, a non-contiguous d, vmap over d);
    grad: gradcheck of the values and of d; errors: bad shapes, dtypes and devices of d, named;
    compile: opcheck and torch.compile(fullgraph=True) through the generated fake kernels;
    torchscript: the three ops in a scripted module (values, gradients, save/load, errors)."""
    run = run_with_test_ops("gnnfuse_test_ops_scaled", _PRELUDE + textwrap.dedent(_BODIES[part]) + "\nprint('ok')\n")
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
