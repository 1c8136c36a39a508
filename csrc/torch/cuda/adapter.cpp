// The support of the generated CUDA adapters (adapter.h): the device guard, the cached graph
// statistics, the launch (decision, workspace, stream, dense-product hook) and the forcing of the
// environment. Built into libgnnfuse when CUDA is (GNNFUSE_CUDA), and with -DGNNFUSE_CUDA_EMULATED
// into libgnnfuse_cuda_emu.so (CPU tensors, the kernels run by the SIMT emulator).
#include "torch/cuda/adapter.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/library.h>

#if !defined(GNNFUSE_CUDA_EMULATED)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "runtime/cpu.h"
#include "torch/checks.h"
#include "torch/weak_cache.h"

#if defined(GNNFUSE_CUDA_EMULATED)
#include "cuda/emu/stats.h"  // (not cuda/emu/simt_emu.h: its GNNFUSE_UNROLL is the emulator's)
#endif

namespace gnnfuse::cuda_adapter {

namespace rc = runtime::cuda;

#if defined(GNNFUSE_CUDA_EMULATED)
DeviceScope::DeviceScope(const at::Tensor&) {}
#else
DeviceScope::DeviceScope(const at::Tensor& t) : guard_(t.device()) {}
#endif

// ---------------------------------------------------------------- graph statistics
namespace {

// The longest row of the graphs (and their CSC views) seen last, keyed by their row pointers.
cache::WeakKeyedCache<int64_t>& stats_cache() {
  static cache::WeakKeyedCache<int64_t> cache(64);
  return cache;
}
std::atomic<int64_t> stats_computed{0};

// The longest row: one reduction over the row pointers' differences (on a GPU, one sync).
int64_t compute_max_row(const at::Tensor& ptr) {
  const int64_t n = ptr.numel();
  if (n <= 1) return 0;
  return (ptr.slice(0, 1, n) - ptr.slice(0, 0, n - 1)).max().item<int64_t>();
}

}  // namespace

rc::GraphStats graph_stats(const at::Tensor& ptr, const at::Tensor& idx) {
  rc::GraphStats g;
  g.rows = std::max<int64_t>(0, ptr.numel() - 1);
  g.nnz = idx.size(0);
  if (g.rows == 0) return g;
  if (const std::optional<int64_t> hit = stats_cache().lookup("max_row", {ptr}, {})) {
    g.max_row = *hit;
    return g;
  }
  // While a CUDA graph is captured the longest row cannot be read back: its bound, nnz (the
  // decision then takes the nonzero-balanced forms, right for any graph), not remembered.
  if (checks::capturing(ptr)) {
    g.max_row = g.nnz;
    return g;
  }
  g.max_row = compute_max_row(ptr);
  ++stats_computed;
  stats_cache().store("max_row", {ptr}, {}, g.max_row);
  return g;
}

int64_t graph_stats_computed() {
  return stats_computed.load();
}

// ---------------------------------------------------------------- CUDA graph capture
namespace {

#if defined(GNNFUSE_CUDA_EMULATED)
// gnnfuse::_cuda_simulate_capture, or GNNFUSE_SIMULATE_CAPTURE=1 from the start (tests).
std::atomic<bool> simulated_capture{[] {
  const char* v = std::getenv("GNNFUSE_SIMULATE_CAPTURE");
  return v != nullptr && std::string(v) == "1";
}()};
bool stream_capturing(const at::Tensor&) { return simulated_capture.load(); }
#else
bool stream_capturing(const at::Tensor& like) {
  if (!like.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(like.device().index()).stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}
#endif

// The checks' probe (torch/checks.h), installed when the adapters load.
[[maybe_unused]] const bool capture_probe_installed = (checks::set_capture_probe(&stream_capturing), true);

}  // namespace

// ---------------------------------------------------------------- forcing from the environment
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

[[noreturn]] void bad_env(const char* name, const std::string& value, const char* expected) {
  TORCH_CHECK(false, "gnnfuse: ", name, "='", value, "': expected ", expected);
  std::abort();  // not reached
}

bool offers(const rc::Request& req, rc::Variant v) {
  const rc::Variant kernels = v == rc::Variant::WarpPerRow ? rc::Variant::RowSplit : v;
  for (auto& o : req.variants)
    if (o.variant == kernels && !(req.deterministic && o.atomic)) return true;
  return false;
}

// GNNFUSE_CUDA_FORCE_VARIANT and _GROUP on a request. A forced variant the op does not offer is
// ignored (most ops offer a few of the eight); a forced atomic form (pos_split_atomic,
// pos_lanes_atomic) under deterministic algorithms runs its deterministic form.
void apply_forcing(rc::Request& req) {
  if (const char* v = env("GNNFUSE_CUDA_FORCE_VARIANT")) {
    rc::Variant variant;
    if (!rc::parse_variant(v, &variant))
      bad_env("GNNFUSE_CUDA_FORCE_VARIANT", v,
              "row_split, warp_per_row, pos_split, pos_split_atomic, lanes, reg_lanes, pos_lanes or pos_lanes_atomic");
    if (req.deterministic && variant == rc::Variant::PosSplitAtomic) variant = rc::Variant::PosSplit;
    if (req.deterministic && variant == rc::Variant::PosLanesAtomic) variant = rc::Variant::PosLanes;
    if (offers(req, variant)) req.force_variant = static_cast<int>(variant);
  }
  const int group = env_int("GNNFUSE_CUDA_FORCE_GROUP", "1, 2, 4, 8, 16 or 32");
  if (group >= 0) {
    if (group < 1 || group > rc::kWarp || (group & (group - 1)) != 0)
      bad_env("GNNFUSE_CUDA_FORCE_GROUP", env("GNNFUSE_CUDA_FORCE_GROUP"), "1, 2, 4, 8, 16 or 32");
    req.force_group = group;
  }
}

// ---------------------------------------------------------------- the dense-product hook
struct MatmulContext {
  at::TensorOptions options;  // the device of the op's tensors
};

at::ScalarType scalar_type_of(int dtype) {
  switch (static_cast<runtime::DType>(dtype)) {
    case runtime::DType::Float64: return at::kDouble;
    case runtime::DType::BFloat16: return at::kBFloat16;
    case runtime::DType::Float16: return at::kHalf;
    default: return at::kFloat;
  }
}

// C (+)= op(A) op(B) (rc::MatmulCall, row-major) with at::mm / addmm on views of the kernels'
// buffers (from_blob: no copy; on the current stream, as the kernels). Operands of the
// accumulation type are read as it; mixed operands are multiplied in it.
void matmul_hook(void* ctx, const rc::MatmulCall& c, int dtype) {
  const at::TensorOptions& o = static_cast<const MatmulContext*>(ctx)->options;
  const at::ScalarType st = scalar_type_of(dtype);
  const at::ScalarType acc = st == at::kHalf || st == at::kBFloat16 ? at::kFloat : st;
  if (c.m == 0 || c.n == 0) return;
  auto view = [&](const void* p, int64_t rows, int64_t cols, int64_t ld, bool trans, bool is_acc) {
    const at::TensorOptions to = o.dtype(is_acc ? acc : st);
    if (!trans) return at::from_blob(const_cast<void*>(p), {rows, cols}, {ld, 1}, to);
    return at::from_blob(const_cast<void*>(p), {cols, rows}, {ld, 1}, to).t();
  };
  at::Tensor out = at::from_blob(c.c, {c.m, c.n}, {c.ldc, 1}, o.dtype(c.c_acc ? acc : st));
  if (c.k == 0) {
    if (!c.accumulate) out.zero_();
    return;
  }
  const at::Tensor a = view(c.a, c.m, c.k, c.lda, c.a_trans, c.a_acc);
  const at::Tensor b = view(c.b, c.k, c.n, c.ldb, c.b_trans, c.b_acc);
  if (a.scalar_type() == out.scalar_type() && b.scalar_type() == out.scalar_type()) {
    if (c.accumulate) out.addmm_(a, b);
    else at::mm_out(out, a, b);
    return;
  }
  const at::Tensor p = at::mm(a.to(acc), b.to(acc));
  if (c.accumulate) out.add_(p);
  else out.copy_(p);
}

std::mutex counts_mutex;
std::map<std::string, int64_t> counts;

}  // namespace

int env_int(const char* name, const char* expected) {
  const char* v = env(name);
  if (!v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 0 || n > INT32_MAX) bad_env(name, v, expected);
  return static_cast<int>(n);
}

bool deterministic() { return at::globalContext().deterministicAlgorithms(); }

int forced_lowering(int lowerings) {
  const int l = env_int("GNNFUSE_CUDA_FORCE_LOWERING", "a lowering index (0, 1, ...)");
  return l >= 0 && l < lowerings ? l : -1;
}

namespace {

using Run = std::function<void(const rc::LaunchConfig&, const rc::Env&)>;

// The current stream on `like`'s device, as Env::stream holds it (emulated: none).
void* current_stream(const at::Tensor& like) {
#if !defined(GNNFUSE_CUDA_EMULATED)
  return c10::cuda::getCurrentCUDAStream(like.device().index()).stream();
#else
  (void)like;
  return nullptr;
#endif
}

// One launch of a decided config: the workspace as one byte tensor from the caching allocator,
// aligned inside it, the dense-product hook, the current stream.
void run_config(const char* op, const at::Tensor& like, const rc::LaunchConfig& cfg, const Run& run) {
  const at::Tensor workspace = at::empty({cfg.workspace_bytes + rc::kWorkspaceAlign}, like.options().dtype(at::kByte));
  const auto base = reinterpret_cast<uintptr_t>(workspace.mutable_data_ptr());
  MatmulContext mm{like.options()};
  rc::Env env;
  env.workspace = reinterpret_cast<void*>((base + rc::kWorkspaceAlign - 1) / rc::kWorkspaceAlign * rc::kWorkspaceAlign);
  env.matmul = matmul_hook;
  env.matmul_ctx = &mm;
  env.stream = current_stream(like);
  run(cfg, env);
#if !defined(GNNFUSE_CUDA_EMULATED)
  C10_CUDA_KERNEL_LAUNCH_CHECK();
#endif
  std::ostringstream key;
  key << op << " " << rc::to_string(cfg.variant) << " " << (cfg.kernels.empty() ? 0 : cfg.kernels[0].group) << " " << cfg.lowering;
  count_launch(key.str());
}

// ---------------------------------------------------------------- autotune
// GNNFUSE_CUDA_AUTOTUNE=1 (or gnnfuse::_cuda_set_autotune(True)), not under deterministic
// algorithms (whose results must repeat bitwise from run to run; a choice by timing would not):
// the first call of an op for a (graph statistics, extents and alignments, dtype, index type,
// lowering) key times every variant the op offers there (RowSplit also as WarpPerRow), each
// decided with its default sizes, once to warm up and kAutotuneReps times;
// the fastest (median) is remembered and forced for the key's later calls. Timed on the stream
// by CUDA events (the emulated library: by the host clock). The tuning call's own result is the
// winner's: it runs last. Graphs with the same statistics share a choice; a choice that does not
// fit a later call of its key (decide refuses it) gives way to the decision.
constexpr int kAutotuneReps = 3;

std::atomic<int> autotune_flag{-1};  // -1: from the environment at first use

bool autotune_on() {
  int v = autotune_flag.load();
  if (v < 0) {
    const char* e = env("GNNFUSE_CUDA_AUTOTUNE");
    v = e && std::string(e) == "1" ? 1 : 0;
    autotune_flag.store(v);
  }
  return v == 1;
}

std::mutex tune_mutex;
std::map<std::string, std::pair<int, double>> tuned;  // key -> (variant, median ms)

std::string tune_key(const char* op, const rc::Request& req) {
  std::ostringstream k;
  k << op << " rows=" << req.graph.rows << " nnz=" << req.graph.nnz << " max_row=" << req.graph.max_row << " lowering=" << req.lowering
    << " bytes=" << req.scalar_bytes << "/" << req.index_bytes << " det=" << req.deterministic << " extents=";
  for (auto& v : req.variants)  // the extents, and the alignments that decide vector loads and register forms
    for (auto& kr : v.kernels) k << kr.rows << "x" << kr.tile_extent << (kr.vector_ok ? "a" : "u") << ",";
  return k.str();
}

// Milliseconds of one run of cfg (after the work queued before it).
double time_config(const char* op, const at::Tensor& like, const rc::LaunchConfig& cfg, const Run& run) {
#if defined(GNNFUSE_CUDA_EMULATED)
  const auto t0 = std::chrono::steady_clock::now();
  run_config(op, like, cfg, run);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
#else
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(like.device().index()).stream();
  cudaEvent_t start, stop;
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&stop));
  C10_CUDA_CHECK(cudaEventRecord(start, stream));
  run_config(op, like, cfg, run);
  C10_CUDA_CHECK(cudaEventRecord(stop, stream));
  C10_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  C10_CUDA_CHECK(cudaEventDestroy(start));
  C10_CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
#endif
}

// The variant to force for this call (remembered per key), or -1: nothing to choose from.
int tuned_variant(const char* op, const at::Tensor& like, const rc::Request& req, const Run& run) {
  const std::string key = tune_key(op, req);
  {
    std::lock_guard<std::mutex> lock(tune_mutex);
    auto it = tuned.find(key);
    if (it != tuned.end()) return it->second.first;
  }
  std::vector<rc::Variant> candidates;
  for (auto& v : req.variants) {
    candidates.push_back(v.variant);
    if (v.variant == rc::Variant::RowSplit) candidates.push_back(rc::Variant::WarpPerRow);
  }
  if (candidates.size() < 2) return -1;
  int best = -1;
  double best_ms = 0;
  for (rc::Variant v : candidates) {
    rc::Request r = req;
    r.force_variant = static_cast<int>(v);
    rc::LaunchConfig cfg;
    try {
      cfg = rc::decide(r);
    } catch (const std::invalid_argument&) {
      continue;
    }
    run_config(op, like, cfg, run);  // warm up
    std::vector<double> ms;
    for (int k = 0; k < kAutotuneReps; ++k) ms.push_back(time_config(op, like, cfg, run));
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    if (best < 0 || median < best_ms) {
      best = static_cast<int>(v);
      best_ms = median;
    }
  }
  std::lock_guard<std::mutex> lock(tune_mutex);
  tuned[key] = {best, best_ms};
  return best;
}

}  // namespace

void set_autotune(bool on) { autotune_flag.store(on ? 1 : 0); }

std::map<std::string, std::string> autotune_table() {
  std::lock_guard<std::mutex> lock(tune_mutex);
  std::map<std::string, std::string> out;
  for (auto& [k, v] : tuned) {
    std::ostringstream s;
    s << (v.first < 0 ? "decision" : rc::to_string(static_cast<rc::Variant>(v.first))) << " " << v.second << " ms";
    out[k] = s.str();
  }
  return out;
}

void launch(const char* op, const at::Tensor& like, rc::Request req,
            const std::function<void(const rc::LaunchConfig&, const rc::Env&)>& run) {
  req.deterministic = at::globalContext().deterministicAlgorithms();
  (void)backend();  // a bad GNNFUSE_CUDA_BACKEND raises in every op, not only in those cuSPARSE takes
  apply_forcing(req);
  // Not under deterministic algorithms: variants free of atomics still sum in different orders,
  // and a choice by timing would differ from run to run.
  rc::LaunchConfig cfg;
  if (req.force_variant < 0 && !req.deterministic && autotune_on() && !checks::capturing(like)) {  // (timing synchronises)
    rc::Request tuned_req = req;
    tuned_req.force_variant = tuned_variant(op, like, req, run);
    try {
      cfg = rc::decide(tuned_req);
    } catch (const std::invalid_argument&) {  // the choice does not fit this call: the decision
      cfg = rc::decide(req);
    }
  } else {
    cfg = rc::decide(req);
  }
  // Deterministic algorithms asked for, and the op has only atomic forms here: PyTorch's rule (an
  // error, or a warning under warn_only).
  if (cfg.nondeterministic) at::globalContext().alertNotDeterministic((std::string("gnnfuse::") + op + " on CUDA").c_str());
  run_config(op, like, cfg, run);
}

namespace {

// The bounds of the List and Shared bins and the Dense ratio: the kernels' (runtime/cuda_launch.h),
// or from GNNFUSE_CUDA_PATTERN_BINS="<list>,<shared>[,<dense ratio>]" (the bounds only lowered,
// the ratio set, 0 for no Dense bin; tests: every bin on small graphs).
struct PatternBounds {
  int64_t list = rc::kPatternListSlots, shared = rc::kPatternSharedSlots, dense = rc::kPatternDenseRatio;
};

PatternBounds pattern_bounds() {
  PatternBounds b;
  if (const char* e = env("GNNFUSE_CUDA_PATTERN_BINS")) {
    long long v[3] = {0, 0, b.dense};
    int end = 0;
    const int got = std::sscanf(e, "%lld,%lld%n,%lld%n", &v[0], &v[1], &end, &v[2], &end);
    if (got < 2 || e[end] != '\0' || v[0] < 0 || v[1] < 0 || v[2] < 0)
      bad_env("GNNFUSE_CUDA_PATTERN_BINS", e, "<list>,<shared>[,<dense ratio>]: slot bounds and a ratio, e.g. 64,4096,16");
    b.list = std::min<int64_t>(b.list, v[0]);
    b.shared = std::min<int64_t>(b.shared, v[1]);
    b.dense = v[2];
  }
  return b;
}

// Cuts [0, n) into chunks whose tables (offsets o[0 .. n], running sums) fit `budget` (a longer
// row alone); returns the cuts and the largest chunk's table.
std::pair<std::vector<int64_t>, int64_t> chunks(const int64_t* o, int64_t n, int64_t budget) {
  std::vector<int64_t> cuts{0};
  int64_t table = 0;
  for (int64_t r = 0; r < n;) {
    int64_t r1 = static_cast<int64_t>(std::upper_bound(o + r + 1, o + n + 1, o[r] + budget) - o) - 1;
    if (r1 <= r) r1 = r + 1;
    table = std::max(table, o[r1] - o[r]);
    cuts.push_back(r1);
    r = r1;
  }
  return {cuts, table};
}

// The smallest chunk budget (table elements): below it, more launches would cost more than the
// memory they save.
constexpr int64_t kPatternBudgetFloor = int64_t(1) << 16;

}  // namespace

// The workspace stays within the sizes of the first operand's CSR and of the output's (issue 26:
// at most 2 x (A + output), measured by tests/python/test_cuda_emulated.py): no [rows, bins]
// comparisons; the bins listed only over the rows with products (at most min(nnz(A),
// nnz(output)) of them); the Global and Dense tables in chunks of max(64K, nnz(A) + rows)
// elements (a longer row alone); the slots' memory reused for the sizes, scanned in place.
std::pair<at::Tensor, at::Tensor> computed_pattern(const char* op, const char* index_arg, const at::Tensor& index, int64_t rows, int64_t cols,
                                                   int64_t operand_entries, const PatternPasses& passes) {
  using rc::PatternBin;
  rc::Env on_stream;
  on_stream.stream = current_stream(index);
  const at::TensorOptions longs = index.options().dtype(at::kLong);
  if (rows == 0) return {at::zeros({1}, longs), at::empty({0}, index.options())};
  at::Tensor slots = at::zeros({rows + 1}, longs);
  passes.slots(slots.mutable_data_ptr<int64_t>(), on_stream);
  const at::Tensor s = slots.narrow(0, 1, rows);
  // Each row's bin as a code: 0 no products (not listed), 1 List, 2 + c the Shared rows of
  // class[c] slots (the powers of two in (list, shared]: each class launched apart with shared
  // memory for its own sets, so that a block of 128-slot rows is not sized by the bin's one
  // 4096-slot row: more blocks resident per SM), then Global, then Dense.
  const PatternBounds bounds = pattern_bounds();
  std::vector<int64_t> edges{0, bounds.list};
  for (int64_t v = 2; v <= bounds.shared; v *= 2)
    if (v > bounds.list) edges.push_back(v);
  const int64_t n_classes = static_cast<int64_t>(edges.size()) - 2, kGlobal = 2 + n_classes, kDense = kGlobal + 1;
  at::Tensor order, offsets;
  std::vector<int64_t> begin(kDense + 2, 0);  // the listed rows of code c: order[begin[c] .. begin[c + 1])
  int64_t total = 0;                         // the Global rows' slots
  {
    at::Tensor code = at::bucketize(s, at::tensor(edges, at::kLong).to(index.device()), /*out_int32=*/true);  // (edges below the slots)
    if (cols > 0 && bounds.dense > 0)
      code.masked_fill_((code == kGlobal).logical_and_(s >= (cols + bounds.dense - 1) / bounds.dense), kDense);  // cols <= ratio * s
    const at::Tensor listed = at::nonzero(code).view({-1});  // the rows with products (a synchronisation)
    auto [by_code, perm] = at::sort(code.index_select(0, listed), /*stable=*/std::optional<bool>(true), 0);
    code.reset();
    order = listed.index_select(0, perm);
    perm.reset();
    const int64_t k = order.numel();
    // Where each code's rows begin, and the Global rows' running sum of slots (zero before them).
    const at::Tensor starts = at::searchsorted(by_code, at::arange(1, kDense + 2, by_code.options()));
    const at::Tensor running = at::where(by_code == kGlobal, s.index_select(0, order), 0).cumsum(0);
    by_code.reset();
    const at::Tensor stats = at::cat({starts, k > 0 ? running.narrow(0, k - 1, 1) : at::zeros({1}, longs)}).cpu();  // one synchronisation
    const int64_t* st = stats.const_data_ptr<int64_t>();
    for (int64_t c = 1; c <= kDense + 1; ++c) begin[c] = st[c - 1];
    total = st[kDense + 1];
    const int64_t g0 = begin[kGlobal], n_global = begin[kGlobal + 1] - g0;
    offsets = at::zeros({n_global + 1}, longs);
    if (n_global > 0) offsets.narrow(0, 1, n_global).copy_(running.narrow(0, g0, n_global));
  }
  auto count = [&](int64_t c) { return begin[c + 1] - begin[c]; };
  const int64_t n_global = count(kGlobal), n_dense = count(kDense);
  const int64_t* listed = order.const_data_ptr<int64_t>();
  int64_t budget = std::max<int64_t>(kPatternBudgetFloor, operand_entries + rows);
  if (const char* e = env("GNNFUSE_CUDA_PATTERN_BUDGET")) budget = std::max<int64_t>(1, std::atoll(e));  // tests: force chunks
  // The Global rows' tables: their slots' running sum, in chunks that fit the budget.
  std::vector<int64_t> cuts{0, n_global};
  int64_t table = total;
  if (total > budget) {
    const at::Tensor host = offsets.cpu();
    std::tie(cuts, table) = chunks(host.const_data_ptr<int64_t>(), n_global, budget);
  }
  at::Tensor sets = at::empty({n_global > 0 ? table : 0}, index.options());
  // The Dense rows' flags: `words` per row, as many rows per chunk as fit the budget.
  const int64_t words = cols > 0 ? (cols + 31) / 32 : 0;
  const int64_t per_chunk = n_dense > 0 ? std::min<int64_t>(n_dense, std::max<int64_t>(1, budget / words)) : 0;
  at::Tensor flags = at::empty({per_chunk * words}, index.options().dtype(at::kInt));
  const int64_t grid = env_int("GNNFUSE_CUDA_PATTERN_GRID", "a count of blocks");  // tests: blocks loop over rows (-1 unset: none)
  auto run = [&](int64_t* out_rowptr, void* col) {
    if (count(1) > 0) passes.rows(PatternBin::List, listed, begin[1], begin[2], nullptr, 0, grid, nullptr, out_rowptr, col, on_stream);
    for (int64_t c = 0; c < n_classes; ++c)
      if (count(2 + c) > 0)
        passes.rows(PatternBin::Shared, listed, begin[2 + c], begin[3 + c], nullptr, edges[2 + c], grid, nullptr, out_rowptr, col, on_stream);
    if (n_global > 0)
      for (size_t c = 1; c < cuts.size(); ++c)
        passes.rows(PatternBin::Global, listed + begin[kGlobal], cuts[c - 1], cuts[c], offsets.const_data_ptr<int64_t>(), 0, grid,
                    sets.mutable_data_ptr(), out_rowptr, col, on_stream);
    for (int64_t t = 0; t < n_dense; t += per_chunk)
      passes.rows(PatternBin::Dense, listed + begin[kDense], t, std::min(n_dense, t + per_chunk), nullptr, words, grid, flags.mutable_data_ptr(),
                  out_rowptr, col, on_stream);
  };
  // The sizes in the slots' memory (the row passes read their slots from the bins: the Shared
  // classes' counts, the Global offsets), then their running sum in place: the row pointers.
  at::Tensor rowptr = slots.zero_();
  run(rowptr.mutable_data_ptr<int64_t>(), nullptr);
#if !defined(GNNFUSE_CUDA_EMULATED)
  C10_CUDA_KERNEL_LAUNCH_CHECK();  // (a failed launch of the sizes pass would read as empty rows)
#endif
  rowptr.cumsum_(0);
  const int64_t nnz = rowptr[rows].item<int64_t>();
  checks::fits_index(op, index_arg, index.scalar_type(), nnz);
  at::Tensor col = at::empty({nnz}, index.options());
  run(rowptr.mutable_data_ptr<int64_t>(), col.mutable_data_ptr());
#if !defined(GNNFUSE_CUDA_EMULATED)
  C10_CUDA_KERNEL_LAUNCH_CHECK();
#endif
  count_launch(std::string(op) + " pattern " + std::to_string(cuts.size() - 1) + " 0");
  const char* names[] = {"list", "shared", "global", "dense"};
  const int64_t bin_rows[] = {count(1), begin[kGlobal] - begin[2], n_global, n_dense};
  for (int b = 0; b < 4; ++b)
    if (bin_rows[b] > 0) count_launch(std::string(op) + " bin " + names[b]);  // (not "pattern ": the key above counts calls)
  for (int64_t c = 0; c < n_classes; ++c)
    if (count(2 + c) > 0) count_launch(std::string(op) + " shared slots " + std::to_string(edges[2 + c]));
  return {rowptr, col};
}

std::map<std::string, int64_t> launch_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex);
  return counts;
}

void count_launch(const std::string& key) {
  std::lock_guard<std::mutex> lock(counts_mutex);
  ++counts[key];
}

}  // namespace gnnfuse::cuda_adapter

namespace {

std::string launch_counts_text() {
  std::ostringstream s;
  for (auto& [key, n] : gnnfuse::cuda_adapter::launch_counts()) s << key << " " << n << "\n";
  return s.str();
}

int64_t graph_stats_computed_op() { return gnnfuse::cuda_adapter::graph_stats_computed(); }

std::string autotune_table_text() {
  std::ostringstream s;
  for (auto& [key, choice] : gnnfuse::cuda_adapter::autotune_table()) s << key << " -> " << choice << "\n";
  return s.str();
}

void set_autotune_op(bool on) { gnnfuse::cuda_adapter::set_autotune(on); }

#if defined(GNNFUSE_CUDA_EMULATED)
// Tests: every later call behaves as if its stream were being captured into a CUDA graph.
void simulate_capture_op(bool on) { gnnfuse::cuda_adapter::simulated_capture.store(on); }
// Tests: the emulator's ldmatrix bank conflicts so far (simt::ldmatrix_bank_conflicts).
int64_t ldmatrix_bank_conflicts_op() { return static_cast<int64_t>(gnnfuse::simt::ldmatrix_bank_conflicts()); }
// Tests: the emulator's staged loads so far, (warp load instructions, extra wavefronts of their bank
// conflicts) (simt::staged_load_stats).
std::tuple<int64_t, int64_t> staged_load_stats_op() {
  const auto s = gnnfuse::simt::staged_load_stats();
  return {static_cast<int64_t>(s.loads), static_cast<int64_t>(s.extra_wavefronts)};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {
  m.def("_cuda_launch_counts() -> str", &launch_counts_text);
  m.def("_cuda_graph_stats_computed() -> int", &graph_stats_computed_op);
  m.def("_cuda_autotune_table() -> str", &autotune_table_text);
  m.def("_cuda_set_autotune(bool on) -> ()", &set_autotune_op);
#if defined(GNNFUSE_CUDA_EMULATED)
  m.def("_cuda_simulate_capture(bool on) -> ()", &simulate_capture_op);
  m.def("_cuda_emu_ldmatrix_bank_conflicts() -> int", &ldmatrix_bank_conflicts_op);
  m.def("_cuda_emu_staged_load_stats() -> (int, int)", &staged_load_stats_op);
#endif
}
