// The dense product of the row-blocked kernels (runtime::gemm_acc) for float and double, compiled
// once per ISA from the tiles in runtime/cpu.h and chosen at run time: AVX-512 (32 registers of
// 16 floats; 8x2 tiles) where the CPU has it, else AVX2+FMA (4x2), else the portable vector path.
// A call multiplies a block of rows (kRowBlock by F) by a dense operand, so the dispatch is paid
// once per block.
#include <cstdint>

#include "runtime/cpu.h"

namespace gnnfuse::runtime {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
template <typename T>
__attribute__((target("avx512f"))) void gemm_avx512(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs,
                                                   const T* b, int64_t ldb, T* c, int64_t ldc, bool overwrite) {
  gemm_tiles<T, 64, 8, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}
template <typename T>
__attribute__((target("avx2,fma"))) void gemm_avx2(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs,
                                                  const T* b, int64_t ldb, T* c, int64_t ldc, bool overwrite) {
  gemm_tiles<T, 32, 4, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
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
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx512f()) return gemm_avx512<T>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
  if (cpu_has_avx2_fma()) return gemm_avx2<T>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
#endif
  gemm_tiles<T, 32, 4, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
}

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
