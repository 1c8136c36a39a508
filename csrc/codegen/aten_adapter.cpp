// The ATen adapter of an op (the CPU kernel behind it): argument checks (dtypes, shapes, csr
// patterns against the extents that bind their indices), the kernel call, and its Meta kernel.
#include <algorithm>
#include <sstream>

#include "codegen/emit.h"

namespace gnnfuse::codegen::emit {

namespace {

// The argument names of a CSC view and of its CSR: {colptr, row, perm, rowptr, col}.
std::string csc_names(const TensorDecl& t) {
  return "{\"" + t.colptr + "\", \"" + t.row + "\", \"" + t.perm + "\", \"" + t.rowptr + "\", \"" + t.col + "\"}";
}

}  // namespace

// The value check of a csr operand's pattern (`op` a string expression): its row pointers and,
// where some operand or extent binds its column index (`bind`: that index's bindings, the first
// defining the extent `extent`), its columns against that extent. This is where an index two
// operands share is checked: A's columns against B's rows (spgemm), the members M's columns
// against the graph's rows, the graph's columns against P's rows (coarsen), a csr column
// against a dense operand's rows or an `extent` argument. An index nothing binds indexes no
// memory (the kernels refuse to use it: check_unbound_extents), so it is left unchecked.
void emit_csr_value_check(std::ostream& r, const std::string& op, const TensorDecl& t, const std::vector<Binding>& bind,
                          const std::string& extent, const std::string& indent) {
  const bool bound = !bind.empty() && bind[0].dim != -2;
  r << indent << "checks::csr(" << op << ", \"" << t.rowptr << "\", \"" << t.col << "\", " << t.rowptr << ", " << t.col << ", ";
  if (bound)
    r << extent << ", \"the extent of index " << t.vars[1] << ", " << extent_text(bind[0]) << "\");\n";
  else
    r << "-1);\n";
}

// Argument checks of a csr operand (`op` in scope): index dtypes, one index dtype for the op
// (that of `first`, the first csr operand's rowptr), at least one row pointer.
void emit_csr_arg_checks(std::ostream& r, const TensorDecl& t, const std::string& first) {
  r << "  checks::index_tensor(op, \"" << t.rowptr << "\", " << t.rowptr << ");\n";
  r << "  checks::index_tensor(op, \"" << t.col << "\", " << t.col << ");\n";
  r << "  checks::same_dtype(op, \"" << t.col << "\", " << t.col << ", \"" << t.rowptr << "\", " << t.rowptr << ");\n";
  if (t.rowptr != first) r << "  checks::same_dtype(op, \"" << t.rowptr << "\", " << t.rowptr << ", \"" << first << "\", " << first << ");\n";
  r << "  checks::nonempty(op, \"" << t.rowptr << "\", " << t.rowptr << ");\n";
}

// `body` (statements at two spaces) in a try block whose handlers turn a failed allocation (a
// result or a workspace sized by an extent: an `extent` argument of 2^40 is valid but does not
// fit in memory) into an error naming the op and the extents (`extents`: a C++ string
// expression), instead of an exception torch cannot name.
void emit_allocation_guard(std::ostream& r, const std::string& op, const std::string& body, const std::string& extents) {
  r << "  try {\n";
  std::istringstream lines(body);
  for (std::string l; std::getline(lines, l);) r << "  " << l << "\n";
  for (const char* type : {"std::bad_alloc", "std::length_error"})
    r << "  } catch (const " << type << "& error_) {\n    checks::out_of_memory(" << op << ", " << extents << ", error_.what());\n";
  r << "  } catch (const c10::Error& error_) {  // ATen's allocator; any other error as it is\n";
  r << "    if (!checks::allocation_failed(error_)) throw;\n";
  r << "    checks::out_of_memory(" << op << ", " << extents << ", error_.what_without_backtrace());\n  }\n";
}

// The dtype checks of the dense operands (`op` in scope): floating, of the spec's dtypes and of
// the reference argument `ref`'s dtype (an accumulation operand: the accumulation dtype of it).
void emit_dense_checks(std::ostream& r, const OpSpec& s, const std::string& ref) {
  for (auto& t : s.tensors)
    if (t.role == Role::DenseInput) {
      if (t.acc) {
        r << "  checks::accumulation_dtype(op, \"" << t.arg << "\", " << t.arg << ", " << t.vars.size() << ", \"" << ref << "\", " << ref << ");\n";
        continue;
      }
      r << "  checks::floating(op, \"" << t.arg << "\", " << t.arg << ", " << t.vars.size() << ", " << dtype_mask(s) << ");\n";
      if (t.arg != ref) r << "  checks::same_dtype(op, \"" << t.arg << "\", " << t.arg << ", \"" << ref << "\", " << ref << ");\n";
    }
}

// The check of a later binding `bd` of an index against its extent `n` (a C++ expression; `fn`
// the check, size_eq or sym_size_eq; `what` names the first binding): a csr operand's rows
// against n + 1 row pointers, a dense operand's dimension against n.
void emit_binding_check(std::ostream& r, const std::string& fn, const Binding& bd, const std::string& n, const std::string& what) {
  if (bd.dim < 0) r << "  checks::" << fn << "(op, \"" << bd.arg << "\", " << bd.arg << ", 0, " << n << " + 1, \"" << what << " plus one\");\n";
  else r << "  checks::" << fn << "(op, \"" << bd.arg << "\", " << bd.arg << ", " << bd.dim << ", " << n << ", \"" << what << "\");\n";
}

// The kernel parameter of a dense, edge or select operand: its data, contiguous.
void emit_operand_param(std::ostream& r, const TensorDecl& t) {
  r << "  const at::Tensor " << t.arg << "_c = " << t.arg << ".contiguous();\n";
  r << "  prm." << t.name << " = " << t.arg << "_c.const_data_ptr();\n";
}

namespace {

// The first csr operand's rowptr (the op's index dtype), empty for an op without one.
std::string first_index_arg(const OpSpec& s) {
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) return t.rowptr;
  return "";
}

// The output's shape, as SymInts (`e` the extents in scope).
std::string output_shape(const OpSpec& s) {
  const TensorDecl& out = s.output();
  std::string shape;
  if (out.pattern.empty()) {
    for (size_t d = 0; d < out.vars.size(); ++d) shape += (d ? ", " : "") + std::string("e.n_") + out.vars[d];
  } else {
    shape = s.find(out.pattern)->col + ".sym_size(0)";
    for (size_t d = 2; d < out.vars.size(); ++d) shape += ", e.n_" + out.vars[d];
  }
  return shape;
}

}  // namespace

void emit_adapter_check(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  auto bind = bindings(s);
  std::string ref = ref_arg(s);
  r << "// ---------------------------------------------------------------- " << op << "\n";
  r << "// " << s.doc << "\n";
  r << "struct " << op << "_extents {\n";
  for (auto& v : s.order) r << "  c10::SymInt n_" << v << ";\n";
  r << "};\n\n";
  // Shape, dtype and device checks shared by the backend (CPU, CUDA) and Meta kernels.
  r << op << "_extents " << op << "_check(" << signature(s.schema, true) << ") {\n";
  r << "  constexpr const char* op = \"" << op << "\";\n";
  for (auto& a : s.schema.args) {
    bool extent = false;
    for (auto& [v, ea] : s.extents) extent = extent || ea == a.name;
    if (extent) r << "  checks::extent(op, \"" << a.name << "\", " << a.name << ");\n";
    else if (a.type != "Tensor") r << "  (void)" << a.name << ";  // a scalar: no shape to check\n";
  }
  std::string first_index;
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) {
      if (first_index.empty()) first_index = t.rowptr;
      emit_csr_arg_checks(r, t, first_index);
      if (t.has_csc() && !t.csc_optional) {  // its size gives an extent below: 1-D first
        r << "  checks::index_tensor(op, \"" << t.colptr << "\", " << t.colptr << ");\n";
        r << "  checks::nonempty(op, \"" << t.colptr << "\", " << t.colptr << ");\n";
      }
    }
  for (auto& t : s.tensors)
    if (t.role == Role::EdgeInput) r << "  checks::floating(op, \"" << t.arg << "\", " << t.arg << ", " << t.vars.size() - 1 << ", " << dtype_mask(s) << ");\n";
  emit_dense_checks(r, s, ref);
  std::string dev_ref = first_index.empty() ? ref : first_index;
  for (auto& a : s.schema.args) {
    if (a.type != "Tensor" || a.name == dev_ref) continue;
    if (a.optional) r << "  if (" << a.name << ") checks::same_device(op, \"" << a.name << "\", *" << a.name << ", \"" << dev_ref << "\", " << dev_ref << ");\n";
    else r << "  checks::same_device(op, \"" << a.name << "\", " << a.name << ", \"" << dev_ref << "\", " << dev_ref << ");\n";
  }
  r << "  " << op << "_extents e;\n";
  for (auto& v : s.order) r << "  e.n_" << v << " = " << extent_expr(bind[v][0]) << ";\n";
  for (auto& v : s.order)
    for (size_t b = 1; b < bind[v].size(); ++b)
      emit_binding_check(r, "sym_size_eq", bind[v][b], "e.n_" + v, extent_text(bind[v][0]) + ", the extent of index " + v);
  for (auto& t : s.tensors) {
    if (t.role == Role::SparseInput && !t.values.empty()) {
      std::string w = t.values_optional ? "*" + t.values : t.values;
      if (t.values_optional) r << "  if (" << t.values << ") {\n  ";
      r << "  checks::floating(op, \"" << t.values << "\", " << w << ", 1, " << dtype_mask(s) << ");\n";
      if (t.values != ref) {
        if (t.values_optional) r << "  ";
        r << "  checks::same_dtype(op, \"" << t.values << "\", " << w << ", \"" << ref << "\", " << ref << ");\n";
      }
      if (t.values_optional) r << "  ";
      r << "  checks::sym_size_eq(op, \"" << t.values << "\", " << w << ", 0, " << t.col << ".sym_size(0), \"" << t.col
        << ".size(0), the number of stored entries\");\n";
      if (t.values_optional) r << "  }\n";
    }
    if (t.role == Role::SparseInput && t.has_csc()) {
      r << "  {\n    static const char* const names[5] = " << csc_names(t) << ";\n";
      if (t.csc_optional) {
        r << "    if (" << t.colptr << " || " << t.row << " || " << t.perm << ") {\n";
        r << "      checks::all_given(op, names, " << t.colptr << ".has_value(), " << t.row << ".has_value(), " << t.perm << ".has_value());\n";
        r << "      checks::csc_shapes(op, names, " << t.rowptr << ", " << t.col << ", *" << t.colptr << ", *" << t.row << ", *" << t.perm
          << ", e.n_" << t.vars[1] << ");\n    }\n";
      } else {
        r << "    checks::csc_shapes(op, names, " << t.rowptr << ", " << t.col << ", " << t.colptr << ", " << t.row << ", " << t.perm
          << ", e.n_" << t.vars[1] << ");\n";
      }
      r << "  }\n";
    }
    if (t.role == Role::SelectInput) {
      r << "  checks::positions(op, \"" << t.arg << "\", " << t.arg << ", " << t.vars.size() - 1 << ");\n";
      for (size_t d = 0, k = 0; d < t.vars.size(); ++d) {
        if (d == 1) continue;
        r << "  checks::sym_size_eq(op, \"" << t.arg << "\", " << t.arg << ", " << k++ << ", e.n_" << t.vars[d] << ", \"the extent of index "
          << t.vars[d] << "\");\n";
      }
    }
    if (t.role == Role::EdgeInput) {
      const TensorDecl* pt = s.find(t.pattern);
      if (t.arg != ref) r << "  checks::same_dtype(op, \"" << t.arg << "\", " << t.arg << ", \"" << ref << "\", " << ref << ");\n";
      r << "  checks::sym_size_eq(op, \"" << t.arg << "\", " << t.arg << ", 0, " << pt->col << ".sym_size(0), \"" << pt->col
        << ".size(0), the number of stored entries of " << t.pattern << "\");\n";
    }
  }
  r << "  return e;\n}\n\n";
}

void emit_backend_kernel(const Compiled& c, std::ostream& r, const std::string& suffix, const BackendCall& call) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  auto bind = bindings(s);
  std::string ref = ref_arg(s);
  const TensorDecl& out = s.output();
  const std::string first_index = first_index_arg(s);
  const std::string shape = output_shape(s);
  r << ret_type(s) << " " << op << suffix << "(" << signature(s.schema, true) << ") {\n";
  r << "  const " << op << "_extents e = " << op << "_check(" << arg_names(s.schema) << ");\n";
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) {
      emit_csr_value_check(r, "\"" + op + "\"", t, bind[t.vars[1]], "e.n_" + t.vars[1] + ".expect_int()");
      if (t.single) r << "  checks::one_per_row(\"" << op << "\", \"" << t.rowptr << "\", " << t.rowptr << ", " << t.col << ");\n";
      // A CSC view the kernel walks, or one given as a cache for the backward (whose adjoints
      // walk it): checked whole, here, so that the op it was given to refuses a wrong one.
      if (walks_csc(s, t)) {
        r << "  {\n    static const char* const names[5] = " << csc_names(t) << ";\n";
        r << "    checks::csc(\"" << op << "\", names, " << t.rowptr << ", " << t.col << ", " << t.colptr << ", " << t.row << ", " << t.perm
          << ", e.n_" << t.vars[1] << ".expect_int());\n  }\n";
      } else if (t.has_csc() && t.csc_optional) {
        r << "  if (" << t.colptr << ") {\n    static const char* const names[5] = " << csc_names(t) << ";\n";
        r << "    checks::csc(\"" << op << "\", names, " << t.rowptr << ", " << t.col << ", *" << t.colptr << ", *" << t.row << ", *" << t.perm
          << ", e.n_" << t.vars[1] << ".expect_int());\n  }\n";
      }
    }
  {
    // Patterns the kernel locates coordinates in must have sorted, distinct columns per row.
    std::set<std::string> located;
    std::function<void(const Node&)> rec = [&](const Node& n) {
      for (auto& l : n.located) located.insert(l);
      for (auto& k : n.kids) rec(*k);
    };
    rec(*c.tree);
    for (auto& t : s.tensors)
      if (located.count(t.name))
        r << "  checks::csr_sorted(\"" << op << "\", \"" << t.rowptr << "\", \"" << t.col << "\", " << t.rowptr << ", " << t.col << ");\n";
  }
  for (auto& t : s.tensors)
    if (t.role == Role::SelectInput)
      r << "  checks::position_values(\"" << op << "\", \"" << t.arg << "\", " << t.arg << ", " << s.find(t.pattern)->col << ".size(0));\n";
  const std::string out_options = ref + ".options()" + (out.acc ? ".dtype(accumulation_dtype(" + ref + ".scalar_type()))" : "");
  std::ostringstream kernel_call;  // allocations and the kernel, under the handler of allocation failures
  {
  std::ostream& r = kernel_call;
  r << call.prologue;
  r << "  " << op << "_params prm;\n";
  for (auto& v : s.order) r << "  prm.n_" << v << " = e.n_" << v << ".expect_int();\n";
  for (auto& a : s.schema.args)
    if (a.type == "float") r << "  prm." << a.name << " = " << a.name << ";\n";
  for (auto& t : s.tensors) {
    switch (t.role) {
      case Role::SparseInput:
        r << "  const at::Tensor " << t.rowptr << "_c = " << t.rowptr << ".contiguous();\n";
        r << "  const at::Tensor " << t.col << "_c = " << t.col << ".contiguous();\n";
        r << "  prm." << t.name << "_rowptr = " << t.rowptr << "_c.const_data_ptr();\n";
        r << "  prm." << t.name << "_col = " << t.col << "_c.const_data_ptr();\n";
        r << "  prm." << t.name << "_nnz = " << t.col << "_c.size(0);\n";
        if (!t.values.empty()) {
          if (t.values_optional) {
            r << "  const at::Tensor " << t.values << "_c = " << t.values << " ? " << t.values << "->contiguous() : at::Tensor();\n";
            r << "  prm." << t.name << "_val = " << t.values << " ? " << t.values << "_c.const_data_ptr() : nullptr;\n";
          } else {
            r << "  const at::Tensor " << t.values << "_c = " << t.values << ".contiguous();\n";
            r << "  prm." << t.name << "_val = " << t.values << "_c.const_data_ptr();\n";
          }
        }
        if (walks_csc(s, t))
          for (auto [arg, field] : {std::pair{t.colptr, "_colptr"}, {t.row, "_row"}, {t.perm, "_perm"}}) {
            r << "  const at::Tensor " << arg << "_c = " << arg << ".contiguous();\n";
            r << "  prm." << t.name << field << " = " << arg << "_c.const_data_ptr();\n";
          }
        break;
      case Role::DenseInput:
      case Role::EdgeInput:
      case Role::SelectInput:
        emit_operand_param(r, t);
        break;
      default: break;
    }
  }
  r << "  at::Tensor out = empty_output({" << shape << "}, " << out_options << ");\n";
  r << "  prm." << out.name << " = out.mutable_data_ptr();\n";
  if (s.selects()) {
    r << "  at::Tensor out_arg = at::empty_symint({" << shape << "}, " << ref << ".options().dtype(at::kLong));\n";
    r << "  out_arg.fill_(-1);\n";
    r << "  prm." << out.name << "_arg = out_arg.mutable_data_ptr();\n";
  }
  r << call.launch(c, ref, first_index.empty() ? "out" : first_index);
  r << (s.selects() ? "  return {out, out_arg};\n" : "  return out;\n");
  }
  std::string extents;
  for (auto& v : s.order) {
    if (bind[v][0].dim == -2) continue;
    extents += std::string(extents.empty() ? "\"" : " + \", ") + "n_" + v + " = \" + std::to_string(e.n_" + v + ".expect_int())" +
               (bind[v][0].dim == -3 ? " + \" (argument '" + bind[v][0].arg + "')\"" : "");
  }
  emit_allocation_guard(r, "\"" + op + "\"", kernel_call.str(), extents.empty() ? "std::string()" : extents);
  r << "}\n\n";
}

void emit_adapter(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  std::string ref = ref_arg(s);
  const TensorDecl& out = s.output();
  const std::string shape = output_shape(s);
  const std::string out_options = ref + ".options()" + (out.acc ? ".dtype(accumulation_dtype(" + ref + ".scalar_type()))" : "");
  emit_adapter_check(c, r);
  BackendCall cpu;
  cpu.launch = [](const Compiled& k, const std::string& dtype_arg, const std::string& index_arg) {
    return "  " + k.spec.name + "_cpu(prm, dtype_of(" + dtype_arg + "), itype_of(" + index_arg + "));\n";
  };
  emit_backend_kernel(c, r, "_cpu_kernel", cpu);
  // Meta kernel: same checks, no data.
  r << ret_type(s) << " " << op << "_meta(" << signature(s.schema, true) << ") {\n";
  r << "  const " << op << "_extents e = " << op << "_check(" << arg_names(s.schema) << ");\n";
  r << "  (void)e;\n";
  if (s.selects())
    r << "  return {at::empty_symint({" << shape << "}, " << ref << ".options()), at::empty_symint({" << shape << "}, " << ref
      << ".options().dtype(at::kLong))};\n}\n\n";
  else
    r << "  return at::empty_symint({" << shape << "}, " << out_options << ");\n}\n\n";
}

}  // namespace gnnfuse::codegen::emit
