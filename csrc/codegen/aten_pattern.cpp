// The ATen adapters of <op>_symbolic (the output pattern of a `symbolic S` op) and <op>_assemble
// (the op with its pattern built in the same pass), and the symbolic op's batching rule.
#include <algorithm>
#include <sstream>

#include "codegen/emit.h"

namespace gnnfuse::codegen::emit {

// The ATen adapter of `<op>_symbolic`: checks, the cache of patterns already computed (the
// same operands every epoch), pass 1 (row lengths), exact allocation, pass 2 (sorted columns).
// Checks of the csr operands that give the output pattern (all but S) and of the extents, for
// the symbolic and assembling adapters (`op` in scope); with `dense` (the assembling adapter),
// of the dense operands too, as the op's adapter checks them, their dimensions binding indices;
// declares n_<v> for every index variable (-1 where only S binds it); with `checks` false, only
// declares them.
void emit_pattern_checks(const Compiled& c, std::ostream& r, bool checks = true, bool dense = false) {
  const OpSpec& s = c.spec;
  auto in = symbolic_inputs(s);
  const std::string& first = in.at(0)->rowptr;
  auto own = pattern_bindings(s, dense);
  if (!checks) {
    for (auto& v : s.order)
      r << "  const int64_t n_" << v << " = " << (own[v].empty() ? std::string("-1") : extent_text(own[v][0])) << ";  (void)n_" << v << ";\n";
    return;
  }
  for (auto* t : in) {
    emit_csr_arg_checks(r, *t, first);
    r << "  checks::same_device(op, \"" << t->rowptr << "\", " << t->rowptr << ", \"" << first << "\", " << first << ");\n";
    r << "  checks::same_device(op, \"" << t->col << "\", " << t->col << ", \"" << first << "\", " << first << ");\n";
  }
  for (auto& [v, a] : s.extents) r << "  checks::extent(op, \"" << a << "\", " << a << ");\n";
  if (dense) {
    emit_dense_checks(r, s, ref_arg(s));
    for (auto& t : s.tensors)
      if (t.role == Role::DenseInput) r << "  checks::same_device(op, \"" << t.arg << "\", " << t.arg << ", \"" << first << "\", " << first << ");\n";
  }
  // Extents from the inputs (S's own bindings left out).
  for (auto& v : s.order) {
    if (own[v].empty()) {
      r << "  const int64_t n_" << v << " = -1;  (void)n_" << v << ";\n";
      continue;
    }
    r << "  const int64_t n_" << v << " = " << extent_text(own[v][0]) << ";  (void)n_" << v << ";\n";
    for (size_t b = 1; b < own[v].size(); ++b)
      emit_binding_check(r, "size_eq", own[v][b], "n_" + v,
                         extent_text(own[v][0]) + (own[v][b].dim < 0 ? " plus one" : "") + ", the extent of index " + v);
  }
  for (auto* t : in) {
    emit_csr_value_check(r, "op", *t, own[t->vars[1]], "n_" + t->vars[1]);
    if (t->single) r << "  checks::one_per_row(op, \"" << t->rowptr << "\", " << t->rowptr << ", " << t->col << ");\n";
  }
}

// The cache key of an output pattern: the operands' patterns and the extent arguments.
std::pair<std::string, std::string> pattern_key(const Compiled& c) {
  std::string keys, ints;
  for (auto* t : symbolic_inputs(c.spec)) keys += std::string(keys.empty() ? "" : ", ") + t->rowptr + ", " + t->col;
  for (auto& [v, a] : c.spec.extents) ints += std::string(ints.empty() ? "" : ", ") + a;
  return {keys, ints};
}

// The extents of a symbolic or assembling pass as a C++ string expression (for messages).
std::string pattern_extents(const Compiled& c, bool dense = false) {
  auto own = pattern_bindings(c.spec, dense);
  std::string out;
  for (auto& v : c.spec.order) {
    if (own[v].empty()) continue;
    out += std::string(out.empty() ? "\"" : " + \", ") + "n_" + v + " = \" + std::to_string(n_" + v + ")" +
           (own[v][0].dim == -3 ? " + \" (argument '" + own[v][0].arg + "')\"" : "");
  }
  return out.empty() ? "std::string()" : out;
}

// The kernel parameters `prm` of the symbolic or assembling pass `op`: the extents and the
// pattern operands (contiguous), with their values and the dense operands when `values` (the
// assembling pass).
void emit_pattern_params(const Compiled& c, const std::string& op, bool values, std::ostream& r) {
  r << "  " << op << "_params prm;\n";
  for (auto& v : c.spec.order) r << "  prm.n_" << v << " = n_" << v << ";\n";
  for (auto* t : symbolic_inputs(c.spec)) {
    r << "  const at::Tensor " << t->rowptr << "_c = " << t->rowptr << ".contiguous();\n";
    r << "  const at::Tensor " << t->col << "_c = " << t->col << ".contiguous();\n";
    r << "  prm." << t->name << "_rowptr = " << t->rowptr << "_c.const_data_ptr();\n";
    r << "  prm." << t->name << "_col = " << t->col << "_c.const_data_ptr();\n";
    if (values && !t->values.empty()) {
      r << "  const at::Tensor " << t->values << "_c = " << t->values << ".contiguous();\n";
      r << "  prm." << t->name << "_val = " << t->values << "_c.const_data_ptr();\n";
    }
  }
  if (values)
    for (auto& t : c.spec.tensors)
      if (t.role == Role::DenseInput) emit_operand_param(r, t);
}

// The head of the `<op>_symbolic` adapter `<op>_symbolic<suffix>` (the CPU's or the CUDA's): its
// signature, checks and the pattern cache's lookup.
void emit_symbolic_head(const Compiled& c, const std::string& suffix, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string op = symbolic_name(s);
  std::string sig;
  for (auto* t : symbolic_inputs(s)) sig += std::string(sig.empty() ? "" : ", ") + "const at::Tensor& " + t->rowptr + ", const at::Tensor& " + t->col;
  for (auto& [v, a] : s.extents) sig += ", int64_t " + a;
  r << "// ---------------------------------------------------------------- " << op << "\n";
  r << "std::tuple<at::Tensor, at::Tensor> " << op << suffix << "(" << sig << ") {\n";
  r << "  constexpr const char* op = \"" << op << "\";\n";
  emit_pattern_checks(c, r);
  const auto [keys, ints] = pattern_key(c);
  // A hit hands out copies: results of separate calls never share storage (an in-place change
  // of one would show in the other; the cache's own tensors stay as stored).
  r << "  if (auto hit = cache::lookup(op, {" << keys << "}, {" << ints << "})) return {(*hit)[0].clone(), (*hit)[1].clone()};\n";
}

void emit_symbolic_adapter(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string op = symbolic_name(s);
  auto in = symbolic_inputs(s);
  const std::string& first = in.at(0)->rowptr;
  emit_symbolic_head(c, "_cpu_kernel", r);
  const auto [keys, ints] = pattern_key(c);
  std::ostringstream kernel_call;
  {
  std::ostream& r = kernel_call;
  emit_pattern_params(c, op, false, r);
  const std::string rows = "n_" + p_outer(c, s.symbolic);
  r << "  at::Tensor rowptr64_ = at::empty({" << rows << " + 1}, " << first << ".options().dtype(at::kLong));\n";
  r << "  prm.out_rowptr = rowptr64_.mutable_data_ptr<int64_t>();\n";
  r << "  struct Alloc {\n    at::TensorOptions options;\n    const char* op;\n    at::Tensor col;\n  } alloc_{" << first << ".options(), op, at::Tensor()};\n";
  r << "  prm.alloc_ctx = &alloc_;\n";
  r << "  prm.alloc_col = [](void* ctx, int64_t nnz) -> void* {\n";
  r << "    auto* a = static_cast<Alloc*>(ctx);\n";
  r << "    checks::fits_index(a->op, \"" << first << "\", a->options.dtype().toScalarType(), nnz);\n";
  r << "    a->col = at::empty({nnz}, a->options);\n";
  r << "    return a->col.mutable_data_ptr();\n  };\n";
  r << "  " << op << "_cpu(prm, itype_of(" << first << "));\n";
  r << "  at::Tensor pattern_col_ = alloc_.col;\n";
  r << "  at::Tensor pattern_rowptr_ = rowptr64_.to(" << first << ".scalar_type());\n";
  r << "  cache::store(op, {" << keys << "}, {" << ints << "}, {pattern_rowptr_, pattern_col_});\n";
  r << "  return {pattern_rowptr_, pattern_col_};\n";
  }
  emit_allocation_guard(r, "op", kernel_call.str(), pattern_extents(c));
  r << "}\n\n";
}

// `<op>_assemble`: the op with its output pattern S built in the same pass, for ops with
// `symbolic S`: the op's arguments without S's, returning (rowptr, col, values).
Schema assemble_schema(const OpSpec& s) {
  const TensorDecl& S = *s.find(s.symbolic);
  Schema a;
  a.name = s.name + "_assemble";
  a.returns = {"Tensor", "Tensor", "Tensor"};
  a.text = a.name + "(";
  for (auto& arg : s.schema.args) {
    if (arg.name == S.rowptr || arg.name == S.col) continue;
    a.text += std::string(a.args.empty() ? "" : ", ") + arg.type + (arg.optional ? "?" : "") + " " + arg.name +
              (arg.default_value.empty() ? "" : "=" + arg.default_value);
    a.args.push_back(arg);
  }
  a.text += ") -> (Tensor, Tensor, Tensor)";
  return a;
}
// The op's argument list with S's pattern given by `rowptr` and `col`.
std::string args_with_pattern(const OpSpec& s, const std::string& rowptr, const std::string& col) {
  const TensorDecl& S = *s.find(s.symbolic);
  std::string out;
  for (auto& a : s.schema.args)
    out += (out.empty() ? "" : ", ") + (a.name == S.rowptr ? rowptr : a.name == S.col ? col : a.name);
  return out;
}
std::string pattern_args(const Compiled& c) {
  std::string names;
  for (auto* t : symbolic_inputs(c.spec)) names += std::string(names.empty() ? "" : ", ") + t->rowptr + ", " + t->col;
  for (auto& [v, a] : c.spec.extents) names += ", " + a;
  return names;
}

// `<op>_assemble_check`: the assembling op's checks, shared by its CPU, CUDA and Autograd kernels
// (the latter calls other ops, whose errors would name them, not this op).
void emit_assemble_check(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const Schema sc = assemble_schema(s);
  const std::string& op = sc.name;
  auto in = symbolic_inputs(c.spec);
  const std::string& first = in.at(0)->rowptr;
  const std::string ref = ref_arg(s);
  r << "void " << op << "_check(" << signature(sc, true) << ") {\n";
  r << "  constexpr const char* op = \"" << op << "\";\n";
  emit_pattern_checks(c, r, true, true);
  for (auto* t : in) {
    if (t->values.empty()) continue;
    r << "  checks::floating(op, \"" << t->values << "\", " << t->values << ", 1, " << dtype_mask(s) << ");\n";
    if (t->values != ref) r << "  checks::same_dtype(op, \"" << t->values << "\", " << t->values << ", \"" << ref << "\", " << ref << ");\n";
    r << "  checks::same_device(op, \"" << t->values << "\", " << t->values << ", \"" << first << "\", " << first << ");\n";
    r << "  checks::size_eq(op, \"" << t->values << "\", " << t->values << ", 0, " << t->col << ".size(0), \"" << t->col
      << ".size(0), the number of stored entries\");\n";
  }
  r << "}\n\n";
}

// The ATen adapter of `<op>_assemble`: on a pattern the symbolic pass has cached (every call
// after the first on the same operands), the numeric op on it; else the assembling kernel, whose
// pattern then goes to that cache. Its Autograd kernel: without a gradient to record, the same
// below autograd; with one, the (cached) symbolic pattern and the differentiable op on it.
void emit_assemble_adapter(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const Schema sc = assemble_schema(s);
  const std::string& op = sc.name;
  const std::string ret = "std::tuple<at::Tensor, at::Tensor, at::Tensor>";
  auto in = symbolic_inputs(c.spec);
  const std::string& first = in.at(0)->rowptr;
  const std::string ref = ref_arg(s);
  r << "// ---------------------------------------------------------------- " << op << "\n";
  emit_assemble_check(c, r);
  r << ret << " " << op << "_cpu_kernel(" << signature(sc, true) << ") {\n";
  r << "  constexpr const char* op = \"" << op << "\";\n";
  r << "  " << op << "_check(" << arg_names(sc) << ");\n";
  emit_pattern_checks(c, r, false, true);
  for (auto& a : sc.args)
    if (a.type != "Tensor" && a.type != "int") fail(s.loc, "assemble: argument '" + a.name + "' (" + a.type + ") is not supported");
  const auto [keys, ints] = pattern_key(c);
  std::ostringstream kernel_call;
  {
  std::ostream& r = kernel_call;
  r << "  if (auto hit = cache::lookup(\"" << s.name << "_symbolic\", {" << keys << "}, {" << ints << "}))\n";
  r << "    return {(*hit)[0].clone(), (*hit)[1].clone(), " << s.name << "_cpu_kernel(" << args_with_pattern(s, "(*hit)[0]", "(*hit)[1]") << ")};\n";
  emit_pattern_params(c, op, true, r);
  const std::string rows = "n_" + p_outer(c, s.symbolic);
  r << "  at::Tensor rowptr64_ = at::empty({" << rows << " + 1}, " << first << ".options().dtype(at::kLong));\n";
  r << "  prm.out_rowptr = rowptr64_.mutable_data_ptr<int64_t>();\n";
  r << "  struct Alloc {\n    at::TensorOptions options, value_options;\n    const char* op;\n    at::Tensor col, val;\n  } alloc_{" << first
    << ".options(), " << ref << ".options(), op, at::Tensor(), at::Tensor()};\n";
  r << "  prm.alloc_ctx = &alloc_;\n";
  r << "  prm.alloc = [](void* ctx, int64_t nnz, void** col, void** val) {\n";
  r << "    auto* a = static_cast<Alloc*>(ctx);\n";
  r << "    checks::fits_index(a->op, \"" << first << "\", a->options.dtype().toScalarType(), nnz);\n";
  r << "    a->col = at::empty({nnz}, a->options);\n";
  r << "    a->val = empty_output({nnz}, a->value_options);\n";
  r << "    *col = a->col.mutable_data_ptr();\n";
  r << "    *val = a->val.mutable_data_ptr();\n  };\n";
  r << "  " << op << "_cpu(prm, dtype_of(" << ref << "), itype_of(" << first << "));\n";
  r << "  at::Tensor pattern_rowptr_ = rowptr64_.to(" << first << ".scalar_type());\n";
  r << "  cache::store(\"" << s.name << "_symbolic\", {" << keys << "}, {" << ints << "}, {pattern_rowptr_, alloc_.col});\n";
  r << "  return {pattern_rowptr_, alloc_.col, alloc_.val};\n";
  }
  emit_allocation_guard(r, "op", kernel_call.str(), pattern_extents(c, true));
  r << "}\n\n";
  // Autograd.
  std::vector<const SchemaArg*> values;
  for (auto* t : in)
    if (!t->values.empty()) values.push_back(sc.arg(t->values));
  for (auto& t : s.tensors)
    if (t.role == Role::DenseInput) values.push_back(sc.arg(t.arg));
  r << ret << " " << op << "_autograd(" << signature(sc, true) << ") {\n";
  r << "  detail::no_forward_ad(\"" << op << "\", {" << join_args(values, [](const std::string& n) { return "detail::ptr(" + n + ")"; }) << "});\n";
  r << "  if (!torch::autograd::compute_requires_grad(" << join_args(values, same_name) << ")) {\n";
  r << "    at::AutoDispatchBelowADInplaceOrView guard;\n";
  r << "    return gnnfuse::" << op << "(" << arg_names(sc) << ");\n  }\n";
  // The index values cannot be read under a torch.func transform (wrappers without storage) or
  // while torch.compile / export trace (fake tensors): then the ops below check the unwrapped or
  // real tensors (naming themselves).
  std::string readable;
  for (auto& a : sc.args)
    if (a.type == "Tensor") readable += std::string(readable.empty() ? "" : ", ") + "detail::ptr(" + a.name + ")";
  r << "  if (detail::values_readable({" << readable << "})) " << op << "_check(" << arg_names(sc) << ");\n";
  // The arguments are checked: what the ops below can still raise is a failed allocation, which
  // then names this op (around their message).
  r << "  try {\n";
  r << "    auto [rowptr_, col_] = gnnfuse::" << s.name << "_symbolic(" << pattern_args(c) << ");\n";
  r << "    return {rowptr_, col_, " << s.name << "_autograd(" << args_with_pattern(s, "rowptr_", "col_") << ")};\n";
  r << "  } catch (const c10::Error& error_) {\n";
  r << "    if (!checks::allocation_failed(error_)) throw;\n";
  r << "    checks::out_of_memory(\"" << op << "\", std::string(), error_.what_without_backtrace());\n  }\n}\n\n";
  emit_autocast(s, sc, ret, autocast_policy(s), r);
  // vmap: element by element (the pattern may differ per element); with the csr patterns
  // unbatched (a batch of values only) every element has the same pattern, returned once.
  std::vector<std::pair<std::string, bool>> tensors;
  std::string unwrapped, sliced, unbatched_idx;
  for (auto& a : sc.args) {
    unwrapped += std::string(unwrapped.empty() ? "" : ", ") + (a.type == "Tensor" ? a.name + "_u" : a.name);
    sliced += std::string(sliced.empty() ? "" : ", ") + (a.type == "Tensor" ? "detail::slice(" + a.name + "_u, " + a.name + "_bd, b_)" : a.name);
    if (a.type != "Tensor") continue;
    tensors.push_back({a.name, a.optional});
    if (index_args(s).count(a.name)) unbatched_idx += std::string(unbatched_idx.empty() ? "" : " && ") + "!" + a.name + "_bd";
  }
  r << ret << " " << op << "_batched(" << signature(sc, true) << ") {\n";
  emit_batch_prologue(op, tensors, "gnnfuse::" + op + "(" + unwrapped + ")", r);
  emit_batch_loop(op, "gnnfuse::" + op + "(" + sliced + ")", 3, unbatched_idx.empty() ? "true" : unbatched_idx, 2, r);
}

// The CUDA adapters (<fam>_cuda_register.cpp) of `<op>_symbolic` (checks, the pattern cache,
// the pattern kernels of cuda_symbolic.cpp through cuda_adapter::computed_pattern) and of
// `<op>_assemble` (its checks, the cached pattern, then the op's CUDA kernel on it: two passes
// where the CPU assembles in one).
void emit_symbolic_cuda_adapters(const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string op = symbolic_name(s);
  auto in = symbolic_inputs(s);
  const std::string& first = in.at(0)->rowptr;
  const std::string entries = in.at(0)->col + ".size(0)";  // (the chunks' budget: cuda_adapter::computed_pattern)
  emit_symbolic_head(c, "_cuda_kernel", r);
  const auto [keys, ints] = pattern_key(c);
  std::ostringstream kernel_call;
  {
  std::ostream& r = kernel_call;
  emit_pattern_params(c, op, false, r);
  r << "  const cuda_adapter::DeviceScope device_(" << first << ");\n";
  r << "  const runtime::IType itype_ = itype_of(" << first << ");\n";
  r << "  cuda_adapter::PatternPasses passes_;\n";
  r << "  passes_.slots = [&](int64_t* slots, const runtime::cuda::Env& env) { " << op << "_cuda_slots(prm, itype_, slots, env); };\n";
  r << "  passes_.rows = [&](runtime::cuda::PatternBin bin, const int64_t* rows, int64_t t0, int64_t t1, const int64_t* offsets, int64_t most,\n"
       "                     int64_t grid, void* table, int64_t* out_rowptr, void* col, const runtime::cuda::Env& env) {\n";
  r << "    " << op << "_cuda_rows(prm, itype_, bin, rows, t0, t1, offsets, most, grid, table, out_rowptr, col, env);\n  };\n";
  r << "  auto [rowptr64_, pattern_col_] = cuda_adapter::computed_pattern(op, \"" << first << "\", " << first << ", n_" << p_outer(c, s.symbolic)
    << ", n_" << c.program.inner_var(s.symbolic) << ", " << entries << ", passes_);\n";
  r << "  at::Tensor pattern_rowptr_ = rowptr64_.to(" << first << ".scalar_type());\n";
  r << "  cache::store(op, {" << keys << "}, {" << ints << "}, {pattern_rowptr_, pattern_col_});\n";
  r << "  return {pattern_rowptr_, pattern_col_};\n";
  }
  emit_allocation_guard(r, "op", kernel_call.str(), pattern_extents(c));
  r << "}\n\n";
  const Schema sc = assemble_schema(s);
  emit_assemble_check(c, r);
  r << "std::tuple<at::Tensor, at::Tensor, at::Tensor> " << sc.name << "_cuda_kernel(" << signature(sc, true) << ") {\n";
  r << "  " << sc.name << "_check(" << arg_names(sc) << ");\n";
  // A failed allocation in the ops it runs names this op (as the CPU adapter's).
  std::ostringstream assemble_call;
  assemble_call << "  auto [rowptr_, col_] = " << op << "_cuda_kernel(" << pattern_args(c) << ");\n";
  assemble_call << "  at::Tensor values_ = " << s.name << "_cuda_kernel(" << args_with_pattern(s, "rowptr_", "col_") << ");\n";
  assemble_call << "  return {rowptr_, col_, values_};\n";
  emit_allocation_guard(r, "\"" + sc.name + "\"", assemble_call.str(), "std::string()");
  r << "}\n\n";
}

// The batching rule of `<op>_symbolic`: a batch of patterns, element by element, stacked (the
// elements' patterns must have one number of entries).
void emit_symbolic_batching_rule(const Compiled& c, std::ostream& r) {
  const std::string op = symbolic_name(c.spec);
  std::vector<std::pair<std::string, bool>> tensors;
  std::string sig, unwrapped, sliced;
  auto add = [&](const std::string& type, const std::string& name) {
    sig += std::string(sig.empty() ? "" : ", ") + type + " " + name;
    unwrapped += std::string(unwrapped.empty() ? "" : ", ") + (type == "int64_t" ? name : name + "_u");
    sliced += std::string(sliced.empty() ? "" : ", ") + (type == "int64_t" ? name : "detail::slice(" + name + "_u, " + name + "_bd, b_)");
    if (type != "int64_t") tensors.push_back({name, false});
  };
  for (auto* t : symbolic_inputs(c.spec)) {
    add("const at::Tensor&", t->rowptr);
    add("const at::Tensor&", t->col);
  }
  for (auto& [v, a] : c.spec.extents) add("int64_t", a);
  r << "std::tuple<at::Tensor, at::Tensor> " << op << "_batched(" << sig << ") {\n";
  emit_batch_prologue(op, tensors, "gnnfuse::" + op + "(" + unwrapped + ")", r);
  emit_batch_loop(op, "gnnfuse::" + op + "(" + sliced + ")", 2, "", 0, r);
}

}  // namespace gnnfuse::codegen::emit
