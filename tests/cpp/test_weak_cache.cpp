// torch/weak_cache.h, the mechanism of the library's caches (patterns, CSR checks, graph
// statistics, Tensor-Core views): what is a hit, what a miss, what is dropped and when.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "torch/weak_cache.h"

namespace {

using gnnfuse::cache::WeakKeyedCache;

TEST(WeakKeyedCache, HitsTheSameTensorsTagAndInts) {
  WeakKeyedCache<int> cache(4);
  const at::Tensor a = at::arange(5), b = at::arange(3);
  cache.store("op", {a, b}, {7}, 42);
  ASSERT_TRUE(cache.lookup("op", {a, b}, {7}).has_value());
  EXPECT_EQ(*cache.lookup("op", {a, b}, {7}), 42);
  EXPECT_FALSE(cache.lookup("other", {a, b}, {7}).has_value());
  EXPECT_FALSE(cache.lookup("op", {a, b}, {8}).has_value());
  EXPECT_FALSE(cache.lookup("op", {b, a}, {7}).has_value());
  EXPECT_FALSE(cache.lookup("op", {a}, {7}).has_value());
  // Equal contents in another tensor: another key.
  EXPECT_FALSE(cache.lookup("op", {a.clone(), b}, {7}).has_value());
  // A newer value under the same key replaces the old one.
  cache.store("op", {a, b}, {7}, 43);
  EXPECT_EQ(*cache.lookup("op", {a, b}, {7}), 43);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(WeakKeyedCache, AnInPlaceChangeOrAResizeIsAMiss) {
  WeakKeyedCache<int> cache(4);
  at::Tensor a = at::arange(5);
  cache.store("op", {a}, {}, 1);
  a.add_(1);  // bumps the version counter
  EXPECT_FALSE(cache.lookup("op", {a}, {}).has_value());
  cache.store("op", {a}, {}, 2);
  EXPECT_EQ(*cache.lookup("op", {a}, {}), 2);
  a.resize_({9});
  EXPECT_FALSE(cache.lookup("op", {a}, {}).has_value());
}

TEST(WeakKeyedCache, AFreedKeyDropsItsEntryAndValue) {
  WeakKeyedCache<at::Tensor> cache(4);
  at::Tensor value = at::ones({1000});
  const at::Tensor held = value;
  {
    const at::Tensor key = at::arange(5);
    cache.store("op", {key}, {}, std::move(value));
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(held.use_count(), 2);  // ours and the entry's
  }
  EXPECT_EQ(cache.size(), 0u);       // dropped at the next access
  EXPECT_EQ(held.use_count(), 1);    // with its value
}

TEST(WeakKeyedCache, InferenceUndefinedAndMetaTensorsKeyNothing) {
  WeakKeyedCache<int> cache(4);
  at::Tensor inference;
  {
    c10::InferenceMode guard;
    inference = at::arange(5);
  }
  cache.store("op", {inference}, {}, 1);
  EXPECT_FALSE(cache.lookup("op", {inference}, {}).has_value());
  const at::Tensor meta = at::empty({5}, at::TensorOptions().device(at::kMeta));
  cache.store("op", {meta}, {}, 1);
  EXPECT_FALSE(cache.lookup("op", {meta}, {}).has_value());
  cache.store("op", {at::Tensor()}, {}, 1);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(WeakKeyedCache, KeepsCapacityEntriesInRoundRobinOrder) {
  WeakKeyedCache<int> cache(3);
  std::vector<at::Tensor> keys;
  for (int k = 0; k < 5; ++k) keys.push_back(at::arange(k + 1));
  for (int k = 0; k < 5; ++k) cache.store("op", {keys[k]}, {}, k);
  EXPECT_EQ(cache.size(), 3u);
  // 0 and 1 went (the oldest), 2, 3 and 4 stay.
  EXPECT_FALSE(cache.lookup("op", {keys[0]}, {}).has_value());
  EXPECT_FALSE(cache.lookup("op", {keys[1]}, {}).has_value());
  for (int k = 2; k < 5; ++k) EXPECT_EQ(*cache.lookup("op", {keys[k]}, {}), k);
}

TEST(WeakKeyedCache, PinnedEntriesStayBeyondTheCapacity) {
  WeakKeyedCache<int> cache(2);
  std::vector<at::Tensor> keys;
  for (int k = 0; k < 6; ++k) keys.push_back(at::arange(k + 1));
  cache.store("op", {keys[0]}, {}, 0);
  ASSERT_TRUE(cache.lookup("op", {keys[0]}, {}, /*pin=*/true).has_value());  // pinned by a hit
  cache.store("op", {keys[1]}, {}, 1, /*pin=*/true);                         // pinned when stored
  for (int k = 2; k < 6; ++k) cache.store("op", {keys[k]}, {}, k);
  EXPECT_EQ(cache.size(), 4u);  // two pinned, two others
  EXPECT_EQ(*cache.lookup("op", {keys[0]}, {}), 0);
  EXPECT_EQ(*cache.lookup("op", {keys[1]}, {}), 1);
  EXPECT_FALSE(cache.lookup("op", {keys[2]}, {}).has_value());
  EXPECT_EQ(*cache.lookup("op", {keys[5]}, {}), 5);
  // A pinned entry goes with its key.
  keys[0].reset();
  EXPECT_EQ(cache.size(), 3u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
