// The trainer's choice of collective backend: "auto" keeps NCCL for whole, distinct GPUs and
// falls back to the CPU backend for fractional or shared GPUs; "nccl" refuses what NCCL cannot
// run with an error saying what to do; "cpu" is always the CPU backend; typos are refused.
#include "src/train/collective_choice.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe::train::internal {
namespace {

using collective::Backend;

std::vector<WorkerGpus> OneNode(std::vector<std::vector<int>> gpus) {
  std::vector<WorkerGpus> workers;
  for (auto& g : gpus) workers.push_back({"node-a", g});
  return workers;
}

TEST(CollectiveChoiceTest, AutoKeepsTodaysDefaults) {
  // No GPUs: the CPU backend.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", false, 0, OneNode({{}, {}})), Backend::kCpu);
  // One whole GPU each, distinct: NCCL, as use_gpu always meant.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", true, 1, OneNode({{0}, {1}})), Backend::kNccl);
  // Two per worker, on two nodes that both number their GPUs from 0.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", true, 2, {{"node-a", {0, 1}}, {"node-b", {0, 1}}}),
            Backend::kNccl);
}

TEST(CollectiveChoiceTest, AutoPicksTheCpuBackendForSharedOrFractionalGpus) {
  // Two 0.5-GPU workers on one card.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", true, 0.5, OneNode({{0}, {0}})), Backend::kCpu);
  // 1.5 GPUs each: not whole.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", true, 1.5, OneNode({{0, 1}, {2, 3}})), Backend::kCpu);
  // Whole GPUs asked for, but two workers were given the same one.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", true, 1, OneNode({{0}, {0}})), Backend::kCpu);
  // A worker without a GPU.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", true, 1, OneNode({{0}, {}})), Backend::kCpu);
  // GPUs in the bundle but use_gpu off: the CPU backend, as before.
  EXPECT_EQ(*ChooseCollectiveBackend("auto", false, 1, OneNode({{0}, {1}})), Backend::kCpu);
}

TEST(CollectiveChoiceTest, CpuIsAlwaysTheCpuBackend) {
  EXPECT_EQ(*ChooseCollectiveBackend("cpu", true, 1, OneNode({{0}, {1}})), Backend::kCpu);
  EXPECT_EQ(*ChooseCollectiveBackend("cpu", true, 0.5, OneNode({{0}, {0}})), Backend::kCpu);
  EXPECT_EQ(*ChooseCollectiveBackend("cpu", false, 0, OneNode({{}})), Backend::kCpu);
}

TEST(CollectiveChoiceTest, NcclRefusesWhatNcclCannotRun) {
  absl::Status status = CheckCollectiveBackend("nccl", true, 0.5);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "whole GPUs")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "collective_backend \"cpu\"")) << status;

  status = CheckCollectiveBackend("nccl", false, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "use_gpu")) << status;

  auto shared = ChooseCollectiveBackend("nccl", true, 1, OneNode({{0}, {1}, {1}}));
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(shared.status().message(), "ranks 1 and 2 share GPU 1"))
      << shared.status();

  auto missing = ChooseCollectiveBackend("nccl", true, 1, OneNode({{0}, {}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "rank 1 on node node-a has no GPU"))
      << missing.status();

  EXPECT_EQ(*ChooseCollectiveBackend("nccl", true, 1, OneNode({{0}, {1}})), Backend::kNccl);
}

TEST(CollectiveChoiceTest, UnknownNamesAreRefused) {
  absl::Status status = CheckCollectiveBackend("gloo", false, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "must be auto, cpu or nccl, got 'gloo'"))
      << status;
  EXPECT_FALSE(ChooseCollectiveBackend("NCCL", true, 1, OneNode({{0}})).ok());
}

}  // namespace
}  // namespace troupe::train::internal
