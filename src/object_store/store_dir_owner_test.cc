#include "src/object_store/store_dir_owner.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/object_store/object_store.h"

namespace troupe {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string NewParent() {
  static int counter = 0;
  std::string parent =
      std::string(std::getenv("TEST_TMPDIR")) + "/parent" + std::to_string(counter++);
  mkdir(parent.c_str(), 0700);
  return parent;
}

ObjectStoreOptions StoreAt(const std::string& dir) {
  return ObjectStoreOptions{dir, dir + "-spill", /*capacity_bytes=*/1 << 20};
}

// A child process makes a store at `dir` with one object in it, then dies by SIGKILL (`stay`:
// waits for the test to kill it): nothing of it is cleaned up.
pid_t StoreInChild(const std::string& dir, bool stay = false) {
  pid_t pid = fork();
  if (pid == 0) {
    ObjectStore store(StoreAt(dir));
    auto created = store.Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 64, true);
    if (!created.ok()) _exit(3);
    while (stay) pause();
    raise(SIGKILL);
  }
  return pid;
}

void Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
}

TEST(StoreDirOwnerTest, AStoreOfAKilledProcessIsRemovedWhenTheNextStoreStarts) {
  const std::string parent = NewParent();
  Reap(StoreInChild(parent + "/troupe-dead"));
  ASSERT_TRUE(Exists(parent + "/troupe-dead/owner.lock")) << "the killed store left its files";

  ObjectStore next(StoreAt(parent + "/troupe-next"));
  EXPECT_FALSE(Exists(parent + "/troupe-dead"));
  EXPECT_TRUE(Exists(parent + "/troupe-next/owner.lock"));
  next.Destroy();
  EXPECT_FALSE(Exists(parent + "/troupe-next")) << "Destroy removes the lock file too";
}

TEST(StoreDirOwnerTest, LiveStoresAndOthersDirectoriesAreKept) {
  const std::string parent = NewParent();
  const pid_t live = StoreInChild(parent + "/troupe-live", /*stay=*/true);
  // Another program's directory (no lock file), one named otherwise whose owner died, and one
  // whose owner has not written itself into its lock file yet.
  mkdir((parent + "/troupe-foreign").c_str(), 0700);
  std::ofstream(parent + "/troupe-foreign/data") << "x";
  Reap(StoreInChild(parent + "/other-dead"));
  mkdir((parent + "/troupe-starting").c_str(), 0700);
  std::ofstream(parent + "/troupe-starting/owner.lock");
  // Wait for the live child's store (its lock file names it).
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(parent + "/troupe-live/owner.lock");
    std::string pid;
    if (in >> pid && pid == std::to_string(live)) break;
    usleep(10000);
  }

  EXPECT_EQ(RemoveStoreDirsOfDeadOwners(parent, kStoreDirPrefix, "troupe-mine"), 0);
  EXPECT_TRUE(Exists(parent + "/troupe-live/owner.lock"));
  EXPECT_TRUE(Exists(parent + "/troupe-foreign/data"));
  EXPECT_TRUE(Exists(parent + "/other-dead/owner.lock"));
  EXPECT_TRUE(Exists(parent + "/troupe-starting/owner.lock"));

  kill(live, SIGKILL);  // the live store's process dies now
  Reap(live);
  EXPECT_EQ(RemoveStoreDirsOfDeadOwners(parent, kStoreDirPrefix, "troupe-mine"), 1);
  EXPECT_FALSE(Exists(parent + "/troupe-live"));
}

TEST(StoreDirOwnerTest, ASecondStoreOnTheSameDirectoryIsRefusedWithWhatToDo) {
  const std::string dir = NewParent() + "/troupe-shared";
  mkdir(dir.c_str(), 0700);
  auto first = StoreDirOwner::Acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  pid_t pid = fork();
  if (pid == 0) {
    auto second = StoreDirOwner::Acquire(dir);
    _exit(!second.ok() && second.status().code() == absl::StatusCode::kFailedPrecondition &&
                  absl::StrContains(second.status().message(), "--object-store-dir")
              ? 0
              : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Released: the next owner takes it.
  *first = StoreDirOwner();
  EXPECT_TRUE(StoreDirOwner::Acquire(dir).ok());
}

}  // namespace
}  // namespace troupe
