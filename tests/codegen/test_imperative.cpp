// Golden tests of the imperative IR (imperative.h): the statements lowered once from the
// scheduled index tree (Compiled::kernel, ::assemble, ::pattern), which the printers print and
// nothing else. Compared as text (imp::print, the --dump sections "imperative IR"); update an
// expectation by pasting the section `gnnfuse-gen --dump ops/<op>.spec` prints for the op when
// a change to the lowering is intended.
#include <gtest/gtest.h>

#include "codegen/imperative.h"
#include "codegen/ir.h"

using namespace gnnfuse::codegen;

namespace {

const std::string kOps = GNNFUSE_OPS_DIR;

std::string lowered(const Compiled& c) {
  // The pipeline's kernel is the lowering of its tree.
  EXPECT_EQ(imp::print(*c.kernel), imp::print(imp::lower(c)));
  return imp::print(*c.kernel);
}

}  // namespace

// A walk over A's row with a register-tiled feature loop and prefetched rows of X, the row
// accumulator allocated per row loop (in a workspace of each worker) and filled per row.
TEST(Imperative, Spmm) {
  auto c = compile(load_spec(kOps + "/spmm.spec"));
  EXPECT_EQ(lowered(*c), R"(kernel spmm
  parallel for i < n_i  [cpu chunk, balanced by A]
    per worker: workspace Yacc(f)
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
    per worker: workspace T5(h)
    per worker: workspace T6(h)
    per worker: workspace T10(h,f)
    per worker: workspace T15(h)
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
// overwrites the row accumulator (its fill is gone) between two passes over the rows of a block
// (each with the row header, the row temporaries in a slot per row), and the chain order
// A (X W), X W a matrix at the root computed by row blocks, then gathered by a register-tiled
// walk.
TEST(Imperative, GcnFusedAndSplit) {
  auto c = compile(load_spec(kOps + "/gcn.spec"));
  ASSERT_EQ(c->alternatives.size(), 1u);
  EXPECT_EQ(lowered(*c), R"(kernel gcn
  parallel for i < n_i  [cpu chunk, balanced by A]  [row blocks]
    per worker: workspace T0(k), a slot per row of a block
    per worker: workspace Yacc(o), a slot per row of a block
    rows i of the block
      row A(i)
      alloc T0(k) = 0
      alloc Yacc(o) = 0
      fill T0 = 0
      walk j in A  [prefetch X(j,k)]
        for k < n_k  [simd lane, register tile]
          T0(k) += A(i,j) * X(j,k)
    matmul product Yacc(o) = sum over k of T0(k) * W(k,o)
    rows i of the block
      row A(i)
      alloc T0(k) = 0
      alloc Yacc(o) = 0
      for o < n_o  [simd lane]
        Y(i,o) = Yacc(o)
)");
  EXPECT_EQ(lowered(*c->alternatives[0]), R"(kernel gcn
  alloc T0(j,o) = 0
  parallel for j < n_j  [cpu chunk]  [row blocks]
    matmul product T0(row,o) += sum over k of X(row,k) * W(k,o)
  parallel for i < n_i  [cpu chunk, balanced by A]
    per worker: workspace Yacc(o)
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

// An op computing its output pattern S (`symbolic S`): its values kernel locates S through a row
// map (filled and cleared per row); the assembling kernel builds S's rows instead: each row
// starts with its product count (the nest without its innermost walk), inserts every
// coordinate where the values kernel locates S (a new slot starts at the temporary's initial
// value: its fill per row is gone), and writes the row by walking it as built; the pattern
// kernel inserts the coordinates only, then writes each row sorted.
TEST(Imperative, SpgemmValuesAssembleAndPattern) {
  auto c = compile(load_spec(kOps + "/spgemm.spec"));
  EXPECT_EQ(lowered(*c), R"(kernel spgemm
  parallel for i < n_i  [cpu chunk, balanced by A]
    per worker: workspace Cacc(j) by S row positions
    per worker: row map of S
    row A(i)
    row S(i)
    alloc Cacc(j) by S row positions = 0
    fill row map of S
    fill Cacc = 0
    walk k in A
      row B(k)
      walk j in B
        locate j in S by row map, else next
        Cacc(j) += A(i,k) * B(k,j)
    walk j in S
      C(i,j) = Cacc(j)
    clear row map of S
)");
  ASSERT_TRUE(c->assemble && c->pattern);
  EXPECT_EQ(imp::print(*c->assemble), imp::print(imp::lower(*c, imp::Mode::Assemble)));
  EXPECT_EQ(imp::print(*c->assemble), R"(kernel spgemm_assemble
  build rows i < n_i of S  [cpu chunk, balanced by A]
    per worker: workspace Cacc(j) by S row positions
    row A(i)
    begin row S(i), product count:
      walk k in A
        row B(k)
        count row B
    alloc Cacc(j) by S row positions = 0
    walk k in A
      row B(k)
      walk j in B
        insert j into S, a new slot:
          fill Cacc = 0
        Cacc(j) += A(i,k) * B(k,j)
    walk j in S as built, writing C(i,j)
      C(i,j) = Cacc(j)
)");
  EXPECT_EQ(imp::print(*c->pattern), R"(kernel spgemm_symbolic
  build rows i < n_i of S  [cpu chunk, balanced by A]
    row A(i)
    begin row S(i), product count:
      walk k in A
        row B(k)
        count row B
    walk k in A
      row B(k)
      walk j in B
        insert j into S
    end row S(i), sorted
)");
  // Ops that do not compute their pattern have neither.
  EXPECT_FALSE(compile(load_spec(kOps + "/spmm.spec"))->assemble);
}

// What no target lowers is refused by the lowering, before any printer (compile() lowers every
// op): here a loop over a union of two sparse levels.
TEST(Imperative, AUnionOfSparseLevelsIsRefusedByTheLowering) {
  const std::string text =
      "op      union_sum\n"
      "schema  union_sum(Tensor arowptr, Tensor acol, Tensor avals, Tensor browptr, Tensor bcol, Tensor bvals, Tensor x, int n) -> Tensor\n"
      "sparse  A(i,j) = csr(arowptr, acol, avals)\n"
      "sparse  B(i,j) = csr(browptr, bcol, bvals)\n"
      "dense   X(j,f) = x\n"
      "extent  j = n\n"
      "output  Y(i,f)\n"
      "expr    Y(i,f) = (A(i,j) + B(i,j)) * X(j,f)\n"
      "dtypes  float32\nindex   int64\ngrad_order 0\n";
  try {
    compile(parse_spec(text, "union_sum.spec"));
    FAIL() << "a union of sparse levels was lowered";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("a union of sparse levels is not lowered yet"), std::string::npos) << e.what();
  }
}
