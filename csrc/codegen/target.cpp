// The target table (ir.h: TargetInfo): what differs between the machines the generator lowers
// to. The schedule and the kernel printer of each target sit side by side here; everything
// above the schedule (spec, decomposition, spaces, trees, fusion, shrinking) and the ATen layer
// (adapters, autograd, transforms, registration) are shared.
#include "codegen/ir.h"

namespace gnnfuse::codegen {

const std::vector<TargetInfo>& targets() {
  static const std::vector<TargetInfo> all{
      {Target::Cpu, "cpu", "CPU", "CPU", "CPU schedule", schedule_cpu, emit_op_cpu, print_cost_cpu},
      // CUDA: a schedule mapping loops to the grid, groups of lanes and lanes (schedule_cuda.cpp)
      // with its variants chosen at launch, the kernel printer (cuda_kernel.cpp, emit_cuda.cpp);
      // its cost models are host C++ like the CPU's. `registers` false: the schemas, Meta, autograd,
      // vmap and autocast kernels are the cpu target's; gnnfuse-gen adds the CUDA key's adapters
      // (<op>_cuda_register.cpp, aten_cuda.cpp) beside the kernels.
      {Target::Cuda, "cuda", "CUDA", "CUDA", "CUDA schedule", schedule_cuda, emit_op_cuda, print_cost_cpu, schedule_variants_cuda, false},
  };
  return all;
}

const TargetInfo& target_info(Target target) {
  for (auto& t : targets())
    if (t.target == target) return t;
  throw SpecError("internal error: a target without a row in the target table");
}

Target parse_target(const std::string& name) {
  std::string known;
  for (auto& t : targets()) {
    if (name == t.name) return t.target;
    known += std::string(known.empty() ? "" : ", ") + t.name;
  }
  throw SpecError("unknown target '" + name + "' (targets: " + known + ")");
}

namespace {

const TargetInfo& lowered(Target target) {
  const TargetInfo& t = target_info(target);
  if (!t.schedule || !t.emit_kernels || !t.print_cost) throw SpecError(std::string("target ") + t.name + " is not lowered yet");
  return t;
}

}  // namespace

void schedule(Target target, const Program& p, Node& root) { lowered(target).schedule(p, root); }

std::vector<GeneratedFile> emit_op_kernels(const Family& f) { return lowered(f.target).emit_kernels(f); }

std::string print_cost(Target target, const Cost& cost) { return lowered(target).print_cost(cost); }

std::vector<ScheduleVariant> schedule_variants(Target target, const Program& p, const Node& root) {
  const TargetInfo& t = lowered(target);
  return t.variants ? t.variants(p, root) : std::vector<ScheduleVariant>{};
}

}  // namespace gnnfuse::codegen
