// Helpers the generated ATen adapters share (csrc/codegen/emit_cpu.cpp emits calls to them;
// they live here once). The CSC view comes from gnnfuse::csr_transpose (gnnfuse/graph.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/cpu.h"

namespace gnnfuse::detail {

inline runtime::DType dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? runtime::DType::Float64 : runtime::DType::Float32;
}

inline runtime::IType itype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kInt ? runtime::IType::Int32 : runtime::IType::Int64;
}

}  // namespace gnnfuse::detail
