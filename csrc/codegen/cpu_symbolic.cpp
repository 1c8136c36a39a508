// The pattern kernels of `symbolic S` ops (SymbolicEmitter, printing Compiled::pattern) and the
// params and kernel files of <op>_symbolic and <op>_assemble.
#include <algorithm>
#include <functional>
#include <sstream>

#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

std::string SymbolicEmitter::body() {
  const imp::Stmt& top = *k_.body->body.at(0);  // BuildRows
  const std::string& S = k_.pattern;
  for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";  (void)n_" + v + ";");
  for (auto* t : symbolic_inputs(s_)) {
    line("const index_t* __restrict__ " + t->name + "_rowptr = static_cast<const index_t*>(prm." + t->name + "_rowptr);");
    line("const index_t* __restrict__ " + t->name + "_col = static_cast<const index_t*>(prm." + t->name + "_col);");
    line("(void)" + t->name + "_rowptr;  (void)" + t->name + "_col;");
  }
  const std::string& balance = top.sched.balance_by;
  const std::string& i = top.var;
  line(std::string("const std::vector<int64_t> chunks = ") +
       (balance.empty() ? "runtime::even_chunks(n_" + i + ")" : "runtime::balanced_chunks(" + balance + "_rowptr, n_" + i + ")") + ";");
  // One walk: each task writes its rows' sorted columns to a buffer of its own (its rows are
  // contiguous, so is their output); then row pointers, one exact allocation, one copy per task.
  line("const int64_t tasks_ = static_cast<int64_t>(chunks.size()) - 1;");
  line("std::vector<std::vector<index_t>> part_(static_cast<size_t>(std::max<int64_t>(tasks_, 0)));");
  open("runtime::parallel_for(0, tasks_, 1, [&](int64_t c_begin, int64_t c_end) {");
  line("runtime::SymbolicWorkspace ws(n_" + p_.inner_var(S) + ");");
  line("std::vector<index_t>& out_ = part_[static_cast<size_t>(c_begin)];");
  if (!balance.empty())  // room for about one output entry per nonzero of the balancing operand
    line("out_.reserve(static_cast<size_t>(" + balance + "_rowptr[chunks[c_end]] - " + balance + "_rowptr[chunks[c_begin]]));");
  open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
  open("for (int64_t " + i + " = chunks[ch_]; " + i + " < chunks[ch_ + 1]; ++" + i + ") {");
  for (auto& s : top.body) stmt(*s);
  close();
  close();
  close("});");
  line("prm.out_rowptr[0] = 0;");
  line("for (int64_t r_ = 0; r_ < n_" + i + "; ++r_) prm.out_rowptr[r_ + 1] += prm.out_rowptr[r_];");
  line("index_t* col_ = static_cast<index_t*>(prm.alloc_col(prm.alloc_ctx, prm.out_rowptr[n_" + i + "]));");
  open("runtime::parallel_for(0, tasks_, 1, [&](int64_t c_begin, int64_t c_end) {");
  open("for (int64_t t_ = c_begin; t_ < c_end; ++t_) {");
  line("const std::vector<index_t>& src_ = part_[static_cast<size_t>(t_)];");
  line("if (!src_.empty()) std::copy(src_.begin(), src_.end(), col_ + prm.out_rowptr[chunks[t_]]);");
  close();
  close("});");
  return os_.str();
}

// The product count of the row (ub_) of a BeginOutputRow, for an assembling kernel
// (KernelEmitter) that declares the row bounds of the operands walked from the row and a
// workspace `ws`.
std::string SymbolicEmitter::product_count(const imp::Stmt& begin, int depth) {
  depth_ = depth;
  count(begin);
  return os_.str();
}

// ub_ = the row's number of products when the workspace wants it (a walk of the nest without
// its innermost loop), else -1.
void SymbolicEmitter::count(const imp::Stmt& begin) {
  line("int64_t ub_ = -1;");
  open("if (ws.needs_bound()) {");
  line("ub_ = 0;");
  for (auto& s : begin.body) stmt(*s);
  close();
}

void SymbolicEmitter::stmt(const imp::Stmt& s) {
  using Kind = imp::Stmt::Kind;
  switch (s.kind) {
    case Kind::RowBounds: {
      const auto [rb, re] = row_bounds(p_, *s_.find(s.level), s.var);
      line("const index_t " + s.level + "_rb = " + rb + ";");
      line("const index_t " + s.level + "_re = " + re + ";");
      return;
    }
    case Kind::BeginOutputRow:
      count(s);
      line("ws.begin(ub_);");
      return;
    case Kind::CountRow: line("ub_ += static_cast<int64_t>(" + s.level + "_re - " + s.level + "_rb);"); return;
    case Kind::Insert: line("ws.insert(" + s.var + ");"); return;
    case Kind::For:
      open("for (int64_t " + s.var + " = 0; " + s.var + " < n_" + s.var + "; ++" + s.var + ") {");
      for (auto& k : s.body) stmt(*k);
      close();
      return;
    case Kind::Walk: {
      const std::string& L = s.level;
      open("for (index_t p_" + L + " = " + L + "_rb; p_" + L + " < " + L + "_re; ++p_" + L + ") {");
      line("const int64_t " + s.var + " = static_cast<int64_t>(" + L + (s.csc ? "_row" : "_col") + "[p_" + L + "]);");
      for (auto& k : s.body) stmt(*k);
      close();
      return;
    }
    case Kind::EndOutputRow: {
      line("const int64_t len_ = ws.count();");
      line("const size_t at_ = out_.size();");
      line("out_.resize(at_ + static_cast<size_t>(len_));");
      line("ws.emit_sorted(out_.data() + at_);");
      line("prm.out_rowptr[" + s.var + " + 1] = len_;");
      return;
    }
    default: fail(s_.loc, "internal error: the CPU pattern printer met a statement out of place in " + k_.name);
  }
}

std::vector<const TensorDecl*> optional_values(const OpSpec& s) {
  std::vector<const TensorDecl*> out;
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput && t.values_optional) out.push_back(&t);
  return out;
}

void emit_symbolic_params(const Compiled& c, std::ostream& h) {
  const OpSpec& s = c.spec;
  h << "// The pattern " << s.symbolic << " of " << s.name << "'s output, from the patterns of its other csr operands.\n";
  h << "struct " << symbolic_name(s) << "_params {\n";
  for (auto& v : s.order) h << "  int64_t n_" << v << " = 0;  // extent of " << v << "\n";
  for (auto* t : symbolic_inputs(s)) {
    h << "  const void* " << t->name << "_rowptr = nullptr;  // index_t[n_" << t->vars[0] << " + 1]\n";
    h << "  const void* " << t->name << "_col = nullptr;     // index_t[nnz]\n";
  }
  h << "  int64_t* out_rowptr = nullptr;        // [rows + 1]: the output's row pointers (written)\n";
  h << "  // Allocates the output's columns, index_t[nnz], once nnz is known; the kernel fills them\n";
  h << "  // sorted within rows.\n";
  h << "  void* (*alloc_col)(void* ctx, int64_t nnz) = nullptr;\n";
  h << "  void* alloc_ctx = nullptr;\n";
  h << "};\n";
  h << "void " << symbolic_name(s) << "_cpu(const " << symbolic_name(s) << "_params& prm, runtime::IType itype);\n\n";
  // The assembling kernel: the op's inputs but S (their fields of the base left unset), the
  // pattern and the values out.
  h << "// " << s.name << " with its output pattern " << s.symbolic << " built in the same pass (values beside the columns).\n";
  h << "struct " << s.name << "_assemble_params : " << s.name << "_params {\n";
  h << "  int64_t* out_rowptr = nullptr;  // [rows + 1]: the output's row pointers (written)\n";
  h << "  // Allocates the output's columns (index_t[nnz]) and values (scalar_t[nnz]) once nnz is\n";
  h << "  // known; the kernel fills them, columns sorted within rows.\n";
  h << "  void (*alloc)(void* ctx, int64_t nnz, void** col, void** val) = nullptr;\n";
  h << "  void* alloc_ctx = nullptr;\n";
  h << "};\n";
  h << "void " << s.name << "_assemble_cpu(const " << s.name << "_assemble_params& prm, runtime::DType dtype, runtime::IType itype);\n\n";
}

void emit_symbolic_kernel(const Compiled& c, std::ostream& k) {
  SymbolicEmitter se(c, *c.pattern);
  const OpSpec& s = c.spec;
  k << "// ---------------------------------------------------------------- " << symbolic_name(s) << "\n";
  const std::set<std::string> unbound = unbound_indices(pattern_bindings(s));
  const std::string symbolic_body = se.body();
  check_unbound_extents(s, symbolic_name(s), symbolic_body, unbound);
  k << "namespace {\n\ntemplate <typename index_t>\nvoid " << symbolic_name(s) << "_impl(const " << symbolic_name(s) << "_params& prm) {\n" << symbolic_body
    << "}\n\n}  // namespace\n\n";
  k << "void " << symbolic_name(s) << "_cpu(const " << symbolic_name(s) << "_params& prm, runtime::IType itype) {\n";
  for (auto& i : s.index_dtypes) k << "  if (itype == " << dtype_enum(i) << ") return " << symbolic_name(s) << "_impl<" << ctype(i) << ">(prm);\n";
  k << "  runtime::unsupported(\"" << symbolic_name(s) << "\", runtime::DType::Float32, itype);\n}\n\n";
  if (!optional_values(s).empty()) fail(s.loc, "assemble " + s.symbolic + ": optional values are not lowered");
  const std::string op = s.name + "_assemble";
  // Compiled like the numeric kernel (a baseline and an AVX2+FMA copy), so that both contract
  // the same products into the same sums: assembled values equal the two-pass values bit for bit.
  const std::string assemble_body = KernelEmitter(c, *c.assemble).body();
  check_unbound_extents(s, op, assemble_body, unbound);
  const std::string impl = "template <typename scalar_t, typename index_t>\nvoid " + op + "_impl(const " + op + "_params& prm) {\n" +
                           assemble_body + "}\n";
  k << "// ---------------------------------------------------------------- " << op << "\n";
  k << "namespace {\n\nnamespace base {\n" << impl << "}  // namespace base\n\n";
  k << "#ifdef GNNFUSE_AVX2_PATH\n#pragma GCC push_options\n#pragma GCC target(\"avx2,fma\")\n";
  k << "namespace avx2 {\n" << impl << "}  // namespace avx2\n#pragma GCC pop_options\n#endif\n\n";
  k << "template <typename scalar_t, typename index_t>\nvoid " << op << "_isa(const " << op << "_params& prm) {\n";
  k << "#ifdef GNNFUSE_AVX2_PATH\n  if (runtime::cpu_has_avx2_fma()) return avx2::" << op << "_impl<scalar_t, index_t>(prm);\n#endif\n";
  k << "  base::" << op << "_impl<scalar_t, index_t>(prm);\n}\n\n}  // namespace\n\n";
  k << "void " << op << "_cpu(const " << op << "_params& prm, runtime::DType dtype, runtime::IType itype) {\n";
  for (auto& d : s.dtypes)
    for (auto& i : s.index_dtypes)
      k << "  if (dtype == " << dtype_enum(d) << " && itype == " << dtype_enum(i) << ") return " << op << "_isa<" << ctype(d) << ", " << ctype(i)
        << ">(prm);\n";
  k << "  runtime::unsupported(\"" << op << "\", dtype, itype);\n}\n\n";
}

}  // namespace gnnfuse::codegen::emit
