// Reduction kernels and 16-bit float conversions against plain double arithmetic.
#include "src/collective/reduce.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace troupe::collective {
namespace {

TEST(ReduceTest, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    if ((half & 0x7c00) == 0x7c00) continue;  // inf / nan
    ASSERT_EQ(FloatToHalf(HalfToFloat(half)), half) << "bits " << bits;
  }
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);                      // largest finite
  EXPECT_EQ(FloatToHalf(70000.0f), 0x7c00);                      // overflows to inf
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
}

TEST(ReduceTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie: stays even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
}

template <typename T>
std::vector<T> Apply(DataType dtype, ReduceOp op, std::vector<T> a, const std::vector<T>& b) {
  ReduceInto(dtype, op, a.data(), b.data(), a.size());
  return a;
}

TEST(ReduceTest, EveryOpOnEveryNativeType) {
  EXPECT_EQ(Apply<float>(DataType::kFloat32, ReduceOp::kSum, {1, 2}, {3, -4}),
            (std::vector<float>{4, -2}));
  EXPECT_EQ(Apply<double>(DataType::kFloat64, ReduceOp::kProduct, {1.5, 2}, {2, -4}),
            (std::vector<double>{3, -8}));
  EXPECT_EQ(Apply<int32_t>(DataType::kInt32, ReduceOp::kMin, {1, -7}, {3, -4}),
            (std::vector<int32_t>{1, -7}));
  EXPECT_EQ(Apply<int64_t>(DataType::kInt64, ReduceOp::kMax, {1, -7}, {3, -4}),
            (std::vector<int64_t>{3, -4}));
  // Integer overflow wraps around instead of being undefined.
  EXPECT_EQ(Apply<uint8_t>(DataType::kUInt8, ReduceOp::kSum, {250}, {10}),
            (std::vector<uint8_t>{4}));
  EXPECT_EQ(Apply<int32_t>(DataType::kInt32, ReduceOp::kSum, {INT32_MAX}, {1}),
            (std::vector<int32_t>{INT32_MIN}));
  std::vector<int64_t> sums = {9, -9};
  FinishAverage(DataType::kInt64, sums.data(), 2, 2);
  EXPECT_EQ(sums, (std::vector<int64_t>{4, -4}));  // integer division, toward zero
}

TEST(ReduceTest, SixteenBitFloatsCombineInFloat32) {
  // 2048 + 1 is not representable in f16; the sum rounds once, to even: 2048.
  std::vector<uint16_t> a = {FloatToHalf(2048), FloatToHalf(0.5f)};
  std::vector<uint16_t> b = {FloatToHalf(1), FloatToHalf(0.25f)};
  ReduceInto(DataType::kFloat16, ReduceOp::kSum, a.data(), b.data(), 2);
  EXPECT_EQ(HalfToFloat(a[0]), 2048.0f);
  EXPECT_EQ(HalfToFloat(a[1]), 0.75f);
  std::vector<uint16_t> c = {FloatToBFloat16(3), FloatToBFloat16(-2)};
  std::vector<uint16_t> d = {FloatToBFloat16(5), FloatToBFloat16(7)};
  ReduceInto(DataType::kBFloat16, ReduceOp::kMax, c.data(), d.data(), 2);
  EXPECT_EQ(BFloat16ToFloat(c[0]), 5.0f);
  EXPECT_EQ(BFloat16ToFloat(c[1]), 7.0f);
  FinishAverage(DataType::kBFloat16, c.data(), 2, 2);
  EXPECT_EQ(BFloat16ToFloat(c[0]), 2.5f);
}

}  // namespace
}  // namespace troupe::collective
