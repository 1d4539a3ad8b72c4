// The worker actor's Run, without a cluster: how a loop's end is reported to the driver.
#include "src/train/worker.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "troupe/collective.h"
#include "troupe/train.h"

namespace troupe::train::internal {
namespace {

// A member whose group went on without it: its next collective throws ExcludedError.
void ExcludedLoop(const LoopConfig&) {
  throw collective::ExcludedError("excluded: generation 3 leaves it out", "g", "allreduce", 3);
}
TROUPE_TRAIN_LOOP(ExcludedLoop);

void PeerFailedLoop(const LoopConfig&) {
  throw collective::CollectiveError("rank 1 is gone", "g", "allreduce", 1);
}
TROUPE_TRAIN_LOOP(PeerFailedLoop);

// Rank 0 of 2, CPU group, elastic (step timeout 1 s, generation 2), not a replacement.
const std::vector<int64_t> kRanks = {0, 0, 2, 2, 0, 1, 0, 1, 1000, 2, 0, 0, 0};

// Issue 33 (fencing): an excluded member that comes back (SIGCONT, a healed link) never
// contributes again — its collective throws ExcludedError — and its Run then ends cleanly, as
// "excluded" (false), instead of failing as a worker error the driver would act on.
TEST(TrainWorkerTest, AnExcludedMemberEndsCleanly) {
  TrainWorker worker;
  EXPECT_FALSE(worker.Run("ExcludedLoop", {}, kRanks, "g", "e", ""));
}

TEST(TrainWorkerTest, OtherCollectiveErrorsStillEndTheLoopWithTheError) {
  TrainWorker worker;
  EXPECT_THROW(worker.Run("PeerFailedLoop", {}, kRanks, "g", "e", ""), collective::CollectiveError);
}

}  // namespace
}  // namespace troupe::train::internal
