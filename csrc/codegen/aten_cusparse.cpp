// The cuSPARSE backend of the CUDA adapters: which ops (user ops and the adjoints derived from
// them) are a cuSPARSE SpMM or SDDMM, read off the spec's expression, and the call the adapter
// makes in their place when the backend is selected (torch/cuda/cusparse_backend.h: process-wide, off by
// default). The forms:
//   SpMM   Y(a,f) = A(i,j) [* edge operands on A] * X(b,f), {a, b} = {i, j}: op(A) = A when a is
//          A's row, A^T when it is A's column (the CSR arrays either way: no CSC view, no perm);
//   SDDMM  E(i,j) on A = A(i,j) [* edge operands on A] * U(i,k) * V(j,k).
// The entry values are the product of A's values (where it has them) and the edge operands: one
// array for cuSPARSE (an elementwise product first where there are several; SDDMM scales its
// output by them instead). The SpMM forms then try the Tensor-Core SpMM (torch/cuda/tensor_cores.h:
// its own mode, auto by default), whatever the backend. Anything else (reductions other than sum, heads, accumulation-precision
// operands, more dense factors, constants or functions) keeps the generated kernels.
#include <sstream>

#include "codegen/emit.h"

namespace gnnfuse::codegen {

namespace {

// The factors of a product of accesses (parentheses allowed); false if anything else appears.
bool product_leaves(const ExprP& e, std::vector<const Expr*>& out) {
  if (e->kind == Expr::Kind::Access) {
    out.push_back(e.get());
    return true;
  }
  if (e->kind == Expr::Kind::Binary && e->op == '*') return product_leaves(e->args[0], out) && product_leaves(e->args[1], out);
  return false;
}

bool dense_2d(const TensorDecl& t) { return t.role == Role::DenseInput && !t.acc && t.vars.size() == 2; }

}  // namespace

std::optional<CusparseForm> cusparse_form(const OpSpec& s) {
  if (s.reduce != Reduce::Sum || !s.symbolic.empty()) return std::nullopt;
  const TensorDecl* sparse = nullptr;
  for (auto& t : s.tensors) {
    if (t.role == Role::SparseInput) {
      if (sparse || t.single) return std::nullopt;
      sparse = &t;
    }
    if (t.role == Role::CountInput || t.role == Role::SelectInput) return std::nullopt;
  }
  if (!sparse || sparse->vars.size() != 2) return std::nullopt;
  const std::string& r = sparse->vars[0];
  const std::string& c = sparse->vars[1];
  std::vector<const Expr*> leaves;
  if (!product_leaves(s.expr.rhs, leaves)) return std::nullopt;
  CusparseForm form;
  form.sparse = sparse;
  std::vector<const TensorDecl*> dense;
  for (const Expr* leaf : leaves) {
    const TensorDecl* t = s.find(leaf->name);
    if (!t || leaf->idx != t->vars) return std::nullopt;  // row-major operands, read as declared
    if (t == sparse) {
      if (!t->values.empty()) form.values.push_back(t);
    } else if (t->role == Role::EdgeInput && t->pattern == sparse->name && t->vars == sparse->vars) {
      form.values.push_back(t);
    } else if (dense_2d(*t)) {
      dense.push_back(t);
    } else {
      return std::nullopt;
    }
  }
  const TensorDecl& out = s.output();
  if (out.acc || out.vars.size() != 2) return std::nullopt;
  if (out.pattern.empty()) {  // SpMM
    if (dense.size() != 1) return std::nullopt;
    const TensorDecl& x = *dense[0];
    const std::string& a = out.vars[0];
    const std::string& f = out.vars[1];
    if (x.vars[1] != f || f == r || f == c) return std::nullopt;
    if (a == r && x.vars[0] == c) form.transpose = false;
    else if (a == c && x.vars[0] == r) form.transpose = true;
    else return std::nullopt;
    form.kind = CusparseForm::Kind::SpMM;
    form.dense0 = &x;
    return form;
  }
  if (out.pattern != sparse->name || out.vars != sparse->vars || dense.size() != 2) return std::nullopt;  // SDDMM
  const TensorDecl* u = dense[0]->vars[0] == r ? dense[0] : dense[1];
  const TensorDecl* v = u == dense[0] ? dense[1] : dense[0];
  const std::string& k = u->vars[1];
  if (u->vars[0] != r || v->vars[0] != c || v->vars[1] != k || k == r || k == c) return std::nullopt;
  form.kind = CusparseForm::Kind::SDDMM;
  form.dense0 = u;
  form.dense1 = v;
  return form;
}

namespace emit {

std::string cusparse_dispatch(const Compiled& c) {
  const OpSpec& s = c.spec;
  const auto form = cusparse_form(s);
  if (!form) return "";
  const TensorDecl& a = *form->sparse;
  std::string values = "{";
  for (size_t k = 0; k < form->values.size(); ++k)
    values += (k ? ", " : "") + (form->values[k] == &a ? a.values : form->values[k]->arg) + "_c";
  values += "}";
  const std::string extents = "prm.n_" + a.vars[0] + ", prm.n_" + a.vars[1];
  std::ostringstream l;
  l << "  // " << to_string(s.expr.rhs) << (form->kind == CusparseForm::Kind::SpMM ? ": cuSPARSE SpMM" : ": cuSPARSE SDDMM")
    << (form->transpose ? " of A^T" : "") << " when it is the backend\n";
  l << "  if (cuda_adapter::backend() == cuda_adapter::Backend::Cusparse &&\n      ";
  if (form->kind == CusparseForm::Kind::SpMM)
    l << "cuda_adapter::cusparse_spmm(\"" << s.name << "\", " << a.rowptr << "_c, " << a.col << "_c, " << values << ", "
      << (form->transpose ? "true" : "false") << ", " << extents << ", " << form->dense0->arg << "_c, out))\n";
  else
    l << "cuda_adapter::cusparse_sddmm(\"" << s.name << "\", " << a.rowptr << "_c, " << a.col << "_c, " << values << ", " << extents
      << ", " << form->dense0->arg << "_c, " << form->dense1->arg << "_c, out))\n";
  l << "    return out;\n";
  if (form->kind == CusparseForm::Kind::SpMM) {
    l << "  // the Tensor-Core SpMM where its mode chooses it (torch/cuda/tensor_cores.h)\n";
    l << "  if (cuda_adapter::tensor_core_spmm(\"" << s.name << "\", " << a.rowptr << "_c, " << a.col << "_c, " << values << ", "
      << (form->transpose ? "true" : "false") << ", " << extents << ", " << form->dense0->arg << "_c, out))\n";
    l << "    return out;\n";
  }
  return l.str();
}

}  // namespace emit

}  // namespace gnnfuse::codegen
