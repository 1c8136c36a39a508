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
// A warp's tiles in shared memory: the A tile (16 x K of T: the entry values of one block of the
// view, summed in float and rounded once) and two B tiles (K x NT * 8 of T: a block's rows of x),
// the next block's staged by cp.async while the mma of this one runs; fragments by ldmatrix
// (16-bit types), any other read of a staged tile by gnnfuse_ld_staged[16] (a plain load, which
// the emulator checks against the copies in flight and unpublished); the accumulators acc[NT][4] (fp32) in registers. Rows are padded by 16 bytes
// (A: TcMma<T>::A_LD elements per row) and 8 elements (B: tc_b_ld(NT)) so that the 8 rows one
// ldmatrix phase (or one scalar tf32 load) reads fall in distinct banks: unpadded, a B row of
// 128 bytes (bf16, NT 8) puts all 8 rows in the same 4 banks (an 8-way conflict), an A row of
// 32 bytes pairs rows 4 apart. Padded, every row start stays 16-byte aligned (cp.async, ldmatrix).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/device_runtime.cuh"
#include "cuda/tc_spmm.h"

namespace gnnfuse::cuda {

template <typename T>
struct TcMma;
template <>
struct TcMma<__half> {
  static constexpr int K = 16, A_LD = K + 8;  // A row: 48 bytes
};
template <>
struct TcMma<__nv_bfloat16> {
  static constexpr int K = 16, A_LD = K + 8;
};
template <>
struct TcMma<float> {
  static constexpr int K = 8, A_LD = K + 4;  // 48 bytes
};

// The elements of a B tile's row (W = NT * 8 columns, 8 of padding).
GNNFUSE_HOST_DEVICE constexpr int tc_b_ld(int nt) { return nt * 8 + 8; }

// The A tile's element of a view entry's place (row in the window * K + column in the block).
template <typename T>
GNNFUSE_DEVICE int tc_a_index(int place) {
  return place / TcMma<T>::K * TcMma<T>::A_LD + place % TcMma<T>::K;
}

// Entry values float16 cannot hold as float does: a product of value factors (or a sum of
// duplicates) past float16's range (inf where the CUDA-core kernels, in float, stay finite) or
// below its normal range and inexact there (a product of two small gradients rounding to a few
// bits or to zero). A block (condensed) or pass (rows) with one runs on scalar products of its
// entries' values in float (tc_entry_scalar, tc_rows_entry_scalar) instead of the mma. bfloat16 and
// tf32 have float's range: never.
template <typename T>
constexpr bool kTcNarrow = std::is_same_v<T, __half>;
template <typename T>
GNNFUSE_DEVICE bool tc_inexact(float v) {
  if constexpr (!kTcNarrow<T>) {
    return false;
  } else {
    const float a = fabsf(v);
    if (a > 65504.f) return a != INFINITY;  // (finite in float: inf in float16; inf and NaN stay what they are)
    return a < 6.103515625e-05f && a != 0.f && to_acc(from_acc<T>(v)) != v;  // (2^-14: float16's smallest normal)
  }
}

// acc += v x (the lane's columns of b_row, a row of the B tile), in the rows `lower` (g + 8) or g.
template <typename T, int NT>
GNNFUSE_DEVICE void tc_entry_scalar(float (&acc)[NT][4], float v, const T* b_row, bool lower, int lane) {
  const int m = lane & 3;
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; ++t) {
    const float b0 = to_acc(gnnfuse_ld_staged(b_row + t * 8 + 2 * m)), b1 = to_acc(gnnfuse_ld_staged(b_row + t * 8 + 2 * m + 1));
    if (lower) {
      acc[t][2] += v * b0;
      acc[t][3] += v * b1;
    } else {
      acc[t][0] += v * b0;
      acc[t][1] += v * b1;
    }
  }
}

// Non-finite rows of x: a dense tile product multiplies every B element by the whole A column,
// absent entries (zeros) included, so an inf or NaN in x would reach every row of the window
// (0 * inf = NaN) where the CUDA-core kernels keep it to the rows with that edge. So the A tile
// marks absent places as -0 (tc_clear_tile) and present ones as their value with a zero stored
// as +0 (tc_entry); each pair of column tiles whose B fragments hold an inf or NaN (a warp vote)
// is computed by scalar products over the present entries only (tc_tiles_scalar), the others by
// mma. With finite x the path is the mma's; a -0 in A adds nothing to a finite sum.
template <typename T>
GNNFUSE_DEVICE T tc_entry(float v) {
  return from_acc<T>(v == 0.f ? 0.f : v);  // (a -0 entry value stored as +0: present)
}
GNNFUSE_DEVICE bool tc_absent(float a) { return __float_as_uint(a) == 0x80000000u; }

// Whether a register of two 16-bit values (T: __half or __nv_bfloat16) holds an inf or NaN.
template <typename T>
GNNFUSE_DEVICE bool tc_nonfinite2(unsigned r) {
  constexpr unsigned e = std::is_same_v<T, __half> ? 0x7c00u : 0x7f80u;  // the exponent bits
  return (r & e) == e || (r & (e << 16)) == (e << 16);
}
GNNFUSE_DEVICE bool tc_nonfinite(unsigned r) { return (r & 0x7f800000u) == 0x7f800000u; }  // a float's bits

// acc[t0 .. t0 + n) += the A tile x the B tile's columns, by scalar products over the present
// entries (this lane's elements of the C layout; tf32 rounds both factors as the mma does).
template <typename T, int NT>
GNNFUSE_DEVICE void tc_tiles_scalar(float (&acc)[NT][4], const T* at, const T* bt, int t0, int n, int lane) {
  constexpr int K = TcMma<T>::K, A_LD = TcMma<T>::A_LD, B_LD = tc_b_ld(NT);
  const int g = lane >> 2, m = lane & 3;
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; ++t) {  // (unrolled: acc stays in registers)
    if (t < t0 || t >= t0 + n) continue;
    GNNFUSE_UNROLL
    for (int q = 0; q < 4; ++q) {
      const int row = g + 8 * (q >> 1), col = t * 8 + 2 * m + (q & 1);
      float s = acc[t][q];
      for (int k = 0; k < K; ++k) {
        const float a = to_acc(at[row * A_LD + k]);
        if (tc_absent(a)) continue;
        const float b = to_acc(gnnfuse_ld_staged(bt + k * B_LD + col));
        if constexpr (std::is_same_v<T, float>)
          s += __uint_as_float(gnnfuse_cvt_rna_tf32(a)) * __uint_as_float(gnnfuse_cvt_rna_tf32(b));
        else
          s += a * b;
      }
      acc[t][q] = s;
    }
  }
}

// The fragments of one block and the mma over NT column tiles (NT even): f16 / bf16 on
// m16n8k16. The A tile (16 x 16 of T, row-major) by one ldmatrix.x4: matrix i is the 8 x 8 at
// rows 8 (i & 1), columns 8 (i >> 1), whose registers are a0..a3 of the layout above. The B tile
// (K x W of T, row-major) by one ldmatrix.x4.trans per pair of column tiles: matrices (rows 0-7,
// tile t), (rows 8-15, tile t), (rows 0-7, tile t + 1), (rows 8-15, tile t + 1), transposed, are
// b0, b1 of tile t and of tile t + 1. Every row address is 16-byte aligned (rows of A_LD and
// tc_b_ld(NT) elements, 48 and a multiple of 16 bytes).
template <typename T, int NT>
GNNFUSE_DEVICE void tc_block_mma(float (&acc)[NT][4], const T* at, const T* bt, int lane) {
  static_assert(NT % 2 == 0, "column tiles in pairs");
  constexpr int A_LD = TcMma<T>::A_LD, B_LD = tc_b_ld(NT);
  const int row = (lane & 7) + 8 * ((lane >> 3) & 1);  // the row whose address the lane gives
  unsigned a[4];
  gnnfuse_ldmatrix_x4(a, at + row * A_LD + 8 * (lane >> 4));
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; t += 2) {
    unsigned b[4];
    gnnfuse_ldmatrix_x4_trans(b, bt + row * B_LD + (t + (lane >> 4)) * 8);
    const bool bad = tc_nonfinite2<T>(b[0]) || tc_nonfinite2<T>(b[1]) || tc_nonfinite2<T>(b[2]) || tc_nonfinite2<T>(b[3]);
    if (__any_sync(0xffffffffu, bad)) {  // an inf or NaN in x: these two tiles by the present entries only
      tc_tiles_scalar<T, NT>(acc, at, bt, t, 2, lane);
      continue;
    }
    if constexpr (std::is_same_v<T, __half>) {
      gnnfuse_mma_m16n8k16_f16f32(acc[t], a, b, acc[t]);
      gnnfuse_mma_m16n8k16_f16f32(acc[t + 1], a, b + 2, acc[t + 1]);
    } else {
      gnnfuse_mma_m16n8k16_bf16f32(acc[t], a, b, acc[t]);
      gnnfuse_mma_m16n8k16_bf16f32(acc[t + 1], a, b + 2, acc[t + 1]);
    }
  }
}

// tf32 on m16n8k8 (both operands rounded to nearest by cvt.rna; ldmatrix has no 32-bit form).
template <int NT>
GNNFUSE_DEVICE void tc_block_mma_tf32(float (&acc)[NT][4], const float* at, const float* bt, int lane) {
  constexpr int A_LD = TcMma<float>::A_LD, B_LD = tc_b_ld(NT);
  const int g = lane >> 2, m = lane & 3;
  unsigned a[4];
  a[0] = gnnfuse_cvt_rna_tf32(at[g * A_LD + m]);
  a[1] = gnnfuse_cvt_rna_tf32(at[(g + 8) * A_LD + m]);
  a[2] = gnnfuse_cvt_rna_tf32(at[g * A_LD + m + 4]);
  a[3] = gnnfuse_cvt_rna_tf32(at[(g + 8) * A_LD + m + 4]);
  GNNFUSE_UNROLL
  for (int t = 0; t < NT; ++t) {
    const int c = t * 8 + g;
    unsigned b[2];
    b[0] = gnnfuse_cvt_rna_tf32(gnnfuse_ld_staged(bt + m * B_LD + c));
    b[1] = gnnfuse_cvt_rna_tf32(gnnfuse_ld_staged(bt + (m + 4) * B_LD + c));
    if (__any_sync(0xffffffffu, tc_nonfinite(b[0]) || tc_nonfinite(b[1]))) {  // an inf or NaN in x (see tc_entry)
      tc_tiles_scalar<float, NT>(acc, at, bt, t, 1, lane);
      continue;
    }
    gnnfuse_mma_m16n8k8_tf32f32(acc[t], a, b, acc[t]);
  }
}

// The mma of one block: acc[t] += A tile x the B tile's columns t * 8 .. t * 8 + 8 (tf32 for float).
template <typename T, int NT>
GNNFUSE_DEVICE void tc_mma(float (&acc)[NT][4], const T* at, const T* bt, int lane) {
  if constexpr (std::is_same_v<T, float>)
    tc_block_mma_tf32<NT>(acc, at, bt, lane);
  else
    tc_block_mma<T, NT>(acc, at, bt, lane);
}

// Clears a warp's A tile (16 x K of T; the padding is never read) to -0, absent (tc_entry), then
// a barrier of the warp. The caller has synchronised the warp since the tile was last read.
template <typename T, int K>
GNNFUSE_DEVICE void tc_clear_tile(T* at, int lane) {
  for (int i = lane; i < 16 * K; i += 32) at[tc_a_index<T>(i)] = from_acc<T>(-0.f);
  __syncwarp();
}

// Whether the B tiles can be staged by 16-byte cp.async: x 16-byte aligned and every row's
// start (row * heads * f + head * f) and slab (a multiple of 8 columns) at a multiple of 16 bytes.
template <typename T>
GNNFUSE_DEVICE bool tc_vector_rows(const void* x, int64_t f) {
  return reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && f % (16 / int(sizeof(T))) == 0;
}

// Stages the B tile of one block into bt (K x W of T, rows of LD elements, by default tc_b_ld(W / 8);
// SWIZZLE: row r in the row slot r ^ ((r / 8) & SWIZZLE), TcRowsTile::slot): row r is x's row cols[r] (-1, or r from n on: padding, zeros) at the columns f0 .. f0 + W of the head (`head`: the head's first element in a row of
// `stride` elements), zero from column f on. `vec` (tc_vector_rows): by 16-byte cp.async, which
// land at the cp.async wait that covers the group the caller commits them in; else by loads now.
template <typename T, int K, int W, int LD = tc_b_ld(W / 8), int SWIZZLE = 0>
GNNFUSE_DEVICE void tc_stage_b(T* bt, const T* x, const int32_t* cols, int64_t stride, int64_t head, int64_t f0, int64_t f,
                               bool vec, int lane, int n = K) {
  constexpr int C = 16 / int(sizeof(T)), CHUNKS = W / C;
  static_assert(W % C == 0, "whole 16-byte chunks per row");
  for (int i = lane; i < K * CHUNKS; i += 32) {
    const int r = i / CHUNKS, c = i % CHUNKS * C;
    const int32_t src = r < n ? __ldg(cols + r) : -1;
    T* dst = bt + (r ^ ((r >> 3) & SWIZZLE)) * LD + c;  // (TcRowsTile::slot)
    const int64_t left = f - f0 - c;  // the row's columns from this chunk on
    const T* from = src >= 0 ? x + static_cast<int64_t>(src) * stride + head + f0 + c : x;
    if (vec) {
      const int bytes = src < 0 || left <= 0 ? 0 : left >= C ? 16 : static_cast<int>(left) * static_cast<int>(sizeof(T));
      gnnfuse_cp_async16(dst, bytes > 0 ? static_cast<const void*>(from) : static_cast<const void*>(x), bytes);
    } else {
      GNNFUSE_UNROLL
      for (int j = 0; j < C; ++j) dst[j] = src >= 0 && j < left ? __ldg(from + j) : from_acc<T>(0.f);
    }
  }
}

// ---------------------------------------------------------------- the rows form (seed 004)
// mma.m16n8k8 with 16-bit multiplicands (cuda/simt.cuh: A a[0] = (g, 2m | 2m+1), a[1] = (g+8,
// 2m | 2m+1); B b[0] = (2m | 2m+1, g); C as above). For a row of op(A) in bucket B (chunks of 8
// entries), a pass's B fragment holds the entry values, chunk u (entries 8u .. 8u+7 of the pass)
// in column u (zero from the row's end and in columns B..7); the A fragment of mma j holds the
// staged rows of x, A row q B + u = chunk u's rows at output column j (16 / B) + q. So
// D[q B + u][u] is chunk u's part of output column q, and the other elements of D are not used
// (an inf or NaN of x there reaches no output; padding is zero in both fragments).

// The bits of a 16-bit value (T: __half or __nv_bfloat16), for packing fragments.
template <typename T>
GNNFUSE_DEVICE unsigned tc_bits(T v) {
  unsigned short r;
  memcpy(&r, &v, sizeof r);
  return r;
}

// The B fragment of a pass: the values (in float) of the entries 8 g + 2 m and 8 g + 2 m + 1 of
// the pass (zero where absent), rounded once to T.
template <typename T>
GNNFUSE_DEVICE unsigned tc_rows_b(float lo, float hi) {
  return tc_bits<T>(from_acc<T>(lo)) | (tc_bits<T>(from_acc<T>(hi)) << 16);
}

// The staged tile of a pass (8 B rows of x, row r = the pass's entry r; W = NM * 16 / B columns),
// row r in slot r ^ ((r / 8) & kSwizzle). B < 8: rows of tc_b_ld(W / 8) elements (padded by 16
// bytes), the lanes reading elements: one load reads a column of the rows 8 a + 2 m (a < B, m < 4;
// or those + 1), whose padded starts fall in 4 of the 8 bank positions a 16-byte-aligned row can
// take (rows 8 apart are a multiple of 32 words apart); the slot r ^ (r / 8 & 1) moves odd a's rows by one, into the other 4 (B = 2: no conflict,
// 2-way before; B = 4: 2-way, 4-way before, the least for 16 rows whose starts are multiples of 16
// bytes). B = 8 (W = 8: one 16-byte row): unpadded rows, slot r ^ (r / 8 % 8), and each lane reads
// its two rows (8 g + 2 m, + 1) whole by 16-byte loads: the 8 lanes of each quarter of the warp then
// read 8 distinct slots modulo 8, all 32 banks (the padded rows put the 32 lanes' rows in two banks).
template <int B, int W>
struct TcRowsTile {
  static constexpr int kSwizzle = B == 8 ? 7 : 1;
  static constexpr int kLd = B == 8 ? W : tc_b_ld(W / 8);
  static GNNFUSE_DEVICE int slot(int r) { return r ^ ((r >> 3) & kSwizzle); }
};

// acc[j] += the mma of the staged tile s (TcRowsTile) by the pass's B fragment bf.
template <typename T, int B, int NM>
GNNFUSE_DEVICE void tc_rows_mma(float (&acc)[NM][4], const T* s, unsigned bf, int lane) {
  static_assert(!std::is_same_v<T, float>, "the rows form has 16-bit multiplicands");
  constexpr int CPM = 16 / B, LD = TcRowsTile<B, NM * CPM>::kLd;
  const int g = lane >> 2, m = lane & 3;
  const unsigned b1[1] = {bf};
  // B = 8: A rows g and g + 8 are chunk g at output columns 0 and 1 of each mma, so the lane's two
  // staged rows hold them all (column 2 j and 2 j + 1: the low and high half of word j). Else the
  // A rows g and g + 8 are (output column q, chunk u) each; the lane's columns 2m, 2m+1 are the
  // chunk's entries 2m, 2m+1, i.e. staged rows 8u + 2m, 8u + 2m + 1, read element by element.
  using Tile = TcRowsTile<B, NM * CPM>;
  unsigned w0[4] = {}, w1[4] = {};
  if constexpr (B == 8) {
    static_assert(NM * CPM == 8, "one 16-byte row");
    const uint4 v0 = gnnfuse_ld_staged16(s + Tile::slot(8 * g + 2 * m) * LD), v1 = gnnfuse_ld_staged16(s + Tile::slot(8 * g + 2 * m + 1) * LD);
    w0[0] = v0.x, w0[1] = v0.y, w0[2] = v0.z, w0[3] = v0.w;
    w1[0] = v1.x, w1[1] = v1.y, w1[2] = v1.z, w1[3] = v1.w;
  }
  const int q0 = 8 * (g % B) + 2 * m, q1 = 8 * ((g + 8) % B) + 2 * m;  // the rows (and + 1) of A rows g, g + 8
  const T* r0 = s + Tile::slot(q0) * LD + g / B;
  const T* r0n = s + Tile::slot(q0 + 1) * LD + g / B;
  const T* r1 = s + Tile::slot(q1) * LD + (g + 8) / B;
  const T* r1n = s + Tile::slot(q1 + 1) * LD + (g + 8) / B;
  GNNFUSE_UNROLL
  for (int j = 0; j < NM; ++j) {
    unsigned a[2];
    if constexpr (B == 8) {
      a[0] = (w0[j] & 0xffffu) | (w1[j] << 16);
      a[1] = (w0[j] >> 16) | (w1[j] & 0xffff0000u);
    } else {
      a[0] = tc_bits<T>(gnnfuse_ld_staged(r0 + j * CPM)) | (tc_bits<T>(gnnfuse_ld_staged(r0n + j * CPM)) << 16);
      a[1] = tc_bits<T>(gnnfuse_ld_staged(r1 + j * CPM)) | (tc_bits<T>(gnnfuse_ld_staged(r1n + j * CPM)) << 16);
    }
    if constexpr (std::is_same_v<T, __half>)
      gnnfuse_mma_m16n8k8_f16f32(acc[j], a, b1, acc[j]);
    else
      gnnfuse_mma_m16n8k8_bf16f32(acc[j], a, b1, acc[j]);
  }
}

// acc[j][c] += v x s_col[j (16 / B)]: an entry's part of the lane's accumulator c of every mma by a
// scalar product (s_col: the entry's staged row of x at the accumulator's output column q).
// (C: a constant once the caller's loop is unrolled; the branches keep acc in registers)
template <typename T, int B, int NM>
GNNFUSE_DEVICE void tc_rows_entry_scalar(float (&acc)[NM][4], int c, float v, const T* s_col) {
  GNNFUSE_UNROLL
  for (int j = 0; j < NM; ++j) {
    const float d = v * to_acc(gnnfuse_ld_staged(s_col + j * (16 / B)));
    if (c == 0)
      acc[j][0] += d;
    else if (c == 1)
      acc[j][1] += d;
    else if (c == 2)
      acc[j][2] += d;
    else
      acc[j][3] += d;
  }
}

// The trace: output column q of mma j is the sum over u < B of D[q B + u][u] (held by lane
// 4 ((q B + u) % 8) + u / 2, register u % 2, + 2 in the lower half), gathered by shuffles in
// ascending u; lanes q < 16 / B store columns f0 + j (16 / B) + q of the row (those below f).
template <typename T, int B, int NM>
GNNFUSE_DEVICE void tc_rows_store(const float (&acc)[NM][4], T* row, int64_t f0, int64_t f, int lane) {
  constexpr int CPM = 16 / B;
  const int q = lane % CPM;
  GNNFUSE_UNROLL
  for (int j = 0; j < NM; ++j) {
    float sum = 0.f;
    GNNFUSE_UNROLL
    for (int u = 0; u < B; ++u) {
      const int r = q * B + u, src = 4 * (r & 7) + u / 2;
      const float top = __shfl_sync(0xffffffffu, acc[j][u & 1], src);
      const float bottom = __shfl_sync(0xffffffffu, acc[j][2 + (u & 1)], src);
      sum += r < 8 ? top : bottom;
    }
    const int64_t c = f0 + j * CPM + q;
    if (lane < CPM && c < f) row[c] = from_acc<T>(sum);
  }
}

}  // namespace gnnfuse::cuda
