#include "src/http/task_views.h"

#include "gtest/gtest.h"

namespace troupe::http {
namespace {

TEST(ParseQueryTest, SplitsEachParameterAtItsFirstEqualsSign) {
  QueryParams params =
      ParseQuery("/api/v0/tasks?filter=state=RUNNING&filter=name!=f&limit=5&detail=true");
  ASSERT_EQ(params.count("filter"), 2u);
  auto [it, end] = params.equal_range("filter");
  EXPECT_EQ(it->second, "state=RUNNING");
  EXPECT_EQ(std::next(it)->second, "name!=f");
  EXPECT_EQ(params.find("limit")->second, "5");
  EXPECT_EQ(params.find("detail")->second, "true");
}

TEST(ParseQueryTest, DecodesPercentEscapesAndPlus) {
  QueryParams params = ParseQuery("/x?filter=name%3DCounter%3A%3AAdd&q=a+b&bad=%zz&flag");
  EXPECT_EQ(params.find("filter")->second, "name=Counter::Add");
  EXPECT_EQ(params.find("q")->second, "a b");
  EXPECT_EQ(params.find("bad")->second, "%zz");  // not an escape: kept as is
  EXPECT_EQ(params.find("flag")->second, "");
  EXPECT_TRUE(ParseQuery("/x").empty());
  EXPECT_TRUE(ParseQuery("/x?").empty());
}

}  // namespace
}  // namespace troupe::http
