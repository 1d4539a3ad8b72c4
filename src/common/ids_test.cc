#include "src/common/ids.h"

#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

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

// IDs come from a per-thread block of random bytes: threads and blocks never repeat one.
TEST(IdsTest, IdsFromManyThreadsAndBlocksAreDistinct) {
  std::vector<std::vector<TaskId>> made(4);
  std::vector<std::thread> threads;
  for (auto& ids : made) {
    threads.emplace_back([&ids] {
      for (int i = 0; i < 5000; ++i) ids.push_back(TaskId::FromRandom());  // ~150 blocks
    });
  }
  for (auto& thread : threads) thread.join();
  absl::flat_hash_set<TaskId> all;
  for (const auto& ids : made) all.insert(ids.begin(), ids.end());
  EXPECT_EQ(all.size(), 20000u);
}

// A forked child would otherwise hand out the same IDs as its parent from the copied block.
TEST(IdsTest, AForkedChildDoesNotRepeatItsParentsIds) {
  (void)TaskId::FromRandom();  // the block is filled and partly used before the fork
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string id = TaskId::FromRandom().Binary();
    _exit(write(fds[1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  close(fds[1]);
  const std::string parent = TaskId::FromRandom().Binary();
  std::string from_child(TaskId::Size(), '\0');
  ASSERT_EQ(read(fds[0], from_child.data(), from_child.size()),
            static_cast<ssize_t>(from_child.size()));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(from_child, parent);
}

}  // namespace
}  // namespace troupe
