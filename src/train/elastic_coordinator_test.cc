#include "src/train/elastic_coordinator.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troupe::train::internal {
namespace {

using Failure = ElasticCoordinator::Failure;
using Verdict = ElasticCoordinator::Verdict;

// Records what the coordinator asks of the cluster.
struct FakeCluster {
  struct Declared {
    int64_t generation;
    std::vector<int> members, left;
  };
  std::vector<Declared> declared;
  std::vector<int> killed;

  ElasticCoordinator::Cluster Calls() {
    return {
        [this](int64_t generation, const std::vector<int>& members, const std::vector<int>& left) {
          declared.push_back({generation, members, left});
        },
        [this](int worker) { killed.push_back(worker); }};
  }
};

Failure Died(int worker, int64_t time_ms = 100) {
  Failure f;
  f.worker = worker;
  f.why = "died";
  f.detail = "actor died";
  f.time_ms = time_ms;
  return f;
}

Failure Reported(int64_t generation, int rank, int64_t step = 7, int64_t time_ms = 50) {
  Failure f;
  f.generation = generation;
  f.rank = rank;
  f.why = "failed";
  f.detail = "rank " + std::to_string(rank) + " aborted";
  f.step = step;
  f.time_ms = time_ms;
  return f;
}

TEST(ElasticCoordinatorTest, StartDeclaresGenerationOneWithEveryWorker) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(4, 2, cluster.Calls());
  coordinator.Start();
  ASSERT_EQ(cluster.declared.size(), 1u);
  EXPECT_EQ(cluster.declared[0].generation, 1);
  EXPECT_EQ(cluster.declared[0].members, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(cluster.declared[0].left.empty());
  EXPECT_EQ(coordinator.generation(), 1);
}

TEST(ElasticCoordinatorTest, AMemberLeavingMidStepMakesTheNextGenerationOfTheSurvivors) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(4, 2, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  EXPECT_EQ(coordinator.OnFailures({Reported(1, 2)}, &event), Verdict::kContinue);
  ASSERT_EQ(cluster.declared.size(), 2u);
  EXPECT_EQ(cluster.declared[1].generation, 2);
  EXPECT_EQ(cluster.declared[1].members, (std::vector<int>{0, 1, 3}));  // order kept
  EXPECT_EQ(cluster.declared[1].left, (std::vector<int>{2}));
  EXPECT_EQ(cluster.killed, (std::vector<int>{2})) << "fencing: the excluded worker is killed";
  EXPECT_EQ(event.generation, 2);
  EXPECT_EQ(event.change, "left");
  EXPECT_EQ(event.why, "failed");
  EXPECT_EQ(event.ranks, (std::vector<int>{2}));
  EXPECT_EQ(event.world_size, 3);
  EXPECT_EQ(event.step, 7);
  EXPECT_EQ(event.time_ms, 50);
  EXPECT_FALSE(coordinator.IsMember(2));
  // Ranks are renumbered: worker 3 is rank 2 now, and a report of generation 2 names it so.
  EXPECT_EQ(coordinator.OnFailures({Reported(2, 2)}, &event), Verdict::kContinue);
  EXPECT_EQ(cluster.declared.back().members, (std::vector<int>{0, 1}));
  EXPECT_EQ(cluster.killed, (std::vector<int>{2, 3}));
}

TEST(ElasticCoordinatorTest, TwoLeavingAtOnceMakeOneGeneration) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(4, 2, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  // A peer's report about rank 1 and the death of worker 3, seen in one poll; the death of
  // worker 1 too (a death beats the report in saying why).
  EXPECT_EQ(coordinator.OnFailures({Reported(1, 1), Died(3, 40), Died(1, 60)}, &event),
            Verdict::kContinue);
  ASSERT_EQ(cluster.declared.size(), 2u);
  EXPECT_EQ(cluster.declared[1].members, (std::vector<int>{0, 2}));
  EXPECT_EQ(cluster.declared[1].left, (std::vector<int>{1, 3}));
  EXPECT_EQ(event.ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(event.why, "died");
  EXPECT_EQ(event.time_ms, 40) << "the earliest observation";
  EXPECT_EQ(event.world_size, 2);
}

TEST(ElasticCoordinatorTest, StaleObservationsAreRefused) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(3, 1, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Reported(1, 0)}, &event), Verdict::kContinue);
  // The excluded worker's own report (about generation 1) and its death afterwards change
  // nothing; nor does a report naming a rank the generation does not have.
  EXPECT_EQ(coordinator.OnFailures({Reported(1, 1), Died(0), Reported(2, 5)}, &event),
            Verdict::kUnchanged);
  EXPECT_EQ(cluster.declared.size(), 2u);
  EXPECT_EQ(coordinator.members(), (std::vector<int>{1, 2}));
  EXPECT_EQ(coordinator.generation(), 2);
}

TEST(ElasticCoordinatorTest, BelowMinWorkersDeclaresNothingAndSaysRestart) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(3, 2, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Died(1)}, &event), Verdict::kContinue);
  EXPECT_EQ(coordinator.OnFailures({Reported(2, 0)}, &event), Verdict::kBelowMinimum);
  EXPECT_EQ(cluster.declared.size(), 2u) << "no generation below min_workers";
  EXPECT_EQ(event.change, "restart");
  EXPECT_EQ(event.world_size, 1);
  EXPECT_EQ(cluster.killed, (std::vector<int>{1, 0}));
}

}  // namespace
}  // namespace troupe::train::internal
