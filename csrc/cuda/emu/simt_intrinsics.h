// CUDA's own device names for g++ (part of simt_emu.h; included at its end): built-in
// variables, barriers, warp collectives, atomics and the intrinsics kernel text uses.
// Signatures follow the CUDA C++ Programming Guide; the call site (file, line) travels with
// every synchronising call through __builtin_FILE/__builtin_LINE default arguments so that
// errors can name it.
#pragma once

#include <cmath>
#include <cstring>

// ---------------------------------------------------------------- built-in variables
#define threadIdx (::gnnfuse::simt::detail::thread_info().thread_idx)
#define blockIdx (::gnnfuse::simt::detail::block_info().block_idx)
#define blockDim (::gnnfuse::simt::detail::block_info().block_dim)
#define gridDim (::gnnfuse::simt::detail::block_info().grid_dim)
inline constexpr int warpSize = 32;

#define GNNFUSE_SIMT_SITE const char *gnnfuse_file = __builtin_FILE(), int gnnfuse_line = __builtin_LINE()
#define GNNFUSE_SIMT_AT gnnfuse_file, gnnfuse_line

// ---------------------------------------------------------------- block barriers
inline void __syncthreads(GNNFUSE_SIMT_SITE) {
  ::gnnfuse::simt::detail::barrier(::gnnfuse::simt::detail::BarrierKind::plain, 1, GNNFUSE_SIMT_AT);
}
inline int __syncthreads_count(int predicate, GNNFUSE_SIMT_SITE) {
  return ::gnnfuse::simt::detail::barrier(::gnnfuse::simt::detail::BarrierKind::count, predicate,
                                          GNNFUSE_SIMT_AT);
}
inline int __syncthreads_and(int predicate, GNNFUSE_SIMT_SITE) {
  return ::gnnfuse::simt::detail::barrier(::gnnfuse::simt::detail::BarrierKind::all, predicate,
                                          GNNFUSE_SIMT_AT);
}
inline int __syncthreads_or(int predicate, GNNFUSE_SIMT_SITE) {
  return ::gnnfuse::simt::detail::barrier(::gnnfuse::simt::detail::BarrierKind::any, predicate,
                                          GNNFUSE_SIMT_AT);
}

// ---------------------------------------------------------------- warp collectives
inline void __syncwarp(unsigned mask = 0xffffffffu, GNNFUSE_SIMT_SITE) {
  ::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::syncwarp, mask, 0, 32, 0,
                                       nullptr, nullptr, GNNFUSE_SIMT_AT});
}
inline unsigned __ballot_sync(unsigned mask, int predicate, GNNFUSE_SIMT_SITE) {
  return ::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::ballot, mask,
                                              predicate, 32, 0, nullptr, nullptr, GNNFUSE_SIMT_AT});
}
inline int __any_sync(unsigned mask, int predicate, GNNFUSE_SIMT_SITE) {
  return int(::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::any, mask,
                                                  predicate, 32, 0, nullptr, nullptr, GNNFUSE_SIMT_AT}));
}
inline int __all_sync(unsigned mask, int predicate, GNNFUSE_SIMT_SITE) {
  return int(::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::all, mask,
                                                  predicate, 32, 0, nullptr, nullptr, GNNFUSE_SIMT_AT}));
}
// The lanes of the mask whose value equals the caller's (CUDA's overloads: 32- and 64-bit
// integers, float, double; compared as bytes, as match.any.sync compares bits).
#define GNNFUSE_SIMT_MATCH(T)                                                                       \
  inline unsigned __match_any_sync(unsigned mask, T value, GNNFUSE_SIMT_SITE) {                  \
    return ::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::match_any, mask, \
                                                0, 32, unsigned(sizeof(T)), &value, nullptr,    \
                                                GNNFUSE_SIMT_AT});                                \
  }
GNNFUSE_SIMT_MATCH(int)
GNNFUSE_SIMT_MATCH(unsigned int)
GNNFUSE_SIMT_MATCH(long)
GNNFUSE_SIMT_MATCH(unsigned long)
GNNFUSE_SIMT_MATCH(long long)
GNNFUSE_SIMT_MATCH(unsigned long long)
GNNFUSE_SIMT_MATCH(float)
GNNFUSE_SIMT_MATCH(double)
#undef GNNFUSE_SIMT_MATCH
// The lanes of the warp that reach this call together: those waiting at the same __activemask
// once every other live lane of the warp waits somewhere else (the emulator's convergence).
inline unsigned __activemask(GNNFUSE_SIMT_SITE) {
  return ::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::activemask, 0, 0,
                                              32, 0, nullptr, nullptr, GNNFUSE_SIMT_AT});
}

// Shuffles: one overload per type CUDA has (the same overload resolution as nvcc's).
#define GNNFUSE_SIMT_SHUFFLES(T)                                                                 \
  inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, GNNFUSE_SIMT_SITE) { \
    return ::gnnfuse::simt::detail::shuffle(::gnnfuse::simt::detail::Collective::shfl_idx, mask, var, \
                                            srcLane, width, GNNFUSE_SIMT_AT);                    \
  }                                                                                              \
  inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,            \
                          GNNFUSE_SIMT_SITE) {                                                   \
    return ::gnnfuse::simt::detail::shuffle(::gnnfuse::simt::detail::Collective::shfl_up, mask, var, \
                                            int(delta), width, GNNFUSE_SIMT_AT);                 \
  }                                                                                              \
  inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,          \
                            GNNFUSE_SIMT_SITE) {                                                 \
    return ::gnnfuse::simt::detail::shuffle(::gnnfuse::simt::detail::Collective::shfl_down, mask,   \
                                            var, int(delta), width, GNNFUSE_SIMT_AT);            \
  }                                                                                              \
  inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,             \
                           GNNFUSE_SIMT_SITE) {                                                  \
    return ::gnnfuse::simt::detail::shuffle(::gnnfuse::simt::detail::Collective::shfl_xor, mask, var, \
                                            laneMask, width, GNNFUSE_SIMT_AT);                   \
  }
GNNFUSE_SIMT_SHUFFLES(int)
GNNFUSE_SIMT_SHUFFLES(unsigned int)
GNNFUSE_SIMT_SHUFFLES(long)
GNNFUSE_SIMT_SHUFFLES(unsigned long)
GNNFUSE_SIMT_SHUFFLES(long long)
GNNFUSE_SIMT_SHUFFLES(unsigned long long)
GNNFUSE_SIMT_SHUFFLES(float)
GNNFUSE_SIMT_SHUFFLES(double)
GNNFUSE_SIMT_SHUFFLES(__half)
GNNFUSE_SIMT_SHUFFLES(__half2)
GNNFUSE_SIMT_SHUFFLES(__nv_bfloat16)
GNNFUSE_SIMT_SHUFFLES(__nv_bfloat162)
#undef GNNFUSE_SIMT_SHUFFLES

// ---------------------------------------------------------------- Tensor Cores
// The gnnfuse_mma_* wrappers of cuda/simt.cuh (PTX mma.sync.aligned ... .row.col, f32
// accumulators): a collective of the whole warp (every lane at the same call site), which
// gathers every lane's fragments by the layouts of the PTX ISA and computes D = A B + C in
// float (cuda/emu/mma.cpp; docs/SIMT.md says what matches a GPU bit for bit).
#define GNNFUSE_SIMT_MMA(name, kind)                                                              \
  inline void name(float d[4], const unsigned a[4], const unsigned b[2], const float c[4],        \
                   GNNFUSE_SIMT_SITE) {                                                           \
    const ::gnnfuse::simt::detail::MmaOperands operands{a, b, c};                                 \
    ::gnnfuse::simt::detail::collective({::gnnfuse::simt::detail::Collective::kind, 0xffffffffu, 0, \
                                         32, 0, &operands, d, GNNFUSE_SIMT_AT});                  \
  }
GNNFUSE_SIMT_MMA(gnnfuse_mma_m16n8k16_f16f32, mma_m16n8k16_f16f32)
GNNFUSE_SIMT_MMA(gnnfuse_mma_m16n8k16_bf16f32, mma_m16n8k16_bf16f32)
GNNFUSE_SIMT_MMA(gnnfuse_mma_m16n8k8_tf32f32, mma_m16n8k8_tf32f32)
GNNFUSE_SIMT_MMA(gnnfuse_mma_m16n8k8_f16f32, mma_m16n8k8_f16f32)  // (a[0..1] and b[0] read)
GNNFUSE_SIMT_MMA(gnnfuse_mma_m16n8k8_bf16f32, mma_m16n8k8_bf16f32)
#undef GNNFUSE_SIMT_MMA

// ldmatrix (a collective of the whole warp at one call site, as mma) and cp.async (per thread:
// a copy lands in shared memory only at the cp.async.wait_group that covers its group, so a
// missing wait reads what was there before). cuda/emu/block.cpp, mma.cpp; docs/SIMT.md.
inline void gnnfuse_ldmatrix_x4(unsigned r[4], const void* row, GNNFUSE_SIMT_SITE) {
  ::gnnfuse::simt::detail::ldmatrix(false, r, row, GNNFUSE_SIMT_AT);
}
inline void gnnfuse_ldmatrix_x4_trans(unsigned r[4], const void* row, GNNFUSE_SIMT_SITE) {
  ::gnnfuse::simt::detail::ldmatrix(true, r, row, GNNFUSE_SIMT_AT);
}
inline void gnnfuse_cp_async16(void* smem, const void* gmem, int src_bytes, GNNFUSE_SIMT_SITE) {
  ::gnnfuse::simt::detail::cp_async(smem, gmem, src_bytes, GNNFUSE_SIMT_AT);
}
inline void gnnfuse_cp_async_commit() { ::gnnfuse::simt::detail::cp_async_commit(); }
template <int N>
inline void gnnfuse_cp_async_wait() {
  static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
  ::gnnfuse::simt::detail::cp_async_wait(N);
}
// A plain load of shared memory a cp.async may have staged: checked in the block's shared memory
// and aligned to its size (MisalignedAddress), and that no copy still queued (any thread's) and
// no copy another thread landed without a barrier since covers its bytes (UnpublishedRead).
template <class T>
inline T gnnfuse_ld_staged(const T* p, GNNFUSE_SIMT_SITE) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "gnnfuse_ld_staged: a load of 1, 2, 4, 8 or 16 bytes");
  ::gnnfuse::simt::detail::staged_read(p, sizeof(T), GNNFUSE_SIMT_AT);
  T v;
  std::memcpy(static_cast<void*>(&v), static_cast<const void*>(p), sizeof(T));
  return v;
}
inline uint4 gnnfuse_ld_staged16(const void* p, GNNFUSE_SIMT_SITE) {
  ::gnnfuse::simt::detail::staged_read(p, 16, GNNFUSE_SIMT_AT);
  uint4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ---------------------------------------------------------------- memory
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---------------------------------------------------------------- atomics
// Real atomics (blocks run concurrently), sequentially consistent; floating types by a
// compare-and-swap loop on their bytes.
namespace gnnfuse::simt::detail {
template <class T, class F>
inline T atomic_update(T* address, F update) {
  atomic_point();
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = update(old);
  while (!__atomic_compare_exchange(address, &old, &desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    desired = update(old);
  return old;
}
}  // namespace gnnfuse::simt::detail

#define GNNFUSE_SIMT_FETCH(name, builtin, T) \
  inline T name(T* address, T val) {                                                \
    ::gnnfuse::simt::detail::atomic_point();                                       \
    return builtin(address, val, __ATOMIC_SEQ_CST);                                \
  }
#define GNNFUSE_SIMT_INTEGER_ATOMICS(T)                    \
  GNNFUSE_SIMT_FETCH(atomicAdd, __atomic_fetch_add, T)     \
  GNNFUSE_SIMT_FETCH(atomicSub, __atomic_fetch_sub, T)     \
  GNNFUSE_SIMT_FETCH(atomicAnd, __atomic_fetch_and, T)     \
  GNNFUSE_SIMT_FETCH(atomicOr, __atomic_fetch_or, T)       \
  GNNFUSE_SIMT_FETCH(atomicXor, __atomic_fetch_xor, T)     \
  GNNFUSE_SIMT_FETCH(atomicExch, __atomic_exchange_n, T)
GNNFUSE_SIMT_INTEGER_ATOMICS(int)
GNNFUSE_SIMT_INTEGER_ATOMICS(unsigned int)
GNNFUSE_SIMT_INTEGER_ATOMICS(unsigned long long)
#undef GNNFUSE_SIMT_INTEGER_ATOMICS
#undef GNNFUSE_SIMT_FETCH

#define GNNFUSE_SIMT_MIN_MAX(T)                                                              \
  inline T atomicMax(T* address, T val) {                                                    \
    return ::gnnfuse::simt::detail::atomic_update(address, [val](T o) { return o < val ? val : o; }); \
  }                                                                                          \
  inline T atomicMin(T* address, T val) {                                                    \
    return ::gnnfuse::simt::detail::atomic_update(address, [val](T o) { return val < o ? val : o; }); \
  }
GNNFUSE_SIMT_MIN_MAX(int)
GNNFUSE_SIMT_MIN_MAX(unsigned int)
GNNFUSE_SIMT_MIN_MAX(long long)
GNNFUSE_SIMT_MIN_MAX(unsigned long long)
#undef GNNFUSE_SIMT_MIN_MAX

#define GNNFUSE_SIMT_ADD(T)                                                                  \
  inline T atomicAdd(T* address, T val) {                                                    \
    return ::gnnfuse::simt::detail::atomic_update(address, [val](T o) { return o + val; });  \
  }
GNNFUSE_SIMT_ADD(float)
GNNFUSE_SIMT_ADD(double)
GNNFUSE_SIMT_ADD(__half)
GNNFUSE_SIMT_ADD(__half2)
GNNFUSE_SIMT_ADD(__nv_bfloat16)
GNNFUSE_SIMT_ADD(__nv_bfloat162)
#undef GNNFUSE_SIMT_ADD

inline float atomicExch(float* address, float val) {
  ::gnnfuse::simt::detail::atomic_point();
  float old;
  __atomic_exchange(address, &val, &old, __ATOMIC_SEQ_CST);
  return old;
}
#define GNNFUSE_SIMT_CAS(T)                                                                    \
  inline T atomicCAS(T* address, T compare, T val) {                                           \
    ::gnnfuse::simt::detail::atomic_point();                                                   \
    __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return compare;                                                                            \
  }
GNNFUSE_SIMT_CAS(int)
GNNFUSE_SIMT_CAS(unsigned int)
GNNFUSE_SIMT_CAS(unsigned long long)
GNNFUSE_SIMT_CAS(unsigned short)
#undef GNNFUSE_SIMT_CAS
inline unsigned atomicInc(unsigned* address, unsigned val) {
  return ::gnnfuse::simt::detail::atomic_update(address, [val](unsigned o) { return o >= val ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* address, unsigned val) {
  return ::gnnfuse::simt::detail::atomic_update(
      address, [val](unsigned o) { return (o == 0 || o > val) ? val : o - 1; });
}

// ---------------------------------------------------------------- integer and bit intrinsics
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(unsigned(x))) << 32) | __brev(unsigned(x >> 32));
}

namespace gnnfuse::simt::detail {
template <class To, class From>
inline To bits(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}
}  // namespace gnnfuse::simt::detail
inline int __float_as_int(float x) { return ::gnnfuse::simt::detail::bits<int>(x); }
inline unsigned __float_as_uint(float x) { return ::gnnfuse::simt::detail::bits<unsigned>(x); }
inline float __int_as_float(int x) { return ::gnnfuse::simt::detail::bits<float>(x); }
inline float __uint_as_float(unsigned x) { return ::gnnfuse::simt::detail::bits<float>(x); }
// cvt.rna.tf32.f32: to nearest, ties away from zero, on the 10 mantissa bits tf32 keeps (the low 13
// bits of the result are zero); infinities and NaNs pass unchanged (a NaN's payload may differ on a GPU).
inline unsigned gnnfuse_cvt_rna_tf32(float x) {
  const unsigned u = ::gnnfuse::simt::detail::bits<unsigned>(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
}
inline long long __double_as_longlong(double x) { return ::gnnfuse::simt::detail::bits<long long>(x); }
inline double __longlong_as_double(long long x) { return ::gnnfuse::simt::detail::bits<double>(x); }

// ---------------------------------------------------------------- float intrinsics
// The fast-math intrinsics are the correctly rounded CPU functions here (the GPU's differ in
// the last bits: compare with tolerances).
inline float __fdividef(float x, float y) { return x / y; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline double __fma_rn(double x, double y, double z) { return std::fma(x, y, z); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// Half-precision fused multiply-add (device-only in CUDA's headers): the float fma rounded to
// the type (a double rounding the GPU does not have; it can differ in the last bit).
inline __half __hfma(const __half a, const __half b, const __half c) {
  return __float2half_rn(std::fma(__half2float(a), __half2float(b), __half2float(c)));
}
inline __nv_bfloat16 __hfma(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
  return __float2bfloat16_rn(std::fma(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}

// CUDA's min/max overloads for device code (same-type ones).
#define GNNFUSE_SIMT_MIN_MAX(T)                        \
  inline T min(T a, T b) { return b < a ? b : a; }     \
  inline T max(T a, T b) { return a < b ? b : a; }
GNNFUSE_SIMT_MIN_MAX(int)
GNNFUSE_SIMT_MIN_MAX(unsigned int)
GNNFUSE_SIMT_MIN_MAX(long)
GNNFUSE_SIMT_MIN_MAX(unsigned long)
GNNFUSE_SIMT_MIN_MAX(long long)
GNNFUSE_SIMT_MIN_MAX(unsigned long long)
#undef GNNFUSE_SIMT_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

inline void __nanosleep(unsigned) {}

#undef GNNFUSE_SIMT_AT
#undef GNNFUSE_SIMT_SITE
