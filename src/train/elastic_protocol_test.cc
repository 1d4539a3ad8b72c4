#include "src/train/elastic_protocol.h"

#include "gtest/gtest.h"

namespace troupe::train::internal {
namespace {

TEST(ElasticProtocolTest, RecordsRoundTrip) {
  FailureReport report{1, 3, 42, 1700000000123, "rank 3 is gone:\nits connection closed"};
  auto decoded = DecodeFailureReport(EncodeFailureReport(report));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->reporter, 1);
  EXPECT_EQ(decoded->failed_rank, 3);
  EXPECT_EQ(decoded->step, 42);
  EXPECT_EQ(decoded->time_ms, 1700000000123);
  EXPECT_EQ(decoded->reason, report.reason);
  EXPECT_FALSE(DecodeFailureReport("garbage").has_value());
  auto ranks = DecodeRanks(EncodeRanks({2, 0}));
  ASSERT_TRUE(ranks.has_value());
  EXPECT_EQ(*ranks, (std::vector<int>{2, 0}));
  ranks = DecodeRanks("");
  ASSERT_TRUE(ranks.has_value());
  EXPECT_TRUE(ranks->empty());
  EXPECT_FALSE(DecodeRanks("1,x").has_value());
  auto recovered = DecodeRecovered(EncodeRecovered({9, 123}));
  ASSERT_TRUE(recovered.has_value());
  EXPECT_EQ(recovered->step, 9);
  EXPECT_EQ(recovered->time_ms, 123);
  EXPECT_EQ(FailureKey("g", 3), "train/g/failure/3");
}

TEST(ElasticProtocolTest, SurvivorsKeepTheirOrder) {
  EXPECT_EQ(WithoutRanks({10, 11, 12, 13}, {1, 3}), (std::vector<int>{10, 12}));
  EXPECT_EQ(WithoutRanks({10, 11}, {}), (std::vector<int>{10, 11}));
}

// Issue 33: after a membership change node_rank, local_rank and local_world_size describe the
// new membership. Two nodes, two members each (ranks 0,1 on "a", 2,3 on "b").
TEST(ElasticProtocolTest, PlacesFollowTheMembership) {
  EXPECT_EQ(PlacesByRank({"a", "a", "b", "b"}),
            (std::vector<NodePlace>{{0, 0, 2}, {0, 1, 2}, {1, 0, 2}, {1, 1, 2}}));
  // Rank 2 left: the former rank 3 is alone on "b" now.
  EXPECT_EQ(PlacesByRank({"a", "a", "b"}),
            (std::vector<NodePlace>{{0, 0, 2}, {0, 1, 2}, {1, 0, 1}}));
  // Both members of "a" left: "b" is node 0, no gap.
  EXPECT_EQ(PlacesByRank({"b", "b"}), (std::vector<NodePlace>{{0, 0, 2}, {0, 1, 2}}));
  // A replacement on "a" joins as the last rank: local rank after the others on "a".
  EXPECT_EQ(PlacesByRank({"a", "b", "a"}),
            (std::vector<NodePlace>{{0, 0, 2}, {1, 0, 1}, {0, 1, 2}}));
  EXPECT_TRUE(PlacesByRank({}).empty());
}

TEST(ElasticProtocolTest, GenerationRecordsRoundTrip) {
  GenerationRecord record{{2}, {{0, 0, 2}, {0, 1, 2}, {1, 0, 1}}};
  auto decoded = DecodeGenerationRecord(EncodeGenerationRecord(record));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->left, std::vector<int>{2});
  EXPECT_EQ(decoded->places, record.places);
  decoded = DecodeGenerationRecord(EncodeGenerationRecord({{}, {{0, 0, 1}}}));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_TRUE(decoded->left.empty());
  EXPECT_EQ(decoded->places, (std::vector<NodePlace>{{0, 0, 1}}));
  EXPECT_FALSE(DecodeGenerationRecord("2").has_value()) << "no places";
  EXPECT_FALSE(DecodeGenerationRecord("2\n0:0").has_value());
  EXPECT_FALSE(DecodeGenerationRecord("2\n0:1:1").has_value()) << "local rank past the node";
  EXPECT_FALSE(DecodeGenerationRecord("x\n0:0:1").has_value());
}

TEST(ElasticProtocolTest, FailuresAreClassified) {
  EXPECT_EQ(ClassifyFailure("rank 2 is gone: its connection closed"), "died");
  EXPECT_EQ(ClassifyFailure("timed out after 20s waiting for rank 3"), "hung");
  EXPECT_EQ(ClassifyFailure("matching sizes"), "failed");
}

}  // namespace
}  // namespace troupe::train::internal
