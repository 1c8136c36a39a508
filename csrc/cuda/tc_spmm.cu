// The Tensor-Core SpMM kernel (tc_spmm.h has the view it walks). One text for nvcc and for the
// SIMT emulator (cuda/simt.cuh): the mma wrappers there follow the PTX ISA's fragment layouts,
// which the fragments below are built by (groupID g = lane / 4, threadID_in_group m = lane % 4):
//   m16n8k16 (f16, bf16), A 16 x 16 row-major: a0 = (g, 2m | 2m+1), a1 = (g+8, 2m | 2m+1),
//     a2 = (g, 2m+8 | 2m+9), a3 = (g+8, 2m+8 | 2m+9) (two 16-bit values per register, the lower
//     column in the low half); B 16 x 8: b0 = (2m | 2m+1, g), b1 = (2m+8 | 2m+9, g);
//   m16n8k8 (tf32), A 16 x 8: a0 = (g, m), a1 = (g+8, m), a2 = (g, m+4), a3 = (g+8, m+4);
//     B 8 x 8: b0 = (m, g), b1 = (m+4, g);
//   C, D 16 x 8 (f32): c0 = (g, 2m), c1 = (g, 2m+1), c2 = (g+8, 2m), c3 = (g+8, 2m+1).
#include "cuda/tc_spmm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "cuda/device_runtime.cuh"

namespace gnnfuse::cuda {

namespace {

constexpr int kTcWarps = 4;  // warps per block, each on its own (window, column slab)

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
GNNFUSE_DEVICE unsigned raw16(T v) {
  unsigned short r;
  memcpy(&r, &v, sizeof(r));
  return r;
}
GNNFUSE_DEVICE unsigned pack(__half lo, __half hi) { return raw16(lo) | (raw16(hi) << 16); }
GNNFUSE_DEVICE unsigned pack(__nv_bfloat16 lo, __nv_bfloat16 hi) { return raw16(lo) | (raw16(hi) << 16); }

// The fragments of one block and the mma over NT column tiles: f16 / bf16 on m16n8k16.
template <typename T, int NT>
GNNFUSE_DEVICE void block_mma(float (&acc)[NT][4], const float* at, const T* bt, int lane) {
  constexpr int K = 16, W = NT * 8;
  const int g = lane >> 2, m = lane & 3;
  unsigned a[4];  // the A tile's floats rounded to T (from_acc)
  a[0] = pack(from_acc<T>(at[g * K + 2 * m]), from_acc<T>(at[g * K + 2 * m + 1]));
  a[1] = pack(from_acc<T>(at[(g + 8) * K + 2 * m]), from_acc<T>(at[(g + 8) * K + 2 * m + 1]));
  a[2] = pack(from_acc<T>(at[g * K + 2 * m + 8]), from_acc<T>(at[g * K + 2 * m + 9]));
  a[3] = pack(from_acc<T>(at[(g + 8) * K + 2 * m + 8]), from_acc<T>(at[(g + 8) * K + 2 * m + 9]));
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; ++t) {
    const int c = t * 8 + g;
    unsigned b[2];
    b[0] = pack(bt[(2 * m) * W + c], bt[(2 * m + 1) * W + c]);
    b[1] = pack(bt[(2 * m + 8) * W + c], bt[(2 * m + 9) * W + c]);
    if constexpr (std::is_same_v<T, __half>)
      gnnfuse_mma_m16n8k16_f16f32(acc[t], a, b, acc[t]);
    else
      gnnfuse_mma_m16n8k16_bf16f32(acc[t], a, b, acc[t]);
  }
}

// tf32 on m16n8k8 (both operands rounded to nearest by cvt.rna).
template <typename T, int NT>
GNNFUSE_DEVICE void block_mma_tf32(float (&acc)[NT][4], const float* at, const float* bt, int lane) {
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

template <typename T>
GNNFUSE_DEVICE float entry_value(const TcSpmmArgs& p, int32_t e) {
  float v = 1.f;
  GNNFUSE_UNROLL
  for (int i = 0; i < 3; ++i)
    if (p.values[i]) v *= to_acc(static_cast<const T*>(p.values[i])[e]);
  return v;
}

template <typename T, int NT>
GNNFUSE_GLOBAL void __launch_bounds__(kTcWarps * 32, 1) tc_spmm_kernel(TcSpmmArgs p, int64_t slabs) {
  constexpr int K = TcMma<T>::K, W = NT * 8;
  GNNFUSE_SHARED_ARRAY(float, a_tiles, kTcWarps * 16 * K);
  GNNFUSE_SHARED_ARRAY(T, b_tiles, kTcWarps * K * W);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float* at = a_tiles + warp * 16 * K;
  T* bt = b_tiles + warp * K * W;
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const int64_t units = p.windows * slabs;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kTcWarps + warp; u < units; u += static_cast<int64_t>(gridDim.x) * kTcWarps) {
    const int64_t w = u / slabs, f0 = (u % slabs) * W;
    float acc[NT][4];
    GNNFUSE_UNROLL
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    const int32_t b_end = __ldg(p.block_ptr + w + 1);
    for (int32_t b = __ldg(p.block_ptr + w); b < b_end; ++b) {
      __syncwarp();  // the previous block's fragments are read
      for (int i = lane; i < 16 * K; i += 32) at[i] = 0.f;
      __syncwarp();
      // The A tile: the first entry of each run of one place sums the run (duplicate edges).
      const int32_t lo = __ldg(p.entry_ptr + b), hi = __ldg(p.entry_ptr + b + 1);
      for (int32_t k = lo + lane; k < hi; k += 32) {
        const int place = __ldg(p.entry_place + k);
        if (k > lo && __ldg(p.entry_place + k - 1) == place) continue;
        float v = 0.f;
        for (int32_t q = k; q < hi && __ldg(p.entry_place + q) == place; ++q) v += entry_value<T>(p, __ldg(p.entry_src + q));
        at[place] = v;
      }
      // The B tile: the block's K rows of x, columns f0 .. f0 + W (zero past f and for padding).
      for (int i = lane; i < K * W; i += 32) {
        const int r = i / W, c = i % W;
        const int32_t src = __ldg(p.block_cols + static_cast<int64_t>(b) * K + r);
        bt[i] = (src >= 0 && f0 + c < p.f) ? __ldg(x + static_cast<int64_t>(src) * p.f + f0 + c) : from_acc<T>(0.f);
      }
      __syncwarp();
      if constexpr (std::is_same_v<T, float>)
        block_mma_tf32<T, NT>(acc, at, bt, lane);
      else
        block_mma<T, NT>(acc, at, bt, lane);
    }
    const int g = lane >> 2, m = lane & 3;
    GNNFUSE_UNROLL
    for (int t = 0; t < NT; ++t) {
      GNNFUSE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t row = w * 16 + g + 8 * h;
        if (row >= p.out_rows) continue;
        GNNFUSE_UNROLL
        for (int j = 0; j < 2; ++j) {
          const int64_t c = f0 + t * 8 + 2 * m + j;
          if (c < p.f) out[row * p.f + c] = from_acc<T>(acc[t][2 * h + j]);
        }
      }
    }
  }
}

template <typename T, int NT>
void launch(const TcSpmmArgs& args, void* stream) {
  const int64_t slabs = (args.f + NT * 8 - 1) / (NT * 8);
  const int64_t units = args.windows * slabs;
  if (units == 0) return;
  const int64_t blocks = std::min<int64_t>((units + kTcWarps - 1) / kTcWarps, int64_t(1) << 20);
  GNNFUSE_LAUNCH((tc_spmm_kernel<T, NT>), static_cast<unsigned>(blocks), kTcWarps * 32, 0, static_cast<cudaStream_t>(stream), args,
                 slabs);
}

template <typename T>
void launch_tiles(const TcSpmmArgs& args, void* stream) {
  if (tc_spmm_tiles(args.f) == 4)
    launch<T, 4>(args, stream);
  else
    launch<T, 8>(args, stream);
}

}  // namespace

int tc_spmm_tiles(int64_t f) { return f <= 32 ? 4 : 8; }

void tc_spmm(TcType type, const TcSpmmArgs& args, void* stream) {
  switch (type) {
    case TcType::Half: launch_tiles<__half>(args, stream); break;
    case TcType::BFloat16: launch_tiles<__nv_bfloat16>(args, stream); break;
    case TcType::Float32: launch_tiles<float>(args, stream); break;
  }
}

}  // namespace gnnfuse::cuda
