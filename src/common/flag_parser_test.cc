#include "src/common/flag_parser.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

struct StartFlags {
  std::string address;
  int64_t port = 6380;
  double num_cpus = 1;
  bool head = false;
  int64_t memory = 0;
};

FlagParser MakeParser(StartFlags* f) {
  FlagParser parser("troupe start", "Starts a node.");
  parser.AddString("address", &f->address, "Head to join.");
  parser.AddInt("port", &f->port, "GCS port.");
  parser.AddDouble("num-cpus", &f->num_cpus, "CPUs.");
  parser.AddBool("head", &f->head, "Start a head.");
  parser.AddBytes("memory", &f->memory, "Memory.");
  return parser;
}

TEST(FlagParserTest, ParsesBothSpellingsAndPositionals) {
  StartFlags f;
  FlagParser parser = MakeParser(&f);
  ASSERT_TRUE(parser
                  .Parse({"--head", "--port=7000", "--num-cpus", "2.5", "--memory=2GiB", "extra",
                          "--", "--not-a-flag"})
                  .ok());
  EXPECT_TRUE(f.head);
  EXPECT_EQ(f.port, 7000);
  EXPECT_EQ(f.num_cpus, 2.5);
  EXPECT_EQ(f.memory, int64_t{2} << 30);
  EXPECT_TRUE(parser.WasSet("port"));
  EXPECT_FALSE(parser.WasSet("address"));
  EXPECT_EQ(parser.positional(), (std::vector<std::string>{"extra", "--not-a-flag"}));
}

TEST(FlagParserTest, UnknownFlagIsNamedWithASuggestion) {
  StartFlags f;
  FlagParser parser = MakeParser(&f);
  absl::Status status = parser.Parse({"--num-cpu=2"});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "unknown flag --num-cpu for `troupe start`; did you mean --num-cpus? (see `troupe "
            "start --help`)");
}

TEST(FlagParserTest, BadValueNamesTheFlagAndWhatItExpects) {
  StartFlags f;
  FlagParser parser = MakeParser(&f);
  absl::Status status = parser.Parse({"--port", "abc"});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "flag --port expects a whole number, got 'abc'");
  EXPECT_FALSE(MakeParser(&f).Parse({"--memory=lots"}).ok());
  EXPECT_FALSE(MakeParser(&f).Parse({"--head=maybe"}).ok());
  absl::Status missing = MakeParser(&f).Parse({"--address"});
  EXPECT_EQ(missing.message(), "flag --address needs a value (a string)");
}

TEST(FlagParserTest, HelpListsFlagsWithDefaults) {
  StartFlags f;
  FlagParser parser = MakeParser(&f);
  ASSERT_TRUE(parser.Parse({"--help"}).ok());
  EXPECT_TRUE(parser.help_requested());
  std::string usage = parser.Usage();
  EXPECT_NE(usage.find("Usage: troupe start [flags]"), std::string::npos);
  EXPECT_NE(usage.find("--port\n      GCS port. (default: 6380)"), std::string::npos);
}

TEST(FlagParserTest, ByteCounts) {
  EXPECT_EQ(ParseByteCount("1024"), 1024);
  EXPECT_EQ(ParseByteCount("1.5K"), 1536);
  EXPECT_EQ(ParseByteCount("512MiB"), 512 << 20);
  EXPECT_EQ(ParseByteCount("4gb"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteCount("GiB"), -1);
  EXPECT_EQ(ParseByteCount("12 parsecs"), -1);
}

TEST(FlagParserTest, ClosestNameSuggestsLikelyTyposOnly) {
  const std::vector<std::string> commands = {"start", "stop", "status", "list", "logs"};
  EXPECT_EQ(ClosestName("lsit", commands), "list");
  EXPECT_EQ(ClosestName("strat", commands), "start");
  EXPECT_EQ(ClosestName("stat", commands), "start");  // closest by edit distance
  EXPECT_EQ(ClosestName("launch-rockets", commands), "");
  // A prefix of exactly one name, however short.
  EXPECT_EQ(ClosestName("statu", {"status", "summary"}), "status");
  EXPECT_EQ(ClosestName("s", {"status", "summary"}), "");
}

// Every flag as `--flag value` and `--flag=value`, before or after positional arguments.
TEST(FlagParserTest, BothFormsAnywhere) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--address", "http://h:1", "ID"},
        std::vector<std::string>{"ID", "--address=http://h:1"},
        std::vector<std::string>{"--address=http://h:1", "ID"}}) {
    std::string address;
    FlagParser parser("troupe job status", "");
    parser.AddString("address", &address, "");
    ASSERT_TRUE(parser.Parse(args).ok());
    EXPECT_EQ(address, "http://h:1");
    EXPECT_EQ(parser.positional(), std::vector<std::string>{"ID"});
  }
}

}  // namespace
}  // namespace troupe
