// Tables align to their widest cell, YAML is what a YAML reader expects, filters match.
#include "src/cli/state_format.h"

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

using nlohmann::json;

TEST(FormatTableTest, ColumnsWidenToTheLongestCell) {
  json rows = json::array({{{"name", "a"}, {"state", "ALIVE"}, {"pid", 7}},
                           {{"name", "AVeryLongActorClassName::Create"}, {"state", "DEAD"}}});
  const std::string table = FormatTable({"name", "state", "pid"}, rows);
  std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  // Every STATE cell starts where the header's does: after the longest name and two spaces.
  const size_t state_at = std::string("AVeryLongActorClassName::Create").size() + 2;
  EXPECT_EQ(lines[0].find("STATE"), state_at) << table;
  EXPECT_EQ(lines[1].find("ALIVE"), state_at) << table;
  EXPECT_EQ(lines[2].find("DEAD"), state_at) << table;
  EXPECT_EQ(lines[1].substr(lines[1].size() - 1), "7");
  EXPECT_EQ(lines[2].back(), 'D');  // a missing last cell leaves no trailing blanks
}

TEST(FormatYamlTest, NestedValuesAndQuoting) {
  json value = {{"id", "0a1b"},
                {"count", 3},
                {"empty", ""},
                {"word", "true"},
                {"colon", "a: b"},
                {"list", {1, "x"}},
                {"rows", json::array({{{"k", "v"}, {"n", 1}}})},
                {"map", {{"CPU", 1.5}}},
                {"none", json::array()}};
  const std::string yaml = FormatYaml(value);
  EXPECT_NE(yaml.find("id: \"0a1b\"\n"), std::string::npos) << yaml;  // digit first: quoted
  EXPECT_NE(yaml.find("count: 3\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("empty: \"\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("word: \"true\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("colon: \"a: b\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("list:\n  - 1\n  - x\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("rows:\n  - k: v\n    n: 1\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("map:\n  CPU: 1.5\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("none: []\n"), std::string::npos) << yaml;
}

TEST(FilterTest, ParsesAndMatches) {
  auto eq = ParseFilter("state=alive");
  ASSERT_TRUE(eq.ok());
  EXPECT_EQ(eq->key, "state");
  EXPECT_FALSE(eq->negate);
  auto ne = ParseFilter("class_name!=A");
  ASSERT_TRUE(ne.ok());
  EXPECT_TRUE(ne->negate);
  EXPECT_FALSE(ParseFilter("novalue").ok());
  EXPECT_FALSE(ParseFilter("=x").ok());
  json row = {{"state", "ALIVE"}, {"class_name", "B"}, {"pid", 12}};
  EXPECT_TRUE(Matches(row, {*eq}));
  EXPECT_TRUE(Matches(row, {*eq, *ne}));
  EXPECT_FALSE(Matches(row, {*ParseFilter("class_name!=b")}));
  EXPECT_TRUE(Matches(row, {*ParseFilter("pid=12")}));
  EXPECT_FALSE(Matches(row, {*ParseFilter("missing=x")}));
  EXPECT_TRUE(Matches(row, {*ParseFilter("missing!=x")}));
}

}  // namespace
}  // namespace troupe
