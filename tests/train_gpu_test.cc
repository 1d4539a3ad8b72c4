// DataParallelTrainer with use_gpu: one worker per GPU, an NCCL group, device buffers
// all-reduced inside the train loop. Needs GPUs; skips, saying why, without them.
#include <cuda_runtime_api.h>

#include <cstdlib>
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

TEST(TrainGpuTest, OneWorkerPerGpuAllReducesOverNccl) {
  auto count = troupe::CudaDeviceCount();
  if (!count.ok()) GTEST_SKIP() << "no GPU: " << count.status().message();
  troupe::Config config;
  config.num_gpus = *count;
  troupe::Init(config);
  train::ScalingConfig scaling;
  scaling.num_workers = *count;
  scaling.use_gpu = true;
  train::RunConfig run;
  run.name = "gpu";
  run.storage_path = testing::TempDir();
  train::Result result = train::DataParallelTrainer(GpuLoop, {}, scaling, run).Fit();
  troupe::Shutdown();
  ASSERT_EQ(result.error, "");
  EXPECT_EQ(result.metrics.at("sum"), *count * (*count + 1) / 2.0);
  EXPECT_EQ(result.metrics.at("gpus_seen"), 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
