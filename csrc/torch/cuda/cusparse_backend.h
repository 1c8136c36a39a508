// The cuSPARSE backend of the CUDA adapters: the ops the generator finds to be one cuSPARSE SpMM
// or SDDMM (codegen cusparse_form: spmm, sddmm, scaled_spmm and the adjoints derived from them)
// call cuSPARSE's generic API instead of their generated kernels when this backend is selected.
// It is the baseline of the GPU benchmarks, and a fallback a user can pick per process.
//
// Selection: process-wide, like torch.backends.cuda.preferred_blas_library. GNNFUSE_CUDA_BACKEND
// (generated | cusparse) at first use, or set_backend (the op gnnfuse::_cuda_set_backend(str), in
// Python gnnfuse.backends.set_cuda_backend). It is read at every call, forward and backward
// alike; a thread's own choice (set_thread_backend) goes before it.
//
// cuSPARSE is opened at run time (dlopen of libcusparse.so.12, which a CUDA torch has loaded
// already), so libgnnfuse links no cuSPARSE; only its header is needed at build time (CMake finds
// it in the toolkit, in the nvidia-cusparse wheel beside torch, or fetches it from that wheel into
// the build folder). Built without the header, selecting cusparse raises. In the emulated library
// (GNNFUSE_CUDA_EMULATED) the same calls go to a host implementation of those cuSPARSE functions
// (cusparse_host.cpp: the documented semantics and consistency checks, over host memory).
//
// A call hands back to the generated kernels (returns false) where cuSPARSE would not do as
// well: a transposed SpMM under deterministic algorithms (cuSPARSE repeats bitwise only with
// CUSPARSE_SPMM_CSR_ALG3, which has no op(A) = A^T; the non-transposed calls use ALG3 then) or in
// float16/bfloat16 (cuSPARSE runs 16-bit SpMM with ALG3); 16-bit entry values that are a product
// of several factors (rounded, and perhaps overflowing, before cuSPARSE sees them), or a 16-bit
// SDDMM with a scale; a type combination cuSPARSE answers CUSPARSE_STATUS_NOT_SUPPORTED (bfloat16
// SDDMM on CSR). Every other cuSPARSE error raises, naming the op.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace gnnfuse::cuda_adapter {

enum class Backend { Generated, Cusparse };
Backend backend();
// Raises (std::invalid_argument) for cusparse where this build has no cuSPARSE header, or (on a
// GPU) where the cuSPARSE library cannot be opened.
void set_backend(Backend b);
std::string to_string(Backend b);
// "generated" or "cusparse"; raises (std::invalid_argument) for anything else.
Backend parse_backend(const std::string& name);

// This thread's choice, over the process-wide one (the backend= argument of gnnfuse.spmm and
// gnnfuse.sddmm: its call's forward only; autograd runs the backward on its own threads, under the
// process-wide choice). nullopt: none. Returns the previous one.
std::optional<Backend> set_thread_backend(std::optional<Backend> b);

// out[rows_of_op(A), F] = op(A) x, A the csr matrix rows x cols (rowptr, col; each entry's value
// the product of the defined `values` factors: A's values, edge operands; none defined: 1),
// op(A) = A^T where transpose. out is overwritten. false: not handled (see above).
bool cusparse_spmm(const char* op, const at::Tensor& rowptr, const at::Tensor& col, std::initializer_list<at::Tensor> values,
                   bool transpose, int64_t rows, int64_t cols, const at::Tensor& x, at::Tensor& out);
// out[e] = scale[e] * (u[i] . v[j]) for each entry e = (i, j) of A (rows x cols), in CSR order
// (scale: the product of the defined factors, 1 for none). out is overwritten. false: not handled.
bool cusparse_sddmm(const char* op, const at::Tensor& rowptr, const at::Tensor& col, std::initializer_list<at::Tensor> scale,
                    int64_t rows, int64_t cols, const at::Tensor& u, const at::Tensor& v, at::Tensor& out);

}  // namespace gnnfuse::cuda_adapter
