// Torch-free building blocks that generated CPU kernels call: dtype tags, the accumulation
// type, parallel loops over row chunks balanced by nonzeros.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/parallel.h"

namespace gnnfuse::runtime {

enum class DType { Float32, Float64, BFloat16, Float16 };
enum class IType { Int32, Int64 };

// Reduced-precision storage types with the bit layout of torch.bfloat16 and torch.float16
// (torch-free). Kernels read them into float (exact) and store results rounded to nearest even;
// NaN stays NaN, overflow goes to infinity.
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(round(f)) {}
  static uint16_t round(float f) {
    const uint32_t u = float_bits(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x0040u)  // quiet NaN
                                           : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  explicit operator float() const { return bits_float(static_cast<uint32_t>(bits) << 16); }
};
// IEEE binary16. To float: the 5-bit exponent is rebased by scaling in float arithmetic, which
// also turns subnormal halves into normal floats. From float: scaling by 2^112 then 2^-110 rounds
// the mantissa to 10 bits at the half's exponent (subnormals included) in one float addition.
struct float16 {
  uint16_t bits;
  float16() = default;
  explicit float16(float f) : bits(round(f)) {}
  static uint16_t round(float f) {
    const uint32_t u = float_bits(f);
    const uint32_t twice = u + u;  // sign shifted out
    const uint32_t sign = u & 0x80000000u;
    uint32_t bias = twice & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
    base = bits_float((bias >> 1) + 0x07800000u) + base;
    const uint32_t b = float_bits(base);
    const uint32_t nonsign = ((b >> 13) & 0x00007c00u) + (b & 0x00000fffu);
    return static_cast<uint16_t>((sign >> 16) | (twice > 0xff000000u ? 0x7e00u : nonsign));
  }
  explicit operator float() const {
    const uint32_t w = static_cast<uint32_t>(bits) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t twice = w + w;
    const float normal = bits_float((twice >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
    const float subnormal = bits_float((twice >> 17) | (126u << 23)) - 0.5f;
    return bits_float(sign | (twice < (1u << 27) ? float_bits(subnormal) : float_bits(normal)));
  }
};

// A result stored in its tensor's dtype. bfloat16 and float16 are written through their bits:
// assigning a converted struct goes through a temporary, which keeps GCC from vectorising the
// store loop (that scalar rounding took over half of a bf16 SpMM on PubMed).
template <typename T, typename A>
inline void store(T* p, A v) {
  *p = static_cast<T>(v);
}
inline void store(bfloat16* p, float v) { p->bits = bfloat16::round(v); }
inline void store(float16* p, float v) { p->bits = float16::round(v); }

// Accumulation type: float and double accumulate in themselves, bfloat16 and float16 in float.
template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<bfloat16> {
  using type = float;
};
template <>
struct AccType<float16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccType<T>::type;

// exp in the accumulation type. float: exp(x) = 2^k exp(r) with k = round(x / ln 2), r reduced
// in two steps (ln 2 split in a high part exact in float and a low part), exp(r) by a degree-7
// Taylor-like polynomial on |r| <= ln(2)/2 (relative error below 2e-7, about 2 ulp): inlined
// arithmetic, where a libm call costs several times more in the edge loops of a softmax.
// exp(-inf) = 0 (results below 2^-126 flush to 0), NaN propagates, large x go to std::exp.
// double: std::exp.
inline float exp_acc(float x) {
  // NaN goes to std::exp too: below, k must be a finite integer (converting NaN to int32 is
  // undefined, and so was shifting the negative result). The same speed as `x > 88.0f`.
  if (!(x <= 88.0f)) return std::exp(x);
  const float xc = x < -87.0f ? -87.0f : x;
  const float k = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = (xc - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}
inline double exp_acc(double x) { return std::exp(x); }

[[noreturn]] inline void unsupported(const char* op, DType d, IType i) {
  throw std::runtime_error(std::string("gnnfuse::") + op + ": no kernel for dtype " +
                           std::to_string(static_cast<int>(d)) + " and index dtype " + std::to_string(static_cast<int>(i)));
}

// True when the CPU runs AVX2 and FMA code (the generated kernels' fast path on x86-64).
inline bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

// Software prefetch of gathered rows. A walk over a sparse row reads one dense row per stored
// entry (X[j,:] for column j) at an address no hardware prefetcher predicts; each entry's row
// is requested `prefetch_distance` entries ahead (about 2 KiB of rows in flight, 4 to 16
// entries), its first kPrefetchLines cache lines (a longer row is sequential from there on).
constexpr int64_t kCacheLine = 64;
constexpr int64_t kPrefetchLines = 16;
inline int64_t prefetch_distance(int64_t row_bytes) {
  return std::clamp<int64_t>(2048 / std::max<int64_t>(row_bytes, 1), 4, 16);
}
template <typename T>
inline void prefetch_row(const T* row, int64_t elems) {
#if defined(__GNUC__)
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = std::min<int64_t>(elems * static_cast<int64_t>(sizeof(T)), kPrefetchLines * kCacheLine);
  for (int64_t o = 0; o < bytes; o += kCacheLine) __builtin_prefetch(p + o, 0, 3);
#else
  (void)row;
  (void)elems;
#endif
}

// Register tiles of feature loops (GCC/Clang vector extensions). A walk that sums gathered rows
// into a row accumulator (Y[i,:] += w * X[j,:]) keeps a tile of the accumulator in registers
// for the whole walk, one pass per tile: the accumulator's load-add-store round trip per entry
// (a store-to-load forwarding chain through memory) would otherwise bound the walk. 32-byte
// vectors: one AVX register, or two SSE registers on the base path.
#if defined(__GNUC__)
#define GNNFUSE_VECTOR_TILES 1
template <typename T, int kBytes>
struct VecN {
  typedef T type __attribute__((vector_size(kBytes)));
  static constexpr int64_t kLanes = kBytes / static_cast<int64_t>(sizeof(T));
};
template <typename T>
struct Vec : VecN<T, 32> {};
template <typename T>
using vec_t = typename Vec<T>::type;
// Always inlined, so the vector ABI of the call (-Wpsabi's concern) never exists.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// kBytes bytes of A's lanes from p, each element of another type S widened into A.
template <typename A, int kBytes = 32, typename S>
[[gnu::always_inline]] inline typename VecN<A, kBytes>::type vload(const S* p) {
  typename VecN<A, kBytes>::type v;
  if constexpr (std::is_same_v<S, A>) {
    std::memcpy(&v, p, sizeof(v));
  } else {
    for (int64_t k = 0; k < VecN<A, kBytes>::kLanes; ++k) v[k] = static_cast<A>(p[k]);
  }
  return v;
}
template <typename A, typename V>
[[gnu::always_inline]] inline void vstore(A* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}
#pragma GCC diagnostic pop
#endif

// Row blocks of the dense products inside a row loop (a fused GCN's aggregate times W): the
// rows of a block gather into a kRowBlock-row workspace, then meet the dense operand in one
// register-tiled product (gemm_acc) instead of one vector-matrix product per row, so each
// vector of W loaded from cache serves a tile's rows.
constexpr int64_t kRowBlock = 32;

#if defined(__GNUC__) && !defined(__clang__)
#define GNNFUSE_UNROLL _Pragma("GCC unroll 8")
#else
#define GNNFUSE_UNROLL
#endif

#if defined(GNNFUSE_VECTOR_TILES)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// Columns [j0, j0 + NV lanes-wide vectors) of C += A * B for every row: tiles of MR rows by NV
// kBytes-vectors held in registers over the whole k loop, then the rows left one at a time.
template <typename A, int kBytes, int MR, int NV, typename S, typename B>
[[gnu::always_inline]] inline void gemm_panel(int64_t m, int64_t k, const S* __restrict__ a, int64_t a_rs, int64_t a_cs,
                                              const B* __restrict__ b, int64_t ldb, A* __restrict__ c, int64_t ldc, int64_t j0,
                                              bool overwrite) {
  using V = typename VecN<A, kBytes>::type;
  constexpr int64_t L = VecN<A, kBytes>::kLanes;
  int64_t i0 = 0;
  for (; i0 + MR <= m; i0 += MR) {
    V acc[MR][NV];
    GNNFUSE_UNROLL
    for (int r = 0; r < MR; ++r)
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = overwrite ? V{} : vload<A, kBytes>(c + (i0 + r) * ldc + j0 + v * L);
    for (int64_t p = 0; p < k; ++p) {
      V bv[NV];
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) bv[v] = vload<A, kBytes>(b + p * ldb + j0 + v * L);
      GNNFUSE_UNROLL
      for (int r = 0; r < MR; ++r) {
        const A s = static_cast<A>(a[(i0 + r) * a_rs + p * a_cs]);
        GNNFUSE_UNROLL
        for (int v = 0; v < NV; ++v) acc[r][v] += s * bv[v];
      }
    }
    GNNFUSE_UNROLL
    for (int r = 0; r < MR; ++r)
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) vstore(c + (i0 + r) * ldc + j0 + v * L, acc[r][v]);
  }
  for (; i0 < m; ++i0) {
    V acc[NV];
    GNNFUSE_UNROLL
    for (int v = 0; v < NV; ++v) acc[v] = overwrite ? V{} : vload<A, kBytes>(c + i0 * ldc + j0 + v * L);
    for (int64_t p = 0; p < k; ++p) {
      const A s = static_cast<A>(a[i0 * a_rs + p * a_cs]);
      GNNFUSE_UNROLL
      for (int v = 0; v < NV; ++v) acc[v] += s * vload<A, kBytes>(b + p * ldb + j0 + v * L);
    }
    GNNFUSE_UNROLL
    for (int v = 0; v < NV; ++v) vstore(c + i0 * ldc + j0 + v * L, acc[v]);
  }
}
#pragma GCC diagnostic pop
#endif

// C[m x n] += A[m x k] * B[k x n] (= with `overwrite`), accumulated in C's type A. Element (r, p)
// of the left operand (type S) is a[r * a_rs + p * a_cs], so A^T products pass a_rs = 1; B and C
// are row-major with row strides ldb and ldc; S and B may be reduced-precision types, read into
// A. Panels of NV vectors of kBytes (tiles of MR rows), then one-vector panels (2 MR rows), then
// a scalar tail. Always inlined: it takes the ISA of the function that calls it.
template <typename A, int kBytes, int MR, int NV, typename S, typename B>
[[gnu::always_inline]] inline void gemm_tiles(int64_t m, int64_t n, int64_t k, const S* __restrict__ a, int64_t a_rs,
                                              int64_t a_cs, const B* __restrict__ b, int64_t ldb, A* __restrict__ c,
                                              int64_t ldc, bool overwrite) {
  int64_t j0 = 0;
#if defined(GNNFUSE_VECTOR_TILES)
  constexpr int64_t L = VecN<A, kBytes>::kLanes;
  for (; j0 + NV * L <= n; j0 += NV * L) gemm_panel<A, kBytes, MR, NV>(m, k, a, a_rs, a_cs, b, ldb, c, ldc, j0, overwrite);
  for (; j0 + L <= n; j0 += L) gemm_panel<A, kBytes, 2 * MR, 1>(m, k, a, a_rs, a_cs, b, ldb, c, ldc, j0, overwrite);
#endif
  if (j0 == n) return;
  for (int64_t i = 0; i < m; ++i) {
    A* __restrict__ ci = c + i * ldc;
    if (overwrite) std::fill(ci + j0, ci + n, A(0));
    for (int64_t p = 0; p < k; ++p) {
      const A s = static_cast<A>(a[i * a_rs + p * a_cs]);
      const B* __restrict__ bp = b + p * ldb;
      for (int64_t j = j0; j < n; ++j) ci[j] += s * static_cast<A>(bp[j]);
    }
  }
}

// The float and double products, compiled per ISA and dispatched at run time (runtime/gemm.cpp).
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t ldb, float* c,
          int64_t ldc, bool overwrite = false);
void gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t a_rs, int64_t a_cs, const double* b, int64_t ldb, double* c,
          int64_t ldc, bool overwrite = false);

// The row-blocked kernels' product: the compiled one when every operand is in C's type, else
// (bfloat16/float16 operands) the tiles inlined into the calling kernel, widening on load.
template <typename A, typename S, typename B>
[[gnu::always_inline]] inline void gemm_acc(int64_t m, int64_t n, int64_t k, const S* __restrict__ a, int64_t a_rs, int64_t a_cs,
                                            const B* __restrict__ b, int64_t ldb, A* __restrict__ c, int64_t ldc,
                                            bool overwrite = false) {
  if constexpr (std::is_same_v<A, S> && std::is_same_v<A, B>) {
    gemm(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
  } else {
    gemm_tiles<A, 32, 4, 2>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc, overwrite);
  }
}

// A dense operand of a row-blocked product in the accumulation type, row-major as the product
// reads it: `p` itself when it already is, else `buf` holding the copy (transposed from
// [rows][cols] to [cols][rows] when `transpose`). Made once per kernel call.
template <typename A, typename T>
const A* dense_as(const T* p, int64_t rows, int64_t cols, bool transpose, std::vector<A>& buf) {
  if constexpr (std::is_same_v<A, T>) {
    if (!transpose) return p;
  }
  buf.resize(static_cast<size_t>(rows * cols));
  if (transpose) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) buf[static_cast<size_t>(c * rows + r)] = static_cast<A>(p[r * cols + c]);
  } else {
    for (int64_t e = 0; e < rows * cols; ++e) buf[static_cast<size_t>(e)] = static_cast<A>(p[e]);
  }
  return buf.data();
}

// Chunks per thread: enough to even out rows of unequal cost, few enough to keep scheduling cheap.
constexpr int64_t kChunksPerThread = 8;

// Row boundaries [b_0 = 0, ..., b_c = rows] splitting `rows` rows into chunks of about equal
// work, where a row costs (its nonzeros + 1). O(chunks * log rows).
template <typename index_t>
std::vector<int64_t> balanced_chunks(const index_t* rowptr, int64_t rows) {
  std::vector<int64_t> b{0};
  if (rows <= 0) return b;
  const int64_t nnz = static_cast<int64_t>(rowptr[rows]);
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, max_threads() * kChunksPerThread));
  const int64_t total = nnz + rows;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t target = total * c / chunks;
    // First row r with rowptr[r] + r >= target.
    int64_t lo = b.back(), hi = rows;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<int64_t>(rowptr[mid]) + mid < target) lo = mid + 1;
      else hi = mid;
    }
    if (lo > b.back() && lo < rows) b.push_back(lo);
  }
  b.push_back(rows);
  return b;
}

// Row boundaries splitting `rows` rows into equal chunks.
inline std::vector<int64_t> even_chunks(int64_t rows) {
  std::vector<int64_t> b{0};
  if (rows <= 0) return b;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, max_threads() * kChunksPerThread));
  for (int64_t c = 1; c < chunks; ++c) b.push_back(rows * c / chunks);
  b.push_back(rows);
  return b;
}

}  // namespace gnnfuse::runtime
