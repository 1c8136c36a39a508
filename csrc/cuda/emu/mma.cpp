// The SIMT emulator's Tensor-Core mma.sync (the gnnfuse_mma_* wrappers of cuda/simt.cuh): the
// warp's fragments gathered into dense matrices by the layouts of the PTX ISA ("Matrix Fragments
// for mma.m16n8k16 with floating point type", "Matrix Fragments for mma.m16n8k8", .row.col),
// D = A B + C computed in float, and D scattered back by the same layouts.
//
// Arithmetic: the inputs widened to float exactly (f16 and bf16 always are; a tf32 operand is
// its register with the low 13 bits dropped: the ISA leaves tf32's layout to the implementation
// for mma and says wgmma.mma_async truncates those bits, and the emulator assumes mma reads them
// alike), their products exact in float (at most 11 x 11 significant bits; outside float's
// range they overflow or underflow), and each D element accumulated in float from C in
// ascending k. The ISA leaves the accumulation order, rounding and subnormal handling
// unspecified: a GPU gives the same bits whenever every product and partial sum is exact in
// float.
#include <cstring>

#include "cuda/emu/block.h"

namespace gnnfuse::simt::detail {

namespace {

float f16_to_float(unsigned short raw) {
  __half_raw h;
  h.x = raw;
  return __half2float(__half(h));
}

float bf16_to_float(unsigned short raw) { return bits<float>(unsigned(raw) << 16); }

float tf32_to_float(unsigned raw) { return bits<float>(raw & 0xffffe000u); }

// Element i of a register pair of 16-bit values (i even: the low half, as "low to high").
unsigned short half_of(const unsigned* regs, int i) {
  return static_cast<unsigned short>(regs[i / 2] >> (16 * (i % 2)));
}

// m16n8k16 with f16 or bf16 multiplicands. groupID = lane >> 2, threadID_in_group = lane % 4;
// A a0..a7 (two per register): row groupID for a0, a1, a4, a5, else groupID + 8; column
// 2 threadID_in_group + (i & 1), + 8 for a4..a7. B b0..b3: row 2 threadID_in_group + (i & 1),
// + 8 for b2, b3; column groupID.
template <float (*Widen)(unsigned short)>
void gather_m16n8k16(const MmaOperands* const operands[32], float (&a)[16][16], float (&b)[16][8]) {
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, member = lane % 4;
    for (int i = 0; i < 8; ++i) {
      const int row = group + ((i & 2) ? 8 : 0), col = 2 * member + (i & 1) + (i >= 4 ? 8 : 0);
      a[row][col] = Widen(half_of(operands[lane]->a, i));
    }
    for (int i = 0; i < 4; ++i)
      b[2 * member + (i & 1) + (i >= 2 ? 8 : 0)][group] = Widen(half_of(operands[lane]->b, i));
  }
}

// m16n8k8 with f16 or bf16 multiplicands ("Matrix Fragments for mma.m16n8k8", .f16/.bf16): A
// a0..a3 (two per register, a[0] and a[1] only): row groupID for a0, a1, else groupID + 8; column
// 2 threadID_in_group + (i & 1). B b0, b1 (one register, b[0] only): row 2 threadID_in_group + i;
// column groupID.
template <float (*Widen)(unsigned short)>
void gather_m16n8k8_16bit(const MmaOperands* const operands[32], float (&a)[16][16], float (&b)[16][8]) {
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, member = lane % 4;
    for (int i = 0; i < 4; ++i) a[group + (i >= 2 ? 8 : 0)][2 * member + (i & 1)] = Widen(half_of(operands[lane]->a, i));
    for (int i = 0; i < 2; ++i) b[2 * member + i][group] = Widen(half_of(operands[lane]->b, i));
  }
}

// m16n8k8 with tf32 multiplicands (one per register). A a0..a3: row groupID for a0, a2, else
// groupID + 8; column threadID_in_group for a0, a1, + 4 for a2, a3. B b0, b1: row
// threadID_in_group, + 4 for b1; column groupID.
void gather_m16n8k8_tf32(const MmaOperands* const operands[32], float (&a)[16][16], float (&b)[16][8]) {
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, member = lane % 4;
    for (int i = 0; i < 4; ++i) a[group + (i & 1) * 8][member + (i >> 1) * 4] = tf32_to_float(operands[lane]->a[i]);
    for (int i = 0; i < 2; ++i) b[member + 4 * i][group] = tf32_to_float(operands[lane]->b[i]);
  }
}

}  // namespace

void warp_mma(Collective kind, const MmaOperands* const operands[32], float* const d[32]) {
  float a[16][16] = {}, b[16][8] = {}, c[16][8];
  int k_dim = 16;
  switch (kind) {
    case Collective::mma_m16n8k16_f16f32: gather_m16n8k16<f16_to_float>(operands, a, b); break;
    case Collective::mma_m16n8k16_bf16f32: gather_m16n8k16<bf16_to_float>(operands, a, b); break;
    case Collective::mma_m16n8k8_tf32f32:
      gather_m16n8k8_tf32(operands, a, b);
      k_dim = 8;
      break;
    case Collective::mma_m16n8k8_f16f32:
      gather_m16n8k8_16bit<f16_to_float>(operands, a, b);
      k_dim = 8;
      break;
    case Collective::mma_m16n8k8_bf16f32:
      gather_m16n8k8_16bit<bf16_to_float>(operands, a, b);
      k_dim = 8;
      break;
    default: return;
  }
  // C and D (f32, four per lane): row groupID for c0, c1, else groupID + 8; column
  // 2 threadID_in_group + (i & 1). Every lane's C is read before any D is written (d may be c).
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) c[(lane >> 2) + (i >= 2 ? 8 : 0)][2 * (lane % 4) + (i & 1)] = operands[lane]->c[i];
  float out[16][8];
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      float acc = c[row][col];
      for (int k = 0; k < k_dim; ++k) acc += a[row][k] * b[k][col];
      out[row][col] = acc;
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) d[lane][i] = out[(lane >> 2) + (i >= 2 ? 8 : 0)][2 * (lane % 4) + (i & 1)];
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 ("Warp-level matrix load instruction:
// ldmatrix"): matrix i's row r is the 16 bytes at the address of lane 8 i + r; lane l's
// register i holds matrix i's elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1), the
// first in the low half; .trans reads the transposed matrix: (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4). Every row is read before any register is written.
void warp_ldmatrix(bool trans, const void* const rows[32], unsigned* const r[32]) {
  unsigned short m[4][8][8];
  for (int i = 0; i < 4; ++i)
    for (int row = 0; row < 8; ++row) std::memcpy(m[i][row], rows[8 * i + row], 16);
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, c = 2 * (l % 4);
    for (int i = 0; i < 4; ++i) {
      const unsigned lo = trans ? m[i][c][g] : m[i][g][c], hi = trans ? m[i][c + 1][g] : m[i][g][c + 1];
      r[l][i] = lo | (hi << 16);
    }
  }
}

}  // namespace gnnfuse::simt::detail
