// scaled_product (tests/codegen/specs/scaled_product.spec, never in ops/): C = A diag(d) B on the
// pattern S that scaled_product_symbolic computes, a `symbolic` op reading a dense operand. Called
// through the C++ API the generator wrote for it (the test-op library's gnnfuse/ops.h, which this
// test includes instead of the library's): the values against a dense reference, the one-pass
// scaled_product_assemble against symbolic + numeric, the generated backward (C++ autograd) and
// the named errors of a bad d.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "expect_error.h"
#include "gnnfuse/ops.h"  // the test ops' C++ API (generated_test_ops/scaled_product/include)

namespace {

using gnnfuse::testing::expect_error;

at::Tensor ints(std::initializer_list<int64_t> v, at::ScalarType dtype) { return at::tensor(std::vector<int64_t>(v), at::kLong).to(dtype); }

// The dense [rows x cols] matrix of a CSR.
at::Tensor dense(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& vals, int64_t rows, int64_t cols) {
  at::Tensor m = at::zeros({rows, cols}, vals.scalar_type());
  const at::Tensor r = at::repeat_interleave(at::arange(rows, at::kLong), rowptr.diff().to(at::kLong));
  m.index_put_({r, col.to(at::kLong)}, vals, /*accumulate=*/true);
  return m;
}

class ScaledProduct : public ::testing::TestWithParam<std::tuple<at::ScalarType, at::ScalarType>> {
 protected:
  at::ScalarType itype() const { return std::get<0>(GetParam()); }
  at::ScalarType dtype() const { return std::get<1>(GetParam()); }
  // A [4 x 3] (row 2 empty), d [3], B [3 x 5] (row 1 empty): C = A diag(d) B [4 x 5].
  void SetUp() override {
    arowptr = ints({0, 2, 3, 3, 6}, itype());
    acol = ints({0, 2, 1, 0, 1, 2}, itype());
    avals = at::tensor({0.5, -1.0, 2.0, 1.5, 0.25, 3.0}, at::kDouble).to(dtype());
    browptr = ints({0, 2, 2, 5}, itype());
    bcol = ints({1, 4, 0, 2, 4}, itype());
    bvals = at::tensor({1.0, 2.0, -0.5, 4.0, 0.75}, at::kDouble).to(dtype());
    d = at::tensor({2.0, -3.0, 0.5}, at::kDouble).to(dtype());
  }
  at::Tensor reference() const {
    return at::mm(at::mm(dense(arowptr, acol, avals.to(at::kDouble), 4, 3), at::diag(d.to(at::kDouble))),
                  dense(browptr, bcol, bvals.to(at::kDouble), 3, n_cols));
  }
  at::Tensor arowptr, acol, avals, browptr, bcol, bvals, d;
  int64_t n_cols = 5;
};

INSTANTIATE_TEST_SUITE_P(Dtypes, ScaledProduct,
                         ::testing::Combine(::testing::Values(at::kInt, at::kLong), ::testing::Values(at::kFloat, at::kDouble)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == at::kInt ? "int32" : "int64") + "_" +
                                  (std::get<1>(info.param) == at::kFloat ? "float32" : "float64");
                         });

TEST_P(ScaledProduct, ValuesOnTheSymbolicPattern) {
  const auto [crowptr, ccol] = gnnfuse::scaled_product_symbolic(arowptr, acol, browptr, bcol, n_cols);
  EXPECT_EQ(crowptr.scalar_type(), itype());
  EXPECT_EQ(ccol.scalar_type(), itype());
  // The pattern is the structural product: rows 0 and 3 reach B's rows 0 and 2, row 1 only B's
  // empty row 1, row 2 nothing.
  EXPECT_TRUE(at::equal(crowptr.to(at::kLong), at::tensor(std::vector<int64_t>{0, 4, 4, 4, 8}, at::kLong)));
  const at::Tensor c = gnnfuse::scaled_product(d, arowptr, acol, avals, browptr, bcol, bvals, crowptr, ccol, n_cols);
  EXPECT_EQ(c.scalar_type(), dtype());
  const double tol = dtype() == at::kFloat ? 1e-5 : 1e-12;
  EXPECT_TRUE(at::allclose(dense(crowptr, ccol, c.to(at::kDouble), 4, n_cols), reference(), tol, tol));
  // One pass: the same pattern and, bit for bit, the same values; a second call hits the
  // pattern cache and runs the numeric op.
  for (int call = 0; call < 2; ++call) {
    const auto [r, col, v] = gnnfuse::scaled_product_assemble(d, arowptr, acol, avals, browptr, bcol, bvals, n_cols);
    EXPECT_TRUE(at::equal(r, crowptr));
    EXPECT_TRUE(at::equal(col, ccol));
    EXPECT_TRUE(at::equal(v, c)) << "call " << call;
  }
}

TEST_P(ScaledProduct, GeneratedBackward) {
  const auto [crowptr, ccol] = gnnfuse::scaled_product_symbolic(arowptr, acol, browptr, bcol, n_cols);
  const at::Tensor dg = d.clone().set_requires_grad(true);
  const at::Tensor ag = avals.clone().set_requires_grad(true);
  const at::Tensor bg = bvals.clone().set_requires_grad(true);
  const at::Tensor c = gnnfuse::scaled_product(dg, arowptr, acol, ag, browptr, bcol, bg, crowptr, ccol, n_cols);
  const at::Tensor w = at::arange(c.numel(), at::kDouble).to(dtype()) / 7 - 0.5;  // a cotangent
  const std::vector<at::Tensor> grads = torch::autograd::grad({(c * w).sum()}, {dg, ag, bg});
  // The same through the dense reference, on the pattern.
  const at::Tensor d64 = d.to(at::kDouble).set_requires_grad(true);
  const at::Tensor a64 = avals.to(at::kDouble).set_requires_grad(true);
  const at::Tensor b64 = bvals.to(at::kDouble).set_requires_grad(true);
  const at::Tensor ref = at::mm(at::mm(dense(arowptr, acol, a64, 4, 3), at::diag(d64)), dense(browptr, bcol, b64, 3, n_cols));
  const at::Tensor wd = dense(crowptr, ccol, w.to(at::kDouble), 4, n_cols);
  const std::vector<at::Tensor> want = torch::autograd::grad({(ref * wd).sum()}, {d64, a64, b64});
  const double tol = dtype() == at::kFloat ? 1e-5 : 1e-12;
  for (size_t k = 0; k < grads.size(); ++k) {
    EXPECT_EQ(grads[k].scalar_type(), dtype()) << k;
    EXPECT_TRUE(at::allclose(grads[k].to(at::kDouble), want[k], tol, tol)) << k << ": " << grads[k] << " vs " << want[k];
  }
  // The assembling form records the same backward.
  const at::Tensor dg2 = d.clone().set_requires_grad(true);
  const at::Tensor v2 = std::get<2>(gnnfuse::scaled_product_assemble(dg2, arowptr, acol, avals, browptr, bcol, bvals, n_cols));
  const std::vector<at::Tensor> g2 = torch::autograd::grad({(v2 * w).sum()}, {dg2});
  EXPECT_TRUE(at::allclose(g2[0], grads[0], tol, tol));
}

TEST_P(ScaledProduct, BadDIsNamed) {
  // d one longer than B's rows: B's row count disagrees with d's extent of k.
  expect_error([&] { gnnfuse::scaled_product_assemble(at::zeros({4}, dtype()), arowptr, acol, avals, browptr, bcol, bvals, n_cols); },
               {"gnnfuse::scaled_product_assemble", "browptr", "d.size(0)"});
  // d one shorter: A's column 2 is past d's extent of k; the error names d's size and A's columns.
  const auto [crowptr, ccol] = gnnfuse::scaled_product_symbolic(arowptr, acol, browptr, bcol, n_cols);
  expect_error([&] { gnnfuse::scaled_product(at::zeros({2}, dtype()), arowptr, acol, avals, browptr, bcol, bvals, crowptr, ccol, n_cols); },
               {"gnnfuse::scaled_product", "d.size(0)"});
  // not floating, another dtype than the values, 2-D
  expect_error([&] { gnnfuse::scaled_product_assemble(at::zeros({3}, at::kLong), arowptr, acol, avals, browptr, bcol, bvals, n_cols); },
               {"gnnfuse::scaled_product_assemble: argument 'd'"});
  const at::ScalarType other = dtype() == at::kFloat ? at::kDouble : at::kFloat;
  expect_error([&] { gnnfuse::scaled_product_assemble(at::zeros({3}, other), arowptr, acol, avals, browptr, bcol, bvals, n_cols); },
               {"gnnfuse::scaled_product_assemble"});
  expect_error([&] { gnnfuse::scaled_product_assemble(at::zeros({3, 2}, dtype()), arowptr, acol, avals, browptr, bcol, bvals, n_cols); },
               {"gnnfuse::scaled_product_assemble: argument 'd'"});
}

}  // namespace
