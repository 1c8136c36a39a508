#include "torch/checks.h"

#include "torch/autograd_support.h"
#include "torch/pattern_cache.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <cstdint>
#include <limits>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/_assert_async.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

namespace gnnfuse::checks {
namespace {

// Elements per parallel task in the O(N + E) value scans.
constexpr int64_t kScanGrain = int64_t{1} << 16;
// Elements per branch-free block inside a task.
constexpr int64_t kScanBlock = 1024;

// Raises "gnnfuse::<op>: argument '<arg>' <what...>". Callers end <what...> with "(got ...)".
template <typename... Args>
[[noreturn]] void fail(const char* op, const char* arg, const Args&... what) {
  TORCH_CHECK(false, "gnnfuse::", op, ": argument '", arg, "' ", what...);
}

// Tensors off the CPU have their values checked on their device: a few reductions, one
// synchronisation, the verdict read back; only an invalid input is copied to the host, where the
// CPU check finds the first bad value and raises its own message (the same words on every
// device). GNNFUSE_CHECKS_ON_DEVICE=1 takes that path for CPU tensors too (tests).
bool on_device(const at::Tensor& t) {
  static const bool forced = [] {
    const char* v = std::getenv("GNNFUSE_CHECKS_ON_DEVICE");
    return v != nullptr && std::string(v) == "1";
  }();
  return !t.device().is_cpu() || forced;
}

std::atomic<CaptureProbe> capture_probe{nullptr};

// Under capture: `bad` (a boolean tensor of any shape on the device) asserted all false there.
// (On a GPU the message must stay under 255 characters: what is cut to fit.)
void assert_none(const char* op, const at::Tensor& bad, const std::string& what) {
  const std::string head = std::string("gnnfuse::") + op + ": ";
  const std::string tail = " (checked on the device during CUDA graph capture)";
  constexpr size_t kMaxMessage = 254;
  const size_t room = kMaxMessage > head.size() + tail.size() ? kMaxMessage - head.size() - tail.size() : 0;
  const std::string body = what.size() <= room ? what : what.substr(0, room >= 3 ? room - 3 : 0) + "...";
  at::_assert_async(bad.any().logical_not(), (head + body + tail).substr(0, kMaxMessage));
}

// t >= bound, elementwise, without the bound wrapping in t's (index) dtype: all false where the
// bound is past the dtype's largest value.
at::Tensor at_least(const at::Tensor& t, int64_t bound) {
  if (t.scalar_type() == at::kInt && bound > std::numeric_limits<int32_t>::max()) return at::zeros_like(t, t.options().dtype(at::kBool));
  return t.ge(bound);
}

// The host copy of t (t itself on the CPU), contiguous.
at::Tensor host(const at::Tensor& t) {
  no_capture(t, "a host copy");
  return t.cpu().contiguous();
}

// The values of a small device tensor of int64 verdicts, read back (the synchronisation).
std::vector<int64_t> read_back(const std::vector<at::Tensor>& parts) {
  no_capture(parts.front(), "a read-back");
  std::vector<at::Tensor> flat;
  for (auto& p : parts) flat.push_back(p.reshape({-1}).to(at::kLong));
  const at::Tensor h = at::cat(flat).cpu();
  return std::vector<int64_t>(h.const_data_ptr<int64_t>(), h.const_data_ptr<int64_t>() + h.numel());
}

// The name a PyTorch user knows a dtype by (torch.float32 rather than Float).
const char* dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kBool: return "bool";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(s);
  }
}

void defined(const char* op, const char* arg, const at::Tensor& t) {
  if (!t.defined()) fail(op, arg, "must be a tensor (got an undefined tensor)");
}

void ndim_eq(const char* op, const char* arg, const at::Tensor& t, int64_t ndim) {
  if (t.dim() != ndim) {
    fail(op, arg, "must be ", ndim, "-D (got a ", t.dim(), "-D tensor of shape ", t.sym_sizes(), ")");
  }
}

// Smallest i in [0, n) with bad(i), or n when there is none. Each task scans its range
// in blocks with a branch-free OR (vectorisable) and pins the position only inside a
// block that holds a violation; tasks past an already known violation stop early.
template <typename Bad>
int64_t first_violation(int64_t n, const Bad& bad) {
  std::atomic<int64_t> first{n};
  at::parallel_for(0, n, kScanGrain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b += kScanBlock) {
      if (b >= first.load(std::memory_order_relaxed)) return;
      const int64_t e = std::min(end, b + kScanBlock);
      unsigned any = 0;
      for (int64_t i = b; i < e; ++i) any |= static_cast<unsigned>(bad(i));
      if (any == 0) continue;
      int64_t i = b;
      while (!bad(i)) ++i;
      int64_t seen = first.load(std::memory_order_relaxed);
      while (i < seen && !first.compare_exchange_weak(seen, i, std::memory_order_relaxed)) {
      }
      return;
    }
  });
  return first.load();
}

template <typename index_t>
void rowptr_values(const char* op, const char* rowptr_arg, const char* col_arg, const index_t* rowptr, int64_t rows, int64_t nnz) {
  if (rowptr[0] != 0) fail(op, rowptr_arg, "must start at 0 (got ", rowptr_arg, "[0] = ", rowptr[0], ")");

  const int64_t drop = first_violation(rows, [rowptr](int64_t i) { return rowptr[i + 1] < rowptr[i]; });
  if (drop < rows) {
    fail(op, rowptr_arg, "must be non-decreasing (got ", rowptr_arg, "[", drop, "] = ", rowptr[drop], " > ", rowptr_arg, "[",
         drop + 1, "] = ", rowptr[drop + 1], ")");
  }
  if (static_cast<int64_t>(rowptr[rows]) != nnz) {
    fail(op, rowptr_arg, "must end at the number of edges ", col_arg, ".numel() = ", nnz, " (got ", rowptr_arg, "[", rows,
         "] = ", rowptr[rows], ")");
  }
}

// The largest column read as unsigned (a negative one is then above every bound), 0 when there
// is none: the columns are in [0, n) iff nnz == 0 or the result is below n. One parallel pass,
// each task over 8 independent maxima (no loop-carried compare-and-select chain: about twice as
// fast as a compare-and-or scan of the same columns against one bound).
template <typename index_t>
uint64_t col_umax(const index_t* col, int64_t nnz) {
  std::mutex m;
  uint64_t top = 0;
  at::parallel_for(0, nnz, kScanGrain, [&](int64_t begin, int64_t end) {
    uint64_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t p = begin;
    for (; p + 8 <= end; p += 8)
      for (int k = 0; k < 8; ++k) {
        const auto v = static_cast<uint64_t>(static_cast<int64_t>(col[p + k]));
        h[k] = v > h[k] ? v : h[k];
      }
    for (int64_t q = p; q < end; ++q) {
      const auto v = static_cast<uint64_t>(static_cast<int64_t>(col[q]));
      h[0] = v > h[0] ? v : h[0];
    }
    const uint64_t local = *std::max_element(h, h + 8);
    std::lock_guard<std::mutex> lock(m);
    top = std::max(top, local);
  });
  return top;
}

// The dense argument and dimension a `bound` ends in ("the extent of index j, x.size(0)": x, 0),
// when a dense operand's dimension gives the extent; nullopt for a csr operand's rows
// ("browptr.size(0) - 1"), an extent argument or no bound.
std::optional<std::pair<std::string, int64_t>> dense_binding(const char* bound) {
  if (!bound) return std::nullopt;
  std::string b(bound);
  const size_t comma = b.rfind(", ");
  if (comma != std::string::npos) b = b.substr(comma + 2);
  const size_t dot = b.find(".size(");
  if (dot == std::string::npos || dot == 0 || b.back() != ')') return std::nullopt;
  const std::string dim = b.substr(dot + 6, b.size() - dot - 7);
  if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  for (size_t k = 0; k < dot; ++k)
    if (!(std::isalnum(static_cast<unsigned char>(b[k])) || b[k] == '_')) return std::nullopt;
  return std::make_pair(b.substr(0, dot), static_cast<int64_t>(std::stoll(dim)));
}

// Raises the error of the first column outside [0, num_cols) (the caller knows there is one).
// Where a dense argument's dimension gives num_cols, a column past it may as well mean that
// argument is short: the message then names both, the argument's size and the largest column.
template <typename index_t>
[[noreturn]] void col_out_of_range(const char* op, const char* col_arg, const index_t* col, int64_t nnz, int64_t num_cols,
                                   const char* bound) {
  // One unsigned comparison catches both c < 0 and c >= num_cols.
  const auto limit = static_cast<uint64_t>(num_cols);
  const int64_t bad = first_violation(nnz, [col, limit](int64_t p) {
    return static_cast<uint64_t>(static_cast<int64_t>(col[p])) >= limit;
  });
  TORCH_INTERNAL_ASSERT(bad < nnz, "gnnfuse::", op, ": column range and scan disagree");
  const auto dense = dense_binding(bound);
  if (dense && static_cast<int64_t>(col[bad]) >= num_cols) {
    int64_t top = 0;
    for (int64_t p = 0; p < nnz; ++p) top = std::max(top, static_cast<int64_t>(col[p]));
    const std::string has = dense->second == 0 ? " rows" : " entries in dimension " + std::to_string(dense->second);
    fail(op, col_arg, "must hold column indices in [0, ", num_cols, "), ", bound, ": ", dense->first, " has ", num_cols,
         has, " but the column indices in ", col_arg, " reach ", top, " (", top + 1, " columns) (got ", col_arg, "[", bad, "] = ", col[bad], ")");
  }
  fail(op, col_arg, "must hold column indices in [0, ", num_cols, ")", bound ? ", " : "", bound ? bound : "", " (got ", col_arg,
       "[", bad, "] = ", col[bad], ")");
}

template <typename index_t>
void edge_index_values(const char* op, const index_t* ei, int64_t num_edges, int64_t num_nodes, int64_t num_dst) {
  const auto src_bound = static_cast<uint64_t>(num_nodes), dst_bound = static_cast<uint64_t>(num_dst);
  const int64_t bad = first_violation(2 * num_edges, [ei, num_edges, src_bound, dst_bound](int64_t p) {
    return static_cast<uint64_t>(static_cast<int64_t>(ei[p])) >= (p < num_edges ? src_bound : dst_bound);
  });
  if (bad >= 2 * num_edges) return;
  if (num_dst == num_nodes) {
    fail(op, "edge_index", "must hold node indices in [0, ", num_nodes, ") (got edge_index[",
         bad / num_edges, ", ", bad % num_edges, "] = ", ei[bad], ")");
  }
  if (bad < num_edges) {
    fail(op, "edge_index", "must hold source node indices (row 0) in [0, ", num_nodes, ") (got edge_index[0, ", bad,
         "] = ", ei[bad], ")");
  }
  fail(op, "edge_index", "must hold target node indices (row 1) in [0, ", num_dst, ") (got edge_index[1, ",
       bad - num_edges, "] = ", ei[bad], ")");
}

// The row holding CSR position e (rowptr valid, e < nnz): a binary search, for messages.
template <typename index_t>
int64_t row_of(const index_t* rowptr, int64_t rows, int64_t e) {
  return static_cast<int64_t>(std::upper_bound(rowptr, rowptr + rows + 1, static_cast<index_t>(e)) - rowptr) - 1;
}

template <typename index_t>
void csc_values(const char* op, const char* const names[5], const index_t* rowptr, int64_t rows,
                const index_t* col, int64_t nnz, const index_t* colptr, int64_t cols, const index_t* row,
                const int64_t* perm) {
  if (colptr[0] != 0) fail(op, names[0], "must start at 0 (got ", names[0], "[0] = ", colptr[0], ")");
  // The whole of colptr before any entry is read: with 0 <= colptr[j] <= colptr[cols] = nnz,
  // every position q below is one of the nnz entries.
  const int64_t drop = first_violation(cols, [colptr](int64_t j) { return colptr[j + 1] < colptr[j]; });
  if (drop < cols) {
    fail(op, names[0], "must be non-decreasing (got ", names[0], "[", drop, "] = ", colptr[drop], " > ", names[0], "[", drop + 1,
         "] = ", colptr[drop + 1], ")");
  }
  if (static_cast<int64_t>(colptr[cols]) != nnz) {
    fail(op, names[0], "must end at the number of edges ", names[4], ".numel() = ", nnz, " (got ", names[0], "[", cols, "] = ",
         colptr[cols], ")");
  }
  std::vector<uint8_t> seen(static_cast<size_t>(nnz), 0);
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t q = colptr[j]; q < static_cast<int64_t>(colptr[j + 1]); ++q) {
      const int64_t e = perm[q];
      const int64_t i = row[q];
      if (e < 0 || e >= nnz) fail(op, names[2], "must hold CSR positions in [0, ", nnz, ") (got ", names[2], "[", q, "] = ", e, ")");
      if (i < 0 || i >= rows) fail(op, names[1], "must hold row indices in [0, ", rows, ") (got ", names[1], "[", q, "] = ", i, ")");
      if (static_cast<int64_t>(col[e]) != j || e < static_cast<int64_t>(rowptr[i]) || e >= static_cast<int64_t>(rowptr[i + 1])) {
        fail(op, names[2], "is not the CSC view of the CSR ('", names[3], "', '", names[4], "'): entry ", q, " of column ", j,
             " in row ", i, " points to CSR position ", e, ", which holds column ", col[e], " in row ", row_of(rowptr, rows, e),
             " (got ", names[2], "[", q, "] = ", e, ")");
      }
      if (seen[static_cast<size_t>(e)]++) {
        fail(op, names[2], "is not a permutation: CSR position ", e, " appears twice (got ", names[2], "[", q, "] = ", e, ")");
      }
    }
  }
}

}  // namespace

CaptureProbe set_capture_probe(CaptureProbe probe) { return capture_probe.exchange(probe); }

bool capturing(const at::Tensor& like) {
  const CaptureProbe probe = capture_probe.load();
  return probe != nullptr && like.defined() && probe(like);
}

void no_capture(const at::Tensor& like, const char* what) {
  TORCH_INTERNAL_ASSERT(!capturing(like), "gnnfuse: ", what, " while the current stream is being captured into a CUDA graph");
}

namespace {

// The row of each position 0..nnz-1 of a valid pointer array (searchsorted: no synchronisation).
at::Tensor row_of_positions(const at::Tensor& ptr, int64_t nnz) {
  return at::searchsorted(ptr, at::arange(nnz, ptr.options()), /*out_int32=*/false, /*right=*/true).sub_(1);
}

}  // namespace


void all_given(const char* op, const char* const names[3], bool a, bool b, bool c) {
  const bool given[3] = {a, b, c};
  for (int k = 0; k < 3; ++k)
    if (!given[k]) {
      fail(op, names[k], "must be given with ", names[0], ", ", names[1], " and ", names[2],
           " (the CSC view is passed whole or not at all; got None)");
    }
}

void csc_shapes(const char* op, const char* const names[5], const at::Tensor& rowptr, const at::Tensor& col,
                const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& perm, const c10::SymInt& num_cols) {
  index_tensor(op, names[0], colptr);
  index_tensor(op, names[1], row);
  same_dtype(op, names[0], colptr, names[3], rowptr);
  same_dtype(op, names[1], row, names[3], rowptr);
  defined(op, names[2], perm);
  ndim_eq(op, names[2], perm, 1);
  if (perm.scalar_type() != at::kLong) fail(op, names[2], "must be int64 (got ", dtype_name(perm.scalar_type()), ")");
  same_device(op, names[0], colptr, names[3], rowptr);
  same_device(op, names[1], row, names[3], rowptr);
  same_device(op, names[2], perm, names[3], rowptr);
  const std::string stored = std::string(names[4]) + ".size(0), the number of stored entries";
  sym_size_eq(op, names[1], row, 0, col.sym_size(0), stored.c_str());
  sym_size_eq(op, names[2], perm, 0, col.sym_size(0), stored.c_str());
  if (num_cols >= 0) sym_size_eq(op, names[0], colptr, 0, num_cols + 1, "the number of columns plus one");
  else nonempty(op, names[0], colptr);
}

namespace {

// csc()'s value checks asserted on the device (under capture): the column pointers, perm a
// permutation of the positions, and entry q of column c the CSR entry perm[q]: in column c and in
// row row[q].
void csc_on_device_async(const char* op, const char* const names[5], const at::Tensor& rowptr, const at::Tensor& col,
                         const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& perm) {
  const int64_t nnz = col.numel(), cols = colptr.numel() - 1;
  at::Tensor bad = colptr.select(0, 0).ne(0).logical_or(colptr.select(0, -1).to(at::kLong).ne(nnz));
  if (cols > 0) bad = bad.logical_or(colptr.slice(0, 1, cols + 1).lt(colptr.slice(0, 0, cols)).any());
  assert_none(op, bad, std::string("argument '") + names[0] + "' must be valid column pointers (0 first, non-decreasing, nnz last)");
  if (nnz == 0) return;
  assert_none(op, perm.lt(0).logical_or(perm.ge(nnz)), std::string("argument '") + names[2] + "' must hold positions in [0, nnz)");
  const at::Tensor covered = at::zeros({nnz}, perm.options().dtype(at::kBool)).index_fill_(0, perm, true);
  assert_none(op, covered.logical_not(), std::string("argument '") + names[2] + "' must be a permutation of the CSR positions");
  const at::Tensor p = perm.clamp(0, nnz - 1);  // (an out-of-range perm is reported above)
  const at::Tensor wrong = col.index_select(0, p).to(at::kLong).ne(row_of_positions(colptr, nnz))
                               .logical_or(row.to(at::kLong).ne(row_of_positions(rowptr, nnz).index_select(0, p)));
  assert_none(op, wrong, std::string("arguments '") + names[0] + "', '" + names[1] + "', '" + names[2] +
                             "' must be the CSC view of the CSR matrix (entry q of column c is CSR entry perm[q], of column c, in row row[q])");
}

}  // namespace

void csc(const char* op, const char* const names[5], const at::Tensor& rowptr, const at::Tensor& col,
         const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& perm, int64_t num_cols) {
  csc_shapes(op, names, rowptr, col, colptr, row, perm, c10::SymInt(num_cols));
  // Once per view, like csr(): every backward over a graph passes the same cached view. Off the
  // CPU the view is checked on a host copy (its consistency with the CSR is a walk of both).
  if (rowptr.device().is_meta()) return;  // no values (tracing)
  if (cache::lookup("checks::csc", {rowptr, col, colptr, row, perm}, {}).has_value()) return;
  if (capturing(rowptr)) {
    csc_on_device_async(op, names, rowptr, col, colptr, row, perm);
    return;
  }
  const at::Tensor rp = host(rowptr), cl = host(col), cp = host(colptr), rw = host(row), pm = host(perm);
  AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), "gnnfuse::checks::csc", [&] {
    csc_values<index_t>(op, names, rp.const_data_ptr<index_t>(), rowptr.numel() - 1, cl.const_data_ptr<index_t>(),
                        col.numel(), cp.const_data_ptr<index_t>(), colptr.numel() - 1, rw.const_data_ptr<index_t>(),
                        pm.const_data_ptr<int64_t>());
  });
  cache::store("checks::csc", {rowptr, col, colptr, row, perm}, {}, {});
}

namespace {

// Patterns whose row pointers (and maybe columns) were checked, so that a graph used call after
// call (every layer, every epoch) is scanned once: an entry of the pattern cache
// (torch/pattern_cache.h: tensor identity, version counters, data pointers and sizes) whose
// value is empty (row pointers valid) or one int64 tensor holding the columns' unsigned maximum
// (col_umax; also scanned). Tensors without a version counter (inference mode) are always checked.
constexpr const char* kCsrKey = "checks::csr";

bool already_checked(const at::Tensor& rowptr, const at::Tensor& col, int64_t mark) {
  return cache::lookup(kCsrKey, {rowptr, col}, {mark}).has_value();
}

void remember_checked(const at::Tensor& rowptr, const at::Tensor& col, int64_t mark) {
  cache::store(kCsrKey, {rowptr, col}, {mark}, {});
}

}  // namespace

namespace {

// csr()'s value checks on the host (CPU tensors).
void csr_values(const char* op, const char* rowptr_arg, const char* col_arg, const at::Tensor& rowptr, const at::Tensor& col,
                int64_t num_cols, const char* bound) {
  const int64_t nnz = col.numel();
  const auto in_range = [nnz, num_cols](uint64_t umax) { return nnz == 0 || umax < static_cast<uint64_t>(num_cols); };
  const std::optional<std::vector<at::Tensor>> known = cache::lookup(kCsrKey, {rowptr, col}, {});
  const bool range_known = known && !known->empty();
  if (known && (num_cols < 0 || range_known)) {
    if (num_cols < 0) return;
    if (in_range(static_cast<uint64_t>((*known)[0].const_data_ptr<int64_t>()[0]))) return;
  }
  const at::Tensor rowptr_c = rowptr.contiguous();
  const at::Tensor col_c = col.contiguous();
  AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), "gnnfuse::checks::csr", [&] {
    const index_t* cp = col_c.const_data_ptr<index_t>();
    if (!known) rowptr_values<index_t>(op, rowptr_arg, col_arg, rowptr_c.const_data_ptr<index_t>(), rowptr.numel() - 1, nnz);
    if (num_cols < 0) {
      cache::store(kCsrKey, {rowptr, col}, {}, {});
      return;
    }
    if (!range_known) {
      const uint64_t umax = col_umax<index_t>(cp, nnz);
      at::Tensor range = at::empty({1}, at::kLong);
      range.mutable_data_ptr<int64_t>()[0] = static_cast<int64_t>(umax);
      cache::store(kCsrKey, {rowptr, col}, {}, {range});
      if (in_range(umax)) return;
    }
    col_out_of_range<index_t>(op, col_arg, cp, nnz, num_cols, bound);
  });
}

// csr()'s value checks on the device: the row pointers (start at 0, non-decreasing, end at nnz)
// and the columns' smallest and largest value in one read back, remembered like the CPU's (the
// columns' unsigned maximum: a negative column is out of range for every bound; unbound columns,
// num_cols < 0, are not checked, as on the CPU).
void csr_on_device(const char* op, const char* rowptr_arg, const char* col_arg, const at::Tensor& rowptr, const at::Tensor& col,
                   int64_t num_cols, const char* bound) {
  const int64_t nnz = col.numel();
  const auto in_range = [nnz, num_cols](uint64_t umax) { return nnz == 0 || umax < static_cast<uint64_t>(num_cols); };
  const std::optional<std::vector<at::Tensor>> known = cache::lookup(kCsrKey, {rowptr, col}, {});
  if (known && (num_cols < 0 || (!known->empty() && in_range(static_cast<uint64_t>((*known)[0].const_data_ptr<int64_t>()[0])))))
    return;
  const int64_t n = rowptr.numel();
  // Non-decreasing by comparing neighbours (a difference could wrap around in the index dtype).
  std::vector<at::Tensor> parts = {rowptr.select(0, 0).ne(0).logical_or(rowptr.select(0, -1).to(at::kLong).ne(nnz))};
  if (n > 1) parts.push_back(rowptr.slice(0, 1, n).lt(rowptr.slice(0, 0, n - 1)).any());
  if (capturing(rowptr)) {  // asserted on the device, remembered nowhere
    assert_none(op, n > 1 ? parts[0].logical_or(parts[1]) : parts[0],
                std::string("argument '") + rowptr_arg + "' must be valid row pointers for '" + col_arg +
                    "' (0 first, non-decreasing, its length last)");
    if (nnz > 0 && num_cols >= 0) {  // (unbound columns are not checked, as off capture)
      assert_none(op, col.lt(0).logical_or(at_least(col, num_cols)),
                  std::string("argument '") + col_arg + "' must hold column indices in [0, " + std::to_string(num_cols) + ")");
    }
    return;
  }
  if (nnz > 0) {
    const auto [lo, hi] = at::aminmax(col);
    parts.push_back(lo);
    parts.push_back(hi);
  }
  const std::vector<int64_t> v = read_back(parts);
  if (v[0] != 0 || (n > 1 && v[1] != 0)) {
    csr_values(op, rowptr_arg, col_arg, host(rowptr), host(col), num_cols, bound);  // raises
    fail(op, rowptr_arg, "must be valid row pointers for '", col_arg, "' (got a row pointer out of order)");
  }
  const int64_t lo = nnz > 0 ? v[v.size() - 2] : 0, hi = nnz > 0 ? v.back() : 0;
  const uint64_t umax = lo < 0 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(hi);
  at::Tensor range = at::empty({1}, at::kLong);
  range.mutable_data_ptr<int64_t>()[0] = static_cast<int64_t>(umax);
  cache::store(kCsrKey, {rowptr, col}, {}, {range});
  if (num_cols >= 0 && !in_range(umax)) {
    csr_values(op, rowptr_arg, col_arg, host(rowptr), host(col), num_cols, bound);  // raises
    fail(op, col_arg, "must hold column indices in [0, ", num_cols, ") (got ", lo < 0 ? lo : hi, ")");
  }
}

}  // namespace

void csr(const char* op, const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols) {
  csr(op, "rowptr", "col", rowptr, col, num_cols);
}

void csr(const char* op, const char* rowptr_arg, const char* col_arg, const at::Tensor& rowptr, const at::Tensor& col,
         int64_t num_cols, const char* bound) {
  index_tensor(op, rowptr_arg, rowptr);
  index_tensor(op, col_arg, col);
  same_dtype(op, col_arg, col, rowptr_arg, rowptr);
  same_device(op, col_arg, col, rowptr_arg, rowptr);
  if (rowptr.sym_numel() < 1) {
    fail(op, rowptr_arg, "must have at least one element (got an empty tensor)");
  }
  if (rowptr.device().is_meta()) return;  // no values (tracing)
  if (on_device(rowptr) || capturing(rowptr)) {
    csr_on_device(op, rowptr_arg, col_arg, rowptr, col, num_cols, bound);
    return;
  }
  csr_values(op, rowptr_arg, col_arg, rowptr, col, num_cols, bound);
}

void fits_index(const char* op, const char* arg, at::ScalarType s, int64_t nnz) {
  if (s == at::kInt && nnz > std::numeric_limits<int32_t>::max()) {
    fail(op, arg, "is int32, the index dtype of the result, whose ", nnz, " entries int32 indices cannot address (at most ",
         std::numeric_limits<int32_t>::max(), "); use int64 indices (got ", dtype_name(s), ")");
  }
}

namespace {
// num_cols value under which csr_sorted() remembers a pattern in the csr() cache.
constexpr int64_t kSortedMark = std::numeric_limits<int64_t>::min();

template <typename index_t>
void sorted_values(const char* op, const char* rowptr_arg, const char* col_arg, const index_t* rowptr, int64_t rows, const index_t* col) {
  const int64_t bad = first_violation(rows, [rowptr, col](int64_t i) {
    bool b = false;
    for (index_t p = rowptr[i] + 1; p < rowptr[i + 1]; ++p) b |= col[p] <= col[p - 1];
    return b;
  });
  if (bad < rows) {
    for (index_t p = rowptr[bad] + 1; p < rowptr[bad + 1]; ++p)
      if (col[p] <= col[p - 1]) {
        fail(op, col_arg, "must hold strictly increasing columns within each row (sorted, no duplicates; rows delimited by '", rowptr_arg,
             "'), got ", col_arg, "[", p - 1, "] = ", col[p - 1], " then ", col_arg, "[", p, "] = ", col[p], " in row ", bad);
      }
  }
}
}  // namespace

void csr_sorted(const char* op, const char* rowptr_arg, const char* col_arg, const at::Tensor& rowptr, const at::Tensor& col) {
  if (rowptr.device().is_meta() || already_checked(rowptr, col, kSortedMark)) return;
  const int64_t nnz = col.numel();
  if (capturing(rowptr)) {
    if (nnz < 2) return;
    const at::Tensor r = row_of_positions(rowptr, nnz);
    const at::Tensor same_row = r.slice(0, 1, nnz).eq(r.slice(0, 0, nnz - 1));
    assert_none(op, same_row.logical_and(col.slice(0, 1, nnz).le(col.slice(0, 0, nnz - 1))),
                std::string("argument '") + col_arg + "' must hold sorted, distinct columns in every row of '" + rowptr_arg + "'");
    return;
  }
  // Off the CPU: on a host copy, once per pattern.
  const at::Tensor rowptr_c = host(rowptr);
  const at::Tensor col_c = host(col);
  AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), "gnnfuse::checks::csr_sorted", [&] {
    sorted_values<index_t>(op, rowptr_arg, col_arg, rowptr_c.const_data_ptr<index_t>(), rowptr.numel() - 1, col_c.const_data_ptr<index_t>());
  });
  remember_checked(rowptr, col, kSortedMark);
}

void one_per_row(const char* op, const char* rowptr_arg, const at::Tensor& rowptr, const at::Tensor& col) {
  // num_cols value under which a checked `single` pattern is remembered in the csr() cache.
  constexpr int64_t kSingleMark = std::numeric_limits<int64_t>::min() + 1;
  if (rowptr.device().is_meta() || already_checked(rowptr, col, kSingleMark)) return;
  if (capturing(rowptr)) {
    assert_none(op, rowptr.ne(at::arange(rowptr.numel(), rowptr.options())),
                std::string("argument '") + rowptr_arg + "' must be 0, 1, ..., n (one entry per row)");
    return;
  }
  if (on_device(rowptr)) {  // rowptr == arange(n): one comparison on the device
    const int64_t n = rowptr.numel();
    if (read_back({rowptr.ne(at::arange(n, rowptr.options())).any()})[0] == 0) {
      remember_checked(rowptr, col, kSingleMark);
      return;
    }
  }
  const at::Tensor rowptr_c = host(rowptr);
  AT_DISPATCH_INDEX_TYPES(rowptr.scalar_type(), "gnnfuse::checks::one_per_row", [&] {
    const index_t* r = rowptr_c.const_data_ptr<index_t>();
    const int64_t n = rowptr.numel();
    const int64_t bad = first_violation(n, [r](int64_t k) { return static_cast<int64_t>(r[k]) != k; });
    if (bad < n) {
      fail(op, rowptr_arg, "must be 0, 1, ..., ", n - 1, " (one entry per row) (got ", rowptr_arg, "[", bad, "] = ", r[bad], ")");
    }
  });
  remember_checked(rowptr, col, kSingleMark);
}

void in_range(const char* op, const char* arg, int64_t value, int64_t lo, int64_t hi, const char* what) {
  if (value < lo || value >= hi) fail(op, arg, "must be in [", lo, ", ", hi, "), ", what, " (got ", value, ")");
}

void one_of(const char* op, const char* arg, const std::string& value, const std::vector<std::string>& known, const char* what) {
  for (auto& k : known)
    if (k == value) return;
  std::string list;
  for (auto& k : known) list += (list.empty() ? "" : ", ") + k;
  fail(op, arg, "must name ", what, " (", list.empty() ? "none" : list, ") (got '", value, "')");
}

void edge_index(const char* op, const at::Tensor& edge_index, int64_t num_nodes, int64_t num_dst_nodes) {
  defined(op, "edge_index", edge_index);
  const at::ScalarType s = edge_index.scalar_type();
  if (s != at::kInt && s != at::kLong) {
    fail(op, "edge_index", "must be an int32 or int64 tensor (got ", dtype_name(s), ")");
  }
  if (edge_index.dim() != 2 || edge_index.sym_size(0) != 2) {
    fail(op, "edge_index", "must have shape [2, E] (got shape ", edge_index.sym_sizes(), ")");
  }
  extent(op, "num_nodes", num_nodes);
  if (num_dst_nodes < 0) num_dst_nodes = num_nodes;
  // Meta tensors (tracing): no values, and a symbolic edge count must not be read (a guard).
  if (edge_index.device().is_meta()) return;
  const int64_t num_edges = edge_index.size(1);
  // Row pointers share edge_index's dtype and count up to E.
  if (s == at::kInt && num_edges > std::numeric_limits<int32_t>::max()) {
    fail(op, "edge_index", "must have at most ", std::numeric_limits<int32_t>::max(),
         " edges when int32, use int64 (got ", num_edges, " edges)");
  }
  if (num_edges == 0) return;
  if (capturing(edge_index)) {
    const at::Tensor bad = edge_index.lt(0).any().logical_or(at_least(edge_index.select(0, 0), num_nodes).any())
                               .logical_or(at_least(edge_index.select(0, 1), num_dst_nodes).any());
    assert_none(op, bad, "argument 'edge_index' must hold sources in [0, " + std::to_string(num_nodes) + ") and targets in [0, " +
                             std::to_string(num_dst_nodes) + ")");
    return;
  }
  if (on_device(edge_index)) {  // sources below num_nodes, targets below num_dst_nodes
    const auto [lo, hi] = at::aminmax(edge_index, 1);
    const std::vector<int64_t> v = read_back({lo, hi});  // min src, min dst, max src, max dst
    if (v[0] >= 0 && v[1] >= 0 && v[2] < num_nodes && v[3] < num_dst_nodes) return;
  }
  const at::Tensor ei = host(edge_index);
  AT_DISPATCH_INDEX_TYPES(s, "gnnfuse::checks::edge_index", [&] {
    edge_index_values<index_t>(op, ei.const_data_ptr<index_t>(), num_edges, num_nodes, num_dst_nodes);
  });
}

void non_negative(const char* op, const char* arg, int64_t value) {
  if (value < 0) fail(op, arg, "must be non-negative (got ", value, ")");
}

void extent(const char* op, const char* arg, int64_t value) {
  non_negative(op, arg, value);
  constexpr int64_t kLimit = int64_t{1} << 62;
  if (value >= kLimit) fail(op, arg, "must be below 2^62 = ", kLimit, " (an extent: sizes follow from it) (got ", value, ")");
}

bool allocation_failed(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string msg = e.what_without_backtrace();
  return msg.find("DefaultCPUAllocator") != std::string::npos;
}

void out_of_memory(const char* op, const std::string& extents, const char* what) {
  // An OutOfMemoryError (torch.OutOfMemoryError, a RuntimeError, in Python), so that an op
  // running another one (an assembling op on a cached pattern) names itself around it.
  TORCH_CHECK_WITH(OutOfMemoryError, false, "gnnfuse::", op, ": not enough memory for the result and the workspaces of the kernel",
                   extents.empty() ? "" : ", which grow with its extents (", extents, extents.empty() ? "" : ")", " (got ", what, ")");
}

void index_tensor(const char* op, const char* arg, const at::Tensor& t) {
  defined(op, arg, t);
  const at::ScalarType s = t.scalar_type();
  if (s != at::kInt && s != at::kLong) {
    fail(op, arg, "must be an int32 or int64 tensor (got ", dtype_name(s), ")");
  }
  ndim_eq(op, arg, t, 1);
}

void positions(const char* op, const char* arg, const at::Tensor& t, int64_t ndim) {
  defined(op, arg, t);
  if (t.scalar_type() != at::kLong) fail(op, arg, "must be an int64 tensor of positions (got ", dtype_name(t.scalar_type()), ")");
  ndim_eq(op, arg, t, ndim);
}

void position_values(const char* op, const char* arg, const at::Tensor& t, int64_t nnz) {
  if (t.device().is_meta() || t.numel() == 0) return;  // Meta first: no symbolic size read
  if (capturing(t)) {
    assert_none(op, t.lt(-1).logical_or(t.ge(nnz)), std::string("argument '") + arg + "' must hold positions in [-1, " + std::to_string(nnz) + ")");
    return;
  }
  if (on_device(t)) {
    const auto [lo, hi] = at::aminmax(t);
    const std::vector<int64_t> v = read_back({lo, hi});
    if (v[0] >= -1 && v[1] < nnz) return;
  }
  const at::Tensor c = host(t);
  const int64_t* v = c.const_data_ptr<int64_t>();
  for (int64_t k = 0; k < c.numel(); ++k)
    if (v[k] < -1 || v[k] >= nnz) fail(op, arg, "holds position ", v[k], " at flat index ", k, ", outside [-1, ", nnz, ")");
}

void floating(const char* op, const char* arg, const at::Tensor& t, int64_t ndim, unsigned dtypes) {
  defined(op, arg, t);
  const at::ScalarType s = t.scalar_type();
  static constexpr std::pair<unsigned, at::ScalarType> kinds[] = {
      {kFloat32, at::kFloat}, {kFloat64, at::kDouble}, {kBFloat16, at::kBFloat16}, {kFloat16, at::kHalf}};
  for (const auto& [bit, type] : kinds)
    if ((dtypes & bit) && type == s) {
      ndim_eq(op, arg, t, ndim);
      return;
    }
  // Refused: the admitted dtypes, "a, b, or c".
  std::vector<const char*> admitted;
  for (const auto& [bit, type] : kinds)
    if (dtypes & bit) admitted.push_back(dtype_name(type));
  std::string names;
  for (size_t k = 0; k < admitted.size(); ++k)
    names += std::string(k == 0 ? "" : k + 1 < admitted.size() ? ", " : admitted.size() > 2 ? ", or " : " or ") + admitted[k];
  fail(op, arg, "must be a ", names, " tensor (got ", dtype_name(s), ")");
}

void accumulation_dtype(const char* op, const char* arg, const at::Tensor& t, int64_t ndim, const char* ref_arg,
                        const at::Tensor& ref) {
  defined(op, arg, t);
  const at::ScalarType r = ref.scalar_type();
  const at::ScalarType want = detail::accumulation_dtype(r);
  if (t.scalar_type() != want) {
    fail(op, arg, "must be a ", dtype_name(want), " tensor, the accumulation dtype of '", ref_arg, "' (", dtype_name(r), "; got ",
         dtype_name(t.scalar_type()), ")");
  }
  ndim_eq(op, arg, t, ndim);
}

void same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                const at::Tensor& ref) {
  defined(op, arg, t);
  defined(op, ref_arg, ref);
  if (t.scalar_type() != ref.scalar_type()) {
    fail(op, arg, "must have the dtype of '", ref_arg, "', ", dtype_name(ref.scalar_type()), " (got ",
         dtype_name(t.scalar_type()), ")");
  }
}

void same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                 const at::Tensor& ref) {
  defined(op, arg, t);
  defined(op, ref_arg, ref);
  if (t.device() != ref.device()) {
    fail(op, arg, "must be on the device of '", ref_arg, "', ", ref.device(), " (got ", t.device(), ")");
  }
}

void size_eq(const char* op, const char* arg, const at::Tensor& t, int64_t dim, int64_t expected,
             const char* what) {
  if (dim >= t.dim() || dim < -t.dim()) {
    fail(op, arg, "must have a dimension ", dim, " (got a ", t.dim(), "-D tensor of shape ", t.sym_sizes(),
         ")");
  }
  const c10::SymInt size = t.sym_size(dim);
  if (size != expected) {
    fail(op, arg, "must have size(", dim, ") equal to ", what, " = ", expected, " (got ", size,
         ", shape ", t.sym_sizes(), ")");
  }
}

void nonempty(const char* op, const char* arg, const at::Tensor& rowptr) {
  if (rowptr.sym_numel() < 1) fail(op, arg, "must hold at least one row pointer (n + 1 for n rows) (got 0 elements)");
}

void sym_size_eq(const char* op, const char* arg, const at::Tensor& t, int64_t dim,
                 const c10::SymInt& expected, const char* what) {
  if (dim >= t.dim()) fail(op, arg, "needs a dimension ", dim, " of size ", expected, " (", what, ") (got ", t.dim(), " dimensions)");
  const c10::SymInt got = t.sym_size(dim);
  if (got != expected) fail(op, arg, "has size ", got, " in dimension ", dim, ", expected ", expected, " (", what, ") (got shape ", t.sym_sizes(), ")");
}

}  // namespace gnnfuse::checks
