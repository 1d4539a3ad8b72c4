// Elastic training runs on real clusters (issue 33): a SIGKILLed or SIGSTOPped worker is dropped
// and the survivors go on from the step it failed in (every sample still trained on exactly
// once); below min_workers the run restarts from the checkpoint; with max_workers a replacement
// joins at a step boundary and receives the state by broadcast. Part of //tests:train_test (its
// main() and the other loops are in train_test.cc).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/fashion_mnist/fashion_mnist.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/train/elastic_protocol.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "tests/train_test_util.h"
#include "troupe/api.h"
#include "troupe/runtime.h"
#include "troupe/train.h"
#include "troupe/train_data.h"
#include "troupe/train_torch.h"

namespace {

namespace train = troupe::train;
using namespace train_test;  // NOLINT: the shared helpers
using troupe::testing::Driver;
using troupe::testing::TestCluster;

// Elastic: an MLP on the first `samples` images, batches from an ElasticSampler (16 per worker
// per step). After each committed step every member appends "<epoch> <generation> <samples>"
// (the step's committed samples, every member's) to <samples_dir>/<pid>; it writes its pid to
// <pid_dir>/<rank at start>. While <pid_dir>/hold-<rank at start> exists, that member stops after
// taking its batch, before its forward pass, saying so in <pid_dir>/held-<rank at start> (so a
// kill lands mid-step, before its gradients went anywhere; the others wait for it in the
// step's all-reduce); while <pid_dir>/pause-<rank at start> exists, it waits before its next
// step boundary (saying so in paused-<rank>). Rank 0 writes the group's name to <pid_dir>/group
// and "<steps> <parameter checksum> <momentum checksum>" after each committed step to
// <pid_dir>/states; a replacement writes its pid to <pid_dir>/replacement and the same line, as
// received from its peers, to <pid_dir>/received. Each epoch reports whether every member holds
// the same parameters, whether it resumed from a checkpoint, and the world size and generation;
// before each epoch's report every member writes where it stands (world_rank, local_rank,
// local_world_size, node_rank) to <pid_dir>/layout-<rank at start> (layout-replacement).
void ElasticLoop(const train::LoopConfig& config) {
  const auto& ctx = train::GetContext();
  const int epochs = std::stoi(Get(config, "epochs"));
  const int64_t samples = std::stoll(Get(config, "samples"));
  const std::string pid_dir = Get(config, "pid_dir");
  const int first_rank = ctx.world_rank;  // -1 on a replacement, until it joined
  std::ofstream(pid_dir + "/" + (ctx.replacement ? "replacement" : std::to_string(first_rank)))
      << getpid();
  if (first_rank == 0) std::ofstream(pid_dir + "/group") << ctx.group;
  torch::manual_seed(ctx.world_rank);
  auto data = fashion_mnist::Load(fashion_mnist::kDefaultDataDir, "train");
  auto model = fashion_mnist::MakeMlp();
  auto ddp = train::torch::PrepareModel(model);  // a replacement joins here
  const double momentum = Get(config, "momentum").empty() ? 0 : std::stod(Get(config, "momentum"));
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(momentum));
  train::ElasticSampler sampler(samples, 16, true, 11);
  // Runs that take replacements: a replacement receives the optimizer and sampler state here.
  ddp->EnableReplacements(optimizer, sampler);
  // The parameters' and the optimizer's state as "<steps> <checksum> <momentum checksum>".
  auto state_line = [&] {
    double moments = 0;
    for (const auto& p : model->parameters()) {
      auto it = optimizer.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == optimizer.state().end()) continue;
      moments += static_cast<torch::optim::SGDParamState&>(*it->second)
                     .momentum_buffer()
                     .to(torch::kFloat64)
                     .sum()
                     .item<double>();
    }
    std::ostringstream line;
    line.precision(17);
    line << train::LastStepOutcome().step << " " << Checksum(*model) << " " << moments;
    return line.str();
  };
  if (ctx.replacement) std::ofstream(pid_dir + "/received") << state_line();
  int start = 0;
  const bool resumed = train::GetCheckpoint().has_value();
  if (resumed) {
    torch::serialize::InputArchive archive;
    archive.load_from(*train::GetCheckpoint() + "/model.pt");
    model->load(archive);
    std::ifstream(*train::GetCheckpoint() + "/epoch.txt") >> start;
  }
  std::ofstream log(Get(config, "samples_dir") + "/" + std::to_string(getpid()), std::ios::app);
  std::ofstream states;  // rank 0: state_line() after each committed step
  if (first_rank == 0) states.open(pid_dir + "/states", std::ios::app);
  for (int epoch = std::max<int>(start, sampler.epoch()); epoch < epochs; ++epoch) {
    sampler.SetEpoch(epoch);  // a replacement: keeps the position it received
    while (!sampler.Done()) {
      // While <pid_dir>/pause-<rank at start> exists, wait before the step boundary.
      const std::string pause = pid_dir + "/pause-" + std::to_string(first_rank);
      if (std::filesystem::exists(pause)) {
        std::ofstream(pid_dir + "/paused-" + std::to_string(first_rank)) << "";
        while (std::filesystem::exists(pause)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      const std::vector<int64_t> batch = sampler.Next();
      const std::string hold = pid_dir + "/hold-" + std::to_string(first_rank);
      if (std::filesystem::exists(hold)) {
        std::ofstream(pid_dir + "/held-" + std::to_string(first_rank)) << "";
        while (std::filesystem::exists(hold)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      optimizer.zero_grad();
      if (!batch.empty()) {  // the epoch's last step may leave a rank nothing
        torch::Tensor index = torch::tensor(batch, torch::kInt64);
        torch::nn::functional::cross_entropy(
            fashion_mnist::Forward(*model, data.images.index_select(0, index)),
            data.labels.index_select(0, index))
            .backward();
      }
      ddp->SynchronizeGradients();
      optimizer.step();
      sampler.Commit();
      log << epoch << " " << ctx.generation;
      for (int64_t sample : sampler.last_committed()) log << " " << sample;
      log << std::endl;
      if (states.is_open()) states << state_line() << std::endl;
    }
    // Where this member stands now: "<world_rank> <local_rank> <local_world_size> <node_rank>".
    std::ofstream(pid_dir + "/layout-" +
                  (ctx.replacement ? "replacement" : std::to_string(first_rank)))
        << ctx.world_rank << " " << ctx.local_rank << " " << ctx.local_world_size << " "
        << ctx.node_rank;
    const double mine = Checksum(*model);
    const auto sums = train::torch::SumAcrossWorkers({mine, 1.0});
    const bool agree = std::abs(sums[0] - sums[1] * mine) <= 1e-9 * std::abs(mine) * sums[1];
    std::string dir;
    if (ctx.world_rank == 0) {
      dir =
          absl::StrCat(std::filesystem::temp_directory_path().string(), "/elastic-ckpt-", getpid());
      SaveCheckpoint(*model, epoch + 1, dir);
    }
    train::Report({{"epoch", epoch + 1},
                   {"world_size", static_cast<double>(ctx.world_size)},
                   {"generation", static_cast<double>(ctx.generation)},
                   {"agree", agree ? 1.0 : 0.0},
                   {"resumed", resumed ? 1.0 : 0.0},
                   {"committed", static_cast<double>(sampler.committed())}},
                  dir);
  }
}
TROUPE_TRAIN_LOOP(ElasticLoop);

// Once rank 0 has committed a step of the second epoch, holds rank `rank` (its rank at start)
// before its next forward pass, so that the others wait for it in that step's all-reduce; runs
// `before_signal` (if any), sends it `signal` and lets the hold go. Returns its pid, or 0 (the
// test failed) when it never got there.
int SignalMidStep(const std::string& pids, const std::string& samples, int rank, int signal,
                  const std::function<void()>& before_signal = nullptr) {
  const ::testing::AssertionResult started = troupe::testing::WaitUntil(
      [&] {
        const int pid = ReadPid(pids + "/0");
        return pid > 0 && CommittedSamples(absl::StrCat(samples, "/", pid)).count(1) > 0;
      },
      absl::Seconds(180), "a step of the second epoch");
  const std::string hold = absl::StrCat(pids, "/hold-", rank);
  std::ofstream(hold) << "";
  const ::testing::AssertionResult held = troupe::testing::WaitUntil(
      [&] { return std::filesystem::exists(absl::StrCat(pids, "/held-", rank)); },
      absl::Seconds(60), absl::StrCat("rank ", rank, " held mid-step"));
  if (before_signal) before_signal();
  const int pid = ReadPid(absl::StrCat(pids, "/", rank));
  EXPECT_TRUE(started);
  EXPECT_TRUE(held);
  EXPECT_GT(pid, 0);
  const bool there = started && held && pid > 0;
  if (there) EXPECT_EQ(kill(pid, signal), 0);
  std::filesystem::remove(hold);
  return there ? pid : 0;
}

// Issue 33: a SIGKILLed worker of an elastic run (4 workers, min 2) is dropped and the other 3 go
// on from the step it died in: no restart, no checkpoint read, every sample of the epoch trained
// on exactly once, and the run's history says what happened.
TEST(TrainTest, ElasticRunGoesOnWithoutAKilledWorker) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  const std::string pids = TempDir("elastic-pids");
  const std::string samples = TempDir("elastic-samples");
  train::ScalingConfig scaling;
  scaling.num_workers = 4;
  scaling.min_workers = 2;
  train::RunConfig run;
  run.name = "elastic";
  run.storage_path = TempDir("elastic");
  run.failure_config.step_timeout = std::chrono::seconds(20);
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(ElasticLoop, ElasticConfig(3, pids, samples), scaling, run)
                 .Fit();
  });
  // Rank 2 is SIGKILLed mid-step, while the others are in that step's all-reduce.
  SignalMidStep(pids, samples, 2, SIGKILL);
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 0) << "the survivors went on: nothing restarted";
  ASSERT_EQ(result.metrics_history.size(), 3u);
  for (const auto& m : result.metrics_history) {
    EXPECT_EQ(m.at("resumed"), 0) << "no checkpoint was read";
    EXPECT_EQ(m.at("agree"), 1) << "the survivors hold the same parameters";
    EXPECT_EQ(m.at("committed"), 512) << "epoch " << m.at("epoch");
  }
  EXPECT_EQ(result.metrics.at("world_size"), 3);
  EXPECT_EQ(result.metrics.at("generation"), 2);
  ASSERT_EQ(result.membership_events.size(), 1u);
  const train::MembershipEvent& event = result.membership_events[0];
  EXPECT_EQ(event.change, "left");
  EXPECT_EQ(event.generation, 2);
  EXPECT_EQ(event.ranks, std::vector<int>{2});
  EXPECT_EQ(event.world_size, 3);
  EXPECT_EQ(event.why, "died") << event.detail;
  EXPECT_GE(event.step, 0);
  EXPECT_GE(event.recovery_s, 0) << "the next committed step was timed";
  // Two nodes, ranks 0,1 on the first and 2,3 on the second: with rank 2 gone, the former rank 3
  // is rank 2 and alone on its node; the first node's members are as they were.
  EXPECT_EQ(ReadText(pids + "/layout-3"), "2 0 1 1") << "world, local rank, local size, node";
  EXPECT_EQ(ReadText(pids + "/layout-1"), "1 1 2 0");
  // Every sample of every epoch exactly once, by a survivor's account (every survivor's agrees).
  const auto counts = CommittedSamples(absl::StrCat(samples, "/", ReadPid(pids + "/0")));
  EXPECT_EQ(counts, CommittedSamples(absl::StrCat(samples, "/", ReadPid(pids + "/3"))));
  ASSERT_EQ(counts.size(), 3u);
  for (const auto& [epoch, seen] : counts) {
    EXPECT_EQ(seen.size(), 512u) << "epoch " << epoch << ": samples never trained on";
    for (const auto& [sample, times] : seen) {
      EXPECT_EQ(times, 1) << "epoch " << epoch << ": sample " << sample;
    }
  }
}

// Issue 33: when an elastic run falls below min_workers it restarts every worker from the latest
// checkpoint, as a run without elasticity does, and its history says why.
TEST(TrainTest, ElasticRunBelowMinWorkersRestartsFromTheCheckpoint) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string pids = TempDir("below-pids");
  const std::string samples = TempDir("below-samples");
  train::ScalingConfig scaling;
  scaling.num_workers = 3;
  scaling.min_workers = 2;
  train::RunConfig run;
  run.name = "below";
  run.storage_path = TempDir("below");
  run.failure_config.max_failures = 1;
  run.failure_config.step_timeout = std::chrono::seconds(20);
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(ElasticLoop, ElasticConfig(3, pids, samples), scaling, run)
                 .Fit();
  });
  // Once the first checkpoint exists, SIGKILL ranks 1 and 2: one survivor, below 2.
  const ::testing::AssertionResult checkpointed = troupe::testing::WaitUntil(
      [&] { return std::filesystem::exists(run.storage_path + "/below/checkpoint_000001"); },
      absl::Seconds(180), "the first checkpoint");
  const int one = ReadPid(pids + "/1"), two = ReadPid(pids + "/2");
  EXPECT_TRUE(checkpointed);
  if (checkpointed && one > 0 && two > 0) {
    EXPECT_EQ(kill(one, SIGKILL), 0);
    EXPECT_EQ(kill(two, SIGKILL), 0);
  }
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 1);
  EXPECT_EQ(result.metrics.at("epoch"), 3);
  EXPECT_EQ(result.metrics.at("world_size"), 3) << "the restart placed every worker again";
  EXPECT_EQ(result.metrics.at("resumed"), 1) << "it resumed from the checkpoint";
  ASSERT_FALSE(result.membership_events.empty());
  const train::MembershipEvent& restart = result.membership_events.back();
  EXPECT_EQ(restart.change, "restart");
  EXPECT_NE(restart.why.find("below min_workers 2"), std::string::npos) << restart.why;
}

// When every worker of an elastic run dies at once (their node, say), the driver restarts the
// run from the checkpoint: it used to crash (SIGSEGV) collecting reports from a rank 0 that no
// longer existed. min_workers 1: however the deaths are seen, the last one leaves nobody.
TEST(TrainTest, ElasticRunWhoseEveryWorkerDiesRestartsFromTheCheckpoint) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  const std::string pids = TempDir("all-pids");
  const std::string samples = TempDir("all-samples");
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  scaling.min_workers = 1;
  train::RunConfig run;
  run.name = "all";
  run.storage_path = TempDir("all");
  run.failure_config.max_failures = 1;
  run.failure_config.step_timeout = std::chrono::seconds(20);
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(ElasticLoop, ElasticConfig(2, pids, samples), scaling, run)
                 .Fit();
  });
  const ::testing::AssertionResult checkpointed = troupe::testing::WaitUntil(
      [&] { return std::filesystem::exists(run.storage_path + "/all/checkpoint_000001"); },
      absl::Seconds(180), "the first checkpoint");
  const int zero = ReadPid(pids + "/0"), one = ReadPid(pids + "/1");
  EXPECT_TRUE(checkpointed);
  if (checkpointed && zero > 0 && one > 0) {
    EXPECT_EQ(kill(zero, SIGKILL), 0);
    EXPECT_EQ(kill(one, SIGKILL), 0);
  }
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 1);
  EXPECT_EQ(result.metrics.at("epoch"), 2);
  EXPECT_EQ(result.metrics.at("resumed"), 1) << "it resumed from the checkpoint";
  ASSERT_FALSE(result.membership_events.empty());
  EXPECT_EQ(result.membership_events.back().change, "restart");
  EXPECT_NE(result.membership_events.back().why.find("below min_workers 1"), std::string::npos)
      << result.membership_events.back().why;
}

// Issue 33: a SIGSTOPped worker of an elastic run is declared hung (FailureConfig::hang_timeout),
// excluded and killed (fencing: it never comes back, SIGCONT or not); the others go on from the
// step it stopped in, without a restart, every sample still trained on exactly once.
TEST(TrainTest, ElasticRunDropsAStoppedWorker) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string pids = TempDir("stop-pids");
  const std::string samples = TempDir("stop-samples");
  train::ScalingConfig scaling;
  scaling.num_workers = 3;
  scaling.min_workers = 2;
  train::RunConfig run;
  run.name = "stopped";
  run.storage_path = TempDir("stopped");
  run.failure_config.step_timeout = std::chrono::seconds(60);  // the hang rule must act first
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(ElasticLoop, ElasticConfig(3, pids, samples), scaling, run)
                 .Fit();
  });
  const int stopped = SignalMidStep(pids, samples, 1, SIGSTOP);
  // The driver kills the stopped worker once its peers report it hung.
  const ::testing::AssertionResult killed =
      troupe::testing::WaitUntil([&] { return stopped > 0 && kill(stopped, 0) != 0; },
                                 absl::Seconds(120), "the stopped worker killed");
  EXPECT_TRUE(killed);
  if (stopped > 0) kill(stopped, SIGCONT);  // were it still there, it must not come back
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 0);
  ASSERT_EQ(result.membership_events.size(), 1u);
  const train::MembershipEvent& event = result.membership_events[0];
  EXPECT_EQ(event.ranks, std::vector<int>{1});
  EXPECT_EQ(event.why, "hung") << event.detail;
  // By the hang rule (FailureConfig::hang_timeout), not by the operation's deadline.
  EXPECT_NE(event.detail.find("declared hung after hang_timeout"), std::string::npos)
      << event.detail;
  EXPECT_EQ(event.world_size, 2);
  EXPECT_GE(event.recovery_s, 0);
  for (const auto& m : result.metrics_history) {
    EXPECT_EQ(m.at("agree"), 1);
    EXPECT_EQ(m.at("committed"), 512);
  }
  EXPECT_EQ(result.metrics.at("world_size"), 2);
}

// Issue 33: with max_workers == num_workers a SIGKILLed worker of an elastic run is replaced: the
// survivors go on at once, a replacement worker starts in the freed bundle and joins at their
// next step boundary as the last rank, receiving rank 0's parameters and optimizer state (the
// SGD momentum) by broadcast, not from a checkpoint; then all three train in step, and every
// sample of every epoch is committed exactly once.
TEST(TrainTest, ElasticRunReplacesAKilledWorker) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string pids = TempDir("replace-pids");
  const std::string samples = TempDir("replace-samples");
  train::ScalingConfig scaling;
  scaling.num_workers = 3;
  scaling.min_workers = 2;
  scaling.max_workers = 3;
  train::RunConfig run;
  run.name = "replace";
  run.storage_path = TempDir("replace");
  run.failure_config.step_timeout = std::chrono::seconds(60);
  train::LoopConfig config = ElasticConfig(3, pids, samples);
  config["momentum"] = "0.9";
  train::Result result;
  std::thread fit(
      [&] { result = train::DataParallelTrainer(ElasticLoop, config, scaling, run).Fit(); });
  // Once rank 0 committed a step of the second epoch: rank 2 is held mid-step and killed, and
  // rank 0 pauses before its next step boundary until the driver proposed the join (so the
  // replacement joins while the epoch has steps left, whatever its start-up takes).
  SignalMidStep(pids, samples, 2, SIGKILL, [&] { std::ofstream(pids + "/pause-0") << ""; });
  std::string group;
  std::ifstream(pids + "/group") >> group;
  troupe::internal::Runtime* runtime = troupe::internal::CurrentRuntime();
  const ::testing::AssertionResult proposed = troupe::testing::WaitUntil(
      [&] {
        return runtime->KvGet(runtime->JobNamespace(), train::internal::JoinKey(group, 2))
            .has_value();
      },
      absl::Seconds(90), "the join proposed to generation 2");
  EXPECT_TRUE(proposed);
  std::filesystem::remove(pids + "/pause-0");
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 0);
  ASSERT_EQ(result.membership_events.size(), 2u);
  const train::MembershipEvent& left = result.membership_events[0];
  EXPECT_EQ(left.change, "left");
  EXPECT_EQ(left.ranks, std::vector<int>{2});
  const train::MembershipEvent& joined = result.membership_events[1];
  EXPECT_EQ(joined.change, "joined");
  EXPECT_EQ(joined.why, "replacement");
  EXPECT_EQ(joined.generation, 3);
  EXPECT_EQ(joined.ranks, std::vector<int>{2}) << "ranks stay dense: the newcomer is last";
  EXPECT_EQ(joined.world_size, 3);
  EXPECT_GE(joined.step, 0);
  EXPECT_GE(joined.recovery_s, 0) << "timed to the first step of the new generation";
  EXPECT_EQ(result.metrics.at("world_size"), 3);
  EXPECT_EQ(result.metrics.at("generation"), 3);
  for (const auto& m : result.metrics_history) {
    EXPECT_EQ(m.at("resumed"), 0) << "no checkpoint was read";
    EXPECT_EQ(m.at("agree"), 1) << "every member, the replacement too, holds the same model";
    EXPECT_EQ(m.at("committed"), 512) << "epoch " << m.at("epoch");
  }
  // What the replacement received is rank 0's state after the step the join came after.
  std::ifstream received_file(pids + "/received");
  std::string received;
  std::getline(received_file, received);
  std::vector<std::string> states;
  std::ifstream states_file(pids + "/states");
  for (std::string line; std::getline(states_file, line);) states.push_back(line);
  ASSERT_FALSE(received.empty()) << "the replacement never received the state";
  ASSERT_GT(joined.step, 0);
  ASSERT_GE(states.size(), static_cast<size_t>(joined.step));
  EXPECT_EQ(received, states[joined.step - 1]) << "parameters and momentum equal rank 0's";
  EXPECT_NE(received.substr(received.rfind(' ') + 1), "0") << "momentum travelled";
  // Every sample of every epoch exactly once, by rank 0's account and the replacement's.
  const auto counts = CommittedSamples(absl::StrCat(samples, "/", ReadPid(pids + "/0")));
  ASSERT_EQ(counts.size(), 3u);
  for (const auto& [epoch, seen] : counts) {
    EXPECT_EQ(seen.size(), 512u) << "epoch " << epoch << ": samples never trained on";
    for (const auto& [sample, times] : seen) {
      EXPECT_EQ(times, 1) << "epoch " << epoch << ": sample " << sample;
    }
  }
  const auto newcomer =
      CommittedSamples(absl::StrCat(samples, "/", ReadPid(pids + "/replacement")));
  ASSERT_FALSE(newcomer.empty()) << "the replacement committed steps";
  EXPECT_EQ(newcomer.rbegin()->second, counts.rbegin()->second) << "the last epoch alike";
}

// Issue 33: with max_workers above num_workers an elastic run grows from the start: the driver
// starts workers beside the first two; the third joins at their step boundary once it is ready
// (rank 0 pauses before its first boundary until the join is proposed), a fourth never finds
// room and never holds anyone up, and the run ends on three workers, every sample of every
// epoch committed exactly once.
TEST(TrainTest, ElasticRunGrowsToMaxWorkers) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=3"}));
  Driver driver(cluster);
  const std::string pids = TempDir("grow-pids");
  const std::string samples = TempDir("grow-samples");
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  // min_workers 0: num_workers (a loss would restart). Room for one more worker only: the
  // fourth cannot be placed and stays pending, and nobody waits for it.
  scaling.max_workers = 4;
  train::RunConfig run;
  run.name = "grow";
  run.storage_path = TempDir("grow");
  run.failure_config.step_timeout = std::chrono::seconds(60);
  std::ofstream(pids + "/pause-0") << "";
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(ElasticLoop, ElasticConfig(2, pids, samples), scaling, run)
                 .Fit();
  });
  const ::testing::AssertionResult paused =
      troupe::testing::WaitUntil([&] { return std::filesystem::exists(pids + "/paused-0"); },
                                 absl::Seconds(120), "rank 0 paused before its first step");
  std::string group;
  std::ifstream(pids + "/group") >> group;
  troupe::internal::Runtime* runtime = troupe::internal::CurrentRuntime();
  const ::testing::AssertionResult proposed = troupe::testing::WaitUntil(
      [&] {
        return !group.empty() &&
               runtime->KvGet(runtime->JobNamespace(), train::internal::JoinKey(group, 1))
                   .has_value();
      },
      absl::Seconds(90), "the join proposed to generation 1");
  EXPECT_TRUE(paused);
  EXPECT_TRUE(proposed);
  std::filesystem::remove(pids + "/pause-0");
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 0);
  ASSERT_EQ(result.membership_events.size(), 1u);
  const train::MembershipEvent& joined = result.membership_events[0];
  EXPECT_EQ(joined.change, "joined");
  EXPECT_EQ(joined.why, "replacement");
  EXPECT_EQ(joined.generation, 2);
  EXPECT_EQ(joined.ranks, std::vector<int>{2});
  EXPECT_EQ(joined.step, 0) << "before the first step";
  EXPECT_EQ(result.metrics.at("world_size"), 3);
  // One node: the newcomer is its third worker, and the others count it.
  EXPECT_EQ(ReadText(pids + "/layout-replacement"), "2 2 3 0")
      << "world, local rank, local size, node";
  EXPECT_EQ(ReadText(pids + "/layout-0"), "0 0 3 0");
  for (const auto& m : result.metrics_history) {
    EXPECT_EQ(m.at("agree"), 1);
    EXPECT_EQ(m.at("committed"), 512) << "epoch " << m.at("epoch");
  }
  const auto counts = CommittedSamples(absl::StrCat(samples, "/", ReadPid(pids + "/0")));
  ASSERT_EQ(counts.size(), 2u);
  for (const auto& [epoch, seen] : counts) {
    EXPECT_EQ(seen.size(), 512u) << "epoch " << epoch;
    for (const auto& [sample, times] : seen) EXPECT_EQ(times, 1) << "sample " << sample;
  }
}

}  // namespace
