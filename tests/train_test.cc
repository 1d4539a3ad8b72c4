// The train library on real multi-node clusters with a small MLP on a slice of FashionMNIST:
// loss goes down, every rank holds identical parameters after every step, reports arrive in
// order, a SIGKILLed worker makes the trainer resume from the latest checkpoint (or, in elastic
// runs, the survivors go on without it, every sample still trained on exactly once), and bucketed
// overlapping all-reduce gives the same parameters as one plain all-reduce of all gradients; the
// example's loop resumes mid-epoch from a step checkpoint. This binary is also the worker program.
#include "troupe/train.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/fashion_mnist/fashion_mnist.h"
#include "examples/fashion_mnist/run.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/train/elastic_protocol.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/runtime.h"
#include "troupe/train_data.h"
#include "troupe/train_torch.h"

namespace {

namespace coll = troupe::collective;
namespace train = troupe::train;

std::string Get(const train::LoopConfig& config, const std::string& key) {
  auto it = config.find(key);
  return it == config.end() ? "" : it->second;
}

// Sum of every parameter: equal on all ranks iff they hold the same model (practically).
double Checksum(torch::nn::Module& model) {
  double sum = 0;
  for (const auto& p : model.parameters())
    sum += p.detach().to(torch::kFloat64).sum().item<double>();
  return sum;
}

void SaveCheckpoint(torch::nn::Module& model, int epoch, const std::string& dir) {
  std::filesystem::create_directories(dir);
  torch::serialize::OutputArchive archive;
  model.save(archive);
  archive.save_to(dir + "/model.pt");
  std::ofstream(dir + "/epoch.txt") << epoch;
}

// An MLP on the first `samples` training images. Each step checks that all ranks' parameter
// checksums agree; each epoch reports train loss and the count of disagreeing steps. Writes its
// pid to <pid_dir>/<rank> and sleeps `epoch_sleep_ms` per epoch (for the kill test).
void MlpLoop(const train::LoopConfig& config) {
  const auto& ctx = train::GetContext();
  const int epochs = std::stoi(Get(config, "epochs"));
  const int64_t samples = std::stoll(Get(config, "samples"));
  if (!Get(config, "pid_dir").empty()) {
    std::ofstream(Get(config, "pid_dir") + "/" + std::to_string(ctx.world_rank)) << getpid();
  }
  torch::manual_seed(ctx.world_rank);  // different on purpose: PrepareModel must align them
  auto data = fashion_mnist::Load(fashion_mnist::kDefaultDataDir, "train");
  auto model = fashion_mnist::MakeMlp();
  auto ddp = train::torch::PrepareModel(model);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  int start = 0;
  if (auto checkpoint = train::GetCheckpoint()) {
    torch::serialize::InputArchive archive;
    archive.load_from(*checkpoint + "/model.pt");
    model->load(archive);
    std::ifstream(*checkpoint + "/epoch.txt") >> start;
  }
  train::DistributedSampler sampler(samples, ctx.world_rank, ctx.world_size, true, 7);
  for (int epoch = start; epoch < epochs; ++epoch) {
    double loss_sum = 0, batches = 0, mismatches = 0;
    for (const auto& batch : train::Batches(sampler.Indices(epoch), 64)) {
      torch::Tensor index = torch::tensor(batch, torch::kInt64);
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          fashion_mnist::Forward(*model, data.images.index_select(0, index)),
          data.labels.index_select(0, index));
      optimizer.zero_grad();
      loss.backward();
      ddp->SynchronizeGradients();
      optimizer.step();
      loss_sum += loss.item<double>();
      ++batches;
      double mine = Checksum(*model);
      std::vector<double> all(ctx.world_size);
      coll::AllGather(&mine, all.data(), 1, coll::DataType::kFloat64, ctx.group);
      for (double other : all) mismatches += other != mine;
    }
    // Slow epochs on purpose: the kill test needs time to strike between checkpoints.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::stoi(Get(config, "epoch_sleep_ms"))));
    auto sums = train::torch::SumAcrossWorkers({loss_sum / batches, mismatches});
    std::string dir;
    if (ctx.world_rank == 0) {
      dir = absl::StrCat(std::filesystem::temp_directory_path().string(), "/mlp-ckpt-", getpid());
      SaveCheckpoint(*model, epoch + 1, dir);
    }
    train::Report({{"epoch", epoch + 1},
                   {"train_loss", sums[0] / ctx.world_size},
                   {"mismatched_steps", sums[1]},
                   {"world_size", static_cast<double>(ctx.world_size)},
                   {"nccl_group", ctx.collective_backend == "nccl" ? 1.0 : 0.0},
                   {"gpus_seen_sum",
                    train::torch::SumAcrossWorkers({static_cast<double>(ctx.gpu_ids.size())})[0]},
                   {"node_rank_sum", train::torch::SumAcrossWorkers({double(ctx.node_rank)})[0]}},
                  dir);
  }
}
TROUPE_TRAIN_LOOP(MlpLoop);

// Two copies of one model trained on the same batches: A through PrepareModel with tiny buckets
// (many overlapping all-reduces), B by one plain all-reduce of all its gradients. Reports the
// largest parameter difference. Config "grads": "zero" (zero_grad(): A's gradients live in its
// buckets from the second step on), "reset" (A's .grad reset every step, so each is copied in),
// "accumulate" (no zero_grad() at all: .grad keeps the running sum, which is what is averaged).
void BucketLoop(const train::LoopConfig& config) {
  const std::string grads_mode = Get(config, "grads");
  const auto& ctx = train::GetContext();
  auto data = fashion_mnist::Load(fashion_mnist::kDefaultDataDir, "train");
  auto a = fashion_mnist::MakeMlp();
  auto b = fashion_mnist::MakeMlp();
  train::torch::DistributedOptions options;
  options.bucket_bytes = 64 << 10;
  auto ddp = train::torch::PrepareModel(a, options);
  {
    torch::NoGradGuard no_grad;
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
  }
  torch::optim::SGD opt_a(a->parameters(), 0.05), opt_b(b->parameters(), 0.05);
  // 1,024 samples: 8 steps of 64 per rank, every mode's accumulation carried across steps.
  train::DistributedSampler sampler(1024, ctx.world_rank, ctx.world_size, true, 3);
  for (const auto& batch : train::Batches(sampler.Indices(0), 64)) {
    torch::Tensor index = torch::tensor(batch, torch::kInt64);
    torch::Tensor x = data.images.index_select(0, index), y = data.labels.index_select(0, index);
    const bool zero = grads_mode != "accumulate";
    if (zero) opt_a.zero_grad();
    if (grads_mode == "reset") {
      for (auto& p : a->parameters()) p.mutable_grad().reset();
    }
    torch::nn::functional::cross_entropy(fashion_mnist::Forward(*a, x), y).backward();
    ddp->SynchronizeGradients();
    opt_a.step();
    if (zero) opt_b.zero_grad();
    torch::nn::functional::cross_entropy(fashion_mnist::Forward(*b, x), y).backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : b->parameters()) grads.push_back(p.grad().reshape(-1));
    torch::Tensor flat = torch::cat(grads).contiguous();
    coll::AllReduce(flat.data_ptr<float>(), flat.numel(), coll::DataType::kFloat32,
                    coll::ReduceOp::kAvg, ctx.group);
    int64_t offset = 0;
    for (auto& p : b->parameters()) {
      p.mutable_grad().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    opt_b.step();
  }
  double diff = 0;
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    diff = std::max(diff, (pa[i] - pb[i]).abs().max().item<double>());
  train::Report({{"max_param_diff", diff}, {"buckets", static_cast<double>(ddp->num_buckets())}});
}
TROUPE_TRAIN_LOOP(BucketLoop);

// Host-memory reductions and Report's barrier go through the CPU side group only: reports
// whether each group was joined after SumAcrossWorkers and a Report (the main group is joined at
// a member's first operation on it, so it stays unjoined unless something used it).
void HostGroupLoop(const train::LoopConfig&) {
  const auto& ctx = train::GetContext();
  const double rank_sum = train::torch::SumAcrossWorkers({double(ctx.world_rank)})[0];
  train::Report({{"rank_sum", rank_sum}});
  train::Report({{"rank_sum", rank_sum},
                 {"distinct_groups", ctx.host_group != ctx.group},
                 {"main_group_joined", coll::IsGroupInitialized(ctx.group)},
                 {"host_group_joined", coll::IsGroupInitialized(ctx.host_group)},
                 {"host_group_world_size", double(coll::GetWorldSize(ctx.host_group))}});
}
TROUPE_TRAIN_LOOP(HostGroupLoop);

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
// the same parameters, whether it resumed from a checkpoint, and the world size and generation.
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

using troupe::testing::Driver;
using troupe::testing::TestCluster;

train::LoopConfig MlpConfig(int epochs, const std::string& pid_dir = "", int sleep_ms = 0) {
  return {{"epochs", std::to_string(epochs)},
          {"samples", "3000"},
          {"pid_dir", pid_dir},
          {"epoch_sleep_ms", std::to_string(sleep_ms)}};
}

std::string TempDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(TrainTest, TwoAndThreeWorkersOnThreeNodesTrainInLockstep) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  for (int workers : {2, 3}) {
    train::ScalingConfig scaling;
    scaling.num_workers = workers;
    scaling.placement_strategy = "SPREAD";
    train::RunConfig run;
    run.name = absl::StrCat("mlp", workers);
    run.storage_path = TempDir("results");
    train::Result result = train::DataParallelTrainer(MlpLoop, MlpConfig(3), scaling, run).Fit();
    ASSERT_EQ(result.error, "");
    ASSERT_EQ(result.metrics_history.size(), 3u);
    for (int e = 0; e < 3; ++e) {
      const train::Metrics& m = result.metrics_history[e];
      EXPECT_EQ(m.at("epoch"), e + 1) << "reports out of order";
      EXPECT_EQ(m.at("mismatched_steps"), 0) << "ranks diverged in epoch " << e + 1;
      EXPECT_EQ(m.at("world_size"), workers);
      EXPECT_EQ(m.at("nccl_group"), 0) << "no GPUs: the CPU backend";
    }
    // One worker per node (1 CPU each, SPREAD): node ranks 0..n-1.
    EXPECT_EQ(result.metrics.at("node_rank_sum"), workers * (workers - 1) / 2);
    EXPECT_LT(result.metrics_history[2].at("train_loss"),
              result.metrics_history[0].at("train_loss"));
    ASSERT_TRUE(result.latest_checkpoint.has_value());
    EXPECT_TRUE(std::filesystem::exists(result.latest_checkpoint->path + "/model.pt"));
    EXPECT_EQ(result.restarts, 0);
  }
}

TEST(TrainTest, KilledWorkerResumesFromTheLatestCheckpoint) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  const std::string pids = TempDir("pids");
  const std::string storage = TempDir("resume");
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  train::RunConfig run;
  run.name = "resume";
  run.storage_path = storage;
  run.failure_config.max_failures = 1;
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(MlpLoop, MlpConfig(5, pids, 1500), scaling, run).Fit();
  });
  // Once two checkpoints exist, SIGKILL rank 1.
  const ::testing::AssertionResult checkpointed = troupe::testing::WaitUntil(
      [&] { return std::filesystem::exists(storage + "/resume/checkpoint_000002"); },
      absl::Seconds(120), "the second checkpoint");
  int pid = 0;
  std::ifstream(pids + "/1") >> pid;
  // (No ASSERT before the join: `fit` must be joined whatever happens.)
  EXPECT_TRUE(checkpointed);
  EXPECT_GT(pid, 0);
  if (pid > 0) EXPECT_EQ(kill(pid, SIGKILL), 0);
  fit.join();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.restarts, 1);
  ASSERT_FALSE(result.metrics_history.empty());
  EXPECT_EQ(result.metrics.at("epoch"), 5);
  // Every report carries a checkpoint and the restart resumes from the latest one, so the epochs
  // read 1..5 exactly once each: none lost, none repeated.
  std::vector<double> epochs;
  for (const auto& m : result.metrics_history) epochs.push_back(m.at("epoch"));
  EXPECT_EQ(epochs, (std::vector<double>{1, 2, 3, 4, 5}));
  for (const auto& m : result.metrics_history) EXPECT_EQ(m.at("mismatched_steps"), 0);
}

train::LoopConfig ElasticConfig(int epochs, const std::string& pids, const std::string& samples) {
  return {{"epochs", std::to_string(epochs)},
          {"samples", "512"},
          {"pid_dir", pids},
          {"samples_dir", samples}};
}

// How often each sample was committed, per epoch, by one member's log (ElasticLoop).
std::map<int, std::map<int64_t, int>> CommittedSamples(const std::string& path) {
  std::map<int, std::map<int64_t, int>> counts;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int epoch;
    int64_t generation, sample;
    fields >> epoch >> generation;
    while (fields >> sample) ++counts[epoch][sample];
  }
  return counts;
}

int ReadPid(const std::string& path) {
  int pid = 0;
  std::ifstream(path) >> pid;
  return pid;
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
  // Once rank 0 has committed a step of the second epoch, hold rank 2 before its next forward
  // pass and SIGKILL it there: the others are in that step's all-reduce.
  const ::testing::AssertionResult started = troupe::testing::WaitUntil(
      [&] {
        const int pid = ReadPid(pids + "/0");
        return pid > 0 && CommittedSamples(absl::StrCat(samples, "/", pid)).count(1) > 0;
      },
      absl::Seconds(180), "a step of the second epoch");
  std::ofstream(pids + "/hold-2") << "";
  const ::testing::AssertionResult held =
      troupe::testing::WaitUntil([&] { return std::filesystem::exists(pids + "/held-2"); },
                                 absl::Seconds(60), "rank 2 held mid-step");
  const int victim = ReadPid(pids + "/2");
  EXPECT_TRUE(started);
  EXPECT_TRUE(held);
  EXPECT_GT(victim, 0);
  if (started && held && victim > 0) EXPECT_EQ(kill(victim, SIGKILL), 0);
  std::filesystem::remove(pids + "/hold-2");
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
  const ::testing::AssertionResult started = troupe::testing::WaitUntil(
      [&] {
        const int pid = ReadPid(pids + "/0");
        return pid > 0 && CommittedSamples(absl::StrCat(samples, "/", pid)).count(1) > 0;
      },
      absl::Seconds(180), "a step of the second epoch");
  std::ofstream(pids + "/hold-1") << "";
  const ::testing::AssertionResult held =
      troupe::testing::WaitUntil([&] { return std::filesystem::exists(pids + "/held-1"); },
                                 absl::Seconds(60), "rank 1 held mid-step");
  const int stopped = ReadPid(pids + "/1");
  EXPECT_TRUE(started);
  EXPECT_TRUE(held);
  EXPECT_GT(stopped, 0);
  if (started && held && stopped > 0) EXPECT_EQ(kill(stopped, SIGSTOP), 0);
  std::filesystem::remove(pids + "/hold-1");
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
  std::thread fit([&] {
    result = train::DataParallelTrainer(ElasticLoop, config, scaling, run).Fit();
  });
  // Once rank 0 committed a step of the second epoch: rank 2 is held mid-step and killed, and
  // rank 0 pauses before its next step boundary until the driver proposed the join (so the
  // replacement joins while the epoch has steps left, whatever its start-up takes).
  const ::testing::AssertionResult started = troupe::testing::WaitUntil(
      [&] {
        const int pid = ReadPid(pids + "/0");
        return pid > 0 && CommittedSamples(absl::StrCat(samples, "/", pid)).count(1) > 0;
      },
      absl::Seconds(180), "a step of the second epoch");
  std::ofstream(pids + "/hold-2") << "";
  const ::testing::AssertionResult held =
      troupe::testing::WaitUntil([&] { return std::filesystem::exists(pids + "/held-2"); },
                                 absl::Seconds(60), "rank 2 held mid-step");
  std::ofstream(pids + "/pause-0") << "";
  const int victim = ReadPid(pids + "/2");
  EXPECT_TRUE(started);
  EXPECT_TRUE(held);
  if (started && held && victim > 0) EXPECT_EQ(kill(victim, SIGKILL), 0);
  std::filesystem::remove(pids + "/hold-2");
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

TEST(TrainTest, ElasticConfigurationsAreChecked) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto fit_error = [](train::ScalingConfig scaling) -> std::string {
    try {
      train::DataParallelTrainer(MlpLoop, MlpConfig(1), scaling, {}).Fit();
    } catch (const troupe::TroupeError& e) {
      return e.what();
    }
    return "accepted";
  };
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  scaling.min_workers = 3;
  EXPECT_NE(fit_error(scaling).find("min_workers must be between 1 and num_workers (2)"),
            std::string::npos)
      << fit_error(scaling);
  scaling.min_workers = 1;
  scaling.max_workers = 1;
  EXPECT_NE(fit_error(scaling).find("max_workers must be 0 (no replacement workers) or at least "
                                    "num_workers (2), got 1"),
            std::string::npos)
      << fit_error(scaling);
  scaling.max_workers = 0;
  train::RunConfig run;
  run.failure_config.hang_timeout = std::chrono::milliseconds(50);
  try {
    train::DataParallelTrainer(MlpLoop, MlpConfig(1), scaling, run).Fit();
    ADD_FAILURE() << "a 50 ms hang_timeout was accepted";
  } catch (const troupe::TroupeError& e) {
    EXPECT_NE(std::string(e.what()).find("hang_timeout is 50 ms"), std::string::npos) << e.what();
  }
}

// The lines of an events file (examples/fashion_mnist/fashion_mnist.h) of one kind, as key=value.
std::vector<std::map<std::string, std::string>> EventLines(const std::string& path,
                                                           const std::string& kind) {
  std::vector<std::map<std::string, std::string>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word != kind) continue;
    std::map<std::string, std::string> fields;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    out.push_back(std::move(fields));
  }
  return out;
}

// The example's loop with checkpoint_every: a worker SIGKILLed mid-epoch makes the group restart
// at the step after the latest step checkpoint, not at the epoch's start, and the events file
// (what bench/elastic_bench.py reads) shows each committed step with the samples so far.
TEST(TrainTest, ExampleLoopResumesMidEpochAtTheStepAfterItsCheckpoint) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  const std::string storage = TempDir("midepoch");
  const std::string events = storage + "/events.txt";
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  train::RunConfig run;
  run.name = "midepoch";
  run.storage_path = storage;
  run.failure_config.max_failures = 1;
  const train::LoopConfig config = {{"model", "mlp"},       {"epochs", "1"},
                                    {"batch_size", "16"},   {"limit_batches", "300"},
                                    {"test_limit", "1000"}, {"checkpoint_every", "20"},
                                    {"events_file", events}};
  train::Result result;
  std::thread fit([&] {
    result = train::DataParallelTrainer(fashion_mnist::TrainLoop, config, scaling, run).Fit();
  });
  // Once the first checkpoint (step 20, mid-epoch) is on the driver, SIGKILL rank 1.
  const ::testing::AssertionResult checkpointed = troupe::testing::WaitUntil(
      [&] { return std::filesystem::exists(storage + "/midepoch/checkpoint_000001"); },
      absl::Seconds(120), "the first step checkpoint");
  int pid = 0;
  for (const auto& worker : EventLines(events, "worker")) {
    if (worker.at("rank") == "1") pid = std::stoi(worker.at("pid"));
  }
  // (No ASSERT before the join: `fit` must be joined whatever happens.)
  EXPECT_TRUE(checkpointed);
  EXPECT_GT(pid, 0);
  if (pid > 0) EXPECT_EQ(kill(pid, SIGKILL), 0);
  fit.join();
  ASSERT_EQ(result.error, "");
  ASSERT_EQ(result.restarts, 1) << "the kill came after the run's end?";
  const auto steps = EventLines(events, "step");
  ASSERT_FALSE(steps.empty());
  const std::string first_gen = steps.front().at("gen"), last_gen = steps.back().at("gen");
  ASSERT_NE(first_gen, last_gen) << "no restart in the events";
  // The restarted group's first step follows a checkpoint of step 20, 40, ... (a restart from
  // the epoch's start would begin at step 1), and its steps run on to the last without a gap.
  std::vector<int> resumed;
  for (const auto& s : steps) {
    if (s.at("gen") == last_gen) resumed.push_back(std::stoi(s.at("step")));
  }
  ASSERT_FALSE(resumed.empty());
  EXPECT_GT(resumed.front(), 1);
  EXPECT_EQ((resumed.front() - 1) % 20, 0) << "resumed at step " << resumed.front();
  for (size_t i = 1; i < resumed.size(); ++i) EXPECT_EQ(resumed[i], resumed[i - 1] + 1);
  EXPECT_EQ(resumed.back(), 300);
  EXPECT_EQ(steps.back().at("samples"), std::to_string(300 * 2 * 16));
  const auto evals = EventLines(events, "eval");
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0].at("step"), "300");
  EXPECT_EQ(result.metrics.at("epoch"), 1);
}

TEST(TrainTest, BucketedAllReduceMatchesOnePlainAllReduce) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  for (const std::string grads : {"zero", "reset", "accumulate"}) {
    SCOPED_TRACE("grads: " + grads);
    train::RunConfig run;
    run.name = "buckets-" + grads;
    run.storage_path = TempDir("buckets-" + grads);
    train::Result result =
        train::DataParallelTrainer(BucketLoop, {{"grads", grads}}, scaling, run).Fit();
    ASSERT_EQ(result.error, "");
    EXPECT_GE(result.metrics.at("buckets"), 4) << "the test wants several buckets";
    EXPECT_LT(result.metrics.at("max_param_diff"), 1e-6);
  }
}

// Regression (issue 31 item 2): SumAcrossWorkers all-reduced host memory through the main group,
// which is NCCL with use_gpu. Metrics and Report's barrier now use a CPU side group.
TEST(TrainTest, HostMemoryGoesThroughTheCpuSideGroup) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  train::RunConfig run;
  run.name = "host-group";
  run.storage_path = TempDir("host-group");
  train::Result result = train::DataParallelTrainer(HostGroupLoop, {}, scaling, run).Fit();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.metrics.at("rank_sum"), 1);
  EXPECT_EQ(result.metrics.at("distinct_groups"), 1);
  EXPECT_EQ(result.metrics.at("main_group_joined"), 0) << "host memory went through the main group";
  EXPECT_EQ(result.metrics.at("host_group_joined"), 1);
  EXPECT_EQ(result.metrics.at("host_group_world_size"), 2);
}

// The examples' --use-gpu trains on the workers' GPUs (issue 31 item 2); with the CPU-only
// LibTorch of this build it stops before starting anything, saying why.
TEST(TrainTest, UseGpuWithACpuOnlyLibTorchIsAClearError) {
  if (train::torch::LibTorchHasCuda()) GTEST_SKIP() << "this LibTorch has CUDA";
  std::vector<std::string> args = {"resnet18_fashion_mnist", "--use-gpu"};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  testing::internal::CaptureStderr();
  const int code = fashion_mnist::RunExample(static_cast<int>(argv.size()), argv.data(),
                                             "resnet18_fashion_mnist", "resnet18", 1, 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("--use-gpu: this LibTorch has no CUDA"), std::string::npos) << err;
}

TEST(TrainTest, UnregisteredLoopIsAClearError) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto unregistered = [](const train::LoopConfig&) {};
  try {
    train::DataParallelTrainer(+unregistered, {}, {}, {}).Fit();
    ADD_FAILURE() << "an unregistered loop was accepted";
  } catch (const troupe::TroupeError& e) {
    EXPECT_NE(std::string(e.what()).find("TROUPE_TRAIN_LOOP"), std::string::npos) << e.what();
  }
}

TEST(TrainTest, HalfGpuWorkersShareOneCardOverTheCpuBackend) {
  // GPU scheduling on a CPU machine: the node offers one GPU it does not have. The loop's
  // tensors stay on the CPU; what is tested is placement and the group's backend.
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2", "--num-gpus=1"}));
  Driver driver(cluster);
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  scaling.use_gpu = true;
  scaling.resources_per_worker = {{"CPU", 1}, {"GPU", 0.5}};
  train::RunConfig run;
  run.name = "half-gpu";
  run.storage_path = TempDir("half-gpu");
  train::Result result = train::DataParallelTrainer(MlpLoop, MlpConfig(2), scaling, run).Fit();
  ASSERT_EQ(result.error, "");
  ASSERT_EQ(result.metrics_history.size(), 2u);
  for (const train::Metrics& m : result.metrics_history) {
    EXPECT_EQ(m.at("nccl_group"), 0) << "two workers on one GPU: the CPU backend (auto)";
    EXPECT_EQ(m.at("gpus_seen_sum"), 2) << "each worker holds (half of) the one GPU";
    EXPECT_EQ(m.at("mismatched_steps"), 0);
  }
}

TEST(TrainTest, CollectiveBackendsNcclCannotRunAreClearErrors) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto fit_error = [](train::ScalingConfig scaling) -> std::string {
    try {
      train::DataParallelTrainer(MlpLoop, MlpConfig(1), scaling, {}).Fit();
    } catch (const troupe::TroupeError& e) {
      return e.what();
    }
    return "accepted";
  };
  train::ScalingConfig scaling;
  scaling.collective_backend = "gloo";
  EXPECT_NE(fit_error(scaling).find("must be auto, cpu or nccl, got 'gloo'"), std::string::npos)
      << fit_error(scaling);
  scaling.collective_backend = "nccl";
  EXPECT_NE(fit_error(scaling).find("needs use_gpu"), std::string::npos) << fit_error(scaling);
  // Two workers sharing a card cannot be NCCL ranks: refused before anything is placed.
  scaling.use_gpu = true;
  scaling.resources_per_worker = {{"CPU", 1}, {"GPU", 0.5}};
  const std::string shared = fit_error(scaling);
  EXPECT_NE(shared.find("needs whole GPUs per worker"), std::string::npos) << shared;
  EXPECT_NE(shared.find("collective_backend \"cpu\""), std::string::npos) << shared;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
