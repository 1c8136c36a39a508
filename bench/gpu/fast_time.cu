// Times every schedule variant the generated CUDA kernels of spmm, sddmm and sddmm_spmm offer
// (forced, the launch decision's group), and the variant decide() picks, on two synthetic graphs
// (2^20 rows: uniform degree 16, and skewed: a Pareto tail of hub rows), float32 / int32. A quick
// check of the register forms (reg_lanes, pos_lanes) against the older ones on a GPU; the real
// comparison with cuSPARSE is bench_gpu.py's. Built by fast_time.sh (nvcc, sm_90a).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "sddmm_cuda.h"
#include "sddmm_spmm_cuda.h"
#include "spmm_cuda.h"

using namespace gnnfuse;
namespace rc = gnnfuse::runtime::cuda;

namespace {

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Graph {
  int64_t n = 0, nnz = 0, max_row = 0;
  int *rowptr = nullptr, *col = nullptr;
  float* val = nullptr;
};

Graph make(int64_t n, bool skewed, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int> rp(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = 16;
    if (skewed) d = std::min<int64_t>(n / 4, static_cast<int64_t>(6.0 / std::pow(u(rng) + 1e-12, 1.0 / 1.3)));
    rp[i + 1] = static_cast<int>(rp[i] + d);
  }
  Graph g;
  g.n = n;
  g.nnz = rp[n];
  std::vector<int> c(g.nnz);
  for (int64_t i = 0; i < n; ++i) {
    g.max_row = std::max<int64_t>(g.max_row, rp[i + 1] - rp[i]);
    for (int p = rp[i]; p < rp[i + 1]; ++p) c[p] = static_cast<int>(rng() % static_cast<uint64_t>(n));
    std::sort(c.begin() + rp[i], c.begin() + rp[i + 1]);
  }
  std::vector<float> v(g.nnz);
  for (auto& x : v) x = static_cast<float>(u(rng));
  CK(cudaMalloc(&g.rowptr, (n + 1) * 4));
  CK(cudaMalloc(&g.col, g.nnz * 4));
  CK(cudaMalloc(&g.val, g.nnz * 4));
  CK(cudaMemcpy(g.rowptr, rp.data(), (n + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(g.col, c.data(), g.nnz * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(g.val, v.data(), g.nnz * 4, cudaMemcpyHostToDevice));
  return g;
}

float* dense(int64_t elems, unsigned seed) {
  std::vector<float> h(elems);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : h) x = u(rng);
  float* d = nullptr;
  CK(cudaMalloc(&d, elems * 4));
  CK(cudaMemcpy(d, h.data(), elems * 4, cudaMemcpyHostToDevice));
  return d;
}

void* g_ws = nullptr;
int64_t g_ws_bytes = 0;

// ms per call of `run` under cfg (3 warm-up calls, then the mean of 10).
double time_it(const rc::LaunchConfig& cfg, const std::function<void(const rc::LaunchConfig&, const rc::Env&)>& run) {
  if (cfg.workspace_bytes > g_ws_bytes) {
    if (g_ws) CK(cudaFree(g_ws));
    g_ws_bytes = cfg.workspace_bytes;
    CK(cudaMalloc(&g_ws, g_ws_bytes));
  }
  rc::Env env;
  env.workspace = g_ws;
  for (int k = 0; k < 3; ++k) run(cfg, env);
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int k = 0; k < 10; ++k) run(cfg, env);
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  CK(cudaGetLastError());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / 10.0;
}

// The output after one call under cfg, against the first variant's (row_split: checked on the
// device by the battery before): the largest difference over the largest magnitude.
std::vector<float> g_ref;
double check(const rc::LaunchConfig& cfg, const std::function<void(const rc::LaunchConfig&, const rc::Env&)>& run, const float* out,
             int64_t n, bool first) {
  rc::Env env;
  env.workspace = g_ws;
  CK(cudaMemset(const_cast<float*>(out), 0xff, n * 4));  // NaN: every element must be written
  run(cfg, env);
  CK(cudaDeviceSynchronize());
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), out, n * 4, cudaMemcpyDeviceToHost));
  if (first) g_ref = h;
  double d = 0, m = 1e-30;
  for (int64_t k = 0; k < n; ++k) {
    const double x = h[k], y = g_ref[k];
    if (x != x) return INFINITY;
    d = std::max(d, std::fabs(x - y));
    m = std::max(m, std::fabs(y));
  }
  return d / m;
}

void sweep(const char* what, const rc::Request& req0, const std::function<void(const rc::LaunchConfig&, const rc::Env&)>& run,
           const float* out, int64_t n) {
  bool first = true;
  rc::LaunchConfig chosen = rc::decide(req0);
  std::printf("%s: decide -> %s (group %d, regs %d, vw %d): %.3f ms\n", what, rc::to_string(chosen.variant), chosen.kernels[0].group,
              chosen.kernels[0].regs, chosen.kernels[0].vector_width, time_it(chosen, run));
  for (auto& v : req0.variants)
    for (int det : {0, 1}) {
      rc::Request req = req0;
      req.force_variant = static_cast<int>(v.variant);
      req.deterministic = det;
      if (det && v.variant != rc::Variant::PosLanes && v.variant != rc::Variant::PosSplit) continue;
      rc::LaunchConfig cfg = rc::decide(req);
      const double ms = time_it(cfg, run);
      const double err = check(cfg, run, out, n, first);
      first = false;
      std::printf("  %-18s det %d group %2d regs %d vw %d: %.3f ms  (rel. diff %.2g%s)\n", rc::to_string(cfg.variant), det, cfg.kernels[0].group,
                  cfg.kernels[0].regs, cfg.kernels[0].vector_width, ms, err, err > 1e-4 ? " BAD" : "");
      // Other chunk sizes of the nonzero-balanced register kernels without carries.
      if (v.variant == rc::Variant::PosLanesAtomic || (v.variant == rc::Variant::PosLanes && cfg.workspace_bytes == 0))
        for (int64_t chunk : {32, 128, 256}) {
          rc::LaunchConfig c2 = cfg;
          for (auto& k : c2.kernels)
            if (k.form == rc::Form::PosLanes) {
              k.chunk = chunk;
              k.chunks = (req.graph.nnz + chunk - 1) / chunk;
              k.grid = std::max<int64_t>(1, std::min<int64_t>(rc::kMaxGrid, (k.chunks + 256 / k.group - 1) / (256 / k.group)));
            }
          std::printf("    chunk %3lld: %.3f ms\n", (long long)chunk, time_it(c2, run));
        }
      if (v.variant == rc::Variant::RowSplit) {
        req.force_variant = static_cast<int>(rc::Variant::WarpPerRow);
        cfg = rc::decide(req);
        std::printf("  %-18s group %2d: %.3f ms\n", rc::to_string(cfg.variant), cfg.kernels[0].group, time_it(cfg, run));
      }
    }
}

}  // namespace

int main() {
  const int64_t n = int64_t(1) << 20;
  for (bool skewed : {false, true}) {
    Graph g = make(n, skewed, 7);
    std::printf("== graph %s: %lld rows, %lld nnz, longest row %lld\n", skewed ? "skewed" : "uniform", (long long)g.n, (long long)g.nnz,
                (long long)g.max_row);
    rc::GraphStats st{g.n, g.nnz, g.max_row};
    for (int64_t F : {32, 128}) {
      float* X = dense(n * F, 1);
      float* Y = dense(n * F, 2);
      char what[64];
      generated::spmm_params p;
      p.n_i = n;
      p.n_j = n;
      p.n_f = F;
      p.A_rowptr = g.rowptr;
      p.A_col = g.col;
      p.A_val = g.val;
      p.X = X;
      p.Y = Y;
      std::snprintf(what, sizeof what, "spmm F=%lld", (long long)F);
      sweep(what, generated::spmm_cuda_request(p, runtime::DType::Float32, runtime::IType::Int32, st),
            [&](const rc::LaunchConfig& c, const rc::Env& e) { generated::spmm_cuda(p, runtime::DType::Float32, runtime::IType::Int32, c, e); }, Y, n * F);
      float* E = nullptr;
      CK(cudaMalloc(&E, g.nnz * 4));
      generated::sddmm_params q;
      q.n_i = n;
      q.n_j = n;
      q.n_k = F;
      q.A_rowptr = g.rowptr;
      q.A_col = g.col;
      q.A_val = g.val;
      q.U = X;
      q.V = X;
      q.E = E;
      std::snprintf(what, sizeof what, "sddmm K=%lld", (long long)F);
      sweep(what, generated::sddmm_cuda_request(q, runtime::DType::Float32, runtime::IType::Int32, st),
            [&](const rc::LaunchConfig& c, const rc::Env& e) { generated::sddmm_cuda(q, runtime::DType::Float32, runtime::IType::Int32, c, e); }, E, g.nnz);
      generated::sddmm_spmm_params r;
      r.n_i = n;
      r.n_j = n;
      r.n_k = F;
      r.n_f = F;
      r.A_rowptr = g.rowptr;
      r.A_col = g.col;
      r.A_val = g.val;
      r.U = X;
      r.V = X;
      r.X = X;
      r.Y = Y;
      std::snprintf(what, sizeof what, "sddmm_spmm K=F=%lld", (long long)F);
      sweep(what, generated::sddmm_spmm_cuda_request(r, runtime::DType::Float32, runtime::IType::Int32, st),
            [&](const rc::LaunchConfig& c, const rc::Env& e) { generated::sddmm_spmm_cuda(r, runtime::DType::Float32, runtime::IType::Int32, c, e); }, Y, n * F);
      CK(cudaFree(E));
      CK(cudaFree(X));
      CK(cudaFree(Y));
    }
    CK(cudaFree(g.rowptr));
    CK(cudaFree(g.col));
    CK(cudaFree(g.val));
  }
  return 0;
}
