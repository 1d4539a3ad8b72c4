#include "src/http/train_runs_view.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "src/train/run_record.h"
#include "src/train/run_record_testing.h"

namespace troupe::http {
namespace {

using nlohmann::json;

TEST(TrainRunsViewTest, RecordsRoundTripNewestFirst) {
  train::RunRecord old_run = train::TestRunRecord("mnist", 1000);
  old_run.status = "FINISHED";
  old_run.end_time_ms = 5000;
  old_run.metrics = {{{"epoch", 1}, {"accuracy", 0.5}, {"images_per_s", 900}},
                     {{"epoch", 2}, {"accuracy", 0.75}, {"loss", std::nan("")}}};
  old_run.checkpoints = {{"/tmp/r/checkpoint_2", {{"epoch", 2}, {"accuracy", 0.75}}}};
  train::RunRecord new_run = train::TestRunRecord("mnist", 2000);

  json runs = TrainRunsJson({train::RunRecordJson(old_run), train::RunRecordJson(new_run)});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["run_id"], new_run.run_id);
  EXPECT_EQ(runs[0]["status"], "RUNNING");
  EXPECT_EQ(runs[0]["end_time_ms"], 0);
  const json& done = runs[1];
  EXPECT_EQ(done["run_id"], old_run.run_id);
  EXPECT_EQ(done["status"], "FINISHED");
  EXPECT_EQ(done["strategy"], "SPREAD");
  EXPECT_EQ(done["resources_per_worker"]["CPU"], 1.0);
  ASSERT_EQ(done["workers"].size(), 2u);
  EXPECT_EQ(done["workers"][1]["rank"], 1);
  EXPECT_EQ(done["workers"][1]["node_id"], "bb02");
  EXPECT_EQ(done["workers"][1]["gpu"], -1);
  ASSERT_EQ(done["metrics"].size(), 2u);
  EXPECT_EQ(done["metrics"][1]["accuracy"], 0.75);
  EXPECT_TRUE(done["metrics"][1]["loss"].is_null());  // NaN is not JSON
  ASSERT_EQ(done["checkpoints"].size(), 1u);
  EXPECT_EQ(done["checkpoints"][0]["path"], "/tmp/r/checkpoint_2");
  EXPECT_EQ(done["checkpoints"][0]["metrics"]["epoch"], 2.0);
}

// Issue 33: an elastic run's membership changes reach the dashboard's record.
TEST(TrainRunsViewTest, MembershipChangesAreInTheRecord) {
  train::RunRecord record = train::TestRunRecord("elastic", 1);
  record.min_workers = 2;
  record.max_workers = 4;
  const train::MembershipEvent left = train::TestRankLeftEvent();
  record.membership = {left};
  json runs = TrainRunsJson({train::RunRecordJson(record)});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["min_workers"], 2);
  EXPECT_EQ(runs[0]["max_workers"], 4);
  ASSERT_EQ(runs[0]["membership"].size(), 1u);
  const json& change = runs[0]["membership"][0];
  EXPECT_EQ(change["generation"], 2);
  EXPECT_EQ(change["change"], "left");
  EXPECT_EQ(change["why"], "died");
  EXPECT_EQ(change["ranks"], json::array({2}));
  EXPECT_EQ(change["world_size"], 3);
  EXPECT_EQ(change["step"], 41);
  EXPECT_EQ(change["time_ms"], 1234);
  EXPECT_EQ(change["recovery_s"], 0.25);
  EXPECT_EQ(change["detail"], left.detail);
}

TEST(TrainRunsViewTest, BadRecordsAreSkippedAndTheListIsCapped) {
  std::vector<std::string> records = {"not json", "[1,2]", R"({"name": "no id"})",
                                      R"({"run_id": 7})", R"({"run_id": "ok"})"};
  json runs = TrainRunsJson(records);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["run_id"], "ok");

  records.clear();
  for (int i = 0; i < 150; ++i) {
    records.push_back(train::RunRecordJson(train::TestRunRecord("r", i)));
  }
  runs = TrainRunsJson(records);
  ASSERT_EQ(runs.size(), kMaxTrainRuns);
  EXPECT_EQ(runs[0]["start_time_ms"], 149);
}

TEST(TrainRunsViewTest, ARecordKeepsTheLastReportsOnly) {
  train::RunRecord record = train::TestRunRecord("long", 1);
  for (size_t i = 0; i < train::kMaxRecordedReports + 5; ++i) {
    record.metrics.push_back({{"epoch", static_cast<double>(i + 1)}});
  }
  json run = json::parse(train::RunRecordJson(record));
  ASSERT_EQ(run["metrics"].size(), train::kMaxRecordedReports);
  EXPECT_EQ(run["metrics"][0]["epoch"], 6.0);
}

}  // namespace
}  // namespace troupe::http
