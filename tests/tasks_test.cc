// Remote tasks and objects on real multi-node clusters (head + raylets on loopback, started by
// TestCluster). This binary is also the worker program: raylets start it in worker mode, where
// main() hands over to troupe::Init before any test runs.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/raylet_client.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace rpc = troupe::rpc;

namespace {

int Plus(int a, int b) { return a + b; }

int SumOfSquares(int n) {
  std::vector<troupe::ObjectRef<int>> parts;
  for (int i = 1; i <= n; ++i) parts.push_back(troupe::Task(Plus).Remote(i * i, 0));
  int sum = 0;
  for (const auto& value : troupe::Get(parts)) sum += *value;
  return sum;
}

// A nested level deeper: tasks waiting on tasks waiting on tasks.
int Tree(int depth) {
  if (depth == 0) return 1;
  auto left = troupe::Task(Tree).Remote(depth - 1);
  auto right = troupe::Task(Tree).Remote(depth - 1);
  return *troupe::Get(left) + *troupe::Get(right);
}

uint64_t Checksum(const uint8_t* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

std::vector<uint8_t> MakeBytes(int64_t size, int seed) {
  std::vector<uint8_t> bytes(size);
  uint64_t state = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (auto& b : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  return bytes;
}

uint64_t ChecksumOf(const std::vector<uint8_t>& bytes) {
  return Checksum(bytes.data(), bytes.size());
}

// The task bodies below that sleep do so on purpose: a task that takes its time is the scenario
// (tasks overlapping, a task still running when its node is killed, a CPU held busy).
std::string NodeOfTask(int sleep_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  return std::getenv("TROUPE_NODE_ID");
}

int Fail(int code) { throw std::runtime_error("boom " + std::to_string(code)); }

// Writes its pid to `pid_file` on the first attempt, then takes its time.
int SlowOnce(std::string pid_file, int value) {
  if (access(pid_file.c_str(), F_OK) != 0) {
    std::ofstream(pid_file) << getpid();
    sleep(30);  // killed by the test long before this
  }
  return value * 2;
}

// The GPUs leased to this task ("a,b"), or "<unset>".
std::string VisibleDevices(int sleep_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  std::string ids;
  for (int id : troupe::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  return ids.empty() ? "<unset>" : ids;
}

int Sleep(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

// Receives references inside a container (it borrows them) and reads them.
int SumRefs(std::vector<troupe::ObjectRef<int>> refs) {
  int sum = 0;
  for (const auto& ref : refs) sum += *troupe::Get(ref);
  return sum;
}

// Waits on references it borrows (they arrive inside a container); returns how many were ready.
int WaitInTask(std::vector<troupe::ObjectRef<int>> refs, int num_ready, int timeout_ms) {
  return static_cast<int>(
      troupe::Wait(refs, num_ready, std::chrono::milliseconds(timeout_ms)).ready.size());
}

std::string ReadRelative(std::string path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : "<missing>";
}

int Say(std::string text) {
  std::cout << text << std::endl;
  return static_cast<int>(getpid());
}

// Sleeps, then says where it ran (after surviving a node death it runs elsewhere).
std::string SleepThenNode(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return std::getenv("TROUPE_NODE_ID");
}

// Holds its worker until the memory-usage file at `path` reads below 0.5 (at most 60 s), so the
// memory monitor finds it leased while the file says the node is out of memory. Returns its pid.
int RunUntilMemoryIsFine(std::string path) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    std::ifstream file(path);
    double usage = 1;
    if (file >> usage && usage < 0.5) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, not a timing
  }
  return static_cast<int>(getpid());
}

// A large result computed from a large argument (both live in object stores).
std::vector<uint8_t> Reversed(std::vector<uint8_t> bytes) {
  std::reverse(bytes.begin(), bytes.end());
  return bytes;
}

// Puts a large value (this worker owns it) and returns the reference inside a vector; writes
// its pid to `pid_file` first.
std::vector<troupe::ObjectRef<std::vector<uint8_t>>> PutInside(std::string pid_file, int64_t size,
                                                               int seed) {
  std::ofstream(pid_file) << getpid();
  return {troupe::Put(MakeBytes(size, seed))};
}

// Reads the references inside its argument (it borrows them) and sums their checksums.
uint64_t ChecksumOfEach(std::vector<troupe::ObjectRef<std::vector<uint8_t>>> refs) {
  uint64_t sum = 0;
  for (const auto& ref : refs) sum += ChecksumOf(*troupe::Get(ref));
  return sum;
}

// Returns the references it received, nested in its result (it borrows them meanwhile).
std::vector<troupe::ObjectRef<std::vector<uint8_t>>> PassOn(
    std::vector<troupe::ObjectRef<std::vector<uint8_t>>> refs) {
  return refs;
}

// Hands the references to a subtask and returns what that returned: the subtask's worker hands
// references owned by a third process (the driver) to this one.
std::vector<troupe::ObjectRef<std::vector<uint8_t>>> PassOnViaSubtask(
    std::vector<troupe::ObjectRef<std::vector<uint8_t>>> refs) {
  return *troupe::Get(troupe::Task(PassOn).Remote(refs));
}

TROUPE_REMOTE(Plus, SumOfSquares, Tree, MakeBytes, ChecksumOf, NodeOfTask, Fail, SlowOnce,
              VisibleDevices, Sleep, Say, SleepThenNode, SumRefs, ReadRelative, WaitInTask,
              RunUntilMemoryIsFine, Reversed, PutInside, ChecksumOfEach, PassOn, PassOnViaSubtask);

using troupe::testing::TestCluster;

// Connects this test's driver to `cluster`; shuts down when the test ends.
using troupe::testing::Driver;
using troupe::testing::WaitUntil;

std::string HeadRayletAddress(TestCluster& cluster) {
  nlohmann::json status = cluster.Status();
  for (const auto& node : status["nodes"]) {
    if (node["is_head"].get<bool>()) {
      return absl::StrCat(node["node_ip"].get<std::string>(), ":", node["raylet_port"].get<int>());
    }
  }
  ADD_FAILURE() << "no head node in " << status.dump();
  return "";
}

int64_t StoreBytesUsed(TestCluster& cluster) {
  troupe::RayletClient raylet(HeadRayletAddress(cluster), cluster.token());
  auto stats = raylet.GetNodeStats();
  return stats.ok() ? stats->object_store().used_bytes() : -1;
}

// Bytes in the object store of every alive node, summed.
int64_t StoreBytesUsedEverywhere(TestCluster& cluster) {
  int64_t total = 0;
  const nlohmann::json status = cluster.Status();  // outlives the loop over its nodes
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

int ReadPid(const std::string& pid_file) {
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  return pid;
}

int64_t RssAnonKb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "RssAnon:")) {
      int64_t kb = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(8, line.size() - 8 - 3)), &kb)) {
        return -1;
      }
      return kb;
    }
  }
  return -1;
}

TEST(TasksTest, TenThousandTasksAcrossThreeRayletsAllCorrect) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  std::vector<troupe::ObjectRef<int>> refs;
  for (int i = 0; i < 10000; ++i) refs.push_back(troupe::Task(Plus).Remote(i, i));
  auto values = troupe::Get(refs);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(*values[i], 2 * i) << i;
  // Spread them explicitly too: every node runs some.
  std::set<std::string> nodes;
  std::vector<troupe::ObjectRef<std::string>> where;
  for (int i = 0; i < 30; ++i) {
    where.push_back(troupe::Task(NodeOfTask).SetSchedulingStrategy(troupe::Spread{}).Remote(100));
  }
  for (const auto& node : troupe::Get(where)) nodes.insert(*node);
  EXPECT_EQ(nodes.size(), 3u);
}

TEST(TasksTest, NestedTasksDoNotDeadlockThePool) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  EXPECT_EQ(*troupe::Get(troupe::Task(SumOfSquares).Remote(20)), 2870);
  // 2^5 leaves, every inner task blocked on its children while 2 CPUs exist.
  EXPECT_EQ(*troupe::Get(troupe::Task(Tree).Remote(5)), 32);
}

// The threading contract of troupe/api.h: calls from several threads, and Shutdown racing them.
// Every thread must end with a TroupeError (RuntimeError once Shutdown began), none may crash or
// hang, and the process must be able to Init again.
TEST(TasksTest, ShutdownRacesCallsFromOtherThreads) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  constexpr int kThreads = 6;
  constexpr int kRoundTripsBeforeShutdown = 20;
  absl::Mutex mu;
  int warmed_up = 0;
  std::atomic<int> wrong_values{0}, ended_with_troupe_error{0}, ended_otherwise{0};
  {
    Driver driver(cluster);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          for (int i = 0;; ++i) {
            auto sum = troupe::Task(Plus).Remote(t, i);
            auto stored = troupe::Put(i);
            if (*troupe::Get(sum, std::chrono::seconds(60)) != t + i) wrong_values.fetch_add(1);
            troupe::Wait(std::vector<troupe::ObjectRef<int>>{stored}, 1, std::chrono::seconds(60));
            if (i == kRoundTripsBeforeShutdown) {
              absl::MutexLock lock(&mu);
              ++warmed_up;
            }
          }
        } catch (const troupe::TroupeError&) {
          ended_with_troupe_error.fetch_add(1);
        } catch (...) {
          ended_otherwise.fetch_add(1);
        }
      });
    }
    {
      absl::MutexLock lock(&mu);
      auto all_busy = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return warmed_up == kThreads; };
      mu.Await(absl::Condition(&all_busy));
    }
    troupe::Shutdown();  // while every thread is mid-loop
    for (auto& thread : threads) thread.join();
  }
  EXPECT_EQ(wrong_values.load(), 0);
  EXPECT_EQ(ended_with_troupe_error.load(), kThreads);
  EXPECT_EQ(ended_otherwise.load(), 0);
  EXPECT_THROW(troupe::Put(1), troupe::RuntimeError);
  Driver again(cluster);
  EXPECT_EQ(*troupe::Get(troupe::Task(Plus).Remote(2, 3)), 5);
}

TEST(TasksTest, LargeObjectMovesBetweenNodesIntact) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string producer, cluster.AddWorker({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string consumer, cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  const int64_t size = 200 << 20;
  auto bytes =
      troupe::Task(MakeBytes).SetSchedulingStrategy(troupe::NodeAffinity{producer}).Remote(size, 7);
  auto at_producer =
      troupe::Task(ChecksumOf).SetSchedulingStrategy(troupe::NodeAffinity{producer}).Remote(bytes);
  auto at_consumer =
      troupe::Task(ChecksumOf).SetSchedulingStrategy(troupe::NodeAffinity{consumer}).Remote(bytes);
  const uint64_t expected = ChecksumOf(MakeBytes(size, 7));
  EXPECT_EQ(*troupe::Get(at_producer), expected);
  EXPECT_EQ(*troupe::Get(at_consumer), expected);
  // And on the driver's node, through a zero-copy view.
  auto view = troupe::GetView(bytes);
  EXPECT_EQ(Checksum(view->data(), view->size()), expected);
}

TEST(TasksTest, ZeroCopyReadsAddNoPrivateCopy) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto ref = troupe::Put(MakeBytes(100 << 20, 3));
  const int64_t before = RssAnonKb();
  auto view = troupe::GetView(ref);
  uint64_t sum = Checksum(view->data(), view->size());  // touches every page
  const int64_t after_view = RssAnonKb();
  EXPECT_LT(after_view - before, 10 * 1024) << "a view must not copy the object";
  auto copy = troupe::Get(ref);
  const int64_t after_copy = RssAnonKb();
  EXPECT_GT(after_copy - after_view, 90 * 1024) << "a copying Get should show the copy";
  EXPECT_EQ(ChecksumOf(*copy), sum);
}

TEST(TasksTest, SpillingKeepsEveryObjectByteIdentical) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--object-store-memory=64MiB"}));
  Driver driver(cluster);
  std::vector<troupe::ObjectRef<std::vector<uint8_t>>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(troupe::Put(MakeBytes(32 << 20, i)));  // 256 MB live
  troupe::RayletClient raylet(HeadRayletAddress(cluster), cluster.token());
  auto stats = raylet.GetNodeStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->object_store().num_spilled_total(), 0);
  EXPECT_LE(stats->object_store().used_bytes(), 64 << 20);
  for (int i = 0; i < 8; ++i) {
    auto view = troupe::GetView(refs[i]);
    EXPECT_EQ(Checksum(view->data(), view->size()), ChecksumOf(MakeBytes(32 << 20, i))) << i;
  }
  EXPECT_GT(raylet.GetNodeStats()->object_store().num_restored_total(), 0);
}

TEST(TasksTest, FullStoreFailsPutWithAClearError) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--object-store-memory=64MiB"}));
  Driver driver(cluster);
  try {
    troupe::Put(MakeBytes(100 << 20, 1));
    FAIL() << "expected ObjectStoreFullError";
  } catch (const troupe::ObjectStoreFullError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "object store full")) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "--object-store-memory")) << e.what();
  }
  // Nothing was lost: the store still works.
  EXPECT_EQ(troupe::Get(troupe::Put(MakeBytes(1 << 20, 2)))->size(), 1u << 20);
}

TEST(TasksTest, KilledWorkerMidTaskIsRetried) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string pid_file = std::string(std::getenv("TEST_TMPDIR")) + "/slow.pid";
  unlink(pid_file.c_str());
  auto result = troupe::Task(SlowOnce).Remote(pid_file, 21);
  int pid = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::ifstream in(pid_file);
        in >> pid;
        return pid > 0;
      },
      absl::Seconds(10), "the task to start and write its pid"));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(*troupe::Get(result, std::chrono::seconds(30)), 42);
}

TEST(TasksTest, ExceptionsReachGetWithTypeMessageAndPlace) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  try {
    troupe::Get(troupe::Task(Fail).Remote(7));
    FAIL() << "expected TaskError";
  } catch (const troupe::TaskError& e) {
    EXPECT_EQ(e.exception_type(), "std::runtime_error");
    EXPECT_EQ(e.exception_message(), "boom 7");
    EXPECT_EQ(e.function_name(), "Fail");
    EXPECT_EQ(e.node_id().size(), 32u);
    EXPECT_TRUE(absl::StrContains(e.what(), "boom 7")) << e.what();
    // Where it was thrown: Fail first (the throw site), then Troupe's invocation frames.
    EXPECT_TRUE(absl::StartsWith(e.remote_stack(), "#0 ")) << e.remote_stack();
    EXPECT_TRUE(
        absl::StrContains(e.remote_stack().substr(0, e.remote_stack().find('\n')), "Fail(int)"))
        << e.remote_stack();
    EXPECT_TRUE(absl::StrContains(e.what(), "remote stack (the throw first):\n#0 ")) << e.what();
  }
  // The worker's log has the exception and its stack too.
  std::string logged;
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (const auto& raylet_log : cluster.RayletLogs()) {
          const std::string dir = raylet_log.substr(0, raylet_log.rfind('/'));
          for (const auto& entry : std::filesystem::directory_iterator(dir)) {
            if (entry.path().filename().string().rfind("worker-", 0) != 0) continue;
            std::ifstream in(entry.path());
            std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
            if (absl::StrContains(text, "task Fail threw std::runtime_error: boom 7")) {
              logged = text;
              return absl::StrContains(text, "remote stack (the throw first):\n#0 ");
            }
          }
        }
        return false;
      },
      absl::Seconds(10), "the worker's log to show the exception and its stack"))
      << logged;
  // A task whose argument failed fails too, saying why.
  try {
    troupe::Get(troupe::Task(Plus).Remote(troupe::Task(Fail).Remote(1), 1));
    FAIL() << "expected an error";
  } catch (const troupe::TaskError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "boom 1")) << e.what();
  }
}

TEST(TasksTest, InfeasibleTaskRunsOnceANodeThatFitsJoins) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  // Unlike an infeasible demand, an invalid one is refused at once, naming what is wrong
  // (issue 30 item 10: a resource with an empty name was retried forever and Get never returned).
  try {
    troupe::Task(Plus).SetResources({{"", 1}}).Remote(2, 3);
    ADD_FAILURE() << "a resource with an empty name must be refused";
  } catch (const troupe::InvalidArgumentError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "task Plus: resources has a resource with an empty"))
        << e.what();
  }
  try {
    troupe::CreatePlacementGroup({"", {{{"CPU", 1}}, {{"GPU", 1.5}}}});
    ADD_FAILURE() << "1.5 GPUs must be refused";
  } catch (const troupe::InvalidArgumentError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "bundles[1]['GPU'] is 1.5")) << e.what();
  }
  auto result = troupe::Task(Plus).SetResources({{"CPU", 1}, {"special", 1}}).Remote(2, 3);
  // Still pending after 1.5 s is the behaviour under test (no node fits), not a wait.
  auto early =
      troupe::Wait(std::vector<troupe::ObjectRef<int>>{result}, 1, std::chrono::milliseconds(1500));
  EXPECT_TRUE(early.ready.empty());
  // `troupe status` says what is missing.
  auto demands = cluster.Status()["infeasible_demands"];
  ASSERT_EQ(demands.size(), 1u) << demands.dump();
  EXPECT_TRUE(absl::StrContains(demands[0].get<std::string>(), "special: 1 (largest node has 0)"))
      << demands.dump();
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"special": 1})"}));
  EXPECT_EQ(*troupe::Get(result, std::chrono::seconds(20)), 5);
}

TEST(TasksTest, GpuTasksSeeTheirDevices) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=4", "--num-gpus=4"}));
  Driver driver(cluster);
  std::vector<troupe::ObjectRef<std::string>> whole;
  for (int i = 0; i < 4; ++i) {
    whole.push_back(
        troupe::Task(VisibleDevices).SetResources({{"CPU", 1}, {"GPU", 1}}).Remote(1500));
  }
  std::set<std::string> seen;
  for (const auto& devices : troupe::Get(whole)) seen.insert(*devices);
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1", "2", "3"}));
  auto two = troupe::Task(VisibleDevices).SetResources({{"CPU", 1}, {"GPU", 2}}).Remote(0);
  std::string pair = *troupe::Get(two);
  EXPECT_EQ(pair.size(), 3u) << pair;  // "a,b"
  auto none = troupe::Task(VisibleDevices).SetResources({{"CPU", 1}}).Remote(0);
  EXPECT_EQ(*troupe::Get(none), "<unset>");
}

TEST(TasksTest, ReferenceCountingFreesStoreMemory) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  {
    auto a = troupe::Put(MakeBytes(50 << 20, 1));
    auto b = troupe::Task(MakeBytes).Remote(30 << 20, 2);
    troupe::Get(b);
    EXPECT_GE(StoreBytesUsed(cluster), 80 << 20);
  }
  int64_t used = -1;
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsed(cluster)) == 0; }, absl::Seconds(5),
                        "the store's memory to be freed after the refs went away"))
      << used << " bytes still used";
}

// Regression: `troupe status` showed "0B/... object_store_memory" while /metrics showed the
// store in use (it printed the scheduler's view of a resource no lease takes).
TEST(TasksTest, StatusReportsTheObjectStoresRealUse) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto ref = troupe::Put(MakeBytes(40 << 20, 4));
  nlohmann::json status;
  EXPECT_TRUE(WaitUntil(
      [&] {
        status = cluster.Status();
        return status["object_store"].value("used_bytes", int64_t{0}) >= (40 << 20);
      },
      absl::Seconds(10), "`troupe status --format=json` to show the 40 MiB object"))
      << status.dump(2);
  ASSERT_EQ(status["nodes"].size(), 1u);
  const nlohmann::json& store = status["nodes"][0]["object_store"];
  EXPECT_GE(store.value("used_bytes", int64_t{0}), 40 << 20) << store.dump();
  EXPECT_LT(store.value("used_bytes", int64_t{0}), 41 << 20) << store.dump();  // + its header
  EXPECT_EQ(store.value("num_objects", int64_t{0}), 1) << store.dump();
  EXPECT_GT(store.value("capacity_bytes", int64_t{0}), 40 << 20) << store.dump();
  troupe::testing::CommandResult text = cluster.Troupe({"status"});
  EXPECT_TRUE(absl::StrContains(text.out, "40.00MiB/")) << text.out;
}

TEST(TasksTest, HundredThousandShortLivedObjectsLeaveNothingBehind) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  for (int i = 0; i < 100000; ++i) {
    auto ref = troupe::Put(i);
    if (i % 10000 == 0) ASSERT_EQ(*troupe::Get(ref), i);
  }
  auto stats = troupe::internal::GetRuntimeStats();
  EXPECT_EQ(stats.tracked_references, 0u);
  EXPECT_EQ(stats.stored_objects, 0u);
}

TEST(TasksTest, CancelAQueuedTask) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto busy = troupe::Task(Sleep).Remote(1000);  // holds the only CPU while `queued` waits
  auto queued = troupe::Task(Sleep).Remote(1);
  troupe::Cancel(queued);
  EXPECT_THROW(troupe::Get(queued), troupe::TaskCancelledError);
  EXPECT_EQ(*troupe::Get(busy), 1000);
}

TEST(TasksTest, RefsInsideContainersAreBorrowedAcrossNodes) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string other, cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  {
    std::vector<troupe::ObjectRef<int>> refs;
    for (int i = 1; i <= 100; ++i) refs.push_back(troupe::Put(i));
    refs.push_back(troupe::Task(Plus).Remote(1000, 0));  // one still being computed
    auto outer = troupe::Put(refs);
    refs.clear();  // only the container keeps them alive now
    auto sum = troupe::Task(SumRefs)
                   .SetSchedulingStrategy(troupe::NodeAffinity{other})
                   .Remote(*troupe::Get(outer));
    EXPECT_EQ(*troupe::Get(sum), 5050 + 1000);
  }
  // Everything is released once the driver drops its references (borrowers included).
  EXPECT_TRUE(WaitUntil([] { return troupe::internal::GetRuntimeStats().tracked_references == 0; },
                        absl::Seconds(5), "every reference to be released"))
      << troupe::internal::GetRuntimeStats().tracked_references << " references still tracked";
}

// A consumer that waits on its producer's ref (inside a container: not resolved before the
// push) is always submitted after it. Short tasks are pipelined to a worker in two calls at a
// time, which can reach the worker in either order; the worker must still run the producer
// first, or the consumer waits behind it until its timeout (10 s here, so the test fails
// instead of hanging).
TEST(TasksTest, ATaskNeverWaitsBehindTheProducerOfARefItWaitsFor) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  std::vector<troupe::ObjectRef<int>> warm;
  for (int i = 0; i < 2000; ++i) warm.push_back(troupe::Task(Plus).Remote(i, 0));
  troupe::Get(warm);  // short tasks: the pipelines are deep now
  int timed_out = 0;
  for (int round = 0; round < 10; ++round) {
    std::vector<troupe::ObjectRef<int>> consumers;
    for (int i = 0; i < 300; ++i) {
      auto producer = troupe::Task(Plus).Remote(i, 1);
      consumers.push_back(
          troupe::Task(WaitInTask).Remote(std::vector<troupe::ObjectRef<int>>{producer}, 1, 10000));
    }
    for (const auto& ready : troupe::Get(consumers)) timed_out += *ready != 1;
    if (timed_out > 0) break;
  }
  EXPECT_EQ(timed_out, 0) << "consumers ran before their producer on the same worker";
}

TEST(TasksTest, WaitOnBorrowedRefsWakesWhenReadyAndKeepsItsTimeout) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto done = troupe::Put(1);
  // Both become ready: the waiting task is woken by the owner when the slow one finishes (the
  // 60 s timeout is only a bound).
  auto slow = troupe::Task(Sleep).Remote(300);
  auto both =
      troupe::Task(WaitInTask).Remote(std::vector<troupe::ObjectRef<int>>{done, slow}, 2, 60000);
  EXPECT_EQ(*troupe::Get(both), 2);
  // Not enough by the timeout: it returns then, with the ready one only.
  auto slower = troupe::Task(Sleep).Remote(3000);
  auto one =
      troupe::Task(WaitInTask).Remote(std::vector<troupe::ObjectRef<int>>{done, slower}, 2, 200);
  EXPECT_EQ(*troupe::Get(one), 1);
  EXPECT_EQ(*troupe::Get(slower), 3000);
}

TEST(TasksTest, WorkersStartInACopyOfTheWorkingDirectory) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string other, cluster.AddWorker({"--num-cpus=1"}));
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/project";
  mkdir(dir.c_str(), 0755);
  mkdir((dir + "/conf").c_str(), 0755);
  std::ofstream(dir + "/conf/settings.txt") << "lr=0.1";
  troupe::Config config;
  config.address = cluster.gcs_address();
  config.token = cluster.token();
  config.working_dir = dir;
  troupe::Init(config);
  auto text = troupe::Task(ReadRelative)
                  .SetSchedulingStrategy(troupe::NodeAffinity{other})
                  .Remote(std::string("conf/settings.txt"));
  EXPECT_EQ(*troupe::Get(text), "lr=0.1");
  troupe::Shutdown();
}

TEST(TasksTest, WorkerOutputIsPublishedForTheDriver) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  rpc::PollRequest cursor;
  cursor.add_channels(rpc::LOG_CHANNEL);
  cursor.set_after_seq(-1);
  int64_t after = cluster.gcs().Poll(cursor)->last_seq();
  const int pid = *troupe::Get(troupe::Task(Say).Remote(std::string("marker-7d1f")));
  int line_pid = 0;
  absl::Status poll_status;
  // Each check is a long poll (up to 200 ms) for log messages after the last one seen.
  EXPECT_TRUE(WaitUntil(
      [&] {
        rpc::PollRequest poll;
        poll.add_channels(rpc::LOG_CHANNEL);
        poll.set_after_seq(after);
        poll.set_timeout_ms(200);
        auto reply = cluster.gcs().Poll(poll);
        if (!reply.ok()) {
          poll_status = reply.status();
          return true;
        }
        after = reply->last_seq();
        for (const auto& message : reply->messages()) {
          for (const auto& line : message.log().lines()) {
            if (line == "marker-7d1f") line_pid = message.log().pid();
          }
        }
        return line_pid != 0;
      },
      absl::Seconds(10), "the worker's line to reach the GCS", absl::ZeroDuration()));
  ASSERT_TRUE(poll_status.ok()) << poll_status;
  EXPECT_EQ(line_pid, pid);
}

TEST(TasksTest, TasksOfADeadNodeRunElsewhere) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"doomed": 1})"}));
  ASSERT_OK_AND_ASSIGN(std::string survivor,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"doomed": 1})"}));
  Driver driver(cluster);
  auto where = troupe::Task(SleepThenNode)
                   .SetResources({{"CPU", 1}, {"doomed", 1}})
                   .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
                   .Remote(3000);  // long enough to be running when its node dies
  // Running on `doomed` once that node has leased out its only "doomed" unit.
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json node = troupe::testing::FindNode(cluster.Status(), doomed);
        if (node.is_null()) return false;
        const nlohmann::json& available = node["resources_available"];  // {} before a report
        return !available.empty() && available.value("doomed", 0.0) == 0.0;
      },
      absl::Seconds(10), "the task to be leased on the doomed node", absl::Milliseconds(20)));
  const int raylet_pid = troupe::testing::FindNode(cluster.Status(), doomed)["raylet_pid"];
  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
  EXPECT_EQ(*troupe::Get(where, std::chrono::seconds(60)), survivor);
}

TEST(TasksTest, ObjectWhoseOnlyCopyDiedIsReportedLost) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed, cluster.AddWorker({"--num-cpus=1"}));
  Driver driver(cluster);
  // Hard affinity to the node that dies: running the task again cannot work.
  auto bytes = troupe::Task(MakeBytes)
                   .SetSchedulingStrategy(troupe::NodeAffinity{doomed})
                   .Remote(1 << 20, 5);
  troupe::Wait(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{bytes}, 1);
  KillNode(cluster, doomed);
  try {
    troupe::Get(bytes, std::chrono::seconds(60));
    FAIL() << "expected ObjectReconstructionFailedError";
  } catch (const troupe::ObjectReconstructionFailedError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), bytes.ID())) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "MakeBytes")) << e.what();
  }
}

// Two nodes offer "pin"; the task prefers `doomed`, so it runs there first and on `survivor`
// when it runs again.
troupe::ObjectRef<std::vector<uint8_t>> MakeBytesOn(const std::string& doomed, int64_t size,
                                                    int seed, int max_retries = 3) {
  return troupe::Task(MakeBytes)
      .SetResources({{"CPU", 1}, {"pin", 1}})
      .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
      .SetMaxRetries(max_retries)
      .Remote(size, seed);
}

TEST(TasksTest, LineageReconstructionRebuildsAnObjectWhoseNodeDied) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  auto bytes = MakeBytesOn(doomed, 1 << 20, 5);
  troupe::Wait(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{bytes}, 1);
  KillNode(cluster, doomed);  // its only copy goes with the node
  EXPECT_EQ(ChecksumOf(*troupe::Get(bytes, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 5)));
}

TEST(TasksTest, LineageReconstructionRebuildsLostArgumentsRecursively) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=2", R"(--resources={"pin": 2})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2", R"(--resources={"pin": 2})"}));
  Driver driver(cluster);
  // The argument's reference is dropped at once: after `reversed` ran it is freed, and only
  // its lineage is left to rebuild `reversed` from.
  auto reversed = troupe::Task(Reversed)
                      .SetResources({{"CPU", 1}, {"pin", 1}})
                      .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
                      .Remote(MakeBytesOn(doomed, 1 << 20, 9));
  troupe::Wait(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{reversed}, 1);
  KillNode(cluster, doomed);
  std::vector<uint8_t> expected = MakeBytes(1 << 20, 9);
  std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(ChecksumOf(*troupe::Get(reversed, std::chrono::seconds(60))), ChecksumOf(expected));
}

TEST(TasksTest, LineageReconstructionRebuildsAnArgumentTheRerunFindsLost) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=2", R"(--resources={"pin": 2})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2", R"(--resources={"pin": 2})"}));
  Driver driver(cluster);
  // The driver keeps the argument: its stale location is still recorded when `reversed` runs
  // again, so the worker running it (a borrower) finds it lost and tells the owner.
  auto bytes = MakeBytesOn(doomed, 1 << 20, 11);
  auto reversed = troupe::Task(Reversed)
                      .SetResources({{"CPU", 1}, {"pin", 1}})
                      .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
                      .Remote(bytes);
  troupe::Wait(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{reversed}, 1);
  KillNode(cluster, doomed);
  // `reversed` first: its rerun is the one that finds the argument gone.
  std::vector<uint8_t> expected = MakeBytes(1 << 20, 11);
  const uint64_t argument = ChecksumOf(expected);
  std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(ChecksumOf(*troupe::Get(reversed, std::chrono::seconds(60))), ChecksumOf(expected));
  EXPECT_EQ(ChecksumOf(*troupe::Get(bytes, std::chrono::seconds(60))), argument);
}

TEST(TasksTest, LineageReconstructionStopsAtMaxRetries) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  auto bytes = MakeBytesOn(doomed, 1 << 20, 5, /*max_retries=*/0);
  troupe::Wait(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{bytes}, 1);
  KillNode(cluster, doomed);
  try {
    troupe::Get(bytes, std::chrono::seconds(60));
    FAIL() << "expected ObjectReconstructionFailedError";
  } catch (const troupe::ObjectReconstructionFailedError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), bytes.ID())) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "max_retries is 0")) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), doomed)) << e.what();  // where it was
  }
}

TEST(TasksTest, BorrowerWhoseOwnerDiedGetsOwnerDiedError) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string other,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  const std::string pid_file = std::string(std::getenv("TEST_TMPDIR")) + "/owner.pid";
  unlink(pid_file.c_str());
  // The worker that runs PutInside owns the object inside the result; the driver borrows it.
  auto outer =
      troupe::Task(PutInside).SetResources({{"CPU", 1}, {"pin", 1}}).Remote(pid_file, 1 << 20, 4);
  troupe::ObjectRef<std::vector<uint8_t>> inner = (*troupe::Get(outer))[0];
  const int owner_pid = ReadPid(pid_file);
  ASSERT_GT(owner_pid, 0);
  ASSERT_EQ(kill(owner_pid, SIGKILL), 0);
  try {
    troupe::Get(inner, std::chrono::seconds(30));
    FAIL() << "expected OwnerDiedError";
  } catch (const troupe::OwnerDiedError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), inner.ID())) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "owner")) << e.what();
  }
}

TEST(TasksTest, RefNestedInAResultLivesWhileHeldAndIsFreedWithTheLastHolder) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  const std::string pid_file = std::string(std::getenv("TEST_TMPDIR")) + "/nested.pid";
  const uint64_t expected = ChecksumOf(MakeBytes(1 << 20, 6));
  {
    troupe::ObjectRef<std::vector<uint8_t>> inner;
    {
      auto outer = troupe::Task(PutInside)
                       .SetResources({{"CPU", 1}, {"pin", 1}})
                       .Remote(pid_file, 1 << 20, 6);
      inner = (*troupe::Get(outer))[0];
    }  // the creating worker returned long ago; now the driver drops the outer reference too
    EXPECT_EQ(ChecksumOf(*troupe::Get(inner)), expected);  // copied to the head node as well
    // Passed on nested in an argument to another task, on the other node: still alive.
    auto sum = troupe::Task(ChecksumOfEach)
                   .SetResources({{"CPU", 1}, {"pin", 1}})
                   .Remote(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{inner});
    EXPECT_EQ(*troupe::Get(sum), expected);
    EXPECT_GE(StoreBytesUsedEverywhere(cluster), 2 << 20);  // the primary and the driver's copy
  }
  // The last holder (the driver) let go: every copy on every node is freed.
  int64_t used = -1;
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsedEverywhere(cluster)) == 0; },
                        absl::Seconds(10), "every copy of the nested object to be freed"))
      << used << " bytes still used";
  EXPECT_TRUE(WaitUntil([] { return troupe::internal::GetRuntimeStats().tracked_references == 0; },
                        absl::Seconds(5), "the driver to track no reference"));
}

TEST(TasksTest, WorkersRunTheDriversProgramWithoutASharedFilesystem) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  const std::string copy = std::string(std::getenv("TEST_TMPDIR")) + "/driver_copy";
  {
    std::ifstream in(std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
                         "/tests/remote_driver",
                     std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
  }
  chmod(copy.c_str(), 0755);
  // The driver deletes its executable after Init; workers can only come from the GCS copy.
  std::string command = "TROUPE_ADDRESS=" + cluster.gcs_address() +
                        " TROUPE_TOKEN=" + cluster.token() + " " + copy + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_TRUE(absl::StrContains(output, "result=42")) << output;
  EXPECT_NE(access(copy.c_str(), F_OK), 0) << "the driver should have removed itself";
  bool cached = false;
  for (const auto& log : cluster.RayletLogs()) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    cached |= absl::StrContains(text, "fetched job executable");
  }
  EXPECT_TRUE(cached) << "no raylet fetched the executable from the GCS";
}

// ---- An owner that leaves while holding its objects ----

// The child driver of the owner tests (this binary, run with TROUPE_TEST_OWNER_DRIVER=<how>):
// puts objects on its own node (the head) and has tasks return large objects on the worker node
// OWNER_TEST_WORKER_NODE, more than either store holds (so some spill), reads one remote result
// here (a secondary copy), prints READY and then leaves holding every reference: "exit" (the
// process ends without Shutdown), "shutdown" (Shutdown, then the process lives on until killed)
// or "sigkill" (waits to be killed).
int RunOwnerDriver(const std::string& how) {
  troupe::Init();
  const std::string worker_node = std::getenv("OWNER_TEST_WORKER_NODE");
  std::vector<troupe::ObjectRef<std::vector<uint8_t>>> held;
  for (int i = 0; i < 4; ++i) held.push_back(troupe::Put(MakeBytes(24 << 20, i)));
  for (int i = 0; i < 4; ++i) {
    held.push_back(troupe::Task(MakeBytes)
                       .SetSchedulingStrategy(troupe::NodeAffinity{worker_node})
                       .Remote(24 << 20, 10 + i));
  }
  troupe::Wait(held, static_cast<int>(held.size()));
  { auto view = troupe::GetView(held.back()); }  // a secondary copy on this node, not pinned
  std::cout << "READY" << std::endl;
  if (how == "exit") std::exit(0);
  if (how == "shutdown") {
    troupe::Shutdown();
    std::cout << "SHUT DOWN" << std::endl;
  }
  while (true) pause();
}

struct OwnerDriver {
  int pid = -1;
  FILE* out = nullptr;  // the child's stdout
};

// Runs this binary again as a driver of `cluster` with the extra environment `env` (which picks
// what main() runs), its stdout piped to `out`.
OwnerDriver StartChildDriver(TestCluster& cluster, std::vector<std::string> env) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  env.push_back("TROUPE_ADDRESS=" + cluster.gcs_address());
  env.push_back("TROUPE_TOKEN=" + cluster.token());
  std::vector<char*> envp;
  for (char** entry = environ; *entry != nullptr; ++entry) envp.push_back(*entry);
  for (const auto& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>("tasks_test"), nullptr};
  OwnerDriver driver;
  driver.pid = fork();
  if (driver.pid == 0) {  // only async-signal-safe calls until exec
    dup2(fds[1], 1);
    close(fds[0]);
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  close(fds[1]);
  driver.out = fdopen(fds[0], "r");
  return driver;
}

// Starts RunOwnerDriver(how) in a child process.
OwnerDriver StartOwnerDriver(TestCluster& cluster, const std::string& worker_node,
                             const std::string& how) {
  return StartChildDriver(
      cluster, {"TROUPE_TEST_OWNER_DRIVER=" + how, "OWNER_TEST_WORKER_NODE=" + worker_node});
}

// Reads the child's output until a line equal to `line`; false if it ended first.
bool ReadUntil(OwnerDriver& driver, const std::string& line) {
  char buffer[1024];
  while (fgets(buffer, sizeof(buffer), driver.out) != nullptr) {
    if (absl::StripTrailingAsciiWhitespace(buffer) == line) return true;
  }
  return false;
}

// Bytes in memory and on disk, and objects, in every alive node's store; -1 if one cannot say
// (`troupe status` failed or listed no alive node, or a raylet did not answer): a status that
// could not be read must never pass for an empty cluster.
int64_t StoreFootprint(TestCluster& cluster) {
  int64_t total = 0;
  int alive = 0;
  const troupe::testing::CommandResult listed = cluster.Troupe({"status", "--format=json"});
  if (listed.exit_code != 0) return -1;
  const auto status = nlohmann::json::parse(listed.out, nullptr, false);
  if (status.is_discarded() || !status.contains("nodes") || !status["nodes"].is_array()) {
    return -1;
  }
  for (const auto& node : status["nodes"]) {
    if (node["state"] != "ALIVE") continue;
    ++alive;
    troupe::RayletClient raylet(
        absl::StrCat(node["node_ip"].get<std::string>(), ":", node["raylet_port"].get<int>()),
        cluster.token());
    auto stats = raylet.GetNodeStats();
    if (!stats.ok()) return -1;
    total += stats->object_store().used_bytes() + stats->object_store().spilled_bytes() +
             stats->object_store().num_objects();
  }
  return alive > 0 ? total : -1;
}

// Files in the spill directories of every session of the cluster.
int SpilledFiles(TestCluster& cluster) {
  int files = 0;
  DIR* root = opendir(cluster.temp_root().c_str());
  if (root == nullptr) return -1;
  while (dirent* session = readdir(root)) {
    const std::string name = session->d_name;
    if (!absl::StartsWith(name, "session_") || name == "session_latest") continue;
    if (DIR* spill = opendir((cluster.temp_root() + "/" + name + "/spill").c_str())) {
      while (dirent* file = readdir(spill)) files += file->d_name[0] != '.';
      closedir(spill);
    }
  }
  closedir(root);
  return files;
}

class OwnerLeavesTest : public ::testing::TestWithParam<std::string> {};

// Regression: a driver that ended holding references left its objects in every store and spill
// directory for good, so each run of a program filled the cluster a little more.
TEST_P(OwnerLeavesTest, EveryObjectItOwnedIsFreedOnEveryNode) {
  const std::string how = GetParam();
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--object-store-memory=64MiB"}));
  ASSERT_OK_AND_ASSIGN(std::string worker_node,
                       cluster.AddWorker({"--num-cpus=1", "--object-store-memory=64MiB"}));
  OwnerDriver driver = StartOwnerDriver(cluster, worker_node, how);
  ASSERT_TRUE(ReadUntil(driver, "READY")) << "the child driver ended before its objects existed";
  int64_t footprint = -1;
  // Retried: on a loaded machine one `troupe status` may fail (-1).
  EXPECT_TRUE(WaitUntil([&] { return (footprint = StoreFootprint(cluster)) > 8 * (24 << 20); },
                        absl::Seconds(10), "the stores to hold the driver's objects"))
      << footprint;
  EXPECT_GT(SpilledFiles(cluster), 0) << "the test means to cover spilled objects too";
  if (how == "shutdown") {
    ASSERT_TRUE(ReadUntil(driver, "SHUT DOWN"));
  } else if (how == "sigkill") {
    ASSERT_EQ(kill(driver.pid, SIGKILL), 0);
  }
  if (how != "shutdown") {
    int status = 0;
    ASSERT_EQ(waitpid(driver.pid, &status, 0), driver.pid);
    if (how == "exit") EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  EXPECT_TRUE(WaitUntil([&] { return (footprint = StoreFootprint(cluster)) == 0; },
                        absl::Seconds(30), "every node's store to be empty"))
      << footprint << " bytes + objects left";
  int spilled = -1;
  EXPECT_TRUE(WaitUntil([&] { return (spilled = SpilledFiles(cluster)) == 0; }, absl::Seconds(5),
                        "the spill directories to be empty"))
      << spilled << " files left";
  if (how == "shutdown") {  // freed while the process still lives; now let it go
    kill(driver.pid, SIGKILL);
    waitpid(driver.pid, nullptr, 0);
  }
  fclose(driver.out);
}

INSTANTIATE_TEST_SUITE_P(HowItLeaves, OwnerLeavesTest,
                         ::testing::Values("exit", "shutdown", "sigkill"),
                         [](const auto& info) { return info.param; });

// ---- The memory monitor ----

// A task without retries whose worker the memory monitor kills fails with OutOfMemoryError naming
// the task, the node and the memory use (it used to be a generic "worker died").
TEST(TasksTest, OutOfMemoryKilledTaskWithoutRetriesThrowsOutOfMemoryError) {
  const std::string usage_file = std::string(std::getenv("TEST_TMPDIR")) + "/memory_usage_0";
  { std::ofstream(usage_file) << "0.99"; }
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string node,
                       cluster.AddWorker({"--num-cpus=1", "--memory-usage-threshold=0.9",
                                          "--testing-memory-usage-file=" + usage_file,
                                          R"(--resources={"tight": 1})"}));
  Driver driver(cluster);
  auto pid = troupe::Task(RunUntilMemoryIsFine)
                 .SetResources({{"tight", 1}})
                 .SetMaxRetries(0)
                 .Remote(usage_file);
  try {
    troupe::Get(pid, std::chrono::seconds(60));
    ADD_FAILURE() << "the memory monitor should have killed the task";
  } catch (const troupe::OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(absl::StrContains(message, "RunUntilMemoryIsFine")) << message;
    EXPECT_TRUE(absl::StrContains(message, node)) << message;
    EXPECT_TRUE(absl::StrContains(message, "99% in use")) << message;
  }
  { std::ofstream(usage_file) << "0.1"; }  // lets the node's workers go
}

// A task whose worker the memory monitor kills runs again (it has retries left), and succeeds
// once the node's memory is fine.
TEST(TasksTest, OutOfMemoryKilledTaskIsRetriedAndSucceedsOnceMemoryIsFine) {
  const std::string usage_file = std::string(std::getenv("TEST_TMPDIR")) + "/memory_usage";
  { std::ofstream(usage_file) << "0.99"; }
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", "--memory-usage-threshold=0.9",
                               "--testing-memory-usage-file=" + usage_file,
                               R"(--resources={"tight": 1})"}));
  Driver driver(cluster);
  auto pid = troupe::Task(RunUntilMemoryIsFine)
                 .SetResources({{"tight", 1}})
                 .SetMaxRetries(3)
                 .Remote(usage_file);
  auto monitor_killed = [&] {
    for (const auto& log : cluster.RayletLogs()) {
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (absl::StrContains(text, "node memory at 99%: killing worker")) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitUntil(monitor_killed, absl::Seconds(30), "the memory monitor to kill the task"));
  { std::ofstream(usage_file) << "0.1"; }
  EXPECT_GT(*troupe::Get(pid, std::chrono::seconds(60)), 0);
}

// ---- A driver whose cluster disappears ----

// The child driver of ClusterUnreachable (this binary, run with TROUPE_TEST_UNREACHABLE_DRIVER=1
// and a short reconnect limit): submits a task no node can run, prints READY and waits for it;
// once the cluster is gone prints what each call threw, shuts down and exits 0 — or 1 if a call
// did not throw ClusterUnreachableError.
int RunUnreachableDriver() {
  troupe::Init();
  auto pending = troupe::Task(Plus).SetResources({{"nowhere", 1}}).Remote(1, 2);
  std::cout << "READY" << std::endl;
  int failures = 0;
  auto expect_unreachable = [&](const std::string& what, const std::function<void()>& call) {
    try {
      call();
      std::cout << what << ": no error" << std::endl;
      ++failures;
    } catch (const troupe::ClusterUnreachableError& e) {
      std::cout << what << ": ClusterUnreachableError: " << e.what() << std::endl;
    } catch (const std::exception& e) {
      std::cout << what << ": wrong error: " << e.what() << std::endl;
      ++failures;
    }
  };
  expect_unreachable("pending Get", [&] { troupe::Get(pending); });
  expect_unreachable("new task", [] { troupe::Get(troupe::Task(Plus).Remote(3, 4)); });
  expect_unreachable("large Put", [] { troupe::Put(std::vector<uint8_t>(1 << 20)); });
  troupe::Shutdown();
  std::cout << "SHUT DOWN" << std::endl;
  return failures == 0 ? 0 : 1;
}

// Regression: a driver whose GCS and raylets were killed waited in Get forever, printing
// "cannot lease a worker ... retrying". Now, past the reconnect limit, every pending and new call
// throws ClusterUnreachableError and the program can shut down and exit.
TEST(TasksTest, ClusterUnreachableFailsPendingAndNewCallsAndTheDriverExits) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1"}));
  OwnerDriver driver = StartChildDriver(
      cluster, {"TROUPE_TEST_UNREACHABLE_DRIVER=1", "TROUPE_GCS_RECONNECT_TIMEOUT_S=3"});
  ASSERT_TRUE(ReadUntil(driver, "READY")) << "the child driver ended before submitting";
  // The whole cluster goes: the GCS, the raylets (the status's raylet_pid alone does not end a
  // daemonized raylet), their workers, the HTTP server and its supervisor.
  std::set<int> pids = {cluster.GcsPid()};
  for (const auto& node : cluster.Status()["nodes"]) pids.insert(node["raylet_pid"].get<int>());
  for (int pid : troupe::testing::ProcessesMentioning(cluster.temp_root())) pids.insert(pid);
  for (int pid : pids) {
    ASSERT_GT(pid, 0);
    kill(pid, SIGKILL);  // some may be gone already (a worker whose raylet died)
  }
  for (int pid : pids) {
    ASSERT_TRUE(WaitUntil([&] { return troupe::testing::CommandLineOf(pid).empty(); },
                          absl::Seconds(10), "the killed cluster process to be gone"))
        << pid;
  }
  int status = 0;
  const bool ended = WaitUntil([&] { return waitpid(driver.pid, &status, WNOHANG) == driver.pid; },
                               absl::Seconds(3 + 30), "the child driver to give up and exit");
  if (!ended) {
    kill(driver.pid, SIGKILL);
    waitpid(driver.pid, nullptr, 0);
  }
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), driver.out)) output.append(buffer, n);
  fclose(driver.out);
  ASSERT_TRUE(ended) << "the driver still waits on a dead cluster; its output:\n" << output;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << output;
  for (const char* what : {"pending Get", "new task", "large Put"}) {
    EXPECT_TRUE(absl::StrContains(output, absl::StrCat(what, ": ClusterUnreachableError: ")))
        << what << "\n"
        << output;
  }
  EXPECT_TRUE(absl::StrContains(output, cluster.gcs_address() + " has been unreachable for"))
      << output;
  EXPECT_TRUE(absl::StrContains(output, "TROUPE_GCS_RECONNECT_TIMEOUT_S")) << output;
  EXPECT_TRUE(absl::StrContains(output, "SHUT DOWN")) << output;
}

TEST(TasksTest, RefHandedOnThroughTwoTasksLivesWhileHeldAndIsFreedAfter) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  const uint64_t expected = ChecksumOf(MakeBytes(1 << 20, 8));
  {
    troupe::ObjectRef<std::vector<uint8_t>> back;
    {
      // Only the tasks (and then the results) hold it once the driver's own ref is gone.
      auto outer = troupe::Task(PassOnViaSubtask)
                       .Remote(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{
                           troupe::Put(MakeBytes(1 << 20, 8))});
      back = (*troupe::Get(outer))[0];
    }
    EXPECT_EQ(ChecksumOf(*troupe::Get(back)), expected);
    EXPECT_GE(StoreBytesUsedEverywhere(cluster), 1 << 20);
  }
  int64_t used = -1;
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsedEverywhere(cluster)) == 0; },
                        absl::Seconds(10), "the object to be freed once nobody holds it"))
      << used << " bytes still used";
  EXPECT_TRUE(WaitUntil([] { return troupe::internal::GetRuntimeStats().tracked_references == 0; },
                        absl::Seconds(5), "the driver to track no reference"));
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  if (const char* how = std::getenv("TROUPE_TEST_OWNER_DRIVER")) return RunOwnerDriver(how);
  if (std::getenv("TROUPE_TEST_UNREACHABLE_DRIVER") != nullptr) return RunUnreachableDriver();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
