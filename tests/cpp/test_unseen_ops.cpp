// weighted_mean and pow_sum (tests/codegen/specs, never in ops/): Y = (A X) / rowsum(A), whose
// adjoints read row statistics, and Y = A pow(X, p) with a float-argument exponent. Called
// through the C++ API the generator wrote for them (generated_test_ops/unseen/include): values
// against a dense float64 reference, first and second derivatives through the generated C++
// autograd against the reference's, and the named errors of bad operands.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "expect_error.h"
#include "gnnfuse/ops.h"  // the test ops' C++ API (generated_test_ops/unseen/include)

namespace {

using gnnfuse::testing::expect_error;

at::Tensor longs(std::initializer_list<int64_t> v) { return at::tensor(std::vector<int64_t>(v), at::kLong); }

// A [4 x 3] with an empty row 2, a self-loop-like diagonal entry and a duplicate entry (3, 1).
struct Graph {
  at::Tensor rowptr = longs({0, 2, 3, 3, 6});
  at::Tensor col = longs({0, 2, 1, 1, 1, 2});
  at::Tensor values = at::tensor({0.5, 1.0, 2.0, 1.5, 0.25, 3.0}, at::kDouble);
  at::Tensor dense(const at::Tensor& v) const {
    const at::Tensor r = at::repeat_interleave(at::arange(4, at::kLong), rowptr.diff());
    return at::zeros({4, 3}, v.options()).index_put({r, col}, v, /*accumulate=*/true);
  }
};

at::Tensor weighted_mean_ref(const Graph& g, const at::Tensor& v, const at::Tensor& x) {
  const at::Tensor a = g.dense(v);
  const at::Tensor s = a.sum(1, /*keepdim=*/true);
  return at::mm(a, x) / at::where(s == 0, at::ones_like(s), s);
}

// First and second derivatives of sum((f(v, x) * w)^2) in x: the generated op against the reference.
template <typename Op, typename Ref>
void expect_same_derivatives(const Op& op, const Ref& ref, const at::Tensor& x0) {
  const at::Tensor w = at::arange(12, at::kDouble).reshape({4, 3}) / 5 - 1;
  std::vector<at::Tensor> got, want;
  for (int k = 0; k < 2; ++k) {
    const at::Tensor x = x0.clone().set_requires_grad(true);
    const at::Tensor y = k == 0 ? op(x) : ref(x);
    const at::Tensor g1 = torch::autograd::grad({(y * w).square().sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    const at::Tensor g2 = torch::autograd::grad({g1.square().sum()}, {x})[0];
    (k == 0 ? got : want) = std::vector<at::Tensor>{y.detach(), g1.detach(), g2};
  }
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_TRUE(at::allclose(got[k], want[k], 1e-10, 1e-12)) << "order " << k << ": " << got[k] << " vs " << want[k];
}

TEST(UnseenOps, WeightedMeanValuesAndTwoOrdersOfDerivatives) {
  const Graph g;
  const at::Tensor x = at::linspace(-1, 2, 9, at::kDouble).reshape({3, 3});
  const at::Tensor y = gnnfuse::weighted_mean(g.rowptr, g.col, g.values, x);
  EXPECT_TRUE(at::allclose(y, weighted_mean_ref(g, g.values, x), 1e-12, 1e-12));
  EXPECT_TRUE(at::equal(y[2], at::zeros({3}, at::kDouble)));  // the empty row: 0, not 0 / 0
  expect_same_derivatives([&](const at::Tensor& x_) { return gnnfuse::weighted_mean(g.rowptr, g.col, g.values, x_); },
                          [&](const at::Tensor& x_) { return weighted_mean_ref(g, g.values, x_); }, x);
}

TEST(UnseenOps, PowSumWithAFloatArgumentExponent) {
  const Graph g;
  const at::Tensor x = at::linspace(0.25, 2, 9, at::kDouble).reshape({3, 3});
  for (double p : {2.5, -1.5, 1.0, 0.0}) {
    SCOPED_TRACE(p);
    EXPECT_TRUE(at::allclose(gnnfuse::pow_sum(g.rowptr, g.col, g.values, x, p), at::mm(g.dense(g.values), at::pow(x, p)), 1e-12, 1e-12));
    if (p == 0.0) continue;  // the reference's derivative of pow(x, 0) is a constant zero: no second order to compare
    expect_same_derivatives([&](const at::Tensor& x_) { return gnnfuse::pow_sum(g.rowptr, g.col, g.values, x_, p); },
                            [&](const at::Tensor& x_) { return at::mm(g.dense(g.values), at::pow(x_, p)); }, x);
  }
}

TEST(UnseenOps, BadOperandsAreNamed) {
  const Graph g;
  const at::Tensor x = at::ones({3, 2}, at::kDouble);
  // x one row short of A's columns: the error names x's size and A's columns
  expect_error([&] { gnnfuse::weighted_mean(g.rowptr, g.col, g.values, at::ones({2, 2}, at::kDouble)); },
               {"gnnfuse::weighted_mean", "'col'", "x has 2 rows"});
  expect_error([&] { gnnfuse::pow_sum(g.rowptr, longs({0, 2, 3, 3, 6, 9}), g.values, x, 2.0); }, {"gnnfuse::pow_sum", "col"});
  expect_error([&] { gnnfuse::weighted_mean(g.rowptr, g.col, g.values.to(at::kFloat), x); }, {"gnnfuse::weighted_mean"});
  expect_error([&] { gnnfuse::pow_sum(longs({0, 3, 2, 3, 6}), g.col, g.values, x, 2.0); }, {"gnnfuse::pow_sum", "rowptr"});
}

}  // namespace
