// The Tensor-Core SpMM (issue 26): out = op(A) x on mma.sync, over a row-window-condensed view
// of A (TC-GNN, DTC-SpMM and FlashSparse condense so; seed 004 digest, section 5). The kernels are
// generated (codegen/cuda_tensor_cores.cpp: one per form of entry values of a family's SpMM-form
// ops, with the fragments of cuda/tc_fragments.cuh); this header is what they and the adapters
// share: the view, the arguments, the tiling.
//
// The view (built once per sparse pattern by torch/cuda/tensor_cores.cpp and cached): the output
// rows in windows of 16 (the M of the mma); in each window the distinct input rows that its
// entries read (the condensed columns), sorted, in blocks of K (the mma's K: 16 for f16 / bf16 on
// m16n8k16, 8 for tf32 on m16n8k8; the last block padded with -1). A block is one 16 x K tile of
// A: its entries, each with its place in the tile (row in the window * K + column in the block)
// and the CSR entry whose value it is (the product of the value factors there, or 1), sorted by
// place, duplicates adjacent (summed, in CSR order, in float). A warp computes a window, one head
// and NT * 8 columns of x: per block it builds the A tile in shared memory (the entry values of
// that head), stages the block's K rows of x, and issues NT mma (fp32 accumulators in
// registers); it stores every row of its window (zero rows included), so out needs no zeroing.
// No atomics: deterministic.
//
// The rows form (seed 004's TCA-SpMM, TcKernel::Rows: gnnfuse.backends.set_cuda_tensor_cores("rows"),
// float16 and bfloat16 on mma.m16n8k8): each output row's dot products as mma plus a trace. The
// rows of op(A) (a CSR of op(A): for A^T the entries sorted by column, each with its CSR index)
// in buckets by entries: at most 8, 16, 32, and more (B = 1, 2, 4, 8 chunks of 8 entries, the
// longest rows in passes of 64). A warp takes (row, head, slab of 4 * 16 / B columns): per pass
// it stages the pass's rows of x (8 B of them, the slab's columns) in shared memory, puts the
// pass's entry values in the B fragment (chunk u of 8 in column u) and, per mma, the staged
// values in the A fragment (A row q B + u: chunk u of column q); D[q B + u][u] summed over u (a
// trace by shuffles) is output column q. 16 / B outputs per mma, warps per row proportional to
// B (the seed's balance: every warp issues about 4 mma per pass); no atomics: deterministic.
//
// Host code (no CUDA header): the adapter fills the arguments with device pointers and calls the
// op's generated launcher (<op>_cuda_tc) with the current stream.
#pragma once

#include <cstdint>

namespace gnnfuse::cuda {

enum class TcType { Half, BFloat16, Float32 };  // x, out and the value factors; Float32 runs tf32
enum class TcKernel { Condensed, Rows };         // the row-window-condensed view, or seed 004's rows

// The K of a dtype's mma (16 for Half and BFloat16, 8 for Float32).
inline int tc_k(TcType t) { return t == TcType::Float32 ? 8 : 16; }

constexpr int kTcMaxFactors = 3;  // value factors a form may have
constexpr int kTcWarps = 4;       // warps per block, each on its own (window, head, column slab)
constexpr int kTcRowBuckets = 4;  // the rows form's buckets: B = 1 << b chunks of 8 entries
constexpr int kTcRowMmas = 4;     // the rows form: mma per pass of a warp (its slab: 4 * 16 / B columns)

struct TcSpmmArgs {
  int64_t out_rows = 0;  // out is out_rows x heads x f, row-major
  int64_t f = 0;         // columns per head
  int64_t in_rows = 0;   // x is in_rows x heads x f, row-major
  int64_t windows = 0;   // ceil(out_rows / 16)
  int64_t heads = 1;     // 1 but for the per-head forms
  const int32_t* block_ptr = nullptr;   // windows + 1: the blocks of window w
  const int32_t* block_cols = nullptr;  // blocks * K: the row of x each tile column reads, or -1
  const int32_t* entry_ptr = nullptr;   // blocks + 1: the entries of block b
  const uint8_t* entry_place = nullptr; // per entry: row in the window * K + column in the block
  const int32_t* entry_src = nullptr;   // per entry: its index in the CSR arrays (the values')
  // The value factors (dtype of x) in the order of the op's form (codegen TensorCoreForm), each
  // one value per entry or (over the head) heads per entry; null: an optional one not given (1).
  const void* values[kTcMaxFactors] = {};
  const void* x = nullptr;
  void* out = nullptr;
  int64_t max_blocks = 0;  // > 0: at most this many blocks, each warp then striding over several units (tests)
  // The rows form (kernel == Rows; the condensed view's pointers unused):
  TcKernel kernel = TcKernel::Condensed;
  const int32_t* row_ptr = nullptr;      // out_rows + 1: the entries of op(A)'s row i
  const int32_t* row_cols = nullptr;     // per entry: the row of x it reads
  const int32_t* row_src = nullptr;      // per entry: its index in the CSR arrays (null: the same, op(A) = A)
  const int32_t* bucket_rows = nullptr;  // op(A)'s rows by bucket: bucket b's at [bucket_first[b], bucket_first[b + 1])
  int64_t bucket_first[kTcRowBuckets + 1] = {};
};

// Columns of x per warp: NT mma tiles of 8 (2 where f <= 16, 4 where f <= 32, else 8).
inline int tc_spmm_tiles(int64_t f) { return f <= 16 ? 2 : f <= 32 ? 4 : 8; }

// The column slabs of a row of x (per head) and the blocks of kTcWarps warps the launch takes
// (one unit per (window, head, slab), at most 2^20 blocks striding over them, or max_blocks).
inline int64_t tc_slabs(const TcSpmmArgs& a) {
  const int64_t w = int64_t(8) * tc_spmm_tiles(a.f);
  return (a.f + w - 1) / w;
}
inline int64_t tc_blocks(const TcSpmmArgs& a) {
  const int64_t units = a.windows * a.heads * tc_slabs(a);
  int64_t blocks = (units + kTcWarps - 1) / kTcWarps;
  if (blocks > (int64_t(1) << 20)) blocks = int64_t(1) << 20;
  return a.max_blocks > 0 && blocks > a.max_blocks ? a.max_blocks : blocks;
}

// The rows form: the columns of a warp's slab in bucket b (kTcRowMmas mma of 16 >> b columns),
// the slabs of a row, and the blocks of bucket b's launch.
inline int64_t tc_row_width(int b) { return int64_t(kTcRowMmas) * (16 >> b); }
inline int64_t tc_row_slabs(const TcSpmmArgs& a, int b) { return (a.f + tc_row_width(b) - 1) / tc_row_width(b); }
inline int64_t tc_row_blocks(const TcSpmmArgs& a, int b) {
  const int64_t units = (a.bucket_first[b + 1] - a.bucket_first[b]) * a.heads * tc_row_slabs(a, b);
  int64_t blocks = (units + kTcWarps - 1) / kTcWarps;
  if (blocks > (int64_t(1) << 20)) blocks = int64_t(1) << 20;
  return a.max_blocks > 0 && blocks > a.max_blocks ? a.max_blocks : blocks;
}

// A generated launcher (<op>_cuda_tc): enqueues the op's kernel on `stream` (a cudaStream_t;
// nothing in the emulator) by args.kernel. Throws std::invalid_argument for a dtype the op does
// not have (the rows form: float16 and bfloat16 only).
using TcLaunch = void (*)(TcType type, const TcSpmmArgs& args, void* stream);

}  // namespace gnnfuse::cuda
