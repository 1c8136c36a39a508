// Runs a TorchScript model that calls gnnfuse ops (the demo's GAT) on a graph read from a file,
// checks its output against the one Python computed, then calls two ops through the C++ API.
//
//   gnnfuse_infer <model.pt> <inputs.pt> [<model.pt2>]
//
// With a third argument, the same model compiled ahead of time by AOTInductor (torch.export +
// torch._inductor.aoti_compile_and_package, which the demo writes) is loaded with
// torch::inductor::AOTIModelPackageLoader and checked against the same expected output; its
// gnnfuse ops run through the dispatcher (AOTInductor's proxy executor for custom ops).
//
// inputs.pt is a scripted module whose buffers are x [N, F], edge_index [2, E] and expected
// [N, C] (examples/demo.py writes it). Exit status 0 when everything matches.
#include <cstdio>
#include <exception>
#include <string>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <gnnfuse/gnnfuse.h>

namespace {

at::Tensor buffer(const torch::jit::Module& m, const std::string& name) { return m.attr(name).toTensor(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s <model.pt> <inputs.pt> [<model.pt2>]\n", argv[0]);
    return 2;
  }
  try {
    torch::jit::Module model = torch::jit::load(argv[1]);
    model.eval();
    const torch::jit::Module inputs = torch::jit::load(argv[2]);
    const at::Tensor x = buffer(inputs, "x");
    const at::Tensor edge_index = buffer(inputs, "edge_index");
    const at::Tensor expected = buffer(inputs, "expected");

    torch::NoGradGuard no_grad;
    const at::Tensor out = model.forward({x, edge_index}).toTensor();
    const double err = (out - expected).abs().max().item<double>();
    const double scale = std::max(1.0, expected.abs().max().item<double>());
    const long agree = out.argmax(1).eq(expected.argmax(1)).sum().item<long>();
    std::printf("C++ LibTorch: scripted GAT on N=%ld, E=%ld: output max |diff| vs Python = %.2e, "
                "predictions agree on %ld/%ld nodes\n",
                static_cast<long>(x.size(0)), static_cast<long>(edge_index.size(1)), err, agree,
                static_cast<long>(x.size(0)));

    // The ops directly, through the generated C++ API: mean aggregation of x over in-edges.
    auto [rowptr, col, perm] = gnnfuse::edge_index_to_csr(edge_index, x.size(0));
    const at::Tensor sum = gnnfuse::spmm(rowptr, col, std::nullopt, x);
    const at::Tensor ref = at::zeros_like(x).index_add_(0, edge_index[1], x.index_select(0, edge_index[0]));
    const double op_err = (sum - ref).abs().max().item<double>();
    std::printf("C++ API: gnnfuse::spmm vs index_add max |diff| = %.2e\n", op_err);

    bool ok = err <= 1e-4 * scale && op_err <= 1e-4 * std::max(1.0, ref.abs().max().item<double>());

    if (argc == 4) {
      torch::inductor::AOTIModelPackageLoader loader(argv[3]);
      const std::vector<at::Tensor> aoti = loader.run({x, edge_index});
      const double aoti_err = (aoti.at(0) - expected).abs().max().item<double>();
      std::printf("C++ AOTInductor: compiled GAT package: output max |diff| vs Python = %.2e\n", aoti_err);
      ok = ok && aoti_err <= 1e-4 * scale;
    }
    if (!ok) std::fprintf(stderr, "gnnfuse_infer: results differ\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnnfuse_infer: %s\n", e.what());
    return 1;
  }
}
