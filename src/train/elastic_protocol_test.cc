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

TEST(ElasticProtocolTest, FailuresAreClassified) {
  EXPECT_EQ(ClassifyFailure("rank 2 is gone: its connection closed"), "died");
  EXPECT_EQ(ClassifyFailure("timed out after 20s waiting for rank 3"), "hung");
  EXPECT_EQ(ClassifyFailure("matching sizes"), "failed");
}

}  // namespace
}  // namespace troupe::train::internal
