// The op battery of the generated CUDA kernels: every op of a family, every schedule variant,
// group size and the deterministic choice, against the generated CPU kernel on random graphs with
// empty rows and long rows (gen_battery.py writes one program per family). The same program text
// runs through the SIMT emulator (g++ -DGNNFUSE_SIMT_EMU, host memory) and on a real GPU (nvcc:
// buffers in managed memory, so the CPU reference and the device kernels read the same arrays;
// each call synchronised and its CUDA error checked).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include "runtime/cuda_launch.h"
using namespace gnnfuse;

#if defined(__CUDACC__) && !defined(GNNFUSE_SIMT_EMU)
#define BATTERY_ON_DEVICE 1
#include <cuda_runtime.h>
template <class T>
struct Managed {
  using value_type = T;
  Managed() = default;
  template <class U> Managed(const Managed<U>&) {}
  T* allocate(size_t n) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocManaged(&p, std::max<size_t>(n * sizeof(T), 16));
    if (e != cudaSuccess) { std::fprintf(stderr, "cudaMallocManaged(%zu): %s\n", n * sizeof(T), cudaGetErrorString(e)); std::exit(3); }
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { cudaFree(p); }
  template <class U> bool operator==(const Managed<U>&) const { return true; }
  template <class U> bool operator!=(const Managed<U>&) const { return false; }
};
template <class T> using Vec = std::vector<T, Managed<T>>;
inline const char* battery_where() { return "device"; }
#else
template <class T> using Vec = std::vector<T>;
inline const char* battery_where() { return "emulator"; }
#endif

inline int& battery_run_count() { static int n = 0; return n; }
inline int battery_runs() { return battery_run_count(); }
inline int64_t battery_env(const char* name, int64_t fallback) { const char* v = std::getenv(name); return v ? std::atoll(v) : fallback; }
inline int64_t battery_rows() { return battery_env("BATTERY_ROWS", 60); }
inline int64_t battery_cols() { return battery_env("BATTERY_COLS", 50); }

// After a generated call: on a device, wait for it and stop at the first CUDA error (a sticky
// error poisons the context; the op and variant are named).
inline void device_sync(const char* op, const runtime::cuda::LaunchConfig& cfg) {
#ifdef BATTERY_ON_DEVICE
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("CUDA ERROR in %s variant %s group %d: %s\n", op, runtime::cuda::to_string(cfg.variant), cfg.kernels.empty() ? 0 : cfg.kernels[0].group, cudaGetErrorString(e));
    std::fflush(stdout);
    std::exit(2);
  }
#else
  (void)op; (void)cfg;
#endif
}
template <typename I>
struct Graph {
  int64_t n = 0, m = 0, max_row = 0, max_col = 0;
  Vec<I> rowptr, col, colptr, row;
  Vec<int64_t> perm;
  int64_t nnz() const { return (int64_t)col.size(); }
};
template <typename I>
Graph<I> make_graph(unsigned seed, int64_t n, int64_t m) {
  std::mt19937 rng(seed);
  Graph<I> g; g.n = n; g.m = m; g.rowptr.assign(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = (i % 5 == 2) ? 0 : (i == 8 ? 45 : (n > 1000 && i == 100) ? m / 2 : (n > 1000 && i % 97 == 3) ? 300 : (int64_t)(rng() % 9));
    std::vector<int64_t> cs;
    for (int64_t k = 0; k < len; ++k) cs.push_back(rng() % m);
    std::sort(cs.begin(), cs.end()); cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
    for (auto c : cs) g.col.push_back((I)c);
    g.rowptr[i + 1] = (I)g.col.size();
    g.max_row = std::max<int64_t>(g.max_row, (int64_t)cs.size());
  }
  g.colptr.assign(m + 1, 0);
  for (auto c : g.col) g.colptr[c + 1]++;
  for (int64_t j = 0; j < m; ++j) { g.max_col = std::max<int64_t>(g.max_col, g.colptr[j + 1]); g.colptr[j + 1] += g.colptr[j]; }
  g.row.resize(g.col.size()); g.perm.resize(g.col.size());
  std::vector<I> next(g.colptr.begin(), g.colptr.end() - 1);
  for (int64_t i = 0; i < n; ++i) for (I p = g.rowptr[i]; p < g.rowptr[i + 1]; ++p) { I q = next[g.col[p]]++; g.row[q] = (I)i; g.perm[q] = p; }
  return g;
}
inline int64_t small_extent(const std::string& v, int64_t F) { return v == "h" ? 2 : (v == "k" || v == "d" || v == "d2" || v == "o") ? (F == 32 ? 32 : std::max<int64_t>(1, F / 2 + 1)) : F; }
template <typename T>
Vec<T> rand_vec(int64_t n, unsigned seed) {
  std::mt19937 rng(seed); std::uniform_real_distribution<double> u(-1, 1);
  Vec<T> v(n); for (auto& x : v) x = T(static_cast<float>(u(rng))); return v;
}
template <typename I>
Vec<int64_t> select_positions(const Graph<I>& g, int64_t per_row, unsigned seed) {
  std::mt19937 rng(seed); Vec<int64_t> s(g.n * per_row, -1);
  for (int64_t i = 0; i < g.n; ++i) for (int64_t k = 0; k < per_row; ++k) {
    int64_t len = g.rowptr[i + 1] - g.rowptr[i];
    if (len > 0 && rng() % 4) s[i * per_row + k] = g.rowptr[i] + rng() % len;
  }
  return s;
}
template <typename T>
using hacc = typename std::conditional<sizeof(T) == 2, float, T>::type;
template <typename T>
struct Outputs {
  struct B { void** slot; std::vector<double> ref; Vec<unsigned char> buf; int64_t n; bool is_int; bool acc; };
  std::vector<B> bs;
  template <typename U> void add(void** slot, int64_t n) { bs.push_back(B{slot, {}, Vec<unsigned char>(n * sizeof(U)), n, std::is_integral<U>::value, !std::is_integral<U>::value && !std::is_same<U, T>::value}); }
  void reset() { for (auto& b : bs) { if (b.is_int) { auto* p = (int64_t*)b.buf.data(); std::fill(p, p + b.n, -1); } else if (b.acc) { auto* p = (hacc<T>*)b.buf.data(); std::fill(p, p + b.n, hacc<T>(777)); } else { auto* p = (T*)b.buf.data(); std::fill(p, p + b.n, T(777.0f)); } *b.slot = b.buf.data(); } }
  double get(const B& b, int64_t k) const { return b.is_int ? (double)((int64_t*)b.buf.data())[k] : b.acc ? (double)((hacc<T>*)b.buf.data())[k] : (double)static_cast<float>(((T*)b.buf.data())[k]); }
  void keep_reference() { for (auto& b : bs) { b.ref.resize(b.n); for (int64_t k = 0; k < b.n; ++k) b.ref[k] = get(b, k); } }
  // 0 when every output matches the reference: elementwise |x - r| / (1 + |r|) <= tol, or for
  // float32 (whose summation order differs between the kernels and the serial CPU reference, and
  // whose elementwise error grows where long rows cancel) a normwise ||x - r|| / ||r|| <= 2e-5 with
  // no element off by more than 25 tol. Else the worst elementwise error. Integers exactly, NaN
  // only where the reference has NaN.
  double compare(double tol) const {
    double worst = 0, d2 = 0, r2 = 0;
    bool exact_only = false;
    for (auto& b : bs) for (int64_t k = 0; k < b.n; ++k) {
      double x = get(b, k), r = b.ref[k];
      double e = ((std::isnan(r) && std::isnan(x)) || x == r) ? 0 : std::fabs(x - r) / (1 + std::fabs(r));
      if (b.is_int && x != r) { e = 1e9; exact_only = true; }
      if (std::isnan(e)) { e = 1e9; exact_only = true; }
      if (!b.is_int && !std::isnan(r)) { d2 += (x - r) * (x - r); r2 += r * r; }
      worst = std::max(worst, e);
    }
    if (worst <= tol) return 0;
    const bool f32 = sizeof(T) == 4 && std::is_floating_point<T>::value;
    if (f32 && !exact_only && worst <= 25 * tol && std::sqrt(d2) <= 2e-5 * std::sqrt(r2)) return 0;
    return worst;
  }
  double normwise() const {
    double d2 = 0, r2 = 0;
    for (auto& b : bs) for (int64_t k = 0; k < b.n; ++k) {
      double x = get(b, k), r = b.ref[k];
      if (!b.is_int && !std::isnan(r)) { d2 += (x - r) * (x - r); r2 += r * r; }
    }
    return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  }
};
// The dense-product hook (cuBLAS in the adapters): C (+)= op(A) op(B) on the host, in double, each
// operand read as the op's dtype or, where *_acc, as its accumulation type (float for half types).
inline double hook_read(const void* p, int64_t k, int dtype, bool acc) {
  switch (acc && dtype >= 2 ? 0 : dtype) {
    case 1: return static_cast<const double*>(p)[k];
    case 2: return static_cast<double>(static_cast<float>(static_cast<const runtime::bfloat16*>(p)[k]));
    case 3: return static_cast<double>(static_cast<float>(static_cast<const runtime::float16*>(p)[k]));
    default: return static_cast<double>(static_cast<const float*>(p)[k]);
  }
}
inline void hook_write(void* p, int64_t k, int dtype, bool acc, double v) {
  switch (acc && dtype >= 2 ? 0 : dtype) {
    case 1: static_cast<double*>(p)[k] = v; break;
    case 2: static_cast<runtime::bfloat16*>(p)[k] = runtime::bfloat16(static_cast<float>(v)); break;
    case 3: static_cast<runtime::float16*>(p)[k] = runtime::float16(static_cast<float>(v)); break;
    default: static_cast<float*>(p)[k] = static_cast<float>(v);
  }
}
inline void host_matmul(void*, const runtime::cuda::MatmulCall& c, int dtype) {
#ifdef BATTERY_ON_DEVICE
  cudaDeviceSynchronize();  // the rows the kernels before the block wrote (managed memory)
#endif
  for (int64_t r = 0; r < c.m; ++r) for (int64_t q = 0; q < c.n; ++q) {
    double s = 0;
    for (int64_t x = 0; x < c.k; ++x)
      s += hook_read(c.a, c.a_trans ? x * c.lda + r : r * c.lda + x, dtype, c.a_acc) * hook_read(c.b, c.b_trans ? q * c.ldb + x : x * c.ldb + q, dtype, c.b_acc);
    const int64_t at = r * c.ldc + q;
    hook_write(c.c, at, dtype, c.c_acc, (c.accumulate ? hook_read(c.c, at, dtype, c.c_acc) : 0.0) + s);
  }
}
inline int for_variants(const char* op, const runtime::cuda::Request& req0, const std::function<double(const runtime::cuda::LaunchConfig&, runtime::cuda::Env&)>& run) {
  int bad = 0;
  for (size_t v = 0; v < req0.variants.size(); ++v) for (int grp : {0, 1, 8, 32}) for (int det : {0, 1}) {
    runtime::cuda::Request req = req0;
    req.force_variant = (int)req.variants[v].variant; req.force_group = grp; req.deterministic = det;
    runtime::cuda::LaunchConfig cfg = runtime::cuda::decide(req);
    Vec<unsigned char> ws(cfg.workspace_bytes + 256, 0xcd);
    runtime::cuda::Env env; env.workspace = ws.data(); env.matmul = host_matmul;
    double e = run(cfg, env);
    ++battery_run_count();
    if (e > 0) { ++bad; std::printf("  BAD (dtype %d) %s variant %s group %d: err %g\n", req0.scalar_bytes, op, runtime::cuda::to_string(cfg.variant), cfg.kernels.empty() ? 0 : cfg.kernels[0].group, e); }
  }
  return bad;
}
// runtime stubs for the CPU kernels (serial)
namespace gnnfuse::runtime {
void parallel_for(int64_t b, int64_t e, int64_t, RangeFn fn, void* ctx) { if (b < e) fn(ctx, b, e); }
int64_t max_threads() { return 1; }
int64_t thread_id() { return 0; }
}
