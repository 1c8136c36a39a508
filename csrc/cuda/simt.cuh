// The device portability layer: the only header a gnnfuse CUDA kernel source includes.
//
// The same kernel text is compiled twice:
//   nvcc (__CUDACC__)          the spellings below map to CUDA itself;
//   g++ -DGNNFUSE_SIMT_EMU     they map to the SIMT emulator (cuda/emu/), which runs every CUDA
//                              thread as a fiber on the CPU: the test harness of CI.
// Kernel text uses CUDA's own names for what the emulator provides under the same name
// (threadIdx, blockIdx, blockDim, gridDim, warpSize, __syncthreads[_count|_and|_or],
// __syncwarp, __shfl[_up|_down|_xor]_sync, __ballot_sync, __match_any_sync, __activemask, atomicAdd, atomicMax,
// atomicMin, atomicCAS, atomicExch, __ldg, __half, __nv_bfloat16 and their conversions) and
// the macros below for what has no plain-C++ spelling:
//   GNNFUSE_GLOBAL                    a kernel (__global__)
//   GNNFUSE_DEVICE                    a device function (__device__ __forceinline__)
//   GNNFUSE_HOST_DEVICE               callable from both
//   GNNFUSE_SHARED_ARRAY(T, name, n)  a block-shared array of n T (n a constant)
//   GNNFUSE_DYNAMIC_SHARED(T, name)   the block's dynamic shared memory as T*
//   GNNFUSE_LAUNCH(kernel, grid, block, smem, stream, args...)  a launch
//   GNNFUSE_UNROLL                    before a loop: #pragma unroll (nvcc; nothing for g++)
//   GNNFUSE_DEVICE_CHECK(cond, msg)   a device-side check: __trap() on the GPU, an exception
//                                     naming the kernel, block and thread in the emulator
// and the Tensor-Core wrappers, warp-wide D = A B + C with f32 accumulators (PTX mma.sync; an
// exact warp collective in the emulator), fragments in registers as the PTX ISA lays them out:
//   gnnfuse_mma_m16n8k16_f16f32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4])
//   gnnfuse_mma_m16n8k16_bf16f32(d, a, b, c)   the same with bf16 pairs in a and b
//   gnnfuse_mma_m16n8k8_tf32f32(d, a, b, c)    m16n8k8, one tf32 (an f32's top 19 bits) per register
//   gnnfuse_mma_m16n8k8_f16f32(d, a, b, c)     m16n8k8 with f16 pairs: a[0..1] and b[0] read (seed 004's shape)
//   gnnfuse_mma_m16n8k8_bf16f32(d, a, b, c)    the same with bf16 pairs
//   gnnfuse_cvt_rna_tf32(float x) -> unsigned   x rounded to tf32 (to nearest, ties away from
//                                               zero: cvt.rna.tf32.f32), the register of an operand
// the fragment loads from shared memory (PTX ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16; a
// warp collective): four 8 x 8 matrices of 16-bit elements, lanes 8i .. 8i+7 giving the 16-byte
// aligned addresses of matrix i's rows 0..7; lane l receives in r[i] matrix i's elements
// (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1), the first in the low half (.trans: the elements
// (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4), i.e. of the transposed matrix):
//   gnnfuse_ldmatrix_x4(unsigned r[4], const void* row)
//   gnnfuse_ldmatrix_x4_trans(unsigned r[4], const void* row)
// and the asynchronous copies global -> shared (PTX cp.async.cg ... 16, cp.async.commit_group,
// cp.async.wait_group; per thread): the 16 bytes at smem (16-byte aligned) get src_bytes (0..16)
// bytes from gmem (16-byte aligned when src_bytes > 0), zeros after them, once a wait covers the
// copy's group; other threads see them after that wait and a barrier:
//   gnnfuse_cp_async16(void* smem, const void* gmem, int src_bytes)
//   gnnfuse_cp_async_commit()       the thread's copies since the last commit become a group
//   gnnfuse_cp_async_wait<N>()      every group but the newest N has landed
// and the plain loads of shared memory a cp.async may have staged (a load on a GPU; the emulator
// checks that no queued copy and no copy another thread landed without a barrier since covers
// the bytes read, which would be a race on a GPU):
//   gnnfuse_ld_staged(const T* p) -> T        one element
//   gnnfuse_ld_staged16(const void* p) -> uint4   16 bytes (16-byte aligned)
// `__shared__` itself is never spelled: g++ would read it as nothing (one array per thread);
// the emulator makes it a compile error. docs/SIMT.md has the rest (semantics, limits).
#pragma once

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define GNNFUSE_GLOBAL __global__
#define GNNFUSE_DEVICE __device__ __forceinline__
#define GNNFUSE_HOST_DEVICE __host__ __device__ __forceinline__
#define GNNFUSE_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#define GNNFUSE_DYNAMIC_SHARED(T, name) \
  extern __shared__ __align__(16) unsigned char gnnfuse_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(gnnfuse_dynamic_smem_)
#define GNNFUSE_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define GNNFUSE_UNROLL _Pragma("unroll")
#define GNNFUSE_DEVICE_CHECK(cond, msg) \
  do {                                  \
    if (!(cond)) __trap();              \
  } while (0)

// Tensor Cores: mma.sync.aligned.<shape>.row.col.f32.<type>.<type>.f32 by inline PTX (sm_80 and
// later; __trap() below). Every lane of the warp calls it at the same point; d may be c.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GNNFUSE_MMA_PTX(name, instruction)                                                            \
  GNNFUSE_DEVICE void name(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) { \
    asm volatile(instruction " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n" \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),      \
                   "f"(c[1]), "f"(c[2]), "f"(c[3]));                                                 \
  }
// m16n8k8 with 16-bit multiplicands: two registers of A, one of B.
#define GNNFUSE_MMA_K8_PTX(name, instruction)                                                         \
  GNNFUSE_DEVICE void name(float d[4], const unsigned a[2], const unsigned b[1], const float c[4]) { \
    asm volatile(instruction " {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"                \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));     \
  }
#else
#define GNNFUSE_MMA_PTX(name, instruction)                                                            \
  GNNFUSE_DEVICE void name(float*, const unsigned*, const unsigned*, const float*) { __trap(); }
#define GNNFUSE_MMA_K8_PTX(name, instruction) GNNFUSE_MMA_PTX(name, instruction)
#endif
GNNFUSE_MMA_PTX(gnnfuse_mma_m16n8k16_f16f32, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
GNNFUSE_MMA_PTX(gnnfuse_mma_m16n8k16_bf16f32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
GNNFUSE_MMA_PTX(gnnfuse_mma_m16n8k8_tf32f32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
GNNFUSE_MMA_K8_PTX(gnnfuse_mma_m16n8k8_f16f32, "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")
GNNFUSE_MMA_K8_PTX(gnnfuse_mma_m16n8k8_bf16f32, "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32")
#undef GNNFUSE_MMA_PTX
#undef GNNFUSE_MMA_K8_PTX
GNNFUSE_DEVICE unsigned gnnfuse_cvt_rna_tf32(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#else
  __trap();
  return 0u;
#endif
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GNNFUSE_LDMATRIX_PTX(name, instruction)                                                     \
  GNNFUSE_DEVICE void name(unsigned r[4], const void* row) {                                        \
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));                         \
    asm volatile(instruction " {%0, %1, %2, %3}, [%4];\n"                                           \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                    \
                 : "r"(a)                                                                            \
                 : "memory");                                                                        \
  }
#else
#define GNNFUSE_LDMATRIX_PTX(name, instruction) \
  GNNFUSE_DEVICE void name(unsigned*, const void*) { __trap(); }
#endif
GNNFUSE_LDMATRIX_PTX(gnnfuse_ldmatrix_x4, "ldmatrix.sync.aligned.m8n8.x4.shared.b16")
GNNFUSE_LDMATRIX_PTX(gnnfuse_ldmatrix_x4_trans, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16")
#undef GNNFUSE_LDMATRIX_PTX
GNNFUSE_DEVICE void gnnfuse_cp_async16(void* smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(src_bytes) : "memory");
#else
  __trap();
#endif
}
GNNFUSE_DEVICE void gnnfuse_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}
template <int N>
GNNFUSE_DEVICE void gnnfuse_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
template <typename T>
GNNFUSE_DEVICE T gnnfuse_ld_staged(const T* p) {
  return *p;
}
GNNFUSE_DEVICE uint4 gnnfuse_ld_staged16(const void* p) { return *static_cast<const uint4*>(p); }

#elif defined(GNNFUSE_SIMT_EMU)

#include "cuda/emu/simt_emu.h"

#else
#error "cuda/simt.cuh: compile with nvcc, or with -DGNNFUSE_SIMT_EMU for the CPU emulator"
#endif
