// The train library on real multi-node clusters with a small MLP on a slice of FashionMNIST:
// loss goes down, every rank holds identical parameters after every step, reports arrive in
// order, a SIGKILLed worker makes the trainer resume from the latest checkpoint, and bucketed
// overlapping all-reduce gives the same parameters as one plain all-reduce of all gradients; the
// example's loop resumes mid-epoch from a step checkpoint. Elastic runs (members leave and join):
// train_elastic_test.cc, in the same binary. This binary is also the worker program.
#include "troupe/train.h"

#include <signal.h>
#include <sys/wait.h>
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
#include "absl/strings/str_join.h"
#include "examples/fashion_mnist/fashion_mnist.h"
#include "examples/fashion_mnist/run.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "tests/train_test_util.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/train_data.h"
#include "troupe/train_torch.h"

namespace {

namespace coll = troupe::collective;
namespace train = troupe::train;
using namespace train_test;  // NOLINT: the shared helpers

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

using troupe::testing::Driver;
using troupe::testing::TestCluster;

train::LoopConfig MlpConfig(int epochs, const std::string& pid_dir = "", int sleep_ms = 0) {
  return {{"epochs", std::to_string(epochs)},
          {"samples", "3000"},
          {"pid_dir", pid_dir},
          {"epoch_sleep_ms", std::to_string(sleep_ms)}};
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

// The error a one-epoch MLP run with `scaling` fails with, or "accepted".
std::string FitError(const train::ScalingConfig& scaling) {
  try {
    train::DataParallelTrainer(MlpLoop, MlpConfig(1), scaling, {}).Fit();
  } catch (const troupe::TroupeError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(TrainTest, ElasticConfigurationsAreChecked) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  scaling.min_workers = 3;
  EXPECT_NE(FitError(scaling).find("min_workers must be between 1 and num_workers (2)"),
            std::string::npos)
      << FitError(scaling);
  scaling.min_workers = 1;
  scaling.max_workers = 1;
  EXPECT_NE(FitError(scaling).find("max_workers must be 0 (no replacement workers) or at least "
                                   "num_workers (2), got 1"),
            std::string::npos)
      << FitError(scaling);
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
  // What a rank 0 SIGKILLed between writing a checkpoint and reporting it leaves behind (a
  // process gone): the loop removes it when it starts.
  const pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  const std::filesystem::path leftover =
      std::filesystem::temp_directory_path() / ("troupe-ckpt-midepoch-" + std::to_string(gone));
  std::filesystem::create_directories(leftover / "model");
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
  // Nothing is left in the workers' temporary directory (they inherit this process's $TMPDIR):
  // neither the loop's checkpoint directories nor the checkpoint the restart resumed from.
  const auto workers = EventLines(events, "worker");
  ASSERT_GE(workers.size(), 4u) << "two attempts of two workers";
  std::vector<std::string> left;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    const std::string name = entry.path().filename().string();
    for (const auto& worker : workers) {
      const std::string pid = worker.at("pid");
      if (name == "troupe-ckpt-midepoch-" + pid ||
          name.rfind("troupe-resume-" + pid + "-", 0) == 0) {
        left.push_back(name);
      }
    }
  }
  EXPECT_TRUE(left.empty()) << "left behind: " << absl::StrJoin(left, ", ");
  EXPECT_FALSE(std::filesystem::exists(leftover)) << "a dead process's checkpoint directory";
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
  train::ScalingConfig scaling;
  scaling.collective_backend = "gloo";
  EXPECT_NE(FitError(scaling).find("must be auto, cpu or nccl, got 'gloo'"), std::string::npos)
      << FitError(scaling);
  scaling.collective_backend = "nccl";
  EXPECT_NE(FitError(scaling).find("needs use_gpu"), std::string::npos) << FitError(scaling);
  // Two workers sharing a card cannot be NCCL ranks: refused before anything is placed.
  scaling.use_gpu = true;
  scaling.resources_per_worker = {{"CPU", 1}, {"GPU", 0.5}};
  const std::string shared = FitError(scaling);
  EXPECT_NE(shared.find("needs whole GPUs per worker"), std::string::npos) << shared;
  EXPECT_NE(shared.find("collective_backend \"cpu\""), std::string::npos) << shared;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
