// The ops generated from ops/*.spec, called through the generated C++ API (gnnfuse/ops.h),
// against dense ATen references built from the same CSR.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "expect_error.h"
#include "gnnfuse/gnnfuse.h"

namespace {

struct Csr {
  at::Tensor rowptr, col;
  int64_t rows, cols;
};

// A random CSR over `rows` x `cols` with about `nnz` entries, duplicates and empty rows
// included, in the index dtype `itype` (built through edge_index_to_csr).
Csr random_csr(int64_t rows, int64_t cols, int64_t nnz, at::ScalarType itype, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  // Targets avoid the last quarter of the rows, so those rows are empty.
  const int64_t used_rows = std::max<int64_t>(1, rows * 3 / 4);
  at::Tensor dst = at::zeros({0}, at::kLong), src = dst;
  if (nnz > 0) {
    dst = at::randint(used_rows, {nnz}, gen, at::kLong);
    src = at::randint(cols, {nnz}, gen, at::kLong);
  }
  if (nnz > 4) {  // repeat a few edges
    src.slice(0, 0, 2).copy_(src.slice(0, 2, 4));
    dst.slice(0, 0, 2).copy_(dst.slice(0, 2, 4));
  }
  // edge_index_to_csr is square: embed the rectangle in max(rows, cols) nodes, then cut rows.
  const int64_t n = std::max(rows, cols);
  const auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(at::stack({src, dst}).to(itype), n);
  return {rowptr.slice(0, 0, rows + 1).contiguous(), col, rows, cols};
}

// Row index of every stored entry: the COO rows of the CSR.
at::Tensor coo_rows(const Csr& a) {
  const at::Tensor counts = a.rowptr.slice(0, 1).to(at::kLong) - a.rowptr.slice(0, 0, -1).to(at::kLong);
  return at::repeat_interleave(at::arange(a.rows, at::kLong), counts);
}

// Dense [rows, cols] matrix with entry values `values` (one per stored entry, summed over duplicates).
at::Tensor dense(const Csr& a, const at::Tensor& values) {
  at::Tensor m = at::zeros({a.rows, a.cols}, values.options());
  m.index_put_({coo_rows(a), a.col.to(at::kLong)}, values, /*accumulate=*/true);
  return m;
}

at::Tensor ones_like_edges(const Csr& a, at::ScalarType dtype) { return at::ones({a.col.numel()}, dtype); }

// Per-entry scores u[i] . v[col[p]] of SDDMM, computed densely.
at::Tensor dot_scores(const Csr& a, const at::Tensor& u, const at::Tensor& v) {
  return (u.index_select(0, coo_rows(a)) * v.index_select(0, a.col.to(at::kLong))).sum(1);
}

void expect_close(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype) {
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.scalar_type(), dtype);
  // bfloat16 / float16: the op accumulates in float and rounds once, the reference (computed in
  // the same dtype by ATen) likewise: a few units of the dtype's rounding, relative to the
  // result's scale where sums cancel.
  const bool low = dtype == at::kBFloat16 || dtype == at::kHalf;
  const double eps = dtype == at::kBFloat16 ? 0x1p-8 : 0x1p-11;
  const double scale = want.numel() ? want.to(at::kDouble).abs().max().item<double>() : 0.0;
  const double rtol = dtype == at::kDouble ? 1e-10 : low ? 4 * eps : 1e-4;
  const double atol = dtype == at::kDouble ? 1e-10 : low ? 4 * eps * scale : 1e-4;
  EXPECT_TRUE(at::allclose(got.to(at::kDouble), want.to(at::kDouble), rtol, atol))
      << "max abs error " << (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

using gnnfuse::testing::expect_error;

using Types = std::tuple<at::ScalarType, at::ScalarType>;  // (value dtype, index dtype)

class SpecOps : public ::testing::TestWithParam<Types> {
 protected:
  at::ScalarType dtype() const { return std::get<0>(GetParam()); }
  at::ScalarType itype() const { return std::get<1>(GetParam()); }
  at::Tensor randn(at::IntArrayRef size, uint64_t seed) const {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    return at::randn(size, gen, at::TensorOptions().dtype(dtype()));
  }
};

INSTANTIATE_TEST_SUITE_P(Dtypes, SpecOps,
                         ::testing::Combine(::testing::Values(at::kDouble, at::kFloat, at::kBFloat16, at::kHalf),
                                            ::testing::Values(at::kInt, at::kLong)),
                         [](const auto& info) {
                           const at::ScalarType d = std::get<0>(info.param);
                           return std::string(d == at::kDouble ? "f64" : d == at::kFloat ? "f32" : d == at::kHalf ? "f16" : "bf16") + "_" +
                                  (std::get<1>(info.param) == at::kInt ? "i32" : "i64");
                         });

// (rows, cols, nnz): empty graph, single node, a rectangle, and a larger sparse one.
const std::tuple<int64_t, int64_t, int64_t> kShapes[] = {{0, 0, 0}, {1, 1, 1}, {5, 9, 30}, {300, 200, 3000}};
const int64_t kFeatures[] = {1, 3, 32, 129};
// spmm's walks run in register tiles of 4, 2 and 1 vectors (8 floats / 4 doubles) and a plain
// loop over the rest: widths that take each pass, alone and combined.
const int64_t kTileFeatures[] = {1, 3, 24, 32, 56, 129};

TEST_P(SpecOps, SpmmMatchesDense) {
  uint64_t seed = 1;
  for (const auto& [rows, cols, nnz] : kShapes) {
    const Csr a = random_csr(rows, cols, nnz, itype(), seed++);
    for (int64_t f : kTileFeatures) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " nnz=" + std::to_string(nnz) + " F=" + std::to_string(f));
      const at::Tensor x = randn({cols, f}, seed++);
      const at::Tensor w = randn({a.col.numel()}, seed++);
      expect_close(gnnfuse::spmm(a.rowptr, a.col, w, x), at::mm(dense(a, w), x), dtype());
      expect_close(gnnfuse::spmm(a.rowptr, a.col, std::nullopt, x),
                   at::mm(dense(a, ones_like_edges(a, dtype())), x), dtype());
    }
  }
}

TEST_P(SpecOps, SddmmMatchesDense) {
  uint64_t seed = 100;
  for (const auto& [rows, cols, nnz] : kShapes) {
    const Csr a = random_csr(rows, cols, nnz, itype(), seed++);
    for (int64_t k : kFeatures) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " nnz=" + std::to_string(nnz) + " K=" + std::to_string(k));
      const at::Tensor u = randn({rows, k}, seed++);
      const at::Tensor v = randn({cols, k}, seed++);
      const at::Tensor w = randn({a.col.numel()}, seed++);
      expect_close(gnnfuse::sddmm(a.rowptr, a.col, w, u, v), w * dot_scores(a, u, v), dtype());
      expect_close(gnnfuse::sddmm(a.rowptr, a.col, std::nullopt, u, v), dot_scores(a, u, v), dtype());
    }
  }
}

TEST_P(SpecOps, SddmmSpmmMatchesDense) {
  uint64_t seed = 200;
  for (const auto& [rows, cols, nnz] : kShapes) {
    const Csr a = random_csr(rows, cols, nnz, itype(), seed++);
    for (int64_t f : kFeatures) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " nnz=" + std::to_string(nnz) + " F=" + std::to_string(f));
      const int64_t k = f == 1 ? 4 : f / 2 + 1;
      const at::Tensor u = randn({rows, k}, seed++);
      const at::Tensor v = randn({cols, k}, seed++);
      const at::Tensor x = randn({cols, f}, seed++);
      const at::Tensor w = randn({a.col.numel()}, seed++);
      expect_close(gnnfuse::sddmm_spmm(a.rowptr, a.col, w, u, v, x), at::mm(dense(a, w * dot_scores(a, u, v)), x),
                   dtype());
      expect_close(gnnfuse::sddmm_spmm(a.rowptr, a.col, std::nullopt, u, v, x),
                   at::mm(dense(a, dot_scores(a, u, v)), x), dtype());
    }
  }
}

// SpGEMM through the C++ API: the symbolic pass gives the pattern of the dense product's
// nonzeros (sorted columns), the numeric pass its values; gradients through autograd.
TEST_P(SpecOps, SpgemmMatchesDense) {
  uint64_t seed = 300;
  for (const auto& [rows, inner, cols, nnz_a, nnz_b] :
       std::initializer_list<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{{0, 4, 3, 0, 5}, {1, 1, 1, 1, 1}, {20, 15, 25, 60, 80}, {200, 150, 120, 1500, 900}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " inner=" + std::to_string(inner) + " cols=" + std::to_string(cols));
    const Csr a = random_csr(rows, inner, nnz_a, itype(), seed++);
    const Csr b = random_csr(inner, cols, nnz_b, itype(), seed++);
    const at::Tensor av = randn({a.col.numel()}, seed++).abs() + 0.1;
    const at::Tensor bv = randn({b.col.numel()}, seed++).abs() + 0.1;
    const auto [crowptr, ccol] = gnnfuse::spgemm_symbolic(a.rowptr, a.col, b.rowptr, b.col, cols);
    ASSERT_EQ(crowptr.scalar_type(), itype());
    const at::Tensor want = at::mm(dense(a, av), dense(b, bv));
    const Csr c{crowptr, ccol, rows, cols};
    // The pattern is exactly the nonzeros of the product (positive values: no cancellation).
    EXPECT_EQ(ccol.numel(), (want != 0).sum().item<int64_t>());
    const at::Tensor cv = gnnfuse::spgemm(a.rowptr, a.col, av, b.rowptr, b.col, bv, crowptr, ccol, cols);
    expect_close(dense(c, cv), want, dtype());
    // Gradients: d/dA = G Bᵀ sampled on A.
    const at::Tensor avg = av.clone().set_requires_grad(true);
    const at::Tensor g = randn({ccol.numel()}, seed++);
    at::Tensor out = gnnfuse::spgemm(a.rowptr, a.col, avg, b.rowptr, b.col, bv, crowptr, ccol, cols);
    out.backward(g);
    const at::Tensor gab = at::mm(dense(c, g), dense(b, bv).t());
    expect_close(avg.grad(), gab.index({coo_rows(a), a.col.to(at::kLong)}), dtype());
    // One pass (pattern and values through the workspace; the operands' columns copied, so the
    // pattern cache misses): the same pattern and, summed in the same order, the same values.
    const auto [arow1, acol1, av1] = gnnfuse::spgemm_assemble(a.rowptr, a.col.clone(), av, b.rowptr, b.col, bv, cols);
    EXPECT_TRUE(at::equal(arow1, crowptr));
    EXPECT_TRUE(at::equal(acol1, ccol));
    EXPECT_TRUE(at::equal(av1, cv));
  }
  const Csr a = random_csr(6, 5, 12, itype(), 9);
  const Csr narrow = random_csr(2, 4, 3, itype(), 10);
  expect_error([&] { gnnfuse::spgemm_symbolic(a.rowptr, a.col, narrow.rowptr, narrow.col, 4); },
               {"gnnfuse::spgemm_symbolic", "argument 'acol'"});  // A's columns past B's 2 rows
}

// Coarsening P^T A P through the C++ API against the dense product, its edge-weight gradient
// (dA_ij = dC[cluster(i), cluster(j)]), the matching that produces clusters, and bad input.
TEST_P(SpecOps, CoarsenMatchesDense) {
  const int64_t n = 40, m = 7;
  const Csr a = random_csr(n, n, 300, itype(), 400);
  const at::Tensor w = randn({a.col.numel()}, 401).abs() + 0.1;
  const at::Tensor cluster = at::arange(n, at::kLong).remainder(m);
  // P: one entry per node; M = P^T: the members of each cluster, increasing.
  const at::Tensor prowptr = at::arange(n + 1, at::kLong).to(itype());
  const at::Tensor pcol = cluster.to(itype());
  const at::Tensor mcol = std::get<1>(at::sort(cluster, /*stable=*/true, 0, false)).to(itype());
  const at::Tensor mrowptr = at::cat({at::zeros({1}, at::kLong), at::bincount(cluster, {}, m).cumsum(0)}).to(itype());
  const auto [crowptr, ccol] = gnnfuse::coarsen_symbolic(mrowptr, mcol, a.rowptr, a.col, prowptr, pcol, m);
  const Csr c{crowptr, ccol, m, m};
  const at::Tensor p = at::one_hot(cluster, m).to(dtype());
  const at::Tensor want = at::mm(at::mm(p.t(), dense(a, w)), p);
  EXPECT_EQ(ccol.numel(), (want != 0).sum().item<int64_t>());
  const at::Tensor wg = w.clone().set_requires_grad(true);
  at::Tensor cv = gnnfuse::coarsen(mrowptr, mcol, a.rowptr, a.col, wg, prowptr, pcol, crowptr, ccol, m);
  expect_close(dense(c, cv), want, dtype());
  const at::Tensor g = randn({ccol.numel()}, 402);
  cv.backward(g);
  const at::Tensor gd = dense(c, g);
  expect_close(wg.grad(), gd.index({cluster.index_select(0, coo_rows(a)), cluster.index_select(0, a.col.to(at::kLong))}), dtype());
  expect_error([&] { gnnfuse::coarsen_symbolic(mrowptr, mcol, a.rowptr, a.col, prowptr, pcol, m - 1); },
               {"gnnfuse::coarsen_symbolic", "argument 'pcol'"});  // a cluster id past num_clusters
  // One pass: the pattern and values of the two-pass form; with a gradient wanted, the values
  // are differentiable.
  const at::Tensor wg2 = w.clone().set_requires_grad(true);
  const auto [arow1, acol1, av1] = gnnfuse::coarsen_assemble(mrowptr, mcol, a.rowptr, a.col.clone(), wg2, prowptr, pcol, m);
  EXPECT_TRUE(at::equal(arow1, crowptr));
  EXPECT_TRUE(at::equal(acol1, ccol));
  EXPECT_TRUE(at::equal(av1.detach(), cv.detach()));
  av1.backward(g);
  EXPECT_TRUE(at::equal(wg2.grad(), wg.grad()));
  expect_error([&] { gnnfuse::coarsen_assemble(mrowptr, mcol, a.rowptr, a.col, w.narrow(0, 0, 3), prowptr, pcol, m); },
               {"gnnfuse::coarsen_assemble", "argument 'edge_weight'"});

  // Matching: clusters of one or two nodes joined by an edge; a bad order is rejected.
  const at::Tensor matched = gnnfuse::heavy_edge_matching(a.rowptr, a.col, w, at::arange(n, at::kLong));
  ASSERT_EQ(matched.numel(), n);
  EXPECT_EQ(std::get<0>(at::_unique(matched)).numel(), matched.max().item<int64_t>() + 1);  // ids are consecutive
  EXPECT_LE(at::bincount(matched).max().item<int64_t>(), 2);
  expect_error([&] { gnnfuse::heavy_edge_matching(a.rowptr, a.col, w, at::zeros({n}, at::kLong)); },
               {"gnnfuse::heavy_edge_matching", "argument 'order'", "permutation"});
}

TEST_P(SpecOps, RejectBadInput) {
  const Csr a = random_csr(6, 6, 20, itype(), 7);
  const at::Tensor x = randn({6, 4}, 1);
  const at::Tensor u = randn({6, 4}, 2);

  // A column index past x's rows.
  const at::Tensor bad_col = a.col.clone();
  bad_col[0] = 6;
  expect_error([&] { gnnfuse::spmm(a.rowptr, bad_col, std::nullopt, x); },
               {"gnnfuse::spmm", "argument 'col'", "= 6"});

  // An edge weight per stored entry, and not one fewer.
  const at::Tensor short_w = randn({a.col.numel() - 1}, 3);
  expect_error([&] { gnnfuse::sddmm(a.rowptr, a.col, short_w, u, u); }, {"gnnfuse::sddmm", "argument 'edge_weight'"});

  // Row pointers that go down.
  const at::Tensor bad_rowptr = a.rowptr.clone();
  bad_rowptr[2] = a.rowptr[1].item<int64_t>() + 100;
  expect_error([&] { gnnfuse::sddmm_spmm(bad_rowptr, a.col, std::nullopt, u, u, x); },
               {"gnnfuse::sddmm_spmm", "argument 'rowptr'"});
}

}  // namespace
