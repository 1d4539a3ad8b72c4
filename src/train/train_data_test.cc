#include "troupe/train_data.h"

#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace troupe::train {
namespace {

// Members (by id) train an epoch with one ElasticSampler each. `changes` maps a step number to
// the ranks (of that step's membership) lost during it. Returns how often each sample was
// committed: trained on by a member whose step committed.
std::map<int64_t, int> RunEpoch(int64_t size, int64_t batch, int members,
                                const std::map<int, std::vector<int>>& changes,
                                int64_t* committed_on_rank0 = nullptr) {
  std::vector<ElasticSampler> samplers(members, ElasticSampler(size, batch, true, 5));
  std::vector<int> alive(members);  // member ids by rank
  for (int m = 0; m < members; ++m) alive[m] = m;
  for (auto& sampler : samplers) sampler.SetEpoch(3);
  std::map<int64_t, int> seen;
  for (int step = 0; !samplers[alive[0]].Done(); ++step) {
    const int world = static_cast<int>(alive.size());
    std::vector<std::vector<int64_t>> slices(world);
    for (int rank = 0; rank < world; ++rank) slices[rank] = samplers[alive[rank]].Next(rank, world);
    std::vector<int> lost;
    if (auto it = changes.find(step); it != changes.end()) lost = it->second;
    std::vector<int> survivors;
    for (int rank = 0; rank < world; ++rank) {
      if (std::find(lost.begin(), lost.end(), rank) != lost.end()) continue;
      survivors.push_back(alive[rank]);
      for (int64_t sample : slices[rank]) ++seen[sample];
      samplers[alive[rank]].Commit(lost);
    }
    alive = survivors;
    // Every survivor agrees on where the epoch stands.
    for (int id : alive) {
      EXPECT_EQ(samplers[id].remaining(), samplers[alive[0]].remaining()) << "step " << step;
      EXPECT_EQ(samplers[id].Done(), samplers[alive[0]].Done()) << "step " << step;
    }
    if (step > 10000) {
      ADD_FAILURE() << "the epoch never ends";
      break;
    }
  }
  if (committed_on_rank0) *committed_on_rank0 = samplers[alive[0]].committed();
  return seen;
}

void ExpectEachSampleOnce(const std::map<int64_t, int>& seen, int64_t size) {
  EXPECT_EQ(static_cast<int64_t>(seen.size()), size) << "samples never trained on";
  for (const auto& [sample, count] : seen) {
    EXPECT_GE(sample, 0);
    EXPECT_LT(sample, size);
    EXPECT_EQ(count, 1) << "sample " << sample << " trained on " << count << " times";
  }
}

TEST(ElasticSamplerTest, WithoutChangesEverySampleOnce) {
  int64_t committed = 0;
  ExpectEachSampleOnce(RunEpoch(1001, 7, 4, {}, &committed), 1001);
  EXPECT_EQ(committed, 1001);
}

TEST(ElasticSamplerTest, OneMemberLostMidEpochEverySampleOnce) {
  int64_t committed = 0;
  ExpectEachSampleOnce(RunEpoch(1001, 7, 4, {{5, {2}}}, &committed), 1001);
  EXPECT_EQ(committed, 1001);
}

TEST(ElasticSamplerTest, TwoChangesOneOfTwoMembersAtOnceEverySampleOnce) {
  ExpectEachSampleOnce(RunEpoch(1001, 7, 4, {{3, {0}}, {9, {0, 2}}}, nullptr), 1001);
  // A loss in the epoch's short last step, and one in the very first.
  ExpectEachSampleOnce(RunEpoch(50, 4, 3, {{0, {1}}, {6, {0}}}, nullptr), 50);
}

TEST(ElasticSamplerTest, LostSlicesAreTrainedOnLaterNotDropped) {
  ElasticSampler a(100, 10, false), b(100, 10, false);
  std::vector<int64_t> a0 = a.Next(0, 2), b0 = b.Next(1, 2);
  EXPECT_EQ(a0.front(), 0);
  EXPECT_EQ(b0.front(), 10);
  a.Commit({1});  // rank 1 (b) was lost mid-step: its slice 10..19 comes back first
  EXPECT_EQ(a.last_committed(), a0);
  std::vector<int64_t> next = a.Next(0, 1);
  ASSERT_EQ(next.size(), 10u);
  EXPECT_EQ(next.front(), 10);
  EXPECT_EQ(next.back(), 19);
  EXPECT_EQ(a.committed(), 10);
}

// Replacements: a newcomer's sampler takes a member's State() between steps (after a loss put a
// slice back) and the group, one larger, finishes the epoch: every sample exactly once, on the
// newcomer's account too, and the first SetEpoch naming that epoch keeps the received position.
TEST(ElasticSamplerTest, ANewcomerRestoredMidEpochEverySampleOnce) {
  const int64_t size = 203;
  std::vector<ElasticSampler> members(2, ElasticSampler(size, 5, true, 3));
  std::map<int64_t, int> seen;
  auto commit_all = [&](std::vector<ElasticSampler>& group, const std::vector<int>& lost) {
    for (auto& sampler : group) sampler.Commit(lost);
    for (int64_t sample : group[0].last_committed()) ++seen[sample];
  };
  for (int step = 0; step < 4; ++step) {  // a few steps, the last losing rank 1's slice
    for (int r = 0; r < 2; ++r) members[r].Next(r, 2);
    commit_all(members, step == 3 ? std::vector<int>{1} : std::vector<int>{});
  }
  members.pop_back();  // rank 1 is gone; one survivor
  ElasticSampler newcomer(size, 5, true, 3);
  newcomer.Restore(members[0].State());
  newcomer.SetEpoch(0);  // the loop's SetEpoch: keeps the position
  EXPECT_EQ(newcomer.committed(), members[0].committed());
  EXPECT_EQ(newcomer.steps(), 4);
  EXPECT_EQ(newcomer.State(), members[0].State());
  members.push_back(newcomer);
  while (!members[0].Done()) {
    for (int r = 0; r < 2; ++r) members[r].Next(r, 2);
    commit_all(members, {});
    EXPECT_EQ(members[1].last_committed(), members[0].last_committed());
    EXPECT_EQ(members[1].Done(), members[0].Done());
  }
  ExpectEachSampleOnce(seen, size);
  EXPECT_EQ(members[1].committed(), size);
  members[1].SetEpoch(1);  // a later epoch starts afresh
  EXPECT_EQ(members[1].committed(), 0);
  EXPECT_THROW(newcomer.Restore({1, 2}), std::invalid_argument);
}

TEST(ElasticSamplerTest, MisuseIsAClearError) {
  ElasticSampler sampler(10, 2);
  EXPECT_THROW(sampler.Commit(), std::logic_error);  // no step
  sampler.Next(0, 1);
  EXPECT_THROW(sampler.Next(0, 1), std::logic_error);  // the step was not committed
  // Commit() wants exactly one SynchronizeGradients since Next(): none ran here.
  ElasticSampler in_loop(10, 2);
  in_loop.Next();
  EXPECT_THROW(in_loop.Commit(), std::logic_error);
  EXPECT_THROW(ElasticSampler(10, 0), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::train
