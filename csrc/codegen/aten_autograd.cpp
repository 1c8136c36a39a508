// The Autograd kernel of an op and its autograd Node.
#include <algorithm>
#include <functional>
#include <sstream>

#include "codegen/emit.h"

namespace gnnfuse::codegen::emit {

namespace {

// The floating tensor arguments of an op (dense operands, `acc` ones included, csr values, edge
// operands), in schema order: the inputs autograd differentiates, one edge of its Node each.
std::vector<const SchemaArg*> floating_args(const OpSpec& s) {
  std::set<std::string> names;
  for (auto& t : s.tensors) {
    if (t.role == Role::DenseInput || t.role == Role::EdgeInput) names.insert(t.arg);
    if (t.role == Role::SparseInput && !t.values.empty()) names.insert(t.values);
  }
  std::vector<const SchemaArg*> out;
  for (auto& a : s.schema.args)
    if (a.type == "Tensor" && names.count(a.name)) out.push_back(&a);
  return out;
}

}  // namespace

// `a, b, c` over arguments; `wrap` turns a name into the text written for it.
std::string join_args(const std::vector<const SchemaArg*>& args, const std::function<std::string(const std::string&)>& wrap) {
  std::string out;
  for (size_t k = 0; k < args.size(); ++k) out += (k ? ", " : "") + wrap(args[k]->name);
  return out;
}
std::string same_name(const std::string& n) { return n; }

// The autograd of an op, built as ATen's generated VariableType kernels are (so it works under
// torch.func transforms, which refuse torch::autograd::Function): the Autograd-key kernel runs
// the op below autograd and, when an input requires grad, records a Node of its own. The Node
// saves only the op's inputs (SavedVariables: version-checked, through saved_tensors_hooks;
// never an intermediate: the adjoints recompute edge-sized values inside their kernels) and its
// extents (SymInts); its apply calls the generated adjoint ops through the dispatcher, so it is
// itself differentiable down to the spec's grad_order.
void emit_autograd(const Family& fam, const Compiled& c, std::ostream& r) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  const std::string node = op + "_backward";
  std::vector<const SchemaArg*> tensors;
  for (auto& a : s.schema.args) {
    if (a.type == "Tensor") {
      tensors.push_back(&a);
      continue;
    }
    if (a.optional || a.type == "str") fail(s.loc, "autograd: argument '" + a.name + "' (optional scalar or str) is not supported");
  }
  const std::vector<const SchemaArg*> diff = floating_args(s);
  auto edge_of = [&](const std::string& name) {
    for (size_t k = 0; k < diff.size(); ++k)
      if (diff[k]->name == name) return k;
    fail(s.loc, "internal error: the adjoint input " + name + " is not a floating argument");
  };
  auto it = fam.adjoints.find(op);
  const bool derivable = s.grad_order >= 1 && it != fam.adjoints.end();

  // ---- the backward as a function of the Node's state (ATen's form): the Node's apply runs it,
  // and compiled autograd (torch._dynamo.compiled_autograd) calls it through Python with the
  // state packed as IValues
  struct Param {
    std::string type, name;
  };
  std::vector<Param> params;
  for (auto* a : tensors) params.push_back({a->optional ? "std::optional<at::Tensor>" : "at::Tensor", a->name});
  if (s.selects()) params.push_back({"at::Tensor", "selected_"});
  for (auto& a : s.schema.args) {
    if (a.type == "int") params.push_back({"int64_t", a.name});
    if (a.type == "float") params.push_back({"double", a.name});
    if (a.type == "bool") params.push_back({"bool", a.name});
  }
  for (auto& v : s.order) params.push_back({"c10::SymInt", "n_" + v});
  const std::string needs_t = "std::array<bool, " + std::to_string(diff.size()) + ">";
  std::string param_names;
  for (auto& p : params) param_names += ", " + p.name;
  if (derivable) {
    r << "torch::autograd::variable_list " << node << "_functional(torch::autograd::variable_list&& grads, const " << needs_t << "& needs_input_grad";
    for (auto& p : params) r << ", const " << p.type << "& " << p.name;
    r << ") {\n";
    for (auto& p : params) r << "  (void)" << p.name << ";\n";
    r << "  torch::autograd::variable_list out(" << diff.size() << ");\n";
    r << "  const at::Tensor& grad_output_ = grads[0];\n";
    r << "  if (!grad_output_.defined()) return out;  // no gradient flows in (None): none flows out\n";
    // CSC views, built at most once per backward when no cached one was passed.
    const std::string tup = "std::tuple<at::Tensor, at::Tensor, at::Tensor>";
    std::set<std::string> needs_csc;
    for (auto& adj : it->second) {
      if (adj.zero) continue;
      for (auto& t : adj.spec.tensors)
        if (walks_csc(adj.spec, t)) needs_csc.insert(t.name);
    }
    for (auto& t : s.tensors) {
      if (t.role != Role::SparseInput || !needs_csc.count(t.name)) continue;
      std::string build = "gnnfuse::csr_transpose(" + t.rowptr + ", " + t.col + ", n_" + t.vars[1] + ")";
      std::string expr;
      if (t.has_csc() && !t.csc_optional) expr = "std::make_tuple(" + t.colptr + ", " + t.row + ", " + t.perm + ")";
      else if (t.has_csc()) expr = t.colptr + " ? std::make_tuple(*" + t.colptr + ", *" + t.row + ", *" + t.perm + ") : " + build;
      else expr = build;
      r << "  std::optional<" << tup << "> csc_" << t.name << "_memo;\n";
      r << "  auto csc_" << t.name << " = [&]() -> const " << tup << "& {\n";
      r << "    if (!csc_" << t.name << "_memo) csc_" << t.name << "_memo = " << expr << ";\n";
      r << "    return *csc_" << t.name << "_memo;\n  };\n";
    }
    // The call of a derived op (an adjoint or a row statistic it reads): each argument from the
    // forward's saved inputs, the incoming gradient, the positions of a max/min, the CSC views or
    // the statistics computed first.
    auto derived_call = [&](const Adjoint& adj, const OpSpec& callee) {
      std::vector<std::string> call;
      for (auto& a : callee.schema.args) {
        if (a.name == adj.grad_arg) {
          call.push_back("grad_output_");
          continue;
        }
        if (!adj.select_arg.empty() && a.name == adj.select_arg) {
          call.push_back("selected_");
          continue;
        }
        bool is_stat = false;
        for (auto& st : adj.stats) is_stat = is_stat || st.arg == a.name;
        if (is_stat) {
          call.push_back(a.name + "_()");
          continue;
        }
        // A CSC array of one of the callee's sparse operands?
        std::string csc_value;
        for (auto& t : callee.tensors) {
          if (t.role != Role::SparseInput || !t.has_csc()) continue;
          int which = a.name == t.colptr ? 0 : a.name == t.row ? 1 : a.name == t.perm ? 2 : -1;
          if (which < 0) continue;
          if (walks_csc(callee, t)) csc_value = "std::get<" + std::to_string(which) + ">(csc_" + t.name + "())";
          else csc_value = s.schema.arg(a.name) ? "@pass" : "std::nullopt";
        }
        if (!csc_value.empty() && csc_value != "@pass") {
          call.push_back(csc_value);
          continue;
        }
        const SchemaArg* mine = s.schema.arg(a.name);
        if (!mine) fail(s.loc, "internal error: argument " + a.name + " of " + callee.name + " has no source");
        if (mine->optional == a.optional || a.type != "Tensor") call.push_back(a.name);
        else if (a.optional) call.push_back("std::optional<at::Tensor>(" + a.name + ")");
        else call.push_back("*" + a.name);
      }
      std::string text = "gnnfuse::" + callee.name + "(";
      for (size_t m = 0; m < call.size(); ++m) text += (m ? ", " : "") + call[m];
      return text + ")";
    };
    // Row statistics, each computed at most once per backward, when an adjoint first needs it.
    std::set<std::string> stat_done;
    for (auto& adj : it->second)
      for (auto& st : adj.stats) {
        if (!stat_done.insert(st.arg).second) continue;
        r << "  std::optional<at::Tensor> " << st.arg << "_memo;\n";
        r << "  auto " << st.arg << "_ = [&]() -> const at::Tensor& {\n";
        r << "    if (!" << st.arg << "_memo) " << st.arg << "_memo = " << derived_call(adj, st.spec) << ";\n";
        r << "    return *" << st.arg << "_memo;\n  };\n";
      }
    for (auto& adj : it->second) {
      const SchemaArg& in = *s.schema.arg(adj.input);
      const size_t k = edge_of(adj.input);
      std::string cond = (in.optional ? adj.input + " && " : std::string()) + "needs_input_grad[" + std::to_string(k) + "]";
      if (adj.zero) {
        r << "  if (" << cond << ") out[" << k << "] = at::zeros_like(" << (in.optional ? "*" : "") << adj.input << ");\n";
        continue;
      }
      r << "  if (" << cond << ") out[" << k << "] = " << derived_call(adj, adj.spec) << ";\n";
    }
    r << "  return out;\n}\n\n";
    r << "torch::autograd::variable_list " << node << "_functional_ivalue(const torch::autograd::variable_list& grads, const std::vector<c10::IValue>& args) {\n";
    r << "  torch::dynamo::autograd::PackedArgs packed(args);\n";
    r << "  const std::vector<bool> flags = packed.unpack<std::vector<bool>>();\n";
    r << "  " << needs_t << " needs_input_grad{};\n";
    r << "  for (size_t k = 0; k < needs_input_grad.size() && k < flags.size(); ++k) needs_input_grad[k] = flags[k];\n";
    for (auto& p : params) r << "  const auto " << p.name << " = packed.unpack<" << p.type << ">();\n";
    r << "  return " << node << "_functional(torch::autograd::variable_list(grads), needs_input_grad" << param_names << ");\n}\n\n";
  }

  // ---- the Node
  r << "// The backward of " << op << ": one edge per floating input (" << join_args(diff, same_name) << ")"
    << (derivable ? "" : "; no derivative generated, so nothing saved: its apply raises") << ".\n";
  r << "struct " << node << " final : public torch::autograd::Node {\n";
  r << "  std::string name() const override { return \"gnnfuse::" << node << "\"; }\n";
  r << "  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;\n";
  r << "  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override;\n";
  r << "  torch::autograd::variable_list apply_with_saved(const torch::autograd::variable_list& grads, torch::dynamo::autograd::SwapSavedVariables& saved) override;\n";
  std::vector<std::string> state;  // the members compiled autograd collects and swaps
  if (derivable) {
    for (auto* a : tensors) state.push_back("saved_" + a->name);
    if (s.selects()) state.push_back("saved_selected");
    for (auto& a : s.schema.args)
      if (a.type == "int" || a.type == "float" || a.type == "bool") state.push_back("arg_" + a.name);
    for (auto& v : s.order) state.push_back("ext_" + v);
    r << "  void release_variables() override {\n";
    for (auto* a : tensors) r << "    saved_" << a->name << ".reset_data();\n";
    if (s.selects()) r << "    saved_selected.reset_data();\n";
    r << "  }\n\n";
    for (auto* a : tensors) r << "  torch::autograd::SavedVariable saved_" << a->name << ";\n";
    if (s.selects()) r << "  torch::autograd::SavedVariable saved_selected;  // the CSR positions the max/min chose\n";
    for (auto& a : s.schema.args) {
      if (a.type == "int") r << "  int64_t arg_" << a.name << " = 0;\n";
      if (a.type == "float") r << "  double arg_" << a.name << " = 0;\n";
      if (a.type == "bool") r << "  bool arg_" << a.name << " = false;\n";
    }
    for (auto& v : s.order) r << "  c10::SymInt ext_" << v << ";\n";
  }
  r << "};\n\n";

  // ---- its apply, compiled_args and apply_with_saved
  auto unpack_state = [&]() {
    for (auto* a : tensors) {
      if (a->optional) {
        r << "  const at::Tensor unpacked_" << a->name << " = saved_" << a->name << ".unpack();\n";
        r << "  const std::optional<at::Tensor> " << a->name << " = unpacked_" << a->name << ".defined() ? std::optional<at::Tensor>(unpacked_"
          << a->name << ") : std::nullopt;\n";
      } else {
        r << "  const at::Tensor " << a->name << " = saved_" << a->name << ".unpack();\n";
      }
    }
    if (s.selects()) r << "  const at::Tensor selected_ = saved_selected.unpack();\n";
    for (auto& a : s.schema.args)
      if (a.type == "int" || a.type == "float" || a.type == "bool") r << "  const auto& " << a.name << " = arg_" << a.name << ";\n";
    for (auto& v : s.order) r << "  const c10::SymInt& n_" << v << " = ext_" << v << ";\n";
    r << "  const " << needs_t << " needs_input_grad{";
    for (size_t k = 0; k < diff.size(); ++k) r << (k ? ", " : "") << "task_should_compute_output(" << k << ")";
    r << "};\n";
  };
  const std::string order_error = "\"gnnfuse::" + op + ": this op is a derivative of gnnfuse::" + s.family +
                                  " of the highest order generated (the grad_order line of " + s.family +
                                  ".spec; every derived op has one order less than the op it differentiates): its own derivative is not generated\"";
  r << "torch::autograd::variable_list " << node << "::apply(torch::autograd::variable_list&& grads) {\n";
  if (!derivable) {
    r << "  (void)grads;\n  TORCH_CHECK(false, " << order_error << ");\n  return {};\n}\n\n";
  } else {
    unpack_state();
    r << "  return " << node << "_functional(std::move(grads), needs_input_grad" << param_names << ");\n}\n\n";
  }
  r << "void " << node << "::compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const {\n";
  if (!derivable) r << "  (void)args;\n  TORCH_CHECK(false, " << order_error << ");  // as in eager\n";
  for (auto& m : state) r << "  args.collect(" << m << (m.rfind("saved_", 0) == 0 ? ", false" : "") << ");\n";
  r << "}\n\n";
  r << "torch::autograd::variable_list " << node << "::apply_with_saved(const torch::autograd::variable_list& grads, torch::dynamo::autograd::SwapSavedVariables& saved) {\n";
  if (!derivable) {
    r << "  (void)grads;\n  (void)saved;\n  TORCH_CHECK(false, " << order_error << ");\n  return {};\n}\n\n";
  } else {
    for (auto& m : state) r << "  saved.before(" << m << ");\n";
    r << "  const auto& pyinterface = torch::dynamo::autograd::getPyCompilerInterface();\n";
    r << "  static std::once_flag bound;\n";
    r << "  std::call_once(bound, [&] {\n";
    r << "    std::vector<at::TypePtr> schema = {torch::dynamo::autograd::IValuePacker<" << needs_t << ">::packed_type()";
    for (auto& p : params) r << ",\n        torch::dynamo::autograd::IValuePacker<" << p.type << ">::packed_type()";
    r << "};\n";
    r << "    pyinterface->bind_function(saved.get_py_compiler(), name(), " << node << "_functional_ivalue, schema);\n  });\n";
    unpack_state();
    r << "  torch::dynamo::autograd::PackedArgs packed;\n";
    r << "  packed.pack(needs_input_grad);\n";
    for (auto& p : params) r << "  packed.pack(" << p.name << ");\n";
    r << "  const at::IValue output_metadata = torch::dynamo::autograd::IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(\n";
    r << "      torch::dynamo::autograd::get_input_metadata(next_edges()));\n";
    r << "  torch::autograd::variable_list result =\n";
    r << "      pyinterface->call_function(saved.get_py_compiler(), \"apply_functional\", name(), grads, packed.vec(), output_metadata);\n";
    for (auto& m : state) r << "  saved.after(" << m << ");\n";
    r << "  return result;\n}\n\n";
  }

  // ---- the Autograd-key kernel
  const std::string names = arg_names(s.schema);
  r << ret_type(s) << " " << op << "_autograd(" << signature(s.schema, true) << ") {\n";
  r << "  detail::no_forward_ad(\"" << op << "\", {" << join_args(diff, [](const std::string& n) { return "detail::ptr(" + n + ")"; })
    << "});\n";
  r << "  detail::node_ptr<" << node << "> grad_fn_;\n";
  r << "  if (torch::autograd::compute_requires_grad(" << join_args(diff, same_name) << ")) {\n";
  if (derivable) r << "    const " << op << "_extents e = " << op << "_check(" << names << ");\n";
  r << "    grad_fn_ = detail::make_node<" << node << ">();\n";
  r << "    grad_fn_->set_next_edges(torch::autograd::collect_next_edges(" << join_args(diff, same_name) << "));\n";
  if (derivable) {
    for (auto* a : tensors) r << "    grad_fn_->saved_" << a->name << " = torch::autograd::SavedVariable(" << a->name << ", false);\n";
    for (auto& a : s.schema.args)
      if (a.type == "int" || a.type == "float" || a.type == "bool") r << "    grad_fn_->arg_" << a.name << " = " << a.name << ";\n";
    for (auto& v : s.order) r << "    grad_fn_->ext_" << v << " = e.n_" << v << ";\n";
  }
  r << "  }\n";
  if (s.selects()) {
    r << "  at::Tensor out_, selected_;\n  {\n    at::AutoDispatchBelowADInplaceOrView guard;\n";
    r << "    std::tie(out_, selected_) = gnnfuse::" << op << "(" << names << ");\n  }\n";
    r << "  if (grad_fn_) {  // the positions are not differentiable: no history\n";
    if (derivable) r << "    grad_fn_->saved_selected = torch::autograd::SavedVariable(selected_, false);\n";
    r << "    torch::autograd::set_history(out_, grad_fn_);\n  }\n";
    r << "  return {out_, selected_};\n}\n\n";
  } else {
    r << "  at::Tensor out_;\n  {\n    at::AutoDispatchBelowADInplaceOrView guard;\n";
    r << "    out_ = gnnfuse::" << op << "(" << names << ");\n  }\n";
    r << "  if (grad_fn_) torch::autograd::set_history(out_, grad_fn_);\n";
    r << "  return out_;\n}\n\n";
  }
}

}  // namespace gnnfuse::codegen::emit
