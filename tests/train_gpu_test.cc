// DataParallelTrainer with use_gpu: one worker per GPU, an NCCL group, device buffers
// all-reduced inside the train loop; and two 0.5-GPU workers sharing one card, whose group is
// the CPU backend, all-reducing, broadcasting and gathering device buffers through pinned host
// memory (after work queued on the caller's stream). Needs GPUs; skips, saying why, without them.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"
#include "src/collective/cuda_status.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/train.h"

namespace {

namespace train = troupe::train;

// Each rank all-reduces (rank + 1) over 1M floats on its GPU; reports element 0.
void GpuLoop(const train::LoopConfig&) {
  const auto& ctx = train::GetContext();
  const size_t n = 1 << 20;
  std::vector<float> host(n, static_cast<float>(ctx.world_rank + 1));
  float* device = nullptr;
  if (cudaMalloc(&device, n * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  troupe::collective::AllReduce(device, n, troupe::collective::DataType::kFloat32,
                                troupe::collective::ReduceOp::kSum, ctx.group);
  cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  train::Report({{"sum", host[0]}, {"gpus_seen", static_cast<double>(ctx.gpu_ids.size())}});
}
TROUPE_TRAIN_LOOP(GpuLoop);

// Element i of rank r's buffer: small integers, so float sums are exact.
float Value(int rank, size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 7)); }

// On a shared card over the CPU backend: an odd-sized all-reduce spanning several staging chunks
// whose input is still being copied in on the caller's stream when the call is made, a
// broadcast and an all-gather, all on cudaMalloc'ed buffers. Reports the mismatches.
void SharedGpuLoop(const train::LoopConfig&) {
  const auto& ctx = train::GetContext();
  namespace coll = troupe::collective;
  const size_t n = (3 << 20) + 5;  // 12 MB + 20 bytes: four staging chunks, the last short
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = Value(ctx.world_rank, i);
  float* device = nullptr;
  float* gathered = nullptr;
  cudaStream_t stream;
  if (cudaMalloc(&device, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&gathered, 2 * n * sizeof(float)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    throw std::runtime_error("cudaMalloc / cudaStreamCreate failed");
  }
  cudaMemsetAsync(device, 0, n * sizeof(float), stream);
  cudaMemcpyAsync(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream);
  coll::CallOptions call;
  call.cuda_stream = stream;  // the copy above is queued, maybe not done
  coll::AllReduce(device, n, coll::DataType::kFloat32, coll::ReduceOp::kSum, ctx.group, call);
  std::vector<float> out(n);
  cudaMemcpyAsync(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  double wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < ctx.world_size; ++r) want += Value(r, i);
    wrong += out[i] != want;
  }
  // Broadcast rank 1's values; then gather everyone's.
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  coll::Broadcast(device, n, coll::DataType::kFloat32, 1, ctx.group);
  cudaMemcpy(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) wrong += out[i] != Value(1, i);
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  coll::AllGather(device, gathered, n, coll::DataType::kFloat32, ctx.group);
  std::vector<float> all(2 * n);
  cudaMemcpy(all.data(), gathered, 2 * n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < 2 * n; ++i) wrong += all[i] != Value(static_cast<int>(i / n), i % n);
  cudaFree(device);
  cudaFree(gathered);
  cudaStreamDestroy(stream);
  std::vector<double> total = {wrong};
  coll::AllReduce(total, coll::ReduceOp::kSum, ctx.group);  // host memory: the CPU group
  train::Report({{"wrong", total[0]},
                 {"nccl", ctx.collective_backend == "nccl" ? 1.0 : 0.0},
                 {"gpu", ctx.gpu_ids.empty() ? -1.0 : ctx.gpu_ids[0]}});
}
TROUPE_TRAIN_LOOP(SharedGpuLoop);

// The embedded cluster, started once for all tests of this binary (main shuts it down).
absl::StatusOr<int> StartCluster() {
  static absl::StatusOr<int> started = []() -> absl::StatusOr<int> {
    auto count = troupe::CudaDeviceCount();
    if (!count.ok()) return count.status();
    troupe::Config config;
    config.num_gpus = *count;
    troupe::Init(config);
    return *count;
  }();
  return started;
}

TEST(TrainGpuTest, OneWorkerPerGpuAllReducesOverNccl) {
  auto count = StartCluster();
  if (!count.ok()) GTEST_SKIP() << "no GPU: " << count.status().message();
  train::ScalingConfig scaling;
  scaling.num_workers = *count;
  scaling.use_gpu = true;
  train::RunConfig run;
  run.name = "gpu";
  run.storage_path = testing::TempDir();
  train::Result result = train::DataParallelTrainer(GpuLoop, {}, scaling, run).Fit();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.metrics.at("sum"), *count * (*count + 1) / 2.0);
  EXPECT_EQ(result.metrics.at("gpus_seen"), 1);
}

TEST(TrainGpuTest, TwoHalfGpuWorkersShareOneCardOverTheCpuBackend) {
  auto count = StartCluster();
  if (!count.ok()) GTEST_SKIP() << "no GPU: " << count.status().message();
  train::ScalingConfig scaling;
  scaling.num_workers = 2;
  scaling.use_gpu = true;
  scaling.resources_per_worker = {{"CPU", 1}, {"GPU", 0.5}};
  scaling.placement_strategy = "STRICT_PACK";
  train::RunConfig run;
  run.name = "shared-gpu";
  run.storage_path = testing::TempDir();
  train::Result result = train::DataParallelTrainer(SharedGpuLoop, {}, scaling, run).Fit();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.metrics.at("nccl"), 0) << "auto must pick the CPU backend for 0.5 GPUs";
  EXPECT_GE(result.metrics.at("gpu"), 0) << "the worker saw no GPU";
  EXPECT_EQ(result.metrics.at("wrong"), 0) << "elements wrong after staging, summed over ranks";
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  if (StartCluster().ok()) troupe::Shutdown();
  return failed;
}
