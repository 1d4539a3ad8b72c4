#include "src/core_worker/lineage.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

rpc::TaskSpec MakeSpec(const TaskId& task, int max_retries, size_t padding = 0) {
  rpc::TaskSpec spec;
  spec.set_task_id(task.Binary());
  spec.set_function_name("MakeBytes");
  spec.set_max_retries(max_retries);
  if (padding > 0) spec.add_args()->set_inline_value(std::string(padding, 'x'));
  return spec;
}

ObjectId ReturnOf(const TaskId& task) { return ObjectId::FromIndex(task, 1); }

TEST(LineageTest, LostResultIsResubmittedWithTheNextAttempt) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  lineage.Record(MakeSpec(task, 3), {});
  Lineage::Plan plan = lineage.PlanReconstruction(ReturnOf(task), false, "was on node n");
  ASSERT_TRUE(plan.resubmit) << plan.message;
  EXPECT_EQ(plan.spec.attempt(), 1);
  EXPECT_TRUE(lineage.IsBeingRebuilt(ReturnOf(task)));
  lineage.Finished(plan.spec);
  EXPECT_FALSE(lineage.IsBeingRebuilt(ReturnOf(task)));
}

TEST(LineageTest, RetriesAreSharedWithWorkerDeathsAndRunOut) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  lineage.Record(MakeSpec(task, 1), {});
  rpc::TaskSpec retried = MakeSpec(task, 1);
  retried.set_attempt(1);  // the submitter already retried it once after a worker died
  lineage.Finished(retried);
  Lineage::Plan plan = lineage.PlanReconstruction(ReturnOf(task), false, "was on node n");
  EXPECT_FALSE(plan.resubmit);
  EXPECT_EQ(plan.error, StoredObject::Error::kReconstructionFailed);
  EXPECT_TRUE(absl::StrContains(plan.message, ReturnOf(task).Hex())) << plan.message;
  EXPECT_TRUE(absl::StrContains(plan.message, "max_retries is 1")) << plan.message;
}

// Issue 34 item 3: a task with several returns keeps its spec while any of them is referenced,
// so freeing one does not make the others unrebuildable.
TEST(LineageTest, SpecOfATaskWithSeveralReturnsIsKeptUntilTheLastIsFreed) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  rpc::TaskSpec spec = MakeSpec(task, 3);
  spec.set_num_returns(3);
  lineage.Record(spec, {});
  lineage.ReleaseObject(ObjectId::FromIndex(task, 1));
  lineage.ReleaseObject(ObjectId::FromIndex(task, 3));
  EXPECT_EQ(lineage.num_entries(), 1u);
  Lineage::Plan plan = lineage.PlanReconstruction(ObjectId::FromIndex(task, 2), false, "was lost");
  ASSERT_TRUE(plan.resubmit) << plan.message;
  EXPECT_EQ(plan.spec.num_returns(), 3);
  lineage.Finished(plan.spec);
  lineage.ReleaseObject(ObjectId::FromIndex(task, 2));
  EXPECT_EQ(lineage.num_entries(), 0u);
}

TEST(LineageTest, MaxRetriesZeroIsNeverRebuilt) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  lineage.Record(MakeSpec(task, 0), {});
  EXPECT_EQ(lineage.PlanReconstruction(ReturnOf(task), false, "x").error,
            StoredObject::Error::kReconstructionFailed);
}

TEST(LineageTest, InfiniteRetriesAlwaysRebuild) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  lineage.Record(MakeSpec(task, -1), {});
  for (int i = 1; i <= 5; ++i) {
    Lineage::Plan plan = lineage.PlanReconstruction(ReturnOf(task), false, "x");
    ASSERT_TRUE(plan.resubmit);
    EXPECT_EQ(plan.spec.attempt(), i);
    lineage.Finished(plan.spec);
  }
}

TEST(LineageTest, PutObjectsAreLostWithAMessageSayingWhy) {
  Lineage lineage({});
  const ObjectId put = ObjectId::FromIndex(TaskId::FromRandom(), 7);
  Lineage::Plan plan = lineage.PlanReconstruction(put, true, "its only copy was on node abc");
  EXPECT_FALSE(plan.resubmit);
  EXPECT_EQ(plan.error, StoredObject::Error::kLost);
  EXPECT_TRUE(absl::StrContains(plan.message, "object " + put.Hex() + " was created by Put"))
      << plan.message;
  EXPECT_TRUE(absl::StrContains(plan.message, "node abc")) << plan.message;
}

TEST(LineageTest, ReleasedObjectDropsItsSpec) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  lineage.Record(MakeSpec(task, 3), {});
  EXPECT_GT(lineage.bytes(), 0);
  lineage.ReleaseObject(ReturnOf(task));
  EXPECT_EQ(lineage.num_entries(), 0u);
  EXPECT_EQ(lineage.bytes(), 0);
  EXPECT_EQ(lineage.PlanReconstruction(ReturnOf(task), false, "x").error,
            StoredObject::Error::kReconstructionFailed);
}

TEST(LineageTest, ArgumentLineageLivesAsLongAsADependentSpec) {
  Lineage lineage({});
  const TaskId producer = TaskId::FromRandom();
  const TaskId consumer = TaskId::FromRandom();
  lineage.Record(MakeSpec(producer, 3), {});
  lineage.Record(MakeSpec(consumer, 3), {ReturnOf(producer)});
  // The argument is freed once the consumer ran; its spec stays for rebuilding the consumer's.
  lineage.ReleaseObject(ReturnOf(producer));
  EXPECT_EQ(lineage.num_entries(), 2u);
  EXPECT_TRUE(lineage.PlanReconstruction(ReturnOf(producer), false, "x").resubmit);
  lineage.Finished(MakeSpec(producer, 3));
  // Once the consumer's result goes, both go.
  lineage.ReleaseObject(ReturnOf(consumer));
  EXPECT_EQ(lineage.num_entries(), 0u);
  EXPECT_EQ(lineage.bytes(), 0);
}

TEST(LineageTest, SpecBeingRebuiltIsKeptUntilTheRunEnds) {
  Lineage lineage({});
  const TaskId task = TaskId::FromRandom();
  lineage.Record(MakeSpec(task, 3), {});
  Lineage::Plan plan = lineage.PlanReconstruction(ReturnOf(task), false, "x");
  ASSERT_TRUE(plan.resubmit);
  lineage.ReleaseObject(ReturnOf(task));
  EXPECT_EQ(lineage.num_entries(), 1u);
  lineage.Finished(plan.spec);
  lineage.ReleaseObject(ReturnOf(task));
  EXPECT_EQ(lineage.num_entries(), 0u);
}

TEST(LineageTest, BudgetEvictsTheOldestAndItsLossSaysSo) {
  Lineage lineage({/*max_bytes=*/3000});
  std::vector<TaskId> tasks;
  for (int i = 0; i < 5; ++i) {
    tasks.push_back(TaskId::FromRandom());
    lineage.Record(MakeSpec(tasks.back(), 3, 1000), {});
    EXPECT_LE(lineage.bytes(), 3000);
  }
  EXPECT_LT(lineage.num_entries(), 5u);
  Lineage::Plan oldest = lineage.PlanReconstruction(ReturnOf(tasks[0]), false, "was on node n");
  EXPECT_FALSE(oldest.resubmit);
  EXPECT_EQ(oldest.error, StoredObject::Error::kReconstructionFailed);
  EXPECT_TRUE(absl::StrContains(oldest.message, "lineage budget")) << oldest.message;
  EXPECT_TRUE(lineage.PlanReconstruction(ReturnOf(tasks[4]), false, "x").resubmit);
}

TEST(LineageTest, EvictingADependentReleasesItsFreedArguments) {
  Lineage lineage({/*max_bytes=*/2500});
  const TaskId producer = TaskId::FromRandom();
  const TaskId consumer = TaskId::FromRandom();
  lineage.Record(MakeSpec(producer, 3, 1000), {});
  lineage.Record(MakeSpec(consumer, 3, 1000), {ReturnOf(producer)});
  lineage.ReleaseObject(ReturnOf(producer));  // kept for the consumer
  EXPECT_EQ(lineage.num_entries(), 2u);
  lineage.Record(MakeSpec(TaskId::FromRandom(), 3, 1000), {});  // over budget: evicts
  EXPECT_LE(lineage.bytes(), 2500);
  EXPECT_FALSE(lineage.PlanReconstruction(ReturnOf(producer), false, "x").resubmit);
}

}  // namespace
}  // namespace troupe
