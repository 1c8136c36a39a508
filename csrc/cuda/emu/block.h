// The SIMT emulator's runtime, internal: one Worker per OS thread of the pool runs whole blocks,
// one Fiber per CUDA thread (block.cpp: scheduling, barriers, warp collectives, errors;
// launch.cpp: the pool, configuration, shared memory, launches).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/emu/context.h"
#include "cuda/emu/simt_emu.h"

namespace gnnfuse::simt::detail {

// A small, fast generator for the random orders (splitmix64).
struct Rng {
  std::uint64_t state;
  explicit Rng(std::uint64_t seed = 0) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[next() % i]);
  }
};

// One launch, shared by the workers running its blocks.
struct Job {
  KernelCall call;
  std::string name;  // the kernel's name, outer parentheses dropped
  dim3 grid, block;
  std::size_t smem = 0;
  std::size_t stack_bytes = 0;
  Order order = Order::forward;
  std::uint64_t seed = 0;
  std::vector<std::uint64_t> blocks;  // random order: linear block indices in dispatch order
  std::atomic<std::size_t> next{0};
  std::atomic<bool> abort{false};
  std::mutex mutex;
  std::exception_ptr error;  // of the lowest failing block
  std::uint64_t error_block = ~std::uint64_t(0);
};

struct Worker;

enum class State : unsigned char { ready, running, barrier, collective, exited };

struct Fiber {
  ThreadInfo info;
  Worker* worker = nullptr;
  unsigned linear = 0, lane = 0, warp = 0;
  Context ctx;
  Stack stack;
  State state = State::ready;
  bool started = false, cancelled = false;
  // The call it waits at.
  const char* file = nullptr;
  int line = 0;
  BarrierKind barrier = BarrierKind::plain;
  CollectiveCall call{};
  alignas(16) unsigned char value[16] = {};
  // What the call returns.
  alignas(16) unsigned char result[16] = {};
  unsigned word = 0;
  std::exception_ptr error;
  // cp.async: the queued copies (group 0: not committed yet) and the groups committed so far.
  struct Copy {
    unsigned char* dst;
    const unsigned char* src;
    int bytes;
    unsigned group;
    const char* file;  // the cp.async call site
    int line;
  };
  std::vector<Copy> copies;
  unsigned groups = 0;
  // Staged loads: its calls so far per call site (Worker::staged_groups' seq).
  std::vector<std::pair<std::pair<const char*, int>, unsigned>> staged_calls;
};

// Thrown at a synchronisation point of a fiber whose block is abandoned (an error elsewhere):
// unwinds the kernel's frames. Not an std::exception, so kernel code does not catch it.
struct Cancelled {};

struct Worker {
  Context scheduler;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::size_t stack_bytes = 0;  // of the fibers' stacks
  BlockInfo block{};
  std::uint64_t block_linear = 0;
  Job* job = nullptr;
  Fiber* running = nullptr;
  unsigned threads = 0, warps = 0, live = 0, at_barrier = 0;
  bool failed = false;  // a fiber threw
  std::vector<unsigned> queue;
  Rng rng;
  // Shared memory: dynamic first (16-byte aligned), then the static sites in order of first use.
  std::unique_ptr<unsigned char[]> smem;
  unsigned char* smem_base = nullptr;  // 64-byte aligned inside smem
  std::size_t smem_used = 0;
  struct Site {
    const void* tag;
    std::size_t bytes;
    unsigned char* data;
  };
  std::vector<Site> sites;
  // cp.async copies landed (at their thread's wait, or its exit) that no barrier of that thread
  // has published since (a __syncwarp naming it, a __syncthreads): an ldmatrix row reading one,
  // or a staged load of another thread's, is an UnpublishedRead (chunk_state below).
  struct Landed {
    const unsigned char* dst;  // 16 bytes
    unsigned thread;           // linear
    const char* file;
    int line;
  };
  std::vector<Landed> unpublished;
  // Per 16 bytes of shared memory (a cp.async's destination): 0 nothing pending; t + 1 a copy
  // thread t landed, unpublished (in `unpublished`); -(t + 1) a copy thread t queued, not landed.
  // What ldmatrix and gnnfuse_ld_staged[16] check their bytes against. `chunks_dirty`: not all 0.
  std::vector<std::int32_t> chunk_state;
  bool chunks_dirty = false;
  void publish(const Landed& u);  // its chunk back to 0 (unless queued again since)
  // Staged loads grouped into warp instructions (simt_emu.h: staged_load_stats): per (warp,
  // call site, the lane's count of calls there so far), each lane's address; counted once every
  // lane of the warp has loaded, or when the block ends.
  struct StagedGroup {
    unsigned bytes = 0, lanes = 0;  // lanes: the mask of lanes that loaded
    const unsigned char* address[32] = {};
  };
  struct StagedKey {
    unsigned warp;
    const char* file;
    int line;
    unsigned seq;
    bool operator==(const StagedKey& o) const { return warp == o.warp && file == o.file && line == o.line && seq == o.seq; }
  };
  struct StagedKeyHash {
    std::size_t operator()(const StagedKey& k) const {
      return std::hash<const void*>()(k.file) ^ (std::size_t(k.line) * 0x9e3779b97f4a7c15ull) ^ (std::size_t(k.warp) << 40) ^
             (std::size_t(k.seq) * 0xff51afd7ed558ccdull);
    }
  };
  std::unordered_map<StagedKey, StagedGroup, StagedKeyHash> staged_groups;
  void count_staged_group(const StagedGroup& g);  // adds one instruction to the counts
  void count_staged_groups();                     // the groups left (lanes that diverged), then clears them

  Worker();
  ~Worker();
  // Runs one block of `job`; throws the block's error (an Error, or the kernel's own exception
  // wrapped in KernelException).
  void run_block(Job& job, std::uint64_t linear);

  void prepare(std::uint64_t linear);
  void order_queue();
  void run_round();
  // Completes the waits that can complete; false when none can.
  bool resolve();
  // Completes the collective of the lanes `mask` of warp `warp` (all waiting at it).
  void resolve_group(unsigned warp, unsigned mask);
  [[noreturn]] void diagnose();
  // Unwinds every started fiber that has not exited.
  void cancel();
  // Shared memory of a new block: the dynamic part filled with 0xFF, no static site yet
  // (AddressSanitizer: the rest of the arena poisoned); release_shared at its end.
  void reset_shared();
  void release_shared();
};

// The worker of the calling OS thread while it runs blocks (null elsewhere).
Worker*& this_worker();
// The fiber running on this OS thread, or an Error naming `what` outside a kernel.
Fiber& running_fiber(const char* what);

// Message helpers: "kernel K, block (x,y,z), thread (x,y,z)".
std::string where(const Worker& w, const Fiber& f);
std::string dim_string(dim3 d);
std::string site_string(const char* file, int line);

}  // namespace gnnfuse::simt::detail
