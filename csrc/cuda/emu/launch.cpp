// The SIMT emulator's launches: configuration (API and environment), the pool of OS threads
// running blocks, block-shared memory, and the errors' common parts.
#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GNNFUSE_SIMT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define GNNFUSE_SIMT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define GNNFUSE_SIMT_POISON(p, n) ((void)(p), (void)(n))
#define GNNFUSE_SIMT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#include "cuda/emu/block.h"

namespace gnnfuse::simt {

Error::Error(const std::string& what, std::string kernel, dim3 block, dim3 thread)
    : std::runtime_error(what), kernel_(std::move(kernel)), block_(block), thread_(thread) {}

// ---------------------------------------------------------------- configuration
namespace {

struct Config {
  std::mutex mutex;
  std::optional<std::pair<Order, std::uint64_t>> order;
  unsigned threads = 0;     // 0: the environment's or the default
  std::size_t stack = 0;    // 0: the environment's or the default
};
Config& config() {
  static Config c;
  return c;
}

std::pair<Order, std::uint64_t> parse_order(const std::string& spec, const char* origin) {
  if (spec == "forward") return {Order::forward, 0};
  if (spec == "reverse") return {Order::reverse, 0};
  if (spec == "random") return {Order::random, 0};
  if (spec.rfind("random:", 0) == 0 && spec.size() > 7) {
    char* end = nullptr;
    const unsigned long long seed = std::strtoull(spec.c_str() + 7, &end, 10);
    if (end && *end == '\0' && spec[7] != '-') return {Order::random, seed};
  }
  throw std::invalid_argument(std::string("simt: ") + origin + " '" + spec +
                              "': expected forward, reverse, random or random:<seed>");
}

// A positive integer with an optional K/M suffix (`scale` per unit), or nullopt when unset.
std::optional<std::size_t> env_size(const char* name, bool suffixes) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  std::size_t scale = 1;
  if (suffixes && end && (*end == 'K' || *end == 'k')) scale = 1024, ++end;
  if (suffixes && end && (*end == 'M' || *end == 'm')) scale = 1024 * 1024, ++end;
  if (text[0] == '-' || end == text || !end || *end != '\0' || v == 0)
    throw std::invalid_argument(std::string("simt: ") + name + "='" + text + "': expected a positive integer" +
                                (suffixes ? " (with an optional K or M suffix)" : ""));
  return std::size_t(v) * scale;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kDefaultStack = 256 * 1024;
#else
constexpr std::size_t kDefaultStack = 64 * 1024;
#endif

}  // namespace

void set_order(Order order, std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(config().mutex);
  config().order = std::make_pair(order, seed);
}

void reset_order() {
  std::lock_guard<std::mutex> lock(config().mutex);
  config().order.reset();
}

void set_order(const std::string& spec) {
  const auto parsed = parse_order(spec, "order");
  set_order(parsed.first, parsed.second);
}

namespace {
std::pair<Order, std::uint64_t> current_order() {
  std::lock_guard<std::mutex> lock(config().mutex);
  if (config().order) return *config().order;
  const char* env = std::getenv("GNNFUSE_SIMT_ORDER");
  if (!env || !*env) return {Order::forward, 0};
  return parse_order(env, "GNNFUSE_SIMT_ORDER");
}
}  // namespace

Order order() { return current_order().first; }
std::uint64_t order_seed() { return current_order().second; }

void set_threads(unsigned n) {
  std::lock_guard<std::mutex> lock(config().mutex);
  config().threads = n;
}

unsigned threads() {
  std::lock_guard<std::mutex> lock(config().mutex);
  if (config().threads) return config().threads;
  if (const auto n = env_size("GNNFUSE_SIMT_THREADS", false)) return unsigned(std::min<std::size_t>(*n, 1024));
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_stack_size(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(config().mutex);
  config().stack = bytes;
}

std::size_t stack_size() {
  std::lock_guard<std::mutex> lock(config().mutex);
  if (config().stack) return config().stack;
  if (const auto n = env_size("GNNFUSE_SIMT_STACK", true)) return *n;
  return kDefaultStack;
}

namespace detail {

// ---------------------------------------------------------------- where kernel code runs
Worker*& this_worker() {
  static thread_local Worker* worker = nullptr;
  return worker;
}

void outside_kernel(const char* what) {
  throw Error(std::string("simt: ") + what + " used outside a kernel", "", dim3(0, 0, 0), dim3(0, 0, 0));
}

Fiber& running_fiber(const char* what) {
  Worker* w = this_worker();
  if (!w || !w->running) outside_kernel(what);
  return *w->running;
}

void device_check_failed(const char* cond, const char* msg, const char* file, int line) {
  Fiber& f = running_fiber("GNNFUSE_DEVICE_CHECK");
  const Worker& w = *f.worker;
  const uint3 b = w.block.block_idx, t = f.info.thread_idx;
  throw DeviceCheckFailed(where(w, f) + ": device check failed: " + cond + " (" + site_string(file, line) +
                              "): " + msg,
                          w.job->name, dim3(b.x, b.y, b.z), dim3(t.x, t.y, t.z));
}

// ---------------------------------------------------------------- shared memory
Worker::~Worker() { GNNFUSE_SIMT_UNPOISON(smem_base, kSharedMemoryLimit); }

void Worker::reset_shared() {
  sites.clear();
  GNNFUSE_SIMT_POISON(smem_base, kSharedMemoryLimit);
  GNNFUSE_SIMT_UNPOISON(smem_base, job->smem);
  std::memset(smem_base, 0xFF, job->smem);
  smem_used = (job->smem + 15) / 16 * 16;
}

void Worker::release_shared() {
  GNNFUSE_SIMT_UNPOISON(smem_base, kSharedMemoryLimit);
  sites.clear();
}

void* shared_array(const void* site, std::size_t bytes, std::size_t align, const char* name) {
  Fiber& f = running_fiber("GNNFUSE_SHARED_ARRAY");
  Worker& w = *f.worker;
  for (const Worker::Site& s : w.sites)
    if (s.tag == site) return s.data;
  align = std::max<std::size_t>(align, 16);
  const std::size_t offset = (w.smem_used + align - 1) / align * align;
  if (offset + bytes > kSharedMemoryLimit) {
    const uint3 b = w.block.block_idx, t = f.info.thread_idx;
    throw LaunchError(where(w, f) + ": shared array '" + name + "' of " + std::to_string(bytes) +
                          " bytes takes the block's shared memory to " + std::to_string(offset + bytes) +
                          " bytes, over the limit of " + std::to_string(kSharedMemoryLimit),
                      w.job->name, dim3(b.x, b.y, b.z), dim3(t.x, t.y, t.z));
  }
  unsigned char* data = w.smem_base + offset;
  GNNFUSE_SIMT_UNPOISON(data, bytes);
  std::memset(data, 0xFF, bytes);  // undefined on the GPU: poison, so reading before writing shows
  w.smem_used = offset + bytes;
  w.sites.push_back({site, bytes, data});
  return data;
}

void* dynamic_shared() {
  Fiber& f = running_fiber("GNNFUSE_DYNAMIC_SHARED");
  return f.worker->smem_base;
}

// ---------------------------------------------------------------- the pool
namespace {

void run_blocks(Job& job, Worker& w) {
  this_worker() = &w;
  const std::uint64_t n = std::uint64_t(job.grid.x) * job.grid.y * job.grid.z;
  while (!job.abort.load(std::memory_order_relaxed)) {
    const std::size_t i = job.next.fetch_add(1);
    if (i >= n) break;
    const std::uint64_t linear = job.order == Order::random    ? job.blocks[i]
                                 : job.order == Order::reverse ? n - 1 - i
                                                               : i;
    try {
      w.run_block(job, linear);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (linear < job.error_block) {
        job.error = std::current_exception();
        job.error_block = linear;
      }
      job.abort.store(true);
    }
  }
  this_worker() = nullptr;
}

class Pool {
 public:
  ~Pool() { stop(); }

  // Runs every block of `job`: the calling thread and the pool's threads take blocks in turn.
  void run(Job& job, unsigned size) {
    std::lock_guard<std::mutex> launch(launch_mutex_);
    if (workers_.size() != size) resize(size);
    const std::uint64_t blocks = std::uint64_t(job.grid.x) * job.grid.y * job.grid.z;
    const bool helpers = blocks > 1 && !threads_.empty();
    if (helpers) {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      busy_ = unsigned(threads_.size());
      ++generation_;
      wake_.notify_all();
    }
    run_blocks(job, *workers_[0]);
    if (helpers) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return busy_ == 0; });
      job_ = nullptr;
    }
  }

 private:
  void resize(unsigned size) {
    stop();
    stop_ = false;
    workers_.clear();
    for (unsigned i = 0; i < size; ++i) workers_.push_back(std::make_unique<Worker>());
    // New threads wait for the next launch (generation_ counts the launches so far).
    for (unsigned i = 1; i < size; ++i)
      threads_.emplace_back([this, i, seen = generation_] { loop(*workers_[i], seen); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      wake_.notify_all();
    }
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  void loop(Worker& w, std::uint64_t seen) {
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      run_blocks(*job, w);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) done_.notify_all();
    }
  }

  std::mutex launch_mutex_;  // one launch at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::unique_ptr<Worker>> workers_;  // [0]: the launching thread's
  std::vector<std::thread> threads_;              // run workers_[1..]
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  unsigned busy_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

std::string kernel_name(const char* spelled) {
  std::string s = spelled ? spelled : "?";
  while (s.size() >= 2 && s.front() == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
  return s;
}

}  // namespace

void launch(const KernelCall& call, dim3 grid, dim3 block, std::size_t smem) {
  const std::string name = kernel_name(call.name);
  auto invalid = [&](const std::string& why) {
    throw LaunchError("simt: kernel " + name + ": invalid launch: " + why, name, dim3(0, 0, 0), dim3(0, 0, 0));
  };
  if (this_worker() || current.thread)
    invalid("launched from inside a kernel (the emulator has no dynamic parallelism)");
  const std::uint64_t threads_per_block = std::uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) invalid("empty grid " + dim_string(grid));
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) invalid("grid " + dim_string(grid) + " too large");
  if (threads_per_block == 0) invalid("empty block " + dim_string(block));
  if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads_per_block > 1024)
    invalid("block " + dim_string(block) + " over 1024 threads or the per-dimension limits (1024, 1024, 64)");
  if (smem > kSharedMemoryLimit)
    invalid(std::to_string(smem) + " bytes of dynamic shared memory, over the limit of " +
            std::to_string(kSharedMemoryLimit));

  Job job;
  job.call = call;
  job.name = name;
  job.grid = grid;
  job.block = block;
  job.smem = smem;
  job.stack_bytes = stack_size();
  const auto order = current_order();
  job.order = order.first;
  job.seed = order.second;
  if (job.order == Order::random) {
    const std::uint64_t n = std::uint64_t(grid.x) * grid.y * grid.z;
    job.blocks.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) job.blocks[i] = i;
    Rng(job.seed).shuffle(job.blocks);
  }
  pool().run(job, simt::threads());
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace detail
}  // namespace gnnfuse::simt
