// Simulated nodes against a real head: `troupe status` lists them, and SIGKILLing the simulator
// gets every one of them declared dead by the GCS's health checks and published on the NODE
// channel. Multi-process: the head through the real CLI, the simulator as its own process.
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
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
pid_t StartSimulator(const TestCluster& cluster, const std::string& out_path) {
  std::vector<std::string> args = {SimulatorBinary(), "--address=" + cluster.gcs_address(),
                                   "--token=" + cluster.token(),
                                   absl::StrCat("--nodes=", kNodes), "--resources=sim:1",
                                   "--report-period-ms=200"};
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

}  // namespace
}  // namespace troupe::testing
