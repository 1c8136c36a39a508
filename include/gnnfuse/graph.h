// C++ API of gnnfuse's graph-format ops, for LibTorch users. Each function calls the
// registered op through the dispatcher, so libgnnfuse.so must be linked (or loaded) first.
// Conventions (PyG): edge_index[0] = source j, edge_index[1] = target i; the CSR is over
// target rows with sources ascending within a row. See docs/CONTRACTS.md.
#pragma once

#include <cstdint>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymInt.h>

namespace gnnfuse {

// edge_index [2, E] (int32 or int64, values in [0, num_nodes)) -> (rowptr [num_nodes + 1],
// col [E]) in edge_index's dtype, and perm int64 [E]: CSR position p holds input edge perm[p],
// so per-edge values in CSR order are w.index_select(0, perm). Duplicate edges keep input order.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> edge_index_to_csr(const at::Tensor& edge_index,
                                                                        int64_t num_nodes) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gnnfuse::edge_index_to_csr", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, c10::SymInt)>();
  return op.call(edge_index, c10::SymInt(num_nodes));
}

// The CSC view of a CSR matrix with num_cols columns: (colptr [num_cols + 1], row [nnz]) with
// rows ascending within each column, and perm int64 [nnz]: CSC position q holds CSR position perm[q].
// num_cols may be symbolic (Meta and fake tensors under torch.compile); an int64_t converts.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_transpose(const at::Tensor& rowptr,
                                                                    const at::Tensor& col,
                                                                    const c10::SymInt& num_cols) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gnnfuse::csr_transpose", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                c10::SymInt)>();
  return op.call(rowptr, col, num_cols);
}

}  // namespace gnnfuse
