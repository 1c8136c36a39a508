// Torch-free building blocks that generated CPU kernels call: dtype tags, the accumulation
// type, parallel loops over row chunks balanced by nonzeros.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/parallel.h"

namespace gnnfuse::runtime {

enum class DType { Float32, Float64 };
enum class IType { Int32, Int64 };

// Accumulation type: float and double accumulate in themselves; reduced precisions (later)
// accumulate in float.
template <typename T>
struct AccType {
  using type = T;
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
  if (x > 88.0f) return std::exp(x);
  const float xc = x < -87.0f ? -87.0f : x;  // NaN passes through
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
