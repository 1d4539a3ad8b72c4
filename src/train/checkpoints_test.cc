// CheckpointStore: numbering, pruning to the best N by score (the newest always kept), and the
// DistributedSampler's split.
#include "src/train/checkpoints.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "gtest/gtest.h"
#include "src/common/package.h"
#include "troupe/train_data.h"

namespace troupe::train {
namespace {

std::string PackageWith(const std::string& content) {
  const std::string dir = ::testing::TempDir() + "/src-" + content;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/model.pt") << content;
  return *PackDirectory(dir);
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CheckpointStoreTest, KeepsTheBestByScoreAndAlwaysTheNewest) {
  const std::string dir = ::testing::TempDir() + "/run";
  std::filesystem::remove_all(dir);
  CheckpointStore store(dir, {/*num_to_keep=*/2, "accuracy", "max"});
  for (double accuracy : {0.5, 0.9, 0.7, 0.6}) {
    auto path = store.Add(PackageWith(std::to_string(accuracy)), {{"accuracy", accuracy}});
    ASSERT_TRUE(path.ok()) << path.status();
  }
  // Kept: the best (0.9, checkpoint 2) and the newest (0.6, checkpoint 4).
  ASSERT_EQ(store.kept().size(), 2u);
  EXPECT_EQ(store.Best()->path, dir + "/checkpoint_000002");
  EXPECT_EQ(store.Latest()->path, dir + "/checkpoint_000004");
  EXPECT_EQ(Read(dir + "/checkpoint_000002/model.pt"), std::to_string(0.9));
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoint_000001"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoint_000003"));
}

TEST(CheckpointStoreTest, WithoutAScoreTheNewestWin) {
  const std::string dir = ::testing::TempDir() + "/plain";
  std::filesystem::remove_all(dir);
  CheckpointStore store(dir, {/*num_to_keep=*/1, "", "max"});
  store.Add(PackageWith("a"), {});
  store.Add(PackageWith("b"), {});
  ASSERT_EQ(store.kept().size(), 1u);
  EXPECT_EQ(store.Best()->path, dir + "/checkpoint_000002");
  EXPECT_EQ(Read(store.Latest()->path + "/model.pt"), "b");
}

TEST(DistributedSamplerTest, RanksSplitEveryEpochDisjointlyAndPadEvenly) {
  const int world = 3;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      DistributedSampler sampler(10, rank, world, /*shuffle=*/true, /*seed=*/5);
      auto indices = sampler.Indices(epoch);
      EXPECT_EQ(indices.size(), 4u);  // ceil(10 / 3): padded by wrapping
      seen.insert(indices.begin(), indices.end());
    }
    for (int64_t i = 0; i < 10; ++i) EXPECT_GE(seen.count(i), 1u) << "index " << i << " unused";
    EXPECT_EQ(seen.size(), 12u);
  }
  DistributedSampler a(100, 0, 2, true, 1), b(100, 0, 2, true, 1);
  EXPECT_EQ(a.Indices(3), b.Indices(3));     // same seed and epoch: same order on every rank
  EXPECT_NE(a.Indices(3), a.Indices(4));     // reshuffled every epoch
  EXPECT_EQ(Batches({1, 2, 3, 4, 5}, 2).size(), 3u);
  EXPECT_EQ(Batches({1, 2, 3, 4, 5}, 2, /*drop_last=*/true).size(), 2u);
}

}  // namespace
}  // namespace troupe::train
