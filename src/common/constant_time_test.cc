#include "src/common/constant_time.h"

#include <string>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(ConstantTimeEqualsTest, EqualOnlyForTheSameBytes) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("Bearer troupe_abc", "Bearer troupe_abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer troupe_abc", "Bearer troupe_abd"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer troupe_abc", "Bearer troupe_ab"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer troupe_ab", "Bearer troupe_abc"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  // Bytes past 0x7f and embedded zeros compare like any other.
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0\xff", 3), std::string("a\0\xff", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0\xff", 3), std::string("a\0\xfe", 3)));
}

}  // namespace
}  // namespace troupe
