// Helpers the generated ATen adapters share (csrc/codegen/aten_*.cpp emit calls to them;
// they live here once). The CSC view comes from gnnfuse::csr_transpose (gnnfuse/graph.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "runtime/cpu.h"

namespace gnnfuse::detail {

inline runtime::DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble: return runtime::DType::Float64;
    case at::kBFloat16: return runtime::DType::BFloat16;
    case at::kHalf: return runtime::DType::Float16;
    default: return runtime::DType::Float32;  // the checks admit only the floating dtypes of the op's spec
  }
}

// The dtype row statistics and other `acc` tensors are held in: float32 for the reduced
// precisions (the kernels accumulate in float), the dtype itself otherwise.
inline at::ScalarType accumulation_dtype(at::ScalarType s) {
  return s == at::kBFloat16 || s == at::kHalf ? at::kFloat : s;
}

inline runtime::IType itype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kInt ? runtime::IType::Int32 : runtime::IType::Int64;
}

// The result of a CPU kernel. A large buffer is fresh memory from the OS on every call (glibc
// maps allocations above its mmap threshold), and the kernel's first writes fault it in page by
// page: 10k faults for a 40 MiB output cost about as much as an SpMM over it. Transparent huge
// pages for the 2 MiB-aligned interior cut that by 512x where the system enables them on
// request (THP "madvise" mode; a no-op elsewhere, and the advice is only a hint).
constexpr int64_t kHugePageBytes = int64_t(1) << 21;
inline at::Tensor empty_output(c10::SymIntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty_symint(sizes, options);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  if (t.device().is_cpu() && bytes >= 4 * kHugePageBytes) {
    const auto a = reinterpret_cast<uintptr_t>(t.mutable_data_ptr());
    const uintptr_t b = (a + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    const uintptr_t e = (a + static_cast<uintptr_t>(bytes)) / kHugePageBytes * kHugePageBytes;
    if (e > b) (void)madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
  }
#endif
  return t;
}

}  // namespace gnnfuse::detail
