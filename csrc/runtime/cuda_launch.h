// The launch decision of the generated CUDA kernels: one piece of host C++ (no CUDA
// dependency) that both the CUDA ATen adapters and the emulated path call. From cheap statistics
// of the graph (cached on it by the caller) and what the op's generated code offers, it chooses
// the schedule variant, the group size (lanes per row), grid and block sizes, the vector width
// of feature-row loads, the shared-memory bytes and the workspace layout of every kernel.
//
// A call of an op on CUDA:
//   Request req = <op>_cuda_request(prm, dtype, itype);   // generated: its variants and kernels
//   req.graph = stats;  req.deterministic = ...;            // the caller's
//   LaunchConfig cfg = decide(req);
//   workspace = allocate(cfg.workspace_bytes);              // the caching allocator
//   <op>_cuda(prm, dtype, itype, cfg, Env{stream, workspace, matmul hook});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gnnfuse::runtime::cuda {

// The schedule variants (codegen/schedule_cuda.cpp). WarpPerRow runs the RowSplit kernels with
// 32 lanes per row (long rows); PosSplitAtomic is not deterministic (atomics at chunk borders).
// RegLanes, PosLanes and PosLanesAtomic are the lanes-over-the-feature-loops forms with the row's
// accumulators in registers (GE-SpMM / cuSPARSE CSR_ALG2-like): by rows, and balanced by
// nonzeros (carries added in order, or atomics at the chunk borders: not deterministic).
enum class Variant { RowSplit, WarpPerRow, PosSplit, PosSplitAtomic, Lanes, RegLanes, PosLanes, PosLanesAtomic };
// row_split, warp_per_row, pos_split, pos_split_atomic, lanes, reg_lanes, pos_lanes, pos_lanes_atomic
const char* to_string(Variant v);
// The name of a generated schedule variant -> Variant (row_split, pos_split, pos_split_atomic,
// lanes, reg_lanes, pos_lanes, pos_lanes_atomic); false for another name.
bool parse_variant(const std::string& name, Variant* out);

// The kernel forms (one per phase of a top loop). RegLanes: a group of G lanes per row, each lane
// owning VW consecutive elements of the lane variable times R register chunks (R a template
// parameter); the group walks the row's entries together, loaded G at a time and broadcast by
// shuffles. PosLanes: the same over a chunk of stored entries whatever the rows.
enum class Form { RowSplit, PosSplit, Lanes, Serial, RegLanes, PosLanes };

// Statistics of the sparse operand a call walks, in the direction it walks it (Request::
// by_columns: the CSC view's). nnz must be exact (col.size(0)): the pos split's carries are sized
// from it.
struct GraphStats {
  int64_t rows = 0;
  int64_t nnz = 0;
  int64_t max_row = 0;
  double mean_row() const { return rows > 0 ? static_cast<double>(nnz) / static_cast<double>(rows) : 0.0; }
};

// One kernel of a variant, sized for the call by the generated code.
struct KernelShape {
  Form form = Form::Lanes;
  int64_t rows = 0;         // iterations of its top loop
  int64_t tile_extent = 1;  // extent of the tiled (RowSplit, PosSplit) or lane (Lanes) variable; 1: none
  int feature_tile = 0;     // RowSplit, PosSplit: columns per thread (0: no tiled variable)
  int64_t group_elems = 0;   // Lanes: accumulator elements of the row buffers per group
  int64_t thread_elems = 0;  // Lanes: accumulator elements of the row buffers per lane
  int64_t staged_bytes = 0;  // Lanes: bytes per lane of a walk's entries staged in shared memory
  bool vector_ok = false;    // RowSplit, PosSplit, RegLanes, PosLanes: the rows it reads by tiles are 16-byte aligned
  bool regs = false;         // RegLanes, PosLanes: row buffers in registers (R chunks must cover a pass); PosLanes without: entrywise, no carries
  bool passes = false;       // RegLanes, PosLanes: the lane variable may be covered in several passes
  int64_t lane_gcd = 0;      // RegLanes: the gcd of the extents of every lane loop (vector loads); 0: tile_extent
  // Lanes: the mean entries per row (rounded up) of a walk whose entries the group's lanes take
  // one each (a computed pattern's row sums); the group is the power of two covering it (up to a
  // warp). 0: none (the group covers tile_extent).
  int64_t split_mean = 0;
};

struct VariantShape {
  Variant variant = Variant::RowSplit;
  std::vector<KernelShape> kernels;
  bool atomic = false;  // its result depends on the order of floating-point atomics (not deterministic)
};

struct Request {
  int lowering = 0;                    // the op's lowering (`variants auto`: chosen by its cost model)
  int lowerings = 1;                   // how many the op has
  bool by_columns = false;             // the op walks its sparse operand by columns: graph holds the column statistics
  std::vector<VariantShape> variants;  // offered, RowSplit (or Lanes) first
  GraphStats graph;                    // the caller's statistics
  int scalar_bytes = 4;                // the dtype's element size
  int acc_bytes = 4;                   // the accumulation type's
  int index_bytes = 4;
  int64_t call_bytes = 0;              // workspace of the whole call (its temporaries), generated
  bool deterministic = false;          // torch.are_deterministic_algorithms_enabled(): no `atomic` variant
  int force_variant = -1;              // a Variant forced (tests, benchmarks); -1: decide
  int force_group = 0;                 // lanes per row forced (power of two up to 32); 0: decide
};

struct KernelLaunch {
  Form form = Form::Lanes;
  int group = 1;               // lanes per row (a power of two up to 32)
  int block = 256;             // threads per block
  int64_t grid = 1;            // blocks
  int64_t smem_bytes = 0;      // dynamic shared memory
  int vector_width = 1;        // elements per load of a tile's row (1, or 16 bytes' worth)
  int64_t chunk = 0;           // PosSplit: stored entries per warp; PosLanes: per group
  int64_t chunks = 0;          // PosSplit, PosLanes: the chunks (ceil(nnz / chunk))
  int regs = 1;                // RegLanes, PosLanes: register chunks of VW elements per lane (1, 2, 4, 8)
  bool buffers_shared = false;  // Lanes: the row buffers of groups in shared memory (else workspace)
  int64_t workspace_offset = 0;  // its part of the workspace, bytes from the start
  int64_t workspace_bytes = 0;
};

struct LaunchConfig {
  int lowering = 0;  // Request::lowering
  bool nondeterministic = false;  // deterministic requested, but every variant offered is `atomic`
  Variant variant = Variant::RowSplit;
  size_t offered = 0;  // index of the variant in Request::variants
  std::vector<KernelLaunch> kernels;
  int64_t workspace_bytes = 0;  // the call's temporaries first (Request::call_bytes), then the kernels'
};

// The device limits the decision respects.
constexpr int kBlock = 256;
constexpr int64_t kMaxGrid = 65535;               // blocks of a grid-stride launch
constexpr int64_t kSharedBytes = 48 * 1024;       // dynamic shared memory without opt-in
constexpr int kWarp = 32;
constexpr int64_t kPosChunk = 256;                // stored entries per warp of PosSplit (8 per lane)
constexpr int64_t kPosLanesChunkMin = 32;         // stored entries per group of PosLanes: a power of two
constexpr int64_t kPosLanesChunkMax = 128;        //   in [min, max], about four chunks per resident group
constexpr int64_t kResidentThreads = 132 * 2048;  // threads an H100 / H200 holds at once (132 SMs)
constexpr double kEntryNs = 150.0;                // a group's walk: ns per entry of one row (dependent loads)
constexpr double kEntryBytesPerNs = 4.0;          //   plus its feature row's bytes at this rate
constexpr double kStreamBytesPerNs = 3000.0;      // gathered feature rows streamed (3 TB/s)
constexpr double kExtraLaunchNs = 5000.0;         // PosLanes' extra kernel (fill or fix-up) and launch
constexpr int kMaxRegs = 8;                       // register chunks per lane of RegLanes / PosLanes
constexpr int64_t kWorkspaceAlign = 256;

// The decision (cuda_launch.cpp documents the rules). Throws std::invalid_argument when the
// request offers no variant, or a forced one it does not offer.
LaunchConfig decide(const Request& req);

// The hook a kernel calls for a dense product block (MatmulBlock): C (+)= op(A) op(B), row-major,
// m x n, inner extent k. The adapter maps it to cuBLAS through ATen; elements are of the op's dtype,
// or of its accumulation type where *_acc.
struct MatmulCall {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  bool a_trans = false, a_acc = false;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool b_trans = false, b_acc = false;
  void* c = nullptr;
  int64_t ldc = 0;
  bool c_acc = false;
  bool accumulate = false;  // C += (else C =)
};

// What a launch needs besides the config: the stream (a cudaStream_t), the workspace of
// LaunchConfig::workspace_bytes (256-byte aligned), and the dense-product hook.
struct Env {
  void* stream = nullptr;
  void* workspace = nullptr;
  void (*matmul)(void* ctx, const MatmulCall& call, int dtype) = nullptr;  // dtype: runtime::DType as int
  void* matmul_ctx = nullptr;
};

// The bins of a computed pattern's rows (seed 002; cuda_adapter::computed_pattern, the kernels of
// codegen/cuda_symbolic.cpp), by the slots of a row's set (cu::row_set_slots: a power of two at
// least twice its possible distinct columns): up to kPatternListSlots a thread per row with a
// sorted list of kPatternListSlots / 2 columns in registers (cu::RowList), up to
// kPatternSharedSlots a block of kPatternBlock threads per row with a hash set in shared memory
// (cu::SharedRowSet), longer rows a thread per row with a hash set in the global table
// (cu::RowSet), or, where the column extent n is at most kPatternDenseRatio times their slots
// (the flags' n / 8 bytes at most half the smallest table's), a block per row with dense flags
// over the columns in global memory (cu::DenseRowSet: sorted by construction). The slots kernel
// writes each row's slots; no row reads more than its bin's.
enum class PatternBin { List = 0, Shared = 1, Global = 2, Dense = 3 };
constexpr int64_t kPatternListSlots = 64;
constexpr int64_t kPatternSharedSlots = 4096;
constexpr int64_t kPatternDenseRatio = 16;
constexpr int kPatternBlock = 128;
// A Shared / Dense row whose first loop has at least this many entries splits it over the
// block's threads; a shorter one over the block's warps, each warp's lanes over the nested walk.
constexpr int64_t kPatternWideFirst = 32;
// A Shared set of int64 indices and its counter fit the 48 KiB of a launch without opting in.
static_assert(kPatternSharedSlots * 8 + 4 <= 48 * 1024, "the Shared bin's set must fit 48 KiB of shared memory");
static_assert(kPatternBlock >= 32 && kPatternBlock % 32 == 0, "a Shared / Dense row's short first loop goes to the block's whole warps");

// The greatest common divisor of two extents (a kernel's lane loops: KernelShape::lane_gcd).
inline int64_t gcd_of(int64_t a, int64_t b) { return b == 0 ? a : gcd_of(b, a % b); }

// Rounds a byte count up to the workspace alignment.
inline int64_t aligned(int64_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

}  // namespace gnnfuse::runtime::cuda
