#include "torch/pattern_cache.h"

#include <map>
#include <mutex>
#include <string>

#include "torch/weak_cache.h"

namespace gnnfuse::cache {
namespace {

struct Result {
  std::vector<at::Tensor> value;
  std::vector<int64_t> value_versions;  // a result changed in place by its user is a miss
};

// Shared by the CSR checks and the symbolic passes: room for a few graphs of each.
WeakKeyedCache<Result>& results() {
  static WeakKeyedCache<Result> cache(32);
  return cache;
}

std::mutex hits_mutex;
std::map<std::string, int64_t> hit_counts;  // per op name, since the library was loaded

}  // namespace

std::optional<std::vector<at::Tensor>> lookup(const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints) {
  const std::optional<Result> hit = results().lookup(op, keys, ints);
  if (!hit) return std::nullopt;
  for (size_t k = 0; k < hit->value.size(); ++k)
    if (hit->value[k]._version() != hit->value_versions[k]) return std::nullopt;  // (the next store replaces it)
  std::lock_guard<std::mutex> lock(hits_mutex);
  ++hit_counts[op];
  return hit->value;
}

int64_t hits(const std::string& op) {
  std::lock_guard<std::mutex> lock(hits_mutex);
  auto it = hit_counts.find(op);
  return it == hit_counts.end() ? 0 : it->second;
}

void store(const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints, const std::vector<at::Tensor>& value) {
  // A result whose change in place cannot be seen (an inference tensor: no version counter) is
  // not kept (a graph built outside inference mode, first used inside it).
  for (auto& v : value)
    if (!v.defined() || v.is_inference()) return;
  Result r{value, {}};
  for (auto& v : value) r.value_versions.push_back(v._version());
  results().store(op, keys, ints, std::move(r));
}

void clear() { results().clear(); }

}  // namespace gnnfuse::cache
