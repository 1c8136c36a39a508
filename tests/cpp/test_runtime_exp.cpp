// runtime::exp_acc(float), the inlined exp of the softmax kernels, on special values (found by
// fuzz_ops under UBSan: for NaN it converted NaN to int32 and shifted the negative result, both
// undefined; sanitize.sh runs this test under UBSan) and against std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/cpu.h"

namespace {

using gnnfuse::runtime::exp_acc;

TEST(RuntimeExp, SpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(exp_acc(nan)));
  EXPECT_TRUE(std::isnan(exp_acc(-nan)));
  EXPECT_EQ(exp_acc(-inf), 0.0f);
  EXPECT_EQ(exp_acc(inf), inf);
  EXPECT_EQ(exp_acc(-1000.0f), 0.0f);
  EXPECT_EQ(exp_acc(1000.0f), inf);
  EXPECT_EQ(exp_acc(0.0f), 1.0f);
}

TEST(RuntimeExp, CloseToStdExp) {
  for (float x = -86.0f; x <= 88.0f; x += 0.01f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(exp_acc(x) / want, 1.0, 4e-7) << "x = " << x;
  }
}

}  // namespace
