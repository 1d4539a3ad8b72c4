// Multi-process tests of the foundation: a real head and raylets on loopback, driven through the
// `troupe` CLI and the GCS's gRPC API.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/common/ids.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/cluster_token.h"
#include "tests/test_cluster.h"

namespace troupe::testing {
namespace {

TEST(ClusterTest, HeadAndThreeWorkersShowExactResources) {
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start({"--num-cpus=2", "--num-gpus=1", "--memory=1GiB",
                          "--object-store-memory=256MiB", R"(--resources={"head_slot": 1})"}));
  std::vector<std::string> workers;
  for (int i = 1; i <= 3; ++i) {
    ASSERT_OK_AND_ASSIGN(
        std::string worker,
        cluster.AddWorker({absl::StrCat("--num-cpus=", 4 * i), "--num-gpus=0.5", "--memory=2GiB",
                           "--object-store-memory=512MiB",
                           absl::StrCat(R"(--resources={"accel": )", i, "}"),
                           // Node 1's "note" holds a terminal escape.
                           absl::StrCat(R"(--labels={"rack": "r)", i,
                                        i == 1 ? R"(", "note": "\u001b[31mred)" : "", R"("})")}));
    workers.push_back(worker);
  }
  nlohmann::json status = cluster.Status();
  ASSERT_EQ(status["nodes"].size(), 4u) << status.dump(2);
  int heads = 0;
  for (const auto& node : status["nodes"]) {
    EXPECT_EQ(node["state"], "ALIVE");
    heads += node["is_head"].get<bool>();
  }
  EXPECT_EQ(heads, 1);
  for (int i = 1; i <= 3; ++i) {
    nlohmann::json node = FindNode(status, workers[i - 1]);
    ASSERT_FALSE(node.is_null()) << "worker " << i << " missing from " << status.dump(2);
    nlohmann::json expected = {{"CPU", 4.0 * i},
                               {"GPU", 0.5},
                               {"accel", 1.0 * i},
                               {"memory", 2.0 * (1 << 30)},
                               {"object_store_memory", 512.0 * (1 << 20)}};
    EXPECT_EQ(node["resources_total"], expected);
    EXPECT_EQ(node["resources_available"], expected);
    EXPECT_EQ(node["labels"]["rack"], absl::StrCat("r", i));
  }
  nlohmann::json totals = {{"CPU", 26.0},
                           {"GPU", 2.5},
                           {"accel", 6.0},
                           {"head_slot", 1.0},
                           {"memory", 7.0 * (1 << 30)},
                           {"object_store_memory", 1792.0 * (1 << 20)}};
  EXPECT_EQ(status["resources_total"], totals);

  CommandResult text = cluster.Troupe({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "4 alive, 0 dead")) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, " 0/26 CPU")) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, " 0/2.5 GPU")) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, "0B/7.00GiB memory")) << text.out;
  // Printed escaped, never raw: a label cannot drive the user's terminal.
  EXPECT_TRUE(absl::StrContains(text.out, "label note=\\x1b[31mred")) << text.out;
  EXPECT_FALSE(absl::StrContains(text.out, "\x1b")) << text.out;
}

// The fixture's own contract: a cluster or node that does not start is an error the test can
// ASSERT on (with the CLI's words), not a half-started cluster the test carries on with.
TEST(ClusterTest, StartFailuresAreErrorsThatSayWhy) {
  absl::StatusOr<TestCluster> bad_head = TestCluster::Start({"--num-cpus=lots"});
  ASSERT_FALSE(bad_head.ok());
  EXPECT_TRUE(absl::StrContains(bad_head.status().message(), "--num-cpus")) << bad_head.status();
  EXPECT_TRUE(absl::StrContains(bad_head.status().message(), "exited with 2")) << bad_head.status();

  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  absl::StatusOr<std::string> bad_worker = cluster.AddWorker({"--num-gpus=some"});
  ASSERT_FALSE(bad_worker.ok());
  EXPECT_TRUE(absl::StrContains(bad_worker.status().message(), "--num-gpus"))
      << bad_worker.status();
  EXPECT_EQ(cluster.Status()["nodes"].size(), 1u);
}

TEST(ClusterTest, KilledRayletIsDeadWithinFiveSecondsAndSubscribersAreTold) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string worker, cluster.AddWorker({"--num-cpus=1"}));
  nlohmann::json node = FindNode(cluster.Status(), worker);
  ASSERT_FALSE(node.is_null());
  const int raylet_pid = node["raylet_pid"];

  rpc::PollRequest cursor_request;
  cursor_request.set_after_seq(-1);
  auto cursor = cluster.gcs().Poll(cursor_request);
  ASSERT_TRUE(cursor.ok()) << cursor.status();

  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  int64_t after = cursor->last_seq();
  std::string death_reason;
  absl::Status poll_status;
  // Each check is a long poll (up to 500 ms, never past the deadline) for node messages after
  // the last one seen.
  ::testing::AssertionResult dead = WaitUntil(
      [&] {
        rpc::PollRequest poll;
        poll.set_after_seq(after);
        poll.add_channels(rpc::NODE_CHANNEL);
        poll.set_timeout_ms(
            std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 500));
        auto reply = cluster.gcs().Poll(poll);
        if (!reply.ok()) {
          poll_status = reply.status();
          return true;
        }
        after = reply->last_seq();
        for (const auto& message : reply->messages()) {
          if (message.node().node_id() == NodeId::FromHex(worker)->Binary() &&
              message.node().state() == rpc::NodeInfo::DEAD) {
            death_reason = message.node().death_reason();
            return true;
          }
        }
        return false;
      },
      absl::Seconds(5), "a DEAD message for the killed raylet", absl::ZeroDuration());
  ASSERT_TRUE(dead);
  ASSERT_TRUE(poll_status.ok()) << poll_status;
  EXPECT_TRUE(absl::StrContains(death_reason, "health check failed")) << death_reason;
  std::cout << "raylet SIGKILL -> " << dead.message() << "\n";
  nlohmann::json after_status = FindNode(cluster.Status(), worker);
  EXPECT_EQ(after_status["state"], "DEAD");
  // The dead node's resources leave the cluster totals.
  EXPECT_EQ(cluster.Status()["resources_total"]["CPU"], 1.0);
}

TEST(ClusterTest, CallsWithoutTheRightTokenAreRefused) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  const ClusterToken real = *ClusterToken::Parse(cluster.token());

  GcsClient no_token(cluster.gcs_address(), "", absl::Seconds(5));
  auto refused = no_token.GetAllNodeInfo();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "requires a cluster token"))
      << refused.status();

  GcsClient wrong(cluster.gcs_address(), ClusterToken::Generate(real.cluster_id()).ToString());
  EXPECT_EQ(wrong.KVPut("ns", "k", "v", true).status().code(), absl::StatusCode::kUnauthenticated);

  // A node holding another cluster's token cannot join, and is told why.
  const std::string other = ClusterToken::Generate(ClusterId::FromRandom()).ToString();
  CommandResult join = cluster.Troupe(
      {"start", "--address=" + cluster.gcs_address(), "--token=" + other, "--connect-timeout-s=2"});
  EXPECT_EQ(join.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(join.err, "different cluster")) << join.err;
  EXPECT_EQ(cluster.Status()["nodes"].size(), 1u);

  // The token file is private.
  struct stat st;
  ASSERT_EQ(stat((cluster.HeadSessionDir() + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

// A head given --token uses it for the new cluster (deployments hand the same token, e.g. from a
// Kubernetes Secret, to the head and to nodes that start before it), and nodes join with it.
TEST(ClusterTest, HeadStartedWithATokenUsesItAndNodesJoinWithIt) {
  const std::string given = ClusterToken::Generate(ClusterId::FromRandom()).ToString();
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--token=" + given}));
  EXPECT_EQ(cluster.token(), given);
  ASSERT_OK(cluster.AddWorker());
  EXPECT_EQ(cluster.Status()["nodes"].size(), 2u);

  // A malformed token is a usage error, before anything starts.
  CommandResult bad = RunTroupe({"start", "--head", "--token=not-a-token",
                                 "--temp-dir=" + cluster.temp_root() + "/bad",
                                 absl::StrCat("--port=", PickFreePort()), "--http-port=0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(absl::StrContains(bad.err, "--token")) << bad.err;
}

TEST(ClusterTest, StopLeavesNoTroupeProcessBehind) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  ASSERT_OK(cluster.AddWorker());
  ASSERT_OK(cluster.AddWorker());
  EXPECT_EQ(ProcessesMentioning(cluster.temp_root()).size(), 4u);  // GCS + 3 raylets
  CommandResult stop = cluster.Troupe({"stop"});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(absl::StrContains(stop.out, "Stopped 4 Troupe processes")) << stop.out;
  EXPECT_TRUE(ProcessesMentioning(cluster.temp_root()).empty());
  // The raylets unregistered before the GCS went away.
  std::ifstream gcs_log(cluster.HeadSessionDir() + "/logs/gcs.log");
  std::string log((std::istreambuf_iterator<char>(gcs_log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(absl::StrContains(log, "unregistered: raylet received signal 15"), true) << log;

  CommandResult again = cluster.Troupe({"stop"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(again.out, "is running (nodes started with another --temp-dir"))
      << again.out;
  CommandResult status = cluster.Troupe({"status"});
  EXPECT_NE(status.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(status.err, "troupe start --head")) << status.err;
}

// A node whose processes were all SIGKILLed (a crash, a test's teardown) leaves its object store
// in /dev/shm; `troupe stop` finds no process to stop but still removes it.
TEST(ClusterTest, StopAfterSigkillRemovesTheStoreLeftInDevShm) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  const std::string session = cluster.HeadSessionDir();
  const std::string store = "/dev/shm/troupe-" + session.substr(session.rfind('/') + 1);
  ASSERT_TRUE(std::filesystem::exists(store)) << store;
  for (int pid : ProcessesMentioning(cluster.temp_root())) kill(pid, SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return ProcessesMentioning(cluster.temp_root()).empty(); },
                        absl::Seconds(10), "the SIGKILLed processes to be gone"));
  // session_latest still names the dead head: commands say so instead of dialling it.
  CommandResult status = cluster.Troupe({"status"});
  EXPECT_EQ(status.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(status.err, "has no live process")) << status.err;
  EXPECT_TRUE(absl::StrContains(status.err, session)) << status.err;
  CommandResult stop = cluster.Troupe({"stop"});
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_TRUE(absl::StrContains(stop.out, "is running (nodes started with another --temp-dir"))
      << stop.out;
  EXPECT_FALSE(std::filesystem::exists(store)) << store << " was left behind";
}

TEST(ClusterTest, ClearErrors) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  const std::string port = cluster.gcs_address().substr(cluster.gcs_address().rfind(':') + 1);
  CommandResult taken = cluster.Troupe({"start", "--head", "--port=" + port});
  EXPECT_EQ(taken.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(taken.err, "already in use")) << taken.err;

  CommandResult unreachable =
      cluster.Troupe({"start", absl::StrCat("--address=127.0.0.1:", PickFreePort()),
                      "--token=" + cluster.token(), "--connect-timeout-s=1"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unreachable.err, "cannot reach the head")) << unreachable.err;

  CommandResult bad_json = cluster.Troupe(
      {"start", "--address=" + cluster.gcs_address(), "--resources={\"gpu\": lots}"});
  EXPECT_EQ(bad_json.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad_json.err, "--resources")) << bad_json.err;

  CommandResult bad_flag = cluster.Troupe({"status", "--fromat=json"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad_flag.err, "did you mean --format?")) << bad_flag.err;

  CommandResult bad_value = cluster.Troupe({"start", "--head", "--port=http"});
  EXPECT_EQ(bad_value.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad_value.err, "flag --port expects a whole number"))
      << bad_value.err;

  CommandResult no_cluster = RunTroupe({"status", "--temp-dir=" + cluster.temp_root() + "/empty"},
                                       {"TROUPE_ADDRESS=", "TROUPE_TOKEN="});
  EXPECT_EQ(no_cluster.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_cluster.err, "troupe start --head")) << no_cluster.err;

  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"start"}, {"stop"}, {"status"}, {"raylet"},
                                             {"gcs-server"}, {"job"}, {"job", "submit"},
                                             {"job", "status"}, {"job", "logs"}, {"logs"},
                                             {"train"}, {"train", "launch"}}) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    CommandResult help = RunTroupe(args);
    EXPECT_EQ(help.exit_code, 0) << absl::StrJoin(command, " ");
    EXPECT_TRUE(absl::StrContains(help.out, "Usage: troupe")) << absl::StrJoin(command, " ");
    EXPECT_FALSE(absl::StrContains(help.out, "See `troupe")) << absl::StrJoin(command, " ");
  }

  // HTTP commands: a dead port and a port that accepts but never answers end in a clear
  // message naming the address, within the call timeout (10 s), not a hang.
  const int dead_port = PickFreePort();
  CommandResult refused = RunTroupe(
      {"job", "list", absl::StrCat("--address=http://127.0.0.1:", dead_port), "--token=x"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, absl::StrCat("127.0.0.1:", dead_port, ": the "
                                                          "connection was refused")))
      << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "Is the head running")) << refused.err;
  int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len);
  CommandResult mute = RunTroupe(
      {"job", "list", absl::StrCat("--address=http://127.0.0.1:", ntohs(addr.sin_port)),
       "--token=x"});
  close(silent);
  EXPECT_EQ(mute.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(mute.err, "no complete answer in time")) << mute.err;
  EXPECT_EQ(RunTroupe({"launch-rockets"}).exit_code, 2);
}

// troupe::Init() with no address: this machine's running cluster, else an embedded one (one
// line on stderr says which); TROUPE_ADDRESS=local forces the embedded one; Init(argc, argv)
// ends a failed connection with a message and exit 1, not an uncaught exception.
TEST(ClusterTest, DriverAttachesToTheRunningClusterElseStartsAnEmbeddedOne) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  ASSERT_TRUE(srcdir && workspace);
  const std::string quickstart =
      absl::StrCat(srcdir, "/", workspace, "/examples/tasks/quickstart");
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  const std::vector<std::string> here = {"TROUPE_TEMP_DIR=" + cluster.temp_root(),
                                         "TROUPE_ADDRESS=", "TROUPE_TOKEN="};
  auto sessions = [&] {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(cluster.temp_root())) {
      n += absl::StartsWith(entry.path().filename().string(), "session_") ? 1 : 0;
    }
    return n;
  };
  const int sessions_before = sessions();

  CommandResult attached = RunCommand({quickstart}, here);
  EXPECT_EQ(attached.exit_code, 0) << attached.err;
  EXPECT_TRUE(absl::StrContains(attached.out, "1 + 2 = 3")) << attached.out;
  // The worker prints its greeting just before the driver's last Get returns, and the driver
  // shuts down at once: Shutdown must still print it (it drains worker output still on its way).
  EXPECT_TRUE(absl::StrContains(attached.out, "hello from a worker, task 1")) << attached.out;
  EXPECT_TRUE(absl::StrContains(attached.err, "connecting to the cluster running on this machine "
                                              "at " + cluster.gcs_address()))
      << attached.err;

  const std::vector<std::string> local = {"TROUPE_TEMP_DIR=" + cluster.temp_root(),
                                          "TROUPE_ADDRESS=local", "TROUPE_TOKEN="};
  CommandResult forced = RunCommand({quickstart}, local);
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_TRUE(absl::StrContains(forced.out, "hello from a worker, task 1")) << forced.out;
  EXPECT_TRUE(absl::StrContains(forced.err, "started an embedded single-node cluster in this "
                                            "process (TROUPE_ADDRESS=local)"))
      << forced.err;
  EXPECT_EQ(sessions(), sessions_before) << "the embedded cluster left its session directory";
  // Regression: its normal shutdown logged an error ("the GCS declared this node dead ...
  // Killing its workers").
  EXPECT_FALSE(absl::StrContains(forced.err, "declared this node")) << forced.err;
  EXPECT_FALSE(absl::StrContains(forced.err, "killed by signal")) << forced.err;

  // A wrong token and a dead port: a message and exit 1.
  CommandResult wrong_token = RunCommand(
      {quickstart}, {"TROUPE_ADDRESS=" + cluster.gcs_address(),
                     "TROUPE_TOKEN=" + ClusterToken::Generate(ClusterId::FromRandom()).ToString()});
  EXPECT_EQ(wrong_token.exit_code, 1) << wrong_token.err;
  EXPECT_TRUE(absl::StrContains(wrong_token.err, "refused this driver's token")) << wrong_token.err;
  EXPECT_FALSE(absl::StrContains(wrong_token.err, "cannot reach")) << wrong_token.err;
  EXPECT_FALSE(absl::StrContains(wrong_token.err, "terminate called")) << wrong_token.err;
  const std::string dead = absl::StrCat("127.0.0.1:", PickFreePort());
  CommandResult unreachable = RunCommand(
      {quickstart}, {"TROUPE_ADDRESS=" + dead, "TROUPE_TOKEN=" + cluster.token(),
                     "TROUPE_GCS_RECONNECT_TIMEOUT_S=1"});
  EXPECT_EQ(unreachable.exit_code, 1) << unreachable.err;
  EXPECT_TRUE(absl::StrContains(unreachable.err, "cannot reach the cluster at " + dead))
      << unreachable.err;
  EXPECT_FALSE(absl::StrContains(unreachable.err, "terminate called")) << unreachable.err;

  // With the cluster stopped, no address: an embedded cluster, saying why.
  ASSERT_EQ(cluster.Troupe({"stop"}).exit_code, 0);
  CommandResult embedded = RunCommand({quickstart}, here);
  EXPECT_EQ(embedded.exit_code, 0) << embedded.err;
  EXPECT_TRUE(absl::StrContains(embedded.err, "started an embedded single-node cluster in this "
                                              "process (no cluster runs on this machine)"))
      << embedded.err;
  EXPECT_FALSE(absl::StrContains(embedded.err, "declared this node")) << embedded.err;
  EXPECT_EQ(sessions(), sessions_before);
}

TEST(ClusterTest, RayletsReRegisterWhenTheGcsComesBack) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  ASSERT_OK(cluster.AddWorker());
  const int gcs_pid = cluster.GcsPid();
  ASSERT_NE(gcs_pid, 0);
  std::vector<std::string> args = CommandLineOf(gcs_pid);
  ASSERT_GE(args.size(), 2u);
  ASSERT_EQ(args[1], "gcs-server");
  ASSERT_EQ(kill(gcs_pid, SIGKILL), 0);
  // Its port must be free before another GCS can take it (a killed process's cmdline is empty).
  ASSERT_TRUE(WaitUntil([&] { return CommandLineOf(gcs_pid).empty(); }, absl::Seconds(10),
                        "the killed GCS to exit"));

  // Restart the GCS by hand with the same arguments (same port, token and cluster): its table
  // is empty, so the raylets must notice and register again.
  pid_t restarted = fork();
  if (restarted == 0) {
    std::string binary = TroupeBinary();
    std::vector<char*> argv = {binary.data()};
    for (size_t i = 1; i < args.size(); ++i) argv.push_back(args[i].data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto nodes = cluster.gcs().GetAllNodeInfo();
        if (!nodes.ok()) return false;
        size_t alive = 0;
        for (const auto& node : *nodes) alive += node.state() == rpc::NodeInfo::ALIVE;
        return alive == 2;
      },
      absl::Seconds(15), "both raylets to register with the restarted GCS",
      absl::Milliseconds(100)));
  kill(restarted, SIGTERM);
  waitpid(restarted, nullptr, 0);
}

TEST(ClusterTest, RayletExitsWhenTheHeadIsGoneTooLong) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  ASSERT_OK_AND_ASSIGN(std::string worker, cluster.AddWorker({"--gcs-reconnect-timeout-s=2"}));
  const int raylet_pid = FindNode(cluster.Status(), worker)["raylet_pid"];
  ASSERT_EQ(kill(cluster.GcsPid(), SIGKILL), 0);
  EXPECT_TRUE(WaitUntil([&] { return CommandLineOf(raylet_pid).empty(); }, absl::Seconds(15),
                        "the raylet to exit after its head vanished", absl::Milliseconds(100)));
  // It said why, in its log.
  bool explained = false;
  for (const auto& log_path : cluster.RayletLogs()) {
    std::ifstream in(log_path);
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    explained |=
        absl::StrContains(log, "raylet exiting: the head (GCS at " + cluster.gcs_address() +
                                   ") has been unreachable for 2s");
  }
  EXPECT_TRUE(explained);
}

TEST(ClusterTest, KvJobsAndPubsubOverGrpc) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start());
  GcsClient& gcs = cluster.gcs();
  ASSERT_TRUE(*gcs.KVPut("collective", "group/rank0", "10.0.0.1:5000", false));
  ASSERT_TRUE(*gcs.KVPut("collective", "group/rank1", "10.0.0.2:5000", false));
  EXPECT_FALSE(*gcs.KVPut("collective", "group/rank1", "other", false));
  EXPECT_EQ(*gcs.KVGet("collective", "group/rank1"), "10.0.0.2:5000");
  EXPECT_EQ(*gcs.KVGet("other_ns", "group/rank1"), std::nullopt);
  EXPECT_EQ(*gcs.KVKeys("collective", "group/"),
            (std::vector<std::string>{"group/rank0", "group/rank1"}));
  EXPECT_TRUE(*gcs.KVExists("collective", "group/rank0"));
  EXPECT_EQ(*gcs.KVDel("collective", "group/", true), 2);
  EXPECT_FALSE(*gcs.KVExists("collective", "group/rank0"));
  EXPECT_EQ(gcs.KVPut("collective", "", "v", true).status().code(),
            absl::StatusCode::kInvalidArgument);

  rpc::PollRequest cursor_request;
  cursor_request.set_after_seq(-1);
  int64_t cursor = gcs.Poll(cursor_request)->last_seq();
  // A poll waiting in another thread is answered by the job being added. (The delay is the
  // behaviour under test: it lets the poll below be waiting when the job arrives; were it not
  // yet waiting, the poll would still return the job and the test would still pass.)
  std::thread add([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rpc::JobInfo job;
    job.set_entrypoint("./train --epochs 1");
    auto job_id = gcs.AddJob(job);
    ASSERT_TRUE(job_id.ok());
    ASSERT_TRUE(gcs.MarkJobFinished(*job_id).ok());
  });
  rpc::PollRequest poll;
  poll.set_after_seq(cursor);
  poll.add_channels(rpc::JOB_CHANNEL);
  poll.set_timeout_ms(10000);
  auto reply = gcs.Poll(poll);
  add.join();
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_GE(reply->messages_size(), 1);
  EXPECT_EQ(reply->messages(0).job().entrypoint(), "./train --epochs 1");
  auto jobs = gcs.GetAllJobInfo();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(JobId::FromBinary((*jobs)[0].job_id())->ToInt(), 1u);
  EXPECT_EQ((*jobs)[0].state(), rpc::JobInfo::FINISHED);
}

}  // namespace
}  // namespace troupe::testing
