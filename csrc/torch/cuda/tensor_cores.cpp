// The Tensor-Core SpMM of the CUDA adapters (tensor_cores.h): the mode, the condensed view of a
// sparse pattern (built with ATen on the operands' device, cached), the choice and the launch of
// the op's generated kernel. Built into libgnnfuse with CUDA and into libgnnfuse_cuda_emu.so
// (GNNFUSE_CUDA_EMULATED: CPU tensors, the kernel run by the SIMT emulator).
#include "torch/cuda/tensor_cores.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/library.h>

#if !defined(GNNFUSE_CUDA_EMULATED)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "cuda/tc_spmm.h"
#include "gnnfuse/graph.h"
#include "torch/checks.h"
#include "torch/cuda/adapter.h"
#include "torch/weak_cache.h"

namespace gnnfuse::cuda_adapter {

namespace {

TensorCores initial_mode() {
  const char* v = std::getenv("GNNFUSE_CUDA_TENSOR_CORES");
  if (v == nullptr || *v == '\0') return TensorCores::Auto;
  return parse_tensor_cores(v);  // a bad value raises at the first CUDA SpMM
}

std::atomic<int> mode_{-1};  // -1: not read yet

// ---------------------------------------------------------------- the condensed view
struct View {
  int64_t windows = 0, blocks = 0, nnz = 0, pairs = 0, k = 0;
  at::Tensor block_ptr, block_cols, entry_ptr, entry_place, entry_src;  // tc_spmm.h
#if !defined(GNNFUSE_CUDA_EMULATED)
  c10::StreamId stream = 0;  // the stream it was built on
#endif
  // Entries per condensed column: how many times a row of x gathered once is used.
  double reuse() const { return pairs == 0 ? 0.0 : double(nnz) / double(pairs); }
  // The rows form's view instead (seed 004; cuda/tc_spmm.h): op(A) as a CSR (row_src undefined
  // where op(A) = A: the entries' own order) and its rows by bucket.
  at::Tensor row_ptr, row_cols, row_src, bucket_rows;
  int64_t bucket_first[cuda::kTcRowBuckets + 1] = {};
};

// The views built last, keyed by the identity (held weakly), data and version of both CSR
// arrays (torch/weak_cache.h). A view a CUDA graph captured is pinned: replays read its memory,
// so it stays while its row pointers live. About 9 bytes per entry each.
cache::WeakKeyedCache<std::shared_ptr<const View>>& views() {
  static cache::WeakKeyedCache<std::shared_ptr<const View>> cache(16);
  return cache;
}
std::atomic<int64_t> views_built{0};

// A view just built: complete before any stream reads it (a later call may run on another
// stream), and the stream it was built on recorded.
std::shared_ptr<const View> built_on_stream(std::shared_ptr<View> v, const at::Tensor& rowptr) {
#if !defined(GNNFUSE_CUDA_EMULATED)
  if (rowptr.is_cuda()) {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(rowptr.device().index());
    stream.synchronize();
    v->stream = stream.id();
  }
#else
  (void)rowptr;
#endif
  return v;
}

// The memory of the pattern tensors callers marked as converted for one call
// (mark_transient_pattern): auto builds no view where the row pointers or the columns lie in
// marked memory. A mark holds its tensor weakly and matches by memory (data pointer and size)
// while that tensor lives unchanged (its version): so a tensor the kernel sees under another
// TensorImpl (torch.func unwraps its wrappers) still matches, and freed memory never does.
class Marks {
 public:
  void mark(const at::Tensor& t) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_dead();
    if (marks_.size() >= kCapacity) marks_.erase(marks_.begin());  // (the oldest; a lost mark costs a view)
    marks_.push_back({c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(t.getIntrusivePtr()), t.const_data_ptr(), t.numel(),
                      static_cast<uint32_t>(t._version())});
  }
  // Drops the marks of t's memory (a conversion kept for later calls: no longer transient).
  void unmark(const at::Tensor& t) {
    if (!cache::keyable(t)) return;
    const void* data = t.const_data_ptr();
    std::lock_guard<std::mutex> lock(mutex_);
    marks_.erase(std::remove_if(marks_.begin(), marks_.end(), [&](const Mark& m) { return m.data == data && m.numel == t.numel(); }),
                 marks_.end());
  }
  bool marked(const at::Tensor& t) {
    if (!cache::keyable(t)) return false;
    const void* data = t.const_data_ptr();
    std::lock_guard<std::mutex> lock(mutex_);
    drop_dead();
    for (const Mark& m : marks_) {
      if (m.data != data || m.numel != t.numel()) continue;
      const c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl = m.impl.lock();
      if (impl && impl->version_counter().current_version() == m.version) return true;
    }
    return false;
  }

 private:
  // A layer marks two tensors per call, alive until its backward: room for deep models.
  static constexpr size_t kCapacity = 4096;
  struct Mark {
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl;
    const void* data;
    int64_t numel;
    uint32_t version;
  };
  void drop_dead() {
    marks_.erase(std::remove_if(marks_.begin(), marks_.end(), [](const Mark& m) { return m.impl.expired(); }), marks_.end());
  }
  std::mutex mutex_;
  std::vector<Mark> marks_;
};

Marks& transients() {
  static Marks marks;
  return marks;
}

bool transient(const at::Tensor& rowptr, const at::Tensor& col) {
  return transients().marked(rowptr) || transients().marked(col);
}

std::shared_ptr<const View> build_view(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols, int k);

// Patterns that recur in new memory: a layer converting edge_index anew at every call (the
// patterns it marks transient), a compiled model's per-call CSR. Their views are found by the
// patterns' contents. A first sighting leaves a fingerprint (sizes, dtypes, device, and sums of
// both arrays: one read-back) with weak keys of its tensors; a pattern of that fingerprint in
// other memory is a recurrence: its view is built, and where Tensor Cores would take it (reuse) the
// pattern is copied (remembered) with it, else its fingerprint is marked as not worth a view in
// that direction (none built for it again in auto). Every later pattern of a remembered one's sizes is
// compared with the copies element by element (one read-back; not again for the other direction
// of the same tensors), so a fingerprint only decides where a view is built, never which one is
// used. At most kPatterns remembered patterns; a new one takes the place of one unused for
// kStale lookups, else it is not remembered (a working set larger than the table keeps what it
// has instead of building views in a cycle). The comparisons and builds run outside the table's
// lock (a synchronisation of one device does not hold back the threads of another).
class Recurring {
 public:
  enum class Seen { First, Again, NotWorth, NoRoom };
  using Fingerprint = std::array<int64_t, 12>;

  // The view for (transpose, k) of a remembered pattern equal to (rowptr, col), built here where
  // that pattern has none for them yet (low_reuse_view() where it would not be worth one); null
  // where no remembered pattern is equal.
  std::shared_ptr<const View> find(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols, int k) {
    std::vector<std::shared_ptr<Pattern>> candidates;
    uint64_t now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      now = ++clock_;
      for (const std::shared_ptr<Pattern>& p : patterns_)
        if (p->rows == rows && p->cols == cols && like(p->rowptr, rowptr) && like(p->col, col)) candidates.push_back(p);
    }
    for (const std::shared_ptr<Pattern>& p : candidates) {
      bool known;
      {
        std::lock_guard<std::mutex> lock(p->mutex);
        known = p->last_rowptr && p->last_col && p->last_rowptr->same(rowptr) && p->last_col->same(col);
      }
      if (!known) {
        if (!at::logical_and(p->rowptr.eq(rowptr).all(), p->col.eq(col).all()).item<bool>()) continue;  // (one read-back)
        std::lock_guard<std::mutex> lock(p->mutex);
        p->last_rowptr.emplace(rowptr);
        p->last_col.emplace(col);
      }
      p->used = now;
      if (std::shared_ptr<const View> v = p->view(transpose, k)) return v;
      std::shared_ptr<const View> v = build_view(rowptr, col, transpose, rows, cols, k);
      ++views_built;
      if (v->reuse() < kTcMinReuse) v = low_reuse_view();
      return p->add(transpose, k, v);
    }
    return nullptr;
  }

  // Whether a pattern of this fingerprint (`f`, computed here) was sighted before in other memory
  // and has room to be remembered; a first sighting is recorded. The tensors of one sighting (both
  // directions of one call) are one sighting.
  Seen sighting(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols, int k, Fingerprint& f) {
    const std::pair<bool, int> key{transpose, k};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Sighting& s : sightings_)
        if (s.rowptr.same(rowptr) && s.col.same(col)) return s.not_worth(key) ? Seen::NotWorth : Seen::First;
    }
    f = fingerprint(rowptr, col, rows, cols);
    std::lock_guard<std::mutex> lock(mutex_);
    // (a sighting whose tensors are freed stays: their contents recurring in new memory is the point)
    for (const Sighting& s : sightings_)
      if (s.fingerprint == f) {
        if (s.not_worth(key)) return Seen::NotWorth;
        return victim() != nullptr || patterns_.size() < kPatterns ? Seen::Again : Seen::NoRoom;
      }
    if (sightings_.size() >= kSightings) sightings_.erase(sightings_.begin());
    sightings_.push_back({f, cache::TensorKey(rowptr), cache::TensorKey(col), {}});
    return Seen::First;
  }

  // Remembers a copy of (rowptr, col) with its view for (transpose, k), where there is room; or,
  // where that view is not worth Tensor Cores, only that (by the fingerprint `f`).
  void remember(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols, int k,
                const std::shared_ptr<const View>& view, const Fingerprint& f) {
    if (view->reuse() < kTcMinReuse) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Sighting& s : sightings_)
        if (s.fingerprint == f) s.low_reuse.push_back({transpose, k});
      return;
    }
    auto p = std::make_shared<Pattern>();
    p->rows = rows;
    p->cols = cols;
    p->rowptr = rowptr.clone(at::MemoryFormat::Contiguous);
    p->col = col.clone(at::MemoryFormat::Contiguous);
    p->last_rowptr.emplace(rowptr);
    p->last_col.emplace(col);
    p->views.push_back({{transpose, k}, view});
#if !defined(GNNFUSE_CUDA_EMULATED)
    if (rowptr.is_cuda())  // (copied before another stream compares with them)
      c10::cuda::getCurrentCUDAStream(rowptr.device().index()).synchronize();
#endif
    std::lock_guard<std::mutex> lock(mutex_);
    p->used = ++clock_;
    if (patterns_.size() >= kPatterns) {
      std::shared_ptr<Pattern>* out = victim();
      if (out == nullptr) return;  // (taken meanwhile)
      *out = std::move(p);
      return;
    }
    patterns_.push_back(std::move(p));
  }

  // The view standing for "not worth Tensor Cores": no tensors, reuse 0.
  static std::shared_ptr<const View> low_reuse_view() {
    static const std::shared_ptr<const View> v = std::make_shared<View>();
    return v;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return patterns_.size();
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    patterns_.clear();
    sightings_.clear();
  }

 private:
  static constexpr size_t kPatterns = 8, kSightings = 64;
  static constexpr uint64_t kStale = 256;  // lookups
  struct Sighting {
    Fingerprint fingerprint;
    cache::TensorKey rowptr, col;
    std::vector<std::pair<bool, int>> low_reuse;  // the (transpose, k) whose views are not worth Tensor Cores
    bool not_worth(const std::pair<bool, int>& key) const { return std::find(low_reuse.begin(), low_reuse.end(), key) != low_reuse.end(); }
  };
  struct Pattern {
    int64_t rows = 0, cols = 0;
    at::Tensor rowptr, col;  // copies
    std::atomic<uint64_t> used{0};
    std::mutex mutex;  // the members below
    std::optional<cache::TensorKey> last_rowptr, last_col;  // the tensors found equal last
    std::vector<std::pair<std::pair<bool, int>, std::shared_ptr<const View>>> views;  // by (transpose, k)
    std::shared_ptr<const View> view(bool transpose, int k) {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [key, v] : views)
        if (key.first == transpose && key.second == k) return v;
      return nullptr;
    }
    // `v`, or the view another thread added meanwhile
    std::shared_ptr<const View> add(bool transpose, int k, std::shared_ptr<const View> v) {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [key, o] : views)
        if (key.first == transpose && key.second == k) return o;
      views.push_back({{transpose, k}, v});
      return v;
    }
  };

  // The least recently used pattern, where it is stale (mutex_ held).
  std::shared_ptr<Pattern>* victim() {
    std::shared_ptr<Pattern>* out = nullptr;
    for (std::shared_ptr<Pattern>& p : patterns_)
      if (out == nullptr || p->used < (*out)->used) out = &p;
    return out != nullptr && (*out)->used + kStale < clock_ ? out : nullptr;
  }

  static bool like(const at::Tensor& a, const at::Tensor& b) {
    return a.numel() == b.numel() && a.dim() == b.dim() && a.scalar_type() == b.scalar_type() && a.device() == b.device();
  }

  // Sizes, dtypes, device, and sums of both arrays: plain, weighted by position (weights 1 to
  // 251, integers exact) and of the squares (float64): the same contents give the same bits,
  // other contents almost never do (a relabelled or shifted graph of equal degrees included).
  static Fingerprint fingerprint(const at::Tensor& rowptr, const at::Tensor& col, int64_t rows, int64_t cols) {
    const at::Tensor r = rowptr.to(at::kLong), c = col.to(at::kLong);
    const at::Tensor cw = at::arange(c.numel(), c.options()).remainder_(251).add_(1).mul_(c);
    const at::Tensor rd = r.to(at::kDouble), cd = c.to(at::kDouble);
    const at::Tensor sums = at::stack({r.sum(), c.sum().add(cw.sum().mul(7919)), rd.mul(rd).sum().view(at::kLong), cd.mul(cd).sum().view(at::kLong)}).cpu();
    const int64_t* s = sums.const_data_ptr<int64_t>();
    return {rows, cols, rowptr.numel(), col.numel(), static_cast<int64_t>(rowptr.scalar_type()), static_cast<int64_t>(col.scalar_type()),
            static_cast<int64_t>(rowptr.device().type()), rowptr.device().index(), s[0], s[1], s[2], s[3]};
  }

  std::mutex mutex_;  // the members below
  std::vector<std::shared_ptr<Pattern>> patterns_;
  std::vector<Sighting> sightings_;
  uint64_t clock_ = 0;
};

Recurring& recurring() {
  static Recurring r;
  return r;
}

// The view of op(A) (A: rows x cols in CSR) for blocks of k columns (tc_spmm.h). Every step is an
// ATen op on the pattern's device; the sizes (pairs, blocks) are read back.
std::shared_ptr<const View> build_view(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols, int k) {
  auto v = std::make_shared<View>();
  const int64_t nnz = col.size(0);
  const int64_t out_rows = transpose ? cols : rows, in_rows = transpose ? rows : cols;
  v->windows = (out_rows + 15) / 16;
  v->nnz = nnz;
  v->k = k;
  const auto i32 = rowptr.options().dtype(at::kInt);
  const auto i64 = rowptr.options().dtype(at::kLong);
  if (nnz == 0) {
    v->block_ptr = at::zeros({v->windows + 1}, i32);
    v->entry_ptr = at::zeros({1}, i32);
    v->block_cols = at::empty({0}, i32);
    v->entry_place = at::empty({0}, rowptr.options().dtype(at::kByte));
    v->entry_src = at::empty({0}, i32);
    return v;
  }
  const at::Tensor ptr = rowptr.to(at::kLong), c = col.to(at::kLong);
  const at::Tensor row_of = at::repeat_interleave(ptr.slice(0, 1) - ptr.slice(0, 0, rows), std::optional<int64_t>(nnz));
  const at::Tensor orow = transpose ? c : row_of, icol = transpose ? row_of : c;
  // Sorted by (window, condensed column, row in the window), CSR order among equals (stable):
  // the entries of a block are contiguous, duplicates of one place adjacent and summed in CSR order.
  const at::Tensor key = (orow.div(16, "floor") * in_rows + icol) * 16 + orow.remainder(16);
  auto [skey, order] = key.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
  const at::Tensor pkey = skey.div(16, "floor");  // window * in_rows + column
  at::Tensor first = at::ones({nnz}, rowptr.options().dtype(at::kBool));
  if (nnz > 1) first.slice(0, 1).copy_(pkey.slice(0, 1) != pkey.slice(0, 0, nnz - 1));
  const at::Tensor pair_of = first.cumsum(0) - 1;  // each entry's (window, column) pair
  const at::Tensor pairs = pkey.masked_select(first);
  v->pairs = pairs.size(0);
  const at::Tensor pair_win = pairs.div(in_rows, "floor"), pair_col = pairs.remainder(in_rows);
  const at::Tensor win_pairs = at::bincount(pair_win, {}, v->windows);
  const at::Tensor win_first = win_pairs.cumsum(0) - win_pairs;
  const at::Tensor pair_local = at::arange(pairs.size(0), i64) - win_first.index_select(0, pair_win);
  const at::Tensor win_blocks = (win_pairs + (k - 1)).div(k, "floor");
  const at::Tensor block_ptr = at::cat({at::zeros({1}, i64), win_blocks.cumsum(0)});
  v->blocks = block_ptr[-1].item<int64_t>();
  const at::Tensor pair_block = block_ptr.index_select(0, pair_win) + pair_local.div(k, "floor");
  const at::Tensor pair_k = pair_local.remainder(k);
  at::Tensor block_cols = at::full({v->blocks * k}, -1, i32);
  block_cols.index_put_({pair_block * k + pair_k}, pair_col.to(at::kInt));
  const at::Tensor entry_block = pair_block.index_select(0, pair_of);
  v->entry_place = (skey.remainder(16) * k + pair_k.index_select(0, pair_of)).to(at::kByte);
  v->entry_src = order.to(at::kInt);
  v->entry_ptr = at::cat({at::zeros({1}, i64), at::bincount(entry_block, {}, v->blocks).cumsum(0)}).to(at::kInt);
  v->block_ptr = block_ptr.to(at::kInt);
  v->block_cols = block_cols;
  return built_on_stream(v, rowptr);
}

// The rows form's view (seed 004): op(A)'s rows (for A^T the entries stably sorted by column, each
// with its CSR index) and their buckets by entries (<= 8, <= 16, <= 32, more), by ATen ops on the
// operands' device (a few host synchronisations: the bucket sizes, csr_transpose's checks). The
// arrays are copies: a cached view must not hold the tensors that key it.
std::shared_ptr<const View> build_rows_view(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols) {
  auto v = std::make_shared<View>();
  const int64_t nnz = col.size(0), out_rows = transpose ? cols : rows;
  v->nnz = nnz;
  const at::Tensor ptr = rowptr.to(at::kLong);
  at::Tensor degree;
  if (!transpose) {
    v->row_ptr = rowptr.to(at::kInt, /*non_blocking=*/false, /*copy=*/true);
    v->row_cols = col.to(at::kInt, /*non_blocking=*/false, /*copy=*/true);
    degree = ptr.slice(0, 1) - ptr.slice(0, 0, rows);
  } else {  // A^T: the CSC view (rows ascending within a column, each entry's CSR position)
    const auto [colptr, row, perm] = gnnfuse::csr_transpose(rowptr, col, cols);
    const at::Tensor cptr = colptr.to(at::kLong);
    degree = cptr.slice(0, 1) - cptr.slice(0, 0, cols);
    v->row_ptr = colptr.to(at::kInt);
    v->row_cols = row.to(at::kInt);
    v->row_src = perm.to(at::kInt);
  }
  const at::Tensor bucket = degree.gt(8).to(at::kLong) + degree.gt(16).to(at::kLong) + degree.gt(32).to(at::kLong);
  auto [sb, by_bucket] = bucket.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
  v->bucket_rows = by_bucket.to(at::kInt);
  const at::Tensor first = at::bincount(bucket, {}, cuda::kTcRowBuckets).cumsum(0).cpu();
  for (int b = 0; b < cuda::kTcRowBuckets; ++b) v->bucket_first[b + 1] = first[b].item<int64_t>();
  TORCH_INTERNAL_ASSERT(v->bucket_first[cuda::kTcRowBuckets] == out_rows);
  return built_on_stream(v, rowptr);
}

// The rows form's view: cached by the tensors' identity (where they can key a cache), else built;
// under capture only a cached one.
std::shared_ptr<const View> cached_rows_view(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols) {
  const bool capturing = checks::capturing(rowptr);
  const std::vector<int64_t> ints{rows, cols, transpose ? 1 : 0};
  if (auto hit = views().lookup("tc_rows_view", {rowptr, col}, ints, /*pin=*/capturing)) return *hit;
  if (capturing) return nullptr;
  auto v = build_rows_view(rowptr, col, transpose, rows, cols);
  ++views_built;
  views().store("tc_rows_view", {rowptr, col}, ints, v);
  return v;
}

// The cached view, else (not under capture) that of a remembered pattern of equal contents, else
// a new one: at a pattern's recurrence in new memory (Recurring), else (`forced`, or auto on a
// pattern not marked transient) built and cached by the tensors' identity where they can key a
// cache. Recurring::low_reuse_view() where auto would not take Tensor Cores.
std::shared_ptr<const View> cached_view(const at::Tensor& rowptr, const at::Tensor& col, bool transpose, int64_t rows, int64_t cols, int k,
                                        bool forced) {
  const bool capturing = checks::capturing(rowptr);
  const std::vector<int64_t> ints{rows, cols, transpose ? 1 : 0, k};
  if (auto hit = views().lookup("tc_view", {rowptr, col}, ints, /*pin=*/capturing)) return *hit;
  // Building and comparing read back (synchronisations): not while a CUDA graph is captured.
  if (capturing) return nullptr;
  const bool marked = transient(rowptr, col);
  std::shared_ptr<const View> v;
  if (cache::keyable(rowptr) && cache::keyable(col)) {
    v = recurring().find(rowptr, col, transpose, rows, cols, k);
    if (!v) {
      Recurring::Fingerprint f{};
      switch (recurring().sighting(rowptr, col, transpose, rows, cols, k, f)) {
        case Recurring::Seen::Again:
          v = build_view(rowptr, col, transpose, rows, cols, k);
          ++views_built;
          recurring().remember(rowptr, col, transpose, rows, cols, k, v, f);
          break;
        case Recurring::Seen::NotWorth:
          if (!forced) return nullptr;
          break;
        case Recurring::Seen::First:
        case Recurring::Seen::NoRoom:
          break;
      }
    }
  }
  if (v && v->block_ptr.defined()) {
    // cached by identity too (a graph captured after a warm-up finds it), but for tensors marked
    // as converted for one call: they would only push other graphs' views out
    if (!marked) views().store("tc_view", {rowptr, col}, ints, v);
    return v;
  }
  if (v && !forced) return v;  // (not worth Tensor Cores)
  if (!forced && marked) return nullptr;
  v = build_view(rowptr, col, transpose, rows, cols, k);
  ++views_built;
  views().store("tc_view", {rowptr, col}, ints, v);
  return v;
}

std::optional<cuda::TcType> tc_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return cuda::TcType::Half;
    case at::kBFloat16: return cuda::TcType::BFloat16;
    case at::kFloat: return cuda::TcType::Float32;
    default: return std::nullopt;
  }
}

}  // namespace

TensorCores tensor_cores() {
  int m = mode_.load();
  if (m < 0) {
    m = static_cast<int>(initial_mode());
    int expected = -1;
    mode_.compare_exchange_strong(expected, m);
    m = mode_.load();
  }
  return static_cast<TensorCores>(m);
}

TensorCores set_tensor_cores(TensorCores mode) {
  // (an exchange: a bad GNNFUSE_CUDA_TENSOR_CORES, not read yet, can be overridden)
  const int previous = mode_.exchange(static_cast<int>(mode));
  return previous < 0 ? TensorCores::Auto : static_cast<TensorCores>(previous);
}

std::string to_string(TensorCores mode) {
  switch (mode) {
    case TensorCores::Auto: return "auto";
    case TensorCores::On: return "on";
    case TensorCores::Off: return "off";
    case TensorCores::Rows: return "rows";
  }
  return "auto";
}

TensorCores parse_tensor_cores(const std::string& name) {
  if (name == "auto") return TensorCores::Auto;
  if (name == "on") return TensorCores::On;
  if (name == "off") return TensorCores::Off;
  if (name == "rows") return TensorCores::Rows;
  throw std::invalid_argument("the Tensor-Core mode must be auto, on, off or rows, got '" + name + "'");
}

int64_t tensor_core_views_built() {
  return views_built.load();
}

int64_t tensor_core_patterns_remembered() {
  return static_cast<int64_t>(recurring().size());
}

void clear_tensor_core_views() {
  recurring().clear();
  views().clear_unpinned();  // (a view a captured CUDA graph reads stays: its replays read it)
}

void mark_transient_pattern(const at::Tensor& t, bool transient) {
  // (a hint: tensors without plain data (fake, torch.func's wrappers, batched, meta, inference)
  // are not marked; gnnfuse.nn unwraps torch.func's wrappers before marking)
  if (!cache::keyable(t) || !t.has_storage() || t.unsafeGetTensorImpl()->is_python_dispatch() ||
      t.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::FuncTorchBatched})))
    return;
  try {
    if (transient)
      transients().mark(t);
    else
      transients().unmark(t);
  } catch (const c10::Error&) {
  }
}

bool tensor_core_spmm(const char* op, cuda::TcLaunch launch, const at::Tensor& rowptr, const at::Tensor& col,
                      std::initializer_list<at::Tensor> values, bool transpose, int64_t rows, int64_t cols, const at::Tensor& x,
                      at::Tensor& out) {
  TensorCores mode;
  try {
    mode = tensor_cores();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "gnnfuse::", op, ": GNNFUSE_CUDA_TENSOR_CORES: ", e.what());
  }
  if (mode == TensorCores::Off) return false;
  const auto type = tc_type(x.scalar_type());
  if (!type) return false;
  const bool rows_form = mode == TensorCores::Rows;  // seed 004's kernel: float16 and bfloat16 only
  if (rows_form && *type == cuda::TcType::Float32) return false;
  const bool forced = mode == TensorCores::On || rows_form;
  if (*type == cuda::TcType::Float32 && !forced && !at::globalContext().allowTF32CuBLAS()) return false;
  // x: [in_rows, F] or, per head, [in_rows, H, F] (the op's checks have held the extents).
  if (x.dim() != 2 && x.dim() != 3) return false;
  const int64_t heads = x.dim() == 3 ? x.size(1) : 1, f = x.size(-1), nnz = col.size(0);
  const int64_t out_rows = transpose ? cols : rows, in_rows = transpose ? rows : cols;
  if (!forced && f < kTcMinF) return false;
  constexpr int64_t kInt32 = (int64_t(1) << 31) - 1024;  // (the kernel's int32 entry loops step past the end by 32)
  if (nnz >= kInt32 || in_rows >= kInt32 || out_rows >= kInt32 || !x.is_contiguous() || !out.is_contiguous()) return false;
  if (values.size() > size_t(cuda::kTcMaxFactors)) return false;
  const void* factors[cuda::kTcMaxFactors] = {};
  size_t slot = 0;
  for (const at::Tensor& v : values) {
    if (v.defined()) {
      if (v.scalar_type() != x.scalar_type() || !v.is_contiguous() || v.size(0) != nnz || !(v.dim() == 1 || (v.dim() == 2 && v.size(1) == heads)))
        return false;
      factors[slot] = v.const_data_ptr();
    }
    ++slot;
  }
  const int k = cuda::tc_k(*type);
  // auto does not build a view it cannot keep (inference tensors: every call would rebuild it),
  // and hands back to the CUDA-core kernels where building one runs out of memory.
  if (!forced && !(cache::keyable(rowptr) && cache::keyable(col))) return false;
  std::shared_ptr<const View> view;
  try {
    view = rows_form ? cached_rows_view(rowptr, col, transpose, rows, cols) : cached_view(rowptr, col, transpose, rows, cols, k, forced);
  } catch (const c10::OutOfMemoryError&) {
    if (forced) throw;
    return false;
  }
  if (!view) return false;
  if (!forced && view->reuse() < kTcMinReuse) return false;
  if (out.numel() == 0) return true;
  if (nnz == 0 || in_rows == 0) {
    out.zero_();
    return true;
  }
  cuda::TcSpmmArgs a;
  a.out_rows = out_rows;
  a.f = f;
  a.in_rows = in_rows;
  a.windows = view->windows;
  a.heads = heads;
  if (rows_form) {
    a.kernel = cuda::TcKernel::Rows;
    a.row_ptr = view->row_ptr.const_data_ptr<int32_t>();
    a.row_cols = view->row_cols.const_data_ptr<int32_t>();
    a.row_src = view->row_src.defined() ? view->row_src.const_data_ptr<int32_t>() : nullptr;
    a.bucket_rows = view->bucket_rows.const_data_ptr<int32_t>();
    for (int b = 0; b <= cuda::kTcRowBuckets; ++b) a.bucket_first[b] = view->bucket_first[b];
  } else {
    a.block_ptr = view->block_ptr.const_data_ptr<int32_t>();
    a.block_cols = view->block_cols.const_data_ptr<int32_t>();
    a.entry_ptr = view->entry_ptr.const_data_ptr<int32_t>();
    a.entry_place = view->entry_place.const_data_ptr<uint8_t>();
    a.entry_src = view->entry_src.const_data_ptr<int32_t>();
  }
  for (int i = 0; i < cuda::kTcMaxFactors; ++i) a.values[i] = factors[i];
  a.x = x.const_data_ptr();
  a.out = out.mutable_data_ptr();
  a.max_blocks = env_int("GNNFUSE_CUDA_TC_GRID", "a count of blocks");  // tests: warps stride over units (-1 unset: none)
#if defined(GNNFUSE_CUDA_EMULATED)
  void* stream = nullptr;
#else
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(x.device().index());
  void* stream = current.stream();
  if (current.id() != view->stream)  // its memory not reused before this stream's kernel has read it
    for (const at::Tensor& t : {view->block_ptr, view->block_cols, view->entry_ptr, view->entry_place, view->entry_src, view->row_ptr,
                                view->row_cols, view->row_src, view->bucket_rows})
      if (t.defined() && t.numel() > 0) t.record_stream(current);
#endif
  launch(*type, a, stream);
#if !defined(GNNFUSE_CUDA_EMULATED)
  C10_CUDA_KERNEL_LAUNCH_CHECK();
#endif
  count_launch(std::string(op) + " tensor_cores " + (rows_form ? std::string("rows") : std::to_string(cuda::tc_spmm_tiles(f) * 8)) + " 0");
  return true;
}

}  // namespace gnnfuse::cuda_adapter

namespace {

std::string set_tensor_cores_op(const std::string& name) {
  namespace ca = gnnfuse::cuda_adapter;
  try {
    return ca::to_string(ca::set_tensor_cores(ca::parse_tensor_cores(name)));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "gnnfuse::_cuda_set_tensor_cores: ", e.what());
  }
}

std::string tensor_cores_op() {
  namespace ca = gnnfuse::cuda_adapter;
  try {
    return ca::to_string(ca::tensor_cores());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "gnnfuse::_cuda_tensor_cores: GNNFUSE_CUDA_TENSOR_CORES: ", e.what());
  }
}

int64_t tensor_core_views_op() { return gnnfuse::cuda_adapter::tensor_core_views_built(); }
int64_t tensor_core_patterns_op() { return gnnfuse::cuda_adapter::tensor_core_patterns_remembered(); }
void clear_tensor_core_views_op() { gnnfuse::cuda_adapter::clear_tensor_core_views(); }

void transient_patterns_op(const std::vector<at::Tensor>& patterns, bool transient) {
  for (const at::Tensor& t : patterns) gnnfuse::cuda_adapter::mark_transient_pattern(t, transient);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {
  m.def("_cuda_set_tensor_cores(str mode) -> str", &set_tensor_cores_op);
  m.def("_cuda_tensor_cores() -> str", &tensor_cores_op);
  m.def("_cuda_tensor_core_views() -> int", &tensor_core_views_op);
  m.def("_cuda_tensor_core_patterns() -> int", &tensor_core_patterns_op);
  m.def("_cuda_clear_tensor_core_views() -> ()", &clear_tensor_core_views_op);
  m.def("_cuda_tensor_cores_transient(Tensor[] patterns, bool transient=True) -> ()", &transient_patterns_op);
}
