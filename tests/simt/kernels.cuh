// Test kernels of the SIMT emulator, one text for two compilers: test_simt.cpp runs them
// through the emulator (g++ -DGNNFUSE_SIMT_EMU), kernels_nvcc.cu compiles them with nvcc for
// sm_80 and sm_90a under ptxas' spill and local-memory warnings as errors. Each kernel has a
// host launcher (launch_*), so the launches are one text too. Pointers are device pointers on
// a GPU and host pointers in the emulator.
#pragma once

#include "cuda/simt.cuh"

namespace simt_test {

// ---------------------------------------------------------------- block-shared memory
// Each block reverses its slice through a static shared array; a second array holds the
// block's index, written by one thread and read by all after the barrier (a block reading
// another block's storage would see another index).
GNNFUSE_GLOBAL void reverse_in_block(const int* in, int* out, int* owner_ok) {
  GNNFUSE_SHARED_ARRAY(int, slice, 256);
  GNNFUSE_SHARED_ARRAY(unsigned, owner, 1);
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  slice[t] = in[base + t];
  if (t == 0) owner[0] = blockIdx.x;
  __syncthreads();
  out[base + t] = slice[blockDim.x - 1 - t];
  owner_ok[base + t] = owner[0] == blockIdx.x;
}
inline void launch_reverse_in_block(int blocks, int threads, const int* in, int* out, int* owner_ok) {
  GNNFUSE_LAUNCH(reverse_in_block, blocks, threads, 0, 0, in, out, owner_ok);
}

// A tree sum over the block's dynamic shared memory (blockDim.x a power of two); also reports
// the buffer's alignment.
GNNFUSE_GLOBAL void dynamic_shared_sum(const float* in, float* out, unsigned* misalignment) {
  GNNFUSE_DYNAMIC_SHARED(float, buf);
  const unsigned t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) buf[t] += buf[t + half];
    __syncthreads();
  }
  if (t == 0) {
    out[blockIdx.x] = buf[0];
    misalignment[blockIdx.x] = unsigned(reinterpret_cast<unsigned long long>(buf) % 16);
  }
}
inline void launch_dynamic_shared_sum(int blocks, int threads, const float* in, float* out,
                                      unsigned* misalignment) {
  GNNFUSE_LAUNCH(dynamic_shared_sum, blocks, threads, threads * sizeof(float) + 12, 0, in, out, misalignment);
}

// Reads shared memory before anything wrote it (a bug on a GPU: the emulator's poison shows).
GNNFUSE_GLOBAL void read_before_write(unsigned* static_bits, unsigned* dynamic_bits) {
  GNNFUSE_SHARED_ARRAY(unsigned, never_written, 64);
  GNNFUSE_DYNAMIC_SHARED(unsigned, dyn);
  static_bits[threadIdx.x] = never_written[threadIdx.x];
  dynamic_bits[threadIdx.x] = dyn[threadIdx.x];
}
inline void launch_read_before_write(unsigned* static_bits, unsigned* dynamic_bits) {
  GNNFUSE_LAUNCH(read_before_write, 1, 64, 64 * sizeof(unsigned), 0, static_bits, dynamic_bits);
}

// Writes its neighbour's slot without a barrier between the write and the read: the result
// depends on the order the threads run in.
GNNFUSE_GLOBAL void missing_barrier(int* out) {
  GNNFUSE_SHARED_ARRAY(int, slot, 128);
  const int t = threadIdx.x;
  slot[t] = t + 1;
  out[blockIdx.x * blockDim.x + t] = slot[(t + 1) % blockDim.x];
}
inline void launch_missing_barrier(int blocks, int* out) {
  GNNFUSE_LAUNCH(missing_barrier, blocks, 128, 0, 0, out);
}

// ---------------------------------------------------------------- block barriers
// Every thread gets the block's count / and / or of pred.
GNNFUSE_GLOBAL void barrier_predicates(const int* pred, int* count, int* all, int* any) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int p = pred[i];
  count[i] = __syncthreads_count(p);
  all[i] = __syncthreads_and(p);
  any[i] = __syncthreads_or(p);
}
inline void launch_barrier_predicates(int blocks, int threads, const int* pred, int* count, int* all,
                                      int* any) {
  GNNFUSE_LAUNCH(barrier_predicates, blocks, threads, 0, 0, pred, count, all, any);
}

// Threads from `first_exit` on return before the barrier the others wait at.
GNNFUSE_GLOBAL void divergent_barrier(int first_exit, int* out) {
  if (int(threadIdx.x) >= first_exit) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
inline void launch_divergent_barrier(int first_exit, int* out) {
  GNNFUSE_LAUNCH(divergent_barrier, 2, 64, 0, 0, first_exit, out);
}

// Odd and even threads wait at two different barriers.
GNNFUSE_GLOBAL void two_barriers(int* out) {
  if (threadIdx.x % 2) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}
inline void launch_two_barriers(int* out) { GNNFUSE_LAUNCH(two_barriers, 1, 64, 0, 0, out); }

// ---------------------------------------------------------------- warp collectives
// mode 0..3: __shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync with each lane's
// operand; lanes whose mask is 0 do not take part (out = in).
template <class T>
GNNFUSE_GLOBAL void shuffle(int mode, int width, const unsigned* masks, const int* operands, const T* in,
                            T* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned mask = masks[i];
  T v = in[i];
  if (mask != 0) {
    if (mode == 0) v = __shfl_sync(mask, v, operands[i], width);
    if (mode == 1) v = __shfl_up_sync(mask, v, unsigned(operands[i]), width);
    if (mode == 2) v = __shfl_down_sync(mask, v, unsigned(operands[i]), width);
    if (mode == 3) v = __shfl_xor_sync(mask, v, operands[i], width);
  }
  out[i] = v;
}
template <class T>
inline void launch_shuffle(int blocks, int threads, int mode, int width, const unsigned* masks,
                           const int* operands, const T* in, T* out) {
  GNNFUSE_LAUNCH(shuffle<T>, blocks, threads, 0, 0, mode, width, masks, operands, in, out);
}

// Ballot, any and all over each lane's mask (0: not taking part).
GNNFUSE_GLOBAL void vote(const unsigned* masks, const int* pred, unsigned* ballot, int* any, int* all) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned mask = masks[i];
  if (mask == 0) return;
  ballot[i] = __ballot_sync(mask, pred[i]);
  any[i] = __any_sync(mask, pred[i]);
  all[i] = __all_sync(mask, pred[i]);
}
inline void launch_vote(int blocks, int threads, const unsigned* masks, const int* pred, unsigned* ballot,
                        int* any, int* all) {
  GNNFUSE_LAUNCH(vote, blocks, threads, 0, 0, masks, pred, ballot, any, all);
}

// __match_any_sync over each lane's mask (0: not taking part), of a 64-bit and a 32-bit value.
GNNFUSE_GLOBAL void match_any(const unsigned* masks, const long long* wide, const int* narrow, unsigned* out_wide,
                              unsigned* out_narrow) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned mask = masks[i];
  if (mask == 0) return;
  out_wide[i] = __match_any_sync(mask, wide[i]);
  out_narrow[i] = __match_any_sync(mask, narrow[i]);
}
inline void launch_match_any(int blocks, int threads, const unsigned* masks, const long long* wide, const int* narrow,
                             unsigned* out_wide, unsigned* out_narrow) {
  GNNFUSE_LAUNCH(match_any, blocks, threads, 0, 0, masks, wide, narrow, out_wide, out_narrow);
}

// A read and a write that are not one atomic: `counter` gains one per thread only where no
// other thread of the block runs between them.
GNNFUSE_GLOBAL void read_then_exchange(int* counter) {
  const int seen = atomicAdd(counter, 0);
  atomicExch(counter, seen + 1);
}
inline void launch_read_then_exchange(int threads, int* counter) { GNNFUSE_LAUNCH(read_then_exchange, 1, threads, 0, 0, counter); }

// __activemask in two branches: every third lane, and the others.
GNNFUSE_GLOBAL void active_masks(unsigned* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x % 3 == 0)
    out[i] = __activemask();
  else
    out[i] = __activemask();
}
inline void launch_active_masks(int threads, unsigned* out) {
  GNNFUSE_LAUNCH(active_masks, 1, threads, 0, 0, out);
}

// Lanes exchange values through shared memory, ordered by __syncwarp only.
GNNFUSE_GLOBAL void syncwarp_exchange(int* out) {
  GNNFUSE_SHARED_ARRAY(int, slot, 128);
  const int t = threadIdx.x;
  slot[t] = 3 * t + 1;
  __syncwarp();
  const int neighbour = slot[t ^ 1];
  __syncwarp();
  slot[t] = neighbour * 2;
  __syncwarp();
  out[blockIdx.x * blockDim.x + t] = slot[t ^ 3];
}
inline void launch_syncwarp_exchange(int blocks, int* out) {
  GNNFUSE_LAUNCH(syncwarp_exchange, blocks, 128, 0, 0, out);
}

// Lanes 0-15 shuffle over the whole warp while lanes 16-31 wait at the block barrier.
GNNFUSE_GLOBAL void shuffle_barrier_deadlock(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x % 32 < 16)
    v = __shfl_sync(0xffffffffu, v, 0);
  else
    __syncthreads();
  out[threadIdx.x] = v;
}
inline void launch_shuffle_barrier_deadlock(int* out) {
  GNNFUSE_LAUNCH(shuffle_barrier_deadlock, 1, 64, 0, 0, out);
}

// Lanes 16-31 exit (or, in a block of 16 threads, do not exist); lanes 0-15 shuffle over the
// whole warp.
GNNFUSE_GLOBAL void shuffle_exited_lanes(int* out) {
  if (threadIdx.x % 32 >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, int(threadIdx.x), 1);
}
inline void launch_shuffle_exited_lanes(int threads, int* out) {
  GNNFUSE_LAUNCH(shuffle_exited_lanes, 1, threads, 0, 0, out);
}

// Even lanes ballot while odd lanes shuffle, both over the whole warp.
GNNFUSE_GLOBAL void mismatched_collectives(int* out) {
  if (threadIdx.x % 2)
    out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
  else
    out[threadIdx.x] = int(__ballot_sync(0xffffffffu, 1));
}
inline void launch_mismatched_collectives(int* out) {
  GNNFUSE_LAUNCH(mismatched_collectives, 1, 32, 0, 0, out);
}

// A mask that leaves out the calling lane.
GNNFUSE_GLOBAL void mask_without_caller(int* out) {
  out[threadIdx.x] = int(__ballot_sync(1u << ((threadIdx.x + 1) % 32), 1));
}
inline void launch_mask_without_caller(int* out) { GNNFUSE_LAUNCH(mask_without_caller, 1, 32, 0, 0, out); }

// ---------------------------------------------------------------- atomics
struct AtomicCounters {
  int i;
  unsigned u;
  unsigned long long ull;
  float f;
  double d;
  __half h;
  __nv_bfloat16 b;
  int imax, imin;
  unsigned umax, umin;
  long long llmax, llmin;
  int cas;
  int exch;
};
// Every thread adds to every counter (the half and bf16 ones only as far as they count
// exactly), takes a ticket, and increments `cas` with a compare-and-swap loop.
GNNFUSE_GLOBAL void atomics(AtomicCounters* c, int* tickets, int* exchanged) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tickets[i] = atomicAdd(&c->i, 1);
  atomicAdd(&c->u, 2u);
  atomicAdd(&c->ull, 3ull);
  atomicAdd(&c->f, 0.5f);
  atomicAdd(&c->d, 0.25);
  if (i < 2048) atomicAdd(&c->h, __float2half(1.0f));
  if (i < 256) atomicAdd(&c->b, __float2bfloat16(1.0f));
  const int signed_value = (i * 7919) % 2001 - 1000;
  atomicMax(&c->imax, signed_value);
  atomicMin(&c->imin, signed_value);
  atomicMax(&c->umax, unsigned(i) * 3u);
  atomicMin(&c->umin, unsigned(i) + 5u);
  atomicMax(&c->llmax, (long long)signed_value * 4000000000ll);
  atomicMin(&c->llmin, (long long)signed_value * 4000000000ll);
  int seen = c->cas, prev;
  while ((prev = atomicCAS(&c->cas, seen, seen + 1)) != seen) seen = prev;
  exchanged[i] = atomicExch(&c->exch, i);
}
inline void launch_atomics(int blocks, int threads, AtomicCounters* c, int* tickets, int* exchanged) {
  GNNFUSE_LAUNCH(atomics, blocks, threads, 0, 0, c, tickets, exchanged);
}

// ---------------------------------------------------------------- checks and fp16 / bf16
GNNFUSE_GLOBAL void checked_gather(int n, const int* index, const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  GNNFUSE_DEVICE_CHECK(index[i] >= 0 && index[i] < n, "gather index out of range");
  out[i] = in[index[i]];
}
inline void launch_checked_gather(int blocks, int threads, int n, const int* index, const float* in,
                                  float* out) {
  GNNFUSE_LAUNCH(checked_gather, blocks, threads, 0, 0, n, index, in, out);
}

// Half and bf16 arithmetic through CUDA's own types and operators; `dot` sums a*b in fp32
// (a warp butterfly, then one atomic per warp).
GNNFUSE_GLOBAL void low_precision(int n, const __half* a, const __half* b, const __half* c, __half* mul_add,
                                  __half* fused, const __nv_bfloat16* p, const __nv_bfloat16* q,
                                  __nv_bfloat16* bf_mul_add, __nv_bfloat16* bf_fused, float* dot) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float partial = 0.0f;
  if (i < n) {
    mul_add[i] = a[i] * b[i] + c[i];
    fused[i] = __hfma(a[i], b[i], c[i]);
    bf_mul_add[i] = p[i] * q[i] + p[i];
    bf_fused[i] = __hfma(p[i], q[i], p[i]);
    partial = __half2float(a[i]) * __half2float(b[i]);
  }
  for (int lanes = 16; lanes > 0; lanes /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, lanes);
  if (threadIdx.x % 32 == 0) atomicAdd(dot, partial);
}
inline void launch_low_precision(int blocks, int threads, int n, const __half* a, const __half* b,
                                 const __half* c, __half* mul_add, __half* fused, const __nv_bfloat16* p,
                                 const __nv_bfloat16* q, __nv_bfloat16* bf_mul_add, __nv_bfloat16* bf_fused,
                                 float* dot) {
  GNNFUSE_LAUNCH(low_precision, blocks, threads, 0, 0, n, a, b, c, mul_add, fused, p, q, bf_mul_add, bf_fused,
                 dot);
}

// ---------------------------------------------------------------- Tensor Cores
// variant 0: gnnfuse_mma_m16n8k16_f16f32, 1: _bf16f32, 2: gnnfuse_mma_m16n8k8_tf32f32,
// 3: gnnfuse_mma_m16n8k8_f16f32, 4: _bf16f32 (these read a[0..1] and b[0] only). Thread i
// (warp w, lane l) takes its fragment registers a[4i..4i+3], b[2i..2i+1], c[4i..4i+3] as they
// are (the test lays the matrices out), accumulates `repeats` products into its c in place
// (D = C + repeats A B) and writes d[4i..4i+3]. Lanes from `lanes` on return first.
GNNFUSE_GLOBAL void mma_fragments(int variant, int lanes, int repeats, const unsigned* a, const unsigned* b,
                                  const float* c, float* d) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (int(threadIdx.x % 32) >= lanes) return;
  unsigned ra[4], rb[2];
  float acc[4];
  GNNFUSE_UNROLL
  for (int r = 0; r < 4; ++r) {
    ra[r] = a[4 * i + r];
    acc[r] = c[4 * i + r];
  }
  rb[0] = b[2 * i];
  rb[1] = b[2 * i + 1];
  for (int n = 0; n < repeats; ++n) {
    if (variant == 0)
      gnnfuse_mma_m16n8k16_f16f32(acc, ra, rb, acc);
    else if (variant == 1)
      gnnfuse_mma_m16n8k16_bf16f32(acc, ra, rb, acc);
    else if (variant == 2)
      gnnfuse_mma_m16n8k8_tf32f32(acc, ra, rb, acc);
    else if (variant == 3)
      gnnfuse_mma_m16n8k8_f16f32(acc, ra, rb, acc);
    else
      gnnfuse_mma_m16n8k8_bf16f32(acc, ra, rb, acc);
  }
  GNNFUSE_UNROLL
  for (int r = 0; r < 4; ++r) d[4 * i + r] = acc[r];
}
inline void launch_mma_fragments(int variant, int threads, int lanes, int repeats, const unsigned* a,
                                 const unsigned* b, const float* c, float* d) {
  GNNFUSE_LAUNCH(mma_fragments, 1, threads, 0, 0, variant, lanes, repeats, a, b, c, d);
}

// Odd and even lanes reach the mma at two call sites (mma.sync.aligned: undefined on a GPU).
GNNFUSE_GLOBAL void mma_divergent_sites(float* d) {
  const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  const float c[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float r[4];
  if (threadIdx.x % 2)
    gnnfuse_mma_m16n8k16_f16f32(r, a, b, c);
  else
    gnnfuse_mma_m16n8k16_f16f32(r, a, b, c);
  d[threadIdx.x] = r[0];
}
inline void launch_mma_divergent_sites(float* d) { GNNFUSE_LAUNCH(mma_divergent_sites, 1, 32, 0, 0, d); }

// x[i] rounded to tf32 by gnnfuse_cvt_rna_tf32 (cvt.rna.tf32.f32), the register's bits.
GNNFUSE_GLOBAL void cvt_tf32(int n, const float* x, unsigned* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = gnnfuse_cvt_rna_tf32(x[i]);
}
inline void launch_cvt_tf32(int n, const float* x, unsigned* out) { GNNFUSE_LAUNCH(cvt_tf32, (n + 31) / 32, 32, 0, 0, n, x, out); }

// ldmatrix: in holds four 8 x 8 matrices of 16-bit elements (matrix i's row r at 64 i + 8 r),
// copied into shared memory with matrix i's row r at row slot 31 - (8 i + r) (so that each lane
// names a row of its own); every lane then gives the address of its row, offset by `skew` bytes
// (0: aligned), and writes its four registers to out[4 l ..]. `outside`: lane 0 names a global
// address instead.
GNNFUSE_GLOBAL void ldmatrix_rows(int trans, int skew, int outside, const unsigned short* in, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, raw, 33);
  unsigned short* rows = reinterpret_cast<unsigned short*>(raw);
  const int l = static_cast<int>(threadIdx.x);
  for (int e = 0; e < 8; ++e) rows[(31 - l) * 8 + e] = in[l * 8 + e];
  __syncwarp();
  const void* row = reinterpret_cast<const unsigned char*>(rows + (31 - l) * 8) + skew;
  if (outside && l == 0) row = in;
  unsigned r[4];
  if (trans)
    gnnfuse_ldmatrix_x4_trans(r, row);
  else
    gnnfuse_ldmatrix_x4(r, row);
  GNNFUSE_UNROLL
  for (int i = 0; i < 4; ++i) out[4 * l + i] = r[i];
}
inline void launch_ldmatrix_rows(int trans, int skew, int outside, const unsigned short* in, unsigned* out) {
  GNNFUSE_LAUNCH(ldmatrix_rows, 1, 32, 0, 0, trans, skew, outside, in, out);
}

// cp.async: thread t's 16-byte slot of shared memory is filled with 0xEE bytes; the thread queues
// two copies into it (group 1: src_bytes = (t % 5) * 4 bytes of src[4 t ..]; group 2: all 16
// bytes of src[128 + 4 t ..]) and records the slot (as 4 words) before any wait, after
// wait_group 1 (group 1 landed, group 2 not) and after wait_group 0. `bad`: 1 a misaligned
// destination, 2 a misaligned source, 3 src_bytes 17, 4 a destination outside shared memory.
GNNFUSE_GLOBAL void cp_async_groups(int bad, const unsigned* src, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, slots, 32);
  const int t = static_cast<int>(threadIdx.x);
  unsigned* slot = reinterpret_cast<unsigned*>(slots + t);
  for (int i = 0; i < 4; ++i) slot[i] = 0xEEEEEEEEu;
  void* dst = slot;
  const void* from = src + 4 * t;
  int bytes = (t % 5) * 4;
  if (bad == 1) dst = reinterpret_cast<unsigned char*>(slot) + 4;
  if (bad == 2) from = src + 4 * t + 1;
  if (bad == 3) bytes = 17;
  if (bad == 4) dst = out;
  gnnfuse_cp_async16(dst, from, bytes);
  gnnfuse_cp_async_commit();
  gnnfuse_cp_async16(slot, src + 128 + 4 * t, 16);
  gnnfuse_cp_async_commit();
  for (int i = 0; i < 4; ++i) out[t * 12 + i] = slot[i];
  gnnfuse_cp_async_wait<1>();
  for (int i = 0; i < 4; ++i) out[t * 12 + 4 + i] = slot[i];
  gnnfuse_cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) out[t * 12 + 8 + i] = slot[i];
}
inline void launch_cp_async_groups(int bad, const unsigned* src, unsigned* out) {
  GNNFUSE_LAUNCH(cp_async_groups, 1, 32, 0, 0, bad, src, out);
}

// ldmatrix.x4 with lane l's row at shared row slot l * stride (slots of 16 bytes; contents left
// as they are): stride 1 or 3 reads each matrix's 8 rows from distinct banks, stride 8 (128
// bytes) from the same 4 banks (7 extra wavefronts per matrix).
GNNFUSE_GLOBAL void ldmatrix_strided(int stride, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, slots, 32 * 8);
  const int l = static_cast<int>(threadIdx.x);
  unsigned r[4];
  gnnfuse_ldmatrix_x4(r, slots + l * stride);
  out[l] = r[0];
}
inline void launch_ldmatrix_strided(int stride, unsigned* out) { GNNFUSE_LAUNCH(ldmatrix_strided, 1, 32, 0, 0, stride, out); }

// cp.async, then ldmatrix: lane l copies its row of `in` (16-byte aligned; laid out as
// ldmatrix_rows lays it out) into shared row slot 31 - l and waits for its own copy; then
// `barrier` (0: none, so every row the ldmatrix reads is another lane's unpublished copy; 1:
// __syncwarp; 2: __syncthreads) and ldmatrix.x4, registers to out[4 l ..].
GNNFUSE_GLOBAL void cp_async_ldmatrix(int barrier, const unsigned short* in, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, rows, 32);
  const int l = static_cast<int>(threadIdx.x);
  gnnfuse_cp_async16(rows + (31 - l), in + 8 * l, 16);
  gnnfuse_cp_async_commit();
  gnnfuse_cp_async_wait<0>();
  if (barrier == 1) __syncwarp();
  if (barrier == 2) __syncthreads();
  unsigned r[4];
  gnnfuse_ldmatrix_x4(r, rows + (31 - l));
  GNNFUSE_UNROLL
  for (int i = 0; i < 4; ++i) out[4 * l + i] = r[i];
}
inline void launch_cp_async_ldmatrix(int barrier, const unsigned short* in, unsigned* out) {
  GNNFUSE_LAUNCH(cp_async_ldmatrix, 1, 32, 0, 0, barrier, in, out);
}

// cp.async, then plain loads of the staged slots (gnnfuse_ld_staged[16]): lane l copies in[4 l ..
// 4 l + 4) into shared slot l, then by `mode`: 0 waits, __syncwarp, reads slot l + 1 (mod 32) whole;
// 1 waits, reads slot l + 1 with no barrier (another lane's unpublished copy); 2 waits, reads its
// own slot with no barrier (its wait shows it its own copy); 3 reads its own slot before any wait
// (the copy still queued); 4 waits, __syncthreads, reads word 1 of slot l + 1 alone; 5 queues a
// second copy to its slot in a second group, waits for the first only and reads its own slot
// (the second copy still queued there). The words read go to out[4 l ..].
GNNFUSE_GLOBAL void cp_async_staged_load(int mode, const unsigned* in, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, slots, 32);
  const int l = static_cast<int>(threadIdx.x);
  gnnfuse_cp_async16(slots + l, in + 4 * l, 16);
  gnnfuse_cp_async_commit();
  if (mode == 5) {
    gnnfuse_cp_async16(slots + l, in + 4 * ((l + 1) % 32), 16);
    gnnfuse_cp_async_commit();
    gnnfuse_cp_async_wait<1>();
  }
  if (mode != 3 && mode != 5) gnnfuse_cp_async_wait<0>();
  if (mode == 0) __syncwarp();
  if (mode == 4) __syncthreads();
  const int from = mode == 2 || mode == 3 || mode == 5 ? l : (l + 1) % 32;
  if (mode == 4) {
    out[4 * l + 1] = gnnfuse_ld_staged(reinterpret_cast<const unsigned*>(slots + from) + 1);
    return;
  }
  const uint4 v = gnnfuse_ld_staged16(slots + from);
  out[4 * l] = v.x, out[4 * l + 1] = v.y, out[4 * l + 2] = v.z, out[4 * l + 3] = v.w;
  if (mode == 3 || mode == 5) gnnfuse_cp_async_wait<0>();
}
inline void launch_cp_async_staged_load(int mode, const unsigned* in, unsigned* out) {
  GNNFUSE_LAUNCH(cp_async_staged_load, 1, 32, 0, 0, mode, in, out);
}

// One staged load per lane of a warp, for the bank-conflict count: `wide` 0: lane l loads the
// word at l * stride (4-byte words); 1: the 16 bytes at slot l * stride (16-byte slots).
GNNFUSE_GLOBAL void staged_strided(int wide, int stride, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, slots, 32 * 32);
  const int l = static_cast<int>(threadIdx.x);
  if (wide)
    out[l] = gnnfuse_ld_staged16(slots + l * stride).x;
  else
    out[l] = gnnfuse_ld_staged(reinterpret_cast<const unsigned*>(slots) + l * stride);
}
inline void launch_staged_strided(int wide, int stride, unsigned* out) { GNNFUSE_LAUNCH(staged_strided, 1, 32, 0, 0, wide, stride, out); }

// Staged loads at bad addresses: `bad` 0: 16 bytes at a 4-byte offset into shared memory; 1: a
// word of global memory (`out`).
GNNFUSE_GLOBAL void staged_misaligned(int bad, unsigned* out) {
  GNNFUSE_SHARED_ARRAY(uint4, slots, 4);
  const int l = static_cast<int>(threadIdx.x);
  if (bad == 0)
    out[l] = gnnfuse_ld_staged16(reinterpret_cast<const unsigned*>(slots) + 1).x;
  else
    out[l] = gnnfuse_ld_staged(out + 31 - l);
}
inline void launch_staged_misaligned(int bad, unsigned* out) { GNNFUSE_LAUNCH(staged_misaligned, 1, 32, 0, 0, bad, out); }

// ---------------------------------------------------------------- SpMM: Y = A X, A in CSR
// Row-split: groups of G lanes per row (G divides 32), each lane a strided share of the row's
// nonzeros for a tile of T features, the partial sums reduced by a __shfl_down_sync tree over
// the group's lanes.
template <int G, int T>
GNNFUSE_GLOBAL void spmm_rows(int rows, int features, const int* __restrict__ rowptr, const int* __restrict__ col,
                              const float* __restrict__ val, const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int member = lane % G;
  const unsigned group_mask = G == 32 ? 0xffffffffu : ((1u << (G % 32)) - 1u) << (lane - member);
  const int groups = gridDim.x * blockDim.x / G;
  for (int row = (blockIdx.x * blockDim.x + threadIdx.x) / G; row < rows; row += groups) {
    const int begin = __ldg(rowptr + row), end = __ldg(rowptr + row + 1);
    for (int f0 = 0; f0 < features; f0 += T) {
      float acc[T];
      GNNFUSE_UNROLL
      for (int t = 0; t < T; ++t) acc[t] = 0.0f;
      for (int p = begin + member; p < end; p += G) {
        const float v = __ldg(val + p);
        const float* xr = x + (long long)__ldg(col + p) * features + f0;
        GNNFUSE_UNROLL
        for (int t = 0; t < T; ++t) {
          if (f0 + t < features) acc[t] += v * __ldg(xr + t);
        }
      }
      GNNFUSE_UNROLL
      for (int offset = G / 2; offset > 0; offset /= 2) {
        GNNFUSE_UNROLL
        for (int t = 0; t < T; ++t) acc[t] += __shfl_down_sync(group_mask, acc[t], offset, G);
      }
      if (member == 0) {
        GNNFUSE_UNROLL
        for (int t = 0; t < T; ++t) {
          if (f0 + t < features) y[(long long)row * features + f0 + t] = acc[t];
        }
      }
    }
  }
}

// Warp per row: lanes over features; the warp loads 32 nonzeros at a time, one per lane, and
// passes each to every lane: broadcast by __shfl_sync, or (Staged) through the warp's slice of
// shared memory, ordered by __syncwarp.
template <bool Staged>
GNNFUSE_GLOBAL void spmm_warp_row(int rows, int features, const int* __restrict__ rowptr,
                                  const int* __restrict__ col, const float* __restrict__ val,
                                  const float* __restrict__ x, float* __restrict__ y) {
  GNNFUSE_SHARED_ARRAY(int, cols, 256);
  GNNFUSE_SHARED_ARRAY(float, vals, 256);
  const int lane = threadIdx.x % 32;
  const int slice = threadIdx.x - lane;
  const int warps = gridDim.x * blockDim.x / 32;
  for (int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
    const int begin = __ldg(rowptr + row), end = __ldg(rowptr + row + 1);
    for (int f0 = 0; f0 < features; f0 += 32) {
      const int f = f0 + lane;
      float acc = 0.0f;
      for (int chunk = begin; chunk < end; chunk += 32) {
        const int p = chunk + lane;
        const int c = p < end ? __ldg(col + p) : 0;
        const float v = p < end ? __ldg(val + p) : 0.0f;
        if (Staged) {
          __syncwarp();  // the previous chunk is read
          cols[slice + lane] = c;
          vals[slice + lane] = v;
          __syncwarp();
        }
        const int n = min(32, end - chunk);
        for (int k = 0; k < n; ++k) {
          const int ck = Staged ? cols[slice + k] : __shfl_sync(0xffffffffu, c, k);
          const float vk = Staged ? vals[slice + k] : __shfl_sync(0xffffffffu, v, k);
          if (f < features) acc += vk * __ldg(x + (long long)ck * features + f);
        }
      }
      if (f < features) y[(long long)row * features + f] = acc;
    }
  }
}

// variant: 1, 2, 4, 8, 16, 32 (row-split with that group size, 8 features per lane),
// -1 (warp per row), -2 (warp per row, staged). 256 threads per block.
inline void launch_spmm(int variant, int blocks, int rows, int features, const int* rowptr, const int* col,
                        const float* val, const float* x, float* y) {
  switch (variant) {
    case 1: GNNFUSE_LAUNCH((spmm_rows<1, 8>), blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    case 2: GNNFUSE_LAUNCH((spmm_rows<2, 8>), blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    case 4: GNNFUSE_LAUNCH((spmm_rows<4, 8>), blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    case 8: GNNFUSE_LAUNCH((spmm_rows<8, 8>), blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    case 16: GNNFUSE_LAUNCH((spmm_rows<16, 8>), blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    case 32: GNNFUSE_LAUNCH((spmm_rows<32, 8>), blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    case -1: GNNFUSE_LAUNCH(spmm_warp_row<false>, blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
    default: GNNFUSE_LAUNCH(spmm_warp_row<true>, blocks, 256, 0, 0, rows, features, rowptr, col, val, x, y); break;
  }
}

}  // namespace simt_test
