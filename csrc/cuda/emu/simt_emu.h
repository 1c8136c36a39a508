// The emulator half of cuda/simt.cuh: g++ compiles gnnfuse's CUDA kernel text against this
// header (-DGNNFUSE_SIMT_EMU) and the kernels run on the CPU. Test infrastructure only.
//
// Every CUDA thread is a fiber; a block's fibers run on one OS thread (block-shared memory is
// the block's own), blocks run in parallel on a small pool. __syncthreads is a real barrier,
// the warp collectives are exact over a 32-lane warp, atomics are real atomics. What a GPU
// would leave undefined or hang on (a divergent barrier, a collective waiting for a lane that
// exited, a deadlock) is an exception naming the kernel, block and thread, thrown by the
// launch on the host thread. docs/SIMT.md describes the model and its limits.
//
// Types come from CUDA's own headers (dim3, uint3, cudaStream_t, __half, __nv_bfloat16): they
// compile with g++ and nothing of the CUDA runtime is linked.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/emu/stats.h"

namespace gnnfuse::simt {

// ---------------------------------------------------------------- configuration
// The order in which a block's runnable fibers run between synchronisation points, and in
// which blocks are handed to the pool: ascending thread (block) index, descending, or a
// permutation drawn from `seed` (redrawn at every round; the same seed gives the same run).
// The default comes from GNNFUSE_SIMT_ORDER=forward|reverse|random[:seed] (forward);
// set_order overrides it until reset_order.
enum class Order { forward, reverse, random };
void set_order(Order order, std::uint64_t seed = 0);
void set_order(const std::string& spec);  // "forward", "reverse", "random", "random:<seed>"
void reset_order();
Order order();
std::uint64_t order_seed();

// OS threads running blocks, the launching thread included (GNNFUSE_SIMT_THREADS, default the
// hardware concurrency). 0 restores the default.
void set_threads(unsigned n);
unsigned threads();

// Bytes of stack per CUDA thread (GNNFUSE_SIMT_STACK, bytes or with a K/M suffix; default
// 64 KiB, 256 KiB under AddressSanitizer), with an inaccessible guard page below it. 0 restores
// the default.
void set_stack_size(std::size_t bytes);
std::size_t stack_size();

// The emulator's counts of shared-memory bank conflicts: cuda/emu/stats.h (included above).

// Shared memory per block, static and dynamic together (the sm_90 limit: 227 KiB).
inline constexpr std::size_t kSharedMemoryLimit = 227 * 1024;

// ---------------------------------------------------------------- errors
// Every error of a launch: the kernel's name as the launch spelled it, and where it happened
// (block and thread; zero for an invalid launch).
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, std::string kernel, dim3 block, dim3 thread);
  const std::string& kernel() const { return kernel_; }
  dim3 block() const { return block_; }
  dim3 thread() const { return thread_; }

 private:
  std::string kernel_;
  dim3 block_, thread_;
};
// An invalid configuration (empty or oversized grid or block, too much shared memory), a
// launch from inside a kernel.
class LaunchError : public Error {
  using Error::Error;
};
// Every live thread of a block waits at a __syncthreads, but not all at the same one, or some
// threads of the block have exited.
class DivergentBarrier : public Error {
  using Error::Error;
};
// A warp collective whose mask names a lane that has exited, that waits at another collective
// (or the same with another mask), or not the calling lane; a shuffle width that is not a
// power of two up to 32.
class DivergentCollective : public Error {
  using Error::Error;
};
// No thread can go on otherwise: a warp collective waits for lanes that wait at __syncthreads,
// which waits for the collective's lanes.
class Deadlock : public Error {
  using Error::Error;
};
// An access a GPU would fault on or leave undefined: an ldmatrix row or a cp.async destination
// outside the block's shared memory or not 16-byte aligned, a cp.async source not aligned, a
// cp.async size outside 0..16.
class MisalignedAddress : public Error {
  using Error::Error;
};
// An ldmatrix row or a staged load (gnnfuse_ld_staged[16]) reads shared memory that a cp.async
// still queued (no wait of its thread covers its group yet) will write, or that one landed (at its
// thread's wait) that no barrier of that thread (__syncwarp over it, __syncthreads) has published
// since: on a GPU the read may show the old bytes (a staged load of the issuing thread's own
// landed copy is fine).
class UnpublishedRead : public Error {
  using Error::Error;
};
// GNNFUSE_DEVICE_CHECK failed.
class DeviceCheckFailed : public Error {
  using Error::Error;
};
// Any other exception thrown by kernel code; nested() is the original.
class KernelException : public Error {
 public:
  KernelException(const std::string& what, std::string kernel, dim3 block, dim3 thread,
                  std::exception_ptr nested)
      : Error(what, std::move(kernel), block, thread), nested_(std::move(nested)) {}
  const std::exception_ptr& nested() const { return nested_; }

 private:
  std::exception_ptr nested_;
};

namespace detail {

// What kernel code reads of the fiber it runs on (set by the scheduler at every switch).
struct ThreadInfo {
  uint3 thread_idx;
};
struct BlockInfo {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
struct Current {
  const ThreadInfo* thread = nullptr;
  const BlockInfo* block = nullptr;
};
inline thread_local Current current;

[[noreturn]] void outside_kernel(const char* what);
inline const ThreadInfo& thread_info() {
  if (__builtin_expect(current.thread == nullptr, 0)) outside_kernel("threadIdx");
  return *current.thread;
}
inline const BlockInfo& block_info() {
  if (__builtin_expect(current.block == nullptr, 0)) outside_kernel("blockIdx/blockDim/gridDim");
  return *current.block;
}

// ---------------------------------------------------------------- synchronisation
enum class BarrierKind : unsigned char { plain, count, all, any };
int barrier(BarrierKind kind, int predicate, const char* file, int line);

enum class Collective : unsigned char {
  syncwarp, ballot, any, all, shfl_idx, shfl_up, shfl_down, shfl_xor, activemask, match_any,
  // Tensor-Core mma.sync (gnnfuse_mma_*): the whole warp, at one call site (.aligned).
  mma_m16n8k16_f16f32, mma_m16n8k16_bf16f32, mma_m16n8k8_tf32f32, mma_m16n8k8_f16f32, mma_m16n8k8_bf16f32,
  // ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (gnnfuse_ldmatrix_x4[_trans]): likewise.
  ldmatrix_x4, ldmatrix_x4_trans
};
struct CollectiveCall {
  Collective kind;
  unsigned mask;
  int operand;      // ballot/any/all: the predicate; shuffles: source lane, delta or lane mask
  int width;        // shuffles
  unsigned size;    // shuffles, match_any: bytes of the value (match_any: no result bytes)
  const void* value;
  void* result;
  const char* file;
  int line;
};
// Ballot/any/all/activemask/match_any: the result; shuffles write call.result.
unsigned collective(const CollectiveCall& call);

// Before every atomic: in the random order, the calling thread gives way to the other runnable
// threads of its block half of the time (drawn from the block's seed), so that their atomics
// and plain accesses interleave between barriers as on a GPU (a compare-and-swap finds its slot
// taken, a read-then-atomic pair loses an update). Nothing outside a kernel or in the other orders.
void atomic_point();

// A lane's operands of an mma collective (call.value; call.result is its float d[4]). They stay
// in the lane's frame while it waits, and the warp's D is computed from every lane's A, B and C
// before any lane's d is written (d may be c).
struct MmaOperands {
  const unsigned* a;  // 4 registers (m16n8k8 with 16-bit types: 2)
  const unsigned* b;  // 2 registers (m16n8k8 with 16-bit types: 1)
  const float* c;     // 4 accumulators
};
// The warp's D = A B + C of an mma collective from its lanes' operands (mma.cpp).
void warp_mma(Collective kind, const MmaOperands* const operands[32], float* const d[32]);

// ldmatrix (gnnfuse_ldmatrix_x4[_trans]): the calling lane's row address, checked (in the
// block's shared memory, 16-byte aligned), then the warp collective; r gets 4 registers.
void ldmatrix(bool trans, unsigned* r, const void* row, const char* file, int line);
// The warp's registers of an ldmatrix collective from its lanes' row addresses (mma.cpp).
void warp_ldmatrix(bool trans, const void* const rows[32], unsigned* const r[32]);
// cp.async of the calling thread: a copy queued (checked now, done at the wait that covers its
// group), the queued copies made a group, the groups but the newest n done.
void cp_async(void* smem, const void* gmem, int src_bytes, const char* file, int line);
void cp_async_commit();
void cp_async_wait(int n);
// gnnfuse_ld_staged[16]: the calling thread reads `bytes` of shared memory at p; an
// UnpublishedRead if a queued cp.async (not landed yet) or one another thread landed with no
// barrier of that thread since covers them.
void staged_read(const void* p, unsigned bytes, const char* file, int line);

template <class T>
T shuffle(Collective kind, unsigned mask, const T& value, int operand, int width, const char* file,
          int line) {
  // Copied as bytes (CUDA's __half2 and __nv_bfloat162 declare copy assignments, so they are
  // not trivially copyable in the language's sense).
  static_assert(std::is_standard_layout_v<T> && std::is_trivially_destructible_v<T> && sizeof(T) <= 16,
                "simt: a shuffled value is a plain value of at most 16 bytes");
  T out;
  collective(CollectiveCall{kind, mask, operand, width, unsigned(sizeof(T)), &value, &out, file, line});
  return out;
}

// ---------------------------------------------------------------- shared memory
// The storage of one GNNFUSE_SHARED_ARRAY declaration (`site`, a function-local static) in the
// running block: allocated and filled with 0xFF bytes by the first thread reaching it.
void* shared_array(const void* site, std::size_t bytes, std::size_t align, const char* name);
// The block's dynamic shared memory (the launch's `smem` bytes, 16-byte aligned, 0xFF bytes).
void* dynamic_shared();

[[noreturn]] void device_check_failed(const char* cond, const char* msg, const char* file, int line);

// ---------------------------------------------------------------- launches
struct KernelCall {
  const char* name;                 // as GNNFUSE_LAUNCH spelled it
  void (*run)(const void* closure); // calls the kernel with the launch's arguments
  const void* closure;
};
void launch(const KernelCall& call, dim3 grid, dim3 block, std::size_t smem);

template <class... Params, class... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                   std::size_t smem, cudaStream_t /*stream: launches are synchronous*/,
                   Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "GNNFUSE_LAUNCH: the kernel takes another number of arguments");
  // The arguments converted to the parameters' types once, as a CUDA launch does; every
  // thread gets its own copies.
  struct Closure {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> args;
  };
  const Closure closure{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  const auto run = [](const void* p) {
    const Closure& c = *static_cast<const Closure*>(p);
    std::apply(c.kernel, c.args);
  };
  launch(KernelCall{name, run, &closure}, grid, block, smem);
}

}  // namespace detail
}  // namespace gnnfuse::simt

// ---------------------------------------------------------------- the portability macros
#define GNNFUSE_GLOBAL
#define GNNFUSE_DEVICE inline
#define GNNFUSE_HOST_DEVICE inline
#define GNNFUSE_UNROLL
// A reference to an array of n T, so that sizeof and array decay read as in CUDA.
#define GNNFUSE_SHARED_ARRAY(T, name, n)                                                     \
  static char gnnfuse_shared_site_##name;                                                    \
  T(&name)[n] = *static_cast<T(*)[n]>(::gnnfuse::simt::detail::shared_array(                \
      &gnnfuse_shared_site_##name, sizeof(T) * (n), alignof(T), #name))
#define GNNFUSE_DYNAMIC_SHARED(T, name) \
  T* name = static_cast<T*>(::gnnfuse::simt::detail::dynamic_shared())
// The stream is the first of the variadic arguments (a launch without kernel arguments then
// needs no comma elision).
#define GNNFUSE_LAUNCH(kernel, grid, block, smem, ...) \
  ::gnnfuse::simt::detail::launch_kernel(#kernel, kernel, grid, block, smem, __VA_ARGS__)
#define GNNFUSE_DEVICE_CHECK(cond, msg)                                                    \
  do {                                                                                     \
    if (!(cond)) ::gnnfuse::simt::detail::device_check_failed(#cond, msg, __FILE__, __LINE__); \
  } while (0)

// g++ reads CUDA's __shared__ as nothing, which would give every thread its own array.
#undef __shared__
#define __shared__ _Pragma("GCC error \"simt: spell __shared__ arrays as GNNFUSE_SHARED_ARRAY / GNNFUSE_DYNAMIC_SHARED\"")
#define __launch_bounds__(...)

#include "cuda/emu/simt_intrinsics.h"
