// The CPU target's files of one family: per op a torch-free CPU kernel (<op>_cpu.cpp) with its
// params struct (<op>_kernel.h), every lowering of a `variants auto` op and its cost-model choice.
#include <algorithm>
#include <sstream>

#include "codegen/cpu_kernel.h"

namespace gnnfuse::codegen::emit {

namespace {

void emit_params(const Compiled& c, std::ostream& h) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  h << "// " << s.doc << "\n// " << s.expr.lhs << "(";
  for (size_t k = 0; k < s.expr.lhs_idx.size(); ++k) h << (k ? "," : "") << s.expr.lhs_idx[k];
  h << ") = " << to_string(s.expr.rhs) << "\n";
  h << "struct " << op << "_params {\n";
  for (auto& v : s.order) h << "  int64_t n_" << v << " = 0;  // extent of " << v << "\n";
  for (auto& a : s.schema.args)
    if (a.type == "float") h << "  double " << a.name << " = 0;  // schema argument\n";
  for (auto& t : s.tensors) {
    switch (t.role) {
      case Role::SparseInput:
        h << "  const void* " << t.name << "_rowptr = nullptr;  // index_t[n_" << t.vars[0] << " + 1]\n";
        h << "  const void* " << t.name << "_col = nullptr;     // index_t[nnz]\n";
        h << "  int64_t " << t.name << "_nnz = 0;  // its stored entries (col's length): sizes temporaries by its positions\n";
        if (!t.values.empty()) h << "  const void* " << t.name << "_val = nullptr;     // scalar_t[nnz]" << (t.values_optional ? ", nullptr: all ones" : "") << "\n";
        if (walks_csc(s, t)) {
          h << "  const void* " << t.name << "_colptr = nullptr;  // index_t[n_" << t.vars[1] << " + 1]\n";
          h << "  const void* " << t.name << "_row = nullptr;     // index_t[nnz]\n";
          h << "  const void* " << t.name << "_perm = nullptr;    // int64_t[nnz]: CSR position of each CSC entry\n";
        }
        break;
      case Role::DenseInput: {
        h << "  const void* " << t.name << " = nullptr;  // scalar_t[";
        for (size_t d = 0; d < t.vars.size(); ++d) h << (d ? "][" : "") << "n_" << t.vars[d];
        h << "], contiguous\n";
        break;
      }
      case Role::EdgeInput: h << "  const void* " << t.name << " = nullptr;  // scalar_t[nnz of " << t.pattern << "], CSR order\n"; break;
      case Role::SelectInput: {
        h << "  const void* " << t.name << " = nullptr;  // int64_t[";
        for (size_t d = 0; d < t.vars.size(); ++d)
          if (d != 1) h << (d ? "][" : "") << "n_" << t.vars[d];
        h << "]: chosen CSR position of " << t.pattern << " or -1\n";
        break;
      }
      case Role::CountInput: break;
      case Role::Output:
        h << "  void* " << t.name << " = nullptr;  // scalar_t";
        if (t.pattern.empty()) {
          for (auto& v : t.vars) h << "[n_" << v << "]";
        } else {
          h << "[nnz of " << t.pattern << "], CSR order";
        }
        h << "\n";
        if (s.selects()) h << "  void* " << t.name << "_arg = nullptr;  // int64_t, same shape: chosen CSR position, -1 (preset) for none\n";
        break;
      case Role::Temp: break;
    }
  }
  h << "};\n";
  h << "void " << op << "_cpu(const " << op << "_params& prm, runtime::DType dtype, runtime::IType itype);\n\n";
}

// One lowering of an op: the kernel emitted twice, a baseline copy and on x86-64 with GCC a
// copy compiled for AVX2+FMA (target pragma on the definitions only, so no shared inline code is
// built for AVX2), chosen at run time from the CPU's features; optional values become
// compile-time flags (<fn>_flags), so the inner loops carry no branch.
void emit_lowering(const Compiled& c, const std::string& fn, std::ostream& k) {
  const OpSpec& s = c.spec;
  std::istringstream tree(print_tree(c.program, *c.tree));
  for (std::string l; std::getline(tree, l);) k << "//   " << l << "\n";
  auto opt = optional_values(s);
  std::string tparams = "template <typename scalar_t, typename index_t";
  for (auto* t : opt) tparams += ", bool kHas" + t->name;
  const std::string body = KernelEmitter(c, *c.kernel).body();
  check_unbound_extents(s, s.name, body, unbound_indices(bindings(s)));
  tparams += ">\nvoid " + fn + "_impl(const " + s.name + "_params& prm) {\n" + body + "}\n";
  k << "namespace base {\n" << tparams << "}  // namespace base\n\n";
  k << "#ifdef GNNFUSE_AVX2_PATH\n#pragma GCC push_options\n#pragma GCC target(\"avx2,fma\")\n";
  k << "namespace avx2 {\n" << tparams << "}  // namespace avx2\n#pragma GCC pop_options\n#endif\n\n";
  k << "template <typename scalar_t, typename index_t>\nvoid " << fn << "_flags(const " << s.name << "_params& prm) {\n";
  size_t combos = size_t(1) << opt.size();
  for (const char* ns : {"avx2", "base"}) {
    bool vec = std::string(ns) == "avx2";
    if (vec) k << "#ifdef GNNFUSE_AVX2_PATH\n  if (runtime::cpu_has_avx2_fma()) {\n";
    for (size_t m = 0; m < combos; ++m) {
      std::string cond, targs;
      for (size_t b = 0; b < opt.size(); ++b) {
        bool on = (m >> b) & 1;
        cond += std::string(b ? " && " : "") + "(prm." + opt[b]->name + "_val " + (on ? "!=" : "==") + " nullptr)";
        targs += on ? ", true" : ", false";
      }
      std::string call = std::string(ns) + "::" + fn + "_impl<scalar_t, index_t" + targs + ">(prm);";
      k << (vec ? "    " : "  ") << (opt.empty() ? "return " + call : "if (" + cond + ") return " + call) << "\n";
    }
    if (vec) k << "  }\n#endif\n";
  }
  k << "}\n\n";
}

// An op with `variants auto`: every lowering, and <op>_run, which evaluates their cost models
// (Compiled::cost_model) on the call's extents and stored entries and runs the cheapest (or the one
// forced through runtime::Variants).
void emit_variant_choice(const Compiled& c, std::ostream& k) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  const size_t count = c.alternatives.size() + 1;
  k << "thread_local int " << op << "_last_ = -1;\n";
  k << "int " << op << "_last() { return " << op << "_last_; }\n";
  k << "runtime::Variants " << op << "_variants_(\"" << op << "\", " << count << ", &" << op << "_last);\n\n";
  k << "template <typename scalar_t, typename index_t>\nvoid " << op << "_run(const " << op << "_params& prm) {\n";
  for (auto& v : s.order) k << "  const double n_" << v << " = static_cast<double>(prm.n_" << v << ");\n";
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput)
      k << "  const double nnz_" << t.name << " = static_cast<double>(static_cast<const index_t*>(prm." << t.name << "_rowptr)[prm.n_"
        << t.vars[0] << "]);\n";
  k << "  const double costs[" << count << "] = {" << print_cost_cpu(c.cost_model);
  for (auto& a : c.alternatives) k << ",\n      " << print_cost_cpu(a->cost_model);
  k << "};\n";
  for (auto& v : s.order) k << "  (void)n_" << v << ";\n";
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) k << "  (void)nnz_" << t.name << ";\n";
  k << "  const int pick = " << op << "_variants_.pick(costs);\n";
  k << "  " << op << "_last_ = pick;\n";
  for (size_t v = 1; v < count; ++v)
    k << "  if (pick == " << v << ") return " << op << "_v" << v << "_flags<scalar_t, index_t>(prm);\n";
  k << "  " << op << "_flags<scalar_t, index_t>(prm);\n}\n\n";
}

void emit_kernel(const Compiled& c, std::ostream& k) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  k << "// ---------------------------------------------------------------- " << op << "\n";
  k << "// " << s.expr.lhs << "(";
  for (size_t m = 0; m < s.expr.lhs_idx.size(); ++m) k << (m ? "," : "") << s.expr.lhs_idx[m];
  k << ") = " << to_string(s.expr.rhs) << "\n";
  k << "namespace {\n\n";
  if (!c.alternatives.empty()) k << "// variant 0, cost " << print_cost_cpu(c.cost_model) << "\n";
  emit_lowering(c, op, k);
  for (size_t v = 0; v < c.alternatives.size(); ++v) {
    k << "// variant " << v + 1 << ", cost " << print_cost_cpu(c.alternatives[v]->cost_model) << "\n";
    emit_lowering(*c.alternatives[v], op + "_v" + std::to_string(v + 1), k);
  }
  const std::string entry = c.alternatives.empty() ? op + "_flags" : op + "_run";
  if (!c.alternatives.empty()) emit_variant_choice(c, k);
  k << "}  // namespace\n\n";
  k << "void " << op << "_cpu(const " << op << "_params& prm, runtime::DType dtype, runtime::IType itype) {\n";
  for (auto& d : s.dtypes)
    for (auto& i : s.index_dtypes)
      k << "  if (dtype == " << dtype_enum(d) << " && itype == " << dtype_enum(i) << ") return " << entry << "<" << ctype(d) << ", "
        << ctype(i) << ">(prm);\n";
  k << "  runtime::unsupported(\"" << op << "\", dtype, itype);\n}\n\n";
}


}  // namespace

}  // namespace gnnfuse::codegen::emit

namespace gnnfuse::codegen {

using namespace emit;

std::string print_cost_cpu(const Cost& cost) {
  std::string out;
  for (auto& t : cost.terms) {
    std::ostringstream coeff;
    coeff << t.coeff;
    std::string term = t.coeff == 1 ? "1.0" : coeff.str();
    for (auto& f : t.factors) {
      switch (f.kind) {
        case CostFactor::Kind::Extent: term += " * n_" + f.var; break;
        case CostFactor::Kind::Nnz: term += " * nnz_" + f.sparse; break;
        case CostFactor::Kind::MeanRow: term += " * (nnz_" + f.sparse + " / std::max(1.0, n_" + f.var + "))"; break;
      }
    }
    out += (out.empty() ? "" : " + ") + term;
  }
  return out.empty() ? "0.0" : out;
}

std::vector<GeneratedFile> emit_op_cpu(const Family& f) {
  const std::string& fam = f.ops[0]->spec.name;
  std::ostringstream h;
  h << banner(fam) << "// Kernel entry points of " << fam << " and of the ops derived from it (its adjoints).\n";
  h << "#pragma once\n\n#include <cstdint>\n\n#include \"runtime/cpu.h\"\n\nnamespace gnnfuse::generated {\n\n";
  for (auto& c : f.ops) emit_params(*c, h);
  if (!f.ops[0]->spec.symbolic.empty()) emit_symbolic_params(*f.ops[0], h);
  h << "}  // namespace gnnfuse::generated\n";

  std::ostringstream k;
  k << banner(fam);
  k << "#include <algorithm>\n#include <cmath>\n#include <limits>\n#include <vector>\n\n#include \"runtime/variants.h\"\n#include \"runtime/workspace.h\"\n";
  k << "#include \"" << fam << "_kernel.h\"\n\n";
  k << "#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)\n#define GNNFUSE_AVX2_PATH 1\n#endif\n";
  // Register tiles (runtime::vload) return 32-byte vectors from always-inlined helpers: no call
  // exists whose vector ABI -Wpsabi could warn about (on the base path GCC and clang would, per
  // instance; clang reads GCC's diagnostic pragmas).
  k << "#if defined(__GNUC__)\n#pragma GCC diagnostic ignored \"-Wpsabi\"\n#endif\n\n";
  k << "namespace gnnfuse::generated {\n\n";
  for (auto& c : f.ops) emit_kernel(*c, k);
  if (!f.ops[0]->spec.symbolic.empty()) emit_symbolic_kernel(*f.ops[0], k);
  k << "}  // namespace gnnfuse::generated\n";
  return {{fam + "_kernel.h", h.str()}, {fam + "_cpu.cpp", k.str()}};
}

}  // namespace gnnfuse::codegen
