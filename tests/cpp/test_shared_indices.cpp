// Indices that two operands share, checked by the generated adapters against the extent that
// binds them: A's columns against B's rows (spgemm and its adjoints), the members' columns
// against the graph's rows, the graph's columns against P's rows and P's columns against
// num_clusters (coarsen and its adjoints), through the C++ API; and the same for a spec that is
// not in ops/ (tests/codegen/specs/two_hop.spec, compiled into gnnfuse_test_ops), through the
// dispatcher. Each error is a c10::Error naming the op, the schema argument and the value.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "expect_error.h"
#include "gnnfuse/gnnfuse.h"

namespace {

at::Tensor ints(std::initializer_list<int64_t> v, at::ScalarType dtype) { return at::tensor(std::vector<int64_t>(v), at::kLong).to(dtype); }

using gnnfuse::testing::expect_error;

class SharedIndices : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  at::ScalarType itype() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(IndexDtypes, SharedIndices, ::testing::Values(at::kInt, at::kLong),
                         [](const auto& info) { return info.param == at::kInt ? "int32" : "int64"; });

// A [3 x 4] times B [4 x 3]; acol[3] is then set to 4 (one past B's rows) or -1.
struct Spgemm {
  at::Tensor arowptr, acol, avals, browptr, bcol, bvals, crowptr, ccol;
  int64_t n_cols = 3;
  explicit Spgemm(at::ScalarType it) {
    arowptr = ints({0, 2, 3, 5}, it);
    acol = ints({0, 3, 1, 2, 3}, it);
    avals = at::rand({5}, at::kDouble);
    browptr = ints({0, 1, 2, 4, 5}, it);
    bcol = ints({2, 0, 0, 1, 2}, it);
    bvals = at::rand({5}, at::kDouble);
    std::tie(crowptr, ccol) = gnnfuse::spgemm_symbolic(arowptr, acol, browptr, bcol, n_cols);
  }
  at::Tensor bad_acol(int64_t value) const {
    at::Tensor c = acol.clone();
    c[3] = value;
    return c;
  }
};

TEST_P(SharedIndices, SpgemmChecksAColumnsAgainstBRows) {
  const Spgemm s(itype());
  // Valid: the product of the dense matrices.
  const at::Tensor ok = gnnfuse::spgemm(s.arowptr, s.acol, s.avals, s.browptr, s.bcol, s.bvals, s.crowptr, s.ccol, s.n_cols);
  EXPECT_EQ(ok.numel(), s.ccol.numel());
  for (int64_t bad : {int64_t{4}, int64_t{-1}}) {
    SCOPED_TRACE("acol[3] = " + std::to_string(bad));
    const at::Tensor acol = s.bad_acol(bad);
    const std::string got = "(got acol[3] = " + std::to_string(bad) + ")";
    expect_error([&] { gnnfuse::spgemm(s.arowptr, acol, s.avals, s.browptr, s.bcol, s.bvals, s.crowptr, s.ccol, s.n_cols); },
                 {"gnnfuse::spgemm: argument 'acol' must hold column indices in [0, 4)", "browptr.size(0) - 1", got});
    const at::Tensor g = at::rand({s.ccol.numel()}, at::kDouble);
    expect_error([&] { gnnfuse::spgemm_grad_avals(s.arowptr, acol, s.browptr, s.bcol, s.bvals, s.crowptr, s.ccol, s.n_cols, g); },
                 {"gnnfuse::spgemm_grad_avals: argument 'acol'", got});
    expect_error([&] { gnnfuse::spgemm_grad_avals_grad_grad(s.arowptr, acol, s.browptr, s.bcol, s.bvals, s.crowptr, s.ccol, s.n_cols, s.avals); },
                 {"gnnfuse::spgemm_grad_avals_grad_grad: argument 'acol'", got});
    expect_error([&] { gnnfuse::spgemm_grad_bvals_grad_grad(s.arowptr, acol, s.avals, s.browptr, s.bcol, s.crowptr, s.ccol, s.n_cols, s.bvals); },
                 {"gnnfuse::spgemm_grad_bvals_grad_grad: argument 'acol'", got});
    expect_error([&] { gnnfuse::spgemm_grad_bvals_grad_avals(s.arowptr, acol, s.browptr, s.bcol, s.crowptr, s.ccol, g, s.n_cols, s.bvals); },
                 {"gnnfuse::spgemm_grad_bvals_grad_avals: argument 'acol'", got});
    expect_error([&] { gnnfuse::spgemm_symbolic(s.arowptr, acol, s.browptr, s.bcol, s.n_cols); },
                 {"gnnfuse::spgemm_symbolic: argument 'acol'", got});
    expect_error([&] { gnnfuse::spgemm_assemble(s.arowptr, acol, s.avals, s.browptr, s.bcol, s.bvals, s.n_cols); },
                 {"gnnfuse::spgemm_assemble: argument 'acol'", got});
  }
  // The other side of the shared index: B with a row fewer makes acol's 3 one past the end.
  const at::Tensor browptr = s.browptr.slice(0, 0, 4);
  const at::Tensor bcol = s.bcol.slice(0, 0, 4), bvals = s.bvals.slice(0, 0, 4);
  expect_error([&] { gnnfuse::spgemm(s.arowptr, s.acol, s.avals, browptr, bcol, bvals, s.crowptr, s.ccol, s.n_cols); },
               {"gnnfuse::spgemm: argument 'acol' must hold column indices in [0, 3)", "(got acol[1] = 3)"});
}

// Coarsening of a 6-node graph into 3 clusters: members M = Pᵀ (mrowptr, mcol), the graph
// (rowptr, col, edge_weight), the assignment P (prowptr, pcol), the coarse pattern S.
struct Coarsen {
  at::Tensor mrowptr, mcol, rowptr, col, w, prowptr, pcol, crowptr, ccol;
  int64_t k = 3;
  explicit Coarsen(at::ScalarType it) {
    const at::Tensor cluster = ints({0, 1, 2, 0, 1, 2}, at::kLong);
    prowptr = at::arange(7, at::kLong).to(it);
    pcol = cluster.to(it);
    mrowptr = ints({0, 2, 4, 6}, it);
    mcol = ints({0, 3, 1, 4, 2, 5}, it);
    rowptr = ints({0, 2, 3, 5, 6, 7, 8}, it);
    col = ints({1, 5, 2, 0, 4, 3, 5, 0}, it);
    w = at::rand({8}, at::kDouble);
    std::tie(crowptr, ccol) = gnnfuse::coarsen_symbolic(mrowptr, mcol, rowptr, col, prowptr, pcol, k);
  }
  static at::Tensor with(const at::Tensor& t, int64_t at_, int64_t value) {
    at::Tensor c = t.clone();
    c[at_] = value;
    return c;
  }
};

TEST_P(SharedIndices, CoarsenChecksMembersGraphAndClusters) {
  const Coarsen c(itype());
  EXPECT_EQ(gnnfuse::coarsen(c.mrowptr, c.mcol, c.rowptr, c.col, c.w, c.prowptr, c.pcol, c.crowptr, c.ccol, c.k).numel(), c.ccol.numel());
  const at::Tensor g = at::rand({c.ccol.numel()}, at::kDouble);
  const auto [pcp, prw, ppm] = gnnfuse::csr_transpose(c.prowptr, c.pcol, c.k);  // the CSC views the adjoints walk
  const auto [mcp, mrw, mpm] = gnnfuse::csr_transpose(c.mrowptr, c.mcol, 6);
  for (int64_t bad : {int64_t{6}, int64_t{-1}}) {
    SCOPED_TRACE("value " + std::to_string(bad));
    // The members' columns against the graph's rows.
    const std::string got = "(got mcol[2] = " + std::to_string(bad) + ")";
    const at::Tensor mcol = Coarsen::with(c.mcol, 2, bad);
    expect_error([&] { gnnfuse::coarsen(c.mrowptr, mcol, c.rowptr, c.col, c.w, c.prowptr, c.pcol, c.crowptr, c.ccol, c.k); },
                 {"gnnfuse::coarsen: argument 'mcol' must hold column indices in [0, 6)", "rowptr.size(0) - 1", got});
    expect_error([&] { gnnfuse::coarsen_grad_edge_weight_grad_grad(c.mrowptr, mcol, c.rowptr, c.col, c.prowptr, c.pcol, pcp, prw, ppm, c.crowptr, c.ccol, c.k, c.w); },
                 {"gnnfuse::coarsen_grad_edge_weight_grad_grad: argument 'mcol'", got});
    expect_error([&] { gnnfuse::coarsen_symbolic(c.mrowptr, mcol, c.rowptr, c.col, c.prowptr, c.pcol, c.k); },
                 {"gnnfuse::coarsen_symbolic: argument 'mcol'", got});
    expect_error([&] { gnnfuse::coarsen_assemble(c.mrowptr, mcol, c.rowptr, c.col, c.w, c.prowptr, c.pcol, c.k); },
                 {"gnnfuse::coarsen_assemble: argument 'mcol'", got});
    // The graph's columns against P's rows.
    const at::Tensor col = Coarsen::with(c.col, 4, bad);
    const std::string got_col = "(got col[4] = " + std::to_string(bad) + ")";
    expect_error([&] { gnnfuse::coarsen(c.mrowptr, c.mcol, c.rowptr, col, c.w, c.prowptr, c.pcol, c.crowptr, c.ccol, c.k); },
                 {"gnnfuse::coarsen: argument 'col' must hold column indices in [0, 6)", "prowptr.size(0) - 1", got_col});
    expect_error([&] { gnnfuse::coarsen_grad_edge_weight(c.mrowptr, c.mcol, mcp, mrw, mpm, c.rowptr, col, c.prowptr, c.pcol, c.crowptr, c.ccol, c.k, g); },
                 {"gnnfuse::coarsen_grad_edge_weight: argument 'col'", got_col});
    expect_error([&] { gnnfuse::coarsen_grad_edge_weight_grad_grad(c.mrowptr, c.mcol, c.rowptr, col, c.prowptr, c.pcol, pcp, prw, ppm, c.crowptr, c.ccol, c.k, c.w); },
                 {"gnnfuse::coarsen_grad_edge_weight_grad_grad: argument 'col'", got_col});
  }
  // P's columns against num_clusters: named 'pcol' (not 'col').
  expect_error([&] { gnnfuse::coarsen(c.mrowptr, c.mcol, c.rowptr, c.col, c.w, c.prowptr, c.pcol, c.crowptr, c.ccol.clamp_max(1), 2); },
               {"gnnfuse::coarsen: argument 'pcol' must hold column indices in [0, 2)", "(got pcol[2] = 2)"});
  expect_error([&] { gnnfuse::coarsen_symbolic(c.mrowptr, c.mcol, c.rowptr, c.col, c.prowptr, c.pcol, 2); },
               {"gnnfuse::coarsen_symbolic: argument 'pcol'", "(got pcol[2] = 2)"});
}

// Through autograd: the forward refuses, before anything is recorded.
TEST_P(SharedIndices, DifferentiableCallsRefuseToo) {
  const Spgemm s(itype());
  const at::Tensor av = s.avals.clone().set_requires_grad(true);
  expect_error([&] { gnnfuse::spgemm(s.arowptr, s.bad_acol(4), av, s.browptr, s.bcol, s.bvals, s.crowptr, s.ccol, s.n_cols); },
               {"gnnfuse::spgemm: argument 'acol'", "(got acol[3] = 4)"});
  expect_error([&] { gnnfuse::spgemm_assemble(s.arowptr, s.bad_acol(-1), av, s.browptr, s.bcol, s.bvals, s.n_cols); },
               {"gnnfuse::spgemm_assemble: argument 'acol'", "(got acol[3] = -1)"});
  const Coarsen c(itype());
  const at::Tensor w = c.w.clone().set_requires_grad(true);
  expect_error([&] { gnnfuse::coarsen(c.mrowptr, Coarsen::with(c.mcol, 0, 6), c.rowptr, c.col, w, c.prowptr, c.pcol, c.crowptr, c.ccol, c.k); },
               {"gnnfuse::coarsen: argument 'mcol'", "(got mcol[0] = 6)"});
  expect_error([&] { gnnfuse::coarsen_assemble(c.mrowptr, Coarsen::with(c.mcol, 0, 6), c.rowptr, c.col, w, c.prowptr, c.pcol, c.k); },
               {"gnnfuse::coarsen_assemble: argument 'mcol'", "(got mcol[0] = 6)"});
}

// two_hop (tests/codegen/specs/two_hop.spec, never in ops/): Y = A B X. The generated adapter
// computes it, and checks A's columns against B's rows in the op and in its adjoints.
at::Tensor two_hop(const at::Tensor& arowptr, const at::Tensor& acol, const std::optional<at::Tensor>& avals, const at::Tensor& browptr,
                   const at::Tensor& bcol, const std::optional<at::Tensor>& bvals, const at::Tensor& x) {
  static const auto h = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::two_hop", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
      const std::optional<at::Tensor>&, const at::Tensor&)>();
  return h.call(arowptr, acol, avals, browptr, bcol, bvals, x);
}

TEST_P(SharedIndices, UnseenSpecTwoHopComputesAndChecks) {
  const Spgemm s(itype());  // A [3 x 4], B [4 x 3]
  const at::Tensor x = at::rand({3, 5}, at::kDouble);
  auto dense = [](const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& vals, int64_t rows, int64_t cols) {
    at::Tensor m = at::zeros({rows, cols}, at::kDouble);
    const at::Tensor r = at::repeat_interleave(at::arange(rows, at::kLong), rowptr.diff().to(at::kLong));
    m.index_put_({r, col.to(at::kLong)}, vals, /*accumulate=*/true);
    return m;
  };
  const at::Tensor av = s.avals.clone().set_requires_grad(true);
  const at::Tensor y = two_hop(s.arowptr, s.acol, av, s.browptr, s.bcol, s.bvals, x);
  const at::Tensor want = at::mm(at::mm(dense(s.arowptr, s.acol, s.avals, 3, 4), dense(s.browptr, s.bcol, s.bvals, 4, 3)), x);
  EXPECT_TRUE(at::allclose(y, want));
  y.sum().backward();  // the generated adjoint two_hop_grad_avals: d/dA(i,k) = sum_f (B X)(k,f)
  const at::Tensor bx = at::mm(dense(s.browptr, s.bcol, s.bvals, 4, 3), x).sum(1);
  ASSERT_TRUE(av.grad().defined());
  EXPECT_TRUE(at::allclose(av.grad(), bx.index_select(0, s.acol.to(at::kLong))));
  for (int64_t bad : {int64_t{4}, int64_t{-1}}) {
    const std::string got = "(got acol[3] = " + std::to_string(bad) + ")";
    expect_error([&] { two_hop(s.arowptr, s.bad_acol(bad), s.avals, s.browptr, s.bcol, s.bvals, x); },
                 {"gnnfuse::two_hop: argument 'acol' must hold column indices in [0, 4)", "browptr.size(0) - 1", got});
    static const auto grad_avals = c10::Dispatcher::singleton().findSchemaOrThrow("gnnfuse::two_hop_grad_avals", "").typed<at::Tensor(
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
        const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&)>();
    expect_error([&] { grad_avals.call(s.arowptr, s.bad_acol(bad), s.browptr, s.bcol, s.bvals, x, at::rand({3, 5}, at::kDouble), std::nullopt,
                                       std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt); },
                 {"gnnfuse::two_hop_grad_avals: argument 'acol'", got});
  }
  // B's columns against X's rows.
  expect_error([&] { two_hop(s.arowptr, s.acol, s.avals, s.browptr, s.bcol, s.bvals, x.slice(0, 0, 2)); },
               {"gnnfuse::two_hop: argument 'bcol' must hold column indices in [0, 2)", "x.size(0)", "(got bcol[0] = 2)"});
}

// Found by fuzz_ops: an undefined tensor (which C++ callers can pass) reached the autograd
// Function, whose apply() reads every tensor's device: "tensor does not have a device", naming no
// op. The checks now run first.
TEST_P(SharedIndices, UndefinedTensorsAreNamed) {
  const Spgemm s(itype());
  expect_error([&] { gnnfuse::spmm(s.arowptr, s.acol, std::nullopt, at::Tensor()); },
               {"gnnfuse::spmm: argument 'x' must be a tensor (got an undefined tensor)"});
  expect_error([&] { gnnfuse::spmm(s.arowptr, s.acol, at::Tensor(), at::rand({4, 2}, at::kDouble)); },
               {"gnnfuse::spmm: argument 'edge_weight' must be a tensor (got an undefined tensor)"});
  expect_error([&] { gnnfuse::spgemm(s.arowptr, s.acol, s.avals, s.browptr, at::Tensor(), s.bvals, s.crowptr, s.ccol, s.n_cols); },
               {"gnnfuse::spgemm: argument 'bcol' must be a tensor (got an undefined tensor)"});
}

}  // namespace
