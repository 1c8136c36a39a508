// The Tensor-Core fragments of the generated Tensor-Core SpMM kernels (codegen/cuda_tensor_cores.cpp
// prints one per form of entry values; the view they walk: cuda/tc_spmm.h). One text for nvcc and
// for the SIMT emulator (cuda/simt.cuh): the mma wrappers there follow the PTX ISA's fragment
// layouts, which the fragments below are built by (groupID g = lane / 4, threadID_in_group m = lane % 4):
//   m16n8k16 (f16, bf16), A 16 x 16 row-major: a0 = (g, 2m | 2m+1), a1 = (g+8, 2m | 2m+1),
//     a2 = (g, 2m+8 | 2m+9), a3 = (g+8, 2m+8 | 2m+9) (two 16-bit values per register, the lower
//     column in the low half); B 16 x 8: b0 = (2m | 2m+1, g), b1 = (2m+8 | 2m+9, g);
//   m16n8k8 (tf32), A 16 x 8: a0 = (g, m), a1 = (g+8, m), a2 = (g, m+4), a3 = (g+8, m+4);
//     B 8 x 8: b0 = (m, g), b1 = (m+4, g);
//   C, D 16 x 8 (f32): c0 = (g, 2m), c1 = (g, 2m+1), c2 = (g+8, 2m), c3 = (g+8, 2m+1).
// A warp's tiles: the A tile (16 x K floats: the summed entry values of one block of the view,
// rounded to T when the fragments are built) and the B tile (K x NT * 8 of T: the block's rows of
// x), both in shared memory; the accumulators acc[NT][4] (fp32) in registers.
#pragma once

#include <cstring>
#include <type_traits>

#include "cuda/device_runtime.cuh"
#include "cuda/tc_spmm.h"

namespace gnnfuse::cuda {

template <typename T>
struct TcMma;
template <>
struct TcMma<__half> {
  static constexpr int K = 16;
};
template <>
struct TcMma<__nv_bfloat16> {
  static constexpr int K = 16;
};
template <>
struct TcMma<float> {
  static constexpr int K = 8;
};

template <typename T>
GNNFUSE_DEVICE unsigned tc_raw16(T v) {
  unsigned short r;
  memcpy(&r, &v, sizeof(r));
  return r;
}
GNNFUSE_DEVICE unsigned tc_pack(__half lo, __half hi) { return tc_raw16(lo) | (tc_raw16(hi) << 16); }
GNNFUSE_DEVICE unsigned tc_pack(__nv_bfloat16 lo, __nv_bfloat16 hi) { return tc_raw16(lo) | (tc_raw16(hi) << 16); }

// The fragments of one block and the mma over NT column tiles: f16 / bf16 on m16n8k16.
template <typename T, int NT>
GNNFUSE_DEVICE void tc_block_mma(float (&acc)[NT][4], const float* at, const T* bt, int lane) {
  constexpr int K = 16, W = NT * 8;
  const int g = lane >> 2, m = lane & 3;
  unsigned a[4];  // the A tile's floats rounded to T (from_acc)
  a[0] = tc_pack(from_acc<T>(at[g * K + 2 * m]), from_acc<T>(at[g * K + 2 * m + 1]));
  a[1] = tc_pack(from_acc<T>(at[(g + 8) * K + 2 * m]), from_acc<T>(at[(g + 8) * K + 2 * m + 1]));
  a[2] = tc_pack(from_acc<T>(at[g * K + 2 * m + 8]), from_acc<T>(at[g * K + 2 * m + 9]));
  a[3] = tc_pack(from_acc<T>(at[(g + 8) * K + 2 * m + 8]), from_acc<T>(at[(g + 8) * K + 2 * m + 9]));
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; ++t) {
    const int c = t * 8 + g;
    unsigned b[2];
    b[0] = tc_pack(bt[(2 * m) * W + c], bt[(2 * m + 1) * W + c]);
    b[1] = tc_pack(bt[(2 * m + 8) * W + c], bt[(2 * m + 9) * W + c]);
    if constexpr (std::is_same_v<T, __half>)
      gnnfuse_mma_m16n8k16_f16f32(acc[t], a, b, acc[t]);
    else
      gnnfuse_mma_m16n8k16_bf16f32(acc[t], a, b, acc[t]);
  }
}

// tf32 on m16n8k8 (both operands rounded to nearest by cvt.rna).
template <typename T, int NT>
GNNFUSE_DEVICE void tc_block_mma_tf32(float (&acc)[NT][4], const float* at, const float* bt, int lane) {
  constexpr int K = 8, W = NT * 8;
  const int g = lane >> 2, m = lane & 3;
  unsigned a[4];
  a[0] = gnnfuse_cvt_rna_tf32(at[g * K + m]);
  a[1] = gnnfuse_cvt_rna_tf32(at[(g + 8) * K + m]);
  a[2] = gnnfuse_cvt_rna_tf32(at[g * K + m + 4]);
  a[3] = gnnfuse_cvt_rna_tf32(at[(g + 8) * K + m + 4]);
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; ++t) {
    const int c = t * 8 + g;
    unsigned b[2];
    b[0] = gnnfuse_cvt_rna_tf32(bt[m * W + c]);
    b[1] = gnnfuse_cvt_rna_tf32(bt[(m + 4) * W + c]);
    gnnfuse_mma_m16n8k8_tf32f32(acc[t], a, b, acc[t]);
  }
}

// The mma of one block: acc[t] += A tile x the B tile's columns t * 8 .. t * 8 + 8 (tf32 for float).
template <typename T, int NT>
GNNFUSE_DEVICE void tc_mma(float (&acc)[NT][4], const float* at, const T* bt, int lane) {
  if constexpr (std::is_same_v<T, float>)
    tc_block_mma_tf32<T, NT>(acc, at, bt, lane);
  else
    tc_block_mma<T, NT>(acc, at, bt, lane);
}

// Zeroes a warp's A tile (16 x K) between two barriers of the warp: the previous block's
// fragments are read before, the zeros seen by every lane after.
template <int K>
GNNFUSE_DEVICE void tc_clear_tile(float* at, int lane) {
  __syncwarp();
  for (int i = lane; i < 16 * K; i += 32) at[i] = 0.f;
  __syncwarp();
}

}  // namespace gnnfuse::cuda
