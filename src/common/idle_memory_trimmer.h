// Gives a daemon's free heap memory back to the operating system once a burst of work is over.
//
// glibc keeps memory freed after a burst (an actor ramp, a placement-group storm) in its malloc
// arenas: the GCS held ~6 MiB free of ~12 MiB after 50 actors were created and killed. It
// returns an arena's top to the kernel only past a threshold that grows with the largest block
// ever freed, and never the free pages inside an arena. `malloc_trim(0)` returns both, but it
// walks and locks every arena: it belongs on a timer thread while the process is quiet, never on
// a request path.
//
// IdleMemoryTrimmer decides when. Its owner calls Tick on its own timer with a counter of the
// work done so far (e.g. RPCs answered). After the counter moved by more than
// `busy_events_per_tick` in a tick (a burst; start-up counts as one), the trimmer waits until
// `quiet_for` has passed with at most that much movement per tick, then asks how much free
// memory is held and, at `min_free_bytes` or more, trims once. Nothing more happens until the
// next burst: a steady trickle (periodic reports) never trims, and a busy daemon never does.
//
// Owned by the daemon (GcsServer); not thread-safe: Tick from one thread (the owner's timer).
#pragma once

#include <cstdint>
#include <functional>

#include "absl/time/time.h"

namespace troupe {

struct IdleMemoryTrimmerOptions {
  // Quiet this long (no tick busier than busy_events_per_tick) before a trim.
  absl::Duration quiet_for = absl::Seconds(1);
  // More events than this between two ticks is work, not background chatter (at the GCS's
  // 100 ms tick: 200 RPCs a second; one raylet's reports and a few hundred idle workers' polls
  // stay below it).
  int64_t busy_events_per_tick = 20;
  // Below this much free heap a trim is not worth the arena walk.
  int64_t min_free_bytes = int64_t{1} << 20;
};

class IdleMemoryTrimmer {
 public:
  // `free_bytes` says how much free memory the allocator holds; `trim` returns it to the OS.
  // Both are called only from Tick, only when quiet after a burst.
  IdleMemoryTrimmer(IdleMemoryTrimmerOptions options, std::function<int64_t()> free_bytes,
                    std::function<void()> trim);

  // The allocator's real hooks: mallinfo2().fordblks and malloc_trim(0) (glibc).
  static IdleMemoryTrimmer ForMalloc(IdleMemoryTrimmerOptions options = {});

  // `events`: the owner's monotonically growing work counter. Returns true when it trimmed.
  bool Tick(absl::Time now, uint64_t events);

  int64_t trims() const { return trims_; }

 private:
  const IdleMemoryTrimmerOptions options_;
  std::function<int64_t()> free_bytes_;
  std::function<void()> trim_;
  bool started_ = false;
  uint64_t last_events_ = 0;
  bool burst_pending_ = true;  // start-up is a burst: its scratch memory is freed by now
  absl::Time quiet_since_ = absl::InfinitePast();
  int64_t trims_ = 0;
};

}  // namespace troupe
