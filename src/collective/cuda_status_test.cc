#include "src/collective/cuda_status.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(CudaStatusTest, ErrorsBecomeStatusesWithTheCallNamed) {
  EXPECT_TRUE(CudaToStatus(cudaSuccess, "x").ok());
  absl::Status oom = CudaToStatus(cudaErrorMemoryAllocation, "cudaMalloc of 4 GiB");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(oom.message(), "cudaMalloc of 4 GiB: CUDA error 2")) << oom;
  EXPECT_EQ(CudaToStatus(cudaErrorInsufficientDriver, "x").code(), absl::StatusCode::kUnavailable);

  EXPECT_TRUE(NcclToStatus(ncclSuccess, "x").ok());
  absl::Status bad = NcclToStatus(ncclInvalidArgument, "ncclAllReduce");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "ncclAllReduce: NCCL error")) << bad;
  EXPECT_EQ(NcclToStatus(ncclRemoteError, "x").code(), absl::StatusCode::kUnavailable);
}

TEST(CudaStatusTest, NoDriverMeansNoGpu) {
  absl::Status none = ClassifyCudaVersions(0, 13000);
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable) << none;
  EXPECT_TRUE(IsNoGpu(none));
  EXPECT_TRUE(absl::StrContains(none.message(), "no GPU driver")) << none;
}

TEST(CudaStatusTest, DriverTooOldIsAFailureNamingBothVersions) {
  absl::Status old = ClassifyCudaVersions(12040, 13000);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition) << old;
  EXPECT_FALSE(IsNoGpu(old));  // GPU tests fail on it instead of skipping
  EXPECT_TRUE(absl::StrContains(old.message(),
                                "the GPU driver supports CUDA 12.4, this build needs CUDA 13.0"))
      << old;
}

TEST(CudaStatusTest, DriverOfTheSameMajorVersionOrNewerWorks) {
  EXPECT_TRUE(ClassifyCudaVersions(13000, 13000).ok());
  EXPECT_TRUE(ClassifyCudaVersions(13000, 13020).ok());  // minor version compatibility
  EXPECT_TRUE(ClassifyCudaVersions(13020, 13000).ok());
  EXPECT_TRUE(ClassifyCudaVersions(14000, 13000).ok());
  EXPECT_EQ(CudaVersionString(12040), "12.4");
}

// What this machine is, spelt out: a skip on "no GPU driver" / "no GPU", a failure otherwise.
TEST(CudaStatusTest, ThisMachinesGpuSetupIsUsableOrAbsent) {
  auto devices = CudaDeviceCount();
  if (!devices.ok() && IsNoGpu(devices.status())) {
    GTEST_SKIP() << "no usable GPU: " << devices.status().message();
  }
  ASSERT_TRUE(devices.ok()) << "this machine has a GPU driver that this build cannot use: "
                            << devices.status();
  EXPECT_GE(*devices, 1);
}

TEST(CudaStatusTest, NcclVersionIsReadable) {
  std::string version = NcclVersionString();
  EXPECT_NE(version, "unknown");
  EXPECT_TRUE(absl::StartsWith(version, "2.")) << version;
}

// Runs on a GPU machine only: a one-device NCCL all-reduce end to end.
TEST(CudaStatusTest, SingleDeviceAllReduceOnGpu) {
  auto devices = CudaDeviceCount();
  if (!devices.ok() && IsNoGpu(devices.status())) {
    GTEST_SKIP() << "no usable GPU: " << devices.status().message();
  }
  ASSERT_TRUE(devices.ok()) << devices.status();
  ncclComm_t comm;
  int device = 0;
  ASSERT_TRUE(NcclToStatus(ncclCommInitAll(&comm, 1, &device), "ncclCommInitAll").ok());
  const size_t n = 1024;
  std::vector<float> host(n, 1.5f);
  float* buffer = nullptr;
  ASSERT_TRUE(CudaToStatus(cudaMalloc(&buffer, n * sizeof(float)), "cudaMalloc").ok());
  ASSERT_TRUE(
      CudaToStatus(cudaMemcpy(buffer, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                   "copy in")
          .ok());
  ASSERT_TRUE(NcclToStatus(ncclAllReduce(buffer, buffer, n, ncclFloat, ncclSum, comm, nullptr),
                           "ncclAllReduce")
                  .ok());
  ASSERT_TRUE(CudaToStatus(cudaDeviceSynchronize(), "sync").ok());
  std::vector<float> result(n);
  ASSERT_TRUE(
      CudaToStatus(cudaMemcpy(result.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost),
                   "copy out")
          .ok());
  EXPECT_EQ(result[0], 1.5f);
  EXPECT_EQ(result[n - 1], 1.5f);
  cudaFree(buffer);
  ncclCommDestroy(comm);
}

}  // namespace
}  // namespace troupe
