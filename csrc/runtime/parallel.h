// Torch-free parallel loop. Implemented in csrc/torch/parallel.cpp over at::parallel_for, so it
// honours torch.set_num_threads; kernels include only this header.
#pragma once

#include <cstdint>

namespace gnnfuse::runtime {

using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);

// Calls fn(ctx, b, e) on disjoint sub-ranges covering [begin, end), possibly in parallel.
// `grain` is the smallest range worth a task.
void parallel_for(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* ctx);
// Number of threads parallel_for may use.
int64_t max_threads();
// Index of the calling thread inside a parallel region (0 outside).
int64_t thread_id();

// Convenience wrapper for lambdas: f(begin, end).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  parallel_for(
      begin, end, grain,
      [](void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace gnnfuse::runtime
