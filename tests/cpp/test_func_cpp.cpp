// The generated autograd Nodes and autocast kernels from LibTorch alone: the Node's name and
// edges, the saved inputs' version check, retain_graph, and CPU autocast through the C++ API.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <torch/autograd.h>

#include "gnnfuse/gnnfuse.h"

namespace {

struct Csr {
  at::Tensor rowptr, col;
};

Csr ring(int64_t n) {
  at::Tensor src = at::arange(n, at::kLong);
  at::Tensor dst = (src + 1).remainder(n);
  auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(at::stack({src, dst}), n);
  (void)perm;
  return {rowptr, col};
}

// Enables CPU autocast in `dtype` for its lifetime (what torch.autocast("cpu") does).
struct CpuAutocast {
  explicit CpuAutocast(at::ScalarType dtype) : prev_enabled(at::autocast::is_autocast_enabled(at::kCPU)), prev_dtype(at::autocast::get_autocast_dtype(at::kCPU)) {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
  }
  ~CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, prev_enabled);
    at::autocast::set_autocast_dtype(at::kCPU, prev_dtype);
    at::autocast::clear_cache();
  }
  bool prev_enabled;
  at::ScalarType prev_dtype;
};

}  // namespace

TEST(FuncCpp, NodeNameEdgesAndGradients) {
  const Csr g = ring(7);
  at::Tensor w = at::rand({7}, at::kDouble).set_requires_grad(true);
  at::Tensor x = at::randn({7, 3}, at::kDouble).set_requires_grad(true);
  at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, w, x);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "gnnfuse::spmm_backward");
  EXPECT_EQ(y.grad_fn()->num_outputs(), 2u);  // edge_weight and x
  const auto grads = torch::autograd::grad({y.sum()}, {w, x}, {}, /*retain_graph=*/true);
  // ring: y[i] = w[e] x[i-1]: d/dx[j] = w of the edge out of j, d/dw[e] = sum_f x[src(e)]
  const auto again = torch::autograd::grad({y.sum()}, {w, x});
  EXPECT_TRUE(at::equal(grads[0], again[0]));
  EXPECT_TRUE(at::equal(grads[1], again[1]));
  EXPECT_TRUE(at::allclose(grads[0], x.detach().sum(1).index_select(0, g.col)));
}

TEST(FuncCpp, InputModifiedInPlaceAfterForwardIsAnError) {
  const Csr g = ring(5);
  at::Tensor x = at::randn({5, 2}, at::kDouble).set_requires_grad(true);
  at::Tensor h = x * 2.0;
  at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, std::nullopt, h);
  {
    at::NoGradGuard no_grad;
    h.add_(1.0);
  }
  try {
    torch::autograd::grad({y.sum()}, {x});
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos) << e.what();
  }
}

TEST(FuncCpp, CpuAutocastCastsFloatingInputsOnly) {
  const Csr g = ring(6);
  at::Tensor w = at::rand({6});
  at::Tensor x = at::randn({6, 4}).to(at::kBFloat16);
  EXPECT_THROW(gnnfuse::spmm(g.rowptr, g.col, w, x), c10::Error);  // mixed dtypes outside autocast
  {
    CpuAutocast autocast(at::kBFloat16);
    EXPECT_EQ(gnnfuse::spmm(g.rowptr, g.col, w, x).scalar_type(), at::kBFloat16);         // lower precision
    EXPECT_EQ(gnnfuse::edge_softmax(g.rowptr, g.col, w.to(at::kBFloat16)).scalar_type(), at::kFloat);  // fp32
    EXPECT_EQ(gnnfuse::sddmm_add(g.rowptr, g.col, at::randn({6, 2}), at::randn({6, 2}).to(at::kBFloat16)).scalar_type(), at::kFloat);  // promote
    EXPECT_EQ(gnnfuse::spmm(g.rowptr, g.col, w.to(at::kDouble), x.to(at::kDouble)).scalar_type(), at::kDouble);  // never float64
  }
  EXPECT_EQ(gnnfuse::spmm(g.rowptr, g.col, w, x.to(at::kFloat)).scalar_type(), at::kFloat);
}
