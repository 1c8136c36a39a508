// C++ API of gnnfuse's graph-format ops, for LibTorch users. Each function calls the
// registered op through the dispatcher, so libgnnfuse.so must be linked (or loaded) first.
// Conventions (PyG): edge_index[0] = source j, edge_index[1] = target i; the CSR is over
// target rows with sources ascending within a row. See docs/CONTRACTS.md.
#pragma once

#include <cstdint>
#include <optional>
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

// Graclus-style heavy-edge matching of a CSR graph, nodes visited in `order` (a permutation
// of [0, num_nodes), int64): each unmatched node joins its unmatched neighbour (row entry) of
// largest normalized weight w / d(u) + w / d(v), or stays alone. -> cluster int64 [num_nodes],
// ids consecutive in visiting order (their number is max + 1).
inline at::Tensor heavy_edge_matching(const at::Tensor& rowptr, const at::Tensor& col,
                                                           const std::optional<at::Tensor>& edge_weight,
                                                           const at::Tensor& order) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gnnfuse::heavy_edge_matching", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&)>();
  return op.call(rowptr, col, edge_weight, order);
}

}  // namespace gnnfuse
