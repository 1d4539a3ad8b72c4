// The worker actor's Run, without a cluster: how a loop's end is reported to the driver.
#include "src/train/worker.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/package.h"
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

// The error that ends the loop, as a CollectiveError ("" when none or another type).
std::optional<collective::CollectiveError> RunError(const std::string& loop,
                                                    const std::vector<int64_t>& ranks) {
  try {
    TrainWorker().Run(loop, {}, ranks, "g", "e", "");
  } catch (const collective::CollectiveError& e) {
    return e;
  } catch (...) {
  }
  return std::nullopt;
}

// Issue 33: a collective of the loop's own on the workers' group is not redone when a member
// fails; the loop ends and the run restarts from its checkpoint. The error says so — that the
// membership changed and what regroups instead — keeping the original message, group and rank.
TEST(TrainWorkerTest, AnElasticLoopsOwnCollectiveFailingSaysWhatRegroups) {
  auto error = RunError("PeerFailedLoop", kRanks);
  ASSERT_TRUE(error.has_value());
  const std::string message = error->what();
  EXPECT_EQ(message.rfind("rank 1 is gone", 0), 0u) << message;
  for (const char* part : {"membership changes", "does not regroup", "SumAcrossWorkers", "Report",
                           "restarts from its checkpoint", "allreduce on group 'g'"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
  EXPECT_EQ(error->rank(), 1);
  EXPECT_EQ(error->group(), "g");
  EXPECT_EQ(error->op(), "allreduce");
  // Not elastic: every failure restarts the run anyway; the error stays as it was.
  std::vector<int64_t> fixed(kRanks.begin(), kRanks.begin() + 7);
  error = RunError("PeerFailedLoop", fixed);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(std::string(error->what()), "rank 1 is gone");
}

// The resume directory the last loop saw (GetCheckpoint), and whether it held the checkpoint.
std::optional<std::string> seen_checkpoint;
bool seen_model = false;
void NoteCheckpoint() {
  seen_checkpoint = GetCheckpoint();
  seen_model = seen_checkpoint && std::filesystem::exists(*seen_checkpoint + "/model.txt");
}
void ResumingLoop(const LoopConfig&) { NoteCheckpoint(); }
TROUPE_TRAIN_LOOP(ResumingLoop);
void ResumingThenFailingLoop(const LoopConfig&) {
  NoteCheckpoint();
  throw std::runtime_error("the loop failed");
}
TROUPE_TRAIN_LOOP(ResumingThenFailingLoop);
void ResumingThenExcludedLoop(const LoopConfig&) {
  NoteCheckpoint();
  ExcludedLoop({});
}
TROUPE_TRAIN_LOOP(ResumingThenExcludedLoop);

// Workers unpack the checkpoint they resume from under $TMPDIR: here, the test's own directory.
class TrainWorkerResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* root = std::getenv("TEST_TMPDIR");
    temp_ = std::filesystem::path(root ? root : ::testing::TempDir()) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(temp_);
    std::filesystem::create_directories(temp_ / "checkpoint");
    std::ofstream(temp_ / "checkpoint" / "model.txt") << "weights";
    setenv("TMPDIR", temp_.c_str(), 1);
    auto packed = PackDirectory((temp_ / "checkpoint").string(), 1 << 20);
    ASSERT_TRUE(packed.ok()) << packed.status();
    package_ = *packed;
    seen_checkpoint.reset();
    seen_model = false;
  }
  void TearDown() override { unsetenv("TMPDIR"); }

  // The troupe-resume-* entries of the temporary directory.
  std::vector<std::string> ResumeDirs() const {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(temp_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("troupe-resume-", 0) == 0) out.push_back(name);
    }
    return out;
  }

  std::filesystem::path temp_;
  std::string package_;
};

// Issue (leaked temporary directories): the unpacked checkpoint stayed in /tmp after every run.
TEST_F(TrainWorkerResumeTest, TheResumeDirectoryIsRemovedWhenTheLoopReturns) {
  TrainWorker worker;
  EXPECT_TRUE(worker.Run("ResumingLoop", {}, kRanks, "g", "e", package_));
  ASSERT_TRUE(seen_checkpoint.has_value());
  EXPECT_TRUE(seen_model) << "the loop did not see the checkpoint in " << *seen_checkpoint;
  EXPECT_EQ(std::filesystem::path(*seen_checkpoint).parent_path(), temp_);
  EXPECT_FALSE(std::filesystem::exists(*seen_checkpoint));
  EXPECT_EQ(GetCheckpoint(), std::nullopt);
  EXPECT_TRUE(ResumeDirs().empty());
}

TEST_F(TrainWorkerResumeTest, TheResumeDirectoryIsRemovedWhenTheLoopFails) {
  TrainWorker worker;
  EXPECT_THROW(worker.Run("ResumingThenFailingLoop", {}, kRanks, "g", "e", package_),
               std::runtime_error);
  ASSERT_TRUE(seen_checkpoint.has_value());
  EXPECT_TRUE(seen_model);
  EXPECT_TRUE(ResumeDirs().empty());
  EXPECT_FALSE(worker.Run("ResumingThenExcludedLoop", {}, kRanks, "g", "e", package_));
  EXPECT_TRUE(seen_model);
  EXPECT_TRUE(ResumeDirs().empty());
}

// A worker SIGKILLed mid-loop (an attempt's workers when it fails, an elastic run restarting from
// its checkpoint) cannot remove its directory: the next worker to run on the machine does. A live
// process's directory stays.
TEST_F(TrainWorkerResumeTest, TheNextRunRemovesTheDirectoriesOfKilledWorkers) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // `child` is now a pid no process holds
  const std::string dead = "troupe-resume-" + std::to_string(child) + "-g-old";
  const std::string alive = "troupe-resume-" + std::to_string(getppid()) + "-g-other";
  std::filesystem::create_directories(temp_ / dead / "nested");
  std::filesystem::create_directories(temp_ / alive);
  std::filesystem::create_directories(temp_ / "troupe-resume-notapid-g");
  TrainWorker worker;
  EXPECT_TRUE(worker.Run("ResumingLoop", {}, kRanks, "g", "e", ""));
  EXPECT_FALSE(std::filesystem::exists(temp_ / dead));
  EXPECT_TRUE(std::filesystem::exists(temp_ / alive));
  EXPECT_TRUE(std::filesystem::exists(temp_ / "troupe-resume-notapid-g"));
}

}  // namespace
}  // namespace troupe::train::internal
