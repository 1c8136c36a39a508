// libgf_bench: the generated CUDA kernels of spmm, sddmm and sddmm_spmm, and cached cuSPARSE
// baselines (SpMM, SDDMM), behind a plain extern "C" API for ctypes (bench_gpu.py). Pointers are
// raw device addresses (void*), a stream is a cudaStream_t as void* (nullptr: the legacy default
// stream). Every function returns 0 on success, else a nonzero code, and gf_last_error() says why.
//
// The same text builds two ways (build_bench.sh):
//   nvcc (sm_90a)              the device library, libgf_bench.so; cuSPARSE is dlopen'ed at run
//                              time (gf_cusparse_load), so the library links no cuSPARSE;
//   g++ -DGNNFUSE_SIMT_EMU     the emulated library, libgf_bench_emu.so: the kernels run on the CPU
//                              through the SIMT emulator on host pointers; no cuSPARSE (its
//                              functions return an error).
//
// A plan holds the launch decision of one op for one shape (runtime/cuda_launch.h: the generated
// <op>_cuda_request, then decide()); running a plan launches the generated kernels with it. The
// plan's decision assumed 16-byte aligned dense operands (the request's vector_ok); a run checks
// that where a kernel loads vectors.
#include <cstdint>
#include <memory>
#include <cstdio>
#include <climits>
#include <cstring>
#include <exception>
#include <string>

#include "cuda/simt.cuh"
#include "runtime/cuda_launch.h"
#include "sddmm_cuda.h"
#include "sddmm_spmm_cuda.h"
#include "spmm_cuda.h"

#if defined(__CUDACC__) && !defined(GNNFUSE_SIMT_EMU)
#define GF_DEVICE 1
#include <cuda_runtime.h>
#include <cusparse.h>
#include <dlfcn.h>
#endif

using namespace gnnfuse;
namespace rc = gnnfuse::runtime::cuda;

namespace {

thread_local std::string g_error;

int fail(const std::string& what) {
  g_error = what;
  return 1;
}

// Runs f, turning an exception into a nonzero return and the error text.
template <typename F>
int guarded(const char* where, F&& f) {
  try {
    g_error.clear();
    return f();
  } catch (const std::exception& e) {
    return fail(std::string(where) + ": " + e.what());
  } catch (...) {
    return fail(std::string(where) + ": unknown exception");
  }
}

#if GF_DEVICE
int check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  return fail(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
#endif

// After the launches of a run: the launch errors (bad configuration, too much shared memory).
int after_launch(const char* what) {
#if GF_DEVICE
  return check_cuda(cudaGetLastError(), what);
#else
  (void)what;
  return 0;
#endif
}

enum class Op { Spmm, Sddmm, SddmmSpmm };

struct Plan {
  Op op = Op::Spmm;
  runtime::DType dtype = runtime::DType::Float32;
  runtime::IType itype = runtime::IType::Int32;
  int64_t n = 0, m = 0, k = 0, f = 0, nnz = 0, max_row = 0;
  rc::Request req;
  rc::LaunchConfig cfg;
  std::string info;
};

bool to_dtype(int code, runtime::DType* out) {
  // 0 float32, 1 float64 (the bench's codes; runtime::DType's own values are not assumed)
  if (code == 0) *out = runtime::DType::Float32;
  else if (code == 1) *out = runtime::DType::Float64;
  else return false;
  return true;
}

bool to_itype(int code, runtime::IType* out) {
  // 0 int32, 1 int64
  if (code == 0) *out = runtime::IType::Int32;
  else if (code == 1) *out = runtime::IType::Int64;
  else return false;
  return true;
}

const char* form_name(rc::Form f) {
  switch (f) {
    case rc::Form::RowSplit: return "row_split";
    case rc::Form::PosSplit: return "pos_split";
    case rc::Form::Lanes: return "lanes";
    case rc::Form::Serial: return "serial";
  }
  return "?";
}

std::string describe(const Plan& p) {
  std::string s = std::string("variant=") + rc::to_string(p.cfg.variant) + " lowering=" + std::to_string(p.cfg.lowering) +
                  " offered=";
  for (size_t i = 0; i < p.req.variants.size(); ++i) s += std::string(i ? "," : "") + rc::to_string(p.req.variants[i].variant);
  s += " workspace=" + std::to_string(p.cfg.workspace_bytes);
  for (size_t i = 0; i < p.cfg.kernels.size(); ++i) {
    const auto& k = p.cfg.kernels[i];
    s += " | k" + std::to_string(i) + " form=" + form_name(k.form) + " group=" + std::to_string(k.group) +
         " vw=" + std::to_string(k.vector_width) + " block=" + std::to_string(k.block) + " grid=" + std::to_string(k.grid) +
         " smem=" + std::to_string(k.smem_bytes);
    if (k.form == rc::Form::PosSplit) s += " chunk=" + std::to_string(k.chunk) + " chunks=" + std::to_string(k.chunks);
    if (k.form == rc::Form::Lanes) s += std::string(" buffers_shared=") + (k.buffers_shared ? "1" : "0");
  }
  return s;
}

// Finishes a plan whose request is made: the forced choices, the decision, the report; hands the
// plan and its workspace size to the caller.
int finish_plan(std::unique_ptr<Plan> p, int force_variant, int force_group, int deterministic,
                int64_t* out_workspace_bytes, void** out_plan) {
  p->req.force_variant = force_variant;
  p->req.force_group = force_group;
  p->req.deterministic = deterministic != 0;
  p->cfg = rc::decide(p->req);
  p->info = describe(*p);
  *out_workspace_bytes = p->cfg.workspace_bytes;
  *out_plan = p.release();
  return 0;
}

int start_plan(Plan* p, Op op, int64_t n, int64_t m, int64_t k, int64_t f, int64_t nnz, int64_t max_row, int dtype, int itype) {
  p->op = op;
  if (!to_dtype(dtype, &p->dtype)) return fail("dtype code must be 0 (float32) or 1 (float64)");
  if (!to_itype(itype, &p->itype)) return fail("itype code must be 0 (int32) or 1 (int64)");
  if (n < 0 || m < 0 || k < 0 || f < 0 || nnz < 0 || max_row < 0) return fail("negative extent");
  p->n = n;
  p->m = m;
  p->k = k;
  p->f = f;
  p->nnz = nnz;
  p->max_row = max_row;
  return 0;
}

bool uses_vectors(const Plan& p) {
  for (const auto& k : p.cfg.kernels)
    if (k.vector_width > 1) return true;
  return false;
}

int check_aligned(const Plan& p, std::initializer_list<const void*> dense) {
  if (!uses_vectors(p)) return 0;
  for (const void* q : dense)
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return fail("a dense operand is not 16-byte aligned but the plan loads vectors");
  return 0;
}

int check_workspace(const Plan& p, const void* workspace) {
  if (p.cfg.workspace_bytes > 0 && workspace == nullptr) return fail("the plan needs a workspace");
  if (reinterpret_cast<uintptr_t>(workspace) % rc::kWorkspaceAlign != 0) return fail("the workspace is not 256-byte aligned");
  return 0;
}

rc::Env make_env(void* workspace, void* stream) {
  rc::Env env;
  env.stream = stream;
  env.workspace = workspace;
  return env;
}

}  // namespace

extern "C" {

const char* gf_last_error() { return g_error.c_str(); }

// 1: the device library (nvcc), 0: the emulated one.
int gf_is_device() {
#if GF_DEVICE
  return 1;
#else
  return 0;
#endif
}

// ---------------------------------------------------------------- plans
// dtype: 0 float32, 1 float64; itype: 0 int32, 1 int64. force_variant: -1 decide, else a
// runtime::cuda::Variant (0 row_split, 1 warp_per_row, 2 pos_split, 3 pos_split_atomic, 4 lanes);
// force_group: 0 decide, else lanes per row (a power of two up to 32). `weighted` is informative
// (the value pointer of a run decides); `lowering` -1: the op's cost model.

int gf_spmm_plan(int64_t n, int64_t m, int64_t F, int64_t nnz, int64_t max_row, int dtype, int itype, int weighted,
                 int force_variant, int force_group, int deterministic, int64_t* out_workspace_bytes, void** out_plan) {
  (void)weighted;
  return guarded("gf_spmm_plan", [&]() -> int {
    auto p = std::make_unique<Plan>();
    if (int rc_ = start_plan(p.get(), Op::Spmm, n, m, 0, F, nnz, max_row, dtype, itype)) return rc_;
    generated::spmm_params prm;
    prm.n_i = n;
    prm.n_j = m;
    prm.n_f = F;
    p->req = generated::spmm_cuda_request(prm, p->dtype, p->itype, rc::GraphStats{n, nnz, max_row});
    return finish_plan(std::move(p), force_variant, force_group, deterministic, out_workspace_bytes, out_plan);
  });
}

int gf_sddmm_plan(int64_t n, int64_t m, int64_t K, int64_t nnz, int64_t max_row, int dtype, int itype, int weighted,
                  int force_variant, int force_group, int deterministic, int64_t* out_workspace_bytes, void** out_plan) {
  (void)weighted;
  return guarded("gf_sddmm_plan", [&]() -> int {
    auto p = std::make_unique<Plan>();
    if (int rc_ = start_plan(p.get(), Op::Sddmm, n, m, K, 0, nnz, max_row, dtype, itype)) return rc_;
    generated::sddmm_params prm;
    prm.n_i = n;
    prm.n_j = m;
    prm.n_k = K;
    p->req = generated::sddmm_cuda_request(prm, p->dtype, p->itype, rc::GraphStats{n, nnz, max_row});
    return finish_plan(std::move(p), force_variant, force_group, deterministic, out_workspace_bytes, out_plan);
  });
}

int gf_sddmm_spmm_plan(int64_t n, int64_t m, int64_t K, int64_t F, int64_t nnz, int64_t max_row, int dtype, int itype,
                       int weighted, int force_variant, int force_group, int deterministic, int64_t* out_workspace_bytes,
                       void** out_plan) {
  (void)weighted;
  return guarded("gf_sddmm_spmm_plan", [&]() -> int {
    auto p = std::make_unique<Plan>();
    if (int rc_ = start_plan(p.get(), Op::SddmmSpmm, n, m, K, F, nnz, max_row, dtype, itype)) return rc_;
    generated::sddmm_spmm_params prm;
    prm.n_i = n;
    prm.n_j = m;
    prm.n_k = K;
    prm.n_f = F;
    p->req = generated::sddmm_spmm_cuda_request(prm, p->dtype, p->itype, rc::GraphStats{n, nnz, max_row});
    return finish_plan(std::move(p), force_variant, force_group, deterministic, out_workspace_bytes, out_plan);
  });
}

// The plan's decision as text: "variant=row_split lowering=0 offered=... workspace=N | k0 form=...
// group=8 vw=4 block=256 grid=... smem=..." (one "| kI" part per kernel).
const char* gf_plan_info(void* plan) { return plan ? static_cast<Plan*>(plan)->info.c_str() : ""; }

// The chosen variant's name, the first kernel's group and vector width.
const char* gf_plan_variant(void* plan) { return plan ? rc::to_string(static_cast<Plan*>(plan)->cfg.variant) : ""; }
int gf_plan_group(void* plan) {
  const Plan* p = static_cast<Plan*>(plan);
  return p && !p->cfg.kernels.empty() ? p->cfg.kernels[0].group : 0;
}
int gf_plan_vector_width(void* plan) {
  const Plan* p = static_cast<Plan*>(plan);
  return p && !p->cfg.kernels.empty() ? p->cfg.kernels[0].vector_width : 0;
}
// How many variants the op offers, and the Variant code of the i-th.
int gf_plan_offered_count(void* plan) { return plan ? static_cast<int>(static_cast<Plan*>(plan)->req.variants.size()) : 0; }
int gf_plan_offered(void* plan, int i) {
  const Plan* p = static_cast<Plan*>(plan);
  if (!p || i < 0 || static_cast<size_t>(i) >= p->req.variants.size()) return -1;
  return static_cast<int>(p->req.variants[static_cast<size_t>(i)].variant);
}

void gf_plan_destroy(void* plan) { delete static_cast<Plan*>(plan); }

// ---------------------------------------------------------------- runs
// Y[n][F] = A (CSR rowptr[n+1], col[nnz], val[nnz] or null: ones) @ X[m][F]
int gf_spmm_run(void* plan, const void* rowptr, const void* col, const void* val, const void* X, void* Y, void* workspace,
                void* stream) {
  return guarded("gf_spmm_run", [&]() -> int {
    const Plan* p = static_cast<const Plan*>(plan);
    if (!p || p->op != Op::Spmm) return fail("gf_spmm_run: not an spmm plan");
    if (int e = check_aligned(*p, {X, Y})) return e;
    if (int e = check_workspace(*p, workspace)) return e;
    generated::spmm_params prm;
    prm.n_i = p->n;
    prm.n_j = p->m;
    prm.n_f = p->f;
    prm.A_rowptr = rowptr;
    prm.A_col = col;
    prm.A_val = val;
    prm.X = X;
    prm.Y = Y;
    generated::spmm_cuda(prm, p->dtype, p->itype, p->cfg, make_env(workspace, stream));
    return after_launch("spmm launch");
  });
}

// E[nnz] = A (values or ones) * <U[row], V[col]> in CSR order; U[n][K], V[m][K].
int gf_sddmm_run(void* plan, const void* rowptr, const void* col, const void* val, const void* U, const void* V, void* E,
                 void* workspace, void* stream) {
  return guarded("gf_sddmm_run", [&]() -> int {
    const Plan* p = static_cast<const Plan*>(plan);
    if (!p || p->op != Op::Sddmm) return fail("gf_sddmm_run: not an sddmm plan");
    if (int e = check_aligned(*p, {U, V})) return e;
    if (int e = check_workspace(*p, workspace)) return e;
    generated::sddmm_params prm;
    prm.n_i = p->n;
    prm.n_j = p->m;
    prm.n_k = p->k;
    prm.A_rowptr = rowptr;
    prm.A_col = col;
    prm.A_val = val;
    prm.U = U;
    prm.V = V;
    prm.E = E;
    generated::sddmm_cuda(prm, p->dtype, p->itype, p->cfg, make_env(workspace, stream));
    return after_launch("sddmm launch");
  });
}

// Y[n][F] = sum over entries (i,j) of A(i,j) * <U[i], V[j]> * X[j]
int gf_sddmm_spmm_run(void* plan, const void* rowptr, const void* col, const void* val, const void* U, const void* V,
                      const void* X, void* Y, void* workspace, void* stream) {
  return guarded("gf_sddmm_spmm_run", [&]() -> int {
    const Plan* p = static_cast<const Plan*>(plan);
    if (!p || p->op != Op::SddmmSpmm) return fail("gf_sddmm_spmm_run: not an sddmm_spmm plan");
    if (int e = check_aligned(*p, {U, V, X, Y})) return e;
    if (int e = check_workspace(*p, workspace)) return e;
    generated::sddmm_spmm_params prm;
    prm.n_i = p->n;
    prm.n_j = p->m;
    prm.n_k = p->k;
    prm.n_f = p->f;
    prm.A_rowptr = rowptr;
    prm.A_col = col;
    prm.A_val = val;
    prm.U = U;
    prm.V = V;
    prm.X = X;
    prm.Y = Y;
    generated::sddmm_spmm_cuda(prm, p->dtype, p->itype, p->cfg, make_env(workspace, stream));
    return after_launch("sddmm_spmm launch");
  });
}

// Waits for the device (the emulated library: nothing to wait for).
int gf_synchronize() {
#if GF_DEVICE
  return check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  return 0;
#endif
}

}  // extern "C"

// ---------------------------------------------------------------- hand-written SpMM prototypes
// Not generated: they measure the design the generator should emit next (fp32, int32 indices,
// val optional: null means ones). Lanes go over the feature dimension: a group of G lanes owns a
// row (or a chunk of nonzeros); lane l holds the float4 pieces l, l + G, ..., l + (R-1) G of the
// row in registers (R = ceil(F / (4 G))), so a load of X's row j is G coalesced 16-byte pieces
// and Y's row is one store per piece. The group loads G (col, val) pairs at once, one per lane,
// and broadcasts them with __shfl_sync while it walks them in order. 32-bit index math.
//   rowlanes  one group per row (several rows per warp where G < 32); rows longer than long_gt
//             are left to another kernel (their Y row is stored as zeros first);
//   poslanes  one group per chunk of `chunk` consecutive nonzeros; its first row by binary search
//             on rowptr; a row that starts and ends inside the chunk is stored plainly, a row cut
//             by a chunk border is added with atomics (Y zeroed first); rows of length <= skip_le
//             are skipped (the hybrid's second launch: rowlanes did them);
//   hybrid    rowlanes for rows of length <= T, then poslanes for the longer ones.
// F must be a multiple of 4 (X, Y 16-byte aligned) and at most 512.
namespace {

constexpr int kProtoBlock = 256;

#if defined(__CUDACC__)
#define GF_PROTO_UNROLL _Pragma("unroll")
#else
#define GF_PROTO_UNROLL
#endif

GNNFUSE_DEVICE float4 proto_load4(const float* p) {
#if defined(__CUDACC__)
  return __ldg(reinterpret_cast<const float4*>(p));
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}

GNNFUSE_DEVICE void proto_fma4(float4& acc, float v, const float4& x) {
  acc.x += v * x.x;
  acc.y += v * x.y;
  acc.z += v * x.z;
  acc.w += v * x.w;
}

GNNFUSE_DEVICE void proto_atomic4(float* p, const float4& v) {
#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(p), v);
#else
  atomicAdd(p + 0, v.x);
  atomicAdd(p + 1, v.y);
  atomicAdd(p + 2, v.z);
  atomicAdd(p + 3, v.w);
#endif
}

template <int G>
GNNFUSE_DEVICE unsigned proto_group_mask() {
  if constexpr (G >= 32) {
    return 0xffffffffu;
  } else {
    const int first = static_cast<int>(threadIdx.x & 31u) & ~(G - 1);
    return ((1u << G) - 1u) << first;
  }
}

// Adds the entries [b, e) of the CSR arrays into acc (the group walks them in order, G at a time).
template <int G, int R>
GNNFUSE_DEVICE void proto_walk(float4 (&acc)[R], int b, int e, int glane, unsigned gmask, int F4, const int* __restrict__ col,
                               const float* __restrict__ val, const float* __restrict__ X) {
  for (int base = b; base < e; base += G) {
    const int p = base + glane;
    int c = 0;
    float v = 0.f;
    if (p < e) {
      c = __ldg(col + p);
      v = val ? __ldg(val + p) : 1.f;
    }
    const int cnt = e - base < G ? e - base : G;
#if defined(__CUDACC__)
#pragma unroll 4
#endif
    for (int t = 0; t < cnt; ++t) {
      const int cj = __shfl_sync(gmask, c, t, G);
      const float vj = __shfl_sync(gmask, v, t, G);
      const float* xr = X + static_cast<size_t>(cj) * static_cast<size_t>(F4) * 4u;
      GF_PROTO_UNROLL
      for (int r = 0; r < R; ++r) {
        const int f4 = glane + r * G;
        if (f4 < F4) proto_fma4(acc[r], vj, proto_load4(xr + 4 * f4));
      }
    }
  }
}

template <int G, int R>
GNNFUSE_GLOBAL void proto_rowlanes_k(int n, int F4, int long_gt, const int* __restrict__ rowptr, const int* __restrict__ col,
                                     const float* __restrict__ val, const float* __restrict__ X, float* __restrict__ Y) {
  const int glane = static_cast<int>(threadIdx.x) & (G - 1);
  const unsigned gmask = proto_group_mask<G>();
  const int row = static_cast<int>(blockIdx.x) * (kProtoBlock / G) + static_cast<int>(threadIdx.x) / G;
  if (row >= n) return;  // the whole group leaves together
  const int b = __ldg(rowptr + row), e = __ldg(rowptr + row + 1);
  float4 acc[R];
  GF_PROTO_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (e - b <= long_gt) proto_walk<G, R>(acc, b, e, glane, gmask, F4, col, val, X);
  float* yr = Y + static_cast<size_t>(row) * static_cast<size_t>(F4) * 4u;
  GF_PROTO_UNROLL
  for (int r = 0; r < R; ++r) {
    const int f4 = glane + r * G;
    if (f4 < F4) *reinterpret_cast<float4*>(yr + 4 * f4) = acc[r];
  }
}

template <int G, int R>
GNNFUSE_DEVICE void proto_flush(float4 (&acc)[R], float* Y, int row, int F4, int glane, bool plain) {
  float* yr = Y + static_cast<size_t>(row) * static_cast<size_t>(F4) * 4u;
  GF_PROTO_UNROLL
  for (int r = 0; r < R; ++r) {
    const int f4 = glane + r * G;
    if (f4 < F4) {
      if (plain) *reinterpret_cast<float4*>(yr + 4 * f4) = acc[r];
      else proto_atomic4(yr + 4 * f4, acc[r]);
    }
    acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <int G, int R>
GNNFUSE_GLOBAL void proto_poslanes_k(int n, int nnz, int F4, int chunk, int skip_le, const int* __restrict__ rowptr,
                                     const int* __restrict__ col, const float* __restrict__ val, const float* __restrict__ X,
                                     float* __restrict__ Y) {
  const int glane = static_cast<int>(threadIdx.x) & (G - 1);
  const unsigned gmask = proto_group_mask<G>();
  const long long gid = static_cast<long long>(blockIdx.x) * (kProtoBlock / G) + static_cast<long long>(threadIdx.x) / G;
  if (gid * chunk >= nnz) return;
  const int s = static_cast<int>(gid * chunk);
  const int e = nnz - s < chunk ? nnz : s + chunk;
  // the row holding entry s: the last r with rowptr[r] <= s (empty rows before it skipped)
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (__ldg(rowptr + mid) <= s) lo = mid;
    else hi = mid - 1;
  }
  int row = lo;
  float4 acc[R];
  GF_PROTO_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);
  int p = s;
  while (p < e) {
    const int rb = __ldg(rowptr + row), re = __ldg(rowptr + row + 1);
    const int q = re < e ? re : e;
    if (re - rb > skip_le) {
      proto_walk<G, R>(acc, p, q, glane, gmask, F4, col, val, X);
      proto_flush<G, R>(acc, Y, row, F4, glane, rb >= s && re <= e);
    }
    p = q;
    ++row;
  }
}

template <int G, int R>
void proto_launch(int kind, int n, int nnz, int F4, int chunk, int threshold, const int* rowptr, const int* col, const float* val,
                  const float* X, float* Y, cudaStream_t stream) {
  constexpr int per_block = kProtoBlock / G;
  if (kind == 0 || kind == 2) {
    const int long_gt = kind == 0 ? INT_MAX : threshold;
    const unsigned grid = static_cast<unsigned>((n + per_block - 1) / per_block);
    if (grid > 0)
      GNNFUSE_LAUNCH((proto_rowlanes_k<G, R>), dim3(grid), dim3(kProtoBlock), 0, stream, n, F4, long_gt, rowptr, col, val, X, Y);
  }
  if (kind == 1 || kind == 2) {
    const long long chunks = (static_cast<long long>(nnz) + chunk - 1) / chunk;
    const unsigned grid = static_cast<unsigned>((chunks + per_block - 1) / per_block);
    const int skip_le = kind == 1 ? -1 : threshold;
    if (grid > 0)
      GNNFUSE_LAUNCH((proto_poslanes_k<G, R>), dim3(grid), dim3(kProtoBlock), 0, stream, n, nnz, F4, chunk, skip_le, rowptr, col, val,
                     X, Y);
  }
}

template <int G>
void proto_launch_r(int R, int kind, int n, int nnz, int F4, int chunk, int threshold, const int* rowptr, const int* col,
                    const float* val, const float* X, float* Y, cudaStream_t stream) {
  if (R == 1) proto_launch<G, 1>(kind, n, nnz, F4, chunk, threshold, rowptr, col, val, X, Y, stream);
  else if (R == 2) proto_launch<G, 2>(kind, n, nnz, F4, chunk, threshold, rowptr, col, val, X, Y, stream);
  else proto_launch<G, 4>(kind, n, nnz, F4, chunk, threshold, rowptr, col, val, X, Y, stream);
}

}  // namespace

extern "C" {

// The lanes of a group and the register chunks per lane the prototypes use for F:
// G = min(32, F / 4) rounded up to a power of two, at least 8; R = ceil(F / (4 G)) in {1, 2, 4}.
int gf_proto_shape(int64_t F, int* out_group, int* out_chunks) {
  if (F <= 0 || F % 4 != 0 || F > 512) return fail("proto spmm: F must be a positive multiple of 4, at most 512");
  const int64_t F4 = F / 4;
  int G = 8;
  while (G < 32 && G < F4) G *= 2;
  int R = static_cast<int>((F4 + G - 1) / G);
  if (R == 3) R = 4;
  *out_group = G;
  *out_chunks = R;
  return 0;
}

// kind: 0 rowlanes, 1 poslanes (chunk entries per group), 2 hybrid (rows of length <= threshold
// by rowlanes, the others by poslanes). Y[n][F] = A @ X[m][F]; val null: ones.
int gf_proto_spmm(int kind, int64_t n, int64_t m, int64_t F, int64_t nnz, const void* rowptr, const void* col, const void* val,
                  const void* X, void* Y, int chunk, int threshold, void* stream) {
  return guarded("gf_proto_spmm", [&]() -> int {
    (void)m;
    int G = 0, R = 0;
    if (int e = gf_proto_shape(F, &G, &R)) return e;
    if (kind < 0 || kind > 2) return fail("proto spmm: kind must be 0 (rowlanes), 1 (poslanes) or 2 (hybrid)");
    if (n < 0 || nnz < 0 || n >= INT_MAX || nnz >= INT_MAX - 1024 || m * F >= (int64_t(1) << 40))
      return fail("proto spmm: 32-bit indices (n, nnz below 2^31)");
    if ((kind == 1 || kind == 2) && (chunk < 1 || chunk > (1 << 20))) return fail("proto spmm: chunk must be in [1, 2^20]");
    if (reinterpret_cast<uintptr_t>(X) % 16 != 0 || reinterpret_cast<uintptr_t>(Y) % 16 != 0)
      return fail("proto spmm: X and Y must be 16-byte aligned");
    const auto st = static_cast<cudaStream_t>(stream);
    if (kind != 0 && n > 0 && F > 0) {  // poslanes adds into Y; the hybrid's rowlanes zeroes the long rows itself
#if GF_DEVICE
      if (kind == 1)
        if (int e = check_cuda(cudaMemsetAsync(Y, 0, static_cast<size_t>(n * F) * sizeof(float), st), "cudaMemsetAsync")) return e;
#else
      if (kind == 1) std::memset(Y, 0, static_cast<size_t>(n * F) * sizeof(float));
#endif
    }
    const int n32 = static_cast<int>(n), nnz32 = static_cast<int>(nnz), F4 = static_cast<int>(F / 4);
    const auto* rp = static_cast<const int*>(rowptr);
    const auto* cl = static_cast<const int*>(col);
    const auto* vl = static_cast<const float*>(val);
    const auto* x = static_cast<const float*>(X);
    auto* y = static_cast<float*>(Y);
    if (G == 8) proto_launch_r<8>(R, kind, n32, nnz32, F4, chunk, threshold, rp, cl, vl, x, y, st);
    else if (G == 16) proto_launch_r<16>(R, kind, n32, nnz32, F4, chunk, threshold, rp, cl, vl, x, y, st);
    else proto_launch_r<32>(R, kind, n32, nnz32, F4, chunk, threshold, rp, cl, vl, x, y, st);
    return after_launch("proto spmm launch");
  });
}

}  // extern "C"

// ---------------------------------------------------------------- cuSPARSE baselines
#if GF_DEVICE
namespace {

// The cuSPARSE entry points, resolved by dlsym from the library gf_cusparse_load opened.
struct Cusparse {
  void* lib = nullptr;
  std::string path;
#define GF_CUSPARSE_FNS(X)                                                                                        \
  X(cusparseCreate) X(cusparseDestroy) X(cusparseSetStream) X(cusparseGetErrorString) X(cusparseGetVersion)     \
      X(cusparseCreateCsr) X(cusparseDestroySpMat) X(cusparseCreateDnMat) X(cusparseDestroyDnMat)                \
          X(cusparseSpMM_bufferSize) X(cusparseSpMM_preprocess) X(cusparseSpMM) X(cusparseSDDMM_bufferSize)      \
              X(cusparseSDDMM_preprocess) X(cusparseSDDMM)
#define GF_DECLARE(name) decltype(&::name) name = nullptr;
  GF_CUSPARSE_FNS(GF_DECLARE)
#undef GF_DECLARE
};

Cusparse g_cs;

int check_cs(cusparseStatus_t s, const char* what) {
  if (s == CUSPARSE_STATUS_SUCCESS) return 0;
  const char* text = g_cs.cusparseGetErrorString ? g_cs.cusparseGetErrorString(s) : "?";
  return fail(std::string(what) + ": cuSPARSE status " + std::to_string(static_cast<int>(s)) + " (" + text + ")");
}

int open_cusparse(const char* path) {
  if (g_cs.lib) return 0;
  std::string tried;
  void* lib = nullptr;
  std::string used;
  for (const char* cand : {path, "libcusparse.so.12", "libcusparse.so"}) {
    if (!cand || !*cand) continue;
    lib = dlopen(cand, RTLD_NOW | RTLD_GLOBAL);
    if (lib) {
      used = cand;
      break;
    }
    const char* e = dlerror();
    tried += std::string(" [") + cand + ": " + (e ? e : "?") + "]";
  }
  if (!lib) return fail("cuSPARSE not found; tried" + tried);
  Cusparse cs;
  cs.lib = lib;
  cs.path = used;
#define GF_RESOLVE(name)                                                                   \
  cs.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                        \
  if (!cs.name) return fail(std::string("cuSPARSE (") + used + ") lacks " #name);
  GF_CUSPARSE_FNS(GF_RESOLVE)
#undef GF_RESOLVE
  g_cs = cs;
  return 0;
}

bool cuda_types(int dtype, int itype, cudaDataType* value, cusparseIndexType_t* index) {
  if (dtype == 0) *value = CUDA_R_32F;
  else if (dtype == 1) *value = CUDA_R_64F;
  else return false;
  if (itype == 0) *index = CUSPARSE_INDEX_32I;
  else if (itype == 1) *index = CUSPARSE_INDEX_64I;
  else return false;
  return true;
}

struct CsSpmm {
  cusparseHandle_t handle = nullptr;
  cusparseSpMatDescr_t a = nullptr;
  cusparseDnMatDescr_t x = nullptr, y = nullptr;
  cusparseSpMMAlg_t alg = CUSPARSE_SPMM_ALG_DEFAULT;
  cudaDataType compute = CUDA_R_32F;
  void* buffer = nullptr;
  size_t buffer_bytes = 0;
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool preprocessed = false;
  const void* alpha() const { return compute == CUDA_R_64F ? static_cast<const void*>(&one) : static_cast<const void*>(&onef); }
  const void* beta() const { return compute == CUDA_R_64F ? static_cast<const void*>(&zero) : static_cast<const void*>(&zerof); }
  ~CsSpmm() {
    if (a) g_cs.cusparseDestroySpMat(a);
    if (x) g_cs.cusparseDestroyDnMat(x);
    if (y) g_cs.cusparseDestroyDnMat(y);
    if (handle) g_cs.cusparseDestroy(handle);
    if (buffer) cudaFree(buffer);
  }
};

struct CsSddmm {
  cusparseHandle_t handle = nullptr;
  cusparseSpMatDescr_t c = nullptr;
  cusparseDnMatDescr_t u = nullptr, v = nullptr;
  cudaDataType compute = CUDA_R_32F;
  void* buffer = nullptr;
  size_t buffer_bytes = 0;
  double one = 1, zero = 0;
  float onef = 1, zerof = 0;
  bool preprocessed = false;
  const void* alpha() const { return compute == CUDA_R_64F ? static_cast<const void*>(&one) : static_cast<const void*>(&onef); }
  const void* beta() const { return compute == CUDA_R_64F ? static_cast<const void*>(&zero) : static_cast<const void*>(&zerof); }
  ~CsSddmm() {
    if (c) g_cs.cusparseDestroySpMat(c);
    if (u) g_cs.cusparseDestroyDnMat(u);
    if (v) g_cs.cusparseDestroyDnMat(v);
    if (handle) g_cs.cusparseDestroy(handle);
    if (buffer) cudaFree(buffer);
  }
};

bool spmm_alg(int id, cusparseSpMMAlg_t* out) {
  switch (id) {
    case 0: *out = CUSPARSE_SPMM_ALG_DEFAULT; return true;
    case 1: *out = CUSPARSE_SPMM_CSR_ALG1; return true;
    case 2: *out = CUSPARSE_SPMM_CSR_ALG2; return true;
    case 3: *out = CUSPARSE_SPMM_CSR_ALG3; return true;
  }
  return false;
}

}  // namespace
#endif

extern "C" {

// Opens cuSPARSE: `path` first (a file, or null), then the sonames libcusparse.so.12 and
// libcusparse.so (found already loaded, e.g. by torch, or on the loader's path). Idempotent.
int gf_cusparse_load(const char* path) {
#if GF_DEVICE
  return guarded("gf_cusparse_load", [&]() -> int { return open_cusparse(path); });
#else
  (void)path;
  return fail("gf_cusparse_load: the emulated library has no cuSPARSE");
#endif
}

// The file (or soname) cuSPARSE was opened from, and its version (cusparseGetVersion; -1: none).
const char* gf_cusparse_path() {
#if GF_DEVICE
  return g_cs.path.c_str();
#else
  return "";
#endif
}
int gf_cusparse_version() {
#if GF_DEVICE
  if (!g_cs.lib) return -1;
  cusparseHandle_t h = nullptr;
  if (g_cs.cusparseCreate(&h) != CUSPARSE_STATUS_SUCCESS) return -1;
  int v = -1;
  g_cs.cusparseGetVersion(h, &v);
  g_cs.cusparseDestroy(h);
  return v;
#else
  return -1;
#endif
}

// A cached cuSPARSE SpMM Y = A @ X (row-major X[m][F], Y[n][F]): descriptors made once, the
// buffer allocated once (cudaMalloc), cusparseSpMM_preprocess called (its NOT_SUPPORTED
// tolerated: the algorithm has nothing to preprocess). alg: 0 CUSPARSE_SPMM_ALG_DEFAULT,
// 1 CSR_ALG1, 2 CSR_ALG2, 3 CSR_ALG3. val must not be null. The pointers are bound for good.
int gf_cusparse_spmm_create(int64_t n, int64_t m, int64_t F, int64_t nnz, void* rowptr, void* col, void* val, void* X,
                            void* Y, int dtype, int itype, int alg, void* stream, void** out_handle) {
#if GF_DEVICE
  return guarded("gf_cusparse_spmm_create", [&]() -> int {
    if (int e = open_cusparse(nullptr)) return e;
    cudaDataType value;
    cusparseIndexType_t index;
    if (!cuda_types(dtype, itype, &value, &index)) return fail("bad dtype or itype code");
    if (!val) return fail("cuSPARSE needs edge values");
    auto* h = new CsSpmm;
    auto done = [&](int e) {
      if (e) delete h;
      else *out_handle = h;
      return e;
    };
    if (!spmm_alg(alg, &h->alg)) return done(fail("alg must be 0..3"));
    h->compute = value;
    if (int e = check_cs(g_cs.cusparseCreate(&h->handle), "cusparseCreate")) return done(e);
    if (int e = check_cs(g_cs.cusparseSetStream(h->handle, static_cast<cudaStream_t>(stream)), "cusparseSetStream")) return done(e);
    if (int e = check_cs(g_cs.cusparseCreateCsr(&h->a, n, m, nnz, rowptr, col, val, index, index, CUSPARSE_INDEX_BASE_ZERO, value),
                         "cusparseCreateCsr"))
      return done(e);
    if (int e = check_cs(g_cs.cusparseCreateDnMat(&h->x, m, F, F, X, value, CUSPARSE_ORDER_ROW), "cusparseCreateDnMat(X)")) return done(e);
    if (int e = check_cs(g_cs.cusparseCreateDnMat(&h->y, n, F, F, Y, value, CUSPARSE_ORDER_ROW), "cusparseCreateDnMat(Y)")) return done(e);
    const auto nt = CUSPARSE_OPERATION_NON_TRANSPOSE;
    if (int e = check_cs(g_cs.cusparseSpMM_bufferSize(h->handle, nt, nt, h->alpha(), h->a, h->x, h->beta(), h->y, h->compute, h->alg,
                                                      &h->buffer_bytes),
                         "cusparseSpMM_bufferSize"))
      return done(e);
    if (h->buffer_bytes > 0)
      if (int e = check_cuda(cudaMalloc(&h->buffer, h->buffer_bytes), "cudaMalloc(cuSPARSE SpMM buffer)")) return done(e);
    const cusparseStatus_t s =
        g_cs.cusparseSpMM_preprocess(h->handle, nt, nt, h->alpha(), h->a, h->x, h->beta(), h->y, h->compute, h->alg, h->buffer);
    if (s != CUSPARSE_STATUS_NOT_SUPPORTED)
      if (int e = check_cs(s, "cusparseSpMM_preprocess")) return done(e);
    h->preprocessed = s == CUSPARSE_STATUS_SUCCESS;
    return done(check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cuSPARSE SpMM preprocess"));
  });
#else
  (void)n, (void)m, (void)F, (void)nnz, (void)rowptr, (void)col, (void)val, (void)X, (void)Y, (void)dtype, (void)itype, (void)alg,
      (void)stream, (void)out_handle;
  return fail("gf_cusparse_spmm_create: the emulated library has no cuSPARSE");
#endif
}

int gf_cusparse_spmm_run(void* handle, void* stream) {
#if GF_DEVICE
  return guarded("gf_cusparse_spmm_run", [&]() -> int {
    auto* h = static_cast<CsSpmm*>(handle);
    if (!h) return fail("null handle");
    if (int e = check_cs(g_cs.cusparseSetStream(h->handle, static_cast<cudaStream_t>(stream)), "cusparseSetStream")) return e;
    const auto nt = CUSPARSE_OPERATION_NON_TRANSPOSE;
    if (int e = check_cs(g_cs.cusparseSpMM(h->handle, nt, nt, h->alpha(), h->a, h->x, h->beta(), h->y, h->compute, h->alg, h->buffer),
                         "cusparseSpMM"))
      return e;
    return after_launch("cusparseSpMM launch");
  });
#else
  (void)handle, (void)stream;
  return fail("gf_cusparse_spmm_run: the emulated library has no cuSPARSE");
#endif
}

// Buffer bytes and whether preprocessing ran (1) or the algorithm has none (0); -1: bad handle.
int64_t gf_cusparse_spmm_buffer_bytes(void* handle) {
#if GF_DEVICE
  return handle ? static_cast<int64_t>(static_cast<CsSpmm*>(handle)->buffer_bytes) : -1;
#else
  (void)handle;
  return -1;
#endif
}
int gf_cusparse_spmm_preprocessed(void* handle) {
#if GF_DEVICE
  return handle ? static_cast<CsSpmm*>(handle)->preprocessed : -1;
#else
  (void)handle;
  return -1;
#endif
}

void gf_cusparse_spmm_destroy(void* handle) {
#if GF_DEVICE
  delete static_cast<CsSpmm*>(handle);
#else
  (void)handle;
#endif
}

// A cached cuSPARSE SDDMM: E (the values of a CSR matrix with A's pattern, CSR order) =
// <U[i], V[j]> for each entry (i,j), U[n][K] and V[m][K] row-major (V is passed as the
// column-major K x m matrix V^T). CUSPARSE_SDDMM_ALG_DEFAULT; alpha 1, beta 0 (A's values are not
// used: an unweighted SDDMM).
int gf_cusparse_sddmm_create(int64_t n, int64_t m, int64_t K, int64_t nnz, void* rowptr, void* col, void* E, void* U, void* V,
                             int dtype, int itype, void* stream, void** out_handle) {
#if GF_DEVICE
  return guarded("gf_cusparse_sddmm_create", [&]() -> int {
    if (int e = open_cusparse(nullptr)) return e;
    cudaDataType value;
    cusparseIndexType_t index;
    if (!cuda_types(dtype, itype, &value, &index)) return fail("bad dtype or itype code");
    auto* h = new CsSddmm;
    auto done = [&](int e) {
      if (e) delete h;
      else *out_handle = h;
      return e;
    };
    h->compute = value;
    if (int e = check_cs(g_cs.cusparseCreate(&h->handle), "cusparseCreate")) return done(e);
    if (int e = check_cs(g_cs.cusparseSetStream(h->handle, static_cast<cudaStream_t>(stream)), "cusparseSetStream")) return done(e);
    if (int e = check_cs(g_cs.cusparseCreateCsr(&h->c, n, m, nnz, rowptr, col, E, index, index, CUSPARSE_INDEX_BASE_ZERO, value),
                         "cusparseCreateCsr"))
      return done(e);
    if (int e = check_cs(g_cs.cusparseCreateDnMat(&h->u, n, K, K, U, value, CUSPARSE_ORDER_ROW), "cusparseCreateDnMat(U)")) return done(e);
    if (int e = check_cs(g_cs.cusparseCreateDnMat(&h->v, K, m, K, V, value, CUSPARSE_ORDER_COL), "cusparseCreateDnMat(V^T)")) return done(e);
    const auto nt = CUSPARSE_OPERATION_NON_TRANSPOSE;
    if (int e = check_cs(g_cs.cusparseSDDMM_bufferSize(h->handle, nt, nt, h->alpha(), h->u, h->v, h->beta(), h->c, h->compute,
                                                       CUSPARSE_SDDMM_ALG_DEFAULT, &h->buffer_bytes),
                         "cusparseSDDMM_bufferSize"))
      return done(e);
    if (h->buffer_bytes > 0)
      if (int e = check_cuda(cudaMalloc(&h->buffer, h->buffer_bytes), "cudaMalloc(cuSPARSE SDDMM buffer)")) return done(e);
    const cusparseStatus_t s = g_cs.cusparseSDDMM_preprocess(h->handle, nt, nt, h->alpha(), h->u, h->v, h->beta(), h->c, h->compute,
                                                             CUSPARSE_SDDMM_ALG_DEFAULT, h->buffer);
    if (s != CUSPARSE_STATUS_NOT_SUPPORTED)
      if (int e = check_cs(s, "cusparseSDDMM_preprocess")) return done(e);
    h->preprocessed = s == CUSPARSE_STATUS_SUCCESS;
    return done(check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cuSPARSE SDDMM preprocess"));
  });
#else
  (void)n, (void)m, (void)K, (void)nnz, (void)rowptr, (void)col, (void)E, (void)U, (void)V, (void)dtype, (void)itype, (void)stream,
      (void)out_handle;
  return fail("gf_cusparse_sddmm_create: the emulated library has no cuSPARSE");
#endif
}

int gf_cusparse_sddmm_run(void* handle, void* stream) {
#if GF_DEVICE
  return guarded("gf_cusparse_sddmm_run", [&]() -> int {
    auto* h = static_cast<CsSddmm*>(handle);
    if (!h) return fail("null handle");
    if (int e = check_cs(g_cs.cusparseSetStream(h->handle, static_cast<cudaStream_t>(stream)), "cusparseSetStream")) return e;
    const auto nt = CUSPARSE_OPERATION_NON_TRANSPOSE;
    if (int e = check_cs(g_cs.cusparseSDDMM(h->handle, nt, nt, h->alpha(), h->u, h->v, h->beta(), h->c, h->compute,
                                            CUSPARSE_SDDMM_ALG_DEFAULT, h->buffer),
                         "cusparseSDDMM"))
      return e;
    return after_launch("cusparseSDDMM launch");
  });
#else
  (void)handle, (void)stream;
  return fail("gf_cusparse_sddmm_run: the emulated library has no cuSPARSE");
#endif
}

void gf_cusparse_sddmm_destroy(void* handle) {
#if GF_DEVICE
  delete static_cast<CsSddmm*>(handle);
#else
  (void)handle;
#endif
}

}  // extern "C"
