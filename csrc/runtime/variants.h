// Run-time choice among the lowerings of an op declared `variants auto` (ops/README.md): the
// generator emits one kernel per lowering and a cost model for each; every call runs the
// lowering of least estimated cost for its extents and its sparse operands' row lengths. Tests
// and benchmarks force one (force_variant) and ask which one a call ran (last_variant).
// Torch-free; the ops that expose it are in csrc/torch/variants.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace gnnfuse::runtime {

struct Variants {
  const char* op;
  int count;
  int (*last)();  // the variant the calling thread's latest call of `op` ran, -1 before any
  std::atomic<int> forced{-1};

  Variants(const char* op_, int count_, int (*last_)());

  // The variant to run: the forced one, else the least of costs[0, count) (the first on ties).
  int pick(const double* costs) const {
    const int f = forced.load(std::memory_order_relaxed);
    if (f >= 0) return f;
    int best = 0;
    for (int k = 1; k < count; ++k)
      if (costs[k] < costs[best]) best = k;
    return best;
  }
};

// The ops with variants, in registration order (generated kernels register at load time).
std::vector<Variants*>& variant_registry();

}  // namespace gnnfuse::runtime
