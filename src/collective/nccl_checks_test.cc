// The NCCL backend's decisions (nccl_checks.h) on inputs a CPU-only machine can make up: what
// the CUDA runtime would report for a buffer, the lease, the devices, each member's GPU.
#include "src/collective/nccl_checks.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troupe::collective {
namespace {

using ::testing::HasSubstr;

TEST(NcclChecksTest, DeviceAndManagedMemoryGoToNccl) {
  EXPECT_TRUE(CheckNcclBuffer(static_cast<int>(MemoryKind::kDevice), "AllReduce", "g").ok());
  EXPECT_TRUE(CheckNcclBuffer(static_cast<int>(MemoryKind::kManaged), "AllReduce", "g").ok());
}

TEST(NcclChecksTest, HostMemoryIsRefusedNamingCallAndGroup) {
  for (MemoryKind kind : {MemoryKind::kHost, MemoryKind::kUnregistered}) {
    absl::Status status = CheckNcclBuffer(static_cast<int>(kind), "AllReduce", "workers");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("AllReduce on NCCL group 'workers'"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("Move the tensor to the GPU"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("Backend::kCpu"));
  }
  // A value this build does not know (a newer CUDA) is not taken for device memory.
  EXPECT_FALSE(CheckNcclBuffer(7, "Broadcast", "g").ok());
}

TEST(NcclChecksTest, CallNamesAreThePublicFunctions) {
  EXPECT_EQ(CallName("allreduce"), "AllReduce");
  EXPECT_EQ(CallName("reduce_scatter"), "ReduceScatter");
  EXPECT_EQ(CallName("recv"), "Recv");
}

TEST(NcclChecksTest, LeasedGpuIsUsed) {
  EXPECT_EQ(*ChooseNcclDevice({{2}, "all", 4, 0}), 2);
  EXPECT_EQ(*ChooseNcclDevice({{2}, "", 4, 0}), 2);
  EXPECT_EQ(*ChooseNcclDevice({{2, 3}, "assigned", 2, 0}), 0);  // masked to the lease
}

TEST(NcclChecksTest, LeaseOutsideTheVisibleDevicesIsRefusedNotWrapped) {
  // Rank 1 leased GPU 3 on a worker that sees 2 devices used to take 3 % 2... = a neighbour's GPU.
  auto choice = ChooseNcclDevice({{3}, "all", 2, 0});
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("leased GPU 3"));
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("sees only 2 device(s)"));
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("CUDA_VISIBLE_DEVICES"));
}

TEST(NcclChecksTest, WithoutALeaseTheSelectedDeviceIsUsedWhateverTheRank) {
  // No rank % count: a driver is on the device it selected (cudaSetDevice), 0 by default.
  EXPECT_EQ(*ChooseNcclDevice({{}, "all", 4, 0}), 0);
  EXPECT_EQ(*ChooseNcclDevice({{}, "all", 4, 3}), 3);
  EXPECT_FALSE(ChooseNcclDevice({{}, "all", 0, 0}).ok());
}

GpuIdentity Gpu(const std::string& uuid, int device, const std::string& host = "") {
  return {host, uuid, "0000:1A:00.0", device, "node-a"};
}

TEST(NcclChecksTest, IdentityRoundTrips) {
  GpuIdentity in{"host-7", "GPU-8d2f", "0000:1A:00.0", 3, "node-a"};
  auto out = DecodeGpuIdentity(EncodeGpuIdentity(in));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->host, "host-7");
  EXPECT_EQ(out->uuid, "GPU-8d2f");
  EXPECT_EQ(out->bus_id, "0000:1A:00.0");
  EXPECT_EQ(out->device, 3);
  EXPECT_EQ(out->node, "node-a");
  EXPECT_FALSE(DecodeGpuIdentity("NCCLID\nxyz").has_value());
  EXPECT_FALSE(DecodeGpuIdentity("GPUID\nh\n\nbus\n0\nn").has_value());  // no uuid
}

TEST(NcclChecksTest, TwoRanksOnOneGpuAreRefusedNamingBoth) {
  EXPECT_TRUE(CheckDistinctGpus({Gpu("GPU-a", 0), Gpu("GPU-b", 1), Gpu("GPU-c", 0)}, "g").ok());
  absl::Status status =
      CheckDistinctGpus({Gpu("GPU-a", 0), Gpu("GPU-b", 1), Gpu("GPU-a", 0)}, "workers");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("NCCL group 'workers'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("ranks 0 and 2 both use GPU 0000:1A:00.0"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("GPU-a"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("Backend::kCpu"));
}

TEST(NcclChecksTest, DifferentNcclHostIdsMayShareAGpu) {
  // NCCL_HOSTID makes NCCL treat the members as on different hosts (and connect them over its
  // network transport), which it accepts on one GPU.
  EXPECT_TRUE(CheckDistinctGpus({Gpu("GPU-a", 0, "h0"), Gpu("GPU-a", 0, "h1")}, "g").ok());
  EXPECT_FALSE(CheckDistinctGpus({Gpu("GPU-a", 0, "h0"), Gpu("GPU-a", 0, "h0")}, "g").ok());
}

TEST(NcclChecksTest, AverageOverAWorldOfOneIsASumAvoidingNcclsOneRankBug) {
  // NVIDIA/nccl#1950: NCCL <= 2.29.6 left the tail of a one-rank average unwritten.
  EXPECT_EQ(NcclReduceOp(ReduceOp::kAvg, 1), ReduceOp::kSum);
  EXPECT_EQ(NcclReduceOp(ReduceOp::kAvg, 2), ReduceOp::kAvg);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_EQ(NcclReduceOp(op, 1), op);
    EXPECT_EQ(NcclReduceOp(op, 3), op);
  }
}

}  // namespace
}  // namespace troupe::collective
