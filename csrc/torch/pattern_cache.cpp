#include "torch/pattern_cache.h"

#include <map>
#include <mutex>
#include <string>

#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

namespace gnnfuse::cache {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

struct Key {
  WeakImpl impl;
  int64_t version;
  const void* data;
  int64_t numel;
};

struct Entry {
  std::string op;
  std::vector<Key> keys;
  std::vector<int64_t> ints;
  std::vector<at::Tensor> value;
  std::vector<int64_t> value_versions;  // a result changed in place by its user is a miss
};

// Shared by the CSR checks and the symbolic passes: room for a few graphs of each.
constexpr size_t kEntries = 32;
std::mutex mutex;
std::vector<Entry> entries;
size_t next = 0;
std::map<std::string, int64_t> hit_counts;  // per op name, since the library was loaded

bool cacheable(const std::vector<at::Tensor>& keys) {
  for (auto& t : keys)
    if (!t.defined() || t.is_inference() || t.device().is_meta()) return false;  // any device with data
  return true;
}

// An entry whose key tensor is gone can never match again: it goes at once, with the result it
// holds (a coarse graph's pattern, say, hundreds of MiB), instead of when kEntries later entries
// push it out. Called with the mutex held.
void drop_dead() {
  size_t kept = 0;
  for (size_t k = 0; k < entries.size(); ++k) {
    bool dead = false;
    for (const Key& c : entries[k].keys) dead = dead || c.impl.expired();
    if (dead) continue;
    if (kept != k) entries[kept] = std::move(entries[k]);
    ++kept;
  }
  entries.resize(kept);
  if (next >= entries.size()) next = 0;
}

// The entry's key is (op, keys, ints): the same tensors, unchanged.
bool same_key(const Entry& e, const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints) {
  if (e.op != op || e.ints != ints || e.keys.size() != keys.size()) return false;
  for (size_t k = 0; k < keys.size(); ++k) {
    const Key& c = e.keys[k];
    const at::Tensor& t = keys[k];
    if (c.impl.expired() || c.impl._unsafe_get_target() != t.unsafeGetTensorImpl() || c.version != t._version() ||
        c.data != t.const_data_ptr() || c.numel != t.numel())
      return false;
  }
  return true;
}

bool matches(const Entry& e, const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints) {
  if (!same_key(e, op, keys, ints)) return false;
  for (size_t k = 0; k < e.value.size(); ++k)
    if (e.value[k]._version() != e.value_versions[k]) return false;
  return true;
}

}  // namespace

std::optional<std::vector<at::Tensor>> lookup(const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints) {
  if (!cacheable(keys)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex);
  drop_dead();
  for (const Entry& e : entries)
    if (matches(e, op, keys, ints)) {
      ++hit_counts[op];
      return e.value;
    }
  return std::nullopt;
}

int64_t hits(const std::string& op) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = hit_counts.find(op);
  return it == hit_counts.end() ? 0 : it->second;
}

void store(const char* op, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints, const std::vector<at::Tensor>& value) {
  if (!cacheable(keys)) return;
  Entry e;
  e.op = op;
  e.ints = ints;
  for (auto& t : keys) e.keys.push_back(Key{WeakImpl(t.getIntrusivePtr()), t._version(), t.const_data_ptr(), t.numel()});
  e.value = value;
  for (auto& v : value) e.value_versions.push_back(v._version());
  std::lock_guard<std::mutex> lock(mutex);
  drop_dead();
  for (Entry& o : entries)  // a newer result for the same key replaces the old one
    if (same_key(o, op, keys, ints)) {
      o = std::move(e);
      return;
    }
  if (entries.size() < kEntries) {
    entries.push_back(std::move(e));
  } else {
    entries[next] = std::move(e);
    next = (next + 1) % kEntries;
  }
}

void clear() {
  std::lock_guard<std::mutex> lock(mutex);
  entries.clear();
  next = 0;
}

}  // namespace gnnfuse::cache
