// What the generated ATen adapters of the CUDA kernels (<op>_cuda_register.cpp, emitted by
// csrc/codegen/aten_cuda.cpp) call around a launch: the device guard, the graph statistics the
// launch decision reads, and the launch itself (runtime/cuda_launch.h's decision, the workspace
// from the caching allocator, the current stream, the dense-product hook on ATen).
//
// Compiled in two modes (the same text):
//   CUDA      (libgnnfuse built with CUDA): kernels registered at the CUDA key; a CUDAGuard on the
//             inputs' device, c10::cuda::getCurrentCUDAStream() (what at::cuda::getCurrentCUDAStream
//             returns), workspace and matmul operands on that device;
//   emulated  (-DGNNFUSE_CUDA_EMULATED, libgnnfuse_cuda_emu.so): the same adapters registered at
//             the CPU key over CPU tensors, the kernels compiled by g++ -DGNNFUSE_SIMT_EMU and run
//             by the SIMT emulator; the guard and the stream are nothing.
// Both modes read, at every call, the environment variables that force the launch (tests,
// benchmarks): GNNFUSE_CUDA_FORCE_VARIANT (row_split, warp_per_row, pos_split, pos_split_atomic,
// lanes, reg_lanes, pos_lanes, pos_lanes_atomic: applied where the op offers it, ignored
// elsewhere; an atomic form is its deterministic one under deterministic algorithms),
// GNNFUSE_CUDA_FORCE_GROUP (lanes per row: 1, 2, 4, 8, 16 or 32) and GNNFUSE_CUDA_FORCE_LOWERING
// (a `variants auto` op's lowering, where it has that many). The emulator reads GNNFUSE_SIMT_ORDER itself.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>

#if !defined(GNNFUSE_CUDA_EMULATED)
#include <c10/cuda/CUDAGuard.h>
#endif

#include "runtime/cuda_launch.h"
#include "torch/cuda/cusparse_backend.h"
#include "torch/cuda/tensor_cores.h"

// The dispatch key the CUDA adapters register at.
#if defined(GNNFUSE_CUDA_EMULATED)
#define GNNFUSE_CUDA_DISPATCH_KEY CPU
#else
#define GNNFUSE_CUDA_DISPATCH_KEY CUDA
#endif

namespace gnnfuse::cuda_adapter {

// The device of `t` made current for the op's scope (a c10::cuda::CUDAGuard; emulated: nothing).
class DeviceScope {
 public:
  explicit DeviceScope(const at::Tensor& t);

 private:
#if !defined(GNNFUSE_CUDA_EMULATED)
  c10::cuda::CUDAGuard guard_;
#endif
};

// Statistics of a sparse operand in the direction an op walks it: `ptr` its row pointers (or a
// CSC view's column pointers), `idx` its columns (or rows). rows = ptr.size(0) - 1 and nnz =
// idx.size(0) are read from the shapes; the longest row needs the values, which on a GPU costs a
// reduction and one synchronisation: it is computed once per graph and cached, keyed by ptr's
// TensorImpl (held weakly), data pointer, size, device and version counter (an in-place change
// of the row pointers is a miss). Inference tensors have no version counter: not cached.
runtime::cuda::GraphStats graph_stats(const at::Tensor& ptr, const at::Tensor& idx);
// How many times graph_stats computed the longest row (a cache miss) since the library loaded.
int64_t graph_stats_computed();

// at::globalContext().deterministicAlgorithms(): the requests then keep to lowerings and variants
// free of floating-point atomics.
bool deterministic();

// GNNFUSE_CUDA_FORCE_LOWERING, or -1.
int forced_lowering(int lowerings);

// A GNNFUSE_CUDA_* knob read at every call: a non-negative int, -1 where unset or empty; anything
// else raises naming the variable and `expected`.
int env_int(const char* name, const char* expected);

// The launch of one op: `req` (the op's <op>_cuda_request) gets the call's determinism
// (at::globalContext().deterministicAlgorithms(): no floating-point atomics) and the forcing of
// the environment, runtime::cuda::decide chooses, the workspace is one byte tensor from the
// caching allocator on `like`'s device (alive until the kernels are enqueued: the allocator
// reuses it only in stream order), and `run` (the op's <op>_cuda) enqueues the kernels on the
// current stream. No host synchronisation.
void launch(const char* op, const at::Tensor& like, runtime::cuda::Request req,
            const std::function<void(const runtime::cuda::LaunchConfig&, const runtime::cuda::Env&)>& run);

// The output pattern of a `symbolic S` op on CUDA (the generated <op>_symbolic adapter; seed 002;
// the kernels: codegen/cuda_symbolic.cpp). `slots` writes each row's hash-set slots at [row + 1]
// of a zeroed int64 [rows + 1]. The rows with products are then binned by their slots
// (runtime::cuda::PatternBin: up to kPatternListSlots a sorted list in registers, up to
// kPatternSharedSlots a hash set in shared memory, longer a hash set in a global table, or dense
// flags over the `cols` columns where cols <= kPatternDenseRatio * slots (cols < 0: unknown,
// never); GNNFUSE_CUDA_PATTERN_BINS="<list>,<shared>[,<dense ratio>]" lowers the two bounds and
// sets the ratio, GNNFUSE_CUDA_PATTERN_GRID caps the blocks of a launch (`grid`; <= 0: none) so
// that blocks loop over rows: tests) and `rows` runs the listed rows rows[t0 .. t1) of one bin: without col
// it writes each row's size at out_rowptr[row + 1], with col the row's columns sorted at
// col + out_rowptr[row]. Its offsets: none (Shared: `most` the slots of each of its rows, one class), the
// running sum of the listed rows' slots (Global: row rows[t]'s set at offsets[t] - offsets[t0]
// of `table`, index elements), none (Dense: `most` flag words per row, row rows[t]'s at
// (t - t0) * most of `table`). The Global and Dense rows go in chunks whose tables fit
// max(64K, operand_entries (the first operand's entries) + rows, the largest row's) elements
// (index elements; flag words for Dense): never a buffer of every product, and the workspace
// within the first operand's size and the output's (GNNFUSE_CUDA_PATTERN_BUDGET forces a smaller
// budget: tests); then the sizes are scanned and the columns allocated exactly. Three
// synchronisations (the rows with products, the bins' sizes, the output's size); more Global
// chunks read the offsets on the host. Returns (int64 row pointers [rows + 1], columns of `index`'s dtype).
struct PatternPasses {
  std::function<void(int64_t* slots, const runtime::cuda::Env& env)> slots;
  std::function<void(runtime::cuda::PatternBin bin, const int64_t* rows, int64_t t0, int64_t t1, const int64_t* offsets, int64_t most, int64_t grid,
                     void* table, int64_t* out_rowptr, void* col, const runtime::cuda::Env& env)>
      rows;
};
std::pair<at::Tensor, at::Tensor> computed_pattern(const char* op, const char* index_arg, const at::Tensor& index, int64_t rows, int64_t cols,
                                                   int64_t operand_entries, const PatternPasses& passes);

// Autotune (GNNFUSE_CUDA_AUTOTUNE=1, or this switch; also the op gnnfuse::_cuda_set_autotune):
// the first call per (graph statistics, extents, dtypes, lowering, determinism) times the offered
// variants and remembers the fastest; autotune_table() (gnnfuse::_cuda_autotune_table() -> str)
// lists the choices, "<key> -> <variant> <ms> ms".
void set_autotune(bool on);
std::map<std::string, std::string> autotune_table();

// Launches per "<op> <variant> <group> <lowering>" (the group of the first kernel) since the
// library loaded (tests: that a forced variant ran); also the op gnnfuse::_cuda_launch_counts() ->
// str, one "<key> <count>" per line.
std::map<std::string, int64_t> launch_counts();
// One more launch under `key` (the cuSPARSE backend counts "<op> cusparse <algorithm> 0").
void count_launch(const std::string& key);

}  // namespace gnnfuse::cuda_adapter
