// Golden tests of the imperative IR (imperative.h): the statements lowered once from the
// scheduled index tree, which the printers print. Compared as text (imp::print, the --dump
// section "imperative IR"); update an expectation by pasting the section `gnnfuse-gen --dump
// ops/<op>.spec` prints for the op when a change to the lowering is intended.
#include <gtest/gtest.h>

#include "codegen/imperative.h"
#include "codegen/ir.h"

using namespace gnnfuse::codegen;

namespace {

const std::string kOps = GNNFUSE_OPS_DIR;

std::string lowered(const Compiled& c) { return imp::print(imp::lower(c)); }

}  // namespace

// A walk over A's row with a register-tiled feature loop and prefetched rows of X, the row
// accumulator allocated per row loop and filled per row.
TEST(Imperative, Spmm) {
  auto c = compile(load_spec(kOps + "/spmm.spec"));
  EXPECT_EQ(lowered(*c), R"(kernel spmm
  parallel for i < n_i  [cpu chunk, balanced by A]
    row A(i)
    alloc Yacc(f) = 0
    fill Yacc = 0
    walk j in A  [prefetch X(j,f)]
      for f < n_f  [simd lane, register tile]
        Yacc(f) += A(i,j) * X(j,f)
    for f < n_f  [simd lane]
      Y(i,f) = Yacc(f)
)");
}

// Two walks (the row max, then the softmax-weighted sum), the division guarded by the row's
// entries (stored-entry semantics: an empty row gives 0, not 0 / 0).
TEST(Imperative, GatFused) {
  auto c = compile(load_spec(kOps + "/gat.spec"));
  EXPECT_EQ(lowered(*c), R"(kernel gat
  parallel for i < n_i  [cpu chunk, balanced by A]
    row A(i)
    alloc T5(h) = -inf
    alloc T6(h) = 0
    alloc T10(h,f) = 0
    alloc T15(h) = 0
    fill T15 = 0
    fill T10 = 0
    fill T5 = -inf
    walk j2 in A  [prefetch V(j2,h)]
      for h < n_h
        alloc T2 = 0
        alloc T3 = 0
        alloc T4 = 0
        T2 = U(i,h) + V(j2,h)
        T3 = leaky_relu(T2, negative_slope)
        T4 = A(i,j2) * T3
        T5(h) max= T4
    for h < n_h  [simd lane]
      T6(h) = T5(h)
    walk j in A  [prefetch V(j,h) X(j,h,f)]
      for h < n_h
        alloc T0 = 0
        alloc T1 = 0
        alloc T7 = 0
        alloc T8 = 0
        alloc T9 = 0
        T0 = U(i,h) + V(j,h)
        T1 = leaky_relu(T0, negative_slope)
        T7 = T1 - T6(h)
        T8 = exp(T7)
        T9 = A(i,j) * T8
        for f < n_f  [simd lane]
          T10(h,f) += T9 * X(j,h,f)
        T15(h) += A(i,j) * T8
    for h < n_h
      for f < n_f  [simd lane]
        Y(i,h,f) = (row A(i) nonempty ? T10(h,f) / T15(h) : 0)
)");
}

// Both lowerings of GCN: the trie-fused (A X) W, whose product with W is a matmul block that
// overwrites the row accumulator (its fill is gone), and the chain order A (X W), X W a matrix
// at the root computed by row blocks, then gathered by a register-tiled walk.
TEST(Imperative, GcnFusedAndSplit) {
  auto c = compile(load_spec(kOps + "/gcn.spec"));
  ASSERT_EQ(c->alternatives.size(), 1u);
  EXPECT_EQ(lowered(*c), R"(kernel gcn
  parallel for i < n_i  [cpu chunk, balanced by A]  [row blocks]
    row A(i)
    alloc T0(k) = 0
    alloc Yacc(o) = 0
    fill T0 = 0
    walk j in A  [prefetch X(j,k)]
      for k < n_k  [simd lane, register tile]
        T0(k) += A(i,j) * X(j,k)
    matmul product Yacc(o) = sum over k of T0(k) * W(k,o)
    for o < n_o  [simd lane]
      Y(i,o) = Yacc(o)
)");
  EXPECT_EQ(lowered(*c->alternatives[0]), R"(kernel gcn
  alloc T0(j,o) = 0
  parallel for j < n_j  [cpu chunk]  [row blocks]
    matmul product T0(row,o) += sum over k of X(row,k) * W(k,o)
  parallel for i < n_i  [cpu chunk, balanced by A]
    row A(i)
    alloc Yacc(o) = 0
    fill Yacc = 0
    walk j in A  [prefetch T0(j,o)]
      for o < n_o  [simd lane, register tile]
        Yacc(o) += A(i,j) * T0(j,o)
    for o < n_o  [simd lane]
      Y(i,o) = Yacc(o)
)");
}
