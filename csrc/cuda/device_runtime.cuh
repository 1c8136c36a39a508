// Device helpers of the generated CUDA kernels (gnnfuse-gen --target cuda): the accumulation
// type and the conversions of half and bfloat16 (fp32 accumulation), loads, stores and atomic
// additions per type, 128-bit loads of feature rows, reductions over a group of G lanes (sums,
// max / min, max / min with the position), the segmented reduction of the nonzero-balanced
// kernels, the element-wise functions, and fill kernels. Written against cuda/simt.cuh only, so
// nvcc and the SIMT emulator compile the same text.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/simt.cuh"
#include "cuda/type_subset.h"

#ifndef GNNFUSE_UNROLL
#if defined(__CUDACC__)
#define GNNFUSE_UNROLL _Pragma("unroll")
#else
#define GNNFUSE_UNROLL
#endif
#endif

namespace gnnfuse::cuda {

// ---------------------------------------------------------------- types
template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<__half> {
  using type = float;
};
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};
// The type a kernel accumulates in: float for half and bfloat16, the type itself otherwise.
template <typename T>
using acc_t = typename Acc<T>::type;

GNNFUSE_HOST_DEVICE float to_acc(float x) { return x; }
GNNFUSE_HOST_DEVICE double to_acc(double x) { return x; }
GNNFUSE_DEVICE float to_acc(__half x) { return __half2float(x); }
GNNFUSE_DEVICE float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
GNNFUSE_DEVICE T from_acc(acc_t<T> x) {
  return static_cast<T>(x);
}
template <>
GNNFUSE_DEVICE __half from_acc<__half>(float x) {
  return __float2half_rn(x);
}
template <>
GNNFUSE_DEVICE __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// ---------------------------------------------------------------- memory
// A read-only element as the accumulation type (through the read-only data cache).
template <typename T>
GNNFUSE_DEVICE acc_t<T> load(const T* p) {
  return to_acc(__ldg(p));
}
// An element of a buffer the kernel itself writes (no read-only cache).
template <typename T>
GNNFUSE_DEVICE acc_t<T> load_rw(const T* p) {
  return to_acc(*p);
}
template <typename T>
GNNFUSE_DEVICE void store(T* p, acc_t<T> v) {
  *p = from_acc<T>(v);
}

GNNFUSE_DEVICE void atomic_add(float* p, float v) { atomicAdd(p, v); }
GNNFUSE_DEVICE void atomic_add(double* p, double v) { atomicAdd(p, v); }
GNNFUSE_DEVICE void atomic_add(__half* p, float v) { atomicAdd(p, __float2half_rn(v)); }
GNNFUSE_DEVICE void atomic_add(__nv_bfloat16* p, float v) { atomicAdd(p, __float2bfloat16_rn(v)); }

// Elements of T per 128-bit load.
template <typename T>
constexpr int kVec128 = 16 / static_cast<int>(sizeof(T));

struct alignas(16) Bytes16 {
  unsigned int w[4];
};

// C columns of a row from column f0 (a tile), as the accumulation type, VW elements per load:
// VW = kVec128<T> loads 16 bytes at a time (the launch checked that the row and F allow it: F a
// multiple of VW, the base 16-byte aligned), VW = 1 loads elements. Columns at or past n read 0.
template <typename T, int C, int VW>
GNNFUSE_DEVICE void load_tile(acc_t<T> (&out)[C], const T* row, int64_t f0, int64_t n) {
  if constexpr (VW > 1) {
    static_assert(C % VW == 0 && VW * sizeof(T) == 16, "a vector is 16 bytes and the tile whole vectors");
    GNNFUSE_UNROLL
    for (int q = 0; q < C / VW; ++q) {
      const int64_t f = f0 + q * VW;
      Bytes16 b{};
      if (f < n) {
#if defined(__CUDACC__)
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(row + f));
        b.w[0] = u.x;
        b.w[1] = u.y;
        b.w[2] = u.z;
        b.w[3] = u.w;
#else
        std::memcpy(&b, row + f, sizeof b);
#endif
      }
#if defined(__CUDACC__)
      const T* e = reinterpret_cast<const T*>(&b);
#else
      // g++ (the SIMT emulator) optimizes under strict aliasing: the bytes are read as T through
      // memcpy, not through a T* into the Bytes16 (which read the zeros of b{} at -O2).
      T e[VW];
      std::memcpy(static_cast<void*>(e), &b, sizeof b);  // __half and __nv_bfloat16 are trivially copyable
#endif
      GNNFUSE_UNROLL
      for (int k = 0; k < VW; ++k) out[q * VW + k] = to_acc(e[k]);
    }
  } else {
    GNNFUSE_UNROLL
    for (int k = 0; k < C; ++k) out[k] = f0 + k < n ? load(row + f0 + k) : acc_t<T>(0);
  }
}

// ---------------------------------------------------------------- groups of lanes
// The lane's index in its group of G lanes (G a power of two up to 32) and the mask of the
// group's lanes in the warp.
GNNFUSE_DEVICE int group_lane(int G) { return static_cast<int>(threadIdx.x) & (G - 1); }
GNNFUSE_DEVICE unsigned group_mask(int G) {
  if (G >= 32) return 0xffffffffu;
  const int first = static_cast<int>(threadIdx.x & 31u) & ~(G - 1);
  return ((1u << G) - 1u) << first;
}

// A group's lanes each add `v` into ws[at] (at < 0: nothing), where each lane took one of a
// chunk of consecutive entries of a walk (lane q the chunk's q-th): lanes with the same position
// add in lane order, one round per rank among them, so every position's terms arrive in the
// walk's order, as the CPU kernel adds them (deterministic, bit for bit). One round where the
// positions differ (a row without duplicate columns). Every lane of `mask` calls it; a
// __syncwarp after each round orders the adds of this chunk before the next chunk's.
template <typename A>
GNNFUSE_DEVICE void ordered_add(A* ws, int64_t at, A v, unsigned mask) {
  const unsigned peers = __match_any_sync(mask, static_cast<long long>(at));
  const unsigned below = peers & ((1u << (threadIdx.x & 31u)) - 1u);
  const int rank = at < 0 ? 0 : __popc(below);
  for (int r = 0;; ++r) {
    if (at >= 0 && rank == r) ws[at] += v;
    __syncwarp(mask);
    if (!__any_sync(mask, rank > r)) break;
  }
}

template <typename A>
GNNFUSE_HOST_DEVICE A infinity();
template <>
GNNFUSE_HOST_DEVICE float infinity<float>() {
  return __builtin_huge_valf();
}
template <>
GNNFUSE_HOST_DEVICE double infinity<double>() {
  return __builtin_huge_val();
}

// max / min as std::max / std::min spell them, and keeping a NaN (the reductions' semantics).
template <typename A>
GNNFUSE_DEVICE A max_of(A a, A b) {
  return (a < b) ? b : a;
}
template <typename A>
GNNFUSE_DEVICE A min_of(A a, A b) {
  return (b < a) ? b : a;
}
template <typename A>
GNNFUSE_DEVICE A max_nan(A a, A b) {
  return a != a ? a : b != b ? b : max_of(a, b);
}
template <typename A>
GNNFUSE_DEVICE A min_nan(A a, A b) {
  return a != a ? a : b != b ? b : min_of(a, b);
}

// The sum (max, min) over the G lanes of the group, in every lane (a butterfly: the same
// additions in the same order for each, so every lane holds the same value).
template <typename A>
GNNFUSE_DEVICE A group_sum(A v, int G, unsigned mask) {
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, G);
  return v;
}
template <typename A>
GNNFUSE_DEVICE A group_max(A v, int G, unsigned mask) {
  for (int o = G / 2; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(mask, v, o, G));
  return v;
}
template <typename A>
GNNFUSE_DEVICE A group_min(A v, int G, unsigned mask) {
  for (int o = G / 2; o > 0; o >>= 1) v = min_nan(v, __shfl_xor_sync(mask, v, o, G));
  return v;
}

// Whether (b, at_b) replaces (a, at_a) as the max (kMax) or min of entries taken in CSR order,
// as the sequential kernel takes them: a NaN wins and stays, ties keep the first position; -1
// (no entry taken) only goes with the identity.
template <bool kMax, typename A>
GNNFUSE_DEVICE bool takes(A a, long long at_a, A b, long long at_b) {
  const bool nan_a = a != a;
  const bool nan_b = b != b;
  if (nan_a) return nan_b && at_b < at_a;
  return nan_b || (kMax ? b > a : b < a) || (b == a && at_b < at_a);
}
template <bool kMax, typename A>
GNNFUSE_DEVICE void group_arg(A& v, long long& at, int G, unsigned mask) {
  for (int o = G / 2; o > 0; o >>= 1) {
    const A v2 = __shfl_xor_sync(mask, v, o, G);
    const long long at2 = __shfl_xor_sync(mask, at, o, G);
    if (takes<kMax>(v, at, v2, at2)) {
      v = v2;
      at = at2;
    }
  }
}
// One sequential step of a max / min with its position (the CPU kernel's rule).
template <bool kMax, typename A>
GNNFUSE_DEVICE void arg_step(A& cur, long long& at, A v, long long pos) {
  const bool take = (kMax ? v > cur : v < cur) || (v != v && cur == cur);
  if (take) {
    cur = v;
    at = pos;
  }
}

// ---------------------------------------------------------------- nonzero-balanced kernels
// The row holding stored position p of a csr operand with row pointers ptr[0..rows]: the last
// r with ptr[r] <= p (rows without entries before it skipped).
template <typename I>
GNNFUSE_DEVICE int64_t row_of(const I* ptr, int64_t rows, int64_t p) {
  int64_t lo = 0, hi = rows;  // ptr[lo] <= p < ptr[hi] once p < ptr[rows]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(ptr[mid]) <= p) lo = mid;
    else hi = mid;
  }
  return lo;
}

// The position of `key` among the sorted indices idx[begin, end), -1 if absent (a locate).
template <typename I>
GNNFUSE_DEVICE int64_t find_sorted(const I* idx, int64_t begin, int64_t end, int64_t key) {
  while (begin < end) {
    const int64_t mid = begin + (end - begin) / 2;
    const int64_t v = static_cast<int64_t>(idx[mid]);
    if (v == key) return mid;
    if (v < key) begin = mid + 1;
    else end = mid;
  }
  return -1;
}

// ---------------------------------------------------------------- computed patterns
// The slots of a row's hash set in a pattern kernel (`symbolic S`, seed 002): a power of two at
// least twice the row's distinct columns, bounded by its product count `ub` and the column extent
// `n` (n < 0: unknown); 0 for a row without products. Host and device (the adapter sizes chunks).
GNNFUSE_HOST_DEVICE int64_t row_set_slots(int64_t ub, int64_t n) {
  if (ub <= 0) return 0;
  const int64_t most = n >= 0 && n < ub ? n : ub;
  int64_t c = 2;
  while (c < 2 * most) c *= 2;
  return c;
}

// The set of one row's output columns in a pattern kernel: open addressing with linear probing
// over `slots` (a power of two, row_set_slots) of the call's workspace, -1 for empty; one thread
// owns it. emit_sorted writes the distinct columns in increasing order (heap sort in place).
template <typename I>
struct RowSet {
  I* slot;
  int64_t slots;
  int64_t count;
  GNNFUSE_DEVICE RowSet(I* s, int64_t n) : slot(s), slots(n), count(0) {
    for (int64_t k = 0; k < n; ++k) slot[k] = I(-1);
  }
  GNNFUSE_DEVICE void insert(int64_t key) {
    const uint64_t mask = static_cast<uint64_t>(slots - 1);
    uint64_t h = (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 20;
    for (;;) {
      const int64_t at = static_cast<int64_t>(h & mask);
      const int64_t v = static_cast<int64_t>(slot[at]);
      if (v == key) return;
      if (v < 0) {
        slot[at] = static_cast<I>(key);
        ++count;
        return;
      }
      ++h;
    }
  }
  GNNFUSE_DEVICE void emit_sorted(I* out) const {
    int64_t n = 0;
    for (int64_t k = 0; k < slots; ++k)
      if (slot[k] >= I(0)) out[n++] = slot[k];
    auto sift = [&](int64_t root, int64_t end) {
      for (;;) {
        int64_t child = 2 * root + 1;
        if (child >= end) return;
        if (child + 1 < end && out[child] < out[child + 1]) ++child;
        if (!(out[root] < out[child])) return;
        const I t = out[root];
        out[root] = out[child];
        out[child] = t;
        root = child;
      }
    };
    for (int64_t r = n / 2 - 1; r >= 0; --r) sift(r, n);
    for (int64_t end = n - 1; end > 0; --end) {
      const I t = out[0];
      out[0] = out[end];
      out[end] = t;
      sift(0, end);
    }
  }
};

// The binned workspaces of the pattern kernels (seed 002; the adapter bins rows by their slots,
// cuda_adapter::computed_pattern): a short row's distinct columns (at most C) in a sorted list
// one thread holds in registers, a middle row's in a hash set in the block's shared memory, a
// long row's in a RowSet of the global table above.
//
// RowList: sorted ascending, the unused tail at the largest value (never a column); every access
// at a constant position (the loops unroll), so nvcc keeps it in registers. insert is O(C):
// compare all, then shift the larger entries one place right in one unrolled pass.
template <typename I, int C>
struct RowList {
  I v[C];
  int count;
  GNNFUSE_DEVICE RowList() : count(0) {
    GNNFUSE_UNROLL
    for (int k = 0; k < C; ++k) v[k] = list_end();
  }
  static GNNFUSE_DEVICE I list_end() { return static_cast<I>(~(static_cast<uint64_t>(1) << (8 * sizeof(I) - 1))); }
  GNNFUSE_DEVICE void insert(int64_t key64) {
    const I key = static_cast<I>(key64);
    bool seen = false;
    GNNFUSE_UNROLL
    for (int k = 0; k < C; ++k) seen |= v[k] == key;
    if (seen) return;
    GNNFUSE_DEVICE_CHECK(count < C, "gnnfuse: a pattern row's sorted list overflowed (the adapter's bins)");
    GNNFUSE_UNROLL
    for (int k = C - 1; k > 0; --k) v[k] = v[k - 1] > key ? v[k - 1] : (v[k] > key ? key : v[k]);
    v[0] = v[0] > key ? key : v[0];
    ++count;
  }
  GNNFUSE_DEVICE void emit_sorted(I* out) const {
    GNNFUSE_UNROLL
    for (int k = 0; k < C; ++k)
      if (k < count) out[k] = v[k];
  }
};

// The compare-and-swap of an index in shared memory (int32 or int64 bits).
GNNFUSE_DEVICE int32_t cas_index(int32_t* at, int32_t expected, int32_t desired) { return atomicCAS(at, expected, desired); }
GNNFUSE_DEVICE int64_t cas_index(int64_t* at, int64_t expected, int64_t desired) {
  return static_cast<int64_t>(atomicCAS(reinterpret_cast<unsigned long long*>(at), static_cast<unsigned long long>(expected),
                                        static_cast<unsigned long long>(desired)));
}

// SharedRowSet: the block's threads insert one row's columns into `slots` (a power of two,
// row_set_slots) of shared memory, open addressing by compare-and-swap (-1 empty); `counter` is
// a shared int. Every thread of the block constructs it and calls finish / emit_sorted (they
// synchronise): finish(sort) sorts the table in place if asked (bitonic, empty slots last:
// compared unsigned) and returns the row's size; emit_sorted copies the sorted columns out.
template <typename I>
struct SharedRowSet {
  I* slot;
  int64_t slots;
  int* counter;
  GNNFUSE_DEVICE SharedRowSet(I* s, int64_t n, int* c) : slot(s), slots(n), counter(c) {
    __syncthreads();  // the block's previous row is written out
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) slot[k] = I(-1);
    if (threadIdx.x == 0) *counter = 0;
    __syncthreads();
  }
  GNNFUSE_DEVICE void insert(int64_t key) {
    const uint64_t mask = static_cast<uint64_t>(slots - 1);
    uint64_t h = (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 20;
    for (;;) {
      const I old = cas_index(slot + (h & mask), I(-1), static_cast<I>(key));
      if (old == I(-1)) {
        atomicAdd(counter, 1);
        return;
      }
      if (static_cast<int64_t>(old) == key) return;
      ++h;
    }
  }
  GNNFUSE_DEVICE int64_t finish(bool sort) {
    using U = typename std::conditional<sizeof(I) == 4, uint32_t, uint64_t>::type;
    __syncthreads();
    for (int64_t k = 2; sort && k <= slots; k <<= 1)
      for (int64_t j = k >> 1; j > 0; j >>= 1) {
        for (int64_t t = threadIdx.x; t < slots; t += blockDim.x) {
          const int64_t u = t ^ j;
          if (u <= t) continue;
          const U a = static_cast<U>(slot[t]), b = static_cast<U>(slot[u]);
          if ((a > b) == ((t & k) == 0)) {
            slot[t] = static_cast<I>(b);
            slot[u] = static_cast<I>(a);
          }
        }
        __syncthreads();
      }
    return *counter;  // (reset only after the next row's first barrier)
  }
  GNNFUSE_DEVICE void emit_sorted(I* out, int64_t n) const {
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) out[k] = slot[k];
  }
};

// DenseRowSet: the block's threads set one row's columns as bits of `words` 32-bit flags in
// global memory (atomicOr); `scan` is kPatternBlock + 1 shared int64. Every thread of the block
// constructs it and calls finish / emit_sorted (they synchronise): finish counts the set bits of
// each thread's contiguous run of words, scans the counts over the block and returns the row's
// size; emit_sorted writes each thread's columns at its offset, in increasing order.
struct DenseRowSet {
  uint32_t* bits;
  int64_t words;
  int64_t* scan;
  int64_t w0 = 0, w1 = 0, start = 0;
  GNNFUSE_DEVICE DenseRowSet(uint32_t* b, int64_t n, int64_t* s) : bits(b), words(n), scan(s) {
    __syncthreads();  // the block's previous row is written out
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) bits[k] = 0u;
    __syncthreads();
  }
  GNNFUSE_DEVICE void insert(int64_t key) { atomicOr(bits + (key >> 5), 1u << static_cast<unsigned>(key & 31)); }
  GNNFUSE_DEVICE int64_t finish(bool) {
    __syncthreads();
    const int64_t per = (words + blockDim.x - 1) / blockDim.x;
    w0 = static_cast<int64_t>(threadIdx.x) * per;
    w0 = w0 < words ? w0 : words;
    w1 = w0 + per < words ? w0 + per : words;
    int64_t c = 0;
    for (int64_t w = w0; w < w1; ++w) c += __popc(bits[w]);
    scan[threadIdx.x + 1] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
      scan[0] = 0;
      for (unsigned t = 1; t <= blockDim.x; ++t) scan[t] += scan[t - 1];
    }
    __syncthreads();
    start = scan[threadIdx.x];
    return scan[blockDim.x];
  }
  template <typename I>
  GNNFUSE_DEVICE void emit_sorted(I* out, int64_t) const {
    int64_t at = start;
    for (int64_t w = w0; w < w1; ++w)
      for (uint32_t v = bits[w]; v != 0u; v &= v - 1u) out[at++] = static_cast<I>(w * 32 + (__ffs(static_cast<int>(v)) - 1));
  }
};

// The segmented reduction of a warp over C columns: row[l] is the row of lane l's entry,
// non-decreasing across the live lanes (dead lanes carry distinct negative keys). Afterwards the
// head lane of each run of equal rows holds the run's sums (suffix sums within the run).
template <typename A, int C>
GNNFUSE_DEVICE void segment_sums(A (&v)[C], long long row, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const long long r2 = __shfl_down_sync(0xffffffffu, row, o);
    GNNFUSE_UNROLL
    for (int k = 0; k < C; ++k) {
      const A v2 = __shfl_down_sync(0xffffffffu, v[k], o);
      if (lane + o < 32 && r2 == row) v[k] += v2;
    }
  }
}

// ---------------------------------------------------------------- element-wise functions
// The cuda column of the function table (codegen/builtins.cpp) spells them with these.
GNNFUSE_DEVICE float exp_acc(float x) { return expf(x); }
GNNFUSE_DEVICE double exp_acc(double x) { return exp(x); }
GNNFUSE_DEVICE float log_acc(float x) { return logf(x); }
GNNFUSE_DEVICE double log_acc(double x) { return log(x); }
GNNFUSE_DEVICE float tanh_acc(float x) { return tanhf(x); }
GNNFUSE_DEVICE double tanh_acc(double x) { return tanh(x); }
GNNFUSE_DEVICE float pow_acc(float x, float p) { return powf(x, p); }
GNNFUSE_DEVICE double pow_acc(double x, double p) { return pow(x, p); }

// runtime::DType's value of a device type (what Env::matmul receives).
template <typename T>
constexpr int dtype_code();
template <>
constexpr int dtype_code<float>() {
  return 0;
}
template <>
constexpr int dtype_code<double>() {
  return 1;
}
template <>
constexpr int dtype_code<__nv_bfloat16>() {
  return 2;
}
template <>
constexpr int dtype_code<__half>() {
  return 3;
}

// ---------------------------------------------------------------- fills
template <typename T>
GNNFUSE_GLOBAL void fill_kernel(T* p, int64_t n, T value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < n; x += stride) p[x] = value;
}
// p[0, n) = value on the stream, from the host.
template <typename T>
inline void fill(T* p, int64_t n, T value, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
  GNNFUSE_LAUNCH(fill_kernel<T>, dim3(grid), dim3(256), 0, stream, p, n, value);
}

}  // namespace gnnfuse::cuda
