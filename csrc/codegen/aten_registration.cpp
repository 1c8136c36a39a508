// Registration: per family <op>_register.cpp (schemas, and the kernels of every dispatch key),
// for all ops registration.cpp (the operator namespace) and the LibTorch C++ API
// (include/gnnfuse/ops.h).
#include <sstream>

#include "codegen/emit.h"
#include "codegen/emit_fake_info.h"

namespace gnnfuse::codegen {

using namespace emit;

namespace {

// A dispatch key a family registers kernels at, and the suffix of its kernels' names.
struct DispatchKey {
  enum class Kind { Backend, Meta, Autograd, Batched, Autocast };
  Kind kind;
  std::string key;
  std::string suffix;
};

// The keys of a family compiled for `target`, from the target table: the target's backend key,
// the keys every target shares (Meta, Autograd, FuncTorchBatched), and Autocast<device> for the
// device of every target (the autocast kernel casts, then calls the op below autocast: one
// template for all devices).
std::vector<DispatchKey> dispatch_keys(Target target) {
  const TargetInfo& t = target_info(target);
  std::vector<DispatchKey> keys{{DispatchKey::Kind::Backend, t.dispatch_key, std::string("_") + t.name + "_kernel"},
                                {DispatchKey::Kind::Meta, "Meta", "_meta"},
                                {DispatchKey::Kind::Autograd, "Autograd", "_autograd"},
                                {DispatchKey::Kind::Batched, "FuncTorchBatched", "_batched"}};
  for (auto& d : targets())
    keys.push_back({DispatchKey::Kind::Autocast, std::string("Autocast") + d.device, std::string("_autocast<c10::DeviceType::") + d.device + ">"});
  return keys;
}

}  // namespace

std::vector<GeneratedFile> emit_op_registration(const Family& f) {
  const std::string& fam = f.ops[0]->spec.name;
  std::ostringstream r;
  r << banner(fam);
  r << "// ATen adapters (checks, contiguous inputs, output allocation), Meta kernels, autograd\n";
  r << "// Nodes, vmap batching rules, autocast kernels and the registration of " << fam << " and of the\n";
  r << "// ops derived from it.\n";
  r << "#include <array>\n#include <cstdint>\n#include <mutex>\n#include <new>\n#include <optional>\n#include <stdexcept>\n#include <string>\n#include <tuple>\n#include <vector>\n\n";
  r << "#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty.h>\n#include <ATen/ops/zeros_like.h>\n#include <c10/core/SymInt.h>\n";
  r << "#include <torch/autograd.h>\n#include <torch/csrc/autograd/function.h>\n#include <torch/csrc/autograd/functions/utils.h>\n";
  r << "#include <torch/csrc/autograd/saved_variable.h>\n#include <torch/csrc/dynamo/compiled_autograd.h>\n#include <torch/library.h>\n\n";
  r << "#include \"gnnfuse/graph.h\"\n#include \"gnnfuse/ops.h\"\n#include \"torch/autograd_support.h\"\n#include \"torch/checks.h\"\n";
  r << "#include \"torch/cpu_kernel_key.h\"\n";
  r << "#include \"torch/pattern_cache.h\"\n#include \"torch/transforms_support.h\"\n";
  r << "#include \"" << fam << "_kernel.h\"\n";
  r << "\nnamespace gnnfuse::generated {\nnamespace {\n\n";
  r << "using detail::accumulation_dtype;\nusing detail::dtype_of;\nusing detail::itype_of;\nusing detail::empty_output;\n\n";
  for (auto& c : f.ops) emit_adapter(*c, r);
  const bool symbolic = !f.ops[0]->spec.symbolic.empty();
  if (symbolic) emit_symbolic_adapter(*f.ops[0], r);
  r << "// ---------------------------------------------------------------- autograd\n";
  for (auto& c : f.ops) emit_autograd(f, *c, r);
  r << "// ---------------------------------------------------------------- vmap\n";
  for (auto& c : f.ops) emit_batching_rule(*c, r);
  if (symbolic) emit_symbolic_batching_rule(*f.ops[0], r);
  // Autocast: the user op's policy for the whole family (its adjoints run as it does).
  const std::string policy = autocast_policy(f.ops[0]->spec);
  r << "// ---------------------------------------------------------------- autocast (" << policy << ")\n";
  for (auto& c : f.ops) emit_autocast(c->spec, c->spec.schema, ret_type(c->spec), policy, r);
  if (symbolic) emit_assemble_adapter(*f.ops[0], r);
  r << "}  // namespace\n}  // namespace gnnfuse::generated\n\n";
  r << "TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {\n";
  for (auto& c : f.ops) r << "  m.def(\"" << c->spec.schema.text << "\");\n";
  if (symbolic) r << "  m.def(\"" << symbolic_schema(f.ops[0]->spec) << "\");\n";
  if (symbolic) r << "  m.def(\"" << assemble_schema(f.ops[0]->spec).text << "\");\n";
  r << "}\n";
  const std::string fam_op = f.ops[0]->spec.name;
  for (const DispatchKey& dk : dispatch_keys(f.target)) {
    const std::string& key = dk.key;
    const std::string& suffix = dk.suffix;
    // A family with CUDA kernels (every one) registers its CPU kernels at the key
    // the library chooses on loading (torch/cpu_kernel_key.h: CPU, or PrivateUse3 in the emulated
    // library, whose CPU key is the CUDA adapters'), so both libraries link this one object.
    const bool loaded_key = dk.kind == DispatchKey::Kind::Backend && f.target == Target::Cpu;
    if (loaded_key)
      r << "\nnamespace {\nvoid register_" << fam_op << "_cpu_kernels(torch::Library& m) {\n";
    else
      r << "\nTORCH_LIBRARY_IMPL(gnnfuse, " << key << ", m) {\n";
    for (auto& c : f.ops) r << "  m.impl(\"" << c->spec.name << "\", &gnnfuse::generated::" << c->spec.name << suffix << ");\n";
    // The symbolic pass has no Meta kernel here: its output size is data-dependent, which the
    // Python fake (gnnfuse._library) expresses with an unbacked size. Index tensors only: no
    // autograd or autocast kernel either (both fall through).
    if (symbolic && (dk.kind == DispatchKey::Kind::Backend || dk.kind == DispatchKey::Kind::Batched))
      r << "  m.impl(\"" << fam_op << "_symbolic\", &gnnfuse::generated::" << fam_op << "_symbolic" << suffix << ");\n";
    // The assembling op likewise (fake in gnnfuse._library), and the other kernels.
    if (symbolic && dk.kind != DispatchKey::Kind::Meta)
      r << "  m.impl(\"" << fam_op << "_assemble\", &gnnfuse::generated::" << fam_op << "_assemble" << suffix << ");\n";
    r << "}\n";
    if (loaded_key)
      r << "const gnnfuse::detail::CpuKernelRegistration " << fam_op << "_cpu_kernels(&register_" << fam_op << "_cpu_kernels, __FILE__, __LINE__);\n"
        << "}  // namespace\n";
  }
  r << emit_fake_info(f);  // the fake kernels of <op>_symbolic and <op>_assemble (emit_fake_info.cpp)
  return {{fam + "_register.cpp", r.str()}};
}

std::vector<GeneratedFile> emit_library(const std::vector<const Family*>& fams) {
  std::ostringstream r;
  r << "// Generated by gnnfuse-gen from ops/*.spec. Do not edit: edit the specs.\n";
  r << "// The gnnfuse operator namespace. Every op is defined in a TORCH_LIBRARY_FRAGMENT: the spec\n";
  r << "// ops in <op>_register.cpp, the graph-format ops in csrc/torch/graph_ops.cpp.\n";
  r << "#include <torch/library.h>\n\nTORCH_LIBRARY(gnnfuse, m) { (void)m; }\n";

  // ---- C++ API for LibTorch users
  std::ostringstream api;
  api << "// Generated by gnnfuse-gen from ops/*.spec. Do not edit: edit the specs.\n";
  api << "// C++ API of the spec ops and of their generated derivatives: each call goes through the\n";
  api << "// dispatcher (autograd included), exactly as torch.ops.gnnfuse.<op> does from Python.\n#pragma once\n\n#include <optional>\n#include <tuple>\n\n";
  api << "#include <ATen/core/Tensor.h>\n#include <ATen/core/dispatch/Dispatcher.h>\n\nnamespace gnnfuse {\n\n";
  for (auto* f : fams)
    for (auto& c : f->ops) {
      const OpSpec& s = c->spec;
      api << "// " << s.doc << "\n// index notation: " << s.expr.lhs << "(";
      for (size_t k = 0; k < s.expr.lhs_idx.size(); ++k) api << (k ? "," : "") << s.expr.lhs_idx[k];
      api << ") = " << to_string(s.expr.rhs) << "\n";
      api << "inline " << ret_type(s) << " " << s.name << "(" << signature(s.schema, true, true) << ") {\n";
      api << "  static const auto handle = c10::Dispatcher::singleton()\n";
      api << "      .findSchemaOrThrow(\"gnnfuse::" << s.name << "\", \"\")\n";
      api << "      .typed<" << ret_type(s) << "(" << signature(s.schema, false) << ")>();\n";
      api << "  return handle.call(" << arg_names(s.schema) << ");\n}\n\n";
    }
  for (auto* f : fams) {
    const OpSpec& s = f->ops[0]->spec;
    if (s.symbolic.empty()) continue;
    std::string sig, types, names;
    for (auto* t : symbolic_inputs(s)) {
      sig += std::string(sig.empty() ? "" : ", ") + "const at::Tensor& " + t->rowptr + ", const at::Tensor& " + t->col;
      types += std::string(types.empty() ? "" : ", ") + "const at::Tensor&, const at::Tensor&";
      names += std::string(names.empty() ? "" : ", ") + t->rowptr + ", " + t->col;
    }
    for (auto& [v, a] : s.extents) {
      sig += ", int64_t " + a;
      types += ", int64_t";
      names += ", " + a;
    }
    {
      const Schema sc = assemble_schema(s);
      api << "// " << s.name << " with its output pattern built in the same pass: (rowptr, col, values), columns sorted; the\n";
      api << "// pattern is cached as " << symbolic_name(s) << "'s, and a later call on the same operand patterns runs\n";
      api << "// " << s.name << " on it. Differentiable with respect to the values.\n";
      api << "inline std::tuple<at::Tensor, at::Tensor, at::Tensor> " << sc.name << "(" << signature(sc, true) << ") {\n";
      api << "  static const auto handle = c10::Dispatcher::singleton()\n";
      api << "      .findSchemaOrThrow(\"gnnfuse::" << sc.name << "\", \"\")\n";
      api << "      .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(" << signature(sc, false) << ")>();\n";
      api << "  return handle.call(" << arg_names(sc) << ");\n}\n\n";
    }
    api << "// The pattern (rowptr, col; sorted columns) of " << s.name << "'s output, cached per operand pattern.\n";
    api << "inline std::tuple<at::Tensor, at::Tensor> " << symbolic_name(s) << "(" << sig << ") {\n";
    api << "  static const auto handle = c10::Dispatcher::singleton()\n";
    api << "      .findSchemaOrThrow(\"gnnfuse::" << symbolic_name(s) << "\", \"\")\n";
    api << "      .typed<std::tuple<at::Tensor, at::Tensor>(" << types << ")>();\n";
    api << "  return handle.call(" << names << ");\n}\n\n";
  }
  api << "}  // namespace gnnfuse\n";
  return {{"registration.cpp", r.str()}, {"include/gnnfuse/ops.h", api.str()}};
}

}  // namespace gnnfuse::codegen
