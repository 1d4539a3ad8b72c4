// Node-to-node object transfer on real clusters (head + raylets on loopback, started by
// TestCluster): objects of every size arrive intact, and a source raylet killed mid-transfer is
// replaced by another copy (or, with none, the object is rebuilt from lineage). This binary is
// also the worker program: raylets start it in worker mode. Also: a full store spills into the
// directory `troupe start --spill-dir` names.
// The kill tests slow the source down with $TROUPE_TESTING_OBJECT_SERVE_DELAY_MS (set only for
// the raylet started while it is set), so the kill lands while the transfer is under way; each
// checks the destination raylet's log to prove the failover (or the abort) really happened.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"

namespace {

using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;
using Bytes = std::vector<uint8_t>;

uint64_t Checksum(const uint8_t* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

Bytes MakeBytes(int64_t size, int seed) {
  Bytes bytes(size);
  uint64_t state = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (auto& b : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  return bytes;
}

uint64_t ChecksumOf(const Bytes& bytes) { return Checksum(bytes.data(), bytes.size()); }

TROUPE_REMOTE(MakeBytes, ChecksumOf);

// Starts a worker node whose raylet serves every object chunk `delay_ms` late.
absl::StatusOr<std::string> AddSlowWorker(TestCluster& cluster, int delay_ms,
                                          const std::vector<std::string>& flags) {
  setenv("TROUPE_TESTING_OBJECT_SERVE_DELAY_MS", std::to_string(delay_ms).c_str(), 1);
  auto node = cluster.AddWorker(flags);
  unsetenv("TROUPE_TESTING_OBJECT_SERVE_DELAY_MS");
  return node;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every raylet log of the cluster, concatenated.
std::string RayletLogs(TestCluster& cluster) {
  std::string all;
  for (const std::string& path : cluster.RayletLogs()) all += ReadAll(path);
  return all;
}

int64_t StoreUsedBytes(TestCluster& cluster, const std::string& node) {
  nlohmann::json entry = troupe::testing::FindNode(cluster.Status(), node);
  return entry.is_null() ? 0 : entry["object_store"].value("used_bytes", int64_t{0});
}

// Waits until the head's store holds `bytes` more than `before` (the copy being pulled is
// created at its full size before its first chunk lands), then SIGKILLs `node`'s raylet.
void KillWhenTheCopyIsUnderWay(TestCluster& cluster, const std::string& head, int64_t before,
                               int64_t bytes, const std::string& node) {
  ASSERT_TRUE(WaitUntil([&] { return StoreUsedBytes(cluster, head) >= before + bytes; },
                        absl::Seconds(30), "the head to start pulling the object",
                        absl::Milliseconds(50)))
      << "head " << head << ", before " << before << ": " << cluster.Status().dump(1);
  const int raylet_pid = troupe::testing::FindNode(cluster.Status(), node)["raylet_pid"];
  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
}

std::string HeadNode(TestCluster& cluster) {
  const nlohmann::json status = cluster.Status();
  for (const auto& node : status["nodes"]) {
    if (node.value("is_head", false)) return node["node_id"];
  }
  return "";
}

TEST(ObjectTransferTest, ObjectsOfEverySizeMoveBetweenNodesIntact) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string producer, cluster.AddWorker({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string consumer, cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  for (int64_t size : {int64_t{1} << 10, int64_t{8} << 20, int64_t{200} << 20}) {
    SCOPED_TRACE(size);
    auto bytes = troupe::Task(MakeBytes)
                     .SetSchedulingStrategy(troupe::NodeAffinity{producer})
                     .Remote(size, static_cast<int>(size));
    auto at_consumer = troupe::Task(ChecksumOf)
                           .SetSchedulingStrategy(troupe::NodeAffinity{consumer})
                           .Remote(bytes);
    const uint64_t expected = ChecksumOf(MakeBytes(size, static_cast<int>(size)));
    EXPECT_EQ(*troupe::Get(at_consumer), expected);
    // And on the driver's node (a third one), through a zero-copy view.
    auto view = troupe::GetView(bytes);
    EXPECT_EQ(Checksum(view->data(), view->size()), expected);
  }
}

// Wait(..., fetch_local): with it (as Ray's default) a ready object on another node is pulled
// into this node's store before Wait counts it; without it (Troupe's default), Wait only reports
// readiness.
TEST(ObjectTransferTest, WaitWithFetchLocalPullsReadyObjectsHere) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=0"}));
  ASSERT_OK_AND_ASSIGN(std::string producer, cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string head = HeadNode(cluster);
  const int64_t size = int64_t{16} << 20;
  auto bytes =
      troupe::Task(MakeBytes).SetSchedulingStrategy(troupe::NodeAffinity{producer}).Remote(size, 7);
  auto seen =
      troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{bytes}, 1, std::chrono::seconds(60),
                   /*fetch_local=*/false);
  ASSERT_EQ(seen.ready.size(), 1u);
  const int64_t before = StoreUsedBytes(cluster, head);
  auto here = troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{bytes}, 1,
                           std::chrono::seconds(60), /*fetch_local=*/true);
  ASSERT_EQ(here.ready.size(), 1u);
  EXPECT_TRUE(WaitUntil([&] { return StoreUsedBytes(cluster, head) >= before + size; },
                        absl::Seconds(30), "the object's copy in the head's store"))
      << "before " << before << ": " << cluster.Status().dump(1);
  auto view = troupe::GetView(bytes);
  EXPECT_EQ(Checksum(view->data(), view->size()), ChecksumOf(MakeBytes(size, 7)));
}

// `troupe start --spill-dir=DIR`: objects that do not fit in the store go to files in DIR (not
// the session's spill directory) and read back intact.
TEST(ObjectTransferTest, AFullStoreSpillsIntoTheSpillDirGiven) {
  const std::string spill_dir = ::testing::TempDir() + "/spill-here";
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--object-store-memory=64MiB",
                                           "--spill-dir=" + spill_dir}));
  Driver driver(cluster);
  std::vector<troupe::ObjectRef<Bytes>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(troupe::Put(MakeBytes(int64_t{16} << 20, i)));
  int spilled_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(spill_dir)) {
    spilled_files += entry.is_regular_file() ? 1 : 0;
  }
  EXPECT_GE(spilled_files, 4) << "128 MiB put into a 64 MiB store";
  EXPECT_FALSE(std::filesystem::exists(cluster.HeadSessionDir() + "/spill") &&
               !std::filesystem::is_empty(cluster.HeadSessionDir() + "/spill"));
  for (int i = 0; i < 8; ++i) {
    auto view = troupe::GetView(refs[i]);
    EXPECT_EQ(Checksum(view->data(), view->size()), ChecksumOf(MakeBytes(int64_t{16} << 20, i)))
        << "object " << i;
  }
}

TEST(ObjectTransferTest, ASourceKilledMidTransferIsReplacedByAnotherCopy) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string source, AddSlowWorker(cluster, 400, {"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string other, cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string head = HeadNode(cluster);
  const int64_t size = 64 << 20;
  auto bytes =
      troupe::Task(MakeBytes).SetSchedulingStrategy(troupe::NodeAffinity{source}).Remote(size, 3);
  const uint64_t expected = ChecksumOf(MakeBytes(size, 3));
  // A second copy, on `other` (pulled from `source` while it is still alive).
  ASSERT_EQ(*troupe::Get(troupe::Task(ChecksumOf)
                             .SetSchedulingStrategy(troupe::NodeAffinity{other})
                             .Remote(bytes)),
            expected);
  const int64_t before = StoreUsedBytes(cluster, head);
  std::thread kill([&] { KillWhenTheCopyIsUnderWay(cluster, head, before, size, source); });
  // The head pulls from `source` first (the primary copy), which dies partway.
  auto view = troupe::GetView(bytes, std::chrono::seconds(60));
  kill.join();
  EXPECT_EQ(Checksum(view->data(), view->size()), expected);
  const std::string logs = RayletLogs(cluster);
  EXPECT_TRUE(absl::StrContains(logs, "the rest comes from the raylet at")) << logs;
}

TEST(ObjectTransferTest, TheOnlySourceKilledMidTransferFallsBackToLineage) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string source, AddSlowWorker(cluster, 400,
                                                         {"--num-cpus=1",
                                                          R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  const std::string head = HeadNode(cluster);
  const int64_t size = 64 << 20;
  // Runs on `source` first; when its only copy is lost, again on the other "pin" node.
  auto bytes = troupe::Task(MakeBytes)
                   .SetResources({{"CPU", 1}, {"pin", 1}})
                   .SetSchedulingStrategy(troupe::NodeAffinity{source, /*soft=*/true})
                   .Remote(size, 4);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{bytes}, 1);
  const int64_t before = StoreUsedBytes(cluster, head);
  std::thread kill([&] { KillWhenTheCopyIsUnderWay(cluster, head, before, size, source); });
  auto view = troupe::GetView(bytes, std::chrono::seconds(60));
  kill.join();
  EXPECT_EQ(Checksum(view->data(), view->size()), ChecksumOf(MakeBytes(size, 4)));
  const std::string logs = RayletLogs(cluster);
  // The half-written copy was aborted, not sealed: the head then got the rebuilt object.
  EXPECT_TRUE(absl::StrContains(logs, "no copy is left; the partial copy is dropped")) << logs;
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
