// Forward and backward of the spec ops through LibTorch alone (the generated C++ API and the
// autograd Functions registered at the Autograd key), against central finite differences.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include "gnnfuse/gnnfuse.h"

namespace {

struct Graph {
  at::Tensor rowptr, col;
  int64_t rows, cols, nnz;
};

// Random rectangular CSR (rows targets, cols sources) with empty rows and a duplicate edge.
Graph random_graph(int64_t rows, int64_t cols, int64_t nnz, at::ScalarType itype, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor dst = at::randint(std::max<int64_t>(1, rows * 3 / 4), {nnz}, gen, at::kLong);
  at::Tensor src = at::randint(cols, {nnz}, gen, at::kLong);
  src.slice(0, 0, 1).copy_(src.slice(0, 1, 2));
  dst.slice(0, 0, 1).copy_(dst.slice(0, 1, 2));
  const int64_t n = std::max(rows, cols);
  const auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(at::stack({src, dst}).to(itype), n);
  return {rowptr.slice(0, 0, rows + 1).contiguous(), col, rows, cols, nnz};
}

at::Tensor rnd(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::kDouble);
}

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// d/d inputs of sum(fn(inputs) * weights), by autograd, against central differences at up to
// `samples` entries of every input.
void check_gradients(const Fn& fn, std::vector<at::Tensor> inputs, const std::string& what, int samples = 12) {
  for (auto& t : inputs) t = t.detach().clone().set_requires_grad(true);
  const at::Tensor y = fn(inputs);
  const at::Tensor weights = rnd(y.sizes().vec(), 99);
  const at::Tensor loss = (y * weights).sum();
  const std::vector<at::Tensor> grads = torch::autograd::grad({loss}, inputs);
  at::NoGradGuard no_grad;
  auto eval = [&](const std::vector<at::Tensor>& in) { return (fn(in) * weights).sum().item<double>(); };
  const double h = 1e-6;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t n = inputs[k].numel();
    ASSERT_EQ(grads[k].sizes(), inputs[k].sizes()) << what << " input " << k;
    for (int s = 0; s < samples && s < n; ++s) {
      const int64_t at = (n <= samples) ? s : (s * 7919) % n;
      std::vector<at::Tensor> plus, minus;
      for (auto& t : inputs) {
        plus.push_back(t.detach().clone());
        minus.push_back(t.detach().clone());
      }
      plus[k].view(-1)[at] += h;
      minus[k].view(-1)[at] -= h;
      const double fd = (eval(plus) - eval(minus)) / (2 * h);
      const double ad = grads[k].reshape(-1)[at].item<double>();
      EXPECT_NEAR(ad, fd, 1e-6 * std::max(1.0, std::fabs(fd))) << what << ": input " << k << ", entry " << at;
    }
  }
}

class AutogradTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(AutogradTest, SpmmWeighted) {
  const Graph g = random_graph(23, 31, 90, GetParam(), 1);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::spmm(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.nnz}, 2), rnd({g.cols, 5}, 3)}, "spmm");
}

TEST_P(AutogradTest, SpmmUnweightedWithCachedCsc) {
  const Graph g = random_graph(23, 31, 90, GetParam(), 4);
  const auto [colptr, row, perm] = gnnfuse::csr_transpose(g.rowptr, g.col, g.cols);
  check_gradients(
      [&](const std::vector<at::Tensor>& in) { return gnnfuse::spmm(g.rowptr, g.col, std::nullopt, in[0], colptr, row, perm); },
      {rnd({g.cols, 3}, 5)}, "spmm cached csc");
}

TEST_P(AutogradTest, Sddmm) {
  const Graph g = random_graph(17, 12, 60, GetParam(), 6);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::sddmm(g.rowptr, g.col, in[0], in[1], in[2]); },
                  {rnd({g.nnz}, 7), rnd({g.rows, 4}, 8), rnd({g.cols, 4}, 9)}, "sddmm");
}

TEST_P(AutogradTest, SddmmSpmm) {
  const Graph g = random_graph(19, 26, 80, GetParam(), 10);
  check_gradients(
      [&](const std::vector<at::Tensor>& in) { return gnnfuse::sddmm_spmm(g.rowptr, g.col, in[0], in[1], in[2], in[3]); },
      {rnd({g.nnz}, 11), rnd({g.rows, 3}, 12), rnd({g.cols, 3}, 13), rnd({g.cols, 6}, 14)}, "sddmm_spmm");
}

TEST_P(AutogradTest, ScaledSpmmSpecOnlyOp) {
  const Graph g = random_graph(15, 15, 50, GetParam(), 15);
  check_gradients(
      [&](const std::vector<at::Tensor>& in) { return gnnfuse::scaled_spmm(g.rowptr, g.col, in[0], in[1], in[2]); },
      {rnd({g.nnz}, 16), rnd({g.nnz}, 17), rnd({g.cols, 4}, 18)}, "scaled_spmm");
}

// Double backward: the gradient of spmm with respect to x, itself differentiated (by the
// generated second-order ops) with respect to w and x, against finite differences of it.
TEST_P(AutogradTest, SpmmMeanMaxMin) {
  // Weighted: random weights make exact ties (where max/min has no derivative) improbable.
  const Graph g = random_graph(23, 31, 90, GetParam(), 11);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::spmm_mean(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.nnz}, 12), rnd({g.cols, 5}, 13)}, "spmm_mean");
  check_gradients([&](const std::vector<at::Tensor>& in) { return std::get<0>(gnnfuse::spmm_max(g.rowptr, g.col, in[0], in[1])); },
                  {rnd({g.nnz}, 14), rnd({g.cols, 5}, 15)}, "spmm_max");
  check_gradients([&](const std::vector<at::Tensor>& in) { return std::get<0>(gnnfuse::spmm_min(g.rowptr, g.col, in[0], in[1])); },
                  {rnd({g.nnz}, 16), rnd({g.cols, 5}, 17)}, "spmm_min");
  // Positions: -1 exactly on the rows without edges, else an entry of the row.
  const auto [y, arg] = gnnfuse::spmm_max(g.rowptr, g.col, std::nullopt, rnd({g.cols, 3}, 18));
  const at::Tensor rp = g.rowptr.to(at::kLong);
  for (int64_t i = 0; i < g.rows; ++i)
    for (int64_t f = 0; f < 3; ++f) {
      const int64_t b = rp[i].item<int64_t>(), e = rp[i + 1].item<int64_t>(), p = arg[i][f].item<int64_t>();
      if (b == e) {
        EXPECT_EQ(p, -1);
        EXPECT_EQ(y[i][f].item<double>(), 0.0);
      } else {
        EXPECT_TRUE(p >= b && p < e) << i << "," << f;
      }
    }
}

TEST_P(AutogradTest, EdgeSoftmax) {
  const Graph g = random_graph(23, 31, 90, GetParam(), 19);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::edge_softmax(g.rowptr, g.col, in[0]); },
                  {rnd({g.nnz}, 20)}, "edge_softmax");
  const at::Tensor p = gnnfuse::edge_softmax(g.rowptr, g.col, rnd({g.nnz}, 21) * 1e4);
  EXPECT_TRUE(at::isfinite(p).all().item<bool>());
}

TEST_P(AutogradTest, MultiHeadSoftmaxAndAggregation) {
  const Graph g = random_graph(23, 31, 90, GetParam(), 22);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::edge_softmax_heads(g.rowptr, g.col, in[0]); },
                  {rnd({g.nnz, 3}, 23)}, "edge_softmax_heads");
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::spmm_heads(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.nnz, 3}, 24), rnd({g.cols, 3, 4}, 25)}, "spmm_heads");
  // Each head equals the single-head op on that head's column.
  const at::Tensor s = rnd({g.nnz, 3}, 26);
  const at::Tensor p = gnnfuse::edge_softmax_heads(g.rowptr, g.col, s);
  for (int64_t h = 0; h < 3; ++h)
    EXPECT_TRUE(at::allclose(p.select(1, h), gnnfuse::edge_softmax(g.rowptr, g.col, s.select(1, h).contiguous()), 1e-12, 1e-14));
}

TEST_P(AutogradTest, SddmmAddMul) {
  const Graph g = random_graph(23, 31, 90, GetParam(), 27);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::sddmm_add(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.rows, 2}, 28), rnd({g.cols, 2}, 29)}, "sddmm_add");
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::sddmm_mul(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.rows, 2}, 30), rnd({g.cols, 2}, 31)}, "sddmm_mul");
  EXPECT_THROW(gnnfuse::sddmm_add(g.rowptr, g.col, rnd({g.rows, 2}, 1), rnd({g.cols, 3}, 2)), c10::Error);
}

TEST_P(AutogradTest, FusedAttention) {
  // gat and graph_attention: their backward reads row statistics computed by generated ops
  // (gat_stat*, graph_attention_stat*) before the adjoints that walk by columns.
  const Graph g = random_graph(23, 31, 90, GetParam(), 32);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::gat(g.rowptr, g.col, in[0], in[1], in[2], 0.2); },
                  {rnd({g.rows, 2}, 33), rnd({g.cols, 2}, 34), rnd({g.cols, 2, 3}, 35)}, "gat");
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::graph_attention(g.rowptr, g.col, in[0], in[1], in[2]); },
                  {rnd({g.rows, 2, 4}, 36), rnd({g.cols, 2, 4}, 37), rnd({g.cols, 2, 3}, 38)}, "graph_attention");
  // gat == edge_softmax_heads(leaky_relu(sddmm_add)) aggregated by spmm_heads
  const at::Tensor ad = rnd({g.rows, 2}, 39), as = rnd({g.cols, 2}, 40), x = rnd({g.cols, 2, 3}, 41);
  const at::Tensor p = gnnfuse::edge_softmax_heads(g.rowptr, g.col, at::leaky_relu(gnnfuse::sddmm_add(g.rowptr, g.col, ad, as), 0.2));
  EXPECT_TRUE(at::allclose(gnnfuse::gat(g.rowptr, g.col, ad, as, x, 0.2), gnnfuse::spmm_heads(g.rowptr, g.col, p, x), 1e-12, 1e-12));
  EXPECT_THROW(gnnfuse::gat(g.rowptr, g.col, ad, as, rnd({g.cols, 3, 3}, 1), 0.2), c10::Error);
}

TEST_P(AutogradTest, FusedAttentionWithEdgeLogits) {
  // gat_edge: gat with a per-edge, per-head logit inside the leaky ReLU; its derived backward
  // gives the [nnz, H] gradient of the edge logits beside the three of gat.
  const Graph g = random_graph(23, 31, 90, GetParam(), 49);
  check_gradients(
      [&](const std::vector<at::Tensor>& in) { return gnnfuse::gat_edge(g.rowptr, g.col, in[0], in[1], in[2], in[3], 0.2); },
      {rnd({g.rows, 2}, 50), rnd({g.cols, 2}, 51), rnd({g.nnz, 2}, 52), rnd({g.cols, 2, 3}, 53)}, "gat_edge");
  // == edge_softmax_heads(leaky_relu(sddmm_add + a_edge)) aggregated by spmm_heads
  const at::Tensor ad = rnd({g.rows, 2}, 54), as = rnd({g.cols, 2}, 55), ae = rnd({g.nnz, 2}, 56), x = rnd({g.cols, 2, 3}, 57);
  const at::Tensor s = at::leaky_relu(gnnfuse::sddmm_add(g.rowptr, g.col, ad, as) + ae, 0.2);
  const at::Tensor p = gnnfuse::edge_softmax_heads(g.rowptr, g.col, s);
  EXPECT_TRUE(at::allclose(gnnfuse::gat_edge(g.rowptr, g.col, ad, as, ae, x, 0.2), gnnfuse::spmm_heads(g.rowptr, g.col, p, x), 1e-12, 1e-12));
  // a_edge must hold one row per stored entry and the heads of a_dst
  EXPECT_THROW(gnnfuse::gat_edge(g.rowptr, g.col, ad, as, rnd({g.nnz + 1, 2}, 1), x, 0.2), c10::Error);
  EXPECT_THROW(gnnfuse::gat_edge(g.rowptr, g.col, ad, as, rnd({g.nnz, 3}, 1), x, 0.2), c10::Error);
}

TEST_P(AutogradTest, FusedAttentionWithEdgeBiasAndValues) {
  // graph_attention_edge (a [nnz, H] score bias) and graph_attention_edge_values (the same
  // softmax over per-edge values [nnz, F]): TransformerConv's edge features.
  const Graph g = random_graph(23, 31, 90, GetParam(), 58);
  check_gradients(
      [&](const std::vector<at::Tensor>& in) { return gnnfuse::graph_attention_edge(g.rowptr, g.col, in[0], in[1], in[2], in[3]); },
      {rnd({g.rows, 2, 4}, 59), rnd({g.cols, 2, 4}, 60), rnd({g.nnz, 2}, 61), rnd({g.cols, 2, 3}, 62)}, "graph_attention_edge");
  check_gradients(
      [&](const std::vector<at::Tensor>& in) { return gnnfuse::graph_attention_edge_values(g.rowptr, g.col, in[0], in[1], in[2], in[3]); },
      {rnd({g.rows, 2, 4}, 63), rnd({g.cols, 2, 4}, 64), rnd({g.nnz, 2}, 65), rnd({g.nnz, 3}, 66)}, "graph_attention_edge_values");
  // == edge_softmax_heads(sddmm_heads + bias) aggregated by spmm_heads; the values per edge: by hand
  const at::Tensor q = rnd({g.rows, 2, 4}, 67), k = rnd({g.cols, 2, 4}, 68), b = rnd({g.nnz, 2}, 69), v = rnd({g.cols, 2, 3}, 70);
  const at::Tensor p = gnnfuse::edge_softmax_heads(g.rowptr, g.col, gnnfuse::sddmm_heads(g.rowptr, g.col, q, k) + b);
  EXPECT_TRUE(at::allclose(gnnfuse::graph_attention_edge(g.rowptr, g.col, q, k, b, v), gnnfuse::spmm_heads(g.rowptr, g.col, p, v), 1e-12, 1e-12));
  const at::Tensor ev = rnd({g.nnz, 3}, 71);
  const at::Tensor rows = at::repeat_interleave(g.rowptr.diff().to(at::kLong));
  const at::Tensor want = at::zeros({g.rows, 2, 3}, ev.options()).index_add_(0, rows, p.unsqueeze(2) * ev.unsqueeze(1));
  EXPECT_TRUE(at::allclose(gnnfuse::graph_attention_edge_values(g.rowptr, g.col, q, k, b, ev), want, 1e-12, 1e-12));
  EXPECT_THROW(gnnfuse::graph_attention_edge(g.rowptr, g.col, q, k, rnd({g.nnz + 1, 2}, 1), v), c10::Error);
  EXPECT_THROW(gnnfuse::graph_attention_edge_values(g.rowptr, g.col, q, k, b, rnd({g.nnz - 1, 3}, 1)), c10::Error);
}

TEST_P(AutogradTest, EdgeFeatureHeads) {
  // TransformerConv's edge features: bias[e, h] = p[row e, h] . ea[e] and z[i, h] = sum over row
  // i's edges of w[e, h] ea[e], each every head in one pass over the edges; gradients derived.
  const Graph g = random_graph(23, 31, 90, GetParam(), 72);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::sddmm_edge_heads(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.rows, 2, 3}, 73), rnd({g.nnz, 3}, 74)}, "sddmm_edge_heads");
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::spmm_edge_heads(g.rowptr, g.col, in[0], in[1]); },
                  {rnd({g.nnz, 2}, 75), rnd({g.nnz, 3}, 76)}, "spmm_edge_heads");
  const at::Tensor p = rnd({g.rows, 2, 3}, 77), ea = rnd({g.nnz, 3}, 78), w = rnd({g.nnz, 2}, 79);
  const at::Tensor rows = at::repeat_interleave(g.rowptr.diff().to(at::kLong));
  EXPECT_TRUE(at::allclose(gnnfuse::sddmm_edge_heads(g.rowptr, g.col, p, ea), (p.index_select(0, rows) * ea.unsqueeze(1)).sum(-1), 1e-12, 1e-12));
  const at::Tensor want = at::zeros({g.rows, 2, 3}, ea.options()).index_add_(0, rows, w.unsqueeze(2) * ea.unsqueeze(1));
  EXPECT_TRUE(at::allclose(gnnfuse::spmm_edge_heads(g.rowptr, g.col, w, ea), want, 1e-12, 1e-12));
  EXPECT_THROW(gnnfuse::sddmm_edge_heads(g.rowptr, g.col, p, rnd({g.nnz + 1, 3}, 1)), c10::Error);
  EXPECT_THROW(gnnfuse::spmm_edge_heads(g.rowptr, g.col, rnd({g.nnz - 1, 2}, 1), ea), c10::Error);
}

TEST_P(AutogradTest, FusedGcn) {
  // gcn: (A X) W row by row; d/dweight sums the rows' contributions in per-thread copies.
  const Graph g = random_graph(23, 31, 90, GetParam(), 42);
  check_gradients([&](const std::vector<at::Tensor>& in) { return gnnfuse::gcn(g.rowptr, g.col, in[0], in[1], in[2]); },
                  {rnd({g.nnz}, 43), rnd({g.cols, 3}, 44), rnd({3, 5}, 45)}, "gcn");
  const at::Tensor w = rnd({g.nnz}, 46), x = rnd({g.cols, 4}, 47), W = rnd({4, 2}, 48);
  EXPECT_TRUE(at::allclose(gnnfuse::gcn(g.rowptr, g.col, w, x, W), at::mm(gnnfuse::spmm(g.rowptr, g.col, w, x), W), 1e-12, 1e-12));
  EXPECT_THROW(gnnfuse::gcn(g.rowptr, g.col, w, x, rnd({3, 2}, 1)), c10::Error);
}

TEST_P(AutogradTest, FusedGcnRowBlocksMatchSplitProduct) {
  // 100 rows: three full 32-row blocks and a partial one; 37 -> 40 features reach the blocked
  // product's register tiles, its one-vector panel and its scalar tail, forward and backward.
  const Graph g = random_graph(100, 90, 700, GetParam(), 49);
  const at::Tensor w0 = rnd({g.nnz}, 50), x0 = rnd({g.cols, 37}, 51), W0 = rnd({37, 40}, 52), gy = rnd({g.rows, 40}, 53);
  auto run = [&](bool fused) {
    const at::Tensor w = w0.clone().requires_grad_(), x = x0.clone().requires_grad_(), W = W0.clone().requires_grad_();
    const at::Tensor y = fused ? gnnfuse::gcn(g.rowptr, g.col, w, x, W) : at::mm(gnnfuse::spmm(g.rowptr, g.col, w, x), W);
    std::vector<at::Tensor> out{y.detach()};
    for (const at::Tensor& d : torch::autograd::grad({y}, {w, x, W}, {gy})) out.push_back(d);
    return out;
  };
  const std::vector<at::Tensor> fused = run(true), split = run(false);
  for (size_t k = 0; k < fused.size(); ++k) EXPECT_TRUE(at::allclose(fused[k], split[k], 1e-11, 1e-11)) << "output/gradient " << k;

  // Each lowering the generator emitted (variants auto: (A X) W, and X W first), forced through
  // the dispatcher's control op: the same output and gradients; the choice is reported back.
  static const auto force = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::force_variant", "").typed<void(c10::string_view, int64_t)>();
  static const auto last = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::last_variant", "").typed<int64_t(c10::string_view)>();
  for (int64_t v : {0, 1}) {
    for (const char* op : {"gcn", "gcn_grad_x", "gcn_grad_edge_weight"}) force.call(op, v);
    const std::vector<at::Tensor> got = run(true);
    for (const char* op : {"gcn", "gcn_grad_x", "gcn_grad_edge_weight"}) EXPECT_EQ(last.call(op), v) << op;
    for (const char* op : {"gcn", "gcn_grad_x", "gcn_grad_edge_weight"}) force.call(op, -1);
    for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(at::allclose(got[k], split[k], 1e-11, 1e-11)) << "variant " << v << ", output/gradient " << k;
  }
  EXPECT_THROW(force.call("gcn", 7), c10::Error);
}

TEST_P(AutogradTest, SpmmDoubleBackward) {
  const Graph g = random_graph(21, 21, 70, GetParam(), 19);
  const at::Tensor gy = rnd({g.rows, 4}, 20);
  check_gradients(
      [&](const std::vector<at::Tensor>& in) {
        at::Tensor w = in[0], x = in[1];
        const bool build_graph = torch::autograd::GradMode::is_enabled();
        at::AutoGradMode on(true);
        if (!x.requires_grad()) x = x.detach().set_requires_grad(true);
        const at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, w, x);
        return torch::autograd::grad({(y * gy).sum()}, {x}, {}, true, build_graph)[0] * x;
      },
      {rnd({g.nnz}, 21), rnd({g.cols, 4}, 22)}, "spmm double backward");
}

INSTANTIATE_TEST_SUITE_P(IndexTypes, AutogradTest, ::testing::Values(at::kInt, at::kLong),
                         [](const auto& info) { return info.param == at::kInt ? std::string("int32") : std::string("int64"); });

}  // namespace
