// edge_index_to_csr and csr_transpose through the C++ API (the dispatcher), against simple
// sort-based references, on random graphs with duplicates, self-loops and isolated nodes.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "expect_error.h"
#include "gnnfuse/graph.h"

namespace {

struct Csr {
  std::vector<int64_t> ptr, idx, perm;
};

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.const_data_ptr<int64_t>(), c.const_data_ptr<int64_t>() + c.numel());
}

at::Tensor to_tensor(const std::vector<int64_t>& v, at::ScalarType dtype) {
  return at::tensor(v, at::kLong).to(dtype);
}

// Reference CSR over targets: edges sorted by (target, source, input position).
Csr reference_csr(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t n) {
  std::vector<int64_t> order(src.size());
  for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::tie(dst[a], src[a], a) < std::tie(dst[b], src[b], b);
  });
  Csr r;
  r.ptr.assign(n + 1, 0);
  for (int64_t e : order) {
    ++r.ptr[dst[e] + 1];
    r.idx.push_back(src[e]);
  }
  for (int64_t i = 0; i < n; ++i) r.ptr[i + 1] += r.ptr[i];
  r.perm = order;
  return r;
}

// Reference CSC of a CSR: positions sorted by (column, row, position).
Csr reference_csc(const std::vector<int64_t>& rowptr, const std::vector<int64_t>& col, int64_t m) {
  std::vector<int64_t> row_of(col.size());
  for (size_t i = 0; i + 1 < rowptr.size(); ++i) {
    for (int64_t p = rowptr[i]; p < rowptr[i + 1]; ++p) row_of[p] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> src = row_of;  // a CSC is the CSR of the edges (col -> row)
  return reference_csr(src, col, m);
}

struct Graph {
  std::vector<int64_t> src, dst;
  int64_t n;
};

// E random edges over n nodes, with repeated edges and self-loops mixed in; nodes above
// n * 3 / 4 never get an edge (isolated), so trailing rows are empty too.
Graph random_graph(int64_t n, int64_t e, uint32_t seed) {
  std::mt19937_64 rng(seed);
  Graph g{{}, {}, n};
  if (n == 0) return g;
  const int64_t used = std::max<int64_t>(1, n * 3 / 4);
  std::uniform_int_distribution<int64_t> node(0, used - 1);
  for (int64_t k = 0; k < e; ++k) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind == 0 && k > 0) {  // a duplicate of an earlier edge
      const auto j = static_cast<size_t>(rng() % static_cast<uint64_t>(k));
      g.src.push_back(g.src[j]);
      g.dst.push_back(g.dst[j]);
    } else if (kind == 1) {  // a self-loop
      const int64_t v = node(rng);
      g.src.push_back(v);
      g.dst.push_back(v);
    } else {
      g.src.push_back(node(rng));
      g.dst.push_back(node(rng));
    }
  }
  return g;
}

at::Tensor edge_index_of(const Graph& g, at::ScalarType dtype) {
  std::vector<int64_t> flat = g.src;
  flat.insert(flat.end(), g.dst.begin(), g.dst.end());
  return to_tensor(flat, dtype).view({2, static_cast<int64_t>(g.src.size())});
}

using gnnfuse::testing::error_of;
using gnnfuse::testing::expect_error;

class GraphOps : public ::testing::TestWithParam<at::ScalarType> {};

INSTANTIATE_TEST_SUITE_P(IndexDtypes, GraphOps, ::testing::Values(at::kInt, at::kLong),
                         [](const auto& info) { return info.param == at::kInt ? "int32" : "int64"; });

TEST_P(GraphOps, EdgeIndexToCsrMatchesReference) {
  const at::ScalarType dtype = GetParam();
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{0, 0},   {1, 0},     {1, 5},      {7, 30},
                                                          {100, 0}, {100, 400}, {1000, 50}, {10000, 200000}};
  uint32_t seed = 1;
  for (const auto& [n, e] : sizes) {
    SCOPED_TRACE("n=" + std::to_string(n) + " e=" + std::to_string(e));
    const Graph g = random_graph(n, e, seed++);
    const auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(edge_index_of(g, dtype), n);
    EXPECT_EQ(rowptr.scalar_type(), dtype);
    EXPECT_EQ(col.scalar_type(), dtype);
    EXPECT_EQ(perm.scalar_type(), at::kLong);
    const Csr ref = reference_csr(g.src, g.dst, n);
    EXPECT_EQ(to_vector(rowptr), ref.ptr);
    EXPECT_EQ(to_vector(col), ref.idx);
    EXPECT_EQ(to_vector(perm), ref.perm);
  }
}

TEST_P(GraphOps, EdgeIndexToCsrSameResultSerialAndParallel) {
  const Graph g = random_graph(5000, 300000, 42);
  const at::Tensor ei = edge_index_of(g, GetParam());
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto serial = gnnfuse::edge_index_to_csr(ei, g.n);
  at::set_num_threads(std::max(threads, 2));
  const auto parallel = gnnfuse::edge_index_to_csr(ei, g.n);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(std::get<0>(serial), std::get<0>(parallel)));
  EXPECT_TRUE(at::equal(std::get<1>(serial), std::get<1>(parallel)));
  EXPECT_TRUE(at::equal(std::get<2>(serial), std::get<2>(parallel)));
}

TEST_P(GraphOps, EdgeIndexToCsrAcceptsNonContiguousInput) {
  const Graph g = random_graph(50, 300, 7);
  // [E, 2] storage viewed as [2, E]: a transposed, non-contiguous edge_index.
  const at::Tensor ei = edge_index_of(g, GetParam()).t().contiguous().t();
  ASSERT_FALSE(ei.is_contiguous());
  const auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(ei, g.n);
  const Csr ref = reference_csr(g.src, g.dst, g.n);
  EXPECT_EQ(to_vector(rowptr), ref.ptr);
  EXPECT_EQ(to_vector(col), ref.idx);
  EXPECT_EQ(to_vector(perm), ref.perm);
}

TEST_P(GraphOps, CsrTransposeMatchesReference) {
  const at::ScalarType dtype = GetParam();
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{0, 0}, {1, 3}, {7, 30}, {100, 400}, {10000, 200000}};
  uint32_t seed = 100;
  for (const auto& [n, e] : sizes) {
    SCOPED_TRACE("n=" + std::to_string(n) + " e=" + std::to_string(e));
    const Graph g = random_graph(n, e, seed++);
    const Csr csr = reference_csr(g.src, g.dst, n);
    const auto [colptr, row, perm] = gnnfuse::csr_transpose(to_tensor(csr.ptr, dtype), to_tensor(csr.idx, dtype), n);
    EXPECT_EQ(colptr.scalar_type(), dtype);
    EXPECT_EQ(row.scalar_type(), dtype);
    EXPECT_EQ(perm.scalar_type(), at::kLong);
    const Csr ref = reference_csc(csr.ptr, csr.idx, n);
    EXPECT_EQ(to_vector(colptr), ref.ptr);
    EXPECT_EQ(to_vector(row), ref.idx);
    EXPECT_EQ(to_vector(perm), ref.perm);
  }
}

// The device implementation (ATen's stable sorts and searchsorted: what CUDA tensors run), called
// on CPU tensors through its private ops, against the same references.
TEST_P(GraphOps, DeviceImplementationMatchesReference) {
  const at::ScalarType dtype = GetParam();
  const auto to_csr = c10::Dispatcher::singleton()
                          .findSchemaOrThrow("gnnfuse::_edge_index_to_csr_device", "")
                          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, c10::SymInt)>();
  const auto transpose = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gnnfuse::_csr_transpose_device", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, c10::SymInt)>();
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{0, 0}, {1, 0}, {1, 5}, {7, 30}, {100, 400}, {10000, 200000}};
  uint32_t seed = 300;
  for (const auto& [n, e] : sizes) {
    SCOPED_TRACE("n=" + std::to_string(n) + " e=" + std::to_string(e));
    const Graph g = random_graph(n, e, seed++);
    const auto [rowptr, col, perm] = to_csr.call(edge_index_of(g, dtype), c10::SymInt(n));
    EXPECT_EQ(rowptr.scalar_type(), dtype);
    EXPECT_EQ(col.scalar_type(), dtype);
    const Csr ref = reference_csr(g.src, g.dst, n);
    EXPECT_EQ(to_vector(rowptr), ref.ptr);
    EXPECT_EQ(to_vector(col), ref.idx);
    EXPECT_EQ(to_vector(perm), ref.perm);
    const auto [colptr, row, cperm] = transpose.call(rowptr, col, c10::SymInt(n));
    const Csr cref = reference_csc(ref.ptr, ref.idx, n);
    EXPECT_EQ(to_vector(colptr), cref.ptr);
    EXPECT_EQ(to_vector(row), cref.idx);
    EXPECT_EQ(to_vector(cperm), cref.perm);
  }
  // Bad values: the CPU kernels' errors.
  const at::Tensor bad = to_tensor({0, 1, 1, 9}, dtype).view({2, 2});
  const std::string want = error_of([&] { gnnfuse::edge_index_to_csr(bad, 4); });
  EXPECT_NE(want.find("edge_index_to_csr"), std::string::npos);
  EXPECT_EQ(error_of([&] { to_csr.call(bad, c10::SymInt(4)); }), want);
  const at::Tensor rp = to_tensor({0, 2, 1}, dtype), cl = to_tensor({0, 1}, dtype);
  const std::string want_t = error_of([&] { gnnfuse::csr_transpose(rp, cl, 2); });
  EXPECT_NE(want_t.find("csr_transpose"), std::string::npos);
  EXPECT_EQ(error_of([&] { transpose.call(rp, cl, c10::SymInt(2)); }), want_t);
}

TEST_P(GraphOps, CsrTransposeRectangularAndTwiceIsIdentity) {
  const at::ScalarType dtype = GetParam();
  // 3 rows over 5 columns; columns 1 and 4 are empty.
  const at::Tensor rowptr = to_tensor({0, 2, 2, 5}, dtype);
  const at::Tensor col = to_tensor({0, 3, 0, 2, 3}, dtype);
  const auto [colptr, row, perm] = gnnfuse::csr_transpose(rowptr, col, 5);
  EXPECT_EQ(to_vector(colptr), (std::vector<int64_t>{0, 2, 2, 3, 5, 5}));
  EXPECT_EQ(to_vector(row), (std::vector<int64_t>{0, 2, 2, 0, 2}));
  EXPECT_EQ(to_vector(perm), (std::vector<int64_t>{0, 2, 3, 1, 4}));
  const auto [rowptr2, col2, perm2] = gnnfuse::csr_transpose(colptr, row, 3);
  EXPECT_TRUE(at::equal(rowptr2, rowptr));
  EXPECT_TRUE(at::equal(col2, col));
  // perm composes: CSR position p went to CSC position perm2[p], which holds perm[perm2[p]] = p.
  EXPECT_TRUE(at::equal(perm.index_select(0, perm2), at::arange(5, at::kLong)));
}

TEST_P(GraphOps, MetaKernelsGiveShapes) {
  const at::TensorOptions meta = at::TensorOptions().device(at::kMeta).dtype(GetParam());
  const auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(at::empty({2, 11}, meta), 6);
  EXPECT_EQ(rowptr.sizes(), at::IntArrayRef({7}));
  EXPECT_EQ(col.sizes(), at::IntArrayRef({11}));
  EXPECT_EQ(perm.sizes(), at::IntArrayRef({11}));
  EXPECT_TRUE(rowptr.is_meta());
  EXPECT_EQ(col.scalar_type(), GetParam());
  EXPECT_EQ(perm.scalar_type(), at::kLong);

  const auto [colptr, row, tperm] = gnnfuse::csr_transpose(at::empty({5}, meta), at::empty({9}, meta), 3);
  EXPECT_EQ(colptr.sizes(), at::IntArrayRef({4}));
  EXPECT_EQ(row.sizes(), at::IntArrayRef({9}));
  EXPECT_EQ(tperm.sizes(), at::IntArrayRef({9}));
  EXPECT_EQ(tperm.scalar_type(), at::kLong);
}

TEST_P(GraphOps, EdgeIndexToCsrRejectsBadInput) {
  const at::ScalarType dtype = GetParam();
  const at::Tensor ok = to_tensor({0, 1, 2, 1, 2, 0}, dtype).view({2, 3});
  auto call = [](const at::Tensor& ei, int64_t n) { return [=] { gnnfuse::edge_index_to_csr(ei, n); }; };

  expect_error(call(to_tensor({0, 1, 2, 1, 5, 0}, dtype).view({2, 3}), 3),
               {"gnnfuse::edge_index_to_csr", "argument 'edge_index'", "[0, 3)", "edge_index[1, 1] = 5"});
  expect_error(call(to_tensor({0, -1, 2, 1, 2, 0}, dtype).view({2, 3}), 3),
               {"gnnfuse::edge_index_to_csr", "argument 'edge_index'", "edge_index[0, 1] = -1"});
  expect_error(call(ok, -1), {"gnnfuse::edge_index_to_csr", "argument 'num_nodes'", "non-negative", "got -1"});
  expect_error(call(ok.view({3, 2}), 3), {"gnnfuse::edge_index_to_csr", "argument 'edge_index'", "[2, E]", "[3, 2]"});
  expect_error(call(ok.view({6}), 3), {"argument 'edge_index'", "[2, E]", "[6]"});
  expect_error(call(ok.to(at::kFloat), 3), {"argument 'edge_index'", "int32 or int64", "got float32"});
  // Every node index must be below num_nodes, also with no rows at all.
  expect_error(call(ok, 0), {"argument 'edge_index'", "[0, 0)"});
}

TEST_P(GraphOps, CsrTransposeRejectsBadInput) {
  const at::ScalarType dtype = GetParam();
  const at::Tensor rowptr = to_tensor({0, 2, 2, 5}, dtype);
  const at::Tensor col = to_tensor({0, 3, 0, 2, 3}, dtype);
  auto call = [](const at::Tensor& r, const at::Tensor& c, int64_t m) {
    return [=] { gnnfuse::csr_transpose(r, c, m); };
  };
  expect_error(call(to_tensor({0, 3, 2, 5}, dtype), col, 5),
               {"gnnfuse::csr_transpose", "argument 'rowptr'", "non-decreasing", "rowptr[1] = 3 > rowptr[2] = 2"});
  expect_error(call(to_tensor({1, 2, 2, 5}, dtype), col, 5), {"argument 'rowptr'", "start at 0", "rowptr[0] = 1"});
  expect_error(call(to_tensor({0, 2, 2, 4}, dtype), col, 5), {"argument 'rowptr'", "col.numel() = 5", "rowptr[3] = 4"});
  expect_error(call(to_tensor({}, dtype), to_tensor({}, dtype), 5), {"argument 'rowptr'", "at least one element"});
  expect_error(call(rowptr, col, 3), {"gnnfuse::csr_transpose", "argument 'col'", "[0, 3)", "col[1] = 3"});
  expect_error(call(rowptr, col, -2), {"argument 'num_cols'", "got -2"});
  const at::ScalarType other = dtype == at::kInt ? at::kLong : at::kInt;
  expect_error(call(rowptr, col.to(other), 5), {"argument 'col'", "dtype of 'rowptr'"});
  expect_error(call(rowptr.to(at::kDouble), col, 5), {"argument 'rowptr'", "int32 or int64", "got float64"});
  expect_error(call(rowptr.view({1, 4}), col, 5), {"argument 'rowptr'", "1-D", "[1, 4]"});
}

}  // namespace
