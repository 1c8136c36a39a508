// The generated CUDA kernels of spmm, run on the CPU by the SIMT emulator (g++ -DGNNFUSE_SIMT_EMU
// compiles the text nvcc compiles; cuda/emu, docs/SIMT.md): every schedule variant forced, with
// several group sizes and both the deterministic and the atomic choice, against the CPU kernel
// on random graphs with empty rows and a long row; fp64 and fp32, int32 and int64 indices,
// F in {1, 3, 32, 129} (tails of the feature tiles, 16-byte loads where F allows). Built when the
// tree has the emulator (the gnnfuse_simt target).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "spmm_cuda.cu"  // build/generated: the kernels and their launches

using namespace gnnfuse;
using runtime::cuda::GraphStats;
using runtime::cuda::LaunchConfig;
using runtime::cuda::Request;
using runtime::cuda::Variant;

namespace {

template <typename I>
struct Csr {
  int64_t rows = 0, cols = 0, max_row = 0;
  std::vector<I> rowptr, col;
};

// Rows of 0 to 8 entries, every fifth row empty, row 8 long (45 entries), trailing rows empty.
template <typename I>
Csr<I> random_csr(unsigned seed, int64_t rows, int64_t cols) {
  std::mt19937 rng(seed);
  Csr<I> a;
  a.rows = rows;
  a.cols = cols;
  a.rowptr.assign(static_cast<size_t>(rows + 1), 0);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t len = i % 5 == 2 || i >= rows - 2 ? 0 : i == 8 ? 45 : static_cast<int64_t>(rng() % 9);
    std::vector<int64_t> cs;
    for (int64_t k = 0; k < len; ++k) cs.push_back(static_cast<int64_t>(rng() % static_cast<unsigned>(cols)));
    std::sort(cs.begin(), cs.end());
    cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
    for (auto c : cs) a.col.push_back(static_cast<I>(c));
    a.rowptr[static_cast<size_t>(i + 1)] = static_cast<I>(a.col.size());
    a.max_row = std::max<int64_t>(a.max_row, static_cast<int64_t>(cs.size()));
  }
  return a;
}

template <typename T>
std::vector<T> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

template <typename T, typename I>
void check(unsigned seed, int64_t F, bool weights, runtime::DType dtype, runtime::IType itype) {
  const Csr<I> a = random_csr<I>(seed, 70, 50);
  const std::vector<T> val = random_values<T>(a.col.size(), seed + 1);
  const std::vector<T> x = random_values<T>(static_cast<size_t>(a.cols * F), seed + 2);
  generated::spmm_params prm;
  prm.n_i = a.rows;
  prm.n_j = a.cols;
  prm.n_f = F;
  prm.A_rowptr = a.rowptr.data();
  prm.A_col = a.col.data();
  prm.A_val = weights ? val.data() : nullptr;
  prm.X = x.data();
  std::vector<T> want(static_cast<size_t>(a.rows * F));
  prm.Y = want.data();
  generated::spmm_cpu(prm, dtype, itype);

  const GraphStats stats{a.rows, static_cast<int64_t>(a.col.size()), a.max_row};
  const Request offered = generated::spmm_cuda_request(prm, dtype, itype, stats);
  // row split, pos split, its atomic form, lanes, and the register forms: reg_lanes, pos_lanes, its atomic form
  ASSERT_EQ(offered.variants.size(), 7u);
  const double tol = sizeof(T) == 8 ? 1e-12 : 1e-5;
  int runs = 0;
  for (const auto& v : offered.variants)
    for (int group : {0, 1, 4, 32})
      for (bool deterministic : {false, true}) {
        if (v.variant != Variant::RowSplit && v.variant != Variant::Lanes && v.variant != Variant::RegLanes && v.variant != Variant::PosLanes &&
            v.variant != Variant::PosLanesAtomic && group > 0)
          continue;
        Request req = offered;
        req.force_variant = static_cast<int>(v.variant);
        req.force_group = group;
        req.deterministic = deterministic;
        if (deterministic && v.atomic) {  // the atomic forms are refused under deterministic algorithms
          EXPECT_THROW(runtime::cuda::decide(req), std::invalid_argument) << runtime::cuda::to_string(v.variant);
          continue;
        }
        const LaunchConfig cfg = runtime::cuda::decide(req);
        std::vector<unsigned char> workspace(static_cast<size_t>(cfg.workspace_bytes) + 16, 0xcd);
        std::vector<T> got(want.size(), static_cast<T>(777));  // every element must be written
        prm.Y = got.data();
        runtime::cuda::Env env;
        env.workspace = workspace.data();
        generated::spmm_cuda(prm, dtype, itype, cfg, env);
        ++runs;
        for (size_t k = 0; k < want.size(); ++k)
          ASSERT_NEAR(static_cast<double>(got[k]), static_cast<double>(want[k]), tol * (1 + std::fabs(static_cast<double>(want[k]))))
              << runtime::cuda::to_string(cfg.variant) << ", " << cfg.kernels[0].group << " lanes per row, vector width "
              << cfg.kernels[0].vector_width << ", F " << F << ", element " << k;
      }
  EXPECT_GE(runs, 12);
}

}  // namespace

TEST(SpmmEmulated, Float64Int32) {
  for (int64_t F : {1, 3, 32, 129}) check<double, int32_t>(11 + static_cast<unsigned>(F), F, true, runtime::DType::Float64, runtime::IType::Int32);
}

TEST(SpmmEmulated, Float32Int64) {
  for (int64_t F : {1, 3, 32, 129}) check<float, int64_t>(12 + static_cast<unsigned>(F), F, true, runtime::DType::Float32, runtime::IType::Int64);
}

TEST(SpmmEmulated, WithoutEdgeWeights) {
  check<float, int32_t>(5, 32, false, runtime::DType::Float32, runtime::IType::Int32);
  check<double, int64_t>(6, 3, false, runtime::DType::Float64, runtime::IType::Int64);
}
