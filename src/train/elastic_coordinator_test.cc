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
    std::vector<int> members, left, joined;
  };
  std::vector<Declared> declared;
  std::vector<int> killed;
  std::vector<int64_t> proposed;  // generations a join was proposed to

  ElasticCoordinator::Cluster Calls() {
    return {[this](int64_t generation, const std::vector<int>& members,
                   const std::vector<int>& left, const std::vector<int>& joined) {
              declared.push_back({generation, members, left, joined});
            },
            [this](int worker) { killed.push_back(worker); },
            [this](int64_t generation) { proposed.push_back(generation); }};
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
  ElasticCoordinator coordinator(4, 2, 0, cluster.Calls());
  coordinator.Start();
  ASSERT_EQ(cluster.declared.size(), 1u);
  EXPECT_EQ(cluster.declared[0].generation, 1);
  EXPECT_EQ(cluster.declared[0].members, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(cluster.declared[0].left.empty());
  EXPECT_EQ(coordinator.generation(), 1);
}

TEST(ElasticCoordinatorTest, AMemberLeavingMidStepMakesTheNextGenerationOfTheSurvivors) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(4, 2, 0, cluster.Calls());
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
  ElasticCoordinator coordinator(4, 2, 0, cluster.Calls());
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
  ElasticCoordinator coordinator(3, 1, 0, cluster.Calls());
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
  ElasticCoordinator coordinator(3, 2, 0, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Died(1)}, &event), Verdict::kContinue);
  EXPECT_EQ(coordinator.OnFailures({Reported(2, 0)}, &event), Verdict::kBelowMinimum);
  EXPECT_EQ(cluster.declared.size(), 2u) << "no generation below min_workers";
  EXPECT_EQ(event.change, "restart");
  EXPECT_EQ(event.world_size, 1);
  EXPECT_EQ(cluster.killed, (std::vector<int>{1, 0}));
}

// Replacements (issue 33): a worker lost with max_workers == num_workers leaves a vacancy; the
// replacement started for it joins only once the members answer from a step boundary.
TEST(ElasticCoordinatorTest, AReplacementJoinsOnlyAtTheStepBoundary) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(3, 2, 3, cluster.Calls());
  coordinator.Start();
  EXPECT_EQ(coordinator.Vacancies(), 0) << "full: nothing to replace";
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Died(1)}, &event), Verdict::kContinue);
  ASSERT_EQ(coordinator.Vacancies(), 1);
  coordinator.OnReplacementStarted(3);
  EXPECT_EQ(coordinator.Vacancies(), 0) << "one is on its way";
  EXPECT_TRUE(cluster.proposed.empty()) << "not ready yet: nothing to propose";
  // Ready while the members are in a step: a proposal, but no generation yet.
  coordinator.OnReady(3, 500);
  EXPECT_EQ(cluster.proposed, (std::vector<int64_t>{2}));
  EXPECT_EQ(cluster.declared.size(), 2u) << "no generation before the boundary";
  EXPECT_EQ(coordinator.members(), (std::vector<int>{0, 2}));
  coordinator.OnReady(3, 600);  // said twice: one proposal
  EXPECT_EQ(cluster.proposed.size(), 1u);
  // The members answer from the boundary after step 9.
  ASSERT_EQ(coordinator.OnBoundary(2, 9, &event), Verdict::kJoined);
  ASSERT_EQ(cluster.declared.size(), 3u);
  EXPECT_EQ(cluster.declared[2].generation, 3);
  EXPECT_EQ(cluster.declared[2].members, (std::vector<int>{0, 2, 3})) << "the newcomer is last";
  EXPECT_TRUE(cluster.declared[2].left.empty());
  EXPECT_EQ(cluster.declared[2].joined, (std::vector<int>{3}));
  EXPECT_EQ(event.change, "joined");
  EXPECT_EQ(event.why, "replacement");
  EXPECT_EQ(event.generation, 3);
  EXPECT_EQ(event.ranks, (std::vector<int>{2}));
  EXPECT_EQ(event.world_size, 3);
  EXPECT_EQ(event.step, 9);
  EXPECT_EQ(event.time_ms, 500) << "timed from the join request";
  EXPECT_EQ(coordinator.Vacancies(), 0);
  EXPECT_TRUE(coordinator.waiting().empty());
  // The replacement is a member like the others: its failure makes the next generation.
  ASSERT_EQ(coordinator.OnFailures({Reported(3, 2)}, &event), Verdict::kContinue);
  EXPECT_EQ(cluster.declared.back().members, (std::vector<int>{0, 2}));
}

TEST(ElasticCoordinatorTest, StaleBoundaryAnswersAreRefused) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(2, 1, 3, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  EXPECT_EQ(coordinator.Vacancies(), 1) << "max_workers above num_workers: one from the start";
  EXPECT_EQ(coordinator.OnBoundary(1, 3, &event), Verdict::kUnchanged) << "nothing proposed";
  coordinator.OnReplacementStarted(2);
  coordinator.OnReady(2, 100);
  ASSERT_EQ(cluster.proposed, (std::vector<int64_t>{1}));
  EXPECT_EQ(coordinator.OnBoundary(0, 3, &event), Verdict::kUnchanged) << "an older generation";
  EXPECT_EQ(cluster.declared.size(), 1u);
  ASSERT_EQ(coordinator.OnBoundary(1, 3, &event), Verdict::kJoined);
  EXPECT_EQ(coordinator.OnBoundary(1, 3, &event), Verdict::kUnchanged) << "answered already";
  EXPECT_EQ(cluster.declared.size(), 2u);
  EXPECT_EQ(coordinator.members(), (std::vector<int>{0, 1, 2}));
}

// A member leaves while a join is proposed: the leave makes a generation of its own, the
// proposal to the old generation is void (its boundary answer is stale) and is made again to the
// new one, whose boundary then adds the replacement.
TEST(ElasticCoordinatorTest, AJoinDuringALeaveIsProposedAgainToTheNewGeneration) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(3, 1, 3, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Died(2)}, &event), Verdict::kContinue);  // generation 2
  coordinator.OnReplacementStarted(3);
  coordinator.OnReady(3, 10);
  ASSERT_EQ(cluster.proposed, (std::vector<int64_t>{2}));
  ASSERT_EQ(coordinator.OnFailures({Reported(2, 0)}, &event), Verdict::kContinue);
  EXPECT_EQ(cluster.declared.back().generation, 3);
  EXPECT_EQ(cluster.declared.back().members, (std::vector<int>{1})) << "the leave alone";
  EXPECT_EQ(cluster.proposed, (std::vector<int64_t>{2, 3})) << "proposed again";
  EXPECT_EQ(coordinator.OnBoundary(2, 5, &event), Verdict::kUnchanged) << "stale";
  ASSERT_EQ(coordinator.OnBoundary(3, 5, &event), Verdict::kJoined);
  EXPECT_EQ(cluster.declared.back().members, (std::vector<int>{1, 3}));
  EXPECT_EQ(event.ranks, (std::vector<int>{1}));
}

TEST(ElasticCoordinatorTest, TwoReplacementsReadyAtOnceJoinInOneGeneration) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(4, 2, 4, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Died(0), Died(2)}, &event), Verdict::kContinue);
  ASSERT_EQ(coordinator.Vacancies(), 2);
  coordinator.OnReplacementStarted(4);
  coordinator.OnReplacementStarted(5);
  coordinator.OnReady(5, 70);
  coordinator.OnReady(4, 80);
  EXPECT_EQ(cluster.proposed.size(), 1u);
  ASSERT_EQ(coordinator.OnBoundary(2, 4, &event), Verdict::kJoined);
  EXPECT_EQ(cluster.declared.back().members, (std::vector<int>{1, 3, 4, 5}));
  EXPECT_EQ(cluster.declared.back().joined, (std::vector<int>{4, 5}));
  EXPECT_EQ(event.ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(event.time_ms, 70);
}

// A replacement that dies before it joins is withdrawn: its vacancy opens again, and a boundary
// answer with no replacement left releases the members with a generation of the same members.
TEST(ElasticCoordinatorTest, AReplacementLostBeforeItJoinsIsWithdrawn) {
  FakeCluster cluster;
  ElasticCoordinator coordinator(2, 1, 2, cluster.Calls());
  coordinator.Start();
  MembershipEvent event;
  ASSERT_EQ(coordinator.OnFailures({Died(1)}, &event), Verdict::kContinue);
  coordinator.OnReplacementStarted(2);
  coordinator.OnReady(2, 10);
  EXPECT_EQ(coordinator.OnFailures({Died(2)}, &event), Verdict::kUnchanged);
  EXPECT_EQ(coordinator.Vacancies(), 1);
  EXPECT_TRUE(cluster.killed == std::vector<int>{1}) << "a non-member is not fenced";
  EXPECT_EQ(coordinator.OnBoundary(2, 3, &event), Verdict::kUnchanged);
  EXPECT_EQ(cluster.declared.back().generation, 3) << "the waiting members are released";
  EXPECT_EQ(cluster.declared.back().members, (std::vector<int>{0}));
  coordinator.OnReady(2, 20);  // withdrawn: ignored
  EXPECT_EQ(cluster.proposed.size(), 1u);
}

}  // namespace
}  // namespace troupe::train::internal
