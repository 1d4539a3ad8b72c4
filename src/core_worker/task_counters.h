// What this process's tasks (or actor calls) did so far, for cluster metrics: submitted (first
// attempts), finished (ran without an application error), failed (gave up, threw, or were
// cancelled), retried (attempts after the first; unused for actor calls).
// Owned by the submitter that counts; read from any thread (atomics).
#pragma once

#include <atomic>
#include <cstdint>

namespace troupe {

struct TaskCounters {
  std::atomic<int64_t> submitted{0}, finished{0}, failed{0}, retried{0};
};

}  // namespace troupe
