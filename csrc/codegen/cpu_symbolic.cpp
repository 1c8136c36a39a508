// The symbolic kernels of `symbolic S` ops (SymbolicEmitter) and the params and kernel files of
// <op>_symbolic and <op>_assemble.
#include <algorithm>
#include <functional>
#include <sstream>

#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

std::string SymbolicEmitter::body() {
  const Node* top = nullptr;
  for (auto& k : c_.tree->kids)
    if (has_insert(*k)) {
      if (top) fail(s_.loc, "symbolic " + S_ + ": the output's products are computed in two loop nests");
      top = k.get();
    }
  if (!top || top->kind != Node::Kind::Loop || top->var != p_.outer_var(S_) || !top->space.is_dense())
    fail(s_.loc, "symbolic " + S_ + ": the products must be computed under one dense loop over " + S_ + "'s rows");
  for (auto* t : symbolic_inputs(s_))
    if (p_.walks_csc(t->name)) fail(s_.loc, "symbolic " + S_ + ": " + t->name + " is walked by columns, which the symbolic pass does not lower");
  for (auto& v : s_.order) line("const int64_t n_" + v + " = prm.n_" + v + ";  (void)n_" + v + ";");
  for (auto* t : symbolic_inputs(s_)) {
    line("const index_t* __restrict__ " + t->name + "_rowptr = static_cast<const index_t*>(prm." + t->name + "_rowptr);");
    line("const index_t* __restrict__ " + t->name + "_col = static_cast<const index_t*>(prm." + t->name + "_col);");
    line("(void)" + t->name + "_rowptr;  (void)" + t->name + "_col;");
  }
  std::string balance;
  for (auto* t : symbolic_inputs(s_))
    if (balance.empty() && p_.outer_var(t->name) == top->var && !p_.walks_csc(t->name)) balance = t->name;
  line(std::string("const std::vector<int64_t> chunks = ") +
       (balance.empty() ? "runtime::even_chunks(n_" + top->var + ")" : "runtime::balanced_chunks(" + balance + "_rowptr, n_" + top->var + ")") + ";");
  // One walk: each task writes its rows' sorted columns to a buffer of its own (its rows are
  // contiguous, so is their output); then row pointers, one exact allocation, one copy per task.
  line("const int64_t tasks_ = static_cast<int64_t>(chunks.size()) - 1;");
  line("std::vector<std::vector<index_t>> part_(static_cast<size_t>(std::max<int64_t>(tasks_, 0)));");
  open("runtime::parallel_for(0, tasks_, 1, [&](int64_t c_begin, int64_t c_end) {");
  line("runtime::SymbolicWorkspace ws(n_" + p_.inner_var(S_) + ");");
  line("std::vector<index_t>& out_ = part_[static_cast<size_t>(c_begin)];");
  if (!balance.empty())  // room for about one output entry per nonzero of the balancing operand
    line("out_.reserve(static_cast<size_t>(" + balance + "_rowptr[chunks[c_end]] - " + balance + "_rowptr[chunks[c_begin]]));");
  open("for (int64_t ch_ = c_begin; ch_ < c_end; ++ch_) {");
  const std::string& i = top->var;
  open("for (int64_t " + i + " = chunks[ch_]; " + i + " < chunks[ch_ + 1]; ++" + i + ") {");
  enter(i);
  emit_bound(*top);
  line("ws.begin(ub_);");
  for (auto& k : top->kids) node(*k);
  line("const int64_t len_ = ws.count();");
  line("const size_t at_ = out_.size();");
  line("out_.resize(at_ + static_cast<size_t>(len_));");
  line("ws.emit_sorted(out_.data() + at_);");
  line("prm.out_rowptr[" + i + " + 1] = len_;");
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

// The product count of the row of `top` (ub_), for an assembling kernel (KernelEmitter) that
// declares the row bounds of the operands walked from `top` and a workspace `ws`.
std::string SymbolicEmitter::bound(const Node& top, int depth) {
  depth_ = depth;
  emit_bound(top);
  return os_.str();
}

// ub_ = the row's number of products when the workspace wants it (a walk of the nest without
// its innermost loop), else -1.
void SymbolicEmitter::emit_bound(const Node& top) {
  line("int64_t ub_ = -1;");
  open("if (ws.needs_bound()) {");
  line("ub_ = 0;");
  ub_ = true;
  for (auto& k : top.kids) node(*k);
  ub_ = false;
  close();
}

// Whether a statement inserts output coordinates: it writes the output on S, or a temporary
// stored by S's positions, in a loop that does not walk S itself (S is what is computed).
bool SymbolicEmitter::inserts(const Node& n, const std::string& walk) const {
  if (n.kind != Node::Kind::Compute) return false;
  const Stmt& st = p_.stmts[static_cast<size_t>(n.stmt)];
  const TensorInfo& t = p_.tensor(st.lhs.tensor);
  bool on_s = (t.role == Role::Output && t.pattern == S_) || (t.role == Role::Temp && t.compressed_by == S_);
  return on_s && walk != S_;
}

bool SymbolicEmitter::has_insert(const Node& n, const std::string& walk) const {
  if (inserts(n, walk)) return true;
  std::string w = n.kind == Node::Kind::Loop && n.var == p_.inner_var(S_) ? n.walk : walk;
  for (auto& k : n.kids)
    if (has_insert(*k, w)) return true;
  return false;
}

void SymbolicEmitter::enter(const std::string& var) {
  for (auto* t : symbolic_inputs(s_))
    if (p_.outer_var(t->name) == var) {
      const auto [rb, re] = row_bounds(p_, *t, var);
      line("const index_t " + t->name + "_rb = " + rb + ";");
      line("const index_t " + t->name + "_re = " + re + ";");
    }
}

void SymbolicEmitter::node(const Node& n, const std::string& walk) {
  if (!has_insert(n, walk)) return;
  if (n.kind == Node::Kind::Compute) {
    if (!ub_) line("ws.insert(" + p_.inner_var(S_) + ");");
    return;
  }
  if (n.kind != Node::Kind::Loop) return;
  std::vector<std::string> levels;
  if (!n.space.is_dense()) {
    if (n.space.terms.size() != 1) fail(s_.loc, "symbolic " + S_ + ": the loop over '" + n.var + "' iterates a union of levels");
    for (auto& l : *n.space.terms.begin())
      if (l != S_) levels.push_back(l);
  }
  std::string w = n.var == p_.inner_var(S_) ? n.walk : walk;
  if (levels.size() > 1) fail(s_.loc, "symbolic " + S_ + ": the loop over '" + n.var + "' co-iterates several input operands");
  if (levels.empty()) {
    // A dense loop: needed only when a walk below starts from its variable.
    bool needed = false;
    for (auto* t : symbolic_inputs(s_)) needed = needed || p_.outer_var(t->name) == n.var;
    if (needed) {
      open("for (int64_t " + n.var + " = 0; " + n.var + " < n_" + n.var + "; ++" + n.var + ") {");
      enter(n.var);
    }
    for (auto& k : n.kids) node(*k, w);
    if (needed) close();
    return;
  }
  const std::string& L = levels[0];
  bool innermost = false;
  for (auto& k : n.kids) innermost = innermost || inserts(*k, w);
  if (ub_ && innermost) {
    line("ub_ += static_cast<int64_t>(" + L + "_re - " + L + "_rb);");
    return;
  }
  open("for (index_t p_" + L + " = " + L + "_rb; p_" + L + " < " + L + "_re; ++p_" + L + ") {");
  line("const int64_t " + n.var + " = static_cast<int64_t>(" + L + (p_.walks_csc(L) ? "_row" : "_col") + "[p_" + L + "]);");
  enter(n.var);
  for (auto& k : n.kids) node(*k, w);
  close();
}

std::string symbolic_bound_walk(const Compiled& c, const Node& top, int depth) { return SymbolicEmitter(c).bound(top, depth); }

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
  SymbolicEmitter se(c);
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
  const std::string assemble_body = KernelEmitter(c, true).body();
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
