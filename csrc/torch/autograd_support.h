// Helpers the generated ATen adapters and autograd Functions share (csrc/codegen/emit_cpu.cpp
// emits calls to them; they live here once).
#pragma once

#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymInt.h>

#include "runtime/cpu.h"

namespace gnnfuse::detail {

inline runtime::DType dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? runtime::DType::Float64 : runtime::DType::Float32;
}

inline runtime::IType itype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kInt ? runtime::IType::Int32 : runtime::IType::Int64;
}

// The CSC view (colptr, row, perm) of a CSR matrix with num_cols columns, through the registered
// gnnfuse::csr_transpose (so it also runs on Meta and fake tensors, with symbolic sizes).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> csc_view(const at::Tensor& rowptr, const at::Tensor& col,
                                                               const c10::SymInt& num_cols) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gnnfuse::csr_transpose", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, c10::SymInt)>();
  return op.call(rowptr, col, num_cols);
}

}  // namespace gnnfuse::detail
