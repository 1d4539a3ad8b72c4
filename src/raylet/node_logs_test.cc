// ListLogFiles / ReadLogFile: plain names only, no way out of the logs directory, bounded reads.
#include "src/raylet/node_logs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace troupe {
namespace {

class NodeLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/node_logs_" + std::to_string(getpid());
    dir_ = root_ + "/logs";
    mkdir(root_.c_str(), 0755);
    mkdir(dir_.c_str(), 0755);
    std::ofstream(dir_ + "/raylet.log") << "one\ntwo\nthree\nfour\n";
    std::ofstream(root_ + "/secret") << "not a log\n";
    symlink((root_ + "/secret").c_str(), (dir_ + "/link.log").c_str());
    mkdir((dir_ + "/sub").c_str(), 0755);
  }
  void TearDown() override { (void)system(("rm -rf " + root_).c_str()); }

  std::string root_, dir_;
};

TEST_F(NodeLogsTest, ListsRegularFilesOnly) {
  auto files = ListLogFiles(dir_);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].name, "raylet.log");
  EXPECT_EQ(files[0].size, 19);
  EXPECT_GT(files[0].mtime_ms, 0);
  EXPECT_TRUE(ListLogFiles(root_ + "/absent").empty());
}

TEST_F(NodeLogsTest, ReadsFromAnOffsetAndTheLastLines) {
  auto all = ReadLogFile(dir_, "raylet.log", 0, 0, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data, "one\ntwo\nthree\nfour\n");
  EXPECT_EQ(all->next_offset, 19);
  auto from = ReadLogFile(dir_, "raylet.log", 8, 0, 4);
  ASSERT_TRUE(from.ok());
  EXPECT_EQ(from->data, "thre");
  EXPECT_EQ(from->next_offset, 12);
  auto past = ReadLogFile(dir_, "raylet.log", 100, 0, 0);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->data, "");
  EXPECT_EQ(past->next_offset, 19);
  auto tail = ReadLogFile(dir_, "raylet.log", 0, 2, 0);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->data, "three\nfour\n");
  EXPECT_EQ(tail->offset, 8);
  auto more = ReadLogFile(dir_, "raylet.log", 0, 10, 0);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->data, all->data);
}

TEST_F(NodeLogsTest, RefusesPathTricks) {
  for (const std::string name : {"../secret", "/etc/passwd", "..", ".", "", "sub/x", "a/../b"}) {
    auto r = ReadLogFile(dir_, name, 0, 0, 0);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_EQ(ReadLogFile(dir_, "link.log", 0, 0, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadLogFile(dir_, "sub", 0, 0, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadLogFile(dir_, "nope.log", 0, 0, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadLogFile(dir_, "raylet.log", -1, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace troupe
