#include "src/core_worker/reference_counter.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

class ReferenceCounterTest : public ::testing::Test {
 protected:
  ReferenceCounterTest()
      : counter_(
            [this](const ObjectId& id, std::vector<ObjectRefInfo> contained) {
              freed_.push_back(id);
              for (const auto& inner : contained) counter_.RemoveLocal(inner.id);
            },
            [this](const ObjectId& id, const std::string& owner, bool owner_knows) {
              released_.push_back(id);
              if (owner_knows) told_owner_.push_back(owner);
            }) {
    counter_.SetSelfAddress("me:1");
  }
  ObjectRefInfo Mine() { return {ObjectId::FromIndex(TaskId::FromRandom(), 1), "me:1"}; }
  ObjectRefInfo Theirs() { return {ObjectId::FromIndex(TaskId::FromRandom(), 1), "them:2"}; }

  std::vector<ObjectId> freed_, released_;
  std::vector<std::string> told_owner_;
  ReferenceCounter counter_;
};

TEST_F(ReferenceCounterTest, OwnedObjectIsFreedWhenTheLastReferenceGoes) {
  ObjectRefInfo ref = Mine();
  counter_.AddLocal(ref);
  counter_.AddLocal(ref);
  counter_.AddSubmitted(ref);
  counter_.RemoveLocal(ref.id);
  counter_.RemoveLocal(ref.id);
  EXPECT_TRUE(freed_.empty());  // a task still uses it
  counter_.AddBorrower(ref.id, "worker:3");
  counter_.RemoveSubmitted(ref.id);
  EXPECT_TRUE(freed_.empty());  // the worker kept a reference
  counter_.RemoveBorrower(ref.id, "worker:3");
  ASSERT_EQ(freed_.size(), 1u);
  EXPECT_EQ(freed_[0], ref.id);
  EXPECT_EQ(counter_.num_tracked(), 0u);
}

TEST_F(ReferenceCounterTest, ContainedObjectsLiveAsLongAsTheirContainer) {
  ObjectRefInfo inner = Mine(), outer = Mine();
  counter_.AddLocal(inner);
  counter_.AddLocal(outer);
  counter_.SetContained(outer.id, {inner});
  counter_.RemoveLocal(inner.id);
  EXPECT_TRUE(freed_.empty());
  counter_.RemoveLocal(outer.id);
  EXPECT_EQ(freed_, (std::vector<ObjectId>{outer.id, inner.id}));
}

TEST_F(ReferenceCounterTest, BorrowsAreReportedOnceAndReleasedToTheOwner) {
  ObjectRefInfo kept = Theirs(), dropped = Theirs();
  counter_.AddLocal(kept);
  counter_.AddLocal(dropped);
  counter_.RemoveLocal(dropped.id);  // dropped before anyone was told: nothing to say
  EXPECT_TRUE(told_owner_.empty());
  auto reported = counter_.TakeUnreportedBorrows();
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0].id, kept.id);
  EXPECT_TRUE(counter_.TakeUnreportedBorrows().empty());
  counter_.RemoveLocal(kept.id);
  EXPECT_EQ(told_owner_, std::vector<std::string>{"them:2"});
  EXPECT_TRUE(freed_.empty());  // never free what we do not own
}

TEST_F(ReferenceCounterTest, RefsInsideAReturnLiveWithItAndTellTheirOwnersWhenReleased) {
  ObjectRefInfo outer = Mine();
  ObjectRefInfo mine = Mine();
  ObjectRefInfo theirs = Theirs();
  counter_.AddLocal(outer);
  counter_.SetContainedFromReturn(outer.id, {mine, theirs});
  EXPECT_TRUE(counter_.IsTracked(mine.id));
  EXPECT_TRUE(counter_.IsTracked(theirs.id));
  // Their owner was told by the worker that we borrow it: nothing to report again.
  EXPECT_TRUE(counter_.TakeUnreportedBorrows().empty());
  counter_.RemoveLocal(outer.id);
  EXPECT_EQ(freed_, (std::vector<ObjectId>{outer.id, mine.id}));
  EXPECT_EQ(released_, (std::vector<ObjectId>{theirs.id}));
  EXPECT_EQ(told_owner_, (std::vector<std::string>{"them:2"}));
  EXPECT_EQ(counter_.num_tracked(), 0u);
}

TEST_F(ReferenceCounterTest, OnlyTrackedObjectsOfOursAreOwnedHere) {
  ObjectRefInfo mine = Mine();
  ObjectRefInfo theirs = Theirs();
  EXPECT_FALSE(counter_.IsOwnedHere(mine.id));
  counter_.AddLocal(mine);
  counter_.AddLocal(theirs);
  EXPECT_TRUE(counter_.IsOwnedHere(mine.id));
  EXPECT_FALSE(counter_.IsOwnedHere(theirs.id));
}

TEST_F(ReferenceCounterTest, RefsInsideAReturnNobodyWantsAreLetGoAtOnce) {
  ObjectRefInfo theirs = Theirs();
  counter_.SetContainedFromReturn(Mine().id, {theirs});
  EXPECT_EQ(released_, (std::vector<ObjectId>{theirs.id}));
  EXPECT_EQ(told_owner_, (std::vector<std::string>{"them:2"}));
  EXPECT_EQ(counter_.num_tracked(), 0u);
}

TEST_F(ReferenceCounterTest, RefInsideAReturnAlsoHeldDirectlyOutlivesTheReturn) {
  ObjectRefInfo outer = Mine();
  ObjectRefInfo theirs = Theirs();
  counter_.AddLocal(outer);
  counter_.SetContainedFromReturn(outer.id, {theirs});
  counter_.AddLocal(theirs);  // the driver deserialized the value: an ObjectRef of its own
  counter_.RemoveLocal(outer.id);
  EXPECT_TRUE(released_.empty());
  counter_.RemoveLocal(theirs.id);
  EXPECT_EQ(told_owner_, (std::vector<std::string>{"them:2"}));
}

}  // namespace
}  // namespace troupe
