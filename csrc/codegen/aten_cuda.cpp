// The ATen adapters of the CUDA kernels, per family <fam>_cuda_register.cpp (gnnfuse-gen --target
// cuda writes it beside <fam>_cuda.cu/.h): for every op the CPU adapter's text up to the kernel call
// (aten_adapter.cpp: <op>_check and the value checks, which torch/checks.h runs for CPU tensors
// only; the kernel parameters; the output on the inputs' device), then a device guard, the graph
// statistics (cached per graph), <op>_cuda_request and the launch (torch/cuda/adapter.h: the
// decision, the workspace from the caching allocator, the current stream, the dense-product hook
// on ATen). Registered at GNNFUSE_CUDA_DISPATCH_KEY: CUDA, or CPU in the emulated library
// (-DGNNFUSE_CUDA_EMULATED: the same adapters over CPU tensors, the kernels in the SIMT emulator).
// Meta, autograd, vmap and autocast kernels are the CPU registration's: they dispatch below.
#include <sstream>

#include "codegen/emit.h"

namespace gnnfuse::codegen::emit {

namespace {

// The csr operand whose statistics the launch decision reads, in the direction the op walks it
// (the request's by_columns): {pointers, indices} as C++ expressions; empty when the op has none.
std::pair<std::string, std::string> stats_operand(const Compiled& c) {
  const OpSpec& s = c.spec;
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput && c.program.walks_csc(t.name)) {
      const std::string deref = t.csc_optional ? "*" : "";
      return {deref + t.colptr, deref + t.row};
    }
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) return {t.rowptr, t.col};
  return {};
}

BackendCall cuda_call(const Compiled& c) {
  const OpSpec& s = c.spec;
  std::string dev_ref = ref_arg(s);
  for (auto& t : s.tensors)
    if (t.role == Role::SparseInput) {
      dev_ref = t.rowptr;
      break;
    }
  BackendCall call;
  call.prologue = "  const cuda_adapter::DeviceScope device_(" + dev_ref + ");\n";
  call.launch = [](const Compiled& k, const std::string& dtype_arg, const std::string& index_arg) {
    const std::string& op = k.spec.name;
    const auto [ptr, idx] = stats_operand(k);
    const std::string stats = ptr.empty() ? "runtime::cuda::GraphStats()" : "cuda_adapter::graph_stats(" + ptr + ", " + idx + ")";
    std::ostringstream l;
    l << cusparse_dispatch(k);
    l << "  {\n";
    l << "    const runtime::DType dtype_ = dtype_of(" << dtype_arg << ");\n";
    l << "    const runtime::IType itype_ = itype_of(" << index_arg << ");\n";
    l << "    runtime::cuda::Request req_ = " << op << "_cuda_request(prm, dtype_, itype_, " << stats << ", cuda_adapter::forced_lowering("
      << 1 + k.alternatives.size() << "), cuda_adapter::deterministic());\n";
    l << "    cuda_adapter::launch(\"" << op << "\", out, std::move(req_), [&](const runtime::cuda::LaunchConfig& cfg_, const runtime::cuda::Env& env_) {\n";
    l << "      " << op << "_cuda(prm, dtype_, itype_, cfg_, env_);\n    });\n  }\n";
    return l.str();
  };
  return call;
}

}  // namespace

}  // namespace gnnfuse::codegen::emit

namespace gnnfuse::codegen {

using namespace emit;

std::vector<GeneratedFile> emit_op_cuda_registration(const Family& f) {
  const std::string& fam = f.ops[0]->spec.name;
  std::ostringstream r;
  r << banner(fam);
  r << "// ATen adapters of the CUDA kernels of " << fam << " and of the ops derived from it (checks, contiguous\n";
  r << "// inputs, output on the inputs' device, device guard, cached graph statistics, the launch on the\n";
  r << "// current stream), registered at the CUDA key, or at the CPU key in the emulated library\n";
  r << "// (GNNFUSE_CUDA_EMULATED). Host code: compiled by the host compiler, it calls " << fam << "_cuda.h only.\n";
  r << "#include <cstdint>\n#include <new>\n#include <optional>\n#include <stdexcept>\n#include <string>\n#include <tuple>\n#include <utility>\n\n";
  r << "#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty.h>\n#include <c10/core/SymInt.h>\n#include <torch/library.h>\n\n";
  r << "#include \"torch/autograd_support.h\"\n#include \"torch/checks.h\"\n#include \"torch/cuda/adapter.h\"\n#include \"torch/pattern_cache.h\"\n";
  r << "#include \"" << fam << "_cuda.h\"\n";
  r << "\nnamespace gnnfuse::generated {\nnamespace {\n\n";
  r << "using detail::accumulation_dtype;\nusing detail::dtype_of;\nusing detail::itype_of;\nusing detail::empty_output;\n\n";
  for (auto& c : f.ops) {
    emit_adapter_check(*c, r);
    emit_backend_kernel(*c, r, "_cuda_kernel", cuda_call(*c));
  }
  const bool symbolic = !f.ops[0]->spec.symbolic.empty();
  if (symbolic) emit_symbolic_cuda_adapters(*f.ops[0], r);
  r << "}  // namespace\n}  // namespace gnnfuse::generated\n\n";
  r << "TORCH_LIBRARY_IMPL(gnnfuse, GNNFUSE_CUDA_DISPATCH_KEY, m) {\n";
  for (auto& c : f.ops) r << "  m.impl(\"" << c->spec.name << "\", &gnnfuse::generated::" << c->spec.name << "_cuda_kernel);\n";
  if (symbolic)
    for (const std::string& op : {fam + "_symbolic", fam + "_assemble"})
      r << "  m.impl(\"" << op << "\", &gnnfuse::generated::" << op << "_cuda_kernel);\n";
  r << "}\n";
  return {{fam + "_cuda_register.cpp", r.str()}};
}

}  // namespace gnnfuse::codegen
