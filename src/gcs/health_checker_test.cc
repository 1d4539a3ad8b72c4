#include "src/gcs/health_checker.h"

#include <deque>

#include "gtest/gtest.h"

namespace troupe {
namespace {

// Records probes and lets the test answer them.
class FakeNodeProber : public NodeProber {
 public:
  void Probe(const NodeId& node_id, const std::string& address, absl::Duration timeout,
             std::function<void(absl::Status)> done) override {
    pending.push_back({node_id, std::move(done)});
  }
  // Answers every pending probe with `status`; returns how many there were.
  size_t AnswerAll(const absl::Status& status) {
    auto probes = std::move(pending);
    pending.clear();
    for (auto& probe : probes) probe.second(status);
    return probes.size();
  }
  std::deque<std::pair<NodeId, std::function<void(absl::Status)>>> pending;
};

class HealthCheckerTest : public ::testing::Test {
 protected:
  HealthCheckerTest()
      : checker_(HealthCheckOptions{absl::Seconds(1), absl::Seconds(1), 3}, &clock_, &prober_,
                 [this](const NodeId& id, const std::string& reason) {
                   dead_.push_back(id);
                   last_reason_ = reason;
                 }) {}

  // Advances one period and answers the probes sent.
  size_t Round(const absl::Status& status) {
    clock_.Advance(absl::Seconds(1));
    checker_.Tick();
    return prober_.AnswerAll(status);
  }

  FakeClock clock_;
  FakeNodeProber prober_;
  std::vector<NodeId> dead_;
  std::string last_reason_;
  HealthChecker checker_;
};

TEST_F(HealthCheckerTest, ProbesOncePerPeriod) {
  checker_.AddNode(NodeId::FromRandom(), "127.0.0.1:1");
  checker_.Tick();
  EXPECT_EQ(prober_.pending.size(), 0u);  // first probe is one period after joining
  clock_.Advance(absl::Milliseconds(999));
  checker_.Tick();
  EXPECT_EQ(prober_.pending.size(), 0u);
  clock_.Advance(absl::Milliseconds(1));
  checker_.Tick();
  checker_.Tick();
  EXPECT_EQ(prober_.pending.size(), 1u);  // no second probe while one is in flight
}

TEST_F(HealthCheckerTest, DeadAfterThresholdConsecutiveFailures) {
  NodeId node = NodeId::FromRandom();
  checker_.AddNode(node, "127.0.0.1:1");
  EXPECT_EQ(Round(absl::UnavailableError("refused")), 1u);
  EXPECT_EQ(Round(absl::UnavailableError("refused")), 1u);
  EXPECT_TRUE(dead_.empty());
  EXPECT_EQ(Round(absl::UnavailableError("refused")), 1u);
  ASSERT_EQ(dead_.size(), 1u);
  EXPECT_EQ(dead_[0], node);
  EXPECT_NE(last_reason_.find("3 times in a row"), std::string::npos);
  EXPECT_NE(last_reason_.find("refused"), std::string::npos);
  EXPECT_EQ(checker_.num_nodes(), 0u);
  EXPECT_EQ(Round(absl::OkStatus()), 0u);  // a dead node is no longer probed
}

TEST_F(HealthCheckerTest, SuccessResetsTheFailureCount) {
  checker_.AddNode(NodeId::FromRandom(), "127.0.0.1:1");
  Round(absl::UnavailableError("x"));
  Round(absl::UnavailableError("x"));
  Round(absl::OkStatus());
  Round(absl::UnavailableError("x"));
  Round(absl::UnavailableError("x"));
  EXPECT_TRUE(dead_.empty());
}

TEST_F(HealthCheckerTest, ResultForARemovedNodeIsIgnored) {
  NodeId node = NodeId::FromRandom();
  checker_.AddNode(node, "127.0.0.1:1");
  Round(absl::UnavailableError("x"));
  Round(absl::UnavailableError("x"));
  clock_.Advance(absl::Seconds(1));
  checker_.Tick();
  checker_.RemoveNode(node);  // unregistered while the third probe is out
  prober_.AnswerAll(absl::UnavailableError("x"));
  EXPECT_TRUE(dead_.empty());
}

TEST_F(HealthCheckerTest, DetectionTimeWithDefaultsIsUnderFiveSeconds) {
  // A killed raylet refuses connections: every probe fails at once.
  checker_.AddNode(NodeId::FromRandom(), "127.0.0.1:1");
  absl::Time start = clock_.Now();
  while (dead_.empty()) Round(absl::UnavailableError("refused"));
  EXPECT_LE(clock_.Now() - start, absl::Seconds(5));
}

TEST_F(HealthCheckerTest, ANodeHeardFromIsProbedOnlyEveryTenthPeriod) {
  NodeId node = NodeId::FromRandom();
  checker_.AddNode(node, "127.0.0.1:1");
  int probes = 0;
  for (int period = 0; period < 20; ++period) {
    clock_.Advance(absl::Milliseconds(500));
    checker_.OnNodeHeard(node);  // its report arrived mid-period
    clock_.Advance(absl::Milliseconds(500));
    checker_.Tick();
    probes += static_cast<int>(prober_.AnswerAll(absl::OkStatus()));
  }
  EXPECT_EQ(probes, 2);  // the GCS's path to the raylet is still checked now and then
}

TEST_F(HealthCheckerTest, ANodeThatFallsSilentIsDeadThreePeriodsAfterItsLastReport) {
  NodeId node = NodeId::FromRandom();
  checker_.AddNode(node, "127.0.0.1:1");
  clock_.Advance(absl::Milliseconds(900));
  checker_.OnNodeHeard(node);  // its last report; then it is SIGKILLed
  clock_.Advance(absl::Milliseconds(100));
  checker_.Tick();
  EXPECT_EQ(prober_.AnswerAll(absl::OkStatus()), 0u);  // heard 100 ms ago: skipped
  // Probed one period after its last report, not one period after the skip.
  clock_.Advance(absl::Milliseconds(900));
  checker_.Tick();
  EXPECT_EQ(prober_.AnswerAll(absl::UnavailableError("refused")), 1u);
  EXPECT_EQ(Round(absl::UnavailableError("refused")), 1u);
  EXPECT_EQ(Round(absl::UnavailableError("refused")), 1u);
  ASSERT_EQ(dead_.size(), 1u);  // 3 s after its last report: within 3 s of a SIGKILL
  EXPECT_EQ(dead_[0], node);
}

TEST_F(HealthCheckerTest, AReportClearsFailedProbes) {
  NodeId node = NodeId::FromRandom();
  checker_.AddNode(node, "127.0.0.1:1");
  EXPECT_EQ(Round(absl::DeadlineExceededError("slow")), 1u);
  EXPECT_EQ(Round(absl::DeadlineExceededError("slow")), 1u);
  checker_.OnNodeHeard(node);  // its reports get through: alive
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Round(absl::DeadlineExceededError("slow")), 1u);
  EXPECT_EQ(Round(absl::DeadlineExceededError("slow")), 1u);
  EXPECT_TRUE(dead_.empty());  // two failures since it was last heard from
  EXPECT_EQ(Round(absl::DeadlineExceededError("slow")), 1u);
  EXPECT_EQ(dead_.size(), 1u);
}

}  // namespace
}  // namespace troupe
