// The ATen adapters of the generated CUDA kernels (<op>_cuda_register.cpp, torch/cuda/adapter.h)
// in the emulated library (libgnnfuse_cuda_emu.so: registered at the CPU key, the kernels run by
// the SIMT emulator): the argument checks they share with the CPU adapters, mixed devices refused
// by name, results against dense references and against the CPU kernels (moved to PrivateUse3 in
// this library), the graph statistics cache (once per graph, again after an in-place change),
// the forcing of the environment and deterministic algorithms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "../cpp/expect_error.h"
#include "gnnfuse/ops.h"
#include "torch/checks.h"
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

// ---------------------------------------------------------------- the cuSPARSE backend
// torch/cuda/cusparse_backend.h through this library's host cuSPARSE (cusparse_host.cpp): the ops
// the generator found to be a cuSPARSE SpMM or SDDMM hand their calls to it while the backend is
// selected ("<op> cusparse 0 0" launches), and keep their generated kernels where it would not do.
namespace {

namespace ca = gnnfuse::cuda_adapter;

constexpr int kCsrAlg3 = 12;  // CUSPARSE_SPMM_CSR_ALG3 (cusparse.h), in the launch counts' key

// The backend selected for a scope.
class ScopedBackend {
 public:
  explicit ScopedBackend(ca::Backend b) : was_(ca::backend()) { ca::set_backend(b); }
  ~ScopedBackend() { ca::set_backend(was_); }

 private:
  ca::Backend was_;
};

at::Tensor sddmm_reference(const Graph& g, const at::Tensor& w, const at::Tensor& u, const at::Tensor& v) {
  const at::Tensor rp = g.rowptr.to(at::kLong), cl = g.col.to(at::kLong);
  const at::Tensor rows = at::repeat_interleave(at::arange(rp.size(0) - 1, at::kLong), rp.diff());
  at::Tensor out = (u.index_select(0, rows) * v.index_select(0, cl)).sum(1);
  return w.defined() ? out * w : out;
}

}  // namespace

TEST(CudaAdapters, CusparseBackendSpmmAndSddmm) {
  const ScopedBackend cusparse(ca::Backend::Cusparse);
  for (auto itype : {at::kInt, at::kLong}) {
    const Graph g = graph(itype);
    const at::Tensor x = at::randn({g.cols, 5}, at::kDouble);
    const int64_t spmm_before = launches("spmm cusparse "), sddmm_before = launches("sddmm cusparse ");
    EXPECT_TRUE(at::allclose(gnnfuse::spmm(g.rowptr, g.col, g.weight, x), at::mm(dense(g, g.weight), x), 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(gnnfuse::spmm(g.rowptr, g.col, std::nullopt, x), at::mm(dense(g, at::Tensor()), x), 1e-12, 1e-12));
    EXPECT_EQ(launches("spmm cusparse "), spmm_before + 2);
    const at::Tensor u = at::randn({7, 4}, at::kDouble), v = at::randn({g.cols, 4}, at::kDouble);
    EXPECT_TRUE(at::allclose(gnnfuse::sddmm(g.rowptr, g.col, g.weight, u, v), sddmm_reference(g, g.weight, u, v), 1e-12, 1e-12));
    EXPECT_TRUE(at::allclose(gnnfuse::sddmm(g.rowptr, g.col, std::nullopt, u, v), sddmm_reference(g, at::Tensor(), u, v), 1e-12, 1e-12));
    EXPECT_EQ(launches("sddmm cusparse "), sddmm_before + 2);
  }
}

TEST(CudaAdapters, CusparseBackendRunsTheDerivedAdjoints) {
  // The gradient of x is op(A) = A^T (the CSR arrays, no CSC view); that of the weights an SDDMM.
  const ScopedBackend cusparse(ca::Backend::Cusparse);
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 3}, at::kDouble).requires_grad_();
  const at::Tensor w = g.weight.clone().requires_grad_();
  const at::Tensor gy = at::randn({7, 3}, at::kDouble);
  const int64_t gx = launches("spmm_grad_x cusparse "), gw = launches("spmm_grad_edge_weight cusparse ");
  gnnfuse::spmm(g.rowptr, g.col, w, x).backward(gy);
  EXPECT_EQ(launches("spmm_grad_x cusparse 0 "), gx + 1);
  EXPECT_EQ(launches("spmm_grad_edge_weight cusparse "), gw + 1);
  EXPECT_TRUE(at::allclose(x.grad(), at::mm(dense(g, g.weight).t(), gy), 1e-12, 1e-12));
  EXPECT_TRUE(at::allclose(w.grad(), sddmm_reference(g, at::Tensor(), gy, x.detach()), 1e-12, 1e-12));
  // Under deterministic algorithms the forward takes CUSPARSE_SPMM_CSR_ALG3 (the one that repeats
  // bitwise) and the transposed product keeps its generated kernel (ALG3 has no A^T).
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, false);
  x.mutable_grad() = at::Tensor();
  const int64_t alg3 = launches("spmm cusparse " + std::to_string(kCsrAlg3) + " ");
  gnnfuse::spmm(g.rowptr, g.col, w, x).backward(gy);
  at::globalContext().setDeterministicAlgorithms(was, false);
  EXPECT_EQ(launches("spmm cusparse " + std::to_string(kCsrAlg3) + " "), alg3 + 1);
  EXPECT_EQ(launches("spmm_grad_x cusparse "), gx + 1);
  EXPECT_TRUE(at::allclose(x.grad(), at::mm(dense(g, g.weight).t(), gy), 1e-12, 1e-12));
}

TEST(CudaAdapters, CusparseBackendKeepsTheGeneratedKernelsWhereItWouldNotDo) {
  const ScopedBackend cusparse(ca::Backend::Cusparse);
  const Graph g = graph();
  const at::Tensor u = at::randn({7, 4}, at::kDouble), v = at::randn({g.cols, 4}, at::kDouble);
  const int64_t sddmm_before = launches("sddmm cusparse ");
  // bfloat16 SDDMM: CUSPARSE_STATUS_NOT_SUPPORTED (cuSPARSE has it for BSR only).
  const at::Tensor bf = gnnfuse::sddmm(g.rowptr, g.col, std::nullopt, u.to(at::kBFloat16), v.to(at::kBFloat16));
  EXPECT_EQ(launches("sddmm cusparse "), sddmm_before);
  EXPECT_TRUE(at::allclose(bf.to(at::kDouble), sddmm_reference(g, at::Tensor(), u, v), 5e-2, 5e-2));
  // float16 SDDMM with a scale: the dot product would round before the scale.
  const at::Tensor half = gnnfuse::sddmm(g.rowptr, g.col, g.weight.to(at::kHalf), u.to(at::kHalf), v.to(at::kHalf));
  EXPECT_EQ(launches("sddmm cusparse "), sddmm_before);
  EXPECT_TRUE(at::allclose(half.to(at::kDouble), sddmm_reference(g, g.weight, u, v), 1e-2, 1e-2));
  // float16 SDDMM without one, and float16 SpMM (a float compute type): cuSPARSE's.
  const at::Tensor plain = gnnfuse::sddmm(g.rowptr, g.col, std::nullopt, u.to(at::kHalf), v.to(at::kHalf));
  EXPECT_EQ(launches("sddmm cusparse "), sddmm_before + 1);
  EXPECT_TRUE(at::allclose(plain.to(at::kDouble), sddmm_reference(g, at::Tensor(), u, v), 1e-2, 1e-2));
  const int64_t spmm_before = launches("spmm cusparse ");
  const at::Tensor xh = at::randn({g.cols, 8}, at::kHalf).requires_grad_();
  const at::Tensor yh = gnnfuse::spmm(g.rowptr, g.col, g.weight.to(at::kHalf), xh);
  EXPECT_EQ(launches("spmm cusparse "), spmm_before + 1);
  EXPECT_TRUE(at::allclose(yh.to(at::kDouble), at::mm(dense(g, g.weight.to(at::kHalf).to(at::kDouble)), xh.detach().to(at::kDouble)), 1e-2, 1e-2));
  // ... but not its transposed form (cuSPARSE's mixed precision has none).
  const int64_t gx = launches("spmm_grad_x cusparse ");
  yh.backward(at::ones_like(yh));
  EXPECT_EQ(launches("spmm_grad_x cusparse "), gx);
  // An offset operand (aligned to its element, as cuSPARSE asks): cuSPARSE's, and right.
  const at::Tensor buffer = at::randn({g.cols * 4 + 1}, at::kFloat);
  const at::Tensor x = buffer.slice(0, 1).view({g.cols, 4});
  const at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, g.weight.to(at::kFloat), x);
  EXPECT_EQ(launches("spmm cusparse "), spmm_before + 2);
  EXPECT_TRUE(at::allclose(y.to(at::kDouble), at::mm(dense(g, g.weight), x.to(at::kDouble)), 1e-5, 1e-5));
}

TEST(CudaAdapters, CusparseBackendClearsItsOutputs) {
  // The host cuSPARSE reads C whatever beta is: an output handed over uninitialised (here: NaN)
  // would show.
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 5}, at::kDouble);
  at::Tensor out = at::full({7, 5}, std::nan(""), at::kDouble);
  ASSERT_TRUE(ca::cusparse_spmm("spmm", g.rowptr, g.col, {g.weight}, false, 7, g.cols, x, out));
  EXPECT_TRUE(at::allclose(out, at::mm(dense(g, g.weight), x), 1e-12, 1e-12));
  const at::Tensor u = at::randn({7, 3}, at::kDouble), v = at::randn({g.cols, 3}, at::kDouble);
  at::Tensor e = at::full({g.col.size(0)}, std::nan(""), at::kDouble);
  ASSERT_TRUE(ca::cusparse_sddmm("sddmm", g.rowptr, g.col, {}, 7, g.cols, u, v, e));
  EXPECT_TRUE(at::allclose(e, sddmm_reference(g, at::Tensor(), u, v), 1e-12, 1e-12));
}

TEST(CudaAdapters, CusparseBackendThreadChoice) {
  // A thread's own choice goes before the process-wide one, for that thread only.
  const ScopedBackend generated(ca::Backend::Generated);
  const Graph g = graph();
  const at::Tensor x = at::randn({g.cols, 2}, at::kDouble);
  const int64_t before = launches("spmm cusparse ");
  EXPECT_EQ(ca::set_thread_backend(ca::Backend::Cusparse), std::nullopt);
  gnnfuse::spmm(g.rowptr, g.col, g.weight, x);
  std::thread other([&] { gnnfuse::spmm(g.rowptr, g.col, g.weight, x); });
  other.join();
  EXPECT_EQ(ca::set_thread_backend(std::nullopt), ca::Backend::Cusparse);
  EXPECT_EQ(launches("spmm cusparse "), before + 1);
}

TEST(CudaAdapters, CusparseBackendSelection) {
  EXPECT_EQ(ca::to_string(ca::parse_backend("cusparse")), "cusparse");
  EXPECT_EQ(ca::to_string(ca::parse_backend("generated")), "generated");
  EXPECT_THROW(ca::parse_backend("cuSPARSE"), std::invalid_argument);
  // The generated kernels when it is not selected.
  const ScopedBackend generated(ca::Backend::Generated);
  const Graph g = graph();
  const int64_t before = launches("spmm cusparse ");
  gnnfuse::spmm(g.rowptr, g.col, g.weight, at::randn({g.cols, 2}, at::kDouble));
  EXPECT_EQ(launches("spmm cusparse "), before);
}

// ---------------------------------------------------------------- the Tensor-Core SpMM
namespace {

// The Tensor-Core mode for a scope.
class ScopedTensorCores {
 public:
  explicit ScopedTensorCores(ca::TensorCores m) : was_(ca::set_tensor_cores(m)) {}
  ~ScopedTensorCores() { ca::set_tensor_cores(was_); }

 private:
  ca::TensorCores was_;
};

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-30);
}

}  // namespace

// Forced: forward (windows of the rows) and the gradient of x (windows of the columns, the
// transposed view) in float16, bfloat16 and float32 as tf32, each within a few ulps of the dtype
// of float64 (fp32 accumulation; the emulator's mma follows the PTX ISA's layouts, SimtMma).
namespace {

// Under `mode`: spmm and the gradient of x in each dtype, both on Tensor Cores (launches counted
// as "<op> tensor_cores <kind>"), within 4 ulps of the dtype of float64.
void check_spmm_both_directions(ca::TensorCores mode, std::initializer_list<at::ScalarType> dtypes, const std::string& kind) {
  const ScopedTensorCores scoped(mode);
  for (auto itype : {at::kInt, at::kLong}) {
    const Graph g = graph(itype);
    for (auto dtype : dtypes) {
      const double eps = dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      for (int64_t f : {1, 20, 129}) {
        const at::Tensor w = g.weight.to(dtype);
        const at::Tensor x = at::randn({g.cols, f}, at::kDouble).to(dtype).requires_grad_();
        const at::Tensor gy = at::randn({7, f}, at::kDouble).to(dtype);
        const int64_t fwd = launches("spmm tensor_cores " + kind), bwd = launches("spmm_grad_x tensor_cores " + kind);
        const at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, w, x);
        y.backward(gy);
        EXPECT_EQ(launches("spmm tensor_cores " + kind), fwd + 1);
        EXPECT_EQ(launches("spmm_grad_x tensor_cores " + kind), bwd + 1);
        const at::Tensor a = dense(g, w.to(at::kDouble));
        EXPECT_EQ(y.scalar_type(), dtype);
        EXPECT_LE(rel_err(y, at::mm(a, x.detach().to(at::kDouble))), 4 * eps) << dtype << " f=" << f;
        EXPECT_LE(rel_err(x.grad(), at::mm(a.t(), gy.to(at::kDouble))), 4 * eps) << dtype << " f=" << f;
      }
    }
  }
}

}  // namespace

TEST(CudaAdapters, TensorCoreSpmmForwardAndTransposed) {
  check_spmm_both_directions(ca::TensorCores::On, {at::kHalf, at::kBFloat16, at::kFloat}, "");
}

// Forced, per head: spmm_heads (each head an SpMM of its own weights) and the gradient of its
// features through the transposed view, at 1 and 3 heads and F of 3 and 20, against float64.
TEST(CudaAdapters, TensorCoreSpmmPerHead) {
  const ScopedTensorCores on(ca::TensorCores::On);
  const Graph g = graph(at::kInt);
  for (auto dtype : {at::kHalf, at::kBFloat16, at::kFloat}) {
    const double eps = dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (int64_t heads : {1, 3})
      for (int64_t f : {3, 20}) {
        const at::Tensor w = (at::rand({12, heads}, at::kDouble) + 0.5).to(dtype);
        const at::Tensor x = at::randn({g.cols, heads, f}, at::kDouble).to(dtype).requires_grad_();
        const at::Tensor gy = at::randn({7, heads, f}, at::kDouble).to(dtype);
        const int64_t fwd = launches("spmm_heads tensor_cores "), bwd = launches("spmm_heads_grad_x tensor_cores ");
        const at::Tensor y = gnnfuse::spmm_heads(g.rowptr, g.col, w, x);
        y.backward(gy);
        EXPECT_EQ(launches("spmm_heads tensor_cores "), fwd + 1);
        EXPECT_EQ(launches("spmm_heads_grad_x tensor_cores "), bwd + 1);
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{7, heads, f}));
        for (int64_t h = 0; h < heads; ++h) {
          const at::Tensor a = dense(g, w.select(1, h).to(at::kDouble));
          EXPECT_LE(rel_err(y.select(1, h), at::mm(a, x.detach().select(1, h).to(at::kDouble))), 4 * eps) << dtype << " h=" << h;
          EXPECT_LE(rel_err(x.grad().select(1, h), at::mm(a.t(), gy.select(1, h).to(at::kDouble))), 4 * eps) << dtype << " h=" << h;
        }
      }
  }
}

// The rows mode (seed 004's kernel, float16 and bfloat16): forward and the gradient of x (op(A) =
// A^T: the view's rows are A's columns, each entry with its CSR index) against float64, the rows
// kernel's launches counted; float32 in the rows mode runs the CUDA-core kernels.
TEST(CudaAdapters, TensorCoreSpmmRowsForm) {
  EXPECT_EQ(ca::to_string(ca::parse_tensor_cores("rows")), "rows");
  check_spmm_both_directions(ca::TensorCores::Rows, {at::kHalf, at::kBFloat16}, "rows ");
  const ScopedTensorCores rows(ca::TensorCores::Rows);
  const Graph g = graph();
  const int64_t before = launches("spmm tensor_cores ");
  const at::Tensor x = at::randn({g.cols, 40}, at::kFloat);
  const at::Tensor y = gnnfuse::spmm(g.rowptr, g.col, g.weight.to(at::kFloat), x);
  EXPECT_EQ(launches("spmm tensor_cores "), before);
  EXPECT_LE(rel_err(y, at::mm(dense(g, g.weight.to(at::kDouble)), x.to(at::kDouble))), 1e-6);
}

// auto: not for float64, not below 32 columns, not for float32 unless tf32 is allowed; off: never.
TEST(CudaAdapters, TensorCoreSpmmChoice) {
  EXPECT_EQ(ca::to_string(ca::parse_tensor_cores("auto")), "auto");
  EXPECT_THROW(ca::parse_tensor_cores("always"), std::invalid_argument);
  const Graph g = graph();
  const int64_t before = launches("spmm tensor_cores ");
  {
    const ScopedTensorCores on(ca::TensorCores::On);
    gnnfuse::spmm(g.rowptr, g.col, g.weight, at::randn({g.cols, 40}, at::kDouble));
  }
  {
    const ScopedTensorCores off(ca::TensorCores::Off);
    gnnfuse::spmm(g.rowptr, g.col, g.weight.to(at::kHalf), at::randn({g.cols, 40}, at::kHalf));
  }
  {
    const ScopedTensorCores automatic(ca::TensorCores::Auto);
    gnnfuse::spmm(g.rowptr, g.col, g.weight.to(at::kHalf), at::randn({g.cols, 8}, at::kHalf));
    gnnfuse::spmm(g.rowptr, g.col, g.weight.to(at::kFloat), at::randn({g.cols, 40}, at::kFloat));
  }
  EXPECT_EQ(launches("spmm tensor_cores "), before);
}

// ---------------------------------------------------------------- CUDA graph capture
// A probe that says every stream is being captured (torch/checks.h): the value checks of a
// pattern not seen before compute their verdict on the device and assert it there
// (at::_assert_async, which on the CPU raises at once), a read-back or a host copy would raise,
// the graph statistics take their bound instead of a read-back, and nothing is remembered.
TEST(CudaAdapters, ChecksUnderCaptureAssertOnTheDevice) {
  namespace checks = gnnfuse::checks;
  struct Restore {
    checks::CaptureProbe was;
    ~Restore() { checks::set_capture_probe(was); }
  } restore{checks::set_capture_probe([](const at::Tensor&) { return true; })};
  const Graph g = graph();
  const at::Tensor rowptr = g.rowptr.clone(), col = g.col.clone();  // not in any cache
  const at::Tensor x = at::randn({g.cols, 4}, at::kDouble).requires_grad_();
  const auto [colptr, row, perm] =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gnnfuse::csr_transpose", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, int64_t)>()
          .call(rowptr, col, g.cols);
  const int64_t stats = ca::graph_stats_computed();
  const at::Tensor y = gnnfuse::spmm(rowptr, col, g.weight, x, colptr, row, perm);
  y.backward(at::ones_like(y));  // the CSC view, walked by the gradient of x
  EXPECT_TRUE(at::allclose(y, at::mm(dense(g, g.weight), x.detach()), 1e-12, 1e-12));
  EXPECT_TRUE(at::allclose(x.grad(), at::mm(dense(g, g.weight).t(), at::ones({7, 4}, at::kDouble)), 1e-12, 1e-12));
  EXPECT_EQ(ca::graph_stats_computed(), stats);
  const char* captured = "(checked on the device during CUDA graph capture)";
  at::Tensor bad_rowptr = rowptr.clone();
  bad_rowptr[2] = 4;  // 0, 2, 4, 3, ...: out of order
  expect_error([&] { gnnfuse::spmm(bad_rowptr, col, g.weight, x.detach()); },
               {"gnnfuse::spmm: argument 'rowptr' must be valid row pointers", captured});
  at::Tensor bad_col = col.clone();
  bad_col[3] = g.cols;
  expect_error([&] { gnnfuse::spmm(rowptr, bad_col, g.weight, x.detach()); },
               {"gnnfuse::spmm: argument 'col' must hold column indices in [0, 6)", captured});
  at::Tensor bad_perm = perm.clone();
  bad_perm[0] = perm[1].item<int64_t>();  // a position twice
  expect_error([&] { gnnfuse::spmm(rowptr, col, g.weight, x.detach(), colptr, row, bad_perm); },
               {"argument 'perm' must be a permutation of the CSR positions", captured});
  at::Tensor swapped = perm.clone();
  swapped[0] = perm[1].item<int64_t>();
  swapped[1] = perm[0].item<int64_t>();  // a permutation, not the CSC view's
  expect_error([&] { gnnfuse::spmm(rowptr, col, g.weight, x.detach(), colptr, row, swapped); },
               {"must be the CSC view of the CSR matrix", captured});
}

// SpGEMM through the CUDA adapters (the pattern kernels' hash sets per row, in chunks of rows; the
// numeric kernel over the pattern's positions) against the CPU kernels at PrivateUse3: the same
// pattern, and values summed in the same order (equal up to the CPU kernels' FMA contraction);
// a forced small pattern budget (many chunks) gives the same result.
TEST(CudaAdapters, SpgemmPatternAndValuesMatchTheCpuKernels) {
  const auto symbolic = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::spgemm_symbolic", "").typed<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  const auto numeric = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::spgemm", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
      const at::Tensor&, int64_t)>();
  const c10::DispatchKeySet cpu_key(c10::DispatchKey::PrivateUse3);
  for (auto itype : {at::kInt, at::kLong}) {
    const Graph a = graph(itype);  // 7 x 6, empty rows
    Graph b = graph(itype);        // read as 6 x 6: its first 6 rows (12 entries)
    b.rowptr = b.rowptr.slice(0, 0, 7);
    // (copies: the pattern cache, which both kernels share, must not answer the second call)
    const auto [cpu_rp, cpu_col] = symbolic.redispatch(cpu_key, a.rowptr.clone(), a.col.clone(), b.rowptr, b.col, 6);
    const int64_t before = launches("spgemm_symbolic pattern ");
    const auto [rp, col] = gnnfuse::spgemm_symbolic(a.rowptr, a.col, b.rowptr, b.col, 6);
    EXPECT_EQ(launches("spgemm_symbolic pattern "), before + 1);
    EXPECT_TRUE(at::equal(rp, cpu_rp) && at::equal(col, cpu_col));
    const at::Tensor cpu_vals = numeric.redispatch(cpu_key, a.rowptr, a.col, a.weight, b.rowptr, b.col, b.weight, cpu_rp, cpu_col, 6);
    const at::Tensor vals = gnnfuse::spgemm(a.rowptr, a.col, a.weight, b.rowptr, b.col, b.weight, rp, col, 6);
    EXPECT_TRUE(at::allclose(vals, cpu_vals, 1e-14, 1e-14));
    // against the dense product, on the pattern
    const at::Tensor want = at::mm(dense(a, a.weight), dense(b, b.weight));
    const at::Tensor rows = at::repeat_interleave(rp.to(at::kLong).diff());
    EXPECT_TRUE(at::allclose(vals, want.index({rows, col.to(at::kLong)}), 1e-12, 1e-12));
    // many chunks of rows (a pattern budget of 2 slots), copies of the operands (no cache hit)
    ScopedEnv budget("GNNFUSE_CUDA_PATTERN_BUDGET", "2");
    const auto [rp2, col2] = gnnfuse::spgemm_symbolic(a.rowptr.clone(), a.col.clone(), b.rowptr, b.col, 6);
    EXPECT_TRUE(at::equal(rp2, cpu_rp) && at::equal(col2, cpu_col));
  }
}
