#include "src/raylet/log_tail.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace troupe {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void Append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::app) << text;
}

std::vector<std::string> Read(LogTail& tail, bool final = false) {
  std::vector<std::string> lines;
  tail.ReadLines(final, &lines);
  return lines;
}

TEST(LogTailTest, HandsOutWholeLinesAndKeepsAnUnfinishedOneForLater) {
  const std::string path = TempPath("whole_lines.log");
  std::remove(path.c_str());
  LogTail tail(path);
  EXPECT_TRUE(Read(tail).empty()) << "a file not created yet has no lines";
  Append(path, "first\nsec");
  EXPECT_EQ(Read(tail), std::vector<std::string>({"first"}));
  Append(path, "ond\n\nthird\n");
  EXPECT_EQ(Read(tail), std::vector<std::string>({"second", "", "third"}));
}

TEST(LogTailTest, AFileThatDidNotGrowReadsNothing) {
  const std::string path = TempPath("quiet.log");
  std::remove(path.c_str());
  Append(path, "a\nb\n");
  LogTail tail(path);
  std::vector<std::string> lines;
  EXPECT_EQ(tail.ReadLines(false, &lines), 4);
  EXPECT_EQ(tail.ReadLines(false, &lines), 0);
  EXPECT_EQ(tail.ReadLines(true, &lines), 0);
  EXPECT_EQ(lines, std::vector<std::string>({"a", "b"}));
}

TEST(LogTailTest, TheFinalReadHandsOutALastLineWithoutNewline) {
  const std::string path = TempPath("final.log");
  std::remove(path.c_str());
  Append(path, "done\nno newline");
  LogTail tail(path);
  // The first final read still reads bytes, so the unfinished line may yet be completed.
  EXPECT_EQ(Read(tail, /*final=*/true), std::vector<std::string>({"done"}));
  EXPECT_EQ(Read(tail, /*final=*/true), std::vector<std::string>({"no newline"}));
  EXPECT_TRUE(Read(tail, /*final=*/true).empty());
}

TEST(LogTailTest, ABacklogLargerThanOneReadComesWholeOverSeveralReads) {
  const std::string path = TempPath("backlog.log");
  std::remove(path.c_str());
  const std::string line(999, 'x');  // 1,000 bytes with its newline
  const int count = 3 * LogTail::kMaxReadPerCall / 1000;
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < count; ++i) out << line << '\n';
  }
  LogTail tail(path);
  std::vector<std::string> lines;
  int reads = 0;
  while (tail.ReadLines(false, &lines) > 0) ++reads;
  EXPECT_GE(reads, 3);
  ASSERT_EQ(static_cast<int>(lines.size()), count);
  for (const auto& read : lines) ASSERT_EQ(read, line);
}

TEST(LogTailTest, ATruncatedFileIsFollowedFromItsNewStart) {
  const std::string path = TempPath("truncated.log");
  std::remove(path.c_str());
  Append(path, "a long first line\n");
  LogTail tail(path);
  EXPECT_EQ(Read(tail), std::vector<std::string>({"a long first line"}));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "after\n";
  EXPECT_EQ(Read(tail), std::vector<std::string>({"after"}));
}

TEST(LogTailTest, AFileThatCannotBeReadGivesNoLinesAndNoError) {
  LogTail tail(TempPath("no/such/dir/worker.log"));
  std::vector<std::string> lines;
  EXPECT_EQ(tail.ReadLines(true, &lines), 0);
  EXPECT_TRUE(lines.empty());
}

}  // namespace
}  // namespace troupe
