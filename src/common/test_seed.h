// TestSeed: the seed for every random choice a test makes, so a failure can be replayed.
// It is $TROUPE_TEST_SEED when set (rerun a failure with the seed it printed), else a fresh one;
// either way it is printed and recorded in the test's XML result (property "seed").
// Call it inside a running test; thread-safe.
#pragma once

#include <cstdint>

namespace troupe::testing {

// The seed for the current test: printed as "TROUPE_TEST_SEED=<n>" and recorded as the
// test's "seed" property. Seed one generator with it (std::mt19937 random(TestSeed());).
uint32_t TestSeed();

}  // namespace troupe::testing
