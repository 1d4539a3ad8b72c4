// The NCCL backend on real GPUs. Needs a GPU: without one every test skips, saying why. World
// size 1 runs on one GPU; the multi-member test needs (and uses) every GPU of the machine, one
// actor per GPU, and checks what each member's device ends up holding.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"
#include "src/collective/cuda_status.h"
#include "troupe/api.h"
#include "troupe/collective.h"

namespace {

namespace coll = troupe::collective;

// Skips the test unless at least `needed` GPUs are usable.
#define REQUIRE_GPUS(needed)                                                                 \
  do {                                                                                       \
    auto count = troupe::CudaDeviceCount();                                                  \
    if (!count.ok()) GTEST_SKIP() << "no GPU: " << count.status().message();                 \
    if (*count < (needed)) GTEST_SKIP() << "needs " << (needed) << " GPUs, have " << *count; \
  } while (0)

// Fills a device buffer with `value`, all-reduces it (sum) in group `name`, returns element 0
// and the last element as seen on the host.
std::vector<float> DeviceAllReduce(const std::string& name, size_t count, float value) {
  float* device = nullptr;
  if (cudaMalloc(&device, count * sizeof(float)) != cudaSuccess)
    throw std::runtime_error("cudaMalloc");
  std::vector<float> host(count, value);
  cudaMemcpy(device, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  coll::AllReduce(device, count, coll::DataType::kFloat32, coll::ReduceOp::kSum, name);
  cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  return {host.front(), host.back()};
}

class GpuMember {
 public:
  static GpuMember* Create() { return new GpuMember(); }
  std::vector<float> Run(int world, int rank) {
    coll::InitGroup(world, rank, coll::Backend::kNccl, "gpus");
    auto result = DeviceAllReduce("gpus", (32 << 20) + 3, static_cast<float>(rank + 1));
    coll::DestroyGroup("gpus");
    return result;
  }
};

TROUPE_REMOTE(GpuMember::Create, &GpuMember::Run);

TEST(NcclTest, WorldOfOneOnOneGpu) {
  REQUIRE_GPUS(1);
  troupe::Init();
  coll::InitGroup(1, 0, coll::Backend::kNccl, "one");
  EXPECT_EQ(DeviceAllReduce("one", 1000, 2.5f), (std::vector<float>{2.5f, 2.5f}));
  // Broadcast and a barrier go through too.
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, sizeof(float) * 4), cudaSuccess);
  coll::Broadcast(device, 4, coll::DataType::kFloat32, 0, "one");
  coll::Barrier("one");
  cudaFree(device);
  coll::DestroyGroup("one");
  troupe::Shutdown();
}

TEST(NcclTest, OneActorPerGpuAllReduce) {
  REQUIRE_GPUS(2);
  const int gpus = *troupe::CudaDeviceCount();
  troupe::Config config;
  config.num_gpus = gpus;
  troupe::Init(config);
  std::vector<troupe::ObjectRef<std::vector<float>>> results;
  std::vector<troupe::ActorHandle<GpuMember>> members;
  for (int r = 0; r < gpus; ++r) {
    members.push_back(troupe::Actor(GpuMember::Create).SetResources({{"GPU", 1}}).Remote());
    results.push_back(members.back().Task(&GpuMember::Run).Remote(gpus, r));
  }
  const float expected = gpus * (gpus + 1) / 2.0f;
  for (auto& result : results) {
    EXPECT_EQ(*troupe::Get(result), (std::vector<float>{expected, expected}));
  }
  troupe::Shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
