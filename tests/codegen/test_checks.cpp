// The checks the generator emits for indices that operands share. For every op (user ops, every
// derived adjoint and statistic, the symbolic and assembling forms), every csr operand whose
// column index some other operand or an `extent` line binds gets an O(nnz) value check of its
// columns against that extent in the CPU adapter, naming its schema arguments; the Meta kernels
// stay data-free; a kernel that would need the extent of an index nothing binds is a generation
// error. The binding analysis is recomputed here from the spec, independently of the
// emitters' (csrc/codegen/emit_common.cpp).
// That the emitted check fires at run time is shown for the same unseen spec (two_hop, compiled
// into gnnfuse_test_ops) by tests/cpp/test_shared_indices.cpp and fuzz_ops.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "codegen/ir.h"

using namespace gnnfuse::codegen;

namespace {

const std::string kOps = GNNFUSE_OPS_DIR;
const std::string kTestSpecs = kOps + "/../tests/codegen/specs";

// The indices whose extent something other than a csr operand's own columns gives: `extent`
// lines, dense operands (declared and as read), extra dimensions of edge operands, csr rows,
// required CSC views' columns, and the renamed columns of operands whose column is bound.
std::set<std::string> bound_indices(const OpSpec& s) {
  std::set<std::string> b;
  for (auto& [v, a] : s.extents) b.insert(v);
  for (auto& t : s.tensors) {
    if (t.role == Role::DenseInput) b.insert(t.vars.begin(), t.vars.end());
    if (t.role == Role::EdgeInput)
      for (size_t d = 2; d < t.vars.size(); ++d) b.insert(t.vars[d]);
    if (t.role == Role::SparseInput) b.insert(t.vars[0]);
    if (t.role == Role::SparseInput && t.has_csc() && !t.csc_optional) b.insert(t.vars[1]);
  }
  std::function<void(const ExprP&)> walk = [&](const ExprP& e) {
    if (e->kind == Expr::Kind::Access)
      if (const TensorDecl* t = s.find(e->name)) {
        if (t->role == Role::DenseInput) b.insert(e->idx.begin(), e->idx.end());
        if (t->role != Role::DenseInput && t->role != Role::CountInput && e->idx.size() > 1 && b.count(t->vars[1])) b.insert(e->idx[1]);
      }
    for (auto& a : e->args) walk(a);
  };
  walk(s.expr.rhs);
  return b;
}

// The text of a generated function: from its signature to the closing brace at column 0.
std::string function_text(const std::string& text, const std::string& head) {
  const size_t at = text.find(head);
  if (at == std::string::npos) return "";
  return text.substr(at, text.find("\n}\n", at) - at);
}

struct Checked {
  int ops = 0, shared = 0;  // ops seen, column checks against an extent found
};

void expect_family_checks(const std::string& path, Checked* count) {
  SCOPED_TRACE(path);
  const Family f = compile_family(load_spec(path));
  const std::string reg = emit_op_registration(f).at(0).text;
  for (auto& c : f.ops) {
    const OpSpec& s = c->spec;
    SCOPED_TRACE(s.name);
    ++count->ops;
    const std::string cpu = function_text(reg, " " + s.name + "_cpu_kernel(");
    const std::string meta = function_text(reg, " " + s.name + "_meta(");
    ASSERT_FALSE(cpu.empty());
    ASSERT_FALSE(meta.empty());
    EXPECT_EQ(meta.find("checks::csr("), std::string::npos) << "a Meta kernel reads data";
    const std::set<std::string> bound = bound_indices(s);
    for (auto& t : s.tensors) {
      if (t.role != Role::SparseInput) continue;
      const std::string call = "checks::csr(\"" + s.name + "\", \"" + t.rowptr + "\", \"" + t.col + "\", " + t.rowptr + ", " + t.col + ", ";
      if (bound.count(t.vars[1])) {
        EXPECT_NE(cpu.find(call + "e.n_" + t.vars[1] + ".expect_int(), \"the extent of index " + t.vars[1] + ", "), std::string::npos)
            << t.col << " (index " << t.vars[1] << ") is not checked against its extent in\n" << cpu;
        ++count->shared;
      } else {
        EXPECT_NE(cpu.find(call + "-1);"), std::string::npos) << t.col << ": no check of its row pointers in\n" << cpu;
      }
    }
  }
  // The symbolic and assembling forms: their inputs are the csr operands but S and the extents.
  const OpSpec& user = f.ops[0]->spec;
  if (user.symbolic.empty()) return;
  std::set<std::string> bound;
  for (auto& [v, a] : user.extents) bound.insert(v);
  for (auto& t : user.tensors)
    if (t.role == Role::SparseInput && t.name != user.symbolic) bound.insert(t.vars[0]);
  for (const std::string form : {"_symbolic_cpu_kernel(", "_assemble_check("}) {
    const std::string text = function_text(reg, " " + user.name + form);
    ASSERT_FALSE(text.empty()) << form;
    for (auto& t : user.tensors) {
      if (t.role != Role::SparseInput || t.name == user.symbolic) continue;
      const std::string call = "checks::csr(op, \"" + t.rowptr + "\", \"" + t.col + "\", " + t.rowptr + ", " + t.col + ", ";
      if (bound.count(t.vars[1])) {
        EXPECT_NE(text.find(call + "n_" + t.vars[1] + ", \"the extent of index " + t.vars[1] + ", "), std::string::npos) << form << " " << t.col;
        ++count->shared;
      }
    }
  }
}

std::vector<std::string> spec_files() {
  std::vector<std::string> out;
  for (auto& dir : {kOps, kTestSpecs})
    for (auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".spec") out.push_back(e.path().string());
  return out;
}

}  // namespace

// The unseen spec: A's columns are B's rows, in two_hop and in each of its 12 derived ops.
TEST(Checks, TwoSparseOperandsSharingAnIndexAreChecked) {
  const Family f = compile_family(load_spec(kTestSpecs + "/two_hop.spec"));
  const std::string reg = emit_op_registration(f).at(0).text;
  EXPECT_NE(function_text(reg, " two_hop_cpu_kernel(")
                .find("checks::csr(\"two_hop\", \"arowptr\", \"acol\", arowptr, acol, e.n_k.expect_int(), "
                      "\"the extent of index k, browptr.size(0) - 1\");"),
            std::string::npos);
  EXPECT_NE(function_text(reg, " two_hop_cpu_kernel(")
                .find("checks::csr(\"two_hop\", \"browptr\", \"bcol\", browptr, bcol, e.n_j.expect_int(), \"the extent of index j, x.size(0)\");"),
            std::string::npos);
  Checked count;
  expect_family_checks(kTestSpecs + "/two_hop.spec", &count);
  EXPECT_EQ(count.ops, 13);
  EXPECT_EQ(count.shared, 26);  // both operands' columns, in every op
}

// Every spec of the library and of the tests.
TEST(Checks, EverySharedIndexOfEveryOpIsChecked) {
  Checked count;
  for (auto& path : spec_files()) expect_family_checks(path, &count);
  EXPECT_GT(count.ops, 140);
  EXPECT_GT(count.shared, 150);
}

// spgemm and coarsen, the ops of the issue: A's columns against B's rows; the members'
// columns against the graph's rows, the graph's against P's rows, P's against num_clusters.
TEST(Checks, SpgemmAndCoarsenBindTheirSharedIndices) {
  const std::string spgemm = emit_op_registration(compile_family(load_spec(kOps + "/spgemm.spec"))).at(0).text;
  for (const char* op : {"spgemm", "spgemm_grad_avals", "spgemm_grad_avals_grad_grad", "spgemm_grad_bvals_grad_grad", "spgemm_grad_bvals_grad_avals"})
    EXPECT_NE(function_text(spgemm, std::string(" ") + op + "_cpu_kernel(")
                  .find(std::string("checks::csr(\"") + op + "\", \"arowptr\", \"acol\", arowptr, acol, e.n_k.expect_int(), "
                        "\"the extent of index k, browptr.size(0) - 1\");"),
              std::string::npos)
        << op;
  const std::string coarsen = emit_op_registration(compile_family(load_spec(kOps + "/coarsen.spec"))).at(0).text;
  const std::string c = function_text(coarsen, " coarsen_cpu_kernel(");
  EXPECT_NE(c.find("checks::csr(\"coarsen\", \"mrowptr\", \"mcol\", mrowptr, mcol, e.n_i.expect_int(), \"the extent of index i, rowptr.size(0) - 1\");"),
            std::string::npos);
  EXPECT_NE(c.find("checks::csr(\"coarsen\", \"rowptr\", \"col\", rowptr, col, e.n_j.expect_int(), \"the extent of index j, prowptr.size(0) - 1\");"),
            std::string::npos);
  EXPECT_NE(c.find("checks::csr(\"coarsen\", \"prowptr\", \"pcol\", prowptr, pcol, e.n_d.expect_int(), \"the extent of index d, num_clusters\");"),
            std::string::npos);
  // The CSC views the adjoints walk are checked whole, with the names of their CSR.
  EXPECT_NE(function_text(coarsen, " coarsen_grad_edge_weight_cpu_kernel(")
                .find("static const char* const names[5] = {\"mrowptr_colptr\", \"mrowptr_row\", \"mrowptr_perm\", \"mrowptr\", \"mcol\"};"),
            std::string::npos);
  // The assembling op's Autograd kernel runs its checks before it calls other ops.
  const std::string ag = function_text(coarsen, " coarsen_assemble_autograd(");
  EXPECT_LT(ag.find("coarsen_assemble_check("), ag.find("gnnfuse::coarsen_symbolic("));
}

// A kernel that would size a row map (or loop) by an index nothing binds cannot be checked:
// refused at generation, with the fix.
TEST(Checks, AKernelNeedingAnUnboundExtentIsAGenerationError) {
  const std::string emul =
      "op      emul\n"
      "schema  emul(Tensor arowptr, Tensor acol, Tensor avals, Tensor browptr, Tensor bcol, Tensor bvals) -> Tensor\n"
      "sparse  A(i,j) = csr(arowptr, acol, avals)\n"
      "sparse  B(i,j) = csr(browptr, bcol, bvals)\n"
      "output  C(i,j) on A\n"
      "expr    C(i,j) = A(i,j) * B(i,j)\n"
      "dtypes  float32\nindex   int64\ngrad_order 0\n";
  const Family f = compile_family(parse_spec(emul, "emul.spec"));  // B is located through a row map over j
  try {
    emit_op_cpu(f);
    FAIL() << "generated a kernel with a row map of unknown size";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("the extent of index 'j'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("add `extent j = <int argument>`"), std::string::npos) << e.what();
  }
  // With the extent, both columns are checked against it.
  const Family g = compile_family(parse_spec(
      "op      emul\n"
      "schema  emul(Tensor arowptr, Tensor acol, Tensor avals, Tensor browptr, Tensor bcol, Tensor bvals, int n) -> Tensor\n"
      "sparse  A(i,j) = csr(arowptr, acol, avals)\n"
      "sparse  B(i,j) = csr(browptr, bcol, bvals)\n"
      "extent  j = n\n"
      "output  C(i,j) on A\n"
      "expr    C(i,j) = A(i,j) * B(i,j)\n"
      "dtypes  float32\nindex   int64\ngrad_order 0\n",
      "emul.spec"));
  EXPECT_NO_THROW(emit_op_cpu(g));
  const std::string reg = emit_op_registration(g).at(0).text;
  EXPECT_NE(reg.find("checks::csr(\"emul\", \"browptr\", \"bcol\", browptr, bcol, e.n_j.expect_int(), \"the extent of index j, n\");"),
            std::string::npos);
}

// A spec computing its output pattern (`symbolic`) with an operand the one-pass assembling kernel
// does not read (an edge operand: values over another operand's stored entries; a dense one is
// read, tests/codegen/specs/scaled_product.spec) is refused when it is read, naming the operand.
TEST(Checks, AComputedPatternWithAnEdgeOperandIsRefused) {
  const std::string text =
      "op      weighted_product\n"
      "schema  weighted_product(Tensor arowptr, Tensor acol, Tensor w, Tensor browptr, Tensor bcol, Tensor bvals, "
      "Tensor crowptr, Tensor ccol, int n_cols) -> Tensor\n"
      "sparse  A(i,k) = csr(arowptr, acol)\n"
      "edge    W(i,k) on A = w\n"
      "sparse  B(k,j) = csr(browptr, bcol, bvals)\n"
      "sparse  S(i,j) = csr(crowptr, ccol)\n"
      "extent  j = n_cols\n"
      "output  C(i,j) on S\n"
      "symbolic S\n"
      "expr    C(i,j) = W(i,k) * B(k,j)\n"
      "dtypes  float32\nindex   int64\n";
  try {
    parse_spec(text, "weighted_product.spec");
    FAIL() << "a computed pattern with an edge operand was accepted";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("operand W is neither a csr nor a dense operand"), std::string::npos) << e.what();
  }
}
