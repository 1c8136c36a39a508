// The SIMT emulator's block scheduler: the fibers of one block run in rounds on one OS thread.
// A round resumes every runnable fiber (in the configured order) until it waits at a
// synchronisation point or exits; then the waits that can complete do (a __syncthreads every
// live thread reached, a warp collective every lane of its mask reached, the __activemask of a
// warp with nothing else to do), and their fibers are runnable in the next round. A round
// that completes nothing is an error, diagnosed from what every fiber waits at.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "cuda/emu/block.h"

namespace gnnfuse::simt::detail {

namespace {

// Does the queued copies of `f` whose group is at most `last` (all: ~0u), in order.
void land_copies(Fiber& f, unsigned last) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < f.copies.size(); ++i) {
    const Fiber::Copy& c = f.copies[i];
    if (c.group != 0 && c.group <= last) {
      if (c.bytes > 0) std::memcpy(c.dst, c.src, std::size_t(c.bytes));
      std::memset(c.dst + c.bytes, 0, std::size_t(16 - c.bytes));
      f.worker->unpublished.push_back({c.dst, f.linear, c.file, c.line});
    } else {
      f.copies[kept++] = c;
    }
  }
  f.copies.resize(kept);
  // The landed chunks: landed by f, unpublished, unless a copy still queued (f's, of a later
  // group, or another thread's) will write them again.
  Worker& w = *f.worker;
  const std::int32_t queued = -(std::int32_t(f.linear) + 1);
  for (std::size_t i = w.unpublished.size(); i-- > 0 && w.unpublished[i].thread == f.linear;) {
    const unsigned char* dst = w.unpublished[i].dst;
    std::int32_t& state = w.chunk_state[std::size_t(dst - w.smem_base) / 16];
    if (state != queued) continue;  // (another thread's copy queued there since)
    bool again = false;
    for (const Fiber::Copy& c : f.copies) again = again || c.dst == dst;
    if (!again) state = std::int32_t(f.linear) + 1;
  }
}

std::atomic<std::uint64_t> bank_conflicts{0};
std::atomic<std::uint64_t> staged_loads{0}, staged_extra{0};

// The wavefronts one phase of a shared-memory access needs (128 bytes at most): as many as the
// most distinct 4-byte words one of the 32 banks holds among the words added.
class BankTally {
 public:
  void add(std::size_t word) {
    const std::size_t bank = word % 32;
    for (int k = 0; k < count_[bank]; ++k)
      if (words_[bank][k] == word) return;
    words_[bank][count_[bank]++] = word;  // (at most 32 per bank: a phase reads 128 bytes)
  }
  int wavefronts() const {
    int most = 1;
    for (int b = 0; b < 32; ++b) most = count_[b] > most ? count_[b] : most;
    return most;
  }

 private:
  std::size_t words_[32][32];
  int count_[32] = {};
};

// The extra wavefronts of an ldmatrix's four matrices (simt_emu.h: ldmatrix_bank_conflicts).
void count_bank_conflicts(const unsigned char* base, const void* const rows[32]) {
  std::uint64_t extra = 0;
  for (int i = 0; i < 4; ++i) {
    BankTally tally;
    for (int row = 0; row < 8; ++row) {
      const std::size_t first = std::size_t(static_cast<const unsigned char*>(rows[8 * i + row]) - base) / 4;
      for (std::size_t word = first; word < first + 4; ++word) tally.add(word);
    }
    extra += std::uint64_t(tally.wavefronts() - 1);
  }
  if (extra) bank_conflicts.fetch_add(extra, std::memory_order_relaxed);
}

void flush_copies(Fiber& f) {
  for (Fiber::Copy& c : f.copies)
    if (c.group == 0) c.group = ~0u;
  land_copies(f, ~0u);
  f.groups = 0;
}

void fiber_main(void* arg) {
  Fiber& f = *static_cast<Fiber*>(arg);
  Worker& w = *f.worker;
  context_started(w.scheduler);
  try {
    w.job->call.run(w.job->call.closure);
    flush_copies(f);  // copies never waited for still land (before the block ends)
  } catch (const Cancelled&) {
  } catch (...) {
    f.error = std::current_exception();
    w.failed = true;
  }
  f.state = State::exited;
  --w.live;
  exit_to(f.ctx, w.scheduler);
}

// Back to the scheduler until the wait completes (or the block is abandoned).
void suspend(Worker& w, Fiber& f) {
  switch_context(f.ctx, w.scheduler);
  if (f.cancelled) throw Cancelled{};
}

bool is_shuffle(Collective k) {
  return k == Collective::shfl_idx || k == Collective::shfl_up || k == Collective::shfl_down ||
         k == Collective::shfl_xor;
}

bool is_mma(Collective k) {
  return k == Collective::mma_m16n8k16_f16f32 || k == Collective::mma_m16n8k16_bf16f32 ||
         k == Collective::mma_m16n8k8_tf32f32 || k == Collective::mma_m16n8k8_f16f32 ||
         k == Collective::mma_m16n8k8_bf16f32;
}

bool is_ldmatrix(Collective k) { return k == Collective::ldmatrix_x4 || k == Collective::ldmatrix_x4_trans; }

const char* collective_name(Collective k) {
  switch (k) {
    case Collective::syncwarp: return "__syncwarp";
    case Collective::ballot: return "__ballot_sync";
    case Collective::any: return "__any_sync";
    case Collective::all: return "__all_sync";
    case Collective::shfl_idx: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::activemask: return "__activemask";
    case Collective::match_any: return "__match_any_sync";
    case Collective::mma_m16n8k16_f16f32: return "gnnfuse_mma_m16n8k16_f16f32";
    case Collective::mma_m16n8k16_bf16f32: return "gnnfuse_mma_m16n8k16_bf16f32";
    case Collective::mma_m16n8k8_tf32f32: return "gnnfuse_mma_m16n8k8_tf32f32";
    case Collective::mma_m16n8k8_f16f32: return "gnnfuse_mma_m16n8k8_f16f32";
    case Collective::mma_m16n8k8_bf16f32: return "gnnfuse_mma_m16n8k8_bf16f32";
    case Collective::ldmatrix_x4: return "gnnfuse_ldmatrix_x4";
    case Collective::ldmatrix_x4_trans: return "gnnfuse_ldmatrix_x4_trans";
  }
  return "?";
}

const char* barrier_name(BarrierKind k) {
  switch (k) {
    case BarrierKind::plain: return "__syncthreads";
    case BarrierKind::count: return "__syncthreads_count";
    case BarrierKind::all: return "__syncthreads_and";
    case BarrierKind::any: return "__syncthreads_or";
  }
  return "?";
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

bool same_site(const Fiber& a, const Fiber& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

// Lanes waiting at collectives that complete together: the same kind, mask and size, and for
// mma and ldmatrix (.aligned: one instruction for the whole warp) the same call site.
bool same_collective(const Fiber& a, const Fiber& b) {
  return a.call.kind == b.call.kind && a.call.mask == b.call.mask && a.call.size == b.call.size &&
         (!(is_mma(a.call.kind) || is_ldmatrix(a.call.kind)) || same_site(a, b));
}

// What a fiber waits at, for messages.
std::string describe(const Fiber& f) {
  switch (f.state) {
    case State::barrier: return std::string(barrier_name(f.barrier)) + " (" + site_string(f.file, f.line) + ")";
    case State::collective:
      return std::string(collective_name(f.call.kind)) +
             (f.call.kind == Collective::activemask ? "" : " (mask " + hex(f.call.mask) + ")") + " at " +
             site_string(f.file, f.line);
    case State::exited: return "has exited";
    default: return "runs";
  }
}

// The lanes of warp `warp` that exist in a block of `threads` threads.
unsigned existing_lanes(unsigned threads, unsigned warp) {
  const unsigned n = threads - warp * 32;
  return n >= 32 ? 0xffffffffu : (1u << n) - 1;
}

}  // namespace

// ---------------------------------------------------------------- messages
std::string dim_string(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string site_string(const char* file, int line) {
  const char* slash = file ? std::strrchr(file, '/') : nullptr;
  return std::string(slash ? slash + 1 : (file ? file : "?")) + ":" + std::to_string(line);
}

std::string where(const Worker& w, const Fiber& f) {
  const uint3 b = w.block.block_idx, t = f.info.thread_idx;
  return "simt: kernel " + w.job->name + ", block " + dim_string(dim3(b.x, b.y, b.z)) + ", thread " +
         dim_string(dim3(t.x, t.y, t.z));
}

namespace {
template <class E>
[[noreturn]] void fail(const Worker& w, const Fiber& f, const std::string& what) {
  const uint3 b = w.block.block_idx, t = f.info.thread_idx;
  throw E(where(w, f) + ": " + what, w.job->name, dim3(b.x, b.y, b.z), dim3(t.x, t.y, t.z));
}

// f's read of [p, p + bytes) of shared memory by `op` at file:line (`what`: "its row", "its
// load"): an UnpublishedRead if a copy still queued, or one landed by a thread other than `self`
// (-1: any) and not published since, covers a byte of it.
void check_staged(const Worker& w, const Fiber& f, const void* p, unsigned bytes, int self, const char* op, const char* site_file, int site_line,
                  const char* what) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (!w.chunks_dirty || b < w.smem_base || b + bytes > w.smem_base + kSharedMemoryLimit || bytes == 0) return;
  const std::size_t first = std::size_t(b - w.smem_base) / 16, last = (std::size_t(b - w.smem_base) + bytes - 1) / 16;
  for (std::size_t c = first; c <= last; ++c) {
    const std::int32_t state = w.chunk_state[c];
    if (state == 0 || state == self + 1) continue;
    const unsigned thread = unsigned(state < 0 ? -state - 1 : state - 1);
    const unsigned char* chunk = w.smem_base + 16 * c;
    const char* file = nullptr;
    int line = 0;
    if (state < 0) {
      for (const Fiber::Copy& q : w.fibers[thread]->copies)
        if (q.dst == chunk) file = q.file, line = q.line;
    } else {
      for (const Worker::Landed& u : w.unpublished)
        if (u.dst == chunk && u.thread == thread) file = u.file, line = u.line;
    }
    const uint3 t = w.fibers[thread]->info.thread_idx;
    fail<UnpublishedRead>(w, f, std::string(op) + " at " + site_string(site_file, site_line) + ": " + what + " reads shared memory that thread " +
                                    dim_string(dim3(t.x, t.y, t.z)) + "'s cp.async at " +
                                    site_string(file, line) +
                                    (state < 0 ? " will write: no wait of that thread covers its group yet"
                                               : " landed at that thread's wait, with no __syncwarp naming it or __syncthreads since") +
                                    " (a GPU may show the old bytes)");
  }
}
}  // namespace

// ---------------------------------------------------------------- the block
Worker::Worker() {
  smem.reset(new unsigned char[kSharedMemoryLimit + 64]);
  const auto address = reinterpret_cast<std::uintptr_t>(smem.get());
  smem_base = smem.get() + ((64 - address % 64) % 64);
  chunk_state.assign(kSharedMemoryLimit / 16, 0);
}

void Worker::count_staged_group(const StagedGroup& g) {
  std::uint64_t extra = 0;
  const unsigned per_phase = g.bytes >= 16 ? 8 : g.bytes >= 8 ? 16 : 32;  // lanes per 128-byte phase
  for (unsigned first = 0; first < 32; first += per_phase) {
    BankTally tally;
    bool any = false;
    for (unsigned l = first; l < first + per_phase; ++l) {
      if (!(g.lanes >> l & 1)) continue;
      any = true;
      const std::size_t begin = std::size_t(g.address[l] - smem_base) / 4, end = (std::size_t(g.address[l] - smem_base) + g.bytes - 1) / 4;
      for (std::size_t word = begin; word <= end; ++word) tally.add(word);
    }
    if (any) extra += std::uint64_t(tally.wavefronts() - 1);
  }
  staged_loads.fetch_add(1, std::memory_order_relaxed);
  if (extra) staged_extra.fetch_add(extra, std::memory_order_relaxed);
}

void Worker::count_staged_groups() {
  for (const auto& [key, g] : staged_groups) count_staged_group(g);
  staged_groups.clear();
}

void Worker::publish(const Landed& u) {
  std::int32_t& s = chunk_state[std::size_t(u.dst - smem_base) / 16];
  if (s == std::int32_t(u.thread) + 1) s = 0;
}

void Worker::prepare(std::uint64_t linear) {
  const dim3 g = job->grid, b = job->block;
  block_linear = linear;
  block.block_idx = make_uint3(unsigned(linear % g.x), unsigned(linear / g.x % g.y), unsigned(linear / g.x / g.y));
  block.block_dim = b;
  block.grid_dim = g;
  threads = b.x * b.y * b.z;
  warps = (threads + 31) / 32;
  if (stack_bytes != job->stack_bytes) {  // another stack size: new stacks
    fibers.clear();
    stack_bytes = job->stack_bytes;
  }
  while (fibers.size() < threads) {
    auto f = std::make_unique<Fiber>();
    f->stack = Stack(stack_bytes);
    f->worker = this;
    fibers.push_back(std::move(f));
  }
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = *fibers[i];
    f.info.thread_idx = make_uint3(i % b.x, i / b.x % b.y, i / b.x / b.y);
    f.linear = i;
    f.lane = i % 32;
    f.warp = i / 32;
    f.state = State::ready;
    f.started = f.cancelled = false;
    f.error = nullptr;
    f.copies.clear();
    f.groups = 0;
    f.staged_calls.clear();
    make_context(f.ctx, f.stack, &fiber_main, &f);
  }
  live = threads;
  at_barrier = 0;
  failed = false;
  unpublished.clear();
  if (chunks_dirty) std::fill(chunk_state.begin(), chunk_state.end(), 0);
  chunks_dirty = false;
  staged_groups.clear();
  rng = Rng(job->seed ^ (linear + 1) * 0x9e3779b97f4a7c15ull);
  reset_shared();
}

void Worker::order_queue() {
  queue.clear();
  for (unsigned i = 0; i < threads; ++i)
    if (fibers[i]->state == State::ready) queue.push_back(i);
  if (job->order == Order::reverse) std::reverse(queue.begin(), queue.end());
  if (job->order == Order::random) rng.shuffle(queue);
}

void Worker::run_round() {
  for (unsigned i : queue) {
    Fiber& f = *fibers[i];
    f.state = State::running;
    f.started = true;
    running = &f;
    current.thread = &f.info;
    switch_context(scheduler, f.ctx);
    if (failed) break;
  }
  running = nullptr;
  current.thread = nullptr;
}

void Worker::resolve_group(unsigned warp, unsigned mask) {
  auto lanes = [&](unsigned l) -> Fiber& { return *fibers[std::size_t(warp) * 32 + l]; };
  const Fiber& first = lanes(__builtin_ctz(mask));
  const Collective kind = first.call.kind;
  unsigned word = 0;
  unsigned words[32];  // match_any: a word per lane
  if (kind == Collective::ballot || kind == Collective::any || kind == Collective::all) {
    unsigned ballot = 0;
    for (unsigned m = mask; m; m &= m - 1) {
      const unsigned l = __builtin_ctz(m);
      if (lanes(l).call.operand != 0) ballot |= 1u << l;
    }
    word = kind == Collective::ballot ? ballot : kind == Collective::any ? unsigned(ballot != 0) : unsigned(ballot == mask);
  } else if (is_shuffle(kind)) {
    // PTX shfl.sync: a segment of `width` lanes (width a power of two), the source lane j by
    // mode; a source past the segment's end (or, for up, before its start) gives the lane's
    // own value; a source outside the mask is undefined on the GPU: 0xFF bytes here.
    const unsigned size = first.call.size;
    for (unsigned m = mask; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      Fiber& f = lanes(l);
      const int seg = ~(f.call.width - 1) & 31;
      const int lo = l & seg, hi = lo | (31 & ~seg);
      const int b = f.call.operand & 31;
      int j = l;
      bool in = true;
      switch (kind) {
        case Collective::shfl_idx: j = lo | (b & ~seg); break;
        case Collective::shfl_up: j = l - b; in = j >= lo; break;
        case Collective::shfl_down: j = l + b; in = j <= hi; break;
        default: j = l ^ b; in = j <= hi; break;
      }
      if (!in) j = l;
      if (mask >> j & 1)
        std::memcpy(f.result, lanes(j).value, size);
      else
        std::memset(f.result, 0xFF, size);
    }
  } else if (kind == Collective::match_any) {
    // PTX match.any.sync: per lane, the lanes of the mask whose value has the same bytes.
    for (unsigned m = mask; m; m &= m - 1) {
      const unsigned l = __builtin_ctz(m);
      unsigned same = 0;
      for (unsigned n = mask; n; n &= n - 1) {
        const unsigned j = __builtin_ctz(n);
        if (std::memcmp(lanes(l).value, lanes(j).value, first.call.size) == 0) same |= 1u << j;
      }
      words[l] = same;
    }
  } else if (is_mma(kind)) {
    // The whole warp (the wrappers' mask): each lane's operands are in its own frame.
    const MmaOperands* operands[32];
    float* d[32];
    for (unsigned l = 0; l < 32; ++l) {
      operands[l] = static_cast<const MmaOperands*>(lanes(l).call.value);
      d[l] = static_cast<float*>(lanes(l).call.result);
    }
    warp_mma(kind, operands, d);
  } else if (is_ldmatrix(kind)) {
    const void* rows[32];
    unsigned* r[32];
    for (unsigned l = 0; l < 32; ++l) {
      rows[l] = *static_cast<const void* const*>(lanes(l).call.value);
      r[l] = static_cast<unsigned*>(lanes(l).call.result);
      check_staged(*this, lanes(l), rows[l], 16, -1, collective_name(kind), first.call.file, first.call.line, "its row");
    }
    count_bank_conflicts(smem_base, rows);
    warp_ldmatrix(kind == Collective::ldmatrix_x4_trans, rows, r);
  }
  if (kind == Collective::syncwarp && !unpublished.empty()) {  // the lanes' landed copies are visible to the warp
    std::size_t kept = 0;
    for (const Landed& u : unpublished)
      if (!(u.thread / 32 == warp && mask >> (u.thread % 32) & 1))
        unpublished[kept++] = u;
      else
        publish(u);
    unpublished.resize(kept);
  }
  for (unsigned m = mask; m; m &= m - 1) {
    const unsigned l = __builtin_ctz(m);
    Fiber& f = lanes(l);
    f.word = kind == Collective::match_any ? words[l] : word;
    f.state = State::ready;
  }
}

bool Worker::resolve() {
  // The block barrier: every live thread at the same one.
  if (at_barrier > 0 && at_barrier == live) {
    if (live < threads) return false;
    const Fiber* first = nullptr;
    int count = 0;
    for (unsigned i = 0; i < threads; ++i) {
      const Fiber& f = *fibers[i];
      if (!first) first = &f;
      if (f.barrier != first->barrier || !same_site(f, *first)) return false;
      count += f.call.operand != 0;
    }
    const BarrierKind kind = first->barrier;
    const unsigned word = kind == BarrierKind::count ? unsigned(count)
                          : kind == BarrierKind::all ? unsigned(unsigned(count) == threads)
                          : kind == BarrierKind::any ? unsigned(count > 0)
                                                     : 0u;
    for (unsigned i = 0; i < threads; ++i) {
      fibers[i]->word = word;
      fibers[i]->state = State::ready;
    }
    at_barrier = 0;
    for (const Landed& u : unpublished) publish(u);
    unpublished.clear();  // every thread's landed copies are visible to the block
    return true;
  }
  // Warp collectives.
  bool progress = false;
  for (unsigned warp = 0; warp < warps; ++warp) {
    auto lanes = [&](unsigned l) -> Fiber& { return *fibers[std::size_t(warp) * 32 + l]; };
    const unsigned exists = existing_lanes(threads, warp);
    unsigned waiting = 0, active = 0;
    for (unsigned m = exists; m; m &= m - 1) {
      const unsigned l = __builtin_ctz(m);
      if (lanes(l).state != State::collective) continue;
      (lanes(l).call.kind == Collective::activemask ? active : waiting) |= 1u << l;
    }
    unsigned released = 0;
    for (unsigned m = waiting; m; m &= m - 1) {
      const unsigned l = __builtin_ctz(m);
      if (released >> l & 1) continue;
      const CollectiveCall& c = lanes(l).call;
      if ((c.mask & waiting) != c.mask) continue;
      bool same = true;
      for (unsigned n = c.mask; n && same; n &= n - 1) same = same_collective(lanes(__builtin_ctz(n)), lanes(l));
      if (!same) continue;
      resolve_group(warp, c.mask);
      released |= c.mask;
    }
    // __activemask: once the warp has nothing else to complete, the lanes at one call site
    // are the active mask of each other.
    if (released == 0 && active != 0) {
      for (unsigned m = active; m; m &= m - 1) {
        const unsigned l = __builtin_ctz(m);
        if (lanes(l).state != State::collective) continue;
        unsigned group = 0;
        for (unsigned n = m; n; n &= n - 1)
          if (same_site(lanes(__builtin_ctz(n)), lanes(l))) group |= 1u << __builtin_ctz(n);
        for (unsigned n = group; n; n &= n - 1) {
          lanes(__builtin_ctz(n)).word = group;
          lanes(__builtin_ctz(n)).state = State::ready;
        }
      }
      released = active;
    }
    progress |= released != 0;
  }
  return progress;
}

void Worker::diagnose() {
  auto lane_of = [&](const Fiber& f, unsigned l) -> const Fiber& {
    return *fibers[std::size_t(f.warp) * 32 + l];
  };
  auto waits = [&](const Fiber& f, unsigned l) {
    const Fiber& g = lane_of(f, l);
    const uint3 t = g.info.thread_idx;
    return describe(f) + " waits for lane " + std::to_string(l) + " (thread " +
           dim_string(dim3(t.x, t.y, t.z)) + "), which " + (g.state == State::exited ? "" : "waits at ") +
           describe(g);
  };
  // A collective waiting for a lane that exited, or that waits at another collective.
  for (unsigned i = 0; i < threads; ++i) {
    const Fiber& f = *fibers[i];
    if (f.state != State::collective) continue;
    for (unsigned m = f.call.mask; m; m &= m - 1)
      if (lane_of(f, __builtin_ctz(m)).state == State::exited)
        fail<DivergentCollective>(*this, f, "divergent warp collective: " + waits(f, __builtin_ctz(m)));
  }
  for (unsigned i = 0; i < threads; ++i) {
    const Fiber& f = *fibers[i];
    if (f.state != State::collective) continue;
    for (unsigned m = f.call.mask; m; m &= m - 1) {
      const Fiber& g = lane_of(f, __builtin_ctz(m));
      if (g.state == State::collective && !same_collective(g, f))
        fail<DivergentCollective>(*this, f, "divergent warp collective: " + waits(f, __builtin_ctz(m)));
    }
  }
  // Every live thread at a barrier, but some exited or wait at another one.
  if (at_barrier == live) {
    const Fiber* first = nullptr;
    for (unsigned i = 0; i < threads && !first; ++i)
      if (fibers[i]->state == State::barrier) first = fibers[i].get();
    for (unsigned i = 0; i < threads; ++i) {
      const Fiber& g = *fibers[i];
      const uint3 t = g.info.thread_idx;
      if (g.state == State::exited)
        fail<DivergentBarrier>(*this, *first, "divergent barrier: it waits at " + describe(*first) +
                                                  " while thread " + dim_string(dim3(t.x, t.y, t.z)) +
                                                  " has exited");
      if (g.barrier != first->barrier || !same_site(g, *first))
        fail<DivergentBarrier>(*this, *first, "divergent barrier: it waits at " + describe(*first) +
                                                  " while thread " + dim_string(dim3(t.x, t.y, t.z)) +
                                                  " waits at " + describe(g));
    }
  }
  // A collective waiting for a lane at the barrier, which waits for the collective's lanes.
  for (unsigned i = 0; i < threads; ++i) {
    const Fiber& f = *fibers[i];
    if (f.state != State::collective) continue;
    for (unsigned m = f.call.mask; m; m &= m - 1)
      if (lane_of(f, __builtin_ctz(m)).state == State::barrier)
        fail<Deadlock>(*this, f, "deadlock: " + waits(f, __builtin_ctz(m)) + ", which waits for this thread");
  }
  const Fiber& any = *fibers[0];
  fail<Deadlock>(*this, any, "deadlock: no thread of the block can go on");
}

void Worker::cancel() {
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = *fibers[i];
    if (!f.started || f.state == State::exited) continue;
    f.cancelled = true;
    running = &f;
    current.thread = &f.info;
    switch_context(scheduler, f.ctx);
  }
  running = nullptr;
  current.thread = nullptr;
}

void Worker::run_block(Job& j, std::uint64_t linear) {
  job = &j;
  prepare(linear);
  current.block = &block;
  std::exception_ptr error;
  try {
    order_queue();
    for (;;) {
      run_round();
      if (failed || live == 0 || j.abort.load(std::memory_order_relaxed)) break;
      order_queue();
      if (!queue.empty()) continue;  // threads that gave way at an atomic run on first
      if (!resolve()) diagnose();
      order_queue();
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (!error && failed) {
    for (unsigned i = 0; i < threads && !error; ++i) {
      const Fiber& f = *fibers[i];
      if (!f.error) continue;
      // The emulator's own errors (raised by a call of this thread) as they are; any other
      // exception wrapped, naming where it came from.
      auto wrapped = [&](const std::string& what) {
        const uint3 b = block.block_idx, t = f.info.thread_idx;
        return std::make_exception_ptr(KernelException(where(*this, f) + ": " + what, j.name,
                                                       dim3(b.x, b.y, b.z), dim3(t.x, t.y, t.z), f.error));
      };
      try {
        std::rethrow_exception(f.error);
      } catch (const Error&) {
        error = f.error;
      } catch (const std::exception& e) {
        error = wrapped(std::string("exception thrown by the kernel: ") + e.what());
      } catch (...) {
        error = wrapped("the kernel threw an exception not derived from std::exception");
      }
    }
  }
  cancel();  // unwinds the fibers still waiting (an error, or the launch stopping)
  count_staged_groups();
  current.block = nullptr;
  release_shared();
  job = nullptr;
  if (error) std::rethrow_exception(error);
}

// ---------------------------------------------------------------- synchronisation calls
void atomic_point() {
  Worker* w = this_worker();
  if (w == nullptr || w->running == nullptr || w->job->order != Order::random || (w->rng.next() & 1)) return;
  Fiber& f = *w->running;
  f.state = State::ready;
  suspend(*w, f);
}

int barrier(BarrierKind kind, int predicate, const char* file, int line) {
  Fiber& f = running_fiber(barrier_name(kind));
  Worker& w = *f.worker;
  f.barrier = kind;
  f.call.operand = predicate;
  f.file = file;
  f.line = line;
  f.state = State::barrier;
  ++w.at_barrier;
  suspend(w, f);
  return int(f.word);
}

unsigned collective(const CollectiveCall& call) {
  Fiber& f = running_fiber(collective_name(call.kind));
  Worker& w = *f.worker;
  auto refuse = [&](const std::string& why) {
    fail<DivergentCollective>(w, f, std::string(collective_name(call.kind)) + " at " +
                                        site_string(call.file, call.line) + ": " + why);
  };
  if (call.kind != Collective::activemask) {
    if (!(call.mask >> f.lane & 1))
      refuse("its mask " + hex(call.mask) + " does not name the calling lane " + std::to_string(f.lane));
    if (call.mask & ~existing_lanes(w.threads, f.warp))
      refuse("its mask " + hex(call.mask) + " names lanes past the block's " + std::to_string(w.threads) +
             " threads");
  }
  if (is_shuffle(call.kind) && (call.width < 1 || call.width > 32 || (call.width & (call.width - 1))))
    refuse("width " + std::to_string(call.width) + " is not a power of two from 1 to 32");
  f.call = call;
  f.file = call.file;
  f.line = call.line;
  if (call.size) std::memcpy(f.value, call.value, call.size);
  f.state = State::collective;
  if (call.kind != Collective::activemask && call.mask == 1u << f.lane) {
    w.resolve_group(f.warp, call.mask);  // alone in its mask: nothing to wait for
    f.state = State::running;
  } else {
    suspend(w, f);
  }
  if (call.size && call.result) std::memcpy(call.result, f.result, call.size);
  return f.word;
}

namespace {
// The calling fiber's check that [p, p + 16) lies in its block's shared memory, 16-byte aligned.
void check_shared16(const Worker& w, const Fiber& f, const void* p, const char* what, const char* file, int line) {
  const auto* b = static_cast<const unsigned char*>(p);
  const bool inside = w.smem_base != nullptr && b >= w.smem_base && b + 16 <= w.smem_base + w.smem_used;
  if (!inside || reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
    fail<MisalignedAddress>(w, f, std::string(what) + " at " + site_string(file, line) + ": " +
                                      (inside ? "address not 16-byte aligned" : "address outside the block's shared memory"));
}
}  // namespace

void ldmatrix(bool trans, unsigned* r, const void* row, const char* file, int line) {
  const Collective kind = trans ? Collective::ldmatrix_x4_trans : Collective::ldmatrix_x4;
  Fiber& f = running_fiber(collective_name(kind));
  check_shared16(*f.worker, f, row, collective_name(kind), file, line);
  const void* address = row;  // in this frame while the warp gathers
  collective({kind, 0xffffffffu, 0, 32, 0, &address, r, file, line});
}

void cp_async(void* smem, const void* gmem, int src_bytes, const char* file, int line) {
  Fiber& f = running_fiber("gnnfuse_cp_async16");
  const Worker& w = *f.worker;
  check_shared16(w, f, smem, "gnnfuse_cp_async16", file, line);
  if (src_bytes < 0 || src_bytes > 16)
    fail<MisalignedAddress>(w, f, "gnnfuse_cp_async16 at " + site_string(file, line) + ": src_bytes " + std::to_string(src_bytes) +
                                      " is not in 0..16");
  if (src_bytes > 0 && reinterpret_cast<std::uintptr_t>(gmem) % 16 != 0)
    fail<MisalignedAddress>(w, f, "gnnfuse_cp_async16 at " + site_string(file, line) + ": source address not 16-byte aligned");
  f.copies.push_back({static_cast<unsigned char*>(smem), static_cast<const unsigned char*>(gmem), src_bytes, 0u, file, line});
  Worker& writer = *f.worker;
  writer.chunk_state[std::size_t(static_cast<unsigned char*>(smem) - writer.smem_base) / 16] = -(std::int32_t(f.linear) + 1);
  writer.chunks_dirty = true;
}

void cp_async_commit() {
  Fiber& f = running_fiber("gnnfuse_cp_async_commit");
  ++f.groups;
  for (Fiber::Copy& c : f.copies)
    if (c.group == 0) c.group = f.groups;
}

void cp_async_wait(int n) {
  Fiber& f = running_fiber("gnnfuse_cp_async_wait");
  if (f.groups > unsigned(n)) land_copies(f, f.groups - unsigned(n));
}

void staged_read(const void* p, unsigned bytes, const char* file, int line) {
  const char* op = bytes == 16 ? "gnnfuse_ld_staged16" : "gnnfuse_ld_staged";
  Fiber& f = running_fiber(op);
  Worker& w = *f.worker;
  const auto* b = static_cast<const unsigned char*>(p);
  const bool inside = w.smem_base != nullptr && b >= w.smem_base && b + bytes <= w.smem_base + w.smem_used;
  if (!inside || reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
    fail<MisalignedAddress>(w, f, std::string(op) + " at " + site_string(file, line) + ": " +
                                      (inside ? "address not aligned to its " + std::to_string(bytes) + " bytes" : "address outside the block's shared memory"));
  check_staged(w, f, p, bytes, int(f.linear), op, file, line, "its load");
  unsigned seq = 0;  // this lane's calls at the site so far
  bool found = false;
  for (auto& [site, calls] : f.staged_calls)
    if (site.first == file && site.second == line) {
      seq = calls++;
      found = true;
      break;
    }
  if (!found) f.staged_calls.push_back({{file, line}, 1u});
  const Worker::StagedKey key{f.warp, file, line, seq};
  Worker::StagedGroup& g = w.staged_groups[key];
  g.bytes = bytes;
  g.lanes |= 1u << f.lane;
  g.address[f.lane] = b;
  if (g.lanes == existing_lanes(w.threads, f.warp)) {  // every lane of the warp loaded: counted now
    w.count_staged_group(g);
    w.staged_groups.erase(key);
  }
}

}  // namespace gnnfuse::simt::detail

namespace gnnfuse::simt {
std::uint64_t ldmatrix_bank_conflicts() { return detail::bank_conflicts.load(std::memory_order_relaxed); }
StagedLoadStats staged_load_stats() {
  return {detail::staged_loads.load(std::memory_order_relaxed), detail::staged_extra.load(std::memory_order_relaxed)};
}
}  // namespace gnnfuse::simt
