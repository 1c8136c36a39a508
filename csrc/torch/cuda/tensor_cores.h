// The Tensor-Core SpMM in the CUDA adapters (issue 26; the view and arguments: cuda/tc_spmm.h; the
// kernels are generated, codegen/cuda_tensor_cores.cpp). The ops the generator finds to be one
// SpMM or a per-head SpMM (codegen tensor_core_form: spmm, scaled_spmm, spmm_heads, the gradients
// of their features, whose op(A) = A^T walks the transposed view, and of sddmm's and
// sddmm_heads' inputs) try it before their generated CUDA-core kernels, in float16 and bfloat16
// (fp32 accumulation), and in float32 as tf32 where PyTorch allows tf32 for matrix products
// (torch.backends.cuda.matmul.allow_tf32).
//
// Mode (process-wide, read at every call; GNNFUSE_CUDA_TENSOR_CORES=auto|on|off|rows at first use, or
// set_tensor_cores / the op gnnfuse::_cuda_set_tensor_cores / gnnfuse.backends.set_cuda_tensor_cores):
//   auto  where it is expected to win: 16-bit (or tf32-allowed float32) operands, F (per head)
//         of at least kTcMinF, and a condensed view whose columns are read by at least kTcMinReuse entries on
//         average (the rows of x a window gathers once, which CUDA-core kernels gather per entry);
//         a pattern's view is built at its first call, except for patterns marked transient
//         (mark_transient_pattern: a graph a layer converts anew at every call), which run the
//         CUDA-core kernels until their contents recur in new memory (the layer's next call): then
//         the pattern is remembered by contents with its views, and later calls with equal
//         contents use them (a compiled model's per-call CSR, not marked, likewise);
//   on    wherever it can run (any F, float32 as tf32 even where PyTorch does not allow tf32);
//   off   never;
//   rows  seed 004's kernel (TCA-SpMM: each row's dot products as mma.m16n8k8 plus a trace, rows
//         in buckets by entries; cuda/tc_spmm.h) wherever it can run, float16 and bfloat16 only
//         (float32 runs the CUDA-core kernels); auto never takes it (the seed's digest: at most
//         1/8 of each mma is used; a GPU has to show it winning first, issue 27).
// It cannot run on float64, with value factors of another dtype than x, or past int32 extents.
//
// The condensed view is built once per sparse pattern and direction (sorts and scans with ATen on
// the operands' device, a few host synchronisations) and cached like the graph statistics (keyed
// by the row pointers' TensorImpl, data, version; the columns' data and version). While a CUDA
// graph is captured only a cached view is used (building one synchronises).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include <ATen/core/Tensor.h>

#include "cuda/tc_spmm.h"

namespace gnnfuse::cuda_adapter {

enum class TensorCores { Auto, On, Off, Rows };
TensorCores tensor_cores();
// Returns the previous mode.
TensorCores set_tensor_cores(TensorCores mode);
std::string to_string(TensorCores mode);
// "auto", "on", "off" or "rows"; raises (std::invalid_argument) for anything else.
TensorCores parse_tensor_cores(const std::string& name);

// The thresholds of auto (issue 27 tunes them on a GPU).
constexpr int64_t kTcMinF = 32;
constexpr double kTcMinReuse = 1.5;

// out[rows_of_op(A), (H,) F] = op(A) x as cusparse_spmm (cusparse_backend.h), per head where x is
// [rows, H, F] (then `values` are [nnz] or [nnz, H] each), on Tensor Cores where the mode chooses
// them, by the op's generated `launch`. `values` in the order of the op's form; an undefined one
// is an absent optional factor. out is overwritten. false: not chosen (the generated kernels run).
bool tensor_core_spmm(const char* op, cuda::TcLaunch launch, const at::Tensor& rowptr, const at::Tensor& col,
                      std::initializer_list<at::Tensor> values, bool transpose, int64_t rows, int64_t cols, const at::Tensor& x,
                      at::Tensor& out);

// Condensed views built since the library loaded (tests: that the cache holds).
int64_t tensor_core_views_built();

// Patterns remembered by contents (recurring in new memory: a layer's per-call CSR, a compiled
// model's), at most 8, each with a copy of its CSR and its views.
int64_t tensor_core_patterns_remembered();

// Frees the cached views and the remembered patterns (not the views a captured CUDA graph reads);
// later calls build them again.
void clear_tensor_core_views();

// Marks `t` (row pointers or columns of a pattern) as converted for one call: auto builds no view
// of a pattern whose row pointers or columns lie in marked memory (`on` still does) before its
// contents recur in new memory. A mark holds
// its tensor weakly and matches by data pointer and size while that tensor lives unchanged (an
// in-place change unmarks it), so the tensor the kernels see under torch.func's wrappers matches
// (gnnfuse.nn unwraps them before marking). The op gnnfuse::_cuda_tensor_cores_transient(Tensor[]) marks from Python
// (the layers' per-call CSR, gnnfuse.nn). Tensors that cannot key a cache (inference tensors) are
// not marked: auto builds no view of them anyway.
// transient=false drops t's marks (a conversion the caller keeps for later calls after all).
void mark_transient_pattern(const at::Tensor& t, bool transient = true);

}  // namespace gnnfuse::cuda_adapter
