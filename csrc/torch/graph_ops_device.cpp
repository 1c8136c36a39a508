// edge_index_to_csr and csr_transpose on every device but the CPU (CUDA first): the same results
// as graph_ops.cpp's CPU kernels (docs/CONTRACTS.md), computed with ATen's device operations, on
// the current stream, memory from the caching allocator:
//   edge_index_to_csr  two stable sorts (by source, then by target: the order (target, source,
//                      input position) of the CPU kernel), row pointers by searchsorted of the
//                      sorted targets (no host-side count of the rows);
//   csr_transpose      the CSR positions stably sorted by column (rows ascending within a column,
//                      equal (row, col) pairs in order), column pointers by searchsorted.
// On CUDA at::sort is CUB's segmented radix sort, searchsorted a binary search per output.
// The value checks (torch/checks) cost one host synchronisation: a device reduction says whether
// the input is valid, and only an invalid one is copied to the host, where the CPU check raises
// its own error (naming the op, the argument and the first bad value).
//
// Registered at the CUDA key (the CPU and Meta keys keep graph_ops.cpp's); the private ops
// _edge_index_to_csr_device and _csr_transpose_device run the same code on CPU and CUDA tensors
// (tests, benchmarks).
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "torch/checks.h"

namespace gnnfuse {
namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The stable order of `key` (int64 positions into it).
at::Tensor stable_order(const at::Tensor& key) {
  return std::get<1>(at::sort(key, /*stable=*/true, /*dim=*/0, /*descending=*/false));
}

// starts[k] = #{p : sorted[p] < k}, k in [0, n]: the pointers of a sorted key (values in [0, n)).
at::Tensor starts_of(const at::Tensor& sorted, int64_t n, at::ScalarType index_dtype) {
  const at::Tensor keys = at::arange(n + 1, sorted.options());
  return at::searchsorted(sorted, keys, /*out_int32=*/index_dtype == at::kInt, /*right=*/false);
}

Triple edge_index_to_csr_device(const at::Tensor& edge_index, int64_t num_nodes) {
  constexpr const char* op = "edge_index_to_csr";
  checks::edge_index(op, edge_index, num_nodes);  // on the device (torch/checks)
  return checks::named_allocations(op, "argument 'num_nodes' = " + std::to_string(num_nodes), [&]() -> Triple {
  const at::ScalarType index_dtype = edge_index.scalar_type();
  const at::Tensor src = edge_index.select(0, 0).to(at::kLong);
  const at::Tensor dst = edge_index.select(0, 1).to(at::kLong);
  // LSD: by source, then stably by target; ties of (target, source) keep the input order.
  const at::Tensor by_src = stable_order(src);
  const at::Tensor dst_by_src = dst.index_select(0, by_src);
  const at::Tensor second = stable_order(dst_by_src);
  const at::Tensor perm = by_src.index_select(0, second);
  const at::Tensor dst_sorted = dst_by_src.index_select(0, second);
  at::Tensor rowptr = starts_of(dst_sorted, num_nodes, index_dtype);
  at::Tensor col = src.index_select(0, perm).to(index_dtype);
  return {rowptr, col, perm};
  });
}

Triple csr_transpose_device(const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols) {
  constexpr const char* op = "csr_transpose";
  checks::extent(op, "num_cols", num_cols);
  checks::csr(op, rowptr, col, num_cols);  // on the device (torch/checks)
  return checks::named_allocations(op, "argument 'num_cols' = " + std::to_string(num_cols), [&]() -> Triple {
  const at::ScalarType index_dtype = col.scalar_type();
  const int64_t nnz = col.numel();
  const int64_t rows = rowptr.numel() - 1;
  const at::Tensor col64 = col.to(at::kLong);
  // The row of each CSR position, without reading nnz back (it is col's size).
  const at::Tensor row_of = at::repeat_interleave(at::arange(rows, rowptr.options().dtype(at::kLong)),
                                                  rowptr.diff().to(at::kLong), /*dim=*/0, /*output_size=*/nnz);
  const at::Tensor perm = stable_order(col64);
  at::Tensor row = row_of.index_select(0, perm).to(index_dtype);
  at::Tensor colptr = starts_of(col64.index_select(0, perm), num_cols, index_dtype);
  return {colptr, row, perm};
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {
  m.def("_edge_index_to_csr_device(Tensor edge_index, SymInt num_nodes) -> (Tensor rowptr, Tensor col, Tensor perm)");
  m.def("_csr_transpose_device(Tensor rowptr, Tensor col, SymInt num_cols) -> (Tensor colptr, Tensor row, Tensor perm)");
}

// At the CUDA key, not CompositeExplicitAutograd: tracing (torch.export with dynamic sizes) must
// reach the Meta kernels, not run this code on fake tensors.
TORCH_LIBRARY_IMPL(gnnfuse, CUDA, m) {
  m.impl("edge_index_to_csr", &edge_index_to_csr_device);
  m.impl("csr_transpose", &csr_transpose_device);
  m.impl("_edge_index_to_csr_device", &edge_index_to_csr_device);
  m.impl("_csr_transpose_device", &csr_transpose_device);
}

TORCH_LIBRARY_IMPL(gnnfuse, CPU, m) {
  m.impl("_edge_index_to_csr_device", &edge_index_to_csr_device);
  m.impl("_csr_transpose_device", &csr_transpose_device);
}

}  // namespace gnnfuse
