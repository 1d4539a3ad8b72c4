#include "src/common/idle_memory_trimmer.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace troupe {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(100);

class TrimmerTest : public ::testing::Test {
 protected:
  IdleMemoryTrimmer Make(IdleMemoryTrimmerOptions options = {}) {
    return IdleMemoryTrimmer(
        options,
        [this] {
          ++free_asks_;
          return free_bytes_;
        },
        [this] { ++trims_; });
  }
  // Ticks `n` times, the counter moving by `per_tick` each time; returns how many trimmed.
  int Run(IdleMemoryTrimmer& trimmer, int n, uint64_t per_tick) {
    int trimmed = 0;
    for (int i = 0; i < n; ++i) {
      now_ += kTick;
      events_ += per_tick;
      trimmed += trimmer.Tick(now_, events_);
    }
    return trimmed;
  }

  absl::Time now_ = absl::UnixEpoch();
  uint64_t events_ = 1000;
  int64_t free_bytes_ = 8 << 20;
  int free_asks_ = 0;
  int trims_ = 0;
};

TEST_F(TrimmerTest, StartUpCountsAsABurstAndTrimsOnceWhenQuiet) {
  auto trimmer = Make();
  EXPECT_EQ(Run(trimmer, 9, 0), 0);    // 0.9 s quiet: not yet
  EXPECT_EQ(Run(trimmer, 2, 0), 1);    // past 1 s
  EXPECT_EQ(Run(trimmer, 100, 0), 0);  // still quiet: nothing new to give back
  EXPECT_EQ(trims_, 1);
  EXPECT_EQ(trimmer.trims(), 1);
}

TEST_F(TrimmerTest, NeverTrimsWhileBusy) {
  auto trimmer = Make();
  EXPECT_EQ(Run(trimmer, 600, 50), 0);  // a minute of 500 events/s
  EXPECT_EQ(trims_, 0);
  EXPECT_EQ(free_asks_, 0);  // not even the allocator walk
}

TEST_F(TrimmerTest, TrimsOnceAfterEachBurst) {
  auto trimmer = Make();
  Run(trimmer, 20, 0);  // the start-up trim
  ASSERT_EQ(trims_, 1);
  Run(trimmer, 30, 100);  // a burst
  EXPECT_EQ(trims_, 1);
  EXPECT_EQ(Run(trimmer, 20, 0), 1);
  Run(trimmer, 3, 100);  // another
  EXPECT_EQ(Run(trimmer, 20, 0), 1);
  EXPECT_EQ(trims_, 3);
}

TEST_F(TrimmerTest, BackgroundChatterIsQuiet) {
  IdleMemoryTrimmerOptions options;
  options.busy_events_per_tick = 5;
  auto trimmer = Make(options);
  Run(trimmer, 20, 1);  // reports and health checks: at most a few per tick
  EXPECT_EQ(trims_, 1);
  EXPECT_EQ(Run(trimmer, 100, 5), 0);  // at the threshold: still chatter, no new burst
}

TEST_F(TrimmerTest, ABusyTickRestartsTheQuietPeriod) {
  auto trimmer = Make();
  Run(trimmer, 8, 0);
  Run(trimmer, 1, 100);
  EXPECT_EQ(Run(trimmer, 9, 0), 0);  // 0.9 s since the busy tick
  EXPECT_EQ(Run(trimmer, 2, 0), 1);
}

TEST_F(TrimmerTest, LittleFreeMemoryIsLeftAloneAndAskedOncePerBurst) {
  free_bytes_ = 100 << 10;
  auto trimmer = Make();
  EXPECT_EQ(Run(trimmer, 50, 0), 0);
  EXPECT_EQ(trims_, 0);
  EXPECT_EQ(free_asks_, 1);
  Run(trimmer, 2, 100);
  Run(trimmer, 50, 0);
  EXPECT_EQ(free_asks_, 2);
}

int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

// The real hooks: 32 MiB freed in 64 KiB holes between live blocks stays resident (glibc cannot
// shrink the heap past the live blocks) until the trimmer gives the holes' pages back.
TEST(IdleMemoryTrimmerMalloc, GivesFreedHolesBackToTheSystem) {
  if (ResidentBytes() < 0) GTEST_SKIP() << "no /proc/self/statm here";
  constexpr size_t kBlock = 64 << 10;  // below glibc's mmap threshold: from the heap
  std::vector<char*> blocks(1024);
  for (auto& block : blocks) {
    block = static_cast<char*>(malloc(kBlock));
    std::memset(block, 1, kBlock);
  }
  for (size_t i = 0; i < blocks.size(); i += 2) free(blocks[i]);
  const int64_t before = ResidentBytes();

  auto trimmer = IdleMemoryTrimmer::ForMalloc();
  absl::Time now = absl::UnixEpoch();
  bool trimmed = false;
  for (int i = 0; i < 20; ++i) trimmed |= trimmer.Tick(now += kTick, 0);
  const int64_t after = ResidentBytes();
  for (size_t i = 1; i < blocks.size(); i += 2) free(blocks[i]);

  EXPECT_TRUE(trimmed);
  EXPECT_GT(before - after, int64_t{16} << 20) << "before " << before << " after " << after;
}

}  // namespace
}  // namespace troupe
