// The Tensor-Core SpMM (issue 26): out = op(A) x on mma.sync, over a row-window-condensed view
// of A (TC-GNN, DTC-SpMM and FlashSparse condense so; seed 004 digest, section 5).
//
// The view (a TcSpmmPlan, built once per sparse pattern by torch/cuda/tensor_cores.cpp and cached):
// the output rows in windows of 16 (the M of the mma); in each window the distinct input rows
// that its entries read (the condensed columns), sorted, in blocks of K (the mma's K: 16 for
// f16 / bf16 on m16n8k16, 8 for tf32 on m16n8k8; the last block padded with -1). A block is one
// 16 x K tile of A: its entries, each with its place in the tile (row in the window * K + column
// in the block) and the CSR entry whose value it is (the product of the value factors there, or
// 1), sorted by place, duplicates adjacent (summed, in CSR order, in float). A warp computes a
// window times NT * 8 columns of x: per block it builds the A tile in shared memory, stages the
// block's K rows of x, and issues NT mma (fp32 accumulators in registers); it stores every row of
// its window (zero rows included), so out needs no zeroing. No atomics: deterministic.
//
// Host code (no CUDA header): the adapter fills the arguments with device pointers and calls
// tc_spmm() with the current stream; compiled by nvcc (tc_spmm.cu) into libgnnfuse with CUDA, and
// by g++ for the SIMT emulator into libgnnfuse_cuda_emu.so.
#pragma once

#include <cstdint>

namespace gnnfuse::cuda {

enum class TcType { Half, BFloat16, Float32 };  // x, out and the value factors; Float32 runs tf32

// The K of a dtype's mma (16 for Half and BFloat16, 8 for Float32).
inline int tc_k(TcType t) { return t == TcType::Float32 ? 8 : 16; }

struct TcSpmmArgs {
  int64_t out_rows = 0;  // out is out_rows x f, row-major
  int64_t f = 0;
  int64_t in_rows = 0;   // x is in_rows x f, row-major
  int64_t windows = 0;   // ceil(out_rows / 16)
  const int32_t* block_ptr = nullptr;   // windows + 1: the blocks of window w
  const int32_t* block_cols = nullptr;  // blocks * K: the row of x each tile column reads, or -1
  const int32_t* entry_ptr = nullptr;   // blocks + 1: the entries of block b
  const uint8_t* entry_place = nullptr; // per entry: row in the window * K + column in the block
  const int32_t* entry_src = nullptr;   // per entry: its index in the CSR arrays (the values')
  const void* values[3] = {nullptr, nullptr, nullptr};  // the value factors (dtype of x), or null
  const void* x = nullptr;
  void* out = nullptr;
};

// Columns of x per warp: NT mma tiles of 8 (4 where f <= 32, else 8).
int tc_spmm_tiles(int64_t f);

// Enqueues the kernel on `stream` (a cudaStream_t; nothing in the emulator).
void tc_spmm(TcType type, const TcSpmmArgs& args, void* stream);

}  // namespace gnnfuse::cuda
