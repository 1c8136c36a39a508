// The cuSPARSE backend of the CUDA adapters: which ops (user ops and the adjoints derived from
// them) are a cuSPARSE SpMM or SDDMM, read off the spec's expression, and the call the adapter
// makes in their place when the backend is selected (torch/cuda/cusparse_backend.h: process-wide, off by
// default). The forms:
//   SpMM   Y(a,f) = A(i,j) [* edge operands on A] * X(b,f), {a, b} = {i, j}: op(A) = A when a is
//          A's row, A^T when it is A's column (the CSR arrays either way: no CSC view, no perm);
//   SDDMM  E(i,j) on A = A(i,j) [* edge operands on A] * U(i,k) * V(j,k).
// The entry values are the product of A's values (where it has them) and the edge operands: one
// array for cuSPARSE (an elementwise product first where there are several; SDDMM scales its
// output by them instead). Anything else (reductions other than sum, heads, accumulation-precision
// operands, more dense factors, constants or functions) keeps the generated kernels.
// The Tensor-Core SpMM (torch/cuda/tensor_cores.h: its own mode, auto by default, whatever the
// backend) takes the SpMM forms and their per-head form (tensor_core_form), its kernel generated
// per form of entry values (cuda_tensor_cores.cpp).
#include <sstream>

#include "codegen/emit.h"
#include "cuda/tc_spmm.h"

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

// The one csr operand (not `single`, two variables) of a sum without counts, selections or a
// computed pattern; nullptr otherwise.
const TensorDecl* summed_csr_operand(const OpSpec& s) {
  if (s.reduce != Reduce::Sum || !s.symbolic.empty()) return nullptr;
  const TensorDecl* sparse = nullptr;
  for (auto& t : s.tensors) {
    if (t.role == Role::SparseInput) {
      if (sparse || t.single) return nullptr;
      sparse = &t;
    }
    if (t.role == Role::CountInput || t.role == Role::SelectInput) return nullptr;
  }
  return sparse && sparse->vars.size() == 2 ? sparse : nullptr;
}

bool dense_2d(const TensorDecl& t) { return t.role == Role::DenseInput && !t.acc && t.vars.size() == 2; }

}  // namespace

std::optional<CusparseForm> cusparse_form(const OpSpec& s) {
  const TensorDecl* sparse = summed_csr_operand(s);
  if (!sparse) return std::nullopt;
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

std::optional<TensorCoreForm> tensor_core_form(const OpSpec& s) {
  if (auto c = cusparse_form(s)) {
    if (c->kind != CusparseForm::Kind::SpMM || c->values.size() > size_t(cuda::kTcMaxFactors)) return std::nullopt;
    TensorCoreForm form;
    form.sparse = c->sparse;
    form.transpose = c->transpose;
    form.values = c->values;
    form.x = c->dense0;
    for (const TensorDecl* v : form.values) {
      form.heads.push_back(false);
      form.optional.push_back(v == form.sparse ? v->values_optional : s.schema.arg(v->arg) && s.schema.arg(v->arg)->optional);
    }
    return form;
  }
  // The per-head form: Y(a,h,f) = A(i,j) [* E(i,j) | E(i,j,h) ...] * X(b,h,f).
  const TensorDecl* sparse = summed_csr_operand(s);
  const TensorDecl& out = s.output();
  if (!sparse || out.acc || !out.pattern.empty() || out.vars.size() != 3) return std::nullopt;
  const std::string &r = sparse->vars[0], &c = sparse->vars[1];
  const std::string &a = out.vars[0], &h = out.vars[1], &f = out.vars[2];
  if (h == r || h == c || f == r || f == c || h == f) return std::nullopt;
  std::vector<const Expr*> leaves;
  if (!product_leaves(s.expr.rhs, leaves)) return std::nullopt;
  TensorCoreForm form;
  form.sparse = sparse;
  form.head = h;
  for (const Expr* leaf : leaves) {
    const TensorDecl* t = s.find(leaf->name);
    if (!t || leaf->idx != t->vars) return std::nullopt;
    if (t == sparse) {
      if (t->values.empty()) continue;
      form.values.push_back(t);
      form.heads.push_back(false);
      form.optional.push_back(t->values_optional);
    } else if (t->role == Role::EdgeInput && t->pattern == sparse->name && t->vars.size() >= 2 && t->vars[0] == r && t->vars[1] == c &&
               (t->vars.size() == 2 || (t->vars.size() == 3 && t->vars[2] == h))) {
      form.values.push_back(t);
      form.heads.push_back(t->vars.size() == 3);
      form.optional.push_back(s.schema.arg(t->arg) && s.schema.arg(t->arg)->optional);
    } else if (t->role == Role::DenseInput && !t->acc && t->vars.size() == 3 && !form.x) {
      form.x = t;
    } else {
      return std::nullopt;
    }
  }
  if (!form.x || form.values.size() > size_t(cuda::kTcMaxFactors)) return std::nullopt;
  const TensorDecl& x = *form.x;
  if (x.vars[1] != h || x.vars[2] != f) return std::nullopt;
  if (a == r && x.vars[0] == c) form.transpose = false;
  else if (a == c && x.vars[0] == r) form.transpose = true;
  else return std::nullopt;
  return form;
}

namespace emit {

namespace {

// The value tensors of a form, as the adapter names their contiguous copies.
std::string value_list(const TensorDecl& a, const std::vector<const TensorDecl*>& values) {
  std::string l = "{";
  for (size_t k = 0; k < values.size(); ++k) l += (k ? ", " : "") + (values[k] == &a ? a.values : values[k]->arg) + "_c";
  return l + "}";
}

}  // namespace

std::string cusparse_dispatch(const Compiled& c) {
  const OpSpec& s = c.spec;
  std::ostringstream l;
  if (const auto form = cusparse_form(s)) {
    const TensorDecl& a = *form->sparse;
    const std::string values = value_list(a, form->values);
    const std::string extents = "prm.n_" + a.vars[0] + ", prm.n_" + a.vars[1];
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
  }
  if (const auto form = tensor_core_form(s)) {
    const TensorDecl& a = *form->sparse;
    l << "  // the Tensor-Core SpMM where its mode chooses it (torch/cuda/tensor_cores.h; the kernel " << s.name << "_cuda_tc)\n";
    l << "  if (cuda_adapter::tensor_core_spmm(\"" << s.name << "\", &" << s.name << "_cuda_tc, " << a.rowptr << "_c, " << a.col << "_c, "
      << value_list(a, form->values) << ", " << (form->transpose ? "true" : "false") << ", prm.n_" << a.vars[0] << ", prm.n_" << a.vars[1]
      << ", " << form->x->arg << "_c, out))\n";
    l << "    return out;\n";
  }
  return l.str();
}

}  // namespace emit

}  // namespace gnnfuse::codegen
