// torch transforms: the vmap batching rule (FuncTorchBatched) and the autocast kernel of an op.
#include <algorithm>
#include <sstream>

#include "codegen/builtins.h"
#include "codegen/emit.h"

namespace gnnfuse::codegen::emit {

namespace {

// ---------------------------------------------------------------- vmap
// An index the batch of a vmap can be folded into: free in the output (never reduced), no
// sparse operand's row or column, no extent argument's, bound to the same dimension in every
// read of each tensor carrying it. With every batched argument carrying it, the op runs once
// on the folded tensors ([.., B * n, ..]), the arguments without a batch that carry it repeated.
struct FoldIndex {
  std::string var;
  std::vector<std::pair<std::string, int>> dims;  // schema argument carrying it -> its dimension
  int out_dim = 0;                                // the output's dimension holding it
};

std::vector<FoldIndex> fold_indices(const OpSpec& s) {
  std::set<std::string> excluded;
  for (auto& t : s.tensors) {
    if (t.role == Role::SparseInput || t.role == Role::CountInput) excluded.insert(t.vars.begin(), t.vars.end());
    if (t.role == Role::EdgeInput || t.role == Role::SelectInput || (t.role == Role::Output && !t.pattern.empty())) {
      excluded.insert(t.vars[0]);
      excluded.insert(t.vars[1]);
    }
  }
  for (auto& [v, a] : s.extents) excluded.insert(v);
  std::vector<const Expr*> reads;
  std::function<void(const ExprP&)> walk = [&](const ExprP& e) {
    if (e->kind == Expr::Kind::Reduce) excluded.insert(e->idx.begin(), e->idx.end());
    if (e->kind == Expr::Kind::Access) {
      reads.push_back(e.get());
      const TensorDecl* t = s.find(e->name);
      if (t && t->role != Role::DenseInput)  // a sparse walk's row and (renamed) column
        for (size_t d = 0; d < e->idx.size() && d < 2; ++d) excluded.insert(e->idx[d]);
    }
    for (auto& a : e->args) walk(a);
  };
  walk(s.expr.rhs);
  const TensorDecl& out = s.output();
  std::vector<FoldIndex> found;
  for (size_t p = 0; p < s.expr.lhs_idx.size(); ++p) {
    const std::string& v = s.expr.lhs_idx[p];
    if (excluded.count(v)) continue;
    FoldIndex fi;
    fi.var = v;
    fi.out_dim = out.pattern.empty() ? static_cast<int>(p) : static_cast<int>(p) - 1;
    bool ok = true;
    for (auto& t : s.tensors) {
      if (t.role != Role::DenseInput && t.role != Role::EdgeInput && t.role != Role::SelectInput) continue;
      const auto pos = std::find(t.vars.begin(), t.vars.end(), v) - t.vars.begin();
      const bool carries = pos < static_cast<long>(t.vars.size());
      for (const Expr* e : reads) {
        if (e->name != t.name) continue;
        const auto uses = std::count(e->idx.begin(), e->idx.end(), v);
        if (carries ? (uses != 1 || static_cast<long>(e->idx.size()) <= pos || e->idx[pos] != v) : uses != 0) ok = false;
      }
      if (!carries) continue;
      const SchemaArg* a = s.schema.arg(t.arg);
      if (!a || a->optional) ok = false;  // (a carrier that may be None: not folded)
      // edge [nnz, extra...] and select [n_row, extra...] tensors hold one dimension for two indices
      fi.dims.push_back({t.arg, t.role == Role::DenseInput ? static_cast<int>(pos) : static_cast<int>(pos) - 1});
    }
    if (ok && !fi.dims.empty()) found.push_back(fi);
  }
  // Fewest carriers first: the fewest arguments without a batch to repeat.
  std::stable_sort(found.begin(), found.end(), [](const FoldIndex& a, const FoldIndex& b) { return a.dims.size() < b.dims.size(); });
  return found;
}

}  // namespace

// The index arguments of an op (csr patterns, CSC views): a batched one runs element by element.
std::set<std::string> index_args(const OpSpec& s) {
  std::set<std::string> out;
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput)
      for (auto* n : {&t.rowptr, &t.col, &t.colptr, &t.row, &t.perm})
        if (!n->empty()) out.insert(*n);
  return out;
}

// The prologue of a batching rule: the level, every tensor argument unwrapped (`<arg>_u`, batch
// dimension `<arg>_bd`), the batch size B_; without a batched argument at this level, the op.
void emit_batch_prologue(const std::string& op, const std::vector<std::pair<std::string, bool>>& tensors, const std::string& plain_call,
                         std::ostream& r) {
  r << "  c10::impl::ExcludeDispatchKeyGuard no_batching_(c10::DispatchKey::FuncTorchBatched);\n";
  std::string ptrs;
  for (auto& [n, opt] : tensors) ptrs += std::string(ptrs.empty() ? "" : ", ") + "detail::ptr(" + n + ")";
  r << "  const int64_t level_ = detail::vmap_level(\"" << op << "\", {" << ptrs << "});\n";
  for (auto& [n, opt] : tensors) r << "  auto [" << n << "_u, " << n << "_bd] = detail::unwrap(" << n << ", level_);\n";
  r << "  c10::SymInt B_ = 0;\n  bool batched_ = false;\n";
  for (auto& [n, opt] : tensors) r << "  detail::batch_size(&B_, &batched_, " << n << "_u, " << n << "_bd);\n";
  r << "  if (!batched_) return " << plain_call << ";\n";
}

// The element-by-element part of a batching rule (after emit_batch_prologue): `call`, the op on
// batch element b_'s arguments, once per element, its `results` (1: a tensor; more: a tuple)
// stacked along a new leading batch dimension. Where `shared_when` holds, the first `shared`
// results (an output pattern computed from index tensors without a batch) are the same for every
// element and returned once, without a batch.
void emit_batch_loop(const std::string& op, const std::string& call, size_t results, const std::string& shared_when, size_t shared,
                     std::ostream& r) {
  r << "  const int64_t batch_ = B_.guard_int(__FILE__, __LINE__);\n";
  r << "  std::vector<std::vector<at::Tensor>> outs_(" << results << ");\n";
  r << "  for (int64_t b_ = 0; b_ < batch_; ++b_) {\n";
  r << "    auto res_ = " << call << ";\n";
  if (results == 1) r << "    outs_[0].push_back(std::move(res_));\n";
  for (size_t k = 0; results > 1 && k < results; ++k) r << "    outs_[" << k << "].push_back(std::get<" << k << ">(res_));\n";
  r << "  }\n";
  auto stacked = [&](size_t k) { return "detail::make_batched(detail::stack_batch(\"" + op + "\", outs_[" + std::to_string(k) + "]), 0, level_)"; };
  auto all = [&](size_t first_stacked) {
    std::string t;
    for (size_t k = 0; k < results; ++k) t += (k ? ",\n          " : "") + (k < first_stacked ? "outs_[" + std::to_string(k) + "][0]" : stacked(k));
    return results == 1 ? t : "{" + t + "}";
  };
  if (shared) r << "  if (batch_ > 0 && " << shared_when << ") return " << all(shared) << ";\n";
  r << "  return " << all(0) << ";\n}\n\n";
}

// The batching rule (FuncTorchBatched key) of an op: the batch folded into an index when the
// batched arguments allow (fold_indices), else the op per batch element, results stacked.
void emit_batching_rule(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  std::vector<std::pair<std::string, bool>> tensors;
  for (auto& a : s.schema.args)
    if (a.type == "Tensor") tensors.push_back({a.name, a.optional});
  auto call_with = [&](const std::function<std::string(const SchemaArg&)>& arg) {
    std::string t = "gnnfuse::" + op + "(";
    for (size_t k = 0; k < s.schema.args.size(); ++k) t += (k ? ", " : "") + arg(s.schema.args[k]);
    return t + ")";
  };
  auto unwrapped = [](const SchemaArg& a) { return a.type == "Tensor" ? a.name + "_u" : a.name; };
  r << ret_type(s) << " " << op << "_batched(" << signature(s.schema, true) << ") {\n";
  emit_batch_prologue(op, tensors, call_with(unwrapped), r);
  const std::set<std::string> idx = index_args(s);
  const std::vector<FoldIndex> folds = fold_indices(s);
  if (!folds.empty()) {
    std::string unbatched_idx;
    for (auto& a : s.schema.args)
      if (idx.count(a.name)) unbatched_idx += std::string(unbatched_idx.empty() ? "" : " && ") + "!" + a.name + "_bd";
    r << "  if (" << (unbatched_idx.empty() ? "true" : unbatched_idx) << ") {\n";
    for (const FoldIndex& fi : folds) {
      std::map<std::string, int> dim(fi.dims.begin(), fi.dims.end());
      std::string others;  // batched arguments not carrying the index rule it out
      for (auto& [n, opt] : tensors)
        if (!idx.count(n) && !dim.count(n)) others += std::string(others.empty() ? "" : " && ") + "!" + n + "_bd";
      // ... and so do carriers without a batch larger than what the batched ones hold per element
      // (folding copies them B times; per element the op reads them in place)
      std::string carriers;
      for (auto& [n, d] : fi.dims) carriers += std::string(carriers.empty() ? "" : ", ") + "{&" + n + "_u, " + n + "_bd.has_value()}";
      r << "    if (" << (others.empty() ? std::string() : others + " && ") << "detail::fold_pays({" << carriers << "}, B_)) {  // the batch folded into index "
        << fi.var << "\n";
      const auto& [first, first_dim] = fi.dims[0];
      r << "      const c10::SymInt n_ = detail::logical_size(" << first << "_u, " << first << "_bd, " << first_dim << ");\n";
      r << "      const auto res_ = " << call_with([&](const SchemaArg& a) {
        auto d = dim.find(a.name);
        if (d == dim.end()) return unwrapped(a);
        return "detail::fold(" + a.name + "_u, " + a.name + "_bd, " + std::to_string(d->second) + ", B_)";
      }) << ";\n";
      const std::string od = std::to_string(fi.out_dim);
      if (s.selects())
        r << "      return {detail::make_batched(detail::unfold(std::get<0>(res_), " << od << ", B_, n_), " << od << ", level_),\n"
          << "              detail::make_batched(detail::unfold(std::get<1>(res_), " << od << ", B_, n_), " << od << ", level_)};\n";
      else
        r << "      return detail::make_batched(detail::unfold(res_, " << od << ", B_, n_), " << od << ", level_);\n";
      r << "    }\n";
    }
    r << "  }\n";
  }
  r << "  // element by element (a batched graph, edge weight or contracted operand), results stacked\n";
  emit_batch_loop(op, call_with([&](const SchemaArg& a) { return a.type == "Tensor" ? "detail::slice(" + a.name + "_u, " + a.name + "_bd, b_)" : a.name; }),
                  s.selects() ? 2 : 1, "", 0, r);
}

// ---------------------------------------------------------------- autocast
// How an op runs under torch.autocast, PyTorch's conventions: the spec's `autocast` line, else
// from the expression: an op that sums an index outside a denominator (a contraction: spmm, the
// sddmm dot, the attention's weighted sum, spgemm) is lower_precision like torch.mm; one whose
// only sums are the denominators of a normalisation (the edge softmax) or that applies exp/log/pow
// is fp32 like a softmax on CUDA; the rest (a max or min, an element-wise sum or product per
// edge) is promote. The ops derived from a user op follow its policy.
std::string autocast_policy(const OpSpec& s) {
  if (!s.autocast.empty()) return s.autocast;
  std::set<std::string> lhs(s.expr.lhs_idx.begin(), s.expr.lhs_idx.end());
  bool contraction = false, normalised = false, transcendental = false;
  std::function<void(const ExprP&, bool, std::set<std::string>)> walk = [&](const ExprP& e, bool denominator, std::set<std::string> bound) {
    switch (e->kind) {
      case Expr::Kind::Access:
        for (auto& v : e->idx) {
          if (lhs.count(v) || bound.count(v)) continue;
          (denominator ? normalised : contraction) = true;
        }
        return;
      case Expr::Kind::Reduce: bound.insert(e->idx.begin(), e->idx.end()); break;
      case Expr::Kind::Call: transcendental = transcendental || find_function(e->name)->float32_under_autocast; break;
      default: break;
    }
    for (size_t k = 0; k < e->args.size(); ++k)
      walk(e->args[k], denominator || (e->kind == Expr::Kind::Binary && e->op == '/' && k == 1), bound);
  };
  std::set<std::string> top;
  // reduce max/min: the indices missing on the left are a max or min, not a sum
  if (s.selects())
    for (auto& v : vars_of(s.expr.rhs))
      if (!lhs.count(v)) top.insert(v);
  walk(s.expr.rhs, false, top);
  if (contraction) return "lower_precision";
  if (normalised || transcendental) return "fp32";
  return "promote";
}

namespace {

std::string autocast_enum(const std::string& policy) {
  return policy == "fp32" ? "detail::Autocast::Fp32" : policy == "promote" ? "detail::Autocast::Promote" : "detail::Autocast::LowerPrecision";
}

// The floating arguments autocast casts: dense operands but `acc` ones (float32 row statistics),
// csr values, edge operands. Never an index or position tensor.
std::set<std::string> autocast_args(const OpSpec& s) {
  std::set<std::string> out;
  for (auto& t : s.tensors) {
    if ((t.role == Role::DenseInput && !t.acc) || t.role == Role::EdgeInput) out.insert(t.arg);
    if (t.role == Role::SparseInput && !t.values.empty()) out.insert(t.values);
  }
  return out;
}

}  // namespace

// The autocast kernel (AutocastCPU / AutocastCUDA, one template) of an op with schema `sc`,
// policy of the family's user op: casts, then the op below the autocast key.
void emit_autocast(const OpSpec& s, const Schema& sc, const std::string& ret, const std::string& policy, std::ostream& r) {
  const std::set<std::string> cast = autocast_args(s);
  std::string floats, call;
  for (auto& a : sc.args) {
    const bool c = a.type == "Tensor" && cast.count(a.name);
    if (c) floats += std::string(floats.empty() ? "" : ", ") + "detail::ptr(" + a.name + ")";
    call += std::string(call.empty() ? "" : ", ") + (c ? "detail::autocast_cast(" + a.name + ", to_, D)" : a.name);
  }
  r << "template <c10::DeviceType D>\n";
  r << ret << " " << sc.name << "_autocast(" << signature(sc, true) << ") {\n";
  r << "  c10::impl::ExcludeDispatchKeyGuard no_autocast_(at::autocast::get_autocast_dispatch_key_from_device_type(D));\n";
  r << "  const at::ScalarType to_ = detail::autocast_dtype(D, " << autocast_enum(policy) << ", " << dtype_mask(s) << ", {" << floats << "});\n";
  r << "  return gnnfuse::" << sc.name << "(" << call << ");\n}\n\n";
}

}  // namespace gnnfuse::codegen::emit
