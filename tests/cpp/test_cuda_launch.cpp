// The launch decision of the generated CUDA kernels (runtime/cuda_launch.h): variant, group
// size, grid, vector width, shared memory and workspace from the graph's statistics and what
// the op offers. Host code only: it runs here without a GPU.
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/cuda_launch.h"

using namespace gnnfuse::runtime::cuda;

namespace {

KernelShape row_kernel(int64_t rows, int64_t f, bool aligned = true) {
  KernelShape k;
  k.form = Form::RowSplit;
  k.rows = rows;
  k.tile_extent = f;
  k.feature_tile = 8;
  k.vector_ok = aligned;
  return k;
}

KernelShape pos_kernel(int64_t rows, int64_t f) {
  KernelShape k = row_kernel(rows, f);
  k.form = Form::PosSplit;
  return k;
}

KernelShape lanes_kernel(int64_t rows, int64_t lane_extent, int64_t group_elems = 0, int64_t thread_elems = 0, int64_t staged = 4) {
  KernelShape k;
  k.form = Form::Lanes;
  k.rows = rows;
  k.tile_extent = lane_extent;
  k.group_elems = group_elems;
  k.thread_elems = thread_elems;
  k.staged_bytes = staged;
  return k;
}

// An spmm-like op: row split, pos split (both forms) and lanes.
Request spmm(int64_t rows, int64_t nnz, int64_t max_row, int64_t f, bool aligned = true) {
  Request r;
  r.variants = {{Variant::RowSplit, {row_kernel(rows, f, aligned)}},
                {Variant::PosSplit, {pos_kernel(rows, f)}},
                {Variant::PosSplitAtomic, {pos_kernel(rows, f)}},
                {Variant::Lanes, {lanes_kernel(rows, f, f)}}};
  r.graph = GraphStats{rows, nnz, max_row};
  return r;
}

KernelShape reg_kernel(Form form, int64_t rows, int64_t f, bool regs, bool passes) {
  KernelShape k;
  k.form = form;
  k.rows = rows;
  k.tile_extent = f;
  k.vector_ok = true;
  k.regs = regs;
  k.passes = passes;
  return k;
}

// spmm with its register forms too.
Request spmm_regs(int64_t rows, int64_t nnz, int64_t max_row, int64_t f) {
  Request r = spmm(rows, nnz, max_row, f);
  r.variants.push_back({Variant::RegLanes, {reg_kernel(Form::RegLanes, rows, f, true, true)}});
  r.variants.push_back({Variant::PosLanes, {reg_kernel(Form::PosLanes, rows, f, true, true)}});
  r.variants.push_back({Variant::PosLanesAtomic, {reg_kernel(Form::PosLanes, rows, f, true, true)}});
  return r;
}

}  // namespace

// Seed 000's static choice: 4 lanes for short or narrow rows, 8 otherwise, 16 from a mean of 32,
// a warp per row from a mean of 64.
TEST(CudaLaunch, RowSplitGroupFollowsTheMeanRowLength) {
  EXPECT_EQ(decide(spmm(10000, 50000, 12, 64)).kernels[0].group, 4);  // mean 5
  LaunchConfig c = decide(spmm(10000, 160000, 40, 64));                 // mean 16
  EXPECT_EQ(c.variant, Variant::RowSplit);
  EXPECT_EQ(c.kernels[0].group, 8);
  EXPECT_EQ(decide(spmm(10000, 160000, 40, 16)).kernels[0].group, 4);  // narrow rows
  EXPECT_EQ(decide(spmm(10000, 400000, 80, 64)).kernels[0].group, 16);  // mean 40
  c = decide(spmm(10000, 1000000, 200, 64));                             // mean 100
  EXPECT_EQ(c.variant, Variant::WarpPerRow);
  EXPECT_EQ(c.offered, 0u);  // the row split kernels
  EXPECT_EQ(c.kernels[0].group, 32);
  EXPECT_EQ(c.kernels[0].form, Form::RowSplit);
}

// Skewed degrees (or few long rows) go to the nonzero-balanced kernel: its atomic form unless
// the call must be deterministic; the deterministic form's carries are in the workspace.
TEST(CudaLaunch, SkewedDegreesTakeThePosSplit) {
  Request r = spmm(100000, 1000000, 50000, 32);  // mean 10, longest row 50000
  LaunchConfig c = decide(r);
  EXPECT_EQ(c.variant, Variant::PosSplitAtomic);
  EXPECT_EQ(c.offered, 2u);
  EXPECT_EQ(c.kernels[0].group, 32);
  EXPECT_EQ(c.kernels[0].chunk, kPosChunk);
  EXPECT_EQ(c.kernels[0].chunks, (1000000 + kPosChunk - 1) / kPosChunk);
  EXPECT_EQ(c.kernels[0].workspace_bytes, 0);
  r.deterministic = true;
  c = decide(r);
  EXPECT_EQ(c.variant, Variant::PosSplit);
  EXPECT_EQ(c.offered, 1u);
  const int64_t chunks = c.kernels[0].chunks;
  EXPECT_EQ(c.kernels[0].workspace_bytes, chunks * 2 * 32 * 4 + chunks * 8);
  EXPECT_EQ(c.workspace_bytes, aligned(c.kernels[0].workspace_bytes));
  // Few, long rows.
  EXPECT_EQ(decide(spmm(100, 100000, 1000, 32)).variant, Variant::PosSplitAtomic);
  // Not skewed: row split.
  EXPECT_EQ(decide(spmm(100000, 1000000, 40, 32)).variant, Variant::RowSplit);
}

// 16-byte loads where F and the alignment allow: 4 floats, 2 doubles, 8 halves.
TEST(CudaLaunch, VectorWidthFromFAndAlignment) {
  EXPECT_EQ(decide(spmm(1000, 10000, 20, 64)).kernels[0].vector_width, 4);
  EXPECT_EQ(decide(spmm(1000, 10000, 20, 66)).kernels[0].vector_width, 1);
  EXPECT_EQ(decide(spmm(1000, 10000, 20, 64, false)).kernels[0].vector_width, 1);
  Request r = spmm(1000, 10000, 20, 64);
  r.scalar_bytes = 8;
  r.acc_bytes = 8;
  EXPECT_EQ(decide(r).kernels[0].vector_width, 2);
  r.scalar_bytes = 2;
  r.acc_bytes = 4;
  EXPECT_EQ(decide(r).kernels[0].vector_width, 8);
  r = spmm(1000, 10000, 20, 60);  // a multiple of 4, not of 8
  r.scalar_bytes = 2;
  EXPECT_EQ(decide(r).kernels[0].vector_width, 1);
}

// A grid-stride launch: one group per (row, tile of 8 columns), at most 65535 blocks.
TEST(CudaLaunch, GridCoversRowsAndTiles) {
  LaunchConfig c = decide(spmm(1000, 16000, 20, 64));  // group 8: 32 groups per block, 8 tiles
  EXPECT_EQ(c.kernels[0].block, 256);
  EXPECT_EQ(c.kernels[0].grid, (1000 * 8 + 31) / 32);
  c = decide(spmm(100000000, 1600000000, 20, 64));
  EXPECT_EQ(c.kernels[0].grid, kMaxGrid);
  c = decide(spmm(1, 1, 1, 1));
  EXPECT_EQ(c.kernels[0].grid, 1);
}

// Ops offering lanes only (attention, softmax): the lane variable's extent rounded up to a power
// of two; row buffers in shared memory when a block's fit, else in the workspace.
TEST(CudaLaunch, LanesGroupAndBuffers) {
  Request r;
  r.graph = GraphStats{1000, 10000, 30};
  r.variants = {{Variant::Lanes, {lanes_kernel(1000, 3)}}};
  LaunchConfig c = decide(r);
  EXPECT_EQ(c.variant, Variant::Lanes);
  EXPECT_EQ(c.kernels[0].group, 4);
  EXPECT_TRUE(c.kernels[0].buffers_shared);
  EXPECT_EQ(c.kernels[0].smem_bytes, 256 * 4);  // the staged indices
  r.variants = {{Variant::Lanes, {lanes_kernel(1000, 1)}}};
  EXPECT_EQ(decide(r).kernels[0].group, 1);
  // 8 groups of 32 lanes; per group 64 x 8 elements of the group's and 8 per lane.
  r.variants = {{Variant::Lanes, {lanes_kernel(1000, 100, 64 * 8, 8)}}};
  c = decide(r);
  EXPECT_EQ(c.kernels[0].group, 32);
  EXPECT_TRUE(c.kernels[0].buffers_shared);
  EXPECT_EQ(c.kernels[0].smem_bytes, 256 * 4 + 8 * (64 * 8 + 32 * 8) * 4);
  EXPECT_EQ(c.kernels[0].workspace_bytes, 0);
  // Too large for shared memory: the workspace, one region per group of the grid.
  r.variants = {{Variant::Lanes, {lanes_kernel(1000, 100, 4096, 64)}}};
  r.call_bytes = 1000;
  c = decide(r);
  EXPECT_FALSE(c.kernels[0].buffers_shared);
  EXPECT_EQ(c.kernels[0].smem_bytes, 256 * 4);
  EXPECT_EQ(c.kernels[0].workspace_bytes, c.kernels[0].grid * 8 * (4096 + 32 * 64) * 4);
  EXPECT_EQ(c.kernels[0].workspace_offset, aligned(1000));
  EXPECT_EQ(c.workspace_bytes, aligned(1000) + aligned(c.kernels[0].workspace_bytes));
}

// A lanes kernel whose lanes split a walk (the numeric SpGEMM's products): the group covers the
// walked operand's mean row (a power of two up to a warp), not the (absent) lane variable.
TEST(CudaLaunch, SplitWalkGroupFollowsItsMeanRow) {
  Request r;
  r.graph = GraphStats{1000, 10000, 30};
  for (auto [mean, group] : {std::pair<int64_t, int>{1, 1}, {3, 4}, {8, 8}, {9, 16}, {40, 32}, {5000, 32}}) {
    KernelShape k = lanes_kernel(1000, 1);
    k.split_mean = mean;
    r.variants = {{Variant::Lanes, {k}}};
    const LaunchConfig c = decide(r);
    EXPECT_EQ(c.kernels[0].group, group) << mean;
    EXPECT_EQ(c.kernels[0].grid, (1000 + 256 / group - 1) / (256 / group)) << mean;
  }
  KernelShape k = lanes_kernel(1000, 1);
  k.split_mean = 40;
  r.variants = {{Variant::Lanes, {k}}};
  r.force_group = 2;
  EXPECT_EQ(decide(r).kernels[0].group, 2);
}

// Several kernels (phases of a dense product block, or several loop nests): each sized, the
// workspace laid out in order after the call's temporaries.
TEST(CudaLaunch, WorkspaceLayoutOfSeveralKernels) {
  Request r;
  r.graph = GraphStats{1000, 20000, 40};
  r.call_bytes = 300;
  KernelShape serial = lanes_kernel(50, 16, 0, 0, 0);
  serial.form = Form::Serial;
  r.variants = {{Variant::RowSplit, {row_kernel(1000, 64), lanes_kernel(1000, 100, 8192, 0), serial}}};
  LaunchConfig c = decide(r);
  ASSERT_EQ(c.kernels.size(), 3u);
  EXPECT_EQ(c.kernels[0].workspace_offset, 512);
  EXPECT_EQ(c.kernels[1].workspace_offset, 512);
  EXPECT_EQ(c.kernels[2].workspace_offset, 512 + aligned(c.kernels[1].workspace_bytes));
  EXPECT_EQ(c.kernels[2].grid, 1);
  EXPECT_EQ(c.kernels[2].block, 16);
  EXPECT_EQ(c.kernels[2].group, 16);
  for (auto& k : c.kernels) EXPECT_EQ(k.workspace_offset % kWorkspaceAlign, 0);
}

TEST(CudaLaunch, ForcedVariantAndGroup) {
  Request r = spmm(1000, 5000, 10, 64);
  r.force_variant = static_cast<int>(Variant::WarpPerRow);
  LaunchConfig c = decide(r);
  EXPECT_EQ(c.variant, Variant::WarpPerRow);
  EXPECT_EQ(c.kernels[0].group, 32);
  r.force_variant = static_cast<int>(Variant::PosSplit);
  EXPECT_EQ(decide(r).offered, 1u);
  r.force_variant = static_cast<int>(Variant::Lanes);
  r.force_group = 2;
  c = decide(r);
  EXPECT_EQ(c.offered, 3u);
  EXPECT_EQ(c.kernels[0].group, 2);
  Request lanes_only;
  lanes_only.variants = {{Variant::Lanes, {lanes_kernel(10, 4)}}};
  lanes_only.force_variant = static_cast<int>(Variant::PosSplit);
  EXPECT_THROW(decide(lanes_only), std::invalid_argument);
  EXPECT_THROW(decide(Request{}), std::invalid_argument);
}

TEST(CudaLaunch, VariantNames) {
  for (Variant v : {Variant::RowSplit, Variant::WarpPerRow, Variant::PosSplit, Variant::PosSplitAtomic, Variant::Lanes, Variant::RegLanes,
                    Variant::PosLanes, Variant::PosLanesAtomic}) {
    Variant back = Variant::Lanes;
    ASSERT_TRUE(parse_variant(to_string(v), &back));
    EXPECT_EQ(back, v);
  }
  Variant x;
  EXPECT_FALSE(parse_variant("warp", &x));
}

// The register forms first where offered: RegLanes by rows, PosLanes (atomic unless
// deterministic) on skewed degrees; a group of min(32, F / VW) lanes (several rows per warp for
// small F), R = F / (G VW) register chunks up to 8, then passes over the columns.
TEST(CudaLaunch, RegisterFormsFirst) {
  LaunchConfig c = decide(spmm_regs(100000, 1000000, 40, 128));
  EXPECT_EQ(c.variant, Variant::RegLanes);
  EXPECT_EQ(c.offered, 4u);
  EXPECT_EQ(c.kernels[0].form, Form::RegLanes);
  EXPECT_EQ(c.kernels[0].vector_width, 4);
  EXPECT_EQ(c.kernels[0].group, 32);
  EXPECT_EQ(c.kernels[0].regs, 1);
  EXPECT_EQ(c.kernels[0].grid, (100000 + 7) / 8);
  c = decide(spmm_regs(100000, 1000000, 40, 32));
  EXPECT_EQ(c.kernels[0].group, 8);
  EXPECT_EQ(c.kernels[0].regs, 1);
  c = decide(spmm_regs(100000, 1000000, 40, 512));
  EXPECT_EQ(c.kernels[0].group, 32);
  EXPECT_EQ(c.kernels[0].regs, 4);
  c = decide(spmm_regs(1000, 40000, 40, 8192));  // 64 vectors per lane: 8 chunks, 8 passes
  EXPECT_EQ(c.kernels[0].regs, 8);
  EXPECT_EQ(c.kernels[0].grid, (1000 * 8 + 7) / 8);
  c = decide(spmm_regs(1000, 10000, 40, 129));  // not whole vectors: elements
  EXPECT_EQ(c.kernels[0].vector_width, 1);
  EXPECT_EQ(c.kernels[0].group, 32);
  EXPECT_EQ(c.kernels[0].regs, 8);
  // Skewed: the nonzero-balanced register form.
  Request r = spmm_regs(100000, 1000000, 50000, 128);
  c = decide(r);
  EXPECT_EQ(c.variant, Variant::PosLanesAtomic);
  EXPECT_EQ(c.kernels[0].chunk, kPosLanesChunkMin);  // 1M entries: the smallest chunks keep the GPU full
  EXPECT_EQ(c.kernels[0].chunks, (1000000 + kPosLanesChunkMin - 1) / kPosLanesChunkMin);
  EXPECT_EQ(c.kernels[0].workspace_bytes, 0);
  r.deterministic = true;
  c = decide(r);
  EXPECT_EQ(c.variant, Variant::PosLanes);
  EXPECT_EQ(c.kernels[0].workspace_bytes, c.kernels[0].chunks * 2 * 128 * 4 + c.kernels[0].chunks * 8);
}

// The longest row holds up RegLanes' group: PosLanes where that tail (kEntryNs per entry) exceeds
// streaming the gathered rows plus the extra launch, though the degrees are not skewed by the
// 32x-the-mean rule (the H200's run 3: ca-HepPh, mean 20 and longest row 491, reg_lanes 2.5x
// slower than pos_lanes_atomic); a wide F moves the balance back to RegLanes.
TEST(CudaLaunch, LongestRowTailTakesPosLanes) {
  LaunchConfig c = decide(spmm_regs(12008, 237010, 491, 32));  // ca-HepPh: 89 us of tail, 10 us of rows
  EXPECT_EQ(c.variant, Variant::PosLanesAtomic);
  c = decide(spmm_regs(12008, 237010, 491, 256));  // wider rows, longer entries: still tail bound (run 4)
  EXPECT_EQ(c.variant, Variant::PosLanesAtomic);
  c = decide(spmm_regs(120080, 2370100, 491, 128));  // ten times the rows: no longer tail bound
  EXPECT_EQ(c.variant, Variant::RegLanes);
  c = decide(spmm_regs(55476, 704476, 44, 32));  // copter2: short rows
  EXPECT_EQ(c.variant, Variant::RegLanes);
  c = decide(spmm_regs(1000, 10000, 20, 32));  // tiny: the extra launch outweighs a tail of 20 entries
  EXPECT_EQ(c.variant, Variant::RegLanes);
  Request r = spmm_regs(19717, 88648, 171, 64);  // pubmed
  r.deterministic = true;
  EXPECT_EQ(decide(r).variant, Variant::PosLanes);
}

// PosLanes' chunks: 32 to 128 entries, about four per group the GPU holds at once.
TEST(CudaLaunch, PosLanesChunkFollowsTheEntries) {
  auto chunk = [](int64_t nnz, int64_t f) { return decide(spmm_regs(nnz / 16, nnz, nnz, f)).kernels[0].chunk; };
  EXPECT_EQ(chunk(237010, 128), 32);
  EXPECT_EQ(chunk(int64_t(1) << 24, 128), 128);  // R-MAT scale 20: 8448 resident groups of 32 lanes
  EXPECT_EQ(chunk(int64_t(1) << 24, 32), 64);    // groups of 8 lanes: 4x as many resident
  EXPECT_EQ(chunk(int64_t(1) << 26, 32), 128);
  for (int64_t nnz : {int64_t(1000), int64_t(1) << 20, int64_t(1) << 30}) {
    const int64_t c = chunk(nnz, 64);
    EXPECT_GE(c, kPosLanesChunkMin);
    EXPECT_LE(c, kPosLanesChunkMax);
  }
}

// A kernel that needs the whole lane variable in one pass (a dot product beside its row
// buffer: sddmm_spmm) widens the group to cover it; past 32 lanes of 8 chunks the older forms.
TEST(CudaLaunch, RegisterFormsCoverTheRow) {
  Request r;
  r.graph = GraphStats{1000, 10000, 40};
  r.variants = {{Variant::Lanes, {lanes_kernel(1000, 129, 129)}}, {Variant::RegLanes, {reg_kernel(Form::RegLanes, 1000, 129, true, false)}}};
  r.force_variant = static_cast<int>(Variant::RegLanes);
  r.force_group = 1;
  LaunchConfig c = decide(r);
  EXPECT_EQ(c.kernels[0].group, 32);  // 129 elements: 32 lanes of 8 (5 used)
  EXPECT_EQ(c.kernels[0].regs, 8);
  r.force_variant = -1;
  r.force_group = 0;
  EXPECT_EQ(decide(r).variant, Variant::RegLanes);
  r.variants[1].kernels[0].tile_extent = 4096;  // 1024 vectors: more than 32 x 8
  r.variants[0].kernels[0].tile_extent = 4096;
  EXPECT_EQ(decide(r).variant, Variant::Lanes);
  r.force_variant = static_cast<int>(Variant::RegLanes);
  EXPECT_THROW(decide(r), std::invalid_argument);
  // Vector loads need every lane loop's extent a multiple of VW.
  r = Request{};
  r.graph = GraphStats{1000, 10000, 40};
  r.variants = {{Variant::RegLanes, {reg_kernel(Form::RegLanes, 1000, 64, false, false)}}};
  EXPECT_EQ(decide(r).kernels[0].vector_width, 4);
  r.variants[0].kernels[0].lane_gcd = 6;
  EXPECT_EQ(decide(r).kernels[0].vector_width, 1);
}

// Variants marked atomic (their result depends on the order of floating-point atomics, e.g. the
// lanes kernels of gcn_grad_weight's lowering 1 that scatter into a temporary) are never chosen
// or forced under deterministic algorithms; where the op offers only such, the first runs and
// the config says so (the adapter raises PyTorch's not-deterministic alert).
TEST(CudaLaunch, DeterministicSkipsAtomicVariants) {
  Request r = spmm_regs(100000, 1000000, 40, 128);
  r.variants[4].atomic = true;  // reg_lanes
  EXPECT_EQ(decide(r).variant, Variant::RegLanes);
  r.deterministic = true;
  LaunchConfig c = decide(r);
  EXPECT_NE(c.variant, Variant::RegLanes);
  EXPECT_FALSE(c.nondeterministic);
  EXPECT_FALSE(r.variants[c.offered].atomic);
  r.force_variant = static_cast<int>(Variant::RegLanes);
  EXPECT_THROW(decide(r), std::invalid_argument);

  Request lanes;
  lanes.variants = {{Variant::Lanes, {lanes_kernel(10, 4)}}, {Variant::RegLanes, {reg_kernel(Form::RegLanes, 10, 4, true, true)}}};
  lanes.variants[0].atomic = lanes.variants[1].atomic = true;
  lanes.graph = GraphStats{10, 30, 3};
  EXPECT_FALSE(decide(lanes).nondeterministic);
  lanes.deterministic = true;
  c = decide(lanes);
  EXPECT_TRUE(c.nondeterministic);
  EXPECT_EQ(c.offered, 0u);
  lanes.variants[0].atomic = false;  // the lanes kernel deterministic: chosen over RegLanes
  c = decide(lanes);
  EXPECT_FALSE(c.nondeterministic);
  EXPECT_EQ(c.variant, Variant::Lanes);
}
