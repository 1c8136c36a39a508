// The dense product of the row-blocked kernels (runtime::gemm_acc) for float and double, compiled
// once per ISA and chosen at run time: AVX-512 (32 registers of 16 floats) where the CPU has it,
// else AVX2+FMA, else the portable vector path. A call multiplies a block of rows (kRowBlock by
// F) by a dense operand, so the dispatch is paid once per block.
#include <cstdint>

#include "runtime/cpu.h"

namespace gnnfuse::runtime {
namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

template <typename T, int kBytes>
struct VecN {
  typedef T type __attribute__((vector_size(kBytes)));
  static constexpr int64_t kLanes = kBytes / static_cast<int64_t>(sizeof(T));
};

template <typename V, typename T>
[[gnu::always_inline]] inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename V, typename T>
[[gnu::always_inline]] inline void put(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}

// Columns [j0, j0 + NV * lanes) of C for every row: tiles of MR rows by NV vectors held in
// registers over the whole k loop, then the rows left one at a time.
template <typename T, int kBytes, int MR, int NV>
[[gnu::always_inline]] inline void column_panel(int64_t m, int64_t k, const T* __restrict__ a, int64_t a_rs, int64_t a_cs,
                                                const T* __restrict__ b, int64_t ldb, T* __restrict__ c, int64_t ldc,
                                                int64_t j0, bool overwrite) {
  using V = typename VecN<T, kBytes>::type;
  constexpr int64_t L = VecN<T, kBytes>::kLanes;
  int64_t i0 = 0;
  for (; i0 + MR <= m; i0 += MR) {
    V acc[MR][NV];
    GNNFUSE_UNROLL
    for (int r = 0; r < MR; ++r)
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = overwrite ? V{} : load<V>(c + (i0 + r) * ldc + j0 + v * L);
    for (int64_t p = 0; p < k; ++p) {
      V bv[NV];
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) bv[v] = load<V>(b + p * ldb + j0 + v * L);
      GNNFUSE_UNROLL
      for (int r = 0; r < MR; ++r) {
        const T s = a[(i0 + r) * a_rs + p * a_cs];
        GNNFUSE_UNROLL
        for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
      }
    }
    GNNFUSE_UNROLL
    for (int r = 0; r < MR; ++r)
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) put(c + (i0 + r) * ldc + j0 + v * L, acc[r][v]);
  }
  for (; i0 < m; ++i0) {
    V acc[NV];
    GNNFUSE_UNROLL
    for (int v = 0; v < NV; ++v) acc[v] = overwrite ? V{} : load<V>(c + i0 * ldc + j0 + v * L);
    for (int64_t p = 0; p < k; ++p) {
      const T s = a[i0 * a_rs + p * a_cs];
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) acc[v] += s * load<V>(b + p * ldb + j0 + v * L);
    }
    GNNFUSE_UNROLL
    for (int v = 0; v < NV; ++v) put(c + i0 * ldc + j0 + v * L, acc[v]);
  }
}

template <typename T, int kBytes, int MR, int NV>
[[gnu::always_inline]] inline void gemm_body(int64_t m, int64_t n, int64_t k, const T* __restrict__ a, int64_t a_rs, int64_t a_cs,
                                             const T* __restrict__ b, int64_t ldb, T* __restrict__ c, int64_t ldc, bool overwrite) {
  constexpr int64_t L = VecN<T, kBytes>::kLanes;
  int64_t j0 = 0;
  for (; j0 + NV * L <= n; j0 += NV * L) column_panel<T, kBytes, MR, NV>(m, k, a, a_rs, a_cs, b, ldb, c, ldc, j0, overwrite);
  for (; j0 + L <= n; j0 += L) column_panel<T, kBytes, 2 * MR, 1>(m, k, a, a_rs, a_cs, b, ldb, c, ldc, j0, overwrite);
  if (j0 == n) return;
  for (int64_t i = 0; i < m; ++i) {
    if (overwrite)
      for (int64_t j = j0; j < n; ++j) c[i * ldc + j] = T(0);
    for (int64_t p = 0; p < k; ++p) {
      const T s = a[i * a_rs + p * a_cs];
      for (int64_t j = j0; j < n; ++j) c[i * ldc + j] += s * b[p * ldb + j];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename T>
__attribute__((target("avx512f"))) void gemm_avx512(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs,
                                                   const T* b, int64_t ldb, T* c, int64_t ldc, bool overwrite) {
  gemm_body<T, 64, 8, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}
template <typename T>
__attribute__((target("avx2,fma"))) void gemm_avx2(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs,
                                                  const T* b, int64_t ldb, T* c, int64_t ldc, bool overwrite) {
  gemm_body<T, 32, 4, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}
bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#endif

template <typename T>
void gemm_any(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c,
              int64_t ldc, bool overwrite) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (overwrite)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = T(0);
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx512f()) return gemm_avx512<T>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
  if (cpu_has_avx2_fma()) return gemm_avx2<T>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
#endif
  gemm_body<T, 32, 4, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}

#pragma GCC diagnostic pop

}  // namespace

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
          int64_t ldc, bool overwrite) {
  gemm_any<float>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}
void gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t a_rs, int64_t a_cs, const double* b, int64_t ldb, double* c,
          int64_t ldc, bool overwrite) {
  gemm_any<double>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}

}  // namespace gnnfuse::runtime
