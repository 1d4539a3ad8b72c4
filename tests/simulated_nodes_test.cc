// Simulated nodes against a real head: `troupe status` lists them, and SIGKILLing the simulator
// gets every one of them declared dead by the GCS's health checks and published on the NODE
// channel; with --churn the GCS's view of their resources follows their changing reports; a
// lease the head's raylet spills back to one is granted, its pretend worker answers a task, and
// returning the lease frees its resources in the GCS's view. Multi-process: the head through the
// real CLI, the simulator as its own process.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "src/common/ids.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/core_worker_client.h"
#include "src/rpc/raylet_client.h"
#include "tests/test_cluster.h"

extern char** environ;

namespace troupe::testing {
namespace {

constexpr int kNodes = 20;

std::string SimulatorBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir && workspace) {
    return absl::StrCat(srcdir, "/", workspace, "/src/raylet/troupe_simulated_nodes");
  }
  return "bazel-bin/src/raylet/troupe_simulated_nodes";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts the simulator with its stdout in `out_path`; returns its pid.
pid_t StartSimulator(const TestCluster& cluster, const std::string& out_path, int nodes = kNodes,
                     const std::vector<std::string>& flags = {"--resources=sim:1"}) {
  std::vector<std::string> args = {SimulatorBinary(), "--address=" + cluster.gcs_address(),
                                   "--token=" + cluster.token(), absl::StrCat("--nodes=", nodes),
                                   "--report-period-ms=200"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Starts the simulator and waits until it says every node registered (or fails the test).
pid_t StartReadySimulator(const TestCluster& cluster, int nodes,
                          const std::vector<std::string>& flags) {
  const std::string out_path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/simulator.out");
  pid_t simulator = StartSimulator(cluster, out_path, nodes, flags);
  EXPECT_GT(simulator, 0);
  RegisterCleanupCommand({"/bin/kill", "-9", std::to_string(simulator)});
  EXPECT_TRUE(WaitUntil([&] { return ReadFile(out_path).find("\"ready\"") != std::string::npos; },
                        absl::Seconds(30)))
      << "the simulator did not report ready";
  return simulator;
}

// The GCS's view of a node's available amount of `resource` (-1 when the node is not in it).
double ViewedAvailable(TestCluster& cluster, const std::string& node_id,
                       const std::string& resource) {
  auto usage = cluster.gcs().GetAllResourceUsage();
  if (!usage.ok()) return -1;
  for (const auto& entry : *usage) {
    if (entry.node_id() != node_id) continue;
    auto it = entry.available().find(resource);
    return it == entry.available().end() ? 0 : it->second;
  }
  return -1;
}

std::vector<rpc::NodeInfo> SimulatedNodeInfos(TestCluster& cluster) {
  std::vector<rpc::NodeInfo> simulated;
  auto nodes = cluster.gcs().GetAllNodeInfo();
  if (!nodes.ok()) return simulated;
  for (const auto& node : *nodes) {
    if (node.labels().count("troupe.simulated") > 0) simulated.push_back(node);
  }
  return simulated;
}

absl::StatusOr<rpc::RequestWorkerLeaseReply> RequestLease(
    const std::string& raylet_address, const std::string& token,
    const rpc::RequestWorkerLeaseRequest& request) {
  auto raylet = std::make_shared<RayletClient>(raylet_address, token);
  absl::Notification done;
  absl::StatusOr<rpc::RequestWorkerLeaseReply> result;
  raylet->RequestWorkerLeaseAsync(request, [&](absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
    result = std::move(reply);
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(30))) {
    return absl::DeadlineExceededError("no answer to the lease request in 30 s");
  }
  return result;
}

int CountNodes(const nlohmann::json& status, const std::string& state) {
  int n = 0;
  for (const auto& node : status["nodes"]) {
    if (node.value("state", "") == state) ++n;
  }
  return n;
}

TEST(SimulatedNodesTest, StatusListsThemAndKillingTheSimulatorPublishesTheirDeaths) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  const std::string out_path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/simulator.out");
  pid_t simulator = StartSimulator(cluster, out_path);
  ASSERT_GT(simulator, 0);
  RegisterCleanupCommand({"/bin/kill", "-9", std::to_string(simulator)});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(out_path).find("\"ready\"") != std::string::npos; },
                        absl::Seconds(30)))
      << "the simulator did not report ready";

  // `troupe status` sees the head and every simulated node, alive, with their resources.
  nlohmann::json status = cluster.Status();
  EXPECT_EQ(CountNodes(status, "ALIVE"), kNodes + 1) << status.dump();
  auto nodes = cluster.gcs().GetAllNodeInfo();
  ASSERT_OK(nodes.status());
  std::set<std::string> simulated;
  for (const auto& node : *nodes) {
    if (node.labels().count("troupe.simulated") == 0) continue;
    simulated.insert(node.node_id());
    EXPECT_EQ(node.resources_total().at("sim"), 1);
  }
  ASSERT_EQ(simulated.size(), static_cast<size_t>(kNodes));
  // Their reports reach the cluster view.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto usage = cluster.gcs().GetAllResourceUsage();
        return usage.ok() && usage->size() == static_cast<size_t>(kNodes + 1);
      },
      absl::Seconds(10)));

  // Subscribe, then kill the simulator outright: nobody unregisters.
  rpc::PollRequest start;
  start.set_after_seq(-1);
  ASSERT_OK_AND_ASSIGN(rpc::PollReply cursor, cluster.gcs().Poll(start));
  int64_t after = cursor.last_seq();
  ASSERT_EQ(kill(simulator, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(simulator, &wait_status, 0), simulator);

  std::set<std::string> published_dead;
  const absl::Time deadline = absl::Now() + absl::Seconds(45);
  while (published_dead.size() < simulated.size() && absl::Now() < deadline) {
    rpc::PollRequest poll;
    poll.set_after_seq(after);
    poll.add_channels(rpc::NODE_CHANNEL);
    poll.set_timeout_ms(1000);
    auto reply = cluster.gcs().Poll(poll);
    ASSERT_OK(reply.status());
    ASSERT_FALSE(reply->messages_lost());
    after = reply->last_seq();
    for (const auto& message : reply->messages()) {
      if (message.node().state() == rpc::NodeInfo::DEAD) {
        EXPECT_TRUE(simulated.count(message.node().node_id())) << "the head died";
        EXPECT_NE(message.node().death_reason().find("health check failed"), std::string::npos)
            << message.node().death_reason();
        published_dead.insert(message.node().node_id());
      }
    }
  }
  EXPECT_EQ(published_dead, simulated);
  status = cluster.Status();
  EXPECT_EQ(CountNodes(status, "DEAD"), kNodes) << status.dump();
  EXPECT_EQ(CountNodes(status, "ALIVE"), 1);
}

TEST(SimulatedNodesTest, WithChurnTheGcsViewFollowsChangingResources) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  pid_t simulator = StartReadySimulator(cluster, 3, {"--resources=sim:4", "--churn"});
  std::vector<rpc::NodeInfo> simulated = SimulatedNodeInfos(cluster);
  ASSERT_EQ(simulated.size(), 3u);
  const std::string node = simulated[0].node_id();
  // Each report draws a new background load: the GCS's view of the node takes several values,
  // always within the node's total.
  std::set<double> seen;
  ASSERT_TRUE(WaitUntil(
      [&] {
        double available = ViewedAvailable(cluster, node, "sim");
        EXPECT_LE(available, 4);
        if (available >= 0) seen.insert(available);
        return seen.size() >= 3;
      },
      absl::Seconds(30)))
      << "the GCS saw only " << seen.size() << " distinct amounts";
  EXPECT_GE(*seen.begin(), 0);
  // The nodes leave (SIGTERM: they unregister), so the cluster's resource-leak check at the end
  // sees only the head.
  ASSERT_EQ(kill(simulator, SIGTERM), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(simulator, &wait_status, 0), simulator);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << wait_status;
}

TEST(SimulatedNodesTest, ALeaseSpilledBackToASimulatedNodeIsGrantedServedAndReturned) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  StartReadySimulator(cluster, 2, {"--resources=sim:1", "--task-ms=5"});
  std::vector<rpc::NodeInfo> simulated = SimulatedNodeInfos(cluster);
  ASSERT_EQ(simulated.size(), 2u);
  std::string head_raylet;
  ASSERT_OK_AND_ASSIGN(std::vector<rpc::NodeInfo> nodes, cluster.gcs().GetAllNodeInfo());
  for (const auto& node : nodes) {
    if (node.is_head()) head_raylet = absl::StrCat(node.node_ip(), ":", node.raylet_port());
  }
  ASSERT_FALSE(head_raylet.empty());

  // The head has no "sim": its raylet spills the request back to a simulated node once its
  // cluster view (from the GCS) shows them.
  rpc::RequestWorkerLeaseRequest request;
  const TaskId task_id = TaskId::FromRandom();
  request.mutable_resource_spec()->set_task_id(task_id.Binary());
  request.mutable_resource_spec()->set_function_name("simulated_task");
  (*request.mutable_resource_spec()->mutable_required_resources())["sim"] = 1;
  std::string spilled_to;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto reply = RequestLease(head_raylet, cluster.token(), request);
        if (reply.ok()) spilled_to = reply->retry_at_raylet_address();
        return !spilled_to.empty();
      },
      absl::Seconds(30)))
      << "the head's raylet never spilled the lease back";
  std::string node_id;
  for (const auto& node : simulated) {
    if (absl::StrCat(node.node_ip(), ":", node.raylet_port()) == spilled_to) {
      node_id = node.node_id();
    }
  }
  ASSERT_FALSE(node_id.empty()) << "spilled back to " << spilled_to << ", not a simulated node";

  request.set_grant_or_reject(true);
  ASSERT_OK_AND_ASSIGN(rpc::RequestWorkerLeaseReply grant,
                       RequestLease(spilled_to, cluster.token(), request));
  ASSERT_FALSE(grant.rejected()) << grant.failure_message();
  ASSERT_FALSE(grant.lease_id().empty());
  EXPECT_EQ(grant.node_id(), node_id);
  EXPECT_EQ(grant.worker_address(), spilled_to);
  // The node is full now: a second request is refused with no message (start over elsewhere).
  ASSERT_OK_AND_ASSIGN(rpc::RequestWorkerLeaseReply full,
                       RequestLease(spilled_to, cluster.token(), request));
  EXPECT_TRUE(full.rejected());
  EXPECT_EQ(full.failure_message(), "");
  // Its next report takes the leased unit out of the GCS's view.
  EXPECT_TRUE(
      WaitUntil([&] { return ViewedAvailable(cluster, node_id, "sim") == 0; }, absl::Seconds(10)));

  // The pretend worker answers a pushed task with its one return value.
  auto worker = std::make_shared<CoreWorkerClient>(grant.worker_address(), cluster.token());
  rpc::PushTaskRequest push;
  *push.mutable_task() = request.resource_spec();
  push.set_lease_id(grant.lease_id());
  absl::Notification pushed;
  absl::StatusOr<rpc::PushTaskReply> answer;
  worker->PushTaskAsync(push, [&](absl::StatusOr<rpc::PushTaskReply> reply) {
    answer = std::move(reply);
    pushed.Notify();
  });
  ASSERT_TRUE(pushed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_OK(answer.status());
  ASSERT_EQ(answer->returns_size(), 1);
  EXPECT_EQ(answer->returns(0).object_id(), ObjectId::FromIndex(task_id, 1).Binary());
  EXPECT_EQ(answer->returns(0).node_id(), node_id);
  EXPECT_FALSE(answer->returns(0).is_application_error());

  // Returning the lease frees the unit, in the node and in the GCS's view.
  RayletClient raylet(spilled_to, cluster.token());
  ASSERT_OK(raylet.ReturnWorker(grant.lease_id(), /*disconnect=*/false));
  EXPECT_EQ(raylet.ReturnWorker(grant.lease_id(), /*disconnect=*/false).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(
      WaitUntil([&] { return ViewedAvailable(cluster, node_id, "sim") == 1; }, absl::Seconds(10)));
}

}  // namespace
}  // namespace troupe::testing
