#include "src/core_worker/periodic_jobs.h"

#include <atomic>
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(PeriodicJobsTest, EachJobRunsAtItsOwnIntervalInTheOrderAdded) {
  FakeClock clock;
  PeriodicJobs jobs(&clock);
  const absl::Time start = clock.Now();
  std::string runs;
  jobs.Add(absl::Seconds(1), [&] { runs += "e"; });  // task events
  jobs.Add(absl::Seconds(2), [&] { runs += "c"; });  // counters
  EXPECT_EQ(jobs.RunDue(start), start + absl::Seconds(1));  // nothing due yet
  EXPECT_EQ(runs, "");
  EXPECT_EQ(jobs.RunDue(start + absl::Seconds(1)), start + absl::Seconds(2));
  EXPECT_EQ(runs, "e");
  EXPECT_EQ(jobs.RunDue(start + absl::Seconds(2)), start + absl::Seconds(3));
  EXPECT_EQ(runs, "eec");
  EXPECT_EQ(jobs.RunDue(start + absl::Seconds(3)), start + absl::Seconds(4));
  EXPECT_EQ(runs, "eece");
}

TEST(PeriodicJobsTest, ALateStepRunsEachDueJobOnceAndKeepsTheIntervalFromThere) {
  FakeClock clock;
  PeriodicJobs jobs(&clock);
  const absl::Time start = clock.Now();
  int runs = 0;
  jobs.Add(absl::Seconds(1), [&] { ++runs; });
  // Ten intervals late (a slow job before it, a descheduled thread): one run, not ten.
  EXPECT_EQ(jobs.RunDue(start + absl::Seconds(10)), start + absl::Seconds(11));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(jobs.RunDue(start + absl::Milliseconds(10500)), start + absl::Seconds(11));
  EXPECT_EQ(runs, 1);
}

TEST(PeriodicJobsTest, NoJobsMeansNothingIsEverDue) {
  FakeClock clock;
  PeriodicJobs jobs(&clock);
  EXPECT_EQ(jobs.RunDue(clock.Now() + absl::Hours(1)), absl::InfiniteFuture());
}

TEST(PeriodicJobsTest, TheThreadRunsDueJobsAndStopEndsIt) {
  RealClock clock;
  PeriodicJobs jobs(&clock);
  std::atomic<int> runs{0};
  absl::Notification ran_twice;
  jobs.Add(absl::Milliseconds(1), [&] {
    if (++runs == 2) ran_twice.Notify();
  });
  jobs.Start();
  jobs.Start();  // once
  ran_twice.WaitForNotification();
  jobs.Stop();
  const int after_stop = runs.load();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(runs.load(), after_stop);  // no run after Stop returned
  jobs.Stop();                         // idempotent
}

}  // namespace
}  // namespace troupe
