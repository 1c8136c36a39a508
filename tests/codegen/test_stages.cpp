// Golden tests of the generator's stages. Trees are compared structurally: the expected tree is
// written as indented lines, parsed into a Shape, and compared node by node with the Shape of
// the generator's tree (loop variable and space, statement, reset), so formatting is irrelevant.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "codegen/ir.h"

using namespace gnnfuse::codegen;

namespace {

const std::string kOps = GNNFUSE_OPS_DIR;
const std::string kTestSpecs = kOps + "/../tests/codegen/specs";

struct Shape {
  std::string label;
  std::vector<Shape> kids;
  bool operator==(const Shape& o) const { return label == o.label && kids == o.kids; }
};

std::string squeeze(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\t') out += c;
  return out;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  std::function<void(const Shape&, int)> rec = [&](const Shape& n, int d) {
    os << std::string(static_cast<size_t>(d) * 2, ' ') << n.label << "\n";
    for (auto& k : n.kids) rec(k, d + 1);
  };
  os << "\n";
  rec(s, 0);
  return os;
}

// Indented text -> Shape. Two spaces per level; labels are compared without blanks.
Shape parse_shape(const std::string& text) {
  std::vector<std::pair<int, std::string>> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) {
    if (squeeze(l).empty()) continue;
    int indent = static_cast<int>(l.find_first_not_of(' '));
    lines.emplace_back(indent / 2, squeeze(l));
  }
  size_t pos = 0;
  std::function<Shape(int)> rec = [&](int depth) {
    Shape s{lines[pos].second, {}};
    ++pos;
    while (pos < lines.size() && lines[pos].first > depth) s.kids.push_back(rec(depth + 1));
    return s;
  };
  return rec(lines.at(0).first);
}

// The generator's tree -> Shape, with temporaries printed at their current (shrunk) shape.
Shape shape_of(const Program& p, const Node& n) {
  Shape s;
  auto access = [&](const Access& a) {
    const TensorInfo& t = p.tensor(a.tensor);
    std::string out = a.tensor;
    std::vector<std::string> idx;
    for (size_t d = 0; d < a.idx.size(); ++d)
      if (t.role != Role::Temp || std::count(t.kept_dims.begin(), t.kept_dims.end(), t.dims[d])) idx.push_back(a.idx[d]);
    if (!idx.empty()) {
      out += "(";
      for (size_t d = 0; d < idx.size(); ++d) out += (d ? "," : "") + idx[d];
      out += ")";
    }
    return out;
  };
  switch (n.kind) {
    case Node::Kind::Root: s.label = "root"; break;
    case Node::Kind::Loop: s.label = "for" + n.var + ":" + n.space.str(); break;
    case Node::Kind::Reset: s.label = "reset" + n.tensor; break;
    case Node::Kind::Compute: {
      const Stmt& st = p.stmts[n.stmt];
      std::string rhs;
      for (size_t k = 0; k < st.rhs.size(); ++k) {
        static const char* ops[] = {"", "*", "/", "+", "-", "-", ""};
        if (k) rhs += ops[static_cast<int>(st.op)];
        rhs += st.rhs[k].is_const ? std::to_string(st.rhs[k].value) : access(st.rhs[k].access);
      }
      if (st.op == Stmt::Op::Call) rhs = st.fn + "(" + rhs + ")";
      if (st.op == Stmt::Op::Neg) rhs = "-" + rhs;
      s.label = access(st.lhs) + (st.accumulate ? (st.reduce == Reduce::Sum ? "+=" : to_string(st.reduce) + "=") : "=") + rhs;
      break;
    }
  }
  for (auto& k : n.kids) s.kids.push_back(shape_of(p, *k));
  return s;
}

struct Stages {
  OpSpec spec;
  Program program;
  Shape initial, propagated, fused, shrunk;  // the tree after each stage
};

// Runs the stages one by one and takes the tree's shape after each.
std::unique_ptr<Stages> run(const std::string& path) {
  auto st = std::make_unique<Stages>();
  st->spec = load_spec(path);
  st->program = decompose(st->spec);
  st->initial = shape_of(st->program, *build_trees(st->program, initial_spaces(st->program)));
  auto tree = build_trees(st->program, propagate_spaces(st->program));
  st->propagated = shape_of(st->program, *tree);
  fuse(st->program, *tree);
  st->fused = shape_of(st->program, *tree);
  shrink_temporaries(st->program, *tree);
  st->shrunk = shape_of(st->program, *tree);
  return st;
}

void expect_tree(const Shape& got, const std::string& expected) { EXPECT_EQ(got, parse_shape(expected)); }
void expect_tree(const Program& p, const Node& n, const std::string& expected) { expect_tree(shape_of(p, n), expected); }

}  // namespace

// ---------------------------------------------------------------- seed 003, Figure 1
TEST(Figure1Sddmm, DecomposesIntoContractionThenMask) {
  auto st = run(kTestSpecs + "/sddmm_fig1.spec");
  const auto& s = st->program.stmts;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(to_string(s[0]), "T0(i,j) += C(i,k) * D(k,j)");
  EXPECT_EQ(s[0].sum_vars, std::vector<std::string>{"k"});
  EXPECT_EQ(to_string(s[1]), "A(i,j) = B(i,j) * T0(i,j)");
}

TEST(Figure1Sddmm, TreesBeforeFusion) {
  auto st = run(kTestSpecs + "/sddmm_fig1.spec");
  expect_tree(st->initial, R"(
root
  for i: dense
    for k: dense
      for j: dense
        T0(i,j) += C(i,k) * D(k,j)
  for i: dense
    for j: B
      A(i,j) = B(i,j) * T0(i,j)
)");
  // Propagation restricts the producer's j loop to B's pattern: only sampled dot products.
  expect_tree(st->propagated, R"(
root
  for i: dense
    for k: dense
      for j: B
        T0(i,j) += C(i,k) * D(k,j)
  for i: dense
    for j: B
      A(i,j) = B(i,j) * T0(i,j)
)");
}

TEST(Figure1Sddmm, FusedAndShrunkToOneRow) {
  auto st = run(kTestSpecs + "/sddmm_fig1.spec");
  expect_tree(st->fused, R"(
root
  for i: dense
    for k: dense
      for j: B
        T0(i,j) += C(i,k) * D(k,j)
    for j: B
      A(i,j) = B(i,j) * T0(i,j)
)");
  expect_tree(st->shrunk, R"(
root
  for i: dense
    reset T0
    for k: dense
      for j: B
        T0(j) += C(i,k) * D(k,j)
    for j: B
      A(i,j) = B(i,j) * T0(j)
)");
  const TensorInfo& t = st->program.tensor("T0");
  EXPECT_EQ(t.kept_dims, std::vector<std::string>{"j"});
  EXPECT_EQ(t.compressed_by, "B");  // one row of B's positions, not a dense row
  EXPECT_FALSE(t.compressed_global);
}

// ---------------------------------------------------------------- GNN-kernel1 (SpMM -> GEMM)
TEST(GnnKernel1, RowBufferThenSmallGemm) {
  auto st = run(kTestSpecs + "/gnn_k1.spec");
  EXPECT_EQ(to_string(st->program.stmts[0]), "T0(i,h) += A(i,k) * X(k,h)");
  expect_tree(st->shrunk, R"(
root
  for i: dense
    reset Zacc
    reset T0
    for k: A
      for h: dense
        T0(h) += A(i,k) * X(k,h)
    for h: dense
      for j: dense
        Zacc(j) += T0(h) * W(h,j)
    for j: dense
      Z(i,j) = Zacc(j)
)");
}

// ---------------------------------------------------------------- GNN-kernel2 (SDDMM -> SpMM)
TEST(GnnKernel2, FullyFusedWithoutEdgeTemporary) {
  auto st = run(kOps + "/sddmm_spmm.spec");
  const auto& s = st->program.stmts;
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(to_string(s[0]), "T0(i,j) += U(i,k) * V(j,k)");
  EXPECT_EQ(to_string(s[1]), "T1(i,j) = A(i,j) * T0(i,j)");
  EXPECT_EQ(to_string(s[2]), "Yacc(i,f) += T1(i,j) * X(j,f)");
  EXPECT_EQ(to_string(s[3]), "Y(i,f) = Yacc(i,f)");
  expect_tree(st->fused, R"(
root
  for i: dense
    for j: A
      for k: dense
        T0(i,j) += U(i,k) * V(j,k)
      T1(i,j) = A(i,j) * T0(i,j)
      for f: dense
        Yacc(i,f) += T1(i,j) * X(j,f)
    for f: dense
      Y(i,f) = Yacc(i,f)
)");
  expect_tree(st->shrunk, R"(
root
  for i: dense
    reset Yacc
    for j: A
      reset T0
      for k: dense
        T0 += U(i,k) * V(j,k)
      T1 = A(i,j) * T0
      for f: dense
        Yacc(f) += T1 * X(j,f)
    for f: dense
      Y(i,f) = Yacc(f)
)");
  // The edge-sized temporaries are scalars now; only a row of Y is buffered.
  EXPECT_TRUE(st->program.tensor("T0").kept_dims.empty());
  EXPECT_TRUE(st->program.tensor("T1").kept_dims.empty());
  EXPECT_EQ(st->program.tensor("Yacc").kept_dims, std::vector<std::string>{"f"});
}

TEST(Ops, SpmmAndSddmmFinalTrees) {
  auto spmm = run(kOps + "/spmm.spec");
  expect_tree(spmm->shrunk, R"(
root
  for i: dense
    reset Yacc
    for j: A
      for f: dense
        Yacc(f) += A(i,j) * X(j,f)
    for f: dense
      Y(i,f) = Yacc(f)
)");
  auto sddmm = run(kOps + "/sddmm.spec");
  expect_tree(sddmm->shrunk, R"(
root
  for i: dense
    for j: A
      reset T0
      for k: dense
        T0 += U(i,k) * V(j,k)
      E(i,j) = A(i,j) * T0
)");
}

TEST(Schedule, ParallelRowsBalancedAndSimdInnerLoops) {
  auto c = compile(load_spec(kOps + "/sddmm_spmm.spec"));
  const Node& i = *c->tree->kids.at(0);
  EXPECT_EQ(i.sched.unit, ParallelUnit::CpuChunk);
  EXPECT_EQ(i.sched.balance_by, "A");
  const Node& j = *i.kids.at(1);
  ASSERT_EQ(j.var, "j");
  EXPECT_EQ(j.sched.unit, ParallelUnit::None);
  const Node& k = *j.kids.at(1);
  ASSERT_EQ(k.var, "k");
  EXPECT_EQ(k.sched.unit, ParallelUnit::SimdLane);
  EXPECT_EQ(k.sched.reduction, ReductionStrategy::Simd);
  EXPECT_EQ(k.sched.reduced, std::vector<std::string>{"T0"});
}

// ---------------------------------------------------------------- legality
namespace {
// Hand-built program: s(i) = sum_j A(i,j) * X(i,j); P(i,j) = A(i,j) * X(i,j) / s(i).
// The second j loop reads s, which the first reduces over j: they must not fuse
// (the rule seed 003 omits; edge softmax depends on it).
Program normalise_program(bool reduce_first) {
  Program p;
  p.order = {"i", "j"};
  auto add = [&](const std::string& n, Role r, std::vector<std::string> dims, std::string pattern = "") {
    TensorInfo t;
    t.name = n;
    t.role = r;
    t.dims = dims;
    t.kept_dims = dims;
    t.pattern = pattern;
    p.tensors[n] = t;
    if (r == Role::Temp) p.temps.push_back(n);
  };
  add("A", Role::SparseInput, {"i", "j"}, "A");
  add("X", Role::DenseInput, {"i", "j"});
  add("P", Role::Output, {"i", "j"}, "A");
  add("s", Role::Temp, reduce_first ? std::vector<std::string>{"i"} : std::vector<std::string>{"i", "j"});
  Stmt s0;
  s0.id = 0;
  s0.lhs = Access{"s", p.tensors["s"].dims};
  s0.op = Stmt::Op::Mul;
  s0.rhs = {Operand{false, 0, Access{"A", {"i", "j"}}}, Operand{false, 0, Access{"X", {"i", "j"}}}};
  s0.accumulate = reduce_first;
  if (reduce_first) s0.sum_vars = {"j"};
  s0.vars = {"i", "j"};
  Stmt s1;
  s1.id = 1;
  s1.lhs = Access{"P", {"i", "j"}};
  s1.op = Stmt::Op::Div;
  s1.rhs = {Operand{false, 0, Access{"A", {"i", "j"}}}, Operand{false, 0, Access{"s", p.tensors["s"].dims}}};
  s1.vars = {"i", "j"};
  p.stmts = {s0, s1};
  return p;
}
}  // namespace

TEST(Legality, NoFusionOfAUseWithItsReductionLoop) {
  Program p = normalise_program(true);
  auto tree = build_trees(p, propagate_spaces(p));
  fuse(p, *tree);
  expect_tree(p, *tree, R"(
root
  for i: dense
    for j: A
      s(i) += A(i,j) * X(i,j)
    for j: A
      P(i,j) = A(i,j) / s(i)
)");
}

TEST(Legality, ElementwiseProducerFusesIntoTheSameLoop) {
  Program p = normalise_program(false);
  auto tree = build_trees(p, propagate_spaces(p));
  fuse(p, *tree);
  expect_tree(p, *tree, R"(
root
  for i: dense
    for j: A
      s(i,j) = A(i,j) * X(i,j)
      P(i,j) = A(i,j) / s(i,j)
)");
}

// ---------------------------------------------------------------- spaces
TEST(Spaces, AndOrAbsorption) {
  Space a = Space::level("A"), b = Space::level("B"), d = Space::dense();
  EXPECT_TRUE((a & d) == a);
  EXPECT_TRUE((a | d).is_dense());
  EXPECT_EQ((a & b).str(), "A&B");
  EXPECT_EQ(((a & b) | a).str(), "A");  // absorption
  std::string level;
  EXPECT_FALSE((a & b).single_level(&level));
  EXPECT_TRUE(a.single_level(&level));
  EXPECT_EQ(level, "A");
}

// ---------------------------------------------------------------- spec language
TEST(Spec, RoundTripOfEverySpec) {
  std::vector<std::string> files;
  for (auto& dir : {kOps, kTestSpecs})
    for (auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".spec") files.push_back(e.path().string());
  ASSERT_GE(files.size(), 5u);
  for (auto& f : files) {
    OpSpec a = load_spec(f);
    std::string printed = print_spec(a);
    OpSpec b = parse_spec(printed, f);
    EXPECT_EQ(printed, print_spec(b)) << f;
    EXPECT_EQ(a.schema.text, b.schema.text);
    EXPECT_EQ(to_string(a.expr.rhs), to_string(b.expr.rhs));
    EXPECT_EQ(a.order, b.order);
  }
}

TEST(Spec, ErrorsCarryTheirLocation) {
  const std::string base =
      "op t\nschema t(Tensor rowptr, Tensor col, Tensor x) -> Tensor\nsparse A(i,j) = csr(rowptr, col)\n"
      "dense X(j,f) = x\noutput Y(i,f)\ndtypes float32\nindex int64\n";
  auto error_of = [&](const std::string& text) {
    try {
      parse_spec(text, "t.spec");
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(base + "expr Y(i,f) = A(i,j) * X(j,f)\n"), "no error");
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * Z(j,f)\n").find("t.spec:8:"), std::string::npos);
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * Z(j,f)\n").find("unknown tensor 'Z'"), std::string::npos);
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(j,i) * X(j,f)\n").find("must be used with them"), std::string::npos);
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * X(j,f\n").find("expected ')'"), std::string::npos);
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * X(j,f)\nbogus 1\n").find("unknown key 'bogus'"), std::string::npos);
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * X(j,f)\norder j i f\n").find("walks it by columns"), std::string::npos);
  // fuzz_spec findings: a lone '.' and a number out of range were std::invalid_argument /
  // std::out_of_range escaping the parser
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * . X(j,f)\n").find("t.spec:8:"), std::string::npos);
  EXPECT_NE(error_of(base + "expr Y(i,f) = A(i,j) * 1e999 * X(j,f)\n").find("expected a number"), std::string::npos);
}

// ---------------------------------------------------------------- emission
TEST(Emit, FusedKernelAllocatesNoEdgeSizedBuffer) {
  Family f = compile_family(load_spec(kOps + "/sddmm_spmm.spec"));
  auto files = emit_op_cpu(f);
  ASSERT_EQ(files.size(), 2u);
  const std::string& k = files[1].text;
  // The forward's and every adjoint's edge temporaries are scalars: no workspace for them.
  EXPECT_EQ(k.find("ws_T0"), std::string::npos);
  EXPECT_EQ(k.find("ws_T1"), std::string::npos);
  EXPECT_NE(k.find("acc_t T0 = acc_t(0);"), std::string::npos);
  EXPECT_NE(k.find("std::vector<acc_t> ws_Yacc"), std::string::npos);
  EXPECT_NE(k.find("runtime::balanced_chunks(A_rowptr, n_i)"), std::string::npos);
  // the adjoints for v and x walk A by columns, balanced over the CSC's nonzeros
  EXPECT_NE(k.find("runtime::balanced_chunks(A_colptr, n_j)"), std::string::npos);
  EXPECT_NE(k.find("const int64_t e_A = A_perm[p_A];"), std::string::npos);
}

// The fused GCN's dense products run over row blocks through runtime::gemm_acc in all four
// kernels (forward: aggregate then W; d/dedge_weight and d/dx: GY W^T, W transposed once per call;
// d/dweight: the block's outer products), and an op without a dense product keeps its row loop.
TEST(Emit, DenseProductsOfARowLoopRunOverRowBlocks) {
  Family f = compile_family(load_spec(kOps + "/gcn.spec"));
  const std::string k = emit_op_cpu(f)[1].text;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = k.find(what); at != std::string::npos; at = k.find(what, at + 1)) ++n;
    return n;
  };
  // 4 kernels and the chain-order lowerings of 3 of them (forward, d/dx, d/dedge_weight) x (base, avx2)
  EXPECT_EQ(count("runtime::gemm_acc<acc_t>("), 14u);
  // the forward's product overwrites the row accumulators: their per-row reset is gone
  EXPECT_NE(k.find("runtime::gemm_acc<acc_t>(nb_, n_o, n_k, ws_T0.data(), int64_t(1) * n_k, int64_t(1), pkp_W, n_o, ws_Yacc.data(), "
                   "int64_t(1) * n_o, true);"),
            std::string::npos);
  // (in the (A X) W lowering; the chain order's aggregation resets its row accumulator as spmm does)
  EXPECT_LT(k.find("void gcn_impl("), k.find("void gcn_v1_impl("));
  EXPECT_EQ(k.substr(0, k.find("void gcn_v1_impl(")).find("std::fill_n(Yacc"), std::string::npos);
  EXPECT_NE(k.find("std::fill_n(T0"), std::string::npos);
  EXPECT_NE(k.find("runtime::dense_as<acc_t>(W, n_k, n_o, true, pk_W)"), std::string::npos);
  EXPECT_NE(k.find("runtime::gemm_acc<acc_t>(n_k, n_o, nb_, ws_T0.data(), int64_t(1), int64_t(1) * n_k, GY + ib_ * n_o, n_o, DWacc, n_o)"),
            std::string::npos);
  EXPECT_NE(k.find("std::vector<acc_t> ws_T0(static_cast<size_t>(runtime::kRowBlock * int64_t(1) * n_k));"), std::string::npos);
  Family spmm = compile_family(load_spec(kOps + "/spmm.spec"));
  EXPECT_EQ(emit_op_cpu(spmm)[1].text.find("gemm_acc"), std::string::npos);
}

// ---------------------------------------------------------------- variants (input-sensitive lowering)
TEST(Variants, GcnLowersBothAssociationsWithCostModels) {
  auto c = compile(load_spec(kOps + "/gcn.spec"));
  ASSERT_EQ(c->alternatives.size(), 1u);
  // variant 0: trie-fused (A X) W, a row of A X meets W; variant 1: the chain order A (X W), X W
  // stored whole at the root (the only way to share it between rows), then the aggregation
  expect_tree(c->program, *c->tree, R"(
root
  for i: dense
    reset Yacc
    reset T0
    for j: A
      for k: dense
        T0(k) += A(i,j) * X(j,k)
    for k: dense
      for o: dense
        Yacc(o) += T0(k) * W(k,o)
    for o: dense
      Y(i,o) = Yacc(o)
)");
  const Compiled& v = *c->alternatives[0];
  expect_tree(v.program, *v.tree, R"(
root
  reset T0
  for j: dense
    for k: dense
      for o: dense
        T0(j,o) += X(j,k) * W(k,o)
  for i: dense
    reset Yacc
    for j: A
      for o: dense
        Yacc(o) += A(i,j) * T0(j,o)
    for o: dense
      Y(i,o) = Yacc(o)
)");
  // gathered multiply-adds weigh 1, dense ones kDenseWeight, a matrix stored whole its size
  EXPECT_EQ(c->cost, "1.0 * n_i * (nnz_A / std::max(1.0, n_i)) * n_k + 0.125 * n_i * n_k * n_o + 0.125 * n_i * n_o");
  EXPECT_EQ(v.cost, "0.125 * n_j * n_k * n_o + 1.0 * n_i * (nnz_A / std::max(1.0, n_i)) * n_o + 0.125 * n_i * n_o + 1.0 * n_j * n_o");
  // Without the key one lowering; the key is inherited by the adjoints, and d/dweight's other
  // association (a scatter into per-thread N x F copies under the forward's loop order) is dropped.
  OpSpec plain = load_spec(kOps + "/gcn.spec");
  plain.variants = false;
  EXPECT_TRUE(compile(plain)->alternatives.empty());
  Family f = compile_family(load_spec(kOps + "/gcn.spec"));
  std::map<std::string, size_t> n;
  for (auto& op : f.ops) n[op->spec.name] = op->alternatives.size();
  EXPECT_EQ(n["gcn_grad_x"], 1u);
  EXPECT_EQ(n["gcn_grad_edge_weight"], 1u);
  EXPECT_EQ(n["gcn_grad_weight"], 0u);
  // the emitted choice: one kernel per lowering, the costs on the call's extents, the pick
  const std::string k = emit_op_cpu(f)[1].text;
  EXPECT_NE(k.find("runtime::Variants gcn_variants_(\"gcn\", 2, &gcn_last);"), std::string::npos);
  EXPECT_NE(k.find("if (pick == 1) return gcn_v1_flags<scalar_t, index_t>(prm);"), std::string::npos);
  EXPECT_NE(k.find("runtime::gemm_acc<acc_t>(nb_, n_o, n_k, X + ib_ * n_k, n_k, int64_t(1), pkp_W, n_o, T0 + ib_ * n_o, n_o);"),
            std::string::npos);
  EXPECT_NE(k.find("runtime::vload<acc_t>(&T0[(j) * n_o + o])"), std::string::npos);  // register-tiled gather of X W rows
}

TEST(Variants, ALongChainIsBoundedAndEveryLoweringEmits) {
  // Five factors with four contractions: many associations tie; at most kMaxVariants distinct
  // lowerings come out, found among a bounded number tried, and each emits.
  const std::string spec = R"(op      chain
schema  chain(Tensor rowptr, Tensor col, Tensor x, Tensor w1, Tensor w2, Tensor w3) -> Tensor
sparse  A(i,j) = csr(rowptr, col)
dense   X(j,a) = x
dense   W1(a,b) = w1
dense   W2(b,c) = w2
dense   W3(c,d) = w3
output  Y(i,d)
expr    Y(i,d) = A(i,j) * X(j,a) * W1(a,b) * W2(b,c) * W3(c,d)
dtypes  float32
index   int64
grad_order 0
variants auto
)";
  auto c = compile(parse_spec(spec, "chain.spec"));
  EXPECT_GE(c->alternatives.size(), 1u);
  EXPECT_LE(static_cast<int>(c->alternatives.size()) + 1, kMaxVariants);
  std::set<std::string> trees{print_tree(c->program, *c->tree)};
  for (auto& v : c->alternatives) EXPECT_TRUE(trees.insert(print_tree(v->program, *v->tree)).second);
  Family f = compile_family(parse_spec(spec, "chain.spec"));
  const std::string k = emit_op_cpu(f)[1].text;
  EXPECT_NE(k.find("chain_run"), std::string::npos);
}

TEST(Variants, TheKeyParsesPrintsAndRefusesOtherValues) {
  OpSpec s = load_spec(kOps + "/gcn.spec");
  EXPECT_TRUE(s.variants);
  EXPECT_NE(print_spec(s).find("variants auto\n"), std::string::npos);
  std::string text = print_spec(s);
  text.replace(text.find("variants auto"), 13, "variants all");
  try {
    parse_spec(text, "x.spec");
    FAIL() << "accepted 'variants all'";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("variants: expected 'auto'"), std::string::npos);
  }
}

TEST(Emit, RegistrationDefinesEverySchemaAndAutograd) {
  std::vector<std::unique_ptr<Family>> all;
  std::vector<const Family*> ptrs;
  for (auto op : {"spmm", "sddmm", "sddmm_spmm"}) {
    all.push_back(std::make_unique<Family>(compile_family(load_spec(kOps + "/" + op + ".spec"))));
    ptrs.push_back(all.back().get());
  }
  auto lib = emit_library(ptrs);
  ASSERT_EQ(lib.size(), 2u);
  for (auto& f : all) {
    auto reg = emit_op_registration(*f);
    ASSERT_EQ(reg.size(), 1u);
    for (auto& c : f->ops) {
      EXPECT_NE(reg[0].text.find("m.def(\"" + c->spec.schema.text + "\")"), std::string::npos);
      EXPECT_NE(reg[0].text.find("m.impl(\"" + c->spec.name + "\", &gnnfuse::generated::" + c->spec.name + "_autograd)"), std::string::npos);
      EXPECT_NE(lib[1].text.find("inline at::Tensor " + c->spec.name + "("), std::string::npos);
    }
  }
}

// ---------------------------------------------------------------- automatic differentiation
namespace {

// name of the differentiated input -> "lhs(idx) = rhs" of its adjoint ("0" when it vanishes)
std::map<std::string, std::string> adjoint_exprs(const OpSpec& s) {
  std::map<std::string, std::string> out;
  for (auto& a : differentiate(s)) {
    if (a.zero) {
      out[a.input] = "0";
      continue;
    }
    std::string lhs = a.spec.expr.lhs + "(";
    for (size_t k = 0; k < a.spec.expr.lhs_idx.size(); ++k) lhs += (k ? "," : "") + a.spec.expr.lhs_idx[k];
    out[a.input] = lhs + ") = " + to_string(a.spec.expr.rhs);
  }
  return out;
}

const Adjoint& adjoint(const std::vector<Adjoint>& all, const std::string& input) {
  for (auto& a : all)
    if (a.input == input) return a;
  throw std::runtime_error("no adjoint for " + input);
}

std::string order_of(const OpSpec& s) {
  std::string o;
  for (auto& v : s.order) o += (o.empty() ? "" : " ") + v;
  return o;
}

}  // namespace

TEST(Autodiff, SpmmAdjointsAreTransposedSpmmAndSddmm) {
  OpSpec s = load_spec(kOps + "/spmm.spec");
  auto e = adjoint_exprs(s);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e["x"], "DX(j,f) = GY(i,f) * A(i,j)");              // a transposed SpMM
  EXPECT_EQ(e["edge_weight"], "DA(i,j) = GY(i,f) * X(j,f)");    // an SDDMM on A's pattern
  auto adj = differentiate(s);
  const Adjoint& dx = adjoint(adj, "x");
  EXPECT_EQ(order_of(dx.spec), "j i f");  // rows of dX outermost: A walked through its CSC view
  EXPECT_EQ(dx.spec.schema.text,
            "spmm_grad_x(Tensor rowptr, Tensor col, Tensor? edge_weight, Tensor colptr, Tensor row, Tensor perm, Tensor grad) -> Tensor");
  const Adjoint& dw = adjoint(adj, "edge_weight");
  EXPECT_EQ(dw.spec.output().pattern, "A");
  EXPECT_EQ(order_of(dw.spec), "i j f");
  auto c = compile(dx.spec);
  EXPECT_TRUE(c->program.walks_csc("A"));
  expect_tree(c->program, *c->tree, R"(
    root
      for j: dense
        reset DXacc
        for i: A
          for f: dense
            DXacc(f) += GY(i,f) * A(i,j)
        for f: dense
          DX(j,f) = DXacc(f)
  )");
}

TEST(Autodiff, SddmmAdjoints) {
  auto e = adjoint_exprs(load_spec(kOps + "/sddmm.spec"));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e["edge_weight"], "DA(i,j) = GE(i,j) * U(i,k) * V(j,k)");
  EXPECT_EQ(e["u"], "DU(i,k) = GE(i,j) * A(i,j) * V(j,k)");
  EXPECT_EQ(e["v"], "DV(j,k) = GE(i,j) * A(i,j) * U(i,k)");
}

TEST(Autodiff, SddmmSpmmAdjointsRecomputeEdgeScoresInOneFusedLoop) {
  OpSpec s = load_spec(kOps + "/sddmm_spmm.spec");
  auto e = adjoint_exprs(s);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e["edge_weight"], "DA(i,j) = GY(i,f) * U(i,k) * V(j,k) * X(j,f)");
  EXPECT_EQ(e["u"], "DU(i,k) = GY(i,f) * A(i,j) * V(j,k) * X(j,f)");
  EXPECT_EQ(e["v"], "DV(j,k) = GY(i,f) * A(i,j) * U(i,k) * X(j,f)");
  EXPECT_EQ(e["x"], "DX(j,f) = GY(i,f) * A(i,j) * U(i,k) * V(j,k)");
  // dX: the forward's edge score U.V is recomputed per edge as a scalar next to the F-row
  // accumulator, walking A by columns: nothing edge-sized is saved or allocated.
  auto c = compile(adjoint(differentiate(s), "x").spec);
  expect_tree(c->program, *c->tree, R"(
    root
      for j: dense
        reset DXacc
        for i: A
          reset T0
          for k: dense
            T0 += U(i,k) * V(j,k)
          T1 = A(i,j) * T0
          for f: dense
            DXacc(f) += GY(i,f) * T1
        for f: dense
          DX(j,f) = DXacc(f)
  )");
  for (auto& t : c->program.temps) {
    const TensorInfo& ti = c->program.tensor(t);
    EXPECT_TRUE(ti.kept_dims.size() <= 1 && (ti.kept_dims.empty() || ti.kept_dims[0] == "f")) << t;
  }
}

TEST(Autodiff, FamilyHasSecondOrderOps) {
  Family f = compile_family(load_spec(kOps + "/spmm.spec"));
  std::set<std::string> names;
  for (auto& c : f.ops) names.insert(c->spec.name);
  EXPECT_EQ(names, (std::set<std::string>{"spmm", "spmm_grad_x", "spmm_grad_edge_weight", "spmm_grad_x_grad_grad",
                                          "spmm_grad_x_grad_edge_weight", "spmm_grad_edge_weight_grad_x",
                                          "spmm_grad_edge_weight_grad_grad"}));
  auto e = adjoint_exprs(adjoint(differentiate(load_spec(kOps + "/spmm.spec")), "x").spec);
  EXPECT_EQ(e["grad"], "DGY(i,f) = GDX(j,f) * A(i,j)");  // back to a forward SpMM
  for (auto& c : f.ops) EXPECT_EQ(c->spec.grad_order, c->spec.derived() ? (c->spec.name.find("_grad_", c->spec.name.find("_grad_") + 1) == std::string::npos ? 1 : 0) : 2);
}

TEST(Autodiff, DerivativeTableAndRenamedBoundIndices) {
  const std::string head =
      "op t\nschema t(Tensor rowptr, Tensor col, Tensor? w, Tensor u, Tensor v, Tensor x) -> Tensor\n"
      "sparse A(i,j) = csr(rowptr, col, w)\ndense U(i,k) = u\ndense V(j,k) = v\ndense X(j,f) = x\n"
      "output Y(i,f)\ndtypes float64\nindex int64\n";
  auto adj = [&](const std::string& expr) { return adjoint_exprs(parse_spec(head + "expr " + expr + "\n", "t.spec")); };
  // chain rule through exp: the kept copy of U.V sums over a fresh k2, k itself is the result's
  auto e = adj("Y(i,f) = A(i,j) * exp(U(i,k) * V(j,k)) * X(j,f)");
  EXPECT_EQ(e["u"], "DU(i,k) = GY(i,f) * A(i,j) * X(j,f) * exp(U(i,k2) * V(j,k2)) * V(j,k)");
  EXPECT_EQ(e["x"], "DX(j,f) = GY(i,f) * A(i,j) * exp(U(i,k) * V(j,k))");
  e = adj("Y(i,f) = A(i,j) * sigmoid(U(i,k) * V(j,k)) * X(j,f)");
  EXPECT_EQ(e["v"], "DV(j,k) = GY(i,f) * A(i,j) * X(j,f) * sigmoid(U(i,k2) * V(j,k2)) * (1 - sigmoid(U(i,k3) * V(j,k3))) * U(i,k)");
  e = adj("Y(i,f) = A(i,j) * tanh(U(i,k) * V(j,k)) * X(j,f)");
  EXPECT_EQ(e["u"], "DU(i,k) = GY(i,f) * A(i,j) * X(j,f) * (1 - (tanh(U(i,k2) * V(j,k2)) * tanh(U(i,k3) * V(j,k3)))) * V(j,k)");
  e = adj("Y(i,f) = A(i,j) * leaky_relu(U(i,k) * V(j,k), 0.2) * X(j,f)");
  EXPECT_EQ(e["u"], "DU(i,k) = GY(i,f) * A(i,j) * X(j,f) * leaky_step(U(i,k2) * V(j,k2), 0.20000000000000001) * V(j,k)");
  e = adj("Y(i,f) = A(i,j) * relu(U(i,k) * V(j,k)) * X(j,f)");
  EXPECT_EQ(e["v"], "DV(j,k) = GY(i,f) * A(i,j) * X(j,f) * step(U(i,k2) * V(j,k2)) * U(i,k)");
  e = adj("Y(i,f) = A(i,j) * log(U(i,k) * V(j,k)) * X(j,f)");
  EXPECT_EQ(e["u"], "DU(i,k) = GY(i,f) * A(i,j) * X(j,f) * (1 / (U(i,k2) * V(j,k2))) * V(j,k)");
  e = adj("Y(i,f) = A(i,j) * pow(U(i,k) * V(j,k), 3) * X(j,f)");
  EXPECT_EQ(e["u"], "DU(i,k) = 3 * GY(i,f) * A(i,j) * X(j,f) * pow(U(i,k2) * V(j,k2), 2) * V(j,k)");
  // quotient rule: two renamed copies of the denominator in d/du, none in d/dx
  e = adj("Y(i,f) = A(i,j) * X(j,f) / (U(i,k) * V(j,k))");
  EXPECT_EQ(e["u"], "DU(i,k) = -GY(i,f) * (A(i,j) * X(j,f)) * V(j,k) * (1 / ((U(i,k2) * V(j,k2)) * (U(i,k3) * V(j,k3))))");
  EXPECT_EQ(e["x"], "DX(j,f) = GY(i,f) * A(i,j) * (1 / (U(i,k2) * V(j,k2)))");
  // products with a repeated factor: product rule, two terms
  e = adj("Y(i,f) = A(i,j) * A(i,j) * X(j,f)");
  EXPECT_EQ(e["w"], "DA(i,j) = GY(i,f) * A(i,j) * X(j,f) + GY(i,f) * A(i,j) * X(j,f)");
  // step has derivative zero almost everywhere
  e = adj("Y(i,f) = A(i,j) * step(U(i,k) * V(j,k)) * X(j,f)");
  EXPECT_EQ(e["u"], "0");
}

TEST(Autodiff, AdjointsReadingRowStatisticsAreDifferentiatedAgain) {
  // A weighted mean (tests/codegen/specs/weighted_mean.spec): the adjoints read 1 / rowsum(A)
  // and a row sum of dY * Y. With grad_order 2, the statistic is one more floating input of the
  // adjoint (its gradient an acc output) and the statistic's op has adjoints of its own (the
  // incoming gradient acc), so the double backward reaches the op's inputs through it.
  const std::string spec =
      "op wm\nschema wm(Tensor rowptr, Tensor col, Tensor values, Tensor x) -> Tensor\n"
      "sparse A(i,j) = csr(rowptr, col, values)\ndense X(j,f) = x\noutput Y(i,f)\n"
      "expr Y(i,f) = A(i,j) * X(j,f) / A(i,j2)\norder i j j2 f\ndtypes float32 bfloat16\nindex int64\n";
  Family f = compile_family(parse_spec(spec, "wm.spec"));
  std::map<std::string, const OpSpec*> ops;
  for (auto& c : f.ops) ops[c->spec.name] = &c->spec;
  ASSERT_TRUE(ops.count("wm_stat0") && ops.count("wm_grad_x")) << f.ops.size();
  EXPECT_EQ(to_string(ops["wm_stat0"]->expr.rhs), "1 / A(i,j)");
  EXPECT_EQ(ops["wm_stat0"]->grad_order, 1);
  EXPECT_EQ(ops["wm_grad_x"]->grad_order, 1);
  EXPECT_EQ(to_string(ops["wm_grad_x"]->expr.rhs), "R0(i) * GY(i,f) * A(i,j)");
  // d/dstat0 of the adjoint: an acc output, as the statistic it is the gradient of
  ASSERT_TRUE(ops.count("wm_grad_x_grad_stat0"));
  EXPECT_TRUE(ops["wm_grad_x_grad_stat0"]->output().acc);
  EXPECT_EQ(ops["wm_grad_x_grad_stat0"]->grad_order, 0);
  // the statistic's own adjoint takes its incoming gradient as acc
  ASSERT_TRUE(ops.count("wm_stat0_grad_values"));
  const TensorDecl* gr = ops["wm_stat0_grad_values"]->find("GR");
  ASSERT_NE(gr, nullptr);
  EXPECT_TRUE(gr->acc);
  // the adjoints of the adjoint read the statistic as an acc input
  EXPECT_TRUE(ops["wm_grad_x_grad_values"]->find("R0")->acc);
}

TEST(Autodiff, RowStatisticsInAColumnWalkAreHoisted) {
  // exp(sum_j A(i,j) X(j,f)) kept in d/dX would be a walk over row i of A inside d/dX's walk
  // over column j (through the CSC view): it becomes a statistic R(i,f), an op of its own that
  // walks A by rows, which the backward runs first.
  const std::string spec =
      "op t\nschema t(Tensor rowptr, Tensor col, Tensor? w, Tensor x) -> Tensor\n"
      "sparse A(i,j) = csr(rowptr, col, w)\ndense X(j,f) = x\noutput Y(i,f)\n"
      "expr Y(i,f) = exp(A(i,j) * X(j,f))\ndtypes float64\nindex int64\n";
  std::vector<Adjoint> adj = differentiate(parse_spec(spec, "t.spec"));
  ASSERT_EQ(adj.size(), 2u);
  ASSERT_EQ(adj[1].stats.size(), 1u);
  const std::string name = adj[1].stats[0].spec.name;  // t_stat<k>, shared with d/dw's
  ASSERT_EQ(name.rfind("t_stat", 0), 0u) << name;
  EXPECT_EQ(to_string(adj[1].spec.expr.rhs), "R" + name.substr(6) + "(i,f) * GY(i,f) * A(i,j)");
  EXPECT_EQ(to_string(adj[1].stats[0].spec.expr.rhs), "exp(A(i,j) * X(j,f))");
  // Differentiable again (the default grad_order 2): the adjoint and the statistic it reads
  // both have order 1 (the adjoint had 0, so the double backward stopped at it).
  EXPECT_EQ(adj[1].spec.grad_order, 1);
  EXPECT_EQ(adj[1].stats[0].spec.grad_order, 1);
  Family f = compile_family(parse_spec(spec, "t.spec"));  // lowered: no nested walk remains
  bool compiled = false;
  for (auto& c : f.ops) compiled = compiled || c->spec.name == name;
  EXPECT_TRUE(compiled);
}

TEST(Autodiff, FusedGatAdjointsReadSharedRowStatistics) {
  // The fused GAT aggregation (ops/gat.spec): every adjoint reads the softmax's row max, 1/sum
  // and sums of dY*Y as statistics (ops of their own, computed once per backward and shared)
  // and walks the graph once: by rows for d/da_dst, by columns for d/da_src and d/dx.
  std::vector<Adjoint> adj = differentiate(load_spec(kOps + "/gat.spec"));
  ASSERT_EQ(adj.size(), 3u);
  ASSERT_EQ(adj[2].stats.size(), 2u);
  const std::string inv_sum = "R" + adj[2].stats[0].spec.name.substr(8), max = "R" + adj[2].stats[1].spec.name.substr(8);
  EXPECT_EQ(to_string(adj[2].spec.expr.rhs),
            inv_sum + "(i,h) * GY(i,h,f) * A(i,j) * exp(leaky_relu(U(i,h) + V(j,h), negative_slope) - " + max + "(i,h))");
  EXPECT_EQ(adj[2].stats[1].spec.expr.rhs->kind, Expr::Kind::Call);  // detach(max[j](...))
  std::set<std::string> names;
  for (auto& a : adj) {
    EXPECT_FALSE(a.stats.empty()) << a.spec.name;
    for (auto& st : a.stats) names.insert(st.spec.name);
  }
  EXPECT_EQ(names.size(), 4u);  // 1/sum, max, and sum_f dY*Y/sum^2 in two forms
  for (auto& a : adj) {
    auto c = compile(a.spec);
    int walks = 0;
    for (auto& k : c->tree->kids)
      for (auto& l : k->kids) walks += l->kind == Node::Kind::Loop && !l->space.is_dense();
    EXPECT_EQ(walks, 1) << a.spec.name;
  }
}

TEST(Autodiff, MaxRoutesTheGradientThroughTheSavedPositions) {
  OpSpec s = load_spec(kOps + "/spmm_max.spec");
  EXPECT_TRUE(s.selects());
  auto e = adjoint_exprs(s);
  ASSERT_EQ(e.size(), 2u);
  // MY(i,j,f) is 1 where the forward's position for (i,f) is the entry (i,j), else 0
  EXPECT_EQ(e["x"], "DX(j,f) = GY(i,f) * MY(i,j,f) * A(i,j)");
  EXPECT_EQ(e["edge_weight"], "DA(i,j) = GY(i,f) * MY(i,j,f) * X(j,f)");
  auto adj = differentiate(s);
  const Adjoint& dx = adjoint(adj, "x");
  EXPECT_EQ(dx.select_arg, "selected");
  EXPECT_EQ(order_of(dx.spec), "j i f");  // through the CSC view: no atomics
  // The forward keeps a max per (i,f) and records the position: one walk, row buffers only.
  auto c = compile(s);
  expect_tree(c->program, *c->tree, R"(
    root
      for i: dense
        reset Yacc
        for j: A
          for f: dense
            Yacc(f) max= A(i,j) * X(j,f)
        for f: dense
          Y(i,f) = Yacc(f)
  )");
  EXPECT_EQ(identity(c->program.tensor("Yacc").init), "-inf");
  EXPECT_EQ(to_string(load_spec(kOps + "/spmm_min.spec").reduce), "min");
}

TEST(Autodiff, MeanIsASumOverACount) {
  auto e = adjoint_exprs(load_spec(kOps + "/spmm_mean.spec"));
  EXPECT_EQ(e["x"], "DX(j,f) = GY(i,f) * A(i,j) * (1 / N(i))");
  EXPECT_EQ(e["edge_weight"], "DA(i,j) = GY(i,f) * X(j,f) * (1 / N(i))");
}

TEST(Autodiff, EdgeSoftmaxIsDerivedFromItsDefinition) {
  OpSpec s = load_spec(kOps + "/edge_softmax.spec");
  auto e = adjoint_exprs(s);
  ASSERT_EQ(e.size(), 1u);
  // d/dS of exp(S - detach(m)) / Z: the quotient rule on the read S(i,j), plus the read S(i,j3)
  // inside the row sum Z (renamed to carry the adjoint's index): P*dP - P*sum_j6(dP*P). Every
  // adjoint of edge_softmax walks by rows, so the row statistics stay sibling walks (no
  // statistic ops).
  EXPECT_EQ(e["score"],
            "DS(i,j) = GP(i,j) * exp(S(i,j) - detach(max[j2](S(i,j2)))) * (1 / (A(i,j32) * exp(S(i,j32) - detach(max[j4](S(i,j4)))))) - "
            "(GP(i,j6) * exp(S(i,j6) - detach(max[j2](S(i,j2)))) * A(i,j) * exp(S(i,j) - detach(max[j4](S(i,j4)))) * "
            "(1 / ((A(i,j7) * exp(S(i,j7) - detach(max[j4](S(i,j4))))) * (A(i,j8) * exp(S(i,j8) - detach(max[j4](S(i,j4))))))))");
  const std::vector<Adjoint> adjs = differentiate(s);
  EXPECT_TRUE(adjoint(adjs, "score").stats.empty());
  // Lowered: the repeated row max and row sums are shared and the two row sums (of exp and of
  // dP*exp) merged into one walk, so the row is walked three times (max, sums, the output), one
  // after the other, with scalars only.
  auto c = compile(adjoint(adjs, "score").spec);
  int walks = 0;
  std::function<void(const Node&, int)> rec = [&](const Node& n, int depth) {
    if (n.kind == Node::Kind::Loop && !n.space.is_dense()) {
      ++walks;
      EXPECT_EQ(depth, 1) << "a walk over A nested in another loop over the row";
    }
    for (auto& k : n.kids) rec(*k, depth + (n.kind == Node::Kind::Loop ? 1 : 0));
  };
  rec(*c->tree, 0);
  EXPECT_EQ(walks, 3);
  for (auto& t : c->program.temps) EXPECT_TRUE(c->program.tensor(t).kept_dims.empty()) << t;
  // The forward: max walk, sum walk, output walk.
  auto f = compile(s);
  walks = 0;
  rec(*f->tree, 0);
  EXPECT_EQ(walks, 3);
}
