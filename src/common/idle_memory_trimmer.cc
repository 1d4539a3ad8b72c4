#include "src/common/idle_memory_trimmer.h"

#include <malloc.h>

#include <utility>

namespace troupe {

IdleMemoryTrimmer::IdleMemoryTrimmer(IdleMemoryTrimmerOptions options,
                                     std::function<int64_t()> free_bytes,
                                     std::function<void()> trim)
    : options_(options), free_bytes_(std::move(free_bytes)), trim_(std::move(trim)) {}

IdleMemoryTrimmer IdleMemoryTrimmer::ForMalloc(IdleMemoryTrimmerOptions options) {
  return IdleMemoryTrimmer(
      options, [] { return static_cast<int64_t>(mallinfo2().fordblks); }, [] { malloc_trim(0); });
}

bool IdleMemoryTrimmer::Tick(absl::Time now, uint64_t events) {
  if (!started_) {  // the first tick only sets the baseline
    started_ = true;
    last_events_ = events;
    quiet_since_ = now;
    return false;
  }
  const uint64_t moved = events - last_events_;
  last_events_ = events;
  if (moved > static_cast<uint64_t>(options_.busy_events_per_tick)) {
    burst_pending_ = true;
    quiet_since_ = now;
    return false;
  }
  if (!burst_pending_ || now - quiet_since_ < options_.quiet_for) return false;
  burst_pending_ = false;  // one look per burst, trimmed or not
  if (free_bytes_() < options_.min_free_bytes) return false;
  trim_();
  ++trims_;
  return true;
}

}  // namespace troupe
