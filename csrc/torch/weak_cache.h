// A bounded cache of results computed from tensors (sparsity patterns), keyed by the tensors'
// identity and contents version: a graph reused call after call (every layer, every epoch) hits
// it. The one mechanism behind the library's caches (the symbolic passes' patterns and the CSR
// checks, torch/pattern_cache.h; the CUDA launch decision's graph statistics and the Tensor-Core
// SpMM's condensed views, torch/cuda/).
//
// An entry holds weak references to its key tensors' TensorImpls (while the entry lives their
// memory cannot be reused for another tensor), their version counters (an in-place change bumps
// them), data pointers and sizes, plus a tag and integer arguments; any difference is a miss. An
// entry whose key tensor has been freed can never match again: it is dropped, with the value it
// holds, at the next lookup or store (a coarse graph's pattern can be hundreds of MiB). Tensors
// without a version counter (inference mode), undefined and Meta tensors key nothing (`keyable`).
// Tensors on other devices are keyed like CPU ones (their device data pointers).
//
// At most `capacity` unpinned entries: a new one replaces the oldest in round-robin order. A
// pinned entry (a Tensor-Core view a CUDA graph captured: replays read its memory) stays while its
// keys live. Thread-safe (one mutex per cache).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

namespace gnnfuse::cache {

// Can `t` key a cache entry: defined, with a version counter (not an inference tensor), with data
// (not Meta).
inline bool keyable(const at::Tensor& t) { return t.defined() && !t.is_inference() && !t.device().is_meta(); }

// One key tensor of an entry, held weakly.
class TensorKey {
 public:
  explicit TensorKey(const at::Tensor& t)
      : impl_(t.getIntrusivePtr()), version_(t._version()), data_(t.const_data_ptr()), numel_(t.numel()) {}
  bool expired() const { return impl_.expired(); }
  // The same TensorImpl (alive), unchanged since the entry was stored.
  bool same(const at::Tensor& t) const {
    return !impl_.expired() && impl_._unsafe_get_target() == t.unsafeGetTensorImpl() && version_ == t._version() &&
           data_ == t.const_data_ptr() && numel_ == t.numel();
  }

 private:
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl_;
  int64_t version_;
  const void* data_;
  int64_t numel_;
};

template <typename V>
class WeakKeyedCache {
 public:
  explicit WeakKeyedCache(size_t capacity) : capacity_(capacity) {}

  // The value stored under (tag, keys, ints), if any; `pin` pins a hit. Nothing for keys that
  // are not all keyable.
  std::optional<V> lookup(const std::string& tag, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints, bool pin = false) {
    if (!all_keyable(keys)) return std::nullopt;
    std::lock_guard<std::mutex> lock(mutex_);
    drop_dead();
    for (Entry& e : entries_)
      if (same_key(e, tag, keys, ints)) {
        e.pinned = e.pinned || pin;
        return e.value;
      }
    return std::nullopt;
  }

  // Stores `value` under (tag, keys, ints), replacing an entry of the same key; nothing for keys
  // that are not all keyable.
  void store(const std::string& tag, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints, V value, bool pin = false) {
    if (!all_keyable(keys)) return;
    Entry e{tag, {}, ints, std::move(value), pin};
    e.keys.reserve(keys.size());
    for (const at::Tensor& t : keys) e.keys.emplace_back(t);
    std::lock_guard<std::mutex> lock(mutex_);
    drop_dead();
    for (Entry& o : entries_)
      if (same_key(o, tag, keys, ints)) {
        e.pinned = e.pinned || o.pinned;
        o = std::move(e);
        return;
      }
    size_t unpinned = 0;
    for (const Entry& o : entries_) unpinned += !o.pinned;
    if (pin || unpinned < capacity_) {
      entries_.push_back(std::move(e));
      return;
    }
    for (size_t tries = 0; tries < entries_.size(); ++tries) {
      next_ = next_ % entries_.size();
      Entry& o = entries_[next_++];
      if (!o.pinned) {
        o = std::move(e);
        return;
      }
    }
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    next_ = 0;
  }

  // Drops every entry but the pinned ones (a captured CUDA graph's replays read their values).
  void clear_unpinned() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.pinned; }), entries_.end());
    next_ = 0;
  }

  // Entries held (tests).
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_dead();
    return entries_.size();
  }

 private:
  struct Entry {
    std::string tag;
    std::vector<TensorKey> keys;
    std::vector<int64_t> ints;
    V value;
    bool pinned = false;
  };

  static bool all_keyable(const std::vector<at::Tensor>& keys) {
    for (const at::Tensor& t : keys)
      if (!keyable(t)) return false;
    return true;
  }

  static bool same_key(const Entry& e, const std::string& tag, const std::vector<at::Tensor>& keys, const std::vector<int64_t>& ints) {
    if (e.tag != tag || e.ints != ints || e.keys.size() != keys.size()) return false;
    for (size_t k = 0; k < keys.size(); ++k)
      if (!e.keys[k].same(keys[k])) return false;
    return true;
  }

  // Entries with a freed key tensor go, with their values (called with the mutex held).
  void drop_dead() {
    size_t kept = 0;
    for (size_t k = 0; k < entries_.size(); ++k) {
      bool dead = false;
      for (const TensorKey& c : entries_[k].keys) dead = dead || c.expired();
      if (dead) continue;
      if (kept != k) entries_[kept] = std::move(entries_[k]);
      ++kept;
    }
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(kept), entries_.end());
  }

  const size_t capacity_;
  std::mutex mutex_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

}  // namespace gnnfuse::cache
