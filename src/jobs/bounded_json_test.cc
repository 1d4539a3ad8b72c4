#include "src/jobs/bounded_json.h"

#include <string>

#include "gtest/gtest.h"

namespace troupe::jobs {
namespace {

std::string Nested(int depth, const std::string& open, const std::string& close) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += open;
  text += "1";
  for (int i = 0; i < depth; ++i) text += close;
  return text;
}

TEST(BoundedJsonTest, CountsNestingOutsideStringsOnly) {
  EXPECT_EQ(JsonNestingDepth("1", 64), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": []}]})", 64), 4);
  // Brackets and escaped quotes inside strings do not count.
  EXPECT_EQ(JsonNestingDepth(R"({"a": "[[[{{{\"[[[", "b": "\\"})", 64), 1);
  EXPECT_EQ(JsonNestingDepth(Nested(1000, "[", "]"), 64), 65);  // stops counting early
}

TEST(BoundedJsonTest, AcceptsUpToTheLimit) {
  auto ok = ParseBoundedJson(Nested(kMaxJsonDepth, "[", "]"), "the body");
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto objects = ParseBoundedJson(Nested(kMaxJsonDepth, R"({"k":)", "}"), "the body");
  ASSERT_TRUE(objects.ok()) << objects.status();
}

// Regression: 100 000 nested arrays or objects used to reach nlohmann's recursive copy and
// overflow the HTTP server's stack.
TEST(BoundedJsonTest, RefusesDeepNestingWithAClearMessage) {
  for (const std::string& text :
       {Nested(kMaxJsonDepth + 1, "[", "]"), Nested(100000, "[", "]"),
        R"({"entrypoint": "true", "metadata": )" + Nested(100000, R"({"k":)", "}") + "}",
        // Invalid JSON is refused on depth too, before the parser walks into it.
        std::string(100000, '[')}) {
    auto parsed = ParseBoundedJson(text, "the body");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message().find("the body is JSON nested deeper than 64 levels"), 0u)
        << parsed.status();
  }
}

TEST(BoundedJsonTest, InvalidJsonSaysSo) {
  auto parsed = ParseBoundedJson("{not json", "the body");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("the body is not valid JSON"), std::string::npos)
      << parsed.status();
}

}  // namespace
}  // namespace troupe::jobs
