// The CUDA DeviceMemory (cuda_device_memory.cc), as linked into every CUDA build of troupe.
//  - Without a GPU or a driver (any machine): it is registered, every pointer is host memory, a
//    staged operation on host memory works, and none of it loads the CUDA driver.
//  - With a GPU (skips, saying why, without one): cudaMalloc memory is device memory while
//    pinned, managed and heap memory are not; a StagingBackend all-reduce over several chunks
//    of real device memory, whose input is still being copied in on the caller's stream when
//    the call is made, gives the right result; broadcast (output only) and all-gather (staged
//    whole) too.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <vector>

#include "gtest/gtest.h"
#include "src/collective/cuda_status.h"
#include "src/collective/device_memory.h"
#include "src/collective/reduce.h"
#include "src/collective/staging_backend.h"
#include "src/collective/test_backend_testing.h"

namespace troupe::collective {
namespace {

bool DriverLoaded() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library != nullptr) dlclose(library);
  return library != nullptr;
}

// A second member that holds the same values as this one: all-reduce doubles, broadcast from
// rank 1 writes 7s, all-gather repeats the input.
class MirrorBackend : public TestBackend {
 public:
  absl::Status AllReduce(void* data, size_t count, DataType, ReduceOp, const OpContext&) override {
    float* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] *= 2;
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType,
                         const OpContext&) override {
    const float* in = static_cast<const float*>(send);
    float* out = static_cast<float*>(recv);
    for (size_t i = 0; i < count; ++i) out[i] = out[count + i] = in[i];
    return absl::OkStatus();
  }
  absl::Status Broadcast(void* data, size_t count, DataType, int, const OpContext&) override {
    float* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] = 7;
    return absl::OkStatus();
  }
};

OpContext Context(OpCode op, void* stream = nullptr) {
  OpContext ctx{op, 0, absl::Now() + absl::Seconds(60), absl::Seconds(60)};
  ctx.cuda_stream = stream;
  return ctx;
}

TEST(CudaDeviceMemoryTest, HostMemoryNeedsNoDriver) {
  const bool loaded_before = DriverLoaded();
  DeviceMemory* memory = ProcessDeviceMemory();
  ASSERT_NE(memory, nullptr) << "a CUDA build registers its DeviceMemory";
  std::vector<float> heap(1000, 1.0f);
  float stack[4] = {1, 1, 1, 1};
  EXPECT_FALSE(memory->IsDevice(heap.data()));
  EXPECT_FALSE(memory->IsDevice(stack));
  StagingBackend backend(std::make_unique<MirrorBackend>(), memory, 0, 2, 1024);
  ASSERT_TRUE(backend
                  .AllReduce(heap.data(), heap.size(), DataType::kFloat32, ReduceOp::kSum,
                             Context(OpCode::kAllReduce))
                  .ok());
  EXPECT_EQ(heap, std::vector<float>(1000, 2.0f));
  // Nothing above touched CUDA: a CPU group in a CUDA build loads no driver, makes no context.
  if (!loaded_before) EXPECT_FALSE(DriverLoaded());
}

TEST(CudaDeviceMemoryTest, StagesRealDeviceMemory) {
  auto count = CudaDeviceCount();
  if (!count.ok()) GTEST_SKIP() << "no GPU: " << count.status().message();
  DeviceMemory* memory = ProcessDeviceMemory();
  ASSERT_NE(memory, nullptr);
  const size_t n = (3 << 20) + 5;  // four 4 MiB chunks, the last short
  float* device = nullptr;
  float* gathered = nullptr;
  float* pinned = nullptr;
  float* managed = nullptr;
  ASSERT_EQ(cudaMalloc(&device, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&gathered, 2 * n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 64), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(&managed, 64), cudaSuccess);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  EXPECT_TRUE(memory->IsDevice(device));
  EXPECT_TRUE(memory->IsDevice(device + n / 2)) << "an interior pointer";
  EXPECT_FALSE(memory->IsDevice(pinned));
  EXPECT_FALSE(memory->IsDevice(managed));
  EXPECT_FALSE(memory->IsDevice(host.data()));

  StagingBackend backend(std::make_unique<MirrorBackend>(), memory, 0, 2);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Queued on the caller's stream, perhaps not done when AllReduce starts: zeros, then values.
  ASSERT_EQ(cudaMemsetAsync(device, 0, n * sizeof(float), stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  absl::Status status = backend.AllReduce(device, n, DataType::kFloat32, ReduceOp::kSum,
                                          Context(OpCode::kAllReduce, stream));
  ASSERT_TRUE(status.ok()) << status;
  std::vector<float> out(n);
  // Queued after the call on the same stream: sees the results.
  ASSERT_EQ(cudaMemcpyAsync(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += out[i] != 2 * host[i];
  EXPECT_EQ(wrong, 0u) << "all-reduce elements wrong";

  // Broadcast from the other rank: this member only copies out (default stream).
  status = backend.Broadcast(device, n, DataType::kFloat32, 1, Context(OpCode::kBroadcast));
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(cudaMemcpy(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += out[i] != 7;
  EXPECT_EQ(wrong, 0u) << "broadcast elements wrong";

  // All-gather, staged whole.
  ASSERT_EQ(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  status = backend.AllGather(device, gathered, n, DataType::kFloat32, Context(OpCode::kAllGather));
  ASSERT_TRUE(status.ok()) << status;
  std::vector<float> all(2 * n);
  ASSERT_EQ(cudaMemcpy(all.data(), gathered, 2 * n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  wrong = 0;
  for (size_t i = 0; i < 2 * n; ++i) wrong += all[i] != host[i % n];
  EXPECT_EQ(wrong, 0u) << "all-gather elements wrong";
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  cudaStreamDestroy(stream);
  cudaFree(device);
  cudaFree(gathered);
  cudaFreeHost(pinned);
  cudaFree(managed);
}

}  // namespace
}  // namespace troupe::collective
