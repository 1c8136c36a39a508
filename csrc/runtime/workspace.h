// Sparse workspaces for generated kernels whose output pattern is computed (seed 002's
// insert-sort-merge template at order 1: the row-wise Gustavson form). A generated symbolic
// kernel walks one output row's products, inserts each output coordinate, then writes the
// row's distinct coordinates sorted to its task's buffer; the output is then allocated exactly
// and the buffers copied in. Three accumulator policies share one interface, chosen per row
// from the row's product count (an upper bound of its length) and the column count:
//   sorted list (ESC)  few products: append, then sort and drop duplicates;
//   dense              a bit per column (32 KiB for 2^18 columns: L1) plus one summary bit per
//                      64-column word, and the list of touched columns; the row comes out in
//                      order by a scan of the summary and the touched words (no comparison
//                      sort), or by sorting the list when the row is short; the bits are
//                      cleared as they are read;
//   hash               open addressing in a power-of-two table of at least twice the products,
//                      for wide rows over many columns (where a dense flag array misses cache).
// Also the lookup that co-iteration uses to locate a coordinate in a sorted row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace gnnfuse::runtime {

// The widest column extent a kernel keeps a dense row map over (loc_<L>: column -> position in
// the current row, one per worker, 8 MiB at int64): past it a kernel locates coordinates by binary
// search in the sorted row (a map over 2^31 columns per worker was 16 GiB for a tiny product).
constexpr int64_t kRowMapColumns = int64_t(1) << 20;

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

// Columns up to which dense flags are the default and need no bound on the row (their bits stay
// in L1; an assembling kernel's dense value array, 4-8 bytes a column, in L2).
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
    bound_ = products;
    list_.clear();
    unique_ = false;
    switch (policy_) {
      case WorkspacePolicy::Sorted: list_.reserve(static_cast<size_t>(std::max<int64_t>(products, 0))); break;
      case WorkspacePolicy::Dense:
        if (bits_.empty()) {
          bits_.assign(static_cast<size_t>((cols_ + 63) / 64), 0);
          summary_.assign(static_cast<size_t>((cols_ + 4095) / 4096), 0);
        }
        break;
      case WorkspacePolicy::Hash: {
        size_t cap = 16;
        while (cap < static_cast<size_t>(2 * products)) cap <<= 1;
        if (table_.size() < cap) {
          table_.resize(cap);
          slot_.resize(cap);
        }
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
        if (set_bit(c)) list_.push_back(c);
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

  // ---- assembly: the values beside the pattern (seed 002's workspace with values) ----
  // A row assembled with values starts with begin(bound) as above; insert_slot(column, &fresh)
  // gives each distinct column of the row a slot in the caller's value array of capacity()
  // entries (fresh: the column's first product in this row, whose slot the caller initialises);
  // finish() orders the row's columns, and column(k) / slot(k) read the k-th smallest. The
  // dense policy is the classic dense accumulator (slot = column, flags by stamp); the sorted
  // list searches its few distinct columns; the hash table keeps a slot per key.
  int64_t capacity() const { return policy_ == WorkspacePolicy::Dense ? cols_ : std::max<int64_t>(bound_, 0); }

  int64_t insert_slot(int64_t c, bool* fresh) {
    switch (policy_) {
      case WorkspacePolicy::Sorted: {
        const int64_t n = static_cast<int64_t>(list_.size());
        for (int64_t k = 0; k < n; ++k)
          if (list_[static_cast<size_t>(k)] == c) {
            *fresh = false;
            return k;
          }
        list_.push_back(c);
        *fresh = true;
        return n;
      }
      case WorkspacePolicy::Dense:
        *fresh = set_bit(c);
        if (*fresh) list_.push_back(c);
        return c;
      case WorkspacePolicy::Hash: {
        size_t h = static_cast<size_t>(static_cast<uint64_t>(c) * 0x9E3779B97F4A7C15ull >> 20) & mask_;
        while (true) {
          const int64_t k = table_[h];
          if (k == c) {
            *fresh = false;
            return slot_[h];
          }
          if (k < 0) {
            table_[h] = c;
            slot_[h] = static_cast<int64_t>(list_.size());
            list_.push_back(c);
            *fresh = true;
            return slot_[h];
          }
          h = (h + 1) & mask_;
        }
      }
    }
    return -1;
  }

  // Orders the row's distinct columns; returns their number.
  int64_t finish() {
    const int64_t n = static_cast<int64_t>(list_.size());
    order_.resize(static_cast<size_t>(n));
    if (policy_ == WorkspacePolicy::Dense) {
      int64_t k = 0;
      read_bits([&](int64_t c) { order_[static_cast<size_t>(k++)] = {c, c}; });
      return n;
    }
    for (int64_t k = 0; k < n; ++k) order_[static_cast<size_t>(k)] = {list_[static_cast<size_t>(k)], k};
    std::sort(order_.begin(), order_.end());
    return n;
  }
  int64_t column(int64_t k) const { return order_[static_cast<size_t>(k)].first; }
  int64_t slot(int64_t k) const { return order_[static_cast<size_t>(k)].second; }

  int64_t count() {
    if (policy_ == WorkspacePolicy::Sorted) sort_unique();
    return static_cast<int64_t>(list_.size());
  }

  // Writes the row's distinct columns, increasing, to out[0, count()).
  template <typename index_t>
  void emit_sorted(index_t* out) {
    if (policy_ == WorkspacePolicy::Sorted) sort_unique();
    const int64_t n = static_cast<int64_t>(list_.size());
    if (policy_ == WorkspacePolicy::Dense) {
      int64_t k = 0;
      read_bits([&](int64_t c) { out[k++] = static_cast<index_t>(c); });
      return;
    }
    if (policy_ != WorkspacePolicy::Sorted) std::sort(list_.begin(), list_.end());
    for (int64_t k = 0; k < n; ++k) out[k] = static_cast<index_t>(list_[static_cast<size_t>(k)]);
  }

 private:
  // Dense flags: sets column c's bit; whether it was clear.
  bool set_bit(int64_t c) {
    uint64_t& w = bits_[static_cast<size_t>(c >> 6)];
    const uint64_t m = uint64_t{1} << (c & 63);
    if (w & m) return false;
    w |= m;
    summary_[static_cast<size_t>(c >> 12)] |= uint64_t{1} << ((c >> 6) & 63);
    return true;
  }
  // Dense flags: calls emit(column) for the row's columns in increasing order and clears their
  // bits. A short row sorts its list (cheaper than a scan of the summary words); otherwise the
  // summary words are scanned, and within each marked word its bits.
  template <typename Emit>
  void read_bits(Emit&& emit) {
    const int64_t n = static_cast<int64_t>(list_.size());
    const int64_t words = static_cast<int64_t>(summary_.size());
    if (n <= 4 || n * 16 < words) {
      std::sort(list_.begin(), list_.end());
      for (int64_t c : list_) {
        bits_[static_cast<size_t>(c >> 6)] = 0;
        summary_[static_cast<size_t>(c >> 12)] = 0;
        emit(c);
      }
      return;
    }
    for (int64_t s = 0; s < words; ++s) {
      uint64_t sw = summary_[static_cast<size_t>(s)];
      if (!sw) continue;
      summary_[static_cast<size_t>(s)] = 0;
      while (sw) {
        const int64_t wi = s * 64 + __builtin_ctzll(sw);
        sw &= sw - 1;
        uint64_t w = bits_[static_cast<size_t>(wi)];
        bits_[static_cast<size_t>(wi)] = 0;
        while (w) {
          emit(wi * 64 + __builtin_ctzll(w));
          w &= w - 1;
        }
      }
    }
  }

  void sort_unique() {
    if (unique_) return;
    std::sort(list_.begin(), list_.end());
    list_.erase(std::unique(list_.begin(), list_.end()), list_.end());
    unique_ = true;
  }

  int64_t cols_;
  WorkspacePolicy policy_ = WorkspacePolicy::Sorted;
  std::vector<int64_t> list_;
  std::vector<uint64_t> bits_;     // dense: a bit per column
  std::vector<uint64_t> summary_;  // dense: a bit per word of bits_ that has a bit set
  std::vector<int64_t> table_;
  std::vector<int64_t> slot_;  // assembly: the slot of each hash key
  size_t mask_ = 0;
  int64_t bound_ = -1;
  std::vector<std::pair<int64_t, int64_t>> order_;  // assembly: (column, slot), increasing
  bool unique_ = false;  // Sorted policy: the list is already sorted and deduplicated
};

}  // namespace gnnfuse::runtime
