#include "src/object_store/object_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

class ObjectStoreTest : public ::testing::Test {
 protected:
  ObjectStoreTest() {
    static int counter = 0;
    std::string base =
        std::string(std::getenv("TEST_TMPDIR")) + "/store" + std::to_string(counter++);
    base_ = base;
    store_ = std::make_unique<ObjectStore>(
        ObjectStoreOptions{base + "/shm", base + "/spill", /*capacity_bytes=*/100});
  }
  ~ObjectStoreTest() override { store_->Destroy(); }
  std::string spill_dir() const { return base_ + "/spill"; }

  // Creates, fills with `fill` and seals an object.
  ObjectId Make(int64_t size, char fill, bool primary = true, const ObjectOwner& owner = {}) {
    ObjectId id = ObjectId::FromIndex(TaskId::FromRandom(), 1);
    auto path = store_->Create(id, size, primary, owner);
    EXPECT_TRUE(path.ok()) << path.status();
    std::ofstream(*path, std::ios::binary) << std::string(size, fill);
    EXPECT_TRUE(store_->Seal(id).ok());
    return id;
  }
  std::string Read(const ObjectId& id) {
    auto location = store_->Get(id);
    EXPECT_TRUE(location.ok()) << location.status();
    std::ifstream in(location->path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    store_->Release(id);
    return text.str();
  }

  std::string base_;
  std::unique_ptr<ObjectStore> store_;
};

TEST_F(ObjectStoreTest, CreateSealGet) {
  ObjectId id = Make(10, 'a');
  EXPECT_TRUE(store_->Contains(id));
  EXPECT_EQ(Read(id), std::string(10, 'a'));
  EXPECT_EQ(store_->Stats().used_bytes, 10);
  EXPECT_EQ(store_->Create(id, 10, true).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Get(ObjectId::FromIndex(TaskId::FromRandom(), 1)).status().code(),
            absl::StatusCode::kNotFound);
}

int CountFiles(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Regression: objects of an owner that died were never freed, so the store stayed full and the
// spill directory grew by each dead program's footprint.
TEST_F(ObjectStoreTest, OwnerDeathFreesPrimarySecondaryAndSpilledCopies) {
  const ObjectOwner dead{WorkerId::FromRandom(), NodeId::FromRandom()};
  const ObjectOwner alive{WorkerId::FromRandom(), NodeId::FromRandom()};
  ObjectId spilled = Make(40, 's', /*primary=*/true, dead);
  ObjectId kept = Make(20, 'k', /*primary=*/true, alive);
  ObjectId primary = Make(40, 'p', /*primary=*/true, dead);
  ObjectId secondary = Make(30, 'c', /*primary=*/false, dead);  // spills `spilled`
  ASSERT_GT(store_->Stats().spilled_bytes, 0);
  auto pinned = store_->Get(primary);  // a reader still maps it
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->owner.worker_id, dead.worker_id);

  EXPECT_EQ(store_->FreeOwnedBy(dead.worker_id), 3);
  EXPECT_FALSE(store_->Contains(spilled));
  EXPECT_FALSE(store_->Contains(secondary));
  EXPECT_FALSE(store_->Contains(primary));
  EXPECT_TRUE(store_->Contains(kept));
  EXPECT_EQ(store_->Stats().spilled_bytes, 0);
  EXPECT_EQ(CountFiles(spill_dir()), 0);
  store_->Release(primary);  // the last reader lets go: now it is gone
  EXPECT_EQ(store_->Stats().used_bytes, 20);
  EXPECT_EQ(store_->Stats().num_objects, 1);

  // A late object for the dead owner is refused rather than leaked.
  auto late = store_->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 5, true, dead);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(late.status().message(), "exited or died")) << late.status();
  EXPECT_EQ(store_->FreeOwnedBy(dead.worker_id), 0);
  EXPECT_EQ(store_->FreeOwnedBy(WorkerId::Nil()), 0);  // unknown owners are never matched
}

TEST_F(ObjectStoreTest, NodeDeathFreesTheObjectsOfEveryOwnerOnIt) {
  const NodeId dead_node = NodeId::FromRandom();
  ObjectId a = Make(10, 'a', true, {WorkerId::FromRandom(), dead_node});
  ObjectId b = Make(10, 'b', false, {WorkerId::FromRandom(), dead_node});
  ObjectId other = Make(10, 'o', true, {WorkerId::FromRandom(), NodeId::FromRandom()});
  ObjectId unowned = Make(10, 'u');
  EXPECT_EQ(store_->FreeOwnedByNode(dead_node), 2);
  EXPECT_FALSE(store_->Contains(a));
  EXPECT_FALSE(store_->Contains(b));
  EXPECT_TRUE(store_->Contains(other));
  EXPECT_TRUE(store_->Contains(unowned));
  EXPECT_EQ(store_
                ->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 5, true,
                         {WorkerId::FromRandom(), dead_node})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ObjectStoreTest, UnsealedObjectsAreInvisible) {
  ObjectId id = ObjectId::FromIndex(TaskId::FromRandom(), 1);
  ASSERT_TRUE(store_->Create(id, 5, true).ok());
  EXPECT_FALSE(store_->Contains(id));
  store_->Abort(id);
  EXPECT_EQ(store_->Stats().used_bytes, 0);
}

// Regression (chaos test): a task re-run on a node that already held its sealed result failed
// with "already exists" and the task was lost. The sealed copy stays, and becomes the primary.
TEST_F(ObjectStoreTest, ARerunFindsItsSealedResultAndMakesItPrimary) {
  ObjectId id = Make(40, 's', /*primary=*/false);
  EXPECT_EQ(store_->Create(id, 40, /*primary=*/true).status().code(),
            absl::StatusCode::kAlreadyExists);
  Make(40, 'a');
  Make(40, 'b');  // the store is full: a secondary would be evicted, a primary spills
  EXPECT_EQ(store_->Stats().num_evicted_total, 0);
  EXPECT_EQ(Read(id), std::string(40, 's'));
}

// A writer that died before sealing leaves an unsealed entry; a retry writes it afresh.
TEST_F(ObjectStoreTest, ARerunReplacesAnUnsealedLeftover) {
  ObjectId id = ObjectId::FromIndex(TaskId::FromRandom(), 1);
  ASSERT_TRUE(store_->Create(id, 5, true).ok());  // its writer dies here
  auto path = store_->Create(id, 7, true);
  ASSERT_TRUE(path.ok()) << path.status();
  std::ofstream(*path, std::ios::binary) << std::string(7, 'r');
  ASSERT_TRUE(store_->Seal(id).ok());
  EXPECT_EQ(Read(id), std::string(7, 'r'));
  EXPECT_EQ(store_->Stats().used_bytes, 7);
}

TEST_F(ObjectStoreTest, SecondaryCopiesAreEvictedBeforePrimariesSpill) {
  ObjectId primary = Make(40, 'p', true);
  ObjectId secondary = Make(40, 's', false);
  ObjectId third = Make(40, 't', true);  // needs 20 more bytes: evicts the secondary
  EXPECT_FALSE(store_->Contains(secondary));
  EXPECT_TRUE(store_->Contains(primary));
  EXPECT_EQ(store_->Stats().num_evicted_total, 1);
  EXPECT_EQ(store_->Stats().num_spilled_total, 0);
  (void)third;
}

TEST_F(ObjectStoreTest, SpilledPrimariesComeBackByteIdentical) {
  ObjectId first = Make(40, '1');
  ObjectId second = Make(40, '2');
  ObjectId third = Make(40, '3');  // spills `first`, the least recently used
  auto stats = store_->Stats();
  EXPECT_EQ(stats.num_spilled_total, 1);
  EXPECT_EQ(stats.spilled_bytes, 40);
  EXPECT_EQ(stats.used_bytes, 80);
  EXPECT_EQ(Read(first), std::string(40, '1'));  // restored (spilling `second` to make room)
  EXPECT_EQ(store_->Stats().num_restored_total, 1);
  EXPECT_EQ(Read(second), std::string(40, '2'));
  EXPECT_EQ(Read(third), std::string(40, '3'));
}

TEST_F(ObjectStoreTest, FullOfPinnedObjectsFailsClearlyInsteadOfBlocking) {
  ObjectId a = Make(50, 'a');
  ObjectId b = Make(50, 'b');
  ASSERT_TRUE(store_->Get(a).ok());
  ASSERT_TRUE(store_->Get(b).ok());
  auto full = store_->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 10, true);
  ASSERT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(full.status().message(), "object store full")) << full.status();
  EXPECT_TRUE(absl::StrContains(full.status().message(), "--object-store-memory"));
  auto huge = store_->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 1000, true);
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "larger than the whole store"));
  store_->Release(a);
  EXPECT_TRUE(store_->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 10, true).ok());
}

// Regression: with the spill disk full, Create advised a larger --object-store-memory (only the
// raylet log said the disk was full), and reading a spilled object failed although its file was
// there (the core worker then reported it lost).
TEST_F(ObjectStoreTest, AFullSpillDiskIsNamedAndSpilledObjectsStayReadable) {
  store_->Destroy();
  store_ = std::make_unique<ObjectStore>(ObjectStoreOptions{
      base_ + "/shm", spill_dir(), /*capacity_bytes=*/100, /*testing_spill_disk_bytes=*/40});
  ObjectId first = Make(40, '1');
  ObjectId second = Make(40, '2');
  ObjectId third = Make(40, '3');  // spills `first`: the spill disk is now full
  ASSERT_EQ(store_->Stats().spilled_bytes, 40);
  auto full = store_->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 40, true);
  ASSERT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  const std::string message(full.status().message());
  EXPECT_TRUE(absl::StrContains(message, "spill disk is full")) << message;
  EXPECT_TRUE(absl::StrContains(message, spill_dir())) << message;    // where
  EXPECT_TRUE(absl::StrContains(message, "--spill-dir")) << message;  // what to do
  EXPECT_FALSE(absl::StrContains(message, "--object-store-memory")) << message;
  // `first` cannot come back into memory (that needs spilling `second`, and the disk is full):
  // it is read from its spill file, byte-identical.
  auto location = store_->Get(first);
  ASSERT_TRUE(location.ok()) << location.status();
  EXPECT_TRUE(absl::StartsWith(location->path, spill_dir())) << location->path;
  std::ifstream in(location->path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  EXPECT_EQ(bytes.str(), std::string(40, '1'));
  // Freed while read: its file stays until the reader lets go.
  store_->Delete(first);
  struct stat st;
  EXPECT_EQ(stat(location->path.c_str(), &st), 0);
  store_->Release(first);
  EXPECT_NE(stat(location->path.c_str(), &st), 0);
  EXPECT_EQ(store_->Stats().spilled_bytes, 0);
  EXPECT_EQ(Read(second), std::string(40, '2'));
  EXPECT_EQ(Read(third), std::string(40, '3'));
}

TEST_F(ObjectStoreTest, RepeatedSpillFailuresAreLoggedOnceAMinute) {
  store_->Destroy();
  store_ = std::make_unique<ObjectStore>(ObjectStoreOptions{
      base_ + "/shm", spill_dir(), /*capacity_bytes=*/100, /*testing_spill_disk_bytes=*/40});
  Make(40, '1');
  Make(40, '2');
  Make(40, '3');  // the spill disk is now full
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 20; ++i) {  // a program retrying its Put
    auto full = store_->Create(ObjectId::FromIndex(TaskId::FromRandom(), 1), 40, true);
    EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (size_t at = 0; (at = log.find("spilling object", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1) << log;
}

TEST_F(ObjectStoreTest, ASpilledObjectIsReadInPlaceWhileMemoryIsAllPinned) {
  ObjectId first = Make(40, '1');
  ObjectId second = Make(40, '2');
  ObjectId third = Make(40, '3');  // spills `first`
  ASSERT_TRUE(store_->Get(second).ok());
  ASSERT_TRUE(store_->Get(third).ok());
  EXPECT_EQ(Read(first), std::string(40, '1'));
  store_->Release(second);
  store_->Release(third);
  EXPECT_EQ(Read(first), std::string(40, '1'));  // now restored into memory
  EXPECT_EQ(store_->Stats().num_restored_total, 1);
}

TEST_F(ObjectStoreTest, DeleteWaitsForReaders) {
  ObjectId id = Make(30, 'x');
  auto location = store_->Get(id);
  ASSERT_TRUE(location.ok());
  store_->Delete(id);
  EXPECT_FALSE(store_->Contains(id));
  struct stat st;
  EXPECT_EQ(stat(location->path.c_str(), &st), 0);  // still there for the reader
  store_->Release(id);
  EXPECT_NE(stat(location->path.c_str(), &st), 0);
  EXPECT_EQ(store_->Stats().used_bytes, 0);
  EXPECT_EQ(store_->Stats().num_objects, 0);
}

TEST_F(ObjectStoreTest, DeletingASpilledObjectRemovesItsFile) {
  ObjectId first = Make(60, '1');
  Make(60, '2');  // spills first
  ASSERT_EQ(store_->Stats().spilled_bytes, 60);
  store_->Delete(first);
  EXPECT_EQ(store_->Stats().spilled_bytes, 0);
}

TEST(ObjectStoreReuseTest, FreedFilesAreReusedAndDroppedWhenSpaceIsNeeded) {
  std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/reuse";
  ObjectStore store({base + "/shm", base + "/spill", /*capacity_bytes=*/8 << 20});
  auto make = [&](int64_t size) {
    ObjectId id = ObjectId::FromIndex(TaskId::FromRandom(), 1);
    auto path = store.Create(id, size, true);
    EXPECT_TRUE(path.ok()) << path.status();
    EXPECT_TRUE(store.Seal(id).ok());
    return std::make_pair(id, *path);
  };
  auto [first, first_path] = make(2 << 20);
  struct stat before;
  ASSERT_EQ(stat(first_path.c_str(), &before), 0);
  store.Delete(first);
  EXPECT_EQ(store.Stats().used_bytes, 0);
  auto [second, second_path] = make(2 << 20);
  struct stat after;
  ASSERT_EQ(stat(second_path.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "the freed file should have been reused";
  // A kept file never blocks a new object: 8 MB fits after dropping what is kept.
  store.Delete(second);
  auto [big, big_path] = make(8 << 20);
  EXPECT_EQ(store.Stats().used_bytes, 8 << 20);
  store.Destroy();
}

}  // namespace
}  // namespace troupe
