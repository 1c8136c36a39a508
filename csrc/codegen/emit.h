// Shared by the emitters (not part of the generator's interface, ir.h): C++ spellings of dtypes
// and schemas, where each index's extent comes from (bindings), the indented writer the kernel
// printers derive from, and the pieces one emitter file takes from another.
//   emit_common.cpp        this header's helpers
//   cpu_kernel.h/.cpp      the CPU kernel printer (KernelEmitter) of the imperative IR: loops,
//                          walks, statements, the assembling kernel's rows
//   cpu_kernel_dense.cpp   its register tiles, prefetches and row-blocked dense products
//   cpu_symbolic.cpp       the pattern kernels of `symbolic S` ops (SymbolicEmitter)
//   emit_cpu.cpp           per family: <op>_kernel.h and <op>_cpu.cpp
//   aten_adapter.cpp       ATen adapters: argument checks, kernel calls, Meta kernels
//   aten_autograd.cpp      Autograd kernels and their Nodes
//   aten_transforms.cpp    vmap batching rules and autocast kernels
//   aten_pattern.cpp       adapters of <op>_symbolic and <op>_assemble
//   aten_registration.cpp  per family <op>_register.cpp; registration.cpp and the C++ API
//   aten_cuda.cpp          per family <op>_cuda_register.cpp: the adapters at the CUDA key
//   aten_cusparse.cpp      the ops that are a cuSPARSE SpMM or SDDMM, and their call in those adapters
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codegen/ir.h"

namespace gnnfuse::codegen::emit {

// ---------------------------------------------------------------- C++ spellings
std::string banner(const std::string& op);
std::string ctype(DType d);
std::string ctype(IndexType i);
std::string dtype_enum(DType d);  // runtime::DType / runtime::IType tag
std::string dtype_enum(IndexType i);
// The dtype's name in the CUDA kernels (float, double, __nv_bfloat16, __half) and the tag of
// dtype_enum alone (Float32, Int64, ...: the GNNFUSE_CUDA_INSTANTIATES spelling); emit_cuda.cpp.
std::string cuda_device_type(DType d);
std::string dtype_token(DType d);
std::string dtype_token(IndexType i);
// The bit set of checks:: dtype flags a spec's `dtypes` line admits.
std::string dtype_mask(const OpSpec& s);
std::string fmt_const(double v);

// ---------------------------------------------------------------- extents
// Where each index variable's extent comes from: the first binding defines it, later ones are
// checked against it.
struct Binding {
  std::string tensor;  // spec tensor
  std::string arg;     // schema argument
  int dim = 0;         // dimension of arg; -1: rows of a csr operand (rowptr.size(0) - 1);
                       // -2: a csr column nothing binds (extent unknown, -1); -3: an int argument
};

bool walks_csc(const OpSpec& s, const TensorDecl& t);
std::map<std::string, std::vector<Binding>> bindings(const OpSpec& s);
std::string extent_expr(const Binding& b);
std::string extent_text(const Binding& b);
std::map<std::string, std::vector<Binding>> pattern_bindings(const OpSpec& s, bool dense = false);
std::set<std::string> unbound_indices(const std::map<std::string, std::vector<Binding>>& bind);
void check_unbound_extents(const OpSpec& s, const std::string& kernel, const std::string& body, const std::set<std::string>& unbound);
// The outer variable of a sparse operand in the direction the op walks it.
std::string p_outer(const Compiled& c, const std::string& sparse);

// ---------------------------------------------------------------- schemas in C++
std::string ref_arg(const OpSpec& s);
std::string cxx_arg(const SchemaArg& a);
std::string signature(const Schema& sc, bool with_names, bool with_defaults = false);
// The C++ return type of an op: one tensor, or (values, positions) for reduce max/min.
std::string ret_type(const OpSpec& s);
std::string arg_names(const Schema& sc);

// ---------------------------------------------------------------- pattern ops of `symbolic S`
// `<op>_symbolic`, the output pattern S of a `symbolic S` op computed from the patterns of its
// other csr operands (whatever the target): its name, the csr operands it reads (all but S), and
// its schema (their rowptr and col, then the `extent` arguments; returns (rowptr, col)).
std::string symbolic_name(const OpSpec& s);
// The CUDA pattern kernels of a `symbolic S` op and their host launches (cuda_symbolic.cpp), and
// the declarations of the latter for <fam>_cuda.h.
std::string symbolic_cuda_kernels(const Compiled& c);
std::string symbolic_cuda_declarations(const Compiled& c);
// The Tensor-Core SpMM kernels of a family's ops of tensor_core_form (cuda_tensor_cores.cpp): one
// kernel per form of entry values and per op its launcher <op>_cuda_tc; and their declarations.
std::string tensor_core_kernels(const Family& f);
std::string tensor_core_declarations(const Family& f);
std::vector<const TensorDecl*> symbolic_inputs(const OpSpec& s);
std::string symbolic_schema(const OpSpec& s);

// ---------------------------------------------------------------- kernel body
// Indented C++ text, one line at a time.
class CodeWriter {
 protected:
  std::ostringstream os_;
  int depth_ = 1;

  void line(const std::string& l) { os_ << std::string(static_cast<size_t>(depth_) * 2, ' ') << l << "\n"; }
  void open(const std::string& l) {
    line(l);
    ++depth_;
  }
  void close(const std::string& l = "}") {
    --depth_;
    line(l);
  }
};

std::pair<std::string, std::string> row_bounds(const Program& p, const TensorDecl& t, const std::string& var);

// ---------------------------------------------------------------- CPU kernels (cpu_symbolic.cpp)
std::vector<const TensorDecl*> optional_values(const OpSpec& s);
void emit_symbolic_params(const Compiled& c, std::ostream& h);
void emit_symbolic_kernel(const Compiled& c, std::ostream& k);

// ---------------------------------------------------------------- ATen adapters (aten_adapter.cpp)
void emit_csr_value_check(std::ostream& r, const std::string& op, const TensorDecl& t, const std::vector<Binding>& bind,
                          const std::string& extent, const std::string& indent = "  ");
void emit_csr_arg_checks(std::ostream& r, const TensorDecl& t, const std::string& first);
void emit_allocation_guard(std::ostream& r, const std::string& op, const std::string& body, const std::string& extents);
void emit_dense_checks(std::ostream& r, const OpSpec& s, const std::string& ref);
void emit_binding_check(std::ostream& r, const std::string& fn, const Binding& bd, const std::string& n, const std::string& what);
void emit_operand_param(std::ostream& r, const TensorDecl& t);
// The adapter of an op's CPU kernel (emit_adapter_check, emit_backend_kernel) and its Meta kernel.
void emit_adapter(const Compiled& c, std::ostream& r);
// <op>_extents and <op>_check: the shape, dtype and device checks every backend kernel and the
// Meta kernel of an op call (one text for the CPU and the CUDA registration files).
void emit_adapter_check(const Compiled& c, std::ostream& r);
// What a backend kernel (<op><suffix>) adds to the shared adapter text: statements before the
// kernel parameters (at two spaces: a device guard), and the launch of the kernel from `prm`,
// given the arguments the dtype and the index dtype come from.
struct BackendCall {
  std::string prologue;
  std::function<std::string(const Compiled& c, const std::string& dtype_arg, const std::string& index_arg)> launch;
};
// A backend kernel: <op>_check, the value checks (csr patterns, CSC views, positions: CPU tensors
// only, torch/checks.h), the kernel parameters from contiguous inputs, the output allocated like
// the reference argument (its device), `call`, under the handler of failed allocations.
void emit_backend_kernel(const Compiled& c, std::ostream& r, const std::string& suffix, const BackendCall& call);

// ---------------------------------------------------------------- the cuSPARSE backend (aten_cusparse.cpp)
// The call of a CUDA adapter (after its output is allocated, before the launch) that hands the op
// to cuSPARSE when that backend is selected and returns its output; "" for an op that is neither
// a cuSPARSE SpMM nor an SDDMM (cusparse_form, ir.h).
std::string cusparse_dispatch(const Compiled& c);

// ---------------------------------------------------------------- autograd (aten_autograd.cpp)
std::string join_args(const std::vector<const SchemaArg*>& args, const std::function<std::string(const std::string&)>& wrap);
std::string same_name(const std::string& n);
void emit_autograd(const Family& fam, const Compiled& c, std::ostream& r);

// ---------------------------------------------------------------- vmap and autocast (aten_transforms.cpp)
std::set<std::string> index_args(const OpSpec& s);
void emit_batch_prologue(const std::string& op, const std::vector<std::pair<std::string, bool>>& tensors, const std::string& plain_call,
                         std::ostream& r);
void emit_batch_loop(const std::string& op, const std::string& call, size_t results, const std::string& shared_when, size_t shared,
                     std::ostream& r);
void emit_batching_rule(const Compiled& c, std::ostream& r);
std::string autocast_policy(const OpSpec& s);
void emit_autocast(const OpSpec& s, const Schema& sc, const std::string& ret, const std::string& policy, std::ostream& r);

// ---------------------------------------------------------------- symbolic and assembling ops (aten_pattern.cpp)
void emit_symbolic_adapter(const Compiled& c, std::ostream& r);
Schema assemble_schema(const OpSpec& s);
void emit_assemble_adapter(const Compiled& c, std::ostream& r);
void emit_symbolic_cuda_adapters(const Compiled& c, std::ostream& r);
void emit_symbolic_batching_rule(const Compiled& c, std::ostream& r);

}  // namespace gnnfuse::codegen::emit
