// Element types: sizes, names, the promotion table, and how ops apply it.

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tessera/tessera.h"

namespace tessera {
namespace {

using enum DType;

TEST(DType, SizesAndNames) {
  const std::map<DType, std::pair<size_t, std::string>> expect = {
      {f32, {4, "f32"}}, {f64, {8, "f64"}}, {bf16, {2, "bf16"}},
      {f16, {2, "f16"}}, {i32, {4, "i32"}}, {i64, {8, "i64"}}};
  for (DType dt : kAllDTypes) {
    EXPECT_EQ(dtype_size(dt), expect.at(dt).first);
    EXPECT_EQ(dtype_name(dt), expect.at(dt).second);
    EXPECT_EQ(dtype_from_name(dtype_name(dt)), dt);  // names round-trip
  }
  EXPECT_EQ(expect.size(), std::size(kAllDTypes));
}

TEST(DType, UnknownNameIsAnError) {
  try {
    dtype_from_name("float32");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'float32'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32, f64, bf16, f16, i32, i64"), std::string::npos) << msg;
  }
}

TEST(DType, FloatingAndCTypes) {
  EXPECT_TRUE(is_floating(f32));
  EXPECT_TRUE(is_floating(f64));
  EXPECT_TRUE(is_floating(bf16));
  EXPECT_TRUE(is_floating(f16));
  EXPECT_FALSE(is_floating(i32));
  EXPECT_FALSE(is_floating(i64));
  EXPECT_EQ(dtype_of<float>, f32);
  EXPECT_EQ(dtype_of<BFloat16>, bf16);
  EXPECT_EQ(dtype_of<int64_t>, i64);
  EXPECT_TRUE((std::is_same_v<acc_type_t<Half>, float>));
  EXPECT_TRUE((std::is_same_v<acc_type_t<double>, double>));
  EXPECT_TRUE((std::is_same_v<acc_type_t<int32_t>, int64_t>));
}

TEST(DType, PromotionTable) {
  // Rows and columns in the order f32, f64, bf16, f16, i32, i64.
  const DType order[] = {f32, f64, bf16, f16, i32, i64};
  const DType table[6][6] = {
      /* f32  */ {f32, f64, f32, f32, f32, f32},
      /* f64  */ {f64, f64, f64, f64, f64, f64},
      /* bf16 */ {f32, f64, bf16, f32, bf16, bf16},
      /* f16  */ {f32, f64, f32, f16, f16, f16},
      /* i32  */ {f32, f64, bf16, f16, i32, i64},
      /* i64  */ {f32, f64, bf16, f16, i64, i64},
  };
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c)
      EXPECT_EQ(promote_types(order[r], order[c]), table[r][c])
          << dtype_name(order[r]) << " with " << dtype_name(order[c]);
}

TEST(DType, OpsPromoteTheirOperands) {
  Tensor a = full({3}, 1.5, bf16), b = full({3}, 2.0, f16), n = full({3}, 2.0, i32);
  EXPECT_EQ(ops::add(a, b).dtype(), f32);  // bf16 with f16 meet at f32
  EXPECT_EQ(ops::mul(a, n).dtype(), bf16);
  EXPECT_EQ(ops::add(n, full({3}, 1.0, i64)).dtype(), i64);
  Tensor c = ops::cat({a, full({2}, 1.0, f64)}, 0);
  EXPECT_EQ(c.dtype(), f64);
  EXPECT_EQ(to_vector<double>(c), (std::vector<double>{1.5, 1.5, 1.5, 1.0, 1.0}));
}

TEST(DType, HalfTypesRoundToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(float(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(float(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(float(Half(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(float(Half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(float(Half(65520.0f))));  // rounds past the largest finite half
  EXPECT_EQ(float(Half(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isnan(float(BFloat16(std::nanf("")))));
}

}  // namespace
}  // namespace tessera
