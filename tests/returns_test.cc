// Multiple returns (SetNumReturns<N>: one ObjectRef per element of a returned std::tuple) on
// real clusters started by TestCluster: each return is its own object, freed and rebuilt by
// lineage on its own. This binary is also the worker program: raylets start it in worker mode,
// where main() hands over to troupe::Init before any test runs.
#include <signal.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/raylet_client.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;
using Bytes = std::vector<uint8_t>;

Bytes MakeBytes(int64_t size, int seed) {
  Bytes bytes(size);
  uint64_t state = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (auto& b : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  return bytes;
}

uint64_t ChecksumOf(const Bytes& bytes) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (uint8_t b : bytes) hash = (hash ^ b) * 1099511628211ull;
  return hash;
}

// Two large values (each goes to the object store on its own), seeds `seed` and `seed + 1`.
std::tuple<Bytes, Bytes> MakeTwo(int64_t size, int seed) {
  return {MakeBytes(size, seed), MakeBytes(size, seed + 1)};
}

std::tuple<int, std::string, std::vector<int>> Describe(int n) {
  return {n * 2, "n=" + std::to_string(n), std::vector<int>(n, 7)};
}

std::tuple<int, int> Throws(int code) {
  throw std::runtime_error("split boom " + std::to_string(code));
}

class Tally {
 public:
  static Tally* Create(int start) { return new Tally(start); }
  // The running total and how many calls made it.
  std::tuple<int, int> Add(int x) {
    total_ += x;
    return {total_, ++calls_};
  }

 private:
  explicit Tally(int start) : total_(start) {}
  int total_;
  int calls_ = 0;
};

TROUPE_REMOTE(MakeTwo, Describe, Throws, Tally::Create, &Tally::Add);

int64_t StoreBytesUsedEverywhere(TestCluster& cluster) {
  int64_t total = 0;
  const nlohmann::json status = cluster.Status();
  for (const auto& node : status["nodes"]) {
    if (node.value("state", std::string("ALIVE")) != "ALIVE") continue;
    troupe::RayletClient raylet(
        absl::StrCat(node["node_ip"].get<std::string>(), ":", node["raylet_port"].get<int>()),
        cluster.token());
    auto stats = raylet.GetNodeStats();
    if (!stats.ok()) return -1;
    total += stats->object_store().used_bytes();
  }
  return total;
}

void KillNode(TestCluster& cluster, const std::string& node) {
  const int raylet_pid = troupe::testing::FindNode(cluster.Status(), node)["raylet_pid"];
  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
}

// Two nodes offer "pin"; the task prefers `doomed`, so it runs there first and on the other
// node when it runs again.
std::tuple<troupe::ObjectRef<Bytes>, troupe::ObjectRef<Bytes>> MakeTwoOn(const std::string& doomed,
                                                                         int64_t size, int seed) {
  return troupe::Task(MakeTwo)
      .SetResources({{"CPU", 1}, {"pin", 1}})
      .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
      .SetNumReturns<2>()
      .Remote(size, seed);
}

TEST(ReturnsTest, TasksAndActorCallsSplitTheirTupleIntoTypedRefs) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto [twice, label, sevens] = troupe::Task(Describe).SetNumReturns<3>().Remote(3);
  EXPECT_EQ(*troupe::Get(twice), 6);
  EXPECT_EQ(*troupe::Get(label), "n=3");
  EXPECT_EQ(*troupe::Get(sevens), (std::vector<int>{7, 7, 7}));
  // The plain call still gives one ref to the whole tuple.
  EXPECT_EQ(*troupe::Get(troupe::Task(Describe).Remote(1)),
            std::make_tuple(2, std::string("n=1"), std::vector<int>{7}));
  // A split ref passed on to another task is an argument like any other.
  auto [first, second] = troupe::Task(MakeTwo).SetNumReturns<2>().Remote(16, 4);
  EXPECT_EQ(ChecksumOf(*troupe::Get(second)), ChecksumOf(MakeBytes(16, 5)));

  auto tally = troupe::Actor(Tally::Create).Remote(10);
  auto [total, calls] = tally.Task(&Tally::Add).SetNumReturns<2>().Remote(5);
  EXPECT_EQ(*troupe::Get(total), 15);
  EXPECT_EQ(*troupe::Get(calls), 1);
  EXPECT_EQ(*troupe::Get(tally.Task(&Tally::Add).Remote(1)), std::make_tuple(16, 2));

  // An exception fails every return with it.
  auto [a, b] = troupe::Task(Throws).SetNumReturns<2>().Remote(7);
  for (const auto* ref : {&a, &b}) {
    try {
      troupe::Get(*ref);
      ADD_FAILURE() << "expected TaskError";
    } catch (const troupe::TaskError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "split boom 7")) << e.what();
    }
  }
}

TEST(ReturnsTest, FreeingOneReturnLeavesTheOtherReadable) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  constexpr int64_t kSize = 1 << 20;  // past the inline limit: both live in the object store
  auto [kept, dropped] = troupe::Task(MakeTwo).SetNumReturns<2>().Remote(kSize, 21);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{kept, dropped}, 2);
  EXPECT_GE(StoreBytesUsedEverywhere(cluster), 2 * kSize);
  dropped = troupe::ObjectRef<Bytes>();  // its last reference
  int64_t used = -1;
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsedEverywhere(cluster)) < 2 * kSize; },
                        absl::Seconds(10), "the dropped return to be freed"))
      << used << " bytes used";
  EXPECT_GE(used, kSize);  // the other one is still there
  EXPECT_EQ(ChecksumOf(*troupe::Get(kept)), ChecksumOf(MakeBytes(kSize, 21)));
  kept = troupe::ObjectRef<Bytes>();
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsedEverywhere(cluster)) == 0; },
                        absl::Seconds(10), "the other return to be freed"))
      << used << " bytes used";
}

// The node holding both returns dies: each is rebuilt by running the task again, once.
TEST(ReturnsTest, ReturnsLostWithTheirNodeAreRebuiltByLineage) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  auto [a, b] = MakeTwoOn(doomed, 1 << 20, 31);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{a, b}, 2);
  KillNode(cluster, doomed);
  EXPECT_EQ(ChecksumOf(*troupe::Get(b, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 32)));
  EXPECT_EQ(ChecksumOf(*troupe::Get(a, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 31)));
}

// Regression: the task's lineage went with the first of its returns to be freed, so a lost
// sibling could no longer be rebuilt.
TEST(ReturnsTest, AReturnIsRebuiltAfterItsSiblingWasFreed) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  auto [kept, dropped] = MakeTwoOn(doomed, 1 << 20, 41);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{kept, dropped}, 2);
  dropped = troupe::ObjectRef<Bytes>();
  KillNode(cluster, doomed);
  EXPECT_EQ(ChecksumOf(*troupe::Get(kept, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 41)));
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
