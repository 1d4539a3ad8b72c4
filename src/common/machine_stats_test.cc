#include "src/common/machine_stats.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(MachineStatsTest, ProcStatsFirstLineGivesBusyAndTotal) {
  auto times = ParseProcStat("cpu  100 5 50 800 20 3 2 1 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n");
  ASSERT_TRUE(times.has_value());
  EXPECT_EQ(times->busy, 100 + 5 + 50 + 3 + 2 + 1);
  EXPECT_EQ(times->total, times->busy + 800 + 20);
  EXPECT_FALSE(ParseProcStat("").has_value());
  EXPECT_FALSE(ParseProcStat("cpu0 1 2 3 4\n").has_value());
  EXPECT_FALSE(ParseProcStat("cpu  1 2 x 4\n").has_value());
}

TEST(MachineStatsTest, CpuPercentIsTheBusyShareBetweenTwoReadings) {
  EXPECT_DOUBLE_EQ(CpuPercent({100, 1000}, {150, 1100}), 50.0);
  EXPECT_DOUBLE_EQ(CpuPercent({100, 1000}, {100, 1000}), 0.0);  // no time passed
  EXPECT_DOUBLE_EQ(CpuPercent({100, 1000}, {90, 1100}), 0.0);   // a counter went back
}

TEST(MachineStatsTest, MeminfoUsedIsTotalLessAvailable) {
  auto use = ParseMeminfo("MemTotal:       2000 kB\nMemFree:         100 kB\nMemAvailable:    500 kB\n");
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->total_bytes, 2000 * 1024);
  EXPECT_EQ(use->used_bytes, 1500 * 1024);
  EXPECT_FALSE(ParseMeminfo("MemTotal: 2000 kB\n").has_value());
  EXPECT_FALSE(ParseMeminfo("MemTotal: 2000 kB\nMemAvailable: 3000 kB\n").has_value());
}

TEST(MachineStatsTest, ThisMachineCanBeRead) {
  auto times = ReadCpuTimes();
  auto memory = ReadMemoryUse();
  ASSERT_TRUE(times.has_value());
  ASSERT_TRUE(memory.has_value());
  EXPECT_GT(times->total, 0);
  EXPECT_GT(memory->total_bytes, 0);
}

}  // namespace
}  // namespace troupe
