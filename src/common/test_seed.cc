#include "src/common/test_seed.h"

#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace troupe::testing {
namespace {

struct PerTest {
  std::string test;  // "Suite.Name" the seed belongs to
  uint32_t seed = 0;
  std::mt19937 random;
};

PerTest& Current() {
  static PerTest current;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test =
      info == nullptr ? "" : absl::StrCat(info->test_suite_name(), ".", info->name());
  if (current.test != test || current.test.empty()) {
    current.test = test;
    const char* fixed = std::getenv("TROUPE_TEST_SEED");
    if (fixed == nullptr || !absl::SimpleAtoi(fixed, &current.seed)) {
      current.seed = std::random_device{}();
    }
    current.random.seed(current.seed);
    std::cout << test << ": TROUPE_TEST_SEED=" << current.seed
              << " (replay with bazel test --test_env=TROUPE_TEST_SEED=" << current.seed << ")"
              << std::endl;
    if (info != nullptr) ::testing::Test::RecordProperty("seed", std::to_string(current.seed));
  }
  return current;
}

}  // namespace

uint32_t TestSeed() { return Current().seed; }

std::mt19937& TestRandom() { return Current().random; }

}  // namespace troupe::testing
