// Troupe across real "hosts": a cluster over three network namespaces (tests/netns_cluster.h),
// each node with its own address on 10.99.0.0/24, its own temp dir and (in one test) its own
// /dev/shm. Covers joining, tasks and actors placed on every node, objects crossing nodes, a job
// submitted from another node, a collective group spanning nodes, training across hosts (the
// train library and `troupe train launch`), a node dying by SIGKILL or by a partition, and an
// elastic training run that loses a whole node and goes on without it.
//
// The test process stays in the host's namespace, where 10.99.0.0/24 does not exist; drivers run
// on a node: this binary started there with MULTIHOST_SCENARIO=<name>, printing key=value lines
// the test checks. It is also the worker program the raylets start. Skips without root.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "examples/fashion_mnist/fashion_mnist.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/netns_cluster.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/train.h"
#include "troupe/train_data.h"
#include "troupe/train_torch.h"

namespace {

namespace coll = troupe::collective;
namespace train = troupe::train;
using troupe::testing::CommandResult;
using troupe::testing::NetnsCluster;
using troupe::testing::WaitUntil;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// ---------------------------------------------------------------------------------------------
// Remote functions and actors (run in workers on the nodes).

// "<node id> <node ip>" of the worker running this.
std::string Where() { return Env("TROUPE_NODE_ID") + " " + Env("TROUPE_NODE_IP"); }

class Locator {
 public:
  static Locator* Create() { return new Locator(); }
  std::string Where() { return ::Where(); }
};

// `size` bytes of a pattern fixed by `seed`, and a checksum (FNV-1a) of such bytes.
std::vector<uint8_t> MakeBytes(int64_t size, int seed) {
  std::vector<uint8_t> bytes(size);
  uint32_t x = 2654435761u * (seed + 1);
  for (auto& b : bytes) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  return bytes;
}
uint64_t Checksum(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}
// The checksum as a string (no 64-bit unsigned loss anywhere on the way).
std::string ChecksumText(std::vector<uint8_t> bytes) { return std::to_string(Checksum(bytes)); }

// On node `doomed`: marks its start in `marker_dir` (started_<tag>_<pid>) and finishes only
// once the test creates `marker_dir`/release (the node is killed or cut off meanwhile).
// Elsewhere: returns where it ran at once.
std::string LingerOn(std::string doomed, std::string marker_dir, std::string tag) {
  if (Env("TROUPE_NODE_ID") == doomed) {
    std::ofstream(absl::StrCat(marker_dir, "/started_", tag, "_", getpid())) << Where();
    while (!std::filesystem::exists(marker_dir + "/release")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return Where();
}

// One member of a collective group: all-reduces (rank + 1) * (i % 7) over `count` floats and
// returns the largest error against the expected sum, and where it ran.
class Reducer {
 public:
  static Reducer* Create() { return new Reducer(); }
  std::vector<std::string> AllReduce(int64_t count, int world_size, std::string group) {
    const int rank = coll::GetRank(group);
    std::vector<float> data(count);
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>((rank + 1) * (i % 7));
    coll::AllReduce(data, coll::ReduceOp::kSum, group);
    const float ranks_sum = world_size * (world_size + 1) / 2.0f;
    double error = 0;
    for (int64_t i = 0; i < count; ++i)
      error = std::max<double>(error, std::abs(data[i] - ranks_sum * (i % 7)));
    return {std::to_string(error), ::Where()};
  }
};

TROUPE_REMOTE(Where, Locator::Create, &Locator::Where, MakeBytes, ChecksumText, LingerOn,
              Reducer::Create, &Reducer::AllReduce);

// A few ResNet18 steps on FashionMNIST per worker, reporting whether the ranks held identical
// parameters after every step and the sum of the last octets of the workers' node addresses.
void ResNetLoop(const train::LoopConfig& config) {
  const auto& ctx = train::GetContext();
  const int steps = std::stoi(config.at("steps"));
  torch::manual_seed(ctx.world_rank);  // different on purpose: PrepareModel aligns them
  auto data = fashion_mnist::Load(fashion_mnist::kDefaultDataDir, "train");
  auto model = fashion_mnist::MakeResNet18();
  auto ddp = train::torch::PrepareModel(model);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  train::DistributedSampler sampler(16 * steps * ctx.world_size, ctx.world_rank, ctx.world_size,
                                    true, 5);
  double mismatches = 0;
  for (const auto& batch : train::Batches(sampler.Indices(0), 16)) {
    torch::Tensor index = torch::tensor(batch, torch::kInt64);
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        fashion_mnist::Forward(*model, data.images.index_select(0, index)),
        data.labels.index_select(0, index));
    optimizer.zero_grad();
    loss.backward();
    ddp->SynchronizeGradients();
    optimizer.step();
    double mine = 0;
    for (const auto& p : model->parameters())
      mine += p.detach().to(torch::kFloat64).sum().item<double>();
    std::vector<double> all(ctx.world_size);
    coll::AllGather(&mine, all.data(), 1, coll::DataType::kFloat64, ctx.group);
    for (double other : all) mismatches += other != mine;
  }
  const std::string ip = Env("TROUPE_NODE_IP");
  double octet = 0;
  absl::SimpleAtod(ip.substr(ip.rfind('.') + 1), &octet);
  auto sums = train::torch::SumAcrossWorkers({mismatches, octet});
  train::Report({{"mismatched_steps", sums[0]},
                 {"node_octet_sum", sums[1]},
                 {"world_size", static_cast<double>(ctx.world_size)}});
}
TROUPE_TRAIN_LOOP(ResNetLoop);

// ---------------------------------------------------------------------------------------------
// Driver scenarios: this binary on a node with MULTIHOST_SCENARIO set (and TROUPE_ADDRESS,
// TROUPE_TOKEN, NODE_IDS = the node ids in order, comma-separated). Each prints key=value lines.

std::vector<std::string> NodeIds() { return absl::StrSplit(Env("NODE_IDS"), ','); }

troupe::NodeAffinity On(const std::string& node, bool soft = false) { return {node, soft}; }

void PlacementScenario() {
  const auto nodes = NodeIds();
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto task = troupe::Task(Where).SetSchedulingStrategy(On(nodes[i])).Remote();
    auto actor = troupe::Actor(Locator::Create).SetSchedulingStrategy(On(nodes[i])).Remote();
    std::cout << "task" << i + 1 << "=" << *troupe::Get(task) << "\n";
    std::cout << "actor" << i + 1 << "=" << *troupe::Get(actor.Task(&Locator::Where).Remote())
              << "\n";
  }
}

// Bytes made on node 2 are checksummed on node 3 and read by the driver on node 1; bytes the
// driver puts are checksummed on node 3.
void ObjectsScenario() {
  const auto nodes = NodeIds();
  for (int64_t size : {int64_t{1} << 10, int64_t{64} << 20}) {
    const std::string expected = std::to_string(Checksum(MakeBytes(size, 7)));
    auto made = troupe::Task(MakeBytes).SetSchedulingStrategy(On(nodes[1])).Remote(size, 7);
    auto moved = troupe::Task(ChecksumText).SetSchedulingStrategy(On(nodes[2])).Remote(made);
    auto put = troupe::Put(MakeBytes(size, 7));
    auto put_moved = troupe::Task(ChecksumText).SetSchedulingStrategy(On(nodes[2])).Remote(put);
    std::cout << "expected_" << size << "=" << expected << "\n";
    std::cout << "node2_to_node3_" << size << "=" << *troupe::Get(moved) << "\n";
    std::cout << "node2_to_driver_" << size << "=" << Checksum(*troupe::Get(made)) << "\n";
    std::cout << "driver_to_node3_" << size << "=" << *troupe::Get(put_moved) << "\n";
  }
}

void CollectiveScenario() {
  const auto nodes = NodeIds();
  std::vector<troupe::ActorHandle<Reducer>> members;
  std::vector<int> ranks;
  for (size_t i = 0; i < nodes.size(); ++i) {
    members.push_back(troupe::Actor(Reducer::Create).SetSchedulingStrategy(On(nodes[i])).Remote());
    ranks.push_back(static_cast<int>(i));
  }
  coll::GroupOptions options;
  options.rendezvous_timeout = std::chrono::seconds(120);  // workers start slowly on a busy machine
  options.timeout = std::chrono::seconds(120);
  coll::CreateGroup(members, ranks, coll::Backend::kCpu, "spanning", options);
  std::vector<troupe::ObjectRef<std::vector<std::string>>> results;
  for (auto& member : members) {
    results.push_back(member.Task(&Reducer::AllReduce)
                          .Remote(int64_t{1} << 20, static_cast<int>(members.size()), "spanning"));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    auto result = *troupe::Get(results[i]);
    std::cout << "member" << i + 1 << "_error=" << result[0] << "\n";
    std::cout << "member" << i + 1 << "_at=" << result[1] << "\n";
  }
}

void WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// What Get returns for `ref` within `timeout`: the value, "error <message>" or
// "timeout <message>".
std::string Outcome(const troupe::ObjectRef<std::string>& ref, std::chrono::milliseconds timeout) {
  try {
    return *troupe::Get(ref, std::max(timeout, std::chrono::milliseconds(1)));
  } catch (const troupe::GetTimeoutError& e) {
    return absl::StrCat("timeout ", e.what());
  } catch (const troupe::TroupeError& e) {
    return absl::StrCat("error ", e.what());
  }
}

// A task without retries pinned to node 3, then three that prefer node 3 (soft affinity); on
// node 3 they block (see LingerOn) and the test kills or cuts off node 3 once all four started
// there. The retried ones must end on another node; the other must fail with an error (not
// hang). Then, once the test says node 3's processes are gone (file $FENCE_CHECK), the failed
// task is asked again: a late result from the dead node must not have replaced its error.
void FailoverScenario() {
  const auto nodes = NodeIds();
  const std::string marker_dir = Env("MARKER_DIR");
  auto once = troupe::Task(LingerOn)
                  .SetSchedulingStrategy(On(nodes[2]))
                  .SetMaxRetries(0)
                  .Remote(nodes[2], marker_dir, "once");
  std::vector<troupe::ObjectRef<std::string>> retried;
  for (int i = 0; i < 3; ++i) {
    retried.push_back(troupe::Task(LingerOn)
                          .SetSchedulingStrategy(On(nodes[2], /*soft=*/true))
                          .SetMaxRetries(5)
                          .Remote(nodes[2], marker_dir, "retried"));
  }
  std::cout << "submitted" << std::endl;
  // The deadline starts once the test struck node 3 (workers may be slow to start on a busy
  // machine); one deadline for all, so a driver that never hears of the death still reports.
  WaitForFile(marker_dir + "/struck", std::chrono::minutes(4));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };
  for (size_t i = 0; i < retried.size(); ++i) {
    const std::string outcome = Outcome(retried[i], left());
    std::cout << "retried" << i + 1 << "=" << outcome << std::endl;
  }
  const std::string outcome = Outcome(once, left());
  std::cout << "once=" << outcome << std::endl;
  std::ofstream(marker_dir + "/reported").close();
  const std::string fence_check = Env("FENCE_CHECK");
  if (fence_check.empty()) return;
  WaitForFile(fence_check, std::chrono::minutes(1));
  const std::string again = Outcome(once, std::chrono::milliseconds(2000));
  std::cout << "once_again=" << again << std::endl;
}

void TrainScenario() {
  train::ScalingConfig scaling;
  scaling.num_workers = static_cast<int>(NodeIds().size());
  scaling.placement_strategy = "STRICT_SPREAD";  // one worker per node
  train::RunConfig run;
  run.name = "resnet";
  run.storage_path = Env("STORAGE");
  train::Result result =
      train::DataParallelTrainer(ResNetLoop, {{"steps", "3"}}, scaling, run).Fit();
  std::cout << "error=" << result.error << "\n";
  for (const auto& [key, value] : result.metrics) std::cout << key << "=" << value << "\n";
}

int RunScenario(const std::string& name) {
  const std::map<std::string, void (*)()> scenarios = {{"placement", PlacementScenario},
                                                       {"objects", ObjectsScenario},
                                                       {"collective", CollectiveScenario},
                                                       {"failover", FailoverScenario},
                                                       {"train", TrainScenario}};
  auto it = scenarios.find(name);
  if (it == scenarios.end()) {
    std::cerr << "no scenario " << name << "\n";
    return 2;
  }
  try {
    troupe::Init();  // TROUPE_ADDRESS, TROUPE_TOKEN
    it->second();
    std::cout.flush();
    troupe::Shutdown();
  } catch (const std::exception& e) {
    std::cout << "exception=" << e.what() << std::endl;
    return 1;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The tests.

std::string SelfPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "";
}

std::string Runfile(const std::string& path) {
  return absl::StrCat(Env("TEST_SRCDIR"), "/", Env("TEST_WORKSPACE"), "/", path);
}

std::string NewTempDir(const std::string& name) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct DriverRun {
  CommandResult command;
  std::map<std::string, std::string> values;  // its key=value lines
};

// Runs scenario `name` as a driver on node `node`.
DriverRun RunDriver(const NetnsCluster& cluster, int node, const std::string& name,
                    std::vector<std::string> env = {}, int timeout_s = 300) {
  std::string ids;
  for (int i = 1; i <= cluster.num_nodes(); ++i) {
    absl::StrAppend(&ids, i > 1 ? "," : "", cluster.NodeId(i));
  }
  env.insert(env.end(), {"MULTIHOST_SCENARIO=" + name, "TROUPE_ADDRESS=" + cluster.GcsAddress(),
                         "TROUPE_TOKEN=" + cluster.token(), "NODE_IDS=" + ids});
  DriverRun run{cluster.RunOn(node, {SelfPath()}, env, timeout_s), {}};
  for (absl::string_view line : absl::StrSplit(run.command.out, '\n')) {
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos && line.find(' ') > eq) {
      run.values[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return run;
}

// "<node id> <ip>" of node i, as Where() prints it.
std::string WhereIs(const NetnsCluster& cluster, int i) {
  return cluster.NodeId(i) + " " + cluster.NodeIp(i);
}

// One three-node cluster (shared /dev/shm) for the tests that leave it as they found it.
class MultiHostTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = new std::string(NetnsCluster::Check());
    if (!skip_reason_->empty()) return;
    auto started = NetnsCluster::Start({});
    if (started.ok()) {
      cluster_ = started->release();
    } else {
      start_error_ = new std::string(started.status().ToString());
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_->empty()) GTEST_SKIP() << *skip_reason_;
    ASSERT_NE(cluster_, nullptr) << *start_error_;
  }
  NetnsCluster& cluster() { return *cluster_; }

  static std::string* skip_reason_;
  static std::string* start_error_;
  static NetnsCluster* cluster_;
};
std::string* MultiHostTest::skip_reason_ = nullptr;
std::string* MultiHostTest::start_error_ = nullptr;
NetnsCluster* MultiHostTest::cluster_ = nullptr;

TEST_F(MultiHostTest, ThreeNodesJoinWithTheirOwnAddresses) {
  nlohmann::json status = cluster().Status();
  ASSERT_FALSE(status.is_null());
  for (int i = 1; i <= 3; ++i) {
    nlohmann::json node = troupe::testing::FindNode(status, cluster().NodeId(i));
    ASSERT_FALSE(node.is_null()) << "node " << i << " missing: " << status.dump(2);
    EXPECT_EQ(node["state"], "ALIVE");
    EXPECT_EQ(node["node_ip"], cluster().NodeIp(i));
  }
  // Asked from another node too.
  CommandResult from3 = cluster().TroupeOn(
      3, {"status", "--address=" + cluster().GcsAddress(), "--token=" + cluster().token()});
  EXPECT_EQ(from3.exit_code, 0) << from3.err;
  EXPECT_TRUE(absl::StrContains(from3.out, cluster().NodeId(3).substr(0, 8))) << from3.out;
}

TEST_F(MultiHostTest, TasksAndActorsRunOnEveryNode) {
  DriverRun run = RunDriver(cluster(), 1, "placement");
  ASSERT_EQ(run.command.exit_code, 0) << run.command.out << run.command.err;
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(run.values[absl::StrCat("task", i)], WhereIs(cluster(), i)) << run.command.out;
    EXPECT_EQ(run.values[absl::StrCat("actor", i)], WhereIs(cluster(), i)) << run.command.out;
  }
}

TEST_F(MultiHostTest, SmallAndLargeObjectsMoveBetweenNodes) {
  DriverRun run = RunDriver(cluster(), 1, "objects");
  ASSERT_EQ(run.command.exit_code, 0) << run.command.out << run.command.err;
  for (const char* size : {"1024", "67108864"}) {
    const std::string expected = run.values[absl::StrCat("expected_", size)];
    ASSERT_FALSE(expected.empty()) << run.command.out;
    EXPECT_EQ(run.values[absl::StrCat("node2_to_node3_", size)], expected) << size;
    EXPECT_EQ(run.values[absl::StrCat("node2_to_driver_", size)], expected) << size;
    EXPECT_EQ(run.values[absl::StrCat("driver_to_node3_", size)], expected) << size;
  }
}

TEST_F(MultiHostTest, JobSubmittedFromAnotherNode) {
  const std::string dir = NewTempDir("job_dir");
  std::ofstream(dir + "/message.txt") << "hello across hosts\n";
  CommandResult r =
      cluster().TroupeOn(3, {"job", "submit", "--address=" + cluster().HttpAddress(),
                             "--token=" + cluster().token(), "--working-dir=" + dir,
                             "--submission-id=from-node-3", "--", Runfile("tests/job_program")});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "task reads: hello across hosts")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "sum of squares: 30")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "Job 'from-node-3' SUCCEEDED")) << r.err;
}

void ExpectCollectiveSpansNodes(const NetnsCluster& cluster) {
  DriverRun run = RunDriver(cluster, 1, "collective");
  ASSERT_EQ(run.command.exit_code, 0) << run.command.out << run.command.err;
  for (int i = 1; i <= cluster.num_nodes(); ++i) {
    EXPECT_EQ(run.values[absl::StrCat("member", i, "_error")], "0.000000") << run.command.out;
    EXPECT_EQ(run.values[absl::StrCat("member", i, "_at")], WhereIs(cluster, i));
  }
}

TEST_F(MultiHostTest, CollectiveGroupSpansNodes) { ExpectCollectiveSpansNodes(cluster()); }

TEST_F(MultiHostTest, DataParallelTrainerWithOneWorkerPerNode) {
  DriverRun run = RunDriver(cluster(), 1, "train", {"STORAGE=" + NewTempDir("train")});
  ASSERT_EQ(run.command.exit_code, 0) << run.command.out << run.command.err;
  EXPECT_EQ(run.values["error"], "") << run.command.out;
  EXPECT_EQ(run.values["world_size"], "3") << run.command.out;
  EXPECT_EQ(run.values["mismatched_steps"], "0") << "ranks diverged: " << run.command.out;
  EXPECT_EQ(run.values["node_octet_sum"], "6") << "not one worker per node: " << run.command.out;
}

// Each rank prints its rank, MASTER_ADDR and its own address toward the master.
constexpr char kDdpScript[] = R"(
import os, socket
import torch, torch.distributed as dist
master = os.environ["MASTER_ADDR"]
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect((master, 9))
mine = probe.getsockname()[0]
dist.init_process_group("gloo")
torch.manual_seed(int(os.environ["RANK"]))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
model(torch.randn(16, 8)).pow(2).sum().backward()
torch.optim.SGD(model.parameters(), lr=0.1).step()
w = model.module.weight.detach().clone()
dist.all_reduce(w)
same = torch.allclose(w / dist.get_world_size(), model.module.weight)
print("rank=%s master=%s mine=%s node_rank=%s same=%s" % (
    os.environ["RANK"], master, mine, os.environ["NODE_RANK"], same), flush=True)
)";

TEST_F(MultiHostTest, TrainLaunchRunsDdpRanksOnDifferentNodes) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string script = NewTempDir("ddp") + "/ddp_step.py";
  std::ofstream(script) << kDdpScript;
  // Two CPUs per rank on two-CPU nodes: the ranks land on two different nodes.
  CommandResult r = cluster().TroupeOn(
      1, {"train", "launch", "--address=" + cluster().GcsAddress(), "--token=" + cluster().token(),
          "--num-workers=2", "--cpus-per-worker=2", "--", "/usr/bin/python3", script});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, std::string> line_of_rank;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    for (const char* rank : {"0", "1"}) {
      if (absl::StrContains(line, absl::StrCat("[rank ", rank, "] rank=", rank))) {
        line_of_rank[rank] = std::string(line);
      }
    }
  }
  ASSERT_EQ(line_of_rank.size(), 2u) << r.out;
  // MASTER_ADDR is rank 0's node address (routable from rank 1's node), not loopback.
  std::string master, ip0, ip1;
  for (absl::string_view field : absl::StrSplit(line_of_rank["0"], ' ')) {
    if (absl::ConsumePrefix(&field, "master=")) master = std::string(field);
    if (absl::ConsumePrefix(&field, "mine=")) ip0 = std::string(field);
  }
  for (absl::string_view field : absl::StrSplit(line_of_rank["1"], ' ')) {
    if (absl::ConsumePrefix(&field, "mine=")) ip1 = std::string(field);
  }
  EXPECT_EQ(master, ip0) << r.out;
  EXPECT_TRUE(absl::StartsWith(ip0, "10.99.0.")) << r.out;
  EXPECT_TRUE(absl::StartsWith(ip1, "10.99.0.")) << r.out;
  EXPECT_NE(ip0, ip1) << "both ranks on one node: " << r.out;
  EXPECT_TRUE(absl::StrContains(line_of_rank["0"], "node_rank=0 same=True")) << r.out;
  EXPECT_TRUE(absl::StrContains(line_of_rank["1"], "node_rank=1 same=True")) << r.out;
}

// Tests that need a cluster of their own (a private /dev/shm, or a node that dies).
class MultiHostOwnClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NetnsCluster::Check();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

// Nodes sharing the kernel but not /dev/shm (containers, pods): the group must not take the
// shared-memory path between them.
TEST_F(MultiHostOwnClusterTest, CollectiveGroupSpansNodesWithPrivateShm) {
  NetnsCluster::Options options;
  options.private_shm = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NetnsCluster> cluster, NetnsCluster::Start(options));
  ExpectCollectiveSpansNodes(*cluster);
}

// Runs the failover driver on node 1, strikes node 3 with `strike` once a task runs there, and
// checks that node 3 was declared dead, the retried tasks finished on nodes 1 and 2 and the one
// without retries failed. Then `after` runs (the link may come back) and, once node 3 has no
// process left, the driver checks the failed task's error still stands (fencing).
void ExpectFailoverFromNode3(NetnsCluster& cluster, const std::function<void()>& strike,
                             const std::function<void()>& after) {
  const std::string markers = NewTempDir("markers");
  const std::string fence_check = markers + "/fence_check";
  std::optional<DriverRun> run;
  std::thread driver([&] {
    run = RunDriver(cluster, 1, "failover", {"MARKER_DIR=" + markers, "FENCE_CHECK=" + fence_check},
                    400);
  });
  // All four tasks run on node 3 (four CPUs) when it is struck.
  const bool running = WaitUntil(
      [&] {
        return std::distance(std::filesystem::directory_iterator(markers),
                             std::filesystem::directory_iterator()) == 4;
      },
      absl::Seconds(180), "the four tasks to start on node 3");
  if (running) strike();
  std::ofstream(markers + "/struck").close();
  const bool dead = WaitUntil([&] { return cluster.NodeState(3) == "DEAD"; }, absl::Seconds(30),
                              "node 3 to be declared dead");
  // The driver reports its first results within its deadline; then node 3 may come back.
  (void)WaitUntil([&] { return std::filesystem::exists(markers + "/reported"); }, absl::Seconds(50),
                  "the driver's first results");
  if (after) after();
  std::ofstream(markers + "/release").close();  // node 3's blocked tasks may finish now
  EXPECT_TRUE(WaitUntil([&] { return cluster.ProcessesOn(3).empty(); }, absl::Seconds(30),
                        "every process on node 3 to end"));
  std::ofstream(fence_check).close();
  driver.join();
  ASSERT_TRUE(running) << run->command.out << run->command.err;
  EXPECT_TRUE(dead);
  EXPECT_EQ(run->command.exit_code, 0) << run->command.out << run->command.err;
  for (int i = 1; i <= 3; ++i) {
    const std::string where = run->values[absl::StrCat("retried", i)];
    EXPECT_TRUE(where == WhereIs(cluster, 1) || where == WhereIs(cluster, 2))
        << "task " << i << " did not fail over to node 1 or 2: " << where;
  }
  EXPECT_TRUE(absl::StartsWith(run->values["once"], "error "))
      << "the task without retries on the dead node: " << run->values["once"];
  EXPECT_EQ(run->values["once_again"], run->values["once"])
      << "a late result from the dead node was accepted";
}

// Four CPUs per node: the four tasks of the failover scenario all run on node 3 at once.
NetnsCluster::Options FourCpusPerNode() {
  NetnsCluster::Options options;
  options.node_flags = {"--num-cpus=4"};
  return options;
}

TEST_F(MultiHostOwnClusterTest, KilledNodeIsDeclaredDeadAndItsTasksRunElsewhere) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NetnsCluster> cluster,
                       NetnsCluster::Start(FourCpusPerNode()));
  ExpectFailoverFromNode3(
      *cluster, [&] { EXPECT_OK(cluster->KillNode(3)); }, nullptr);
}

// Node 3's link goes down until it is declared dead, then comes back: node 3 learns it was
// declared dead and leaves (its raylet exits, its workers with it) instead of rejoining under its
// old identity, and what its tasks return late is refused.
TEST_F(MultiHostOwnClusterTest, PartitionedNodeIsDeclaredDeadAndDoesNotRejoin) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NetnsCluster> cluster,
                       NetnsCluster::Start(FourCpusPerNode()));
  ExpectFailoverFromNode3(
      *cluster, [&] { EXPECT_OK(cluster->SetLink(3, false)); },
      [&] { EXPECT_OK(cluster->SetLink(3, true)); });
  EXPECT_EQ(cluster->NodeState(3), "DEAD");
}

// The "step" lines of an events file (examples/fashion_mnist/fashion_mnist.h): step, world, gen.
struct StepLine {
  int step = 0;
  int world = 0;
  std::string gen;
};
std::vector<StepLine> StepLines(const std::string& events_file) {
  std::vector<StepLine> steps;
  std::ifstream in(events_file);
  for (std::string line; std::getline(in, line);) {
    if (!absl::StartsWith(line, "step ")) continue;
    StepLine step;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      if (absl::ConsumePrefix(&field, "step=")) (void)absl::SimpleAtoi(field, &step.step);
      if (absl::ConsumePrefix(&field, "world=")) (void)absl::SimpleAtoi(field, &step.world);
      if (absl::ConsumePrefix(&field, "gen=")) step.gen = std::string(field);
    }
    steps.push_back(step);
  }
  return steps;
}

// An elastic run of the ResNet18 example, one worker on each 1-CPU node and down to two, loses
// node 3 whole: its link cut (no reset reaches anyone, as when a machine loses power) and every
// process on it killed. The workers on nodes 1 and 2 go on as the next generation: no restart,
// every step committed once, none lost or redone, and node 3 declared dead.
TEST_F(MultiHostOwnClusterTest, ElasticRunGoesOnWhenAWholeNodeDies) {
  NetnsCluster::Options options;
  options.node_flags = {"--num-cpus=1"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NetnsCluster> cluster, NetnsCluster::Start(options));
  const std::string dir = NewTempDir("elastic");
  const std::string events = dir + "/events.txt";
  std::optional<CommandResult> result;
  std::thread driver([&] {
    result = cluster->RunOn(
        1,
        {Runfile("examples/resnet18_fashion_mnist/resnet18_fashion_mnist"), "--num-workers=3",
         "--min-workers=2", "--cpus-per-worker=1", "--epochs=1", "--limit-batches=30",
         "--batch-size=8", "--checkpoint-every=10", "--test-limit=200", "--max-failures=0",
         "--events-file=" + events, "--storage-path=" + dir + "/results", "--name=elastic"},
        {"TROUPE_ADDRESS=" + cluster->GcsAddress(), "TROUPE_TOKEN=" + cluster->token()}, 300);
  });
  const bool stepped = WaitUntil(
      [&] {
        const auto steps = StepLines(events);
        return !steps.empty() && steps.back().step >= 8;
      },
      absl::Seconds(200), "step 8 of the elastic run");
  std::string gen_before;
  if (stepped) {
    gen_before = StepLines(events).back().gen;
    EXPECT_OK(cluster->SetLink(3, false));
    EXPECT_OK(cluster->KillNode(3));
  }
  driver.join();
  ASSERT_TRUE(stepped) << result->out << result->err;
  EXPECT_EQ(result->exit_code, 0) << result->out << result->err;
  EXPECT_TRUE(WaitUntil([&] { return cluster->NodeState(3) == "DEAD"; }, absl::Seconds(30),
                        "node 3 to be declared dead"));
  const auto steps = StepLines(events);
  ASSERT_FALSE(steps.empty());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, static_cast<int>(i) + 1) << "a step lost or redone: " << i;
  }
  EXPECT_EQ(steps.back().step, 30) << result->out;
  EXPECT_EQ(steps.back().world, 2) << "the last steps not on the two survivors";
  EXPECT_NE(steps.back().gen, gen_before) << "no new generation after the node died";
  EXPECT_TRUE(absl::StrContains(result->out, "restarts 0")) << result->out << result->err;
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: a raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  if (const char* scenario = std::getenv("MULTIHOST_SCENARIO")) return RunScenario(scenario);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
