#include "src/common/test_seed.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace troupe::testing {
namespace {

TEST(TestSeedTest, OneSeedPerTestAndTheGeneratorStartsFromIt) {
  const uint32_t seed = TestSeed();
  EXPECT_EQ(TestSeed(), seed);
  std::mt19937 expected(seed);
  EXPECT_EQ(TestRandom()(), expected());
  EXPECT_EQ(TestRandom()(), expected());  // the same generator, not a fresh one per call
}

TEST(TestSeedTest, TheEnvironmentFixesTheSeed) {
  // Only this test's first call reads the environment; set it before.
  setenv("TROUPE_TEST_SEED", "12345", 1);
  EXPECT_EQ(TestSeed(), 12345u);
  unsetenv("TROUPE_TEST_SEED");
  EXPECT_EQ(TestSeed(), 12345u);
}

}  // namespace
}  // namespace troupe::testing
