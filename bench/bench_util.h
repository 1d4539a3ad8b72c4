// Small helpers shared by the C++ benchmark drivers: a steady clock, one JSON line per figure
// (what bench/*.py read), and an operations-per-second loop. Header-only; no state, so safe from
// any thread (Report writes whole lines to stdout under stdio's own lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>

namespace troupe::bench {

using Clock = std::chrono::steady_clock;

// Seconds since `start`.
inline double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One figure as a JSON line: {"metric": ..., "value": ..., "unit": ...}.
inline void Report(const char* metric, double value, const char* unit) {
  printf("{\"metric\": \"%s\", \"value\": %.3f, \"unit\": \"%s\"}\n", metric, value, unit);
  fflush(stdout);
}

// Runs `batch` (of `ops_per_batch` operations) once to warm up, then repeatedly for about
// `seconds`; returns operations per second.
inline double Rate(int ops_per_batch, double seconds, const std::function<void()>& batch) {
  batch();
  int64_t ops = 0;
  const auto start = Clock::now();
  while (Seconds(start) < seconds) {
    batch();
    ops += ops_per_batch;
  }
  return ops / Seconds(start);
}

}  // namespace troupe::bench
