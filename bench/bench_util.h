// Small helpers shared by the C++ benchmark drivers: a steady clock, one JSON line per figure
// (what bench/*.py read), an operations-per-second loop and `--name=value` flags. Header-only; no
// state, so safe from any thread (Report writes whole lines to stdout under stdio's own lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

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

// The value of `--name=value` among the program's arguments, or `fallback`.
inline std::string FlagValue(int argc, char** argv, const std::string& name,
                             const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

}  // namespace troupe::bench
