// TestSeed / TestRandom: the seed for every random choice a test makes, so a failure can be
// replayed. The seed is $TROUPE_TEST_SEED when set (rerun a failure with the seed it printed),
// else a fresh one per test; either way it is printed once per test and recorded in the test's
// XML result (property "seed"). Call inside a running test, on the test's thread.
#pragma once

#include <cstdint>
#include <random>

namespace troupe::testing {

// The current test's seed (the same value for every call within one test).
uint32_t TestSeed();

// The current test's generator, seeded with TestSeed() when the test first asks for it: the
// same seed replays the same draws, in the order the test makes them.
std::mt19937& TestRandom();

}  // namespace troupe::testing
