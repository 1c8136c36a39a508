// The ATen adapters of the generated CUDA kernels (<op>_cuda_register.cpp, torch/cuda/adapter.h)
// in the emulated library (libgnnfuse_cuda_emu.so: registered at the CPU key, the kernels run by
// the SIMT emulator): the argument checks they share with the CPU adapters, mixed devices refused
// by name, results against dense references and against the CPU kernels (moved to PrivateUse3 in
// this library), the graph statistics cache (once per graph, again after an in-place change),
// the forcing of the environment and deterministic algorithms.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "../cpp/expect_error.h"
#include "gnnfuse/ops.h"
#include "torch/cuda/adapter.h"

using gnnfuse::testing::expect_error;

namespace {

// A graph of 7 rows over 6 columns: empty rows (2, 6), a long row (4), sorted distinct columns.
struct Graph {
  at::Tensor rowptr, col, weight;
  int64_t cols = 6;
};

Graph graph(at::ScalarType itype = at::kLong) {
  Graph g;
  g.rowptr = at::tensor({0, 2, 3, 3, 4, 10, 12, 12}, at::kLong).to(itype);
  g.col = at::tensor({0, 3, 1, 5, 0, 1, 2, 3, 4, 5, 2, 4}, at::kLong).to(itype);
  g.weight = at::linspace(-1.0, 1.0, 12, at::kDouble);
  return g;
}

// The dense matrix of a csr operand (weights, or 1).
at::Tensor dense(const Graph& g, const at::Tensor& w) {
  at::Tensor a = at::zeros({g.rowptr.size(0) - 1, g.cols}, at::kDouble);
  const at::Tensor rp = g.rowptr.to(at::kLong), cl = g.col.to(at::kLong);
  for (int64_t i = 0; i + 1 < rp.size(0); ++i)
    for (int64_t k = rp[i].item<int64_t>(); k < rp[i + 1].item<int64_t>(); ++k)
      a[i][cl[k].item<int64_t>()] = w.defined() ? w[k].item<double>() : 1.0;
  return a;
}

// An environment variable set for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// Launches whose "<op> <variant> <group>" key starts with `prefix`.
int64_t launches(const std::string& prefix) {
  int64_t n = 0;
  for (auto& [key, count] : gnnfuse::cuda_adapter::launch_counts())
    if (key.rfind(prefix, 0) == 0) n += count;
  return n;
}

// Launches of `prefix` (an op and a space) in lowering `lowering`.
int64_t launches_of_lowering(const std::string& prefix, const std::string& lowering) {
  int64_t n = 0;
  for (auto& [key, count] : gnnfuse::cuda_adapter::launch_counts())
    if (key.rfind(prefix, 0) == 0 && key.size() > lowering.size() && key.compare(key.size() - lowering.size() - 1, std::string::npos, " " + lowering) == 0)
      n += count;
  return n;
}

}  // namespace

TEST(CudaAdapters, SpmmMatchesDenseReference) {
  for (auto itype : {at::kInt, at::kLong}) {
    const Graph g = graph(itype);
    const at::Tensor x = at::randn({g.cols, 5}, at::kDouble);
    const at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, g.weight, x);
    EXPECT_TRUE(at::allclose(y, at::mm(dense(g, g.weight), x), 1e-12, 1e-12));
    const at::Tensor y1 = gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x);
    EXPECT_TRUE(at::allclose(y1, at::mm(dense(g, at::Tensor()), x), 1e-12, 1e-12));
  }
}

TEST(CudaAdapters, MatchesTheCpuKernel) {
  // The CPU kernels of the families with CUDA kernels sit at PrivateUse3 in this library.
  const Graph g = graph();
  const at::Tensor u = at::randn({7, 4}, at::kDouble), v = at::randn({g.cols, 4}, at::kDouble);
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::sddmm", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
      const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&)>();
  const at::Tensor cpu = op.redispatch(c10::DispatchKeySet(c10::DispatchKey::PrivateUse3), g.rowptr, g.col, g.weight, u, v, std::nullopt,
                                       std::nullopt, std::nullopt);
  const at::Tensor emulated = gnnfuse::sddmm(g.rowptr, g.col, g.weight, u, v);
  EXPECT_TRUE(at::allclose(emulated, cpu, 1e-12, 1e-12));
}

TEST(CudaAdapters, DenseProductHook) {
  // gcn: Y = A (X W), the dense product through the hook (at::mm on views of the kernels' buffers),
  // in each of its lowerings, in double and in float (accumulation operands).
  const Graph g = graph();
  for (auto dtype : {at::kDouble, at::kFloat})
    for (const char* lowering : {"0", "1"}) {
      ScopedEnv force("GNNFUSE_CUDA_FORCE_LOWERING", lowering);
      const int64_t before = launches_of_lowering("gcn ", lowering);
      const at::Tensor x = at::randn({g.cols, 5}, dtype), w = at::randn({5, 3}, dtype);
      const at::Tensor y = gnnfuse::gcn(g.rowptr, g.col, g.weight.to(dtype), x, w);
      const at::Tensor want = at::mm(dense(g, g.weight), at::mm(x.to(at::kDouble), w.to(at::kDouble)));
      const double tol = dtype == at::kDouble ? 1e-12 : 1e-5;
      EXPECT_TRUE(at::allclose(y.to(at::kDouble), want, tol, tol)) << "lowering " << lowering << ", " << dtype;
      EXPECT_EQ(launches_of_lowering("gcn ", lowering), before + 1) << "lowering " << lowering;
    }
}

TEST(CudaAdapters, ArgumentChecksAreTheCpuAdapters) {
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 3}, at::kDouble);
  expect_error([&] { gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x.to(at::kInt)); }, {"gnnfuse::spmm", "'x'"});
  expect_error([&] { gnnfuse::spmm(g.rowptr, g.col.to(at::kInt), std::nullopt, x); }, {"gnnfuse::spmm", "'col'"});
  expect_error([&] { gnnfuse::spmm(g.rowptr, g.col, g.weight.slice(0, 1), x); }, {"gnnfuse::spmm", "'edge_weight'"});
  // Value checks (CPU tensors here): decreasing row pointers, a column past x's rows.
  expect_error([&] { gnnfuse::spmm(at::tensor({0, 3, 2, 12}, at::kLong), g.col, std::nullopt, x); }, {"gnnfuse::spmm", "rowptr"});
  expect_error([&] { gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x.slice(0, 0, 5)); }, {"gnnfuse::spmm", "col"});
}

TEST(CudaAdapters, MixedDevicesRefusedByName) {
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 3}, at::TensorOptions().dtype(at::kDouble).device(at::kMeta));
  expect_error([&] { gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x); }, {"gnnfuse::spmm", "'x'", "meta", "cpu"});
}

TEST(CudaAdapters, GraphStatisticsOncePerGraph) {
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 4}, at::kDouble);
  const int64_t before = gnnfuse::cuda_adapter::graph_stats_computed();
  gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x);
  gnnfuse::spmm(g.rowptr, g.col, g.weight, x);
  EXPECT_EQ(gnnfuse::cuda_adapter::graph_stats_computed(), before + 1);
  g.rowptr.add_(0);  // an in-place change: a new version, the statistics again
  gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x);
  EXPECT_EQ(gnnfuse::cuda_adapter::graph_stats_computed(), before + 2);
  const auto s = gnnfuse::cuda_adapter::graph_stats(g.rowptr, g.col);
  EXPECT_EQ(s.rows, 7);
  EXPECT_EQ(s.nnz, 12);
  EXPECT_EQ(s.max_row, 6);
}

TEST(CudaAdapters, ForcedVariantsAndGroups) {
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 8}, at::kDouble);
  const at::Tensor want = at::mm(dense(g, g.weight), x);
  for (const std::string variant : {"row_split", "warp_per_row", "pos_split", "pos_split_atomic", "lanes"}) {
    ScopedEnv force("GNNFUSE_CUDA_FORCE_VARIANT", variant.c_str());
    const int64_t before = launches("spmm " + variant + " ");
    EXPECT_TRUE(at::allclose(gnnfuse::spmm(g.rowptr, g.col, g.weight, x), want, 1e-12, 1e-12)) << variant;
    EXPECT_EQ(launches("spmm " + variant + " "), before + 1) << variant;
  }
  for (const char* group : {"1", "2", "32"}) {
    ScopedEnv force("GNNFUSE_CUDA_FORCE_VARIANT", "row_split");
    ScopedEnv lanes("GNNFUSE_CUDA_FORCE_GROUP", group);
    const std::string key = std::string("spmm row_split ") + group;
    const int64_t before = launches(key);
    EXPECT_TRUE(at::allclose(gnnfuse::spmm(g.rowptr, g.col, g.weight, x), want, 1e-12, 1e-12)) << group;
    EXPECT_EQ(launches(key), before + 1) << key;
  }
  // A variant an op does not offer is ignored: edge_softmax's row statistics (no pos split) still run.
  {
    ScopedEnv force("GNNFUSE_CUDA_FORCE_VARIANT", "pos_split_atomic");
    const at::Tensor p = gnnfuse::edge_softmax(g.rowptr, g.col, g.weight);
    EXPECT_TRUE(at::allclose(p.sum(), at::tensor(5.0, at::kDouble), 1e-12, 1e-12));  // five non-empty rows
  }
  {
    ScopedEnv force("GNNFUSE_CUDA_FORCE_VARIANT", "no_such_variant");
    expect_error([&] { gnnfuse::spmm(g.rowptr, g.col, g.weight, x); }, {"GNNFUSE_CUDA_FORCE_VARIANT", "no_such_variant"});
  }
  {
    ScopedEnv group("GNNFUSE_CUDA_FORCE_GROUP", "3");
    expect_error([&] { gnnfuse::spmm(g.rowptr, g.col, g.weight, x); }, {"GNNFUSE_CUDA_FORCE_GROUP"});
  }
}

TEST(CudaAdapters, DeterministicAlgorithmsAvoidAtomics) {
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 8}, at::kDouble);
  ScopedEnv force("GNNFUSE_CUDA_FORCE_VARIANT", "pos_split_atomic");
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, false);
  const int64_t atomic = launches("spmm pos_split_atomic "), plain = launches("spmm pos_split ");
  const at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, g.weight, x);
  at::globalContext().setDeterministicAlgorithms(was, false);
  EXPECT_EQ(launches("spmm pos_split_atomic "), atomic);
  EXPECT_EQ(launches("spmm pos_split "), plain + 1);
  EXPECT_TRUE(at::allclose(y, at::mm(dense(g, g.weight), x), 1e-12, 1e-12));
}
