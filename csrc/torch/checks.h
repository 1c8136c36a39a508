// Input validation for every gnnfuse op: the only place checks live.
//
// Every failure raises c10::Error through TORCH_CHECK (RuntimeError in Python)
// with a message of the form
//     gnnfuse::<op>: argument '<arg>' <what is wrong> (got <value>)
// so a user sees which op, which argument and which value is at fault.
//
// Shape, dtype and device checks also work on symbolic sizes, so Meta kernels (torch.compile,
// torch.export) share them; checks that read values run on every device with data (not Meta).
//
// None of these functions requires contiguous inputs: checks that read values
// go through a contiguous view (a no-op for contiguous tensors). Kernels that
// read raw pointers make their own contiguous copies.
#pragma once

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/Exception.h>

namespace gnnfuse::checks {

// CUDA graph capture. A value check that reads a verdict back (a synchronisation) cannot run
// while the current stream is being captured (torch.cuda.graph, torch.compile's
// mode="reduce-overhead"): then the checks of a pattern not checked before compute their verdict
// on the device and assert it there (at::_assert_async: an invalid input stops the graph's replay
// with a device-side assert naming the op), remembering nothing. The CUDA adapters install the
// probe (the current stream's capture status); without one nothing is ever captured. The probe of
// the emulated library answers a switch (gnnfuse::_cuda_simulate_capture), and a read-back or a
// host copy of a tensor under a simulated capture raises, so the tests find any that is left.
using CaptureProbe = bool (*)(const at::Tensor& like);
CaptureProbe set_capture_probe(CaptureProbe probe);  // returns the previous one
bool capturing(const at::Tensor& like);
// Raises (an internal error naming `what`) when `like`'s stream is being captured: before a
// synchronisation.
void no_capture(const at::Tensor& like, const char* what);

// A CSR matrix over target rows (see docs/CONTRACTS.md):
//  - rowptr and col are 1-D, int32 or int64, of the same dtype, on the same device;
//  - rowptr.numel() >= 1, rowptr[0] == 0, rowptr is non-decreasing,
//    rowptr[-1] == col.numel();
//  - every col value is in [0, num_cols) when num_cols >= 0 (num_cols < 0: unchecked).
// Errors name the arguments `rowptr_arg` and `col_arg` (the op's schema names); `bound`, when
// given, says where num_cols comes from ("the extent of index k, browptr.size(0) - 1"). A bound
// ending in a dense argument's dimension ("the extent of index j, x.size(0)") makes a column past
// it name that argument's size and the largest column too ("x has 9 rows but the column indices
// in col reach 9 (10 columns)"): the csr operand or x may be the one at fault.
// The value checks run on every device with data (Meta tensors have none): off the CPU as a few
// reductions and one synchronisation, an invalid input then copied to the host for the CPU
// check's message (GNNFUSE_CHECKS_ON_DEVICE=1 takes that path for CPU tensors too). They are O(N + E) once per pattern: the row pointers' validity and the
// columns' largest value are remembered per (rowptr, col) pair (the pattern cache: identity,
// version counters, data pointers, sizes), so a pattern used again, under any column bound, is
// checked in O(1); the columns are scanned only once a bound asks for them.
void csr(const char* op, const char* rowptr_arg, const char* col_arg, const at::Tensor& rowptr, const at::Tensor& col,
         int64_t num_cols, const char* bound = nullptr);
// The same with the arguments named 'rowptr' and 'col'.
void csr(const char* op, const at::Tensor& rowptr, const at::Tensor& col, int64_t num_cols);

// The CSC view of a CSR matrix (see gnnfuse::csr_transpose): colptr and row in rowptr's
// dtype, perm int64, row and perm with col.numel() entries, colptr with num_cols + 1 entries
// when num_cols >= 0 (shapes: Meta-safe). `names` are the argument names
// {colptr, row, perm, rowptr, col}: the view's three, then its CSR's two.
void csc_shapes(const char* op, const char* const names[5], const at::Tensor& rowptr, const at::Tensor& col,
                const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& perm, const c10::SymInt& num_cols);
// csc_shapes, and (on a host copy off the CPU) that the view holds exactly the CSR's entries: colptr starts at 0,
// is non-decreasing and ends at nnz; every perm[q] is a CSR position of column j (the column
// whose range holds q) in row row[q]; no CSR position appears twice. O(N + E), once per view
// (remembered like csr()'s patterns). Call after csr() on (rowptr, col).
void csc(const char* op, const char* const names[5], const at::Tensor& rowptr, const at::Tensor& col,
         const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& perm, int64_t num_cols);

// The three arguments of a CSC view are passed together or not at all.
void all_given(const char* op, const char* const names[3], bool a, bool b, bool c);

// An index tensor: int32 or int64, 1-D.
void index_tensor(const char* op, const char* arg, const at::Tensor& t);

// Positions chosen by a max/min reduction: int64 with `ndim` dimensions. Shape only: Meta-safe.
void positions(const char* op, const char* arg, const at::Tensor& t, int64_t ndim);

// Every position in [-1, nnz) (-1: an empty row). Reads the values (on their device).
void position_values(const char* op, const char* arg, const at::Tensor& t, int64_t nnz);

// Floating dtypes an op accepts, as a bit set (a spec's `dtypes` line).
enum : unsigned { kFloat32 = 1u, kFloat64 = 2u, kBFloat16 = 4u, kFloat16 = 8u };

// A tensor held in the accumulation precision of `ref`'s dtype (float32 for bfloat16/float16,
// the dtype itself otherwise), with exactly `ndim` dimensions.
void accumulation_dtype(const char* op, const char* arg, const at::Tensor& t, int64_t ndim, const char* ref_arg,
                        const at::Tensor& ref);

// A floating tensor of one of `dtypes`, with exactly `ndim` dimensions.
void floating(const char* op, const char* arg, const at::Tensor& t, int64_t ndim, unsigned dtypes = kFloat32 | kFloat64);

// `t` has the dtype of `ref` (named `ref_arg` in the message).
void same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                const at::Tensor& ref);

// `t` lives on the device of `ref` (named `ref_arg` in the message).
void same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                 const at::Tensor& ref);

// t.size(dim) == expected; `what` names the expected extent in the message,
// e.g. "the number of rows (rowptr.numel() - 1)". A dim past t.dim() is itself an error.
void size_eq(const char* op, const char* arg, const at::Tensor& t, int64_t dim, int64_t expected,
             const char* what);

// A PyG edge_index: int32 or int64, shape [2, E] (row 0 sources, row 1 targets), every value
// in [0, num_nodes), num_nodes >= 0, and E small enough for int32 row pointers when int32.
// Values are checked on their device (not Meta).
void edge_index(const char* op, const at::Tensor& edge_index, int64_t num_nodes, int64_t num_dst_nodes = -1);

// A scalar argument that counts something: value >= 0.
void non_negative(const char* op, const char* arg, int64_t value);

// An int argument that gives an index's extent (a spec's `extent` line, a node or column
// count): 0 <= value < 2^62, so that sizes derived from it (value + 1 row pointers, byte counts)
// cannot overflow.
void extent(const char* op, const char* arg, int64_t value);

// Raises "gnnfuse::<op>: not enough memory ..." for an allocation that failed while an op ran
// (std::bad_alloc, std::length_error, c10::OutOfMemoryError): its result and workspaces grow
// with its extents, listed as `extents` ("n_j = 1099511627776 (argument 'n_cols')", ...).
[[noreturn]] void out_of_memory(const char* op, const std::string& extents, const char* what);
// Whether `e` is ATen's report of a failed allocation (c10::OutOfMemoryError, or the CPU
// allocator's enforce), which out_of_memory() then names.
bool allocation_failed(const c10::Error& e);

// Runs f, a kernel with its allocations, turning a failed allocation into an error naming op
// (`extents`: what the sizes follow from).
template <typename F>
auto named_allocations(const char* op, const std::string& extents, const F& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc& e) {
    out_of_memory(op, extents, e.what());
  } catch (const std::length_error& e) {
    out_of_memory(op, extents, e.what());
  } catch (const c10::Error& e) {  // ATen's allocator; any other error as it is
    if (!allocation_failed(e)) throw;
    out_of_memory(op, extents, e.what_without_backtrace());
  }
}

// lo <= value < hi; `what` says what the range is, e.g. "a variant of gcn (-1: automatic)".
void in_range(const char* op, const char* arg, int64_t value, int64_t lo, int64_t hi, const char* what);

// A string argument naming one of `known` (listed in the message when it does not).
void one_of(const char* op, const char* arg, const std::string& value, const std::vector<std::string>& known, const char* what);

// `nnz` entries of a result are addressable with index dtype `s` (int32: at most 2^31 - 1), the
// dtype of argument `arg` (the index tensor the result's dtype comes from).
void fits_index(const char* op, const char* arg, at::ScalarType s, int64_t nnz);

// Each row's columns strictly increase (sorted, no duplicates): a pattern whose coordinates a
// kernel locates (by a row map or binary search). Call after csr(); the scan is cached like
// csr()'s.
void csr_sorted(const char* op, const char* rowptr_arg, const char* col_arg, const at::Tensor& rowptr, const at::Tensor& col);

// A csr operand declared `single` in its spec (one entry per row: an assignment matrix): its
// row pointers are 0, 1, ..., n. Remembered per pattern like csr(); any device with data.
void one_per_row(const char* op, const char* rowptr_arg, const at::Tensor& rowptr, const at::Tensor& col);

// rowptr.numel() >= 1 (a CSR over n rows has n + 1 row pointers). Shape only: Meta-safe.
void nonempty(const char* op, const char* arg, const at::Tensor& rowptr);

// t.sym_size(dim) == expected, for symbolic (Meta) and concrete sizes alike; `what` names the
// expected extent. A dim past t.dim() is itself an error.
void sym_size_eq(const char* op, const char* arg, const at::Tensor& t, int64_t dim,
                 const c10::SymInt& expected, const char* what);

}  // namespace gnnfuse::checks
