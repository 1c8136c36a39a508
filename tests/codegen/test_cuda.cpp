// The cuda target of the generator: its schedule and variants (schedule_cuda.cpp), the imperative
// IR of the CUDA-scheduled trees, and the printed kernels (cuda_kernel*.cpp, emit_cuda.cpp).
// Goldens compared as text; update one by pasting what `gnnfuse-gen --target cuda --dump
// ops/<op>.spec` prints (the imperative IR sections) or what the failure shows (a kernel), when
// a change is intended.
#include <gtest/gtest.h>

#include <filesystem>

#include "codegen/cuda_kernel.h"
#include "codegen/imperative.h"
#include "codegen/ir.h"

using namespace gnnfuse::codegen;

namespace {

const std::string kOps = GNNFUSE_OPS_DIR;

std::unique_ptr<Compiled> cuda(const std::string& op) { return compile(load_spec(kOps + "/" + op + ".spec"), Target::Cuda); }

// A variant's imperative IR, lowered once by compile() (the same lowered again from its tree).
std::string variant_ir(const Compiled& c, const std::string& name) {
  for (auto& v : c.schedule_variants)
    if (v.name == name) {
      EXPECT_EQ(imp::print(*v.kernel), imp::print(imp::lower(c, *v.tree))) << name;
      return imp::print(*v.kernel);
    }
  return "no variant " + name;
}

// The op of a family (the spec's own or a derived one) by name; nullptr when it has none.
const Compiled* family_op(const Family& f, const std::string& name) {
  for (auto& c : f.ops)
    if (c->spec.name == name) return c.get();
  return nullptr;
}

std::vector<std::string> variant_names(const Compiled& c) {
  std::vector<std::string> out;
  for (auto& v : c.schedule_variants) out.push_back(v.name);
  return out;
}

}  // namespace

// The CUDA schedule of spmm: groups of lanes split the row's walk and combine the row's
// accumulator (a register tile of 8 columns per thread) by shuffles.
TEST(Cuda, SpmmRowSplit) {
  auto c = cuda("spmm");
  EXPECT_EQ(imp::print(*c->kernel), R"(kernel spmm
  parallel for i < n_i  [grid of 8, 32 rows per block]
    per worker: workspace Yacc(f)
    row A(i)
    alloc Yacc(f) = 0
    fill Yacc = 0
    walk j in A  [lane group of 8, shuffle reduction Yacc]
      for f < n_f  [feature tile 8, vector width at launch]
        Yacc(f) += A(i,j) * X(j,f)
    for f < n_f  [feature tile 8, vector width at launch]
      Y(i,f) = Yacc(f)
)");
  EXPECT_EQ(variant_names(*c), (std::vector<std::string>{"row_split", "pos_split", "pos_split_atomic", "lanes", "reg_lanes", "pos_lanes",
                                                          "pos_lanes_atomic"}));
  EXPECT_EQ(c->schedule_variants[0].kernel, c->kernel);  // the schedule's own tree: one lowering
}

// The nonzero-balanced kernel (a warp per chunk of entries, one entry per lane, a segmented
// reduction by row) and the lanes over the feature loop (the group walks the row together, its
// entries staged in shared memory).
TEST(Cuda, SpmmPosSplitAndLanes) {
  auto c = cuda("spmm");
  EXPECT_EQ(variant_ir(*c, "pos_split"), R"(kernel spmm
  parallel for i < n_i  [grid of 32, balanced by A, segmented reduction Yacc]
    per worker: workspace Yacc(f)
    row A(i)
    alloc Yacc(f) = 0
    fill Yacc = 0
    walk j in A  [lane]
      for f < n_f  [feature tile 8, vector width at launch]
        Yacc(f) += A(i,j) * X(j,f)
    for f < n_f  [feature tile 8, vector width at launch]
      Y(i,f) = Yacc(f)
)");
  EXPECT_NE(variant_ir(*c, "pos_split_atomic").find("atomic reduction Yacc"), std::string::npos);
  EXPECT_EQ(variant_ir(*c, "lanes"), R"(kernel spmm
  parallel for i < n_i  [grid of 8, 32 rows per block]
    per worker: workspace Yacc(f)
    row A(i)
    alloc Yacc(f) = 0
    fill Yacc = 0
    walk j in A  [staged in shared memory]
      for f < n_f  [lane]
        Yacc(f) += A(i,j) * X(j,f)
    for f < n_f  [lane]
      Y(i,f) = Yacc(f)
)");
}

// The adjoint by columns walks the CSC view: the same kernels over the columns.
TEST(Cuda, SpmmGradXWalksColumns) {
  Family f = compile_family(load_spec(kOps + "/spmm.spec"), Target::Cuda);
  const Compiled* gx = family_op(f, "spmm_grad_x");
  ASSERT_NE(gx, nullptr);
  EXPECT_EQ(variant_ir(*gx, "pos_split"), R"(kernel spmm_grad_x
  parallel for j < n_j  [grid of 32, balanced by A, segmented reduction DXacc]
    per worker: workspace DXacc(f)
    row A(j) by columns
    alloc DXacc(f) = 0
    fill DXacc = 0
    walk i in A by columns  [lane]
      for f < n_f  [feature tile 8, vector width at launch]
        DXacc(f) += GY(i,f) * A(i,j)
    for f < n_f  [feature tile 8, vector width at launch]
      DX(j,f) = DXacc(f)
)");
}

// The launch of a pos kernel zeroes the output rows it never reaches, over its own row variable:
// spmm_mean_grad_x's pos lanes variant (a first kernel over i for 1 / N(i), then the walk by
// columns over j) zeroes n_j rows of DX(j,f), not n_i (past DX's end where n_i > n_j).
TEST(Cuda, PosLaunchZeroesItsOwnRows) {
  Family f = compile_family(load_spec(kOps + "/spmm_mean.spec"), Target::Cuda);
  const Compiled* gx = family_op(f, "spmm_mean_grad_x");
  ASSERT_NE(gx, nullptr);
  for (const char* name : {"pos_split", "pos_lanes", "pos_lanes_atomic"}) {
    const ScheduleVariant* v = nullptr;
    for (auto& sv : gx->schedule_variants)
      if (sv.name == name) v = &sv;
    ASSERT_NE(v, nullptr) << name;
    emit::CudaPrinter pr(*gx, *v, std::string("spmm_mean_grad_x_") + name);
    pr.kernels();
    const std::string host = pr.host();
    EXPECT_NE(host.find("static_cast<scalar_t*>(prm.DX), n_j * n_f"), std::string::npos) << name;
    EXPECT_EQ(host.find("static_cast<scalar_t*>(prm.DX), n_i * n_f"), std::string::npos) << name;
  }
}

// Which ops get which variants: a row buffer over more than one variable (gat's (h, f)) keeps
// the rows out of registers, so only lanes; a softmax or an sddmm is a row split without a tile
// (lanes take whole entries); the pos split needs the row's result copied as it is (no guard of
// an empty row, no division by a row statistic: spmm_max, spmm_mean have one). The register
// form of the lanes tree (reg_lanes) where some phase's row buffers can live in registers (none,
// or all over the lane variable: not gat's over (h, f)), and the pos split's register form; an
// op whose row loop is one walk of per-entry values (sddmm) gets that walk balanced by nonzeros
// (pos_lanes, entrywise: no carries).
TEST(Cuda, VariantsPerOp) {
  EXPECT_EQ(variant_names(*cuda("gat")), (std::vector<std::string>{"lanes"}));
  EXPECT_EQ(variant_names(*cuda("graph_attention")), (std::vector<std::string>{"lanes"}));
  EXPECT_EQ(variant_names(*cuda("edge_softmax_heads")), (std::vector<std::string>{"row_split", "lanes"}));
  EXPECT_EQ(variant_names(*cuda("spmm_heads")), (std::vector<std::string>{"lanes"}));
  EXPECT_EQ(variant_names(*cuda("edge_softmax")), (std::vector<std::string>{"row_split", "lanes", "reg_lanes"}));
  EXPECT_EQ(variant_names(*cuda("sddmm")), (std::vector<std::string>{"row_split", "lanes", "reg_lanes", "pos_lanes"}));
  EXPECT_EQ(variant_names(*cuda("spmm_max")), (std::vector<std::string>{"row_split", "lanes", "reg_lanes"}));
  EXPECT_EQ(variant_names(*cuda("spmm_mean")), (std::vector<std::string>{"row_split", "lanes", "reg_lanes"}));
  EXPECT_EQ(variant_names(*cuda("scaled_spmm")), (std::vector<std::string>{"row_split", "pos_split", "pos_split_atomic", "lanes", "reg_lanes",
                                                                          "pos_lanes", "pos_lanes_atomic"}));
}

// gcn's dense product is a block the printer leaves to the host hook (cuBLAS in the adapter):
// the kernel before it stores the aggregated rows, the kernel after it reads the product's rows.
// The grid's row loop is row-blocked: the passes over a block's rows before and after the
// product are those two kernels.
TEST(Cuda, GcnDenseProductIsAHook) {
  auto c = cuda("gcn");
  EXPECT_EQ(imp::print(*c->kernel), R"(kernel gcn
  parallel for i < n_i  [grid of 8, 32 rows per block]  [row blocks]
    per worker: workspace T0(k), a slot per row of a block
    per worker: workspace Yacc(o), a slot per row of a block
    rows i of the block
      row A(i)
      alloc T0(k) = 0
      alloc Yacc(o) = 0
      fill T0 = 0
      walk j in A  [lane group of 8, shuffle reduction T0]
        for k < n_k  [feature tile 8, vector width at launch]
          T0(k) += A(i,j) * X(j,k)
    matmul product Yacc(o) = sum over k of T0(k) * W(k,o)
    rows i of the block
      row A(i)
      alloc T0(k) = 0
      alloc Yacc(o) = 0
      for o < n_o  [feature tile 8, vector width at launch]
        Y(i,o) = Yacc(o)
)");
  std::vector<GeneratedFile> files = emit_op_cuda(compile_family(load_spec(kOps + "/gcn.spec"), Target::Cuda));
  ASSERT_EQ(files.size(), 2u);
  const std::string& cu = files[1].text;
  EXPECT_NE(cu.find("rows_T0[(i) * n_k + f0_ + k_] = T0[k_];"), std::string::npos);  // the aggregated rows stored
  EXPECT_NE(cu.find("env.matmul(env.matmul_ctx, mc_, cu::dtype_code<scalar_t>());"), std::string::npos);
  EXPECT_NE(cu.find("rows_Yacc[(i) * n_o + o]"), std::string::npos);  // the product's rows read
  EXPECT_NE(cu.find("GNNFUSE_GLOBAL void gcn_row_split_k1("), std::string::npos);
  EXPECT_EQ(cu.find("GNNFUSE_GLOBAL void gcn_row_split_k2("), std::string::npos);  // two passes, two kernels
}

// Symbolic ops (seed 002): the numeric op's row workspace, stored by the positions of S's entries,
// is a buffer of the call over S's stored entries, indexed by the position located (no per-lane
// buffer over the column extent), reset per row by the group's lanes; the walk feeding it split
// over the lanes (one entry each, their terms added in entry order by cu::ordered_add, the group
// sized to the walked operand's mean row), the row stored by the lanes after a barrier; where
// the walk is over the workspace's own operand (the adjoint of B's values) each lane adds at its
// own entries' positions; the pattern
// kernels count a row's products into its set's slots, then, per bin of rows, insert and emit sorted.
TEST(Cuda, SymbolicOpsPrintPositionalWorkspacesAndPatternKernels) {
  for (const char* op : {"spgemm", "coarsen"}) {
    std::vector<GeneratedFile> files = emit_op_cuda(compile_family(load_spec(kOps + "/" + op + ".spec"), Target::Cuda));
    ASSERT_EQ(files.size(), 2u);
    const std::string& cu = files[1].text;
    const std::string name(op);
    EXPECT_NE(cu.find("acc_t* Cacc = reinterpret_cast<acc_t*>(ws_ + at_);"), std::string::npos) << op;
    EXPECT_NE(cu.find("at_ += (static_cast<int64_t>(sizeof(acc_t)) * prm.S_nnz + 255) / 256 * 256;"), std::string::npos) << op;
    EXPECT_EQ(cu.find("if (lane_ == 0) Cacc[p_S] += "), std::string::npos) << op;
    EXPECT_NE(cu.find("pos_ = p_S;"), std::string::npos) << op;
    EXPECT_NE(cu.find("cu::ordered_add(Cacc, pos_, add_, mask_);"), std::string::npos) << op;
    EXPECT_NE(cu.find("for (int64_t x_ = static_cast<int64_t>(S_rb) + lane_; x_ < static_cast<int64_t>(S_re); x_ += G_) Cacc[x_] = acc_t(0);\n"
                      "    __syncwarp(mask_);"),
              std::string::npos) << op;
    EXPECT_NE(cu.find("__syncwarp(mask_);\n    for (index_t p_S = S_rb + static_cast<index_t>(lane_); p_S < S_re; p_S += static_cast<index_t>(G_)) {"),
              std::string::npos) << op;
    const std::string walked = name == "spgemm" ? "B" : "A", rows = name == "spgemm" ? "n_k" : "n_i";
    EXPECT_NE(cu.find("k_.split_mean = (prm." + walked + "_nnz + std::max<int64_t>(1, " + rows + ") - 1)"), std::string::npos) << op;
    if (name == "spgemm") EXPECT_NE(cu.find("DBacc[p_B] += ("), std::string::npos);  // spgemm_grad_bvals: no two lanes meet
    if (name == "coarsen") {
      // the second-order adjoint: the position is S's walk's own (A's row nested in it): the lanes
      // take S's entries and add directly, no ordered adds (one position for a whole A row)
      EXPECT_NE(cu.find("DGCacc[p_S] += ("), std::string::npos);
      EXPECT_EQ(cu.find("cu::ordered_add(DGCacc"), std::string::npos);
    }
    EXPECT_EQ(cu.find("Cacc[j]"), std::string::npos) << op;
    EXPECT_EQ(cu.find("Cacc[d]"), std::string::npos) << op;
    EXPECT_NE(cu.find("GNNFUSE_GLOBAL void " + name + "_symbolic_slots_k("), std::string::npos) << op;
    // the bins: a sorted list in registers, a block's shared set (its first loop split over the
    // block's threads), a set in the global table
    for (const char* k : {"_symbolic_list_k(", "_symbolic_shared_k(", "_symbolic_global_k(", "_symbolic_dense_k("})
      EXPECT_NE(cu.find("GNNFUSE_GLOBAL void " + name + k), std::string::npos) << op << k;
    EXPECT_NE(cu.find("cu::RowList<index_t, static_cast<int>(runtime::cuda::kPatternListSlots / 2)> ws_;"), std::string::npos) << op;
    // (a Shared launch holds one class of slots: the count is an argument, no per-row read)
    EXPECT_NE(cu.find("cu::SharedRowSet<index_t> ws_(set_, slots_, set_size_);"), std::string::npos) << op;
    EXPECT_NE(cu.find("int64_t t0_, int64_t t1_, int64_t slots_, int64_t* __restrict__ out_rowptr_"), std::string::npos) << op;
    // a Shared / Dense row's first loop over the threads, a short one over the warps (the lanes
    // over the nested walk: B's row in SpGEMM, A's in coarsening; P's single entry is not split)
    EXPECT_NE(cu.find("_rb) + at1_; p_"), std::string::npos) << op;
    EXPECT_NE(cu.find("const bool wide_ = (static_cast<int64_t>(" + std::string(name == "spgemm" ? "A" : "M") + "_re) - static_cast<int64_t>("),
              std::string::npos) << op;
    EXPECT_NE(cu.find("for (int64_t p_" + std::string(name == "spgemm" ? "B = static_cast<int64_t>(B_rb) + at2_; p_B < static_cast<int64_t>(B_re); p_B += step2_)"
                                                                     : "A = static_cast<int64_t>(A_rb) + at2_; p_A < static_cast<int64_t>(A_re); p_A += step2_)")),
              std::string::npos) << op;
    EXPECT_EQ(cu.find("p_P += step2_"), std::string::npos) << op;
    EXPECT_NE(cu.find("const int64_t len_ = ws_.finish(col_ != nullptr);"), std::string::npos) << op;
    EXPECT_NE(cu.find("cu::RowSet<index_t> ws_("), std::string::npos) << op;
    EXPECT_NE(cu.find("ws_.insert("), std::string::npos) << op;
    EXPECT_NE(cu.find("else ws_.emit_sorted(col_ + out_rowptr_["), std::string::npos) << op;
    EXPECT_NE(files[0].text.find("void " + name + "_symbolic_cuda_rows("), std::string::npos) << op;
  }
}

// Every spec of ops/, forward and derived, prints: a kernel and a launch per variant of
// each lowering, a request and a launch entry per op. The cpu target has no schedule variants.
TEST(Cuda, EveryOpPrints) {
  int ops = 0;
  for (auto& entry : std::filesystem::directory_iterator(kOps)) {
    if (entry.path().extension() != ".spec") continue;
    OpSpec spec = load_spec(entry.path().string());
    Family f = compile_family(spec, Target::Cuda);
    std::vector<GeneratedFile> files = emit_op_cuda(f);
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0].path, spec.name + "_cuda.h");
    EXPECT_EQ(files[1].path, spec.name + "_cuda.cu");
    for (auto& c : f.ops) {
      ++ops;
      EXPECT_FALSE(c->schedule_variants.empty()) << c->spec.name;
      EXPECT_NE(files[1].text.find("void " + c->spec.name + "_cuda("), std::string::npos) << c->spec.name;
      for (auto& v : c->schedule_variants)
        EXPECT_NE(files[1].text.find(c->spec.name + "_" + v.name + "_launch"), std::string::npos) << c->spec.name << " " << v.name;
      EXPECT_EQ(files[1].text.find("__shared__"), std::string::npos);
      EXPECT_EQ(files[1].text.find("<<<"), std::string::npos);
    }
    EXPECT_TRUE(compile(spec)->schedule_variants.empty());
  }
  EXPECT_GT(ops, 100);
}

// pow with a float-argument exponent differentiates to dpow and d2pow (builtins.cpp): their cuda
// spellings over cu::pow_acc, the exponent the kernel's argument.
TEST(Cuda, PowWithAnArgumentExponent) {
  Family f = compile_family(load_spec(kOps + "/../tests/codegen/specs/pow_sum.spec"), Target::Cuda);
  const std::string cu = emit_op_cuda(f).at(1).text;
  EXPECT_NE(cu.find("(arg_p == acc_t(0) ? acc_t(0) : arg_p * gnnfuse::cuda::pow_acc("), std::string::npos);
  EXPECT_NE(cu.find("(arg_p == acc_t(0) || arg_p == acc_t(1) ? acc_t(0) : arg_p * (arg_p - acc_t(1)) * gnnfuse::cuda::pow_acc("),
            std::string::npos);
}

// A tiled kernel gets a VW_ > 1 instance (and a vector width at launch) only where a tile loop
// loads rows by VW_: edge_softmax_heads' grad_score row split reads its tile of edge values
// element-wise, so its launch has the VW_ = 1 instance alone and its shape no vector width;
// spmm's row split loads X's rows by tiles and keeps both.
TEST(Cuda, VectorWidthOnlyWhereTilesLoadByIt) {
  Family f = compile_family(load_spec(kOps + "/edge_softmax_heads.spec"), Target::Cuda);
  const std::string cu = emit_op_cuda(f).at(1).text;
  const std::string k = "edge_softmax_heads_grad_score_row_split_k0";
  ASSERT_NE(cu.find("GNNFUSE_LAUNCH((" + k + "<scalar_t, index_t, 1>)"), std::string::npos);
  EXPECT_EQ(cu.find("GNNFUSE_LAUNCH((" + k + "<scalar_t, index_t, cu::kVec128<scalar_t>>)"), std::string::npos);
  const size_t shape = cu.find("edge_softmax_heads_grad_score_row_split_shape(");
  ASSERT_NE(shape, std::string::npos);
  EXPECT_EQ(cu.find("k_.vector_ok = false;", shape), cu.find("k_.vector_ok", shape));
  const std::string spmm = emit_op_cuda(compile_family(load_spec(kOps + "/spmm.spec"), Target::Cuda)).at(1).text;
  EXPECT_NE(spmm.find("GNNFUSE_LAUNCH((spmm_row_split_k0<scalar_t, index_t, cu::kVec128<scalar_t>>)"), std::string::npos);
  EXPECT_NE(spmm.find("k_.vector_ok = true && reinterpret_cast<uintptr_t>(prm.X) % 16 == 0;"), std::string::npos);
}

// The printed row-split kernel of spmm: a group of G_ lanes per (row, tile of 8 columns), the
// row's entries split over the lanes, X's rows read a tile at a time (VW_ elements per load),
// the accumulators combined by a butterfly of shuffles, one lane storing.
TEST(Cuda, SpmmRowSplitKernel) {
  auto c = cuda("spmm");
  emit::CudaPrinter pr(*c, c->schedule_variants[0], "spmm_row_split");
  EXPECT_EQ(pr.kernels(), R"(// row split: groups of G_ lanes per (row i, tile of C_ columns of f)
template <typename scalar_t, typename index_t, int VW_>
GNNFUSE_GLOBAL void spmm_row_split_k0(const spmm_params prm, const runtime::cuda::KernelLaunch kl_, unsigned char* ws_) {
  using acc_t = cu::acc_t<scalar_t>;
  (void)ws_;
  constexpr int C_ = 8;  // the feature tile: columns per thread
  constexpr int VWA_ = VW_ > 1 ? cu::kVec128<acc_t> : 1;
  (void)VWA_;
  const int64_t n_i = prm.n_i;
  const int64_t n_j = prm.n_j;
  const int64_t n_f = prm.n_f;
  (void)n_i;
  (void)n_j;
  (void)n_f;
  const index_t* __restrict__ A_rowptr = static_cast<const index_t*>(prm.A_rowptr);
  (void)A_rowptr;
  const index_t* __restrict__ A_col = static_cast<const index_t*>(prm.A_col);
  (void)A_col;
  const scalar_t* __restrict__ A_val = static_cast<const scalar_t*>(prm.A_val);
  (void)A_val;
  const scalar_t* __restrict__ X = static_cast<const scalar_t*>(prm.X);
  (void)X;
  scalar_t* __restrict__ Y = static_cast<scalar_t*>(prm.Y);
  (void)Y;
  int64_t at_ = 0;
  (void)at_;
  const int G_ = kl_.group;
  const int lane_ = cu::group_lane(G_);
  const unsigned mask_ = cu::group_mask(G_);
  (void)mask_;
  const int64_t per_block_ = static_cast<int64_t>(blockDim.x) / G_;
  const int64_t tiles_ = (n_f + C_ - 1) / C_;
  for (int64_t t_ = static_cast<int64_t>(blockIdx.x) * per_block_ + static_cast<int64_t>(threadIdx.x) / G_; t_ < n_i * tiles_; t_ += static_cast<int64_t>(gridDim.x) * per_block_) {
    const int64_t i = t_ / tiles_;
    const int64_t f0_ = (t_ % tiles_) * C_;
    (void)f0_;
    const index_t A_rb = A_rowptr[i];
    const index_t A_re = A_rowptr[i + 1];
    (void)A_rb;
    (void)A_re;
    acc_t Yacc[C_];
    GNNFUSE_UNROLL
    for (int k_ = 0; k_ < C_; ++k_) Yacc[k_] = acc_t(0);
    for (index_t p_A = A_rb + static_cast<index_t>(lane_); p_A < A_re; p_A += static_cast<index_t>(G_)) {
      const int64_t j = static_cast<int64_t>(A_col[p_A]);
      (void)j;
      const int64_t e_A = static_cast<int64_t>(p_A);
      (void)e_A;
      acc_t X_t0_[C_];
      cu::load_tile<scalar_t, C_, VW_>(X_t0_, X + ((j) * n_f + 0), f0_, n_f);
      GNNFUSE_UNROLL
      for (int k_ = 0; k_ < C_; ++k_) {
        const int64_t f = f0_ + k_;
        if (f < n_f) {
          Yacc[k_] += ((A_val != nullptr ? cu::load(A_val + e_A) : acc_t(1)) * X_t0_[k_]);
        }
      }
    }
    GNNFUSE_UNROLL
    for (int k_ = 0; k_ < C_; ++k_) Yacc[k_] = cu::group_sum(Yacc[k_], G_, mask_);
    GNNFUSE_UNROLL
    for (int k_ = 0; k_ < C_; ++k_) {
      const int64_t f = f0_ + k_;
      if (f < n_f) {
        if (lane_ == 0) cu::store(Y + ((i) * n_f + f), Yacc[k_]);
      }
    }
  }
}

)");
}

// The register form of sddmm_spmm's lanes tree: the logit's dot product over k and the row
// buffer's loop over f both go to the lanes (the dot product combined by shuffles per entry),
// and the printed kernel keeps Yacc in registers (R_ chunks of C_ = VW_ elements per lane), the
// row's entries loaded G_ at a time and broadcast by shuffles.
TEST(Cuda, SddmmSpmmRegLanes) {
  auto c = cuda("sddmm_spmm");
  EXPECT_EQ(variant_ir(*c, "reg_lanes"), R"(kernel sddmm_spmm
  parallel for i < n_i  [grid of 8, 32 rows per block]
    per worker: workspace Yacc(f)
    row A(i)
    alloc Yacc(f) = 0
    fill Yacc = 0
    walk j in A  [staged in shared memory]
      alloc T0 = 0
      alloc T1 = 0
      for k < n_k  [lane, shuffle reduction T0]
        T0 += U(i,k) * V(j,k)
      T1 = A(i,j) * T0
      for f < n_f  [lane]
        Yacc(f) += T1 * X(j,f)
    for f < n_f  [lane]
      Y(i,f) = Yacc(f)
)");
  const ScheduleVariant* reg = nullptr;
  for (auto& v : c->schedule_variants)
    if (v.name == "reg_lanes") reg = &v;
  ASSERT_NE(reg, nullptr);
  emit::CudaPrinter pr(*c, *reg, "sddmm_spmm_reg_lanes");
  const std::string k = pr.kernels();
  for (const char* piece : {"template <typename scalar_t, typename index_t, int VW_, int R_>", "acc_t Yacc[R_ * C_];",
                            "const int64_t j = static_cast<int64_t>(__shfl_sync(mask_, mj_, q_, G_));",
                            "const acc_t sv_ = __shfl_sync(mask_, mv_, q_, G_);", "T0 = cu::group_sum(T0, G_, mask_);",
                            "const int64_t passes_ = int64_t(1);", "Yacc[r_ * C_ + k_] += (T1 * X_t0_[k_]);"})
    EXPECT_NE(k.find(piece), std::string::npos) << piece << "\n" << k;
  const std::string h = pr.host();
  EXPECT_NE(h.find("k_.form = runtime::cuda::Form::RegLanes;"), std::string::npos) << h;
  EXPECT_NE(h.find("k_.lane_gcd = runtime::cuda::gcd_of(n_f, n_k);"), std::string::npos) << h;
}

// The ops the cuSPARSE backend takes (cusparse_form): SpMM where the output is indexed by the csr
// operand's row, SpMM of A^T where by its column, SDDMM where it lives on the operand; the entry
// values are the operand's values and the edge operands. Anything else keeps its kernels.
TEST(Cuda, CusparseForms) {
  auto forms = [](const std::string& op) {
    std::string out;
    const Family f = compile_family(load_spec(kOps + "/" + op + ".spec"), Target::Cuda);
    for (auto& c : f.ops) {
      const auto form = cusparse_form(c->spec);
      out += c->spec.name + ": ";
      if (!form) {
        out += "-\n";
        continue;
      }
      out += form->kind == CusparseForm::Kind::SpMM ? (form->transpose ? "spmm^T" : "spmm") : "sddmm";
      out += " values(";
      for (size_t k = 0; k < form->values.size(); ++k) out += (k ? "," : "") + form->values[k]->name;
      out += ") " + form->dense0->name + (form->dense1 ? "," + form->dense1->name : "") + "\n";
    }
    return out;
  };
  EXPECT_EQ(forms("spmm"), R"(spmm: spmm values(A) X
spmm_grad_edge_weight: sddmm values() GY,X
spmm_grad_x: spmm^T values(A) GY
spmm_grad_edge_weight_grad_x: spmm^T values(GDA) GY
spmm_grad_edge_weight_grad_grad: spmm values(GDA) X
spmm_grad_x_grad_edge_weight: sddmm values() GY,GDX
spmm_grad_x_grad_grad: spmm values(A) GDX
)");
  const std::string sddmm = R"(sddmm: sddmm values(A) U,V
sddmm_grad_edge_weight: sddmm values(GE) U,V
sddmm_grad_u: spmm values(GE,A) V
sddmm_grad_v: spmm^T values(GE,A) U
)";  // the first order (the second follows the same rules)
  EXPECT_EQ(forms("sddmm").substr(0, sddmm.size()), sddmm);
  // Reductions other than a sum, counts, heads, several dense factors, accumulation-precision
  // operands: none.
  for (const std::string op : {"spmm_mean", "spmm_max", "spmm_heads", "sddmm_heads", "sddmm_add", "sddmm_spmm", "gcn", "gat", "edge_softmax"}) {
    const std::string text = forms(op);
    EXPECT_EQ(text.find("spmm values"), std::string::npos) << text;
    EXPECT_EQ(text.find("sddmm values"), std::string::npos) << text;
  }
}

// The ops the Tensor-Core SpMM takes (tensor_core_form): the SpMM forms of cuSPARSE and their
// per-head form (spmm_heads and its adjoints, the feature gradients of sddmm_heads), each value
// factor marked over the head (h) and optional (?); their kernels printed once per form of entry
// values, the per-head one indexing the factors and x at the head.
TEST(Cuda, TensorCoreForms) {
  auto forms = [](const Family& f) {
    std::string out;
    for (auto& c : f.ops) {
      const auto form = tensor_core_form(c->spec);
      if (!form) continue;
      out += c->spec.name + ": " + (form->transpose ? "spmm^T" : "spmm") + (form->head.empty() ? "" : " heads " + form->head) + " values(";
      for (size_t k = 0; k < form->values.size(); ++k)
        out += (k ? "," : "") + form->values[k]->name + (form->heads[k] ? "h" : "") + (form->optional[k] ? "?" : "");
      out += ") " + form->x->name + "\n";
    }
    return out;
  };
  auto family = [](const std::string& op) { return compile_family(load_spec(kOps + "/" + op + ".spec"), Target::Cuda); };
  EXPECT_EQ(forms(family("spmm")), R"(spmm: spmm values(A?) X
spmm_grad_x: spmm^T values(A?) GY
spmm_grad_edge_weight_grad_x: spmm^T values(GDA) GY
spmm_grad_edge_weight_grad_grad: spmm values(GDA) X
spmm_grad_x_grad_grad: spmm values(A?) GDX
)");
  EXPECT_EQ(forms(family("spmm_heads")), R"(spmm_heads: spmm heads h values(Wh) X
spmm_heads_grad_x: spmm^T heads h values(Wh) GY
spmm_heads_grad_weight_grad_x: spmm^T heads h values(GDWh) GY
spmm_heads_grad_weight_grad_grad: spmm heads h values(GDWh) X
spmm_heads_grad_x_grad_grad: spmm heads h values(Wh) GDX
)");
  const std::string heads = forms(family("sddmm_heads"));
  EXPECT_NE(heads.find("sddmm_heads_grad_u: spmm heads h values(GEh) V\n"), std::string::npos) << heads;
  EXPECT_NE(heads.find("sddmm_heads_grad_v: spmm^T heads h values(GEh) U\n"), std::string::npos) << heads;
  for (const std::string op : {"spmm_mean", "spmm_max", "sddmm_add", "sddmm_spmm", "gcn", "gat", "edge_softmax", "edge_softmax_heads", "coarsen"})
    EXPECT_EQ(forms(family(op)), "") << op;
  // Not the per-head form: a sum of products, x over (j,f,h) (the output's head not x's second
  // variable), a factor over another variable than the head, two dense factors.
  auto spec = [](const std::string& x, const std::string& w, const std::string& expr) {
    return parse_spec("op      t\nschema  t(Tensor rowptr, Tensor col, Tensor w, Tensor x) -> Tensor\n"
                      "sparse  A(i,j) = csr(rowptr, col)\nedge    W(" + w + ") on A = w\ndense   X(" + x + ") = x\n"
                      "output  Y(i,h,f)\nexpr    Y(i,h,f) = " + expr + "\ndtypes  float32\nindex   int64\ngrad_order 0\n",
                      "t.spec");
  };
  EXPECT_TRUE(tensor_core_form(spec("j,h,f", "i,j,h", "A(i,j) * W(i,j,h) * X(j,h,f) + A(i,j) * X(j,h,f)")) == std::nullopt);
  EXPECT_TRUE(tensor_core_form(spec("j,f,h", "i,j,h", "A(i,j) * W(i,j,h) * X(j,f,h)")) == std::nullopt);
  EXPECT_TRUE(tensor_core_form(spec("j,h,f", "i,j,f", "A(i,j) * W(i,j,f) * X(j,h,f)")) == std::nullopt);
  EXPECT_TRUE(tensor_core_form(spec("j,h,f", "i,j,h", "A(i,j) * W(i,j,h) * X(j,h,f) * X(j,h,f)")) == std::nullopt);
  EXPECT_TRUE(tensor_core_form(spec("j,h,f", "i,j,h", "A(i,j) * W(i,j,h) * X(j,h,f)")) != std::nullopt);
  // One kernel per form of entry values: spmm's optional A and its gradients' required GDA.
  const std::string text = emit_op_cuda(family("spmm"))[1].text;
  EXPECT_NE(text.find("spmm_tc0_kernel(const cu::TcSpmmArgs p"), std::string::npos);
  EXPECT_NE(text.find("spmm_tc1_kernel(const cu::TcSpmmArgs p"), std::string::npos);
  EXPECT_EQ(text.find("spmm_tc2_kernel"), std::string::npos);
  EXPECT_NE(text.find("v += (v0 != nullptr ? cu::to_acc(v0[e]) : 1.f);"), std::string::npos);
  EXPECT_NE(text.find("v += cu::to_acc(v0[e]);"), std::string::npos);
  EXPECT_NE(text.find("if (type == cuda::TcType::BFloat16) return args.kernel == cuda::TcKernel::Rows ? "
                      "spmm_tc0_rows_kernel_launch<__nv_bfloat16>(args, stream) : spmm_tc0_kernel_launch<__nv_bfloat16>(args, stream);"),
            std::string::npos);
  EXPECT_NE(text.find("if (type == cuda::TcType::Float32 && args.kernel == cuda::TcKernel::Condensed) return spmm_tc0_kernel_launch<float>(args, stream);"),
            std::string::npos);
  // seed 004's rows kernel beside each: per bucket (1 << LOG_B chunks of 8 entries) a launch, the
  // pass's entry values (their CSR index through row_src for A^T) in the B fragment, the trace stored
  EXPECT_NE(text.find("spmm_tc0_rows_kernel(const cu::TcSpmmArgs p"), std::string::npos);
  EXPECT_NE(text.find("spmm_tc1_rows_kernel(const cu::TcSpmmArgs p"), std::string::npos);
  EXPECT_NE(text.find("GNNFUSE_LAUNCH((spmm_tc0_rows_kernel<T, 3>)"), std::string::npos);
  EXPECT_NE(text.find("val[q] = (v0 != nullptr ? cu::to_acc(v0[e]) : 1.f);"), std::string::npos);
  EXPECT_NE(text.find("p.row_src != nullptr ? __ldg(p.row_src + lo + t) : int64_t(lo) + t"), std::string::npos);
  EXPECT_LT(text.find("cu::tc_rows_mma<T, B, NM>("), text.find("cu::tc_rows_store<T, B, NM>(acc, out + i * stride + head, f0, p.f, lane);"));
  // float16 values the mma operands cannot hold: a warp vote, then scalar products in float (both kernels)
  EXPECT_NE(text.find("cu::tc_entry_scalar<T, NT>(acc, (v0 != nullptr ? cu::to_acc(v0[e]) : 1.f), bt + place % K * cu::tc_b_ld(NT), in_window >= 8, lane);"),
            std::string::npos);
  EXPECT_NE(text.find("cu::tc_rows_entry_scalar<T, B, NM>(acc, c, (v0 != nullptr ? cu::to_acc(v0[e]) : 1.f), s + Tile::slot(8 * u + k) * Tile::kLd + q);"),
            std::string::npos);
  EXPECT_LT(text.find("if (cu::kTcNarrow<T> && __any_sync(0xffffffffu, narrow)) {"),
            text.rfind("if (cu::kTcNarrow<T> && __any_sync(0xffffffffu, narrow)) {"));  // (in each kernel)
  EXPECT_NE(text.find("cu::tc_stage_b<T, CH, W, Tile::kLd, Tile::kSwizzle>(s0, x, p.row_cols + lo, stride"), std::string::npos);
  const std::string h = emit_op_cuda(family("spmm_heads"))[1].text;
  EXPECT_NE(h.find("v += cu::to_acc(v0[e * p.heads + h]);"), std::string::npos);
  EXPECT_NE(h.find("val[q] = cu::to_acc(v0[e * p.heads + h]);"), std::string::npos);
  EXPECT_NE(h.find("const int64_t r = u / (p.heads * slabs), h = u / slabs % p.heads, f0 = u % slabs * W, head = h * p.f;"), std::string::npos);
  EXPECT_NE(h.find("const int64_t w = u / (p.heads * slabs), h = u / slabs % p.heads, f0 = u % slabs * W, head = h * p.f;"), std::string::npos);
  EXPECT_NE(h.find("cu::tc_stage_b<T, K, W>(odd ? bt0 : bt1, x, p.block_cols + static_cast<int64_t>(b + 1) * K, stride, head, f0, p.f, vec, lane);"),
            std::string::npos);
  EXPECT_NE(h.find("out[row * stride + head + c]"), std::string::npos);
  // the B tile of this block waited for before the mma (cp.async: the newest group is the next block's)
  EXPECT_LT(h.find("gnnfuse_cp_async_wait<1>();"), h.find("cu::tc_mma<T, NT>(acc, at, odd ? bt1 : bt0, lane);"));
  // scaled_spmm: two factors multiplied in float
  EXPECT_NE(emit_op_cuda(family("scaled_spmm"))[1].text.find("v += cu::to_acc(v0[e]) * cu::to_acc(v1[e]);"), std::string::npos);
  // The adapters hand the op's launcher to the choice.
  const std::string reg = emit_op_cuda_registration(family("spmm_heads"))[0].text;
  EXPECT_NE(reg.find("cuda_adapter::tensor_core_spmm(\"spmm_heads\", &spmm_heads_cuda_tc, rowptr_c, col_c, {weight_c}, false, prm.n_i, prm.n_j, x_c, out)"),
            std::string::npos);
}

// Every (dtype, index dtype) pair of the dispatch is instantiated under GNNFUSE_CUDA_INSTANTIATES
// (cuda/type_subset.h), the compile gates' subset (scripts/check_cuda.sh --types, --ci): a
// dispatch line outside it would instantiate its pair in the gates whatever --types says, and a
// guard around the wrong line would leave a pair of the subset uncompiled.
TEST(Cuda, DispatchPairsAreGuardedForTheGateSubset) {
  OpSpec spec = load_spec(kOps + "/spmm.spec");
  Family f = compile_family(spec, Target::Cuda);
  const std::string text = emit_op_cuda(f)[1].text;
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"Float32", "float"}, {"Float64", "double"}, {"BFloat16", "__nv_bfloat16"}, {"Float16", "__half"}};
  size_t lines = 0;
  size_t at = 0;
  while ((at = text.find("if (dtype == runtime::DType::", at)) != std::string::npos) {
    const size_t line_start = text.rfind('\n', at);
    const size_t prev_start = text.rfind('\n', line_start - 1);
    const std::string guard = text.substr(prev_start + 1, line_start - prev_start - 1);
    const std::string line = text.substr(line_start + 1, text.find('\n', at) - line_start - 1);
    bool matched = false;
    for (auto& [dtype, ctype] : pairs)
      for (const std::string itype : {"Int32", "Int64"}) {
        if (line.find("DType::" + dtype + " && itype == runtime::IType::" + itype) == std::string::npos) continue;
        matched = true;
        EXPECT_EQ(guard, "#if GNNFUSE_CUDA_INSTANTIATES(" + dtype + ", " + itype + ")") << line;
        EXPECT_NE(line.find("<" + ctype + ", " + (itype == "Int32" ? "int32_t" : "int64_t") + ">"), std::string::npos) << line;
        EXPECT_EQ(text.substr(text.find('\n', at) + 1, 7), "#endif\n") << line;
      }
    EXPECT_TRUE(matched) << line;
    ++lines;
    at += 1;
  }
  EXPECT_EQ(lines % 8, 0u);
  EXPECT_GE(lines, 16u);  // request and launch of each op, 8 pairs each
}

