// The torch side of the runtime's parallel-for (declared torch-free in runtime/parallel.h):
// generated kernels call gnnfuse::runtime::parallel_for without seeing ATen, and it runs on
// ATen's intra-op thread pool, so torch.set_num_threads governs gnnfuse kernels too.
//
// With ATen's OpenMP backend at::parallel_for is an inline OpenMP region: this file must be
// compiled with OpenMP (CMake does so when torch uses that backend), or it runs serially.
#include "runtime/parallel.h"

#include <ATen/Parallel.h>

namespace gnnfuse::runtime {

void parallel_for(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* ctx) {
  at::parallel_for(begin, end, grain, [fn, ctx](int64_t b, int64_t e) { fn(ctx, b, e); });
}

int64_t max_threads() { return at::get_num_threads(); }

int64_t thread_id() { return at::get_thread_num(); }

}  // namespace gnnfuse::runtime
