// `troupe train launch` with a real PyTorch DDP script (Debian's python3-torch, gloo backend) on a
// real two-node cluster: torchrun's environment, a DDP training step, output prefixed by rank, a
// failing rank stopping the others (exit status passed through), restarts, usage errors.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "tests/test_cluster.h"

namespace {

using troupe::testing::CommandResult;
using troupe::testing::RunTroupe;
using troupe::testing::TestCluster;

constexpr char kPython[] = "/usr/bin/python3";

// A DDP step: gloo over env:// (MASTER_ADDR/PORT, RANK, WORLD_SIZE), then a check that all
// ranks hold the same weights. MODE=fail_rank1: rank 1 exits 3 at once while rank 0 waits in a
// collective; MODE=fail_once: the first attempt's rank 0 exits 5 (a marker file remembers).
constexpr char kScript[] = R"(
import os, sys, time
import torch, torch.distributed as dist
mode = os.environ.get("MODE", "")
rank = int(os.environ["RANK"])
if mode == "fail_once" and rank == 0 and not os.path.exists(os.environ["MARKER"]):
    open(os.environ["MARKER"], "w").close()
    sys.exit(5)
if mode == "fail_rank1" and rank == 1:
    print("rank 1 giving up", flush=True)
    sys.exit(3)
dist.init_process_group("gloo")
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(16, 8)).pow(2).sum().backward()
opt.step()
w = model.module.weight.detach().clone()
dist.all_reduce(w)
same = torch.allclose(w / dist.get_world_size(), model.module.weight)
print("rank=%s world=%s local_rank=%s local_world=%s node_rank=%s omp=%s same=%s" % (
    rank, os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"],
    os.environ["NODE_RANK"], os.environ["OMP_NUM_THREADS"], same), flush=True)
)";

std::string WriteScript() {
  const std::string path = absl::StrCat(testing::TempDir(), "/ddp_step.py");
  std::ofstream(path) << kScript;
  return path;
}

CommandResult Launch(TestCluster& cluster, std::vector<std::string> flags,
                     const std::vector<std::string>& env = {}) {
  std::vector<std::string> args = {"train", "launch", "--address=" + cluster.gcs_address(),
                                   "--token=" + cluster.token()};
  args.insert(args.end(), flags.begin(), flags.end());
  return RunTroupe(args, env);
}

TEST(TrainLaunchTest, DdpScriptRunsAcrossTwoNodesWithTorchrunEnvironment) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no " << kPython;
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  const std::string script = WriteScript();
  CommandResult result = Launch(cluster, {"--num-workers=2", "--", kPython, script});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  // One rank per node (1 CPU each): node ranks 0 and 1, one local rank each.
  EXPECT_TRUE(absl::StrContains(
      result.out, "[rank 0] rank=0 world=2 local_rank=0 local_world=1 node_rank=0 omp=1 same=True"))
      << result.out;
  EXPECT_TRUE(absl::StrContains(
      result.out, "[rank 1] rank=1 world=2 local_rank=0 local_world=1 node_rank=1 omp=1 same=True"))
      << result.out;
}

// A rank that prints and exits at once: its line reaches the launcher's output although the
// launcher ends right after (the raylet publishes worker output every 100 ms; the driver drains
// it at shutdown). Three launches of four ranks: without the drain about half lose a line.
TEST(TrainLaunchTest, EveryRanksLastLineReachesTheLauncher) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=4"}));
  for (int launch = 0; launch < 3; ++launch) {
    CommandResult result =
        Launch(cluster, {"--num-workers=4", "--", "sh", "-c", "echo last-line-of-$RANK"});
    ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_TRUE(absl::StrContains(result.out, absl::StrCat("[rank ", rank, "] last-line-of-",
                                                             rank)))
          << "launch " << launch << ", rank " << rank << ":\n"
          << result.out;
    }
  }
}

TEST(TrainLaunchTest, FailingRankStopsTheOthersAndItsStatusIsReturned) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no " << kPython;
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  const std::string script = WriteScript();
  const auto start = std::chrono::steady_clock::now();
  CommandResult result =
      Launch(cluster, {"--num-workers=2", "--", kPython, script}, {"MODE=fail_rank1"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 3) << result.out << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "rank 1 exited with status 3; stopped the other ranks"))
      << result.err;
  // Rank 0 was waiting for rank 1 in init_process_group (gloo's default timeout: 30 minutes);
  // it was stopped instead.
  EXPECT_LT(seconds, 60);
  EXPECT_TRUE(troupe::testing::ProcessesMentioning(script).empty()) << "a rank outlived the launch";
}

TEST(TrainLaunchTest, GroupRestartsAfterAFailure) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no " << kPython;
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  const std::string script = WriteScript();
  const std::string marker = absl::StrCat(testing::TempDir(), "/failed_once");
  std::filesystem::remove(marker);
  CommandResult result =
      Launch(cluster, {"--num-workers=2", "--max-failures=1", "--", kPython, script},
             {"MODE=fail_once", "MARKER=" + marker});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "rank 0 exited with status 5")) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "restarting all ranks (1 of 1 restarts)"))
      << result.err;
  EXPECT_TRUE(absl::StrContains(result.out, "same=True")) << result.out;
}

// Regression (issue 31 item 3): a rank's CUDA_VISIBLE_DEVICES is its lease mapped through the
// devices the raylet sees, not the raylet's index: under CUDA_VISIBLE_DEVICES=2,3 the raylet's
// GPU 0 is physical GPU 2. (--num-gpus declares the GPUs: no real one is needed.)
TEST(TrainLaunchTest, RanksSeeTheirLeasedGpusMappedThroughTheRayletsDevices) {
  setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);  // inherited by the head's raylet
  auto started = TestCluster::Start({"--num-cpus=2", "--num-gpus=2"});
  unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, std::move(started));
  // Each rank writes what it sees to a file (its output lines may reach the launcher late).
  const std::string dir = absl::StrCat(testing::TempDir(), "/visible");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CommandResult result =
      Launch(cluster, {"--num-workers=2", "--gpus-per-worker=1", "--", "/bin/sh", "-c",
                       "echo $CUDA_VISIBLE_DEVICES > " + dir + "/rank$RANK"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  auto seen = [&](int rank) {
    std::string devices;
    std::ifstream(absl::StrCat(dir, "/rank", rank)) >> devices;
    return devices;
  };
  // Which rank gets which GPU is the scheduler's choice; together they hold physical GPUs 2, 3.
  std::vector<std::string> devices = {seen(0), seen(1)};
  std::sort(devices.begin(), devices.end());
  EXPECT_EQ(devices, (std::vector<std::string>{"2", "3"}));
}

TEST(TrainLaunchTest, UsageErrors) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  CommandResult no_command = Launch(cluster, {"--num-workers=2"});
  EXPECT_EQ(no_command.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(no_command.err, "no command: put it after --")) << no_command.err;
  CommandResult bad_flag = Launch(cluster, {"--num-worker=2", "--", "true"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad_flag.err, "--num-workers")) << bad_flag.err;  // did you mean
  CommandResult bad_sub = RunTroupe({"train", "lunch"});
  EXPECT_EQ(bad_sub.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad_sub.err, "troupe train launch --help")) << bad_sub.err;
}

}  // namespace
