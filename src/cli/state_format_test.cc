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

TEST(TerminalSafeTest, ControlCharactersBecomeVisibleEscapes) {
  EXPECT_EQ(TerminalSafe("plain name-1_2.3 caf\xc3\xa9 \xe2\x82\xac"),
            "plain name-1_2.3 caf\xc3\xa9 \xe2\x82\xac");                 // UTF-8 passes
  EXPECT_EQ(TerminalSafe("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");  // ANSI colours
  EXPECT_EQ(TerminalSafe("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");      // window title
  EXPECT_EQ(TerminalSafe("a\nb\tc\rd\x7f"), "a\\nb\\tc\\rd\\x7f");
  EXPECT_EQ(TerminalSafe("\xc2\x9b[2J"), "\\u009b[2J");  // C1 CSI, UTF-8 encoded
  EXPECT_EQ(TerminalSafe("\x9b[2J"), "\\x9b[2J");        // a bare 8-bit CSI: not UTF-8
  EXPECT_EQ(TerminalSafe("\xe2\x82"), "\\xe2\\x82");     // a truncated sequence
  EXPECT_EQ(TerminalSafe(std::string("nul\0byte", 8)), "nul\\x00byte");
}

TEST(TerminalSafeTest, TablesAndYamlNeverPrintControlCharacters) {
  const nlohmann::json rows = {{{"name", "\x1b[2J\x1b[Hgotcha"}, {"state", "ALIVE"}}};
  const std::string table = FormatTable({"name", "state"}, rows);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_NE(table.find("\\x1b[2J\\x1b[Hgotcha  ALIVE"), std::string::npos) << table;
  const std::string yaml = FormatYaml(nlohmann::json{{"name", "a\x1b[31m\"b\\"}, {"k\x07", 1}});
  EXPECT_EQ(yaml.find('\x1b'), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find('\x07'), std::string::npos) << yaml;
  // YAML double-quoted escapes: a YAML reader gets the original text back.
  EXPECT_NE(yaml.find("name: \"a\\x1b[31m\\\"b\\\\\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\"k\\x07\": 1\n"), std::string::npos) << yaml;
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
