// runtime::gemm (the row-blocked kernels' dense product, compiled per ISA) and gemm_acc's
// mixed-precision path against a double reference: every tile shape (full register tiles, the
// rows and the one-vector panel left over, the scalar tail), both layouts of the left operand,
// accumulation into C, empty extents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/cpu.h"

namespace {

using gnnfuse::runtime::bfloat16;

template <typename T>
void check_gemm(int64_t m, int64_t n, int64_t k, bool a_transposed) {
  std::mt19937 gen(static_cast<uint32_t>(m * 10007 + n * 101 + k));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int64_t lda = a_transposed ? m + 3 : k + 2, ldb = n + 1, ldc = n + 5;  // padded rows
  std::vector<T> a(static_cast<size_t>((a_transposed ? k : m) * lda + 1)), b(static_cast<size_t>(k * ldb + 1)),
      c(static_cast<size_t>(m * ldc + 1));
  for (auto& v : a) v = static_cast<T>(u(gen));
  for (auto& v : b) v = static_cast<T>(u(gen));
  for (auto& v : c) v = static_cast<T>(u(gen));
  std::vector<T> c0 = c;
  const int64_t a_rs = a_transposed ? 1 : lda, a_cs = a_transposed ? lda : 1;
  gnnfuse::runtime::gemm(m, n, k, a.data(), a_rs, a_cs, b.data(), ldb, c.data(), ldc);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= n) {  // padding untouched
        ASSERT_EQ(c[at], c0[at]);
        continue;
      }
      double want = static_cast<double>(c0[at]);
      for (int64_t p = 0; p < k; ++p)
        want += static_cast<double>(a[static_cast<size_t>(i * a_rs + p * a_cs)]) * static_cast<double>(b[static_cast<size_t>(p * ldb + j)]);
      ASSERT_NEAR(static_cast<double>(c[at]), want, tol * (1.0 + static_cast<double>(k))) << "m=" << m << " n=" << n << " k=" << k << " i=" << i << " j=" << j;
    }
  EXPECT_EQ(c.back(), c0.back());
}

TEST(RuntimeGemm, EveryTileShapeFloatAndDouble) {
  for (int64_t m : {1, 3, 4, 7, 8, 9, 17, 32})
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 65, 129})
      for (int64_t k : {1, 2, 5, 64})
        for (bool t : {false, true}) {
          check_gemm<float>(m, n, k, t);
          check_gemm<double>(m, n, k, t);
        }
}

TEST(RuntimeGemm, EmptyExtentsLeaveCUnchanged) {
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16, 2.0f);
  gnnfuse::runtime::gemm(4, 4, 0, a.data(), 4, 1, b.data(), 4, c.data(), 4);
  gnnfuse::runtime::gemm(0, 4, 4, a.data(), 4, 1, b.data(), 4, c.data(), 4);
  gnnfuse::runtime::gemm(4, 0, 4, a.data(), 4, 1, b.data(), 4, c.data(), 4);
  for (float v : c) EXPECT_EQ(v, 2.0f);
}

TEST(RuntimeGemm, MixedPrecisionReadsBfloat16IntoFloat) {
  // gemm_acc<float> with a bfloat16 right operand: the inline path, converting on load
  const int64_t m = 9, n = 40, k = 13;
  std::vector<float> a(static_cast<size_t>(m * k)), c(static_cast<size_t>(m * n), 0.5f);
  std::vector<bfloat16> b(static_cast<size_t>(k * n));
  for (size_t e = 0; e < a.size(); ++e) a[e] = static_cast<float>(e % 7) - 3.0f;
  for (size_t e = 0; e < b.size(); ++e) b[e] = bfloat16(0.25f * static_cast<float>(e % 5));
  gnnfuse::runtime::gemm_acc<float>(m, n, k, a.data(), k, int64_t(1), b.data(), n, c.data(), n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0.5;
      for (int64_t p = 0; p < k; ++p) want += double(a[static_cast<size_t>(i * k + p)]) * double(static_cast<float>(b[static_cast<size_t>(p * n + j)]));
      ASSERT_NEAR(c[static_cast<size_t>(i * n + j)], want, 1e-4);
    }
}

}  // namespace
