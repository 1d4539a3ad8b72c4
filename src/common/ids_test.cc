#include "src/common/ids.h"

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(IdsTest, NilIsAllOnesAndDefault) {
  NodeId nil;
  EXPECT_TRUE(nil.IsNil());
  EXPECT_EQ(nil.Hex(), std::string(32, 'f'));
  EXPECT_FALSE(NodeId::FromRandom().IsNil());
}

TEST(IdsTest, HexRoundTrip) {
  NodeId id = NodeId::FromRandom();
  EXPECT_EQ(id.Hex().size(), 32u);
  auto parsed = NodeId::FromHex(id.Hex());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, id);
  EXPECT_EQ(id.ShortHex(), id.Hex().substr(0, 8));
}

TEST(IdsTest, BinaryRoundTripAndWrongSizeIsAnError) {
  ActorId id = ActorId::FromRandom();
  EXPECT_EQ(*ActorId::FromBinary(id.Binary()), id);
  auto bad = ActorId::FromBinary("short");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ActorId must be 16 bytes, got 5"), std::string::npos)
      << bad.status();
}

TEST(IdsTest, BadHexIsAnError) {
  EXPECT_FALSE(NodeId::FromHex("xyz").ok());
  EXPECT_FALSE(NodeId::FromHex("zz").ok());
  EXPECT_FALSE(NodeId::FromHex("abcd").ok());  // right hex, wrong size
  EXPECT_EQ(*HexToBytes("00ff7A"), std::string("\x00\xff\x7a", 3));
}

TEST(IdsTest, JobIdIsANumber) {
  JobId job = JobId::FromInt(0x01020304);
  EXPECT_EQ(job.Hex(), "01020304");
  EXPECT_EQ(job.ToInt(), 0x01020304u);
}

TEST(IdsTest, ObjectIdCarriesItsTaskAndIndex) {
  TaskId task = TaskId::FromRandom();
  ObjectId object = ObjectId::FromIndex(task, 7);
  EXPECT_EQ(object.CreatingTaskId(), task);
  EXPECT_EQ(object.Index(), 7u);
  EXPECT_EQ(ObjectId::Size(), 20u);
}

TEST(IdsTest, RandomIdsAreDistinctAndHashable) {
  absl::flat_hash_set<WorkerId> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(WorkerId::FromRandom());
  EXPECT_EQ(ids.size(), 1000u);
}

}  // namespace
}  // namespace troupe
