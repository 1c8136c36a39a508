// The SIMT emulator (csrc/cuda/emu, docs/SIMT.md): the kernels of kernels.cuh run on the CPU
// against scalar references, the emulator's errors, orders and configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/emu/context.h"
#include "kernels.cuh"

namespace simt = gnnfuse::simt;
using namespace simt_test;

namespace {

// Sets the order for one test and gives the environment's back.
struct OrderScope {
  explicit OrderScope(simt::Order order, std::uint64_t seed = 0) { simt::set_order(order, seed); }
  ~OrderScope() { simt::reset_order(); }
};

const simt::Order kOrders[] = {simt::Order::forward, simt::Order::reverse, simt::Order::random};

template <class E, class F>
E expect_error(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another exception: " << e.what();
    throw;
  }
  ADD_FAILURE() << "no exception";
  throw std::logic_error("no exception");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The error E, whose message names every one of `parts`.
template <class E, class F>
E expect_error_naming(F&& f, std::initializer_list<const char*> parts) {
  const E e = expect_error<E>(std::forward<F>(f));
  for (const char* part : parts) EXPECT_TRUE(contains(e.what(), part)) << "no '" << part << "' in: " << e.what();
  return e;
}

// ---------------------------------------------------------------- shared memory
TEST(SimtShared, StaticArraysArePerBlock) {
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 3);
    const int blocks = 64, threads = 256, n = blocks * threads;
    std::vector<int> in(n), out(n, -1), owner_ok(n, 0);
    for (int i = 0; i < n; ++i) in[i] = i * 7 + 1;
    launch_reverse_in_block(blocks, threads, in.data(), out.data(), owner_ok.data());
    for (int b = 0; b < blocks; ++b)
      for (int t = 0; t < threads; ++t) {
        ASSERT_EQ(out[b * threads + t], in[b * threads + threads - 1 - t]) << "block " << b << " thread " << t;
        ASSERT_EQ(owner_ok[b * threads + t], 1) << "block " << b << " thread " << t;
      }
  }
}

TEST(SimtShared, DynamicSharedMemoryPerBlockAligned) {
  const int blocks = 24, threads = 128, n = blocks * threads;
  std::vector<float> in(n), out(blocks, -1.0f);
  std::vector<unsigned> misalignment(blocks, 99);
  for (int i = 0; i < n; ++i) in[i] = float(i % 97);
  launch_dynamic_shared_sum(blocks, threads, in.data(), out.data(), misalignment.data());
  for (int b = 0; b < blocks; ++b) {
    float expect = 0;
    for (int t = 0; t < threads; ++t) expect += in[b * threads + t];
    EXPECT_EQ(out[b], expect) << "block " << b;
    EXPECT_EQ(misalignment[b], 0u) << "block " << b;
  }
}

TEST(SimtShared, UnwrittenSharedMemoryIsPoisoned) {
  std::vector<unsigned> static_bits(64, 0), dynamic_bits(64, 0);
  launch_read_before_write(static_bits.data(), dynamic_bits.data());
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(static_bits[t], 0xffffffffu);
    EXPECT_EQ(dynamic_bits[t], 0xffffffffu);
  }
}

GNNFUSE_GLOBAL void oversized_shared(int* out) {
  GNNFUSE_SHARED_ARRAY(char, big, 200 * 1024);
  big[threadIdx.x] = 1;
  out[0] = big[0];
}

TEST(SimtShared, OverTheLimitIsAnError) {
  int out = 0;
  // 200 KiB static + 40 KiB dynamic > 227 KiB.
  expect_error_naming<simt::LaunchError>([&] { GNNFUSE_LAUNCH(oversized_shared, 1, 32, 40 * 1024, 0, &out); },
                                         {"shared array 'big'"});
  expect_error<simt::LaunchError>([&] { GNNFUSE_LAUNCH(oversized_shared, 1, 32, 300 * 1024, 0, &out); });
}

// ---------------------------------------------------------------- orders
TEST(SimtOrder, MissingBarrierDiffersBetweenOrders) {
  const int blocks = 3, threads = 128, n = blocks * threads;
  std::vector<int> forward(n), reverse(n), random1(n), random2(n);
  {
    OrderScope scope(simt::Order::forward);
    launch_missing_barrier(blocks, forward.data());
  }
  {
    OrderScope scope(simt::Order::reverse);
    launch_missing_barrier(blocks, reverse.data());
  }
  {
    OrderScope scope(simt::Order::random, 11);
    launch_missing_barrier(blocks, random1.data());
  }
  {
    OrderScope scope(simt::Order::random, 11);
    launch_missing_barrier(blocks, random2.data());
  }
  EXPECT_NE(forward, reverse);
  EXPECT_EQ(random1, random2);  // a seed is a run
  // Forward: every thread runs to its end before the next starts, so it reads its
  // neighbour's slot unwritten (the 0xFF poison), but the last reads slot 0.
  // Reverse: the other way round.
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(forward[b * threads + t], t == threads - 1 ? 1 : -1);
      EXPECT_EQ(reverse[b * threads + t], t == threads - 1 ? -1 : t + 2);
    }
}

TEST(SimtOrder, SpecsAndEnvironmentSpelling) {
  simt::set_order("random:42");
  EXPECT_EQ(simt::order(), simt::Order::random);
  EXPECT_EQ(simt::order_seed(), 42u);
  simt::set_order("reverse");
  EXPECT_EQ(simt::order(), simt::Order::reverse);
  EXPECT_THROW(simt::set_order("sideways"), std::invalid_argument);
  EXPECT_THROW(simt::set_order("random:x"), std::invalid_argument);
  simt::reset_order();
}

TEST(SimtOrder, EnvironmentVariable) {
  const char* saved = std::getenv("GNNFUSE_SIMT_ORDER");
  const std::string before = saved ? saved : "";
  simt::reset_order();
  setenv("GNNFUSE_SIMT_ORDER", "random:5", 1);
  EXPECT_EQ(simt::order(), simt::Order::random);
  EXPECT_EQ(simt::order_seed(), 5u);
  setenv("GNNFUSE_SIMT_ORDER", "backwards", 1);
  EXPECT_THROW(simt::order(), std::invalid_argument);
  std::vector<int> out(128);
  EXPECT_THROW(launch_missing_barrier(1, out.data()), std::invalid_argument);
  simt::set_order(simt::Order::reverse);  // the API wins over the environment
  launch_missing_barrier(1, out.data());
  EXPECT_EQ(out[0], 2);
  simt::reset_order();
  if (saved)
    setenv("GNNFUSE_SIMT_ORDER", before.c_str(), 1);
  else
    unsetenv("GNNFUSE_SIMT_ORDER");
}

// ---------------------------------------------------------------- barriers
TEST(SimtBarrier, CountAndOr) {
  std::mt19937 rng(5);
  const int blocks = 8, threads = 96, n = blocks * threads;  // three warps, all full
  for (int density : {0, 1, 2, 3}) {
    std::vector<int> pred(n), count(n), all(n), any(n);
    for (int& p : pred) p = density == 0 ? 0 : density == 3 ? 5 : int(rng() % (density + 1) == 0) * int(rng() % 9 + 1);
    launch_barrier_predicates(blocks, threads, pred.data(), count.data(), all.data(), any.data());
    for (int b = 0; b < blocks; ++b) {
      int c = 0;
      for (int t = 0; t < threads; ++t) c += pred[b * threads + t] != 0;
      for (int t = 0; t < threads; ++t) {
        const int i = b * threads + t;
        ASSERT_EQ(count[i], c);
        ASSERT_EQ(all[i], c == threads ? 1 : 0);
        ASSERT_EQ(any[i], c > 0 ? 1 : 0);
      }
    }
  }
}

TEST(SimtBarrier, ThreadsThatExitedMakeADivergentBarrier) {
  std::vector<int> out(64, 0);
  const auto e = expect_error_naming<simt::DivergentBarrier>(
      [&] { launch_divergent_barrier(10, out.data()); },
      {"kernel divergent_barrier, block (", "has exited", "__syncthreads (kernels.cuh:"});
  EXPECT_EQ(e.kernel(), "divergent_barrier");
  EXPECT_EQ(e.thread().x, 0u);  // the first thread waiting
  // Every thread reaches it: no error.
  launch_divergent_barrier(64, out.data());
  EXPECT_EQ(out[63], 1);
}

TEST(SimtBarrier, TwoBarriersAreDivergent) {
  std::vector<int> out(64, 0);
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 1);
    expect_error_naming<simt::DivergentBarrier>([&] { launch_two_barriers(out.data()); },
                                                {"kernel two_barriers, block (0,0,0)", "while thread ("});
  }
}

GNNFUSE_GLOBAL void barrier_in_2d_block(int* out) {
  GNNFUSE_SHARED_ARRAY(int, tile, 8 * 12);
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  tile[t] = int(blockIdx.y * 1000 + blockIdx.x * 100 + t);
  __syncthreads();
  const int n = blockDim.x * blockDim.y;
  out[((blockIdx.y * gridDim.x + blockIdx.x) * n) + t] = tile[n - 1 - t];
}

TEST(SimtBarrier, TwoDimensionalGridsAndBlocks) {
  const dim3 grid(3, 2), block(8, 12);
  std::vector<int> out(6 * 96, -1);
  GNNFUSE_LAUNCH(barrier_in_2d_block, grid, block, 0, 0, out.data());
  for (int by = 0; by < 2; ++by)
    for (int bx = 0; bx < 3; ++bx)
      for (int t = 0; t < 96; ++t)
        ASSERT_EQ(out[(by * 3 + bx) * 96 + t], by * 1000 + bx * 100 + 95 - t);
}

// ---------------------------------------------------------------- warp collectives
// Masks for the lanes of `warps` warps: warp 0 whole, warp 1 segments of `width` lanes, warp 2
// a random partition into three groups with some lanes not taking part, warp 3 lanes 0-15
// only (and so on cyclically).
std::vector<unsigned> make_masks(int warps, int width, std::mt19937& rng) {
  std::vector<unsigned> masks(std::size_t(warps) * 32, 0);
  for (int w = 0; w < warps; ++w) {
    unsigned* m = masks.data() + w * 32;
    switch (w % 4) {
      case 0:
        for (int l = 0; l < 32; ++l) m[l] = 0xffffffffu;
        break;
      case 1:
        for (int l = 0; l < 32; ++l) {
          const int start = l / width * width;
          m[l] = (width == 32 ? 0xffffffffu : ((1u << width) - 1)) << start;
        }
        break;
      case 2: {
        int group[32];
        unsigned members[4] = {0, 0, 0, 0};
        for (int l = 0; l < 32; ++l) {
          group[l] = int(rng() % 8) == 0 ? 3 : int(rng() % 3);
          members[group[l]] |= 1u << l;
        }
        for (int l = 0; l < 32; ++l) m[l] = group[l] == 3 ? 0 : members[group[l]];
        break;
      }
      default:
        for (int l = 0; l < 16; ++l) m[l] = 0x0000ffffu;
    }
  }
  return masks;
}

// The CUDA C++ Programming Guide's description of the shuffles, lane by lane; `defined` is
// false where the source lane is not in the mask (the emulator gives 0xFF bytes there).
template <class T>
void shuffle_reference(int mode, int width, const std::vector<unsigned>& masks, const std::vector<int>& ops,
                       const std::vector<T>& in, std::vector<T>& out, std::vector<bool>& defined) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    const int base = int(i) / 32 * 32, lane = int(i) % 32;
    defined[i] = true;
    out[i] = in[i];
    if (masks[i] == 0) continue;
    const int start = lane / width * width;
    int src = lane;
    switch (mode) {
      case 0: src = start + ((ops[i] % width) + width) % width; break;
      case 1: src = lane - ops[i] >= start ? lane - ops[i] : lane; break;
      case 2: src = lane + ops[i] < start + width ? lane + ops[i] : lane; break;
      default: src = (lane ^ ops[i]) < start + width ? lane ^ ops[i] : lane; break;
    }
    defined[i] = (masks[i] >> src & 1) != 0;
    out[i] = in[base + src];
  }
}

template <class T>
void check_shuffles(T (*value)(int), int seed) {
  std::mt19937 rng(seed);
  const int blocks = 2, threads = 64, n = blocks * threads;
  std::vector<T> in(n), out(n), expect(n);
  std::vector<bool> defined(n);
  for (int i = 0; i < n; ++i) in[i] = value(i);
  for (int width : {1, 2, 4, 8, 16, 32})
    for (int mode = 0; mode < 4; ++mode) {
      const std::vector<unsigned> masks = make_masks(n / 32, width, rng);
      std::vector<int> ops(n);
      for (int& op : ops)
        op = mode == 0 ? int(rng() % 81) - 40 : mode == 3 ? int(rng() % 32) : int(rng() % std::min(32, width + 3));
      launch_shuffle<T>(blocks, threads, mode, width, masks.data(), ops.data(), in.data(), out.data());
      shuffle_reference(mode, width, masks, ops, in, expect, defined);
      for (int i = 0; i < n; ++i) {
        T poison;
        std::memset(static_cast<void*>(&poison), 0xff, sizeof(T));
        const T& want = defined[i] ? expect[i] : poison;
        ASSERT_EQ(std::memcmp(&out[i], &want, sizeof(T)), 0)
            << "mode " << mode << " width " << width << " thread " << i << " mask " << std::hex << masks[i]
            << std::dec << " operand " << ops[i] << (defined[i] ? "" : " (undefined source)");
      }
    }
}

TEST(SimtWarp, ShufflesMatchTheReference) {
  check_shuffles<int>([](int i) { return i * 1000 + 7; }, 1);
  check_shuffles<double>([](int i) { return i * 0.5 - 3.25; }, 2);
  check_shuffles<__half>([](int i) { return __ushort_as_half((unsigned short)(0x3c00 + i)); }, 3);
  check_shuffles<__nv_bfloat16>([](int i) { return __ushort_as_bfloat16((unsigned short)(0x3f80 + i)); }, 4);
  check_shuffles<long long>([](int i) { return (long long)i << 40 | i; }, 5);
  OrderScope scope(simt::Order::random, 9);
  check_shuffles<float>([](int i) { return float(i) * 1.5f; }, 6);
}

TEST(SimtWarp, ShuffleWidthMustBeAPowerOfTwo) {
  std::vector<unsigned> masks(32, 0xffffffffu);
  std::vector<int> ops(32, 0), in(32, 1), out(32);
  expect_error_naming<simt::DivergentCollective>(
      [&] { launch_shuffle<int>(1, 32, 0, 3, masks.data(), ops.data(), in.data(), out.data()); }, {"width 3"});
}

TEST(SimtWarp, VotesMatchTheReference) {
  std::mt19937 rng(17);
  const int blocks = 2, threads = 128, n = blocks * threads;
  for (int round = 0; round < 6; ++round) {
    const std::vector<unsigned> masks = make_masks(n / 32, 1 << round % 6, rng);
    std::vector<int> pred(n), any(n, -1), all(n, -1);
    std::vector<unsigned> ballot(n, 0xdeadu);
    for (int& p : pred) p = round == 4 ? 1 : round == 5 ? 0 : int(rng() % 3 == 0) * int(rng() % 5 + 1);
    launch_vote(blocks, threads, masks.data(), pred.data(), ballot.data(), any.data(), all.data());
    for (int i = 0; i < n; ++i) {
      if (masks[i] == 0) continue;
      unsigned expect = 0;
      for (int l = 0; l < 32; ++l)
        if ((masks[i] >> l & 1) && pred[i / 32 * 32 + l]) expect |= 1u << l;
      ASSERT_EQ(ballot[i], expect) << "thread " << i;
      ASSERT_EQ(any[i], expect != 0 ? 1 : 0) << "thread " << i;
      ASSERT_EQ(all[i], expect == masks[i] ? 1 : 0) << "thread " << i;
    }
  }
}

TEST(SimtWarp, MatchAnyMatchesTheReference) {
  std::mt19937 rng(23);
  const int blocks = 2, threads = 128, n = blocks * threads;
  for (int round = 0; round < 6; ++round) {
    OrderScope scope(round % 2 ? simt::Order::random : simt::Order::forward, unsigned(round));
    const std::vector<unsigned> masks = make_masks(n / 32, 1 << round % 6, rng);
    std::vector<long long> wide(n);
    std::vector<int> narrow(n);
    std::vector<unsigned> out_wide(n, 0xdeadu), out_narrow(n, 0xdeadu);
    // few distinct values; the wide ones differ only in their upper 32 bits, where the low words match
    for (int i = 0; i < n; ++i) {
      narrow[i] = round == 5 ? 7 : int(rng() % (1 + round));
      wide[i] = (static_cast<long long>(rng() % 3) << 40) | 5;
    }
    launch_match_any(blocks, threads, masks.data(), wide.data(), narrow.data(), out_wide.data(), out_narrow.data());
    for (int i = 0; i < n; ++i) {
      if (masks[i] == 0) continue;
      unsigned ew = 0, en = 0;
      for (int l = 0; l < 32; ++l) {
        if (!(masks[i] >> l & 1)) continue;
        const int j = i / 32 * 32 + l;
        if (wide[j] == wide[i]) ew |= 1u << l;
        if (narrow[j] == narrow[i]) en |= 1u << l;
      }
      ASSERT_EQ(out_wide[i], ew) << "thread " << i;
      ASSERT_EQ(out_narrow[i], en) << "thread " << i;
    }
  }
}

TEST(SimtWarp, ActiveMaskIsTheLanesAtTheCall) {
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 2);
    std::vector<unsigned> out(48, 0);
    launch_active_masks(48, out.data());  // a full warp and a warp of 16 lanes
    for (int w = 0; w < 2; ++w) {
      const int lanes = w == 0 ? 32 : 16;
      unsigned thirds = 0, others = 0;
      for (int l = 0; l < lanes; ++l) ((w * 32 + l) % 3 == 0 ? thirds : others) |= 1u << l;
      for (int l = 0; l < lanes; ++l)
        EXPECT_EQ(out[w * 32 + l], (w * 32 + l) % 3 == 0 ? thirds : others) << "thread " << w * 32 + l;
    }
  }
}

TEST(SimtWarp, SyncwarpOrdersTheWarpInEveryOrder) {
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 5);
    const int blocks = 3, n = blocks * 128;
    std::vector<int> out(n, 0);
    launch_syncwarp_exchange(blocks, out.data());
    for (int i = 0; i < n; ++i) {
      const int t = i % 128, s = t ^ 3;
      ASSERT_EQ(out[i], (3 * (s ^ 1) + 1) * 2) << "thread " << i;
    }
  }
}

TEST(SimtWarp, CollectiveWaitingForTheBarrierIsADeadlock) {
  std::vector<int> out(64);
  expect_error_naming<simt::Deadlock>(
      [&] { launch_shuffle_barrier_deadlock(out.data()); },
      {"kernel shuffle_barrier_deadlock", "deadlock: __shfl_sync (mask 0xffffffff)", "waits at __syncthreads"});
}

TEST(SimtWarp, CollectiveNamingAnExitedLane) {
  std::vector<int> out(32);
  expect_error_naming<simt::DivergentCollective>([&] { launch_shuffle_exited_lanes(32, out.data()); },
                                                 {"__shfl_down_sync (mask 0xffffffff)", "has exited"});
  expect_error_naming<simt::DivergentCollective>([&] { launch_shuffle_exited_lanes(16, out.data()); },
                                                 {"names lanes past the block's 16 threads"});
}

TEST(SimtWarp, DifferentCollectivesOverOneMask) {
  std::vector<int> out(32);
  expect_error_naming<simt::DivergentCollective>([&] { launch_mismatched_collectives(out.data()); },
                                                 {"__ballot_sync", "__shfl_sync"});
}

TEST(SimtWarp, MaskWithoutTheCallingLane) {
  std::vector<int> out(32);
  expect_error_naming<simt::DivergentCollective>([&] { launch_mask_without_caller(out.data()); },
                                                 {"does not name the calling lane"});
}

// ---------------------------------------------------------------- atomics
// In the random order a thread may give way to the others of its block at every atomic: a read
// and a write that are not one atomic lose updates, as on a GPU; the fixed orders run each thread
// to its next synchronisation point.
TEST(SimtAtomics, RandomOrderInterleavesThreadsAtAtomics) {
  int counter = 0;
  {
    OrderScope scope(simt::Order::forward);
    launch_read_then_exchange(128, &counter);
  }
  EXPECT_EQ(counter, 128);
  counter = 0;
  {
    OrderScope scope(simt::Order::random, 3);
    launch_read_then_exchange(128, &counter);
  }
  EXPECT_LT(counter, 128);
  EXPECT_GT(counter, 0);
}

TEST(SimtAtomics, AcrossConcurrentBlocks) {
  OrderScope scope(simt::Order::random, 21);
  const int blocks = 64, threads = 256, n = blocks * threads;
  AtomicCounters c{};
  c.h = __float2half(0.0f);
  c.b = __float2bfloat16(0.0f);
  c.imax = c.umax = 0;
  c.imin = 1 << 30;
  c.umin = ~0u;
  c.llmax = -(1ll << 62);
  c.llmin = 1ll << 62;
  c.exch = -1;
  std::vector<int> tickets(n, -1), exchanged(n, -2);
  launch_atomics(blocks, threads, &c, tickets.data(), exchanged.data());
  EXPECT_EQ(c.i, n);
  EXPECT_EQ(c.u, 2u * n);
  EXPECT_EQ(c.ull, 3ull * n);
  EXPECT_EQ(c.f, 0.5f * n);
  EXPECT_EQ(c.d, 0.25 * n);
  EXPECT_EQ(__half2float(c.h), 2048.0f);
  EXPECT_EQ(__bfloat162float(c.b), 256.0f);
  int vmax = -(1 << 30), vmin = 1 << 30;
  for (int i = 0; i < n; ++i) {
    vmax = std::max(vmax, (i * 7919) % 2001 - 1000);
    vmin = std::min(vmin, (i * 7919) % 2001 - 1000);
  }
  EXPECT_EQ(c.imax, vmax);
  EXPECT_EQ(c.imin, vmin);
  EXPECT_EQ(c.umax, unsigned(n - 1) * 3u);
  EXPECT_EQ(c.umin, 5u);
  EXPECT_EQ(c.llmax, (long long)vmax * 4000000000ll);
  EXPECT_EQ(c.llmin, (long long)vmin * 4000000000ll);
  EXPECT_EQ(c.cas, n);
  std::vector<int> sorted = tickets;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);  // every ticket once
  // The exchanges form one chain: what each thread took out, plus the last value, is the first
  // value plus every thread's.
  std::vector<int> seen = exchanged;
  seen.push_back(c.exch);
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i <= n; ++i) ASSERT_EQ(seen[i], i - 1);
}

// ---------------------------------------------------------------- errors
TEST(SimtErrors, DeviceCheckNamesKernelBlockAndThread) {
  const int blocks = 4, threads = 64, n = blocks * threads;
  std::vector<int> index(n);
  std::vector<float> in(n, 1.0f), out(n);
  for (int i = 0; i < n; ++i) index[i] = (i * 5) % n;
  launch_checked_gather(blocks, threads, n, index.data(), in.data(), out.data());
  index[2 * threads + 5] = n;
  const auto e = expect_error_naming<simt::DeviceCheckFailed>(
      [&] { launch_checked_gather(blocks, threads, n, index.data(), in.data(), out.data()); },
      {"kernel checked_gather, block (2,0,0), thread (5,0,0)", "gather index out of range"});
  EXPECT_EQ(e.block().x, 2u);
  EXPECT_EQ(e.thread().x, 5u);
}

GNNFUSE_GLOBAL void throws_in_block_three(int* blocks_started) {
  if (threadIdx.x == 0) atomicAdd(blocks_started, 1);
  __syncthreads();
  if (blockIdx.x == 3 && threadIdx.x == 5) throw std::out_of_range("row 12 past the end");
  __syncthreads();
}

TEST(SimtErrors, KernelExceptionStopsTheLaunchAndPropagates) {
  OrderScope scope(simt::Order::forward);
  int started = 0;
  const auto e = expect_error_naming<simt::KernelException>(
      [&] { GNNFUSE_LAUNCH(throws_in_block_three, 2000, 64, 0, 0, &started); },
      {"kernel throws_in_block_three, block (3,0,0), thread (5,0,0)", "row 12 past the end"});
  EXPECT_THROW(std::rethrow_exception(e.nested()), std::out_of_range);
  EXPECT_LT(started, 2000);  // the other blocks stopped
  // The emulator is usable after an error (the abandoned fibers were unwound).
  std::vector<int> in(256, 3), out(256), ok(256);
  launch_reverse_in_block(1, 256, in.data(), out.data(), ok.data());
  EXPECT_EQ(out[0], 3);
}

TEST(SimtErrors, InvalidLaunches) {
  std::vector<int> in(2048), out(2048), ok(2048);
  expect_error<simt::LaunchError>([&] { launch_reverse_in_block(0, 32, in.data(), out.data(), ok.data()); });
  expect_error_naming<simt::LaunchError>(
      [&] { launch_reverse_in_block(1, 2048, in.data(), out.data(), ok.data()); },
      {"kernel reverse_in_block: invalid launch"});
}

GNNFUSE_GLOBAL void launches_a_kernel(int* out) {
  int ok[1];
  GNNFUSE_LAUNCH(reverse_in_block, 1, 1, 0, 0, out, out, ok);
}

TEST(SimtErrors, NoLaunchFromAKernel) {
  int out[2] = {0, 0};
  expect_error_naming<simt::LaunchError>([&] { GNNFUSE_LAUNCH(launches_a_kernel, 1, 1, 0, 0, out); },
                                         {"dynamic parallelism"});
}

TEST(SimtErrors, BuiltinsOutsideAKernel) {
  EXPECT_THROW(__syncthreads(), simt::Error);
  EXPECT_THROW((void)threadIdx.x, simt::Error);
  EXPECT_THROW(__shfl_sync(0xffffffffu, 1, 0), simt::Error);
}

// Frames of a few hundred bytes, so that the recursion runs into the guard page rather than
// over it.
GNNFUSE_DEVICE int deep(int n) {
  volatile char pad[256];
  pad[n % 256] = char(n);
  return n == 0 ? 0 : deep(n - 1) + pad[n % 256];
}
GNNFUSE_GLOBAL void recursing(int depth, int* out) { out[threadIdx.x] = deep(depth); }

TEST(SimtErrorsDeathTest, StackOverflowHitsTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int out[32];
  GNNFUSE_LAUNCH(recursing, 1, 32, 0, 0, 4, out);  // within the stack
  EXPECT_EQ(out[0], 4 + 3 + 2 + 1);
  auto overflow = [&] {
    simt::set_stack_size(64 * 1024);
    GNNFUSE_LAUNCH(recursing, 1, 32, 0, 0, 2000, out);
  };
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_DEATH(overflow(), "");  // AddressSanitizer reports the fault
#else
  EXPECT_EXIT(overflow(), testing::KilledBySignal(SIGSEGV), "");
#endif
}

// ---------------------------------------------------------------- fp16 / bf16
TEST(SimtLowPrecision, HalfAndBfloat16Arithmetic) {
  const int n = 1000, blocks = 4, threads = 256;
  std::vector<__half> a(n), b(n), c(n), mul_add(n), fused(n);
  std::vector<__nv_bfloat16> p(n), q(n), bf_mul_add(n), bf_fused(n);
  std::mt19937 rng(8);
  double dot_expect = 0;
  for (int i = 0; i < n; ++i) {
    // Multiples of 1/8 (half) and 1/4 (bf16) small enough that every result is exact.
    const float fa = float(int(rng() % 65) - 32) / 8, fb = float(int(rng() % 65) - 32) / 8,
                fc = float(int(rng() % 65) - 32) / 8;
    a[i] = __float2half(fa);
    b[i] = __float2half(fb);
    c[i] = __float2half(fc);
    dot_expect += double(fa) * fb;
    p[i] = __float2bfloat16(float(int(rng() % 17) - 8) / 4);
    q[i] = __float2bfloat16(float(int(rng() % 17) - 8) / 4);
  }
  float dot = 0;
  launch_low_precision(blocks, threads, n, a.data(), b.data(), c.data(), mul_add.data(), fused.data(), p.data(),
                       q.data(), bf_mul_add.data(), bf_fused.data(), &dot);
  for (int i = 0; i < n; ++i) {
    const float expect = __half2float(a[i]) * __half2float(b[i]) + __half2float(c[i]);
    ASSERT_EQ(__half2float(mul_add[i]), expect) << i;
    ASSERT_EQ(__half2float(fused[i]), expect) << i;
    const float bf_expect = __bfloat162float(p[i]) * __bfloat162float(q[i]) + __bfloat162float(p[i]);
    ASSERT_EQ(__bfloat162float(bf_mul_add[i]), bf_expect) << i;
    ASSERT_EQ(__bfloat162float(bf_fused[i]), bf_expect) << i;
  }
  EXPECT_EQ(double(dot), dot_expect);  // sums of multiples of 1/64 well inside fp32
}

// ---------------------------------------------------------------- Tensor Cores
// The fragment layouts of the PTX ISA, written out here as the ISA states them (9.7.14.5.7
// "Matrix Fragments for mma.m16n8k8", 9.7.14.5.8 "... for mma.m16n8k16 with floating point
// type"), apart from the emulator's own (mma.cpp): element i of lane `lane` is (row, col).
struct Cell {
  int row, col;
};
int group_id(int lane) { return lane >> 2; }
int thread_in_group(int lane) { return lane % 4; }
// m16n8k16 .f16/.bf16 A (16x16), a0..a7 two per register, low half first.
Cell a_m16n8k16(int lane, int i) {
  const int g = group_id(lane), t = thread_in_group(lane);
  const int row = ((0 <= i && i < 2) || (4 <= i && i < 6)) ? g : g + 8;
  const int col = i < 4 ? t * 2 + (i & 0x1) : t * 2 + (i & 0x1) + 8;
  return {row, col};
}
// m16n8k16 .f16/.bf16 B (16x8), b0..b3.
Cell b_m16n8k16(int lane, int i) {
  const int t = thread_in_group(lane);
  return {i < 2 ? t * 2 + (i & 0x1) : t * 2 + (i & 0x1) + 8, group_id(lane)};
}
// m16n8k8 .tf32 A (16x8), a0..a3 one per register.
Cell a_m16n8k8_tf32(int lane, int i) {
  const int g = group_id(lane), t = thread_in_group(lane);
  return {(i == 0 || i == 2) ? g : g + 8, (i == 0 || i == 1) ? t : t + 4};
}
// m16n8k8 .tf32 B (8x8), b0, b1.
Cell b_m16n8k8_tf32(int lane, int i) {
  const int t = thread_in_group(lane);
  return {i == 0 ? t : t + 4, group_id(lane)};
}
// m16n8k8 .f16/.bf16 A (16x8), a0..a3 two per register.
Cell a_m16n8k8_16bit(int lane, int i) {
  return {i < 2 ? group_id(lane) : group_id(lane) + 8, thread_in_group(lane) * 2 + (i & 0x1)};
}
// m16n8k8 .f16/.bf16 B (8x8), b0, b1 in one register.
Cell b_m16n8k8_16bit(int lane, int i) { return {thread_in_group(lane) * 2 + i, group_id(lane)}; }
// C and D (16x8 .f32) of both shapes, c0..c3.
Cell c_m16n8(int lane, int i) {
  const int g = group_id(lane), t = thread_in_group(lane);
  return {i < 2 ? g : g + 8, t * 2 + (i & 0x1)};
}

unsigned f16_bits(float v) {
  const __half h = __float2half_rn(v);
  unsigned short raw;
  std::memcpy(&raw, &h, sizeof raw);
  return raw;
}
unsigned bf16_bits(float v) {
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  unsigned short raw;
  std::memcpy(&raw, &h, sizeof raw);
  return raw;
}
unsigned f32_bits(float v) {
  unsigned raw;
  std::memcpy(&raw, &v, sizeof raw);
  return raw;
}

// One warp's problem: dense A (16xK), B (Kx8), C (16x8), their fragments, the expected D.
struct MmaCase {
  int variant, k;
  std::vector<float> a, b, c;  // row-major
  std::vector<unsigned> frag_a, frag_b;
  std::vector<float> frag_c;
};

// Distinct values on grids fine enough to tell every element apart and coarse enough that every
// product and partial sum is exact in float (so any accumulation order gives the same bits):
// A a permutation of multiples of 1/16 in [-8, 8), B of multiples of 1/8 in [-8, 8) (exact in
// f16, bf16 and tf32), C multiples of 1/4 (zero_c: zeros). `salt` varies the permutations.
MmaCase make_mma_case(int variant, bool zero_c, unsigned salt, unsigned tf32_low_bits = 0) {
  MmaCase m;
  m.variant = variant;
  m.k = variant >= 2 ? 8 : 16;
  const int k = m.k;
  m.a.resize(16 * k);
  m.b.resize(k * 8);
  m.c.resize(16 * 8);
  for (int e = 0; e < 16 * k; ++e) m.a[e] = float(int((unsigned(e) * 97u + salt) % 256u) - 128) / 16;
  for (int e = 0; e < k * 8; ++e) m.b[e] = float(int((unsigned(e) * 37u + salt) % 128u) - 64) / 8;
  for (int e = 0; e < 16 * 8; ++e) m.c[e] = zero_c ? 0.0f : float(int((unsigned(e) * 53u + salt) % 128u) - 64) / 4;
  m.frag_a.assign(32 * 4, 0);
  m.frag_b.assign(32 * 2, 0);
  m.frag_c.assign(32 * 4, 0.0f);
  std::mt19937 rng(salt);
  for (int lane = 0; lane < 32; ++lane) {
    if (variant == 2) {
      for (int i = 0; i < 4; ++i) {
        const Cell e = a_m16n8k8_tf32(lane, i);
        m.frag_a[4 * lane + i] = f32_bits(m.a[e.row * k + e.col]) | (rng() & tf32_low_bits);
      }
      for (int i = 0; i < 2; ++i) {
        const Cell e = b_m16n8k8_tf32(lane, i);
        m.frag_b[2 * lane + i] = f32_bits(m.b[e.row * 8 + e.col]) | (rng() & tf32_low_bits);
      }
    } else if (variant >= 3) {
      // Registers the kernel must not read hold NaN bits (a[2], a[3], b[1]): a wrapper reading
      // them would put NaN in D.
      unsigned (*bits16)(float) = variant == 3 ? f16_bits : bf16_bits;
      m.frag_a[4 * lane + 2] = m.frag_a[4 * lane + 3] = m.frag_b[2 * lane + 1] = 0xffffffffu;
      for (int i = 0; i < 4; ++i) {
        const Cell e = a_m16n8k8_16bit(lane, i);
        m.frag_a[4 * lane + i / 2] |= bits16(m.a[e.row * k + e.col]) << (16 * (i % 2));
      }
      for (int i = 0; i < 2; ++i) {
        const Cell e = b_m16n8k8_16bit(lane, i);
        m.frag_b[2 * lane] |= bits16(m.b[e.row * 8 + e.col]) << (16 * i);
      }
    } else {
      unsigned (*bits16)(float) = variant == 0 ? f16_bits : bf16_bits;
      for (int i = 0; i < 8; ++i) {
        const Cell e = a_m16n8k16(lane, i);
        m.frag_a[4 * lane + i / 2] |= bits16(m.a[e.row * k + e.col]) << (16 * (i % 2));
      }
      for (int i = 0; i < 4; ++i) {
        const Cell e = b_m16n8k16(lane, i);
        m.frag_b[2 * lane + i / 2] |= bits16(m.b[e.row * 8 + e.col]) << (16 * (i % 2));
      }
    }
    for (int i = 0; i < 4; ++i) {
      const Cell e = c_m16n8(lane, i);
      m.frag_c[4 * lane + i] = m.c[e.row * 8 + e.col];
    }
  }
  return m;
}

// Runs `warps` cases (one per warp) with `repeats` products and compares every lane's d, gathered
// by the documented layout, with C + repeats A B computed densely.
void check_mma(const std::vector<MmaCase>& cases, int repeats) {
  const int warps = int(cases.size()), variant = cases[0].variant;
  std::vector<unsigned> a, b;
  std::vector<float> c, d(std::size_t(warps) * 32 * 4, -1234.5f);
  for (const MmaCase& m : cases) {
    a.insert(a.end(), m.frag_a.begin(), m.frag_a.end());
    b.insert(b.end(), m.frag_b.begin(), m.frag_b.end());
    c.insert(c.end(), m.frag_c.begin(), m.frag_c.end());
  }
  launch_mma_fragments(variant, warps * 32, 32, repeats, a.data(), b.data(), c.data(), d.data());
  for (int w = 0; w < warps; ++w) {
    const MmaCase& m = cases[w];
    float expect[16][8];
    for (int row = 0; row < 16; ++row)
      for (int col = 0; col < 8; ++col) {
        double s = 0;
        for (int kk = 0; kk < m.k; ++kk) s += double(m.a[row * m.k + kk]) * m.b[kk * 8 + col];
        expect[row][col] = float(m.c[row * 8 + col] + repeats * s);
      }
    std::set<std::pair<int, int>> seen;
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const Cell e = c_m16n8(lane, i);
        seen.insert({e.row, e.col});
        ASSERT_EQ(d[(std::size_t(w) * 32 + lane) * 4 + i], expect[e.row][e.col])
            << "variant " << variant << " warp " << w << " lane " << lane << " d" << i << " = D[" << e.row << "]["
            << e.col << "]";
      }
    ASSERT_EQ(seen.size(), 128u);  // the layout covers D once
  }
}

TEST(SimtMma, FragmentsFollowThePtxLayouts) {
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(variant);
    check_mma({make_mma_case(variant, true, 0)}, 1);
    check_mma({make_mma_case(variant, false, 0)}, 1);
  }
}

TEST(SimtMma, AccumulatesInPlaceAndWarpsAreIndependent) {
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 11);
    for (int variant = 0; variant < 5; ++variant) {
      SCOPED_TRACE(variant);
      // d = c, three times: D = C + 3 A B; three warps with their own matrices.
      check_mma({make_mma_case(variant, false, 1), make_mma_case(variant, false, 5), make_mma_case(variant, true, 9)},
                3);
    }
  }
}

TEST(SimtMma, Tf32ReadsTheTop19BitsOfARegister) {
  // The low 13 bits of every A and B register set at random: the same D as without them.
  check_mma({make_mma_case(2, false, 3, 0x1fffu)}, 1);
}

// cvt.rna.tf32.f32: to nearest on the 10 mantissa bits tf32 keeps, ties away from zero (in
// magnitude, for either sign), the low 13 bits cleared; overflow to infinity; inf and NaN kept.
TEST(SimtMma, Tf32RoundingIsToNearestTiesAway) {
  const std::vector<std::pair<unsigned, unsigned>> cases = {
      {0x3f800000u, 0x3f800000u},  // 1
      {0x3f801000u, 0x3f802000u},  // 1 + 2^-11: a tie, away from zero
      {0xbf801000u, 0xbf802000u},  // -(1 + 2^-11)
      {0x3f800fffu, 0x3f800000u},  // just below the tie: down
      {0x3f801001u, 0x3f802000u},  // just above: up
      {0x3f803000u, 0x3f804000u},  // 1 + 3 * 2^-11: a tie from an odd last bit, still away
      {0x3fffffffu, 0x40000000u},  // carries into the exponent
      {0x7f7fffffu, 0x7f800000u},  // the largest float: to infinity
      {0x7f800000u, 0x7f800000u},  // inf
      {0xff800000u, 0xff800000u},  // -inf
  };
  std::vector<float> x;
  for (auto [in, want] : cases) x.push_back(simt::detail::bits<float>(in));
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<unsigned> out(x.size());
  launch_cvt_tf32(static_cast<int>(x.size()), x.data(), out.data());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(out[i], cases[i].second) << std::hex << cases[i].first;
  EXPECT_TRUE(std::isnan(simt::detail::bits<float>(out.back())));
}

TEST(SimtMma, TheWholeWarpAtOneCallSite) {
  const MmaCase m = make_mma_case(0, false, 0);
  std::vector<float> d(32 * 4);
  // Lanes 16-31 return before the mma.
  expect_error_naming<simt::DivergentCollective>(
      [&] { launch_mma_fragments(0, 32, 16, 1, m.frag_a.data(), m.frag_b.data(), m.frag_c.data(), d.data()); },
      {"gnnfuse_mma_m16n8k16_f16f32", "has exited"});
  // A block of 16 threads has no whole warp.
  expect_error_naming<simt::DivergentCollective>(
      [&] { launch_mma_fragments(1, 16, 32, 1, m.frag_a.data(), m.frag_b.data(), m.frag_c.data(), d.data()); },
      {"gnnfuse_mma_m16n8k16_bf16f32", "past the block's 16 threads"});
  // Two call sites (mma.sync.aligned).
  expect_error_naming<simt::DivergentCollective>([&] { launch_mma_divergent_sites(d.data()); },
                                                 {"gnnfuse_mma_m16n8k16_f16f32", "kernels.cuh"});
}

// ---------------------------------------------------------------- ldmatrix and cp.async
// ldmatrix.x4 and .x4.trans against the PTX ISA's layout written out here: lane l's register i
// holds matrix i's (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) (.trans: the transposed
// matrix's), the lower column in the low half; each row read from the address its lane gave.
TEST(SimtLdmatrix, RegistersFollowThePtxLayout) {
  std::vector<unsigned short> in(4 * 64);
  for (int e = 0; e < 4 * 64; ++e) in[e] = static_cast<unsigned short>(1000 + e);
  auto element = [&](int i, int row, int col) { return unsigned(in[64 * i + 8 * row + col]); };
  for (int trans = 0; trans < 2; ++trans) {
    std::vector<unsigned> out(32 * 4, 0);
    launch_ldmatrix_rows(trans, 0, 0, in.data(), out.data());
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int g = l / 4, c = 2 * (l % 4);
        const unsigned want = trans ? element(i, c, g) | element(i, c + 1, g) << 16 : element(i, g, c) | element(i, g, c + 1) << 16;
        ASSERT_EQ(out[4 * l + i], want) << "trans " << trans << " lane " << l << " r" << i;
      }
  }
}

TEST(SimtLdmatrix, RowsInSharedMemoryAndAligned) {
  std::vector<unsigned short> in(4 * 64, 1);
  std::vector<unsigned> out(32 * 4);
  expect_error_naming<simt::MisalignedAddress>([&] { launch_ldmatrix_rows(0, 8, 0, in.data(), out.data()); },
                                               {"gnnfuse_ldmatrix_x4", "not 16-byte aligned"});
  expect_error_naming<simt::MisalignedAddress>([&] { launch_ldmatrix_rows(1, 0, 1, in.data(), out.data()); },
                                               {"gnnfuse_ldmatrix_x4_trans", "outside the block's shared memory"});
}

// The bank-conflict count: rows 16 or 48 bytes apart are free of conflicts, rows 128 bytes apart
// put each matrix's 8 rows in the same 4 banks (7 extra wavefronts, 4 matrices).
TEST(SimtLdmatrix, BankConflictsAreCounted) {
  std::vector<unsigned> out(32);
  for (auto [stride, extra] : {std::pair{1, 0}, std::pair{3, 0}, std::pair{8, 28}, std::pair{2, 4}}) {
    const std::uint64_t before = simt::ldmatrix_bank_conflicts();
    launch_ldmatrix_strided(stride, out.data());
    EXPECT_EQ(simt::ldmatrix_bank_conflicts() - before, std::uint64_t(extra)) << "stride " << stride;
  }
}

// A copy lands at the wait that covers its group, not before: the slot keeps its old bytes
// until then (a kernel missing the wait reads them), src_bytes copied and the rest zeroed.
TEST(SimtCpAsync, CopiesLandAtTheirGroupsWait) {
  alignas(16) unsigned src[256];
  for (unsigned e = 0; e < 256; ++e) src[e] = 0x1000u + e;
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 3);
    std::vector<unsigned> out(32 * 12, 0);
    launch_cp_async_groups(0, src, out.data());
    for (int t = 0; t < 32; ++t) {
      const int words = t % 5;
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(out[t * 12 + i], 0xEEEEEEEEu) << "thread " << t << ": before any wait";
        EXPECT_EQ(out[t * 12 + 4 + i], i < words ? src[4 * t + i] : 0u) << "thread " << t << ": group 1 after wait_group 1";
        EXPECT_EQ(out[t * 12 + 8 + i], src[128 + 4 * t + i]) << "thread " << t << ": group 2 after wait_group 0";
      }
    }
  }
}

// A cp.async's wait shows the copy to its own thread only: an ldmatrix reading rows other lanes
// copied needs a barrier after their waits (a __syncwarp or __syncthreads), else it is an
// UnpublishedRead (a GPU may show the old bytes).
TEST(SimtCpAsync, LdmatrixReadsCopiesOnlyAfterABarrier) {
  alignas(16) unsigned short in[4 * 64];
  for (int e = 0; e < 4 * 64; ++e) in[e] = static_cast<unsigned short>(1000 + e);
  std::vector<unsigned> want(32 * 4, 0), out(32 * 4, 0);
  launch_ldmatrix_rows(0, 0, 0, in, want.data());
  for (int barrier = 1; barrier <= 2; ++barrier)
    for (simt::Order order : kOrders) {
      OrderScope scope(order, 5);
      std::fill(out.begin(), out.end(), 0u);
      launch_cp_async_ldmatrix(barrier, in, out.data());
      EXPECT_EQ(out, want) << "barrier " << barrier;
    }
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 5);
    expect_error_naming<simt::UnpublishedRead>([&] { launch_cp_async_ldmatrix(0, in, out.data()); },
                                               {"gnnfuse_ldmatrix_x4", "cp.async at", "no __syncwarp naming it or __syncthreads"});
  }
}

// Plain loads of staged slots (gnnfuse_ld_staged[16]) are checked as ldmatrix rows are: after the
// wait and a barrier they read the copies; a thread's own copy needs its wait only; another lane's
// copy with no barrier since its wait, or any copy still queued (no wait yet, or a later copy to
// the same slot after a wait for the first), is an UnpublishedRead.
TEST(SimtCpAsync, StagedLoadsReadCopiesOnlyWhenPublished) {
  alignas(16) unsigned in[128];
  for (unsigned e = 0; e < 128; ++e) in[e] = 0x5000u + e;
  for (simt::Order order : kOrders) {
    OrderScope scope(order, 7);
    for (int mode : {0, 2, 4}) {
      std::vector<unsigned> out(128, 0);
      launch_cp_async_staged_load(mode, in, out.data());
      for (int l = 0; l < 32; ++l) {
        const int from = mode == 2 ? l : (l + 1) % 32;
        for (int i = 0; i < 4; ++i) {
          if (mode == 4 && i != 1) continue;  // (mode 4 reads word 1 alone)
          ASSERT_EQ(out[4 * l + i], in[4 * from + i]) << "mode " << mode << " lane " << l << " word " << i;
        }
      }
    }
    std::vector<unsigned> out(128, 0);
    expect_error_naming<simt::UnpublishedRead>([&] { launch_cp_async_staged_load(1, in, out.data()); },
                                               {"gnnfuse_ld_staged16", "cp.async at", "no __syncwarp naming it or __syncthreads"});
    expect_error_naming<simt::UnpublishedRead>([&] { launch_cp_async_staged_load(3, in, out.data()); },
                                               {"gnnfuse_ld_staged16", "cp.async at", "no wait of that thread covers its group yet"});
    // its own first copy landed, but a second one to the same slot is still queued
    expect_error_naming<simt::UnpublishedRead>([&] { launch_cp_async_staged_load(5, in, out.data()); },
                                               {"gnnfuse_ld_staged16", "cp.async at", "no wait of that thread covers its group yet"});
  }
}

// Staged loads are counted as warp instructions with their bank conflicts: 4-byte words 1 apart
// are free, 2 apart two-way, 32 apart 32-way (one 32-lane phase); 16-byte slots 1 apart are free
// (four 8-lane phases over all banks), 2 apart two-way in each phase.
TEST(SimtCpAsync, StagedLoadBankConflictsAreCounted) {
  std::vector<unsigned> out(32);
  for (auto [wide, stride, extra] : {std::tuple{0, 1, 0}, std::tuple{0, 2, 1}, std::tuple{0, 32, 31}, std::tuple{1, 1, 0}, std::tuple{1, 2, 4}}) {
    const simt::StagedLoadStats before = simt::staged_load_stats();
    launch_staged_strided(wide, stride, out.data());
    const simt::StagedLoadStats after = simt::staged_load_stats();
    EXPECT_EQ(after.loads - before.loads, 1u) << "wide " << wide << " stride " << stride;
    EXPECT_EQ(after.extra_wavefronts - before.extra_wavefronts, std::uint64_t(extra)) << "wide " << wide << " stride " << stride;
  }
}

// A staged load is checked as a GPU load would fault: in the block's shared memory, aligned to
// its size.
TEST(SimtCpAsync, StagedLoadAddressesAreChecked) {
  std::vector<unsigned> out(32);
  expect_error_naming<simt::MisalignedAddress>([&] { launch_staged_misaligned(0, out.data()); },
                                               {"gnnfuse_ld_staged16", "address not aligned to its 16 bytes"});
  expect_error_naming<simt::MisalignedAddress>([&] { launch_staged_misaligned(1, out.data()); },
                                               {"gnnfuse_ld_staged", "address outside the block's shared memory"});
}

TEST(SimtCpAsync, AddressesAndSizesAreChecked) {
  alignas(16) unsigned src[256] = {};
  std::vector<unsigned> out(32 * 12);
  expect_error_naming<simt::MisalignedAddress>([&] { launch_cp_async_groups(1, src, out.data()); },
                                               {"gnnfuse_cp_async16", "not 16-byte aligned"});
  expect_error_naming<simt::MisalignedAddress>([&] { launch_cp_async_groups(2, src, out.data()); },
                                               {"gnnfuse_cp_async16", "source address not 16-byte aligned"});
  expect_error_naming<simt::MisalignedAddress>([&] { launch_cp_async_groups(3, src, out.data()); },
                                               {"gnnfuse_cp_async16", "src_bytes 17"});
  expect_error_naming<simt::MisalignedAddress>([&] { launch_cp_async_groups(4, src, out.data()); },
                                               {"gnnfuse_cp_async16", "outside the block's shared memory"});
}

// ---------------------------------------------------------------- SpMM
struct Csr {
  int rows = 0, cols = 0;
  std::vector<int> rowptr, col;
  std::vector<float> val;
};

// Random rows: about 15% empty, most short, a few long (longer than a warp's 32).
Csr random_graph(int rows, int cols, int long_length, unsigned seed) {
  std::mt19937 rng(seed);
  Csr a;
  a.rows = rows;
  a.cols = cols;
  a.rowptr.push_back(0);
  for (int r = 0; r < rows; ++r) {
    const unsigned kind = rng() % 100;
    const int length = kind < 15 ? 0 : kind < 97 ? int(rng() % 20) + 1 : long_length + int(rng() % 40);
    for (int k = 0; k < length; ++k) {
      a.col.push_back(int(rng() % unsigned(cols)));
      a.val.push_back(float(int(rng() % 2001) - 1000) / 512.0f);
    }
    a.rowptr.push_back(int(a.col.size()));
  }
  return a;
}

std::vector<float> spmm_reference(const Csr& a, const std::vector<float>& x, int f) {
  std::vector<float> y(std::size_t(a.rows) * f, 0.0f);
  for (int r = 0; r < a.rows; ++r)
    for (int k = 0; k < f; ++k) {
      double s = 0;
      for (int p = a.rowptr[r]; p < a.rowptr[r + 1]; ++p) s += double(a.val[p]) * x[std::size_t(a.col[p]) * f + k];
      y[std::size_t(r) * f + k] = float(s);
    }
  return y;
}

const int kVariants[] = {1, 2, 4, 8, 16, 32, -1, -2};

void check_spmm(const Csr& a, int f, int variant, int blocks) {
  std::mt19937 rng(unsigned(f * 100 + variant));
  std::vector<float> x(std::size_t(a.cols) * f);
  for (float& v : x) v = float(int(rng() % 2001) - 1000) / 256.0f;
  std::vector<float> y(std::size_t(a.rows) * f, -12345.0f);
  launch_spmm(variant, blocks, a.rows, f, a.rowptr.data(), a.col.data(), a.val.data(), x.data(), y.data());
  const std::vector<float> expect = spmm_reference(a, x, f);
  for (std::size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(y[i], expect[i], 1e-4 * (1 + std::abs(expect[i])))
        << "variant " << variant << " F " << f << " row " << i / f << " feature " << i % f;
}

TEST(SimtSpmm, RowSplitAndWarpPerRowMatchTheReference) {
  const Csr a = random_graph(700, 300, 100, 42);
  for (int variant : kVariants)
    for (int f : {1, 32, 45}) check_spmm(a, f, variant, 16);  // rows left over for a grid-stride pass
}

TEST(SimtSpmm, EveryOrderGivesTheSameResult) {
  const Csr a = random_graph(300, 200, 60, 7);
  for (simt::Order order : {simt::Order::reverse, simt::Order::random}) {
    OrderScope scope(order, 13);
    for (int variant : {4, 32, -2}) check_spmm(a, 20, variant, 8);
  }
}

TEST(SimtSpmm, SpeedOnA47kNonzeroGraph) {
  const Csr a = random_graph(5000, 5000, 64, 3);
  const int f = 32;
  std::vector<float> x(std::size_t(a.cols) * f, 0.5f), y(std::size_t(a.rows) * f);
  for (int variant : {4, 8, -1}) {
    const int groups_per_block = variant > 0 ? 256 / variant : 8;
    const int blocks = (a.rows + groups_per_block - 1) / groups_per_block;
    const auto t0 = std::chrono::steady_clock::now();
    launch_spmm(variant, blocks, a.rows, f, a.rowptr.data(), a.col.data(), a.val.data(), x.data(), y.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ simt     ] spmm variant %d, %zu nonzeros, F=%d, %u threads: %.3f s\n", variant, a.col.size(), f,
                simt::threads(), s);
    EXPECT_LT(s, 20.0);  // a hang guard, not a benchmark
  }
}

// ---------------------------------------------------------------- configuration
TEST(SimtConfig, UcontextSwitchGivesTheSameResults) {
  gnnfuse::simt::detail::set_ucontext(true);
  const Csr a = random_graph(200, 100, 50, 9);
  for (int variant : {4, -1}) check_spmm(a, 16, variant, 4);
  std::vector<int> out(64);
  expect_error<simt::Deadlock>([&] { launch_shuffle_barrier_deadlock(out.data()); });
  gnnfuse::simt::detail::set_ucontext(false);
}

TEST(SimtConfig, OneThreadAndSmallStacks) {
  simt::set_threads(1);
  simt::set_stack_size(16 * 1024);
  EXPECT_EQ(simt::threads(), 1u);
  const Csr a = random_graph(100, 100, 40, 10);
  check_spmm(a, 8, 8, 4);
  simt::set_threads(0);
  simt::set_stack_size(0);
  EXPECT_GE(simt::threads(), 1u);
}

}  // namespace
