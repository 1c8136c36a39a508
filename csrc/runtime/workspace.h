// Sparse workspaces for generated kernels whose output pattern is computed (seed 002's
// insert-sort-merge template at order 1: the row-wise Gustavson form). A generated symbolic
// kernel walks one output row's products, inserts each output coordinate, then writes the
// row's distinct coordinates sorted to its task's buffer; the output is then allocated exactly
// and the buffers copied in. Three accumulator policies share one interface, chosen per row
// from the row's product count (an upper bound of its length) and the column count:
//   sorted list (ESC)  few products: append, then sort and drop duplicates;
//   dense              flags over every column (a stamp per column, never cleared: the stamp is
//                      the row's serial number) plus the list of touched columns; sorted at the
//                      end, or read back by scanning the flags when the row is dense enough;
//   hash               open addressing in a power-of-two table of at least twice the products,
//                      for wide rows over many columns (where a dense flag array misses cache).
// Also the lookup that co-iteration uses to locate a coordinate in a sorted row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gnnfuse::runtime {

// Position of `key` among idx[begin, end) (sorted, distinct), or -1.
template <typename index_t>
inline int64_t find_sorted(const index_t* idx, int64_t begin, int64_t end, int64_t key) {
  while (begin < end) {
    const int64_t mid = begin + (end - begin) / 2;
    const int64_t v = static_cast<int64_t>(idx[mid]);
    if (v == key) return mid;
    if (v < key) begin = mid + 1;
    else end = mid;
  }
  return -1;
}

enum class WorkspacePolicy { Sorted, Dense, Hash };

// Columns up to which a dense flag array (4 bytes a column, per thread) is the default: it
// stays in L2 and needs no bound on the row.
constexpr int64_t kDenseColumns = int64_t{1} << 18;

// The policy for a row of `products` inserts (an upper bound of its length; -1: unknown) over
// `cols` columns, when the row's columns must come out sorted. Starting rule from the
// seed-002 digest, checked with bench/bench_spgemm.py on this machine: a short row sorts its
// few products (a list in L1 beats touching a flag per column); a dense flag array wins while
// it fits in cache or the row fills a good part of it; otherwise hash.
inline WorkspacePolicy choose_policy(int64_t products, int64_t cols) {
  if (products >= 0 && products <= 32) return WorkspacePolicy::Sorted;
  if (products < 0 || cols <= kDenseColumns || products * 16 >= cols) return WorkspacePolicy::Dense;
  return WorkspacePolicy::Hash;
}

// One thread's workspace for the rows it handles. Columns are int64 inside. A row starts with
// begin(bound) (bound: its number of products, or -1 when the caller did not count them),
// takes insert(column) per product, and ends with count() and emit_sorted().
class SymbolicWorkspace {
 public:
  explicit SymbolicWorkspace(int64_t cols) : cols_(cols) {}

  // Whether begin() wants the row's number of products (a walk of the nest without its
  // innermost loop, which costs a random access per product on a large graph): only past
  // kDenseColumns columns, where dense flags miss cache and the bound picks the sorted list or
  // the hash table; below, -1 (unknown) and dense flags.
  bool needs_bound() const { return cols_ > kDenseColumns; }

  // Starts a row with at most `products` inserts under the policy chosen for it.
  void begin(int64_t products) { start(choose_policy(products, cols_), products); }

 private:
  void start(WorkspacePolicy policy, int64_t products) {
    policy_ = policy;
    list_.clear();
    unique_ = false;
    switch (policy_) {
      case WorkspacePolicy::Sorted: list_.reserve(static_cast<size_t>(std::max<int64_t>(products, 0))); break;
      case WorkspacePolicy::Dense:
        if (stamp_.empty()) stamp_.assign(static_cast<size_t>(cols_), 0);
        if (++serial_ == 0) {  // wrapped: clear once
          std::fill(stamp_.begin(), stamp_.end(), 0);
          serial_ = 1;
        }
        break;
      case WorkspacePolicy::Hash: {
        size_t cap = 16;
        while (cap < static_cast<size_t>(2 * products)) cap <<= 1;
        if (table_.size() < cap) table_.resize(cap);
        mask_ = cap - 1;
        std::fill_n(table_.begin(), cap, int64_t{-1});
        break;
      }
    }
  }

 public:
  void insert(int64_t c) {
    switch (policy_) {
      case WorkspacePolicy::Sorted: list_.push_back(c); return;
      case WorkspacePolicy::Dense:
        if (stamp_[static_cast<size_t>(c)] != serial_) {
          stamp_[static_cast<size_t>(c)] = serial_;
          list_.push_back(c);
        }
        return;
      case WorkspacePolicy::Hash: {
        size_t h = static_cast<size_t>(static_cast<uint64_t>(c) * 0x9E3779B97F4A7C15ull >> 20) & mask_;
        while (true) {
          const int64_t k = table_[h];
          if (k == c) return;
          if (k < 0) {
            table_[h] = c;
            list_.push_back(c);
            return;
          }
          h = (h + 1) & mask_;
        }
      }
    }
  }

  int64_t count() {
    if (policy_ == WorkspacePolicy::Sorted) sort_unique();
    return static_cast<int64_t>(list_.size());
  }

  // Writes the row's distinct columns, increasing, to out[0, count()).
  template <typename index_t>
  void emit_sorted(index_t* out) {
    if (policy_ == WorkspacePolicy::Sorted) sort_unique();
    const int64_t n = static_cast<int64_t>(list_.size());
    if (policy_ == WorkspacePolicy::Dense && n * 8 >= cols_) {
      // Dense enough: a scan of the flags is cheaper than a sort.
      int64_t k = 0;
      for (int64_t c = 0; c < cols_; ++c)
        if (stamp_[static_cast<size_t>(c)] == serial_) out[k++] = static_cast<index_t>(c);
      return;
    }
    if (policy_ != WorkspacePolicy::Sorted) std::sort(list_.begin(), list_.end());
    for (int64_t k = 0; k < n; ++k) out[k] = static_cast<index_t>(list_[static_cast<size_t>(k)]);
  }

 private:
  void sort_unique() {
    if (unique_) return;
    std::sort(list_.begin(), list_.end());
    list_.erase(std::unique(list_.begin(), list_.end()), list_.end());
    unique_ = true;
  }

  int64_t cols_;
  WorkspacePolicy policy_ = WorkspacePolicy::Sorted;
  std::vector<int64_t> list_;
  std::vector<uint32_t> stamp_;
  uint32_t serial_ = 0;
  std::vector<int64_t> table_;
  size_t mask_ = 0;
  bool unique_ = false;  // Sorted policy: the list is already sorted and deduplicated
};

}  // namespace gnnfuse::runtime
