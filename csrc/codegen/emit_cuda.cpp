// The CUDA target's files of one family (gnnfuse-gen --target cuda): <fam>_cuda.cu, per op every
// schedule variant of every lowering (CudaPrinter: kernels and their host side), and per op
//   <op>_cuda_request  what the op offers the launch decision for this call: its variants'
//                      kernels sized from the extents (and, for `variants auto`, the lowering its
//                      cost model picks from the extents and the graph's stored entries);
//   <op>_cuda          the launch of the variant runtime::cuda::decide chose, on the stream;
// and <fam>_cuda.h declaring them. The params structs are the CPU target's (<fam>_kernel.h):
// raw pointers and extents, whatever the device. A `symbolic S` op adds its pattern kernels
// (cuda_symbolic.cpp); its assembling op runs on CUDA as the pattern, then the numeric op. The
// ops of tensor_core_form add their Tensor-Core SpMM launcher <op>_cuda_tc (cuda_tensor_cores.cpp).
#include <functional>
#include <sstream>

#include "codegen/cuda_kernel.h"

namespace gnnfuse::codegen::emit {

std::string cuda_device_type(DType d) {
  switch (d) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::BFloat16: return "__nv_bfloat16";
    case DType::Float16: return "__half";
  }
  return "";
}

std::string dtype_token(DType d) {
  const std::string e = dtype_enum(d);
  return e.substr(e.rfind(':') + 1);  // runtime::DType::Float32 -> Float32
}

std::string dtype_token(IndexType i) {
  const std::string e = dtype_enum(i);
  return e.substr(e.rfind(':') + 1);
}

namespace {

std::string expr_line(const OpSpec& s) {
  std::string e = s.expr.lhs + "(";
  for (size_t k = 0; k < s.expr.lhs_idx.size(); ++k) e += (k ? "," : "") + s.expr.lhs_idx[k];
  return e + ") = " + to_string(s.expr.rhs);
}

// A variant whose result depends on the order of floating-point atomics: an atomic reduction
// anywhere in its tree (the pos_*_atomic forms, and sums over the grid's rows into temporaries of
// the whole call, e.g. gcn_grad_weight's lowering 1 scattering GY A into T0(j,o)).
bool atomic_variant(const ScheduleVariant& v) {
  std::function<bool(const Node&)> rec = [&](const Node& n) {
    if (n.kind == Node::Kind::Loop && n.sched.reduction == ReductionStrategy::Atomic) return true;
    for (auto& k : n.kids)
      if (rec(*k)) return true;
    return false;
  };
  return rec(*v.tree);
}

// A lowering with a variant free of floating-point atomics (one deterministic algorithms may run).
bool reproducible(const Compiled& c) {
  for (auto& v : c.schedule_variants)
    if (!atomic_variant(v)) return true;
  return false;
}

std::string fn_name(const std::string& op, size_t lowering, const std::string& variant) {
  return op + (lowering ? "_v" + std::to_string(lowering) : "") + "_" + variant;
}

// The dtype and index dtype dispatch of a call `f<scalar_t, index_t>(args)`, each pair under
// GNNFUSE_CUDA_INSTANTIATES (cuda/type_subset.h: the compile gates may instantiate a subset).
void dispatch(const OpSpec& s, const std::string& call, const std::string& args, std::ostream& k) {
  for (auto& d : s.dtypes)
    for (auto& i : s.index_dtypes)
      k << "#if GNNFUSE_CUDA_INSTANTIATES(" << dtype_token(d) << ", " << dtype_token(i) << ")\n"
        << "  if (dtype == " << dtype_enum(d) << " && itype == " << dtype_enum(i) << ") return " << call << "<" << cuda_device_type(d) << ", "
        << ctype(i) << ">(" << args << ");\n"
        << "#endif\n";
  k << "  throw std::invalid_argument(\"" << s.name << " on cuda: unsupported dtype\");\n";
}

void emit_op(const Compiled& c, std::ostream& h, std::ostream& k) {
  const OpSpec& s = c.spec;
  const std::string& op = s.name;
  const std::string prm = "const " + op + "_params& prm";
  h << "// " << expr_line(s) << "\n";
  h << "// `lowering`: one of a `variants auto` op's lowerings (tests, benchmarks); -1: its cost model's choice.\n"
       "// `deterministic`: only lowerings with a variant free of floating-point atomics (a forced other one is\n"
       "// not taken); the request's variants are marked `atomic` where their result depends on atomics' order.\n";
  h << "runtime::cuda::Request " << op << "_cuda_request(" << prm
    << ", runtime::DType dtype, runtime::IType itype, const runtime::cuda::GraphStats& graph, int lowering = -1, bool deterministic = false);\n";
  h << "void " << op << "_cuda(" << prm
    << ", runtime::DType dtype, runtime::IType itype, const runtime::cuda::LaunchConfig& cfg, const runtime::cuda::Env& env);\n\n";

  std::vector<const Compiled*> lowerings{&c};
  for (auto& a : c.alternatives) lowerings.push_back(a.get());
  k << "// ---------------------------------------------------------------- " << op << "\n// " << expr_line(s) << "\n";
  k << "namespace {\n\n";
  for (size_t l = 0; l < lowerings.size(); ++l)
    for (auto& v : lowerings[l]->schedule_variants) {
      CudaPrinter pr(*lowerings[l], v, fn_name(op, l, v.name));
      k << "// lowering " << l << ", schedule variant " << v.name << "\n";
      std::istringstream ir(imp::print(pr.ir()));
      for (std::string line; std::getline(ir, line);) k << "//   " << line << "\n";
      k << pr.kernels() << pr.host();
    }
  // The request: the lowering, its variants' shapes and the call's workspace.
  k << "template <typename scalar_t, typename index_t>\nruntime::cuda::Request " << op << "_request_(" << prm
    << ", const runtime::cuda::GraphStats& graph, int lowering, bool deterministic) {\n";
  k << "  runtime::cuda::Request req;\n  req.graph = graph;\n  req.lowerings = " << lowerings.size() << ";\n";
  k << "  req.deterministic = deterministic;\n";
  // reproducible[l]: lowering l has a variant free of floating-point atomics.
  std::string repro;
  bool all_repro = true;
  for (size_t l = 0; l < lowerings.size(); ++l) {
    repro += std::string(l ? ", " : "") + (reproducible(*lowerings[l]) ? "true" : "false");
    all_repro = all_repro && reproducible(*lowerings[l]);
  }
  if (!all_repro) k << "  const bool reproducible[" << lowerings.size() << "] = {" << repro << "};\n";
  k << "  req.scalar_bytes = static_cast<int>(sizeof(scalar_t));\n  req.acc_bytes = static_cast<int>(sizeof(cu::acc_t<scalar_t>));\n";
  k << "  req.index_bytes = static_cast<int>(sizeof(index_t));\n";
  bool csc = false;
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput && c.program.walks_csc(t.name) && !csc) csc = true;
  k << "  req.by_columns = " << (csc ? "true" : "false") << ";\n";
  if (lowerings.size() > 1) {
    for (auto& v : s.order) k << "  const double n_" << v << " = static_cast<double>(prm.n_" << v << ");\n";
    for (auto& t : s.tensors)
      if (t.role == Role::SparseInput) k << "  const double nnz_" << t.name << " = static_cast<double>(graph.nnz);\n";
    k << "  const double costs[" << lowerings.size() << "] = {";
    for (size_t l = 0; l < lowerings.size(); ++l) k << (l ? ", " : "") << print_cost(Target::Cuda, lowerings[l]->cost_model);
    k << "};\n";
    for (auto& v : s.order) k << "  (void)n_" << v << ";\n";
    for (auto& t : s.tensors)
      if (t.role == Role::SparseInput) k << "  (void)nnz_" << t.name << ";\n";
    if (all_repro)
      k << "  for (int l = 1; l < " << lowerings.size() << "; ++l)\n    if (costs[l] < costs[req.lowering]) req.lowering = l;\n";
    else
      k << "  for (int l = 1; l < " << lowerings.size() << "; ++l)\n"
        << "    if ((!deterministic || reproducible[l]) && (costs[l] < costs[req.lowering] || (deterministic && !reproducible[req.lowering])))\n"
        << "      req.lowering = l;\n";
  }
  if (all_repro)
    k << "  if (lowering >= 0) req.lowering = lowering;\n";
  else
    k << "  if (lowering >= 0 && (!deterministic || reproducible[lowering])) req.lowering = lowering;\n";
  for (size_t l = 0; l < lowerings.size(); ++l) {
    k << "  if (req.lowering == " << l << ") {\n";
    for (auto& v : lowerings[l]->schedule_variants) {
      k << "    req.variants.push_back(" << fn_name(op, l, v.name) << "_shape<scalar_t, index_t>(prm));\n";
      if (atomic_variant(v)) k << "    req.variants.back().atomic = true;\n";
    }
    k << "    req.call_bytes = " << fn_name(op, l, lowerings[l]->schedule_variants.at(0).name) << "_call_bytes<scalar_t>(prm);\n  }\n";
  }
  k << "  return req;\n}\n\n";
  // The launch of the chosen lowering and variant.
  k << "template <typename scalar_t, typename index_t>\nvoid " << op << "_launch_(" << prm
    << ", const runtime::cuda::LaunchConfig& cfg, const runtime::cuda::Env& env) {\n";
  for (size_t l = 0; l < lowerings.size(); ++l)
    for (size_t v = 0; v < lowerings[l]->schedule_variants.size(); ++v)
      k << "  if (cfg.lowering == " << l << " && cfg.offered == " << v << ") return " << fn_name(op, l, lowerings[l]->schedule_variants[v].name)
        << "_launch<scalar_t, index_t>(prm, cfg, env);\n";
  k << "  throw std::invalid_argument(\"" << op << " on cuda: no such lowering or variant\");\n}\n\n";
  k << "}  // namespace\n\n";
  k << "runtime::cuda::Request " << op << "_cuda_request(" << prm
    << ", runtime::DType dtype, runtime::IType itype, const runtime::cuda::GraphStats& graph, int lowering, bool deterministic) {\n";
  dispatch(s, op + "_request_", "prm, graph, lowering, deterministic", k);
  k << "}\n\n";
  k << "void " << op << "_cuda(" << prm
    << ", runtime::DType dtype, runtime::IType itype, const runtime::cuda::LaunchConfig& cfg, const runtime::cuda::Env& env) {\n";
  dispatch(s, op + "_launch_", "prm, cfg, env", k);
  k << "}\n\n";
}

}  // namespace

}  // namespace gnnfuse::codegen::emit

namespace gnnfuse::codegen {

using namespace emit;

std::vector<GeneratedFile> emit_op_cuda(const Family& f) {
  const std::string& fam = f.ops[0]->spec.name;
  std::ostringstream h, k;
  h << banner(fam) << "// CUDA kernels of " << fam << " and of the ops derived from it: per op the launch request and the launch\n"
    << "// (runtime/cuda_launch.h decides between them). The params structs are the CPU target's.\n";
  h << "#pragma once\n\n";
  h << "#if defined(__CUDACC__)\n#pragma nv_diag_suppress 1675  // runtime/cpu.h's GCC pragmas (host code)\n#endif\n";
  h << "#include \"" << fam << "_kernel.h\"\n";
  h << "#if defined(__CUDACC__)\n#pragma nv_diag_default 1675\n#endif\n";
  h << "#include \"cuda/tc_spmm.h\"\n#include \"runtime/cuda_launch.h\"\n\nnamespace gnnfuse::generated {\n\n";
  k << banner(fam) << "// CUDA kernels (cuda/simt.cuh: nvcc, or g++ -DGNNFUSE_SIMT_EMU) and their host launch functions.\n";
  k << "#include <cstdint>\n#include <stdexcept>\n\n#include \"" << fam << "_cuda.h\"\n";
  // runtime/cpu.h (the params' header) spells GNNFUSE_UNROLL for GCC; the device code's is
  // cuda/simt.cuh's (or device_runtime.cuh's).
  k << "#undef GNNFUSE_UNROLL\n#include \"cuda/device_runtime.cuh\"\n#include \"cuda/tc_fragments.cuh\"\n\n";
  k << "namespace gnnfuse::generated {\n\nnamespace cu = gnnfuse::cuda;\n\n";
  for (auto& c : f.ops) emit_op(*c, h, k);
  h << tensor_core_declarations(f);
  k << tensor_core_kernels(f);
  if (!f.ops[0]->spec.symbolic.empty()) {
    h << symbolic_cuda_declarations(*f.ops[0]);
    k << symbolic_cuda_kernels(*f.ops[0]);
  }
  h << "}  // namespace gnnfuse::generated\n";
  k << "}  // namespace gnnfuse::generated\n";
  return {{fam + "_cuda.h", h.str()}, {fam + "_cuda.cu", k.str()}};
}

}  // namespace gnnfuse::codegen
