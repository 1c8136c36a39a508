// The ops that control the run-time choice among an op's lowerings (runtime/variants.h):
//   force_variant(str op, int variant) -> ()   -1: automatic (the default), else run that one
//   variant_count(str op) -> int               how many lowerings the generator emitted
//   last_variant(str op) -> int                the one the calling thread's latest call ran
//   pattern_cache_hits(str op) -> int          hits of the pattern cache (torch/pattern_cache.h) for
//                                              `op` ("spgemm_symbolic", "checks::csr", ...) so far
// For tests and benchmarks; a program never needs them.
#include <string>
#include <vector>

#include <torch/library.h>

#include "runtime/variants.h"
#include "torch/checks.h"
#include "torch/pattern_cache.h"

namespace gnnfuse {
namespace {

runtime::Variants& variants_of(const char* op, const std::string& name) {
  std::vector<std::string> known;
  for (auto* v : runtime::variant_registry()) {
    if (name == v->op) return *v;
    known.push_back(v->op);
  }
  checks::one_of(op, "op", name, known, "an op generated with variants");
  TORCH_CHECK(false, "unreachable");
}

void force_variant(c10::string_view op, int64_t variant) {
  runtime::Variants& v = variants_of("force_variant", std::string(op));
  checks::in_range("force_variant", "variant", variant, -1, v.count, "a lowering of the op or -1 (automatic)");
  v.forced.store(static_cast<int>(variant), std::memory_order_relaxed);
}

int64_t variant_count(c10::string_view op) { return variants_of("variant_count", std::string(op)).count; }

int64_t last_variant(c10::string_view op) { return variants_of("last_variant", std::string(op)).last(); }

int64_t pattern_cache_hits(c10::string_view op) { return cache::hits(std::string(op)); }

}  // namespace
}  // namespace gnnfuse

TORCH_LIBRARY_FRAGMENT(gnnfuse, m) {
  m.def("force_variant(str op, int variant) -> ()", &gnnfuse::force_variant);
  m.def("variant_count(str op) -> int", &gnnfuse::variant_count);
  m.def("last_variant(str op) -> int", &gnnfuse::last_variant);
  m.def("pattern_cache_hits(str op) -> int", &gnnfuse::pattern_cache_hits);
}
