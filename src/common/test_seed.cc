#include "src/common/test_seed.h"

#include <cstdlib>
#include <iostream>
#include <random>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace troupe::testing {

uint32_t TestSeed() {
  uint32_t seed = 0;
  const char* fixed = std::getenv("TROUPE_TEST_SEED");
  if (fixed == nullptr || !absl::SimpleAtoi(fixed, &seed)) seed = std::random_device{}();
  std::cout << "TROUPE_TEST_SEED=" << seed << " (set it in the environment to replay this test; "
            << "bazel test --test_env=TROUPE_TEST_SEED=" << seed << ")" << std::endl;
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

}  // namespace troupe::testing
